"""Monte Carlo check of rejection-mode exactness on synthetic (p, q) pairs (shared by tests/test_verify.py).

    python build.py bench montecarlo [--samples N]

For every pair: proposals drawn from q, verified by exactspec.verify.rejection_batch; prints the chi-square p-value of
the emitted token's counts against p, the total-variation distance to p, and the acceptance rate (vs 1 - TV(p, q),
the maximum any exact scheme can reach).
"""
from __future__ import annotations

import argparse

import numpy as np

from exactspec import verify
from exactspec.sampling import sample_index


def norm(x):
    x = np.asarray(x, float)
    return x / x.sum()


def synthetic_pairs() -> dict[str, tuple[np.ndarray, np.ndarray]]:
    """22 (p, q) pairs on a 6-token vocabulary covering the edge cases."""
    r = np.random.default_rng(12345)
    V = 6
    pairs = {
        "disjoint": (norm([1, 2, 3, 0, 0, 0]), norm([0, 0, 0, 1, 1, 1])),
        "q_zeros": (norm([1, 1, 1, 1, 1, 1]), norm([5, 0, 1, 0, 2, 0])),
        "p_masked": (norm([0, 3, 0, 1, 0, 2]), norm([1, 1, 1, 1, 1, 1])),
        "identical": (norm([1, 2, 3, 4, 5, 6]), norm([1, 2, 3, 4, 5, 6])),
        "near_identical": (norm([1, 2, 3, 4, 5, 6]), norm([1.01, 2, 2.98, 4, 5.02, 6])),
        "peaked_p": (norm([1e-4, 1e-4, 1, 1e-4, 1e-4, 1e-4]), norm([1, 1, 1, 1, 1, 1])),
        "peaked_q": (norm([1, 1, 1, 1, 1, 1]), norm([1e-4, 1e-4, 1e-4, 1e-4, 1, 1e-4])),
        "flat_flat": (norm(np.ones(V)), norm(np.ones(V))),
        "point_p": (norm([0, 0, 0, 1, 0, 0]), norm([1, 2, 3, 4, 5, 6])),
        "point_q_hit": (norm([1, 2, 3, 4, 5, 6]), norm([0, 0, 0, 0, 0, 1])),
        "point_q_miss": (norm([1, 2, 3, 4, 5, 0]), norm([0, 0, 0, 0, 0, 1])),
        "q_underflow": (norm([1, 1, 1, 1, 1, 1]), norm([1, 1e-300, 1, 1, 1, 1])),
        "opposite": (norm([6, 5, 4, 3, 2, 1]), norm([1, 2, 3, 4, 5, 6])),
        "two_tokens": (norm([0.3, 0.7, 0, 0, 0, 0]), norm([0.7, 0.3, 0, 0, 0, 0])),
    }
    for i in range(8):
        a = r.dirichlet(np.full(V, 0.3 + i * 0.3))
        b = r.dirichlet(np.full(V, 0.5))
        if i % 2:
            b[r.integers(V)] = 0
            b = norm(b)
        pairs[f"dirichlet_{i}"] = (a, b)
    return pairs


def first_token_counts(p, q, n: int, gen: np.random.Generator, chunk: int = 250_000):
    """Counts (vocab,) of the first emitted token over n one-proposal rounds, and the number of acceptances."""
    V = p.size
    counts = np.zeros(V)
    accepted = 0
    done = 0
    while done < n:
        b = min(chunk, n - done)
        x = sample_index(np.broadcast_to(q, (b, V)), gen.random(b))  # (b,) proposals drawn from q
        P = np.broadcast_to(np.stack([p, p]), (b, 2, V))  # (b, 2, vocab)
        Q = np.broadcast_to(q, (b, 1, V))  # (b, 1, vocab)
        out, n_out = verify.rejection_batch(P, Q, x[:, None], gen.random((b, 1)), gen.random(b))
        counts += np.bincount(out[:, 0], minlength=V)
        accepted += int((n_out == 2).sum())
        done += b
    return counts, accepted


def tree_node(prefix: np.ndarray, V: int) -> np.ndarray:
    """Index of each prefix in a complete V-ary tree (root = 0). prefix (B, L) int -> (B,)."""
    B, L = prefix.shape
    return (V ** L - 1) // (V - 1) + (prefix * V ** np.arange(L - 1, -1, -1)).sum(1).astype(np.int64)


def joint_law_counts(P: np.ndarray, Q: np.ndarray, k: int, B: int, gen: np.random.Generator) -> np.ndarray:
    """Rejection mode round after round, B runs at once, over prefix-dependent p = P[node] and q = Q[node]
    ((nodes, V) tables of a V-ary tree of depth >= 2k+1): proposals drawn from q, verified by
    verify.rejection_batch, until k+1 tokens are out. Returns the counts (V^(k+1),) of the first k+1 tokens."""
    V = P.shape[1]
    L = k + 1
    emitted = np.full((B, 2 * L + 1), -1, dtype=np.int64)
    n_em = np.zeros(B, dtype=np.int64)
    while (n_em < L).any():
        act = np.nonzero(n_em < L)[0]
        for plen in np.unique(n_em[act]):               # group by prefix length so prefixes form dense arrays
            idx = act[n_em[act] == plen]
            cur = emitted[idx, :plen]
            props = np.zeros((idx.size, k), dtype=np.int64)
            prows, qrows = np.zeros((idx.size, k + 1, V)), np.zeros((idx.size, k, V))
            for i in range(k + 1):
                node = tree_node(cur, V)
                prows[:, i] = P[node]
                if i < k:
                    qrows[:, i] = Q[node]
                    props[:, i] = sample_index(Q[node], gen.random(idx.size))
                    cur = np.concatenate([cur, props[:, i:i + 1]], axis=1)
            out, n = verify.rejection_batch(prows, qrows, props, gen.random((idx.size, k)), gen.random(idx.size))
            for j in range(k + 1):
                m = n > j
                emitted[idx[m], plen + j] = out[m, j]
            n_em[idx] += n
    codes = tree_node(emitted[:, :L], V) - (V ** L - 1) // (V - 1)
    return np.bincount(codes, minlength=V ** L).astype(float)


def exact_joint_law(P: np.ndarray, L: int) -> np.ndarray:
    """(V^L,) the champion's autoregressive law of its first L tokens, enumerated from P[node]."""
    V = P.shape[1]
    exact = np.zeros(V ** L)
    for code in range(V ** L):
        digits = np.array([[(code // V ** (L - 1 - j)) % V for j in range(L)]])
        exact[code] = np.prod([P[tree_node(digits[:, :j], V)[0], digits[0, j]] for j in range(L)])
    return exact


def pooled_chisquare_p(observed: np.ndarray, expected: np.ndarray) -> float:
    """Chi-square p-value with the cells expected under 5 pooled into one (so the approximation holds)."""
    from scipy.stats import chisquare
    small = expected < 5
    if small.any():
        observed = np.append(observed[~small], observed[small].sum())
        expected = np.append(expected[~small], expected[small].sum())
    return float(chisquare(observed, expected).pvalue)


def main() -> None:
    from scipy.stats import chisquare
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=1_000_000)
    a = ap.parse_args()
    print(f"{'pair':16} {'chi2 p':>8} {'TV(emitted,p)':>14} {'accept':>7} {'1-TV(p,q)':>9}")
    pvals = []
    for i, (name, (p, q)) in enumerate(sorted(synthetic_pairs().items())):
        c, acc = first_token_counts(p, q, a.samples, np.random.default_rng(1000 + i))  # independent per pair
        s = p > 0
        pv = 1.0 if s.sum() == 1 else chisquare(c[s], p[s] * c.sum()).pvalue
        pvals.append(pv)
        tv = 0.5 * np.abs(c / c.sum() - p).sum()
        print(f"{name:16} {pv:8.3f} {tv:14.5f} {acc / a.samples:7.4f} {1 - 0.5 * np.abs(p - q).sum():9.4f}")
    print(f"{len(pvals)} pairs x {a.samples} samples: min p-value {min(pvals):.4f}, median {np.median(pvals):.3f}")


if __name__ == "__main__":
    main()
