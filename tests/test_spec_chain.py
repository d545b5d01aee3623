"""A draft model's or draft head's greedy rounds made by the device, several a submission
(exactspec.backend.spec_chain), in CPython: the numpy reference's implementation (each round spec_round on the sequence as it stands, the draft fed
from what a drafter's update keeps) and the decode loop driving it (the champion's own greedy answer, the same passes
and acceptance as one round a submission, fewer submissions, EOS and max_new_tokens inside a chain). The engine's
(shaders/draft_chain.wgsl) is tested against this one in tests/gpu/test_spec_chain_engine.py."""
import asyncio

import numpy as np
import pytest

from exactspec.backend import Pick, RunsAhead, accepted_by_picks, spec_chain_by_forwards
from exactspec.decode import GenerateConfig, generate
from exactspec.drafters.head import HeadConfig, HeadModel, random_head_weights
from exactspec.micro import micro_config, micro_weights
from exactspec.reference import ReferenceModel
from toy import OnAClock

from test_head import near_oracle_head


@pytest.fixture(scope="module")
def micro():
    cfg = micro_config(vocab_size=100, n_layers=1, seq_len=128)
    cw = micro_weights(cfg, 1)
    return cfg, cw


def models(micro):
    """champion, {name: (draft, restart)}: a draft model (another micro model), a head that predicts the champion
    nearly exactly and a random head (subset + window)."""
    cfg, cw = micro
    champ = ReferenceModel(cfg, cw, keep_features=True)
    hc, hw = near_oracle_head(cfg, cw, feat_gain=2.0, seed=1)   # (its predicted features matter)
    hr = HeadConfig.for_champion(cfg, window=5)
    return champ, {"model": (ReferenceModel(cfg, micro_weights(cfg, 2)), False),
                   "oracle_head": (HeadModel(champ, hc, hw), True),
                   "random_head": (HeadModel(champ, hr, random_head_weights(hr, 3), vocab_ids=np.arange(0, 100, 3)),
                                   True)}


PROMPTS = [[5], [3, 9, 27, 81, 43], [10, 11, 12, 13, 14, 15, 16, 17, 18]]


def gen(champ, prompt, draft=None, **kw):
    return generate(champ, prompt, GenerateConfig(**{"adaptive": False, "temperature": 0.0, "max_new_tokens": 30,
                                                     **kw}), draft=draft)


def replay(champ, draft, prompt, start, rounds, k, restart):
    """The same rounds one spec_round each, the draft kept by the decode loop's own drafter (catch_up, update):
    [(proposals, picks, accepted)]."""
    from exactspec.backend import spec_round_by_forwards
    from exactspec.drafters.head import HeadDrafter
    from exactspec.drafters.model import ModelDrafter
    champ.truncate(0)
    if len(prompt) > 1:
        champ.forward(prompt[:-1], 0)
    draft.truncate(0)
    if start:
        draft.forward(prompt[:start], 0, 1)
    d = (HeadDrafter if restart else ModelDrafter)(draft)
    seq, out = list(prompt), []
    for _ in range(rounds):
        feed, d_start = d.catch_up(seq)
        r = asyncio.run(spec_round_by_forwards(champ, draft, feed, d_start, k, seq[-1], len(seq) - 1, Pick(), False))
        a = accepted_by_picks(r.proposals, r.ids)
        seq += r.proposals[:a] + [r.ids[a]]
        champ.truncate(len(seq) - 1)
        d.update(len(seq))
        out.append((list(r.proposals), list(r.ids), a))
    return out


def test_reference_chain_is_rounds_on_the_grown_sequence(micro):
    """Each round is the draft's k picks from the sequence as it stands and the champion's picks on [last, proposals];
    what the picks accept is appended: the champion's greedy answer. The caches end where the decode loop's commit
    leaves them (champion: len(seq) - 1; the draft: a model keeps what it was fed of the answer, a head only up to
    its last round's first position)."""
    champ, ds = models(micro)
    for name, (draft, restart) in ds.items():
        for prompt in PROMPTS:
            want = gen(champ, prompt, max_new_tokens=40, k=0, drafter="none").token_ids
            for k in (1, 3):
                champ.truncate(0)
                if len(prompt) > 1:
                    champ.forward(prompt[:-1], 0)
                draft.truncate(0)
                start = max(0, len(prompt) - 1 - k)             # the draft already holds what it is not fed
                if start:
                    draft.forward(prompt[:start], 0, 1)
                ch = asyncio.run(spec_chain_by_forwards(champ, draft, prompt, start, 5, k, Pick(), restart))
                assert replay(champ, draft, prompt, start, 5, k, restart) == \
                    [(p, i, a) for p, i, a in zip(ch.proposals, ch.ids, ch.accepted)], (name, k)
                seq = list(prompt)
                for p, ids, a in zip(ch.proposals, ch.ids, ch.accepted):
                    assert len(p) == k and len(ids) == k + 1 and a == accepted_by_picks(p, ids)
                    last_start = len(seq)
                    seq += p[:a] + [ids[a]]
                assert seq[len(prompt):] == ch.appended() == want[:len(ch.appended())], (name, k)
                assert champ.length == len(seq) - 1
                assert draft.length <= len(seq) - 1 and (not restart or draft.length <= last_start), (name, k)
                if ch.accepted[-1] < k and not restart:
                    assert draft.length == len(seq) - 1     # (a model's last pass fed an accepted or its last input)
    with pytest.raises(ValueError, match="greedy"):
        asyncio.run(spec_chain_by_forwards(champ, ds["model"][0], [1, 2], 1, 2, 2, Pick(temperature=0.7)))
    champ.truncate(0)
    draft = ds["model"][0]
    draft.truncate(0)
    with pytest.raises(ValueError, match="1 to k \\+ 1 = 3"):
        asyncio.run(spec_chain_by_forwards(champ, draft, [1, 2, 3, 4, 5], 0, 2, 2, Pick()))


@pytest.mark.parametrize("k", [1, 3])
def test_decode_loop_chains_give_the_champions_answer_with_the_same_passes(micro, k):
    """Greedy with a draft model or head on a device that offers spec_chain: the champion's own answer, and the same
    rounds, passes and acceptance as one spec_round a submission, in fewer submissions."""
    champ, ds = models(micro)
    chained = hinted = 0
    for name, (draft, _) in ds.items():
        drafter = "head" if "head" in name else "model"
        for prompt in PROMPTS:
            kw = dict(k=k, drafter=drafter, max_new_tokens=30)
            base = gen(champ, prompt, max_new_tokens=30, k=0, drafter="none")
            one = gen(RunsAhead(champ, ahead_max=4, rounds=True), prompt, draft, **kw)   # one round a submission
            dev = RunsAhead(champ, ahead_max=4, chain_rounds=4, rounds=True)
            got = gen(dev, prompt, draft, **kw)
            assert got.token_ids == one.token_ids == base.token_ids, (name, k, prompt)
            assert dev.spec_chain_calls and got.stats["chain_rounds"] > 0
            chained += got.stats["chain_rounds"]
            assert got.stats["submissions"] < one.stats["submissions"], (name, k)
            for c in ("target_passes", "rounds", "proposed", "accepted", "acceptance_by_position", "draft_passes"):
                assert got.stats[c] == one.stats[c], (name, k, c, got.stats[c], one.stats[c])
            prev = None
            for pos, d_start, r, kk, then in dev.spec_chain_calls:
                assert kk == k and 2 <= r <= 4 and 1 <= pos + 1 - d_start <= k + 1
                assert then == 0 or 2 <= then <= 4
                if prev and prev[4]:                       # the chain the last one hinted: taken as hinted
                    assert r == prev[4]
                    hinted += 1
                prev = (pos, d_start, r, kk, then)
    assert chained > 0 and hinted > 0


def test_eos_and_max_tokens_inside_a_chain(micro):
    champ, ds = models(micro)
    prompt = PROMPTS[1]
    plain = gen(champ, prompt, max_new_tokens=30, k=0, drafter="none").token_ids
    eos = plain[9]
    first = plain.index(eos)
    for name, (draft, _) in ds.items():
        drafter = "head" if "head" in name else "model"
        dev = RunsAhead(champ, chain_rounds=4, rounds=True)
        got = generate(dev, prompt, GenerateConfig(max_new_tokens=30, k=3, drafter=drafter, adaptive=False),
                       draft=draft, eos_ids=[eos])
        assert got.finish_reason == "eos" and got.token_ids == plain[:first] and dev.spec_chain_calls
        for n in (1, 2, 5, 13):
            got = gen(RunsAhead(champ, chain_rounds=4, rounds=True), prompt, draft, max_new_tokens=n, k=3,
                      drafter=drafter)
            assert got.finish_reason == "length" and got.token_ids == plain[:n], (name, n)


def test_chains_only_where_they_apply(micro):
    """No spec_chain for sampled answers, the confidence stop, the additive schedule, or a device without chains."""
    champ, ds = models(micro)
    draft = ds["model"][0]
    for kw in (dict(temperature=0.7, mode="coupled"), dict(draft_stop=0.3), dict(k_schedule="additive"),
               dict(temperature=1.0, mode="rejection")):
        dev = RunsAhead(champ, chain_rounds=4, rounds=True)
        gen(dev, PROMPTS[1], draft, k=3, drafter="model", **kw)
        assert not dev.spec_chain_calls, kw
    dev = RunsAhead(champ, chain_rounds=0, rounds=True)
    r = gen(dev, PROMPTS[1], draft, k=3, drafter="model")
    assert r.stats["chain_rounds"] == 0 and not dev.spec_chain_calls



class ClockedRounds(OnAClock, RunsAhead):
    """A device on a clock: a pass of plain decoding costs 1 unit, a round of the draft's (on the device, alone or in a
    chain) 1.2."""

    def __init__(self, inner):
        super().__init__(inner, ahead_max=4, chain_rounds=4, rounds=True)
        self.t = 0.0

    def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
        self.t += n
        return super().decode_ahead(token, start_pos, n, pick, rows, then, stop)

    def spec_round(self, *a, **k):
        self.t += 1.2
        return super().spec_round(*a, **k)

    def spec_chain(self, draft, seq, draft_start, rounds, *a, **k):
        self.t += 1.2 * rounds
        return super().spec_chain(draft, seq, draft_start, rounds, *a, **k)


def test_only_while_it_pays_with_chains(micro):
    """"Only while it pays" (the scheduler may turn speculation off between chains; a hinted chain is taken as
    hinted): the champion's own answer always; a head the champion accepts keeps chains on (its rounds priced at
    their share of the chain's time), a random one is turned off and decodes plainly."""
    from exactspec.decode import generate_async
    champ, ds = models(micro)
    paid = 0
    for name, (draft, _) in ds.items():
        drafter = "head" if "head" in name else "model"
        for prompt in PROMPTS:
            base = gen(champ, prompt, k=0, drafter="none", max_new_tokens=60).token_ids
            dev = ClockedRounds(champ)
            cfg = GenerateConfig(max_new_tokens=60, k=2, drafter=drafter, adaptive=True, temperature=0.0,
                                 head_copy=False)     # (the head alone: copies would make a random head pay)
            got = asyncio.run(generate_async(dev, prompt, cfg, draft=draft, clock=dev.clock))
            assert got.token_ids == base, (name, prompt)
            if name == "oracle_head" and len(dev.spec_chain_calls) >= 3 and got.stats["tau"] > 1.6:
                paid += 1
            if name == "random_head":
                assert got.stats["spec_disabled_rounds"] > 0 and sum(c[2] for c in dev.calls) >= 30, prompt
    assert paid >= 2, paid   # (where its first rounds are rejected the scheduler may turn it off for the answer)


# prompts whose answers meet copies: the n-gram's lookup finds the prompt's 2- and 3-grams again
COPY_PROMPTS = [[7, 8, 9, 10, 7, 8, 9, 10, 7, 8], [3, 9, 27, 81, 43, 3, 9, 27], [10, 11, 12, 13, 14, 15, 16, 17, 18]]


@pytest.mark.parametrize("k", [1, 3])
def test_head_copies_keep_the_answer_and_chains_equal_rounds(micro, k):
    """head_copy: where the n-gram finds a copy its proposals replace the head's first ones. Greedy and coupled
    answers stay the champion's own; the per-forward path (the drafter's propose), one spec_round a submission (the
    host's copy) and chains (spec_chain's copy: the lookup each round on the sequence as it stands) make the same
    rounds, passes and acceptance; and the copies change the acceptance (they are used)."""
    champ, ds = models(micro)
    differs = 0
    for name in ("oracle_head", "random_head"):
        draft, _ = ds[name]
        for prompt in COPY_PROMPTS:
            base = gen(champ, prompt, k=0, drafter="none")
            kw = dict(k=k, drafter="head", head_copy=True)
            plain = gen(champ, prompt, draft, **kw)                                    # the drafter's propose
            one = gen(RunsAhead(champ, ahead_max=4, rounds=True), prompt, draft, **kw)  # spec_round + copy
            dev = RunsAhead(champ, ahead_max=4, chain_rounds=4, rounds=True)
            got = gen(dev, prompt, draft, **kw)                                         # spec_chain + copy
            assert got.token_ids == one.token_ids == plain.token_ids == base.token_ids, (name, k, prompt)
            assert dev.spec_chain_calls and got.stats["chain_rounds"] > 0
            for c in ("target_passes", "rounds", "proposed", "accepted", "acceptance_by_position", "draft_passes"):
                assert got.stats[c] == one.stats[c] == plain.stats[c], (name, k, c)
            without = gen(RunsAhead(champ, ahead_max=4, chain_rounds=4, rounds=True), prompt, draft, k=k,
                          drafter="head", head_copy=False)
            differs += without.stats["accepted"] != got.stats["accepted"]
            for seed in (0, 1):                                                         # coupled, T = 0.8
                cb = gen(champ, prompt, k=0, drafter="none", temperature=0.8, seed=seed)
                cc = gen(RunsAhead(champ, ahead_max=4, rounds=True), prompt, draft, temperature=0.8, seed=seed, **kw)
                assert cc.token_ids == cb.token_ids, (name, k, prompt, seed)
    assert differs > 0


def test_reference_round_and_chain_take_copies(micro):
    """spec_round's copy replaces the first proposals (the draft still fed its own picks: draft_picks); spec_chain's
    copy is that round with the n-gram's lookup on the sequence as it stands."""
    from exactspec.backend import spec_round_by_forwards
    from exactspec.drafters.ngram import NgramDrafter
    champ, ds = models(micro)
    draft, _ = ds["oracle_head"]
    prompt = [7, 8, 9, 10, 7, 8, 9]
    champ.truncate(0)
    champ.forward(prompt[:-1], 0)
    draft.truncate(0)
    r0 = asyncio.run(spec_round_by_forwards(champ, draft, prompt, 0, 3, prompt[-1], len(prompt) - 1, Pick(), False))
    champ.truncate(len(prompt) - 1)
    draft.truncate(0)
    r = asyncio.run(spec_round_by_forwards(champ, draft, prompt, 0, 3, prompt[-1], len(prompt) - 1, Pick(), False,
                                           copy=[10, 7]))
    assert r.proposals == [10, 7, r0.proposals[2]] and r.draft_picks == r0.proposals and r0.draft_picks is None
    with pytest.raises(ValueError, match="exceed k"):
        asyncio.run(spec_round_by_forwards(champ, draft, prompt, 0, 1, prompt[-1], len(prompt) - 1, Pick(), False,
                                           copy=[1, 2]))
    for k in (1, 3):
        champ.truncate(len(prompt) - 1)
        draft.truncate(0)
        draft.forward(prompt[:-1], 0, 1)
        ch = asyncio.run(spec_chain_by_forwards(champ, draft, prompt, len(prompt) - 1, 3, k, Pick(), True,
                                                copy=(2, 3)))
        seq = list(prompt)
        for props, picks, a in zip(ch.proposals, ch.ids, ch.accepted):
            c = NgramDrafter(3, 2).lookup(seq, k)
            assert props[:len(c)] == c and a == accepted_by_picks(props, picks)
            seq += props[:a] + [picks[a]]


def test_head_copies_only_where_the_pick_has_no_q(micro):
    """The drafter's propose: greedy / coupled picks (q None) take the copy first; rejection picks (a q row per
    proposal, drawn given the head's own prefix) keep the head's proposals."""
    from exactspec.drafters.head import HeadDrafter
    from exactspec.drafters.ngram import NgramDrafter
    champ, ds = models(micro)
    draft, _ = ds["random_head"]
    seq = [7, 8, 9, 10, 7, 8, 9]
    champ.truncate(0)
    champ.forward(seq[:-1], 0)
    outs = {}
    for copy in (False, True):
        for q in (None, np.ones(100) / 100):
            draft.truncate(0)
            d = HeadDrafter(draft, copy=copy)
            outs[(copy, q is None)] = asyncio.run(d.propose(seq, 3, lambda row, t, q=q: (int(np.argmax(row)), q)))[0]
    c = NgramDrafter().lookup(seq, 3)
    assert c == [10, 7, 8]
    assert outs[(True, True)] == c and outs[(True, False)] == outs[(False, False)] == outs[(False, True)] != c
