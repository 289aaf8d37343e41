/* How a convolution is cut into work: lowering geometry and workspace. */
#include "convplan.h"

#include <stdbool.h>

static int convplan__one_if_zero(int v)
{
    return v ? v : 1;
}

int op_conv2d_out_h(const op_conv2d_params *p)
{
    int span = convplan__one_if_zero(p->dil_h) * (p->r - 1) + 1;
    return (p->h + 2 * p->pad_h - span) / convplan__one_if_zero(p->stride_h) + 1;
}

int op_conv2d_out_w(const op_conv2d_params *p)
{
    int span = convplan__one_if_zero(p->dil_w) * (p->s - 1) + 1;
    return (p->w + 2 * p->pad_w - span) / convplan__one_if_zero(p->stride_w) + 1;
}

int op_conv_transpose2d_out_h(const op_conv_transpose2d_params *p)
{
    return (p->h - 1) * convplan__one_if_zero(p->stride_h) - 2 * p->pad_h +
           convplan__one_if_zero(p->dil_h) * (p->r - 1) + p->out_pad_h + 1;
}

int op_conv_transpose2d_out_w(const op_conv_transpose2d_params *p)
{
    return (p->w - 1) * convplan__one_if_zero(p->stride_w) - 2 * p->pad_w +
           convplan__one_if_zero(p->dil_w) * (p->s - 1) + p->out_pad_w + 1;
}

int convplan_cols_direct(const convplan_cols *g)
{
    return g->r == 1 && g->s == 1 && g->sh == 1 && g->sw == 1 &&
           g->ph == 0 && g->pw == 0 && g->oh == g->h && g->ow == g->w;
}

int convplan_cols_band(const convplan_cols *g)
{
    size_t row_bytes = (size_t)g->c * g->r * g->s * g->ow * sizeof(float);
    size_t rows = row_bytes ? CONVPLAN_COL_BUDGET / row_bytes : (size_t)g->oh;
    if (rows < 1)
        rows = 1;
    if (rows > (size_t)g->oh)
        rows = g->oh;
    return (int)rows;
}

size_t convplan_cols_workspace(const convplan_cols *g)
{
    if (convplan_cols_direct(g))
        return 0;
    return (size_t)g->c * g->r * g->s * convplan_cols_band(g) * g->ow * sizeof(float);
}

size_t convplan_round16(size_t v)
{
    return (v + 15) & ~(size_t)15;
}

static convplan_cols convplan__conv2d_cols(const op_conv2d_params *p)
{
    convplan_cols g = {
        .c = p->c, .h = p->h, .w = p->w, .r = p->r, .s = p->s,
        .sh = convplan__one_if_zero(p->stride_h), .sw = convplan__one_if_zero(p->stride_w),
        .ph = p->pad_h, .pw = p->pad_w,
        .dh = convplan__one_if_zero(p->dil_h), .dw = convplan__one_if_zero(p->dil_w),
        .oh = op_conv2d_out_h(p), .ow = op_conv2d_out_w(p),
    };
    return g;
}

/* For unit strides the data gradient is itself a convolution: dout padded
 * by dil*(r-1) - pad (negative padding crops) with the kernel flipped and
 * its channel axes swapped. Lowering dout with im2col and one GEMM with
 * the long k*r*s reduction beats a GEMM over only k followed by col2im,
 * and its bands write disjoint rows of din. Geometry of that lowering,
 * the image being dout. */
static convplan_cols convplan__dgrad_cols(const op_conv2d_params *p)
{
    convplan_cols g = {
        .c = p->k, .h = op_conv2d_out_h(p), .w = op_conv2d_out_w(p),
        .r = p->r, .s = p->s, .sh = 1, .sw = 1,
        .dh = convplan__one_if_zero(p->dil_h), .dw = convplan__one_if_zero(p->dil_w),
        .oh = p->h, .ow = p->w,
    };
    g.ph = g.dh * (p->r - 1) - p->pad_h;
    g.pw = g.dw * (p->s - 1) - p->pad_w;
    return g;
}

convplan_conv2d convplan_conv2d_of(const op_conv2d_params *p)
{
    convplan_conv2d pl;
    pl.g = convplan__conv2d_cols(p);
    pl.dg = convplan__dgrad_cols(p);
    pl.direct = convplan_cols_direct(&pl.g);
    pl.as_conv = pl.g.sh == 1 && pl.g.sw == 1 && !pl.direct;
    pl.crs = p->c * p->r * p->s;
    pl.krs = p->k * p->r * p->s;
    pl.band = convplan_cols_band(&pl.g);
    pl.nb = (pl.g.oh + pl.band - 1) / pl.band;
    pl.dband = convplan_cols_band(&pl.dg);
    pl.dnb = (p->h + pl.dband - 1) / pl.dband;
    pl.ohw = (size_t)pl.g.oh * pl.g.ow;
    pl.hw = (size_t)p->h * p->w;
    pl.col = convplan_cols_workspace(&pl.g) / sizeof(float);
    pl.head = 0;
    if (pl.as_conv) {
        size_t d = convplan_cols_workspace(&pl.dg) / sizeof(float);
        if (d > pl.col)
            pl.col = d;
        pl.head = convplan_round16((size_t)p->k * pl.crs);
    }
    pl.per_thread = convplan_round16(convplan_round16(pl.col) +
                                     convplan_round16((size_t)p->k * pl.crs) + p->k);
    return pl;
}

/* The output seen as the image of a convolution whose window grid is the
 * input. */
static convplan_cols convplan__convt_cols(const op_conv_transpose2d_params *p)
{
    convplan_cols g = {
        .c = p->k,
        .h = op_conv_transpose2d_out_h(p), .w = op_conv_transpose2d_out_w(p),
        .r = p->r, .s = p->s,
        .sh = convplan__one_if_zero(p->stride_h), .sw = convplan__one_if_zero(p->stride_w),
        .ph = p->pad_h, .pw = p->pad_w,
        .dh = convplan__one_if_zero(p->dil_h), .dw = convplan__one_if_zero(p->dil_w),
        .oh = p->h, .ow = p->w,
    };
    return g;
}

convplan_convt convplan_convt_of(const op_conv_transpose2d_params *p)
{
    convplan_convt pl;
    pl.g = convplan__convt_cols(p);
    pl.direct = convplan_cols_direct(&pl.g);
    /* input rows [y0, y1) write output rows up to (y1-1)*sh - ph +
     * dh*(r-1), the next band from y1*sh - ph */
    pl.disjoint = pl.g.dh * (p->r - 1) < pl.g.sh;
    pl.krs = p->k * p->r * p->s;
    pl.band = convplan_cols_band(&pl.g);
    pl.nb = (p->h + pl.band - 1) / pl.band;
    pl.hw = (size_t)p->h * p->w;
    pl.ohw = (size_t)pl.g.h * pl.g.w;
    pl.col = convplan_cols_workspace(&pl.g) / sizeof(float);
    pl.per_thread = convplan_round16(convplan_round16(pl.col) +
                                     convplan_round16((size_t)p->c * pl.krs) + p->k);
    return pl;
}

int convplan_conv2d_direct(const op_conv2d_params *p, int dgrad)
{
    int outs = dgrad ? p->c : p->k, ins = dgrad ? p->k : p->c;
    return p->n > 0 && p->h > 0 && p->w > 0 && p->r == 3 && p->s == 3 && p->stride_h <= 1 &&
           p->stride_w <= 1 && p->dil_h <= 1 && p->dil_w <= 1 && p->pad_h == 1 && p->pad_w == 1 &&
           outs >= 1 && outs <= 16 && ins >= 1 && ins <= 64;
}

size_t convplan_conv2d_direct_bytes(const op_conv2d_params *p)
{
    if (!convplan_conv2d_direct(p, 0))
        return 0;
    /* the weight table (forward: c x 9 x 8 or 16; data gradient: k x 9 x
     * 8 or 16), or the weight gradient's partial sums (3c units, k / 4
     * groups of 4 x 3 x 16 floats), each after 64 bytes of alignment */
    size_t kb = p->k <= 8 ? 8 : 16, cb = p->c <= 8 ? 8 : 16;
    size_t fwd = (size_t)p->c * 9 * kb, dgrad = (size_t)p->k * 9 * cb;
    size_t wgrad = (size_t)p->c * 3 * (((size_t)p->k + 3) / 4) * 4 * 3 * 16;
    size_t most = fwd > dgrad ? fwd : dgrad;
    return (most > wgrad ? most : wgrad) * sizeof(float) + 64;
}

size_t convplan_conv2d_workspace(const op_conv2d_params *p, int threads)
{
    convplan_conv2d pl = convplan_conv2d_of(p);
    size_t im2col = (pl.head + (size_t)(threads > 0 ? threads : 1) * pl.per_thread) * sizeof(float);
    size_t direct = convplan_conv2d_direct_bytes(p);
    return direct > im2col ? direct : im2col;
}

/* Bytes of the buffers of a convolution on oneDNN's own layouts, in
 * bfloat16 or float32, without the float32 path's workspace. */
static size_t convplan__blocked_bytes(const op_conv2d_params *p, int bf16)
{
    size_t e = bf16 ? 2 : 4; /* the inputs' element; the outputs are float32 */
    size_t cp = (size_t)(p->c + 15) / 16 * 16, kp = (size_t)(p->k + 15) / 16 * 16;
    size_t x = (size_t)p->n * cp * (size_t)p->h * (size_t)p->w;
    size_t y = (size_t)p->n * kp * (size_t)op_conv2d_out_h(p) * (size_t)op_conv2d_out_w(p);
    size_t w = kp * cp * (size_t)p->r * (size_t)p->s;
    /* forward: x and w, y in float32; backward: dy beside the larger of
     * the weight gradient's x and dw with its scratch, which grows with
     * the image (oneDNN 2.6: up to 1.8 bytes per element of x and y in
     * bfloat16 on AMX, counted as 3; float32 as twice that), and the data
     * gradient's own dy, w and dx (float32) */
    size_t fwd = e * x + e * w + 4 * y;
    size_t wgrad = e * x + e * w + (bf16 ? 3 : 6) * (x + y), dgrad = e * y + e * w + 4 * x;
    size_t bwd = e * y + (wgrad > dgrad ? wgrad : dgrad);
    return (fwd > bwd ? fwd : bwd) + 8 * 64 + CONVPLAN_BLOCKED_SCRATCH;
}

int convplan_conv2d_blocked_bf16(const op_conv2d_params *p)
{
    /* (strided 1x1 convolutions too: since blk16.c packs their input,
     * resnet_small's shortcuts take 0.55 to 0.69 of im2col's time in
     * bfloat16, against 0.82 to 0.91 on oneDNN's float32 layouts) */
    return p->n > 0 && p->k >= 8;
}

size_t convplan_conv2d_bf16_kept_bytes(const op_conv2d_params *p)
{
    if (!convplan_conv2d_blocked_bf16(p) || p->c % 16 != 0)
        return 0;
    size_t b = (size_t)p->n * (size_t)p->c * (size_t)p->h * (size_t)p->w * 2;
    return (b + 63) & ~(size_t)63;
}

int convplan_conv2d_blocked_f32(const op_conv2d_params *p)
{
    return p->n > 0 && p->k >= 16 && convplan__blocked_bytes(p, 0) <= CONVPLAN_BLOCKED_F32_MAX;
}

/* The larger of the float32 path's workspace and, where the rule says
 * so, that of oneDNN's layouts in the type asked for. */
static size_t convplan__workspace(const op_conv2d_params *p, int threads, int bf16)
{
    size_t f32 = bf16 ? convplan__workspace(p, threads, 0) : convplan_conv2d_workspace(p, threads);
    if (!(bf16 ? convplan_conv2d_blocked_bf16(p) : convplan_conv2d_blocked_f32(p)))
        return f32;
    size_t need = convplan__blocked_bytes(p, bf16);
    return need > f32 ? need : f32;
}

size_t convplan_conv2d_bf16_workspace(const op_conv2d_params *p, int threads)
{
    return convplan__workspace(p, threads, 1);
}

size_t convplan_conv2d_f32_workspace(const op_conv2d_params *p, int threads)
{
    return convplan__workspace(p, threads, 0);
}

size_t convplan_convt_workspace(const op_conv_transpose2d_params *p, int threads)
{
    convplan_convt pl = convplan_convt_of(p);
    return (size_t)(threads > 0 ? threads : 1) * pl.per_thread * sizeof(float);
}

#define GEMM_BF16_SCRATCH ((size_t)2 << 20)

size_t convplan_gemm_bf16_workspace(int m, int n, int k)
{
    if (m <= 0 || n <= 0 || k <= 0)
        return 0;
    size_t a = ((size_t)m * k * 2 + 63) / 64 * 64, b = ((size_t)k * n * 2 + 63) / 64 * 64;
    return a + b + GEMM_BF16_SCRATCH;
}

size_t convplan_dense_bf16_dy_workspace(int n, int in_f, int out_f)
{
    if (n <= 0 || in_f <= 0 || out_f <= 0)
        return 0;
    size_t dy = ((size_t)n * out_f * 2 + 63) / 64 * 64;
    /* dX's B, the weights; dW's B, the input in the matmul's layout
     * (BA16a64b2a: rows padded to 32, columns to 64) */
    size_t wb = ((size_t)out_f * in_f * 2 + 63) / 64 * 64;
    size_t xb = ((size_t)n + 31) / 32 * 32 * (((size_t)in_f + 63) / 64 * 64) * 2;
    return 2 * dy + (wb > xb ? wb : xb) + GEMM_BF16_SCRATCH;
}

size_t convplan_dense_bf16_workspace(int n, int in_f, int out_f)
{
    size_t f = convplan_gemm_bf16_workspace(n, out_f, in_f);
    size_t dw = convplan_gemm_bf16_workspace(out_f, in_f, n);
    size_t dx = convplan_gemm_bf16_workspace(n, in_f, out_f);
    size_t w = f > dw ? f : dw;
    w = w > dx ? w : dx;
    if (w > CONVPLAN_DENSE_BF16_MAX)
        return 0;
    /* room for the backward pass's one pass over dY where it fits */
    size_t dy = convplan_dense_bf16_dy_workspace(n, in_f, out_f);
    return dy > w && dy <= CONVPLAN_DENSE_BF16_MAX ? dy : w;
}

/* The float32 bytes of a band of p grid planes: the grid's and the
 * volume's planes it covers, each with its gradient. */
static uint64_t convplan__c3d_band_bytes(uint64_t p, uint64_t grid, uint64_t vol, int stride,
                                         int reach)
{
    uint64_t vp = (p - 1) * (uint64_t)(stride > 0 ? stride : 1) + (uint64_t)(reach > 0 ? reach : 1);
    return 2 * sizeof(float) * (p * grid + vp * vol);
}

int convplan_c3d_band_planes(int gd, uint64_t grid, uint64_t vol, int stride, int reach,
                             uint64_t budget)
{
    if (gd <= 2 || convplan__c3d_band_bytes((uint64_t)gd, grid, vol, stride, reach) <= budget)
        return gd > 0 ? gd : 1;
    int p = 2;
    while (p < gd &&
           convplan__c3d_band_bytes((uint64_t)p + 1, grid, vol, stride, reach) <= budget)
        p++;
    return p;
}
