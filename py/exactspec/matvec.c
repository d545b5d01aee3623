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
 */
#include <immintrin.h>
#include <stdint.h>

#define ROWS_MAX 8   /* input rows per load of a tile (matvec.wat: 4; the chunking never changes a bit) */

#define PREFETCH 8192   /* bytes: measured 4096-16384 alike; none: rows past the first cost ~2x as much */

static inline float hsum4(const float *a) { return (a[0] + a[1]) + (a[2] + a[3]); }

/* one tile (2 packed output rows at p) times c <= ROWS_MAX input rows at x (row stride d) -> o (row stride rows);
 * inlined with a constant c (see tile2_c), so the accumulators stay in registers */
static inline __attribute__((always_inline)) void tile2(const float *p, int d, const float *x, int c, float *o, int rows) {
    __m256 acc[ROWS_MAX];
    for (int r = 0; r < c; r++) acc[r] = _mm256_setzero_ps();
    for (int j = 0; j < d; j += 4) {
        _mm_prefetch((const char *)(p + 2 * j) + PREFETCH, _MM_HINT_T0);   /* the stream, ahead of the multiplies */
        __m256 w = _mm256_loadu_ps(p + 2 * j);                       /* row 2t: j..j+3, row 2t + 1: j..j+3 */
        for (int r = 0; r < c; r++) {
            __m256 v = _mm256_broadcast_ps((const __m128 *)(x + (intptr_t)r * d + j));
            acc[r] = _mm256_add_ps(acc[r], _mm256_mul_ps(v, w));
        }
    }
    for (int r = 0; r < c; r++) {
        float a[8];
        _mm256_storeu_ps(a, acc[r]);
        o[(intptr_t)r * rows] = hsum4(a);
        o[(intptr_t)r * rows + 1] = hsum4(a + 4);
    }
}

/* the last unpaired row (ld floats at p) times c input rows */
static inline __attribute__((always_inline)) void last1(const float *p, int d, const float *x, int c, float *o, int rows) {
    __m128 acc[ROWS_MAX];
    for (int r = 0; r < c; r++) acc[r] = _mm_setzero_ps();
    for (int j = 0; j < d; j += 4) {
        __m128 w = _mm_loadu_ps(p + j);
        for (int r = 0; r < c; r++)
            acc[r] = _mm_add_ps(acc[r], _mm_mul_ps(_mm_loadu_ps(x + (intptr_t)r * d + j), w));
    }
    for (int r = 0; r < c; r++) {
        float a[4];
        _mm_storeu_ps(a, acc[r]);
        o[(intptr_t)r * rows] = hsum4(a);
    }
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

void exactspec_matvec(const char *w0, int rows, int d, int ld, const char *x0, int n, char *out0, int heads,
                      int64_t w_hs, int64_t x_hs, int64_t out_hs) {
    int chunks = (n + ROWS_MAX - 1) / ROWS_MAX;
    for (int h = 0; h < heads; h++) {
        const float *w = (const float *)(w0 + h * w_hs);
        const float *x = (const float *)(x0 + h * x_hs);
        float *out = (float *)(out0 + h * out_hs);
        const float *p = w;
        int i = 0;
        for (; i + 2 <= rows; i += 2, p += 2 * (intptr_t)ld) {
            for (int r = 0, m = chunks; r < n; m--) {
                int c = (n - r + m - 1) / m;
                tile2_c(p, d, x + (intptr_t)r * d, c, out + (intptr_t)r * rows + i, rows);
                r += c;
            }
        }
        for (; i < rows; i++, p += ld) {
            for (int r = 0, m = chunks; r < n; m--) {
                int c = (n - r + m - 1) / m;
                last1_c(p, d, x + (intptr_t)r * d, c, out + (intptr_t)r * rows + i, rows);
                r += c;
            }
        }
    }
}
