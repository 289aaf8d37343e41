/* Dense (fully connected) layers whose weights are mostly zero, computed
 * on the kept weights alone, and dense layers whose input is mostly zero
 * (after a relu), computed on its nonzero entries alone. fp32, row-major,
 * the shapes and conventions of op_dense.h. */
#ifndef OP_SPARSE_DENSE_H
#define OP_SPARSE_DENSE_H

#include <stddef.h>
#include <stdint.h>

/* A pruned weight (out_f, in_f): its kept positions, fixed when it is
 * made, and their values, which change at every update.
 *
 * The canonical order of the kept weights is row-major (row by row, each
 * row's columns ascending: CSR): the `kept` arrays below (values in, the
 * weight gradient out) are nnz floats in that order. Inside, the kernels
 * keep two more copies of the values: the rows cut into panels of pw
 * columns (CSR per panel, 16-bit columns inside it, so that a panel's rows
 * of the other operand stay in the caches while every row of the weight
 * passes over them; pw from 64 to 256, narrower the denser the weight),
 * and the same for the transpose (panels of pw rows, for the data
 * gradient). */

typedef struct sparse_w {
    int out_f, in_f;   /* the dense shape (rows, columns) */
    size_t nnz;        /* kept weights, < 2^32 */
    uint32_t *row_ptr; /* out_f + 1: row r's kept weights are [row_ptr[r], row_ptr[r + 1]) */
    uint32_t *col;     /* nnz: their columns, ascending within a row */
    /* the weight by column panels: npan panels, panel p's row r is
     * entries [ptr[p * (out_f + 1) + r], ptr[p * (out_f + 1) + r + 1]) */
    int npan;
    int pw;            /* columns a panel (rows a panel of the transpose) */
    uint32_t *ptr;     /* npan * (out_f + 1) */
    uint16_t *idx;     /* nnz: column within the panel */
    float *val;        /* nnz: values in panel order */
    uint32_t *ord;     /* nnz: canonical index of each panel entry */
    /* its transpose (in_f, out_f) by panels of rows of the weight */
    int tnpan;
    uint32_t *tptr;    /* tnpan * (in_f + 1) */
    uint16_t *tidx;    /* nnz: row of the weight within the panel */
    float *tval;       /* nnz */
    uint32_t *tord;    /* nnz: the index in val of each entry (tval is val permuted) */
    uint32_t *tcol_ptr; /* in_f + 1: column c holds tcol_ptr[c + 1] - tcol_ptr[c] kept weights */
} sparse_w;

/* Makes the compressed form of weight (out_f, in_f): the kept positions
 * are where mask (out_f * in_f bytes) is nonzero, or, with mask NULL,
 * where weight is not zero (+0 and -0 are pruned); their values are
 * weight's there (with a mask, weight may be NULL: zeros until
 * sparse_w_set_kept). Returns NULL (out of memory, a shape below 1 or more
 * than 2^32 - 1 kept weights) with the reason in err. Free with
 * sparse_w_free (NULL is fine). Allocates: call it where the mask is made
 * or changes, not in the step loop. */
sparse_w *sparse_w_new(const float *weight, const uint8_t *mask, int out_f, int in_f, char *err,
                       size_t err_len);
/* The same with the kept positions given as bits (bit i%8 of byte i/8 of
 * the row-major weight: 1 kept) and the values zeros until
 * sparse_w_set_kept: a compressed stream's index, with no byte an
 * element made. */
sparse_w *sparse_w_new_bits(const uint8_t *bits, int out_f, int in_f, char *err, size_t err_len);
void sparse_w_free(sparse_w *sw);

/* Sets the kept weights' values from kept (nnz floats, canonical order:
 * what a compressed stream carries) or gathered from a dense weight
 * (out_f, in_f). Over the operators' threads. */
void sparse_w_set_kept(sparse_w *sw, const float *kept);
void sparse_w_set_dense(sparse_w *sw, const float *weight);
/* kept (canonical order) written into dense (out_f, in_f), zeros at the
 * pruned positions; and the gather of dense's kept positions into kept. */
void sparse_w_scatter(const sparse_w *sw, const float *kept, float *dense);
void sparse_w_gather(const sparse_w *sw, const float *dense, float *kept);

/* Bytes of workspace op_sparse_dense_forward / _backward need for a batch
 * of n (64-byte alignment included): the activations transposed. */
size_t op_sparse_dense_workspace(const sparse_w *sw, int n);

/* out (n, out_f) = in (n, in_f) * W^T + bias (out_f, or NULL), W the
 * kept weights of sw. Returns 0, or -EINVAL (n < 0) / -ENOSPC (ws
 * smaller than op_sparse_dense_workspace) without computing. */
int op_sparse_dense_forward(float *out, const float *in, const sparse_w *sw, const float *bias,
                            int n, void *ws, size_t ws_bytes);

/* dout (n, out_f), in (n, in_f). Overwrites dkept (nnz, canonical order:
 * the weight gradient at the kept positions only), dbias (out_f, or NULL)
 * and din (n, in_f, or NULL: dout * W). Returns 0, -EINVAL or -ENOSPC. */
int op_sparse_dense_backward(float *din, float *dkept, float *dbias, const float *dout,
                             const float *in, const sparse_w *sw, int n, void *ws,
                             size_t ws_bytes);

/* Plain loops in double over the canonical CSR: the reference the tests
 * hold the vector paths to. */
void op_sparse_dense_forward_ref(float *out, const float *in, const sparse_w *sw,
                                 const float *bias, int n);
void op_sparse_dense_backward_ref(float *din, float *dkept, float *dbias, const float *dout,
                                  const float *in, const sparse_w *sw, int n);

/* The cost model: the predicted time of the sparse forward + backward
 * pass over that of the dense one (op_dense_forward + _backward) for a
 * layer of nnz kept weights of out_f x in_f on a batch of n, on the
 * instruction set the kernels use here (kernels_isa_level). Below 1 the
 * sparse path is expected to be faster. Its constants were measured on
 * an AMD EPYC (Zen 5) on 2 threads: op_sparse_dense.c and docs/sparsity.md
 * say how. */
double op_sparse_dense_cost_ratio(size_t nnz, int n, int in_f, int out_f);
/* 1 when the sparse path is expected to be faster (the ratio below 1). */
int op_sparse_dense_pays(const sparse_w *sw, int n);

/* A dense layer with a pruned weight on whichever path pays
 * (op_sparse_dense_pays): weight (out_f, in_f) holds the kept values and
 * zeros, sw the same kept values. The forward pass as op_dense_forward;
 * the backward pass as op_dense_backward, with dweight (out_f, in_f) the
 * gradient at the kept positions and zeros at the pruned ones. ws:
 * op_sparse_dense_workspace bytes (unused on the dense path). Returns 1
 * when the sparse path ran, 0 the dense one, or a negative error as
 * op_sparse_dense_forward. */
int op_masked_dense_forward(float *out, const float *in, const float *weight, const sparse_w *sw,
                            const float *bias, int n, void *ws, size_t ws_bytes);
int op_masked_dense_backward(float *din, float *dweight, float *dbias, const float *dout,
                             const float *in, const float *weight, const sparse_w *sw, int n,
                             void *ws, size_t ws_bytes);

/* Natural sparsity: the forward pass of a dense layer whose input in (n,
 * in_f) is mostly zero, computed over its nonzero entries only: out (n,
 * out_f) = in * W^T + bias, with wt the weight transposed, (in_f, out_f)
 * (sparse_w_transpose makes it). ws: op_dense_sparse_in_workspace bytes,
 * which hold in's nonzero entries compressed. Returns 0, -EINVAL or
 * -ENOSPC. */
size_t op_dense_sparse_in_workspace(int n, int in_f);
int op_dense_sparse_in_forward(float *out, const float *in, const float *wt, const float *bias,
                               int n, int in_f, int out_f, void *ws, size_t ws_bytes);
/* Its backward pass: dweight (out_f, in_f) = dout^T in over in's nonzero
 * entries only; dbias (or NULL) and din (or NULL: dout * weight, which
 * does not read in) as op_dense_backward. ws:
 * op_dense_sparse_in_backward_workspace bytes (in transposed and
 * compressed, and a tile of 64 rows of dweight a thread, for the thread
 * count in force). Returns 0, -EINVAL or -ENOSPC. */
size_t op_dense_sparse_in_backward_workspace(int n, int in_f);
int op_dense_sparse_in_backward(float *din, float *dweight, float *dbias, const float *dout,
                                const float *in, const float *weight, int n, int in_f, int out_f,
                                void *ws, size_t ws_bytes);
/* wt (cols, rows) = w (rows, cols) transposed, over the threads. */
void sparse_w_transpose(float *wt, const float *w, int rows, int cols);
/* The fraction of in's n * in_f values that are not zero, over the
 * threads; and whether op_dense_sparse_in_forward is expected to beat
 * op_dense_forward at that density (its measured crossover, the
 * transposed weight kept by the caller). */
double op_dense_in_density(const float *in, size_t count);
int op_dense_sparse_in_pays(double density, int n, int in_f, int out_f);
/* The same for op_dense_sparse_in_backward against op_dense_backward. */
int op_dense_sparse_in_backward_pays(double density, int n, int in_f, int out_f);

#endif
