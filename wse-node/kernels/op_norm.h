/* Batch normalisation and group normalisation over NCHW, fp32, with sums
 * in double. gamma and beta may be NULL (no affine transform: 1 and 0),
 * and so may the matching gradients. */
#ifndef OP_NORM_H
#define OP_NORM_H

#include <stdbool.h>

#include "op_reduce.h"

/* The scale a and shift b that normalise a channel (y = x * a + b) given
 * its statistics and affine parameters: what the forward passes compute
 * with, so that op_norm_affine with the saved a and b makes the very same
 * output again. */
static inline void op_norm_coeffs(float invstd, float mean, float gamma, float beta, float *a,
                                  float *b)
{
    *a = invstd * gamma;
    *b = beta - mean * *a;
}

/* y = x * a + b per channel: in and out (n, c, hw); a and b are (c), or
 * (n, c) when per_sample. The output of a norm made again from its saved
 * scale and shift. out may alias in.
 *
 * relu, here and in the batch norm's forward passes: the output is
 * max(x * a + b, 0) instead (0 for a NaN, as op_relu_forward), a ReLU that
 * follows the norm applied in the same pass. */
void op_norm_affine(float *out, const float *in, const float *a, const float *b, int n, int c,
                    int hw, bool per_sample, bool relu);

/* The gradient of a ReLU fused into the norm before it, in place: dy (n,
 * c, hw) kept where the norm's output x * a + b (a and b as for
 * op_norm_affine) was positive, 0 elsewhere; the norm's backward pass then
 * takes dy as its output's gradient. */
void op_norm_relu_mask(float *dy, const float *in, const float *a, const float *b, int n, int c,
                       int hw, bool per_sample);

/* Training mode. in and out are (n, c, hw); gamma, beta, running_mean,
 * running_var, save_mean and save_invstd are (c). Normalises with the
 * batch statistics of this call (biased variance), writes them to
 * save_mean and save_invstd = 1/sqrt(var + eps) for the backward pass, and
 * updates running_x = (1 - momentum)*running_x + momentum*batch_x with
 * the unbiased variance var*m/(m - 1), m = n*hw (the biased one if m is
 * 1), as PyTorch does. running_mean/running_var may be NULL. Statistics are
 * those of the samples given: data-parallel replicas each normalise with
 * their own. out may alias in. */
void op_batchnorm_forward_train(float *out, float *save_mean,
                                float *save_invstd, float *running_mean,
                                float *running_var, const float *in,
                                const float *gamma, const float *beta, int n,
                                int c, int hw, float momentum, float eps, bool relu);

/* op_batchnorm_forward_train over one stripe of partitioned samples: the
 * statistics are those of every stripe, totalled by r (op_reduce.h; NULL:
 * this call's alone, as op_batchnorm_forward_train). red is room for
 * 2c + 1 doubles. Returns 0 or r's negative code. */
int op_batchnorm_forward_train_parts(float *out, float *save_mean, float *save_invstd,
                                     float *running_mean, float *running_var, const float *in,
                                     const float *gamma, const float *beta, int n, int c, int hw,
                                     float momentum, float eps, bool relu, const op_reduce *r,
                                     double *red);

/* Evaluation mode: normalises with running_mean and running_var (c).
 * in and out are (n, c, hw); out may alias in. */
void op_batchnorm_forward_eval(float *out, const float *in,
                               const float *gamma, const float *beta,
                               const float *running_mean,
                               const float *running_var, int n, int c,
                               int hw, float eps, bool relu);

/* Backward of the training mode. dout and in are (n, c, hw); save_mean and
 * save_invstd are what the forward pass wrote. Overwrites din (n, c, hw),
 * dgamma and dbeta (c); each may be NULL. din may be dout (each channel's
 * sums first, then its elements one by one), here and in the blocked and
 * striped variants.
 *
 * relu_a and relu_b (c), or NULL: the forward pass applied a ReLU (relu)
 * with this scale and shift (op_norm_coeffs), and dout is the gradient of
 * the ReLU's output. It is taken where x * relu_a + relu_b, the norm's
 * output before the ReLU, was positive and as 0 elsewhere, as
 * op_relu_backward would have passed it on: the same bits as the two
 * layers' backward passes one after the other, in one pass less. */
void op_batchnorm_backward(float *din, float *dgamma, float *dbeta,
                           const float *dout, const float *in,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, int n, int c, int hw,
                           const float *relu_a, const float *relu_b);

/* op_batchnorm_backward over one stripe: din with the sums of every
 * stripe (r); dgamma and dbeta this stripe's share of theirs. red is room
 * for 2c + 1 doubles. Returns 0 or r's negative code. */
int op_batchnorm_backward_parts(float *din, float *dgamma, float *dbeta, const float *dout,
                                const float *in, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int hw,
                                const float *relu_a, const float *relu_b, const op_reduce *r,
                                double *red);

/* The batch norm's passes with every tensor in one of oneDNN's blocked
 * layouts, blocks of blk channels: aBcd16b (n, c / 16, hw, 16) for blk 16,
 * aBcd8b for 8: in, out, dout and din as the blocked convolutions around
 * the norm write and read them (conv_blocked.c; op_conv2d_block_size),
 * with no reorder between. c is a multiple of blk. The arguments and the
 * bits are the plain passes' (the same sums in the same order, eight
 * channels of a block at a time, each channel whole on one thread). */
void op_batchnorm_forward_train_blk(float *out, float *save_mean, float *save_invstd,
                                    float *running_mean, float *running_var, const float *in,
                                    const float *gamma, const float *beta, int n, int c, int hw,
                                    float momentum, float eps, bool relu, int blk);
void op_batchnorm_forward_eval_blk(float *out, const float *in, const float *gamma,
                                   const float *beta, const float *running_mean,
                                   const float *running_var, int n, int c, int hw, float eps,
                                   bool relu, int blk);
/* op_norm_affine of a batch norm (a and b (c)) */
void op_norm_affine_blk(float *out, const float *in, const float *a, const float *b, int n, int c,
                        int hw, bool relu, int blk);
void op_batchnorm_backward_blk(float *din, float *dgamma, float *dbeta, const float *dout,
                               const float *in, const float *gamma, const float *save_mean,
                               const float *save_invstd, int n, int c, int hw,
                               const float *relu_a, const float *relu_b, int blk);

/* in and out are (n, c, hw), c divisible by groups; gamma and beta are (c);
 * save_mean and save_invstd are (n, groups). Normalises every (sample,
 * group) of c/groups channels with its own mean and biased variance; relu
 * as for op_norm_affine. out may alias in. */
void op_groupnorm_forward(float *out, float *save_mean, float *save_invstd,
                          const float *in, const float *gamma,
                          const float *beta, int n, int c, int hw,
                          int groups, float eps, bool relu);

/* op_groupnorm_forward over one stripe: every (sample, group) normalised
 * with the statistics of all its stripes (r). red is room for
 * 2 n groups + 1 doubles. Returns 0 or r's negative code. */
int op_groupnorm_forward_parts(float *out, float *save_mean, float *save_invstd, const float *in,
                               const float *gamma, const float *beta, int n, int c, int hw,
                               int groups, float eps, bool relu, const op_reduce *r,
                               double *red);

/* dout and in are (n, c, hw). Overwrites din (n, c, hw), dgamma and dbeta
 * (c); each may be NULL. din may be dout (in place: each element of din
 * is made from the same element of dout, after the group's sums), as in
 * the batch norm's backward passes: the memory plan puts a norm's input's
 * gradient over its output's. */
void op_groupnorm_backward(float *din, float *dgamma, float *dbeta,
                           const float *dout, const float *in,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, int n, int c, int hw,
                           int groups);

/* op_groupnorm_backward over one stripe: din (may be dout, as there) with
 * the sums of all the stripes (r); dgamma and dbeta this stripe's share. red is room for
 * 2 n groups + 1 doubles. Returns 0 or r's negative code. */
int op_groupnorm_backward_parts(float *din, float *dgamma, float *dbeta, const float *dout,
                                const float *in, const float *gamma, const float *save_mean,
                                const float *save_invstd, int n, int c, int hw, int groups,
                                const op_reduce *r, double *red);

#endif
