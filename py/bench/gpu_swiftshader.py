"""Speed of the WebGPU engine in headless Chromium on SwiftShader (the CPU adapter CI has), on the champion.

    python build.py bench gpu_swiftshader      (or: python py/bench/gpu_swiftshader.py [--ks 1,4,8] [--iters 3])

Loads static/models/smollm2-135m-instruct-q4_1.gguf into app/gpu/engine.js in a page, prefills 8 tokens, then
times single-token forwards and verify blocks of k+1 (median of --iters, each forward awaited with its readback).
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT / "py"), str(ROOT / "tests" / "gpu")]

from chromium_harness import PRELUDE, engine_page  # noqa: E402

SCRIPT = PRELUDE + """
const t0 = performance.now();
const model = await engine.loadModel(desc, readSlice, { seq_len: 256 });
const loadMs = performance.now() - t0;
const V = desc.config.vocab_size;
const tok = (n) => Array.from({ length: n }, (_, i) => (i * 7919 + 13) % V);
const P = 8;
let t = performance.now();
await model.forward(tok(P), 0, 1);
const prefillMs = performance.now() - t;
const med = (a) => a.sort((x, y) => x - y)[Math.floor(a.length / 2)];
const time = async (n) => {
  const w = [];
  for (let i = 0; i < ITERS; i++) { const s = performance.now(); await model.forward(tok(n), P, n); w.push(performance.now() - s); model.truncate(P); }
  return med(w);
};
await time(1);
const single = await time(1);
const verify = {};
for (const k of KS) verify[k] = await time(k + 1);
return { adapter: engine.adapterInfo, load_ms: loadMs, prefill8_ms: prefillMs, single_ms: single, verify_ms: verify,
         dispatches: model.stats.dispatches };
"""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ks", default="1,4,8")
    ap.add_argument("--iters", type=int, default=3)
    ap.add_argument("--model", default=str(ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"))
    a = ap.parse_args()
    from exactspec.formats import describe

    d = describe(a.model)
    ks = [int(k) for k in a.ks.split(",")]
    with engine_page(Path(a.model), d) as page:
        page.set_default_timeout(0)
        r = page.evaluate("async () => {" + SCRIPT.replace("ITERS", str(a.iters)).replace("KS", json.dumps(ks)) + "}")
    if "no_webgpu" in r:
        raise SystemExit(f"no WebGPU in Chromium: {r['no_webgpu']}")
    ad = r["adapter"]
    print(f"adapter: {ad['vendor']} {ad['architecture']} (fallback={ad['isFallbackAdapter']})")
    print(f"load {r['load_ms']:.0f} ms; prefill 8 tokens {r['prefill8_ms']:.0f} ms; {r['dispatches']} dispatches/forward")
    print(f"T_single {r['single_ms']:.0f} ms = {1000 / r['single_ms']:.2f} tok/s")
    for k, ms in r["verify_ms"].items():
        print(f"T_verify(k={k}) {ms:.0f} ms, / T_single = {ms / r['single_ms']:.2f}")
    print("JSON " + json.dumps(r | {"adapter": ad["architecture"]}))


if __name__ == "__main__":
    main()
