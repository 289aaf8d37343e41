/* The reorders between a plain float32 4-D tensor (n, c, h, w) and
 * oneDNN's channel-blocked layout aBcd16b (n, c / 16, h, w, 16) that the
 * convolutions on oneDNN's layouts run on (conv_blocked.c), in float32 or,
 * packing, rounded to bfloat16: 16 x 16 transposes in AVX-512 registers,
 * a block of 16 pixels of 16 channels at a time. oneDNN's own reorder
 * runs the same moves in its generic kernel where the destination is
 * bfloat16 (2.4 times the time of its float32 one on resnet_small's
 * 32 x 16 x 32 x 32 activations, on an AMD EPYC). The rounding is the
 * processor's (VCVTNEPS2BF16: to nearest even, as oneDNN's reorder), so
 * either path gives the same bits.
 *
 * Also the passes of a mixed-precision dense layer's GEMMs (op_dense.c,
 * gemm_bf16.c): its output gradient masked and rounded both as it is and
 * transposed in one pass (kern__bf16_dy), and a matrix put into the
 * BA16a64b2a layout oneDNN's bfloat16 matmul takes its B in
 * (kern__bf16_vnni). */
#include <stdint.h>
#include <string.h>

#include "bf16.h"
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

/* A call's arguments: n * c / 16 blocks of 16 channels. The plain
 * tensor's channels are ld floats apart and its samples nld (hw and c * hw
 * where it is whole; more where it is a band of planes inside a larger
 * tensor); the blocked one is whole. */
typedef struct blk_job {
    void *blk;            /* aBcd16b: float, or uint16_t bfloat16 when packing to it */
    float *plain;
    size_t hw, ld, nld, cb; /* cb: blocks of a sample */
} blk_job;

static inline size_t plain_at(const blk_job *j, size_t b)
{
    return (b / j->cb) * j->nld + (b % j->cb) * 16 * j->ld;
}

/* 16 rows of the plain tensor from col, pixels [p, p + cnt), cnt <= 16
 * (the others zero). */
static inline T512 __attribute__((always_inline)) void load_rows(__m512 r[16], const float *src,
                                                                 size_t ld, size_t p, unsigned cnt)
{
    __mmask16 m = (__mmask16)((1u << cnt) - 1);
    for (int k = 0; k < 16; k++)
        r[k] = _mm512_maskz_loadu_ps(m, src + (size_t)k * ld + p);
}

static T512 void pack_f32(void *ctx, size_t lo, size_t hi)
{
    const blk_job *j = ctx;
    __m512 r[16];
    for (size_t b = lo; b < hi; b++) {
        const float *src = j->plain + plain_at(j, b);
        float *dst = (float *)j->blk + b * 16 * j->hw;
        for (size_t p = 0; p < j->hw; p += 16) {
            unsigned cnt = j->hw - p < 16 ? (unsigned)(j->hw - p) : 16;
            load_rows(r, src, j->ld, p, cnt);
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
        const float *src = j->plain + plain_at(j, b);
        uint16_t *dst = (uint16_t *)j->blk + b * 16 * j->hw;
        for (size_t p = 0; p < j->hw; p += 16) {
            unsigned cnt = j->hw - p < 16 ? (unsigned)(j->hw - p) : 16;
            load_rows(r, src, j->ld, p, cnt);
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
        float *dst = j->plain + plain_at(j, b);
        for (size_t p = 0; p < j->hw; p += 16) {
            unsigned cnt = j->hw - p < 16 ? (unsigned)(j->hw - p) : 16;
            for (unsigned q = 0; q < 16; q++)
                r[q] = q < cnt ? _mm512_loadu_ps(src + (p + q) * 16) : _mm512_setzero_ps();
            tr16(r);
            __mmask16 m = (__mmask16)((1u << cnt) - 1);
            for (int k = 0; k < 16; k++)
                _mm512_mask_storeu_ps(dst + (size_t)k * j->ld + p, m, r[k]);
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
 * backward pass (kern__bf16_dy): a share is a range of 32-row tiles (the
 * rows the GEMM that made dY wrote on the same thread, mostly, and whole
 * lines of the transpose). */
typedef struct dy_job {
    float *dy;            /* rows of cols; masked in place where y is given */
    const float *y;       /* the relu's output, or NULL */
    uint16_t *plain, *tr; /* or NULL; tr: cols rows of n */
    size_t n, cols;
} dy_job;

/* Each 16 rows: first row by row (the relu's mask, the plain copy), then
 * back over those rows, now in cache, a 16 x 16 transpose at a time. */
static TBF16 void dy_rows(void *ctx, size_t lo, size_t hi)
{
    const dy_job *j = ctx;
    size_t end = hi * 32 < j->n ? hi * 32 : j->n;
    __m512 r[16];
    for (size_t r0 = lo * 32; r0 < end; r0 += 16) {
        unsigned rows = end - r0 < 16 ? (unsigned)(end - r0) : 16;
        for (unsigned k = 0; k < rows && (j->y || j->plain); k++) {
            size_t row = (r0 + k) * j->cols;
            for (size_t c = 0; c < j->cols; c += 16) {
                unsigned cnt = j->cols - c < 16 ? (unsigned)(j->cols - c) : 16;
                __mmask16 m = (__mmask16)((1u << cnt) - 1);
                __m512 v = _mm512_maskz_loadu_ps(m, j->dy + row + c);
                if (j->y) { /* the relu's gradient: dy where y > 0, else +0 (NaN: 0) */
                    __mmask16 pos = _mm512_mask_cmp_ps_mask(
                        m, _mm512_maskz_loadu_ps(m, j->y + row + c), _mm512_setzero_ps(),
                        _CMP_GT_OQ);
                    v = _mm512_maskz_mov_ps(pos, v);
                    _mm512_mask_storeu_ps(j->dy + row + c, m, v);
                }
                if (j->plain)
                    _mm256_mask_storeu_epi16(j->plain + row + c, m,
                                             (__m256i)_mm512_cvtneps_pbh(v));
            }
        }
        if (!j->tr)
            continue;
        __mmask16 rm = (__mmask16)((1u << rows) - 1);
        for (size_t c = 0; c < j->cols; c += 16) {
            unsigned cnt = j->cols - c < 16 ? (unsigned)(j->cols - c) : 16;
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

int kern__bf16_dy(float *dy, const float *y, uint16_t *plain, uint16_t *tr, int n, int cols)
{
    if (n <= 0 || cols <= 0 || kernels_isa_level() < KERNELS_ISA_AVX512_BF16)
        return 0;
    dy_job j = {dy, y, plain, tr, (size_t)n, (size_t)cols};
    /* about 64 Ki elements a share at the least */
    kernels_for(((size_t)n + 31) / 32, 2048 / (size_t)cols + 1, dy_rows, &j);
    return 1;
}

/* A K x N matrix into the matmul's BA16a64b2a (kern__bf16_vnni): a share
 * is a range of its 32 x 64 blocks, N's outermost. */
typedef struct vnni_job {
    uint16_t *out;
    const float *f;
    const uint16_t *h;
    size_t k, n, ld, kblocks;
} vnni_job;

static TBF16 void vnni_blocks(void *ctx, size_t lo, size_t hi)
{
    const vnni_job *j = ctx;
    /* a pair of rows, 16 columns each, side by side (row k in the low
     * half, k + 1 in the high one) to their pairs (k, k + 1) per column */
    static const uint16_t pairs[32] = {0, 16, 1, 17, 2,  18, 3,  19, 4,  20, 5,  21, 6,  22, 7,  23,
                                       8, 24, 9, 25, 10, 26, 11, 27, 12, 28, 13, 29, 14, 30, 15, 31};
    __m512i idx = _mm512_loadu_si512(pairs);
    for (size_t b = lo; b < hi; b++) {
        size_t k0 = (b % j->kblocks) * 32, n0 = (b / j->kblocks) * 64;
        uint16_t *dst = j->out + b * 2048;
        for (unsigned p = 0; p < 16; p++) {
            size_t ka = k0 + 2 * p, kb = ka + 1;
            for (unsigned g = 0; g < 4; g++) {
                size_t c = n0 + 16 * g;
                unsigned cnt = c >= j->n ? 0 : j->n - c < 16 ? (unsigned)(j->n - c) : 16;
                __mmask16 m = (__mmask16)((1u << cnt) - 1);
                __mmask16 ma = ka < j->k ? m : 0, mb = kb < j->k ? m : 0;
                __m512i v;
                if (j->f) {
                    __m512 a = _mm512_maskz_loadu_ps(ma, j->f + ka * j->ld + c);
                    __m512 bv = _mm512_maskz_loadu_ps(mb, j->f + (kb < j->k ? kb : ka) * j->ld + c);
                    v = (__m512i)_mm512_cvtne2ps_pbh(bv, a); /* a low, b high */
                } else {
                    __m256i a = _mm256_maskz_loadu_epi16(ma, j->h + ka * j->ld + c);
                    __m256i bv = _mm256_maskz_loadu_epi16(mb, j->h + (kb < j->k ? kb : ka) * j->ld + c);
                    v = _mm512_inserti64x4(_mm512_castsi256_si512(a), bv, 1);
                }
                _mm512_storeu_si512(dst + p * 128 + g * 32, _mm512_permutexvar_epi16(idx, v));
            }
        }
    }
}

int kern__bf16_vnni_ok(void)
{
    return kernels_isa_level() >= KERNELS_ISA_AVX512_BF16;
}

int kern__bf16_vnni(uint16_t *out, const float *f, const uint16_t *h, int k, int n, int ld)
{
    if (k <= 0 || n <= 0 || !kern__bf16_vnni_ok())
        return 0;
    vnni_job j = {out, f, h, (size_t)k, (size_t)n, (size_t)ld, ((size_t)k + 31) / 32};
    size_t blocks = j.kblocks * (((size_t)n + 63) / 64);
    kernels_for(blocks, 16, vnni_blocks, &j);
    return 1;
}

int kern__blk16_reorder(kern__blk16_kind kind, void *blk, float *plain, int n, int c, size_t hw)
{
    return kern__blk16_reorder_ld(kind, blk, plain, n, c, hw, hw, (size_t)c * hw);
}

int kern__blk16_reorder_ld(kern__blk16_kind kind, void *blk, float *plain, int n, int c,
                           size_t hw, size_t ld, size_t nld)
{
    if (kind == KERN__BLK16_ROUND_BF16) {
        if (ld != hw || nld != (size_t)c * hw)
            return 0;
        if (n <= 0 || c <= 0 || hw == 0 || kernels_isa_level() < KERNELS_ISA_AVX512_BF16)
            return 0;
        blk_job r = {.blk = blk, .plain = plain, .hw = (size_t)n * (size_t)c * hw};
        kernels_for((r.hw + 15) / 16, 2048, round_bf16, &r);
        return 1;
    }
    if (n <= 0 || c <= 0 || c % 16 || hw == 0 || kernels_isa_level() < KERNELS_ISA_AVX512)
        return 0;
    if (kind == KERN__BLK16_PACK_BF16 && kernels_isa_level() < KERNELS_ISA_AVX512_BF16)
        return 0;
    blk_job j = {blk, plain, hw, ld, nld, (size_t)c / 16};
    size_t blocks = (size_t)n * (size_t)(c / 16);
    size_t grain = 2048 / hw + 1; /* about 32 Ki elements a share at the least */
    kernels_for(blocks, grain, kind == KERN__BLK16_PACK_F32    ? pack_f32
                               : kind == KERN__BLK16_PACK_BF16 ? pack_bf16
                                                               : unpack_f32,
                &j);
    return 1;
}

#else

int kern__bf16_vnni_ok(void)
{
    return 0;
}

int kern__bf16_vnni(uint16_t *out, const float *f, const uint16_t *h, int k, int n, int ld)
{
    (void)out, (void)f, (void)h, (void)k, (void)n, (void)ld;
    return 0;
}

int kern__bf16_dy(float *dy, const float *y, uint16_t *plain, uint16_t *tr, int n, int cols)
{
    (void)dy, (void)y, (void)plain, (void)tr, (void)n, (void)cols;
    return 0;
}

int kern__blk16_reorder(kern__blk16_kind kind, void *blk, float *plain, int n, int c, size_t hw)
{
    (void)kind, (void)blk, (void)plain, (void)n, (void)c, (void)hw;
    return 0;
}

int kern__blk16_reorder_ld(kern__blk16_kind kind, void *blk, float *plain, int n, int c,
                           size_t hw, size_t ld, size_t nld)
{
    (void)kind, (void)blk, (void)plain, (void)n, (void)c, (void)hw, (void)ld, (void)nld;
    return 0;
}

#endif

/* kern__blk_pack's arguments: blocks of `block` channels. */
typedef struct pack_job {
    void *blk;
    const float *plain;
    size_t hw, ld, nld, cb, c;
    int block, bf16;
} pack_job;

/* Blocks [lo, hi): 64 pixels of a block's channels at a time gathered
 * into the blocked order (the channels past c zero), then copied or
 * rounded into place. */
static void pack_any(void *ctx, size_t lo, size_t hi)
{
    const pack_job *j = ctx;
    float tmp[64 * 16];
    size_t bs = (size_t)j->block;
    for (size_t b = lo; b < hi; b++) {
        const float *src = j->plain + (b / j->cb) * j->nld + (b % j->cb) * bs * j->ld;
        size_t have = j->c - (b % j->cb) * bs;
        for (size_t p = 0; p < j->hw; p += 64) {
            size_t cnt = j->hw - p < 64 ? j->hw - p : 64;
            for (size_t k = 0; k < bs; k++)
                for (size_t q = 0; q < cnt; q++)
                    tmp[q * bs + k] = k < have ? src[k * j->ld + p + q] : 0.0f;
            size_t at = (b * j->hw + p) * bs;
            if (j->bf16)
                bf16_pack((uint16_t *)j->blk + at, tmp, cnt * bs);
            else
                memcpy((float *)j->blk + at, tmp, cnt * bs * sizeof(float));
        }
    }
}

void kern__blk_pack(void *blk, int bf16, int block, const float *plain, int n, int c, size_t hw,
                    size_t ld, size_t nld)
{
    if (block == 16 &&
        kern__blk16_reorder_ld(bf16 ? KERN__BLK16_PACK_BF16 : KERN__BLK16_PACK_F32, blk,
                               (float *)(uintptr_t)plain, n, c, hw, ld, nld))
        return;
    size_t cb = ((size_t)c + (size_t)block - 1) / (size_t)block;
    pack_job j = {blk, plain, hw, ld, nld, cb, (size_t)c, block, bf16};
    kernels_for((size_t)n * cb, 2048 / hw + 1, pack_any, &j);
}
