"""The batched step (exactspec.backend: decode_ahead, spec_round) in the decode loop, on the numpy reference.

The device runs ahead; Python confirms every emitted token from the champion's rows. With the reference's picks
(the decode loop's own), tokens AND pass counts equal the per-forward path; with wrong picks (a device whose picks
disagree) the tokens still equal, only the wasted passes grow."""
from pathlib import Path

import numpy as np
import pytest

from exactspec.backend import Ahead, Pick, Round, RunsAhead, pick_row
from exactspec.decode import AHEAD_WITH_DRAFTER, GenerateConfig, generate
from exactspec.micro import micro_model, tiny_config
from toy import OnAClock

ROOT = Path(__file__).resolve().parents[1]
CHAMPION = ROOT / "static" / "models" / "smollm2-135m-instruct-q4_1.gguf"
DRAFT = ROOT / "static" / "models" / "draft-smollm2-kd.gguf"
COUNTS = ("target_passes", "draft_passes", "rounds", "proposed", "accepted", "acceptance_by_position")


def gen(model, prompt, draft=None, **kw):
    return generate(model, prompt, GenerateConfig(**{"adaptive": False, **kw}), draft=draft)


class Ahead8(RunsAhead):
    """The reference with decode_ahead switched on (a device would say how far it likes to run ahead)."""

    def spec_round(self, draft, *a, **k):
        return self.inner.spec_round(draft, *a, **k)


@pytest.fixture(scope="module")
def micro():
    cfg = tiny_config()
    return cfg, micro_model(cfg, 1), micro_model(cfg, 1), micro_model(cfg, 2)


def prompts(cfg, n=3, seed=3):
    rng = np.random.default_rng(seed)
    return [rng.integers(0, cfg.vocab_size, size=int(rng.integers(1, 9))).tolist() for _ in range(n)]


@pytest.mark.parametrize("temperature,top_p,mode", [(0.0, 1.0, "coupled"), (0.8, 1.0, "coupled"),
                                                     (1.2, 0.8, "coupled"), (0.9, 1.0, "rejection")])
def test_spec_round_same_tokens_and_counts(micro, temperature, top_p, mode):
    cfg, champ, self_draft, other_draft = micro
    for seed, prompt in enumerate(prompts(cfg)):
        for draft in (self_draft, other_draft):
            for k in (1, 3):
                kw = dict(max_new_tokens=18, temperature=temperature, top_p=top_p, seed=seed, mode=mode, k=k,
                          drafter="model")
                plain = gen(champ, prompt, draft, batched=False, **kw)
                batched = gen(champ, prompt, draft, batched=True, **kw)
                assert batched.token_ids == plain.token_ids
                for c in COUNTS:
                    assert batched.stats[c] == plain.stats[c], c
                if mode == "rejection":       # per-forward path: k draft round trips + 1 per round
                    assert batched.stats["submissions"] == plain.stats["submissions"]
                else:                         # one submission per round
                    assert batched.stats["submissions"] == batched.stats["rounds"]
                    assert plain.stats["submissions"] == plain.stats["rounds"] + plain.stats["draft_passes"]


@pytest.mark.parametrize("temperature,top_p", [(0.0, 1.0), (0.7, 1.0), (1.1, 0.85)])
def test_decode_ahead_same_tokens_and_counts(micro, temperature, top_p):
    cfg, champ, _, _ = micro
    for seed, prompt in enumerate(prompts(cfg, seed=5)):
        kw = dict(max_new_tokens=21, temperature=temperature, top_p=top_p, seed=seed, k=0, drafter="none")
        plain = gen(champ, prompt, batched=False, **kw)
        ahead = gen(Ahead8(champ), prompt, batched=True, **kw)
        assert ahead.token_ids == plain.token_ids
        assert ahead.stats["target_passes"] == plain.stats["target_passes"] == len(plain.token_ids)
        assert ahead.stats["submissions"] < plain.stats["submissions"]    # 4, 8, 8, 1 passes per submission
        assert ahead.stats["ahead_passes"] == ahead.stats["target_passes"] + ahead.stats["wasted_passes"]


def continuations(calls):
    """(followed, dropped) of the `then` hints in decode_ahead calls (token, start_pos, n, then): a hint is followed
    when the next call asks for exactly those passes, at the position after the run."""
    followed, dropped = 0, 0
    for (tok, pos, n, then), nxt in zip(calls, calls[1:] + [None]):
        if then:
            if nxt is not None and nxt[1:3] == (pos + n, then):
                followed += 1
            else:
                dropped += 1
    return followed, dropped


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_continuation_hints_are_the_next_calls(micro, temperature):
    """The champion alone hints each run's continuation (decode_ahead's `then`): with every row confirmed the next
    call asks for exactly it (token = the run's last id, at the position after it); a run that ends early (EOS, a
    wrong pick) or the answer's end drops it; the n-gram drafter's empty rounds hint too (below)."""
    cfg, champ, self_draft, _ = micro
    for seed, prompt in enumerate(prompts(cfg, seed=5)):
        kw = dict(max_new_tokens=40, temperature=temperature, seed=seed, k=0, drafter="none")
        dev = Ahead8(champ)
        a = gen(dev, prompt, batched=True, **kw)
        assert a.token_ids == gen(champ, prompt, batched=False, **kw).token_ids
        assert [c[2] for c in dev.calls] == [4, 8, 8, 8, 8, 4]            # (40 tokens: the loop's own sizes)
        assert [c[3] for c in dev.calls] == [0, 8, 8, 8, 4, 0]            # each hint is the next call's size (none
        # after the answer's first run: its tokens go to the user first)
        for (tok, pos, n, then), nxt in zip(dev.calls, dev.calls[1:]):
            assert nxt[1] == pos + n                                      # every row confirmed
        assert continuations(dev.calls) == (4, 0)
    # a wrong pick ends a run early (sampled: Python confirms from the rows): the hint made for that run is dropped,
    # the answer unchanged
    def bad_picker(row, pick, t):
        good = pick_row(row, pick, t)
        return (good + 1) % cfg.vocab_size if t % 7 == 0 else good
    prompt = prompts(cfg, 1, seed=9)[0]
    dev = Ahead8(champ, picker=bad_picker)
    kw = dict(max_new_tokens=40, temperature=0.9, seed=4, k=0, drafter="none")
    assert gen(dev, prompt, batched=True, **kw).token_ids == gen(champ, prompt, batched=False, **kw).token_ids
    followed, dropped = continuations(dev.calls)
    assert dropped > 0 and followed + dropped == sum(1 for c in dev.calls if c[3])
    # with the n-gram drafter, a round that finds nothing runs ahead (at most decode.AHEAD_WITH_DRAFTER passes) and
    # hints the next run: a round that then finds proposals takes the hinted run first (hinting none) and verifies
    # them after it; so, greedy, every hint is followed and the answer and its tokens are those without the batched
    # step
    taken = 0
    for seed, prompt in enumerate(prompts(cfg, 4, seed=5)):
        dev = Ahead8(champ)
        kw = dict(max_new_tokens=40, k=3, drafter="ngram")
        a = gen(dev, prompt, batched=True, **kw)
        assert a.token_ids == gen(champ, prompt, batched=False, **kw).token_ids
        assert dev.calls and all(c[2] <= AHEAD_WITH_DRAFTER for c in dev.calls)
        followed, dropped = continuations(dev.calls)
        assert dropped == 0 and followed == sum(1 for c in dev.calls if c[3])
        # a hinted run taken while the lookup had proposals: no hint of its own, and a verify round after it
        taken += sum(1 for prev, c, nxt in zip(dev.calls, dev.calls[1:], dev.calls[2:] + [None])
                     if prev[3] and not c[3] and (nxt is None or nxt[1] > c[1] + c[2]))
        assert a.stats["proposed"] > 0
    assert taken > 0


def test_wrong_picks_change_nothing_but_waste(micro):
    """A device whose picks are wrong every third position: Python's confirmation from the rows still yields the
    champion's own answer, and the passes fed a wrong token are counted as wasted and rolled back. (Greedy confirms
    from the device's argmax ids, which must be exact: the engine's tests check ids == argmax(rows).)"""
    cfg, champ, self_draft, _ = micro

    def bad_picker(row, pick, t):
        good = pick_row(row, pick, t)
        return (good + 1) % cfg.vocab_size if t % 3 == 0 else good

    for temperature in (0.9, 1.3):
        for seed, prompt in enumerate(prompts(cfg, seed=11)):
            kw = dict(max_new_tokens=20, temperature=temperature, seed=seed, k=0, drafter="none")
            plain = gen(champ, prompt, batched=False, **kw)
            ahead = gen(Ahead8(champ, picker=bad_picker), prompt, batched=True, **kw)
            assert ahead.token_ids == plain.token_ids
            assert ahead.stats["wasted_passes"] > 0
            assert ahead.stats["target_passes"] == plain.stats["target_passes"]


def test_eos_inside_a_run_ahead(micro):
    cfg, champ, _, _ = micro
    prompt = prompts(cfg, 1, seed=2)[0]
    plain = gen(champ, prompt, batched=False, max_new_tokens=20, k=0, drafter="none")
    eos = plain.token_ids[6]
    first = plain.token_ids.index(eos)
    a = generate(Ahead8(champ), prompt, GenerateConfig(max_new_tokens=20, k=0, drafter="none", adaptive=False),
                 eos_ids=[eos])
    assert a.finish_reason == "eos" and a.token_ids == plain.token_ids[:first]
    assert a.stats["target_passes"] == first + 1          # the row that produced EOS was used; the rest wasted


def test_pick_semantics():
    rng = np.random.default_rng(0)
    row = rng.normal(size=64).astype(np.float32)
    row[[5, 9]] = row.max() + 1                            # a tie: the lowest id wins
    assert pick_row(row, Pick(), 0) == 5
    from exactspec.sampling import Rng
    g = Rng(4).gumbel(17, 64)
    assert pick_row(row, Pick(0.5, 4), 17) == int(np.argmax(row.astype(np.float64) / 0.5 + g))


def test_result_types():
    assert Ahead([1, 2], None).ids == [1, 2]
    r = Round([3], [3, 4], None)
    assert r.proposals == [3] and r.ids == [3, 4]


@pytest.mark.slow
@pytest.mark.skipif(not CHAMPION.exists() or not DRAFT.exists(), reason="needs build.py setup")
def test_smollm2_batched_equals_per_forward():
    from exactspec.chat import encode_chat
    from exactspec.reference import ReferenceModel
    from exactspec.tokenizer import Tokenizer
    champ = ReferenceModel.from_file(CHAMPION, max_len=256)
    draft = ReferenceModel.from_file(DRAFT, max_len=256)
    tok = Tokenizer.from_gguf(CHAMPION)
    prompt = encode_chat(tok, [{"role": "user", "content": "Name two planets."}])
    for temperature in (0.0, 0.7):
        kw = dict(max_new_tokens=12, temperature=temperature, seed=1, k=3, drafter="model")
        plain = generate(champ, prompt, GenerateConfig(batched=False, adaptive=False, **kw), draft=draft, eos_ids=[2])
        bat = generate(champ, prompt, GenerateConfig(batched=True, adaptive=False, **kw), draft=draft, eos_ids=[2])
        assert bat.token_ids == plain.token_ids
        for c in COUNTS:
            assert bat.stats[c] == plain.stats[c], c


class NoVerify:
    """The reference without the verify method: the decode loop's per-forward path for host proposals."""

    def __init__(self, inner):
        self.inner, self.config = inner, inner.config

    @property
    def length(self):
        return self.inner.length

    def forward(self, *a, **k):
        return self.inner.forward(*a, **k)

    def truncate(self, n):
        self.inner.truncate(n)


@pytest.mark.parametrize("drafter", ["ngram", "model_stop"])
def test_verify_same_tokens_and_counts(micro, drafter):
    """Greedy rounds whose proposals are made on the host (n-gram; a draft model with the confidence stop) verify
    through `verify` (the picks come back, not the rows): the same tokens and counts as the per-forward path, and
    the readback shrinks to the ids."""
    cfg, champ, self_draft, other_draft = micro
    rng = np.random.default_rng(8)
    base = rng.integers(0, cfg.vocab_size, size=6).tolist()
    for seed, prompt in enumerate([base * 3, base + base[:3]] + prompts(cfg, seed=9)):
        for k in (1, 4):
            kw = dict(max_new_tokens=24, temperature=0.0, seed=seed, k=k, batched=True)
            if drafter == "ngram":
                kw.update(drafter="ngram")
                draft = None
            else:
                kw.update(drafter="model", draft_stop=0.05)
                draft = other_draft
            plain = gen(NoVerify(champ), prompt, draft, **kw)
            ver = gen(champ, prompt, draft, **kw)
            assert ver.token_ids == plain.token_ids
            for c in COUNTS + ("submissions",):
                assert ver.stats[c] == plain.stats[c], c
            if plain.stats["proposed"]:
                assert ver.stats["readback_bytes"] < plain.stats["readback_bytes"]


def test_verify_by_forwards_picks_every_row(micro):
    import asyncio
    from exactspec.backend import verify_by_forwards
    cfg, champ, _, _ = micro
    toks = [3, 1, 4, 1, 5]
    champ.truncate(0)
    rows = np.asarray(champ.forward(toks, 0, len(toks)))
    champ.truncate(0)
    for pick in (Pick(), Pick(0.9, 7)):
        res = asyncio.run(verify_by_forwards(champ, toks, 0, pick, rows=True))
        assert champ.length == len(toks)
        assert np.array_equal(res.rows, rows)
        assert res.ids == [pick_row(rows[i], pick, i + 1) for i in range(len(toks))]
        champ.truncate(0)


class QueuedDevice(OnAClock, Ahead8):
    """A device on a clock: a pass costs 1 unit; a hinted run (decode_ahead's `then`) runs while the loop streams the
    round before it (on_tokens), so taking it costs nothing more inside the call."""

    def __init__(self, inner):
        super().__init__(inner)
        self.t, self.queued = 0.0, 0

    def decode_ahead(self, token, start_pos, n, pick, rows=True, then=0, stop=()):
        if self.queued != n:
            self.t += n
        self.queued = then
        return super().decode_ahead(token, start_pos, n, pick, rows, then, stop)

    def streamed(self, tokens):
        self.t += self.queued


def test_scheduler_times_hinted_runs_from_the_round_before():
    """With the n-gram drafter, 'only while it pays' times a round from the end of the round before it: a hinted run
    the device ran while the loop streamed costs its passes, not nothing (else speculation would look never to pay)."""
    from toy import ToyLM
    import asyncio
    from exactspec.decode import generate_async
    dev = QueuedDevice(ToyLM(1000, seed=3))          # no 2-token repeats in its answer: every round runs ahead
    memory = {}
    cfg = GenerateConfig(max_new_tokens=60, k=4, drafter="ngram", adaptive=True)
    r = asyncio.run(generate_async(dev, [1, 2, 3], cfg, on_tokens=dev.streamed, clock=dev.clock, sched_memory=memory))
    assert r.token_ids == generate(ToyLM(1000, seed=3), [1, 2, 3], GenerateConfig(max_new_tokens=60)).token_ids
    assert r.stats["proposed"] == 0 and continuations(dev.calls)[0] >= 5        # hinted runs were taken
    (state,) = memory.values()
    assert state["t_round"][0] == pytest.approx(1.0, abs=0.05)                # a pass a token, as the device spent


def test_a_probe_set_aside_for_a_hinted_run_is_verified_next():
    """'Only while it pays' off, the n-gram drafter hints runs of 8; a probe (one proposal every 16 rounds) whose round
    takes a hinted run instead is verified in the round after it, not lost (else acceptance would never be measured
    again and speculation would stay off where it pays)."""
    from toy import CycleLM
    import asyncio
    from exactspec.decode import generate_async

    dev = QueuedDevice(CycleLM(100))
    cfg = GenerateConfig(max_new_tokens=200, k=4, drafter="ngram", adaptive=True)
    key = ("ngram", cfg.bridge, cfg.draft_stop, 4, "fixed", "greedy", False)
    memory = {key: {"t_round": {0: 1.0, 1: 5.0, 4: 9.0}, "accept": 0.0}}     # learned: it does not pay
    prompt = [0, 1, 2, 3, 4, 5, 6, 0]
    r = asyncio.run(generate_async(dev, prompt, cfg, on_tokens=dev.streamed, clock=dev.clock, sched_memory=memory))
    assert r.token_ids == [(1 + i) % 7 for i in range(200)]
    assert r.stats["spec_disabled_rounds"] >= 16 and r.stats["proposed"] >= 1 and r.stats["accepted"] >= 1


def test_ngram_acceptance_is_measured_again_in_each_answer():
    """'Only while it pays' with the n-gram drafter: an earlier answer's timings carry over, its acceptance does not
    (the text's, not the models'): after a chat answer that learned 'it does not pay', a repetitive answer speculates
    from its first rounds, as a fresh session does."""
    from toy import CycleLM
    import asyncio
    from exactspec.decode import generate_async

    prompt = [0, 1, 2, 3, 4, 5, 6, 0]
    cfg = GenerateConfig(max_new_tokens=100, k=4, drafter="ngram", adaptive=True)
    key = ("ngram", cfg.bridge, cfg.draft_stop, 4, "fixed", "greedy", False)
    runs = {}
    for name, memory in (("fresh", {}), ("after chat", {key: {"t_round": {0: 1.0, 1: 1.6, 4: 1.9}, "accept": 0.05}})):
        dev = QueuedDevice(CycleLM(100))
        r = asyncio.run(generate_async(dev, prompt, cfg, on_tokens=dev.streamed, clock=dev.clock, sched_memory=memory))
        assert r.token_ids == [(1 + i) % 7 for i in range(100)]
        runs[name] = r.stats
    assert runs["after chat"]["tau"] > 3 and runs["after chat"]["tau"] == pytest.approx(runs["fresh"]["tau"], rel=0.1)


class ClockedDraft(NoVerify):
    """A draft model whose passes cost `cost` units on a QueuedDevice's clock."""

    def __init__(self, inner, dev, cost):
        super().__init__(inner)
        self.dev, self.cost = dev, cost

    def forward(self, tokens, start_pos, n_out=None):
        self.dev.t += self.cost
        return self.inner.forward(tokens, start_pos, n_out)


class QueuedRounds(QueuedDevice):
    """QueuedDevice whose batched rounds (draft passes + verify) cost their passes too (the verify 1 unit)."""

    def spec_round(self, draft, *a, **k):
        self.t += 1.0
        self.queued = 0
        return self.inner.spec_round(draft, *a, **k)


@pytest.mark.parametrize("temperature", [0.0, 0.8])
def test_a_model_drafter_turned_off_runs_as_the_champion_alone(micro, temperature):
    """'Only while it pays' with a draft model the champion seldom agrees with: once the scheduler turns speculation
    off, the runs ahead hint their successors as the champion alone's do (SpecScheduler.will_run_plain), the hints
    are taken, probes still come, and the answer is the champion's own."""
    import asyncio
    from exactspec.decode import generate_async
    cfg, champ, _, other = micro
    for prompt in prompts(cfg, 2, seed=31):
        dev = QueuedRounds(champ)
        kw = dict(max_new_tokens=200, temperature=temperature, seed=5)
        r = asyncio.run(generate_async(dev, prompt, GenerateConfig(k=3, drafter="model", adaptive=True, **kw),
                                       draft=ClockedDraft(other, dev, 0.7), on_tokens=dev.streamed, clock=dev.clock))
        assert r.token_ids == gen(champ, prompt, batched=False, k=0, drafter="none", **kw).token_ids
        assert r.stats["spec_disabled_rounds"] > 0 and r.stats["proposed"] > 3      # off, and probed while off
        followed, dropped = continuations(dev.calls)
        assert followed >= 4 and dropped <= 1, (followed, dropped)
