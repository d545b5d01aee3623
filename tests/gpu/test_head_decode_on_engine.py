"""The decode loop with a draft head on the WebGPU engine (engine.loadHead under Node + Dawn, through
tests/gpu/engine_server.mjs, wrapped by exactspec.bridge.JsBackend / JsHead as the worker wraps them in Pyodide):

- greedy and coupled: the same tokens as the champion alone on the engine, with the batched step (the head's k passes
  and the champion's verify in one submission) and per forward, and the same passes, proposals and acceptances as
  the numpy champion with the numpy HeadModel;
- rejection (the per-forward path): the same tokens and counts as the numpy head;
- the session: a device head bound to a device champion (its cache computed again: the champion keeps features from
  then on), beside a draft model, a head for another champion refused naming both sha256s, a CPU head refused for a
  GPU champion; the engine refuses features the champion computed before it kept them.
"""
from __future__ import annotations

import asyncio
import json
from dataclasses import replace

import numpy as np
import pytest

from dawn_harness import probe

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")

COUNTS = ("target_passes", "draft_passes", "rounds", "proposed", "accepted", "acceptance_by_position")
PROMPT = [1, 20, 30, 40, 50, 60, 70]
SHA_B = "b" * 64


def near_oracle(cfg, cw, feat_gain, seed):
    """A head copying the champion's only layer, reading the embedding (tests/test_head.py's near-oracle head)."""
    from exactspec.drafters.head import LAYER_TENSORS, HeadConfig, random_head_weights
    hc = HeadConfig.for_champion(cfg)
    hw = random_head_weights(hc, seed)
    hw["head.fc_feat.weight"] *= feat_gain
    hw["head.fc_emb.weight"][:] = np.eye(cfg.dim, dtype=np.float32)
    hw["head.emb_norm.weight"][:] = 1.0
    for t in LAYER_TENSORS:
        hw[f"blk.0.{t}.weight"] = cw[f"blk.0.{t}.weight"].copy()
    return hc, hw


def head_files(td, feat_gain=0.3):
    """A micro champion (F32), a draft model, near-oracle (feat_gain) / random / foreign heads: {name: (path,
    description)}, the champion's sha256 and config."""
    from exactspec.drafters.head import HeadConfig, random_head_weights, write_head_gguf
    from exactspec.formats import describe
    from exactspec.micro import micro_config, micro_weights, write_micro_gguf
    from exactspec_train.data import sha256_file

    cfg = micro_config(vocab_size=300, n_layers=1, seq_len=128)
    champ, draft = td / "champ.gguf", td / "draft.gguf"
    write_micro_gguf(champ, cfg, seed=1, tensor_type="F32")
    write_micro_gguf(draft, micro_config(vocab_size=300, n_layers=1, seq_len=128), seed=1, tensor_type="Q8_0")
    sha = sha256_file(champ)
    out = {"champion": (champ, describe(champ)), "draft": (draft, describe(draft)), "sha": sha, "cfg": cfg}
    hc, hw = near_oracle(cfg, micro_weights(cfg, 1), feat_gain, 1)
    p = td / "oracle.gguf"
    write_head_gguf(p, replace(hc, champion_sha256=sha), hw, tensor_type="F32")
    out["oracle"] = (p, describe(p))
    hc = HeadConfig.for_champion(cfg, window=6, champion_sha256=sha)
    p = td / "random.gguf"
    write_head_gguf(p, hc, random_head_weights(hc, 4, feature_scale=2.0), tensor_type="Q8_0",
                    vocab_ids=np.arange(0, 300, 2))
    out["random"] = (p, describe(p))
    p = td / "foreign.gguf"
    write_head_gguf(p, replace(hc, champion_sha256=SHA_B), random_head_weights(hc, 4), tensor_type="F32")
    out["foreign"] = (p, describe(p))
    return out


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    return head_files(tmp_path_factory.mktemp("head_decode"))


@pytest.fixture(scope="module", params=[{}, {"emulate_sg": True, "engine_opts": {"fuse": True}}], ids=["plain", "fused"])
def engine(request, files):
    from engine_rpc import EngineProcess
    from exactspec.bridge import JsBackend, JsHead

    opts = request.param
    # chains off on every adapter (a GPU's default is 4: the head's greedy rounds would run several a submission,
    # tests/gpu/test_spec_chain_engine.py): the one-round-a-submission path this file counts
    proc = EngineProcess(**{**opts, "engine_opts": {**opts.get("engine_opts", {}), "aheadMax": 8, "chainRounds": 0}})
    c = proc.load("champion", *files["champion"], seq_len=128)
    champ = JsBackend(c)
    heads = {}
    for name in ("oracle", "random"):
        h = proc.load_head(name, *files[name], c)
        heads[name] = (JsHead(h, champion=champ), h)
    yield proc, champ, c, heads
    proc.close()


def generate(champ, prompt, draft=None, **kw):
    from exactspec.decode import GenerateConfig, generate as gen
    return gen(champ, prompt, GenerateConfig(**{"adaptive": False, "max_new_tokens": 20, **kw}), draft=draft, eos_ids=[])


def numpy_run(files, head, prompt, **kw):
    from exactspec.drafters.head import HeadModel
    from exactspec.reference import ReferenceModel
    c = ReferenceModel.from_file(files["champion"][0], keep_features=True)
    return generate(c, prompt, HeadModel.from_file(files[head][0], c), drafter="head", **kw)


@pytest.mark.parametrize("temperature,seed", [(0.0, 0), (0.8, 3)])
@pytest.mark.parametrize("head", ["oracle", "random"])
def test_decode_loop_with_the_device_head(engine, files, head, temperature, seed):
    proc, champ, c, heads = engine
    dh, h = heads[head]
    kw = dict(temperature=temperature, seed=seed, mode="coupled")
    base = generate(champ, PROMPT, drafter="none", **kw)
    assert len(base.token_ids) == 20
    for k in (1, 4):
        before = dict(c.calls)
        bat = generate(champ, PROMPT, dh, drafter="head", k=k, **kw)
        rounds = c.calls["specRound"] - before["specRound"] + c.calls["decodeAhead"] - before["decodeAhead"]
        per = generate(champ, PROMPT, dh, drafter="head", k=k, batched=False, **kw)
        ref = numpy_run(files, head, PROMPT, k=k, **kw)
        assert bat.token_ids == base.token_ids == per.token_ids == ref.token_ids, (head, k)
        for key in COUNTS:
            assert bat.stats[key] == per.stats[key] == ref.stats[key], (head, k, key)
        assert rounds == bat.stats["rounds"] == bat.stats["submissions"]       # one submission per round
        assert c.calls["specRound"] > before["specRound"]
        if head == "oracle":                       # (it proposes the champion's tokens often enough to matter)
            assert bat.stats["accepted"] >= 5, bat.stats


def test_rejection_mode_with_the_device_head(engine, files):
    proc, champ, c, heads = engine
    for head in ("oracle", "random"):
        dh, h = heads[head]
        kw = dict(temperature=1.0, seed=11, mode="rejection", k=3)
        before = c.calls["specRound"]
        got = generate(champ, PROMPT, dh, drafter="head", **kw)
        assert c.calls["specRound"] == before                                  # the per-forward path
        ref = numpy_run(files, head, PROMPT, **kw)
        assert got.token_ids == ref.token_ids, head
        for key in COUNTS:
            assert got.stats[key] == ref.stats[key], (head, key)


def test_the_session_with_a_device_head(files):
    """Session.load(..., role='draft', backend=JsHead): bound to the device champion, beside a draft model; answers
    identical to the champion alone; a head for another champion refused naming both sha256s; the engine itself
    refuses features the champion computed before it kept them."""
    from engine_rpc import EngineProcess
    from exactspec.bridge import JsBackend, JsHead
    from exactspec.session import Session, SessionError

    proc = EngineProcess(engine_opts={"aheadMax": 8})
    try:
        c = proc.load("champion", *files["champion"], seq_len=128)
        d = proc.load("draft", *files["draft"], seq_len=128)
        s = Session(backend_name="webgpu")
        s.load("champ", str(files["champion"][0]), role="champion", backend=JsBackend(c), backend_name="webgpu")
        s.load("draft", str(files["draft"][0]), role="draft", backend=JsBackend(d), backend_name="webgpu")
        req = {"prompt": "hello there", "max_new_tokens": 16, "adaptive": False, "temperature": 0}
        base = asyncio.run(s.generate({**req, "drafter": "none"}))     # the champion computes without features
        # the engine: positions the champion computed before it kept features are refused
        raw = proc.load_head("raw", *files["random"], c)
        with pytest.raises(RuntimeError, match="before it kept its features"):
            raw.forward([1, 2], 0, 1)
        with pytest.raises(SessionError) as e:
            s.load("foreign", str(files["foreign"][0]), role="draft",
                   backend=JsHead(proc.load_head("foreign", *files["foreign"], c)))
        assert SHA_B in str(e.value) and files["sha"] in str(e.value)
        out = json.loads(s.load("head", str(files["oracle"][0]), role="draft",
                                backend=JsHead(proc.load_head("head", *files["oracle"], c)), backend_name="webgpu"))
        assert out["summary"]["kind"] == "head" and s.head == "head" and s.draft == "draft"
        for drafter, k in (("head", 3), ("model", 3), ("head", 5)):
            r = asyncio.run(s.generate({**req, "drafter": drafter, "k": k}))
            assert r["token_ids"] == base["token_ids"], drafter
            assert r["stats"]["drafter"] == drafter and r["stats"]["accepted"] > 0
        # a numpy head cannot read a device champion's features
        with pytest.raises(SessionError, match="reads the features of a CPU champion"):
            s.load("cpu-head", str(files["oracle"][0]), role="draft")
    finally:
        proc.close()
