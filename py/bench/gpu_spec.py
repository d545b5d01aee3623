"""Champion tokens/s with and without greedy speculation, both models on the WebGPU engine (Node + Dawn).

    python build.py bench gpu_spec [--backend opengl|vulkan] [--max-new-tokens N] [--ks 1,2,3,4] [--node PATH]
                                   [--engine-opts JSON]   (createEngine options, e.g. '{"fuse": true}')

Defaults: the champion and the shipped draft from static/models, one chat prompt, Dawn's OpenGL backend (llvmpipe
here: a correctness run, not a speed figure; on a GPU host pass --backend vulkan). Runs bench/gpu/spec_bench.mjs
and prints plain tok/s, then per k: tok/s, speedup, tau, passes, and whether the tokens equal plain decoding's.
Every run generates exactly N tokens (no stop at EOS) so that the runs compare like with like.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec.chat import encode_chat  # noqa: E402
from exactspec.formats import describe  # noqa: E402
from exactspec.tokenizer import Tokenizer  # noqa: E402

MODELS = ROOT / "static" / "models"


def run_spec(champion, draft, prompt_ids, n: int, ks, backend: str = "opengl", node: str = "node",
             env: dict | None = None, engine_opts: dict | None = None) -> dict:
    """Run bench/gpu/spec_bench.mjs; returns its JSON result (see that file). engine_opts: extra createEngine
    options for both models (EXACTSPEC_ENGINE_OPTS), e.g. {"fuse": True}."""
    dc, dd = describe(champion), describe(draft)
    seq_len = min(1024, dc["config"]["seq_len"], dd["config"]["seq_len"])
    spec = {"backend": backend, "prompt_ids": list(prompt_ids), "max_new_tokens": n, "ks": list(ks), "seq_len": seq_len,
            "champion": {"model": str(champion), "description": dc}, "draft": {"model": str(draft), "description": dd}}
    if env is None:
        env = {**os.environ, "XDG_RUNTIME_DIR": os.environ.get("XDG_RUNTIME_DIR", "/tmp"), "EGL_PLATFORM": "surfaceless"}
    if engine_opts:
        env = {**env, "EXACTSPEC_ENGINE_OPTS": json.dumps(engine_opts)}
    with tempfile.TemporaryDirectory() as td:
        sp = Path(td) / "spec.json"
        sp.write_text(json.dumps(spec))
        r = subprocess.run([node, str(ROOT / "bench" / "gpu" / "spec_bench.mjs"), str(sp)], cwd=ROOT, env=env,
                           capture_output=True, text=True, timeout=1800)
    if r.returncode != 0:
        raise RuntimeError(f"spec_bench.mjs failed (rc={r.returncode}):\n{r.stdout[-2000:]}\n{r.stderr[-4000:]}")
    return json.loads([ln for ln in r.stdout.splitlines() if ln.startswith("{")][-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--backend", default="opengl")
    ap.add_argument("--champion", default=str(MODELS / "smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--draft", default=str(MODELS / "draft-smollm2-kd.gguf"))
    ap.add_argument("--prompt", default="Hi! What are three fun things to do on a rainy afternoon?")
    ap.add_argument("--max-new-tokens", type=int, default=None, help="default 64 (vulkan) / 8 (opengl)")
    ap.add_argument("--ks", default=None, help="comma list, default 1,2,3,4 (vulkan) / 1,3 (opengl)")
    ap.add_argument("--node", default="node")
    ap.add_argument("--engine-opts", default=None, help='createEngine options as JSON, e.g. \'{"fuse": true}\'')
    a = ap.parse_args()
    try:
        engine_opts = json.loads(a.engine_opts) if a.engine_opts else None
    except json.JSONDecodeError as e:
        ap.error(f"--engine-opts is not JSON: {e}")
    if engine_opts is not None and not isinstance(engine_opts, dict):
        ap.error("--engine-opts must be a JSON object")
    gpu = a.backend != "opengl"
    n = a.max_new_tokens or (64 if gpu else 8)
    ks = [int(x) for x in (a.ks or ("1,2,3,4" if gpu else "1,3")).split(",")]
    tok = Tokenizer.from_gguf(a.champion)
    ids = encode_chat(tok, [{"role": "user", "content": a.prompt}])
    try:
        out = run_spec(a.champion, a.draft, ids, n, ks, a.backend, a.node, engine_opts=engine_opts)
    except RuntimeError as e:
        print(e, file=sys.stderr)
        return 2
    print(f"adapter: {out['adapter'].get('description') or out['adapter'].get('architecture')}; "
          f"kernels {json.dumps(out['adapter'].get('kernels'))}; prompt {len(ids)} "
          f"tokens, {n} new tokens; answer: {tok.decode(out['plain']['tokens'])!r}")
    print(f"plain (no speculation): {out['plain']['tok_s']:.1f} tok/s")
    for k, s in out["spec"].items():
        print(f"k={k}: {s['tok_s']:.1f} tok/s (x{s['speedup']:.2f}), tau {s['tau']:.2f}, target passes "
              f"{s['target_passes']}, draft passes {s['draft_passes']}, identical to plain: {s['identical']}")
    print("JSON " + json.dumps({k: v for k, v in out.items() if k != "adapter"}))
    return 0 if all(s["identical"] for s in out["spec"].values()) else 1


if __name__ == "__main__":
    sys.exit(main())
