"""The decode loop (exactspec.decode) end to end on the WebGPU engine: champion and draft are engine models under
Node + Dawn (tests/gpu/engine_server.mjs), wrapped by exactspec.bridge.JsBackend exactly as the worker wraps them in
Pyodide. With the batched step (decodeAhead / specRound: one submission per round, picks on the GPU) the tokens and
the champion's and draft's pass counts equal the per-forward path's, greedy and coupled, with and without a draft;
only the submissions drop."""
from __future__ import annotations

import pytest

from dawn_harness import probe

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")

COUNTS = ("target_passes", "draft_passes", "rounds", "proposed", "accepted", "acceptance_by_position")


@pytest.fixture(scope="module", params=[{}, {"emulate_sg": True, "engine_opts": {"fuse": True}}], ids=["plain", "fused"])
def engine(request, tmp_path_factory):
    from engine_rpc import EngineProcess
    from exactspec.bridge import JsBackend
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    td = tmp_path_factory.mktemp("decode")
    champ, draft = td / "champ.gguf", td / "draft.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    write_micro_gguf(draft, micro_config(n_layers=1), seed=1, tensor_type="Q8_0")   # shares the embedding: agrees often
    opts = request.param
    # chains off on every adapter (a GPU's default is 4: its n-gram and draft rounds would run several a submission,
    # tests/gpu/test_chain_engine.py and test_spec_chain_engine.py): the per-round paths this file counts
    proc = EngineProcess(**{**opts, "engine_opts": {**opts.get("engine_opts", {}), "aheadMax": 8, "chainRounds": 0}})
    c = proc.load("champion", champ, describe(champ), seq_len=128)
    d = proc.load("draft", draft, describe(draft), seq_len=128)
    yield JsBackend(c), JsBackend(d), c, d
    proc.close()


def generate(champ, draft, prompt, **kw):
    from exactspec.decode import GenerateConfig, generate as gen

    return gen(champ, prompt, GenerateConfig(**{"adaptive": False, "max_new_tokens": 20, **kw}), draft=draft, eos_ids=[])


@pytest.mark.parametrize("temperature,seed", [(0.0, 0), (0.9, 7), (1.3, 2 ** 53 - 1)])
@pytest.mark.parametrize("k", [0, 3])
def test_decode_loop_batched_equals_per_forward(engine, temperature, seed, k):
    champ, draft, c, d = engine
    prompt = [1, 20, 30, 40, 50, 60]
    kw = dict(temperature=temperature, seed=seed, k=k, drafter="model" if k else "none", mode="coupled")
    before = dict(c.calls)
    plain = generate(champ, draft, prompt, batched=False, **kw)
    mid = dict(c.calls)
    batched = generate(champ, draft, prompt, batched=True, **kw)
    assert batched.token_ids == plain.token_ids and len(plain.token_ids) == 20
    for key in COUNTS:
        assert batched.stats[key] == plain.stats[key], key
    assert mid["decodeAhead"] == before["decodeAhead"] and mid["specRound"] == before["specRound"]
    if k == 0:    # the champion alone runs ahead: 4, 8, 8 passes per submission (aheadMax 8), none wasted; the last
        # 8 was a continuation, submitted before the call for it came (decodeAhead's `then`: not after the first run)
        assert c.calls["decodeAhead"] - mid["decodeAhead"] == batched.stats["submissions"] == 3
        assert batched.stats["wasted_passes"] == 0
        assert c.calls.get("continued", 0) - mid.get("continued", 0) == 1
    else:         # one submission per round: the draft's k passes and the champion's verify (a last round with no
        # room for proposals runs ahead instead)
        rounds = c.calls["specRound"] - mid["specRound"] + c.calls["decodeAhead"] - mid["decodeAhead"]
        assert rounds == batched.stats["rounds"] == batched.stats["submissions"]
        assert c.calls["specRound"] > mid["specRound"] and batched.stats["accepted"] > 0


def test_ngram_rounds_verify_with_ids(engine):
    """Greedy n-gram rounds on the engine verify through model.verify (the argmax ids come back, not the rows): the
    same tokens and counts as verifying the rows, and a readback of ids only."""
    champ, draft, c, d = engine
    prompt = [1, 20, 30, 40, 50, 60] * 3
    kw = dict(temperature=0.0, k=3, drafter="ngram", max_new_tokens=24, batched=True)
    c.verify = None                                 # the model without verify: the rows of each round come back
    try:
        plain = generate(champ, draft, prompt, **kw)
    finally:
        del c.verify
    before = c.calls["verify"]
    ver = generate(champ, draft, prompt, **kw)
    assert ver.token_ids == plain.token_ids
    for key in COUNTS:
        assert ver.stats[key] == plain.stats[key], key
    assert plain.stats["proposed"] > 0 and c.calls["verify"] > before
    assert ver.stats["readback_bytes"] < plain.stats["readback_bytes"]


def test_no_run_ahead_where_the_engine_says_so(engine):
    """aheadMax 0 (the default on CPU adapters): the decode loop makes one forward per token."""
    champ, draft, c, d = engine
    c.aheadMax = 0
    try:
        before = c.calls["decodeAhead"]
        r = generate(champ, draft, [3, 4, 5], k=0, drafter="none", max_new_tokens=5)
        assert c.calls["decodeAhead"] == before and r.stats["submissions"] == 5
    finally:
        c.aheadMax = 8


def test_json_mode_verifies_with_ids(engine):
    """Greedy JSON mode on the engine verifies through model.verify (the argmax ids come back), runs ahead where a
    round has nothing to verify (decodeAhead, ids only), and reads a row again only where the grammar's mask refuses
    the device's id: the tokens of the rows path (the model without verify), with the grammar's forced proposals
    alone, the n-gram's and the draft's."""
    from exactspec.constrain import Constraint, Grammar, parse_response_format
    from exactspec.decode import GenerateConfig, generate as gen
    from test_json_mode import TOY_SCHEMAS, TRICKY, toy_vocab

    champ, draft, c, d = engine
    vocab = toy_vocab(TRICKY[:champ.config.vocab_size - 257])      # the micro model's 300 tokens
    reads = ahead = 0
    for schema in TOY_SCHEMAS[:2]:
        rf = {"type": "json_schema", "schema": schema}
        con = Constraint(Grammar(parse_response_format(rf)), vocab)
        for conf in (dict(drafter="none", k=0, grammar_draft=False), dict(drafter="none", k=0),
                     dict(drafter="ngram", k=3), dict(drafter="model", k=2)):
            def run():
                return gen(champ, [1, 20, 30, 40], GenerateConfig(adaptive=False, response_format=rf,
                                                                  max_new_tokens=40, **conf),
                           draft=draft, constraint=con, eos_ids=vocab.eos_ids)
            c.verify = None                         # the model without verify: the rows of each round come back
            try:
                rows = run()
            finally:
                del c.verify
            before = dict(c.calls)
            ids = run()
            assert ids.token_ids == rows.token_ids and ids.finish_reason == rows.finish_reason, conf
            verifies = c.calls.get("verify", 0) - before.get("verify", 0)
            runs = c.calls.get("decodeAhead", 0) - before.get("decodeAhead", 0)
            st = ids.stats
            assert verifies + runs > 0 and rows.stats["ahead_passes"] == 0
            assert st["target_passes"] - verifies - (st["ahead_passes"] - st["wasted_passes"]) == st["row_reads"]
            reads += st["row_reads"]
            ahead += st["ahead_passes"]
    assert reads > 0 and ahead > 0
