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


_U53_ONE = (1 << 53) - 1   # the 53-bit draw whose uniform rounds to exactly 1.0 (x + 0.5 ties to even 2^53): g = +inf
# Every finite g lies in [G_MIN, G_MAX]: u >= 2^-54 gives g >= -log(54 ln 2); the largest u below 1.0 is 1 - 2^-52,
# so g <= -log(-log(1 - 2^-52)) ~ 36.04. Rounded outwards here.
G_MIN = -3.63
G_MAX = 36.05
_B_LOW = int(0.99 * 2 ** 53) - 1     # draws up to here have u <= 0.99, so g <= -log(-log(0.99)) = 4.6001...
G_LOW = 4.601


def _mix(x: np.ndarray) -> np.ndarray:
    """splitmix64 finaliser on a uint64 array (wrapping arithmetic), in place on x (returned)."""
    t = np.right_shift(x, np.uint64(30))
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, _M1, out=x)
    np.right_shift(x, np.uint64(27), out=t)
    np.bitwise_xor(x, t, out=x)
    np.multiply(x, _M2, out=x)
    np.right_shift(x, np.uint64(31), out=t)
    np.bitwise_xor(x, t, out=x)
    return x


def _gumbel_of(u: np.ndarray) -> np.ndarray:
    """g = -log(-log(u)), in place on the float64 array u (returned)."""
    np.log(u, out=u)
    np.negative(u, out=u)
    np.log(u, out=u)
    np.negative(u, out=u)
    return u


class Rng:
    """Counter-based RNG: u(seed, stream, t, v) in the open interval (0, 1).

    Pass an instance to whatever needs randomness; it holds the seed (and, for speed only, the counter steps
    v * golden of the last row length it drew).
    """

    def __init__(self, seed: int):
        if not isinstance(seed, (int, np.integer)) or isinstance(seed, bool):
            raise TypeError(f"seed must be an integer, got {type(seed).__name__}")
        if not -(1 << 63) <= int(seed) <= _MASK64:    # a 64-bit value (signed or not); a larger one would alias
            raise ValueError(f"seed {int(seed)} is outside -2**63..2**64-1")   # a smaller seed (the key is 64 bits)
        self.seed = int(seed)
        self._key = int(_mix(np.array([self.seed & _MASK64], dtype=np.uint64) + _GOLDEN)[0])
        self._steps = np.zeros(0, dtype=np.uint64)          # (n,) v * golden for v = 1..n, wrapping

    def _row_key(self, stream: int, t: int) -> np.uint64:
        k = _mix(np.array([self._key ^ (stream & _MASK64)], dtype=np.uint64))
        return _mix(k ^ np.uint64(int(t) & _MASK64))[0]

    def _bits(self, stream: int, t: int, n: int) -> np.ndarray:
        """(n,) uint64: the 53-bit draws behind u(seed, stream, t, v) for v = 0..n-1."""
        if self._steps.shape[0] != n:
            self._steps = np.arange(1, n + 1, dtype=np.uint64) * _GOLDEN          # (n,)
        h = _mix(self._steps + self._row_key(stream, t))                          # (n,)
        return np.right_shift(h, np.uint64(11), out=h)

    def _bits_at(self, stream: int, t: int, v: np.ndarray) -> np.ndarray:
        """(m,) uint64: the draws of the given token ids v (m,) only (same numbers as _bits(...)[v])."""
        h = _mix((np.asarray(v, dtype=np.uint64) + np.uint64(1)) * _GOLDEN + self._row_key(stream, t))
        return np.right_shift(h, np.uint64(11), out=h)

    @staticmethod
    def _unit(bits: np.ndarray) -> np.ndarray:
        u = bits.astype(np.float64)
        u += 0.5
        u *= 2.0 ** -53
        return u

    def uniforms(self, stream: int, t: int, n: int) -> np.ndarray:
        """(n,) float64 in (0, 1): u(seed, stream, t, v) for v = 0..n-1."""
        return self._unit(self._bits(stream, t, n))

    def uniform(self, stream: int, t: int) -> float:
        return float(self._unit(self._bits_at(stream, t, np.zeros(1, dtype=np.uint64)))[0])

    def gumbel(self, t: int, n: int) -> np.ndarray:
        """(n,) float64 Gumbel(0, 1) noise g[t, v] for the coupled verifier."""
        return _gumbel_of(self.uniforms(STREAM_GUMBEL, t, n))

    def gumbel_argmax(self, z: np.ndarray, t: int) -> int:
        """int(np.argmax(z + self.gumbel(t, z.size))) (ties -> lowest id, NaN first as in numpy), with logarithms
        only where the winner can be. z (vocab,) float64 scaled logits.

        g[t, v] is a pure function of v's 53-bit draw b_v (increasing in it): the draws of all tokens are hashed
        (integer work), g is computed exactly for the top token a of z, giving a score s = z_a + g_a that the winner
        reaches. A token v can still win only if z_v + g_v >= s: with b_v <= B_LOW (u <= 0.99, g <= G_LOW) that needs
        z_v >= s - G_LOW, otherwise z_v >= s - G_MAX. Both tests get an extra margin of 1, far above rounding, and a
        draw of exactly _U53_ONE (u = 1.0, g = +inf) is always kept; g is computed only for the tokens kept."""
        z = np.asarray(z, dtype=np.float64)
        if z.size == 0 or not np.isfinite(np.max(z)):
            return int(np.argmax(z + self.gumbel(t, z.size)))
        bits = self._bits(STREAM_GUMBEL, t, z.size)                                # (vocab,) uint64
        a = int(np.argmax(z))
        s = z[a] + _gumbel_of(self._unit(bits[a: a + 1]))[0]
        high = np.flatnonzero(bits > np.uint64(_B_LOW))                # (~1%,) u > 0.99, the +inf draw among them
        high = high[(z[high] >= s - (G_MAX + 1.0)) | (bits[high] == np.uint64(_U53_ONE))]
        cand = np.union1d(np.flatnonzero(z >= s - (G_LOW + 1.0)), high)            # (m,) ascending ids
        if 4 * cand.size > 3 * z.size:          # most tokens can win: draw them all from the bits in hand
            return int(np.argmax(z + _gumbel_of(self._unit(bits))))
        g = _gumbel_of(self._unit(bits[cand]))                                      # (m,)
        return int(cand[np.argmax(z[cand] + g)])


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
    Ranking (descending z, then ascending id) is defined as by np.lexsort((ids, -z)); it is computed without sorting
    the whole vocabulary where it need not be: top-k takes the k largest values by partition; top-p needs the values
    of the ranked prefix only (equal values are interchangeable there), and the kept set is then "every z above the
    last kept value, plus the lowest ids among those equal to it".
    """
    finite = np.isfinite(z)
    keep = finite.copy()
    if top_k == 0 and top_p >= 1.0:
        return keep
    zf = z[finite]                                                            # (n_finite,)
    n_finite = zf.size
    n_keep = n_finite if top_k == 0 else min(top_k, n_finite)
    if n_keep == 0:
        return keep
    if n_keep < n_finite:
        zs = np.partition(zf, n_finite - n_keep)[n_finite - n_keep:]          # (n_keep,) the largest values
    else:
        zs = zf
    zs = np.sort(zs)[::-1]                                                    # (n_keep,) descending
    if top_p < 1.0:
        pr = np.exp(zs - zs[0])
        cum = np.cumsum(pr) / pr.sum()
        # smallest prefix whose mass reaches top_p (the token that crosses is kept)
        n_keep = min(n_keep, int(np.searchsorted(cum, top_p, side="left")) + 1)
    if n_keep == n_finite:
        return keep
    last = zs[n_keep - 1]
    keep &= z > last
    ties = np.flatnonzero(z == last)[: n_keep - int(keep.sum())]              # lowest ids first
    keep[ties] = True
    return keep


def scaled_logits(logits: np.ndarray, params: SamplingParams, mask: np.ndarray | None = None) -> np.ndarray:
    """(vocab,) float64: logits / T with -inf outside the declared support (top-k, top-p, mask).

    For greedy (T = 0) the logits are returned unscaled with only the mask applied.
    `mask` (vocab,) bool: True = allowed.
    """
    z = np.array(logits, dtype=np.float64)  # (vocab,) a copy
    empty = ValueError("every token is masked out: the declared distribution is empty")
    if z.size == 0:
        raise empty
    # one max() answers the usual questions (no NaN, no +inf, something finite) without a pass per question
    if np.isnan(np.max(z)):
        z[np.isnan(z)] = -np.inf
    if mask is not None:
        z[~np.asarray(mask, dtype=bool)] = -np.inf
    if not params.greedy:
        z /= params.temperature
        if params.top_k or params.top_p < 1.0 or np.max(z) == np.inf:   # else the support is what is finite
            z[~_support_mask(z, params.top_k, params.top_p)] = -np.inf
    if not np.isfinite(np.max(z)) and not np.isfinite(z).any():
        raise empty
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
