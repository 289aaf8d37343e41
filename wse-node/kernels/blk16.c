/* The reorders between a plain float32 4-D tensor (n, c, h, w) and
 * oneDNN's channel-blocked layout aBcd16b (n, c / 16, h, w, 16) that the
 * convolutions on oneDNN's layouts run on (conv_blocked.c), in float32 or,
 * packing, rounded to bfloat16: 16 x 16 transposes in AVX-512 registers,
 * a block of 16 pixels of 16 channels at a time. oneDNN's own reorder
 * runs the same moves in its generic kernel where the destination is
 * bfloat16 (2.4 times the time of its float32 one on resnet_small's
 * 32 x 16 x 32 x 32 activations, on an AMD EPYC). The rounding is the
 * processor's (VCVTNEPS2BF16: to nearest even, as oneDNN's reorder), so
 * either path gives the same bits. */
#include <stdint.h>

#include "kernels.h"
#include "kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>
#define BLK16_X86 1
#endif

#ifdef BLK16_X86

#define T512 __attribute__((target("avx512f")))
#define TBF16 __attribute__((target("avx512f,avx512bf16,avx512vl,avx512bw")))

/* r[k] (row k, 16 columns) becomes column k: r[q][k] = old r[k][q]. */
static inline T512 __attribute__((always_inline)) void tr16(__m512 r[16])
{
    __m512 t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_ps(r[2 * i], r[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_ps(r[2 * i], r[2 * i + 1]);
    }
    /* u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3 */
    for (int i = 0; i < 4; i++) {
        __m512d a = _mm512_castps_pd(t[4 * i]), b = _mm512_castps_pd(t[4 * i + 2]);
        __m512d c = _mm512_castps_pd(t[4 * i + 1]), d = _mm512_castps_pd(t[4 * i + 3]);
        u[4 * i] = _mm512_castpd_ps(_mm512_unpacklo_pd(a, b));
        u[4 * i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(a, b));
        u[4 * i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(c, d));
        u[4 * i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(c, d));
    }
    /* column q = 4L + j: lane L of u[j], u[4 + j], u[8 + j], u[12 + j] */
    for (int j = 0; j < 4; j++) {
        __m512 v0 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0x44);
        __m512 v1 = _mm512_shuffle_f32x4(u[j], u[4 + j], 0xEE);
        __m512 v2 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0x44);
        __m512 v3 = _mm512_shuffle_f32x4(u[8 + j], u[12 + j], 0xEE);
        r[j] = _mm512_shuffle_f32x4(v0, v2, 0x88);
        r[4 + j] = _mm512_shuffle_f32x4(v0, v2, 0xDD);
        r[8 + j] = _mm512_shuffle_f32x4(v1, v3, 0x88);
        r[12 + j] = _mm512_shuffle_f32x4(v1, v3, 0xDD);
    }
}

/* A call's arguments: `planes` = n * c / 16 blocks of 16 channels. */
typedef struct blk_job {
    void *blk;            /* aBcd16b: float, or uint16_t bfloat16 when packing to it */
    float *plain;
    size_t hw;
} blk_job;

/* 16 rows of the plain tensor from col, pixels [p, p + cnt), cnt <= 16
 * (the others zero). */
static inline T512 __attribute__((always_inline)) void load_rows(__m512 r[16], const float *src,
                                                                 size_t hw, size_t p, unsigned cnt)
{
    __mmask16 m = (__mmask16)((1u << cnt) - 1);
    for (int k = 0; k < 16; k++)
        r[k] = _mm512_maskz_loadu_ps(m, src + (size_t)k * hw + p);
}

static T512 void pack_f32(void *ctx, size_t lo, size_t hi)
{
    const blk_job *j = ctx;
    __m512 r[16];
    for (size_t b = lo; b < hi; b++) {
        const float *src = j->plain + b * 16 * j->hw;
        float *dst = (float *)j->blk + b * 16 * j->hw;
        for (size_t p = 0; p < j->hw; p += 16) {
            unsigned cnt = j->hw - p < 16 ? (unsigned)(j->hw - p) : 16;
            load_rows(r, src, j->hw, p, cnt);
            tr16(r);
            for (unsigned q = 0; q < cnt; q++)
                _mm512_storeu_ps(dst + (p + q) * 16, r[q]);
        }
    }
}

static TBF16 void pack_bf16(void *ctx, size_t lo, size_t hi)
{
    const blk_job *j = ctx;
    __m512 r[16];
    for (size_t b = lo; b < hi; b++) {
        const float *src = j->plain + b * 16 * j->hw;
        uint16_t *dst = (uint16_t *)j->blk + b * 16 * j->hw;
        for (size_t p = 0; p < j->hw; p += 16) {
            unsigned cnt = j->hw - p < 16 ? (unsigned)(j->hw - p) : 16;
            load_rows(r, src, j->hw, p, cnt);
            tr16(r);
            for (unsigned q = 0; q < cnt; q++)
                _mm256_storeu_si256((__m256i *)(dst + (p + q) * 16),
                                    (__m256i)_mm512_cvtneps_pbh(r[q]));
        }
    }
}

static T512 void unpack_f32(void *ctx, size_t lo, size_t hi)
{
    const blk_job *j = ctx;
    __m512 r[16];
    for (size_t b = lo; b < hi; b++) {
        const float *src = (const float *)j->blk + b * 16 * j->hw;
        float *dst = j->plain + b * 16 * j->hw;
        for (size_t p = 0; p < j->hw; p += 16) {
            unsigned cnt = j->hw - p < 16 ? (unsigned)(j->hw - p) : 16;
            for (unsigned q = 0; q < 16; q++)
                r[q] = q < cnt ? _mm512_loadu_ps(src + (p + q) * 16) : _mm512_setzero_ps();
            tr16(r);
            __mmask16 m = (__mmask16)((1u << cnt) - 1);
            for (int k = 0; k < 16; k++)
                _mm512_mask_storeu_ps(dst + (size_t)k * j->hw + p, m, r[k]);
        }
    }
}

/* Elementwise: floats [lo, hi) * 16 (and the tail with the last) rounded */
static TBF16 void round_bf16(void *ctx, size_t lo, size_t hi)
{
    const blk_job *j = ctx;
    const float *src = j->plain;
    uint16_t *dst = j->blk;
    size_t end = hi * 16 > j->hw ? j->hw : hi * 16;
    for (size_t q = lo * 16; q < end; q += 16) {
        unsigned cnt = end - q < 16 ? (unsigned)(end - q) : 16;
        __mmask16 m = (__mmask16)((1u << cnt) - 1);
        __m256i h = (__m256i)_mm512_cvtneps_pbh(_mm512_maskz_loadu_ps(m, src + q));
        _mm256_mask_storeu_epi16(dst + q, m, h);
    }
}

/* A dense layer's output gradient, once over, for its mixed-precision
 * backward pass (kern__bf16_dy): a share is a range of 16-column strips,
 * every row of them from the first to the last. */
typedef struct dy_job {
    float *dy;            /* rows of cols; masked in place where y is given */
    const float *y;       /* the relu's output, or NULL */
    float *dbias;         /* or NULL */
    uint16_t *plain, *tr; /* or NULL; tr: cols rows of n */
    size_t n, cols;
} dy_job;

/* Each row tile, 16 rows: first row by row along the share's columns
 * (the relu's mask, the sums, the plain copy), then back over those rows,
 * now in cache, a 16 x 16 transpose at a time. Row by row, the processor
 * streams each row; walking 16 rows at once it lost its prefetching (the
 * pass ran at two thirds of the speed). */
static TBF16 void dy_strips(void *ctx, size_t lo, size_t hi)
{
    const dy_job *j = ctx;
    size_t c_lo = lo * 16, c_hi = hi * 16 < j->cols ? hi * 16 : j->cols;
    __m512 r[16];
    for (size_t r0 = 0; r0 < j->n; r0 += 16) {
        unsigned rows = j->n - r0 < 16 ? (unsigned)(j->n - r0) : 16;
        for (unsigned k = 0; k < rows; k++) {
            size_t row = (r0 + k) * j->cols;
            for (size_t c = c_lo; c < c_hi; c += 16) {
                unsigned cnt = c_hi - c < 16 ? (unsigned)(c_hi - c) : 16;
                __mmask16 m = (__mmask16)((1u << cnt) - 1);
                __m512 v = _mm512_maskz_loadu_ps(m, j->dy + row + c);
                if (j->y) { /* the relu's gradient: dy where y > 0, else +0 (NaN: 0) */
                    __mmask16 pos = _mm512_mask_cmp_ps_mask(
                        m, _mm512_maskz_loadu_ps(m, j->y + row + c), _mm512_setzero_ps(),
                        _CMP_GT_OQ);
                    v = _mm512_maskz_mov_ps(pos, v);
                    _mm512_mask_storeu_ps(j->dy + row + c, m, v);
                }
                /* each column summed down the rows in order, from the first row's value */
                if (j->dbias)
                    _mm512_mask_storeu_ps(
                        j->dbias + c, m,
                        r0 + k ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, j->dbias + c), v) : v);
                if (j->plain)
                    _mm256_mask_storeu_epi16(j->plain + row + c, m,
                                             (__m256i)_mm512_cvtneps_pbh(v));
            }
        }
        if (!j->tr)
            continue;
        __mmask16 rm = (__mmask16)((1u << rows) - 1);
        for (size_t c = c_lo; c < c_hi; c += 16) {
            unsigned cnt = c_hi - c < 16 ? (unsigned)(c_hi - c) : 16;
            __mmask16 m = (__mmask16)((1u << cnt) - 1);
            for (unsigned k = 0; k < 16; k++)
                r[k] = k < rows ? _mm512_maskz_loadu_ps(m, j->dy + (r0 + k) * j->cols + c)
                                : _mm512_setzero_ps();
            tr16(r);
            for (unsigned q = 0; q < cnt; q++)
                _mm256_mask_storeu_epi16(j->tr + (c + q) * j->n + r0, rm,
                                         (__m256i)_mm512_cvtneps_pbh(r[q]));
        }
    }
}

int kern__bf16_dy(float *dy, const float *y, float *dbias, uint16_t *plain, uint16_t *tr, int n,
                  int cols)
{
    if (n <= 0 || cols <= 0 || !__builtin_cpu_supports("avx512bf16"))
        return 0;
    dy_job j = {dy, y, dbias, plain, tr, (size_t)n, (size_t)cols};
    size_t strips = ((size_t)cols + 15) / 16;
    /* about 64 Ki elements a share at the least */
    kernels_for(strips, 4096 / (size_t)n + 1, dy_strips, &j);
    return 1;
}

int kern__blk16_reorder(kern__blk16_kind kind, void *blk, float *plain, int n, int c, size_t hw)
{
    if (kind == KERN__BLK16_ROUND_BF16) {
        if (n <= 0 || c <= 0 || hw == 0 || !__builtin_cpu_supports("avx512bf16"))
            return 0;
        blk_job r = {blk, plain, (size_t)n * (size_t)c * hw};
        kernels_for((r.hw + 15) / 16, 2048, round_bf16, &r);
        return 1;
    }
    if (n <= 0 || c <= 0 || c % 16 || hw == 0 || !__builtin_cpu_supports("avx512f"))
        return 0;
    if (kind == KERN__BLK16_PACK_BF16 && !__builtin_cpu_supports("avx512bf16"))
        return 0;
    blk_job j = {blk, plain, hw};
    size_t blocks = (size_t)n * (size_t)(c / 16);
    size_t grain = 2048 / hw + 1; /* about 32 Ki elements a share at the least */
    kernels_for(blocks, grain, kind == KERN__BLK16_PACK_F32    ? pack_f32
                               : kind == KERN__BLK16_PACK_BF16 ? pack_bf16
                                                               : unpack_f32,
                &j);
    return 1;
}

#else

int kern__bf16_dy(float *dy, const float *y, float *dbias, uint16_t *plain, uint16_t *tr, int n,
                  int cols)
{
    (void)dy, (void)y, (void)dbias, (void)plain, (void)tr, (void)n, (void)cols;
    return 0;
}

int kern__blk16_reorder(kern__blk16_kind kind, void *blk, float *plain, int n, int c, size_t hw)
{
    (void)kind, (void)blk, (void)plain, (void)n, (void)c, (void)hw;
    return 0;
}

#endif
