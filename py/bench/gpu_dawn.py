"""Speed of the WebGPU engine under Node + Dawn (npm `webgpu`): bench/gpu/bench.mjs with SmolLM2-shaped weights.

    python build.py bench gpu_dawn                  (here: Dawn's OpenGL backend on llvmpipe, --quick)
    python py/bench/gpu_dawn.py --backend vulkan    (a GPU host; the H200 recipe is bench/h200/h200_prep.sh + h200_run.sh)

Prints matmul effective bandwidth against copy bandwidth, T_verify(k)/T_single for k = 1..8, tokens/s decoding
alone, dispatches per forward and (where timestamps exist) GPU time per kind of dispatch.
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="opengl")
    ap.add_argument("--full", action="store_true", help="full run (default on opengl: --quick)")
    a, rest = ap.parse_known_args()
    args = ["node", str(ROOT / "tests" / "gpu" / "bench.mjs"), "--backend", a.backend, *rest]
    if a.backend == "opengl" and not a.full:
        args.append("--quick")
    env = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "EGL_PLATFORM": "surfaceless"}
    r = subprocess.run(args, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    for line in r.stdout.splitlines():
        if "artificially reduced" not in line:
            print(line)
    sys.exit(r.returncode)


if __name__ == "__main__":
    main()
