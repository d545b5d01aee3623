"""Counter-based randomness and the declared (target) distribution.

Everything here is a pure function of its inputs: the same seed, stream and position give the same numbers in
CPython and in Pyodide (integer hashing in numpy uint64, exact conversion to float64). No global state.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

# Stream ids: each use of randomness draws from its own stream, keyed by the absolute position t of the token
# being generated, so a result never depends on how positions were grouped into speculation rounds.
STREAM_GUMBEL = 1    # coupled mode: noise g[t, v] shared by champion and draft
STREAM_SAMPLE = 2    # rejection mode: the champion's own sample at t (no speculation, bonus, residual)
STREAM_ACCEPT = 3    # rejection mode: acceptance test of the proposal at t
STREAM_DRAFT = 4     # rejection mode: the draft's sample at t

_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)
_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_MASK64 = (1 << 64) - 1


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic)."""
    x = (x ^ (x >> np.uint64(30))) * _M1
    x = (x ^ (x >> np.uint64(27))) * _M2
    return x ^ (x >> np.uint64(31))


class Rng:
    """Counter-based RNG: u(seed, stream, t, v) in the open interval (0, 1).

    Pass an instance to whatever needs randomness; it holds only the seed.
    """

    def __init__(self, seed: int):
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
        self.seed = int(seed)
        self._key = _mix(np.array([self.seed & _MASK64], dtype=np.uint64) + _GOLDEN)  # (1,)

    def _row_key(self, stream: int, t: int) -> np.ndarray:
        k = _mix(self._key ^ np.array([stream & _MASK64], dtype=np.uint64))
        return _mix(k ^ np.array([int(t) & _MASK64], dtype=np.uint64))  # (1,)

    def uniforms(self, stream: int, t: int, n: int) -> np.ndarray:
        """(n,) float64 in (0, 1): u(seed, stream, t, v) for v = 0..n-1."""
        v = np.arange(1, n + 1, dtype=np.uint64)  # (n,)
        h = _mix(self._row_key(stream, t) + v * _GOLDEN)  # (n,)
        return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * (2.0 ** -53)

    def uniform(self, stream: int, t: int) -> float:
        return float(self.uniforms(stream, t, 1)[0])

    def gumbel(self, t: int, n: int) -> np.ndarray:
        """(n,) float64 Gumbel(0, 1) noise g[t, v] for the coupled verifier."""
        u = self.uniforms(STREAM_GUMBEL, t, n)
        return -np.log(-np.log(u))


@dataclass(frozen=True)
class SamplingParams:
    """The declared distribution: temperature (0 = greedy), top-k (0 = off), top-p (1 = off)."""

    temperature: float = 0.0
    top_k: int = 0
    top_p: float = 1.0

    def validate(self) -> None:
        t, k, p = self.temperature, self.top_k, self.top_p
        if not isinstance(t, (int, float)) or not np.isfinite(t) or t < 0 or t > 100:
            raise ValueError(f"temperature must be a number in [0, 100], got {t!r}")
        if not isinstance(k, (int, np.integer)) or isinstance(k, bool) or k < 0:
            raise ValueError(f"top_k must be an integer >= 0 (0 = off), got {k!r}")
        if not isinstance(p, (int, float)) or not (0 < p <= 1):
            raise ValueError(f"top_p must be in (0, 1] (1 = off), got {p!r}")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


def _support_mask(z: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """Boolean (vocab,) mask of the tokens kept by top-k then top-p on scaled logits z (vocab,) float64.

    Ties are broken by token id (lower id ranks first), so the kept set is a deterministic function of z.
    """
    finite = np.isfinite(z)
    keep = finite.copy()
    if top_k == 0 and top_p >= 1.0:
        return keep
    order = np.lexsort((np.arange(z.size), -np.where(finite, z, -np.inf)))  # descending z, then ascending id
    n_finite = int(finite.sum())
    n_keep = n_finite if top_k == 0 else min(top_k, n_finite)
    if top_p < 1.0 and n_keep > 0:
        zs = z[order[:n_keep]]
        pr = np.exp(zs - zs[0])
        cum = np.cumsum(pr) / pr.sum()
        # smallest prefix whose mass reaches top_p (the token that crosses is kept)
        n_keep = min(n_keep, int(np.searchsorted(cum, top_p, side="left")) + 1)
    keep[:] = False
    keep[order[:n_keep]] = True
    return keep


def scaled_logits(logits: np.ndarray, params: SamplingParams, mask: np.ndarray | None = None) -> np.ndarray:
    """(vocab,) float64: logits / T with -inf outside the declared support (top-k, top-p, mask).

    For greedy (T = 0) the logits are returned unscaled with only the mask applied.
    `mask` (vocab,) bool: True = allowed.
    """
    z = np.asarray(logits, dtype=np.float64).copy()  # (vocab,)
    z[np.isnan(z)] = -np.inf
    if mask is not None:
        z[~np.asarray(mask, dtype=bool)] = -np.inf
    if not params.greedy:
        z = z / params.temperature
        z[~_support_mask(z, params.top_k, params.top_p)] = -np.inf
    if not np.isfinite(z).any():
        raise ValueError("every token is masked out: the declared distribution is empty")
    return z


def probs_from_scaled(z: np.ndarray) -> np.ndarray:
    """Softmax of scaled logits, float64, exact zeros where z = -inf. z (..., vocab)."""
    m = np.max(z, axis=-1, keepdims=True)
    e = np.exp(z - m)
    return e / e.sum(axis=-1, keepdims=True)


def declared_probs(logits: np.ndarray, params: SamplingParams, mask: np.ndarray | None = None) -> np.ndarray:
    """(vocab,) float64 declared distribution p. For greedy: a point mass on the argmax (lowest id on ties)."""
    z = scaled_logits(logits, params, mask)
    if params.greedy:
        p = np.zeros(z.size, dtype=np.float64)
        p[int(np.argmax(z))] = 1.0
        return p
    return probs_from_scaled(z)


def sample_index(probs: np.ndarray, u: np.ndarray | float) -> np.ndarray | int:
    """Inverse-CDF sampling. probs (..., vocab) non-negative (need not be normalised), u (...) in (0, 1).

    Never returns a zero-probability index: picks the first i with cdf[i] > u * total; if rounding puts u * total at
    or past the total, picks the last index with positive probability.
    """
    probs = np.asarray(probs, dtype=np.float64)
    scalar = probs.ndim == 1
    P = probs[None, :] if scalar else probs.reshape(-1, probs.shape[-1])  # (B, vocab)
    uu = np.atleast_1d(np.asarray(u, dtype=np.float64)).reshape(-1)  # (B,)
    cdf = np.cumsum(P, axis=1)  # (B, vocab)
    total = cdf[:, -1]
    if np.any(total <= 0) or not np.all(np.isfinite(total)):
        raise ValueError("cannot sample from a distribution with no mass")
    target = uu * total  # (B,)
    above = cdf > target[:, None]
    idx = np.argmax(above, axis=1)
    none = ~above.any(axis=1)
    if none.any():
        last_pos = P.shape[1] - 1 - np.argmax((P[:, ::-1] > 0), axis=1)
        idx = np.where(none, last_pos, idx)
    if scalar:
        return int(idx[0])
    return idx.reshape(probs.shape[:-1])
