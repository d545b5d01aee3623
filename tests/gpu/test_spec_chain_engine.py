"""A draft model's or draft head's greedy rounds on the engine, several a submission (champion.specChain,
shaders/draft_chain.wgsl: the rounds opened and closed on the GPU between the verify passes) under Node + Dawn, against
the same rounds made one specRound each on the same engine with the decode loop's own drafters keeping the draft
(catch_up / update): the same proposals, BITWISE the same picks, the same champion KV cache afterwards; the decode
loop with chains gives the champion's own greedy answer with the same passes and acceptance in fewer submissions;
bad calls are refused with errors naming the problem."""
from __future__ import annotations

import asyncio
import numpy as np
import pytest

from dawn_harness import probe

_why = probe()
pytestmark = pytest.mark.skipif(_why is not None, reason=f"WebGPU engine cannot run here: {_why}")

COUNTS = ("target_passes", "draft_passes", "rounds", "proposed", "accepted", "acceptance_by_position")
PROMPTS = [[1, 20, 30, 40, 50, 60, 70], [5, 6], [9, 8, 7, 6, 5, 4, 3, 2, 1, 250, 251]]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from test_head_decode_on_engine import head_files
    return head_files(tmp_path_factory.mktemp("spec_chain"), feat_gain=2.0)   # (its predicted features matter)


@pytest.fixture(scope="module", params=[{}, {"emulate_sg": True, "engine_opts": {"fuse": True}}, {"max_rows": 3},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "chainRowwise": True}},
                                        {"emulate_sg": True, "engine_opts": {"fuse": True, "attnBlock": 16}}],
                ids=["plain", "fused", "chunks3", "fused_rowwise", "fused_key_blocks"])
def engine(request, files):
    from engine_rpc import EngineProcess
    from exactspec.bridge import JsBackend, JsHead

    opts = request.param
    proc = EngineProcess(**{**opts, "engine_opts": {**opts.get("engine_opts", {}), "aheadMax": 8, "chainRounds": 4}})
    c = proc.load("champion", *files["champion"], seq_len=128)
    c.attn_block = opts.get("engine_opts", {}).get("attnBlock", 0)
    champ = JsBackend(c)
    d = proc.load("draft", *files["draft"], seq_len=128)
    drafts = {"model": (JsBackend(d), d, False)}
    for name in ("oracle", "random"):
        h = proc.load_head(name, *files[name], c)
        drafts[name] = (JsHead(h, champion=champ), h, True)
    yield champ, c, drafts
    proc.close()


def run(x):
    return asyncio.run(x) if asyncio.iscoroutine(x) else x


def start(champ, draft, prompt, k):
    """The champion holds the prompt but its last token; the draft all but the last k + 1 (or fewer) of it."""
    champ.truncate(0)
    draft.truncate(0)
    if len(prompt) > 1:
        run(champ.forward(prompt[:-1], 0))
    s = max(0, len(prompt) - 1 - k)
    if s:
        run(draft.forward(prompt[:s], 0, 1))
    return s


def replay(champ, draft, prompt, s, rounds, k, restart, copy=False):
    """The same rounds one specRound each, the draft kept by the decode loop's drafter (copy: a head with copies, its
    copy_of each round the specRound's copy): [(proposals, picks, a)]."""
    from exactspec.backend import Pick, accepted_by_picks
    from exactspec.drafters.head import HeadDrafter
    from exactspec.drafters.model import ModelDrafter

    d = HeadDrafter(draft, copy=True) if copy else (HeadDrafter if restart else ModelDrafter)(draft)
    seq, out = list(prompt), []
    for _ in range(rounds):
        feed, d_start = d.catch_up(seq)
        cp = {"copy": d.copy_of(seq, k)} if copy else {}
        r = run(champ.spec_round(draft, feed, d_start, k, seq[-1], len(seq) - 1, Pick(), False, **cp))
        assert list(r.proposals[:len(cp.get("copy", []))]) == cp.get("copy", [])
        a = accepted_by_picks(r.proposals, r.ids)
        seq += list(r.proposals[:a]) + [int(r.ids[a])]
        champ.truncate(len(seq) - 1)
        d.update(len(seq))
        out.append(([int(x) for x in r.proposals], [int(x) for x in r.ids], a))
    return out, seq


def test_chain_equals_rounds_one_by_one(engine):
    from exactspec.backend import Pick

    champ, c, drafts = engine
    accepted = 0
    for name, (draft, js, restart) in drafts.items():
        for k in (1, 3):
            k = min(k, c.chainMaxK)                     # (chunks of 3 rows: a round verifies at most 2)
            for prompt in PROMPTS:
                s = start(champ, draft, prompt, k)
                ch = run(champ.spec_chain(draft, prompt, s, 5, k, Pick(), restart))
                n_chain, d_chain = champ.length, draft.length
                if c.attn_block:   # a run that may reach position attnBlock: its verify passes and a draft model's k
                    per = 1 + (k if name == "model" else 0)   # passes on the key blocks' layers (a head has none)
                    assert c.far_chunks == (5 * per if len(prompt) - 1 + 5 * (k + 1) > c.attn_block else 0), (name, k, prompt)
                after_chain = np.asarray(run(champ.forward([7], n_chain)))           # (1, vocab) reads the chain's KV
                s = start(champ, draft, prompt, k)
                want, seq = replay(champ, draft, prompt, s, 5, k, restart)
                assert [(p, i, a) for p, i, a in zip(ch.proposals, ch.ids, ch.accepted)] == want, (name, k, prompt)
                assert seq[len(prompt):] == ch.appended() and n_chain == len(seq) - 1 == champ.length
                assert d_chain == draft.length, (name, k)
                after_replay = np.asarray(run(champ.forward([7], n_chain)))
                assert np.array_equal(after_chain.view(np.uint32), after_replay.view(np.uint32)), "the KV cache differs"
                accepted += sum(ch.accepted)
    assert accepted > 0


COPY_PROMPTS = [[7, 8, 9, 10, 7, 8, 9, 10, 7, 8], [3, 9, 27, 81, 43, 3, 9, 27, 81]]


def test_chain_with_copies_equals_rounds_one_by_one(engine):
    """A head's copies (shaders/chain.wgsl COPY inside the chain's rounds): each round's proposals are the n-gram's
    lookup on the sequence as it stands in place of the head's first ones; the chain equals the same rounds one
    specRound each with the host's copy (HeadDrafter.copy_of), bitwise the same picks, the same KV cache. (The
    reference's spec_chain with copy against the same lookup: tests/test_spec_chain.py.)"""
    from exactspec.backend import Pick
    from exactspec.drafters.ngram import NgramDrafter

    champ, c, drafts = engine
    used = 0
    for name in ("oracle", "random"):
        draft, js, _ = drafts[name]
        for k in (1, 3):
            k = min(k, c.chainMaxK)
            for prompt in COPY_PROMPTS:
                s = start(champ, draft, prompt, k)
                ch = run(champ.spec_chain(draft, prompt, s, 5, k, Pick(), True, copy=(2, 3)))
                n_chain, d_chain = champ.length, draft.length
                after_chain = np.asarray(run(champ.forward([7], n_chain)))           # (1, vocab)
                s = start(champ, draft, prompt, k)
                want, seq = replay(champ, draft, prompt, s, 5, k, True, copy=True)
                assert [(p, i, a) for p, i, a in zip(ch.proposals, ch.ids, ch.accepted)] == want, (name, k, prompt)
                assert seq[len(prompt):] == ch.appended() and d_chain == draft.length
                after_replay = np.asarray(run(champ.forward([7], n_chain)))
                assert np.array_equal(after_chain.view(np.uint32), after_replay.view(np.uint32)), "the KV cache differs"
                grown = list(prompt)                         # the copies the chain's rounds took
                for p, i, a in want:
                    used += len(NgramDrafter().lookup(grown, k))
                    grown += p[:a] + [i[a]]
    assert used > 0


def test_decode_loop_with_copies(engine, files):
    """head_copy through the decode loop on the engine (chains with copies, an answer's first round a specRound with
    the host's copy): the champion's own greedy answer, and the passes and acceptance of the numpy reference's loop;
    coupled answers (specRounds with the host's copy) the champion's own for two seeds."""
    from exactspec.drafters.head import HeadModel
    from exactspec.reference import ReferenceModel

    champ, c, drafts = engine
    for name in ("oracle", "random"):
        draft, js, _ = drafts[name]
        for prompt in COPY_PROMPTS:
            k = min(2, c.chainMaxK)
            base = generate(champ, prompt, drafter="none").token_ids
            got = generate(champ, prompt, draft, drafter="head", k=k, head_copy=True)
            rc = ReferenceModel.from_file(files["champion"][0], keep_features=True)
            ref = generate(rc, prompt, HeadModel.from_file(files[name][0], rc), drafter="head", k=k, head_copy=True)
            assert got.token_ids == base == ref.token_ids, (name, prompt)
            for key_ in COUNTS:
                assert got.stats[key_] == ref.stats[key_], (name, key_)
            assert got.stats["chain_rounds"] > 0
        for seed in (0, 1):              # coupled (T = 0.8): one specRound a round with the host's copy
            prompt = COPY_PROMPTS[0]
            base = generate(champ, prompt, drafter="none", temperature=0.8, seed=seed).token_ids
            got = generate(champ, prompt, draft, drafter="head", k=2, head_copy=True, temperature=0.8, seed=seed)
            assert got.token_ids == base and got.stats["chain_rounds"] == 0, (name, seed)


def generate(champ, prompt, draft=None, **kw):
    from exactspec.decode import GenerateConfig, generate as gen
    return gen(champ, prompt, GenerateConfig(**{"adaptive": False, "max_new_tokens": 24, **kw}), draft=draft, eos_ids=[])


def test_decode_loop_with_spec_chains(engine, files):
    """The champion's own greedy answer with the chains, and the passes and acceptance of one round a submission
    (the numpy champion with the numpy drafts) in fewer submissions."""
    from exactspec.drafters.head import HeadModel
    from exactspec.reference import ReferenceModel

    champ, c, drafts = engine
    base = {}
    for name, (draft, js, restart) in drafts.items():
        for k in (1, 2):
            k = min(k, c.chainMaxK)
            for prompt in PROMPTS[:2]:
                key = tuple(prompt)
                if key not in base:
                    base[key] = generate(champ, prompt, drafter="none").token_ids
                before = c.calls.get("specChain", 0)
                got = generate(champ, prompt, draft, drafter="head" if restart else "model", k=k)
                rc = ReferenceModel.from_file(files["champion"][0], keep_features=True)
                rd = HeadModel.from_file(files[name][0], rc) if restart else ReferenceModel.from_file(files["draft"][0])
                ref = generate(rc, prompt, rd, drafter="head" if restart else "model", k=k)
                assert got.token_ids == base[key] == ref.token_ids, (name, k)
                for key_ in COUNTS:
                    assert got.stats[key_] == ref.stats[key_], (name, k, key_)
                assert c.calls.get("specChain", 0) > before and got.stats["chain_rounds"] > 0
                assert got.stats["submissions"] < got.stats["rounds"]
    assert c.calls.get("continued", 0) > 0               # chains taken from the continuation the one before hinted


def test_chain_continuation(engine):
    """then > 0: the next chain runs from where this one ends without the host; the next call with the grown sequence
    and the draft's length takes it (continued) and returns what a fresh chain returns; a truncate of the champion
    below its length drops it."""
    from exactspec.backend import Pick

    champ, c, drafts = engine
    K = min(2, c.chainMaxK)
    prompt = PROMPTS[0]
    for name, (draft, js, restart) in drafts.items():
        def chains(then):
            s = start(champ, draft, prompt, K)
            seq, out, cont = list(prompt), [], []
            for i in range(3):
                before = c.calls.get("continued", 0)
                ch = run(champ.spec_chain(draft, seq, s, 3, K, Pick(), restart, then=then if i < 2 else 0))
                cont.append(c.calls.get("continued", 0) - before)
                seq += ch.appended()
                s = draft.length
                out.append(ch)
            return out, cont, seq, champ.length, draft.length

        a, cont_a, seq_a, la, da = chains(3)
        b, cont_b, seq_b, lb, db = chains(0)
        assert seq_a == seq_b and [x.ids for x in a] == [x.ids for x in b] and (la, da) == (lb, db), name
        assert cont_a == [0, 1, 1] and cont_b == [0, 0, 0], name
        # dropped by a truncate: the next chain is a fresh one, and still right
        s = start(champ, draft, prompt, K)
        ch = run(champ.spec_chain(draft, prompt, s, 3, K, Pick(), restart, then=3))
        grown = prompt + ch.appended()
        champ.truncate(len(prompt) - 1)
        draft.truncate(min(draft.length, s))
        before = c.calls.get("continued", 0)
        ch2 = run(champ.spec_chain(draft, prompt, draft.length, 3, K, Pick(), restart))
        assert c.calls.get("continued", 0) == before and ch2.appended() == grown[len(prompt):][:len(ch2.appended())]


def test_spec_chain_refusals(engine):
    from exactspec.backend import Pick

    champ, c, drafts = engine
    draft, js, _ = drafts["model"]
    head, hjs, _ = drafts["oracle"]
    prompt = PROMPTS[0]
    bad = [
        (lambda: c.specChain(js, prompt, 4, 2, 2, {"temperature": 0.7, "seed": 1}), "greedy picks only"),
        (lambda: c.specChain(js, prompt, 0, 2, 1, {"temperature": 0, "seed": 0}), "1 to k \\+ 1 = 2 may be"),
        (lambda: c.specChain(hjs, prompt, 4, 2, 2, {"temperature": 0, "seed": 0}, False), "rounds restart"),
        (lambda: c.specChain(js, prompt, 4, 0, 2, {"temperature": 0, "seed": 0}), "rounds 0 must be in"),
        (lambda: c.specChain(js, prompt, 4, 2, 99, {"temperature": 0, "seed": 0}), "k 99 must be in"),
        (lambda: c.specChain(hjs, prompt, 4, 2, 2, {"temperature": 0, "seed": 0}, True, 0, (), [3, 2]),
         "copy \\[3,2\\] must be \\[min, max\\]"),
    ]
    for call, msg in bad:
        start(champ, draft, prompt, 2)
        start(champ, head, prompt, 2)
        with pytest.raises(RuntimeError, match=msg):
            call()
