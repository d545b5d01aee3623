"""exactspec.sampling's fast paths give the same numbers, bit for bit, as the plain definitions they replace (written
out here): the counter hash and Gumbel noise, the top-k / top-p support without a full lexsort, and the coupled pick
argmax(z + g) that draws g only where it can win."""
from __future__ import annotations

import numpy as np
import pytest

from exactspec import sampling as S
from exactspec.sampling import STREAM_GUMBEL, Rng, SamplingParams, scaled_logits

M64 = (1 << 64) - 1


def plain_uniforms(seed: int, stream: int, t: int, n: int) -> np.ndarray:
    """The definition: splitmix64 finaliser over (key(seed, stream, t) + v * golden), v = 1..n, to 53 bits."""
    def mix(x):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))
    golden = np.uint64(0x9E3779B97F4A7C15)
    key = mix(np.array([seed & M64], dtype=np.uint64) + golden)
    key = mix(mix(key ^ np.array([stream & M64], dtype=np.uint64)) ^ np.array([t & M64], dtype=np.uint64))
    h = mix(key + np.arange(1, n + 1, dtype=np.uint64) * golden)
    return ((h >> np.uint64(11)).astype(np.float64) + 0.5) * (2.0 ** -53)


def plain_support(z: np.ndarray, top_k: int, top_p: float) -> np.ndarray:
    """The definition: rank by (descending z, ascending id) with a full lexsort, keep top-k, then top-p."""
    finite = np.isfinite(z)
    keep = finite.copy()
    if top_k == 0 and top_p >= 1.0:
        return keep
    order = np.lexsort((np.arange(z.size), -np.where(finite, z, -np.inf)))
    n_finite = int(finite.sum())
    n_keep = n_finite if top_k == 0 else min(top_k, n_finite)
    if top_p < 1.0 and n_keep > 0:
        zs = z[order[:n_keep]]
        pr = np.exp(zs - zs[0])
        cum = np.cumsum(pr) / pr.sum()
        n_keep = min(n_keep, int(np.searchsorted(cum, top_p, side="left")) + 1)
    keep[:] = False
    keep[order[:n_keep]] = True
    return keep


@pytest.mark.parametrize("seed", [0, 1, -5, 2 ** 63 + 11, 123456789])
def test_hash_uniforms_and_gumbel_are_the_definition(seed):
    rng = Rng(seed)
    for stream, t, n in ((STREAM_GUMBEL, 0, 1), (STREAM_GUMBEL, 7, 49152), (2, 10 ** 12, 300), (3, 5, 300),
                         (4, 2 ** 40 + 3, 1000), (STREAM_GUMBEL, 7, 17)):
        ref = plain_uniforms(seed, stream, t, n)
        assert np.array_equal(rng.uniforms(stream, t, n), ref)
        assert rng.uniform(stream, t) == ref[0]
        if stream == STREAM_GUMBEL:
            assert np.array_equal(rng.gumbel(t, n), -np.log(-np.log(ref)))
        assert np.array_equal(rng._bits_at(stream, t, np.array([0, n - 1, n // 2])),
                              rng._bits(stream, t, n)[[0, n - 1, n // 2]])


def test_gumbel_bounds():
    """G_MIN / G_MAX bound every finite g, G_LOW every g of a draw <= _B_LOW: the extreme 53-bit draws, through the
    same float64 arithmetic."""
    u = Rng._unit(np.array([0, 1, (1 << 53) - 3, (1 << 53) - 2], dtype=np.uint64))
    g = -np.log(-np.log(u))
    assert S.G_MIN <= g.min() and g.max() <= S.G_MAX and S.G_MAX - g.max() < 0.02 and g.min() - S.G_MIN < 0.02
    assert Rng._unit(np.array([S._U53_ONE], dtype=np.uint64))[0] == 1.0        # the one draw that gives g = +inf
    g_low = -np.log(-np.log(Rng._unit(np.array([S._B_LOW, S._B_LOW - 1], dtype=np.uint64))))
    assert g_low.max() <= S.G_LOW < g_low.max() + 0.002


def test_gumbel_of_a_subset_is_the_same_numbers():
    """Rng.gumbel_argmax computes g on gathered subsets of a row's draws: elementwise the same values as the whole
    row (numpy's SIMD log must not differ between a vector body and a short tail)."""
    rng = Rng(9)
    bits = rng._bits(STREAM_GUMBEL, 3, 49152)
    full = rng.gumbel(3, 49152)
    pick = np.random.default_rng(0)
    for m in (1, 2, 3, 7, 8, 9, 15, 16, 17, 31, 64, 100, 1000):
        idx = np.sort(pick.choice(49152, m, replace=False))
        assert np.array_equal(S._gumbel_of(Rng._unit(bits[idx])), full[idx]), m


def logit_rows(rng, vocab, n=12):
    rows = [rng.standard_normal(vocab) * rng.uniform(0.5, 6) for _ in range(n)]
    r = np.round(rng.standard_normal(vocab) * 3, 1)                    # many exact ties
    rows.append(r)
    r = rng.standard_normal(vocab)
    r[rng.choice(vocab, vocab // 3, replace=False)] = -np.inf          # masked tokens
    r[:5] = 0.0
    r[5:10] = -0.0                                                     # signed zeros tie
    rows.append(r)
    r = np.zeros(vocab)
    r[3] = -0.0
    rows.append(r)                                                     # everything tied
    r = np.full(vocab, -np.inf)
    r[[1, vocab - 2]] = [1.0, 1.0]
    rows.append(r)                                                     # two finite tokens
    return rows


def plain_scaled_logits(logits, params, mask=None):
    """The definition of exactspec.sampling.scaled_logits."""
    z = np.asarray(logits, dtype=np.float64).copy()
    z[np.isnan(z)] = -np.inf
    if mask is not None:
        z[~np.asarray(mask, dtype=bool)] = -np.inf
    if not params.greedy:
        z = z / params.temperature
        z[~plain_support(z, params.top_k, params.top_p)] = -np.inf
    if not np.isfinite(z).any():
        raise ValueError("every token is masked out: the declared distribution is empty")
    return z


def test_scaled_logits_is_the_definition_with_nan_inf_and_masks():
    rng = np.random.default_rng(4)
    base = rng.standard_normal(500).astype(np.float32) * 4
    rows = [base]
    for bad in ([np.nan], [np.inf], [-np.inf], [np.nan, np.inf], [np.inf, np.inf]):
        r = base.copy()
        r[rng.choice(500, len(bad), replace=False)] = bad
        rows.append(r)
    rows += [np.full(500, np.inf, np.float32), np.full(500, np.nan, np.float32), np.full(500, -np.inf, np.float32)]
    masks = [None, rng.random(500) < 0.5, np.zeros(500, bool)]
    for row in rows:
        for mask in masks:
            for p in (SamplingParams(0.0), SamplingParams(0.7), SamplingParams(1e-307), SamplingParams(1.0, 5),
                      SamplingParams(2.0, 0, 0.5)):
                try:
                    want = plain_scaled_logits(row, p, mask)
                except ValueError as e:
                    with pytest.raises(ValueError, match=str(e)):
                        scaled_logits(row, p, mask)
                    continue
                assert np.array_equal(scaled_logits(row, p, mask), want)
    with pytest.raises(ValueError, match="masked out"):
        scaled_logits(np.zeros(0, np.float32), SamplingParams(0.5))


@pytest.mark.parametrize("vocab", [5, 300, 4096])
def test_support_mask_is_the_lexsort_definition(vocab):
    rng = np.random.default_rng(vocab)
    for z in logit_rows(rng, vocab):
        for top_k in (0, 1, 2, 3, 40, vocab - 1, vocab, vocab + 5):
            for top_p in (1.0, 0.999, 0.9, 0.5, 0.01, 1e-9):
                got, ref = S._support_mask(z, top_k, top_p), plain_support(z, top_k, top_p)
                assert np.array_equal(got, ref), (top_k, top_p)
        for p in (SamplingParams(0.7, 40, 0.9), SamplingParams(1.3, 0, 0.95), SamplingParams(0.0)):
            got = scaled_logits(z.astype(np.float32), p) if np.isfinite(z).any() else None
            if got is not None:
                zz = z.astype(np.float32).astype(np.float64)
                if not p.greedy:
                    zz = zz / p.temperature
                    zz[~plain_support(zz, p.top_k, p.top_p)] = -np.inf
                assert np.array_equal(got, zz)


@pytest.mark.parametrize("temperature", [0.05, 0.3, 0.7, 1.0, 2.0])
def test_gumbel_argmax_is_argmax_of_z_plus_g(temperature):
    rng = np.random.default_rng(int(temperature * 100))
    noise = Rng(42)
    for i, z in enumerate(logit_rows(rng, 2000) + [rng.standard_normal(2000) * 30]):
        for p in (SamplingParams(temperature), SamplingParams(temperature, 20, 0.8)):
            zz = scaled_logits(z.astype(np.float32), p) if np.isfinite(z).any() else None
            if zz is None:
                continue
            for t in (0, 1, 99 + i):
                assert noise.gumbel_argmax(zz, t) == int(np.argmax(zz + noise.gumbel(t, zz.size)))


@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # log(0) and inf - inf: the definition meets them too
def test_gumbel_argmax_finds_an_infinite_g_far_below():
    """A draw of exactly 2^53 - 1 makes u = 1.0 and g = +inf: that token wins however low its z (the definition's
    answer), even where the pruned path would not draw it. Planted through _bits, which both paths read."""
    class Planted(Rng):
        def __init__(self, seed, where):
            super().__init__(seed)
            self.where = where

        def _bits(self, stream, t, n):
            b = super()._bits(stream, t, n)
            b[self.where] = S._U53_ONE
            return b

    z = np.random.default_rng(3).standard_normal(5000) * 200 / 0.3       # very spread: few candidates
    z[[100, 4000]] = z.min() - 1e3, -np.inf
    for where in ([100], [100, 4000], [4000], [int(np.argmax(z))]):
        r = Planted(7, where)
        full = int(np.argmax(z + _gumbel_full(r, z.size)))
        assert r.gumbel_argmax(z, 11) == full
    assert Planted(7, [100]).gumbel_argmax(z, 11) == 100


def _gumbel_full(r: Rng, n: int) -> np.ndarray:
    with np.errstate(invalid="ignore", divide="ignore"):
        return -np.log(-np.log(Rng._unit(r._bits(STREAM_GUMBEL, 11, n))))
