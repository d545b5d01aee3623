"""The draft head on the engine in headless Chromium (WebGPU on SwiftShader): the page imports app/gpu/engine.js with
`navigator.gpu`, loads a micro champion and a head on it (engine.loadHead: a vocabulary subset, an attention
window), and checks in the page that its rows are bitwise the same in one forward, in two, past the champion in one
submission and one by one, and that champion.specRound(head, ...) equals the same passes one by one; the rows come
back for parity with numpy's HeadModel."""
from __future__ import annotations

import numpy as np
import pytest

from chromium_harness import PRELUDE, engine_page, probe

_why = probe()

SCRIPT = PRELUDE + """
const hdesc = await (await fetch('/head_desc.json')).json();
const hfile = await (await fetch('/head.bin')).arrayBuffer();
const c = await engine.loadModel(desc, readSlice, { seq_len: 64 });
const head = await engine.loadHead(hdesc, async (o, n) => hfile.slice(o, o + n), c, HEAD_OPTS);
const T = TOKENS, PAST = PAST_TOKENS;
const n = T.length;
const bits = (a) => Array.from(new Uint32Array(a.buffer, a.byteOffset, a.length));
const same = (a, b) => a.length === b.length && a.every((x, i) => x === b[i]);
const bad = [];
await c.forward(T, 0, 1);
const full = await head.forward(T, 0, n);
head.truncate(0);
const a = await head.forward(T.slice(0, 5), 0, 5);
const b = await head.forward(T.slice(5), 5, n - 5);
if (!same(bits(full), [...bits(a), ...bits(b)])) bad.push('one forward vs two');
const past = await head.forward(PAST, n, PAST.length);
head.truncate(n);
const one = [];
for (let i = 0; i < PAST.length; i++) one.push(...bits(await head.forward([PAST[i]], n + i, 1)));
if (!same(bits(past), one)) bad.push('past the champion: one submission vs one by one');
// specRound(head) against the passes one by one
const P = n - 1, d = 4, k = 3;
c.truncate(P); head.truncate(d);
const pick = { temperature: 0, seed: 0 };
const r = await c.specRound(head, T.slice(d), d, k, T[P], P, pick, true);
c.truncate(P); head.truncate(d);
const am = (y) => { let m = 0; for (let i = 1; i < y.length; i++) if (y[i] > y[m]) m = i; return m; };
let y = await head.forward(T.slice(d), d, 1);
const props = [am(y)];
for (let i = 1; i < k; i++) { y = await head.forward([props[i - 1]], P + i, 1); props.push(am(y)); }
if (!same(Array.from(r.proposals), props)) bad.push(`proposals ${Array.from(r.proposals)} vs ${props}`);
const ver = await c.forward([T[P], ...props], P, k + 1);
if (!same(bits(ver), bits(r.rows))) bad.push('specRound verify rows');
const info = { adapter: engine.adapterInfo, memory: head.memory(), bad, full: Array.from(full), past: Array.from(past) };
engine.destroy();
return info;
"""


@pytest.mark.browser
@pytest.mark.skipif(_why is not None, reason=f"Chromium engine test cannot run here: {_why}")
@pytest.mark.parametrize("opts", ["{}", "{subgroups: true}"], ids=["cpu_path", "subgroup_matmul"])
def test_chromium_swiftshader_head(tmp_path, opts):
    import json

    from exactspec.drafters.head import HeadConfig, HeadModel, random_head_weights, write_head_gguf
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf
    from exactspec.reference import ReferenceModel

    cfg = micro_config(vocab_size=300, seq_len=64)
    champ, hp = tmp_path / "champ.gguf", tmp_path / "head.gguf"
    write_micro_gguf(champ, cfg, seed=3, tensor_type="Q4_1")
    hc = HeadConfig.for_champion(cfg, window=6)
    write_head_gguf(hp, hc, random_head_weights(hc, 1, feature_scale=2.0), tensor_type="Q8_0",
                    vocab_ids=np.arange(1, 300, 2))
    toks = [int(t) for t in np.random.default_rng(4).integers(0, 300, 10)]
    past = [9, 99, 199]
    head_opts = "{headLanes: 4}" if "subgroups" in opts else "{}"
    with engine_page(champ, describe(champ), {"/head_desc.json": describe(hp), "/head.bin": hp}) as page:
        script = (SCRIPT.replace("PAST_TOKENS", json.dumps(past)).replace("TOKENS", json.dumps(toks))
                  .replace("HEAD_OPTS", head_opts).replace("createEngine(navigator.gpu, {})", f"createEngine(navigator.gpu, {opts})"))
        res = page.evaluate("async () => {" + script + "}")
    if "no_webgpu" in res:
        pytest.skip(f"Chromium offers no WebGPU adapter here: {res['no_webgpu']}")
    print(f"[chromium head] adapter {res['adapter']['architecture']} kernels {res['adapter'].get('kernels')} "
          f"memory {res['memory']}")
    assert res["bad"] == [], res["bad"]
    c = ReferenceModel.from_file(champ, keep_features=True, max_len=64)
    h = HeadModel.from_file(hp, c)
    c.forward(toks, 0, 1)
    ref = np.concatenate([h.forward(toks, 0, len(toks)), h.forward(past, len(toks), len(past))])
    got = np.concatenate([np.asarray(res["full"], np.float32), np.asarray(res["past"], np.float32)]).reshape(ref.shape)
    fin = np.isfinite(ref)
    assert np.array_equal(fin, np.isfinite(got)) and (ref.argmax(1) == got.argmax(1)).all()
    diff = float(np.abs(ref[fin] - got[fin]).max())
    print(f"[chromium head] max |diff| vs numpy HeadModel: {diff:.2e}")
    assert diff < 1e-3
