/* The lean memory plan (common/memplan/memplan.c): checked against an
 * independent reading of what each operation reads, and trained: the
 * executor following it gives bitwise the weights of the reference plan,
 * which keeps every buffer. */
#include <check.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "exec.h"
#include "kernels.h"
#include "kernels_internal.h" /* kern__conv_have_onednn */
#include "memplan.h"
#include "op_conv2d.h"
#include "rng.h"
#include "toml.h"

/* A model file with its input shape replaced. */
static model *load(const char *file, const char *from, const char *to)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/%s", MODELS_DIR, file);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    static char text[1 << 16], out[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    char *at = from ? strstr(text, from) : NULL;
    if (from)
        ck_assert_msg(at != NULL, "%s has no %s", file, from);
    if (at)
        snprintf(out, sizeof(out), "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else
        snprintf(out, sizeof(out), "%s", text);
    toml_value *root = toml_parse(out, strlen(out), file, err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    model *m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s: %s", file, err);
    toml_free(root);
    return m;
}

/* ---- the plan against what each operation reads ---- */

/* The rules, written down again: which backward passes read their input
 * or their own output. */
static bool reads_input(layer_type t)
{
    return t == LAYER_DENSE || t == LAYER_CONV2D || t == LAYER_CONV_TRANSPOSE2D ||
           t == LAYER_BATCH_NORM || t == LAYER_GROUP_NORM || t == LAYER_RELU ||
           t == LAYER_LEAKY_RELU || t == LAYER_GELU;
}

static bool reads_output(layer_type t)
{
    return t == LAYER_SIGMOID || t == LAYER_TANH;
}

enum { K_OUT, K_DOUT, K_AUX, K_SCRATCH, K_LOSS, K_PACKED, K_N };

/* Where each buffer is and whether anything placed since has overlapped it. */
typedef struct shadow {
    const model *m;
    int n;
    uint64_t arena;
    uint64_t off[K_N][4096], bytes[K_N][4096];
    bool valid[K_N][4096];
    int placed_dout[4096];
} shadow;

static uint64_t kind_bytes(const shadow *s, int kind, int layer)
{
    switch (kind) {
    case K_OUT:
    case K_DOUT: return memplan_out_bytes(s->m, layer, s->n);
    case K_AUX: return memplan_aux_bytes(s->m, &s->m->layers[layer], s->n);
    case K_SCRATCH: return memplan_scratch_bytes(s->m, layer, s->n);
    case K_PACKED: return memplan_packed_bytes(s->m, layer, s->n);
    default: return memplan_loss_bytes(s->m, s->n);
    }
}

/* Whether layer's output (or gradient: kind) at off is its slice of
 * concatenation j's (one sample: the plan makes it there), or lies where
 * group norm j makes its output from it, or where norm j makes its
 * input's gradient from its output's, in place. */
static bool in_slice(const shadow *s, int kind, int j, int layer, uint64_t off)
{
    const model_layer *c = &s->m->layers[j];
    if ((c->type == LAYER_GROUP_NORM || (kind == K_DOUT && c->type == LAYER_BATCH_NORM)) &&
        s->valid[kind][j] && memplan_resolve(s->m, c->inputs[0]) == layer &&
        off == s->off[kind][j])
        return true;
    if (c->type != LAYER_CONCAT || s->n != 1 || !s->valid[kind][j])
        return false;
    uint64_t d = 0;
    for (int k = 0; k < c->ninputs; k++) {
        int src = memplan_resolve(s->m, c->inputs[k]);
        bool under = src >= 0 && kind == K_OUT && s->m->layers[src].type == LAYER_GROUP_NORM &&
                     memplan_resolve(s->m, s->m->layers[src].inputs[0]) == layer;
        if ((src == layer || under) && off == s->off[kind][j] + d)
            return true;
        d += memplan_out_bytes(s->m, src, s->n);
    }
    return false;
}

/* Whether output j, valid where it is, lies in its slice of concatenation
 * c placed at off (one sample: an output a later concatenation reads is
 * made in its slice before that concatenation is placed). */
static bool slice_of_new(const shadow *s, int c, uint64_t off, int j)
{
    const model_layer *l = &s->m->layers[c];
    if (l->type != LAYER_CONCAT || s->n != 1)
        return false;
    uint64_t d = 0;
    for (int k = 0; k < l->ninputs; k++) {
        int src = memplan_resolve(s->m, l->inputs[k]);
        if (src == j && s->off[K_OUT][j] == off + d)
            return true;
        d += memplan_out_bytes(s->m, src, s->n);
    }
    return false;
}

/* Whether b bytes at off lie in concatenation j's slice of an input not
 * made yet (its output not valid there): the plan makes what that input
 * is made from there meanwhile (memplan_sim.spare_parent). */
static bool in_spare(const shadow *s, int j, uint64_t off, uint64_t b)
{
    const model_layer *l = &s->m->layers[j];
    if (l->type != LAYER_CONCAT || s->n != 1)
        return false;
    uint64_t d = 0;
    for (int k = 0; k < l->ninputs; k++) {
        int src = memplan_resolve(s->m, l->inputs[k]);
        uint64_t at = s->off[K_OUT][j] + d, len = memplan_out_bytes(s->m, src, s->n);
        if (off >= at && off + b <= at + len && src >= 0 &&
            !(s->valid[K_OUT][src] && s->off[K_OUT][src] == at))
            return true;
        d += len;
    }
    return false;
}

static void place(shadow *s, int kind, int layer, uint64_t off)
{
    int slot = layer < 0 ? 0 : layer;
    uint64_t b = kind_bytes(s, kind, layer);
    ck_assert_msg(off + b <= s->arena, "kind %d of layer %d beyond the arena", kind, layer);
    for (int k = 0; k < K_N; k++)
        for (int j = 0; j < s->m->nlayers; j++)
            if (s->valid[k][j] && s->off[k][j] < off + b && off < s->off[k][j] + s->bytes[k][j] &&
                !(k == kind && (kind == K_OUT || kind == K_DOUT) && in_slice(s, kind, j, layer, off)) &&
                !(k == K_OUT && kind == K_OUT && slice_of_new(s, layer, off, j)) &&
                !(k == K_OUT && kind == K_OUT && in_spare(s, j, off, b)))
                s->valid[k][j] = false;
    s->off[kind][slot] = off;
    s->bytes[kind][slot] = b;
    s->valid[kind][slot] = true;
    if (kind == K_DOUT)
        ck_assert_msg(++s->placed_dout[slot] == 1, "gradient of layer %d placed twice", layer);
}

static void need(const shadow *s, int kind, int layer, const char *at, int op)
{
    if (layer < 0 && kind == K_OUT)
        return; /* the model input */
    ck_assert_msg(s->valid[kind][layer < 0 ? 0 : layer],
                  "op %d (%s): kind %d of layer %d is not where the plan put it", op, at, kind,
                  layer);
}

static void check_plan(const model *m, int n, bool keep_all)
{
    memplan p;
    ck_assert_int_eq(memplan_build_as(&p, m, n, keep_all), 0);
    shadow *s = calloc(1, sizeof(*s));
    s->m = m;
    s->n = n;
    s->arena = p.arena;
    const int L = m->nlayers;
    const int last = memplan_resolve(m, L - 1);
    unsigned recomputes = 0;
    for (int op = 0; op <= 2 * L; op++) {
        bool scratch = false, direct = false;
        uint32_t mid = p.ops[op].mid;
        if (mid) {
            const model_layer *l = &m->layers[2 * L - op];
            ck_assert_msg(op > L && l->type == LAYER_CONV3D, "op %d in two passes", op);
        }
        for (uint32_t k = 0; k < p.ops[op].count + mid; k++) {
            const memplan_event *ev = &p.events[p.ops[op].first + k];
            if (mid && k == p.ops[op].count) { /* the weight gradient: its input, its gradient */
                int i = 2 * L - op;
                need(s, K_OUT, memplan_resolve(m, m->layers[i].inputs[0]), "weights", op);
                need(s, K_DOUT, i, "weights", op);
            }
            if (ev->kind == MEMPLAN_RECOMPUTE) {
                const model_layer *l = &m->layers[ev->layer];
                ck_assert_msg(!p.kept[ev->layer], "a kept layer recomputed: %s", l->name);
                for (int i = 0; i < l->ninputs; i++)
                    need(s, K_OUT, memplan_resolve(m, l->inputs[i]), "recompute", op);
                need(s, K_OUT, ev->layer, "recompute", op);
                if (memplan_aux_bytes(m, l, n))
                    need(s, K_AUX, ev->layer, "recompute", op);
                recomputes++;
                continue;
            }
            if (ev->kind == MEMPLAN_PACK) { /* the layer before's copy, after its placing */
                ck_assert_msg(p.packed[ev->layer] && op < L && ev->layer == op - 1,
                              "layer %d packed in op %d", ev->layer, op);
                need(s, K_OUT, ev->layer, "pack", op);
                need(s, K_PACKED, ev->layer, "pack", op);
                continue;
            }
            if (ev->kind == MEMPLAN_UNPACK) {
                ck_assert_msg(p.packed[ev->layer], "unpacked but not packed: layer %d", ev->layer);
                need(s, K_PACKED, ev->layer, "unpack", op);
                need(s, K_OUT, ev->layer, "unpack", op);
                continue;
            }
            int kind = ev->kind == MEMPLAN_OUT ? K_OUT : ev->kind == MEMPLAN_DOUT ? K_DOUT
                       : ev->kind == MEMPLAN_AUX ? K_AUX : ev->kind == MEMPLAN_SCRATCH ? K_SCRATCH
                       : ev->kind == MEMPLAN_PACKED ? K_PACKED : K_LOSS;
            place(s, kind, ev->layer, ev->offset);
            scratch |= kind == K_SCRATCH;
            direct |= kind == K_DOUT && ev->direct;
        }
        if (op < L) {
            const model_layer *l = &m->layers[op];
            if (model_layer_is_view(l)) /* flatten, or a relu its batch norm applies */
                continue;
            for (int i = 0; i < l->ninputs; i++)
                need(s, K_OUT, memplan_resolve(m, l->inputs[i]), "forward", op);
            need(s, K_OUT, op, "forward", op);
        } else if (op == L) {
            need(s, K_OUT, last, "loss", op);
            need(s, K_DOUT, last, "loss", op);
            if (memplan_loss_bytes(m, n))
                need(s, K_LOSS, -1, "loss", op);
        } else {
            int i = 2 * L - op;
            const model_layer *l = &m->layers[i];
            if (model_layer_is_view(l)) /* flatten, or a relu its batch norm applies */
                continue;
            need(s, K_DOUT, i, "backward", op);
            if (memplan_aux_bytes(m, l, n))
                need(s, K_AUX, i, "backward", op);
            if (reads_input(l->type) && !mid) /* (split: read by the weight gradient alone) */
                need(s, K_OUT, memplan_resolve(m, l->inputs[0]), "backward", op);
            if (reads_output(l->type))
                need(s, K_OUT, i, "backward", op);
            for (int k = 0; k < l->ninputs; k++)
                if (memplan_resolve(m, l->inputs[k]) >= 0)
                    need(s, K_DOUT, memplan_resolve(m, l->inputs[k]), "backward", op);
            /* input gradients: through scratch, or written whole where new */
            if (memplan_scratch_bytes(m, i, n)) {
                ck_assert_msg(scratch != direct, "op %d: %s scratch and %s direct writes", op,
                              scratch ? "" : "no", direct ? "" : "no");
                if (scratch)
                    need(s, K_SCRATCH, i, "backward", op);
            }
        }
    }
    ck_assert_uint_eq(recomputes, p.recomputes);
    if (keep_all)
        ck_assert_uint_eq(p.recomputes, 0);
    ck_assert_uint_ge(p.arena, p.peak_live);
    free(s);
    memplan_free(&p);
}

START_TEST(plans_hold_what_each_operation_reads)
{
    struct {
        const char *file, *from, *to;
    } models[] = {
        {"fc_mnist.toml", NULL, NULL},
        {"resnet_small.toml", NULL, NULL},
        {"unet.toml", "[3, 512, 512]", "[3, 64, 64]"},
        /* 3-D convolutions in two passes, concatenations of one sample
         * made in place (n = 1) */
        {"../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]"},
    };
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        model *m = load(models[i].file, models[i].from, models[i].to);
        for (int n = 1; n <= 3; n += 2)
            for (int fuse = 1; fuse >= 0; fuse--) { /* relus fused into their norms, and not */
                model_fuse(m, fuse);
                check_plan(m, n, false);
                check_plan(m, n, true);
                m->act_bf16 = true; /* activation_dtype = "bfloat16" */
                check_plan(m, n, false);
                m->act_bf16 = false;
                m->keep_outputs = true; /* every output kept: nothing recomputed */
                memplan k;
                ck_assert_int_eq(memplan_build(&k, m, n), 0);
                ck_assert_uint_eq(k.recomputes, 0);
                for (int j = 0; j < m->nlayers; j++)
                    ck_assert(k.kept[j] == !model_layer_is_view(&m->layers[j]));
                memplan_free(&k);
                check_plan(m, n, false);
                m->keep_outputs = false;
            }
        model_free(m);
    }
}
END_TEST

/* The U-Net's lean plan at a large image: the outputs of its norms and
 * activations are not kept, so the arena is well below keeping everything. */
START_TEST(unet_plan_is_lean)
{
    model *m = load("unet.toml", "[3, 512, 512]", "[3, 1024, 1024]");
    memplan lean, all;
    m->lighten = false; /* every costly output kept (lightened: the next test) */
    ck_assert_int_eq(memplan_build(&lean, m, 1), 0);
    ck_assert_int_eq(memplan_build_as(&all, m, 1, true), 0);
    int kept = 0, costly = 0, cheap = 0;
    for (int i = 0; i < m->nlayers; i++) {
        layer_type t = m->layers[i].type;
        /* made again: the first convolution (3 channels, 3 x 3: 27
         * multiply-adds an output) and the last transposed one (2 x 2,
         * stride 2, from 64 channels: 64); kept: the other convolutions
         * (32 channels and more, 3 x 3) and transposed ones (from 128
         * channels and more). The head (1 x 1 over 32 channels) is cheap
         * too, but kept as the model's last layer. */
        bool conv = t == LAYER_CONV2D || t == LAYER_CONV_TRANSPOSE2D;
        bool small = (t == LAYER_CONV2D && (i == 0 || i == m->nlayers - 1)) ||
                     (t == LAYER_CONV_TRANSPOSE2D && m->layers[i].in.d[0] <= 64);
        ck_assert_msg(memplan_cheap_conv(&m->layers[i]) == small, "layer %s",
                      m->layers[i].name);
        cheap += small;
        bool c = (conv && !small) || i == m->nlayers - 1;
        ck_assert_msg(lean.kept[i] == c, "layer %s", m->layers[i].name);
        kept += lean.kept[i];
        costly += c;
    }
    ck_assert_int_eq(kept, costly);
    ck_assert_int_eq(cheap, 3);
    ck_assert_uint_gt(lean.recomputes, 0);
    /* keeping everything: 2 x the activations (and a little); lean: < 1/3 of that */
    ck_assert_uint_lt(lean.arena * 3, all.arena);
    /* kept as bfloat16: every kept output but the last layer's, in less */
    m->act_bf16 = true;
    memplan half;
    ck_assert_int_eq(memplan_build(&half, m, 1), 0);
    for (int i = 0; i < m->nlayers; i++)
        ck_assert_msg(half.packed[i] == (lean.kept[i] && i != m->nlayers - 1), "layer %s",
                      m->layers[i].name);
    ck_assert_uint_lt(half.arena, lean.arena);
    memplan_free(&half);
    memplan_free(&lean);
    memplan_free(&all);
    model_free(m);
}
END_TEST

/* The lightened plan (model.lighten, what model_compile sets) makes some
 * costly convolution outputs again rather than keep them: each one a large
 * output (at least 1/32 of the arena), each one lowering the arena by at
 * least 2%, all it makes again within a tenth of the step's work; with
 * float32 and bfloat16 activations. */
START_TEST(lightened_plan_makes_costly_outputs_again)
{
    struct {
        const char *file, *from, *to, *what;
    } cases[] = {
        {"unet.toml", "[3, 512, 512]", "[3, 1024, 1024]", "unet.toml at 1024^2"},
        /* (the cluster test's 3D U-Net, of few channels, spends 6.5% of
         * its step making its first and transposed convolutions again: it
         * has no room for more) */
    };
    for (size_t c = 0; c < sizeof(cases) / sizeof(cases[0]); c++) {
        model *m = load(cases[c].file, cases[c].from, cases[c].to);
        for (int bf16 = 0; bf16 <= 1; bf16++) {
            m->act_bf16 = bf16;
            memplan heavy, lean;
            m->lighten = false;
            ck_assert_int_eq(memplan_build(&heavy, m, 1), 0);
            m->lighten = true;
            ck_assert_int_eq(memplan_build(&lean, m, 1), 0);
            int dropped = 0;
            double again = 0, step = 0;
            for (int i = 0; i < m->nlayers; i++) {
                const model_layer *l = &m->layers[i];
                step += 3.0 * (double)l->flops;
                if (heavy.kept[i] == lean.kept[i])
                    continue;
                ck_assert_msg(heavy.kept[i] && !lean.kept[i], "layer %s", l->name);
                ck_assert_msg(memplan_weights_again(&lean, m, i) && !memplan_cheap_conv(l),
                              "layer %s", l->name);
                ck_assert_uint_ge(32 * memplan_out_bytes(m, i, 1), lean.arena);
                dropped++;
            }
            for (uint32_t k = 0; k < lean.nevents; k++)
                if (lean.events[k].kind == MEMPLAN_RECOMPUTE)
                    again += (double)m->layers[lean.events[k].layer].flops;
            printf("%s%s: %d costly outputs made again, the arena %.1f MiB against %.1f MiB, "
                   "%.1f%% of the step's work again\n", cases[c].what,
                   bf16 ? ", bfloat16 activations" : "", dropped, lean.arena / 1048576.0,
                   heavy.arena / 1048576.0, 100 * again / step);
            ck_assert_int_ge(dropped, 1);
            ck_assert_uint_le(lean.arena + (uint64_t)(0.02 * dropped * (double)lean.arena),
                              heavy.arena);
            ck_assert(again <= 0.1 * step);
            memplan_free(&heavy);
            memplan_free(&lean);
        }
        model_free(m);
    }
}
END_TEST

/* ---- training with the plan ---- */

typedef struct net {
    exec e;
    float **w, **g;
} net;

static void net_init(net *t, const model *m, int n, bool reference)
{
    t->w = calloc((size_t)m->ntensors, sizeof(float *));
    t->g = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        t->w[i] = malloc(mt->elems * sizeof(float));
        t->g[i] = calloc(mt->elems, sizeof(float));
        const char *dot = strrchr(mt->name, '.');
        const model_layer *l = &m->layers[mt->layer];
        bool norm = l->type == LAYER_BATCH_NORM || l->type == LAYER_GROUP_NORM;
        float fill = -1.0f;
        if (strcmp(dot, ".running_var") == 0 || (norm && strcmp(dot, ".weight") == 0))
            fill = 1.0f;
        else if (strcmp(dot, ".bias") == 0 || strcmp(dot, ".running_mean") == 0)
            fill = 0.0f;
        double fan_in = (double)mt->elems / (double)mt->dims[0];
        if (l->type == LAYER_CONV_TRANSPOSE2D)
            fan_in = (double)mt->elems / (double)mt->dims[1];
        for (uint64_t k = 0; k < mt->elems; k++)
            t->w[i][k] = fill >= 0 ? fill
                                   : (float)((2.0 * rng_uniform(7, i, k) - 1.0) * sqrt(3.0 / fan_in));
    }
    char err[256];
    int rc = reference ? exec_init_reference(&t->e, m, n, 1, t->w, t->g, err, sizeof(err))
                       : exec_init(&t->e, m, n, 1, t->w, t->g, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    t->e.seed = 11;
}

static void net_free(net *t, const model *m)
{
    exec_deinit(&t->e);
    for (int i = 0; i < m->ntensors; i++) {
        free(t->w[i]);
        free(t->g[i]);
    }
    free(t->w);
    free(t->g);
}

/* Layer l's trainable weights as Weight Streaming leaves them between its
 * passes (away: overwritten, its slot taken by the next layers; NaN
 * here, which any read shows) or as they come back for its backward pass. */
static void net_stream(net *t, const model *m, int l, bool away, float **saved)
{
    const model_layer *ly = &m->layers[l];
    for (int k = 0; k < ly->ntensors; k++) {
        int i = ly->first_tensor + k;
        size_t bytes = m->tensors[i].elems * sizeof(float);
        if (!m->tensors[i].trainable)
            continue;
        if (away) {
            memcpy(saved[i], t->w[i], bytes);
            for (uint64_t e = 0; e < m->tensors[i].elems; e++)
                t->w[i][e] = NAN;
        } else {
            memcpy(t->w[i], saved[i], bytes);
        }
    }
}

/* One step of plain SGD; returns the loss. Each layer's weights are there
 * for its forward pass and its backward pass alone, as Weight Streaming
 * gives them (a layer the backward pass makes again reads the copy its
 * executor kept). */
static double net_step(net *t, const model *m, const float *x, const int32_t *y, int64_t step,
                       int n)
{
    float **saved = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++)
        saved[i] = malloc(m->tensors[i].elems * sizeof(float));
    for (int i = 0; i < m->nlayers; i++) {
        exec_forward(&t->e, i, x, step, true);
        net_stream(t, m, i, true, saved);
    }
    double loss = exec_loss(&t->e, x, y, 1.0f / (float)n);
    for (int i = m->nlayers - 1; i >= 0; i--) {
        net_stream(t, m, i, false, saved);
        exec_backward(&t->e, i, x, step);
    }
    for (int i = 0; i < m->ntensors; i++)
        free(saved[i]);
    free(saved);
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        for (uint64_t k = 0; k < mt->elems; k++)
            t->w[i][k] = mt->trainable ? t->w[i][k] - 0.05f * t->g[i][k] : t->g[i][k];
    }
    return loss;
}

/* Trains the lean plan and the reference side by side for 5 steps. With
 * bf16 the lean plan keeps its activations as bfloat16: the first loss is
 * the same (the forward pass computes in float32), the rest within
 * `tol` relative, and the weights within `tol` relative; without, all is
 * bitwise equal. */
static void train_alike_as(const char *file, const char *from, const char *to, int n, int classes,
                           bool bf16, double tol)
{
    model *m = load(file, from, to);
    m->act_bf16 = bf16;
    net lean, all;
    net_init(&lean, m, n, false);
    net_init(&all, m, n, true);
    double maxrel = 0;
    ck_assert_uint_lt(lean.e.arena_bytes, all.e.arena_bytes);
    uint64_t in = model_shape_elems(&m->input);
    float *x = malloc((size_t)n * in * sizeof(float));
    int32_t *y = malloc((size_t)n * lean.e.label_elems * sizeof(int32_t));
    for (int64_t step = 0; step < 5; step++) {
        for (uint64_t k = 0; k < (uint64_t)n * in; k++)
            x[k] = (float)rng_uniform(3, (uint64_t)step, k);
        for (uint64_t k = 0; k < (uint64_t)n * lean.e.label_elems; k++)
            y[k] = (int32_t)(rng_hash(4, (uint64_t)step, k) % (uint64_t)classes);
        double a = net_step(&lean, m, x, y, step, n), b = net_step(&all, m, x, y, step, n);
        ck_assert_msg(isfinite(a) && (bf16 && step > 0 ? fabs(a - b) <= tol * fabs(b) : a == b),
                      "%s step %lld: loss %.9g lean, %.9g reference", file, (long long)step, a, b);
        if (fabs(a - b) / fabs(b) > maxrel)
            maxrel = fabs(a - b) / fabs(b);
    }
    for (int i = 0; i < m->ntensors; i++) {
        if (!bf16) {
            ck_assert_msg(memcmp(lean.w[i], all.w[i], m->tensors[i].elems * sizeof(float)) == 0,
                          "%s: %s differs after 5 steps", file, m->tensors[i].name);
            continue;
        }
        double d = 0, nn = 0;
        for (uint64_t k = 0; k < m->tensors[i].elems; k++) {
            d += pow(lean.w[i][k] - all.w[i][k], 2);
            nn += pow(all.w[i][k], 2);
        }
        /* the weights; the shifts and biases, which start at zero and stay small, are
         * sums of many terms of either sign: their rounding shows more */
        if (strstr(m->tensors[i].name, ".weight"))
            ck_assert_msg(sqrt(d) <= 1e-3 * sqrt(nn), "%s: %s differs by %g (relative) with "
                          "bfloat16 activations", file, m->tensors[i].name, sqrt(d / nn));
    }
    if (bf16)
        printf("%s, bfloat16 activations: the loss within %.2g of float32's over 5 steps\n", file,
               maxrel);
    if (strstr(file, "volume.toml")) {
        int split = 0, sliced = 0, in_place = 0, unpacked = 0;
        /* group norms' backward passes in place: the input's gradient
         * placed where the output's is */
        for (uint32_t k = 0; k < lean.e.plan.nevents; k++) {
            const memplan_event *ev = &lean.e.plan.events[k];
            if (ev->kind != MEMPLAN_DOUT)
                continue;
            for (int j = 0; j < m->nlayers; j++)
                if (m->layers[j].type == LAYER_GROUP_NORM &&
                    memplan_resolve(m, m->layers[j].inputs[0]) == ev->layer)
                    for (uint32_t q = 0; q < k; q++)
                        in_place += lean.e.plan.events[q].kind == MEMPLAN_DOUT &&
                                    lean.e.plan.events[q].layer == j &&
                                    lean.e.plan.events[q].offset == ev->offset;
        }
        for (uint32_t k = 0; k < lean.e.plan.nevents; k++)
            unpacked += lean.e.plan.events[k].kind == MEMPLAN_UNPACK;
        printf("%s at one sample: %d group norms' backward passes in place, %d unpackings\n",
               file, in_place, unpacked);
        ck_assert_int_gt(in_place, 0);
        ck_assert(bf16 ? unpacked > 0 : unpacked == 0);
        for (int op = m->nlayers + 1; op <= 2 * m->nlayers; op++)
            split += lean.e.plan.ops[op].mid > 0;
        for (uint32_t k = 0; k + 1 < lean.e.plan.nevents; k++)
            for (uint32_t q = 0; q < k; q++)
                sliced += lean.e.plan.events[k].kind == MEMPLAN_OUT &&
                          lean.e.plan.events[q].kind == MEMPLAN_OUT &&
                          m->layers[lean.e.plan.events[q].layer].type == LAYER_CONCAT &&
                          lean.e.plan.events[k].offset == lean.e.plan.events[q].offset &&
                          lean.e.plan.events[k].layer != lean.e.plan.events[q].layer &&
                          q + 8 > k;
        /* a skip connection made in its slice of the concatenation
         * before that is placed; an input's gradient in its slice of the
         * concatenation's, its backward pass not next (a life of its own) */
        int skips = 0, grads = 0;
        const memplan *lp = &lean.e.plan;
        for (uint32_t k = 0; k < lp->nevents; k++)
            for (uint32_t q = 0; q < lp->nevents; q++) {
                const memplan_event *a = &lp->events[k], *c = &lp->events[q];
                if (c->kind != a->kind || (a->kind != MEMPLAN_OUT && a->kind != MEMPLAN_DOUT) ||
                    a->layer < 0 || c->layer < 0 || m->layers[c->layer].type != LAYER_CONCAT)
                    continue;
                const model_layer *cl = &m->layers[c->layer];
                uint64_t d = 0;
                for (int ki = 0; ki < cl->ninputs; ki++) {
                    int src = memplan_resolve(m, cl->inputs[ki]);
                    if (src == a->layer && a->offset == c->offset + d && src + 1 < c->layer) {
                        skips += a->kind == MEMPLAN_OUT && k < q;
                        grads += a->kind == MEMPLAN_DOUT && q < k;
                    }
                    d += memplan_out_bytes(m, src, 1);
                }
            }
        printf("%s at one sample: %d backward passes in two, %d inputs made in their "
               "concatenation, %d skips made there before it, %d gradients there\n", file, split,
               sliced, skips, grads);
        ck_assert_int_gt(split, 0);
        ck_assert_int_gt(sliced, 0);
        ck_assert_int_gt(skips, 0);
        ck_assert_int_gt(grads, 0);
    }
    if (strcmp(file, "unet.toml") == 0) {
        ck_assert_uint_gt(lean.e.recomputed, 0);
        /* a costly convolution made again, from the weights its forward
         * pass used, while net_step had them away */
        int costly = 0;
        for (int i = 0; i < m->nlayers; i++)
            costly += memplan_weights_again(&lean.e.plan, m, i) &&
                      !memplan_cheap_conv(&m->layers[i]);
        ck_assert_int_gt(costly, 0);
    }
    free(x);
    free(y);
    net_free(&lean, m);
    net_free(&all, m);
    model_free(m);
}

static void train_alike(const char *file, const char *from, const char *to, int n, int classes)
{
    train_alike_as(file, from, to, n, classes, false, 0);
}

START_TEST(lean_trains_as_the_reference_unet)
{
    train_alike("unet.toml", "[3, 512, 512]", "[3, 64, 64]", 2, 2);
    /* one sample of a volume: its 3-D convolutions' backward passes in
     * two, its concatenations made in place */
    train_alike("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]", 1, 2);
}
END_TEST

/* A model of every layer rows as depth takes (strided, dilated and
 * padded windows, a transposed convolution's output padding, group norm,
 * leaky relu, average pooling, add, dropout, concat). */
static const char rows_model[] =
    "[model]\ninput_shape = [2, 24, 20]\nloss = \"pixel_softmax_cross_entropy\"\n"
    "[[model.layers]]\nname = \"c1\"\ntype = \"conv2d\"\nfilters = 8\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"g1\"\ntype = \"group_norm\"\ngroups = 4\n"
    "[[model.layers]]\nname = \"r1\"\ntype = \"leaky_relu\"\n"
    "[[model.layers]]\nname = \"c2\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = [3, 5]\n"
    "stride = 2\npadding = [1, 2]\n"
    "[[model.layers]]\nname = \"r2\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"c3\"\ntype = \"conv2d\"\nfilters = 16\nkernel_size = 3\n"
    "padding = 2\ndilation = 2\n"
    "[[model.layers]]\nname = \"sum\"\ntype = \"add\"\ninputs = [\"c3\", \"r2\"]\n"
    "[[model.layers]]\nname = \"d\"\ntype = \"dropout\"\nrate = 0.25\n"
    "[[model.layers]]\nname = \"p\"\ntype = \"avg_pool2d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"up\"\ntype = \"conv_transpose2d\"\nfilters = 8\nkernel_size = 3\n"
    "stride = 4\noutput_padding = 1\n"
    "[[model.layers]]\nname = \"cat\"\ntype = \"concat\"\ninputs = [\"up\", \"r1\"]\n"
    "[[model.layers]]\nname = \"head\"\ntype = \"conv2d\"\nfilters = 3\nkernel_size = 1\n";

/* Rows as depth (model_rows_as_depth): an image model computed by its
 * 3-D layers over [C, H, 1, W] trains as the image model, within float
 * rounding (other kernels sum in other orders), in backward passes in
 * two; a model with a dense layer is refused by name. */
static void rows_alike(model *m, const char *what, int n, int classes)
{
    char err[256];
    model *r = calloc(1, sizeof(*r));
    *r = *m;
    r->layers = malloc((size_t)m->nlayers * sizeof(*m->layers));
    memcpy(r->layers, m->layers, (size_t)m->nlayers * sizeof(*m->layers));
    ck_assert_int_eq(model_rows_as_depth(r, err, sizeof(err)), 0);
    ck_assert_int_eq(r->input.ndim, 4);
    int convs = 0;
    for (int i = 0; i < r->nlayers; i++) {
        ck_assert(r->layers[i].type != LAYER_CONV2D && r->layers[i].out.ndim == 4);
        ck_assert_int_eq(r->layers[i].out.d[2], 1);
        ck_assert_int_eq(r->layers[i].out.d[3], m->layers[i].out.d[2]);
        convs += r->layers[i].type == LAYER_CONV3D;
    }
    ck_assert_int_gt(convs, 0);
    net a, b;
    net_init(&a, m, n, false);
    net_init(&b, r, n, false);
    for (int i = 0; i < m->ntensors; i++) /* the same weights (net_init's fan-in is by type) */
        memcpy(b.w[i], a.w[i], m->tensors[i].elems * sizeof(float));
    uint64_t in = model_shape_elems(&m->input);
    ck_assert_uint_eq(in, model_shape_elems(&r->input));
    float *x = malloc((size_t)n * in * sizeof(float));
    int32_t *y = malloc((size_t)n * a.e.label_elems * sizeof(int32_t));
    ck_assert_uint_eq(a.e.label_elems, b.e.label_elems);
    for (int64_t step = 0; step < 5; step++) {
        for (uint64_t k = 0; k < (uint64_t)n * in; k++)
            x[k] = (float)rng_uniform(3, (uint64_t)step, k);
        for (uint64_t k = 0; k < (uint64_t)n * a.e.label_elems; k++)
            y[k] = (int32_t)(rng_hash(4, (uint64_t)step, k) % (uint64_t)classes);
        double la = net_step(&a, m, x, y, step, n), lb = net_step(&b, r, x, y, step, n);
        ck_assert_msg(isfinite(la) && fabs(la - lb) <= 1e-5 * fabs(la),
                      "%s step %lld: loss %.9g as an image, %.9g rows as depth", what,
                      (long long)step, la, lb);
        for (int i = 0; step == 0 && i < m->ntensors; i++) { /* one step: every tensor */
            double d = 0, nn = 0;
            for (uint64_t k = 0; k < m->tensors[i].elems; k++) {
                d += pow(a.w[i][k] - b.w[i][k], 2);
                nn += pow(a.w[i][k], 2);
            }
            ck_assert_msg(sqrt(d) <= 1e-5 * sqrt(nn) + 1e-7, "%s: %s differs by %g after a "
                          "step", what, m->tensors[i].name, sqrt(d / (nn > 0 ? nn : 1)));
        }
    }
    /* after 5: the weights (the shifts and biases, small sums of terms of
     * either sign, and the batch norms of a few pixels at the U-Net's
     * bottom, show the rounding more) */
    for (int i = 0; i < m->ntensors; i++) {
        double d = 0, nn = 0;
        for (uint64_t k = 0; k < m->tensors[i].elems; k++) {
            d += pow(a.w[i][k] - b.w[i][k], 2);
            nn += pow(a.w[i][k], 2);
        }
        if (m->tensors[i].trainable && strstr(m->tensors[i].name, ".weight"))
            ck_assert_msg(sqrt(d) <= 1e-3 * sqrt(nn), "%s: %s differs by %g after 5 steps", what,
                          m->tensors[i].name, sqrt(d / (nn > 0 ? nn : 1)));
    }
    int split = 0;
    for (int op = r->nlayers + 1; op <= 2 * r->nlayers; op++)
        split += b.e.plan.ops[op].mid > 0;
    printf("%s rows as depth: the same losses within 1e-5, %d backward passes in two\n", what,
           split);
    if (n == 1)
        ck_assert_int_gt(split, 0);
    free(x);
    free(y);
    net_free(&a, m);
    net_free(&b, r);
    free(r->layers);
    free(r);
}

START_TEST(rows_as_depth_trains_as_the_image)
{
    model *m = load("unet.toml", "[3, 512, 512]", "[3, 64, 48]");
    rows_alike(m, "unet.toml", 2, 2);
    rows_alike(m, "unet.toml", 1, 2);
    model_free(m);
    char err[256];
    toml_value *root = toml_parse(rows_model, strlen(rows_model), "rows.toml", err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    rows_alike(m, "every layer", 2, 3);
    model_free(m);
    toml_free(root);
    m = load("resnet_small.toml", NULL, NULL);
    ck_assert_int_eq(model_rows_as_depth(m, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "has no 3-D counterpart") != NULL, "%s", err);
    ck_assert(!m->rows_as_depth && m->input.ndim == 3);
    model_free(m);
}
END_TEST


/* Trains ma in a and mb in b (the same layers, planned or fused apart)
 * side by side for 5 steps: the losses, every weight and running
 * statistic, and then an evaluation's outputs must be the same bits. The
 * nets stay for the caller to look at and free. */
static void train_bitwise(const char *what, const model *ma, const model *mb, int n, int classes,
                          net *a, net *b)
{
    net_init(a, ma, n, false);
    net_init(b, mb, n, false);
    uint64_t in = model_shape_elems(&ma->input);
    float *x = malloc((size_t)n * in * sizeof(float));
    int32_t *y = malloc((size_t)n * a->e.label_elems * sizeof(int32_t));
    for (int64_t step = 0; step < 5; step++) {
        for (uint64_t k = 0; k < (uint64_t)n * in; k++)
            x[k] = (float)rng_uniform(3, (uint64_t)step, k);
        for (uint64_t k = 0; k < (uint64_t)n * a->e.label_elems; k++)
            y[k] = (int32_t)(rng_hash(4, (uint64_t)step, k) % (uint64_t)classes);
        double la = net_step(a, ma, x, y, step, n), lb = net_step(b, mb, x, y, step, n);
        ck_assert_msg(isfinite(la) && la == lb, "%s step %lld: loss %.9g against %.9g", what,
                      (long long)step, la, lb);
    }
    for (int i = 0; i < ma->ntensors; i++)
        ck_assert_msg(memcmp(a->w[i], b->w[i], ma->tensors[i].elems * sizeof(float)) == 0,
                      "%s: %s differs after 5 steps", what, ma->tensors[i].name);
    for (int i = 0; i < ma->nlayers; i++) {
        exec_forward(&a->e, i, x, 5, false);
        exec_forward(&b->e, i, x, 5, false);
    }
    int last = ma->nlayers - 1;
    ck_assert_msg(memcmp(exec_output(&a->e, last, x), exec_output(&b->e, last, x),
                         (size_t)n * model_shape_elems(&ma->layers[last].out) * sizeof(float)) == 0,
                  "%s: the evaluation's outputs differ", what);
    free(x);
    free(y);
}

#define OP_CONV2D_BLOCKS 0x100u /* (here) the output in aBcd16b */

/* Whether some convolution of e's model has every bit of `want` for e's
 * batch (exec_conv_path, with OP_CONV2D_BLOCKS for an output oneDNN gives
 * in aBcd16b); prints each one's path where none has. */
static int convs_can(const exec *e, unsigned want, const char *what)
{
    int any = 0;
    char how[384];
    for (int i = 0; i < e->m->nlayers && !any; i++) {
        int r = exec_conv_path(e, i, how, sizeof(how));
        if (r < 0)
            continue;
        op_conv2d_params p = memplan_conv2d_params(&e->m->layers[i], e->n);
        if (op_conv2d_blocked_io(&p, e->m->mixed_precision, e->m->layers[i].bias, e->ws_bytes) &
            OP_CONV2D_OUT_BLOCKED)
            r |= (int)OP_CONV2D_BLOCKS;
        any = ((unsigned)r & want) == want;
    }
    for (int i = 0; i < e->m->nlayers && !any; i++)
        if (exec_conv_path(e, i, how, sizeof(how)) >= 0)
            printf("%s: layer %s: %s\n", what, e->m->layers[i].name, how);
    return any;
}

/* The relus fused into their batch and group norms and dense layers (model_fuse,
 * what model_compile does) train as the two layers apart, bit for bit
 * (with the activations kept in bfloat16 too, act_bf16); the fused plan
 * keeps fewer buffers. */
static void fused_alike_as(const char *file, const char *from, const char *to, int n, int classes,
                           bool act_bf16, bool keep, bool shrinks)
{
    model *m = load(file, from, to), *apart = load(file, from, to);
    m->act_bf16 = apart->act_bf16 = act_bf16;
    /* With bfloat16 activations a costly output made again reads inputs
     * made from bfloat16 copies, so it differs from its forward pass's;
     * the two plans (whose arenas differ) could choose different ones.
     * Every costly output kept, they make the same ones again. */
    m->lighten = apart->lighten = !act_bf16;
    m->keep_outputs = apart->keep_outputs = keep;
    model_fuse(m, true);
    model_fuse(apart, false);
    int fused = 0;
    for (int i = 0; i < m->nlayers; i++)
        fused += m->layers[i].type == LAYER_RELU && m->layers[i].fused;
    ck_assert_msg(fused > 0, "%s: no relu fused", file);
    net a, b;
    train_bitwise(file, m, apart, n, classes, &a, &b);
    if (shrinks)
        ck_assert_uint_lt(a.e.arena_bytes, b.e.arena_bytes);
    else
        ck_assert_uint_le(a.e.arena_bytes, b.e.arena_bytes);
    ck_assert_uint_le(a.e.recomputed, b.e.recomputed);
    net_free(&a, m);
    net_free(&b, apart);
    model_free(m);
    model_free(apart);
}

static void fused_alike(const char *file, const char *from, const char *to, int n, int classes,
                        bool act_bf16)
{
    fused_alike_as(file, from, to, n, classes, act_bf16, false, true);
}

/* The plan that keeps every output (model.keep_outputs) trains as the
 * lean one, bit for bit, recomputing nothing, in a larger arena. */
START_TEST(kept_outputs_train_as_lean)
{
    model *m = load("unet.toml", "[3, 512, 512]", "[3, 64, 64]");
    model *k = load("unet.toml", "[3, 512, 512]", "[3, 64, 64]");
    k->keep_outputs = true;
    net a, b;
    train_bitwise("unet.toml, every output kept", m, k, 2, 2, &a, &b);
    ck_assert_uint_gt(b.e.arena_bytes, a.e.arena_bytes);
    ck_assert_uint_gt(a.e.recomputed, 0);
    ck_assert_uint_eq(b.e.recomputed, 0);
    net_free(&a, m);
    net_free(&b, k);
    model_free(m);
    model_free(k);
    /* in mixed precision the kept plan also keeps each convolution's input
     * as its forward pass rounded it, for its weight gradient: the same bits */
    const char *files[] = {"resnet_small.toml", "unet.toml"};
    for (int f = 0; f < 2; f++) {
        const char *from = f ? "[3, 512, 512]" : NULL, *to = f ? "[3, 64, 64]" : NULL;
        m = load(files[f], from, to);
        k = load(files[f], from, to);
        m->mixed_precision = k->mixed_precision = true;
        k->keep_outputs = true;
        uint64_t kept = 0;
        for (int i = 0; i < k->nlayers; i++) {
            kept += memplan_aux_bytes(k, &k->layers[i], 2);
            if (k->layers[i].type == LAYER_CONV2D)
                ck_assert_uint_eq(memplan_aux_bytes(m, &m->layers[i], 2), 0);
        }
        ck_assert_msg(kept > 0, "%s: no convolution's input kept", files[f]);
        train_bitwise(files[f], m, k, 2, f ? 2 : 10, &a, &b);
        ck_assert_uint_eq(a.e.inputs_kept, 0);
        /* kept where oneDNN's passes read one layout on this processor
         * (and always where it computes in bfloat16 on aBcd16b) */
        int keeps = convs_can(&b.e, OP_CONV2D_KEEPS_INPUT, files[f]);
        if (kernels_isa_level() == KERNELS_ISA_AVX512_BF16 && kern__conv_have_onednn())
            ck_assert_msg(keeps, "%s: no convolution keeps its input on AVX512_BF16", files[f]);
        if (keeps)
            ck_assert_uint_gt(b.e.inputs_kept, 0);
        else
            ck_assert_uint_eq(b.e.inputs_kept, 0);
        printf("%s, mixed precision: %llu convolutions' backward passes took their input as "
               "their forward pass rounded it\n", files[f], (unsigned long long)b.e.inputs_kept);
        net_free(&a, m);
        net_free(&b, k);
        model_free(m);
        model_free(k);
    }
}
END_TEST

/* The blocked groups (exec.c: chains of convolutions, norms, relus and
 * adds kept in oneDNN's aBcd16b layout) train as every tensor plain, bit
 * for bit, in float32 and mixed precision, the lean plan and the kept
 * one. */
static void blocked_alike(const char *file, const char *from, const char *to, int n, int classes,
                          bool mixed, bool keep)
{
    model *m = load(file, from, to), *plain = load(file, from, to);
    m->mixed_precision = plain->mixed_precision = mixed;
    m->keep_outputs = plain->keep_outputs = keep;
    plain->blocked = false;
    net a, b;
    char what[128];
    snprintf(what, sizeof(what), "%s%s%s, blocked groups", file, mixed ? ", mixed precision" : "",
             keep ? ", every output kept" : "");
    train_bitwise(what, m, plain, n, classes, &a, &b);
    ck_assert_int_eq(b.e.blocked, 0);
    printf("%s: %d of %d layers' outputs in aBcd%db\n", what, a.e.blocked, m->nlayers,
           op_conv2d_block_size());
    /* blocked where oneDNN gives this processor's convolutions blocked
     * outputs: always in float32 (aBcd16b with AVX-512, also on AMX, which
     * has no float32 tiles; aBcd8b with AVX2), so in mixed precision too
     * where it computes in float32 (no AVX512_BF16), and on AVX512_BF16 in
     * bfloat16; else (AMX's bfloat16 layouts) the plain path, whose bits
     * train_bitwise held */
    int can = convs_can(&a.e, OP_CONV2D_ON_ONEDNN | OP_CONV2D_BLOCKS, what);
    if (kern__conv_have_onednn() && kernels_isa_level() >= KERNELS_ISA_AVX2 &&
        !(mixed && kernels_isa_level() == KERNELS_ISA_AMX))
        ck_assert_msg(can, "%s: oneDNN gives no convolution a blocked output here", what);
    if (can)
        ck_assert_msg(a.e.blocked > 0, "%s: no layer blocked", what);
    else
        ck_assert_int_eq(a.e.blocked, 0);
    net_free(&a, m);
    net_free(&b, plain);
    model_free(m);
    model_free(plain);
}

START_TEST(blocked_groups_train_as_plain)
{
    kernels_set_threads(2);
    for (int mixed = 0; mixed <= 1; mixed++) {
        blocked_alike("resnet_small.toml", NULL, NULL, 3, 10, mixed, false);
        blocked_alike("unet.toml", "[3, 512, 512]", "[3, 64, 64]", 2, 2, mixed, false);
    }
    blocked_alike("resnet_small.toml", NULL, NULL, 3, 10, true, true);
    kernels_set_threads(1);
}
END_TEST

START_TEST(fused_relus_train_as_apart)
{
    fused_alike("unet.toml", "[3, 512, 512]", "[3, 64, 64]", 2, 2, false);
    fused_alike("resnet_small.toml", NULL, NULL, 3, 10, false);
    fused_alike("unet.toml", "[3, 512, 512]", "[3, 64, 64]", 2, 2, true);
    fused_alike("fc_mnist.toml", NULL, NULL, 3, 10, false);
    /* group norms over volumes (the cluster test's 3D U-Net), their relus
     * masked by the norm's saved scale and shift as a batch norm's. The
     * lean plan's peak is at the concatenation, where fusing changes
     * nothing; where every output is kept the arena shrinks. (Kept outputs
     * with activations in bfloat16 are not compared: apart, the relu's
     * gradient reads the norm's output as the forward pass made it; fused,
     * the norm's input as its bfloat16 copy gives it back, as in the lean
     * plan.) */
    fused_alike_as("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]", 2, 2, false,
                   false, false);
    fused_alike_as("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]", 2, 2, true,
                   false, false);
    fused_alike_as("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]", 2, 2, false,
                   true, true);
    /* with the activations kept in bfloat16 a dense layer's output, which
     * its fused relu's gradient reads, would be kept whole longer: apart */
    model *m = load("fc_mnist.toml", NULL, NULL);
    m->act_bf16 = true;
    model_fuse(m, true);
    for (int i = 0; i < m->nlayers; i++)
        ck_assert(!m->layers[i].fused);
    model_free(m);
}
END_TEST

START_TEST(bfloat16_activations_train_close)
{
    train_alike_as("unet.toml", "[3, 512, 512]", "[3, 128, 128]", 2, 2, true, 1e-3);
    /* a volume's group norms made again from their inputs' bfloat16 copies,
     * unpacked where the norm's output goes */
    train_alike_as("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]", 1, 2, true,
                   1e-3);
}
END_TEST

/* A share computed in micro-batches gives the weights of the whole share
 * at once (no batch norm: its statistics are per micro-batch), dropout
 * included: masks follow the sample, not the micro-batch. */
START_TEST(micro_batches_add_up_to_the_share)
{
    static const char *text =
        "[model]\ninput_shape = [2, 12, 12]\nloss = \"softmax_cross_entropy\"\n"
        "[[model.layers]]\nname = \"c1\"\ntype = \"conv2d\"\nfilters = 4\nkernel_size = 3\n"
        "padding = 1\n"
        "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
        "[[model.layers]]\nname = \"p1\"\ntype = \"max_pool2d\"\nkernel_size = 2\n"
        "[[model.layers]]\nname = \"d1\"\ntype = \"dropout\"\nrate = 0.25\n"
        "[[model.layers]]\nname = \"f\"\ntype = \"flatten\"\n"
        "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 5\n";
    char err[256];
    toml_value *root = toml_parse(text, strlen(text), "micro.toml", err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    model *m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    toml_free(root);
    enum { SHARE = 7, MICRO = 3, STEPS = 5 };
    net whole, parts;
    net_init(&whole, m, SHARE, false);
    exec_deinit(&whole.e);
    ck_assert_int_eq(exec_init_micro(&whole.e, m, SHARE, SHARE, 1, whole.w, whole.g, err,
                                     sizeof(err)), 0);
    net_init(&parts, m, SHARE, false);
    exec_deinit(&parts.e);
    ck_assert_int_eq(exec_init_micro(&parts.e, m, SHARE, MICRO, 1, parts.w, parts.g, err,
                                     sizeof(err)), 0);
    ck_assert_int_eq(parts.e.n, MICRO);
    whole.e.seed = parts.e.seed = 11;
    uint64_t in = model_shape_elems(&m->input);
    /* the share as it arrives: its inputs, then its labels */
    float *x = malloc(SHARE * (in + 1) * sizeof(float));
    int32_t *y = (int32_t *)(x + SHARE * in);
    for (int64_t step = 0; step < STEPS; step++) {
        for (uint64_t k = 0; k < SHARE * in; k++)
            x[k] = (float)rng_uniform(5, (uint64_t)step, k);
        for (int k = 0; k < SHARE; k++)
            y[k] = (int32_t)(rng_hash(6, (uint64_t)step, (uint64_t)k) % 5);
        double a = net_step(&whole, m, x, y, step, SHARE), b = 0;
        /* the micro-batches of the share, as the wse-node runs them */
        for (int first = 0; first < SHARE; first += MICRO) {
            int count = SHARE - first < MICRO ? SHARE - first : MICRO;
            exec *e = &parts.e;
            exec_set_batch(e, count);
            e->sample_offset = (uint64_t)first;
            e->micro_later = e->accumulate = first > 0;
            e->micro_more = first + MICRO < SHARE;
            const float *xm = exec_take_input(e, x, first);
            for (int i = 0; i < m->nlayers; i++)
                exec_forward(e, i, xm, step, true);
            b += exec_loss(e, xm, exec_labels(e, x, SHARE, first), 1.0f / SHARE);
            for (int i = m->nlayers - 1; i >= 0; i--)
                exec_backward(e, i, xm, step);
        }
        for (int i = 0; i < m->ntensors; i++)
            for (uint64_t k = 0; k < m->tensors[i].elems; k++)
                parts.w[i][k] -= 0.05f * parts.g[i][k];
        ck_assert_msg(fabs(a - b) <= 1e-5 * fabs(a), "step %lld: loss %.9g whole, %.9g in parts",
                      (long long)step, a, b);
    }
    for (int i = 0; i < m->ntensors; i++) {
        double d = 0, n = 0;
        for (uint64_t k = 0; k < m->tensors[i].elems; k++) {
            d += pow(whole.w[i][k] - parts.w[i][k], 2);
            n += pow(whole.w[i][k], 2);
        }
        ck_assert_msg(sqrt(d) <= 1e-5 * sqrt(n), "%s: relative difference %g after %d steps",
                      m->tensors[i].name, sqrt(d / n), STEPS);
    }
    free(x);
    net_free(&whole, m);
    net_free(&parts, m);
    model_free(m);
}
END_TEST

START_TEST(lean_trains_as_the_reference_others)
{
    train_alike("resnet_small.toml", NULL, NULL, 3, 10);
    train_alike("fc_mnist.toml", NULL, NULL, 4, 10);
}
END_TEST

/* The bfloat16 copies in a file (model.spill_packed, exec_set_spill): the
 * same training bit for bit as in the arena, in a smaller arena; a file
 * that cannot be written is an error of the step, not a crash. */
START_TEST(spilled_copies_train_as_in_the_arena)
{
    model *m = load("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]");
    model *ms = load("../../cluster/volume.toml", "[1, 32, 32, 32]", "[1, 16, 16, 16]");
    m->act_bf16 = ms->act_bf16 = true;
    m->lighten = ms->lighten = false; /* the same outputs made again in both */
    ms->spill_packed = true;
    char err[256];
    FILE *spill = tmpfile(); /* unnamed, in the system's temporary directory */
    ck_assert_ptr_nonnull(spill);
    int fd = fileno(spill);
    int n = 1, classes = 2;
    net a, b;
    net_init(&a, m, n, false);
    net_init(&b, ms, n, false);
    ck_assert_int_eq(exec_set_spill(&b.e, fd, err, sizeof(err)), 0);
    ck_assert_uint_lt(b.e.arena_bytes, a.e.arena_bytes);
    uint64_t in = model_shape_elems(&m->input);
    float *x = malloc((size_t)n * in * sizeof(float));
    int32_t *y = malloc((size_t)n * a.e.label_elems * sizeof(int32_t));
    for (int64_t step = 0; step < 4; step++) {
        for (uint64_t k = 0; k < (uint64_t)n * in; k++)
            x[k] = (float)rng_uniform(3, (uint64_t)step, k);
        for (uint64_t k = 0; k < (uint64_t)n * a.e.label_elems; k++)
            y[k] = (int32_t)(rng_hash(4, (uint64_t)step, k) % (uint64_t)classes);
        double la = net_step(&a, m, x, y, step, n), lb = net_step(&b, ms, x, y, step, n);
        ck_assert_msg(isfinite(la) && la == lb, "step %lld: loss %.9g in the arena, %.9g spilled",
                      (long long)step, la, lb);
    }
    for (int i = 0; i < m->ntensors; i++)
        ck_assert_msg(memcmp(a.w[i], b.w[i], m->tensors[i].elems * sizeof(float)) == 0,
                      "%s differs with the copies spilled", m->tensors[i].name);
    ck_assert_int_eq(exec_spill_error(&b.e), 0);
    ck_assert_uint_gt(b.e.spill_bytes, 0);
    printf("volume.toml, bfloat16 copies spilled: the arena %llu KiB against %llu, %llu KiB "
           "through the file in 4 steps\n", (unsigned long long)(b.e.arena_bytes >> 10),
           (unsigned long long)(a.e.arena_bytes >> 10),
           (unsigned long long)(b.e.spill_bytes >> 10));
    net_free(&b, ms);
    fclose(spill);
    /* a file open for reading only: the first pack fails, and says so */
    fd = open("/dev/null", O_RDONLY);
    net_init(&b, ms, n, false);
    ck_assert_int_eq(exec_set_spill(&b.e, fd, err, sizeof(err)), 0);
    net_step(&b, ms, x, y, 0, n);
    ck_assert_int_eq(exec_spill_error(&b.e), -EBADF);
    net_free(&b, ms);
    close(fd);
    free(x);
    free(y);
    net_free(&a, m);
    model_free(m);
    model_free(ms);
}
END_TEST

int main(void)
{
    
Suite *s = suite_create("memplan");
    TCase *t = tcase_create("core");
    tcase_set_timeout(t, 240);
    tcase_add_test(t, plans_hold_what_each_operation_reads);
    tcase_add_test(t, unet_plan_is_lean);
    tcase_add_test(t, lightened_plan_makes_costly_outputs_again);
    tcase_add_test(t, lean_trains_as_the_reference_unet);
    tcase_add_test(t, lean_trains_as_the_reference_others);
    tcase_add_test(t, micro_batches_add_up_to_the_share);
    tcase_add_test(t, bfloat16_activations_train_close);
    tcase_add_test(t, fused_relus_train_as_apart);
    tcase_add_test(t, rows_as_depth_trains_as_the_image);
    tcase_add_test(t, spilled_copies_train_as_in_the_arena);
    suite_add_tcase(s, t);
    /* the paths each processor takes (the runs as on older processors,
     * tests/memplan/meson.build, run this case alone: CK_RUN_CASE) */
    TCase *l = tcase_create("layouts");
    tcase_set_timeout(l, 240);
    tcase_add_test(l, blocked_groups_train_as_plain);
    tcase_add_test(l, kept_outputs_train_as_lean);
    suite_add_tcase(s, l);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
