/* The layer executor: model layers onto the kernels. */
#include "exec.h"
#include "pages.h"


#include "kernels.h"
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "footprint.h"
#include "fsutil.h"
#include "op_activation.h"
#include "op_concat.h"
#include "op_conv2d.h"
#include "op_conv3d.h"
#include "op_conv_transpose2d.h"
#include "op_conv_transpose3d.h"
#include "op_dense.h"
#include "op_dropout.h"
#include "op_elementwise.h"
#include "op_loss.h"
#include "op_norm.h"
#include "op_pool.h"
#include "op_pool3d.h"
#include "op_upsample.h"
#include "op_upsample3d.h"
#include "sample.h"

#define DICE_EPS 1.0f /* smoothing of the soft Dice ratio */

enum { EXEC__TRAIN, EXEC__EVAL, EXEC__RECOMPUTE }; /* exec__run_forward's modes */

static const model_shape *exec__shape_of(const model *m, int layer)
{
    return layer < 0 ? &m->input : &m->layers[layer].out;
}

/* The spatial size of an image (h * w) or a volume (d * h * w), 1 for a
 * vector: what the norms, concat and the pixel losses take as one number */
static int exec__hw(const model_shape *s)
{
    if (s->ndim == 4)
        return (int)(s->d[1] * s->d[2] * s->d[3]);
    return s->ndim == 3 ? (int)(s->d[1] * s->d[2]) : 1;
}

/* A volume layer's shapes for the kernels (model.h: axes d, h, w) */
static op_conv3d_params exec__conv3d(const model_layer *l, int n)
{
    op_conv3d_params p = {
        .n = n, .c = (int)l->in.d[0], .d = (int)l->in.d[1], .h = (int)l->in.d[2],
        .w = (int)l->in.d[3], .k = (int)l->filters,
        .kd = l->kernel[0], .kh = l->kernel[1], .kw = l->kernel[2],
        .stride_d = l->stride[0], .stride_h = l->stride[1], .stride_w = l->stride[2],
        .pad_d = l->padding[0], .pad_h = l->padding[1], .pad_w = l->padding[2],
        .dil_d = l->dilation[0], .dil_h = l->dilation[1], .dil_w = l->dilation[2],
    };
    return p;
}

static op_conv_transpose3d_params exec__convt3d(const model_layer *l, int n)
{
    op_conv_transpose3d_params p = {
        .n = n, .c = (int)l->in.d[0], .d = (int)l->in.d[1], .h = (int)l->in.d[2],
        .w = (int)l->in.d[3], .k = (int)l->filters,
        .kd = l->kernel[0], .kh = l->kernel[1], .kw = l->kernel[2],
        .stride_d = l->stride[0], .stride_h = l->stride[1], .stride_w = l->stride[2],
        .pad_d = l->padding[0], .pad_h = l->padding[1], .pad_w = l->padding[2],
        .dil_d = l->dilation[0], .dil_h = l->dilation[1], .dil_w = l->dilation[2],
        .out_pad_d = l->output_padding[0], .out_pad_h = l->output_padding[1],
        .out_pad_w = l->output_padding[2],
    };
    return p;
}

static op_pool3d_params exec__pool3d(const model_layer *l, int n)
{
    op_pool3d_params p = {
        .n = n, .c = (int)l->in.d[0], .d = (int)l->in.d[1], .h = (int)l->in.d[2],
        .w = (int)l->in.d[3], .kd = l->kernel[0], .kh = l->kernel[1], .kw = l->kernel[2],
        .stride_d = l->stride[0], .stride_h = l->stride[1], .stride_w = l->stride[2],
        .pad_d = l->padding[0], .pad_h = l->padding[1], .pad_w = l->padding[2],
        .count_include_pad = 1, /* PyTorch's default */
    };
    return p;
}

/* Bytes of workspace the 3-D kernels ask for layer l on n samples (0 for
 * any other layer): oneDNN's sizes are its own, so the executor holds at
 * least these, whatever the plan's estimate (footprint_vol_workspace) */
static size_t exec__vol_workspace(const model *m, const model_layer *l, int n)
{
    if (l->type == LAYER_CONV3D) {
        op_conv3d_params p = exec__conv3d(l, n);
        return m->mixed_precision ? op_conv3d_bf16_workspace(&p) : op_conv3d_workspace(&p);
    }
    if (l->type == LAYER_CONV_TRANSPOSE3D) {
        op_conv_transpose3d_params p = exec__convt3d(l, n);
        return m->mixed_precision ? op_conv_transpose3d_bf16_workspace(&p)
                                  : op_conv_transpose3d_workspace(&p);
    }
    return 0;
}

/* A transposed 3-D convolution's passes, in bfloat16 on oneDNN where the
 * model is mixed precision and it has the kernels, else float32. */
static void exec__convt3d_forward(const exec *e, float *out, const float *in, const float *w,
                                  const float *bias, const op_conv_transpose3d_params *p)
{
    if (e->m->mixed_precision)
        op_conv_transpose3d_forward_bf16(out, in, w, bias, p, e->ws, e->ws_bytes);
    else
        op_conv_transpose3d_forward(out, in, w, bias, p, e->ws, e->ws_bytes);
}

static void exec__convt3d_backward(const exec *e, float *din, float *dw, float *dbias,
                                   const float *dout, const float *in, const float *w,
                                   const op_conv_transpose3d_params *p)
{
    if (e->m->mixed_precision)
        op_conv_transpose3d_backward_bf16(din, dw, dbias, dout, in, w, p, e->ws, e->ws_bytes);
    else
        op_conv_transpose3d_backward(din, dw, dbias, dout, in, w, p, e->ws, e->ws_bytes);
}

static op_pool2d_params exec__pool(const model_layer *l, int n)
{
    op_pool2d_params p = {0};
    p.n = n;
    p.c = (int)l->in.d[0];
    p.h = (int)l->in.d[1];
    p.w = (int)l->in.d[2];
    p.kh = l->kernel[0];
    p.kw = l->kernel[1];
    p.stride_h = l->stride[0];
    p.stride_w = l->stride[1];
    p.pad_h = l->padding[0];
    p.pad_w = l->padding[1];
    p.count_include_pad = 1; /* PyTorch's default */
    return p;
}

static int exec__init(exec *e, const model *m, int share, int n, int threads, float **w,
                      float **g, bool reference, char *err, size_t errlen);

/* ---- blocked groups ----
 *
 * A chain of convolutions on oneDNN's own layouts with the batch norms,
 * relus and adds between them keeps its tensors in aBcd16b, the layout
 * those convolutions compute in, instead of reordering every output back
 * to NCHW and every input into aBcd16b again (and the gradients likewise).
 * A norm, a relu and an add read and write one layout, so each joins its
 * inputs' and its output's tensors into a group; a group is blocked when
 * every tensor in it has channels in whole blocks of 16, is made by a
 * convolution that can give aBcd16b or by a member, and is read only by
 * convolutions that can take it or by members (not by the loss, a pool,
 * a dense layer or the input). A norm's data must stay in the cache
 * between its passes (a block of 16 channels is one unit of its work):
 * a group with a norm over more than EXEC__BLK_NORM_PIXELS samples times
 * pixels stays plain. Every pass gives the plain layout's bits, so the
 * choice changes the speed alone; stripes and synchronised norms keep
 * every tensor plain. */
#define EXEC__BLK_NORM_PIXELS 262144

static int exec__find(int *up, int i)
{
    while (up[i] != i)
        i = up[i] = up[up[i]];
    return i;
}

/* The convolution's OP_CONV2D_*_BLOCKED bits for the batch size now */
static unsigned exec__conv_io(const exec *e, const model_layer *l)
{
    op_conv2d_params p = memplan_conv2d_params(l, e->n);
    return op_conv2d_blocked_io(&p, e->m->mixed_precision, l->bias, e->ws_bytes);
}

int exec_conv_path(const exec *e, int layer, char *out, size_t len)
{
    const model_layer *l = &e->m->layers[layer];
    if (l->type != LAYER_CONV2D || len == 0)
        return -1;
    op_conv2d_params p = memplan_conv2d_params(l, e->n);
    int n = snprintf(out, len, "%s%s; ", e->m->mixed_precision ? "mixed precision" : "float32",
                     e->blk[layer] ? ", its output in a blocked group" : "");
    unsigned how = op_conv2d_describe(&p, e->m->mixed_precision, l->bias, e->ws_bytes,
                                      out + (n > 0 && (size_t)n < len ? n : 0),
                                      n > 0 && (size_t)n < len ? len - (size_t)n : len);
    return (int)how;
}

/* A layer that reads and writes one layout, joining its tensors' groups:
 * a batch norm, an add, a relu (a fused one is its norm's view) */
static bool exec__member(const model_layer *l)
{
    return l->type == LAYER_BATCH_NORM || l->type == LAYER_ADD ||
           (l->type == LAYER_RELU && !l->fused);
}

static int exec__layouts(exec *e)
{
    const model *m = e->m;
    int nl = m->nlayers;
    memset(e->blk, 0, (size_t)nl * sizeof(bool));
    e->blocked = 0;
    e->blk_n = e->n;
    int blk = op_conv2d_block_size(); /* channels a block: 16 with AVX-512, 8 with AVX2 */
    if (!m->blocked || e->parts.parts > 1 || e->parts.sync_batchnorm || e->n <= 0 || !blk)
        return 0;
    int *up = malloc((size_t)nl * sizeof(int));
    bool *ok = malloc((size_t)nl * sizeof(bool));
    if (!up || !ok) {
        free(up);
        free(ok);
        return -1;
    }
    for (int i = 0; i < nl; i++) {
        up[i] = i;
        ok[i] = true;
    }
    for (int i = 0; i < nl; i++) {
        const model_layer *l = &m->layers[i];
        for (int k = 0; exec__member(l) && k < l->ninputs; k++)
            if (l->inputs[k] >= 0 && e->res[l->inputs[k]] >= 0)
                up[exec__find(up, e->res[l->inputs[k]])] = exec__find(up, i);
    }
    for (int i = 0; i < nl; i++) {
        const model_layer *l = &m->layers[i];
        if (model_layer_is_view(l))
            continue;
        int g = exec__find(up, i);
        /* what makes it */
        switch (l->type) {
        case LAYER_CONV2D:
            ok[g] &= (exec__conv_io(e, l) & OP_CONV2D_OUT_BLOCKED) != 0;
            break;
        case LAYER_BATCH_NORM:
            ok[g] &= (uint64_t)e->n * (uint64_t)exec__hw(&l->out) <= EXEC__BLK_NORM_PIXELS;
            break;
        case LAYER_ADD:
        case LAYER_RELU:
            break;
        default:
            ok[g] = false;
        }
        ok[g] &= l->out.ndim == 3 && l->out.d[0] % blk == 0 && i != nl - 1;
        /* what reads it: a consumer's inputs, through views */
        for (int k = 0; k < l->ninputs; k++) {
            if (l->inputs[k] < 0 || e->res[l->inputs[k]] < 0) { /* the model input: plain */
                ok[g] &= !exec__member(l);
                continue;
            }
            int gi = exec__find(up, e->res[l->inputs[k]]);
            if (l->type == LAYER_CONV2D)
                ok[gi] &= k == 0 && (exec__conv_io(e, l) & OP_CONV2D_IN_BLOCKED) != 0;
            else if (gi != g)
                ok[gi] = false; /* read by a layer of no group of its */
        }
    }
    /* a view's readers read its tensor: a flatten's (a dense layer) say no */
    for (int i = 0; i < nl; i++) {
        const model_layer *l = &m->layers[i];
        for (int k = 0; k < l->ninputs; k++)
            if (l->inputs[k] >= 0 && m->layers[l->inputs[k]].type == LAYER_FLATTEN &&
                e->res[l->inputs[k]] >= 0)
                ok[exec__find(up, e->res[l->inputs[k]])] = false;
    }
    for (int i = 0; i < nl; i++)
        if (e->res[i] == i && ok[exec__find(up, i)]) {
            e->blk[i] = true;
            e->blocked++;
        }
    for (int i = 0; i < nl; i++) /* a view's is its tensor's */
        e->blk[i] = e->res[i] >= 0 && e->blk[e->res[i]];
    free(up);
    free(ok);
    return 0;
}

/* Whether layer li's input k is in aBcd16b (the model input never is) */
static bool exec__blk_in(const exec *e, const model_layer *l, int k)
{
    return l->inputs[k] >= 0 && e->res[l->inputs[k]] >= 0 && e->blk[e->res[l->inputs[k]]];
}

/* A convolution's tensors in aBcd16b (op_conv2d_forward_io's bits) */
static unsigned exec__conv_blocked(const exec *e, const model_layer *l, int li)
{
    return (e->blk[li] ? OP_CONV2D_OUT_BLOCKED : 0) |
           (exec__blk_in(e, l, 0) ? OP_CONV2D_IN_BLOCKED : 0);
}

int exec_init(exec *e, const model *m, int n, int threads, float **w, float **g, char *err,
              size_t errlen)
{
    return exec__init(e, m, n, n, threads, w, g, false, err, errlen);
}

int exec_init_micro(exec *e, const model *m, int share, int micro, int threads, float **w,
                    float **g, char *err, size_t errlen)
{
    return exec__init(e, m, share, micro < 1 || micro > share ? share : micro, threads, w, g,
                      false, err, errlen);
}

int exec_init_reference(exec *e, const model *m, int n, int threads, float **w, float **g,
                        char *err, size_t errlen)
{
    return exec__init(e, m, n, n, threads, w, g, true, err, errlen);
}

static int exec__init(exec *e, const model *m, int share, int n, int threads, float **w,
                      float **g, bool reference, char *err, size_t errlen)
{
    memset(e, 0, sizeof(*e));
    e->m = m;
    e->n = n;
    e->w = w;
    e->g = g;
    e->replica_share = 1.0f;
    footprint f;
    if (footprint_init_micro(&f, m, share, n, threads) < 0) {
        snprintf(err, errlen, "out of memory for the memory plan of %d samples", n);
        return -ENOMEM;
    }
    if (reference) {
        memplan_free(&f.plan);
        if (memplan_build_as(&f.plan, m, n, true) < 0) {
            footprint_free(&f);
            snprintf(err, errlen, "out of memory for the memory plan of %d samples", n);
            return -ENOMEM;
        }
        f.exec += f.plan.arena - f.arena;
        f.arena = f.plan.arena;
    }
    e->plan = f.plan; /* the executor follows the plan the footprint made */
    memset(&f.plan, 0, sizeof(f.plan));
    e->label_elems = f.label_elems;
    e->input_unorm8 = m->input_unorm8;
    e->labels_u8 = m->labels_u8;
    e->act = calloc((size_t)m->nlayers, sizeof(float *));
    e->dact = calloc((size_t)m->nlayers, sizeof(float *));
    e->aux = calloc((size_t)m->nlayers, sizeof(void *));
    e->packed = calloc((size_t)m->nlayers, sizeof(uint16_t *));
    e->direct = calloc((size_t)m->nlayers, sizeof(bool));
    e->in_kept = calloc((size_t)m->nlayers, sizeof(bool));
    e->blk = calloc((size_t)m->nlayers, sizeof(bool));
    e->res = malloc((size_t)m->nlayers * sizeof(int));
    if (!e->act || !e->dact || !e->aux || !e->packed || !e->direct || !e->in_kept || !e->blk ||
        !e->res)
        goto oom;
    for (int i = 0; i < m->nlayers; i++)
        e->res[i] = memplan_resolve(m, i);
    /* every buffer of the step in the plan's arena: the plan is what runs */
    e->arena_bytes = f.arena;
    if (!(e->arena = aligned_alloc(64, f.arena ? f.arena : 64)))
        goto oom;
    e->ws_bytes = f.workspace;
    for (int i = 0; i < m->nlayers; i++) {
        size_t v = exec__vol_workspace(m, &m->layers[i], n);
        if (v > e->ws_bytes)
            e->ws_bytes = (v + 63) / 64 * 64;
    }
    f.exec += e->ws_bytes - f.workspace;
    if (e->ws_bytes && !(e->ws = aligned_alloc(64, e->ws_bytes)))
        goto oom;
    if (f.input && !(e->input = malloc(f.input)))
        goto oom;
    if (f.accum && !(e->gtmp = malloc(f.accum)))
        goto oom;
    f.exec -= f.again;
    f.again = footprint_again_bytes(m, &e->plan); /* the plan that runs (the reference's) */
    f.exec += f.again;
    if (f.again && (!(e->wa = calloc((size_t)m->ntensors, sizeof(float *))) ||
                    !(e->again = aligned_alloc(64, f.again))))
        goto oom;
    for (int i = 0, at = 0; f.again && i < m->nlayers; i++) {
        const model_layer *l = &m->layers[i];
        if (!memplan_weights_again(&e->plan, m, i))
            continue;
        for (int k = 0; k < l->ntensors; k++) {
            e->wa[l->first_tensor + k] = e->again + at;
            at += (int)((m->tensors[l->first_tensor + k].elems + 15) / 16 * 16);
        }
    }
    e->bytes = f.exec;
    footprint_free(&f);
    if (exec__layouts(e) < 0)
        goto oom;
    return 0;
oom:
    snprintf(err, errlen, "out of memory for the activations of %d samples (%llu bytes)", n,
             (unsigned long long)f.exec);
    footprint_free(&f);
    exec_deinit(e);
    return -ENOMEM;
}

void exec_deinit(exec *e)
{
    pages_free(e->act);
    pages_free(e->dact);
    pages_free(e->aux);
    pages_free(e->packed);
    pages_free(e->direct);
    pages_free(e->in_kept);
    pages_free(e->blk);
    pages_free(e->res);
    pages_free(e->arena);
    pages_free(e->ws);
    pages_free(e->input);
    pages_free(e->gtmp);
    pages_free(e->wa);
    pages_free(e->again);
    free(e->spill_off);
    free(e->spill_stage);
    free(e->hx);
    free(e->hd);
    free(e->red);
    for (int i = 0; e->kept && i < e->m->nlayers; i++)
        pages_free(e->kept[i]);
    free(e->kept);
    exec__sparse_deinit(e);
    memplan_free(&e->plan);
    memset(e, 0, sizeof(*e));
}

const float *exec_take_input(exec *e, const void *batch, int first)
{
    size_t in = model_shape_elems(&e->m->input);
    const uint8_t *b = (const uint8_t *)batch + (size_t)first * in * sample_input_size(e->input_unorm8);
    if (!e->input_unorm8)
        return (const float *)b;
    sample_unorm8_to_float_as(e->input, b, (size_t)e->n * in, (sample_scale)e->m->input_scale);
    return e->input;
}

const void *exec_labels(const exec *e, const void *batch, int nbatch, int first)
{
    return (const uint8_t *)batch +
           (size_t)nbatch * model_shape_elems(&e->m->input) * sample_input_size(e->input_unorm8) +
           (size_t)first * e->label_elems * sample_label_size(e->labels_u8);
}

const float *exec_output(const exec *e, int layer, const float *x)
{
    int r = layer < 0 ? -1 : e->res[layer];
    return r < 0 ? x : e->act[r];
}

/* The gradient buffer a layer's output gradient adds into (through
 * flatten views), or NULL for the model input. */
static float *exec__dout(const exec *e, int layer)
{
    int r = layer < 0 ? -1 : e->res[layer];
    return r < 0 ? NULL : e->dact[r];
}

/* ---- spatial partitions: the rows that cross a stripe's border ---- */

enum { /* the passes an exchange or a sum belongs to: the low bits of its tag */
    EXEC__HALO_FWD,
    EXEC__HALO_BWD,
    EXEC__SUM_FWD,  /* and EXEC__SUM_FWD + 1: a norm's two sums */
    EXEC__SUM_BWD = 4,
    EXEC__SUM_LOSS,
};

static uint32_t exec__tag(int layer, int pass)
{
    return (uint32_t)layer << 3 | (uint32_t)pass;
}

static const spatial_layer *exec__sl(const exec *e, int li)
{
    return e->parts.parts > 1 ? &e->parts.sp->layers[li] : NULL;
}

/* Rows [r0, r0 + rows) of every plane (h x w) of src, packed into dst. */
static void exec__rows_get(float *dst, const float *src, size_t planes, int h, int w, int r0,
                           int rows)
{
    for (size_t p = 0; rows > 0 && p < planes; p++)
        memcpy(dst + p * rows * w, src + (p * h + r0) * w, (size_t)rows * w * sizeof(float));
}

/* Packed rows added into rows [r0, r0 + rows) of every plane of dst. */
static void exec__rows_add(float *dst, const float *src, size_t planes, int h, int w, int r0,
                           int rows)
{
    for (size_t p = 0; rows > 0 && p < planes; p++) {
        float *d = dst + (p * h + r0) * w;
        const float *q = src + p * rows * w;
        for (size_t i = 0; i < (size_t)rows * w; i++)
            d[i] += q[i];
    }
}

static void exec__fill(float *dst, float v, size_t count)
{
    for (size_t i = 0; i < count; i++)
        dst[i] = v;
}

/* One exchange with the stripes above and below; nothing crosses the
 * image's edges. The first failure sticks (exec_parts_error). */
static void exec__exchange_begin(exec *e, uint32_t tag, const float *up, size_t n_up,
                                 const float *down, size_t n_down, float *from_up,
                                 size_t n_from_up, float *from_down, size_t n_from_down)
{
    exec_halo *h = &e->pending;
    memset(h, 0, sizeof(*h));
    if (e->parts.part > 0 && (n_up || n_from_up)) {
        h->up = up, h->n_up = n_up;
        h->from_up = from_up, h->n_from_up = n_from_up;
    }
    if (e->parts.part + 1 < e->parts.parts && (n_down || n_from_down)) {
        h->down = down, h->n_down = n_down;
        h->from_down = from_down, h->n_from_down = n_from_down;
    }
    if (e->parts_err || (!h->n_up && !h->n_from_up && !h->n_down && !h->n_from_down))
        return;
    int rc = e->parts.exchange_begin(e->parts.ctx, tag, h);
    if (rc < 0)
        e->parts_err = rc;
}

/* The end of the exchange begun last (its tag again). */
static void exec__exchange_end(exec *e, uint32_t tag)
{
    exec_halo *h = &e->pending;
    if (e->parts_err || (!h->n_up && !h->n_from_up && !h->n_down && !h->n_from_down))
        return;
    int rc = e->parts.exchange_end(e->parts.ctx, tag, h);
    if (rc < 0)
        e->parts_err = rc;
}

/* One exchange with the stripes above and below; nothing crosses the
 * image's edges. The first failure sticks (exec_parts_error). */
static void exec__exchange(exec *e, uint32_t tag, const float *up, size_t n_up, const float *down,
                           size_t n_down, float *from_up, size_t n_from_up, float *from_down,
                           size_t n_from_down)
{
    exec__exchange_begin(e, tag, up, n_up, down, n_down, from_up, n_from_up, from_down,
                         n_from_down);
    exec__exchange_end(e, tag);
}

/* An op_reduce (op_reduce.h) over the stripes, through exec_parts.sum. */
typedef struct exec__red {
    exec *e;
    uint32_t tag;
    bool batch;
} exec__red;

static int exec__red_sum(void *ctx, double *v, size_t count)
{
    exec__red *r = ctx;
    exec *e = r->e;
    if (e->parts_err)
        return e->parts_err;
    int rc = e->parts.sum(e->parts.ctx, r->tag++, r->batch, v, count);
    if (rc < 0)
        e->parts_err = rc;
    return rc;
}

/* The halo rows of gather layer li from the stripes above and below, into
 * e->kept[li] (the rows above, then the rows below; pad fills the rows
 * beyond the image's edges), kept for the backward pass and any
 * recomputation: begun (this stripe's edge rows sent from e->hd), then
 * ended (the neighbours' in). */
static void exec__gather_begin(exec *e, int li, const float *in)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->in.d[0];
    int h = (int)l->in.d[1], w = (int)spatial_row_elems(&l->in);
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    float *kt = e->kept[li], *kb = kt + planes * top * w;
    float *up = e->hd, *down = up + planes * bot * w;
    exec__rows_get(up, in, planes, h, w, 0, bot);
    exec__rows_get(down, in, planes, h, w, h - top, top);
    exec__exchange_begin(e, exec__tag(li, EXEC__HALO_FWD), up, planes * bot * w, down,
                         planes * top * w, kt, planes * top * w, kb, planes * bot * w);
}

static void exec__gather_end(exec *e, int li, float pad)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->in.d[0], w = (size_t)spatial_row_elems(&l->in);
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    float *kt = e->kept[li], *kb = kt + planes * top * w;
    exec__exchange_end(e, exec__tag(li, EXEC__HALO_FWD));
    if (e->parts.part == 0)
        exec__fill(kt, pad, planes * top * w);
    if (e->parts.part + 1 == e->parts.parts)
        exec__fill(kb, pad, planes * bot * w);
}

static void exec__gather_recv(exec *e, int li, const float *in, float pad)
{
    exec__gather_begin(e, li, in);
    exec__gather_end(e, li, pad);
}

/* Bilinear (trilinear) upsampling's exchange: this stripe's first and
 * last row (plane) of every channel to the stripes above and below, theirs
 * into e->kept[li] (the row above, then the row below), kept for the
 * backward pass and any recomputation. */
static void exec__edge_rows_exchange(exec *e, int li, const float *in)
{
    const model_layer *l = &e->m->layers[li];
    size_t planes = (size_t)e->n * l->in.d[0], w = (size_t)spatial_row_elems(&l->in);
    int h = (int)l->in.d[1];
    float *kt = e->kept[li], *kb = kt + planes * w;
    exec__rows_get(e->hd, in, planes, h, (int)w, 0, 1);
    exec__rows_get(e->hd + planes * w, in, planes, h, (int)w, h - 1, 1);
    exec__exchange(e, exec__tag(li, EXEC__HALO_FWD), e->hd, planes * w, e->hd + planes * w,
                   planes * w, kt, planes * w, kb, planes * w);
}

/* A halo-reading kernel's view of gather layer li's kept rows (and, for
 * the backward pass, where the gradients of the neighbours' rows go: e->hx,
 * as exec__gather_back sends them). */
static op_conv2d_halo exec__conv_halo(exec *e, int li, bool backward)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->in.d[0], w = (size_t)spatial_row_elems(&l->in);
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    bool first = e->parts.part == 0, last = e->parts.part + 1 == e->parts.parts;
    float *kt = e->kept[li];
    op_conv2d_halo h = {.top = first ? NULL : kt, .bottom = last ? NULL : kt + planes * top * w,
                        .rows_top = top, .rows_bottom = bot};
    if (backward) { /* written whole by the kernel; none beyond the image's edges */
        h.dtop = first ? NULL : e->hx;
        h.dbottom = last ? NULL : e->hx + planes * top * w;
    }
    return h;
}

/* The input of gather layer li with its halo rows, into e->hx: received
 * from the stripes above and below (exchange: the forward pass), or as the
 * forward pass kept them (a recomputation, the backward pass). pad fills
 * the rows beyond the image's edges. Returns the extended height. */
static int exec__gather_in(exec *e, int li, const float *in, bool exchange, float pad)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->in.d[0];
    int h = (int)l->in.d[1], w = (int)spatial_row_elems(&l->in);
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    int own = s->bottom < 0 ? h + s->bottom : h; /* rows this stripe's windows read */
    float *kt = e->kept[li], *kb = kt + planes * top * w;
    if (exchange)
        exec__gather_recv(e, li, in, pad);
    int hext = top + own + bot;
    for (size_t p = 0; p < planes; p++) {
        float *d = e->hx + p * hext * w;
        memcpy(d, kt + p * top * w, (size_t)top * w * sizeof(float));
        memcpy(d + (size_t)top * w, in + p * h * w, (size_t)own * w * sizeof(float));
        memcpy(d + (size_t)(top + own) * w, kb + p * bot * w, (size_t)bot * w * sizeof(float));
    }
    return hext;
}

/* The backward exchange of a gather or bilinear layer: its gradients of
 * the neighbours' rows (up: `rows_up` rows per plane for the stripe above,
 * down: `rows_down` for the one below) go to them, and theirs of this
 * stripe's rows are added to the gradient of its input, dsrc (planes of
 * h x w): the stripe above sends its first rows_down rows, the one below
 * its last rows_up. What arrives lands in e->hx after the packed rows sent
 * from there (up and down may point into it). */
static void exec__halo_back_begin(exec *e, int li, size_t planes, int w, const float *up,
                                  int rows_up, const float *down, int rows_down)
{
    float *from_up = e->hx + planes * (size_t)(rows_up + rows_down) * w;
    float *from_down = from_up + planes * (size_t)rows_down * w;
    exec__exchange_begin(e, exec__tag(li, EXEC__HALO_BWD), up, planes * rows_up * w, down,
                         planes * rows_down * w, from_up, planes * rows_down * w, from_down,
                         planes * rows_up * w);
}

static void exec__halo_back_end(exec *e, int li, size_t planes, int h, int w, int rows_up,
                                int rows_down, float *dsrc)
{
    float *from_up = e->hx + planes * (size_t)(rows_up + rows_down) * w;
    float *from_down = from_up + planes * (size_t)rows_down * w;
    exec__exchange_end(e, exec__tag(li, EXEC__HALO_BWD));
    if (e->parts_err || !dsrc)
        return;
    if (e->parts.part > 0)
        exec__rows_add(dsrc, from_up, planes, h, w, 0, rows_down);
    if (e->parts.part + 1 < e->parts.parts)
        exec__rows_add(dsrc, from_down, planes, h, w, h - rows_up, rows_up);
}

static void exec__halo_back(exec *e, int li, size_t planes, int h, int w, const float *up,
                            int rows_up, const float *down, int rows_down, float *dsrc)
{
    exec__halo_back_begin(e, li, planes, w, up, rows_up, down, rows_down);
    exec__halo_back_end(e, li, planes, h, w, rows_up, rows_down, dsrc);
}

/* Of the gradient of a gather layer's extended input in e->hd: its own
 * rows into din (planes of h x w; rows no window of this stripe read are
 * zero), its halo rows packed into e->hx for exec__halo_back (the top
 * rows, then the bottom rows). */
static void exec__gather_din(exec *e, int li, float *din)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->in.d[0];
    int h = (int)l->in.d[1], w = (int)spatial_row_elems(&l->in);
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    int own = s->bottom < 0 ? h + s->bottom : h, hext = top + own + bot;
    for (size_t p = 0; p < planes; p++) {
        memcpy(din + p * h * w, e->hd + (p * hext + top) * w, (size_t)own * w * sizeof(float));
        memset(din + (p * h + own) * w, 0, (size_t)(h - own) * w * sizeof(float));
    }
    exec__rows_get(e->hx, e->hd, planes, hext, w, 0, top);
    exec__rows_get(e->hx + planes * top * w, e->hd, planes, hext, w, top + own, bot);
}

/* The halo rows' gradients of gather layer li (in e->hx: exec__gather_din,
 * exec__conv_halo) to their owners: begun as soon as they are made, ended
 * (the neighbours' added to dsrc) once the layer's input gradient is in
 * place. */
static void exec__gather_back_begin(exec *e, int li)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->in.d[0];
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    exec__halo_back_begin(e, li, planes, (int)spatial_row_elems(&l->in), e->hx, top,
                          e->hx + planes * top * spatial_row_elems(&l->in), bot);
}

static void exec__gather_back_end(exec *e, int li, float *dsrc)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    int top = s->top, bot = s->bottom > 0 ? s->bottom : 0;
    exec__halo_back_end(e, li, (size_t)e->n * l->in.d[0], (int)l->in.d[1], (int)spatial_row_elems(&l->in), top,
                        bot, dsrc);
}

/* A transposed convolution's output over its extended rows in e->hx: the
 * rows of the neighbours go to them, theirs of this stripe's rows come
 * back and are added, with the bias, to the own rows, into out. */
static void exec__scatter_out(exec *e, int li, float *out, const float *bias)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->out.d[0];
    int o = (int)l->out.d[1], w = (int)spatial_row_elems(&l->out), top = s->top, bot = s->bottom;
    int hext = top + o + bot;
    float *up = e->hd, *down = up + planes * top * w;
    float *from_up = down + planes * bot * w, *from_down = from_up + planes * bot * w;
    exec__rows_get(up, e->hx, planes, hext, w, 0, top);
    exec__rows_get(down, e->hx, planes, hext, w, top + o, bot);
    exec__exchange(e, exec__tag(li, EXEC__HALO_FWD), up, planes * top * w, down, planes * bot * w,
                   from_up, planes * bot * w, from_down, planes * top * w);
    for (size_t p = 0; p < planes; p++)
        memcpy(out + p * o * w, e->hx + (p * hext + top) * w, (size_t)o * w * sizeof(float));
    if (e->parts.part > 0)
        exec__rows_add(out, from_up, planes, o, w, 0, bot);
    if (e->parts.part + 1 < e->parts.parts)
        exec__rows_add(out, from_down, planes, o, w, o - top, top);
    int k = (int)l->out.d[0];
    for (size_t p = 0; bias && p < planes; p++) {
        float b = bias[p % k], *y = out + p * o * w;
        for (size_t i = 0; i < (size_t)o * w; i++)
            y[i] += b;
    }
}

/* The output gradient of a transposed convolution over its extended
 * rows, into e->hx: the neighbours' gradients of the rows this stripe's
 * inputs wrote in theirs come across. */
static void exec__scatter_dout(exec *e, int li, const float *dout)
{
    const model_layer *l = &e->m->layers[li];
    const spatial_layer *s = exec__sl(e, li);
    size_t planes = (size_t)e->n * l->out.d[0];
    int o = (int)l->out.d[1], w = (int)spatial_row_elems(&l->out), top = s->top, bot = s->bottom;
    int hext = top + o + bot;
    float *up = e->hd, *down = up + planes * bot * w;
    float *from_up = down + planes * top * w, *from_down = from_up + planes * top * w;
    exec__rows_get(up, dout, planes, o, w, 0, bot);
    exec__rows_get(down, dout, planes, o, w, o - top, top);
    exec__exchange(e, exec__tag(li, EXEC__HALO_BWD), up, planes * bot * w, down, planes * top * w,
                   from_up, planes * top * w, from_down, planes * bot * w);
    if (e->parts.part == 0)
        memset(from_up, 0, planes * top * w * sizeof(float));
    if (e->parts.part + 1 == e->parts.parts)
        memset(from_down, 0, planes * bot * w * sizeof(float));
    for (size_t p = 0; p < planes; p++) {
        float *d = e->hx + p * hext * w;
        memcpy(d, from_up + p * top * w, (size_t)top * w * sizeof(float));
        memcpy(d + (size_t)top * w, dout + p * o * w, (size_t)o * w * sizeof(float));
        memcpy(d + (size_t)(top + o) * w, from_down + p * bot * w, (size_t)bot * w * sizeof(float));
    }
}

/* Where stripe rows of a bilinear upsampling sit in the whole image. */
static op_upsample_frame exec__frame(const exec *e, const model_layer *l)
{
    /* the layer's rows are the input's scaled alike in every stripe */
    const spatial_plan *sp = e->parts.sp;
    op_upsample_frame f = {.row0 = (int)(sp->row0 * l->in.d[1] / sp->rows),
                           .full_h = (int)(sp->full_h * l->in.d[1] / sp->rows),
                           .full_oh = (int)(sp->full_h * l->out.d[1] / sp->rows)};
    return f;
}

int exec_set_parts(exec *e, const exec_parts *p, char *err, size_t errlen)
{
    e->parts = *p;
    exec__layouts(e); /* stripes and synchronised norms: every tensor plain */
    size_t n = (size_t)e->n;
    if (p->parts <= 1) { /* whole samples: synchronised batch norm's sums only */
        size_t red = 2;
        for (int i = 0; i < e->m->nlayers; i++)
            if (e->m->layers[i].type == LAYER_BATCH_NORM && 2 * (size_t)e->m->layers[i].in.d[0] > red)
                red = 2 * (size_t)e->m->layers[i].in.d[0];
        if (p->sync_batchnorm && !(e->red = malloc((red + 1) * sizeof(double)))) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        return 0;
    }
    const spatial_plan *sp = p->sp;
    e->hx = malloc((sp->halo_elems ? sp->halo_elems : 1) * n * sizeof(float));
    e->hd = malloc((sp->halo_elems ? sp->halo_elems : 1) * n * sizeof(float));
    e->red = malloc((sp->red_doubles * n + 1) * sizeof(double));
    e->kept = calloc((size_t)e->m->nlayers, sizeof(float *));
    bool oom = !e->hx || !e->hd || !e->red || !e->kept;
    size_t ws = e->ws_bytes;
    for (int i = 0; !oom && i < e->m->nlayers; i++) {
        const model_layer *l = &e->m->layers[i];
        const spatial_layer *s = &sp->layers[i];
        int bot = s->bottom > 0 ? s->bottom : 0;
        if (s->kind == SPATIAL_GATHER || s->kind == SPATIAL_BILINEAR) {
            size_t rows = s->kind == SPATIAL_GATHER ? (size_t)(s->top + bot) : 2;
            oom |= !(e->kept[i] = malloc(n * (size_t)l->in.d[0] * rows * (size_t)spatial_row_elems(&l->in) *
                                         sizeof(float) + 1));
        }
        /* the convolutions run on the extended rows, without row padding */
        if (s->kind == SPATIAL_GATHER && l->type == LAYER_CONV2D) {
            op_conv2d_params q = memplan_conv2d_params(l, e->n);
            q.h += s->top + s->bottom;
            q.pad_h = 0;
            size_t b = op_conv2d_workspace(&q);
            ws = b > ws ? b : ws;
        } else if (s->kind == SPATIAL_GATHER && l->type == LAYER_CONV3D) {
            op_conv3d_params q = exec__conv3d(l, e->n);
            q.d += s->top + s->bottom;
            q.pad_d = 0;
            size_t b = e->m->mixed_precision ? op_conv3d_bf16_workspace(&q)
                                             : op_conv3d_workspace(&q);
            ws = b > ws ? b : ws;
        } else if (s->kind == SPATIAL_SCATTER && l->type == LAYER_CONV_TRANSPOSE3D) {
            op_conv_transpose3d_params q = exec__convt3d(l, e->n);
            q.pad_d = 0;
            size_t b = e->m->mixed_precision ? op_conv_transpose3d_bf16_workspace(&q)
                                             : op_conv_transpose3d_workspace(&q);
            ws = b > ws ? b : ws;
        } else if (s->kind == SPATIAL_SCATTER) {
            op_conv_transpose2d_params q = footprint_convt_params(l, e->n);
            q.pad_h = 0;
            size_t b = op_conv_transpose2d_workspace(&q);
            ws = b > ws ? b : ws;
        }
    }
    if (!oom && ws > e->ws_bytes) {
        free(e->ws);
        ws = (ws + 63) / 64 * 64;
        oom |= !(e->ws = aligned_alloc(64, ws));
        e->bytes += ws - e->ws_bytes;
        e->ws_bytes = oom ? 0 : ws;
    }
    if (oom) {
        snprintf(err, errlen, "out of memory for the halo buffers of a stripe (%llu bytes)",
                 (unsigned long long)spatial_extra_bytes(sp, e->n));
        return -ENOMEM;
    }
    e->bytes += spatial_extra_bytes(sp, e->n);
    return 0;
}

static void exec__run_forward(exec *e, int li, const float *x, int64_t step, int mode);

/* A transposed convolution's bias gradient from its output gradient: a
 * stripe's (slab's) share, over its own rows (planes). */
static void exec__bias_grad(const model_layer *l, int n, const float *dout, float *db)
{
    size_t plane = (size_t)l->out.d[1] * spatial_row_elems(&l->out);
    for (int k = 0; db && k < l->filters; k++) {
        double sum = 0.0;
        for (int i = 0; i < n; i++)
            for (size_t j = 0; j < plane; j++)
                sum += dout[((size_t)i * l->filters + k) * plane + j];
        db[k] = (float)sum;
    }
}

/* A layer's bfloat16 copy to the spill file (out) or back from it, through
 * the staging buffer a chunk at a time; the first failure sticks
 * (exec_spill_error) and the rest of the step does no more I/O. */
static void exec__spill(exec *e, int layer, bool out)
{
    size_t elems = (size_t)e->n * model_shape_elems(&e->m->layers[layer].out);
    const size_t chunk = FOOTPRINT_SPILL_STAGE / sizeof(uint16_t);
    float *act = e->act[layer];
    for (size_t k = 0; k < elems && !e->spill_err; k += chunk) {
        size_t len = elems - k < chunk ? elems - k : chunk;
        size_t bytes = FOOTPRINT_SPILL_ROUND(len * sizeof(uint16_t));
        off_t at = (off_t)(e->spill_off[layer] + k * sizeof(uint16_t));
        if (out)
            bf16_pack(e->spill_stage, act + k, len);
        int rc = out ? fsutil_pwrite_all(e->spill_fd, e->spill_stage, bytes, at)
                     : fsutil_pread_all(e->spill_fd, e->spill_stage, bytes, at);
        if (rc < 0) {
            e->spill_err = rc;
            return;
        }
        e->spill_bytes += bytes;
        if (!out)
            bf16_unpack(act + k, e->spill_stage, len);
    }
}

int exec_set_spill(exec *e, int fd, char *err, size_t errlen)
{
    const model *m = e->m;
    if (!m->spill_packed)
        return 0;
    e->spill_off = calloc((size_t)m->nlayers, sizeof(uint64_t));
    e->spill_stage = aligned_alloc(FOOTPRINT_SPILL_ALIGN, FOOTPRINT_SPILL_STAGE);
    if (!e->spill_off || !e->spill_stage) {
        free(e->spill_off);
        free(e->spill_stage);
        e->spill_off = NULL;
        e->spill_stage = NULL;
        snprintf(err, errlen, "out of memory for the spill file's staging buffer");
        return -ENOMEM;
    }
    uint64_t at = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (e->plan.packed[i]) {
            e->spill_off[i] = at;
            at += FOOTPRINT_SPILL_ROUND(memplan_packed_bytes(m, i, e->n));
        }
    e->spill = true;
    e->spill_fd = fd;
    e->spill_file = at;
    return 0;
}

/* Replays events of the plan: buffers take their places in the arena (a
 * gradient's first writer finds it zeroed), outputs the forward pass let
 * go are recomputed. */
static void exec__replay_events(exec *e, uint32_t first, uint32_t count, const float *x,
                                int64_t step)
{
    for (uint32_t k = 0; k < count; k++) {
        const memplan_event *ev = &e->plan.events[first + k];
        uint8_t *p = e->arena + ev->offset;
        switch ((enum memplan_kind)ev->kind) {
        case MEMPLAN_OUT:
            e->act[ev->layer] = (float *)p;
            break;
        case MEMPLAN_DOUT:
            e->dact[ev->layer] = (float *)p;
            e->direct[ev->layer] = ev->direct;
            if (ev->zero)
                kernels_zero((float *)p,
                             (size_t)e->n * model_shape_elems(&e->m->layers[ev->layer].out));
            break;
        case MEMPLAN_AUX:
            e->aux[ev->layer] = p;
            break;
        case MEMPLAN_SCRATCH:
            e->scratch = (float *)p;
            break;
        case MEMPLAN_LOSS:
            e->losssums = (double *)p;
            e->targets = (float *)p;
            e->lossgrad = e->targets + (size_t)e->n *
                                           model_shape_elems(&e->m->layers[e->m->nlayers - 1].out);
            break;
        case MEMPLAN_RECOMPUTE:
            exec__run_forward(e, ev->layer, x, step, EXEC__RECOMPUTE);
            e->recomputed++;
            break;
        case MEMPLAN_PACKED:
            e->packed[ev->layer] = (uint16_t *)p;
            break;
        case MEMPLAN_UNPACK:
            if (e->spill)
                exec__spill(e, ev->layer, false);
            else
                bf16_unpack(e->act[ev->layer], e->packed[ev->layer],
                            (size_t)e->n * model_shape_elems(&e->m->layers[ev->layer].out));
            break;
        case MEMPLAN_PACK: /* kept for the backward pass as bfloat16 */
            if (e->packing && e->spill)
                exec__spill(e, ev->layer, true);
            else if (e->packing)
                bf16_pack(e->packed[ev->layer], e->act[ev->layer],
                          (size_t)e->n * model_shape_elems(&e->m->layers[ev->layer].out));
            break;
        }
    }
}

/* The events before operation op. */
static void exec__replay(exec *e, int op, const float *x, int64_t step)
{
    const memplan_op *o = &e->plan.ops[op];
    exec__replay_events(e, o->first, o->count, x, step);
}

/* The events between the two passes of a split backward operation
 * (memplan_op.mid): returns false when it is not split. */
static bool exec__replay_mid(exec *e, int op, const float *x, int64_t step)
{
    const memplan_op *o = &e->plan.ops[op];
    if (!o->mid)
        return false;
    exec__replay_events(e, o->first + o->count, o->mid, x, step);
    return true;
}

void exec_zero_grads(exec *e)
{
    /* gradients are zeroed as the plan places them (memplan.h) */
}

/* Tensor i of layer l: weights, gradients. */
#define W(l, i) (e->w[(l)->first_tensor + (i)])
#define G(l, i) (e->g[(l)->first_tensor + (i)])
/* A dense layer's weights as the caller keeps them rounded, or NULL */
#define W16(l) (e->w16 ? e->w16[(l)->first_tensor] : NULL)

void exec_forward(exec *e, int li, const float *x, int64_t step, bool training)
{
    e->packing = training;
    exec__replay(e, memplan_forward_op(&e->plan, li), x, step);
    exec__run_forward(e, li, x, step, training ? EXEC__TRAIN : EXEC__EVAL);
    const model_layer *l = &e->m->layers[li];
    for (int k = 0; training && e->wa && e->wa[l->first_tensor] && k < l->ntensors; k++)
        memcpy(e->wa[l->first_tensor + k], e->w[l->first_tensor + k],
               e->m->tensors[l->first_tensor + k].elems * sizeof(float));
}

/* A layer's forward pass: in training (batch statistics, dropout, running
 * statistics updated), in evaluation, or again in training's backward pass
 * (EXEC__RECOMPUTE: the very output the forward pass made, from what it
 * saved, with no side effect). */
/* Dropout's masks: numbered by element over the samples, and a stripe's
 * elements apart from the other stripes' of its sample. */
static void exec__dropout(const exec *e, const model_layer *l, float *out, const float *in,
                          size_t count, const op_dropout_key *key, bool backward)
{
    uint64_t per = model_shape_elems(&l->out);
    void (*op)(float *, const float *, size_t, uint64_t, float, const op_dropout_key *) =
        backward ? op_dropout_backward : op_dropout_forward;
    if (e->parts.parts <= 1) {
        op(out, in, count, e->sample_offset * per, (float)l->rate, key);
        return;
    }
    for (size_t s = 0; s < count / per; s++)
        op(out + s * per, in + s * per, per,
           ((e->sample_offset + s) * (uint64_t)e->parts.parts + (uint64_t)e->parts.part) * per,
           (float)l->rate, key);
}

static void exec__run_forward(exec *e, int li, const float *x, int64_t step, int mode)
{
    const bool training = mode != EXEC__EVAL;
    const model_layer *l = &e->m->layers[li];
    /* a convolution's weights: made again, the copy of those its forward
     * pass used (exec.wa) */
    float *const *wt = mode == EXEC__RECOMPUTE && e->wa && e->wa[l->first_tensor] ? e->wa : e->w;
#define WT(l, i) (wt[(l)->first_tensor + (i)])
    int n = e->n;
    const float *in = exec_output(e, l->inputs[0], x);
    float *out = e->act[li];
    size_t count = (size_t)n * model_shape_elems(&l->out);
    int c = (int)l->in.d[0], hw = exec__hw(&l->in);
    const spatial_layer *sl = exec__sl(e, li);
    bool gather = sl && sl->kind == SPATIAL_GATHER;
    bool exchange = mode != EXEC__RECOMPUTE; /* a recomputation has the halo rows it kept */
    switch (l->type) {
    case LAYER_DENSE:
        if (exec__sparse_forward(e, li, out, in, step, training)) {
            /* the sparse kernels took it (exec_sparse.c) */
        } else if (e->m->mixed_precision) /* bfloat16 GEMMs, in the workspace */
            op_dense_forward_bf16(out, in, W(l, 0), W16(l), e->w16_stale,
                                  l->bias ? W(l, 1) : NULL, n, (int)l->in.d[0], (int)l->units,
                                  e->ws, e->ws_bytes);
        else
            op_dense_forward(out, in, W(l, 0), l->bias ? W(l, 1) : NULL, n, (int)l->in.d[0],
                             (int)l->units);
        if (l->fused) /* the relu that reads it, in place: its output is this one */
            op_relu_forward(out, out, count);
        break;
    case LAYER_CONV2D: {
        op_conv2d_params p = memplan_conv2d_params(l, n);
        if (gather && sl->in_place) { /* the kernel reads the halo rows where they are */
            op_conv2d_halo h = exec__conv_halo(e, li, false);
            const float *b = l->bias ? WT(l, 1) : NULL;
            int o = (int)l->out.d[1], bot = sl->bottom > 0 ? sl->bottom : 0;
            if (!exchange || o <= sl->top + bot) {
                if (exchange)
                    exec__gather_recv(e, li, in, 0.0f);
                op_conv2d_forward_halo(out, in, WT(l, 0), b, &p, &h, e->ws, e->ws_bytes);
                break;
            }
            /* the rows whose windows stay in the stripe while the halo rows travel */
            exec__gather_begin(e, li, in);
            op_conv2d_forward_rows(out, in, WT(l, 0), b, &p, &h, sl->top, o - bot, e->ws,
                                   e->ws_bytes);
            exec__gather_end(e, li, 0.0f);
            op_conv2d_forward_rows(out, in, WT(l, 0), b, &p, &h, 0, sl->top, e->ws, e->ws_bytes);
            op_conv2d_forward_rows(out, in, WT(l, 0), b, &p, &h, o - bot, o, e->ws, e->ws_bytes);
            break;
        }
        if (gather) { /* the stripe's rows with their halos, unpadded */
            p.h = exec__gather_in(e, li, in, exchange, 0.0f);
            p.pad_h = 0;
            in = e->hx;
        }
        if (!gather) { /* mixed precision: bfloat16 on oneDNN, in the workspace */
            /* in training, the input rounded into the saved state where the
             * plan keeps it there, for the weight gradient */
            bool mp = e->m->mixed_precision;
            size_t kb =
                mp && mode == EXEC__TRAIN && e->aux[li] ? memplan_aux_bytes(e->m, l, n) : 0;
            int rc = op_conv2d_forward_io(out, in, WT(l, 0), l->bias ? WT(l, 1) : NULL, &p, mp,
                                          exec__conv_blocked(e, l, li), e->ws, e->ws_bytes,
                                          kb ? e->aux[li] : NULL, kb);
            e->in_kept[li] = mp && rc == 2;
            break;
        }
        op_conv2d_forward(out, in, WT(l, 0), l->bias ? WT(l, 1) : NULL, &p, e->ws, e->ws_bytes);
        break;
    }
    case LAYER_CONV_TRANSPOSE2D: {
        op_conv_transpose2d_params p = footprint_convt_params(l, n);
        if (sl && sl->kind == SPATIAL_SCATTER) {
            p.pad_h = 0;
            op_conv_transpose2d_forward(e->hx, in, WT(l, 0), NULL, &p, e->ws, e->ws_bytes);
            exec__scatter_out(e, li, out, l->bias ? WT(l, 1) : NULL);
            break;
        }
        op_conv_transpose2d_forward(out, in, WT(l, 0), l->bias ? WT(l, 1) : NULL, &p, e->ws,
                                    e->ws_bytes);
        break;
    }
    case LAYER_MAX_POOL2D: {
        op_pool2d_params p = exec__pool(l, n);
        if (gather) { /* padding never wins a maximum */
            p.h = exec__gather_in(e, li, in, exchange, -INFINITY);
            p.pad_h = 0;
            in = e->hx;
        }
        op_maxpool2d_forward(out, e->aux[li], in, &p);
        break;
    }
    case LAYER_AVG_POOL2D: {
        op_pool2d_params p = exec__pool(l, n);
        if (gather) { /* padding counts as zeros (count_include_pad) */
            p.h = exec__gather_in(e, li, in, exchange, 0.0f);
            p.pad_h = 0;
            in = e->hx;
        }
        op_avgpool2d_forward(out, in, &p);
        break;
    }
    case LAYER_CONV3D: {
        op_conv3d_params p = exec__conv3d(l, n);
        const float *b = l->bias ? WT(l, 1) : NULL;
        if (gather) { /* the slab's planes with their halos, unpadded in depth */
            p.d = exec__gather_in(e, li, in, exchange, 0.0f);
            p.pad_d = 0;
            in = e->hx;
        }
        if (e->m->mixed_precision) /* bfloat16 on oneDNN where it has the kernels */
            op_conv3d_forward_bf16(out, in, WT(l, 0), b, &p, e->ws, e->ws_bytes);
        else
            op_conv3d_forward(out, in, WT(l, 0), b, &p, e->ws, e->ws_bytes);
        break;
    }
    case LAYER_CONV_TRANSPOSE3D: {
        op_conv_transpose3d_params p = exec__convt3d(l, n);
        if (sl && sl->kind == SPATIAL_SCATTER) { /* over the extended planes */
            p.pad_d = 0;
            exec__convt3d_forward(e, e->hx, in, WT(l, 0), NULL, &p);
            exec__scatter_out(e, li, out, l->bias ? WT(l, 1) : NULL);
            break;
        }
        exec__convt3d_forward(e, out, in, WT(l, 0), l->bias ? WT(l, 1) : NULL, &p);
        break;
    }
    case LAYER_MAX_POOL3D: {
        op_pool3d_params p = exec__pool3d(l, n);
        if (gather) { /* padding never wins a maximum */
            p.d = exec__gather_in(e, li, in, exchange, -INFINITY);
            p.pad_d = 0;
            in = e->hx;
        }
        op_maxpool3d_forward(out, e->aux[li], in, &p);
        break;
    }
    case LAYER_AVG_POOL3D: {
        op_pool3d_params p = exec__pool3d(l, n);
        if (gather) { /* padding counts as zeros (count_include_pad) */
            p.d = exec__gather_in(e, li, in, exchange, 0.0f);
            p.pad_d = 0;
            in = e->hx;
        }
        op_avgpool3d_forward(out, in, &p);
        break;
    }
    case LAYER_UPSAMPLE:
        if (l->in.ndim == 4 && sl && sl->kind == SPATIAL_BILINEAR) { /* a slab's trilinear */
            size_t planes = (size_t)n * c, hw2 = (size_t)spatial_row_elems(&l->in);
            int d = (int)l->in.d[1];
            float *kt = e->kept[li], *kb = kt + planes * hw2;
            if (exchange)
                exec__edge_rows_exchange(e, li, in);
            op_upsample_frame f = exec__frame(e, l);
            op_upsample3d_trilinear_forward_slab(
                out, in, n, c, d, (int)l->in.d[2], (int)l->in.d[3], (int)l->out.d[1],
                (int)l->out.d[2], (int)l->out.d[3], &f, e->parts.part > 0 ? kt : NULL,
                e->parts.part + 1 < e->parts.parts ? kb : NULL);
        } else if (l->in.ndim == 4) { /* a volume: trilinear or nearest */
            void (*up)(float *, const float *, int, int, int, int, int, int, int, int) =
                l->mode == UPSAMPLE_TRILINEAR ? op_upsample3d_trilinear_forward
                                              : op_upsample3d_nearest_forward;
            up(out, in, n, c, (int)l->in.d[1], (int)l->in.d[2], (int)l->in.d[3],
               (int)l->out.d[1], (int)l->out.d[2], (int)l->out.d[3]);
        } else if (sl && sl->kind == SPATIAL_BILINEAR) {
            size_t planes = (size_t)n * c;
            int h = (int)l->in.d[1], w = (int)l->in.d[2];
            float *kt = e->kept[li], *kb = kt + planes * w;
            if (exchange)
                exec__edge_rows_exchange(e, li, in);
            op_upsample_frame f = exec__frame(e, l);
            op_upsample_bilinear_forward_rows(out, in, n, c, h, w, (int)l->out.d[1],
                                              (int)l->out.d[2], &f, e->parts.part > 0 ? kt : NULL,
                                              e->parts.part + 1 < e->parts.parts ? kb : NULL);
        } else if (l->mode == UPSAMPLE_BILINEAR)
            op_upsample_bilinear_forward(out, in, n, c, (int)l->in.d[1], (int)l->in.d[2],
                                         (int)l->out.d[1], (int)l->out.d[2]);
        else
            op_upsample_nearest_forward(out, in, n, c, (int)l->in.d[1], (int)l->in.d[2],
                                        (int)l->out.d[1], (int)l->out.d[2]);
        break;
    case LAYER_CONCAT: {
        const float *ins[MODEL_MAX_INPUTS];
        int channels[MODEL_MAX_INPUTS];
        for (int i = 0; i < l->ninputs; i++) {
            ins[i] = exec_output(e, l->inputs[i], x);
            channels[i] = (int)exec__shape_of(e->m, l->inputs[i])->d[0];
        }
        op_concat_forward(out, ins, channels, l->ninputs, n, exec__hw(&l->out));
        break;
    }
    case LAYER_ADD:
        op_add_forward(out, in, exec_output(e, l->inputs[1], x), count);
        break;
    case LAYER_BATCH_NORM: {
        float *save = e->aux[li];
        if (mode == EXEC__RECOMPUTE) {
            if (e->blk[li])
                op_norm_affine_blk(out, in, save + 2 * c, save + 3 * c, n, c, hw, l->fused,
                                   op_conv2d_block_size());
            else
                op_norm_affine(out, in, save + 2 * c, save + 3 * c, n, c, hw, false, l->fused);
        } else if (training) {
            /* Running statistics are updated in the gradient buffers and go
             * up with the gradients, averaged over the replicas. */
            if (!e->micro_later) { /* later micro-batches update the statistics further */
                memcpy(G(l, 2), W(l, 2), (size_t)c * sizeof(float));
                memcpy(G(l, 3), W(l, 3), (size_t)c * sizeof(float));
            }
            if (sl || e->parts.sync_batchnorm) { /* statistics over every stripe (replica) */
                exec__red rc = {e, exec__tag(li, EXEC__SUM_FWD), e->parts.sync_batchnorm};
                op_reduce r = {exec__red_sum, &rc};
                op_batchnorm_forward_train_parts(out, save, save + c, G(l, 2), G(l, 3), in, W(l, 0),
                                                 W(l, 1), n, c, hw, (float)l->momentum,
                                                 (float)l->eps, l->fused, &r, e->red);
            } else {
                if (e->blk[li])
                    op_batchnorm_forward_train_blk(out, save, save + c, G(l, 2), G(l, 3), in,
                                                   W(l, 0), W(l, 1), n, c, hw, (float)l->momentum,
                                                   (float)l->eps, l->fused, op_conv2d_block_size());
                else
                    op_batchnorm_forward_train(out, save, save + c, G(l, 2), G(l, 3), in, W(l, 0),
                                               W(l, 1), n, c, hw, (float)l->momentum,
                                               (float)l->eps, l->fused);
            }
            for (int i = 0; i < c; i++) {
                if (!e->micro_more) {
                    G(l, 2)[i] *= e->replica_share;
                    G(l, 3)[i] *= e->replica_share;
                }
                /* the scale and shift the output was made with, to make it again */
                op_norm_coeffs(save[c + i], save[i], W(l, 0) ? W(l, 0)[i] : 1.0f,
                               W(l, 1) ? W(l, 1)[i] : 0.0f, &save[2 * c + i], &save[3 * c + i]);
            }
        } else {
            if (e->blk[li])
                op_batchnorm_forward_eval_blk(out, in, W(l, 0), W(l, 1), W(l, 2), W(l, 3), n, c,
                                              hw, (float)l->eps, l->fused, op_conv2d_block_size());
            else
                op_batchnorm_forward_eval(out, in, W(l, 0), W(l, 1), W(l, 2), W(l, 3), n, c, hw,
                                          (float)l->eps, l->fused);
        }
        break;
    }
    case LAYER_GROUP_NORM: {
        float *save = e->aux[li];
        size_t ng = (size_t)n * l->groups, nc = (size_t)n * c;
        if (mode == EXEC__RECOMPUTE) {
            op_norm_affine(out, in, save + 2 * ng, save + 2 * ng + nc, n, c, hw, true, l->fused);
            break;
        }
        if (sl) { /* statistics over every stripe of each sample */
            exec__red rc = {e, exec__tag(li, EXEC__SUM_FWD), false};
            op_reduce r = {exec__red_sum, &rc};
            op_groupnorm_forward_parts(out, save, save + ng, in, W(l, 0), W(l, 1), n, c, hw,
                                       l->groups, (float)l->eps, l->fused, &r, e->red);
        } else {
            op_groupnorm_forward(out, save, save + ng, in, W(l, 0), W(l, 1), n, c, hw, l->groups,
                                 (float)l->eps, l->fused);
        }
        int cg = c / l->groups;
        for (int s = 0; s < n; s++)
            for (int ch = 0; ch < c; ch++) {
                size_t g = (size_t)s * l->groups + ch / cg, k = (size_t)s * c + ch;
                op_norm_coeffs(save[ng + g], save[g], W(l, 0) ? W(l, 0)[ch] : 1.0f,
                               W(l, 1) ? W(l, 1)[ch] : 0.0f, &save[2 * ng + k],
                               &save[2 * ng + nc + k]);
            }
        break;
    }
    case LAYER_RELU:
        if (!l->fused) /* else its norm or dense layer applied it: the output is theirs */
            op_relu_forward(out, in, count);
        break;
    case LAYER_LEAKY_RELU: op_leaky_relu_forward(out, in, count, (float)l->negative_slope); break;
    case LAYER_GELU: op_gelu_forward(out, in, count); break;
    case LAYER_SIGMOID: op_sigmoid_forward(out, in, count); break;
    case LAYER_TANH: op_tanh_forward(out, in, count); break;
    case LAYER_DROPOUT:
        if (training) {
            op_dropout_key key = {.seed = e->seed, .step = step, .layer = li};
            exec__dropout(e, l, out, in, count, &key, false);
        } else {
            kernels_copy(out, in, count);
        }
        break;
    case LAYER_FLATTEN:
    case LAYER_TYPE_COUNT:
        break;
    }
}
#undef WT

double exec_loss(exec *e, const float *x, const void *labels, float scale)
{
    exec__replay(e, memplan_loss_op(&e->plan), x, -1);
    const model *m = e->m;
    int last = m->nlayers - 1;
    const model_shape *o = &m->layers[last].out;
    const float *logits = exec_output(e, last, x);
    float *dlogits = exec__dout(e, last);
    int n = e->n;
    op_labels lv = {labels, e->labels_u8};
    /* A stripe holds `rows` of each sample's rows: means over its elements
     * are that share of the whole sample's; Dice's sums are totalled, and
     * each stripe counts 1/parts of the whole sample's Dice (ssce_dice:
     * of its whole loss). */
    double parts = e->parts.parts > 1 ? e->parts.parts : 1;
    double share = e->parts.parts > 1 ? (double)e->parts.sp->rows / (double)e->parts.sp->full_h
                                       : 1.0;
    exec__red rc = {e, exec__tag(m->nlayers, EXEC__SUM_LOSS), false};
    op_reduce r = {exec__red_sum, &rc};
    /* the pixel losses' rows: a volume's planes of rows (d * h) */
    int oh = o->ndim == 4 ? (int)(o->d[1] * o->d[2]) : (int)o->d[1];
    int ow = o->ndim == 4 ? (int)o->d[3] : (int)o->d[2];
    switch (m->loss) {
    case LOSS_SOFTMAX_CROSS_ENTROPY:
        return op_softmax_xent(dlogits, logits, lv, n, (int)o->d[0], scale);
    case LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY:
        return op_softmax_xent_pixels(dlogits, logits, lv, n, (int)o->d[0], oh, ow,
                                      (float)(scale * share)) * share;
    case LOSS_MULTILABEL_BCE:
        return op_multilabel_bce(dlogits, logits, lv, n, (int)o->d[0], oh, ow,
                                 (float)(scale * share)) * share;
    case LOSS_SSCE_DICE:
        /* its sums are totalled over the stripes: each stripe has the whole
         * samples' loss */
        return parts > 1 ? op_ssce_dice_parts(dlogits, logits, lv, n, (int)o->d[0], oh, ow,
                                              m->include_background, scale, &r, e->losssums) /
                               parts
                         : op_ssce_dice(dlogits, logits, lv, n, (int)o->d[0], oh, ow,
                                        m->include_background, scale, e->losssums);
    default:
        break;
    }
    /* Sigmoid losses: a 0/1 target per logit, or one-hot channels from a
     * class per pixel. */
    int per = (int)model_shape_elems(o);
    int ch = o->ndim >= 3 ? (int)o->d[0] : 1;
    int hw = exec__hw(o);
    for (int s = 0; s < n; s++) {
        size_t lab = (size_t)s * e->label_elems;
        float *t = e->targets + (size_t)s * per;
        if (ch > 1 && o->ndim >= 3) {
            for (int k = 0; k < ch; k++)
                for (int i = 0; i < hw; i++) {
                    int32_t v = op_label(lv, lab + (size_t)i);
                    if (v < 0 || v >= ch)
                        return NAN;
                    t[(size_t)k * hw + i] = v == k ? 1.0f : 0.0f;
                }
        } else {
            for (int i = 0; i < per; i++) {
                int32_t v = op_label(lv, lab + (size_t)i);
                if (v < 0 || v > 1)
                    return NAN;
                t[i] = (float)v;
            }
        }
    }
    float bscale = (float)(scale * share);
    if (m->loss == LOSS_BCE_WITH_LOGITS)
        return op_bce_logits(dlogits, logits, e->targets, n, per, bscale) * share;
    if (m->loss == LOSS_DICE)
        return parts > 1 ? op_dice_logits_parts(dlogits, logits, e->targets, n, per, DICE_EPS,
                                                scale, &r, e->red) / parts
                         : op_dice_logits(dlogits, logits, e->targets, n, per, DICE_EPS, scale);
    double loss = op_bce_logits(dlogits, logits, e->targets, n, per, bscale) * share;
    loss += parts > 1 ? op_dice_logits_parts(e->lossgrad, logits, e->targets, n, per, DICE_EPS,
                                             scale, &r, e->red) / parts
                      : op_dice_logits(e->lossgrad, logits, e->targets, n, per, DICE_EPS, scale);
    size_t count = (size_t)n * per;
    for (size_t i = 0; i < count; i++)
        dlogits[i] += e->lossgrad[i];
    return loss;
}

static void exec__backward(exec *e, const model_layer *l, int li, const float *x, int64_t step);

void exec_backward(exec *e, int li, const float *x, int64_t step)
{
    const model_layer *l = &e->m->layers[li];
    if (model_layer_is_view(l)) /* its consumers added into its input's gradient (a fused
                                  * relu's batch norm takes its gradient for it) */
        return;
    exec__replay(e, memplan_backward_op(&e->plan, li), x, step);
    /* a later micro-batch: the layer's weight gradients are made aside and
     * added to the step's */
    float *keep[4]; /* a layer has at most 4 tensors: weight, bias, running mean and variance */
    if (e->accumulate) {
        float *p = e->gtmp;
        for (int k = 0; k < l->ntensors; k++) {
            const model_tensor *mt = &e->m->tensors[l->first_tensor + k];
            keep[k] = e->g[mt->id];
            if (mt->trainable) {
                kernels_zero(p, mt->elems);
                e->g[mt->id] = p;
                p += mt->elems;
            }
        }
    }
    exec__backward(e, l, li, x, step);
    if (e->accumulate)
        for (int k = 0; k < l->ntensors; k++) {
            const model_tensor *mt = &e->m->tensors[l->first_tensor + k];
            if (mt->trainable)
                op_add_into(keep[k], e->g[mt->id], mt->elems);
            e->g[mt->id] = keep[k];
        }
}

static void exec__backward(exec *e, const model_layer *l, int li, const float *x, int64_t step)
{
    int n = e->n;
    const float *in = exec_output(e, l->inputs[0], x);
    const float *dout = e->dact[li];
    size_t count = (size_t)n * model_shape_elems(&l->out);
    size_t in_count = (size_t)n * model_shape_elems(&l->in);
    int c = (int)l->in.d[0], hw = exec__hw(&l->in);
    int src = l->inputs[0] < 0 ? -1 : e->res[l->inputs[0]]; /* through flatten views */
    /* the gradient of inputs[0]: written whole where the plan says it is new
     * here, else made in the scratch buffer and added below */
    bool fresh = src >= 0 && e->direct[src];
    float *din = fresh ? exec__dout(e, src) : e->scratch;
    bool has_din = !fresh;
    const spatial_layer *sl = exec__sl(e, li);
    bool gather = sl && sl->kind == SPATIAL_GATHER;
    switch (l->type) {
    case LAYER_DENSE:
        if (src < 0)
            din = NULL;
        if (l->fused && e->m->mixed_precision) { /* the relu's gradient in the same pass */
            op_dense_relu_backward_bf16(din, G(l, 0), l->bias ? G(l, 1) : NULL, e->dact[li],
                                        exec_output(e, li, x), in, W(l, 0), W16(l), e->w16_stale,
                                        n, (int)l->in.d[0], (int)l->units, e->ws, e->ws_bytes);
            break;
        }
        if (l->fused) /* its relu's gradient, masked in place where the output is not positive */
            op_relu_backward(e->dact[li], dout, exec_output(e, li, x), count);
        if (exec__sparse_backward(e, li, din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, step))
            break; /* the sparse kernels (exec_sparse.c) */
        if (e->m->mixed_precision)
            op_dense_backward_bf16(din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, W(l, 0),
                                   W16(l), e->w16_stale, n, (int)l->in.d[0], (int)l->units,
                                   e->ws, e->ws_bytes);
        else
            op_dense_backward(din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, W(l, 0), n,
                              (int)l->in.d[0], (int)l->units);
        break;
    case LAYER_CONV2D: {
        op_conv2d_params p = memplan_conv2d_params(l, n);
        if (src < 0)
            din = NULL;
        if (gather && sl->in_place) {
            /* the gradients of the neighbours' rows first, into e->hx, and
             * on their way while the weight and own input gradients are made */
            if (din) {
                op_conv2d_halo hr = exec__conv_halo(e, li, true);
                op_conv2d_backward_halo_rows(dout, W(l, 0), &p, &hr, e->ws, e->ws_bytes);
                exec__gather_back_begin(e, li);
            }
            op_conv2d_halo h = exec__conv_halo(e, li, false);
            op_conv2d_backward_halo(din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, W(l, 0), &p,
                                    &h, e->ws, e->ws_bytes);
            break;
        }
        if (gather) { /* over the extended rows; the halo rows' gradients go back */
            p.h = exec__gather_in(e, li, in, false, 0.0f);
            p.pad_h = 0;
            op_conv2d_backward(din ? e->hd : NULL, G(l, 0), l->bias ? G(l, 1) : NULL, dout, e->hx,
                               W(l, 0), &p, e->ws, e->ws_bytes);
            if (din)
                exec__gather_din(e, li, din);
            break;
        }
        e->inputs_kept += e->in_kept[li];
        op_conv2d_backward_io(din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, W(l, 0), &p,
                              e->m->mixed_precision, exec__conv_blocked(e, l, li), e->ws,
                              e->ws_bytes, e->in_kept[li] ? e->aux[li] : NULL,
                              e->in_kept[li] ? memplan_aux_bytes(e->m, l, n) : 0);
        break;
    }
    case LAYER_CONV_TRANSPOSE2D: {
        op_conv_transpose2d_params p = footprint_convt_params(l, n);
        if (src < 0)
            din = NULL;
        if (sl && sl->kind == SPATIAL_SCATTER) {
            /* the gradients of the neighbours' rows it wrote, then this
             * stripe's share of the bias gradient from its own rows */
            exec__scatter_dout(e, li, dout);
            p.pad_h = 0;
            op_conv_transpose2d_backward(din, G(l, 0), NULL, e->hx, in, W(l, 0), &p, e->ws,
                                         e->ws_bytes);
            exec__bias_grad(l, n, dout, l->bias ? G(l, 1) : NULL);
            break;
        }
        op_conv_transpose2d_backward(din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, W(l, 0),
                                     &p, e->ws, e->ws_bytes);
        break;
    }
    case LAYER_MAX_POOL2D: {
        if (src < 0) /* no weights: a first layer has nothing to compute */
            break;
        op_pool2d_params p = exec__pool(l, n);
        if (gather) {
            p.h = exec__gather_in(e, li, in, false, -INFINITY);
            p.pad_h = 0;
            op_maxpool2d_backward(e->hd, dout, e->aux[li], &p);
            exec__gather_din(e, li, din);
            break;
        }
        op_maxpool2d_backward(din, dout, e->aux[li], &p);
        break;
    }
    case LAYER_AVG_POOL2D: {
        if (src < 0) /* no weights: a first layer has nothing to compute */
            break;
        op_pool2d_params p = exec__pool(l, n);
        if (gather) {
            p.h = exec__gather_in(e, li, in, false, 0.0f);
            p.pad_h = 0;
            op_avgpool2d_backward(e->hd, dout, &p);
            exec__gather_din(e, li, din);
            break;
        }
        op_avgpool2d_backward(din, dout, &p);
        break;
    }
    case LAYER_CONV3D: {
        op_conv3d_params p = exec__conv3d(l, n);
        if (src < 0) /* a first layer: its weight gradient alone */
            din = NULL;
        float *db = l->bias ? G(l, 1) : NULL;
        float *dx = din;
        if (gather) { /* over the extended planes; the halo planes' gradients go back */
            p.d = exec__gather_in(e, li, in, false, 0.0f);
            p.pad_d = 0;
            in = e->hx;
            dx = din ? e->hd : NULL;
        }
        int (*bf16)(float *, float *, float *, const float *, const float *, const float *,
                    const op_conv3d_params *, void *, size_t) = op_conv3d_backward_bf16;
        if (src >= 0 && e->plan.ops[memplan_backward_op(&e->plan, li)].mid) {
            /* two passes: the weight gradient, then (the input freed and
             * its gradient placed, maybe where it was) the input's */
            if (e->m->mixed_precision)
                bf16(NULL, G(l, 0), db, dout, in, W(l, 0), &p, e->ws, e->ws_bytes);
            else
                op_conv3d_backward(NULL, G(l, 0), db, dout, in, W(l, 0), &p, e->ws, e->ws_bytes);
            exec__replay_mid(e, memplan_backward_op(&e->plan, li), x, step);
            fresh = e->direct[src];
            din = fresh ? exec__dout(e, src) : e->scratch;
            has_din = !fresh;
            dx = gather ? e->hd : din;
            if (e->m->mixed_precision)
                bf16(dx, NULL, NULL, dout, NULL, W(l, 0), &p, e->ws, e->ws_bytes);
            else
                op_conv3d_backward(dx, NULL, NULL, dout, NULL, W(l, 0), &p, e->ws, e->ws_bytes);
        } else if (e->m->mixed_precision) {
            bf16(dx, G(l, 0), db, dout, in, W(l, 0), &p, e->ws, e->ws_bytes);
        } else {
            op_conv3d_backward(dx, G(l, 0), db, dout, in, W(l, 0), &p, e->ws, e->ws_bytes);
        }
        if (gather && din)
            exec__gather_din(e, li, din);
        break;
    }
    case LAYER_CONV_TRANSPOSE3D: {
        op_conv_transpose3d_params p = exec__convt3d(l, n);
        if (src < 0)
            din = NULL;
        if (sl && sl->kind == SPATIAL_SCATTER) { /* as conv_transpose2d's */
            exec__scatter_dout(e, li, dout);
            p.pad_d = 0;
            exec__convt3d_backward(e, din, G(l, 0), NULL, e->hx, in, W(l, 0), &p);
            exec__bias_grad(l, n, dout, l->bias ? G(l, 1) : NULL);
            break;
        }
        exec__convt3d_backward(e, din, G(l, 0), l->bias ? G(l, 1) : NULL, dout, in, W(l, 0), &p);
        break;
    }
    case LAYER_MAX_POOL3D: {
        if (src < 0) /* no weights: a first layer has nothing to compute */
            break;
        op_pool3d_params p = exec__pool3d(l, n);
        if (gather) {
            p.d = exec__gather_in(e, li, in, false, -INFINITY);
            p.pad_d = 0;
            op_maxpool3d_backward(e->hd, dout, e->aux[li], &p);
            exec__gather_din(e, li, din);
            break;
        }
        op_maxpool3d_backward(din, dout, e->aux[li], &p);
        break;
    }
    case LAYER_AVG_POOL3D: {
        if (src < 0) /* no weights: a first layer has nothing to compute */
            break;
        op_pool3d_params p = exec__pool3d(l, n);
        if (gather) {
            p.d = exec__gather_in(e, li, in, false, 0.0f);
            p.pad_d = 0;
            op_avgpool3d_backward(e->hd, dout, &p);
            exec__gather_din(e, li, din);
            break;
        }
        op_avgpool3d_backward(din, dout, &p);
        break;
    }
    case LAYER_UPSAMPLE:
        if (l->in.ndim == 4 && sl && sl->kind == SPATIAL_BILINEAR) {
            size_t hw2 = (size_t)n * c * spatial_row_elems(&l->in);
            op_upsample_frame f = exec__frame(e, l);
            op_upsample3d_trilinear_backward_slab(
                din, dout, n, c, (int)l->in.d[1], (int)l->in.d[2], (int)l->in.d[3],
                (int)l->out.d[1], (int)l->out.d[2], (int)l->out.d[3], &f,
                e->parts.part > 0 ? e->hd : NULL,
                e->parts.part + 1 < e->parts.parts ? e->hd + hw2 : NULL);
        } else if (l->in.ndim == 4) {
            void (*up)(float *, const float *, int, int, int, int, int, int, int, int) =
                l->mode == UPSAMPLE_TRILINEAR ? op_upsample3d_trilinear_backward
                                              : op_upsample3d_nearest_backward;
            up(din, dout, n, c, (int)l->in.d[1], (int)l->in.d[2], (int)l->in.d[3],
               (int)l->out.d[1], (int)l->out.d[2], (int)l->out.d[3]);
        } else if (sl && sl->kind == SPATIAL_BILINEAR) {
            size_t planes = (size_t)n * c;
            op_upsample_frame f = exec__frame(e, l);
            op_upsample_bilinear_backward_rows(
                din, dout, n, c, (int)l->in.d[1], (int)l->in.d[2], (int)l->out.d[1],
                (int)l->out.d[2], &f, e->parts.part > 0 ? e->hd : NULL,
                e->parts.part + 1 < e->parts.parts ? e->hd + planes * l->in.d[2] : NULL);
        } else if (l->mode == UPSAMPLE_BILINEAR)
            op_upsample_bilinear_backward(din, dout, n, c, (int)l->in.d[1], (int)l->in.d[2],
                                          (int)l->out.d[1], (int)l->out.d[2]);
        else
            op_upsample_nearest_backward(din, dout, n, c, (int)l->in.d[1], (int)l->in.d[2],
                                         (int)l->out.d[1], (int)l->out.d[2]);
        break;
    case LAYER_CONCAT: {
        float *dins[MODEL_MAX_INPUTS];
        int channels[MODEL_MAX_INPUTS];
        size_t sizes[MODEL_MAX_INPUTS];
        float *p = e->scratch;
        for (int i = 0; i < l->ninputs; i++) {
            const model_shape *s = exec__shape_of(e->m, l->inputs[i]);
            channels[i] = (int)s->d[0];
            sizes[i] = (size_t)n * model_shape_elems(s);
            float *target = exec__dout(e, l->inputs[i]);
            bool whole = target && e->direct[e->res[l->inputs[i]]];
            dins[i] = whole ? target : target ? p : NULL;
            p += sizes[i];
        }
        op_concat_backward(dins, dout, channels, l->ninputs, n, exec__hw(&l->out));
        for (int i = 0; i < l->ninputs; i++)
            if (dins[i] && dins[i] != exec__dout(e, l->inputs[i]))
                op_add_into(exec__dout(e, l->inputs[i]), dins[i], sizes[i]);
        has_din = false;
        break;
    }
    case LAYER_ADD:
        /* d(a + b) = dout for both: copied where the plan says the input's
         * gradient is new here (not zeroed), else added (and a + a's
         * second time) */
        for (int i = 0; i < 2; i++) {
            float *d = exec__dout(e, l->inputs[i]);
            if (!d)
                continue;
            if (e->direct[e->res[l->inputs[i]]] && !(i == 1 && d == exec__dout(e, l->inputs[0])))
                kernels_copy(d, dout, count);
            else
                op_add_into(d, dout, count);
        }
        has_din = false;
        break;
    case LAYER_BATCH_NORM: {
        const float *save = e->aux[li];
        /* a fused relu: dout is its output's gradient, masked where the
         * norm's output (from the scale and shift it was made with) was not
         * positive */
        const float *relu_a = l->fused ? save + 2 * c : NULL, *relu_b = l->fused ? save + 3 * c : NULL;
        if (sl || e->parts.sync_batchnorm) {
            exec__red rc = {e, exec__tag(li, EXEC__SUM_BWD), e->parts.sync_batchnorm};
            op_reduce r = {exec__red_sum, &rc};
            op_batchnorm_backward_parts(src >= 0 ? din : NULL, G(l, 0), G(l, 1), dout, in, W(l, 0),
                                        save, save + c, n, c, hw, relu_a, relu_b, &r, e->red);
            break;
        }
        if (e->blk[li])
            op_batchnorm_backward_blk(din, G(l, 0), G(l, 1), dout, in, W(l, 0), save, save + c, n,
                                      c, hw, relu_a, relu_b, op_conv2d_block_size());
        else
            op_batchnorm_backward(din, G(l, 0), G(l, 1), dout, in, W(l, 0), save, save + c, n, c,
                                  hw, relu_a, relu_b);
        break;
    }
    case LAYER_GROUP_NORM: {
        const float *save = e->aux[li];
        size_t ng = (size_t)n * l->groups;
        if (l->fused) /* its relu's gradient, masked in place: dout the norm's output's */
            op_norm_relu_mask(e->dact[li], in, save + 2 * ng, save + 2 * ng + (size_t)n * c, n, c,
                              hw, true);
        if (sl) {
            exec__red rc = {e, exec__tag(li, EXEC__SUM_BWD), false};
            op_reduce r = {exec__red_sum, &rc};
            op_groupnorm_backward_parts(src >= 0 ? din : NULL, G(l, 0), G(l, 1), dout, in, W(l, 0),
                                        save, save + (size_t)n * l->groups, n, c, hw, l->groups,
                                        &r, e->red);
            break;
        }
        op_groupnorm_backward(din, G(l, 0), G(l, 1), dout, in, W(l, 0), save,
                              save + (size_t)n * l->groups, n, c, hw, l->groups);
        break;
    }
    case LAYER_RELU: op_relu_backward(din, dout, in, count); break;
    case LAYER_LEAKY_RELU:
        op_leaky_relu_backward(din, dout, in, count, (float)l->negative_slope);
        break;
    case LAYER_GELU: op_gelu_backward(din, dout, in, count); break;
    case LAYER_SIGMOID: op_sigmoid_backward(din, dout, e->act[li], count); break;
    case LAYER_TANH: op_tanh_backward(din, dout, e->act[li], count); break;
    case LAYER_DROPOUT: {
        op_dropout_key key = {.seed = e->seed, .step = step, .layer = li};
        exec__dropout(e, l, din, dout, count, &key, true);
        break;
    }
    case LAYER_FLATTEN:
    case LAYER_TYPE_COUNT:
        has_din = false;
        break;
    }
    if (has_din && din && src >= 0)
        op_add_into(exec__dout(e, src), din, in_count);
    if (sl && src >= 0) { /* the gradients of the neighbours' rows go to them */
        if (gather && sl->in_place) { /* begun in the switch */
            exec__gather_back_end(e, li, exec__dout(e, src));
        } else if (gather && (l->type == LAYER_CONV2D || l->type == LAYER_MAX_POOL2D ||
                              l->type == LAYER_AVG_POOL2D || l->type == LAYER_CONV3D ||
                              l->type == LAYER_MAX_POOL3D || l->type == LAYER_AVG_POOL3D)) {
            exec__gather_back_begin(e, li);
            exec__gather_back_end(e, li, exec__dout(e, src));
        }
        else if (sl->kind == SPATIAL_BILINEAR && l->type == LAYER_UPSAMPLE)
            exec__halo_back(e, li, (size_t)n * c, (int)l->in.d[1], (int)spatial_row_elems(&l->in), e->hd, 1,
                            e->hd + (size_t)n * c * spatial_row_elems(&l->in), 1, exec__dout(e, src));
    }
    for (int k = 0; k < l->ninputs; k++) /* written: later writers add */
        if (l->inputs[k] >= 0 && e->res[l->inputs[k]] >= 0)
            e->direct[e->res[l->inputs[k]]] = false;
}

void exec_forward_part(exec *e, int li, uint64_t r0, uint64_t r1, bool first, bool last,
                       const float *x, int64_t step, bool training)
{
    const model_layer *l = &e->m->layers[li];
    int n = e->n, in_f = (int)l->in.d[0], units = (int)l->units;
    if (first) {
        e->packing = training;
        exec__replay(e, memplan_forward_op(&e->plan, li), x, step);
        exec__sparse_part(e, li);
    }
    const float *in = exec_output(e, l->inputs[0], x);
    float *out = e->act[li];
    if (n > 0 && r1 > r0 && in_f > 0)
        kern_sgemm(0, 1, n, (int)(r1 - r0), in_f, 1.0f, in,
                    in_f, W(l, 0), in_f, 0.0f, out + r0, units);
    else
        for (int i = 0; i < n; i++)
            memset(out + (size_t)i * units + r0, 0, (r1 - r0) * sizeof(float));
    if (!last)
        return;
    if (l->bias)
        for (int i = 0; i < n; i++) {
            float *row = out + (size_t)i * units;
            const float *b = W(l, 1);
            for (int o = 0; o < units; o++)
                row[o] += b[o];
        }
    if (l->fused) /* its relu, once every part is in */
        op_relu_forward(out, out, (size_t)n * units);
}

void exec_backward_part(exec *e, int li, uint64_t r0, uint64_t r1, bool first, bool last,
                        const float *x, int64_t step)
{
    const model_layer *l = &e->m->layers[li];
    int n = e->n, in_f = (int)l->in.d[0], units = (int)l->units, rows = (int)(r1 - r0);
    if (first)
        exec__replay(e, memplan_backward_op(&e->plan, li), x, step);
    const float *in = exec_output(e, l->inputs[0], x);
    const float *dout = e->dact[li];
    int src = l->inputs[0] < 0 ? -1 : e->res[l->inputs[0]];
    bool fresh = src >= 0 && e->direct[src];
    float *din = src < 0 ? NULL : fresh ? exec__dout(e, src) : e->scratch;
    if (first && l->fused) /* its relu's gradient, masked in place before any part reads it */
        op_relu_backward(e->dact[li], dout, exec_output(e, li, x), (size_t)n * units);
    if (rows > 0 && in_f > 0) {
        if (n > 0)
            kern_sgemm(1, 0, rows, in_f, n, 1.0f, dout + r0,
                        units, in, in_f, 0.0f, G(l, 0), in_f);
        else
            memset(G(l, 0), 0, (size_t)rows * (size_t)in_f * sizeof(float));
        /* the input gradient: the parts' products summed, the first written */
        if (din && n > 0)
            kern_sgemm(0, 0, n, in_f, rows, 1.0f, dout + r0,
                        units, W(l, 0), in_f, first ? 0.0f : 1.0f, din, in_f);
    }
    if (!last)
        return;
    if (l->bias) {
        float *db = G(l, 1);
        memset(db, 0, (size_t)units * sizeof(float));
        for (int i = 0; i < n; i++) {
            const float *row = dout + (size_t)i * units;
            for (int o = 0; o < units; o++)
                db[o] += row[o];
        }
    }
    if (din && !fresh)
        op_add_into(exec__dout(e, src), din, (size_t)n * model_shape_elems(&l->in));
    for (int k = 0; k < l->ninputs; k++) /* written: later writers add */
        if (l->inputs[k] >= 0 && e->res[l->inputs[k]] >= 0)
            e->direct[e->res[l->inputs[k]]] = false;
}

void exec_set_batch(exec *e, int n)
{
    e->n = n;
    /* the layouts of the batch size now (a convolution's may differ); with
     * no memory for the choice, every tensor plain: always right */
    if (n != e->blk_n)
        exec__layouts(e);
}

/* Whether class c is in the mask of ignored classes (bits 0 .. 63). */
static bool exec__ignored(uint64_t mask, int c)
{
    return c >= 0 && c < 64 && (mask >> c & 1);
}

int exec_eval(exec *e, const float *x, const void *labels, exec_metrics *mt)
{
    const model *m = e->m;
    int last = m->nlayers - 1;
    const model_shape *o = &m->layers[last].out;
    const float *logits = exec_output(e, last, x);
    double loss = exec_loss(e, x, labels, 0.0f);
    if (!isfinite(loss))
        return -EINVAL;
    mt->loss += loss;
    if (e->parts.part == 0) /* a sample is counted once, by its first stripe */
        mt->samples += (uint64_t)e->n;
    op_labels lv = {labels, e->labels_u8};
    if (m->loss == LOSS_SOFTMAX_CROSS_ENTROPY && o->ndim == 1) {
        int classes = (int)o->d[0];
        for (int s = 0; s < e->n; s++) {
            const float *row = logits + (size_t)s * classes;
            int best = 0;
            for (int c = 1; c < classes; c++)
                if (row[c] > row[best])
                    best = c;
            mt->correct += best == op_label(lv, (size_t)s);
        }
        return 0;
    }
    /* Segmentation: a class per pixel. */
    int ch = o->ndim >= 3 ? (int)o->d[0] : 1;
    int hw = exec__hw(o);
    uint32_t classes = ch > 1 ? (uint32_t)ch : 2;
    if (classes > EXEC_MAX_CLASSES)
        classes = EXEC_MAX_CLASSES;
    mt->classes = classes;
    /* the classes evaluation leaves out of the mean IoU (the Model Zoo's
     * eval_ignore_classes): nothing counted for them, so that their union
     * is empty; the other classes' counts are as without */
    uint64_t ignore = 0;
    if (m->loss == LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY || m->loss == LOSS_SSCE_DICE ||
        m->loss == LOSS_MULTILABEL_BCE)
        ignore = m->eval_ignore;
    for (int s = 0; s < e->n; s++) {
        const float *img = logits + (size_t)s * ch * hw;
        size_t lab = (size_t)s * e->label_elems;
        for (int i = 0; i < hw; i++) {
            int pred = 0;
            if (ch == 1) {
                pred = img[i] > 0;
            } else {
                for (int c = 1; c < ch; c++)
                    if (img[(size_t)c * hw + i] > img[(size_t)pred * hw + i])
                        pred = c;
            }
            int truth = op_label(lv, lab + (size_t)i);
            mt->correct += pred == truth;
            bool pred_in = (uint32_t)pred < classes && !exec__ignored(ignore, pred);
            bool truth_in = (uint32_t)truth < classes && !exec__ignored(ignore, truth);
            if (pred_in)
                mt->uni[pred]++;
            if (truth_in && truth != pred)
                mt->uni[truth]++;
            if (pred == truth && pred_in)
                mt->inter[pred]++;
        }
    }
    return 0;
}
