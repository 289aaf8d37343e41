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

/* Channel ch normalised with the mean and squared deviations of m
 * elements; the saved and running statistics updated. */
NORM_INLINE void bn_apply(float *out, float *save_mean, float *save_invstd, float *running_mean,
                          float *running_var, const float *in, const float *gamma,
                          const float *beta, int ch, int n, int c, int hw, float momentum,
                          float eps, double mean, double sq, double m, bool relu)
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
    float a, b;
    op_norm_coeffs((float)invstd, (float)mean, gamma ? gamma[ch] : 1.0f, beta ? beta[ch] : 0.0f,
                   &a, &b);
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

NORM_CLONES static void bn_fwd_eval(void *ctx, size_t lo, size_t hi)
{
    const norm_job *j = ctx;
    for (int ch = (int)lo; ch < (int)hi; ch++) {
        double invstd = 1.0 / sqrt((double)j->running_var[ch] + j->eps);
        float a = (float)invstd * (j->gamma ? j->gamma[ch] : 1.0f);
        float b = (j->beta ? j->beta[ch] : 0.0f) - j->running_mean[ch] * a;
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
                     int groups, float eps, double mean, double sq, double m)
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
        norm_apply(y + (size_t)k * hw, x + (size_t)k * hw, (size_t)hw, a, b, false);
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
                 j->hw, groups, j->eps, mean, gn_sq(x, m, mean), (double)m);
    }
}

void op_groupnorm_forward(float *out, float *save_mean, float *save_invstd,
                          const float *in, const float *gamma,
                          const float *beta, int n, int c, int hw,
                          int groups, float eps)
{
    /* in, out (n, c, hw); gamma, beta (c); save_* (n, groups) */
    norm_job j = {.out = out, .save_mean = save_mean, .save_invstd = save_invstd, .in = in,
                  .gamma = gamma, .beta = beta, .n = n, .c = c, .hw = hw, .eps = eps,
                  .n_groups = groups};
    kernels_for((size_t)n * groups, norm_grain((size_t)(c / groups) * hw), gn_fwd, &j);
}

int op_groupnorm_forward_parts(float *out, float *save_mean, float *save_invstd, const float *in,
                               const float *gamma, const float *beta, int n, int c, int hw,
                               int groups, float eps, const op_reduce *r, double *red)
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
                 (int)(k % groups), c, hw, groups, eps, red[k], sq[k], mt);
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
