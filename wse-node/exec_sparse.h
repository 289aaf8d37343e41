/* The executor's dense layers off the GEMMs (exec_sparse.c): internal to
 * the executor, which calls these from its dense layers' passes. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "exec.h"

/* A dense layer's forward pass on the sparse kernels where they pay: true
 * when it computed out (n, units) = in W^T + bias; false: the caller runs
 * the GEMMs (the choice noted either way). */
bool exec__sparse_forward(exec *e, int li, float *out, const float *in, int64_t step,
                          bool training);
/* Its backward pass likewise: dw (zero at the pruned positions on the
 * sparse weight path), db (or NULL) and din (or NULL) written whole. */
bool exec__sparse_backward(exec *e, int li, float *din, float *dw, float *db, const float *dout,
                           const float *in, int64_t step);
/* A pass of a layer streamed in parts: on the GEMMs, noted so. */
void exec__sparse_part(exec *e, int li);
void exec__sparse_deinit(exec *e);
