/* Weight initializers: the Model Zoo's (create_initializer, with PyTorch's
 * torch.nn.init formulas) and the planner's defaults, as a pure function of
 * (seed, stream, element) so that sharding never changes a weight; their
 * fans and gains; their copy in the plan. model.h declares
 * model_init_parse. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "plan.pb-c.h"

/* Whether the initializer computes from fans (xavier_, kaiming_,
 * variance_scaling, lecun_): PyTorch computes them only for tensors of 2 or
 * more dimensions. */
bool model_init_needs_fans(const model_init *in);

/* PyTorch's fans of a tensor of ndim >= 2 dims (outermost first): fan_in =
 * dims[1] * r, fan_out = dims[0] * r, r the product of dims[2..]. For a
 * transposed convolution's weight, stored (in, out, kh, kw), that is
 * out * kh * kw in and in * kh * kw out, as PyTorch has it. Returns 0, or
 * -EINVAL for ndim < 2. */
int model_init_fans(const int64_t *dims, int ndim, uint64_t *fan_in, uint64_t *fan_out);

/* torch.nn.init.calculate_gain(nonlinearity, param): 1 for "linear",
 * "conv1d".."conv3d", "conv_transpose1d".."3d" and "sigmoid", 5/3 for
 * "tanh", sqrt(2) for "relu", sqrt(2 / (1 + slope^2)) for "leaky_relu"
 * (slope: param, or 0.01 when has_param is false), 3/4 for "selu". Returns
 * 0, or -EINVAL for another name. */
int model_init_gain(const char *nonlinearity, double param, bool has_param, double *gain);

/* Writes the values of elements [lo, hi) of a tensor initialised by `in`,
 * with the fans given (model_init_fans; ignored by those that use none),
 * to out[0 .. hi - lo): each a pure function of (seed, stream, element),
 * so any split of the range gives the bits of the whole. Besides the Model
 * Zoo's names, "he_normal" (sqrt(2 / fan_in) times a normal) is the
 * planner's default for weights that feed a rectifier; glorot_ names are
 * xavier_'s. `in` must be one model_init_parse or model_init_from_plan
 * accepted. Truncated normals come from the inverse of the normal CDF of a
 * uniform draw (the Model Zoo's method), in libm double precision. */
void model_init_fill(const model_init *in, uint64_t fan_in, uint64_t fan_out, uint64_t seed,
                     uint64_t stream, uint64_t lo, uint64_t hi, float *out);

/* The initializer of a plan's tensor: its PlanInit when present, else its
 * init name ("he_normal", "xavier_uniform", "zeros", "ones") with default
 * parameters. Returns 0, or -EINVAL for an unknown name, mode,
 * distribution or nonlinearity or a parameter out of range (peer input). */
int model_init_from_plan(const Appliance__PlanTensor *pt, model_init *out);

/* Fills pi (initialised here) with in's name and parameters; its strings
 * point into in, which must outlive pi's use. */
void model_init_to_plan(const model_init *in, Appliance__PlanInit *pi);
