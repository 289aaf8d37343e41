/* The executor's dense layers on the sparse kernels (op_sparse_dense.h):
 * a pruned weight's zeros counted where its masks may have changed (each
 * pass without a schedule; at the first, and after a schedule's update
 * steps, with one), its kept positions and values made into the kernels'
 * compressed form (the values alone gathered while the positions stay),
 * and the path the cost model predicts faster taken; a relu's mostly-zero
 * output skipped. */
#include "exec.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "op_dense.h"
#include "op_sparse_dense.h"

#define EXEC__NO_KEY INT64_MIN

static const char *const exec__mixed =
    "mixed precision (the GEMMs compute in bfloat16, the sparse kernels in float32)";

/* The input-sparse forward pass needs the weight transposed, made again
 * each step in Weight Streaming (64 MiB for a 4096 x 4096 layer): with
 * that transpose it beat the GEMM only below about 5% nonzero inputs on
 * the EPYC of docs/sparsity.md (1.06 at 10%, 1.18 at 5%), against 20%
 * with the transpose kept (op_dense_sparse_in_pays). */
#define EXEC__SPARSE_IN_TRANSPOSING 0.05

typedef struct exec_dense_path {
    sparse_w *sw;      /* the weight's kept positions and values, or NULL */
    float *kept;       /* with sw: room for its kept values in canonical order */
    int64_t key;       /* the pass the weight was last measured for (EXEC__NO_KEY: none) */
    int64_t counted;   /* ... and last counted for (exec__masks_may_change) */
    double density;    /* the weight's nonzero fraction then */
    double ratio;      /* the cost model's sparse time over the GEMMs' at that density */
    bool pruned;       /* the plan prunes its weight, whose zeros are the pruned positions */
    bool after_relu;   /* its input is a relu's output */
    bool sparse;       /* the sparse kernels run on the kept weights this pass */
    float *wt;         /* the weight transposed (in_f, out_f) for the input-sparse pass, or NULL */
    int64_t wt_key;    /* the pass wt was made for */
    double in_density; /* the input's nonzero fraction in the last forward pass (-1: unmeasured) */
    bool in_bwd;       /* the backward pass skips the input's zeros */
    int path;          /* the last pass's EXEC_PATH_*, or -1 */
    int told;          /* the path last told path_note, or -1 */
    const char *why;   /* the reason for the GEMMs other than the cost model, or NULL */
    uint64_t made;     /* times the kept pattern was made (a mask's change, or the first) */
    const uint8_t *bits; /* exec_set_kept_only: the kept positions, a bit each; its weight and
                            gradient slots hold the kept values alone, canonical order */
} exec__dpath;

/* Whether layer li's input is a relu's output (through flatten views) */
static bool exec__after_relu(const model *m, int li)
{
    int s = m->layers[li].inputs[0];
    while (s >= 0) {
        const model_layer *p = &m->layers[s];
        if (p->type == LAYER_RELU || (p->type == LAYER_DENSE && p->fused))
            return true;
        if (p->type != LAYER_FLATTEN)
            return false;
        s = p->inputs[0];
    }
    return false;
}

void exec__sparse_deinit(exec *e)
{
    for (int i = 0; e->dp && i < e->m->nlayers; i++) {
        sparse_w_free(e->dp[i].sw);
        free(e->dp[i].kept);
        free(e->dp[i].wt);
    }
    free(e->dp);
    free(e->sws);
    e->masks.type = SPARSE_NONE;
    e->dp = NULL;
    e->sws = NULL;
    e->sws_bytes = 0;
}

int exec_set_sparsity(exec *e, const float *level, bool zeros_pruned, char *err, size_t errlen)
{
    const model *m = e->m;
    exec__sparse_deinit(e);
    e->dp = calloc((size_t)m->nlayers, sizeof(*e->dp));
    if (!e->dp)
        goto oom;
    size_t ws = 0;
    for (int li = 0; li < m->nlayers; li++) {
        const model_layer *l = &m->layers[li];
        exec__dpath *dp = &e->dp[li];
        dp->key = dp->counted = dp->wt_key = EXEC__NO_KEY;
        dp->path = dp->told = -1;
        dp->in_density = -1.0;
        if (l->type != LAYER_DENSE)
            continue;
        dp->pruned = level && zeros_pruned && level[l->first_tensor] > 0.0f;
        dp->after_relu = exec__after_relu(m, li);
        if (!dp->pruned && !dp->after_relu)
            continue;
        int in_f = (int)l->in.d[0];
        sparse_w shape = {.out_f = (int)l->units, .in_f = in_f};
        size_t need[3] = {op_sparse_dense_workspace(&shape, e->n),
                          op_dense_sparse_in_workspace(e->n, in_f),
                          op_dense_sparse_in_backward_workspace(e->n, in_f)};
        for (int k = 0; k < 3; k++)
            ws = need[k] > ws ? need[k] : ws;
    }
    if (ws && !(e->sws = malloc(ws)))
        goto oom;
    e->sws_bytes = ws;
    return 0;
oom:
    exec__sparse_deinit(e);
    snprintf(err, errlen, "out of memory for the sparse kernels' workspace");
    return -ENOMEM;
}

int exec_set_kept_only(exec *e, int li, const uint8_t *bits, char *err, size_t errlen)
{
    if (!e->dp || li < 0 || li >= e->m->nlayers || !e->dp[li].pruned || !bits) {
        snprintf(err, errlen, "layer %d: not a pruned dense layer", li);
        return -EINVAL;
    }
    if (e->m->mixed_precision) {
        snprintf(err, errlen, "layer %s: %s", e->m->layers[li].name, exec__mixed);
        return -EINVAL;
    }
    e->dp[li].bits = bits;
    return 0;
}

/* Layer li's kept-only weight for pass key: its positions made from the
 * bits at its first pass, its values (the weight slot's front) set at
 * each new pass. Returns false without the memory. */
static bool exec__kept_only(exec *e, int li, int64_t key)
{
    const model_layer *l = &e->m->layers[li];
    exec__dpath *dp = &e->dp[li];
    if (!dp->sw) {
        int in_f = (int)l->in.d[0], units = (int)l->units;
        size_t total = (size_t)units * (size_t)in_f;
        char err[160];
        if (!(dp->sw = sparse_w_new_bits(dp->bits, units, in_f, err, sizeof(err))))
            return false;
        dp->made++;
        dp->density = (double)dp->sw->nnz / (double)(total ? total : 1);
        dp->ratio = op_sparse_dense_cost_ratio(dp->sw->nnz, e->n, in_f, units);
        dp->sparse = true;
    }
    if (dp->key != key) {
        sparse_w_set_kept(dp->sw, e->w[l->first_tensor]);
        dp->key = key;
    }
    return true;
}

void exec_set_mask_schedule(exec *e, const sparse_config *c)
{
    if (c)
        e->masks = *c;
    else
        e->masks.type = SPARSE_NONE;
}

/* ---- a pruned weight measured ---- */

/* The index of the last update whose weights pass key computes with, at
 * least *lo and at most *hi (-1: the initial weights): a training pass of
 * step s (key 2s) those after update s - 1; an evaluation under step s
 * (key 2s + 1) those after update s - 1 (the wse-node evaluates once its
 * step count has moved on) or s (an evaluation after step s). */
static void exec__after_update(int64_t key, int64_t *lo, int64_t *hi)
{
    int64_t s = key / 2; /* (keys are 2 step + 0 or 1, steps from 0) */
    *lo = s - 1;
    *hi = key % 2 ? s : s - 1;
}

/* Whether the pruned positions may differ between the weights of passes
 * `from` (counted then) and `to`: unknown schedules, and the updates that
 * change masks anywhere between the weights either could have, say yes. */
static bool exec__masks_may_change(const exec *e, int64_t from, int64_t to)
{
    if (e->masks.type == SPARSE_NONE || from == EXEC__NO_KEY)
        return true;
    if (e->masks.type == SPARSE_STATIC)
        return false;
    int64_t alo, ahi, blo, bhi;
    exec__after_update(from, &alo, &ahi);
    exec__after_update(to, &blo, &bhi);
    int64_t a = alo < blo ? alo : blo, b = ahi > bhi ? ahi : bhi;
    if (b - a > 4096) /* (a long way: counted rather than walked) */
        return true;
    for (int64_t u = a + 1; u <= b; u++)
        if (sparse_config_updates(&e->masks, u + 1))
            return true;
    return false;
}

typedef struct measure_job {
    const float *w;     /* the weight (out_f, in_f) */
    const sparse_w *sw; /* the kept pattern it is held against, or NULL */
    float *kept;        /* sw's kept values read from w, canonical order (with sw) */
    int in_f;
    size_t nnz;         /* its nonzeros (atomic) */
    int differs;        /* a row's nonzeros are not sw's kept positions (atomic) */
} measure_job;

/* Rows [lo, hi): their nonzeros counted and, while they match the kept
 * pattern, the kept values gathered. A row matches when it has as many
 * nonzeros as kept positions and none of those is zero. */
static void measure_rows(void *ctx, size_t lo, size_t hi)
{
    measure_job *j = ctx;
    size_t k = 0;
    bool differs = !j->sw;
    for (size_t r = lo; r < hi; r++) {
        const float *row = j->w + r * (size_t)j->in_f;
        uint32_t kr = 0;
        for (int c = 0; c < j->in_f; c++)
            kr += row[c] != 0.0f;
        k += kr;
        if (differs || __atomic_load_n(&j->differs, __ATOMIC_RELAXED))
            continue;
        uint32_t b = j->sw->row_ptr[r], end = j->sw->row_ptr[r + 1];
        differs = kr != end - b;
        for (uint32_t e = b; !differs && e < end; e++) {
            float v = row[j->sw->col[e]];
            j->kept[e] = v;
            differs = v == 0.0f;
        }
    }
    __atomic_fetch_add(&j->nnz, k, __ATOMIC_RELAXED);
    if (differs && j->sw)
        __atomic_store_n(&j->differs, 1, __ATOMIC_RELAXED);
}

/* Counts layer li's weight's zeros for pass key and chooses its path: the
 * kept values refreshed in place while the pattern stays, the pattern made
 * again where it changed (a mask's step). */
static void exec__measure(exec *e, int li, int64_t key)
{
    const model_layer *l = &e->m->layers[li];
    exec__dpath *dp = &e->dp[li];
    const float *w = e->w[l->first_tensor];
    int in_f = (int)l->in.d[0], units = (int)l->units;
    if (!exec__masks_may_change(e, dp->counted, key)) {
        /* the positions counted before: the kept values alone, or nothing
         * for a weight the GEMMs read as it is */
        dp->key = key;
        if (dp->sparse) {
            sparse_w_gather(dp->sw, w, dp->kept);
            sparse_w_set_kept(dp->sw, dp->kept);
        }
        return;
    }
    dp->counted = key;
    e->weights_counted++;
    measure_job j = {.w = w, .sw = dp->kept ? dp->sw : NULL, .kept = dp->kept, .in_f = in_f};
    kernels_for((size_t)units, 16, measure_rows, &j);
    dp->key = key;
    dp->density = (double)j.nnz / ((double)units * in_f);
    dp->ratio = op_sparse_dense_cost_ratio(j.nnz, e->n, in_f, units);
    dp->sparse = dp->ratio < 1.0;
    dp->why = NULL;
    if (dp->sparse && j.sw && !j.differs && dp->sw->nnz == j.nnz) {
        sparse_w_set_kept(dp->sw, dp->kept); /* the same positions: the values alone */
        return;
    }
    sparse_w_free(dp->sw);
    free(dp->kept);
    dp->sw = NULL;
    dp->kept = NULL;
    if (!dp->sparse) /* the GEMMs read the weight as it is */
        return;
    char err[160];
    dp->sw = sparse_w_new(w, NULL, units, in_f, err, sizeof(err));
    dp->kept = dp->sw ? malloc(sizeof(float) * (dp->sw->nnz ? dp->sw->nnz : 1)) : NULL;
    dp->made++;
    if (!dp->kept) {
        sparse_w_free(dp->sw);
        dp->sw = NULL;
        dp->sparse = false;
        dp->why = "no memory for its kept weights' compressed form";
    }
}

/* ---- the passes ---- */

/* The path of layer li's pass, counted, and told where it is new */
static void exec__tell(exec *e, int li, int path, const char *why)
{
    exec__dpath *dp = &e->dp[li];
    if (why)
        dp->why = why;
    dp->path = path;
    __atomic_fetch_add(&e->dense_passes[path], 1, __ATOMIC_RELAXED);
    if (dp->told == path && (path != EXEC_PATH_GEMM || dp->why == why))
        return;
    dp->told = path;
    if (e->path_note) {
        char line[320];
        exec_dense_path(e, li, line, sizeof(line));
        e->path_note(e->path_ctx, li, line);
    }
}

/* The weight transposed for pass key, made once per pass (allocated at
 * its first use); NULL without the memory */
static const float *exec__wt(exec *e, int li, int64_t key)
{
    const model_layer *l = &e->m->layers[li];
    exec__dpath *dp = &e->dp[li];
    size_t elems = (size_t)l->units * (size_t)l->in.d[0];
    if (!dp->wt && !(dp->wt = malloc(elems * sizeof(float))))
        return NULL;
    if (dp->wt_key != key) {
        sparse_w_transpose(dp->wt, e->w[l->first_tensor], (int)l->units, (int)l->in.d[0]);
        dp->wt_key = key;
    }
    return dp->wt;
}


/* A kept-only layer whose compressed form could not be made (out of
 * memory): its output NaN, so that the step's loss says so, and why told. */
static void exec__kept_only_failed(exec *e, int li, float *out, size_t count)
{
    for (size_t i = 0; i < count; i++)
        out[i] = __builtin_nanf("");
    exec__tell(e, li, EXEC_PATH_GEMM, "no memory for its kept weights' compressed form: its "
               "output is NaN");
}

bool exec__sparse_forward(exec *e, int li, float *out, const float *in, int64_t step,
                          bool training)
{
    if (!e->dp)
        return false;
    const model_layer *l = &e->m->layers[li];
    exec__dpath *dp = &e->dp[li];
    int n = e->n, in_f = (int)l->in.d[0], units = (int)l->units;
    const float *bias = l->bias ? e->w[l->first_tensor + 1] : NULL;
    if (e->m->mixed_precision && (dp->pruned || dp->after_relu)) {
        exec__tell(e, li, EXEC_PATH_GEMM, exec__mixed);
        return false;
    }
    int64_t key = step * 2 + (training ? 0 : 1); /* an evaluation's weights are later ones */
    if (dp->bits) { /* kept values alone: the sparse kernels (their workspace is sized for it) */
        if (!exec__kept_only(e, li, key) ||
            op_sparse_dense_forward(out, in, dp->sw, bias, n, e->sws, e->sws_bytes) < 0)
            exec__kept_only_failed(e, li, out, (size_t)n * (size_t)units);
        else
            exec__tell(e, li, EXEC_PATH_SPARSE_W, NULL);
        return true;
    }
    if (dp->pruned && dp->key != key)
        exec__measure(e, li, key);
    if (dp->sparse &&
        op_sparse_dense_forward(out, in, dp->sw, bias, n, e->sws, e->sws_bytes) == 0) {
        exec__tell(e, li, EXEC_PATH_SPARSE_W, NULL);
        return true;
    }
    dp->in_bwd = false;
    if (dp->after_relu && n > 0) {
        dp->in_density = op_dense_in_density(in, (size_t)n * in_f);
        dp->in_bwd = op_dense_sparse_in_backward_pays(dp->in_density, n, in_f, units);
        const float *wt;
        if (op_dense_sparse_in_pays(dp->in_density, n, in_f, units) &&
            dp->in_density < EXEC__SPARSE_IN_TRANSPOSING && (wt = exec__wt(e, li, key)) &&
            op_dense_sparse_in_forward(out, in, wt, bias, n, in_f, units, e->sws,
                                       e->sws_bytes) == 0) {
            exec__tell(e, li, EXEC_PATH_SPARSE_IN, NULL);
            return true;
        }
    }
    exec__tell(e, li, EXEC_PATH_GEMM, dp->why);
    return false;
}

bool exec__sparse_backward(exec *e, int li, float *din, float *dw, float *db, const float *dout,
                           const float *in, int64_t step)
{
    if (!e->dp)
        return false;
    if (e->m->mixed_precision && (e->dp[li].pruned || e->dp[li].after_relu)) {
        __atomic_fetch_add(&e->dense_passes[EXEC_PATH_GEMM], 1, __ATOMIC_RELAXED);
        return false;
    }
    const model_layer *l = &e->m->layers[li];
    exec__dpath *dp = &e->dp[li];
    int n = e->n, in_f = (int)l->in.d[0], units = (int)l->units;
    const float *w = e->w[l->first_tensor];
    if (dp->bits) { /* kept values alone: their gradient alone, canonical order */
        if (!exec__kept_only(e, li, step * 2) ||
            op_sparse_dense_backward(din, dw, db, dout, in, dp->sw, n, e->sws, e->sws_bytes) < 0) {
            exec__kept_only_failed(e, li, dw, (size_t)units * (size_t)in_f);
            if (din)
                memset(din, 0, sizeof(float) * (size_t)n * (size_t)in_f);
        } else {
            exec__tell(e, li, EXEC_PATH_SPARSE_W, NULL);
        }
        return true;
    }
    if (dp->pruned && dp->key != step * 2)
        exec__measure(e, li, step * 2);
    if (dp->sparse &&
        op_masked_dense_backward(din, dw, db, dout, in, w, dp->sw, n, e->sws, e->sws_bytes) == 1) {
        exec__tell(e, li, EXEC_PATH_SPARSE_W, NULL);
        return true;
    }
    if (dp->in_bwd && op_dense_sparse_in_backward(din, dw, db, dout, in, w, n, in_f, units,
                                                  e->sws, e->sws_bytes) == 0) {
        exec__tell(e, li, EXEC_PATH_SPARSE_IN, NULL);
        return true;
    }
    __atomic_fetch_add(&e->dense_passes[EXEC_PATH_GEMM], 1, __ATOMIC_RELAXED);
    return false;
}

void exec__sparse_part(exec *e, int li)
{
    if (e->dp && (e->dp[li].pruned || e->dp[li].after_relu))
        exec__tell(e, li, EXEC_PATH_GEMM, "streamed in parts (each part's rows on the GEMMs)");
}

int exec_dense_path(const exec *e, int li, char *out, size_t len)
{
    if (!e->dp || li < 0 || li >= e->m->nlayers || e->m->layers[li].type != LAYER_DENSE ||
        e->dp[li].path < 0) {
        if (len)
            out[0] = '\0';
        return -1;
    }
    const exec__dpath *dp = &e->dp[li];
    size_t k = 0;
    switch (dp->path) {
    case EXEC_PATH_SPARSE_W:
        k = (size_t)snprintf(out, len, "sparse path, density %.2f, predicted %.2f of dense%s",
                             dp->density, dp->ratio,
                             dp->bits ? "; its kept weights alone streamed, computed and sent "
                                        "(the zeros never expanded)" : "");
        break;
    case EXEC_PATH_SPARSE_IN:
        k = (size_t)snprintf(out, len, "input-sparse path, the input %.3f nonzero after its relu "
                             "(the weight dense, transposed once a step)", dp->in_density);
        break;
    default:
        if (dp->why)
            k = (size_t)snprintf(out, len, "dense path: %s", dp->why);
        else if (dp->pruned)
            k = (size_t)snprintf(out, len, "dense path, density %.2f, the sparse kernels "
                                 "predicted %.2f of dense", dp->density, dp->ratio);
        else
            k = (size_t)snprintf(out, len, "dense path");
        break;
    }
    if (dp->after_relu && dp->path != EXEC_PATH_SPARSE_IN && dp->in_density >= 0.0 && k < len)
        snprintf(out + k, len - k, "; the input %.3f nonzero after its relu (skipping its zeros "
                 "pays below %.2f)", dp->in_density, EXEC__SPARSE_IN_TRANSPOSING);
    return dp->path;
}
