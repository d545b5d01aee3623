"""The engine's batched step in headless Chromium (WebGPU on SwiftShader, real 4-wide subgroups for the subgroup and
fused kernels): decodeAhead and specRound equal the same passes one by one BITWISE (rows and the KV caches after),
checked in the page; the picks come back to Python and equal numpy's (greedy: argmax exactly; coupled: wherever the
top two differ by >= 1e-4)."""
from __future__ import annotations

import numpy as np
import pytest

from chromium_harness import PRELUDE, engine_page, probe
from test_batched_engine import check_picks

_why = probe()

SCRIPT = PRELUDE + """
const dfile = await (await fetch('/draft.bin')).arrayBuffer();
const model = await engine.loadModel(desc, readSlice, { seq_len: 64 });
const draft = await engine.loadModel(await (await fetch('/draft.json')).json(), async (o, n) => dfile.slice(o, o + n), { seq_len: 64 });
const V = desc.config.vocab_size;
const prompt = PROMPT, P = prompt.length, N = 7, K = 3, Y = 17;
const bits = (a) => new Uint32Array(a.buffer, a.byteOffset, a.length);
const same = (a, b) => a.length === b.length && bits(a).every((x, i) => x === bits(b)[i]);
const cat = (list) => { const o = new Float32Array(list.reduce((s, a) => s + a.length, 0)); let at = 0; for (const a of list) { o.set(a, at); at += a.length; } return o; };
const bad = [];
const out = {};
for (const [name, pick] of Object.entries(PICKS)) {
  // decodeAhead vs the same passes one by one (fed the GPU's own picks), and the KV cache after
  model.truncate(0);
  await model.forward(prompt, 0, 1);
  const a = await model.decodeAhead(prompt[P - 1], P, N, pick, true);
  const after = await model.forward([Y], P + N, 1);
  model.truncate(P);
  const one = [];
  const fed = [prompt[P - 1], ...Array.from(a.ids).slice(0, N - 1)];
  for (let i = 0; i < N; i++) one.push(await model.forward([fed[i]], P + i, 1));
  if (!same(a.rows, cat(one))) bad.push(`${name}: decodeAhead rows`);
  if (!same(after, await model.forward([Y], P + N, 1))) bad.push(`${name}: KV after decodeAhead`);
  // specRound: the draft holds prompt[:2], takes prompt[2:] and makes K picks; the champion verifies them
  model.truncate(P - 1);
  draft.truncate(0);
  await draft.forward(prompt.slice(0, 2), 0, 1);
  const r = await model.specRound(draft, prompt.slice(2), 2, K, prompt[P - 1], P - 1, pick, true);
  const cAfter = await model.forward([Y], P + K, 1);
  const dAfter = await draft.forward([Y], P + K - 1, 1);
  const props = Array.from(r.proposals);
  model.truncate(P - 1);
  draft.truncate(2);
  const drows = [await draft.forward(prompt.slice(2), 2, 1)];
  for (let i = 0; i < K - 1; i++) drows.push(await draft.forward([props[i]], P + i, 1));
  if (!same(r.rows, await model.forward([prompt[P - 1], ...props], P - 1, K + 1))) bad.push(`${name}: specRound rows`);
  if (!same(cAfter, await model.forward([Y], P + K, 1))) bad.push(`${name}: champion KV after specRound`);
  if (!same(dAfter, await draft.forward([Y], P + K - 1, 1))) bad.push(`${name}: draft KV after specRound`);
  out[name] = { ids: Array.from(a.ids), rows: Array.from(a.rows), props, drows: Array.from(cat(drows)),
    rids: Array.from(r.ids), rrows: Array.from(r.rows) };
}
const info = engine.adapterInfo;
engine.destroy();
return { adapter: info, bad, out };
"""

PICKS = {"greedy": {"temperature": 0, "seed": 0}, "coupled": {"temperature": 0.8, "seed": 2 ** 53 - 1}}


@pytest.mark.browser
@pytest.mark.skipif(_why is not None, reason=f"Chromium engine test cannot run here: {_why}")
@pytest.mark.parametrize("opts", ["{}", "{subgroups: true}", "{subgroups: true, fuse: true}"],
                         ids=["cpu_path", "subgroup_matmul", "fused"])
def test_chromium_batched_step_equals_passes(tmp_path, opts):
    import json

    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    champ, draft = tmp_path / "c.gguf", tmp_path / "d.gguf"
    write_micro_gguf(champ, micro_config(), seed=11, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=11, tensor_type="Q8_0")
    d = describe(champ)
    V = d["config"]["vocab_size"]
    prompt = [int(t) for t in np.random.default_rng(4).integers(0, V, 6)]
    script = (SCRIPT.replace("PROMPT", str(prompt)).replace("PICKS", json.dumps(PICKS))
              .replace("createEngine(navigator.gpu, {})", f"createEngine(navigator.gpu, {opts})"))
    with engine_page(champ, d, {"/draft.bin": draft, "/draft.json": describe(draft)}) as page:
        res = page.evaluate("async () => {" + script + "}")
    if "no_webgpu" in res:
        pytest.skip(f"Chromium offers no WebGPU adapter here: {res['no_webgpu']}")
    print(f"[chromium] kernels {res['adapter'].get('kernels')}")
    assert res["bad"] == [], res["bad"]
    P = len(prompt)
    for name, pick in PICKS.items():
        o = res["out"][name]
        check_picks(o["ids"], np.asarray(o["rows"], np.float32).reshape(-1, V), pick, P + 1)
        check_picks(o["props"], np.asarray(o["drows"], np.float32).reshape(-1, V), pick, P)
        check_picks(o["rids"], np.asarray(o["rrows"], np.float32).reshape(-1, V), pick, P)
