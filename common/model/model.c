/* Model graph compiler: checks the [model] table of a job file layer by
 * layer, infers shapes in file order and lays out the parameter tensors.
 * A bad graph yields one message naming the layer, the place and the shapes. */
#include "model.h"

#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Elements of one activation or tensor per sample: far beyond any real
 * model, low enough that every cost below fits 64 bits. */
#define MODEL_ELEMS_MAX (UINT64_C(1) << 40)

typedef struct compiler compiler;

/* What a layer type accepts and how its output is inferred. */
typedef struct {
    const char *name;      /* as written in job files */
    const char *keys[10];  /* keys of the type besides name, type and inputs; NULL-terminated */
    int (*infer)(compiler *c);
} layer_kind;

struct compiler {
    model *m;               /* being built */
    const char *source;     /* the document's name */
    char *err;              /* the caller's message buffer */
    size_t errlen;
    const toml_value *lt;   /* the table of the layer being compiled */
    model_layer *l;         /* the layer being compiled */
    int index;              /* its index */
    int tensor_cap;         /* allocated entries of m->tensors */
};

static const char *const loss_names[LOSS_COUNT] = {
    [LOSS_SOFTMAX_CROSS_ENTROPY] = "softmax_cross_entropy",
    [LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY] = "pixel_softmax_cross_entropy",
    [LOSS_BCE_WITH_LOGITS] = "bce_with_logits",
    [LOSS_DICE] = "dice",
    [LOSS_BCE_DICE] = "bce_dice",
    [LOSS_SSCE_DICE] = "ssce_dice",
    [LOSS_MULTILABEL_BCE] = "multilabel_bce",
};

/* ---- messages ---------------------------------------------------------- */

__attribute__((format(printf, 3, 4)))
static int fail(compiler *c, toml_pos pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    toml_verrorf(c->err, c->errlen, c->source, pos, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* A problem of the current layer: 'layer "NAME": ' and the message. */
__attribute__((format(printf, 3, 4)))
static int lfail(compiler *c, toml_pos pos, const char *fmt, ...)
{
    char msg[384];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (c->l && c->l->name[0])
        return fail(c, pos, "layer \"%s\": %s", c->l->name, msg);
    return fail(c, pos, "layer %d: %s", c->index + 1, msg);
}

const char *model_shape_str(const model_shape *s, char *buf, size_t n)
{
    if (s->ndim == 1)
        snprintf(buf, n, "%lld", (long long)s->d[0]);
    else if (s->ndim == 4)
        snprintf(buf, n, "%lldx%lldx%lldx%lld", (long long)s->d[0], (long long)s->d[1],
                 (long long)s->d[2], (long long)s->d[3]);
    else
        snprintf(buf, n, "%lldx%lldx%lld", (long long)s->d[0], (long long)s->d[1],
                 (long long)s->d[2]);
    return buf;
}

uint64_t model_shape_elems(const model_shape *s)
{
    uint64_t e = 1;
    for (int i = 0; i < s->ndim; i++)
        e *= (uint64_t)s->d[i];
    return e;
}

/* "an integer", "a string", ... for messages. */
static const char *a_type(const toml_value *v)
{
    switch (toml_type_of(v)) {
    case TOML_ARRAY: return "an array";
    case TOML_INTEGER: return "an integer";
    case TOML_TABLE: return "a table";
    case TOML_STRING: return "a string";
    case TOML_FLOAT: return "a float";
    case TOML_BOOL: return "a boolean";
    }
    return "a value";
}

/* The name of input i of the current layer, for messages. */
static const char *input_name(const compiler *c, int i)
{
    int src = c->l->inputs[i];
    return src < 0 ? "input" : c->m->layers[src].name;
}

static const model_shape *input_shape(const compiler *c, int i)
{
    int src = c->l->inputs[i];
    return src < 0 ? &c->m->input : &c->m->layers[src].out;
}

/* ---- reading layer keys ------------------------------------------------ */

static const toml_value *key_value(compiler *c, const char *key)
{
    return toml_table_get(c->lt, key);
}

/* An integer key in [min, max]; def when absent, unless required. */
static int get_int(compiler *c, const char *key, bool required, int64_t def, int64_t min,
                   int64_t max, int64_t *out)
{
    const toml_value *v = key_value(c, key);
    if (!v) {
        if (required)
            return lfail(c, c->l->pos, "missing key \"%s\" (%s layers need it)", key,
                         layer_type_name(c->l->type));
        *out = def;
        return 0;
    }
    if (toml_type_of(v) != TOML_INTEGER)
        return lfail(c, toml_pos_of(v), "\"%s\" must be an integer, not %s", key, a_type(v));
    int64_t x = toml_int(v);
    if (x < min)
        return lfail(c, toml_pos_of(v), "\"%s\" must be at least %lld, got %lld", key,
                     (long long)min, (long long)x);
    if (x > max)
        return lfail(c, toml_pos_of(v), "\"%s\" must be at most %lld, got %lld", key,
                     (long long)max, (long long)x);
    *out = x;
    return 0;
}

/* A size of n spatial axes (2: an image's, 3: a volume's) in words. */
static const char *axes_words(int n)
{
    return n == 3 ? "[depth, height, width]" : "[height, width]";
}

/* "3x3" or "2x3x3": a size of n axes. */
static const char *dims_str(const int *v, int n, char *buf, size_t len)
{
    if (n == 3)
        snprintf(buf, len, "%dx%dx%d", v[0], v[1], v[2]);
    else
        snprintf(buf, len, "%dx%d", v[0], v[1]);
    return buf;
}

/* A size of n spatial axes given as one integer or as one per axis
 * ([height, width]; a volume's [depth, height, width]), each in [min,
 * MODEL_DIM_MAX]. */
static int get_sizes(compiler *c, const char *key, bool required, int def, int min, int n, int *out)
{
    const toml_value *v = key_value(c, key);
    if (!v || toml_type_of(v) == TOML_INTEGER) {
        int64_t x;
        int r = get_int(c, key, required, def, min, MODEL_DIM_MAX, &x);
        if (r < 0)
            return r;
        for (int i = 0; i < n; i++)
            out[i] = (int)x;
        return 0;
    }
    if (toml_type_of(v) != TOML_ARRAY || toml_array_len(v) != (size_t)n)
        return lfail(c, toml_pos_of(v), "\"%s\" must be an integer or %s", key, axes_words(n));
    for (int i = 0; i < n; i++) {
        const toml_value *e = toml_array_at(v, (size_t)i);
        if (toml_type_of(e) != TOML_INTEGER)
            return lfail(c, toml_pos_of(e), "\"%s\" must be an integer or %s", key,
                         axes_words(n));
        int64_t x = toml_int(e);
        if (x < min || x > MODEL_DIM_MAX)
            return lfail(c, toml_pos_of(e), "\"%s\" must be between %d and %d, got %lld", key,
                         min, MODEL_DIM_MAX, (long long)x);
        out[i] = (int)x;
    }
    return 0;
}

/* A number (integer or float) in [min, max], or below max when max_open. */
static int get_real(compiler *c, const char *key, bool required, double def, double min,
                    double max, bool max_open, double *out)
{
    const toml_value *v = key_value(c, key);
    if (!v) {
        if (required)
            return lfail(c, c->l->pos, "missing key \"%s\" (%s layers need it)", key,
                         layer_type_name(c->l->type));
        *out = def;
        return 0;
    }
    double x;
    if (toml_type_of(v) == TOML_FLOAT)
        x = toml_float(v);
    else if (toml_type_of(v) == TOML_INTEGER)
        x = (double)toml_int(v);
    else
        return lfail(c, toml_pos_of(v), "\"%s\" must be a number, not %s", key, a_type(v));
    if (!(x >= min) || x > max || (max_open && x >= max)) {
        if (max_open)
            return lfail(c, toml_pos_of(v), "\"%s\" must be at least %g and below %g, got %g",
                         key, min, max, x);
        return lfail(c, toml_pos_of(v), "\"%s\" must be between %g and %g, got %g", key, min,
                     max, x);
    }
    *out = x;
    return 0;
}

static int get_bool(compiler *c, const char *key, bool def, bool *out)
{
    const toml_value *v = key_value(c, key);
    if (!v) {
        *out = def;
        return 0;
    }
    if (toml_type_of(v) != TOML_BOOL)
        return lfail(c, toml_pos_of(v), "\"%s\" must be true or false, not %s", key,
                     a_type(v));
    *out = toml_bool(v);
    return 0;
}

/* ---- tensors and costs ------------------------------------------------- */

/* acc *= a, false on overflow. */
static bool mul(uint64_t *acc, uint64_t a)
{
    return !__builtin_mul_overflow(*acc, a, acc);
}

static int too_large(compiler *c)
{
    return lfail(c, c->l->pos, "the layer is too large (its sizes overflow 64-bit counts)");
}

static int add_tensor5(compiler *c, const char *suffix, bool trainable, int ndim, int64_t d0,
                       int64_t d1, int64_t d2, int64_t d3, int64_t d4)
{
    model *m = c->m;
    if (m->ntensors == c->tensor_cap) {
        int cap = c->tensor_cap ? 2 * c->tensor_cap : 64;
        model_tensor *t = realloc(m->tensors, (size_t)cap * sizeof(*t));
        if (!t)
            return lfail(c, c->l->pos, "out of memory");
        m->tensors = t;
        c->tensor_cap = cap;
    }
    model_tensor *t = &m->tensors[m->ntensors];
    memset(t, 0, sizeof(*t));
    t->id = (uint32_t)m->ntensors;
    snprintf(t->name, sizeof(t->name), "%s.%s", c->l->name, suffix);
    t->ndim = ndim;
    int64_t d[5] = {d0, d1, d2, d3, d4};
    t->elems = 1;
    for (int i = 0; i < 5; i++) {
        t->dims[i] = i < ndim ? d[i] : 1;
        if (!mul(&t->elems, (uint64_t)t->dims[i]) || t->elems > MODEL_ELEMS_MAX)
            return too_large(c);
    }
    t->trainable = trainable;
    t->layer = c->index;
    if (c->l->ntensors == 0)
        c->l->first_tensor = m->ntensors;
    c->l->ntensors++;
    if (trainable)
        c->l->params += t->elems;
    else
        c->l->buffers += t->elems;
    m->ntensors++;
    return 0;
}

static int add_tensor(compiler *c, const char *suffix, bool trainable, int ndim, int64_t d0,
                      int64_t d1, int64_t d2, int64_t d3)
{
    return add_tensor5(c, suffix, trainable, ndim, d0, d1, d2, d3, 1);
}

/* Sets flops to per_elem FLOPs per output element. */
static int flops_per_elem(compiler *c, uint64_t per_elem)
{
    uint64_t f = model_shape_elems(&c->l->out);
    if (!mul(&f, per_elem))
        return too_large(c);
    c->l->flops = f;
    return 0;
}

/* ---- shape checks shared by several types ------------------------------ */

static int need_one_input(compiler *c)
{
    if (c->l->ninputs != 1)
        return lfail(c, c->l->pos, "%s takes 1 input, got %d", layer_type_name(c->l->type),
                     c->l->ninputs);
    return 0;
}

static int need_chw(compiler *c)
{
    char sb[64];
    if (c->l->in.ndim != 3)
        return lfail(c, c->l->pos, "%s needs a C x H x W input, but \"%s\" gives %s",
                     layer_type_name(c->l->type), input_name(c, 0),
                     model_shape_str(&c->l->in, sb, sizeof(sb)));
    return 0;
}

static int need_cdhw(compiler *c)
{
    char sb[64];
    if (c->l->in.ndim != 4)
        return lfail(c, c->l->pos, "%s needs a C x D x H x W input (a volume), but \"%s\" gives "
                     "%s", layer_type_name(c->l->type), input_name(c, 0),
                     model_shape_str(&c->l->in, sb, sizeof(sb)));
    return 0;
}

/* An image's or a volume's C x ... input (norms, upsampling). */
static int need_spatial(compiler *c)
{
    return c->l->in.ndim == 4 ? 0 : need_chw(c);
}

static int check_out(compiler *c, const char *how)
{
    char ib[64], ob[64];
    model_shape *o = &c->l->out;
    for (int i = 0; i < o->ndim; i++) {
        if (o->d[i] < 1)
            return lfail(c, c->l->pos, "output would be %s from the %s input of \"%s\" (%s)",
                         model_shape_str(o, ob, sizeof(ob)),
                         model_shape_str(&c->l->in, ib, sizeof(ib)), input_name(c, 0), how);
        if (o->d[i] > MODEL_DIM_MAX)
            return lfail(c, c->l->pos, "output would be %s, larger than %d in a dimension",
                         model_shape_str(o, ob, sizeof(ob)), MODEL_DIM_MAX);
    }
    uint64_t e = 1;
    for (int i = 0; i < o->ndim; i++)
        if (!mul(&e, (uint64_t)o->d[i]) || e > MODEL_ELEMS_MAX)
            return lfail(c, c->l->pos, "output would be %s, more than %llu elements per sample",
                         model_shape_str(o, ob, sizeof(ob)), (unsigned long long)MODEL_ELEMS_MAX);
    return 0;
}

/* ---- layer types ------------------------------------------------------- */

static int infer_dense(compiler *c)
{
    model_layer *l = c->l;
    char sb[64];
    int r;
    if ((r = need_one_input(c)) < 0)
        return r;
    if (l->in.ndim != 1)
        return lfail(c, l->pos, "dense needs 1-D input features, but \"%s\" gives %s "
                     "(add a flatten layer)", input_name(c, 0),
                     model_shape_str(&l->in, sb, sizeof(sb)));
    if ((r = get_int(c, "units", true, 0, 1, MODEL_DIM_MAX, &l->units)) < 0 ||
        (r = get_bool(c, "bias", true, &l->bias)) < 0)
        return r;
    l->out = (model_shape){1, {l->units, 1, 1}};
    int64_t in = l->in.d[0];
    if ((r = add_tensor(c, "weight", true, 2, l->units, in, 1, 1)) < 0 ||
        (l->bias && (r = add_tensor(c, "bias", true, 1, l->units, 1, 1, 1)) < 0))
        return r;
    uint64_t f = 2;
    if (!mul(&f, (uint64_t)in) || !mul(&f, (uint64_t)l->units))
        return too_large(c);
    l->flops = f + (l->bias ? (uint64_t)l->units : 0);
    return 0;
}

/* Reads padding for conv2d: an integer, [ph, pw] or "same". */
/* The spatial axes of a convolution's or pooling's input: 2 of an image,
 * 3 of a volume (the layer's type says which). */
static int spatial_axes(const model_layer *l)
{
    return l->type == LAYER_CONV3D || l->type == LAYER_CONV_TRANSPOSE3D ||
                   l->type == LAYER_MAX_POOL3D || l->type == LAYER_AVG_POOL3D
               ? 3
               : 2;
}

/* A convolution's padding over n axes: a size, or "same" (stride 1 and an
 * odd span on every axis). */
static int get_conv_padding(compiler *c, int n)
{
    model_layer *l = c->l;
    const toml_value *v = key_value(c, "padding");
    if (!v || toml_type_of(v) != TOML_STRING)
        return get_sizes(c, "padding", false, 0, 0, n, l->padding);
    if (strcmp(toml_string(v), "same") != 0)
        return lfail(c, toml_pos_of(v), "\"padding\" must be an integer, %s or \"same\", got "
                     "\"%s\"", axes_words(n), toml_string(v));
    for (int i = 0; i < n; i++) {
        int64_t span = (int64_t)l->dilation[i] * (l->kernel[i] - 1);
        char k[32], st[32];
        if (l->stride[i] != 1 || span % 2 != 0)
            return lfail(c, toml_pos_of(v), "padding \"same\" needs stride 1 and an odd kernel "
                         "size, got kernel %s, stride %s", dims_str(l->kernel, n, k, sizeof(k)),
                         dims_str(l->stride, n, st, sizeof(st)));
        l->padding[i] = (int)(span / 2);
    }
    return 0;
}

/* The input's channels and spatial axes: need_chw or need_cdhw. */
static int need_axes(compiler *c, int n)
{
    return n == 3 ? need_cdhw(c) : need_chw(c);
}

/* conv2d and conv3d. */
static int infer_conv(compiler *c)
{
    model_layer *l = c->l;
    int n = spatial_axes(l);
    char how[192], k[32], st[32], p[32], dl[32];
    int r;
    if ((r = need_one_input(c)) < 0 || (r = need_axes(c, n)) < 0)
        return r;
    if ((r = get_int(c, "filters", true, 0, 1, MODEL_DIM_MAX, &l->filters)) < 0 ||
        (r = get_sizes(c, "kernel_size", true, 0, 1, n, l->kernel)) < 0 ||
        (r = get_sizes(c, "stride", false, 1, 1, n, l->stride)) < 0 ||
        (r = get_sizes(c, "dilation", false, 1, 1, n, l->dilation)) < 0 ||
        (r = get_conv_padding(c, n)) < 0 || (r = get_bool(c, "bias", true, &l->bias)) < 0)
        return r;
    l->out.ndim = n + 1;
    l->out.d[0] = l->filters;
    for (int i = 0; i < n; i++) {
        int64_t num = l->in.d[1 + i] + 2 * (int64_t)l->padding[i] -
                      (int64_t)l->dilation[i] * (l->kernel[i] - 1) - 1;
        l->out.d[1 + i] = num < 0 ? 0 : num / l->stride[i] + 1;
    }
    snprintf(how, sizeof(how), "kernel %s, stride %s, padding %s, dilation %s",
             dims_str(l->kernel, n, k, sizeof(k)), dims_str(l->stride, n, st, sizeof(st)),
             dims_str(l->padding, n, p, sizeof(p)), dims_str(l->dilation, n, dl, sizeof(dl)));
    if ((r = check_out(c, how)) < 0)
        return r;
    int64_t cin = l->in.d[0];
    if ((r = add_tensor5(c, "weight", true, n + 2, l->filters, cin, l->kernel[0], l->kernel[1],
                         n == 3 ? l->kernel[2] : 1)) < 0 ||
        (l->bias && (r = add_tensor(c, "bias", true, 1, l->filters, 1, 1, 1)) < 0))
        return r;
    uint64_t f = 2, outs = model_shape_elems(&l->out);
    if (!mul(&f, (uint64_t)cin))
        return too_large(c);
    for (int i = 0; i < n; i++)
        if (!mul(&f, (uint64_t)l->kernel[i]))
            return too_large(c);
    if (!mul(&f, outs) || __builtin_add_overflow(f, l->bias ? outs : 0, &f))
        return too_large(c);
    l->flops = f;
    return 0;
}

/* conv_transpose2d and conv_transpose3d. */
static int infer_conv_transpose(compiler *c)
{
    model_layer *l = c->l;
    int n = spatial_axes(l);
    char how[192], k[32], st[32], p[32], op[32];
    int r;
    if ((r = need_one_input(c)) < 0 || (r = need_axes(c, n)) < 0)
        return r;
    if ((r = get_int(c, "filters", true, 0, 1, MODEL_DIM_MAX, &l->filters)) < 0 ||
        (r = get_sizes(c, "kernel_size", true, 0, 1, n, l->kernel)) < 0 ||
        (r = get_sizes(c, "stride", false, 1, 1, n, l->stride)) < 0 ||
        (r = get_sizes(c, "padding", false, 0, 0, n, l->padding)) < 0 ||
        (r = get_sizes(c, "output_padding", false, 0, 0, n, l->output_padding)) < 0 ||
        (r = get_sizes(c, "dilation", false, 1, 1, n, l->dilation)) < 0 ||
        (r = get_bool(c, "bias", true, &l->bias)) < 0)
        return r;
    for (int i = 0; i < n; i++)
        if (l->output_padding[i] >= l->stride[i] && l->output_padding[i] >= l->dilation[i])
            return lfail(c, toml_pos_of(key_value(c, "output_padding")),
                         "\"output_padding\" must be smaller than the stride or the dilation, "
                         "got %s with stride %s", dims_str(l->output_padding, n, op, sizeof(op)),
                         dims_str(l->stride, n, st, sizeof(st)));
    l->out.ndim = n + 1;
    l->out.d[0] = l->filters;
    for (int i = 0; i < n; i++)
        l->out.d[1 + i] = (l->in.d[1 + i] - 1) * l->stride[i] - 2 * (int64_t)l->padding[i] +
                          (int64_t)l->dilation[i] * (l->kernel[i] - 1) + l->output_padding[i] + 1;
    snprintf(how, sizeof(how), "kernel %s, stride %s, padding %s",
             dims_str(l->kernel, n, k, sizeof(k)), dims_str(l->stride, n, st, sizeof(st)),
             dims_str(l->padding, n, p, sizeof(p)));
    if ((r = check_out(c, how)) < 0)
        return r;
    int64_t cin = l->in.d[0];
    /* PyTorch's layout of a transposed convolution's weight: in, out, k... */
    if ((r = add_tensor5(c, "weight", true, n + 2, cin, l->filters, l->kernel[0], l->kernel[1],
                         n == 3 ? l->kernel[2] : 1)) < 0 ||
        (l->bias && (r = add_tensor(c, "bias", true, 1, l->filters, 1, 1, 1)) < 0))
        return r;
    /* Every input element scatters into filters x the kernel's outputs. */
    uint64_t f = 2, outs = model_shape_elems(&l->out);
    if (!mul(&f, model_shape_elems(&l->in)) || !mul(&f, (uint64_t)l->filters))
        return too_large(c);
    for (int i = 0; i < n; i++)
        if (!mul(&f, (uint64_t)l->kernel[i]))
            return too_large(c);
    if (__builtin_add_overflow(f, l->bias ? outs : 0, &f))
        return too_large(c);
    l->flops = f;
    return 0;
}

/* max_pool2d, avg_pool2d, max_pool3d and avg_pool3d. */
static int infer_pool(compiler *c)
{
    model_layer *l = c->l;
    int n = spatial_axes(l);
    char how[160], k[32], st[32], p[32];
    int r;
    if ((r = need_one_input(c)) < 0 || (r = need_axes(c, n)) < 0)
        return r;
    if ((r = get_sizes(c, "kernel_size", true, 0, 1, n, l->kernel)) < 0)
        return r;
    uint64_t window = 1;
    for (int i = 0; i < n; i++)
        window *= (uint64_t)l->kernel[i];
    /* a max-pool window's argmax is kept in a byte */
    if ((l->type == LAYER_MAX_POOL2D || l->type == LAYER_MAX_POOL3D) && window > 256)
        return lfail(c, toml_pos_of(key_value(c, "kernel_size")),
                     "%s windows of at most 256 elements are supported, got %s",
                     n == 3 ? "max_pool3d" : "max_pool2d", dims_str(l->kernel, n, k, sizeof(k)));
    if (key_value(c, "stride")) {
        if ((r = get_sizes(c, "stride", false, 1, 1, n, l->stride)) < 0)
            return r;
    } else {
        for (int i = 0; i < n; i++)
            l->stride[i] = l->kernel[i];
    }
    if ((r = get_sizes(c, "padding", false, 0, 0, n, l->padding)) < 0)
        return r;
    for (int i = 0; i < n; i++)
        if (2 * l->padding[i] > l->kernel[i])
            return lfail(c, toml_pos_of(key_value(c, "padding")),
                         "\"padding\" must be at most half of \"kernel_size\", got padding %s "
                         "for kernel %s", dims_str(l->padding, n, p, sizeof(p)),
                         dims_str(l->kernel, n, k, sizeof(k)));
    for (int i = 0; i < n; i++)
        l->dilation[i] = 1;
    l->out.ndim = n + 1;
    l->out.d[0] = l->in.d[0];
    for (int i = 0; i < n; i++) {
        int64_t num = l->in.d[1 + i] + 2 * (int64_t)l->padding[i] - l->kernel[i];
        l->out.d[1 + i] = num < 0 ? 0 : num / l->stride[i] + 1;
    }
    snprintf(how, sizeof(how), "kernel %s, stride %s, padding %s",
             dims_str(l->kernel, n, k, sizeof(k)), dims_str(l->stride, n, st, sizeof(st)),
             dims_str(l->padding, n, p, sizeof(p)));
    if ((r = check_out(c, how)) < 0)
        return r;
    return flops_per_elem(c, window);
}

static int infer_upsample(compiler *c)
{
    model_layer *l = c->l;
    int64_t scale;
    char how[64];
    int r;
    if ((r = need_one_input(c)) < 0 || (r = need_spatial(c)) < 0)
        return r;
    if ((r = get_int(c, "scale_factor", false, 2, 1, 1024, &scale)) < 0)
        return r;
    l->scale = (int)scale;
    const toml_value *mode = key_value(c, "mode");
    bool vol = l->in.ndim == 4;
    const char *linear = vol ? "trilinear" : "bilinear";
    l->mode = UPSAMPLE_NEAREST;
    if (mode) {
        if (toml_type_of(mode) != TOML_STRING ||
            (strcmp(toml_string(mode), "nearest") != 0 && strcmp(toml_string(mode), linear) != 0))
            return lfail(c, toml_pos_of(mode), "\"mode\" must be \"nearest\" or \"%s\"%s",
                         linear, vol ? " (the input is a volume)" : "");
        if (strcmp(toml_string(mode), linear) == 0)
            l->mode = vol ? UPSAMPLE_TRILINEAR : UPSAMPLE_BILINEAR;
    }
    if (vol)
        l->out = (model_shape){4, {l->in.d[0], l->in.d[1] * scale, l->in.d[2] * scale,
                                   l->in.d[3] * scale}};
    else
        l->out = (model_shape){3, {l->in.d[0], l->in.d[1] * scale, l->in.d[2] * scale}};
    snprintf(how, sizeof(how), "scale factor %d", l->scale);
    if ((r = check_out(c, how)) < 0)
        return r;
    return flops_per_elem(c, l->mode == UPSAMPLE_BILINEAR ? 7 : l->mode == UPSAMPLE_TRILINEAR ? 15 : 0);
}

static int infer_concat(compiler *c)
{
    model_layer *l = c->l;
    char ab[64], bb[64];
    if (l->ninputs < 2)
        return lfail(c, l->pos, "concat needs at least 2 inputs, got %d", l->ninputs);
    const model_shape *a = input_shape(c, 0);
    l->out = *a;
    for (int i = 1; i < l->ninputs; i++) {
        const model_shape *b = input_shape(c, i);
        if (a->ndim != b->ndim)
            return lfail(c, l->pos, "concat inputs differ in rank: \"%s\" is %s, \"%s\" is %s",
                         input_name(c, 0), model_shape_str(a, ab, sizeof(ab)), input_name(c, i),
                         model_shape_str(b, bb, sizeof(bb)));
        if ((a->ndim == 3 && (a->d[1] != b->d[1] || a->d[2] != b->d[2])) ||
            (a->ndim == 4 && (a->d[1] != b->d[1] || a->d[2] != b->d[2] || a->d[3] != b->d[3])))
            return lfail(c, l->pos,
                         "concat inputs differ in spatial size: \"%s\" is %s, \"%s\" is %s",
                         input_name(c, 0), model_shape_str(a, ab, sizeof(ab)), input_name(c, i),
                         model_shape_str(b, bb, sizeof(bb)));
        l->out.d[0] += b->d[0];
    }
    int r = check_out(c, "concatenated channels");
    return r < 0 ? r : flops_per_elem(c, 0);
}

static int infer_add(compiler *c)
{
    model_layer *l = c->l;
    char ab[64], bb[64];
    if (l->ninputs != 2)
        return lfail(c, l->pos, "add takes 2 inputs, got %d", l->ninputs);
    const model_shape *a = input_shape(c, 0), *b = input_shape(c, 1);
    bool same = a->ndim == b->ndim;
    for (int i = 0; same && i < a->ndim; i++)
        same = a->d[i] == b->d[i];
    if (!same)
        return lfail(c, l->pos, "add inputs differ in shape: \"%s\" is %s, \"%s\" is %s",
                     input_name(c, 0), model_shape_str(a, ab, sizeof(ab)), input_name(c, 1),
                     model_shape_str(b, bb, sizeof(bb)));
    l->out = *a;
    return flops_per_elem(c, 1);
}

static int infer_batch_norm(compiler *c)
{
    model_layer *l = c->l;
    int r;
    if ((r = need_one_input(c)) < 0)
        return r;
    if ((r = get_real(c, "momentum", false, 0.1, 0.0, 1.0, false, &l->momentum)) < 0 ||
        (r = get_real(c, "eps", false, 1e-5, 1e-30, 1.0, false, &l->eps)) < 0)
        return r;
    l->out = l->in;
    int64_t ch = l->in.d[0];
    if ((r = add_tensor(c, "weight", true, 1, ch, 1, 1, 1)) < 0 ||
        (r = add_tensor(c, "bias", true, 1, ch, 1, 1, 1)) < 0 ||
        (r = add_tensor(c, "running_mean", false, 1, ch, 1, 1, 1)) < 0 ||
        (r = add_tensor(c, "running_var", false, 1, ch, 1, 1, 1)) < 0)
        return r;
    return flops_per_elem(c, 4);
}

static int infer_group_norm(compiler *c)
{
    model_layer *l = c->l;
    int64_t groups;
    int r;
    if ((r = need_one_input(c)) < 0 || (r = need_spatial(c)) < 0)
        return r;
    if ((r = get_int(c, "groups", true, 0, 1, MODEL_DIM_MAX, &groups)) < 0 ||
        (r = get_real(c, "eps", false, 1e-5, 1e-30, 1.0, false, &l->eps)) < 0)
        return r;
    l->groups = (int)groups;
    int64_t ch = l->in.d[0];
    if (ch % groups != 0)
        return lfail(c, toml_pos_of(key_value(c, "groups")),
                     "\"groups\" (%lld) must divide the %lld channels of \"%s\"",
                     (long long)groups, (long long)ch, input_name(c, 0));
    l->out = l->in;
    if ((r = add_tensor(c, "weight", true, 1, ch, 1, 1, 1)) < 0 ||
        (r = add_tensor(c, "bias", true, 1, ch, 1, 1, 1)) < 0)
        return r;
    return flops_per_elem(c, 4);
}

/* relu, gelu, sigmoid, tanh: shape-preserving with a fixed cost. */
static int infer_elementwise(compiler *c)
{
    static const uint64_t cost[LAYER_TYPE_COUNT] = {
        [LAYER_RELU] = 1, [LAYER_GELU] = 8, [LAYER_SIGMOID] = 4, [LAYER_TANH] = 4,
    };
    int r = need_one_input(c);
    if (r < 0)
        return r;
    c->l->out = c->l->in;
    return flops_per_elem(c, cost[c->l->type]);
}

static int infer_leaky_relu(compiler *c)
{
    int r = need_one_input(c);
    if (r < 0 || (r = get_real(c, "negative_slope", false, 0.01, -1e6, 1e6, false,
                               &c->l->negative_slope)) < 0)
        return r;
    c->l->out = c->l->in;
    return flops_per_elem(c, 2);
}

static int infer_dropout(compiler *c)
{
    int r = need_one_input(c);
    if (r < 0 || (r = get_real(c, "rate", true, 0, 0.0, 1.0, true, &c->l->rate)) < 0)
        return r;
    c->l->out = c->l->in;
    return flops_per_elem(c, 1);
}

static int infer_flatten(compiler *c)
{
    int r = need_one_input(c);
    if (r < 0)
        return r;
    c->l->out = (model_shape){1, {(int64_t)model_shape_elems(&c->l->in), 1, 1}};
    return 0;
}

static const layer_kind kinds[LAYER_TYPE_COUNT] = {
    [LAYER_DENSE] = {"dense", {"units", "bias"}, infer_dense},
    [LAYER_CONV2D] = {"conv2d",
                      {"filters", "kernel_size", "stride", "padding", "dilation", "bias"},
                      infer_conv},
    [LAYER_CONV_TRANSPOSE2D] = {"conv_transpose2d",
                                {"filters", "kernel_size", "stride", "padding",
                                 "output_padding", "dilation", "bias"},
                                infer_conv_transpose},
    [LAYER_MAX_POOL2D] = {"max_pool2d", {"kernel_size", "stride", "padding"}, infer_pool},
    [LAYER_AVG_POOL2D] = {"avg_pool2d", {"kernel_size", "stride", "padding"}, infer_pool},
    [LAYER_UPSAMPLE] = {"upsample", {"scale_factor", "mode"}, infer_upsample},
    [LAYER_CONCAT] = {"concat", {NULL}, infer_concat},
    [LAYER_ADD] = {"add", {NULL}, infer_add},
    [LAYER_BATCH_NORM] = {"batch_norm", {"momentum", "eps"}, infer_batch_norm},
    [LAYER_GROUP_NORM] = {"group_norm", {"groups", "eps"}, infer_group_norm},
    [LAYER_RELU] = {"relu", {NULL}, infer_elementwise},
    [LAYER_LEAKY_RELU] = {"leaky_relu", {"negative_slope"}, infer_leaky_relu},
    [LAYER_GELU] = {"gelu", {NULL}, infer_elementwise},
    [LAYER_SIGMOID] = {"sigmoid", {NULL}, infer_elementwise},
    [LAYER_TANH] = {"tanh", {NULL}, infer_elementwise},
    [LAYER_DROPOUT] = {"dropout", {"rate"}, infer_dropout},
    [LAYER_FLATTEN] = {"flatten", {NULL}, infer_flatten},
    [LAYER_CONV3D] = {"conv3d",
                      {"filters", "kernel_size", "stride", "padding", "dilation", "bias"},
                      infer_conv},
    [LAYER_CONV_TRANSPOSE3D] = {"conv_transpose3d",
                                {"filters", "kernel_size", "stride", "padding",
                                 "output_padding", "dilation", "bias"},
                                infer_conv_transpose},
    [LAYER_MAX_POOL3D] = {"max_pool3d", {"kernel_size", "stride", "padding"}, infer_pool},
    [LAYER_AVG_POOL3D] = {"avg_pool3d", {"kernel_size", "stride", "padding"}, infer_pool},
};

const char *layer_type_name(layer_type t)
{
    return (unsigned)t < LAYER_TYPE_COUNT ? kinds[t].name : "unknown";
}

const char *model_loss_name(model_loss l)
{
    return (unsigned)l < LOSS_COUNT ? loss_names[l] : "unknown";
}

/* ---- the graph --------------------------------------------------------- */

int model_find_layer(const model *m, const char *name)
{
    for (int i = 0; i < m->nlayers; i++)
        if (strcmp(m->layers[i].name, name) == 0)
            return i;
    return -1;
}

/* Index of the layer table called name among the first n, or -1. */
static int find_table(const toml_value *layers, size_t n, const char *name)
{
    for (size_t i = 0; i < n; i++) {
        const toml_value *t = toml_array_at(layers, i);
        if (toml_type_of(t) != TOML_TABLE)
            continue;
        const toml_value *v = toml_table_get(t, "name");
        if (v && toml_type_of(v) == TOML_STRING && strcmp(toml_string(v), name) == 0)
            return (int)i;
    }
    return -1;
}

static bool valid_name(const char *s, size_t len)
{
    if (len == 0 || len >= MODEL_NAME_MAX)
        return false;
    for (size_t i = 0; i < len; i++) {
        char ch = s[i];
        if (!((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
              ch == '_' || ch == '-' || ch == '.'))
            return false;
    }
    /* (dots as in a module path, encoder.unet_blocks.0.layers.0.conv: the
     * tensors' suffixes have none, so <layer>.<suffix> names one tensor) */
    return s[0] != '.' && s[len - 1] != '.';
}

/* The layer's name, checked and unique among the layers before it. */
static int read_name(compiler *c, const toml_value *layers)
{
    model_layer *l = c->l;
    const toml_value *v = key_value(c, "name");
    if (!v)
        return lfail(c, l->pos, "missing key \"name\"");
    if (toml_type_of(v) != TOML_STRING)
        return lfail(c, toml_pos_of(v), "\"name\" must be a string, not %s", a_type(v));
    const char *s = toml_string(v);
    size_t len = toml_string_len(v);
    if (!valid_name(s, len))
        return lfail(c, toml_pos_of(v), "name \"%.*s\" must be 1 to %d letters, digits, '_', '-' or "
                     "inner '.'",
                     (int)(len > 80 ? 80 : len), s, MODEL_NAME_MAX - 1);
    memcpy(l->name, s, len + 1);
    if (strcmp(s, "input") == 0)
        return lfail(c, toml_pos_of(v), "the name \"input\" is reserved for the model input");
    int prev = find_table(layers, (size_t)c->index, s);
    if (prev >= 0) {
        toml_pos p = toml_pos_of(toml_table_get(toml_array_at(layers, (size_t)prev), "name"));
        return lfail(c, toml_pos_of(v), "duplicate layer name (first defined at %d:%d)", p.line,
                     p.col);
    }
    return 0;
}

static int read_type(compiler *c)
{
    const toml_value *v = key_value(c, "type");
    if (!v)
        return lfail(c, c->l->pos, "missing key \"type\"");
    if (toml_type_of(v) != TOML_STRING)
        return lfail(c, toml_pos_of(v), "\"type\" must be a string, not %s", a_type(v));
    for (int t = 0; t < LAYER_TYPE_COUNT; t++) {
        if (strcmp(toml_string(v), kinds[t].name) == 0) {
            c->l->type = (layer_type)t;
            return 0;
        }
    }
    return lfail(c, toml_pos_of(v), "unknown layer type \"%.80s\"", toml_string(v));
}

static int check_keys(compiler *c)
{
    const layer_kind *k = &kinds[c->l->type];
    for (size_t i = 0; i < toml_table_len(c->lt); i++) {
        const char *key = toml_table_key(c->lt, i);
        bool known = strcmp(key, "name") == 0 || strcmp(key, "type") == 0 ||
                     strcmp(key, "inputs") == 0 || strcmp(key, "weight_initializer") == 0 ||
                     strcmp(key, "bias_initializer") == 0;
        for (int j = 0; !known && k->keys[j]; j++)
            known = strcmp(key, k->keys[j]) == 0;
        if (!known)
            return lfail(c, toml_table_key_pos(c->lt, i), "unknown key \"%.80s\" for a %s layer",
                         key, k->name);
    }
    return 0;
}

/* The layer's inputs: "inputs" names, or else the previous layer. */
static int read_inputs(compiler *c, const toml_value *layers)
{
    model_layer *l = c->l;
    const toml_value *v = key_value(c, "inputs");
    if (!v) {
        l->ninputs = 1;
        l->inputs[0] = c->index - 1;
        return 0;
    }
    if (toml_type_of(v) != TOML_ARRAY || toml_array_len(v) == 0)
        return lfail(c, toml_pos_of(v), "\"inputs\" must be a list of layer names");
    if (toml_array_len(v) > MODEL_MAX_INPUTS)
        return lfail(c, toml_pos_of(v), "\"inputs\" lists %zu layers, at most %d are supported",
                     toml_array_len(v), MODEL_MAX_INPUTS);
    l->ninputs = (int)toml_array_len(v);
    for (int i = 0; i < l->ninputs; i++) {
        const toml_value *e = toml_array_at(v, (size_t)i);
        if (toml_type_of(e) != TOML_STRING)
            return lfail(c, toml_pos_of(e), "\"inputs\" must be a list of layer names");
        const char *name = toml_string(e);
        if (strcmp(name, "input") == 0) {
            l->inputs[i] = -1;
            continue;
        }
        if (strcmp(name, l->name) == 0)
            return lfail(c, toml_pos_of(e), "a layer cannot be its own input");
        int src = model_find_layer(c->m, name);
        if (src < 0) {
            if (find_table(layers, toml_array_len(layers), name) >= 0)
                return lfail(c, toml_pos_of(e), "input \"%s\" is defined later "
                             "(layers run in file order)", name);
            return lfail(c, toml_pos_of(e), "unknown input \"%.80s\"", name);
        }
        l->inputs[i] = src;
    }
    return 0;
}

/* weight_initializer and bias_initializer, of a layer that has that
 * tensor (after infer: its tensors are made). */
static int read_initializers(compiler *c)
{
    model_layer *l = c->l;
    const char *keys[2] = {"weight_initializer", "bias_initializer"};
    model_init *dst[2] = {&l->weight_init, &l->bias_init};
    for (int k = 0; k < 2; k++) {
        const toml_value *v = key_value(c, keys[k]);
        if (!v)
            continue;
        const char *suffix = k ? ".bias" : ".weight";
        bool has = false;
        for (int t = l->first_tensor; t < l->first_tensor + l->ntensors; t++) {
            const char *dot = strrchr(c->m->tensors[t].name, '.');
            has |= dot && strcmp(dot, suffix) == 0;
        }
        if (!has)
            return lfail(c, toml_table_key_pos(c->lt, (size_t)toml_table_find(c->lt, keys[k])),
                         "\"%s\": the layer has no %s tensor", keys[k], suffix + 1);
        if (model_init_parse(v, dst[k], c->err, c->errlen) < 0)
            return -EINVAL;
    }
    return 0;
}

static int compile_layer(compiler *c, const toml_value *layers)
{
    model_layer *l = c->l;
    int r;
    if (toml_type_of(c->lt) != TOML_TABLE)
        return lfail(c, toml_pos_of(c->lt), "a layer must be a table, not %s", a_type(c->lt));
    l->pos = toml_pos_of(c->lt);
    if ((r = read_name(c, layers)) < 0 || (r = read_type(c)) < 0 || (r = check_keys(c)) < 0 ||
        (r = read_inputs(c, layers)) < 0)
        return r;
    l->in = *input_shape(c, 0);
    if ((r = kinds[l->type].infer(c)) < 0 || (r = read_initializers(c)) < 0)
        return r;
    l->act_bytes = model_shape_elems(&l->out) * sizeof(float);
    model *m = c->m;
    m->total_params += l->params;
    m->total_buffers += l->buffers;
    m->act_bytes += l->act_bytes;
    if (__builtin_add_overflow(m->flops, l->flops, &m->flops))
        return too_large(c);
    return 0;
}

static int read_input_shape(compiler *c, const toml_value *mt)
{
    const toml_value *v = toml_table_get(mt, "input_shape");
    if (!v)
        return fail(c, toml_pos_of(mt), "[model] needs \"input_shape\"");
    size_t n = toml_type_of(v) == TOML_ARRAY ? toml_array_len(v) : 0;
    if (n != 1 && n != 3 && n != 4)
        return fail(c, toml_pos_of(v), "\"input_shape\" must be [channels, height, width], "
                    "[channels, depth, height, width] or [features]");
    c->m->input.ndim = (int)n;
    c->m->input.d[1] = c->m->input.d[2] = 1;
    for (size_t i = 0; i < n; i++) {
        const toml_value *e = toml_array_at(v, i);
        if (toml_type_of(e) != TOML_INTEGER || toml_int(e) < 1 || toml_int(e) > MODEL_DIM_MAX)
            return fail(c, toml_pos_of(e), "\"input_shape\" sizes must be integers from 1 to %d",
                        MODEL_DIM_MAX);
        c->m->input.d[i] = toml_int(e);
    }
    uint64_t elems = 1;
    for (size_t i = 0; i < n; i++)
        if (!mul(&elems, (uint64_t)c->m->input.d[i]))
            elems = UINT64_MAX;
    if (elems > MODEL_ELEMS_MAX)
        return fail(c, toml_pos_of(v), "\"input_shape\" has more than %llu elements",
                    (unsigned long long)MODEL_ELEMS_MAX);
    return 0;
}

static int read_loss(compiler *c, const toml_value *mt)
{
    const toml_value *v = toml_table_get(mt, "loss");
    if (!v)
        return fail(c, toml_pos_of(mt), "[model] needs \"loss\"");
    /* the Model Zoo's names for two of them */
    const char *name = toml_type_of(v) == TOML_STRING ? toml_string(v) : "";
    if (strcmp(name, "bce") == 0)
        name = loss_names[LOSS_BCE_WITH_LOGITS];
    else if (strcmp(name, "ssce") == 0)
        name = loss_names[LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY];
    for (int i = 0; i < LOSS_COUNT; i++)
        if (strcmp(name, loss_names[i]) == 0) {
            c->m->loss = (model_loss)i;
            c->m->loss_pos = toml_pos_of(v);
            return 0;
        }
    return fail(c, toml_pos_of(v), "\"loss\" must be one of \"softmax_cross_entropy\", "
                "\"pixel_softmax_cross_entropy\" (\"ssce\"), \"bce_with_logits\" (\"bce\"), "
                "\"dice\", \"bce_dice\", \"ssce_dice\", \"multilabel_bce\"");
}

/* include_background (the Model Zoo's ignore_background_class, inverted)
 * and eval_ignore_classes. */
static int read_classes(compiler *c, const toml_value *mt)
{
    const toml_value *v = toml_table_get(mt, "include_background");
    if (v && toml_type_of(v) != TOML_BOOL)
        return fail(c, toml_pos_of(v), "\"include_background\" must be true or false");
    c->m->include_background = v && toml_bool(v);
    const toml_value *e = toml_table_get(mt, "eval_ignore_classes");
    if (!e)
        return 0;
    if (toml_type_of(e) != TOML_ARRAY)
        return fail(c, toml_pos_of(e), "\"eval_ignore_classes\" must be a list of classes");
    for (size_t i = 0; i < toml_array_len(e); i++) {
        const toml_value *k = toml_array_at(e, i);
        if (toml_type_of(k) != TOML_INTEGER || toml_int(k) < 0 || toml_int(k) > 63)
            return fail(c, toml_pos_of(k), "\"eval_ignore_classes\": classes 0 to 63");
        c->m->eval_ignore |= 1ull << toml_int(k);
    }
    return 0;
}

static int read_activation_dtype(compiler *c, const toml_value *mt)
{
    const toml_value *v = toml_table_get(mt, "activation_dtype");
    if (!v)
        return 0;
    if (toml_type_of(v) == TOML_STRING && strcmp(toml_string(v), "float32") == 0)
        return 0;
    if (toml_type_of(v) == TOML_STRING && strcmp(toml_string(v), "bfloat16") == 0) {
        c->m->act_bf16 = true;
        return 0;
    }
    return fail(c, toml_pos_of(v), "\"activation_dtype\" must be \"float32\" or \"bfloat16\"");
}

/* Mixed precision as Model Zoo jobs write it: mixed_precision = true with
 * fp16_type = "bfloat16" (the default type; "float16" is refused: the
 * appliance computes in bfloat16 where it computes in 16 bits). */
static int read_mixed_precision(compiler *c, const toml_value *mt)
{
    const toml_value *v = toml_table_get(mt, "mixed_precision");
    if (v && toml_type_of(v) != TOML_BOOL)
        return fail(c, toml_pos_of(v), "\"mixed_precision\" must be true or false");
    c->m->mixed_precision = v && toml_bool(v);
    /* the Model Zoo's use_bfloat16: false with mixed precision means float16 */
    const toml_value *u = toml_table_get(mt, "use_bfloat16");
    if (u && toml_type_of(u) != TOML_BOOL)
        return fail(c, toml_pos_of(u), "\"use_bfloat16\" must be true or false");
    if (u && !toml_bool(u) && c->m->mixed_precision)
        return fail(c, toml_pos_of(u), "use_bfloat16 = false with mixed precision is float16, "
                    "which is not supported: mixed precision here is bfloat16 "
                    "(use_bfloat16 = true)");
    /* the Model Zoo's bfloat16 keeps activations in 16 bits too: the
     * outputs kept for the backward pass, unless activation_dtype says */
    if (u && toml_bool(u) && c->m->mixed_precision && !toml_table_get(mt, "activation_dtype"))
        c->m->act_bf16 = true;
    const toml_value *t = toml_table_get(mt, "fp16_type");
    if (!t)
        return 0;
    if (toml_type_of(t) == TOML_STRING && strcmp(toml_string(t), "bfloat16") == 0)
        return 0;
    if (toml_type_of(t) == TOML_STRING && (strcmp(toml_string(t), "float16") == 0 ||
                                           strcmp(toml_string(t), "cbfloat16") == 0))
        return fail(c, toml_pos_of(t), "fp16_type = \"%s\" is not supported: mixed precision "
                    "here is bfloat16 (fp16_type = \"bfloat16\")", toml_string(t));
    return fail(c, toml_pos_of(t), "\"fp16_type\" must be \"bfloat16\"");
}

/* The loss must fit what the last layer produces. */
static int check_loss(compiler *c)
{
    model *m = c->m;
    const model_layer *last = &m->layers[m->nlayers - 1];
    const char *name = loss_names[m->loss];
    char sb[64];
    model_shape_str(&last->out, sb, sizeof(sb));
    switch (m->loss) {
    case LOSS_SOFTMAX_CROSS_ENTROPY:
        if (last->out.ndim != 1 || last->out.d[0] < 2)
            return fail(c, m->loss_pos, "loss \"%s\" needs 1-D logits, one per class (2 or "
                        "more), but the last layer \"%s\" gives %s", name, last->name, sb);
        break;
    case LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY:
    case LOSS_SSCE_DICE:
    case LOSS_MULTILABEL_BCE:
        if ((last->out.ndim != 3 && last->out.ndim != 4) || last->out.d[0] < 2)
            return fail(c, m->loss_pos, "loss \"%s\" needs C x H x W logits with 2 or more "
                        "classes, but the last layer \"%s\" gives %s", name, last->name, sb);
        break;
    case LOSS_DICE:
    case LOSS_BCE_DICE:
        if (last->out.ndim != 3 && last->out.ndim != 4)
            return fail(c, m->loss_pos, "loss \"%s\" needs C x H x W mask logits, but the last "
                        "layer \"%s\" gives %s", name, last->name, sb);
        break;
    case LOSS_BCE_WITH_LOGITS:
    case LOSS_COUNT:
        break;
    }
    return 0;
}

static model *model__compile(const toml_value *mt, const model_shape *input, char *err,
                             size_t errlen)
{
    compiler c = {.source = toml_source_name(mt), .err = err, .errlen = errlen};
    model *m = calloc(1, sizeof(*m));
    if (err && errlen)
        err[0] = '\0';
    if (!m || !(m->source = strdup(c.source))) {
        if (err && errlen)
            snprintf(err, errlen, "%s: out of memory", c.source);
        goto fail;
    }
    c.m = m;
    if (toml_type_of(mt) != TOML_TABLE) {
        fail(&c, toml_pos_of(mt), "\"model\" must be a table");
        goto fail;
    }
    for (size_t i = 0; i < toml_table_len(mt); i++) {
        const char *key = toml_table_key(mt, i);
        if (strcmp(key, "input_shape") != 0 && strcmp(key, "loss") != 0 &&
            strcmp(key, "layers") != 0 && strcmp(key, "name") != 0 &&
            strcmp(key, "activation_dtype") != 0 && strcmp(key, "mixed_precision") != 0 &&
            strcmp(key, "fp16_type") != 0 && strcmp(key, "use_bfloat16") != 0 &&
            strcmp(key, "include_background") != 0 &&
            strcmp(key, "eval_ignore_classes") != 0) {
            fail(&c, toml_table_key_pos(mt, i), "unknown key \"%.80s\" in [model]", key);
            goto fail;
        }
    }
    if (read_input_shape(&c, mt) < 0 || read_loss(&c, mt) < 0 ||
        read_activation_dtype(&c, mt) < 0 || read_mixed_precision(&c, mt) < 0 ||
        read_classes(&c, mt) < 0)
        goto fail;
    if (input) /* the same layers on another input (model_compile_as) */
        m->input = *input;
    const toml_value *layers = toml_table_get(mt, "layers");
    if (!layers || toml_type_of(layers) != TOML_ARRAY || toml_array_len(layers) == 0) {
        fail(&c, layers ? toml_pos_of(layers) : toml_pos_of(mt),
             "[model] needs layers: one [[model.layers]] table for each");
        goto fail;
    }
    size_t n = toml_array_len(layers);
    if (n > MODEL_MAX_LAYERS) {
        fail(&c, toml_pos_of(layers), "%zu layers, at most %d are supported", n, MODEL_MAX_LAYERS);
        goto fail;
    }
    m->layers = calloc(n, sizeof(*m->layers));
    if (!m->layers) {
        fail(&c, toml_pos_of(layers), "out of memory");
        goto fail;
    }
    for (size_t i = 0; i < n; i++) {
        c.index = (int)i;
        c.l = &m->layers[i];
        c.lt = toml_array_at(layers, i);
        if (compile_layer(&c, layers) < 0)
            goto fail;
        m->nlayers++;
    }
    if (check_loss(&c) < 0)
        goto fail;
    model_fuse(m, true);
    m->blocked = true;
    m->lighten = true;
    return m;
fail:
    model_free(m);
    return NULL;
}

model *model_compile(const toml_value *mt, char *err, size_t errlen)
{
    return model__compile(mt, NULL, err, errlen);
}

model *model_compile_as(const toml_value *mt, const model_shape *input, char *err, size_t errlen)
{
    return model__compile(mt, input, err, errlen);
}

model *model_recompile(const toml_value *mt, const model *full, const model_options *o,
                       char *err, size_t errlen)
{
    model *m = model__compile(mt, o->input, err, errlen);
    if (!m)
        return NULL;
    m->input_unorm8 = full->input_unorm8;
    m->labels_u8 = full->labels_u8;
    m->eval_batch = full->eval_batch;
    m->input_scale = full->input_scale;
    m->act_bf16 = full->act_bf16;
    m->mixed_precision = full->mixed_precision;
    m->keep_outputs = o->keep_outputs;
    m->lighten = !o->keep_costly;
    m->spill_packed = o->spill_packed;
    if ((o->rows_as_depth || full->rows_as_depth) && model_rows_as_depth(m, err, errlen) < 0) {
        model_free(m);
        return NULL;
    }
    return m;
}

model *model_compile_document(const toml_value *root, char *err, size_t errlen)
{
    const toml_value *mt = toml_table_get(root, "model");
    if (!mt) {
        toml_errorf(err, errlen, toml_source_name(root), (toml_pos){1, 1},
                    "the job has no [model] table");
        return NULL;
    }
    return model_compile(mt, err, errlen);
}

void model_free(model *m)
{
    if (!m)
        return;
    free(m->source);
    free(m->layers);
    free(m->tensors);
    free(m);
}

void model_fuse(model *m, bool on)
{
    for (int i = 0; i < m->nlayers; i++)
        m->layers[i].fused = false;
    for (int r = 0; on && r + 1 < m->nlayers; r++) {
        model_layer *l = &m->layers[r];
        int b = l->inputs[0], readers = 0;
        /* a dense layer's fused relu reads its output in the backward pass,
         * kept whole for it: not where activations are kept in bfloat16 */
        if (l->type != LAYER_RELU || b < 0 ||
            (m->layers[b].type != LAYER_BATCH_NORM && m->layers[b].type != LAYER_GROUP_NORM &&
             (m->layers[b].type != LAYER_DENSE || m->act_bf16)))
            continue;
        for (int c = 0; c < m->nlayers; c++)
            for (int k = 0; k < m->layers[c].ninputs; k++)
                readers += m->layers[c].inputs[k] == b;
        if (readers == 1)
            l->fused = m->layers[b].fused = true;
    }
}

/* [C, H, W] as [C, H, 1, W]; a window's [h, w] per-axis values as [h, mid, w] */
static void rows__shape(model_shape *s)
{
    *s = (model_shape){.ndim = 4, .d = {s->d[0], s->d[1], 1, s->d[2]}};
}

static void rows__axes(int v[3], int mid)
{
    v[2] = v[1];
    v[1] = mid;
}

int model_rows_as_depth(model *m, char *err, size_t errlen)
{
    if (m->rows_as_depth)
        return 0;
    if (m->input.ndim != 3) {
        snprintf(err, errlen, "rows as depth: the model's input is not an image [C, H, W]");
        return -EINVAL;
    }
    static const layer_type as3d[LAYER_TYPE_COUNT] = {
        [LAYER_CONV2D] = LAYER_CONV3D,
        [LAYER_CONV_TRANSPOSE2D] = LAYER_CONV_TRANSPOSE3D,
        [LAYER_MAX_POOL2D] = LAYER_MAX_POOL3D,
        [LAYER_AVG_POOL2D] = LAYER_AVG_POOL3D,
    };
    for (int i = 0; i < m->nlayers; i++) {
        const model_layer *l = &m->layers[i];
        switch (l->type) {
        case LAYER_CONV2D: case LAYER_CONV_TRANSPOSE2D: case LAYER_MAX_POOL2D:
        case LAYER_AVG_POOL2D: case LAYER_CONCAT: case LAYER_ADD: case LAYER_BATCH_NORM:
        case LAYER_GROUP_NORM: case LAYER_RELU: case LAYER_LEAKY_RELU: case LAYER_GELU:
        case LAYER_SIGMOID: case LAYER_TANH: case LAYER_DROPOUT:
            if (l->in.ndim == 3 && l->out.ndim == 3)
                continue;
            break;
        default:
            break;
        }
        snprintf(err, errlen, "rows as depth: layer \"%s\" (%s) has no 3-D counterpart over "
                 "images", l->name, layer_type_name(l->type));
        return -EINVAL;
    }
    rows__shape(&m->input);
    for (int i = 0; i < m->nlayers; i++) {
        model_layer *l = &m->layers[i];
        rows__shape(&l->in);
        rows__shape(&l->out);
        if (!as3d[l->type])
            continue;
        l->type = as3d[l->type];
        rows__axes(l->kernel, 1);
        rows__axes(l->stride, 1);
        rows__axes(l->padding, 0);
        rows__axes(l->dilation, 1);
        rows__axes(l->output_padding, 0);
    }
    m->rows_as_depth = true;
    return 0;
}

bool model_splits(const model *m)
{
    if (m->input.ndim != 3 && m->input.ndim != 4)
        return false;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].type == LAYER_DENSE || m->layers[i].type == LAYER_FLATTEN)
            return false;
    return true;
}
