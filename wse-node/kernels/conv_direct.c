/* 3x3 convolutions of few channels on the plain NCHW layout, computed
 * directly: 16 pixels of an output row a vector, every output channel's
 * accumulators in registers, the weights broadcast from a small table.
 * These are the full-size layers of a U-Net (8 channels at 512x512 and
 * more) that neither GEMM path serves well: im2col's GEMM has 8 columns
 * and reads a lowered matrix 9 times the input (27 to 65 GFLOP/s on a
 * 2-core AMD EPYC), and oneDNN's direct kernels want 16 channels a block.
 * The data gradient is the same computation over the output gradient with
 * the kernel flipped and its channels swapped. Each output sums its
 * products in one fixed order (input channel, kernel row, kernel column),
 * whatever the thread count. */
#include <stdint.h>

#include "convplan.h"
#include "kernels.h"
#include "kernels_internal.h"

#if defined(__x86_64__) && defined(__GNUC__) && (__GNUC__ >= 11 || defined(__clang__))
#include <immintrin.h>
#define DIRECT_X86 1
#endif

/* The shape's rule is the planner's (convplan_conv2d_direct: at most 64
 * inputs, a weight table of 36 KiB) */
int kern__conv3x3_direct_ok(const op_conv2d_params *p, int dgrad)
{
#ifdef DIRECT_X86
    return convplan_conv2d_direct(p, dgrad) && kernels_isa_level() >= KERNELS_ISA_AVX512;
#else
    (void)p, (void)dgrad;
    return 0;
#endif
}

/* dbias[k] = the sum of dy's plane k over the batch, in double, a channel
 * per task; dy plain or (blk) in aBcd16b, the same sums in the same
 * order. */
typedef struct dbias_job {
    float *db;
    const float *dy;
    int n, k, blk;
    size_t plane;
} dbias_job;

static void dbias_range(void *ctx, size_t lo, size_t hi)
{
    const dbias_job *j = ctx;
    for (size_t k = lo; k < hi; k++) {
        double s = 0;
        for (int i = 0; i < j->n; i++) {
            if (j->blk) {
                size_t b = (size_t)j->blk;
                const float *d = j->dy + (((size_t)i * (j->k / b) + k / b) * j->plane) * b + k % b;
                for (size_t q = 0; q < j->plane; q++)
                    s += d[q * b];
                continue;
            }
            const float *d = j->dy + ((size_t)i * j->k + k) * j->plane;
            for (size_t q = 0; q < j->plane; q++)
                s += d[q];
        }
        j->db[k] = (float)s;
    }
}

void kern__conv_dbias(float *db, const float *dy, int n, int k, size_t plane, int blk)
{
    dbias_job j = {db, dy, n, k, blk, plane};
    kernels_for((size_t)k, 1, dbias_range, &j);
}

#ifdef DIRECT_X86

#define T512 __attribute__((target("avx512f")))

/* One call: out (n, outs, h, w) from in (n, ins, h, w); wt[(i * 9 + t) *
 * kb + o] the weight of input i, tap t (row-major in the 3x3 window), to
 * output o, zero for o >= outs up to kb. */
typedef struct direct_job {
    float *out;
    const float *in, *wt, *bias;
    int ins, outs, h, w;
} direct_job;

/* Lanes [lo, hi) of 16, as a mask */
static inline __mmask16 lanes(int lo, int hi)
{
    if (lo < 0)
        lo = 0;
    if (hi > 16)
        hi = 16;
    return hi <= lo ? 0 : (__mmask16)(((1u << (hi - lo)) - 1) << lo);
}

/* Row y of image i, KB output channels (8: two vectors of pixels at a
 * time; 16: one) */
#define DIRECT_ROW(KB, NV)                                                                         \
    static T512 void row_##KB(const direct_job *j, int i, int y)                                   \
    {                                                                                              \
        size_t plane = (size_t)j->h * (size_t)j->w;                                                \
        const float *img = j->in + (size_t)i * j->ins * plane;                                     \
        float *dst = j->out + ((size_t)i * j->outs * j->h + (size_t)y) * j->w;                     \
        for (int x0 = 0; x0 < j->w; x0 += 16 * NV) {                                               \
            __m512 acc[KB][NV];                                                                    \
            for (int o = 0; o < KB; o++)                                                           \
                for (int v = 0; v < NV; v++)                                                       \
                    acc[o][v] = _mm512_set1_ps(j->bias && o < j->outs ? j->bias[o] : 0.0f);        \
            for (int c = 0; c < j->ins; c++)                                                       \
                for (int ky = 0; ky < 3; ky++) {                                                   \
                    int iy = y + ky - 1;                                                           \
                    if (iy < 0 || iy >= j->h)                                                      \
                        continue;                                                                  \
                    const float *row = img + (size_t)c * plane + (size_t)iy * j->w;                \
                    for (int kx = 0; kx < 3; kx++) {                                               \
                        const float *wp = j->wt + ((size_t)c * 9 + (size_t)(ky * 3 + kx)) * KB;    \
                        __m512 a[NV];                                                              \
                        for (int v = 0; v < NV; v++) {                                             \
                            int xs = x0 + 16 * v + kx - 1; /* the first lane's input column */     \
                            a[v] = _mm512_maskz_loadu_ps(lanes(-xs, j->w - xs), row + xs);         \
                        }                                                                          \
                        for (int o = 0; o < KB; o++) {                                             \
                            __m512 wv = _mm512_set1_ps(wp[o]);                                     \
                            for (int v = 0; v < NV; v++)                                           \
                                acc[o][v] = _mm512_fmadd_ps(wv, a[v], acc[o][v]);                  \
                        }                                                                          \
                    }                                                                              \
                }                                                                                  \
            for (int o = 0; o < j->outs; o++)                                                      \
                for (int v = 0; v < NV; v++)                                                       \
                    _mm512_mask_storeu_ps(dst + (size_t)o * plane + x0 + 16 * v,                   \
                                          lanes(0, j->w - x0 - 16 * v), acc[o][v]);                \
        }                                                                                          \
    }

DIRECT_ROW(8, 2)
DIRECT_ROW(16, 1)

static void direct_rows(void *ctx, size_t lo, size_t hi)
{
    const direct_job *j = ctx;
    for (size_t u = lo; u < hi; u++) {
        int i = (int)(u / (size_t)j->h), y = (int)(u % (size_t)j->h);
        if (j->outs <= 8)
            row_8(j, i, y);
        else
            row_16(j, i, y);
    }
}

/* wt as direct_job says, from weight (k, c, 3, 3): as it is (forward), or
 * flipped with its channels swapped (the data gradient) */
static void table(float *wt, const float *weight, const op_conv2d_params *p, int dgrad, int kb)
{
    int ins = dgrad ? p->k : p->c, outs = dgrad ? p->c : p->k;
    for (int i = 0; i < ins; i++)
        for (int t = 0; t < 9; t++)
            for (int o = 0; o < kb; o++) {
                if (o >= outs) {
                    wt[((size_t)i * 9 + (size_t)t) * kb + o] = 0.0f;
                    continue;
                }
                /* forward: w[o][i][t]; data gradient: w[i][o][8 - t] */
                size_t at = dgrad ? ((size_t)i * p->c + (size_t)o) * 9 + (size_t)(8 - t)
                                  : ((size_t)o * p->c + (size_t)i) * 9 + (size_t)t;
                wt[((size_t)i * 9 + (size_t)t) * kb + o] = weight[at];
            }
}

/* The weight table goes at the head of the caller's workspace */
static int run(float *out, const float *in, const float *weight, const float *bias,
               const op_conv2d_params *p, int dgrad, void *ws, size_t ws_bytes)
{
    int outs = dgrad ? p->c : p->k, kb = outs <= 8 ? 8 : 16;
    size_t avail;
    float *wt = kern__ws_aligned(ws, ws_bytes, &avail);
    if (!kern__conv3x3_direct_ok(p, dgrad) || !wt ||
        avail < (size_t)(dgrad ? p->k : p->c) * 9 * (size_t)kb * sizeof(float))
        return 0;
    table(wt, weight, p, dgrad, kb);
    direct_job j = {out, in, wt, bias, dgrad ? p->k : p->c, outs, p->h, p->w};
    /* rows of about 64 Ki multiply-adds a share at the least */
    size_t per_row = (size_t)j.ins * 9 * (size_t)outs * (size_t)p->w;
    kernels_for((size_t)p->n * (size_t)p->h, 65536 / per_row + 1, direct_rows, &j);
    return 1;
}

int kern__conv3x3_direct_forward(float *out, const float *in, const float *weight,
                                 const float *bias, const op_conv2d_params *p, void *ws,
                                 size_t ws_bytes)
{
    return run(out, in, weight, bias, p, 0, ws, ws_bytes);
}

int kern__conv3x3_direct_dgrad(float *din, const float *dout, const float *weight,
                               const op_conv2d_params *p, void *ws, size_t ws_bytes)
{
    return run(din, dout, weight, NULL, p, 1, ws, ws_bytes);
}

/* The weight gradient: a unit is one input channel and one kernel row,
 * summed over every image and row by one thread (a thread's units row by
 * row), four output channels at a time (their three columns' sums, 12
 * vectors, held in registers along a row and in the unit's own place
 * between rows). The place keeps 16 partial sums a weight; they are added
 * up at the end, in lane order. */
typedef struct wgrad_job {
    const float *dy, *in;
    float *part; /* per unit: groups x 4 outputs x 3 columns x 16 lanes */
    int n, c, k, h, w, groups;
} wgrad_job;

static T512 void wgrad_units(void *ctx, size_t lo, size_t hi)
{
    const wgrad_job *j = ctx;
    size_t plane = (size_t)j->h * (size_t)j->w, per = (size_t)j->groups * 4 * 3 * 16;
    for (size_t q = lo * per; q < hi * per; q++)
        j->part[q] = 0.0f;
    /* rows outermost: a row of dY is read from memory once, then from the
     * cache by each unit */
    for (int i = 0; i < j->n; i++)
        for (int y = 0; y < j->h; y++)
            for (size_t u = lo; u < hi; u++) {
                int c = (int)(u / 3), ky = (int)(u % 3), iy = y + ky - 1;
                if (iy < 0 || iy >= j->h)
                    continue;
                const float *row = j->in + ((size_t)i * j->c + (size_t)c) * plane + (size_t)iy * j->w;
                for (int g = 0; g < j->groups; g++) {
                    float *pg = j->part + u * per + (size_t)g * 4 * 3 * 16;
                    const float *dyr[4];
                    int outs = j->k - 4 * g < 4 ? j->k - 4 * g : 4;
                    __m512 acc[4][3];
                    for (int o = 0; o < 4; o++) {
                        dyr[o] = j->dy + ((size_t)i * j->k + (size_t)(4 * g + (o < outs ? o : 0))) *
                                             plane + (size_t)y * j->w;
                        for (int kx = 0; kx < 3; kx++)
                            acc[o][kx] = _mm512_loadu_ps(pg + (o * 3 + kx) * 16);
                    }
                    for (int x0 = 0; x0 < j->w; x0 += 16) {
                        __mmask16 m = lanes(0, j->w - x0);
                        __m512 a[3], d[4];
                        for (int kx = 0; kx < 3; kx++) {
                            int xs = x0 + kx - 1;
                            a[kx] = _mm512_maskz_loadu_ps(lanes(-xs, j->w - xs), row + xs);
                        }
                        for (int o = 0; o < 4; o++)
                            d[o] = _mm512_maskz_loadu_ps(o < outs ? m : 0, dyr[o] + x0);
                        for (int o = 0; o < 4; o++)
                            for (int kx = 0; kx < 3; kx++)
                                acc[o][kx] = _mm512_fmadd_ps(d[o], a[kx], acc[o][kx]);
                    }
                    for (int o = 0; o < 4; o++)
                        for (int kx = 0; kx < 3; kx++)
                            _mm512_storeu_ps(pg + (o * 3 + kx) * 16, acc[o][kx]);
                }
            }
}

static float lane_sum(const float *v)
{
    float s = v[0];
    for (int q = 1; q < 16; q++)
        s += v[q];
    return s;
}

int kern__conv3x3_direct_wgrad(float *dweight, float *dbias, const float *dout, const float *in,
                               const op_conv2d_params *p, void *ws, size_t ws_bytes)
{
    int groups = (p->k + 3) / 4;
    size_t units = (size_t)p->c * 3, avail;
    float *part = kern__ws_aligned(ws, ws_bytes, &avail);
    if (!kern__conv3x3_direct_ok(p, 0) || !part ||
        avail < units * (size_t)groups * 4 * 3 * 16 * sizeof(float))
        return 0;
    wgrad_job j = {dout, in, part, p->n, p->c, p->k, p->h, p->w, groups};
    kernels_for(units, 1, wgrad_units, &j);
    for (size_t u = 0; u < units; u++) {
        int c = (int)(u / 3), ky = (int)(u % 3);
        for (int o = 0; o < p->k; o++)
            for (int kx = 0; kx < 3; kx++)
                dweight[((size_t)o * p->c + (size_t)c) * 9 + (size_t)(ky * 3 + kx)] = lane_sum(
                    part + ((u * (size_t)groups + (size_t)(o / 4)) * 4 * 3 + (size_t)(o % 4) * 3 +
                            (size_t)kx) * 16);
    }
    if (dbias)
        kern__conv_dbias(dbias, dout, p->n, p->k, (size_t)p->h * (size_t)p->w, 0);
    return 1;
}

#else

int kern__conv3x3_direct_forward(float *out, const float *in, const float *weight,
                                 const float *bias, const op_conv2d_params *p, void *ws,
                                 size_t ws_bytes)
{
    (void)out, (void)in, (void)weight, (void)bias, (void)p, (void)ws, (void)ws_bytes;
    return 0;
}

int kern__conv3x3_direct_dgrad(float *din, const float *dout, const float *weight,
                               const op_conv2d_params *p, void *ws, size_t ws_bytes)
{
    (void)din, (void)dout, (void)weight, (void)p, (void)ws, (void)ws_bytes;
    return 0;
}

int kern__conv3x3_direct_wgrad(float *dweight, float *dbias, const float *dout, const float *in,
                               const op_conv2d_params *p, void *ws, size_t ws_bytes)
{
    (void)dweight, (void)dbias, (void)dout, (void)in, (void)p, (void)ws, (void)ws_bytes;
    return 0;
}

#endif
