"""Benchmark the numpy reference on SmolLM2-135M: greedy decode tokens/s (one token per forward after a short
prompt), prefill tokens/s, and a verify block of k+1 = 5. Prints one JSON object.

    python build.py bench reference        (or: python py/bench/reference.py [--model PATH] [--tokens N] [--kernel K])

For verify ratios k = 1..8, the row-at-a-time reference beside this one, and Pyodide: py/bench/verify_cpu.py.

Runs with OPENBLAS_NUM_THREADS=1 unless set (see below); `OPENBLAS_NUM_THREADS=2 python py/bench/reference.py`
measures two threads.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

# OpenBLAS threads spin-wait: with any other busy process on a 2-core machine the default (2 threads) collapses
# (measured 3.4 tokens/s vs 34 with one thread). Default to one thread unless the caller chose; results are bitwise
# identical for any thread count. Must be set before numpy is imported.
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "py"))

from exactspec.reference import KERNELS, ReferenceModel  # noqa: E402

# "<|im_start|>user\nWhat is the capital of France?<|im_end|>\n<|im_start|>assistant\n"
PROMPT = [1, 4093, 198, 1780, 314, 260, 3575, 282, 4649, 47, 2, 198, 1, 520, 9531, 198]


def main(argv=None) -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=str(ROOT / "static/models/smollm2-135m-instruct-q4_1.gguf"))
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--prefill", type=int, default=128)
    ap.add_argument("--kernel", choices=KERNELS, default="auto")
    args = ap.parse_args(argv)
    t0 = time.perf_counter()
    m = ReferenceModel.from_file(args.model, max_len=1024, kernel=args.kernel)
    load_s = time.perf_counter() - t0

    # greedy decode after a short prompt
    logits = m.forward(PROMPT, 0, n_out=1)
    tok = int(logits[-1].argmax())
    times = []
    for _ in range(args.tokens):
        t = time.perf_counter()
        logits = m.forward([tok], m.length)
        times.append(time.perf_counter() - t)
        tok = int(logits[-1].argmax())
    decode_tps = len(times) / sum(times)
    med = sorted(times)[len(times) // 2]

    # verify block of k+1 = 5 at the current position
    pos = m.length
    t = time.perf_counter()
    m.forward([tok, 1, 2, 3, 4], pos)
    verify_ms = (time.perf_counter() - t) * 1e3
    m.truncate(pos)

    # prefill
    m.truncate(0)
    toks = (PROMPT * (args.prefill // len(PROMPT) + 1))[: args.prefill]
    t = time.perf_counter()
    m.forward(toks, 0, n_out=1)
    prefill_tps = len(toks) / (time.perf_counter() - t)

    print(json.dumps({
        "bench": "reference", "model": os.path.basename(args.model), "kernel": m.kernel, "load_s": round(load_s, 2),
        "decode_tokens_per_s": round(decode_tps, 1), "decode_median_ms": round(med * 1e3, 2),
        "verify_k4_ms": round(verify_ms, 1), "prefill_tokens": len(toks), "prefill_tokens_per_s": round(prefill_tps, 1),
        "openblas_threads": os.environ.get("OPENBLAS_NUM_THREADS", "default"), "cpus": os.cpu_count(),
    }))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
