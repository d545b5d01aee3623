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


def simulate_rounds(match: np.ndarray, k: int, max_new: int | None = None, ends_with_eos: bool = False) -> dict:
    """match (N,) bool: draft == champion at each of the N trajectory positions (the final EOS included when the
    answer ended with one). Mirrors exactspec.decode's counters: a round proposes g = min(k, remaining - 1)
    tokens (remaining = max_new - emitted so far), accepts the run of matches, emits one more; the EOS itself is
    not counted as emitted. Returns tau (emitted / target passes), acceptance by position (accepted_at[i] /
    proposed_at[i]), rounds, emitted."""
    match = np.asarray(match, dtype=bool)
    n = len(match)
    if k < 1:
        raise ValueError(f"k must be >= 1, got {k}")
    max_new = n if max_new is None else max_new
    proposed = np.zeros(k, dtype=np.int64)       # (k,)
    accepted = np.zeros(k, dtype=np.int64)       # (k,)
    t = rounds = emitted = 0
    while t < n:
        g = max(0, min(k, max_new - t - 1))
        a = 0
        while a < g and t + a < n and match[t + a]:
            a += 1
        e = min(a + 1, n - t)
        proposed[:g] += 1
        accepted[:a] += 1
        rounds += 1
        emitted += e
        t += e
    if ends_with_eos and emitted:
        emitted -= 1
    return {"tau": emitted / rounds if rounds else 0.0,
            "acceptance_by_position": (accepted / np.maximum(proposed, 1)).tolist(), "rounds": rounds,
            "emitted": emitted}


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
