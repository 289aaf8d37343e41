/* Dense layers on pruned weights (the kept weights in column panels,
 * spmm.c's loops over the activations transposed) and on mostly-zero
 * inputs; the cost model that picks them or the dense GEMMs. */
#include "op_sparse_dense.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kernels_internal.h"
#include "op_dense.h"

static int sparse_isa_forced = -1;
static int sparse_panel_forced;

void kern__sparse_set_isa(int isa)
{
    sparse_isa_forced = isa;
}

int kern__sparse_isa(void)
{
    int lvl = (int)kernels_isa_level();
    return sparse_isa_forced >= 0 && sparse_isa_forced < lvl ? sparse_isa_forced : lvl;
}

void kern__sparse_set_panel(int pw)
{
    sparse_panel_forced = pw >= 16 && pw <= KERN__PANEL && !(pw & (pw - 1)) ? pw : 0;
}

int kern__panel_width(double density)
{
    if (sparse_panel_forced)
        return sparse_panel_forced;
    /* 4096 x 4096 at batch 256 on AVX-512 (Intel Xeon, family 6 model
     * 207): at 25% kept, 64 wide took 80 ms a step, 128 87 and 256 95; at
     * 10% kept 256 was best. A panel's rows for 128 columns of the dense
     * operand: 32 KiB at 64 wide (L1), 128 KiB at 256 (L2). */
    int pw = 64;
    while (pw < KERN__PANEL && density * pw < 16.0)
        pw *= 2;
    return pw;
}

void sparse_w_free(sparse_w *sw)
{
    if (!sw)
        return;
    free(sw->row_ptr);
    free(sw->col);
    free(sw->ptr);
    free(sw->idx);
    free(sw->val);
    free(sw->ord);
    free(sw->tptr);
    free(sw->tidx);
    free(sw->tval);
    free(sw->tord);
    free(sw->tcol_ptr);
    free(sw);
}

/* Panel form of a CSR (rows of m, columns of k, row-major order given by
 * rp and ci): ptr (npan * (m + 1)), idx, ord (canonical index of each
 * entry) */
static void build_panels(int m, int npan, int pw, const uint32_t *rp, const uint32_t *ci,
                         uint32_t *ptr, uint16_t *idx, uint32_t *ord)
{
    /* counts per (panel, row), then offsets */
    memset(ptr, 0, sizeof(uint32_t) * (size_t)npan * (m + 1));
    for (int r = 0; r < m; r++)
        for (uint32_t e = rp[r]; e < rp[r + 1]; e++)
            ptr[(size_t)(ci[e] / (uint32_t)pw) * (m + 1) + r + 1]++;
    uint32_t run = 0;
    for (int p = 0; p < npan; p++) {
        uint32_t *pp = ptr + (size_t)p * (m + 1);
        pp[0] = run;
        for (int r = 0; r < m; r++) {
            run += pp[r + 1];
            pp[r + 1] = run;
        }
    }
    /* fill: each row's entries ascend, so each (panel, row) run fills in
     * order; next[] walks with it */
    for (int r = 0; r < m; r++) {
        for (uint32_t e = rp[r]; e < rp[r + 1]; e++) {
            uint32_t p = ci[e] / (uint32_t)pw;
            uint32_t *slot = ptr + (size_t)p * (m + 1) + r; /* moves up as it fills */
            uint32_t at = (*slot)++;
            idx[at] = (uint16_t)(ci[e] % (uint32_t)pw);
            ord[at] = e;
        }
    }
    /* the starts moved to the ends of their runs: shift back */
    for (int p = npan - 1; p >= 0; p--) {
        uint32_t *pp = ptr + (size_t)p * (m + 1);
        for (int r = m; r > 0; r--)
            pp[r] = pp[r - 1];
        pp[0] = p == 0 ? 0 : ptr[(size_t)(p - 1) * (m + 1) + m];
    }
}

/* Whether element i is kept: its mask byte or bit, or its weight not zero */
static inline bool sw__kept(const float *weight, const uint8_t *mask, const uint8_t *bits,
                            size_t i)
{
    if (bits)
        return bits[i / 8] >> (i % 8) & 1;
    return mask ? mask[i] != 0 : weight[i] != 0.0f;
}

static sparse_w *sw__new(const float *weight, const uint8_t *mask, const uint8_t *bits, int out_f,
                         int in_f, char *err, size_t err_len);

sparse_w *sparse_w_new(const float *weight, const uint8_t *mask, int out_f, int in_f, char *err,
                       size_t err_len)
{
    return sw__new(weight, mask, NULL, out_f, in_f, err, err_len);
}

sparse_w *sparse_w_new_bits(const uint8_t *bits, int out_f, int in_f, char *err, size_t err_len)
{
    if (!bits) {
        snprintf(err, err_len, "sparse weight: no bits");
        return NULL;
    }
    return sw__new(NULL, NULL, bits, out_f, in_f, err, err_len);
}

static sparse_w *sw__new(const float *weight, const uint8_t *mask, const uint8_t *bits, int out_f,
                         int in_f, char *err, size_t err_len)
{
    if (out_f < 1 || in_f < 1) {
        snprintf(err, err_len, "sparse weight: shape %d x %d (each side must be 1 or more)",
                 out_f, in_f);
        return NULL;
    }
    size_t total = (size_t)out_f * in_f, nnz = 0;
    if (!bits && !mask && !weight) {
        snprintf(err, err_len, "sparse weight: neither a weight nor a mask");
        return NULL;
    }
    for (size_t i = 0; i < total; i++)
        nnz += sw__kept(weight, mask, bits, i);
    if (nnz >= UINT32_MAX) {
        snprintf(err, err_len, "sparse weight: %zu kept weights (at most %u)", nnz,
                 UINT32_MAX - 1);
        return NULL;
    }
    sparse_w *sw = calloc(1, sizeof(*sw));
    if (!sw)
        goto oom;
    size_t n1 = nnz ? nnz : 1;
    sw->out_f = out_f;
    sw->in_f = in_f;
    sw->nnz = nnz;
    sw->pw = kern__panel_width((double)nnz / (double)total);
    sw->npan = (in_f + sw->pw - 1) / sw->pw;
    sw->tnpan = (out_f + sw->pw - 1) / sw->pw;
    sw->row_ptr = malloc(sizeof(uint32_t) * (out_f + 1));
    sw->col = malloc(sizeof(uint32_t) * n1);
    sw->ptr = malloc(sizeof(uint32_t) * (size_t)sw->npan * (out_f + 1));
    sw->idx = malloc(sizeof(uint16_t) * n1);
    sw->val = malloc(sizeof(float) * n1);
    sw->ord = malloc(sizeof(uint32_t) * n1);
    sw->tptr = malloc(sizeof(uint32_t) * (size_t)sw->tnpan * (in_f + 1));
    sw->tidx = malloc(sizeof(uint16_t) * n1);
    sw->tval = malloc(sizeof(float) * n1);
    sw->tord = malloc(sizeof(uint32_t) * n1);
    sw->tcol_ptr = malloc(sizeof(uint32_t) * (in_f + 1));
    uint32_t *trp = malloc(sizeof(uint32_t) * (in_f + 1)), *tci = malloc(sizeof(uint32_t) * n1);
    uint32_t *tce = malloc(sizeof(uint32_t) * n1), *ford = malloc(sizeof(uint32_t) * n1);
    if (!sw->row_ptr || !sw->col || !sw->ptr || !sw->idx || !sw->val || !sw->ord || !sw->tptr ||
        !sw->tidx || !sw->tval || !sw->tord || !sw->tcol_ptr || !trp || !tci || !tce || !ford) {
        free(trp);
        free(tci);
        free(tce);
        free(ford);
        goto oom;
    }
    /* the canonical CSR */
    uint32_t e = 0;
    for (int r = 0; r < out_f; r++) {
        sw->row_ptr[r] = e;
        for (int c = 0; c < in_f; c++) {
            size_t i = (size_t)r * in_f + c;
            if (sw__kept(weight, mask, bits, i))
                sw->col[e++] = (uint32_t)c;
        }
    }
    sw->row_ptr[out_f] = e;
    build_panels(out_f, sw->npan, sw->pw, sw->row_ptr, sw->col, sw->ptr, sw->idx, sw->ord);
    /* the transpose's CSR (rows = columns of the weight), tce[j] the
     * canonical index of its entry j */
    memset(trp, 0, sizeof(uint32_t) * (in_f + 1));
    for (size_t j = 0; j < nnz; j++)
        trp[sw->col[j] + 1]++;
    for (int c = 0; c < in_f; c++)
        trp[c + 1] += trp[c];
    memcpy(sw->tcol_ptr, trp, sizeof(uint32_t) * (in_f + 1));
    for (int r = 0; r < out_f; r++)
        for (uint32_t j = sw->row_ptr[r]; j < sw->row_ptr[r + 1]; j++) {
            uint32_t at = trp[sw->col[j]]++;
            tci[at] = (uint32_t)r;
            tce[at] = j;
        }
    build_panels(in_f, sw->tnpan, sw->pw, sw->tcol_ptr, tci, sw->tptr, sw->tidx, ford);
    /* tord: each transposed entry's place in val (the canonical index
     * through the inverse of ord), so that sparse_w_set_kept fills tval
     * from val, within a panel's tile of it, not from all of kept */
    for (size_t k = 0; k < nnz; k++)
        tci[sw->ord[k]] = (uint32_t)k; /* (tci's work is done: ord's inverse) */
    for (size_t j = 0; j < nnz; j++)
        sw->tord[j] = tci[tce[ford[j]]];
    free(trp);
    free(tci);
    free(tce);
    free(ford);
    if (!weight) { /* (positions alone: values zeros until set) */
        memset(sw->val, 0, sizeof(float) * n1);
        memset(sw->tval, 0, sizeof(float) * n1);
    } else if (nnz) {
        /* values: the weight's at the kept positions */
        float *kept = malloc(sizeof(float) * nnz);
        if (!kept)
            goto oom;
        sparse_w_gather(sw, weight, kept);
        sparse_w_set_kept(sw, kept);
        free(kept);
    }
    return sw;
oom:
    sparse_w_free(sw);
    snprintf(err, err_len, "sparse weight %d x %d: out of memory", out_f, in_f);
    return NULL;
}

typedef struct kept_job {
    sparse_w *sw;
    const float *kept;
    float *dense;
    const float *cdense;
    float *okept;
} kept_job;

/* Rows [lo, hi) of val from kept: each row's kept values are its runs in
 * the column panels one after another (columns ascend), each run copied
 * to its place in its panel. Read in order, written to one place a panel
 * that moves on row by row: not a gather across all of kept for each
 * panel, which missed the caches at every run. */
static void set_kept_range(void *ctx, size_t lo, size_t hi)
{
    const kept_job *j = ctx;
    const sparse_w *sw = j->sw;
    size_t stride = (size_t)sw->out_f + 1;
    for (size_t r = lo; r < hi; r++) {
        const float *src = j->kept + sw->row_ptr[r];
        for (int p = 0; p < sw->npan; p++) {
            const uint32_t *pp = sw->ptr + (size_t)p * stride + r;
            uint32_t len = pp[1] - pp[0];
            memcpy(sw->val + pp[0], src, sizeof(float) * len);
            src += len;
        }
    }
}

static void set_tval_range(void *ctx, size_t lo, size_t hi)
{
    const kept_job *j = ctx;
    kern__permute(kern__sparse_isa(), j->sw->tval, j->sw->val, j->sw->tord, lo, hi);
}

void sparse_w_set_kept(sparse_w *sw, const float *kept)
{
    kept_job j = {.sw = sw, .kept = kept};
    kernels_for((size_t)sw->out_f, 64, set_kept_range, &j);
    kernels_for(sw->nnz, 1 << 16, set_tval_range, &j); /* (from val, a tile at a time) */
}

static void gather_rows(void *ctx, size_t lo, size_t hi)
{
    const kept_job *j = ctx;
    const sparse_w *sw = j->sw;
    for (size_t r = lo; r < hi; r++)
        for (uint32_t e = sw->row_ptr[r]; e < sw->row_ptr[r + 1]; e++)
            j->okept[e] = j->cdense[r * sw->in_f + sw->col[e]];
}

void sparse_w_gather(const sparse_w *sw, const float *dense, float *kept)
{
    kept_job j = {.sw = (sparse_w *)sw, .cdense = dense, .okept = kept};
    kernels_for((size_t)sw->out_f, 64, gather_rows, &j);
}

/* Rows [lo, hi) of each panel form read from the dense weight: the
 * weight's rows in the panels of its columns, then its columns (the
 * transpose's rows) in the panels of its rows */
static void set_dense_rows(void *ctx, size_t lo, size_t hi)
{
    const kept_job *j = ctx;
    sparse_w *sw = j->sw;
    const float *w = j->cdense;
    for (int p = 0; p < sw->npan; p++) {
        const uint32_t *pp = sw->ptr + (size_t)p * (sw->out_f + 1);
        for (size_t r = lo; r < hi && r < (size_t)sw->out_f; r++)
            for (uint32_t e = pp[r]; e < pp[r + 1]; e++)
                sw->val[e] = w[r * sw->in_f + (size_t)p * sw->pw + sw->idx[e]];
    }
    for (int p = 0; p < sw->tnpan; p++) {
        const uint32_t *pp = sw->tptr + (size_t)p * (sw->in_f + 1);
        for (size_t c = lo; c < hi && c < (size_t)sw->in_f; c++)
            for (uint32_t e = pp[c]; e < pp[c + 1]; e++)
                sw->tval[e] = w[((size_t)p * sw->pw + sw->tidx[e]) * sw->in_f + c];
    }
}

void sparse_w_set_dense(sparse_w *sw, const float *weight)
{
    kept_job j = {.sw = sw, .cdense = weight};
    size_t rows = (size_t)(sw->out_f > sw->in_f ? sw->out_f : sw->in_f);
    kernels_for(rows, 64, set_dense_rows, &j);
}

static void scatter_rows(void *ctx, size_t lo, size_t hi)
{
    const kept_job *j = ctx;
    const sparse_w *sw = j->sw;
    for (size_t r = lo; r < hi; r++) {
        float *row = j->dense + r * sw->in_f;
        memset(row, 0, sizeof(float) * sw->in_f);
        for (uint32_t e = sw->row_ptr[r]; e < sw->row_ptr[r + 1]; e++)
            row[sw->col[e]] = j->kept[e];
    }
}

void sparse_w_scatter(const sparse_w *sw, const float *kept, float *dense)
{
    kept_job j = {.sw = (sparse_w *)sw, .kept = kept, .dense = dense};
    kernels_for((size_t)sw->out_f, 64, scatter_rows, &j);
}

/* ---- the operators ---- */

static int pad16(int n)
{
    return (n + 15) / 16 * 16;
}

size_t op_sparse_dense_workspace(const sparse_w *sw, int n)
{
    /* inT (in_f, np), yT or doutT (out_f, np) and dinT (in_f, np) */
    size_t np = (size_t)pad16(n > 0 ? n : 0);
    return sizeof(float) * (np * (2 * (size_t)sw->in_f + sw->out_f) + 16) + 64;
}

/* A parallel job of the sparse layer */
typedef struct sd_job {
    const sparse_w *sw;
    int isa;
    int n, np;             /* batch, padded to 16 (the transposes' rows) */
    const float *src;      /* transposes: source (rows of cols) */
    float *dst;            /* and destination */
    int rows, cols, lds;
    const float *b;        /* spmm: the dense operand */
    const float *init;     /* spmm: bias, or NULL */
    float *c;              /* spmm: the product */
    const kern__panels *a; /* spmm / sddmm: the sparse operand */
    int next;              /* the next block of rows to take (atomic) */
    const float *l, *r;    /* sddmm */
    float *v;
} sd_job;

static void transpose_task(void *ctx, int tid, int nt)
{
    const sd_job *j = ctx;
    int lo = (int)((int64_t)j->cols * tid / nt), hi = (int)((int64_t)j->cols * (tid + 1) / nt);
    kern__transpose_rows(kern__sparse_isa(), j->dst, j->np, j->src, j->lds, j->rows, j->np, lo, hi);
}

/* dst (cols, np) = src (rows of cols, lds apart)^T, zero-padded to np */
static void transpose_into(float *dst, int np, const float *src, int lds, int rows, int cols)
{
    sd_job j = {.dst = dst, .np = np, .src = src, .lds = lds, .rows = rows, .cols = cols};
    double work = (double)rows * cols;
    kern__parallel(transpose_task, &j, work < 65536 ? 1 : kernels_threads());
}

/* out (rows, cols) = src (cols, np)^T, the padding dropped */
static void untranspose_task(void *ctx, int tid, int nt)
{
    const sd_job *j = ctx;
    int lo = (int)((int64_t)j->rows * tid / nt), hi = (int)((int64_t)j->rows * (tid + 1) / nt);
    /* dst rows [lo, hi) = columns [lo, hi) of src (cols rows of np) */
    kern__transpose_rows(kern__sparse_isa(), j->dst, j->cols, j->src, j->np, j->cols, j->cols, lo, hi);
}

static void untranspose(float *dst, const float *src, int np, int rows, int cols)
{
    sd_job j = {.dst = dst, .src = src, .np = np, .rows = rows, .cols = cols};
    double work = (double)rows * cols;
    kern__parallel(untranspose_task, &j, work < 65536 ? 1 : kernels_threads());
}

/* Rows go to the threads in blocks of SD_BLOCK taken in turn as each
 * thread comes for more, so that a thread the host delays leaves its
 * share to the other (on a shared host, a static half waited for a thread
 * off its core). A row is computed whole by one thread, in one order: the
 * results do not depend on which. */
#define SD_BLOCK 128

static int next_block(sd_job *j, int *lo, int *hi)
{
    int b = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
    if ((int64_t)b * SD_BLOCK >= j->a->m)
        return 0;
    *lo = b * SD_BLOCK;
    *hi = j->a->m - *lo < SD_BLOCK ? j->a->m : *lo + SD_BLOCK;
    return 1;
}

static void spmm_task(void *ctx, int tid, int nt)
{
    sd_job *j = ctx;
    int lo, hi;
    (void)tid, (void)nt;
    while (next_block(j, &lo, &hi))
        kern__spmm_rows(j->isa, j->a, j->b, j->np, j->n, j->init, 0, j->c, j->np, lo, hi);
}

static void sddmm_task(void *ctx, int tid, int nt)
{
    sd_job *j = ctx;
    int lo, hi;
    (void)tid, (void)nt;
    while (next_block(j, &lo, &hi))
        kern__sddmm_rows(j->isa, j->a, j->l, j->np, j->r, j->np, j->np, j->v, j->sw->ord, lo, hi);
}

static int threads_for(const sparse_w *sw, int n)
{
    /* below about a million multiply-adds, waking the pool costs more */
    return (double)sw->nnz * n < 1e6 ? 1 : kernels_threads();
}

int op_sparse_dense_forward(float *out, const float *in, const sparse_w *sw, const float *bias,
                            int n, void *ws, size_t ws_bytes)
{
    /* in (n, in_f), out (n, out_f) = in W^T + bias, W (out_f, in_f) sparse.
     * As outT (out_f, np) = W inT (in_f, np): each kept weight an axpy of
     * a row of inT into a row of outT. */
    if (n < 0)
        return -EINVAL;
    if (n == 0)
        return 0;
    size_t avail;
    float *base = kern__ws_aligned(ws, ws_bytes, &avail);
    if (!base || avail < sizeof(float) * (size_t)pad16(n) * ((size_t)sw->in_f + sw->out_f))
        return -ENOSPC;
    int np = pad16(n);
    float *inT = base, *yT = inT + (size_t)sw->in_f * np;
    transpose_into(inT, np, in, sw->in_f, n, sw->in_f);
    kern__panels a = {sw->out_f, sw->npan, sw->pw, sw->ptr, sw->idx, sw->val};
    sd_job j = {.sw = sw, .isa = kern__sparse_isa(), .n = np, .np = np, .b = inT, .init = bias,
                .c = yT, .a = &a};
    kern__parallel(spmm_task, &j, threads_for(sw, n));
    untranspose(out, yT, np, n, sw->out_f);
    return 0;
}

typedef struct bias_job {
    float *db;
    const float *dy;
    int n, out_f;
} bias_job;

static void bias_cols(void *ctx, size_t lo, size_t hi)
{
    const bias_job *b = ctx;
    memcpy(b->db + lo, b->dy + lo, sizeof(float) * (hi - lo));
    for (int i = 1; i < b->n; i++) {
        const float *row = b->dy + (size_t)i * b->out_f;
        for (size_t o = lo; o < hi; o++)
            b->db[o] += row[o];
    }
}

/* The backward pass's first region: in and dout transposed (each thread
 * its share of the columns of each) and the bias gradient's columns */
typedef struct prep_job {
    float *inT, *dyT, *dbias;
    const float *in, *dout;
    int n, np, in_f, out_f;
} prep_job;

static void prep_task(void *ctx, int tid, int nt)
{
    const prep_job *p = ctx;
    int lo = (int)((int64_t)p->in_f * tid / nt), hi = (int)((int64_t)p->in_f * (tid + 1) / nt);
    kern__transpose_rows(kern__sparse_isa(), p->inT, p->np, p->in, p->in_f, p->n, p->np, lo, hi);
    lo = (int)((int64_t)p->out_f * tid / nt), hi = (int)((int64_t)p->out_f * (tid + 1) / nt);
    kern__transpose_rows(kern__sparse_isa(), p->dyT, p->np, p->dout, p->out_f, p->n, p->np, lo, hi);
    if (p->dbias && lo < hi) {
        bias_job b = {p->dbias, p->dout, p->n, p->out_f};
        bias_cols(&b, (size_t)lo, (size_t)hi);
    }
}

int op_sparse_dense_backward(float *din, float *dkept, float *dbias, const float *dout,
                             const float *in, const sparse_w *sw, int n, void *ws,
                             size_t ws_bytes)
{
    /* dout (n, out_f), in (n, in_f); dW at the kept positions = dout^T in,
     * each a dot of a row of doutT (out_f, np) and one of inT (in_f, np);
     * din = dout W, as dinT (in_f, np) = W^T doutT with W^T's panels. */
    if (n < 0)
        return -EINVAL;
    if (n == 0) {
        memset(dkept, 0, sizeof(float) * sw->nnz);
        if (dbias)
            memset(dbias, 0, sizeof(float) * sw->out_f);
        return 0;
    }
    size_t avail;
    float *base = kern__ws_aligned(ws, ws_bytes, &avail);
    int np = pad16(n);
    size_t need = sizeof(float) * ((size_t)np * (2 * (size_t)sw->in_f + sw->out_f));
    if (!base || avail < need)
        return -ENOSPC;
    float *inT = base, *dyT = inT + (size_t)sw->in_f * np, *dinT = dyT + (size_t)sw->out_f * np;
    int isa = kern__sparse_isa(), nt = threads_for(sw, n);
    prep_job pj = {.inT = inT, .dyT = dyT, .dbias = dbias, .in = in, .dout = dout, .n = n,
                   .np = np, .in_f = sw->in_f, .out_f = sw->out_f};
    double work = (double)n * ((double)sw->in_f + sw->out_f);
    kern__parallel(prep_task, &pj, work < 65536 ? 1 : kernels_threads());
    /* the kept weights' gradient, straight into the canonical order */
    kern__panels a = {sw->out_f, sw->npan, sw->pw, sw->ptr, sw->idx, sw->val};
    sd_job j = {.sw = sw, .isa = isa, .n = np, .np = np, .a = &a,
                .l = dyT, .r = inT, .v = dkept};
    kern__parallel(sddmm_task, &j, nt);
    if (din) {
        kern__panels t = {sw->in_f, sw->tnpan, sw->pw, sw->tptr, sw->tidx, sw->tval};
        sd_job d = {.sw = sw, .isa = isa, .n = np, .np = np, .b = dyT, .init = NULL, .c = dinT,
                    .a = &t};
        kern__parallel(spmm_task, &d, nt);
        untranspose(din, dinT, np, n, sw->in_f);
    }
    return 0;
}

void op_sparse_dense_forward_ref(float *out, const float *in, const sparse_w *sw,
                                 const float *bias, int n)
{
    /* kept values in canonical order are read back through ord's inverse:
     * val[e] sits at canonical ord[e] */
    double *kv = malloc(sizeof(double) * (sw->nnz ? sw->nnz : 1));
    for (size_t e = 0; e < sw->nnz; e++)
        kv[sw->ord[e]] = sw->val[e];
    for (int i = 0; i < n; i++)
        for (int o = 0; o < sw->out_f; o++) {
            double acc = bias ? bias[o] : 0.0;
            for (uint32_t e = sw->row_ptr[o]; e < sw->row_ptr[o + 1]; e++)
                acc += kv[e] * in[(size_t)i * sw->in_f + sw->col[e]];
            out[(size_t)i * sw->out_f + o] = (float)acc;
        }
    free(kv);
}

void op_sparse_dense_backward_ref(float *din, float *dkept, float *dbias, const float *dout,
                                  const float *in, const sparse_w *sw, int n)
{
    double *kv = malloc(sizeof(double) * (sw->nnz ? sw->nnz : 1));
    double *dx = din ? calloc((size_t)sw->in_f, sizeof(double)) : NULL;
    for (size_t e = 0; e < sw->nnz; e++)
        kv[sw->ord[e]] = sw->val[e];
    for (int o = 0; o < sw->out_f; o++) {
        if (dbias) {
            double s = 0.0;
            for (int i = 0; i < n; i++)
                s += dout[(size_t)i * sw->out_f + o];
            dbias[o] = (float)s;
        }
        for (uint32_t e = sw->row_ptr[o]; e < sw->row_ptr[o + 1]; e++) {
            double s = 0.0;
            for (int i = 0; i < n; i++)
                s += (double)dout[(size_t)i * sw->out_f + o] * in[(size_t)i * sw->in_f + sw->col[e]];
            dkept[e] = (float)s;
        }
    }
    for (int i = 0; din && i < n; i++) {
        memset(dx, 0, sizeof(double) * sw->in_f);
        for (int o = 0; o < sw->out_f; o++) {
            double g = dout[(size_t)i * sw->out_f + o];
            for (uint32_t e = sw->row_ptr[o]; e < sw->row_ptr[o + 1]; e++)
                dx[sw->col[e]] += g * kv[e];
        }
        for (int k = 0; k < sw->in_f; k++)
            din[(size_t)i * sw->in_f + k] = (float)dx[k];
    }
    free(kv);
    free(dx);
}

/* ---- the cost model ---- */

/* The model counts both paths in units of the dense GEMMs' time for one
 * flop, so that the host's load (which slows both alike) cancels:
 * the dense pass costs 6 n in_f out_f (three GEMMs of 2 n in_f out_f
 * flops); the sparse pass SPARSE_PER_NZ per kept weight and sample
 * (its three products: the forward spmm, the data gradient's spmm and the
 * weight gradient's dot products) plus SPARSE_PER_ACT per activation
 * element a sample passes over, 3 (in_f + out_f) (the transposes of in
 * twice, of out, dout and din, the bias gradient's pass, and the threads'
 * waits at the ends of these regions), on AVX-512; AVX2 and the plain loops take
 * SPARSE_AVX2_FACTOR and SPARSE_PLAIN_FACTOR times as long per kept
 * weight. Fitted to bench/sparse_dense.c's 4096 x 4096 layer at batch
 * 256 on an AMD EPYC (Zen 5, 2 cores) on 2 threads (its run 4 in
 * docs/sparsity.md, the dense pass at 91 to 132 GFLOP/s): a straight line
 * through the sparse pass's time over the dense pass's at 50% and 90%
 * sparsity (1.066 and 0.404): slope 9.94, intercept 0.2385 of the dense
 * time over 3 n (in_f + out_f) = 6.3 M activation elements. The AVX2 and
 * plain factors from the same run of those paths at 90%. */
#define SPARSE_PER_NZ 9.94
#define SPARSE_PER_ACT 977.0
#define SPARSE_AVX2_FACTOR 1.37
#define SPARSE_PLAIN_FACTOR 5.05

double op_sparse_dense_cost_ratio(size_t nnz, int n, int in_f, int out_f)
{
    if (n <= 0 || in_f <= 0 || out_f <= 0)
        return 1.0;
    double dense = 6.0 * (double)n * in_f * out_f;
    int isa = kern__sparse_isa();
    double f = isa >= KERNELS_ISA_AVX512 ? 1.0
               : isa >= KERNELS_ISA_AVX2 ? SPARSE_AVX2_FACTOR
                                         : SPARSE_PLAIN_FACTOR;
    double np = pad16(n);
    double sparse = f * SPARSE_PER_NZ * (double)nnz * np +
                    SPARSE_PER_ACT * np * 3.0 * ((double)in_f + out_f);
    return sparse / dense;
}

int op_sparse_dense_pays(const sparse_w *sw, int n)
{
    return op_sparse_dense_cost_ratio(sw->nnz, n, sw->in_f, sw->out_f) < 1.0;
}

int op_masked_dense_forward(float *out, const float *in, const float *weight, const sparse_w *sw,
                            const float *bias, int n, void *ws, size_t ws_bytes)
{
    if (op_sparse_dense_pays(sw, n)) {
        int rc = op_sparse_dense_forward(out, in, sw, bias, n, ws, ws_bytes);
        return rc < 0 ? rc : 1;
    }
    op_dense_forward(out, in, weight, bias, n, sw->in_f, sw->out_f);
    return 0;
}

typedef struct mask_job {
    const sparse_w *sw;
    float *dw;
} mask_job;

/* dW's pruned positions set to zero, row by row */
static void mask_rows(void *ctx, size_t lo, size_t hi)
{
    const mask_job *m = ctx;
    const sparse_w *sw = m->sw;
    for (size_t r = lo; r < hi; r++) {
        float *row = m->dw + r * sw->in_f;
        uint32_t c = 0;
        for (uint32_t e = sw->row_ptr[r]; e < sw->row_ptr[r + 1]; e++) {
            for (; c < sw->col[e]; c++)
                row[c] = 0.0f;
            c = sw->col[e] + 1;
        }
        for (; c < (uint32_t)sw->in_f; c++)
            row[c] = 0.0f;
    }
}

int op_masked_dense_backward(float *din, float *dweight, float *dbias, const float *dout,
                             const float *in, const float *weight, const sparse_w *sw, int n,
                             void *ws, size_t ws_bytes)
{
    if (op_sparse_dense_pays(sw, n)) {
        /* the kept gradient into dweight's first nnz floats, then spread
         * into place from the last row back (each row moves right) */
        int rc = op_sparse_dense_backward(din, dweight, dbias, dout, in, sw, n, ws, ws_bytes);
        if (rc < 0)
            return rc;
        for (int r = sw->out_f - 1; r >= 0; r--) {
            float *row = dweight + (size_t)r * sw->in_f;
            for (uint32_t e = sw->row_ptr[r + 1]; e-- > sw->row_ptr[r];)
                row[sw->col[e]] = dweight[e];
        }
        mask_job m = {sw, dweight};
        kernels_for((size_t)sw->out_f, 64, mask_rows, &m);
        return 1;
    }
    op_dense_backward(din, dweight, dbias, dout, in, weight, n, sw->in_f, sw->out_f);
    mask_job m = {sw, dweight};
    kernels_for((size_t)sw->out_f, 64, mask_rows, &m);
    return 0;
}

/* ---- natural sparsity: a mostly-zero input ---- */

/* A dense matrix's nonzeros (rows of cols, ld apart) compressed into
 * column panels, in ws: its ptr, idx and val */
typedef struct xin_job {
    const float *in;
    int n, in_f, ld, npan; /* rows, columns, row stride, panels */
    uint32_t *ptr;         /* npan * (n + 1) */
    uint16_t *idx;
    float *val;
} xin_job;

static size_t compressed_bytes(int rows, int cols)
{
    int npan = (cols + KERN__PANEL - 1) / KERN__PANEL;
    size_t cells = (size_t)(rows > 0 ? rows : 0) * (cols > 0 ? cols : 0);
    return sizeof(uint32_t) * ((size_t)npan * (rows + 1) + 1) + cells * (sizeof(float) + 2) + 192;
}

/* counts of each (panel, row) of in's nonzeros, into ptr[p * (n + 1) + r + 1] */
static void xin_count(void *ctx, size_t lo, size_t hi)
{
    const xin_job *x = ctx;
    for (size_t r = lo; r < hi; r++) {
        const float *row = x->in + r * x->ld;
        for (int p = 0; p < x->npan; p++) {
            int c1 = (p + 1) * KERN__PANEL < x->in_f ? (p + 1) * KERN__PANEL : x->in_f;
            uint32_t k = 0;
            for (int c = p * KERN__PANEL; c < c1; c++)
                k += row[c] != 0.0f;
            x->ptr[(size_t)p * (x->n + 1) + r + 1] = k;
        }
    }
}

static void xin_fill(void *ctx, size_t lo, size_t hi)
{
    const xin_job *x = ctx;
    for (size_t r = lo; r < hi; r++) {
        const float *row = x->in + r * x->ld;
        for (int p = 0; p < x->npan; p++) {
            int c1 = (p + 1) * KERN__PANEL < x->in_f ? (p + 1) * KERN__PANEL : x->in_f;
            uint32_t at = x->ptr[(size_t)p * (x->n + 1) + r];
            for (int c = p * KERN__PANEL; c < c1; c++)
                if (row[c] != 0.0f) {
                    x->idx[at] = (uint16_t)(c - p * KERN__PANEL);
                    x->val[at++] = row[c];
                }
        }
    }
}

/* Compresses m (rows of cols, ld apart) into ws (compressed_bytes): *a
 * describes it; returns the end of what it used, 64-byte aligned */
static char *compress(kern__panels *a, const float *m, int rows, int cols, int ld, void *ws)
{
    int npan = (cols + KERN__PANEL - 1) / KERN__PANEL;
    uint32_t *ptr = (uint32_t *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    size_t np1 = (size_t)npan * (rows + 1);
    float *val = (float *)(((uintptr_t)(ptr + np1 + 1) + 63) & ~(uintptr_t)63);
    uint16_t *idx = (uint16_t *)(val + (size_t)rows * cols);
    xin_job x = {.in = m, .n = rows, .in_f = cols, .ld = ld, .npan = npan, .ptr = ptr,
                 .idx = idx, .val = val};
    kernels_for((size_t)rows, 16, xin_count, &x);
    uint32_t run = 0;
    for (int p = 0; p < npan; p++) {
        uint32_t *pp = ptr + (size_t)p * (rows + 1);
        pp[0] = run;
        for (int r = 0; r < rows; r++) {
            run += pp[r + 1];
            pp[r + 1] = run;
        }
    }
    kernels_for((size_t)rows, 16, xin_fill, &x);
    *a = (kern__panels){rows, npan, KERN__PANEL, ptr, idx, val};
    return (char *)(((uintptr_t)(idx + (size_t)rows * cols) + 63) & ~(uintptr_t)63);
}

size_t op_dense_sparse_in_workspace(int n, int in_f)
{
    return compressed_bytes(n, in_f);
}

typedef struct xin_mm {
    const kern__panels *a;
    const float *wt, *bias;
    float *out;
    int out_f, isa;
} xin_mm;

/* the output's columns split over the threads in blocks of 64, each
 * thread every sample row over its columns of wt */
static void xin_task(void *ctx, int tid, int nt)
{
    const xin_mm *m = ctx;
    int blocks = (m->out_f + 63) / 64;
    int lo = (int)((int64_t)blocks * tid / nt) * 64, hi = (int)((int64_t)blocks * (tid + 1) / nt) * 64;
    if (hi > m->out_f)
        hi = m->out_f;
    if (lo < hi)
        kern__spmm_rows(m->isa, m->a, m->wt + lo, m->out_f, hi - lo, m->bias ? m->bias + lo : NULL,
                        1, m->out + lo, m->out_f, 0, m->a->m);
}

int op_dense_sparse_in_forward(float *out, const float *in, const float *wt, const float *bias,
                               int n, int in_f, int out_f, void *ws, size_t ws_bytes)
{
    /* in (n, in_f) mostly zero, wt (in_f, out_f), out (n, out_f): each
     * nonzero of in an axpy of a row of wt into its row of out */
    if (n < 0 || in_f < 0 || out_f < 0)
        return -EINVAL;
    if (n == 0 || out_f == 0)
        return 0;
    if (!ws || ws_bytes < op_dense_sparse_in_workspace(n, in_f))
        return -ENOSPC;
    kern__panels a;
    compress(&a, in, n, in_f, in_f, ws);
    xin_mm m = {.a = &a, .wt = wt, .bias = bias, .out = out, .out_f = out_f,
                .isa = kern__sparse_isa()};
    int blocks = (out_f + 63) / 64;
    uint32_t nz = a.ptr[(size_t)a.npan * (n + 1) - 1];
    kern__parallel(xin_task, &m, (double)nz * out_f < 1e6 ? 1 : blocks);
    return 0;
}

/* The weight gradient over the input's nonzeros: tiles of 64 rows of dW
 * (64 outputs), each first as its transpose (in_f, 64) = inT_sparse (in_f,
 * n) dout[:, tile] in the thread's buffer, then written into dW's rows */
typedef struct xin_wg {
    const kern__panels *a; /* in^T compressed: in_f rows, panels over n */
    const float *dout;
    float *dw, *bufs;      /* bufs: a thread's (in_f, 64) each */
    int n, in_f, out_f, isa;
} xin_wg;

static void xin_wg_task(void *ctx, int tid, int nt)
{
    const xin_wg *g = ctx;
    int tiles = (g->out_f + 63) / 64;
    float *buf = g->bufs + (size_t)tid * g->in_f * 64;
    for (int t = (int)((int64_t)tiles * tid / nt); t < (int)((int64_t)tiles * (tid + 1) / nt); t++) {
        int o0 = t * 64, w = g->out_f - o0 < 64 ? g->out_f - o0 : 64;
        kern__spmm_rows(g->isa, g->a, g->dout + o0, g->out_f, w, NULL, 0, buf, 64, 0, g->in_f);
        /* dW rows [o0, o0 + w) = buf (in_f, 64)^T */
        kern__transpose_rows(kern__sparse_isa(), g->dw + (size_t)o0 * g->in_f, g->in_f, buf, 64, g->in_f, g->in_f, 0,
                             w);
    }
}

size_t op_dense_sparse_in_backward_workspace(int n, int in_f)
{
    size_t np = (size_t)(n > 0 ? n : 0), k = (size_t)(in_f > 0 ? in_f : 0);
    return sizeof(float) * (np * k + (size_t)kernels_threads() * k * 64) +
           compressed_bytes(in_f, n) + 128;
}

int op_dense_sparse_in_backward(float *din, float *dweight, float *dbias, const float *dout,
                                const float *in, const float *weight, int n, int in_f, int out_f,
                                void *ws, size_t ws_bytes)
{
    /* dout (n, out_f), in (n, in_f) mostly zero, weight (out_f, in_f):
     * dweight = dout^T in over in's nonzeros; dbias and din (= dout W,
     * which does not read in) as op_dense_backward */
    if (n < 0 || in_f < 0 || out_f < 0)
        return -EINVAL;
    if (out_f == 0)
        return 0;
    if (n == 0 || in_f == 0) {
        op_dense_backward(din, dweight, dbias, dout, in, weight, n, in_f, out_f);
        return 0;
    }
    if (!ws || ws_bytes < op_dense_sparse_in_backward_workspace(n, in_f))
        return -ENOSPC;
    float *inT = (float *)(((uintptr_t)ws + 63) & ~(uintptr_t)63);
    transpose_into(inT, n, in, in_f, n, in_f);
    kern__panels a;
    float *bufs = (float *)compress(&a, inT, in_f, n, n, inT + (size_t)in_f * n);
    xin_wg g = {.a = &a, .dout = dout, .dw = dweight, .bufs = bufs, .n = n, .in_f = in_f,
                .out_f = out_f, .isa = kern__sparse_isa()};
    int tiles = (out_f + 63) / 64;
    kern__parallel(xin_wg_task, &g, tiles);
    if (dbias) {
        bias_job b = {dbias, dout, n, out_f};
        kernels_for((size_t)out_f, 256, bias_cols, &b);
    }
    if (din)
        kern_sgemm(0, 0, n, in_f, out_f, 1.0f, dout, out_f, weight, in_f, 0.0f, din, in_f);
    return 0;
}

typedef struct tr_job {
    float *wt;
    const float *w;
    int rows, cols;
} tr_job;

static void tr_task(void *ctx, int tid, int nt)
{
    const tr_job *t = ctx;
    int lo = (int)((int64_t)t->cols * tid / nt), hi = (int)((int64_t)t->cols * (tid + 1) / nt);
    kern__transpose_rows(kern__sparse_isa(), t->wt, t->rows, t->w, t->cols, t->rows, t->rows, lo, hi);
}

void sparse_w_transpose(float *wt, const float *w, int rows, int cols)
{
    tr_job t = {wt, w, rows, cols};
    kern__parallel(tr_task, &t, (double)rows * cols < 65536 ? 1 : kernels_threads());
}

typedef struct nz_job {
    const float *x;
    size_t count;
    size_t nz[64];
} nz_job;

static void nz_task(void *ctx, int tid, int nt)
{
    nz_job *j = ctx;
    size_t lo = j->count * (size_t)tid / (size_t)nt, hi = j->count * (size_t)(tid + 1) / (size_t)nt;
    size_t k = 0;
    for (size_t i = lo; i < hi; i++)
        k += j->x[i] != 0.0f;
    j->nz[tid] = k;
}

double op_dense_in_density(const float *in, size_t count)
{
    if (!count)
        return 0.0;
    nz_job j = {.x = in, .count = count};
    int nt = kernels_threads() < 64 ? kernels_threads() : 64;
    kern__parallel(nz_task, &j, count < 65536 ? 1 : nt);
    size_t k = 0;
    for (int t = 0; t < 64; t++)
        k += j.nz[t];
    return (double)k / (double)count;
}

/* Measured with bench/sparse_dense.c on the 2-core EPYC (Zen 5): the
 * input-sparse passes against op_dense_forward / _backward at 4096 x
 * 4096, batch 256 (the forward pass with wt kept by the caller): the
 * forward pass ran 2.1 to 3.1 times as fast at 10% to 2% nonzeros and
 * 0.9 to 1.1 at 25%; the backward pass 1.07 to 1.13 at 5% and 2%, 0.92
 * at 10%. Their crossover densities: */
#define SPARSE_IN_CROSSOVER 0.20
#define SPARSE_IN_BWD_CROSSOVER 0.04

int op_dense_sparse_in_pays(double density, int n, int in_f, int out_f)
{
    (void)n, (void)in_f, (void)out_f;
    return kern__sparse_isa() >= KERNELS_ISA_AVX512 && density < SPARSE_IN_CROSSOVER;
}

int op_dense_sparse_in_backward_pays(double density, int n, int in_f, int out_f)
{
    (void)n, (void)in_f, (void)out_f;
    return kern__sparse_isa() >= KERNELS_ISA_AVX512 && density < SPARSE_IN_BWD_CROSSOVER;
}
