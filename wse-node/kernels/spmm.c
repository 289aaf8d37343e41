/* The inner loops of the sparse dense layers (op_sparse_dense.c): a
 * sparse matrix in column panels times a dense one (spmm), the dot
 * products at a sparse matrix's entries (sddmm, the weight gradient at the
 * kept positions), and a transpose; each on AVX-512, AVX2 + FMA, or plain
 * loops. One panel's rows of the dense operand (64 to 256 rows of a chunk
 * of its columns) stay in L1/L2 while every sparse row passes over them. */
#include "kernels.h"
#include "kernels_internal.h"

#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#if defined(__x86_64__) && defined(__GNUC__)
#define SPMM_X86 1
#include <immintrin.h>
#endif

/* ---- plain loops ---- */

static void spmm_plain(const kern__panels *a, const float *b, int ldb, int n, const float *init,
                       int cinit, float *c, int ldc, int r0, int r1)
{
    enum { CW = 64 };
    for (int c0 = 0; c0 < n; c0 += CW) {
        int w = n - c0 < CW ? n - c0 : CW;
        for (int p = 0; p < a->npan; p++) {
            const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
            const float *bp = b + (size_t)p * a->pw * ldb + c0;
            for (int r = r0; r < r1; r++) {
                float acc[CW];
                float *cr = c + (size_t)r * ldc + c0;
                if (p == 0)
                    for (int j = 0; j < w; j++)
                        acc[j] = !init ? 0.0f : cinit ? init[c0 + j] : init[r];
                else
                    memcpy(acc, cr, sizeof(float) * w);
                for (uint32_t e = ptr[r]; e < ptr[r + 1]; e++) {
                    const float x = a->val[e], *br = bp + (size_t)a->idx[e] * ldb;
                    for (int j = 0; j < w; j++)
                        acc[j] += x * br[j];
                }
                memcpy(cr, acc, sizeof(float) * w);
            }
        }
        if (a->npan == 0)
            for (int r = r0; r < r1; r++)
                for (int j = 0; j < w; j++)
                    c[(size_t)r * ldc + c0 + j] = !init ? 0.0f : cinit ? init[c0 + j] : init[r];
    }
}

static void sddmm_plain(const kern__panels *a, const float *l, int ldl, const float *rm, int ldr,
                        int n, float *v, const uint32_t *ord, int r0, int r1)
{
    for (int p = 0; p < a->npan; p++) {
        const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
        for (int r = r0; r < r1; r++) {
            const float *lr = l + (size_t)r * ldl;
            for (uint32_t e = ptr[r]; e < ptr[r + 1]; e++) {
                const float *rr = rm + ((size_t)p * a->pw + a->idx[e]) * ldr;
                float s[16] = {0};
                for (int j = 0; j < n; j += 16)
                    for (int q = 0; q < 16; q++)
                        s[q] += lr[j + q] * rr[j + q];
                float t = 0.0f;
                for (int q = 0; q < 16; q++)
                    t += s[q];
                v[ord ? ord[e] : e] = t;
            }
        }
    }
}

#ifdef SPMM_X86

/* ---- AVX-512 ---- */

/* One sparse row over nv vectors of a chunk (the last masked by m) */
#define SPMM512_ROW(NV)                                                                          \
    __attribute__((target("avx512f"))) static void spmm512_row##NV(                               \
        const uint16_t *idx, const float *val, uint32_t e0, uint32_t e1, const float *bp,       \
        int ldb, float *cr, int first, float init, const float *cs, __mmask16 m)                  \
    {                                                                                             \
        __m512 acc[NV];                                                                           \
        for (int v = 0; v < NV; v++)                                                              \
            acc[v] = _mm512_maskz_loadu_ps(v == NV - 1 ? m : 0xffff,                              \
                                           first && cs ? cs + 16 * v : cr + 16 * v);              \
        if (first && !cs)                                                                         \
            for (int v = 0; v < NV; v++)                                                          \
                acc[v] = _mm512_set1_ps(init);                                                    \
        for (uint32_t e = e0; e < e1; e++) {                                                      \
            __m512 x = _mm512_set1_ps(val[e]);                                                    \
            const float *br = bp + (size_t)idx[e] * ldb;                                          \
            for (int v = 0; v < NV; v++)                                                          \
                acc[v] = _mm512_fmadd_ps(                                                         \
                    x, _mm512_maskz_loadu_ps(v == NV - 1 ? m : 0xffff, br + 16 * v), acc[v]);     \
        }                                                                                         \
        for (int v = 0; v < NV; v++)                                                              \
            _mm512_mask_storeu_ps(cr + 16 * v, v == NV - 1 ? m : 0xffff, acc[v]);                 \
    }
SPMM512_ROW(1)
SPMM512_ROW(2)
SPMM512_ROW(3)
SPMM512_ROW(4)

/* The same for full chunks of 4 vectors, no masks */
__attribute__((target("avx512f"))) static void spmm512_row4f(const uint16_t *idx,
                                                              const float *val, uint32_t e0,
                                                              uint32_t e1, const float *bp,
                                                              int ldb, float *cr, int first,
                                                              float init, const float *cs)
{
    __m512 a0, a1, a2, a3;
    if (first && cs) {
        a0 = _mm512_loadu_ps(cs);
        a1 = _mm512_loadu_ps(cs + 16);
        a2 = _mm512_loadu_ps(cs + 32);
        a3 = _mm512_loadu_ps(cs + 48);
    } else if (first) {
        a0 = a1 = a2 = a3 = _mm512_set1_ps(init);
    } else {
        a0 = _mm512_loadu_ps(cr);
        a1 = _mm512_loadu_ps(cr + 16);
        a2 = _mm512_loadu_ps(cr + 32);
        a3 = _mm512_loadu_ps(cr + 48);
    }
    uint32_t e = e0;
    for (; e + 2 <= e1; e += 2) {
        __m512 x = _mm512_set1_ps(val[e]), y = _mm512_set1_ps(val[e + 1]);
        const float *br = bp + (size_t)idx[e] * ldb, *bs = bp + (size_t)idx[e + 1] * ldb;
        a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br), a0);
        a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 16), a1);
        a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 32), a2);
        a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 48), a3);
        a0 = _mm512_fmadd_ps(y, _mm512_loadu_ps(bs), a0);
        a1 = _mm512_fmadd_ps(y, _mm512_loadu_ps(bs + 16), a1);
        a2 = _mm512_fmadd_ps(y, _mm512_loadu_ps(bs + 32), a2);
        a3 = _mm512_fmadd_ps(y, _mm512_loadu_ps(bs + 48), a3);
    }
    for (; e < e1; e++) {
        __m512 x = _mm512_set1_ps(val[e]);
        const float *br = bp + (size_t)idx[e] * ldb;
        a0 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br), a0);
        a1 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 16), a1);
        a2 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 32), a2);
        a3 = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 48), a3);
    }
    _mm512_storeu_ps(cr, a0);
    _mm512_storeu_ps(cr + 16, a1);
    _mm512_storeu_ps(cr + 32, a2);
    _mm512_storeu_ps(cr + 48, a3);
}

/* Full chunks of 8 vectors (128 columns): eight independent chains of
 * multiply-adds, the index and the broadcast shared by eight */
__attribute__((target("avx512f"))) static void spmm512_row8f(const uint16_t *idx,
                                                              const float *val, uint32_t e0,
                                                              uint32_t e1, const float *bp,
                                                              int ldb, float *cr, int first,
                                                              float init, const float *cs)
{
    __m512 a[8];
    for (int v = 0; v < 8; v++)
        a[v] = first ? (cs ? _mm512_loadu_ps(cs + 16 * v) : _mm512_set1_ps(init))
                     : _mm512_loadu_ps(cr + 16 * v);
    for (uint32_t e = e0; e < e1; e++) {
        __m512 x = _mm512_set1_ps(val[e]);
        const float *br = bp + (size_t)idx[e] * ldb;
        for (int v = 0; v < 8; v++)
            a[v] = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 16 * v), a[v]);
    }
    for (int v = 0; v < 8; v++)
        _mm512_storeu_ps(cr + 16 * v, a[v]);
}

/* Two rows of NV full vectors at once: twice the independent chains of
 * multiply-adds (one row's leave a multiply-add's latency exposed where
 * the loads of the dense rows come from L1), over the entries the two
 * rows have in common count, then each row's rest */
#define SPMM512_ROWS2(NV)                                                                         \
    __attribute__((target("avx512f"))) static void spmm512_rows2_##NV(                            \
        const uint16_t *idx, const float *val, uint32_t e0, uint32_t e1, uint32_t f0,             \
        uint32_t f1, const float *bp, int ldb, float *cr, float *cq, int first, float init,       \
        float initq, const float *cs)                                                             \
    {                                                                                             \
        __m512 a[NV], q[NV];                                                                      \
        for (int v = 0; v < NV; v++) {                                                            \
            a[v] = first ? (cs ? _mm512_loadu_ps(cs + 16 * v) : _mm512_set1_ps(init))             \
                         : _mm512_loadu_ps(cr + 16 * v);                                          \
            q[v] = first ? (cs ? _mm512_loadu_ps(cs + 16 * v) : _mm512_set1_ps(initq))            \
                         : _mm512_loadu_ps(cq + 16 * v);                                          \
        }                                                                                         \
        uint32_t e = e0, f = f0;                                                                  \
        for (; e < e1 && f < f1; e++, f++) {                                                      \
            __m512 x = _mm512_set1_ps(val[e]), y = _mm512_set1_ps(val[f]);                        \
            const float *br = bp + (size_t)idx[e] * ldb, *bq = bp + (size_t)idx[f] * ldb;         \
            for (int v = 0; v < NV; v++) {                                                        \
                a[v] = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 16 * v), a[v]);                    \
                q[v] = _mm512_fmadd_ps(y, _mm512_loadu_ps(bq + 16 * v), q[v]);                    \
            }                                                                                     \
        }                                                                                         \
        for (; e < e1; e++) {                                                                     \
            __m512 x = _mm512_set1_ps(val[e]);                                                    \
            const float *br = bp + (size_t)idx[e] * ldb;                                          \
            for (int v = 0; v < NV; v++)                                                          \
                a[v] = _mm512_fmadd_ps(x, _mm512_loadu_ps(br + 16 * v), a[v]);                    \
        }                                                                                         \
        for (; f < f1; f++) {                                                                     \
            __m512 y = _mm512_set1_ps(val[f]);                                                    \
            const float *bq = bp + (size_t)idx[f] * ldb;                                          \
            for (int v = 0; v < NV; v++)                                                          \
                q[v] = _mm512_fmadd_ps(y, _mm512_loadu_ps(bq + 16 * v), q[v]);                    \
        }                                                                                         \
        for (int v = 0; v < NV; v++) {                                                            \
            _mm512_storeu_ps(cr + 16 * v, a[v]);                                                  \
            _mm512_storeu_ps(cq + 16 * v, q[v]);                                                  \
        }                                                                                         \
    }
SPMM512_ROWS2(8)
SPMM512_ROWS2(4)

/* Rows [r0, r1) of one chunk of nv full vectors (64 or 128 columns) over
 * every panel, two rows at a time */
static void spmm512_chunk(const kern__panels *a, const float *b, int ldb, int c0, int nv,
                          const float *init, int cinit, float *c, int ldc, int r0, int r1)
{
    const float *cs = cinit && init ? init + c0 : NULL;
    for (int p = 0; p < a->npan; p++) {
        const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
        const float *bp = b + (size_t)p * a->pw * ldb + c0;
        int r = r0;
        for (; r + 2 <= r1; r += 2) {
            float *cr = c + (size_t)r * ldc + c0, *cq = cr + ldc;
            float iv = init && !cinit ? init[r] : 0.0f, iq = init && !cinit ? init[r + 1] : 0.0f;
            if (nv == 8)
                spmm512_rows2_8(a->idx, a->val, ptr[r], ptr[r + 1], ptr[r + 1], ptr[r + 2], bp,
                                ldb, cr, cq, p == 0, iv, iq, cs);
            else
                spmm512_rows2_4(a->idx, a->val, ptr[r], ptr[r + 1], ptr[r + 1], ptr[r + 2], bp,
                                ldb, cr, cq, p == 0, iv, iq, cs);
        }
        for (; r < r1; r++) {
            float *cr = c + (size_t)r * ldc + c0, iv = init && !cinit ? init[r] : 0.0f;
            if (nv == 8)
                spmm512_row8f(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs);
            else
                spmm512_row4f(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs);
        }
    }
}

static void spmm_512(const kern__panels *a, const float *b, int ldb, int n, const float *init,
                     int cinit, float *c, int ldc, int r0, int r1)
{
    enum { CW = 64 };
    int c0 = 0;
    /* 128 columns at a time while they last (a panel's rows of B: 32 KiB
     * at 64 rows, in L1; 128 KiB at 256, in L2), then 64, then the rest,
     * masked */
    for (; c0 + 2 * CW <= n; c0 += 2 * CW)
        spmm512_chunk(a, b, ldb, c0, 8, init, cinit, c, ldc, r0, r1);
    for (; c0 + CW <= n; c0 += CW)
        spmm512_chunk(a, b, ldb, c0, 4, init, cinit, c, ldc, r0, r1);
    if (c0 < n) {
        int w = n - c0, nv = (w + 15) / 16, tail = w - 16 * (nv - 1);
        __mmask16 m = (__mmask16)(tail == 16 ? 0xffff : (1u << tail) - 1);
        for (int p = 0; p < a->npan; p++) {
            const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
            const float *bp = b + (size_t)p * a->pw * ldb + c0;
            for (int r = r0; r < r1; r++) {
                float *cr = c + (size_t)r * ldc + c0, iv = init && !cinit ? init[r] : 0.0f;
                const float *cs = cinit && init ? init + c0 : NULL;
                if (nv == 4)
                    spmm512_row4(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs, m);
                else if (nv == 3)
                    spmm512_row3(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs, m);
                else if (nv == 2)
                    spmm512_row2(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs, m);
                else
                    spmm512_row1(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs, m);
            }
        }
    }
    if (a->npan == 0)
        spmm_plain(a, b, ldb, n, init, cinit, c, ldc, r0, r1);
}

/* Four sums of 16 lanes into the four lanes of the result (s0's in lane
 * 0): pairwise halves, each entry's lanes in one fixed order */
__attribute__((target("avx512f"))) static inline __m128 sddmm512_sum4(__m512 s0, __m512 s1,
                                                                       __m512 s2, __m512 s3)
{
    __m512 t01 = _mm512_add_ps(_mm512_unpacklo_ps(s0, s1), _mm512_unpackhi_ps(s0, s1));
    __m512 t23 = _mm512_add_ps(_mm512_unpacklo_ps(s2, s3), _mm512_unpackhi_ps(s2, s3));
    __m512 u = _mm512_add_ps(
        _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))),
        _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t01), _mm512_castps_pd(t23))));
    /* u's lanes 4k + j hold partial sums of entry j over 128-bit lane k */
    __m256 h = _mm256_add_ps(_mm512_castps512_ps256(u),
                             _mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(u), 1)));
    return _mm_add_ps(_mm256_castps256_ps128(h), _mm256_extractf128_ps(h, 1));
}

/* Dot products of L's row (nv vectors, in registers) with R's rows of 8
 * entries at a time; v[e - e0] set (first) or added to. */
#define SDDMM512(NV)                                                                              \
    __attribute__((target("avx512f"))) static void sddmm512_##NV(                                 \
        const uint16_t *idx, uint32_t e0, uint32_t e1, const float *lr, const float *rp, int ldr, \
        float *v, int first)                                                                      \
    {                                                                                             \
        __m512 l[NV];                                                                             \
        for (int q = 0; q < NV; q++)                                                              \
            l[q] = _mm512_loadu_ps(lr + 16 * q);                                                  \
        uint32_t e = e0;                                                                          \
        for (; e + 4 <= e1; e += 4) {                                                             \
            const float *x0 = rp + (size_t)idx[e] * ldr, *x1 = rp + (size_t)idx[e + 1] * ldr;     \
            const float *x2 = rp + (size_t)idx[e + 2] * ldr, *x3 = rp + (size_t)idx[e + 3] * ldr; \
            __m512 s0 = _mm512_mul_ps(l[0], _mm512_loadu_ps(x0));                                 \
            __m512 s1 = _mm512_mul_ps(l[0], _mm512_loadu_ps(x1));                                 \
            __m512 s2 = _mm512_mul_ps(l[0], _mm512_loadu_ps(x2));                                 \
            __m512 s3 = _mm512_mul_ps(l[0], _mm512_loadu_ps(x3));                                 \
            for (int q = 1; q < NV; q++) {                                                        \
                s0 = _mm512_fmadd_ps(l[q], _mm512_loadu_ps(x0 + 16 * q), s0);                     \
                s1 = _mm512_fmadd_ps(l[q], _mm512_loadu_ps(x1 + 16 * q), s1);                     \
                s2 = _mm512_fmadd_ps(l[q], _mm512_loadu_ps(x2 + 16 * q), s2);                     \
                s3 = _mm512_fmadd_ps(l[q], _mm512_loadu_ps(x3 + 16 * q), s3);                     \
            }                                                                                     \
            __m128 g = sddmm512_sum4(s0, s1, s2, s3);                                             \
            if (first)                                                                            \
                _mm_storeu_ps(v + (e - e0), g);                                                          \
            else                                                                                  \
                _mm_storeu_ps(v + (e - e0), _mm_add_ps(_mm_loadu_ps(v + (e - e0)), g));                         \
        }                                                                                         \
        for (; e < e1; e++) {                                                                     \
            const float *x0 = rp + (size_t)idx[e] * ldr;                                          \
            __m512 s0 = _mm512_mul_ps(l[0], _mm512_loadu_ps(x0));                                 \
            for (int q = 1; q < NV; q++)                                                          \
                s0 = _mm512_fmadd_ps(l[q], _mm512_loadu_ps(x0 + 16 * q), s0);                     \
            /* (the quads' order of additions: an entry's sum is the same           \
             * whichever run boundary, so whichever panel width, puts it here) */ \
            float t = _mm_cvtss_f32(sddmm512_sum4(s0, s0, s0, s0));                               \
            v[e - e0] = first ? t : v[e - e0] + t;                                                \
        }                                                                                         \
    }
SDDMM512(16)
SDDMM512(8)
SDDMM512(4)
SDDMM512(2)
SDDMM512(1)

static void sddmm_512(const kern__panels *a, const float *l, int ldl, const float *rm, int ldr,
                      int n, float *v, const uint32_t *ord, int r0, int r1)
{
    for (int p = 0; p < a->npan; p++) {
        const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
        const float *rp = rm + (size_t)p * a->pw * ldr;
        for (int r = r0; r < r1; r++) {
            if (ptr[r] == ptr[r + 1])
                continue;
            const float *lr = l + (size_t)r * ldl;
            float *vr = v + (ord ? ord[ptr[r]] : ptr[r]); /* the row's run, in v's order */
            int j = 0;
            for (; j + 256 <= n; j += 256)
                sddmm512_16(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
            if (j + 128 <= n) {
                sddmm512_8(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
                j += 128;
            }
            if (j + 64 <= n) {
                sddmm512_4(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
                j += 64;
            }
            if (j + 32 <= n) {
                sddmm512_2(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
                j += 32;
            }
            if (j + 16 <= n) {
                sddmm512_1(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
                j += 16;
            }
        }
    }
}

/* ---- AVX2 + FMA ---- */

__attribute__((target("avx2,fma"))) static void spmm256_row(const uint16_t *idx,
                                                             const float *val, uint32_t e0,
                                                             uint32_t e1, const float *bp,
                                                             int ldb, float *cr, int first,
                                                             float init, const float *cs, int w)
{
    /* w floats, up to 32: 4 vectors of 8, the last ones masked */
    __m256i lane = _mm256_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7);
    __m256i mk[4];
    __m256 acc[4];
    for (int v = 0; v < 4; v++) {
        mk[v] = _mm256_cmpgt_epi32(_mm256_set1_epi32(w - 8 * v), lane);
        acc[v] = first && !cs ? _mm256_set1_ps(init)
                              : _mm256_maskload_ps((first ? cs : cr) + 8 * v, mk[v]);
    }
    for (uint32_t e = e0; e < e1; e++) {
        __m256 x = _mm256_set1_ps(val[e]);
        const float *br = bp + (size_t)idx[e] * ldb;
        for (int v = 0; v < 4; v++)
            acc[v] = _mm256_fmadd_ps(x, _mm256_maskload_ps(br + 8 * v, mk[v]), acc[v]);
    }
    for (int v = 0; v < 4; v++)
        _mm256_maskstore_ps(cr + 8 * v, mk[v], acc[v]);
}

__attribute__((target("avx2,fma"))) static void spmm256_row4f(const uint16_t *idx,
                                                               const float *val, uint32_t e0,
                                                               uint32_t e1, const float *bp,
                                                               int ldb, float *cr, int first,
                                                               float init, const float *cs)
{
    __m256 a0, a1, a2, a3;
    if (first && cs) {
        a0 = _mm256_loadu_ps(cs);
        a1 = _mm256_loadu_ps(cs + 8);
        a2 = _mm256_loadu_ps(cs + 16);
        a3 = _mm256_loadu_ps(cs + 24);
    } else if (first) {
        a0 = a1 = a2 = a3 = _mm256_set1_ps(init);
    } else {
        a0 = _mm256_loadu_ps(cr);
        a1 = _mm256_loadu_ps(cr + 8);
        a2 = _mm256_loadu_ps(cr + 16);
        a3 = _mm256_loadu_ps(cr + 24);
    }
    for (uint32_t e = e0; e < e1; e++) {
        __m256 x = _mm256_set1_ps(val[e]);
        const float *br = bp + (size_t)idx[e] * ldb;
        a0 = _mm256_fmadd_ps(x, _mm256_loadu_ps(br), a0);
        a1 = _mm256_fmadd_ps(x, _mm256_loadu_ps(br + 8), a1);
        a2 = _mm256_fmadd_ps(x, _mm256_loadu_ps(br + 16), a2);
        a3 = _mm256_fmadd_ps(x, _mm256_loadu_ps(br + 24), a3);
    }
    _mm256_storeu_ps(cr, a0);
    _mm256_storeu_ps(cr + 8, a1);
    _mm256_storeu_ps(cr + 16, a2);
    _mm256_storeu_ps(cr + 24, a3);
}

static void spmm_256(const kern__panels *a, const float *b, int ldb, int n, const float *init,
                     int cinit, float *c, int ldc, int r0, int r1)
{
    enum { CW = 32 };
    for (int c0 = 0; c0 < n; c0 += CW) {
        int w = n - c0 < CW ? n - c0 : CW;
        for (int p = 0; p < a->npan; p++) {
            const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
            const float *bp = b + (size_t)p * a->pw * ldb + c0;
            for (int r = r0; r < r1; r++) {
                float *cr = c + (size_t)r * ldc + c0, iv = init && !cinit ? init[r] : 0.0f;
                const float *cs = cinit && init ? init + c0 : NULL;
                if (w == CW)
                    spmm256_row4f(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs);
                else
                    spmm256_row(a->idx, a->val, ptr[r], ptr[r + 1], bp, ldb, cr, p == 0, iv, cs, w);
            }
        }
    }
    if (a->npan == 0)
        spmm_plain(a, b, ldb, n, init, cinit, c, ldc, r0, r1);
}

__attribute__((target("avx2,fma"))) static inline float hsum256(__m256 s)
{
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

#define SDDMM256(NV)                                                                              \
    __attribute__((target("avx2,fma"))) static void sddmm256_##NV(                                \
        const uint16_t *idx, uint32_t e0, uint32_t e1, const float *lr, const float *rp, int ldr, \
        float *v, int first)                                                                      \
    {                                                                                             \
        __m256 l[NV];                                                                             \
        for (int q = 0; q < NV; q++)                                                              \
            l[q] = _mm256_loadu_ps(lr + 8 * q);                                                   \
        uint32_t e = e0;                                                                          \
        for (; e + 2 <= e1; e += 2) {                                                             \
            const float *x0 = rp + (size_t)idx[e] * ldr, *x1 = rp + (size_t)idx[e + 1] * ldr;     \
            __m256 s0 = _mm256_mul_ps(l[0], _mm256_loadu_ps(x0));                                 \
            __m256 s1 = _mm256_mul_ps(l[0], _mm256_loadu_ps(x1));                                 \
            for (int q = 1; q < NV; q++) {                                                        \
                s0 = _mm256_fmadd_ps(l[q], _mm256_loadu_ps(x0 + 8 * q), s0);                      \
                s1 = _mm256_fmadd_ps(l[q], _mm256_loadu_ps(x1 + 8 * q), s1);                      \
            }                                                                                     \
            float t0 = hsum256(s0), t1 = hsum256(s1);                                             \
            v[e - e0] = first ? t0 : v[e - e0] + t0;                                                        \
            v[e + 1 - e0] = first ? t1 : v[e + 1 - e0] + t1;                                                \
        }                                                                                         \
        for (; e < e1; e++) {                                                                     \
            const float *x0 = rp + (size_t)idx[e] * ldr;                                          \
            __m256 s0 = _mm256_mul_ps(l[0], _mm256_loadu_ps(x0));                                 \
            for (int q = 1; q < NV; q++)                                                          \
                s0 = _mm256_fmadd_ps(l[q], _mm256_loadu_ps(x0 + 8 * q), s0);                      \
            float t = hsum256(s0);                                                                \
            v[e - e0] = first ? t : v[e - e0] + t;                                                          \
        }                                                                                         \
    }
SDDMM256(8)
SDDMM256(2)

static void sddmm_256(const kern__panels *a, const float *l, int ldl, const float *rm, int ldr,
                      int n, float *v, const uint32_t *ord, int r0, int r1)
{
    for (int p = 0; p < a->npan; p++) {
        const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
        const float *rp = rm + (size_t)p * a->pw * ldr;
        for (int r = r0; r < r1; r++) {
            if (ptr[r] == ptr[r + 1])
                continue;
            const float *lr = l + (size_t)r * ldl;
            float *vr = v + (ord ? ord[ptr[r]] : ptr[r]); /* the row's run, in v's order */
            int j = 0;
            for (; j + 64 <= n; j += 64)
                sddmm256_8(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
            for (; j + 16 <= n; j += 16)
                sddmm256_2(a->idx, ptr[r], ptr[r + 1], lr + j, rp + j, ldr, vr, j == 0);
        }
    }
}

#endif /* SPMM_X86 */

void kern__spmm_rows(int isa, const kern__panels *a, const float *b, int ldb, int n,
                     const float *init, int cinit, float *c, int ldc, int r0, int r1)
{
    if (n <= 0 || r0 >= r1)
        return;
#ifdef SPMM_X86
    if (isa >= KERNELS_ISA_AVX512) {
        spmm_512(a, b, ldb, n, init, cinit, c, ldc, r0, r1);
        return;
    }
    if (isa >= KERNELS_ISA_AVX2) {
        spmm_256(a, b, ldb, n, init, cinit, c, ldc, r0, r1);
        return;
    }
#endif
    (void)isa;
    spmm_plain(a, b, ldb, n, init, cinit, c, ldc, r0, r1);
}

void kern__sddmm_rows(int isa, const kern__panels *a, const float *l, int ldl, const float *r,
                      int ldr, int n, float *v, const uint32_t *ord, int r0, int r1)
{
    if (r0 >= r1)
        return;
    if (n == 0) {
        for (int p = 0; p < a->npan; p++) {
            const uint32_t *ptr = a->ptr + (size_t)p * (a->m + 1);
            for (uint32_t e = ptr[r0]; e < ptr[r1]; e++)
                v[ord ? ord[e] : e] = 0.0f;
        }
        return;
    }
#ifdef SPMM_X86
    if (isa >= KERNELS_ISA_AVX512) {
        sddmm_512(a, l, ldl, r, ldr, n, v, ord, r0, r1);
        return;
    }
    if (isa >= KERNELS_ISA_AVX2) {
        sddmm_256(a, l, ldl, r, ldr, n, v, ord, r0, r1);
        return;
    }
#endif
    (void)isa;
    sddmm_plain(a, l, ldl, r, ldr, n, v, ord, r0, r1);
}

#ifdef SPMM_X86
/* dst rows [0, 8) columns [0, 8) = src rows [0, 8) columns [0, 8)
 * transposed: eight loads, three rounds of shuffles, eight stores */
__attribute__((target("avx2"))) static void transpose8(float *d, int ldd, const float *s, int lds)
{
    __m256 r[8], t[8], u[8];
    for (int k = 0; k < 8; k++)
        r[k] = _mm256_loadu_ps(s + (size_t)k * lds);
    for (int k = 0; k < 8; k += 2) {
        t[k] = _mm256_unpacklo_ps(r[k], r[k + 1]);
        t[k + 1] = _mm256_unpackhi_ps(r[k], r[k + 1]);
    }
    for (int k = 0; k < 8; k += 4) {
        u[k] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 1] = _mm256_shuffle_ps(t[k], t[k + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[k + 2] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[k + 3] = _mm256_shuffle_ps(t[k + 1], t[k + 3], _MM_SHUFFLE(3, 2, 3, 2));
    }
    for (int k = 0; k < 4; k++) {
        _mm256_storeu_ps(d + (size_t)k * ldd, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(d + (size_t)(k + 4) * ldd, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
    }
}
#endif

void kern__transpose_rows(int isa, float *dst, int ldd, const float *src, int lds, int rows,
                          int pad, int j0, int j1)
{
    enum { T = 32 };
#ifdef SPMM_X86
    bool avx2 = isa >= KERNELS_ISA_AVX2;
#else
    bool avx2 = false;
    (void)isa;
#endif
    for (int jb = j0; jb < j1; jb += T) {
        int je = j1 - jb < T ? j1 : jb + T;
        for (int ib = 0; ib < rows; ib += T) {
            int ie = rows - ib < T ? rows : ib + T;
            int j = jb;
#ifdef SPMM_X86
            /* whole blocks of 8 x 8 (a copy: the same bits either way) */
            for (; avx2 && j + 8 <= je; j += 8) {
                int i = ib;
                for (; i + 8 <= ie; i += 8)
                    transpose8(dst + (size_t)j * ldd + i, ldd, src + (size_t)i * lds + j, lds);
                for (int jj = j; jj < j + 8; jj++)
                    for (int k = i; k < ie; k++)
                        dst[(size_t)jj * ldd + k] = src[(size_t)k * lds + jj];
            }
#endif
            for (; j < je; j++) {
                float *d = dst + (size_t)j * ldd;
                for (int i = ib; i < ie; i++)
                    d[i] = src[(size_t)i * lds + j];
            }
        }
        for (int j = jb; j < je; j++)
            for (int i = rows; i < pad; i++)
                dst[(size_t)j * ldd + i] = 0.0f;
    }
}

#ifdef SPMM_X86
__attribute__((target("avx512f"))) static size_t permute512(float *dst, const float *src,
                                                           const uint32_t *ord, size_t lo,
                                                           size_t hi)
{
    size_t e = lo;
    for (; e + 16 <= hi; e += 16) {
        __m512i ix = _mm512_loadu_si512((const void *)(ord + e));
        _mm512_storeu_ps(dst + e, _mm512_i32gather_ps(ix, src, 4));
    }
    return e;
}

__attribute__((target("avx2"))) static size_t permute256(float *dst, const float *src,
                                                        const uint32_t *ord, size_t lo, size_t hi)
{
    size_t e = lo;
    for (; e + 8 <= hi; e += 8) {
        __m256i ix = _mm256_loadu_si256((const __m256i *)(ord + e));
        _mm256_storeu_ps(dst + e, _mm256_i32gather_ps(src, ix, 4));
    }
    return e;
}
#endif

void kern__permute(int isa, float *dst, const float *src, const uint32_t *ord, size_t lo,
                   size_t hi)
{
    size_t e = lo;
#ifdef SPMM_X86
    if (hi <= (size_t)INT32_MAX) { /* (the gathers' indices are signed) */
        if (isa >= KERNELS_ISA_AVX512)
            e = permute512(dst, src, ord, lo, hi);
        else if (isa >= KERNELS_ISA_AVX2)
            e = permute256(dst, src, ord, lo, hi);
    }
#else
    (void)isa;
#endif
    for (; e < hi; e++)
        dst[e] = src[ord[e]];
}
