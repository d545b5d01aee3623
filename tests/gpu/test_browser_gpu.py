"""The engine in headless Chromium (WebGPU on SwiftShader): bitwise batch invariance and parity on a micro-model
and on SmolLM2.

The page imports app/gpu/engine.js with `navigator.gpu` (the same module the worker uses), computes every position
of a micro-model in one prefill, one token at a time, in verify blocks of k+1 for k = 1..8 and in prefill chunks,
and compares bit patterns in the page; the prefill logits come back for parity with the numpy ReferenceModel.
"""
from __future__ import annotations

import numpy as np
import pytest

from chromium_harness import PRELUDE, ROOT, engine_page, probe

_why = probe()

SCRIPT = PRELUDE + """
const model = await engine.loadModel(desc, readSlice, { seq_len: 64 });
const KS = KS_VALUES, CHUNKS = CHUNK_VALUES;
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
for (const k of KS) {
  const blocks = [2];
  for (let s = 2; s < n; s += k + 1) blocks.push(Math.min(k + 1, n - s));
  await check(`verify${k}`, blocks);
}
for (const c of CHUNKS) {
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
@pytest.mark.parametrize("opts", ["{}", "{subgroups: true}", "{subgroups: true, ksplit: 2}",
                                  "{subgroups: true, fuse: true, fuseSlice: 32}", "{subgroups: true, fuse: 'attn'}",
                                  "{subgroups: true, fuse: true, rowTiles: ['qkv', 'ffn', 'logits'], rowTilesMax: 5, attnSplit: 3, headSum: true}"],
                         ids=["cpu_path", "subgroup_matmul", "subgroup_matmul_ksplit2", "fused", "fused_attn", "fused_row_tiles"])
def test_chromium_swiftshader_batch_invariance(tmp_path, opts):
    """cpu_path: what SwiftShader runs by default; subgroup_matmul: shaders/matmul_sg.wgsl (the GPU default where
    subgroups have one fixed size), forced here on SwiftShader's 4-wide subgroups; _ksplit2: two subgroups per
    weight-row pair, their sums added through workgroup memory; fused / fused_attn: the fused engine (3 / 4 dispatches
    per layer: attention.wgsl O_PROJ, matmul_sg.wgsl PRO, ffn_sg.wgsl) with real 4-wide subgroups; fused_row_tiles: the same with
    verify blocks of <= 5 rows run row-parallel in 1-row tiles, attention + O projection over 3 workgroups per head and
    the head's input summed once (headSum)."""
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    path = tmp_path / "micro-q4_1.gguf"
    write_micro_gguf(path, micro_config(), seed=11, tensor_type="Q4_1")
    d = describe(path)
    toks = [int(t) for t in np.random.default_rng(2).integers(0, d["config"]["vocab_size"], 16)]
    res = run_invariance(path, d, toks, opts, ks=range(1, 9), chunks=(3, 5))
    check_against_reference(res, path, toks)
    if "fuse" in opts:
        # residual.wgsl before the head when its input is summed once: asked for, or the tuned default of the fused
        # engine on real subgroups (app/gpu/options.js)
        extra = 1 if res["adapter"]["kernels"].get("head_sum") else 0
        assert res["adapter"]["kernels"]["fuse"] and res["dispatches"] == (3 if "fuse: true" in opts else 4) * 2 + 2 + extra


def run_invariance(path, d, toks, opts, ks, chunks):
    with engine_page(path, d) as page:
        script = (SCRIPT.replace("TOKENS", str(toks)).replace("KS_VALUES", str(list(ks)))
                  .replace("CHUNK_VALUES", str(list(chunks)))
                  .replace("createEngine(navigator.gpu, {})", f"createEngine(navigator.gpu, {opts})"))
        res = page.evaluate("async () => {" + script + "}")
    if "no_webgpu" in res:
        pytest.skip(f"Chromium offers no WebGPU adapter here: {res['no_webgpu']}")
    print(f"[chromium] adapter {res['adapter']['architecture']} kernels {res['adapter'].get('kernels')}")
    assert res["bad"] == [], f"batch invariance broken in Chromium: {res['bad']}"
    return res


def check_against_reference(res, path, toks, bound=1e-3):
    from exactspec.reference import ReferenceModel
    full = np.asarray(res["full"], dtype=np.float32).reshape(len(toks), -1)
    ref = ReferenceModel.from_file(path, max_len=64).forward(toks, 0)
    assert (ref.argmax(1) == full.argmax(1)).all()
    diff = float(np.abs(ref - full).max())
    print(f"[chromium] max |logit diff| vs reference: {diff:.2e}")
    assert diff <= bound


CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"


@pytest.mark.browser
@pytest.mark.slow
@pytest.mark.skipif(_why is not None, reason=f"Chromium engine test cannot run here: {_why}")
@pytest.mark.skipif(not CHAMPION.exists(), reason="run `python build.py setup` to fetch the champion")
def test_chromium_swiftshader_smollm2_batch_invariance():
    """SmolLM2 in Chromium's WebGPU (SwiftShader, ~1 s per single-row forward): a 6-token chat prefix computed in
    one prefill, one token at a time, in a verify block of k+1 = 5 (after 2), in chunks of 3 — bitwise equal —
    and within 1e-3 of the numpy reference with the same top-1."""
    from exactspec.formats import describe
    d = describe(CHAMPION)
    toks = [1, 4093, 198, 1780, 314, 260]  # "<|im_start|>user\nWhat is the"
    res = run_invariance(CHAMPION, d, toks, "{}", ks=[4], chunks=[3])
    check_against_reference(res, CHAMPION, toks)
