"""Exact verifiers: rejection (Leviathan et al. 2022, Algorithm 1), coupled (Gumbel, position-keyed) and greedy.

Names follow the paper: p = target (champion) distributions, q = draft distributions, gamma = number of proposals
(k elsewhere in ExactSpec), p_prime = the residual distribution norm(max(0, p - q)).

Departures from Algorithm 1, each needed for exactness or robustness:
1. q is the distribution the proposal was ACTUALLY sampled from (the draft's declared distribution, after its
   temperature / top-k / top-p). Never "force acceptance" when q(x) underflows: that biases the output.
2. The acceptance ratio is computed as p(x)/q(x) with q(x) = 0 treated as ratio = +inf when p(x) > 0 (a proposal with
   q(x) = 0 cannot have been sampled from q, e.g. a point-mass n-gram draft is always q(x) = 1) and as 0 when
   p(x) = 0: a token the target forbids is never emitted.
3. The residual p_prime is built from the already-declared p and q; it is NOT re-tempered or re-filtered.
4. If p_prime has no mass (p <= q everywhere, which can only happen when p == q up to rounding, and then a rejection
   has probability 0), we sample from p itself.
5. Randomness is passed in as explicit uniforms keyed by position, so the same seed gives the same answer however the
   positions were grouped into rounds.
"""
from __future__ import annotations

import numpy as np

from .sampling import STREAM_ACCEPT, STREAM_SAMPLE, Rng, sample_index


def accepted_prefix(
    p: np.ndarray,          # (B, gamma+1, vocab) target distributions
    q: np.ndarray,          # (B, gamma, vocab) draft distributions the proposals were sampled from
    proposals: np.ndarray,  # (B, gamma) int
    u_accept: np.ndarray,   # (B, gamma) uniforms in (0, 1)
) -> np.ndarray:
    """(B,) int64: how many leading proposals pass the test u_i < min(1, p(x_i) / q(x_i))."""
    B, g1, V = p.shape
    gamma = g1 - 1
    if gamma == 0:
        return np.zeros(B, dtype=np.int64)
    px = np.take_along_axis(p[:, :gamma, :], proposals[..., None], axis=2)[..., 0]  # (B, gamma)
    qx = np.take_along_axis(q, proposals[..., None], axis=2)[..., 0]  # (B, gamma)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(qx > 0, px / np.where(qx > 0, qx, 1.0), np.where(px > 0, np.inf, 0.0))  # departure 2
    accepted = np.asarray(u_accept, dtype=np.float64).reshape(B, gamma) < np.minimum(1.0, ratio)
    return np.cumprod(accepted, axis=1).sum(axis=1).astype(np.int64)


def final_distribution(p: np.ndarray, q: np.ndarray, n_acc: np.ndarray) -> np.ndarray:
    """(B, vocab) unnormalised distribution of the token after the accepted prefix.

    p_prime = max(0, p - q) at the first rejected position (departures 3, 4), or p at gamma+1 when all passed.
    """
    B, g1, V = p.shape
    gamma = g1 - 1
    rows = np.arange(B)
    p_row = p[rows, n_acc]  # (B, vocab)
    if gamma == 0:
        return p_row
    rejected = n_acc < gamma
    q_row = np.where(rejected[:, None], q[rows, np.minimum(n_acc, gamma - 1)], 0.0)  # (B, vocab)
    p_prime = np.maximum(0.0, p_row - q_row)
    empty = p_prime.sum(axis=1) <= 0
    p_prime[empty] = p_row[empty]
    return p_prime


def rejection_batch(
    p: np.ndarray,          # (B, gamma+1, vocab) target distributions at the gamma+1 positions
    q: np.ndarray,          # (B, gamma, vocab) draft distributions the proposals were sampled from
    proposals: np.ndarray,  # (B, gamma) int proposals x_1..x_gamma
    u_accept: np.ndarray,   # (B, gamma) uniforms in (0, 1) for the acceptance tests
    u_final: np.ndarray,    # (B,) uniform in (0, 1) for the residual or bonus sample
) -> tuple[np.ndarray, np.ndarray]:
    """Vectorised Algorithm 1 over B independent rounds.

    Returns (out (B, gamma+1) int64 padded with -1, n_out (B,) int64): the accepted prefix followed by one token
    drawn from p_prime (first rejection) or from p at gamma+1 (all accepted).
    """
    p = np.asarray(p, dtype=np.float64)
    B, g1, V = p.shape
    gamma = g1 - 1
    q = np.asarray(q, dtype=np.float64).reshape(B, gamma, V)
    proposals = np.asarray(proposals, dtype=np.int64).reshape(B, gamma)
    n_acc = accepted_prefix(p, q, proposals, u_accept)  # (B,)
    final = sample_index(final_distribution(p, q, n_acc), np.asarray(u_final, dtype=np.float64).reshape(B))  # (B,)
    out = np.full((B, gamma + 1), -1, dtype=np.int64)
    for i in range(gamma):
        keep = n_acc > i
        out[keep, i] = proposals[keep, i]
    out[np.arange(B), n_acc] = final
    return out, n_acc + 1


def rejection(p_rows: np.ndarray, q_rows: np.ndarray, proposals, rng: Rng, t0: int = 0) -> list[int]:
    """One round of rejection-mode verification.

    p_rows (gamma+1, vocab) champion distributions, q_rows (gamma, vocab) draft distributions, proposals (gamma,) ids.
    rng draws the acceptance uniform of proposal i from (STREAM_ACCEPT, t0 + i) and the final sample's uniform from
    (STREAM_SAMPLE, t0 + n_accepted): the same stream a non-speculative step at that position uses. Positions never
    repeat across rounds for consumed draws, so every draw is fresh.
    Returns the emitted tokens: the accepted prefix, then the residual correction or the bonus token.
    """
    p = np.asarray(p_rows, dtype=np.float64)[None]  # (1, gamma+1, vocab)
    gamma = p.shape[1] - 1
    V = p.shape[2]
    props = np.asarray(list(proposals), dtype=np.int64).reshape(1, gamma)
    if gamma > 0 and ((props < 0) | (props >= V)).any():
        raise ValueError(f"proposal id out of range 0..{V - 1}: {props[0].tolist()}")
    for i, row in enumerate(p[0]):
        if not np.isfinite(row).all() or row.sum() <= 0:
            raise ValueError(f"target distribution at row {i} has no mass (every token masked?)")
    q = np.asarray(q_rows, dtype=np.float64).reshape(1, gamma, V)  # (1, gamma, vocab)
    u_acc = np.array([[rng.uniform(STREAM_ACCEPT, t0 + i) for i in range(gamma)]], dtype=np.float64)  # (1, gamma)
    n_acc = accepted_prefix(p, q, props, u_acc)  # (1,)
    m = int(n_acc[0])
    final = sample_index(final_distribution(p, q, n_acc)[0], rng.uniform(STREAM_SAMPLE, t0 + m))
    return [int(x) for x in props[0, :m]] + [int(final)]


def accept_while_equal(proposals, token_at) -> list[int]:
    """Coupled and greedy verification, one row at a time: token_at(i) is the champion's own token at row i
    (argmax(z_i + g_i), or argmax(z_i) for greedy); proposals are accepted while they equal it; at the first mismatch
    the champion's token is emitted, and if all match, the bonus token of row gamma. Only the rows up to the first
    mismatch are looked at. Same result as `coupled` (tests/test_verify.py checks it)."""
    out: list[int] = []
    props = list(proposals)
    for i in range(len(props) + 1):
        tok = int(token_at(i))
        out.append(tok)
        if i == len(props) or props[i] != tok:
            break
    return out


def coupled(z_rows: np.ndarray, proposals, noise_rows: np.ndarray | None) -> list[int]:
    """Coupled (Gumbel-max) verification; greedy when noise_rows is None.

    z_rows (gamma+1, vocab) the champion's scaled logits (logits / T, -inf outside the declared support);
    noise_rows (gamma+1, vocab) g[t0 + i, :] for the same positions. The champion's token at row i is
    argmax(z_i + g_i) (lowest id on ties). Proposals are accepted while they equal it; at the first mismatch the
    champion's token is emitted; if all match, the bonus argmax at row gamma. The emitted tokens are exactly what the
    champion alone would produce with the same noise.
    """
    z_rows = np.asarray(z_rows, dtype=np.float64)
    gamma = z_rows.shape[0] - 1
    props = list(proposals)
    if len(props) != gamma:
        raise ValueError(f"{len(props)} proposals for {gamma + 1} target rows")
    scores = z_rows if noise_rows is None else z_rows + np.asarray(noise_rows, dtype=np.float64)  # (gamma+1, vocab)
    best = np.argmax(scores, axis=1)  # (gamma+1,)
    out: list[int] = []
    for i in range(gamma + 1):
        tok = int(best[i])
        out.append(tok)
        if i == gamma or props[i] != tok:
            break
    return out


def greedy(z_rows: np.ndarray, proposals) -> list[int]:
    """Greedy verification: coupled with zero noise. Consumes no randomness."""
    return coupled(z_rows, proposals, None)
