"""The engine in headless Chromium (WebGPU on SwiftShader): bitwise batch invariance and parity on a micro-model.

The page imports app/gpu/engine.js with `navigator.gpu` (the same module the worker uses), computes every position
of a micro-model in one prefill, one token at a time, in verify blocks of k+1 for k = 1..8 and in prefill chunks,
and compares bit patterns in the page; the prefill logits come back for parity with the numpy ReferenceModel.
"""
from __future__ import annotations

import numpy as np
import pytest

from chromium_harness import PRELUDE, engine_page, probe

_why = probe()

SCRIPT = PRELUDE + """
const model = await engine.loadModel(desc, readSlice, { seq_len: 64 });
const toks = TOKENS;
const n = toks.length;
const V = desc.config.vocab_size;
const full = await model.forward(toks, 0);
const bits = (a) => new Uint32Array(a.buffer, a.byteOffset, a.length);
const fullBits = bits(full);
const bad = [];
const check = async (name, blocks) => {
  await model.truncate(0);
  let pos = 0;
  for (const b of blocks) {
    const y = bits(await model.forward(toks.slice(pos, pos + b), pos, b));
    for (let i = 0; i < y.length; i++) if (y[i] !== fullBits[pos * V + i]) { bad.push(`${name} row ${pos + Math.floor(i / V)}`); break; }
    pos += b;
  }
};
await check('single', Array(n).fill(1));
for (let k = 1; k <= 8; k++) {
  const blocks = [2];
  for (let s = 2; s < n; s += k + 1) blocks.push(Math.min(k + 1, n - s));
  await check(`verify${k}`, blocks);
}
for (const c of [3, 5]) {
  const blocks = [];
  for (let s = 0; s < n; s += c) blocks.push(Math.min(c, n - s));
  await check(`chunk${c}`, blocks);
}
const info = engine.adapterInfo;
model.destroy();
engine.destroy();
return { adapter: info, bad, full: Array.from(full), dispatches: model.stats.dispatches };
"""


@pytest.mark.browser
@pytest.mark.skipif(_why is not None, reason=f"Chromium engine test cannot run here: {_why}")
@pytest.mark.parametrize("opts", ["{}", "{subgroups: true}", "{subgroups: true, ksplit: 2}"],
                         ids=["cpu_path", "subgroup_matmul", "subgroup_matmul_ksplit2"])
def test_chromium_swiftshader_batch_invariance(tmp_path, opts):
    """cpu_path: what SwiftShader runs by default; subgroup_matmul: shaders/matmul_sg.wgsl (the GPU default where
    subgroups have one fixed size), forced here on SwiftShader's 4-wide subgroups; _ksplit2: two subgroups per
    weight-row pair, their sums added through workgroup memory."""
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf
    from exactspec.reference import ReferenceModel

    path = tmp_path / "micro-q4_1.gguf"
    write_micro_gguf(path, micro_config(), seed=11, tensor_type="Q4_1")
    d = describe(path)
    toks = [int(t) for t in np.random.default_rng(2).integers(0, d["config"]["vocab_size"], 16)]
    with engine_page(path, d) as page:
        script = SCRIPT.replace("TOKENS", str(toks)).replace("createEngine(navigator.gpu, {})",
                                                              f"createEngine(navigator.gpu, {opts})")
        res = page.evaluate("async () => {" + script + "}")
    if "no_webgpu" in res:
        pytest.skip(f"Chromium offers no WebGPU adapter here: {res['no_webgpu']}")
    print(f"[chromium] adapter {res['adapter']['architecture']} kernels {res['adapter'].get('kernels')}")
    assert res["bad"] == [], f"batch invariance broken in Chromium: {res['bad']}"
    full = np.asarray(res["full"], dtype=np.float32).reshape(len(toks), -1)
    ref = ReferenceModel.from_file(path).forward(toks, 0)
    assert (ref.argmax(1) == full.argmax(1)).all()
    assert float(np.abs(ref - full).max()) <= 1e-3
