/* The Model Zoo's job keys made the appliance's own (modelzoo.h). The U-Net
 * template follows the Model Zoo's U-Net (its UNet, Encoder, UNetBlock,
 * Decoder and ConvNormActBlock modules) layer for layer: the same
 * convolutions, norms, activations, poolings, transposed convolutions,
 * concatenations and residual additions in the same order, named by the
 * module paths of its state dict. */
#include "modelzoo.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "model.h"
#include "nearest.h"
#include "util.h"

#define UNET_MAX_LEVELS 16
#define UNET_MAX_CONVS 8

typedef struct mz {
    toml_value *root;
    const char *src;
    char *err;
    size_t errlen;
} mz;

__attribute__((format(printf, 3, 4)))
static int mz__fail(mz *z, toml_pos pos, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    toml_verrorf(z->err, z->errlen, z->src, pos, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

static int mz__oom(mz *z)
{
    return mz__fail(z, (toml_pos){1, 1}, "out of memory");
}

/* The position of key in t (its key), or of t. */
static toml_pos mz__key_pos(const toml_value *t, const char *key)
{
    long i = toml_table_find(t, key);
    return i < 0 ? toml_pos_of(t) : toml_table_key_pos(t, (size_t)i);
}

static int mz__bool(mz *z, const toml_value *t, const char *key, bool def, bool *out)
{
    const toml_value *v = toml_table_get(t, key);
    *out = def;
    if (!v)
        return 0;
    if (toml_type_of(v) != TOML_BOOL)
        return mz__fail(z, toml_pos_of(v), "model.%s: expected true or false, found %s", key,
                        toml_type_name(toml_type_of(v)));
    *out = toml_bool(v);
    return 0;
}

static int mz__int(mz *z, const toml_value *t, const char *key, int64_t def, int64_t lo,
                   int64_t hi, int64_t *out)
{
    const toml_value *v = toml_table_get(t, key);
    *out = def;
    if (!v)
        return 0;
    if (toml_type_of(v) != TOML_INTEGER)
        return mz__fail(z, toml_pos_of(v), "model.%s: expected an integer, found %s", key,
                        toml_type_name(toml_type_of(v)));
    if (toml_int(v) < lo || toml_int(v) > hi)
        return mz__fail(z, toml_pos_of(v), "model.%s: %lld is out of range [%lld, %lld]", key,
                        (long long)toml_int(v), (long long)lo, (long long)hi);
    *out = toml_int(v);
    return 0;
}

static int mz__float(mz *z, const toml_value *t, const char *key, double def, double lo,
                     double hi, double *out)
{
    const toml_value *v = toml_table_get(t, key);
    *out = def;
    if (!v)
        return 0;
    if (toml_type_of(v) == TOML_INTEGER)
        *out = (double)toml_int(v);
    else if (toml_type_of(v) == TOML_FLOAT)
        *out = toml_float(v);
    else
        return mz__fail(z, toml_pos_of(v), "model.%s: expected a number, found %s", key,
                        toml_type_name(toml_type_of(v)));
    if (!(*out >= lo && *out <= hi))
        return mz__fail(z, toml_pos_of(v), "model.%s: %g is out of range [%g, %g]", key, *out, lo,
                        hi);
    return 0;
}

/* A string value, lower-cased into out ("" when absent). */
static int mz__lower(mz *z, const toml_value *t, const char *key, char *out, size_t size)
{
    const toml_value *v = toml_table_get(t, key);
    out[0] = '\0';
    if (!v)
        return 0;
    if (toml_type_of(v) != TOML_STRING || toml_string_len(v) + 1 > size ||
        strlen(toml_string(v)) != toml_string_len(v))
        return mz__fail(z, toml_pos_of(v), "model.%s: expected a name, found %s", key,
                        toml_type_of(v) == TOML_STRING ? "a string too long"
                                                       : toml_type_name(toml_type_of(v)));
    const char *s = toml_string(v);
    size_t i = 0;
    for (; s[i]; i++)
        out[i] = (char)tolower((unsigned char)s[i]);
    out[i] = '\0';
    return 0;
}

/* A list of integers in [lo, hi], at most max. */
static int mz__ints(mz *z, const toml_value *v, const char *what, int64_t lo, int64_t hi,
                    int64_t *out, size_t max, size_t *n)
{
    if (toml_type_of(v) != TOML_ARRAY || toml_array_len(v) == 0)
        return mz__fail(z, toml_pos_of(v), "%s: expected a list of integers", what);
    if (toml_array_len(v) > max)
        return mz__fail(z, toml_pos_of(v), "%s: %zu values, at most %zu", what,
                        toml_array_len(v), max);
    *n = toml_array_len(v);
    for (size_t i = 0; i < *n; i++) {
        const toml_value *e = toml_array_at(v, i);
        if (toml_type_of(e) != TOML_INTEGER || toml_int(e) < lo || toml_int(e) > hi)
            return mz__fail(z, toml_pos_of(e), "%s: expected integers in [%lld, %lld]", what,
                            (long long)lo, (long long)hi);
        out[i] = toml_int(e);
    }
    return 0;
}

/* ---- the input shape -------------------------------------------------- */

/* train_input.image_shape as [H, W, C], checked against eval_input's. */
static int mz__image_shape(mz *z, int64_t hwc[3], const toml_value **where)
{
    const toml_value *train = toml_table_get(z->root, "train_input");
    const toml_value *v = train && toml_type_of(train) == TOML_TABLE
                              ? toml_table_get(train, "image_shape") : NULL;
    *where = v;
    if (!v)
        return 0;
    size_t n;
    if (mz__ints(z, v, "train_input.image_shape", 1, MODEL_DIM_MAX, hwc, 3, &n) < 0)
        return -EINVAL;
    if (n != 3)
        return mz__fail(z, toml_pos_of(v), "train_input.image_shape: expected [H, W, C] for "
                        "images, or [D, H, W] for volumes (with model.use_conv3d)");
    const toml_value *eval = toml_table_get(z->root, "eval_input");
    const toml_value *ev = eval && toml_type_of(eval) == TOML_TABLE
                               ? toml_table_get(eval, "image_shape") : NULL;
    if (ev) {
        int64_t e[3];
        size_t en;
        if (mz__ints(z, ev, "eval_input.image_shape", 1, MODEL_DIM_MAX, e, 3, &en) < 0)
            return -EINVAL;
        if (en != 3 || e[0] != hwc[0] || e[1] != hwc[1] || e[2] != hwc[2])
            return mz__fail(z, toml_pos_of(ev), "eval_input.image_shape: differs from "
                            "train_input.image_shape: the model takes one input shape");
    }
    return 0;
}

/* A list [C, H, W] (or [C, D, H, W] for a volume, depth > 0) for the
 * model's input_shape, at the position of image_shape. */
static toml_value *mz__shape_value4(mz *z, toml_pos pos, int64_t c, int64_t depth, int64_t h,
                                    int64_t w)
{
    toml_value *a = toml_new_array(z->root, pos);
    int64_t d[4] = {c, depth, h, w};
    for (int i = 0; a && i < 4; i++) {
        if (i == 1 && depth == 0)
            continue;
        toml_value *e = toml_new_int(z->root, pos, d[i]);
        if (!e || toml_array_push(a, e) < 0) {
            toml_value_free(e);
            toml_value_free(a);
            return NULL;
        }
    }
    return a;
}

static toml_value *mz__shape_value(mz *z, toml_pos pos, int64_t c, int64_t h, int64_t w)
{
    return mz__shape_value4(z, pos, c, 0, h, w);
}

/* ---- the U-Net template ------------------------------------------------ */

typedef enum { NORM_NONE, NORM_BATCH, NORM_GROUP, NORM_INSTANCE, NORM_GROUP_INSTANCE } unet_norm;

typedef struct unet_opts {
    int64_t enc[UNET_MAX_LEVELS], dec[UNET_MAX_LEVELS];
    size_t nenc, ndec;
    int kernel[UNET_MAX_CONVS];   /* each conv of a block: 3 or 1 */
    size_t nconvs;
    bool skip_connect, residual, enable_bias, first_conv_down, bottleneck_down, strided;
    bool down_enc[UNET_MAX_LEVELS];
    char act[16];                 /* the appliance's layer type, "" for none */
    unet_norm norm;
    int64_t num_groups;           /* 0: "all" (one per channel) */
    double eps, momentum, dropout;
    int64_t initial_conv_filters; /* 0: none */
    int64_t in_channels, num_classes, out_channels;
    int64_t h, w;
    int64_t depth;                /* a volume's (use_conv3d), else 0 */
    const char *loss;             /* the appliance's loss name */
    const toml_value *init;       /* the convolutions' weights (initializer; NULL: glorot) */
    const toml_value *bias_init;  /* every bias (bias_initializer), or NULL */
    const toml_value *norm_init;  /* the norms' weights (norm_weight_initializer), or NULL */
} unet_opts;

/* Builds layer tables into an array, each at the position of the key that
 * made it (encoder_filters'). */
typedef struct ub {
    mz *z;
    const unet_opts *o;
    toml_value *layers;
    toml_pos pos;
    int rc;
} ub;

static void ub__set(ub *b, toml_value *t, const char *key, toml_value *v)
{
    if (!v || toml_table_set(t, key, strlen(key), b->pos, v) < 0) {
        toml_value_free(v);
        b->rc = -ENOMEM;
    }
}

static void ub__int(ub *b, toml_value *t, const char *key, int64_t x)
{
    ub__set(b, t, key, toml_new_int(b->z->root, b->pos, x));
}

static void ub__float(ub *b, toml_value *t, const char *key, double x)
{
    ub__set(b, t, key, toml_new_float(b->z->root, b->pos, x));
}

static void ub__bool(ub *b, toml_value *t, const char *key, bool x)
{
    ub__set(b, t, key, toml_new_bool(b->z->root, b->pos, x));
}

static void ub__str(ub *b, toml_value *t, const char *key, const char *s)
{
    ub__set(b, t, key, toml_new_string(b->z->root, b->pos, s, strlen(s)));
}

/* The layer's weight_initializer and bias_initializer, copies of the
 * model's keys (weight NULL: glorot_uniform for a convolution, the
 * Model Zoo's usual one, else the default; bias NULL: the default). */
static void ub__inits(ub *b, toml_value *l, const toml_value *weight, const toml_value *bias)
{
    const toml_value *type = toml_table_get(l, "type");
    bool conv = type && strncmp(toml_string(type), "conv", 4) == 0;
    if (weight)
        ub__set(b, l, "weight_initializer", toml_clone(b->z->root, weight));
    else if (conv)
        ub__str(b, l, "weight_initializer", "glorot_uniform");
    if (bias)
        ub__set(b, l, "bias_initializer", toml_clone(b->z->root, bias));
}

/* A layer `name` of `type` reading in1 (and in2), appended; NULL when out
 * of memory (b->rc says so). */
static toml_value *ub__layer(ub *b, const char *name, const char *type, const char *in1,
                             const char *in2)
{
    if (b->rc < 0)
        return NULL;
    toml_value *t = toml_new_table(b->z->root, b->pos);
    toml_value *ins = toml_new_array(b->z->root, b->pos);
    if (!t || !ins || toml_array_push(b->layers, t) < 0) {
        toml_value_free(t);
        toml_value_free(ins);
        b->rc = -ENOMEM;
        return NULL;
    }
    ub__str(b, t, "name", name);
    ub__str(b, t, "type", type);
    const char *in[2] = {in1, in2};
    for (int i = 0; i < 2 && in[i]; i++) {
        toml_value *s = toml_new_string(b->z->root, b->pos, in[i], strlen(in[i]));
        if (!s || toml_array_push(ins, s) < 0) {
            toml_value_free(s);
            b->rc = -ENOMEM;
        }
    }
    ub__set(b, t, "inputs", ins);
    return b->rc < 0 ? NULL : t;
}

/* The Model Zoo's ConvNormActBlock at prefix: a convolution with "same"
 * padding ((stride - 1 + kernel - 1) / 2 on each side, as it computes
 * it), its norm and its activation. Writes the name of its output. */
static void ub__conv_block(ub *b, const char *prefix, const char *in, int64_t filters, int kernel,
                           int stride, bool bias, bool norm, const char *act,
                           char out[MODEL_NAME_MAX])
{
    const unet_opts *o = b->o;
    char name[MODEL_NAME_MAX];
    snprintf(name, sizeof(name), "%s.conv", prefix);
    toml_value *l = ub__layer(b, name, o->depth ? "conv3d" : "conv2d", in, NULL);
    if (!l)
        return;
    ub__int(b, l, "filters", filters);
    ub__int(b, l, "kernel_size", kernel);
    ub__int(b, l, "stride", stride);
    ub__int(b, l, "padding", (stride - 1 + kernel - 1) / 2);
    ub__bool(b, l, "bias", bias);
    ub__inits(b, l, o->init, bias ? o->bias_init : NULL);
    snprintf(out, MODEL_NAME_MAX, "%s", name);
    if (norm && o->norm != NORM_NONE) {
        snprintf(name, sizeof(name), "%s.norm_layer%s", prefix,
                 o->norm == NORM_GROUP_INSTANCE ? ".instancenorm" : "");
        bool batch = o->norm == NORM_BATCH;
        if (!(l = ub__layer(b, name, batch ? "batch_norm" : "group_norm", out, NULL)))
            return;
        if (batch)
            ub__float(b, l, "momentum", o->momentum);
        else
            ub__int(b, l, "groups",
                    o->norm == NORM_GROUP && o->num_groups ? o->num_groups : filters);
        ub__float(b, l, "eps", o->eps);
        /* (the Model Zoo's instance norm is no BatchNorm2d or GroupNorm: it
         * keeps torch's own ones and zeros) */
        if (o->norm != NORM_INSTANCE)
            ub__inits(b, l, o->norm_init, o->bias_init);
        snprintf(out, MODEL_NAME_MAX, "%s", name);
    }
    if (act && act[0]) {
        snprintf(name, sizeof(name), "%s.act", prefix);
        if (!ub__layer(b, name, act, out, NULL))
            return;
        snprintf(out, MODEL_NAME_MAX, "%s", name);
    }
}

/* The Model Zoo's UNetBlock at prefix: its convolutions (one of stride 2
 * when it downscales by strided convolutions), a residual addition of the
 * first's output to the last's, and the output an encoder block passes
 * to its decoder block (skip, when not NULL): the block's output, or with
 * strided convolutions the output of the last convolution but one. */
static void ub__unet_block(ub *b, const char *prefix, const char *in, int64_t filters,
                           bool downscale, char out[MODEL_NAME_MAX], char *skip)
{
    const unet_opts *o = b->o;
    size_t down_at = o->first_conv_down ? 0 : o->nconvs - 1;
    char cur[MODEL_NAME_MAX], first[MODEL_NAME_MAX] = "", pre[MODEL_NAME_MAX];
    snprintf(cur, sizeof(cur), "%s", in);
    if (skip)
        skip[0] = '\0';
    for (size_t i = 0; i < o->nconvs && b->rc == 0; i++) {
        int stride = downscale && o->strided && i == down_at ? 2 : 1;
        snprintf(pre, sizeof(pre), "%s.layers.%zu", prefix, i);
        ub__conv_block(b, pre, cur, filters, o->kernel[i], stride, o->enable_bias, true, o->act,
                       cur);
        if (o->residual && i == 0) {
            snprintf(first, sizeof(first), "%s", cur);
        } else if (o->residual && i + 1 == o->nconvs) {
            char name[MODEL_NAME_MAX];
            snprintf(name, sizeof(name), "%s.residual", prefix);
            ub__layer(b, name, "add", cur, first);
            snprintf(cur, sizeof(cur), "%s", name);
        }
        if (skip && o->strided && o->skip_connect && i + 2 == o->nconvs)
            snprintf(skip, MODEL_NAME_MAX, "%s", cur);
    }
    if (skip && !o->strided)
        snprintf(skip, MODEL_NAME_MAX, "%s", cur);
    snprintf(out, MODEL_NAME_MAX, "%s", cur);
}

/* The whole U-Net into b->layers. */
static void ub__unet(ub *b)
{
    const unet_opts *o = b->o;
    char cur[MODEL_NAME_MAX] = "input", name[MODEL_NAME_MAX];
    char skips[UNET_MAX_LEVELS][MODEL_NAME_MAX];
    if (o->initial_conv_filters)
        ub__conv_block(b, "initial_conv", cur, o->initial_conv_filters, 3, 1, o->enable_bias,
                       false, "relu", cur);
    for (size_t i = 0; i + 1 < o->nenc && b->rc == 0; i++) {
        snprintf(name, sizeof(name), "encoder.unet_blocks.%zu", i);
        ub__unet_block(b, name, cur, o->enc[i], o->down_enc[i], cur, skips[i]);
        if (!o->strided) {
            snprintf(name, sizeof(name), "encoder.pooling_layers.%zu", i);
            toml_value *l = ub__layer(b, name, o->depth ? "max_pool3d" : "max_pool2d", cur, NULL);
            if (l) {
                ub__int(b, l, "kernel_size", 2);
                ub__int(b, l, "stride", 2);
            }
            snprintf(cur, sizeof(cur), "%s", name);
        }
        if (o->dropout > 0) {
            snprintf(name, sizeof(name), "encoder.dropout_layers.%zu", i);
            toml_value *l = ub__layer(b, name, "dropout", cur, NULL);
            if (l)
                ub__float(b, l, "rate", o->dropout);
            snprintf(cur, sizeof(cur), "%s", name);
        }
    }
    ub__unet_block(b, "bottleneck", cur, o->enc[o->nenc - 1], o->bottleneck_down, cur, NULL);
    for (size_t i = 0; i < o->ndec && b->rc == 0; i++) {
        snprintf(name, sizeof(name), "decoder.transpose_layers.%zu", i);
        toml_value *l = ub__layer(b, name, o->depth ? "conv_transpose3d" : "conv_transpose2d",
                                  cur, NULL);
        if (l) {
            ub__int(b, l, "filters", o->dec[i]);
            ub__int(b, l, "kernel_size", 2);
            ub__int(b, l, "stride", 2);
            ub__bool(b, l, "bias", o->enable_bias);
            ub__inits(b, l, o->init, o->enable_bias ? o->bias_init : NULL);
        }
        snprintf(cur, sizeof(cur), "%s", name);
        if (o->skip_connect) { /* torch.cat([upsampled, skip], dim=1) */
            snprintf(name, sizeof(name), "decoder.skip_concat.%zu", i);
            ub__layer(b, name, "concat", cur, skips[o->nenc - 2 - i]);
            snprintf(cur, sizeof(cur), "%s", name);
        }
        snprintf(name, sizeof(name), "decoder.unet_blocks.%zu", i);
        ub__unet_block(b, name, cur, o->dec[i], false, cur, NULL);
        if (o->skip_connect && o->dropout > 0) {
            snprintf(name, sizeof(name), "decoder.dropout_layers.%zu", i);
            l = ub__layer(b, name, "dropout", cur, NULL);
            if (l)
                ub__float(b, l, "rate", o->dropout);
            snprintf(cur, sizeof(cur), "%s", name);
        }
    }
    ub__conv_block(b, "final_conv", cur, o->out_channels, 1, 1, true, false, NULL, cur);
}

/* Every key a U-Net [model] may have: the Model Zoo's, and the appliance's
 * own model keys that are not layers. */
static const char *const unet_keys[] = {
    "nonlinearity", "skip_connect", "enable_bias", "downscale_method", "convs_per_block",
    "encoder_filters", "decoder_filters", "residual_blocks", "initializer", "bias_initializer",
    "norm_weight_initializer", "loss", "mixed_precision", "use_bfloat16", "fp16_type",
    "norm_layer", "norm_kwargs", "dropout_rate", "initial_conv_filters", "input_channels",
    "use_conv3d", "downscale_first_conv", "downscale_encoder_blocks", "downscale_bottleneck",
    "ignore_background_class", "eval_ignore_classes", "eval_metrics", "compute_eval_metrics",
    "num_classes", "name", "activation_dtype", "input_shape",
};

bool modelzoo_is_unet(const toml_value *mt)
{
    return toml_type_of(mt) == TOML_TABLE && !toml_table_get(mt, "layers") &&
           (toml_table_get(mt, "encoder_filters") || toml_table_get(mt, "decoder_filters"));
}

static int mz__unet_keys(mz *z, const toml_value *mt)
{
    for (size_t i = 0; i < toml_table_len(mt); i++) {
        const char *key = toml_table_key(mt, i);
        bool known = false;
        for (size_t k = 0; k < ARRAY_SIZE(unet_keys); k++)
            known |= strcmp(key, unet_keys[k]) == 0;
        if (known)
            continue;
        const char *near = nearest_name(key, unet_keys, ARRAY_SIZE(unet_keys));
        if (near)
            return mz__fail(z, toml_table_key_pos(mt, i), "unknown key \"%s\" for the U-Net "
                            "[model] (did you mean \"%s\"?)", key, near);
        return mz__fail(z, toml_table_key_pos(mt, i), "unknown key \"%s\" for the U-Net [model] "
                        "(docs/job-file.md lists its keys)", key);
    }
    return 0;
}

/* nonlinearity: the Model Zoo's activation names the appliance has. */
static int mz__act(mz *z, const toml_value *mt, unet_opts *o)
{
    char s[32];
    if (mz__lower(z, mt, "nonlinearity", s, sizeof(s)) < 0)
        return -EINVAL;
    if (!s[0])
        return mz__fail(z, toml_pos_of(mt), "the U-Net [model] needs \"nonlinearity\" "
                        "(for example \"ReLU\")");
    const char *map[][2] = {{"relu", "relu"}, {"leaky_relu", "leaky_relu"}, {"gelu", "gelu"},
                            {"sigmoid", "sigmoid"}, {"tanh", "tanh"}, {"linear", ""}};
    for (size_t i = 0; i < ARRAY_SIZE(map); i++)
        if (strcmp(s, map[i][0]) == 0) {
            snprintf(o->act, sizeof(o->act), "%s", map[i][1]);
            return 0;
        }
    return mz__fail(z, toml_pos_of(toml_table_get(mt, "nonlinearity")),
                    "model.nonlinearity: \"%s\" is not one of ReLU, leaky_relu, GELU, sigmoid, "
                    "tanh, linear", toml_string(toml_table_get(mt, "nonlinearity")));
}

/* norm_layer and norm_kwargs. */
static int mz__norm(mz *z, const toml_value *mt, unet_opts *o)
{
    char s[32];
    const toml_value *v = toml_table_get(mt, "norm_layer");
    if (mz__lower(z, mt, "norm_layer", s, sizeof(s)) < 0)
        return -EINVAL;
    const struct {
        const char *name;
        unet_norm norm;
    } names[] = {
        {"", NORM_NONE},          {"none", NORM_NONE},          {"batchnorm2d", NORM_BATCH},
        {"batchnorm", NORM_BATCH}, {"batch", NORM_BATCH},        {"group", NORM_GROUP},
        {"groupnorm", NORM_GROUP}, {"group_instance", NORM_GROUP_INSTANCE},
        {"instance", NORM_INSTANCE}, {"instance2d", NORM_INSTANCE},
        {"instancenorm2d", NORM_INSTANCE},
    };
    size_t i = 0;
    while (i < ARRAY_SIZE(names) && strcmp(s, names[i].name) != 0)
        i++;
    if (i == ARRAY_SIZE(names))
        return mz__fail(z, toml_pos_of(v), "model.norm_layer: \"%s\" is not one the appliance "
                        "builds: batchnorm2d, group (with norm_kwargs.num_groups), "
                        "group_instance, instance2d, or none", toml_string(v));
    o->norm = names[i].norm;
    o->eps = 1e-5;
    o->momentum = 0.1;
    const toml_value *kw = toml_table_get(mt, "norm_kwargs");
    if (kw && toml_type_of(kw) != TOML_TABLE)
        return mz__fail(z, toml_pos_of(kw), "model.norm_kwargs: expected a mapping");
    for (size_t k = 0; kw && k < toml_table_len(kw); k++) {
        const char *key = toml_table_key(kw, k);
        const toml_value *e = toml_table_value(kw, k);
        toml_pos pos = toml_table_key_pos(kw, k);
        if (strcmp(key, "num_groups") == 0 && o->norm == NORM_GROUP) {
            if (toml_type_of(e) == TOML_STRING && strcmp(toml_string(e), "all") == 0)
                o->num_groups = 0;
            else if (toml_type_of(e) == TOML_INTEGER && toml_int(e) >= 1 &&
                     toml_int(e) <= MODEL_DIM_MAX)
                o->num_groups = toml_int(e);
            else
                return mz__fail(z, toml_pos_of(e), "model.norm_kwargs.num_groups: expected a "
                                "positive integer or \"all\"");
        } else if (strcmp(key, "eps") == 0) {
            if (mz__float(z, kw, key, 1e-5, 0, 1, &o->eps) < 0)
                return -EINVAL;
        } else if (strcmp(key, "momentum") == 0 && o->norm == NORM_BATCH) {
            if (mz__float(z, kw, key, 0.1, 0, 1, &o->momentum) < 0)
                return -EINVAL;
        } else if (strcmp(key, "affine") == 0) {
            if (toml_type_of(e) != TOML_BOOL || !toml_bool(e))
                return mz__fail(z, toml_pos_of(e), "model.norm_kwargs.affine: norms here always "
                                "have a weight and a bias (affine = true)");
        } else {
            return mz__fail(z, pos, "model.norm_kwargs: \"%s\" does not apply to norm_layer "
                            "\"%s\" (it takes %s)", key, s[0] ? s : "none",
                            o->norm == NORM_GROUP ? "num_groups, eps, affine"
                            : o->norm == NORM_BATCH ? "eps, momentum, affine" : "eps, affine");
        }
    }
    if (o->norm == NORM_GROUP && !(kw && toml_table_get(kw, "num_groups")))
        return mz__fail(z, toml_pos_of(v), "model.norm_layer \"group\" needs "
                        "norm_kwargs.num_groups");
    return 0;
}

/* convs_per_block: "3x3_conv" and "1x1_conv". */
static int mz__convs(mz *z, const toml_value *mt, unet_opts *o)
{
    const toml_value *v = toml_table_get(mt, "convs_per_block");
    if (!v) {
        o->nconvs = 2;
        o->kernel[0] = o->kernel[1] = 3;
        return 0;
    }
    if (toml_type_of(v) != TOML_ARRAY || toml_array_len(v) == 0 ||
        toml_array_len(v) > UNET_MAX_CONVS)
        return mz__fail(z, toml_pos_of(v), "model.convs_per_block: expected a list of 1 to %d "
                        "convolutions (\"3x3_conv\", \"1x1_conv\")", UNET_MAX_CONVS);
    o->nconvs = toml_array_len(v);
    for (size_t i = 0; i < o->nconvs; i++) {
        const toml_value *e = toml_array_at(v, i);
        const char *s = toml_type_of(e) == TOML_STRING ? toml_string(e) : "";
        if (strcmp(s, "3x3_conv") == 0)
            o->kernel[i] = 3;
        else if (strcmp(s, "1x1_conv") == 0)
            o->kernel[i] = 1;
        else if (strcmp(s, "3x3_dw_conv") == 0)
            return mz__fail(z, toml_pos_of(e), "model.convs_per_block: \"3x3_dw_conv\" "
                            "(depthwise convolutions) is not built yet");
        else
            return mz__fail(z, toml_pos_of(e), "model.convs_per_block: expected \"3x3_conv\" or "
                            "\"1x1_conv\"");
    }
    return 0;
}

/* loss, with the Model Zoo's default (bce for two classes, ssce beyond),
 * and the output channels it needs. */
static int mz__loss(mz *z, const toml_value *mt, unet_opts *o)
{
    char s[32];
    const toml_value *v = toml_table_get(mt, "loss");
    if (mz__lower(z, mt, "loss", s, sizeof(s)) < 0)
        return -EINVAL;
    if (!s[0])
        snprintf(s, sizeof(s), "%s", o->num_classes <= 2 ? "bce" : "ssce");
    o->out_channels = o->num_classes;
    if (strcmp(s, "bce") == 0 || strcmp(s, "bce_dice") == 0 || strcmp(s, "bce_with_logits") == 0) {
        if (o->num_classes != 2)
            return mz__fail(z, v ? toml_pos_of(v) : toml_pos_of(mt), "model.loss \"%s\": binary "
                            "cross entropy needs train_input.num_classes = 2 (it is %lld)", s,
                            (long long)o->num_classes);
        o->out_channels = 1;
        o->loss = strcmp(s, "bce_dice") == 0 ? "bce_dice" : "bce_with_logits";
    } else if (strcmp(s, "multilabel_bce") == 0) {
        o->loss = "multilabel_bce";
    } else if (strcmp(s, "ssce_dice") == 0) {
        o->loss = "ssce_dice";
    } else if (strcmp(s, "ssce") == 0 || strcmp(s, "pixel_softmax_cross_entropy") == 0) {
        o->loss = "pixel_softmax_cross_entropy";
    } else {
        return mz__fail(z, toml_pos_of(v), "model.loss: \"%s\" is not one of bce, "
                        "multilabel_bce, ssce, ssce_dice, bce_dice", toml_string(v));
    }
    if (o->out_channels < 2 && strcmp(o->loss, "bce_with_logits") != 0 &&
        strcmp(o->loss, "bce_dice") != 0)
        return mz__fail(z, v ? toml_pos_of(v) : toml_pos_of(mt), "model.loss \"%s\" needs two "
                        "or more classes (train_input.num_classes)", s);
    return 0;
}

/* The template's options from the Model Zoo's keys, with its defaults
 * (its set_defaults and modeling_unet). */
static int mz__unet_opts(mz *z, const toml_value *mt, unet_opts *o)
{
    memset(o, 0, sizeof(*o));
    if (mz__unet_keys(z, mt) < 0)
        return -EINVAL;
    bool conv3d;
    if (mz__bool(z, mt, "use_conv3d", false, &conv3d) < 0)
        return -EINVAL;
    o->depth = conv3d ? -1 : 0; /* (its size from image_shape) */
    const toml_value *ef = toml_table_get(mt, "encoder_filters");
    const toml_value *df = toml_table_get(mt, "decoder_filters");
    if (!ef || !df)
        return mz__fail(z, toml_pos_of(mt), "the U-Net [model] needs both encoder_filters and "
                        "decoder_filters");
    if (mz__ints(z, ef, "model.encoder_filters", 1, MODEL_DIM_MAX, o->enc, UNET_MAX_LEVELS,
                 &o->nenc) < 0 ||
        mz__ints(z, df, "model.decoder_filters", 1, MODEL_DIM_MAX, o->dec, UNET_MAX_LEVELS,
                 &o->ndec) < 0)
        return -EINVAL;
    if (o->nenc != o->ndec + 1)
        return mz__fail(z, toml_pos_of(df), "model.decoder_filters: %zu levels, but "
                        "encoder_filters has %zu: the encoder needs one more (the bottleneck)",
                        o->ndec, o->nenc);
    if (o->nenc < 2)
        return mz__fail(z, toml_pos_of(ef), "model.encoder_filters: at least two levels (one "
                        "block and the bottleneck)");
    char method[32];
    if (mz__lower(z, mt, "downscale_method", method, sizeof(method)) < 0)
        return -EINVAL;
    if (method[0] && strcmp(method, "max_pool") != 0 && strcmp(method, "strided_conv") != 0)
        return mz__fail(z, toml_pos_of(toml_table_get(mt, "downscale_method")),
                        "model.downscale_method: expected \"max_pool\" or \"strided_conv\"");
    o->strided = strcmp(method, "strided_conv") == 0;
    if (mz__bool(z, mt, "skip_connect", true, &o->skip_connect) < 0 ||
        mz__bool(z, mt, "residual_blocks", false, &o->residual) < 0 ||
        mz__bool(z, mt, "downscale_first_conv", false, &o->first_conv_down) < 0 ||
        mz__bool(z, mt, "downscale_bottleneck", false, &o->bottleneck_down) < 0 ||
        mz__act(z, mt, o) < 0 || mz__norm(z, mt, o) < 0 || mz__convs(z, mt, o) < 0 ||
        mz__bool(z, mt, "enable_bias", o->norm == NORM_NONE, &o->enable_bias) < 0 ||
        mz__float(z, mt, "dropout_rate", 0, 0, 0.999999, &o->dropout) < 0 ||
        mz__int(z, mt, "initial_conv_filters", 0, 0, MODEL_DIM_MAX, &o->initial_conv_filters) < 0)
        return -EINVAL;
    o->init = toml_table_get(mt, "initializer");
    o->bias_init = toml_table_get(mt, "bias_initializer");
    o->norm_init = toml_table_get(mt, "norm_weight_initializer");
    if (o->residual && o->strided)
        return mz__fail(z, toml_pos_of(toml_table_get(mt, "residual_blocks")),
                        "model.residual_blocks: needs downscale_method \"max_pool\"");
    if (o->skip_connect && o->strided && o->nconvs == 1)
        return mz__fail(z, toml_pos_of(toml_table_get(mt, "convs_per_block")),
                        "model.convs_per_block: with downscale_method \"strided_conv\" and "
                        "skip_connect, a block needs two or more convolutions (the skip is "
                        "taken before the strided one)");
    /* downscale_encoder_blocks: one for all, or one per encoder block */
    const toml_value *de = toml_table_get(mt, "downscale_encoder_blocks");
    for (size_t i = 0; i < UNET_MAX_LEVELS; i++)
        o->down_enc[i] = true;
    if (de && toml_type_of(de) == TOML_BOOL) {
        for (size_t i = 0; i < UNET_MAX_LEVELS; i++)
            o->down_enc[i] = toml_bool(de);
    } else if (de && toml_type_of(de) == TOML_ARRAY) {
        if (toml_array_len(de) != o->nenc - 1 && toml_array_len(de) != o->nenc)
            return mz__fail(z, toml_pos_of(de), "model.downscale_encoder_blocks: %zu values for "
                            "%zu encoder blocks", toml_array_len(de), o->nenc - 1);
        for (size_t i = 0; i < toml_array_len(de); i++) {
            const toml_value *e = toml_array_at(de, i);
            if (toml_type_of(e) != TOML_BOOL)
                return mz__fail(z, toml_pos_of(e), "model.downscale_encoder_blocks: expected "
                                "true or false");
            o->down_enc[i] = toml_bool(e);
        }
    } else if (de) {
        return mz__fail(z, toml_pos_of(de), "model.downscale_encoder_blocks: expected true, "
                        "false or a list of them");
    }
    if (!o->strided) { /* max_pool: every block pools, the bottleneck does not */
        for (size_t i = 0; i < UNET_MAX_LEVELS; i++)
            o->down_enc[i] = true;
        o->bottleneck_down = false;
    }
    return 0;
}

/* The output of the U-Net [model] mt: a new [model] table of layers. */
static int mz__unet(mz *z, const toml_value *mt, toml_pos mpos)
{
    unet_opts o;
    if (mz__unet_opts(z, mt, &o) < 0)
        return -EINVAL;
    /* the input: train_input.image_shape and num_classes */
    int64_t hwc[3];
    const toml_value *shape;
    if (mz__image_shape(z, hwc, &shape) < 0)
        return -EINVAL;
    const toml_value *train = toml_table_get(z->root, "train_input");
    const toml_value *nc = train && toml_type_of(train) == TOML_TABLE
                               ? toml_table_get(train, "num_classes") : NULL;
    const toml_value *own = toml_table_get(mt, "input_shape");
    if (!shape && !own)
        return mz__fail(z, toml_pos_of(mt), "the U-Net [model] needs train_input.image_shape "
                        "([H, W, C]) or model.input_shape ([C, H, W])");
    if (!nc || toml_type_of(nc) != TOML_INTEGER || toml_int(nc) < 1 || toml_int(nc) > 65536)
        return mz__fail(z, nc ? toml_pos_of(nc) : toml_pos_of(mt), "the U-Net [model] needs "
                        "train_input.num_classes (an integer, 1 to 65536)");
    o.num_classes = toml_int(nc);
    if (own) {
        int64_t chw[3];
        size_t n;
        if (mz__ints(z, own, "model.input_shape", 1, MODEL_DIM_MAX, chw, 3, &n) < 0)
            return -EINVAL;
        if (n != 3)
            return mz__fail(z, toml_pos_of(own), "model.input_shape: expected [C, H, W]");
        if (shape && (chw[1] != hwc[0] || chw[2] != hwc[1]))
            return mz__fail(z, toml_pos_of(own), "model.input_shape: differs from "
                            "train_input.image_shape");
        hwc[0] = chw[1], hwc[1] = chw[2], hwc[2] = chw[0];
    }
    if (o.depth) { /* a volume: image_shape is [D, H, W], its channels input_channels' */
        if (own || !shape)
            return mz__fail(z, own ? toml_pos_of(own) : toml_pos_of(mt), "a 3D U-Net "
                            "(use_conv3d) takes its volume from train_input.image_shape "
                            "([D, H, W]) and model.input_channels");
        if (mz__int(z, mt, "input_channels", 1, 1, 4096, &o.in_channels) < 0)
            return -EINVAL;
        o.depth = hwc[0];
        o.h = hwc[1];
        o.w = hwc[2];
    } else {
        if (mz__int(z, mt, "input_channels", hwc[2], 1, 4096, &o.in_channels) < 0)
            return -EINVAL;
        if (shape && o.in_channels != hwc[2])
            return mz__fail(z, mz__key_pos(mt, "input_channels"), "model.input_channels %lld "
                            "differs from the %lld channels of train_input.image_shape",
                            (long long)o.in_channels, (long long)hwc[2]);
        o.h = hwc[0];
        o.w = hwc[1];
    }
    if (mz__loss(z, mt, &o) < 0)
        return -EINVAL;
    /* every downscale halves the image: its sides must divide */
    int downs = 0;
    for (size_t i = 0; i + 1 < o.nenc; i++)
        downs += o.down_enc[i];
    downs += o.bottleneck_down;
    int64_t div = (int64_t)1 << downs;
    if (o.depth && (o.depth % div || o.h % div || o.w % div))
        return mz__fail(z, toml_pos_of(shape), "the volume's sides (%lld x %lld x %lld) must be "
                        "multiples of %lld: the U-Net halves them %d times and doubles them "
                        "back", (long long)o.depth, (long long)o.h, (long long)o.w,
                        (long long)div, downs);
    if (o.h % div || o.w % div)
        return mz__fail(z, shape ? toml_pos_of(shape) : toml_pos_of(own), "the image's sides "
                        "(%lld x %lld) must be multiples of %lld: the U-Net halves them %d "
                        "times and doubles them back", (long long)o.h, (long long)o.w,
                        (long long)div, downs);

    toml_value *nm = toml_new_table(z->root, mpos);
    toml_value *layers = toml_new_array(z->root, toml_pos_of(toml_table_get(mt, "encoder_filters")));
    if (!nm || !layers) {
        toml_value_free(nm);
        toml_value_free(layers);
        return mz__oom(z);
    }
    ub b = {z, &o, layers, toml_pos_of(toml_table_get(mt, "encoder_filters")), 0};
    ub__unet(&b);
    toml_pos spos = shape ? toml_pos_of(shape) : toml_pos_of(own);
    ub__set(&b, nm, "input_shape", mz__shape_value4(z, spos, o.in_channels, o.depth, o.h, o.w));
    const toml_value *lv = toml_table_get(mt, "loss");
    b.pos = lv ? toml_pos_of(lv) : mpos;
    ub__str(&b, nm, "loss", o.loss);
    bool ignore_bg;
    if (mz__bool(z, mt, "ignore_background_class", true, &ignore_bg) < 0) {
        toml_value_free(nm);
        toml_value_free(layers);
        return -EINVAL;
    }
    ub__bool(&b, nm, "include_background", !ignore_bg);
    /* the appliance's own model keys and those it reads as they are */
    static const char *const carried[] = {"name", "mixed_precision", "use_bfloat16",
                                          "fp16_type", "activation_dtype",
                                          "eval_ignore_classes"};
    for (size_t i = 0; i < ARRAY_SIZE(carried); i++) {
        const toml_value *v = toml_table_get(mt, carried[i]);
        if (v)
            ub__set(&b, nm, carried[i], toml_clone(z->root, v));
    }
    if (b.rc < 0 || toml_table_set(nm, "layers", 6, b.pos, layers) < 0) {
        toml_value_free(nm);
        if (b.rc == 0)
            toml_value_free(layers);
        return mz__oom(z);
    }
    toml_value *old = toml_table_take(z->root, "model");
    toml_value_free(old);
    if (toml_table_set(z->root, "model", 5, mpos, nm) < 0) {
        toml_value_free(nm);
        return mz__oom(z);
    }
    return 0;
}

/* A [model] of layers with the input given by train_input.image_shape. */
static int mz__input_shape(mz *z, toml_value *mt)
{
    int64_t hwc[3];
    const toml_value *shape;
    if (toml_table_get(mt, "input_shape") || mz__image_shape(z, hwc, &shape) < 0 || !shape)
        return z->err && z->err[0] ? -EINVAL : 0;
    int64_t c;
    if (mz__int(z, mt, "input_channels", hwc[2], 1, 4096, &c) < 0)
        return -EINVAL;
    if (c != hwc[2])
        return mz__fail(z, mz__key_pos(mt, "input_channels"), "model.input_channels %lld "
                        "differs from the %lld channels of train_input.image_shape",
                        (long long)c, (long long)hwc[2]);
    toml_value_free(toml_table_take(mt, "input_channels"));
    toml_value *v = mz__shape_value(z, toml_pos_of(shape), c, hwc[0], hwc[1]);
    if (!v || toml_table_set(mt, "input_shape", 11, toml_pos_of(shape), v) < 0) {
        toml_value_free(v);
        return mz__oom(z);
    }
    return 0;
}

int modelzoo_prepare(toml_value *root, char *err, size_t errlen)
{
    mz z = {root, toml_source_name(root), err, errlen};
    if (err && errlen)
        err[0] = '\0';
    long mi = toml_table_find(root, "model");
    if (mi < 0)
        return 0;
    toml_value *mt = (toml_value *)toml_table_value(root, (size_t)mi);
    if (toml_type_of(mt) != TOML_TABLE)
        return 0; /* (jobspec_parse says what is wrong with it) */
    if (modelzoo_is_unet(mt))
        return mz__unet(&z, mt, toml_table_key_pos(root, (size_t)mi));
    return mz__input_shape(&z, mt);
}
