"""The n-gram drafter's rounds made by the device, several a submission (exactspec.backend.ngram_chain), in CPython:
the numpy reference's implementation (each round's proposals are the host drafter's lookup on the sequence as it
stands, its acceptance the picks'), and the decode loop driving it (the champion's own greedy answer, fewer
submissions, EOS and max_new_tokens inside a chain, the continuation hints). The engine's (shaders/chain.wgsl) is
tested against this one in tests/gpu/test_batched_engine.py."""
import asyncio

import numpy as np
import pytest

from exactspec.backend import Chain, Pick, RunsAhead, accepted_by_picks, chain_from_flat, ngram_chain_by_forwards
from exactspec.decode import GenerateConfig, generate
from exactspec.drafters.ngram import NgramDrafter
from exactspec.micro import micro_model, tiny_config
from toy import OnAClock


@pytest.fixture(scope="module")
def micro():
    cfg = tiny_config()
    return cfg, micro_model(cfg, 1)


def repetitive(cfg, seed):
    rng = np.random.default_rng(seed)
    base = rng.integers(0, cfg.vocab_size, size=int(rng.integers(3, 7))).tolist()
    return base * 3 + base[:2]


def gen(model, prompt, **kw):
    return generate(model, prompt, GenerateConfig(**{"adaptive": False, "temperature": 0.0, **kw}))


def test_reference_chain_is_lookup_then_verify(micro):
    """Each round proposes the host drafter's lookup on the sequence as it stands and appends what the picks accept
    and the pick after them: the appended tokens are the champion's greedy answer."""
    cfg, champ = micro
    for seed in range(4):
        prompt = repetitive(cfg, seed)
        want = gen(champ, prompt, max_new_tokens=40, k=0, drafter="none").token_ids
        champ.truncate(0)
        champ.forward(prompt[:-1], 0)
        ch = asyncio.run(ngram_chain_by_forwards(champ, prompt, len(prompt) - 1, 6, 3, Pick(), 2, 3))
        seq = list(prompt)
        for p, ids, a in zip(ch.proposals, ch.ids, ch.accepted):
            assert p == NgramDrafter(3, 2).lookup(seq, 3)
            assert len(ids) == len(p) + 1 and a == accepted_by_picks(p, ids)
            seq += p[:a] + [ids[a]]
        assert seq[len(prompt):] == ch.appended() == want[:len(ch.appended())]
        assert champ.length == len(seq) - 1
        assert sum(ch.accepted) > 0 or seed       # (the repeated prompt gets proposals accepted at least once)


def test_chain_from_flat_checks_the_device():
    ch = chain_from_flat([2, 0], [1, 0], [5, 6], [5, 9, 8, 7], k=3)
    assert ch == Chain([[5, 6], []], [[5, 9, 8], [7]], [1, 0]) and ch.appended() == [5, 9, 7]
    with pytest.raises(ValueError, match="4 proposals, k is 3"):
        chain_from_flat([4], [0], [1, 2, 3, 4], [1, 2, 3, 4, 5], k=3)
    with pytest.raises(ValueError, match="the device accepted 2"):
        chain_from_flat([2], [2], [5, 6], [5, 9, 7], k=3)


@pytest.mark.parametrize("k", [1, 3])
def test_decode_loop_chains_give_the_champions_answer(micro, k):
    """Greedy with the n-gram drafter on a device that offers chains: the champion's own answer, with at most
    ceil(rounds / 4) + a few submissions, every chain but the first hinting the next, and the proposals counted."""
    cfg, champ = micro
    proposed = followed = 0
    for seed in range(5):
        prompt = repetitive(cfg, seed)
        kw = dict(max_new_tokens=37, k=k, drafter="ngram")
        want = gen(champ, prompt, batched=False, **kw)
        dev = RunsAhead(champ, ahead_max=4, chain_rounds=4)
        got = gen(dev, prompt, **kw)
        assert got.token_ids == want.token_ids
        assert dev.chain_calls and not dev.calls           # every round a chain's (k > 0: the scheduler is fixed)
        assert got.stats["submissions"] == len(dev.chain_calls) < got.stats["rounds"]
        pos0 = dev.chain_calls[0][0]
        assert dev.chain_calls[0][3] == 0                  # the answer's first chain hints nothing
        prev = None
        for i, (pos, r, kk, then) in enumerate(dev.chain_calls):
            rem = 37 - (pos - pos0)                        # tokens left to the answer at this call
            if prev and prev[3]:                           # the chain the last one hinted: taken as hinted
                assert (r, kk) == (prev[3], prev[2])
                followed += 1
            else:
                assert kk == min(k, rem - 1) and r == min(4, rem)
            assert then == (min(4, rem - r) if i and rem > r else 0)
            prev = (pos, r, kk, then)
        assert got.stats["target_passes"] == got.stats["rounds"]
        assert got.stats["proposed"] == sum(got.stats["proposed_at"])
        proposed += got.stats["accepted"]
    assert proposed > 0 and followed > 0


def test_chains_propose_at_most_chain_long_k_at_long_positions():
    """From CHAIN_LONG_POS positions on, a chain makes at most CHAIN_LONG_K proposals a round (a continuation keeps its
    chain's k, so none is hinted at the larger k once the next chain may start there: it starts afresh); before it,
    the setting's k; the answer is the champion's either way."""
    from exactspec.decode import CHAIN_LONG_K, CHAIN_LONG_POS
    cfg = tiny_config(seq_len=CHAIN_LONG_POS + 64)
    champ = micro_model(cfg, 1)
    rng = np.random.default_rng(0)
    base = rng.integers(0, cfg.vocab_size, size=5).tolist()
    prompt = (base * (CHAIN_LONG_POS // 5))[:CHAIN_LONG_POS - 12]
    want = gen(champ, prompt, max_new_tokens=40, k=0, drafter="none").token_ids
    dev = RunsAhead(champ, ahead_max=4, chain_rounds=4)
    got = gen(dev, prompt, max_new_tokens=40, k=4, drafter="ngram")
    assert got.token_ids == want
    ks = {}
    prev_then = 0
    for pos, r, kk, then in dev.chain_calls:
        ks.setdefault((pos >= CHAIN_LONG_POS, prev_then > 0), set()).add(kk)
        prev_then = then
    assert ks[(False, False)] == {4}
    assert max(ks[(True, False)]) == CHAIN_LONG_K < 4              # the first chain past it, started afresh
    late = [kk for pos, r, kk, then in dev.chain_calls if pos >= CHAIN_LONG_POS + 4 * 5]
    assert late and max(late) <= CHAIN_LONG_K                     # none at k = 4 past a hinted chain's reach


def test_eos_and_max_tokens_inside_a_chain(micro):
    cfg, champ = micro
    prompt = repetitive(cfg, 1)
    plain = gen(champ, prompt, max_new_tokens=30, k=0, drafter="none").token_ids
    eos = plain[9]
    first = plain.index(eos)
    got = generate(RunsAhead(champ, chain_rounds=4), prompt,
                   GenerateConfig(max_new_tokens=30, k=3, drafter="ngram", adaptive=False), eos_ids=[eos])
    assert got.finish_reason == "eos" and got.token_ids == plain[:first]
    for n in (1, 2, 5, 13):
        got = gen(RunsAhead(champ, chain_rounds=4), prompt, max_new_tokens=n, k=3, drafter="ngram")
        assert got.finish_reason == "length" and got.token_ids == plain[:n]


def test_chains_only_where_they_apply(micro):
    """Sampled answers, other drafters, a device without chains and JSON-free greedy without speculation take their
    own paths (no chain call)."""
    cfg, champ = micro
    prompt = repetitive(cfg, 2)
    for kw in (dict(temperature=0.8, mode="coupled", k=3, drafter="ngram"), dict(k=0, drafter="none"),
               dict(k=3, drafter="ngram", batched=False)):
        dev = RunsAhead(champ, chain_rounds=4)
        gen(dev, prompt, max_new_tokens=12, **kw)
        assert not dev.chain_calls, kw
    dev = RunsAhead(champ, chain_rounds=0)
    assert not dev.offers("ngram_chain")
    gen(dev, prompt, max_new_tokens=12, k=3, drafter="ngram")
    assert not dev.chain_calls


def test_chain_refuses_what_does_not_fit(micro):
    cfg, champ = micro
    champ.truncate(0)
    champ.forward([1, 2, 3], 0)
    with pytest.raises(ValueError, match="len\\(seq\\) - 1"):
        asyncio.run(ngram_chain_by_forwards(champ, [1, 2, 3], 3, 2, 2, Pick(), 2, 3))
    champ.truncate(3)
    with pytest.raises(ValueError, match="exceed seq_len"):
        asyncio.run(ngram_chain_by_forwards(champ, [1, 2, 3, 4], 3, cfg.seq_len, 3, Pick(), 2, 3))


class ClockedChains(OnAClock, RunsAhead):
    """A device on a clock: a pass of plain decoding costs 1 unit, a chain's round 1.1 (its lookup and the rows of
    what it finds); a chain that is not the continuation the chain before it hinted (its `then`) costs `cold` more (the
    round trip a device that runs the next chain while the host confirms this one saves)."""

    def __init__(self, inner, round_cost=1.1, cold=0.0):
        super().__init__(inner, ahead_max=4, chain_rounds=4)
        self.t, self.round_cost, self.cold, self.hint = 0.0, round_cost, cold, 0

    def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
        self.t += n
        self.hint = 0
        return super().decode_ahead(token, start_pos, n, pick, rows, then, stop)

    def ngram_chain(self, seq, start_pos, rounds, *a, **k):
        self.t += self.round_cost * rounds + (0.0 if self.hint == rounds else self.cold)
        self.hint = k.get("then", 0)
        return super().ngram_chain(seq, start_pos, rounds, *a, **k)


def test_only_while_it_pays_prices_chains_per_token():
    """'Only while it pays' with chains: chains from the answer's start (after one plain run that prices plain
    decoding), priced by their time per emitted token against plain decoding's (each chain the device ran as the last
    one's continuation). Where the answer repeats nothing and a chain's round costs more than CHAIN_SLACK plain passes
    (1.2 here, one token each), plain decoding after the first priced chain (the third: the second was hinted before
    the first priced one came back). Where it copies, a chain's rounds emit several tokens each: chains all along.
    Either way the answer is the champion's."""
    from toy import CycleLM, ToyLM
    from exactspec.decode import generate_async

    dev = ClockedChains(ToyLM(1000, seed=3), round_cost=1.2)
    cfg = GenerateConfig(max_new_tokens=120, k=4, drafter="ngram", adaptive=True)
    r = asyncio.run(generate_async(dev, [1, 2, 3], cfg, clock=dev.clock))
    assert r.token_ids == generate(ToyLM(1000, seed=3), [1, 2, 3], GenerateConfig(max_new_tokens=120)).token_ids
    assert len(dev.chain_calls) <= 3 and r.stats["spec_disabled_rounds"] >= 16   # (2-token repeats: rare)
    assert sum(c[2] for c in dev.calls) >= 100                       # plain decoding, run ahead
    dev = ClockedChains(CycleLM(100))
    prompt = [0, 1, 2, 3, 4, 5, 6, 0]
    r = asyncio.run(generate_async(dev, prompt, cfg, clock=dev.clock))
    assert r.token_ids == [(1 + i) % 7 for i in range(120)]
    assert len(dev.calls) <= 2 and r.stats["tau"] > 3                 # one plain round (calibration), then chains


def test_chains_that_start_cold_are_not_priced():
    """A chain that is not the continuation of the one before it (an answer's first; one after a chain that hinted
    none) waits a whole round trip more (`cold` here: 1.6 units on a chain of 4 rounds that cost 4, 1.4 units a token
    where nothing repeats, above CHAIN_SLACK x plain decoding's 1), while chains running as continuations cost what
    plain decoding does. Priced as they run from then on (continuations and copy probes), chains stay on the whole
    answer; had the cold first chain been priced, they would have gone off after it (the H100's chat answers,
    bench/h200/results/2026-12-07e). The answer is the champion's either way."""
    from toy import ToyLM
    from exactspec.decode import generate_async

    dev = ClockedChains(ToyLM(1000, seed=3), round_cost=1.0, cold=1.6)
    cfg = GenerateConfig(max_new_tokens=120, k=4, drafter="ngram", adaptive=True)
    r = asyncio.run(generate_async(dev, [1, 2, 3], cfg, clock=dev.clock))
    assert r.token_ids == generate(ToyLM(1000, seed=3), [1, 2, 3], GenerateConfig(max_new_tokens=120)).token_ids
    assert r.stats["spec_disabled_rounds"] == 0 and sum(c[2] for c in dev.calls) <= 4   # one plain run: calibration
    assert sum(c[1] for c in dev.chain_calls) >= 100


def test_scheduler_chain_choice():
    from exactspec.schedule import SpecScheduler

    from exactspec.schedule import CHAIN_SLACK

    s = SpecScheduler(4, adaptive=True, probe_every=4)
    assert s.choose(4, chain=True) == 0                               # calibrate: plain first
    s.observe(0, 1.0)
    assert not s.will_run_plain(4, chain=True) and s.choose(4, chain=True) == 4   # no chain yet: chains first
    s.observe_chain(1.05 * 4, 4)                                      # nothing found: 1.05 a token, within the slack
    assert CHAIN_SLACK > 1.05 and s.choose(4, chain=True) == 4
    s.observe_chain(1.3 * 4, 4)                                       # 1.175 a token so far: off
    assert s.will_run_plain(4, chain=True)
    got = [s.choose(4, chain=True) for _ in range(8)]
    assert got == [0] * 8 and s.disabled_rounds == 8                  # off, no probes of its own (the decode loop
    s.observe_chain(1.0, 12)                                          # probes one at a copy): it paid, 10.4 s / 20
    assert s.t_chain == pytest.approx(0.52) and s.choose(3, chain=True) == 3   # tokens so far
    s.observe_chain(5.0, 4)                                           # a stretch that copies less: still on
    assert s.choose(4, chain=True) == 4
    forced = SpecScheduler(4)
    assert forced.choose(4, chain=True) == 4 and not forced.will_run_plain(4, chain=True)


def test_a_copy_at_hand_probes_a_chain():
    """Chains off after a first chain that found nothing (the answer's start repeats nothing yet): once the host's
    lookup would find a copy, the next round is a chain again (a probe), which pays, so chains run from then on; the
    probe every probe_every plain rounds alone would come 16 runs ahead later."""
    from toy import CycleLM
    from exactspec.decode import generate_async

    dev = ClockedChains(CycleLM(100))
    cfg = GenerateConfig(max_new_tokens=120, k=4, drafter="ngram", adaptive=True)
    prompt = [10, 20, 30, 3]                               # the cycle 4, 5, 6, 0, 1, 2, 3 repeats from token 8 on
    r = asyncio.run(generate_async(dev, prompt, cfg, clock=dev.clock))
    assert r.token_ids == [(4 + i) % 7 for i in range(120)]
    assert sum(c[2] for c in dev.calls) <= 16 and r.stats["tau"] > 3 and len(dev.chain_calls) >= 2


def test_has_match_is_the_lookups_verdict():
    rng = np.random.default_rng(1)
    for trial in range(400):
        L = int(rng.integers(0, 30))
        seq = rng.integers(0, 6 if trial % 2 else 40, size=L).tolist()
        for lo, hi in ((2, 3), (1, 2), (3, 3)):
            d = NgramDrafter(hi, lo)
            assert d.has_match(seq) == bool(d.lookup(seq, 1)), (seq, lo, hi)


def test_copy_probes_wait_for_a_gap():
    """Where 2-token repeats are everywhere but their continuations seldom are (a 5-token vocabulary, chains priced
    above plain decoding), a copy at hand probes a chain only after CHAIN_PROBE_GAP plain rounds since the last one,
    not every round (each switch costs the device's overlap)."""
    from toy import ToyLM
    from exactspec.decode import CHAIN_PROBE_GAP, generate_async

    lm = ToyLM(5, seed=2)
    dev = ClockedChains(lm, round_cost=2.0)
    cfg = GenerateConfig(max_new_tokens=150, k=4, drafter="ngram", adaptive=True)
    r = asyncio.run(generate_async(dev, [1, 2, 3], cfg, clock=dev.clock))
    assert r.token_ids == generate(ToyLM(5, seed=2), [1, 2, 3], GenerateConfig(max_new_tokens=150)).token_ids
    plain_runs = len(dev.calls)
    assert plain_runs >= 20 and 2 <= len(dev.chain_calls) <= plain_runs // CHAIN_PROBE_GAP + 2


def test_has_match_index_follows_a_growing_sequence():
    rng = np.random.default_rng(4)
    for lo, hi in ((2, 3), (1, 2)):
        d = NgramDrafter(hi, lo)
        seq = rng.integers(0, 9, size=3).tolist()
        for _ in range(120):
            assert d.has_match(seq) == bool(d.lookup(seq, 1)), (seq, lo)
            seq += rng.integers(0, 9, size=int(rng.integers(1, 4))).tolist()
        seq = seq[:20]                                    # shorter (a stop string's cut): rebuilt
        assert d.has_match(seq) == bool(d.lookup(seq, 1))


def test_chains_up_to_the_context_end(micro):
    """Near the end of the context a chain (and the chain it hints) has room for fewer rounds: the answer runs to the
    context's end as the champion alone's does, no call exceeding it."""
    cfg, champ = micro
    base = repetitive(cfg, 3)
    prompt = (base * 40)[:cfg.seq_len - 30]
    want = gen(champ, prompt, max_new_tokens=60, k=0, drafter="none")
    for k in (2, 4):
        dev = RunsAhead(champ, ahead_max=4, chain_rounds=4)
        got = gen(dev, prompt, max_new_tokens=60, k=k, drafter="ngram")
        assert got.finish_reason == want.finish_reason == "length" and got.error is None
        assert got.token_ids == want.token_ids and dev.chain_calls
        for pos, r, kk, then in dev.chain_calls:
            assert pos + (r + then) * (kk + 1) <= cfg.seq_len
