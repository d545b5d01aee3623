/* matvec.c: the "simd" kernel of py/exactspec/matvec.wat for CPython on x86-64, bit for bit the same results.
 *
 * Compiled on first use by exactspec.simd (the system C compiler, -O3 -mavx -ffp-contract=off, cached by this file's
 * sha256); where there is no compiler or no AVX, CPython keeps reference.py's "gemv".
 *
 * exactspec_matvec(w, rows, d, ld, x, n, out, heads, w_hs, x_hs, out_hs): for each of `heads` problems h (w, x, out
 * advanced by h * w_hs, x_hs, out_hs bytes), out (n, rows) = x (n, d) @ W (rows, d).T, float32, W packed by
 * exactspec.simd.pack with rows of ld >= d floats: tiles of 2 output rows stored (ld / 4, 2, 4), then the last
 * rows % 2 rows as they are. See matvec.wat's header for the layout and the work split.
 *
 * SAME BITS AS THE WEBASSEMBLY KERNEL: matvec.wat gives output (r, i) one 4-lane accumulator a = 0 and, for each
 * column group j = 0, 4, .. in ascending order, a = a + x[r, j:j+4] * w[i, j:j+4] (a rounded multiply, then a
 * rounded add), then (a0 + a1) + (a2 + a3). Here one 256-bit register holds the two 4-lane accumulators of a tile's
 * two output rows (the packed tile has both rows' 4 values of a column group side by side): lanes 0-3 run exactly
 * the sequence of row 2t, lanes 4-7 that of row 2t + 1; multiplies and adds are separate instructions (no fused
 * multiply-add: -ffp-contract=off, and no -ffast-math), and the final sums are written in that order. So rows are
 * batch-invariant for the same reason, and equal Pyodide's (tests/test_simd.py checks both against one emulation).
 *
 * Also: exactspec_exp32 and exactspec_silu_mul (matvec.wat's, the same float64 operations: the same bits), and
 * exactspec_matvec_threads (a product on several threads, below).
 */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>

#define ROWS_MAX 8   /* input rows per load of a tile (matvec.wat: 4; the chunking never changes a bit) */

#define PREFETCH 8192   /* bytes: measured 4096-16384 alike; none: rows past the first cost ~2x as much */

/* The accumulators must stay in registers: without the unroll pragmas GCC 12 keeps the arrays below on the stack and
 * stores every accumulator on every column group (measured: 5 input rows cost 1.75x one row, now 1.5x). */
#define UNROLLED _Pragma("GCC unroll 16")

static inline float hsum4(__m128 a) {           /* (a0 + a1) + (a2 + a3) */
    __m128 s = _mm_add_ps(a, _mm_movehdup_ps(a));                /* lane 0: a0 + a1, lane 2: a2 + a3 */
    return _mm_cvtss_f32(_mm_add_ss(s, _mm_movehl_ps(s, s)));
}

/* one tile (2 packed output rows at p) times c <= ROWS_MAX input rows at x (row stride d) -> o (row stride rows);
 * inlined with a constant c (see tile2_c), so the accumulators stay in registers */
static inline __attribute__((always_inline)) void tile2(const float *p, int d, const float *x, int c, float *o, int rows) {
    __m256 acc[ROWS_MAX];
    UNROLLED for (int r = 0; r < c; r++) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < d; j += 4) {
        _mm_prefetch((const char *)(p + 2 * j) + PREFETCH, _MM_HINT_T0);   /* the stream, ahead of the multiplies */
        __m256 w = _mm256_loadu_ps(p + 2 * j);                       /* row 2t: j..j+3, row 2t + 1: j..j+3 */
        UNROLLED for (int r = 0; r < c; r++) {
            __m256 v = _mm256_broadcast_ps((const __m128 *)(x + (intptr_t)r * d + j));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(v, w));
        }
    }
    UNROLLED for (int r = 0; r < c; r++) {
        o[(intptr_t)r * rows] = hsum4(_mm256_castps256_ps128(acc[r]));
        o[(intptr_t)r * rows + 1] = hsum4(_mm256_extractf128_ps(acc[r], 1));
    }
}

/* the last unpaired row (ld floats at p) times c input rows */
static inline __attribute__((always_inline)) void last1(const float *p, int d, const float *x, int c, float *o, int rows) {
    __m128 acc[ROWS_MAX];
    UNROLLED for (int r = 0; r < c; r++) acc[r] = _mm_setzero_ps();
    for (int j = 0; j < d; j += 4) {
        __m128 w = _mm_loadu_ps(p + j);
        UNROLLED for (int r = 0; r < c; r++)
            acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(_mm_loadu_ps(x + (intptr_t)r * d + j), w));
    }
    UNROLLED for (int r = 0; r < c; r++) o[(intptr_t)r * rows] = hsum4(acc[r]);
}

/* f with a constant c (1..ROWS_MAX): one copy each, its accumulators in registers */
#define WITH_CONSTANT_C(f) \
    switch (c) { \
    case 1: f(p, d, x, 1, o, rows); break; \
    case 2: f(p, d, x, 2, o, rows); break; \
    case 3: f(p, d, x, 3, o, rows); break; \
    case 4: f(p, d, x, 4, o, rows); break; \
    case 5: f(p, d, x, 5, o, rows); break; \
    case 6: f(p, d, x, 6, o, rows); break; \
    case 7: f(p, d, x, 7, o, rows); break; \
    default: f(p, d, x, 8, o, rows); break; \
    }

static void tile2_c(const float *p, int d, const float *x, int c, float *o, int rows) { WITH_CONSTANT_C(tile2) }

static void last1_c(const float *p, int d, const float *x, int c, float *o, int rows) { WITH_CONSTANT_C(last1) }

int exactspec_matvec_ok(void) {
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx") ? 1 : 0;
}

/* Column blocks (the feed-forward's down projection, d = 1536: 5 input rows are 30 KB, which with a 12 KB tile do not
 * fit a 32 KB L1, so every tile re-read the rows from L2; measured ~40% fewer multiply-adds a second than d = 576).
 * With n >= 2 rows of more than X_L1 bytes, a group of GROUP tiles is taken KBLOCK columns at a time: its
 * accumulators wait in `acc` between blocks, the block's input rows stay in L1 over the group's tiles. Each
 * accumulator still adds its column groups in ascending order: the same bits as one pass. */
#define KBLOCK 512
#define GROUP 32
#define X_L1 16384

static inline __attribute__((always_inline)) void tile2_part(const float *p, int j0, int j1, const float *x, int d, int c,
                                                             __m256 *a) {
    __m256 acc[ROWS_MAX];
    UNROLLED for (int r = 0; r < c; r++) acc[r] = a[r];
    for (int j = j0; j < j1; j += 4) {
        __m256 w = _mm256_loadu_ps(p + 2 * j);
        UNROLLED for (int r = 0; r < c; r++) {
            __m256 v = _mm256_broadcast_ps((const __m128 *)(x + (intptr_t)r * d + j));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(v, w));
        }
    }
    UNROLLED for (int r = 0; r < c; r++) a[r] = acc[r];
}

static void tile2_part_c(const float *p, int j0, int j1, const float *x, int d, int c, __m256 *a) {
    switch (c) {
    case 1: tile2_part(p, j0, j1, x, d, 1, a); break;
    case 2: tile2_part(p, j0, j1, x, d, 2, a); break;
    case 3: tile2_part(p, j0, j1, x, d, 3, a); break;
    case 4: tile2_part(p, j0, j1, x, d, 4, a); break;
    case 5: tile2_part(p, j0, j1, x, d, 5, a); break;
    case 6: tile2_part(p, j0, j1, x, d, 6, a); break;
    case 7: tile2_part(p, j0, j1, x, d, 7, a); break;
    default: tile2_part(p, j0, j1, x, d, 8, a); break;
    }
}

/* tiles of output rows i0 .. i2 - 1 (even count) by column blocks, GROUP tiles at a time */
static void tiles_blocked(const float *w, int rows, int d, int ld, const float *x, int n, float *out, int i0, int i2) {
    int chunks = (n + ROWS_MAX - 1) / ROWS_MAX;
    __m256 acc[GROUP][2 * ROWS_MAX];            /* a tile's accumulators for up to 2 chunks of input rows (n <= 16) */
    for (int g0 = i0; g0 < i2; g0 += 2 * GROUP) {
        int g1 = g0 + 2 * GROUP < i2 ? g0 + 2 * GROUP : i2;
        for (int t = 0; t < (g1 - g0) / 2; t++)
            for (int r = 0; r < n; r++) acc[t][r] = _mm256_setzero_ps();
        for (int j0 = 0; j0 < d; j0 += KBLOCK) {
            int j1 = j0 + KBLOCK < d ? j0 + KBLOCK : d;
            const float *p = w + (intptr_t)g0 * ld;
            for (int t = 0; t < (g1 - g0) / 2; t++, p += 2 * (intptr_t)ld) {
                _mm_prefetch((const char *)(p + 2 * (intptr_t)ld + 2 * j0), _MM_HINT_T0);   /* the next tile's block */
                for (int r = 0, m = chunks; r < n; m--) {
                    int c = (n - r + m - 1) / m;
                    tile2_part_c(p, j0, j1, x + (intptr_t)r * d, d, c, acc[t] + r);
                    r += c;
                }
            }
        }
        for (int t = 0, i = g0; i < g1; t++, i += 2)
            for (int r = 0; r < n; r++) {
                out[(intptr_t)r * rows + i] = hsum4(_mm256_castps256_ps128(acc[t][r]));
                out[(intptr_t)r * rows + i + 1] = hsum4(_mm256_extractf128_ps(acc[t][r], 1));
            }
    }
}

/* output rows i0 .. i1 - 1 (i0 even) of one problem: for each tile in memory order, the n input rows in chunks */
static void rows_range(const float *w, int rows, int d, int ld, const float *x, int n, float *out, int i0, int i1) {
    int chunks = (n + ROWS_MAX - 1) / ROWS_MAX;
    const float *p = w + (intptr_t)i0 * ld;
    int i = i0;
    if (n >= 2 && n <= 2 * ROWS_MAX && (intptr_t)n * d * 4 > X_L1 && d > KBLOCK) {
        int i2 = i0 + (i1 - i0) / 2 * 2;
        tiles_blocked(w, rows, d, ld, x, n, out, i0, i2);
        i = i2;
        p = w + (intptr_t)i2 * ld;
    }
    for (; i + 2 <= i1; i += 2, p += 2 * (intptr_t)ld) {
        for (int r = 0, m = chunks; r < n; m--) {
            int c = (n - r + m - 1) / m;
            tile2_c(p, d, x + (intptr_t)r * d, c, out + (intptr_t)r * rows + i, rows);
            r += c;
        }
    }
    for (; i < i1; i++, p += ld) {
        for (int r = 0, m = chunks; r < n; m--) {
            int c = (n - r + m - 1) / m;
            last1_c(p, d, x + (intptr_t)r * d, c, out + (intptr_t)r * rows + i, rows);
            r += c;
        }
    }
}

void exactspec_matvec(const char *w0, int rows, int d, int ld, const char *x0, int n, char *out0, int heads,
                      int64_t w_hs, int64_t x_hs, int64_t out_hs) {
    for (int h = 0; h < heads; h++)
        rows_range((const float *)(w0 + h * w_hs), rows, d, ld, (const float *)(x0 + h * x_hs), n,
                   (float *)(out0 + h * out_hs), 0, rows);
}

/* ---- exp and the feed-forward's gate (exactspec.simd: EXP_CLAMP .. EXP_POLY, the same constants and order) ------ */
#define EXP_CLAMP 200.0
#define INV_LN2 1.4426950408889634
#define LN2_HI 0.6931471803691238
#define LN2_LO 1.9082149292705877e-10
static const double EXP_POLY[12] = {2.505210838544172e-08, 2.755731922398589e-07, 2.7557319223985893e-06,
                                    2.48015873015873e-05, 0.0001984126984126984, 0.001388888888888889,
                                    0.008333333333333333, 0.041666666666666664, 0.16666666666666666, 0.5, 1.0, 1.0};

/* exp32 of one float (exp32x4's remainders) */
static inline float exp32(float xf) {
    if (xf != xf) return xf;                                             /* NaN stays NaN */
    double x = xf;
    x = x < -EXP_CLAMP ? -EXP_CLAMP : (x > EXP_CLAMP ? EXP_CLAMP : x);
    double k = floor(x * INV_LN2 + 0.5);
    double r = (x - k * LN2_HI) - k * LN2_LO;
    double p = EXP_POLY[0];
    UNROLLED for (int i = 1; i < 12; i++) p = p * r + EXP_POLY[i];
    union { int64_t i; double d; } s = { .i = ((int64_t)k + 1023) << 52 };   /* 2^k, |k| <= 289 */
    return (float)(p * s.d);
}

/* exp32 of 4 floats at once: the same operations on 4 float64 lanes (AVX; 2^k built with SSE2 integer operations) */
static inline __m128 exp32x4(__m128 xf) {
    __m128 nan = _mm_cmpunord_ps(xf, xf);
    __m256d x = _mm256_cvtps_pd(_mm_andnot_ps(nan, xf));                 /* NaN -> 0, restored at the end */
    x = _mm256_min_pd(_mm256_max_pd(x, _mm256_set1_pd(-EXP_CLAMP)), _mm256_set1_pd(EXP_CLAMP));
    __m256d k = _mm256_floor_pd(_mm256_add_pd(_mm256_mul_pd(x, _mm256_set1_pd(INV_LN2)), _mm256_set1_pd(0.5)));
    __m256d r = _mm256_sub_pd(_mm256_sub_pd(x, _mm256_mul_pd(k, _mm256_set1_pd(LN2_HI))),
                              _mm256_mul_pd(k, _mm256_set1_pd(LN2_LO)));
    __m256d p = _mm256_set1_pd(EXP_POLY[0]);
    UNROLLED for (int i = 1; i < 12; i++) p = _mm256_add_pd(_mm256_mul_pd(p, r), _mm256_set1_pd(EXP_POLY[i]));
    __m128i e = _mm_slli_epi32(_mm_add_epi32(_mm256_cvtpd_epi32(k), _mm_set1_epi32(1023)), 20);   /* k exact */
    __m128i z = _mm_setzero_si128();
    __m256d s = _mm256_castsi256_pd(_mm256_insertf128_si256(_mm256_castsi128_si256(_mm_unpacklo_epi32(z, e)),
                                                            _mm_unpackhi_epi32(z, e), 1));       /* 2^k */
    return _mm_blendv_ps(_mm256_cvtpd_ps(_mm256_mul_pd(p, s)), xf, nan);
}

/* out (n,) = exp(x) (n,), float32 (in place allowed) */
void exactspec_exp32(const float *x, float *out, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) _mm_storeu_ps(out + i, exp32x4(_mm_loadu_ps(x + i)));
    for (; i < n; i++) out[i] = exp32(x[i]);
}

/* the feed-forward's gate: for each of `rows` rows of gu (rows, 2 * hidden), g = gu[:hidden], u = gu[hidden:],
 * out (rows, hidden) = (g / (1 + exp32(-g))) * u, each a float32 operation rounded (reference.py's numpy order) */
void exactspec_silu_mul(const float *gu, int rows, int hidden, float *out) {
    const __m128 one = _mm_set1_ps(1.0f), sign = _mm_set1_ps(-0.0f);
    for (int r = 0; r < rows; r++) {
        const float *g = gu + (intptr_t)r * 2 * hidden, *u = g + hidden;
        float *o = out + (intptr_t)r * hidden;
        int i = 0;
        for (; i + 4 <= hidden; i += 4) {
            __m128 gv = _mm_loadu_ps(g + i);
            __m128 den = _mm_add_ps(one, exp32x4(_mm_xor_ps(gv, sign)));
            _mm_storeu_ps(o + i, _mm_mul_ps(_mm_div_ps(gv, den), _mm_loadu_ps(u + i)));
        }
        for (; i < hidden; i++) {
            float e = exp32(-g[i]);
            float den = 1.0f + e;
            o[i] = (g[i] / den) * u[i];
        }
    }
}

/* RMS norm of `rows` rows of x (rows, dim), dim a multiple of 4: a 4-lane sum of squares in column order (the
 * products' order: a = a + x*x per group of 4, then (a0 + a1) + (a2 + a3)), ms = sum / dim, s = 1 / sqrt(ms + eps),
 * out = (x * s) * w; float32 operations, each rounded (matvec.wat's exactspec_rmsnorm: the same bits) */
void exactspec_rmsnorm(const float *x, int rows, int dim, const float *w, float eps, float *out) {
    for (int r = 0; r < rows; r++) {
        const float *xr = x + (intptr_t)r * dim;
        float *o = out + (intptr_t)r * dim;
        __m128 a = _mm_setzero_ps();
        for (int j = 0; j < dim; j += 4) {
            __m128 v = _mm_loadu_ps(xr + j);
            a = _mm_add_ps(a, _mm_mul_ps(v, v));
        }
        float ms = hsum4(a) / (float)dim;
        __m128 sc = _mm_set1_ps(1.0f / _mm_cvtss_f32(_mm_sqrt_ss(_mm_set_ss(ms + eps))));
        for (int j = 0; j < dim; j += 4)
            _mm_storeu_ps(o + j, _mm_mul_ps(_mm_mul_ps(_mm_loadu_ps(xr + j), sc), _mm_loadu_ps(w + j)));
    }
}

/* RoPE (rotate-half) in place on x: n rows (row stride `ld` floats), each `heads` heads of hd floats; in each head the
 * first 2 * half values: a = x[i], b = x[half + i] -> x[i] = a * c - b * s, x[half + i] = b * c + a * s with c, s the
 * row's cos[t * half + i], sin[...] (half a multiple of 4; float32 operations, each rounded: reference.py's numpy) */
void exactspec_rope(float *x, int n, int ld, int heads, int hd, int half, const float *cs, const float *sn) {
    for (int t = 0; t < n; t++) {
        const float *c = cs + (intptr_t)t * half, *s = sn + (intptr_t)t * half;
        for (int h = 0; h < heads; h++) {
            float *q = x + (intptr_t)t * ld + (intptr_t)h * hd;
            for (int i = 0; i < half; i += 4) {
                __m128 a = _mm_loadu_ps(q + i), b = _mm_loadu_ps(q + half + i);
                __m128 cv = _mm_loadu_ps(c + i), sv = _mm_loadu_ps(s + i);
                _mm_storeu_ps(q + i, _mm_sub_ps(_mm_mul_ps(a, cv), _mm_mul_ps(b, sv)));
                _mm_storeu_ps(q + half + i, _mm_add_ps(_mm_mul_ps(b, cv), _mm_mul_ps(a, sv)));
            }
        }
    }
}

/* The KV cache's writes for n new positions start.. (copies): keys kn (row t at kn + t * ld floats: n_kv heads of hd)
 * into k5 (n_kv, cap / 2, hd / 4, 2, 4), values vn (the same) into v5 = values^T (n_kv, hd / 2, cap / 4, 2, 4) */
void exactspec_kv_store(const float *kn, const float *vn, int n, int ld, int nkv, int hd, int cap, int start,
                        float *k5, float *v5) {
    for (int t = 0; t < n; t++) {
        int p = start + t;
        for (int h = 0; h < nkv; h++) {
            const float *kr = kn + (intptr_t)t * ld + (intptr_t)h * hd, *vr = vn + (intptr_t)t * ld + (intptr_t)h * hd;
            float *kh = k5 + (intptr_t)h * cap * hd, *vh = v5 + (intptr_t)h * hd * cap;
            for (int j = 0; j < hd; j++) {
                kh[(((intptr_t)(p / 2) * (hd / 4) + j / 4) * 2 + p % 2) * 4 + j % 4] = kr[j];
                vh[(((intptr_t)(j / 2) * (cap / 4) + p / 4) * 2 + j % 2) * 4 + p % 4] = vr[j];
            }
        }
    }
}

/* Attention of m query rows per KV head over `width` keys (reference.py's _attend_simd):
 *   q (nkv, m, hd) scaled queries; k: per KV head (k_hs bytes apart) the packed keys (rows = positions, ld = hd);
 *   v: per KV head (v_hs bytes apart) the packed values^T (rows = hd, ld = cap); lohi (m, 2) int32: the keys
 *   [lo, hi) query row r sees (the same for every head; clamped to 0 <= lo < hi <= width); s (nkv, m, width)
 *   scratch; out (nkv, m, hd).
 * Scores by exactspec_matvec; per row: its largest score over [lo, hi) (the first of equals), e = exp32(s - max) there
 * and 0 elsewhere, their sum in 4 lanes over t = 0 .. width - 1 in order then (a0 + a1) + (a2 + a3), p = e / sum;
 * outputs by exactspec_matvec. A row's bits depend on its queries, its keys' range and width only (batch-invariant),
 * and equal matvec.wat's exactspec_attend. */
void exactspec_attend(const float *q, int nkv, int m, int hd, const char *k, int64_t k_hs, const char *v,
                      int64_t v_hs, int cap, int width, const int32_t *lohi, float *s, float *out) {
    exactspec_matvec(k, width, hd, hd, (const char *)q, m, (char *)s, nkv, k_hs, (int64_t)4 * m * hd,
                     (int64_t)4 * m * width);
    for (int r = 0; r < nkv * m; r++) {
        float *row = s + (intptr_t)r * width;
        int lo = lohi[2 * (r % m)], hi = lohi[2 * (r % m) + 1];
        hi = hi > width ? width : (hi < 1 ? 1 : hi);                /* (kept inside the row: never read past it) */
        lo = lo >= hi ? hi - 1 : (lo < 0 ? 0 : lo);
        float mx = row[lo];
        for (int t = lo + 1; t < hi; t++) mx = row[t] > mx ? row[t] : mx;
        for (int t = 0; t < width; t++) row[t] = t >= lo && t < hi ? exp32(row[t] - mx) : 0.0f;
        __m128 a = _mm_setzero_ps();
        for (int t = 0; t < width; t += 4) a = _mm_add_ps(a, _mm_loadu_ps(row + t));
        __m128 tot = _mm_set1_ps(hsum4(a));
        for (int t = 0; t < width; t += 4) _mm_storeu_ps(row + t, _mm_div_ps(_mm_loadu_ps(row + t), tot));
    }
    exactspec_matvec(v, hd, width, cap, (const char *)s, m, (char *)out, nkv, v_hs, (int64_t)4 * m * width,
                     (int64_t)4 * m * hd);
}

/* ---- several threads (CPython's counterpart of app/cpu_pool.js) ------------------------------------------------
 * exactspec_matvec_threads(w, rows, d, ld, x, n, out, threads): one problem's output rows cut into chunks of whole
 * tiles (CHUNKS_PER_THREAD per thread), which the calling thread and threads - 1 helper threads take from a counter
 * tagged with the product's number (a late helper cannot take a chunk of the next product). Every output is computed
 * by one thread with rows_range's one order of operations: the bits of exactspec_matvec, whatever the split.
 * Helpers are started on first use and spin SPIN_NS after a product (the next one of a forward comes within
 * microseconds), then sleep until the next one. Products under MIN_SHARED multiply-adds run on the calling thread. */
#define THREADS_MAX 16
#define CHUNKS_PER_THREAD 2
#define MIN_SHARED 65536
#define SPIN_NS 200000

static struct {
    const float *w, *x;
    float *out;
    int rows, d, ld, n, tiles_per_chunk, nchunks, helpers;
} job;
static atomic_uint_fast64_t claim;     /* (product << 32) | next chunk */
static atomic_uint product;            /* the product being computed (0: none yet) */
static atomic_int done;                /* chunks of it finished */
static int started;                    /* helper threads running */
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t wake = PTHREAD_COND_INITIALIZER;
static pthread_mutex_t busy = PTHREAD_MUTEX_INITIALIZER;   /* one shared product at a time (ctypes drops the GIL) */

static int take(unsigned g) {          /* a chunk of product g, or -1 when none is left (or g is over) */
    uint64_t c = atomic_load(&claim);
    for (;;) {
        if ((unsigned)(c >> 32) != g || (int)(uint32_t)c >= job.nchunks) return -1;
        if (atomic_compare_exchange_weak(&claim, &c, c + 1)) return (int)(uint32_t)c;
    }
}

static void run_chunk(int k) {
    int i0 = k * job.tiles_per_chunk * 2, i1 = i0 + job.tiles_per_chunk * 2;
    if (i1 > job.rows || k == job.nchunks - 1) i1 = job.rows;
    rows_range(job.w, job.rows, job.d, job.ld, job.x, job.n, job.out, i0, i1);
    atomic_fetch_add(&done, 1);
}

static uint64_t now_ns(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000u + (uint64_t)t.tv_nsec;
}

static void *helper(void *arg) {
    int me = (int)(intptr_t)arg;
    unsigned seen = atomic_load(&product);
    for (;;) {
        unsigned g;
        uint64_t t0 = now_ns();
        int spins = 0;
        while ((g = atomic_load(&product)) == seen) {
            _mm_pause();
            if (++spins % 64 == 0 && now_ns() - t0 > SPIN_NS) {
                pthread_mutex_lock(&mu);
                while ((g = atomic_load(&product)) == seen) pthread_cond_wait(&wake, &mu);
                pthread_mutex_unlock(&mu);
                break;
            }
        }
        seen = g;
        if (me >= job.helpers) continue;        /* (a product for fewer threads; read after g: see take) */
        for (int k; (k = take(g)) >= 0;) run_chunk(k);
    }
    return 0;
}

static void forget_helpers(void) { started = 0; }   /* a forked child has none of its parent's threads */

int exactspec_matvec_threads(const char *w, int rows, int d, int ld, const char *x, int n, char *out, int threads) {
    if (threads > THREADS_MAX) threads = THREADS_MAX;
    if (threads > 1 && started < threads - 1) {
        pthread_mutex_lock(&mu);                            /* (two Python threads may get here together) */
        static int atfork;
        if (!atfork) atfork = pthread_atfork(0, 0, forget_helpers) == 0;
        while (started < threads - 1) {
            pthread_t t;
            if (pthread_create(&t, 0, helper, (void *)(intptr_t)started) != 0) break;
            pthread_detach(t);
            started++;
        }
        pthread_mutex_unlock(&mu);
    }
    int helpers = threads - 1 < started ? threads - 1 : started;
    int tiles = rows / 2;
    /* alone: too small to share, or another Python thread's product holds the helpers (the same bits either way) */
    if (helpers <= 0 || (int64_t)rows * d * n < MIN_SHARED || tiles < 2 || pthread_mutex_trylock(&busy) != 0) {
        rows_range((const float *)w, rows, d, ld, (const float *)x, n, (float *)out, 0, rows);
        return 1;
    }
    int want = (helpers + 1) * CHUNKS_PER_THREAD;
    int per = (tiles + want - 1) / want;
    unsigned g = atomic_load(&product) + 1;
    if (g == 0) g = 1;
    job.w = (const float *)w; job.x = (const float *)x; job.out = (float *)out;
    job.rows = rows; job.d = d; job.ld = ld; job.n = n; job.helpers = helpers;
    job.tiles_per_chunk = per;
    job.nchunks = (tiles + per - 1) / per;
    atomic_store(&done, 0);
    atomic_store(&claim, (uint64_t)g << 32);
    pthread_mutex_lock(&mu);
    atomic_store(&product, g);
    pthread_cond_broadcast(&wake);
    pthread_mutex_unlock(&mu);
    for (int k; (k = take(g)) >= 0;) run_chunk(k);
    while (atomic_load(&done) < job.nchunks) _mm_pause();
    pthread_mutex_unlock(&busy);
    return helpers + 1;
}
