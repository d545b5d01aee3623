"""Acceptance of a draft along the champion's own trajectory (numpy only).

Greedy and coupled modes accept a proposal exactly when the draft's choice at that position, given the
champion's committed prefix and the position's noise, equals the champion's choice (coupled: same Gumbel noise
g[t, v] for both, greedy: g = 0). A round that starts at position t with k proposals therefore accepts the run of
consecutive matches from t (at most k) and emits one more token from the champion. So one teacher-forced draft
pass over the champion's answer gives the acceptance for every k at once; `simulate_rounds` replays the rounds.
Rejection mode accepts x ~ q with probability min(1, p/q): per position the acceptance probability is
beta_t = sum_v min(p_t(v), q_t(v)) = 1 - TV; `rejection_matches` draws Bernoulli(beta_t) along the champion's
trajectory (an estimate: after an acceptance the real prefix is the accepted draft token, not the champion's).
"""
from __future__ import annotations

import numpy as np

from exactspec.reference import log_softmax


def runs_of(match: np.ndarray) -> np.ndarray:
    """(N,) int: run[t] = how many consecutive positions from t match (a standalone draft's accepted run when a
    round starts at t: its proposals there are teacher-forced, so the first mismatch ends the run)."""
    match = np.asarray(match, dtype=bool)
    run = np.zeros(len(match) + 1, dtype=np.int64)
    for t in range(len(match) - 1, -1, -1):
        run[t] = run[t + 1] + 1 if match[t] else 0
    return run[:-1]


def run_from(props, answer, t: int) -> int:
    """How many of `props` (a round's proposals from position t) the champion's `answer` accepts: the run of
    proposals equal to answer[t], answer[t + 1], ... (greedy)."""
    j = 0
    while j < len(props) and t + j < len(answer) and props[j] == answer[t + j]:
        j += 1
    return j


def lookup_runs(drafter, prompt, answer, k_max: int = 8) -> tuple[np.ndarray, np.ndarray]:
    """A lookup drafter's (exactspec.drafters.ngram) rounds along the champion's answer: (run (N,) int: how many of
    its k_max proposals from each start t are accepted, has (N,) bool: whether it proposed anything there)."""
    run, has = np.zeros(len(answer), dtype=np.int64), np.zeros(len(answer), dtype=bool)
    for t in range(len(answer)):
        props = drafter.lookup(list(prompt) + list(answer[:t]), k_max)
        has[t], run[t] = bool(props), run_from(props, answer, t)
    return run, has


def tau_table(res: dict, names: list, ks, extra=None) -> list[str]:
    """Lines of a per-stratum table of greedy tau, emitted / rounds summed over the stratum's prompts (as bench
    head_acceptance reports it): res {stratum: [row]} with row[(name, k)] = (emitted, rounds, ...); one column
    group per name, one column per k; extra(rows) -> str appends further columns. Ends with all prompts."""
    def tau(rows, d, k):
        return sum(r[(d, k)][0] for r in rows) / sum(r[(d, k)][1] for r in rows)

    def line(label, rows):
        return (f"{label:<18} " + "   ".join(" ".join(f"{tau(rows, d, k):4.2f}" for k in ks) for d in names)
                + (extra(rows) if extra else ""))
    out = [f"{'stratum':<18} " + "   ".join(f"{d:<14}" for d in names)]
    allrows = []
    for stratum, rows in res.items():
        allrows += rows
        out.append(line(stratum, rows))
    out.append(line(f"all ({len(allrows)})", allrows))
    return out


def simulate_rounds(match: np.ndarray, k: int, max_new: int | None = None, ends_with_eos: bool = False) -> dict:
    """match (N,) bool: draft == champion at each of the N trajectory positions (the final EOS included when the
    answer ended with one). See `simulate_runs`."""
    return simulate_runs(runs_of(match), k, max_new, ends_with_eos)


def simulate_runs(run: np.ndarray, k: int, max_new: int | None = None, ends_with_eos: bool = False,
                  schedule: str = "fixed", k_limit: int | None = None, stop_at: np.ndarray | None = None) -> dict:
    """Replay exactspec.decode's rounds along the champion's trajectory of N positions (the final EOS included
    when the answer ended with one), mirroring its counters.

    run (N,): how many proposals a round starting at t gets accepted (a chain draft: its own chain from t compared
    with the champion's tokens; a standalone draft: `runs_of(match)`). A round offers k proposals (the
    scheduler's choice: exactspec.schedule.SpecScheduler with adaptive off, `schedule` 'fixed' or 'additive' with
    limit k_limit), capped at remaining - 1 (remaining = max_new - emitted so far); stop_at (N,) the confidence stop
    (the draft proposes at most stop_at[t] tokens from t; >= 1) cuts it further. It accepts min(run, g), emits one
    more; the EOS itself is not counted as emitted. Returns tau (emitted / target passes), acceptance by position
    (accepted_at[i] / proposed_at[i]), rounds, emitted, proposed, draft_passes (per-forward path: a stopped chain
    computed one row more than it proposed)."""
    from exactspec.schedule import SpecScheduler
    run = np.asarray(run, dtype=np.int64)
    n = len(run)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    max_new = n if max_new is None else max_new
    k_hi = k if schedule == "fixed" else (k_limit or k)
    sched = SpecScheduler(k_hi, adaptive=False, schedule=schedule, k_start=k)
    proposed = np.zeros(k_hi, dtype=np.int64)    # (k_hi,)
    accepted = np.zeros(k_hi, dtype=np.int64)    # (k_hi,)
    t = rounds = emitted = passes = 0
    while t < n:
        kk = sched.choose(max(0, min(k_hi, max_new - t - 1)))
        g = kk if stop_at is None else min(kk, int(stop_at[t]))
        passes += g + (1 if g < kk else 0)
        a = min(int(run[t]), g, n - t)
        e = min(a + 1, n - t)
        proposed[:g] += 1
        accepted[:a] += 1
        sched.observe(g, 0.0, a)
        rounds += 1
        emitted += e
        t += e
    if ends_with_eos and emitted:
        emitted -= 1
    return {"tau": emitted / rounds if rounds else 0.0,
            "acceptance_by_position": (accepted / np.maximum(proposed, 1)).tolist(), "rounds": rounds,
            "emitted": emitted, "proposed": int(proposed.sum()), "draft_passes": int(passes)}


class FeatureSource:
    """The champion's features along one trajectory, with a settable `length` (how many positions the champion
    holds at a round's start): what a draft head reads (exactspec.drafters.head) without re-running the champion."""

    def __init__(self, feats: np.ndarray, config):
        self.feats = np.ascontiguousarray(feats, dtype=np.float32)            # (n_pos, dim)
        self.config = config
        self.length = len(self.feats)

    def feature_rows(self, start: int, stop: int) -> np.ndarray:
        if not 0 <= start <= stop <= self.length:
            raise ValueError(f"feature rows {start}..{stop} outside the {self.length} positions held")
        return self.feats[start:stop]


def head_chains(head, feats: np.ndarray, prompt: list, answer: list, k_max: int, pick, full: bool = True) -> dict:
    """The head's own chain of k_max proposals from every round start along the champion's trajectory, exactly as
    the decode loop drafts it (exactspec.drafters.head: positions before the start from the champion's features,
    then its predicted ones; each proposal fed back).

    feats (>= P + N - 2, dim): the champion's final hidden states at positions 0 .. P + N - 3 at least (prompt P
    tokens, answer: the N trajectory tokens, its EOS included; the row that predicted the last one is never read). pick(row, t) -> token (greedy: argmax; coupled: the position's noise).
    full=False stops a chain at its first mismatch (enough for acceptance; the confidence stop needs full chains).
    Returns run (N,) accepted proposals per start, top (N, k_max) the draft's top probability per chain row
    (nan where not computed), passes (head forwards)."""
    before = head.source
    src = FeatureSource(feats, before.config)
    head.bind(src)
    try:
        return _chains(head, src, prompt, answer, k_max, pick, full)
    finally:
        head.bind(before)                                                     # (its KV is forgotten)


def _chains(head, src, prompt, answer, k_max, pick, full):
    from exactspec.drafters.model import top_probability
    P, N = len(prompt), len(answer)
    run = np.zeros(N, dtype=np.int64)
    top = np.full((N, k_max), np.nan)
    src.length = P - 1
    row = head.forward(prompt, 0, 1)[0]                                       # (vocab,) proposal 1 for start P
    passes = 1
    for i in range(N):
        L = P + i                                                             # the round's start
        src.length = L - 1
        r, tok, matching = row, None, True
        for j in range(k_max):
            if j > 0:
                r = head.forward([tok], L + j - 1, 1)[0]                      # (vocab,)
                passes += 1
            top[i, j] = top_probability(r)
            tok = int(pick(r, L + j))
            matching = matching and i + j < N and tok == answer[i + j]
            run[i] += matching
            if not matching and not full:
                break
        if i + 1 < N:                                                         # restore position L from true features
            head.truncate(L)
            src.length = L
            row = head.forward([answer[i]], L, 1)[0]
            passes += 1
    return {"run": run, "top": top, "passes": passes}


def stop_lengths(top: np.ndarray, threshold: float) -> np.ndarray:
    """(N,) how many proposals the confidence stop lets a chain make: the first row j >= 1 whose top probability
    is below `threshold` ends it (row 0 always proposes); rows not computed (nan) count as stopping."""
    top = np.asarray(top)
    low = ~(top >= threshold)                                                # nan -> stop
    low[:, 0] = False
    first = np.where(low.any(1), low.argmax(1), top.shape[1])
    return first.astype(np.int64)


def beta(p_logits: np.ndarray, q_logits: np.ndarray, temperature: float) -> np.ndarray:
    """(N,) per-position acceptance probability of rejection sampling: sum_v min(p, q) at `temperature`."""
    p = np.exp(log_softmax(np.asarray(p_logits, dtype=np.float64) / temperature))  # (N, vocab)
    q = np.exp(log_softmax(np.asarray(q_logits, dtype=np.float64) / temperature))
    return np.minimum(p, q).sum(-1)


def rejection_tau(b: np.ndarray, k: int, draws: int, rng: np.random.Generator, max_new: int | None = None,
                  ends_with_eos: bool = False) -> dict:
    """Monte Carlo of `simulate_rounds` with match_t ~ Bernoulli(beta_t)."""
    taus, acc = [], np.zeros(k)
    for _ in range(draws):
        r = simulate_rounds(rng.random(len(b)) < b, k, max_new, ends_with_eos)
        taus.append(r["tau"])
        acc += np.asarray(r["acceptance_by_position"])
    return {"tau": float(np.mean(taus)), "acceptance_by_position": (acc / draws).tolist()}
