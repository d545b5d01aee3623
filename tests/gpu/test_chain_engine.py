"""The engine's n-gram rounds (model.ngramChain, shaders/chain.wgsl: several rounds of the n-gram drafter in one
submission, the lookup and the acceptance on the GPU) under Node + Dawn, against the host doing the same rounds one
by one on the same engine (the drafter's lookup, model.verify, truncate): the same proposals, BITWISE the same picks,
the same KV cache afterwards; continuations taken and dropped as decodeAhead's are; the decode loop with chains gives
the champion's own greedy answer in fewer submissions; bad calls are refused with errors naming the problem."""
from __future__ import annotations

import asyncio

import numpy as np
import pytest

from dawn_harness import probe

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")

GREEDY = {"temperature": 0.0, "seed": 0}


@pytest.fixture(scope="module", params=[{}, {"emulate_sg": True, "engine_opts": {"fuse": True}}, {"max_rows": 3},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "fuseQkvPairsRows": 2, "qkvRowsMin": 3,
                                                                             "qkvRowsDense": True, "rowTiles": ["qkv", "ffn"]}},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "chainRowwise": True}},
                                        {"lanes": 32, "engine_opts": {"chainRowwise": True}},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "attnBlock": 16, "attnRowsZ": True, "attnSplit": 2}},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "attnBlock": 32}},
                                        {"engine_opts": {"contSplitsFresh": 1, "preDefer": False}},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "chainStepDirect": False}}],
                ids=["plain", "fused", "chunks3", "fused_qkv_pairs_dense", "fused_rowwise", "lanes_rowwise", "fused_key_blocks", "fused_key_blocks32",
                     "cont_fresh1_nodefer", "fused_step_copied"])
def engine(request, tmp_path_factory):
    from engine_rpc import EngineProcess
    from exactspec.bridge import JsBackend
    from exactspec.formats import describe
    from exactspec.micro import micro_config, write_micro_gguf

    td = tmp_path_factory.mktemp("chain")
    champ = td / "champ.gguf"
    write_micro_gguf(champ, micro_config(), seed=1, tensor_type="Q4_1")
    opts = request.param
    proc = EngineProcess(**{**opts, "engine_opts": {**opts.get("engine_opts", {}), "aheadMax": 8, "chainRounds": 4}})
    c = proc.load("champion", champ, describe(champ), seq_len=128)
    c.attn_block = opts.get("engine_opts", {}).get("attnBlock", 0)
    yield JsBackend(c), c
    proc.close()


def run(x):
    return asyncio.run(x) if asyncio.iscoroutine(x) else x


def replay(champ, seq, rounds, k, lo=2, hi=3):
    """The same rounds on the host, one verify each: (proposals, picks, accepted) per round."""
    from exactspec.backend import Pick, accepted_by_picks
    from exactspec.drafters.ngram import NgramDrafter

    seq = list(seq)
    out = []
    for _ in range(rounds):
        L = len(seq)
        p = NgramDrafter(hi, lo).lookup(seq, k)[:max(0, champ.config.seq_len - 1 - L)]
        v = run(champ.verify([seq[-1]] + p, L - 1, Pick(), False))
        a = accepted_by_picks(p, v.ids)
        champ.truncate(L + a)
        seq += p[:a] + [v.ids[a]]
        out.append((p, list(v.ids), a))
    return out, seq


def prompt_of(seed, V):
    rng = np.random.default_rng(seed)
    base = [int(x) for x in rng.integers(0, V, int(rng.integers(3, 6)))]
    return base * 3 + base[:2]


@pytest.mark.parametrize("k,lo,hi", [(3, 2, 3), (1, 2, 3), (4, 1, 2)])
def test_chain_equals_rounds_one_by_one(engine, k, lo, hi):
    from exactspec.backend import Pick

    champ, c = engine
    k = min(k, c.chainMaxK)                         # (chunks of 3 rows: a round verifies at most 2)
    V = champ.config.vocab_size
    accepted = 0
    for seed in range(3):
        prompt = prompt_of(seed, V)
        P = len(prompt)
        champ.truncate(0)
        run(champ.forward(prompt[:-1], 0))
        ch = run(champ.ngram_chain(prompt, P - 1, 6, k, Pick(), lo, hi))
        n_chain = champ.length
        after_chain = np.asarray(run(champ.forward([7], n_chain)))           # (1, vocab) reads the chain's KV
        champ.truncate(P - 1)
        want, seq = replay(champ, prompt, 6, k, lo, hi)
        assert [(p, i, a) for p, i, a in zip(ch.proposals, ch.ids, ch.accepted)] == want
        assert seq[P:] == ch.appended() and n_chain == len(seq) - 1 == champ.length
        after_replay = np.asarray(run(champ.forward([7], n_chain)))
        assert np.array_equal(after_chain.view(np.uint32), after_replay.view(np.uint32)), "the KV cache differs"
        accepted += sum(ch.accepted)
    assert accepted > 0


def test_chain_continuation(engine):
    """then > 0: the next chain runs from where this one ends without the host; the next call with the grown sequence
    takes it (continued) and returns what a fresh chain returns; a truncate below the length drops it."""
    from exactspec.backend import Pick

    champ, c = engine
    K = min(3, c.chainMaxK)
    prompt = prompt_of(4, champ.config.vocab_size)
    P = len(prompt)

    def chains(then):
        champ.truncate(0)
        run(champ.forward(prompt[:-1], 0))
        seq, out, cont = list(prompt), [], []
        bound = None   # attnBlock: the end of the positions the run's passes may reach, as the engine bounds them
        for i in range(3):
            before = c.calls.get("continued", 0)
            start = len(seq) - 1
            ch = run(champ.ngram_chain(seq, start, 4, K, Pick(), 2, 3, then=then if i < 2 else 0))
            cont.append(c.calls.get("continued", 0) - before)
            bound = bound if cont[-1] else start + 4 * (K + 1)      # a continuation's: from the call that made it
            if c.attn_block:   # every pass of a run that may reach position attnBlock on the key blocks' layers
                assert c.far_chunks == (4 if bound > c.attn_block else 0), (i, start, bound, c.far_chunks)
            bound = start + (4 + then) * (K + 1)                      # (the continuation this call submitted)
            seq += ch.appended()
            out.append(ch)
        after = np.asarray(run(champ.forward([7], len(seq) - 1)))   # (1, vocab) reads the chains' KV
        return out, cont, seq, after

    a, cont_a, seq_a, after_a = chains(4)
    b, cont_b, seq_b, after_b = chains(0)
    assert seq_a == seq_b and [x.ids for x in a] == [x.ids for x in b]
    assert np.array_equal(after_a.view(np.uint32), after_b.view(np.uint32)), "the KV cache differs"
    assert cont_a == [0, 1, 1] and cont_b == [0, 0, 0]
    # a continuation dropped by a truncate: the next chain is a fresh one, and still right
    champ.truncate(0)
    run(champ.forward(prompt[:-1], 0))
    ch = run(champ.ngram_chain(prompt, P - 1, 4, K, Pick(), 2, 3, then=4))
    grown = prompt + ch.appended()
    champ.truncate(P)
    before = c.calls.get("continued", 0)
    ch2 = run(champ.ngram_chain(grown[:P + 1], P, 4, K, Pick(), 2, 3))
    assert c.calls.get("continued", 0) == before
    champ.truncate(P)
    want, _ = replay(champ, grown[:P + 1], 4, K)
    assert [(p, i, a) for p, i, a in zip(ch2.proposals, ch2.ids, ch2.accepted)] == want


def test_decode_loop_with_chains(engine):
    from exactspec.decode import GenerateConfig, generate

    champ, c = engine
    V = champ.config.vocab_size
    for seed in range(3):
        prompt = prompt_of(seed + 10, V)
        kw = dict(temperature=0.0, adaptive=False, max_new_tokens=30)
        alone = generate(champ, prompt, GenerateConfig(k=0, drafter="none", **kw), eos_ids=[])
        before = dict(c.calls)
        if c.chainMaxK < 3:       # (chunks of 3 rows: rounds of k 3 are the host's, the answer the same)
            got = generate(champ, prompt, GenerateConfig(k=3, drafter="ngram", **kw), eos_ids=[])
            assert got.token_ids == alone.token_ids and got.stats["proposed"] > 0
            before = dict(c.calls)
        got = generate(champ, prompt, GenerateConfig(k=min(3, c.chainMaxK), drafter="ngram", **kw), eos_ids=[])
        assert got.token_ids == alone.token_ids
        chains = c.calls.get("ngramChain", 0) - before.get("ngramChain", 0)
        # (a last round with room for no proposal runs ahead instead)
        ahead = c.calls["decodeAhead"] - before["decodeAhead"]
        assert chains + ahead == got.stats["submissions"] < got.stats["rounds"] and chains > 1 and ahead <= 1
        assert c.calls["verify"] == before["verify"] and got.stats["accepted"] > 0


def test_only_while_it_pays_with_chains(engine):
    """'Only while it pays' (adaptive) on the engine: the scheduler switches between chains and plain runs by the
    measured (here: llvmpipe's) timings, so which rounds are chains is not fixed (tests/test_ngram_chain.py checks the
    policy on a clock); whatever it chooses, chains run and the answer is the champion alone's."""
    from exactspec.decode import GenerateConfig, generate

    champ, c = engine
    V = champ.config.vocab_size
    prompt = prompt_of(21, V)
    kw = dict(temperature=0.0, max_new_tokens=24)
    alone = generate(champ, prompt, GenerateConfig(k=0, drafter="none", adaptive=False, **kw), eos_ids=[])
    before = dict(c.calls)
    got = generate(champ, prompt, GenerateConfig(k=min(3, c.chainMaxK), drafter="ngram", adaptive=True, **kw),
                   eos_ids=[])
    assert got.token_ids == alone.token_ids
    chains = c.calls.get("ngramChain", 0) - before.get("ngramChain", 0)
    assert chains >= 1 and got.stats["chain_rounds"] >= 1


def test_chain_refusals(engine):
    from exactspec.backend import Pick

    champ, c = engine
    champ.truncate(0)
    run(champ.forward([1, 2, 3], 0))
    bad = [((list(range(1, 5)), 3, 0, 2), "rounds 0 must be in"), ((list(range(1, 5)), 3, 2, 0), "k 0 must be in"),
           (([1, 2, 3], 2, 2, 2), "start_pos 2 must equal length 3"),
           (([1, 2, 3, 4, 5], 3, 2, 2), "seq holds 5 tokens"),
           (([1, 2, 3, 10 ** 6], 3, 2, 2), "outside"),
           (([1, 2, 3, 4], 3, 42, 2), "exceed seq_len")]
    for (seq, pos, rounds, k), msg in bad:
        with pytest.raises(Exception, match=msg):
            c.ngramChain(seq, pos, rounds, k, GREEDY, [2, 3])
    with pytest.raises(Exception, match="ngram"):
        run(c.ngramChain([1, 2, 3, 4], 3, 2, 2, GREEDY, [3, 2]))
    ch = run(champ.ngram_chain([1, 2, 3, 4], 3, 2, 2, Pick(), 2, 3))     # still usable
    assert champ.length == 3 + len(ch.appended())


def test_decode_loop_chains_to_the_context_end(engine):
    """An answer that runs into the end of the context (seq_len 128 here) with chains: the champion's own tokens up to
    it, no call past it (a hinted chain has room for its rounds)."""
    from exactspec.decode import GenerateConfig, generate

    champ, c = engine
    prompt = (prompt_of(7, champ.config.vocab_size) * 12)[:100]
    kw = dict(temperature=0.0, adaptive=False, max_new_tokens=60)
    alone = generate(champ, prompt, GenerateConfig(k=0, drafter="none", **kw), eos_ids=[])
    got = generate(champ, prompt, GenerateConfig(k=min(4, c.chainMaxK), drafter="ngram", **kw), eos_ids=[])
    assert got.error is None and got.finish_reason == alone.finish_reason == "length"
    assert got.token_ids == alone.token_ids and len(got.token_ids) == 128 - 100
