"""Decode loop: speculation changes nothing (coupled/greedy), KV transactions, EOS, limits, cancel, faults."""
import asyncio

import numpy as np
import pytest

from exactspec.decode import GenerateConfig, generate, generate_async
from toy import CycleLM, ToyLM

V = 100


def run(champion, prompt, draft=None, **kw):
    cfg = GenerateConfig(**{"adaptive": False, **kw})   # fixed k: the tests count passes
    return generate(champion, prompt, cfg, draft=draft)


def prompts():
    rng = np.random.default_rng(7)
    return [list(rng.integers(0, V, size=n)) for n in (1, 2, 5, 17)]


@pytest.mark.parametrize("temperature,top_k,top_p", [(0.0, 0, 1.0), (1.0, 0, 1.0), (0.7, 0, 0.9), (1.3, 20, 1.0), (0.5, 5, 0.8)])
@pytest.mark.parametrize("drafter,blend", [("model", (1, 0.5)), ("model", (1, 0.0)), ("model", (5, 1.0)), ("ngram", None)])
def test_coupled_speculation_changes_nothing(temperature, top_k, top_p, drafter, blend):
    for seed in range(4):
        for prompt in prompts():
            base = run(ToyLM(V, seed=0), prompt, max_new_tokens=24, temperature=temperature, top_k=top_k,
                       top_p=top_p, seed=seed, mode="coupled", k=0, drafter="none")
            for k in (1, 3, 5):
                draft = ToyLM(V, seed=0, blend=blend) if drafter == "model" else None
                spec = run(ToyLM(V, seed=0), prompt, draft=draft, max_new_tokens=24, temperature=temperature,
                           top_k=top_k, top_p=top_p, seed=seed, mode="coupled", k=k, drafter=drafter)
                assert spec.token_ids == base.token_ids, (seed, k, prompt)
                assert len(spec.token_ids) == 24


def test_self_draft_accepts_everything():
    res = run(ToyLM(V, seed=0), [1, 2, 3], draft=ToyLM(V, seed=0), max_new_tokens=40, k=4, drafter="model")
    st = res.stats
    assert st["acceptance_by_position"] == [1.0] * 4
    assert st["tau"] == pytest.approx(5.0)
    assert st["target_passes"] == 8 and st["draft_passes"] == 32
    # sampled coupled: the draft's argmax(z + g) equals the champion's, so it is accepted too
    res = run(ToyLM(V, seed=0), [1, 2, 3], draft=ToyLM(V, seed=0), max_new_tokens=40, k=4, drafter="model",
              temperature=0.9, seed=3)
    assert res.stats["acceptance_by_position"] == [1.0] * 4


def test_unrelated_draft_still_exact_and_counts():
    base = run(ToyLM(V, seed=0), [4, 5], max_new_tokens=30)
    res = run(ToyLM(V, seed=0), [4, 5], draft=ToyLM(V, seed=99), max_new_tokens=30, k=4, drafter="model")
    assert res.token_ids == base.token_ids
    assert res.stats["tau"] < 1.5
    assert res.stats["draft_passes"] >= 3 * res.stats["target_passes"]


@pytest.mark.parametrize("k", [1, 2, 3, 4, 6])
def test_injected_rejection_every_position_kv_invariants(k):
    champion = ToyLM(V, seed=0)
    greedy = run(ToyLM(V, seed=0), [9, 8, 7], max_new_tokens=30).token_ids
    for bad in range(k):
        champion = ToyLM(V, seed=0)
        draft = ToyLM(V, seed=0)
        seen = []

        class Flip:
            """Wraps the draft: its row for proposal index `bad` prefers a wrong token."""
            config = draft.config

            @property
            def length(self):
                return draft.length

            def forward(self, tokens, start_pos, n_out=None):
                out = draft.forward(tokens, start_pos, n_out).copy()
                # the proposal index within the round = tokens already drafted past the committed sequence
                idx = start_pos + len(tokens) - 1 - (champion.length)
                if idx == bad:
                    top = int(np.argmax(out[-1]))
                    out[-1, top] = -1e9
                return out

            def truncate(self, n):
                draft.truncate(n)

        def on_tokens(toks):
            seen.append((list(toks), champion.length, draft.length))

        res = generate(champion, [9, 8, 7], GenerateConfig(max_new_tokens=30, k=k, drafter="model"),
                       draft=Flip(), on_tokens=on_tokens)
        assert res.token_ids == greedy
        committed = 3
        for toks, c_len, d_len in seen:
            committed += len(toks)
            assert c_len == committed - 1, "champion KV must hold every committed token but the last"
            assert d_len <= committed - 1, "draft KV never holds rejected proposals"
        acc = res.stats["acceptance_by_position"]
        assert acc[bad] == 0.0 and all(a == 1.0 for a in acc[:bad])


def test_eos_inside_proposals_and_max_new_tokens_mid_proposal():
    base = run(ToyLM(V, seed=0), [1, 2], max_new_tokens=40).token_ids
    eos = base[13]
    first = base.index(eos)
    res = generate(ToyLM(V, seed=0), [1, 2], GenerateConfig(max_new_tokens=40, k=4, drafter="model"),
                   draft=ToyLM(V, seed=0), eos_ids=[eos])
    assert res.finish_reason == "eos" and res.token_ids == base[:first]
    for m in (1, 2, 3, 7, 11):
        r = run(ToyLM(V, seed=0), [1, 2], draft=ToyLM(V, seed=0), max_new_tokens=m, k=4, drafter="model")
        assert r.token_ids == base[:m] and r.finish_reason == "length"


@pytest.mark.parametrize("where", [1, 5, 6, 13])
def test_acceptance_counters_stop_at_an_accepted_eos(where):
    """A perfect draft keeps proposing past the EOS, and the champion's rows there agree with it: the counters count
    the proposals up to the EOS only, as the acceptance simulation of the head bench (simulate_runs) replays them."""
    from exactspec_train.accept import simulate_runs

    base = run(ToyLM(V, seed=0), [1, 2], max_new_tokens=40).token_ids
    eos = base[where]
    first = base.index(eos)
    res = generate(ToyLM(V, seed=0), [1, 2], GenerateConfig(max_new_tokens=40, k=4, drafter="model", adaptive=False),
                   draft=ToyLM(V, seed=0), eos_ids=[eos])
    assert res.token_ids == base[:first]
    n = first + 1                                    # the trajectory with its EOS
    sim = simulate_runs(np.full(n, 99), 4, max_new=40, ends_with_eos=True)
    s = res.stats
    assert (s["rounds"], s["proposed"]) == (sim["rounds"], sim["proposed"])
    assert s["acceptance_by_position"] == pytest.approx(sim["acceptance_by_position"])
    assert s["accepted"] <= n - s["rounds"] + 1      # none past the EOS (which may itself be an accepted proposal)


def test_k0_is_plain_decoding():
    champion = ToyLM(V, seed=0)
    res = run(champion, [3, 1, 4, 1, 5], max_new_tokens=10, k=0, drafter="model", draft=ToyLM(V, seed=0))
    assert res.stats["target_passes"] == 10 and res.stats["draft_passes"] == 0
    assert all(n == 1 for n, _ in champion.forward_calls[1:])


def test_cancel_keeps_committed_prefix():
    base = run(ToyLM(V, seed=0), [1], max_new_tokens=40).token_ids
    got = []
    res = generate(ToyLM(V, seed=0), [1], GenerateConfig(max_new_tokens=40, k=3, drafter="model"),
                   draft=ToyLM(V, seed=0, blend=(2, 0.5)), on_tokens=got.extend, should_cancel=lambda: len(got) >= 9)
    assert res.finish_reason == "cancelled"
    assert res.token_ids == got == base[: len(got)]


def test_backend_fault_returns_committed_prefix():
    base = run(ToyLM(V, seed=0), [1, 2], max_new_tokens=30).token_ids
    got = []
    res = generate(ToyLM(V, seed=0, fail_at_pass=5), [1, 2], GenerateConfig(max_new_tokens=30, k=2, drafter="model"),
                   draft=ToyLM(V, seed=0), on_tokens=got.extend)
    assert res.finish_reason == "error" and "device lost" in res.error
    assert res.token_ids == got == base[: len(got)] and len(got) > 0


def test_async_backend_results_are_awaited():
    class AsyncToy(ToyLM):
        def forward(self, tokens, start_pos, n_out=None):
            out = super().forward(tokens, start_pos, n_out)

            async def later():
                await asyncio.sleep(0)
                return out
            return later()

    base = run(ToyLM(V, seed=0), [5, 6], max_new_tokens=12, temperature=0.8, seed=1).token_ids
    res = asyncio.run(generate_async(AsyncToy(V, seed=0), [5, 6],
                                     GenerateConfig(max_new_tokens=12, k=3, drafter="model", temperature=0.8, seed=1),
                                     draft=AsyncToy(V, seed=0, blend=(3, 0.3))))
    assert res.token_ids == base


def test_context_limit_and_bad_input():
    with pytest.raises(ValueError, match="context"):
        run(ToyLM(V, seed=0, seq_len=16), list(range(16)), max_new_tokens=4)
    res = run(ToyLM(V, seed=0, seq_len=16), list(range(10)), max_new_tokens=50, k=4, drafter="ngram")
    assert len(res.token_ids) == 6 and res.finish_reason == "length"
    with pytest.raises(ValueError, match="out of range"):
        run(ToyLM(V, seed=0), [V + 5], max_new_tokens=4)
    with pytest.raises(ValueError, match="empty"):
        run(ToyLM(V, seed=0), [], max_new_tokens=4)
    for bad in (dict(k=-1), dict(mode="fast"), dict(drafter="x"), dict(temperature=-1), dict(top_p=0),
                dict(top_k=1.5), dict(max_new_tokens=0), dict(seed=-3)):
        with pytest.raises(ValueError):
            run(ToyLM(V, seed=0), [1], **bad)
    with pytest.raises(ValueError, match="vocab"):
        run(ToyLM(V, seed=0), [1], draft=ToyLM(V + 1, seed=0), drafter="model", k=2)


def test_ngram_drafter_accepts_repetition():
    # a champion that repeats a cycle: n-gram lookup predicts it perfectly once it has been seen
    res = run(CycleLM(V), [0, 1, 2, 3, 4, 5, 6, 0], max_new_tokens=30, k=4, drafter="ngram")
    assert res.token_ids == [(1 + i) % 7 for i in range(30)]
    assert res.stats["tau"] > 4.0


def test_rejection_mode_speculative_matches_distribution_of_plain():
    # first three tokens' joint distribution, plain vs speculative, over many seeds (exactness in distribution)
    from collections import Counter
    Vs = 6
    prompt = [1]
    plain, spec = Counter(), Counter()
    for seed in range(3000):
        a = run(ToyLM(Vs, seed=0, scale=1.0), prompt, max_new_tokens=2, temperature=1.0, seed=seed, mode="rejection")
        b = run(ToyLM(Vs, seed=0, scale=1.0), prompt, draft=ToyLM(Vs, seed=0, scale=1.0, blend=(4, 0.6)),
                max_new_tokens=2, temperature=1.0, seed=seed, mode="rejection", k=2, drafter="model")
        plain[tuple(a.token_ids)] += 1
        spec[tuple(b.token_ids)] += 1
    # exact target: product of the toy's conditionals
    toy = ToyLM(Vs, seed=0, scale=1.0)
    exact = {}
    for x1 in range(Vs):
        p1 = np.exp(toy.row([1]).astype(np.float64)); p1 /= p1.sum()
        p2 = np.exp(toy.row([1, x1]).astype(np.float64)); p2 /= p2.sum()
        for x2 in range(Vs):
            exact[(x1, x2)] = p1[x1] * p2[x2]
    from scipy.stats import chisquare
    keys = sorted(exact)
    for counts in (plain, spec):
        obs = np.array([counts[k] for k in keys], float)
        expd = np.array([exact[k] for k in keys]) * obs.sum()
        assert chisquare(obs, expd).pvalue > 1e-3


def test_kv_reuse_across_turns_is_exact():
    from exactspec.kv import TrackedCache
    champ, draft = TrackedCache(ToyLM(V, seed=0)), TrackedCache(ToyLM(V, seed=0, blend=(2, 0.4)))
    turn1 = [1, 2, 3, 4]
    cfg = GenerateConfig(max_new_tokens=15, k=3, drafter="model", temperature=0.9, seed=4)
    r1 = generate(champ, turn1, cfg, draft=draft)
    assert r1.stats["reused_prefix_tokens"] == 0
    turn2 = turn1 + r1.token_ids + [7, 8, 9]
    r2 = generate(champ, turn2, cfg, draft=draft)
    fresh = generate(ToyLM(V, seed=0), turn2, cfg, draft=ToyLM(V, seed=0, blend=(2, 0.4)))
    assert r2.token_ids == fresh.token_ids
    assert r2.stats["reused_prefix_tokens"] >= len(turn1) + len(r1.token_ids) - 1
    # the prefill fed only the new part
    assert champ.backend.forward_calls[len(champ.backend.forward_calls) - r2.stats["target_passes"] - 1][0] <= 4
    # an edited history reuses only the common part and stays exact
    turn3 = [1, 2, 5] + r1.token_ids
    r3 = generate(champ, turn3, cfg, draft=draft)
    assert r3.stats["reused_prefix_tokens"] == 2
    plain = GenerateConfig(max_new_tokens=15, temperature=0.9, seed=4)
    assert r3.token_ids == generate(ToyLM(V, seed=0), turn3, plain).token_ids


def test_fault_invalidates_tracked_cache():
    from exactspec.kv import TrackedCache
    champ = TrackedCache(ToyLM(V, seed=0, fail_at_pass=3))
    r = generate(champ, [1, 2, 3], GenerateConfig(max_new_tokens=10))
    assert r.finish_reason == "error"
    assert len(champ.tokens) == champ.length
    champ.backend.fail_at_pass = None
    r2 = generate(champ, [1, 2, 3], GenerateConfig(max_new_tokens=10))
    assert r2.token_ids == generate(ToyLM(V, seed=0), [1, 2, 3], GenerateConfig(max_new_tokens=10)).token_ids


def test_the_adaptive_scheduler_remembers_between_answers():
    """With `sched_memory` the next answer's scheduler starts from what the last one learned: where speculation does
    not pay (every row of a verify costs a full pass here, the draft is a stranger) the second answer neither
    calibrates nor opens with a k-proposal round, so it proposes less; the tokens are the champion's either way."""
    from toy import CycleLM, ToyLM
    t = [0.0]

    class Timed(ToyLM):
        def __init__(self, cost, **kw):
            super().__init__(**kw)
            self.cost = cost

        def forward(self, tokens, start_pos, n_out=None):
            t[0] += self.cost * max(1, n_out or 1)          # a CPU: every row costs
            return super().forward(tokens, start_pos, n_out)

    V = 100
    cfg = GenerateConfig(max_new_tokens=24, k=4, drafter="model", adaptive=True)
    mem: dict = {}
    runs = []
    for _ in range(2):
        runs.append(generate(Timed(1.0, vocab_size=V, seed=0), [1, 2], cfg, draft=Timed(0.5, vocab_size=V, seed=9),
                             clock=lambda: t[0], sched_memory=mem))
    plain = generate(ToyLM(V, seed=0), [1, 2], GenerateConfig(max_new_tokens=24, drafter="none"))
    assert runs[0].token_ids == runs[1].token_ids == plain.token_ids
    assert len(mem) == 1 and 0 in next(iter(mem.values()))["t_round"]
    assert runs[1].stats["proposed"] < runs[0].stats["proposed"]
    assert runs[1].stats["spec_disabled_rounds"] > runs[0].stats["spec_disabled_rounds"]


def test_lookup_runs_replay_the_ngram_drafters_rounds():
    """exactspec_train.accept's helpers of the acceptance simulations (bench/results/{head,ngram}/*_sim.py): a lookup
    drafter's run from each start, and the per-stratum tau table (emitted / rounds over the stratum's prompts)."""
    from exactspec.drafters.ngram import NgramDrafter
    from exactspec_train.accept import lookup_runs, run_from, tau_table
    prompt, answer = [5, 6, 7, 8, 9, 5, 6], [7, 8, 1, 5, 6, 7, 3]
    run, has = lookup_runs(NgramDrafter(), prompt, answer, k_max=4)
    # t = 0: (5, 6) continues 7, 8, 9, 5 (7, 8 accepted); t = 2: (6, 7, 8) continues 9 (rejected: 1);
    # t = 3: (8, 1) unseen, and one token is too short a match: no proposal
    assert run.tolist()[:4] == [2, 1, 0, 0] and has.tolist()[:4] == [True, True, True, False]
    assert run_from([7, 8, 9], answer, 0) == 2 and run_from([], answer, 0) == 0 and run_from([3, 4], answer, 6) == 1
    res = {"a": [{("d", 1): (6, 4)}, {("d", 1): (3, 2)}], "b": [{("d", 1): (5, 5)}]}
    lines = tau_table(res, ["d"], (1,), extra=lambda rows: f" n={len(rows)}")
    assert lines[1].split() == ["a", "1.50", "n=2"] and lines[2].split() == ["b", "1.00", "n=1"]
    assert lines[3].split() == ["all", "(3)", "1.27", "n=3"]
