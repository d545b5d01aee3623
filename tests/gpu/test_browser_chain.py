"""The engine's n-gram chain (model.ngramChain, shaders/chain.wgsl) in headless Chromium (WebGPU on SwiftShader, real
4-wide subgroups for the subgroup and fused kernels; chainRounds set, as CPU adapters default to 0): each round's
proposals are the host drafter's lookup on the sequence as it stands, and its picks are BITWISE those of a verify of
the same tokens made one round at a time in the page, as is the KV cache after the chain."""
from __future__ import annotations

import json

import numpy as np
import pytest

from chromium_harness import PRELUDE, engine_page, probe

_why = probe()

SCRIPT = PRELUDE + """
const model = await engine.loadModel(desc, readSlice, { seq_len: 64 });
const seq = SEQ, R = 6, K = 3, Y = 17, G = { temperature: 0, seed: 0 };
const P = seq.length;
model.truncate(0);
await model.forward(seq.slice(0, P - 1), 0, 1);
const c = await model.ngramChain(seq, P - 1, R, K, G, [2, 3]);
const len = model.length;
const after = await model.forward([Y], len, 1);
// the same rounds one at a time: verify [last token, the round's proposals], keep what its picks accept
model.truncate(P - 1);
const grown = [...seq];
const ids = [];
let p0 = 0;
for (let r = 0; r < R; r++) {
  const props = Array.from(c.proposals.slice(p0, p0 + c.counts[r]));
  p0 += c.counts[r];
  const L = grown.length;
  const v = await model.verify([grown[L - 1], ...props], L - 1, G, false);
  let a = props.length;
  for (let i = 0; i < props.length; i++) if (v.ids[i] !== props[i]) { a = i; break; }
  ids.push(...Array.from(v.ids));
  model.truncate(L + a);
  grown.push(...props.slice(0, a), v.ids[a]);
}
const again = await model.forward([Y], len, 1);
const bits = (x) => Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length));
const info = engine.adapterInfo;
engine.destroy();
return { adapter: info, counts: Array.from(c.counts), accepted: Array.from(c.accepted), proposals: Array.from(c.proposals),
  chain_ids: Array.from(c.ids), ids, len, grown, kv_same: JSON.stringify(bits(after)) === JSON.stringify(bits(again)) };
"""


@pytest.mark.browser
@pytest.mark.skipif(_why is not None, reason=f"Chromium engine test cannot run here: {_why}")
@pytest.mark.parametrize("opts", ["{chainRounds: 4}", "{chainRounds: 4, subgroups: true, fuse: true}"],
                         ids=["cpu_path", "fused"])
def test_chromium_chain_equals_rounds_one_by_one(tmp_path, opts):
    from exactspec.drafters.ngram import NgramDrafter
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    champ = tmp_path / "c.gguf"
    write_micro_gguf(champ, micro_config(), seed=11, tensor_type="Q4_1")
    d = describe(champ)
    V = d["config"]["vocab_size"]
    base = [int(t) for t in np.random.default_rng(6).integers(0, V, 4)]
    seq = base * 3 + base[:2]
    script = (SCRIPT.replace("SEQ", json.dumps(seq))
              .replace("createEngine(navigator.gpu, {})", f"createEngine(navigator.gpu, {opts})"))
    with engine_page(champ, d) as page:
        res = page.evaluate("async () => {" + script + "}")
    if "no_webgpu" in res:
        pytest.skip(f"Chromium offers no WebGPU adapter here: {res['no_webgpu']}")
    assert res["chain_ids"] == res["ids"], "the chain's picks differ from verifies one round at a time"
    assert res["kv_same"] and res["len"] == len(res["grown"]) - 1
    grown, p0, i0 = list(seq), 0, 0
    for c, a in zip(res["counts"], res["accepted"]):            # the proposals: the host drafter's lookup
        props, picks = res["proposals"][p0:p0 + c], res["chain_ids"][i0:i0 + c + 1]
        assert props == NgramDrafter(3, 2).lookup(grown, 3)[:max(0, 64 - 1 - len(grown))]
        grown += props[:a] + [picks[a]]
        p0, i0 = p0 + c, i0 + c + 1
    assert grown == res["grown"] and sum(res["accepted"]) > 0


SPEC_SCRIPT = PRELUDE + """
const ddesc = await (await fetch('/draft_desc.json')).json();
const dfile = await (await fetch('/draft.bin')).arrayBuffer();
const model = await engine.loadModel(desc, readSlice, { seq_len: 64 });
const draft = await engine.loadModel(ddesc, async (o, n) => dfile.slice(o, o + n), { seq_len: 64 });
const seq = SEQ, R = 5, K = 2, Y = 17, G = { temperature: 0, seed: 0 };
const P = seq.length;
const start = async () => {
  model.truncate(0);
  draft.truncate(0);
  await model.forward(seq.slice(0, P - 1), 0, 1);
  await draft.forward(seq.slice(0, P - 2), 0, 1);        // the draft is fed the last two tokens
};
await start();
const c = await model.specChain(draft, seq, P - 2, R, K, G, false);
const len = model.length, dlen = draft.length;
const after = await model.forward([Y], len, 1);
// the same rounds one specRound each, the draft kept as py/exactspec/drafters/model.py's update() keeps it
await start();
const grown = [...seq];
const ids = [], proposals = [];
for (let r = 0; r < R; r++) {
  const L = grown.length;
  const D = draft.length;
  const v = await model.specRound(draft, grown.slice(D), D, K, grown[L - 1], L - 1, G, false);
  let a = K;
  for (let i = 0; i < K; i++) if (v.ids[i] !== v.proposals[i]) { a = i; break; }
  ids.push(...Array.from(v.ids));
  proposals.push(...Array.from(v.proposals));
  grown.push(...Array.from(v.proposals.slice(0, a)), v.ids[a]);
  model.truncate(grown.length - 1);
  draft.truncate(Math.min(draft.length, grown.length - 1));
}
const again = await model.forward([Y], len, 1);
const bits = (x) => Array.from(new Uint32Array(x.buffer, x.byteOffset, x.length));
engine.destroy();
return { accepted: Array.from(c.accepted), proposals: Array.from(c.proposals), chain_ids: Array.from(c.ids),
  one_ids: ids, one_proposals: proposals, len, dlen, dlen_one: draft.length, grown,
  kv_same: JSON.stringify(bits(after)) === JSON.stringify(bits(again)) };
"""


@pytest.mark.browser
@pytest.mark.skipif(_why is not None, reason=f"Chromium engine test cannot run here: {_why}")
@pytest.mark.parametrize("opts", ["{chainRounds: 4}", "{chainRounds: 4, subgroups: true, fuse: true}"],
                         ids=["cpu_path", "fused"])
def test_chromium_spec_chain_equals_rounds_one_by_one(tmp_path, opts):
    """champion.specChain (shaders/draft_chain.wgsl) with a draft model: the same proposals and BITWISE the same picks
    and KV cache as the same rounds made one specRound each in the page."""
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    champ, draft = tmp_path / "c.gguf", tmp_path / "d.gguf"
    write_micro_gguf(champ, micro_config(), seed=11, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=11, tensor_type="Q8_0")
    d = describe(champ)
    V = d["config"]["vocab_size"]
    seq = [int(t) for t in np.random.default_rng(6).integers(0, V, 9)]
    script = (SPEC_SCRIPT.replace("SEQ", json.dumps(seq))
              .replace("createEngine(navigator.gpu, {})", f"createEngine(navigator.gpu, {opts})"))
    with engine_page(champ, d, {"/draft.bin": draft, "/draft_desc.json": describe(draft)}) as page:
        res = page.evaluate("async () => {" + script + "}")
    if "no_webgpu" in res:
        pytest.skip(f"Chromium offers no WebGPU adapter here: {res['no_webgpu']}")
    assert res["proposals"] == res["one_proposals"] and res["chain_ids"] == res["one_ids"]
    assert res["kv_same"] and res["len"] == len(res["grown"]) - 1 and res["dlen"] == res["dlen_one"]
    assert sum(res["accepted"]) > 0
