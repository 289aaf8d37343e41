/* Batch and group normalisation: statistics and their gradients reduced in
 * double over the elements they normalise. Each pass is cut into the sums
 * it needs and what it does with them, so that the forms for a stripe of a
 * partitioned sample (the _parts functions) run the same arithmetic with
 * the sums totalled over the stripes in between. */
#include "op_norm.h"

#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "kernels.h"

/* The channels (or planes) a thread takes at the least: about 64 Ki
 * elements. Each channel is computed whole by one thread, so the split
 * changes no value. */
static size_t norm_grain(size_t elems_per_item)
{
    return elems_per_item >= 65536 ? 1 : 65536 / (elems_per_item ? elems_per_item : 1);
}

/* A call's arguments, for its ranges of channels. */
typedef struct norm_job {
    float *out, *save_mean, *save_invstd, *running_mean, *running_var;
    float *dgamma, *dbeta;
    const float *in, *dout, *gamma, *beta, *a, *b;
    const float *c_mean, *c_invstd;
    const float *ra, *rb;       /* backward: the scale and shift of a ReLU that followed */
    int n, c, hw, n_groups;
    float momentum, eps;
    bool per_sample;
    bool relu;                  /* forward: a ReLU applied to the output */
    /* aBcd16b passes with fewer blocks than threads: the sums per block,
     * then the elementwise part over pieces of every block (split) */
    bool split;
    int unit;                   /* octs in a unit of the sums (oct_run) */
    int blk;                    /* blocked passes: channels a block, 16 (aBcd16b) or 8 (aBcd8b) */
    int coef;                   /* a piece's scales and shifts: OCT_COEF_* */
    double *sums;               /* backward, split: each channel's sum(dy), then sum(dy * xhat) */
} norm_job;

/* The batch norm's passes (and the affine pass that makes a norm's output
 * again) for the processor at hand: their double sums are compute-bound
 * on SSE2 (a 4 x 8 x 512 x 512 backward pass took 9.7 ms, 5.8 on
 * AVX-512). The helpers they call are inlined into each. Every operation
 * is the same IEEE operation in every clone and no product is fused into
 * a sum (-ffp-contract=off, meson.build), so the bits are too. */
#define NORM_CLONES __attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
#define NORM_INLINE static inline __attribute__((always_inline))

/* y = x * a + b over m elements, and max(y, 0) with relu (0 for a NaN, as
 * op_relu_forward gives): a ReLU that follows a norm, applied in the same
 * pass. */
NORM_INLINE void norm_apply(float *y, const float *x, size_t m, float a, float b, bool relu)
{
    if (!relu) {
        for (size_t j = 0; j < m; j++)
            y[j] = x[j] * a + b;
        return;
    }
    for (size_t j = 0; j < m; j++) {
        float v = x[j] * a + b;
        y[j] = v > 0.0f ? v : 0.0f;
    }
}

/* ---- batch norm ---- */

/* Sums in double, in LANES interleaved partial sums added up at the end:
 * the adds of one lane wait for each other, those of different lanes do
 * not, and the lanes are vectors. The order is fixed, so the result is
 * too. */
#define LANES 8
typedef double lanes __attribute__((vector_size(LANES * sizeof(double))));

/* LANES floats, and their comparison masks */
typedef float flanes __attribute__((vector_size(LANES * sizeof(float))));
typedef int32_t ilanes __attribute__((vector_size(LANES * sizeof(int32_t))));

/* LANES floats at x, widened (a macro: a vector returned by value would
 * change the ABI with the vector width) */
#define lanes_load(x) ((lanes){(x)[0], (x)[1], (x)[2], (x)[3], (x)[4], (x)[5], (x)[6], (x)[7]})

NORM_INLINE double lanes_total(const lanes *acc)
{
    double a = ((*acc)[0] + (*acc)[4]) + ((*acc)[2] + (*acc)[6]);
    double b = ((*acc)[1] + (*acc)[5]) + ((*acc)[3] + (*acc)[7]);
    return a + b;
}

/* The sum of channel ch over the batch, and the sum of its squared
 * deviations from mean. */
NORM_INLINE double bn_sum(const float *in, int ch, int n, int c, int hw)
{
    lanes acc = {0};
    for (int i = 0; i < n; i++) {
        const float *x = in + ((size_t)i * c + ch) * hw;
        int j = 0;
        for (; j + LANES <= hw; j += LANES)
            acc += lanes_load(x + j);
        for (; j < hw; j++)
            acc[j % LANES] += x[j];
    }
    return lanes_total(&acc);
}

NORM_INLINE double bn_sq(const float *in, int ch, int n, int c, int hw, double mean)
{
    lanes acc = {0};
    for (int i = 0; i < n; i++) {
        const float *x = in + ((size_t)i * c + ch) * hw;
        int j = 0;
        for (; j + LANES <= hw; j += LANES) {
            lanes d = lanes_load(x + j) - mean;
            acc += d * d;
        }
        for (; j < hw; j++)
            acc[j % LANES] += (x[j] - mean) * (x[j] - mean);
    }
    return lanes_total(&acc);
}

/* The saved and running statistics of channel ch from the mean and
 * squared deviations of m elements; its scale and shift in *a and *b. */
NORM_INLINE void bn_save(float *save_mean, float *save_invstd, float *running_mean,
                         float *running_var, const float *gamma, const float *beta, int ch,
                         float momentum, float eps, double mean, double sq, double m, float *a,
                         float *b)
{
    double var = m ? sq / m : 0.0;
    double invstd = 1.0 / sqrt(var + eps);
    save_mean[ch] = (float)mean;
    save_invstd[ch] = (float)invstd;
    if (running_mean)
        running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] + momentum * mean);
    if (running_var) {
        double unbiased = m > 1 ? sq / (m - 1) : var;
        running_var[ch] = (float)((1.0 - momentum) * running_var[ch] + momentum * unbiased);
    }
    op_norm_coeffs((float)invstd, (float)mean, gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f,
                   a, b);
}

/* Channel ch normalised with the mean and squared deviations of m
 * elements; the saved and running statistics updated. */
NORM_INLINE void bn_apply(float *out, float *save_mean, float *save_invstd, float *running_mean,
                          float *running_var, const float *in, const float *gamma,
                          const float *beta, int ch, int n, int c, int hw, float momentum,
                          float eps, double mean, double sq, double m, bool relu)
{
    float a, b;
    bn_save(save_mean, save_invstd, running_mean, running_var, gamma, beta, ch, momentum, eps,
            mean, sq, m, &a, &b);
    for (int i = 0; i < n; i++)
        norm_apply(out + ((size_t)i * c + ch) * hw, in + ((size_t)i * c + ch) * hw, (size_t)hw, a,
                   b, relu);
}

NORM_CLONES static void bn_fwd_train(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    double m = (double)((size_t)j->n * j->hw);
    for (int ch = (int)lo; ch < (int)hi; ch++) {
        double sum = bn_sum(j->in, ch, j->n, j->c, j->hw);
        double mean = m ? sum / m : 0.0;
        double sq = bn_sq(j->in, ch, j->n, j->c, j->hw, mean);
        bn_apply(j->out, j->save_mean, j->save_invstd, j->running_mean, j->running_var, j->in,
                 j->gamma, j->beta, ch, j->n, j->c, j->hw, j->momentum, j->eps, mean, sq, m,
                 j->relu);
    }
}

void op_batchnorm_forward_train(float *out, float *save_mean,
                                float *save_invstd, float *running_mean,
                                float *running_var, const float *in,
                                const float *gamma, const float *beta, int n,
                                int c, int hw, float momentum, float eps, bool relu)
{
    /* in, out (n, c, hw); gamma, beta, running_*, save_* (c) */
    norm_job j = {.out = out, .save_mean = save_mean, .save_invstd = save_invstd,
                  .running_mean = running_mean, .running_var = running_var, .in = in,
                  .gamma = gamma, .beta = beta, .n = n, .c = c, .hw = hw,
                  .momentum = momentum, .eps = eps, .relu = relu};
    kernels_for((size_t)c, norm_grain((size_t)n * hw), bn_fwd_train, &j);
}

int op_batchnorm_forward_train_parts(float *out, float *save_mean, float *save_invstd,
                                     float *running_mean, float *running_var, const float *in,
                                     const float *gamma, const float *beta, int n, int c, int hw,
                                     float momentum, float eps, bool relu, const op_reduce *r,
                                     double *red)
{
    /* red: c means (sums first), the element count, c squared deviations */
    for (int ch = 0; ch < c; ch++)
        red[ch] = bn_sum(in, ch, n, c, hw);
    red[c] = (double)((size_t)n * hw);
    int rc = op_reduce_sum(r, red, (size_t)c + 1);
    if (rc < 0)
        return rc;
    double m = red[c];
    double *sq = red + c + 1;
    for (int ch = 0; ch < c; ch++) {
        red[ch] = m ? red[ch] / m : 0.0;
        sq[ch] = bn_sq(in, ch, n, c, hw, red[ch]);
    }
    if ((rc = op_reduce_sum(r, sq, (size_t)c)) < 0)
        return rc;
    for (int ch = 0; ch < c; ch++)
        bn_apply(out, save_mean, save_invstd, running_mean, running_var, in, gamma, beta, ch, n,
                 c, hw, momentum, eps, red[ch], sq[ch], m, relu);
    return 0;
}

/* The scale and shift of channel ch from the running statistics */
NORM_INLINE void bn_eval_coeffs(const norm_job *j, int ch, float *a, float *b)
{
    double invstd = 1.0 / sqrt((double)j->running_var[ch] + j->eps);
    *a = (float)invstd * (j->gamma ? j->gamma[ch] : 1.0f);
    *b = (j->beta ? j->beta[ch] : 0.0f) - j->running_mean[ch] * *a;
}

NORM_CLONES static void bn_fwd_eval(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    for (int ch = (int)lo; ch < (int)hi; ch++) {
        float a, b;
        bn_eval_coeffs(j, ch, &a, &b);
        for (int i = 0; i < j->n; i++)
            norm_apply(j->out + ((size_t)i * j->c + ch) * j->hw,
                       j->in + ((size_t)i * j->c + ch) * j->hw, (size_t)j->hw, a, b, j->relu);
    }
}

void op_batchnorm_forward_eval(float *out, const float *in,
                               const float *gamma, const float *beta,
                               const float *running_mean,
                               const float *running_var, int n, int c,
                               int hw, float eps, bool relu)
{
    /* in, out (n, c, hw); gamma, beta, running_* (c) */
    norm_job j = {.out = out, .in = in, .gamma = gamma, .beta = beta,
                  .running_mean = (float *)running_mean, .running_var = (float *)running_var,
                  .n = n, .c = c, .hw = hw, .eps = eps, .relu = relu};
    kernels_for((size_t)c, norm_grain((size_t)n * hw), bn_fwd_eval, &j);
}

/* The gradient of a batch norm's output where a ReLU followed it: dy where
 * the norm's output x * ra + rb (the very float the forward pass made) was
 * positive, else 0, as op_relu_backward gives from that output. */
typedef struct bn_mask {
    bool on;
    float a, b;
} bn_mask;

NORM_INLINE bn_mask bn_mask_of(const float *ra, const float *rb, int ch)
{
    bn_mask k = {ra != NULL, ra ? ra[ch] : 0.0f, rb ? rb[ch] : 0.0f};
    return k;
}

/* dy where the norm's output x * a + b was positive, else 0 */
NORM_INLINE float bn_masked(float dy, float x, float a, float b)
{
    float y = x * a + b;
    return y > 0.0f ? dy : 0.0f;
}

/* sum(dy) and sum(dy * xhat) of channel ch (dy masked by k). Without a
 * mask the sums read dy itself: each form is a loop of its own, so that
 * both vectorize. */
NORM_INLINE void bn_dsums(const float *dout, const float *in, int ch, int n, int c, int hw,
                          double mean, double invstd, const bn_mask *k, double *sdy, double *sdyx)
{
    lanes a = {0}, b = {0};
    const float ka = k->a, kb = k->b;
    for (int i = 0; i < n; i++) {
        const float *x = in + ((size_t)i * c + ch) * hw;
        const float *dy = dout + ((size_t)i * c + ch) * hw;
        int j = 0;
        if (k->on) {
            for (; j + LANES <= hw; j += LANES) {
                flanes xv, dv;
                memcpy(&xv, x + j, sizeof(xv));
                memcpy(&dv, dy + j, sizeof(dv));
                /* bn_masked, a lane each: the bits of dy or of +0 */
                ilanes keep = xv * ka + kb > 0.0f;
                lanes g = __builtin_convertvector((flanes)((ilanes)dv & keep), lanes);
                a += g;
                b += g * ((__builtin_convertvector(xv, lanes) - mean) * invstd);
            }
        } else {
            for (; j + LANES <= hw; j += LANES) {
                lanes g = lanes_load(dy + j);
                a += g;
                b += g * ((lanes_load(x + j) - mean) * invstd);
            }
        }
        for (; j < hw; j++) {
            float d = k->on ? bn_masked(dy[j], x[j], ka, kb) : dy[j];
            a[j % LANES] += d;
            b[j % LANES] += d * ((x[j] - mean) * invstd);
        }
    }
    *sdy = lanes_total(&a);
    *sdyx = lanes_total(&b);
}

/* dx = gamma * invstd * (dy - sdy/m - xhat * sdyx/m) of channel ch. */
NORM_INLINE void bn_dx(float *din, const float *dout, const float *in, const float *gamma, int ch,
                       int n, int c, int hw, double mean, double invstd, const bn_mask *k,
                       double sdy, double sdyx, double m)
{
    float g = (float)(invstd * (gamma ? gamma[ch] : 1.0f));
    float mdy = (float)(sdy / m), mdyx = (float)(sdyx / m);
    float fmean = (float)mean, finv = (float)invstd;
    for (int i = 0; i < n; i++) {
        const float *x = in + ((size_t)i * c + ch) * hw;
        const float *dy = dout + ((size_t)i * c + ch) * hw;
        float *dx = din + ((size_t)i * c + ch) * hw;
        if (k->on) {
            for (int j = 0; j < hw; j++) {
                float xhat = (x[j] - fmean) * finv;
                dx[j] = g * (bn_masked(dy[j], x[j], k->a, k->b) - mdy - xhat * mdyx);
            }
        } else {
            for (int j = 0; j < hw; j++) {
                float xhat = (x[j] - fmean) * finv;
                dx[j] = g * (dy[j] - mdy - xhat * mdyx);
            }
        }
    }
}

NORM_CLONES static void bn_bwd(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    double m = (double)((size_t)j->n * j->hw);
    for (int ch = (int)lo; ch < (int)hi; ch++) {
        double sdy, sdyx;
        bn_mask k = bn_mask_of(j->ra, j->rb, ch);
        bn_dsums(j->dout, j->in, ch, j->n, j->c, j->hw, j->c_mean[ch], j->c_invstd[ch], &k, &sdy,
                 &sdyx);
        if (j->dgamma)
            j->dgamma[ch] = (float)sdyx;
        if (j->dbeta)
            j->dbeta[ch] = (float)sdy;
        if (j->out && m != 0)
            bn_dx(j->out, j->dout, j->in, j->gamma, ch, j->n, j->c, j->hw, j->c_mean[ch],
                  j->c_invstd[ch], &k, sdy, sdyx, m);
    }
}

void op_batchnorm_backward(float *din, float *dgamma, float *dbeta,
                           const float *dout, const float *in,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, int n, int c, int hw,
                           const float *relu_a, const float *relu_b)
{
    /* dout, in, din (n, c, hw); gamma, save_*, dgamma, dbeta (c);
     * xhat = (x - mean) * invstd, dgamma = sum(dy * xhat), dbeta = sum(dy),
     * dx = gamma * invstd * (dy - dbeta/m - xhat * dgamma/m) */
    norm_job j = {.out = din, .dgamma = dgamma, .dbeta = dbeta, .dout = dout, .in = in,
                  .gamma = gamma, .c_mean = save_mean, .c_invstd = save_invstd, .ra = relu_a,
                  .rb = relu_b, .n = n, .c = c, .hw = hw};
    kernels_for((size_t)c, norm_grain((size_t)n * hw), bn_bwd, &j);
}

int op_batchnorm_backward_parts(float *din, float *dgamma, float *dbeta, const float *dout,
                                const float *in, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int hw,
                                const float *relu_a, const float *relu_b, const op_reduce *r,
                                double *red)
{
    /* red: c sums of dy, c of dy * xhat, the element count. dgamma and
     * dbeta are this stripe's share: the weight gradients add up over the
     * stripes as they travel up. */
    for (int ch = 0; ch < c; ch++) {
        bn_mask k = bn_mask_of(relu_a, relu_b, ch);
        bn_dsums(dout, in, ch, n, c, hw, save_mean[ch], save_invstd[ch], &k, &red[ch],
                 &red[c + ch]);
        if (dgamma)
            dgamma[ch] = (float)red[c + ch];
        if (dbeta)
            dbeta[ch] = (float)red[ch];
    }
    red[2 * c] = (double)((size_t)n * hw);
    if (!din)
        return 0;
    int rc = op_reduce_sum(r, red, 2 * (size_t)c + 1);
    if (rc < 0)
        return rc;
    double m = red[2 * c];
    for (int ch = 0; m != 0 && ch < c; ch++) {
        bn_mask k = bn_mask_of(relu_a, relu_b, ch);
        bn_dx(din, dout, in, gamma, ch, n, c, hw, save_mean[ch], save_invstd[ch], &k, red[ch],
              red[c + ch], m);
    }
    return 0;
}

/* ---- batch norm over aBcd16b ---- */

/* Every tensor of the pass in oneDNN's aBcd16b layout, (n, c / 16, hw,
 * 16), as its blocked convolutions write and read them: the input, the
 * output, their gradients. Eight channels (an "oct", half a block) are
 * computed together, their eight values at a pixel adjacent, with the
 * scales, shifts and statistics as vectors over them. The sums keep the
 * plain passes' LANES partial sums of each channel, held transposed
 * (acc[l] is lane l of the oct's eight channels), and every element meets
 * the same operations in the same order: the bits are the plain passes'.
 * A unit of work is a whole block (both its octs, each channel whole on
 * one thread), swept in chunks of OCT_CHUNK pixels of a sample, each oct
 * in turn, so that the second reads the block's lines from the first
 * level of cache (an oct alone reads half of every line). */
#define OCT_CHUNK 512

typedef float f8v __attribute__((vector_size(8 * sizeof(float))));
typedef int32_t i8v __attribute__((vector_size(8 * sizeof(int32_t))));

/* (macros: a vector passed or returned by value would change the ABI) */
#define f8_load(p)                                                                                 \
    ({                                                                                             \
        f8v v_;                                                                                    \
        memcpy(&v_, (p), sizeof(v_));                                                              \
        v_;                                                                                        \
    })

#define f8_store(p, v)                                                                             \
    do {                                                                                           \
        f8v s_ = (v);                                                                              \
        memcpy((p), &s_, sizeof(s_));                                                              \
    } while (0)

/* Octs in a unit of work: a whole block, so that a thread reads whole
 * lines, where there are as many blocks as threads; with fewer (16
 * channels on two threads) an oct for the sums, which read half of every
 * line, and the elementwise part then over pieces of whole blocks (split):
 * resnet_small's 32x16x32x32 forward pass 0.108 ms against 0.211 with
 * the block on one thread, backward 0.149 against 0.290 (the plain
 * passes 0.079 and 0.113) */
#define OCT_UNIT(B) ((B) / 8)

/* Pixel 0 of oct o of sample i in blocks of B channels: pixel p is B * p
 * floats on. (B is a constant where each pass is made: OCT_PASS.) */
NORM_INLINE size_t oct_at(int i, int o, int c, int hw, int B)
{
    return ((size_t)i * (size_t)(c / B) + (size_t)(o / (B / 8))) * (size_t)hw * (size_t)B +
           (size_t)(o % (B / 8)) * 8;
}

/* The end of the chunk of pixels from p0 */
NORM_INLINE int oct_chunk_end(int p0, int hw)
{
    return hw - p0 > OCT_CHUNK ? p0 + OCT_CHUNK : hw;
}

/* The oct's eight values of what a channel's array holds */
NORM_INLINE void oct_vec(f8v *v, const float *per_channel, int o)
{
    for (int k = 0; k < 8; k++)
        (*v)[k] = per_channel[o * 8 + k];
}

/* bn_sum's (mean NULL) or bn_sq's partial sums of an oct's pixels
 * [p0, p1) (p0 a multiple of LANES) added into acc */
NORM_INLINE void oct_sum1(lanes *acc, const float *x, int p, const lanes *mean, int B)
{
    lanes v = __builtin_convertvector(f8_load(x + (size_t)p * B), lanes);
    if (mean) {
        lanes d = v - *mean;
        *acc += d * d;
    } else {
        *acc += v;
    }
}

NORM_INLINE void oct_sum(lanes acc[LANES], const float *x, int p0, int p1, const lanes *mean,
                         int B)
{
    int p = p0;
    /* LANES pixels a step, each lane's sum a register of its own */
    for (; p + LANES <= p1; p += LANES)
        for (int l = 0; l < LANES; l++)
            oct_sum1(&acc[l], x, p + l, mean, B);
    for (; p < p1; p++)
        oct_sum1(&acc[p % LANES], x, p, mean, B);
}

/* lanes_total of each of the oct's channels */
NORM_INLINE void oct_total(lanes *tot, const lanes acc[LANES])
{
    *tot = ((acc[0] + acc[4]) + (acc[2] + acc[6])) + ((acc[1] + acc[5]) + (acc[3] + acc[7]));
}

/* norm_apply of an oct's pixels [p0, p1): y = x * a + b, relu: v > 0 ? v
 * : +0 */
NORM_INLINE void oct_apply(float *y, const float *x, int p0, int p1, const f8v *a, const f8v *b,
                           bool relu, int B)
{
    for (int p = p0; p < p1; p++) {
        f8v v = f8_load(x + (size_t)p * B) * *a + *b;
        if (relu)
            v = (f8v)((i8v)v & (v > 0.0f));
        f8_store(y + (size_t)p * B, v);
    }
}

/* Every oct of the unit of u octs from o0 applied with scales a and
 * shifts b (its channels') */
NORM_INLINE void unit_apply(const norm_job *j, int o0, int u, const float *a, const float *b,
                            int B)
{
    f8v av[2], bv[2];
    for (int k = 0; k < u; k++) {
        oct_vec(&av[k], a, k);
        oct_vec(&bv[k], b, k);
    }
    for (int i = 0; i < j->n; i++)
        for (int p0 = 0; p0 < j->hw; p0 += OCT_CHUNK)
            for (int k = 0; k < u; k++) {
                size_t at = oct_at(i, o0 + k, j->c, j->hw, B);
                oct_apply(j->out + at, j->in + at, p0, oct_chunk_end(p0, j->hw), &av[k], &bv[k],
                          j->relu, B);
            }
}

/* bn_sum's (mean NULL) or bn_sq's totals of the unit's octs */
NORM_INLINE void unit_sums(const norm_job *j, int o0, int u, lanes tot[2], const lanes *mean,
                           int B)
{
    lanes acc[2][LANES];
    memset(acc, 0, sizeof(acc));
    for (int i = 0; i < j->n; i++)
        for (int p0 = 0; p0 < j->hw; p0 += OCT_CHUNK)
            for (int k = 0; k < u; k++)
                oct_sum(acc[k], j->in + oct_at(i, o0 + k, j->c, j->hw, B), p0,
                        oct_chunk_end(p0, j->hw), mean ? &mean[k] : NULL, B);
    for (int k = 0; k < u; k++)
        oct_total(&tot[k], acc[k]);
}

NORM_INLINE void bnb_fwd_train_units(void *ctx, size_t lo, size_t hi, int B)
{
    const norm_job *j = ctx;
    int u = j->unit;
    double m = (double)((size_t)j->n * j->hw);
    for (size_t t = lo; t < hi; t++) {
        int o0 = (int)t * u;
        lanes mean[2], sq[2];
        unit_sums(j, o0, u, mean, NULL, B);
        for (int k = 0; k < u; k++)
            for (int q = 0; q < 8; q++)
                mean[k][q] = m ? mean[k][q] / m : 0.0;
        unit_sums(j, o0, u, sq, mean, B);
        float a[16], b[16];
        for (int q = 0; q < 8 * u; q++)
            bn_save(j->save_mean, j->save_invstd, j->running_mean, j->running_var, j->gamma,
                    j->beta, o0 * 8 + q, j->momentum, j->eps, mean[q / 8][q % 8],
                    sq[q / 8][q % 8], m, &a[q], &b[q]);
        if (!j->split) /* (split: over pieces after, from the saved statistics) */
            unit_apply(j, o0, u, a, b, B);
    }
}

/* What an oct's backward pass computes with, a vector over its channels */
typedef struct oct_coef {
    f8v ka, kb;                 /* the relu's mask: x * ka + kb > 0 */
    lanes mean, inv;            /* the saved statistics, for the sums */
    f8v fmean, finv;            /* the same in float, for dx */
    f8v g, mdy, mdyx;           /* bn_dx's */
} oct_coef;

/* bn_dsums' partial sums of an oct's pixels [p0, p1) */
NORM_INLINE void oct_dsums1(lanes *a, lanes *b, const float *x, const float *dy, int p,
                            const oct_coef *cf, bool masked, int B)
{
    f8v xv = f8_load(x + (size_t)p * B), dv = f8_load(dy + (size_t)p * B);
    if (masked) /* as bn_dsums: the bits of dy or of +0 */
        dv = (f8v)((i8v)dv & (xv * cf->ka + cf->kb > 0.0f));
    lanes g = __builtin_convertvector(dv, lanes);
    *a += g;
    *b += g * ((__builtin_convertvector(xv, lanes) - cf->mean) * cf->inv);
}

NORM_INLINE void oct_dsums(lanes a[LANES], lanes b[LANES], const float *x, const float *dy, int p0,
                           int p1, const oct_coef *cf, bool masked, int B)
{
    int p = p0;
    for (; p + LANES <= p1; p += LANES)
        for (int l = 0; l < LANES; l++)
            oct_dsums1(&a[l], &b[l], x, dy, p + l, cf, masked, B);
    for (; p < p1; p++)
        oct_dsums1(&a[p % LANES], &b[p % LANES], x, dy, p, cf, masked, B);
}

/* bn_dx of an oct's pixels [p0, p1) */
NORM_INLINE void oct_dx(float *dx, const float *x, const float *dy, int p0, int p1,
                        const oct_coef *cf, bool masked, int B)
{
    for (int p = p0; p < p1; p++) {
        f8v xv = f8_load(x + (size_t)p * B), dv = f8_load(dy + (size_t)p * B);
        if (masked)
            dv = (f8v)((i8v)dv & (xv * cf->ka + cf->kb > 0.0f));
        f8v xhat = (xv - cf->fmean) * cf->finv;
        f8_store(dx + (size_t)p * B, cf->g * (dv - cf->mdy - xhat * cf->mdyx));
    }
}

/* What oct o's backward pass computes with: the mask and the saved
 * statistics, and (sdy given) bn_dx's coefficients from its sums */
NORM_INLINE void oct_coef_make(const norm_job *j, int o, oct_coef *f, const double *sdy,
                               const double *sdyx, double m)
{
    for (int q = 0; q < 8; q++) {
        int ch = o * 8 + q;
        bn_mask mk = bn_mask_of(j->ra, j->rb, ch);
        f->ka[q] = mk.a;
        f->kb[q] = mk.b;
        f->mean[q] = j->c_mean[ch]; /* as bn_bwd passes them: double */
        f->inv[q] = j->c_invstd[ch];
        f->fmean[q] = (float)f->mean[q];
        f->finv[q] = (float)f->inv[q];
        if (!sdy)
            continue;
        /* as bn_dx */
        f->g[q] = (float)(f->inv[q] * (j->gamma ? j->gamma[ch] : 1.0f));
        f->mdy[q] = (float)(sdy[q] / m);
        f->mdyx[q] = (float)(sdyx[q] / m);
    }
}

/* The backward pass of units [lo, hi), masked or not made apart; split:
 * the sums alone, into j->sums */
NORM_INLINE void bnb_bwd_form(const norm_job *j, size_t lo, size_t hi, bool masked, int B)
{
    int u = j->unit, c = j->c, hw = j->hw;
    double m = (double)((size_t)j->n * hw);
    for (size_t t = lo; t < hi; t++) {
        int o0 = (int)t * u;
        oct_coef cf[2];
        lanes a[2][LANES], b[2][LANES];
        memset(a, 0, sizeof(a));
        memset(b, 0, sizeof(b));
        memset(cf, 0, sizeof(cf));
        for (int k = 0; k < u; k++)
            oct_coef_make(j, o0 + k, &cf[k], NULL, NULL, m);
        for (int i = 0; i < j->n; i++)
            for (int p0 = 0; p0 < hw; p0 += OCT_CHUNK)
                for (int k = 0; k < u; k++) {
                    size_t at = oct_at(i, o0 + k, c, hw, B);
                    oct_dsums(a[k], b[k], j->in + at, j->dout + at, p0, oct_chunk_end(p0, hw),
                              &cf[k], masked, B);
                }
        for (int k = 0; k < u; k++) {
            lanes sdy, sdyx;
            oct_total(&sdy, a[k]);
            oct_total(&sdyx, b[k]);
            double dy8[8], dyx8[8];
            for (int q = 0; q < 8; q++) {
                int ch = (o0 + k) * 8 + q;
                dy8[q] = sdy[q];
                dyx8[q] = sdyx[q];
                if (j->dgamma)
                    j->dgamma[ch] = (float)sdyx[q];
                if (j->dbeta)
                    j->dbeta[ch] = (float)sdy[q];
                if (j->split) {
                    j->sums[ch] = sdy[q];
                    j->sums[c + ch] = sdyx[q];
                }
            }
            oct_coef_make(j, o0 + k, &cf[k], dy8, dyx8, m);
        }
        if (!j->out || m == 0 || j->split)
            continue;
        for (int i = 0; i < j->n; i++)
            for (int p0 = 0; p0 < hw; p0 += OCT_CHUNK)
                for (int k = 0; k < u; k++) {
                    size_t at = oct_at(i, o0 + k, c, hw, B);
                    oct_dx(j->out + at, j->in + at, j->dout + at, p0, oct_chunk_end(p0, hw),
                           &cf[k], masked, B);
                }
    }
}

/* A piece of the elementwise part of a split pass: one chunk of pixels of
 * one block of one sample, t numbering them sample, block, chunk. */
typedef struct oct_piece {
    int i, o0, p0, p1;
} oct_piece;

NORM_INLINE oct_piece piece_of(const norm_job *j, size_t t, int B)
{
    size_t chunks = ((size_t)j->hw + OCT_CHUNK - 1) / OCT_CHUNK, blocks = (size_t)(j->c / B);
    oct_piece pc;
    pc.p0 = (int)(t % chunks) * OCT_CHUNK;
    pc.p1 = oct_chunk_end(pc.p0, j->hw);
    pc.o0 = (int)(t / chunks % blocks) * OCT_UNIT(B);
    pc.i = (int)(t / chunks / blocks);
    return pc;
}

/* The dx of pieces [lo, hi) from j->sums */
NORM_INLINE void bnb_dx_form(const norm_job *j, size_t lo, size_t hi, bool masked, int B)
{
    double m = (double)((size_t)j->n * j->hw);
    for (size_t t = lo; t < hi; t++) {
        oct_piece pc = piece_of(j, t, B);
        for (int k = 0; k < OCT_UNIT(B); k++) {
            int o = pc.o0 + k;
            oct_coef cf;
            memset(&cf, 0, sizeof(cf));
            oct_coef_make(j, o, &cf, j->sums + o * 8, j->sums + j->c + o * 8, m);
            size_t at = oct_at(pc.i, o, j->c, j->hw, B);
            oct_dx(j->out + at, j->in + at, j->dout + at, pc.p0, pc.p1, &cf, masked, B);
        }
    }
}

NORM_INLINE void bnb_dx_units(void *ctx, size_t lo, size_t hi, int B)
{
    const norm_job *j = ctx;
    if (j->ra)
        bnb_dx_form(j, lo, hi, true, B);
    else
        bnb_dx_form(j, lo, hi, false, B);
}

/* The scale and shift of channel ch a pass over pieces applies: given
 * (op_norm_affine_blk), from the statistics a split training pass's sums
 * saved (as bn_save made them), or from the running ones (evaluation) */
enum { OCT_COEF_GIVEN, OCT_COEF_SAVED, OCT_COEF_RUNNING };

NORM_INLINE void piece_coeffs(const norm_job *j, int ch, float *a, float *b)
{
    if (j->coef == OCT_COEF_GIVEN) {
        *a = j->a[ch];
        *b = j->b[ch];
    } else if (j->coef == OCT_COEF_SAVED) {
        op_norm_coeffs(j->save_invstd[ch], j->save_mean[ch], j->gamma ? j->gamma[ch] : 1.0f,
                       j->beta ? j->beta[ch] : 0.0f, a, b);
    } else {
        bn_eval_coeffs(j, ch, a, b);
    }
}

/* The output of pieces [lo, hi) */
NORM_INLINE void bnb_apply_units(void *ctx, size_t lo, size_t hi, int B)
{
    const norm_job *j = ctx;
    for (size_t t = lo; t < hi; t++) {
        oct_piece pc = piece_of(j, t, B);
        for (int k = 0; k < OCT_UNIT(B); k++) {
            int o = pc.o0 + k;
            float a[8], b[8];
            for (int q = 0; q < 8; q++)
                piece_coeffs(j, o * 8 + q, &a[q], &b[q]);
            f8v av, bv;
            oct_vec(&av, a, 0);
            oct_vec(&bv, b, 0);
            size_t at = oct_at(pc.i, o, j->c, j->hw, B);
            oct_apply(j->out + at, j->in + at, pc.p0, pc.p1, &av, &bv, j->relu, B);
        }
    }
}

NORM_INLINE void bnb_bwd_units(void *ctx, size_t lo, size_t hi, int B)
{
    const norm_job *j = ctx;
    if (j->ra)
        bnb_bwd_form(j, lo, hi, true, B);
    else
        bnb_bwd_form(j, lo, hi, false, B);
}

/* Each pass in the processor's form (NORM_CLONES; 512-bit vectors for
 * the AVX-512 clone, where an oct's eight partial sums of eight doubles
 * fit the registers, measured no faster), for blocks of 16 channels
 * (aBcd16b, AVX-512's convolutions) and of 8 (aBcd8b, AVX2's), the block
 * a constant in each */
#define OCT_PASS(name)                                                                             \
    NORM_CLONES static void name##16(void *ctx, size_t lo, size_t hi)                              \
    {                                                                                              \
        name##_units(ctx, lo, hi, 16);                                                             \
    }                                                                                              \
    NORM_CLONES static void name##8(void *ctx, size_t lo, size_t hi)                               \
    {                                                                                              \
        name##_units(ctx, lo, hi, 8);                                                              \
    }

OCT_PASS(bnb_fwd_train)
OCT_PASS(bnb_bwd)
OCT_PASS(bnb_apply)
OCT_PASS(bnb_dx)

/* j's pass over every unit of work, each taking at the least norm_grain's
 * channels, rounded up: a block, or an oct where there are fewer blocks
 * than threads (then the elementwise part goes over pieces after) */
static void oct_run(norm_job *j, kernels_range_fn fn16, kernels_range_fn fn8)
{
    kernels_range_fn fn = j->blk == 8 ? fn8 : fn16;
    j->unit = j->c / j->blk < kernels_threads() ? 1 : OCT_UNIT(j->blk);
    size_t per = 8 * (size_t)j->unit;
    kernels_for((size_t)j->c / per, (norm_grain((size_t)j->n * j->hw) + per - 1) / per,
                fn, j);
}

/* Whether j's elementwise part goes over pieces, apart from its sums:
 * fewer blocks than threads (16 channels: one block, one thread for the
 * sums), and room for the backward pass's sums */
static bool oct_split(const norm_job *j)
{
    return j->c / j->blk < kernels_threads() && j->c <= 1024;
}

/* j's elementwise pass fn over every piece */
static void oct_pieces(norm_job *j, kernels_range_fn fn16, kernels_range_fn fn8)
{
    size_t chunks = ((size_t)j->hw + OCT_CHUNK - 1) / OCT_CHUNK;
    kernels_for((size_t)j->n * (size_t)(j->c / j->blk) * chunks, 1, j->blk == 8 ? fn8 : fn16, j);
}

void op_batchnorm_forward_train_blk(float *out, float *save_mean, float *save_invstd,
                                    float *running_mean, float *running_var, const float *in,
                                    const float *gamma, const float *beta, int n, int c, int hw,
                                    float momentum, float eps, bool relu, int blk)
{
    norm_job j = {.blk = blk, .out = out, .save_mean = save_mean, .save_invstd = save_invstd,
                  .running_mean = running_mean, .running_var = running_var, .in = in,
                  .gamma = gamma, .beta = beta, .n = n, .c = c, .hw = hw,
                  .momentum = momentum, .eps = eps, .relu = relu, .coef = OCT_COEF_SAVED};
    j.split = oct_split(&j);
    oct_run(&j, bnb_fwd_train16, bnb_fwd_train8);
    if (j.split)
        oct_pieces(&j, bnb_apply16, bnb_apply8);
}

void op_batchnorm_forward_eval_blk(float *out, const float *in, const float *gamma,
                                   const float *beta, const float *running_mean,
                                   const float *running_var, int n, int c, int hw, float eps,
                                   bool relu, int blk)
{
    norm_job j = {.blk = blk, .out = out, .in = in, .gamma = gamma, .beta = beta,
                  .running_mean = (float *)running_mean, .running_var = (float *)running_var,
                  .n = n, .c = c, .hw = hw, .eps = eps, .relu = relu, .coef = OCT_COEF_RUNNING};
    oct_pieces(&j, bnb_apply16, bnb_apply8); /* elementwise: no sums to keep whole */
}

void op_norm_affine_blk(float *out, const float *in, const float *a, const float *b, int n, int c,
                        int hw, bool relu, int blk)
{
    norm_job j = {.blk = blk, .out = out, .in = in, .a = a, .b = b, .n = n, .c = c, .hw = hw, .relu = relu,
                  .coef = OCT_COEF_GIVEN};
    oct_pieces(&j, bnb_apply16, bnb_apply8);
}

void op_batchnorm_backward_blk(float *din, float *dgamma, float *dbeta, const float *dout,
                               const float *in, const float *gamma, const float *save_mean,
                               const float *save_invstd, int n, int c, int hw,
                               const float *relu_a, const float *relu_b, int blk)
{
    norm_job j = {.blk = blk, .out = din, .dgamma = dgamma, .dbeta = dbeta, .dout = dout, .in = in,
                  .gamma = gamma, .c_mean = save_mean, .c_invstd = save_invstd, .ra = relu_a,
                  .rb = relu_b, .n = n, .c = c, .hw = hw};
    double sums[2 * 1024];
    j.split = din && oct_split(&j);
    j.sums = sums;
    oct_run(&j, bnb_bwd16, bnb_bwd8);
    if (j.split && (size_t)n * hw > 0)
        oct_pieces(&j, bnb_dx16, bnb_dx8);
}

/* ---- group norm ---- */

static double gn_sum(const float *x, size_t m)
{
    double sum = 0.0;
    for (size_t j = 0; j < m; j++)
        sum += x[j];
    return sum;
}

static double gn_sq(const float *x, size_t m, double mean)
{
    double sq = 0.0;
    for (size_t j = 0; j < m; j++)
        sq += (x[j] - mean) * (x[j] - mean);
    return sq;
}

/* Group g of sample i normalised with its mean and squared deviations
 * over m elements. */
static void gn_apply(float *out, float *save_mean, float *save_invstd, const float *in,
                     const float *gamma, const float *beta, int i, int g, int c, int hw,
                     int groups, float eps, double mean, double sq, double m, bool relu)
{
    int cg = c / groups;
    const float *x = in + ((size_t)i * c + (size_t)g * cg) * hw;
    float *y = out + ((size_t)i * c + (size_t)g * cg) * hw;
    double invstd = 1.0 / sqrt((m ? sq / m : 0.0) + eps);
    save_mean[i * groups + g] = (float)mean;
    save_invstd[i * groups + g] = (float)invstd;
    for (int k = 0; k < cg; k++) {
        int ch = g * cg + k;
        float a, b;
        op_norm_coeffs((float)invstd, (float)mean, gamma ? gamma[ch] : 1.0f,
                       beta ? beta[ch] : 0.0f, &a, &b);
        norm_apply(y + (size_t)k * hw, x + (size_t)k * hw, (size_t)hw, a, b, relu);
    }
}

static void gn_fwd(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    int groups = j->n_groups, cg = j->c / groups;
    size_t m = (size_t)cg * j->hw;
    for (size_t k = lo; k < hi; k++) { /* item k = (sample, group) */
        int i = (int)(k / (size_t)groups), g = (int)(k % (size_t)groups);
        const float *x = j->in + ((size_t)i * j->c + (size_t)g * cg) * j->hw;
        double mean = m ? gn_sum(x, m) / m : 0.0;
        gn_apply(j->out, j->save_mean, j->save_invstd, j->in, j->gamma, j->beta, i, g, j->c,
                 j->hw, groups, j->eps, mean, gn_sq(x, m, mean), (double)m, j->relu);
    }
}

void op_groupnorm_forward(float *out, float *save_mean, float *save_invstd,
                          const float *in, const float *gamma,
                          const float *beta, int n, int c, int hw,
                          int groups, float eps, bool relu)
{
    /* in, out (n, c, hw); gamma, beta (c); save_* (n, groups) */
    norm_job j = {.out = out, .save_mean = save_mean, .save_invstd = save_invstd, .in = in,
                  .gamma = gamma, .beta = beta, .n = n, .c = c, .hw = hw, .eps = eps,
                  .n_groups = groups, .relu = relu};
    kernels_for((size_t)n * groups, norm_grain((size_t)(c / groups) * hw), gn_fwd, &j);
}

int op_groupnorm_forward_parts(float *out, float *save_mean, float *save_invstd, const float *in,
                               const float *gamma, const float *beta, int n, int c, int hw,
                               int groups, float eps, bool relu, const op_reduce *r, double *red)
{
    /* red: n*groups means (sums first), the element count, n*groups
     * squared deviations */
    int cg = c / groups;
    size_t m = (size_t)cg * hw, ng = (size_t)n * groups;
    for (size_t k = 0; k < ng; k++)
        red[k] = gn_sum(in + ((k / groups) * c + (k % groups) * cg) * hw, m);
    red[ng] = (double)m;
    int rc = op_reduce_sum(r, red, ng + 1);
    if (rc < 0)
        return rc;
    double mt = red[ng];
    double *sq = red + ng + 1;
    for (size_t k = 0; k < ng; k++) {
        red[k] = mt ? red[k] / mt : 0.0;
        sq[k] = gn_sq(in + ((k / groups) * c + (k % groups) * cg) * hw, m, red[k]);
    }
    if ((rc = op_reduce_sum(r, sq, ng)) < 0)
        return rc;
    for (size_t k = 0; k < ng; k++)
        gn_apply(out, save_mean, save_invstd, in, gamma, beta, (int)(k / groups),
                 (int)(k % groups), c, hw, groups, eps, red[k], sq[k], mt, relu);
    return 0;
}

/* dgamma and dbeta: sums over the samples of each channel. */
static void gn_dparams_range(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    int groups = j->n_groups, cg = j->c / groups;
    for (int ch = (int)lo; ch < (int)hi; ch++) {
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < j->n; i++) {
            int g = ch / cg;
            double mean = j->c_mean[i * groups + g];
            double invstd = j->c_invstd[i * groups + g];
            const float *x = j->in + ((size_t)i * j->c + ch) * j->hw;
            const float *dy = j->dout + ((size_t)i * j->c + ch) * j->hw;
            for (int k = 0; k < j->hw; k++) {
                sdy += dy[k];
                sdyx += dy[k] * ((x[k] - mean) * invstd);
            }
        }
        if (j->dgamma)
            j->dgamma[ch] = (float)sdyx;
        if (j->dbeta)
            j->dbeta[ch] = (float)sdy;
    }
}

static void gn_dparams(float *dgamma, float *dbeta, const float *dout, const float *in,
                       const float *save_mean, const float *save_invstd, int n, int c, int hw,
                       int groups)
{
    norm_job j = {.dgamma = dgamma, .dbeta = dbeta, .dout = dout, .in = in,
                  .c_mean = save_mean, .c_invstd = save_invstd, .n = n, .c = c, .hw = hw,
                  .n_groups = groups};
    kernels_for((size_t)c, norm_grain((size_t)n * hw), gn_dparams_range, &j);
}

/* Of group g of sample i, with dxhat = dy * gamma: sum(dxhat) and
 * sum(dxhat * xhat). */
static void gn_dsums(const float *dout, const float *in, const float *gamma,
                     const float *save_mean, const float *save_invstd, int i, int g, int c,
                     int hw, int groups, double *s1, double *s2)
{
    int cg = c / groups;
    size_t off = ((size_t)i * c + (size_t)g * cg) * hw;
    double mean = save_mean[i * groups + g];
    double invstd = save_invstd[i * groups + g];
    double a = 0.0, b = 0.0;
    for (int k = 0; k < cg; k++) {
        float gm = gamma ? gamma[g * cg + k] : 1.0f;
        const float *x = in + off + (size_t)k * hw;
        const float *dy = dout + off + (size_t)k * hw;
        for (int j = 0; j < hw; j++) {
            double dxh = (double)dy[j] * gm;
            a += dxh;
            b += dxh * ((x[j] - mean) * invstd);
        }
    }
    *s1 = a;
    *s2 = b;
}

/* dx = invstd * (dxhat - s1/m - xhat * s2/m) of group g of sample i. */
static void gn_dx(float *din, const float *dout, const float *in, const float *gamma,
                  const float *save_mean, const float *save_invstd, int i, int g, int c, int hw,
                  int groups, double s1, double s2, double m)
{
    int cg = c / groups;
    size_t off = ((size_t)i * c + (size_t)g * cg) * hw;
    float m1 = (float)(s1 / m), m2 = (float)(s2 / m);
    float fmean = save_mean[i * groups + g], finv = save_invstd[i * groups + g];
    for (int k = 0; k < cg; k++) {
        float gm = gamma ? gamma[g * cg + k] : 1.0f;
        const float *x = in + off + (size_t)k * hw;
        const float *dy = dout + off + (size_t)k * hw;
        float *dx = din + off + (size_t)k * hw;
        for (int j = 0; j < hw; j++) {
            float xhat = (x[j] - fmean) * finv;
            dx[j] = finv * (dy[j] * gm - m1 - xhat * m2);
        }
    }
}

static void gn_bwd(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    int groups = j->n_groups;
    double m = (double)((size_t)(j->c / groups) * j->hw);
    for (size_t k = lo; k < hi; k++) { /* item k = (sample, group) */
        int i = (int)(k / (size_t)groups), g = (int)(k % (size_t)groups);
        double s1, s2;
        gn_dsums(j->dout, j->in, j->gamma, j->c_mean, j->c_invstd, i, g, j->c, j->hw, groups,
                 &s1, &s2);
        gn_dx(j->out, j->dout, j->in, j->gamma, j->c_mean, j->c_invstd, i, g, j->c, j->hw,
              groups, s1, s2, m);
    }
}

void op_groupnorm_backward(float *din, float *dgamma, float *dbeta,
                           const float *dout, const float *in,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, int n, int c, int hw,
                           int groups)
{
    /* dout, in, din (n, c, hw); gamma, dgamma, dbeta (c); save_* (n,
     * groups). With dxhat = dy * gamma over one group of m elements:
     * dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
    size_t m = (size_t)(c / groups) * hw;
    if (dgamma || dbeta)
        gn_dparams(dgamma, dbeta, dout, in, save_mean, save_invstd, n, c, hw, groups);
    if (!din || m == 0)
        return;
    norm_job j = {.out = din, .dout = dout, .in = in, .gamma = gamma, .c_mean = save_mean,
                  .c_invstd = save_invstd, .n = n, .c = c, .hw = hw, .n_groups = groups};
    kernels_for((size_t)n * groups, norm_grain(m), gn_bwd, &j);
}

int op_groupnorm_backward_parts(float *din, float *dgamma, float *dbeta, const float *dout,
                                const float *in, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int hw, int groups,
                                const op_reduce *r, double *red)
{
    /* red: n*groups sums of dxhat, n*groups of dxhat * xhat, the count */
    size_t ng = (size_t)n * groups;
    if (dgamma || dbeta)
        gn_dparams(dgamma, dbeta, dout, in, save_mean, save_invstd, n, c, hw, groups);
    if (!din)
        return 0;
    for (size_t k = 0; k < ng; k++)
        gn_dsums(dout, in, gamma, save_mean, save_invstd, (int)(k / groups), (int)(k % groups), c,
                 hw, groups, &red[k], &red[ng + k]);
    red[2 * ng] = (double)((size_t)(c / groups) * hw);
    int rc = op_reduce_sum(r, red, 2 * ng + 1);
    if (rc < 0)
        return rc;
    double m = red[2 * ng];
    for (size_t k = 0; m != 0 && k < ng; k++)
        gn_dx(din, dout, in, gamma, save_mean, save_invstd, (int)(k / groups), (int)(k % groups),
              c, hw, groups, red[k], red[ng + k], m);
    return 0;
}
NORM_CLONES static void norm_affine(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    for (size_t pl = lo; pl < hi; pl++) { /* plane pl = (sample, channel) */
        size_t k = j->per_sample ? pl : pl % (size_t)j->c;
        const float *x = j->in + pl * j->hw;
        float *y = j->out + pl * j->hw;
        norm_apply(y, x, (size_t)j->hw, j->a[k], j->b[k], j->relu);
    }
}

void op_norm_affine(float *out, const float *in, const float *a, const float *b, int n, int c,
                    int hw, bool per_sample, bool relu)
{
    norm_job j = {.out = out, .in = in, .a = a, .b = b, .n = n, .c = c, .hw = hw,
                  .per_sample = per_sample, .relu = relu};
    kernels_for((size_t)n * c, norm_grain((size_t)hw), norm_affine, &j);
}

NORM_CLONES static void norm_relu_mask(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    for (size_t pl = lo; pl < hi; pl++) { /* plane pl = (sample, channel) */
        size_t k = j->per_sample ? pl : pl % (size_t)j->c;
        const float *x = j->in + pl * j->hw;
        float *dy = j->out + pl * j->hw, a = j->a[k], b = j->b[k];
        for (size_t i = 0; i < (size_t)j->hw; i++)
            dy[i] = bn_masked(dy[i], x[i], a, b);
    }
}

void op_norm_relu_mask(float *dy, const float *in, const float *a, const float *b, int n, int c,
                       int hw, bool per_sample)
{
    norm_job j = {.out = dy, .in = in, .a = a, .b = b, .n = n, .c = c, .hw = hw,
                  .per_sample = per_sample};
    kernels_for((size_t)n * c, norm_grain((size_t)hw), norm_relu_mask, &j);
}
