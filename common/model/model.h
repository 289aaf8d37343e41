/* Model graph compiler: turns the [model] table of a job file into layers
 * with inferred per-sample shapes, parameter tensors and cost estimates.
 * Every daemon compiles the same job file, so ids and names agree everywhere. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "toml.h"

#define MODEL_NAME_MAX 64      /* bytes of a layer name, with the terminator */
#define MODEL_TENSOR_NAME_MAX (MODEL_NAME_MAX + 16) /* "<layer>.running_mean" */
#define MODEL_MAX_LAYERS 4096
#define MODEL_MAX_INPUTS 16    /* inputs of one concat */
#define MODEL_DIM_MAX (1 << 24) /* largest size, count or kernel a job may give */

typedef enum {
    LAYER_DENSE,
    LAYER_CONV2D,
    LAYER_CONV_TRANSPOSE2D,
    LAYER_MAX_POOL2D,
    LAYER_AVG_POOL2D,
    LAYER_UPSAMPLE,
    LAYER_CONCAT,
    LAYER_ADD,
    LAYER_BATCH_NORM,
    LAYER_GROUP_NORM,
    LAYER_RELU,
    LAYER_LEAKY_RELU,
    LAYER_GELU,
    LAYER_SIGMOID,
    LAYER_TANH,
    LAYER_DROPOUT,
    LAYER_FLATTEN,
    /* volumes: C x D x H x W; their axes' sizes in kernel[0..2] etc., d first */
    LAYER_CONV3D,
    LAYER_CONV_TRANSPOSE3D,
    LAYER_MAX_POOL3D,
    LAYER_AVG_POOL3D,
    LAYER_TYPE_COUNT,
} layer_type;

typedef enum {
    LOSS_SOFTMAX_CROSS_ENTROPY,       /* 1-D logits, one per class (at least 2) */
    LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY, /* C x H x W logits, C >= 2 classes per pixel */
    LOSS_BCE_WITH_LOGITS,             /* any shape: one independent logit per element */
    LOSS_DICE,                        /* C x H x W mask logits */
    LOSS_BCE_DICE,                    /* C x H x W mask logits: BCE plus dice */
    /* The Model Zoo's "ssce_dice" (DiceCELoss): C x H x W logits, C >= 2,
     * labels per pixel; per sample 0.5 * the pixels' mean softmax cross
     * entropy + 0.5 * (1 - the mean over classes of soft Dice of the
     * softmax against the one-hot labels), the background class (0) left
     * out of the Dice unless model.include_background (its mean corrected
     * by C / (C - 1)) */
    LOSS_SSCE_DICE,
    /* The Model Zoo's "multilabel_bce": C x H x W logits against the
     * one-hot labels per pixel (C channels), BCE with logits, the mean
     * over every element */
    LOSS_MULTILABEL_BCE,
    LOSS_COUNT,
} model_loss;

typedef enum {
    UPSAMPLE_NEAREST,
    UPSAMPLE_BILINEAR,
    UPSAMPLE_TRILINEAR,    /* volumes */
} upsample_mode;

/* A per-sample activation shape. */
typedef struct {
    int ndim;      /* 1 (features), 3 (C, H, W) or 4 (C, D, H, W: a volume) */
    int64_t d[4];  /* d[0] features or channels, then the spatial sizes outermost first
                      (height, width; or depth, height, width); unused ones are 1 */
} model_shape;

/* A parameter or buffer tensor of a layer. */
typedef struct {
    uint32_t id;                       /* its index in model.tensors: layer order, weight before bias */
    char name[MODEL_TENSOR_NAME_MAX];  /* "<layer>.weight", ".bias", ".running_mean", ".running_var" */
    int ndim;                          /* 1, 2, 4 or 5 (a 3D convolution's weight) */
    int64_t dims[5];                   /* sizes, outermost first; unused ones are 1 */
    uint64_t elems;                    /* product of dims */
    bool trainable;                    /* false for batch-norm running statistics */
    int layer;                         /* index of the owning layer */
} model_tensor;

/* An initializer a job names for a layer's weight or bias (the Model Zoo's
 * create_initializer, init.c): name "" leaves the planner's default. Every
 * parameter the initializer takes holds the value given or its default
 * (model_init_parse resolves them); the others are zero. */
#define MODEL_INIT_NAME_MAX 24
typedef struct model_init {
    char name[MODEL_INIT_NAME_MAX]; /* "constant", "ones", "zeros", "uniform", "normal",
                                       "xavier_normal", "xavier_uniform" (glorot_ read as
                                       xavier_), "truncated_normal", "variance_scaling",
                                       "lecun_normal", "lecun_uniform", "kaiming_normal",
                                       "kaiming_uniform"; "" for the default */
    double val;                     /* constant: the value */
    double a, b;                    /* uniform: bounds; truncated_normal: cut-offs;
                                       kaiming_: the negative slope (a) */
    double mean, std;               /* normal, truncated_normal */
    double gain;                    /* xavier_: the factor */
    double scale;                   /* variance_scaling (lecun_: 1): the variance's factor */
    char mode[8];                   /* kaiming_, variance_scaling: "fan_in", "fan_out",
                                       "fan_avg" (variance_scaling only) */
    char distribution[20];          /* variance_scaling: "truncated_normal", "normal",
                                       "uniform" */
    char nonlinearity[20];          /* kaiming_: the gain's nonlinearity (calculate_gain) */
} model_init;

typedef struct {
    char name[MODEL_NAME_MAX];  /* unique, [A-Za-z0-9_-]+, never "input" */
    layer_type type;
    toml_pos pos;               /* the layer's [[model.layers]] header */
    int ninputs;                /* 1, except concat (2 or more) and add (2) */
    int inputs[MODEL_MAX_INPUTS]; /* earlier layer indices; -1 is the model input */
    model_shape in;             /* shape of inputs[0] */
    model_shape out;            /* shape of the output */

    /* Parameters of the type; the others are zero. */
    int64_t units;              /* dense: output features */
    int64_t filters;            /* conv2d, conv_transpose2d: output channels */
    /* per spatial axis, outermost first: [kh, kw] for images, [kd, kh, kw]
     * for the 3D types (their third unused in 2D) */
    int kernel[3];              /* conv, transpose, pools */
    int stride[3];              /* conv, transpose, pools */
    int padding[3];             /* conv, transpose, pools: on each side */
    int dilation[3];            /* conv, transpose (pools: 1) */
    int output_padding[3];      /* transpose: extra rows/columns on one side */
    bool bias;                  /* dense, conv, transpose: has a bias tensor */
    int scale;                  /* upsample: integer scale factor */
    upsample_mode mode;         /* upsample */
    int groups;                 /* group_norm: channel groups (divides C) */
    double momentum;            /* batch_norm: running-statistics momentum */
    double eps;                 /* batch_norm, group_norm: added to the variance */
    double negative_slope;      /* leaky_relu */
    double rate;                /* dropout: probability of zeroing, in [0, 1) */
    /* batch_norm, group_norm, dense: applies the relu that reads it, its
     * only reader (model_fuse); relu: applied by the norm or dense layer it reads,
     * its output that layer's (a view, as flatten's output is its input) */
    bool fused;

    /* Costs per sample. */
    uint64_t params;            /* trainable parameters */
    uint64_t buffers;           /* non-trainable elements (running statistics) */
    uint64_t act_bytes;         /* bytes of the output activation, fp32 */
    uint64_t flops;             /* forward FLOPs, see model_compile */
    int first_tensor;           /* index of the layer's first tensor in model.tensors */
    int ntensors;               /* its tensors: weight, bias, running_mean, running_var */
    /* weight_initializer, bias_initializer: what its ".weight" and ".bias"
     * start as (name "": the planner's default) */
    model_init weight_init, bias_init;
} model_layer;

typedef struct {
    char *source;               /* the job file's name, for messages; owned */
    model_shape input;          /* per-sample input shape */
    model_loss loss;
    toml_pos loss_pos;          /* where the loss was given */
    int nlayers;
    model_layer *layers;        /* owned; in execution (file) order */
    int ntensors;
    model_tensor *tensors;      /* owned; tensors[i].id == i */
    uint64_t total_params;      /* trainable parameters of all layers */
    uint64_t total_buffers;     /* non-trainable elements of all layers */
    uint64_t act_bytes;         /* sum of the layers' act_bytes */
    uint64_t flops;             /* sum of the layers' flops */
    /* How samples arrive (sample.h): 8-bit inputs rather than float32, byte
     * labels rather than int32. Set from the job's data by jobspec_load;
     * false from model_compile alone. */
    bool input_unorm8;
    bool labels_u8;
    int input_scale;            /* how an 8-bit input becomes a float (sample_scale, sample.h:
                                   the input's normalize_data_method); set by jobspec_load */
    /* activation_dtype = "bfloat16": the outputs kept for the backward pass
     * are kept as bfloat16 (computation stays float32). */
    bool act_bf16;
    bool mixed_precision;       /* [model] mixed_precision: Weight Streaming's weights and
                                   gradients cross the wire in bfloat16 */
    bool include_background;    /* LOSS_SSCE_DICE: class 0 counts in the Dice term (the
                                   Model Zoo's ignore_background_class = false) */
    uint64_t eval_ignore;       /* classes (below 64) left out of evaluation's mean IoU
                                   (the Model Zoo's eval_ignore_classes) */
    /* The memory plan keeps every layer's output for the backward pass,
     * none made again (memplan.h): set by the plan when the wafer holds
     * them (Plan.keep_outputs, fit_choose); false from model_compile. */
    bool keep_outputs;
    /* The executor may keep chains of convolutions, batch norms, relus
     * and adds in oneDNN's blocked layout (wse-node/exec.c, its blocked
     * groups): true from model_compile; false keeps every tensor plain,
     * the reference the blocked chains are held to, bit for bit. */
    bool blocked;
    /* The lean memory plan may make costly convolution outputs again
     * rather than keep them, where that lowers its arena (memplan.h):
     * true from model_compile; false keeps every costly output, the
     * reference the lightened plan is held to. */
    bool lighten;
    /* One batch in flight from each worker rather than two
     * (Plan.feed_credits 1): set by the plan where the replica fits its
     * wafer only so (fit_feed_one); false from model_compile. */
    bool feed_one;
    /* Samples of an evaluation batch (the eval input's batch size; 0: the
     * job does not evaluate): a replica holds as many evaluation batches
     * as training ones, counted in its memory up to its share; set by the
     * job (jobspec), kept by model_recompile. */
    uint32_t eval_batch;
    /* The 2-D layers run as 3-D ones over [C, H, 1, W] (model_rows_as_depth):
     * set by the plan where that lowers a replica's memory (Plan.rows_as_depth,
     * fit_choose_stripes); false from model_compile, kept by model_recompile. */
    bool rows_as_depth;
    /* The bfloat16 copies of kept outputs (act_bf16) live in a file the
     * executor writes and reads back (exec_set_spill), not in the arena:
     * set by the plan where the replica fits its wafer only so
     * (Plan.spill_packed, fit_spill); false from model_compile. */
    bool spill_packed;
    /* The bytes a spill file may take (the smallest --spill-dir's room):
     * what fit's searches count on where only spilling fits (0: none,
     * from model_compile; set on a copy by who searches). */
    uint64_t spill_room;
} model;

/* Whether l computes on volumes (C x D x H x W): its type is a 3D one, or
 * its input is a volume. */
static inline bool model_layer_is_3d(const model_layer *l)
{
    return l->type == LAYER_CONV3D || l->type == LAYER_CONV_TRANSPOSE3D ||
           l->type == LAYER_MAX_POOL3D || l->type == LAYER_AVG_POOL3D || l->in.ndim == 4;
}

/* Whether layer l's output and gradient are another layer's buffers (a
 * view): flatten's are its input's, a fused relu's its norm's or dense
 * layer's. */
static inline bool model_layer_is_view(const model_layer *l)
{
    return l->type == LAYER_FLATTEN || (l->type == LAYER_RELU && l->fused);
}

/* Fuses (on) every relu that is the only reader of a batch or group norm
 * or a dense layer (not with act_bf16), and not the last layer, into that
 * layer (model_layer.fused): its passes apply it (a dense layer and a
 * group norm in place on the output; on the gradient, a dense layer by its
 * output, a norm by its input and the scale and shift it saved), and the
 * relu computes nothing and keeps no buffer of its own.
 * model_compile fuses; off undoes it (the reference the fused passes are
 * held to, bit for bit). */
void model_fuse(model *m, bool on);

/* Compiles the [model] table of a parsed job file: keys input_shape, loss,
 * layers (an array of tables) and an optional descriptive name. Infers every
 * layer's output shape, its parameter tensors and its costs per sample.
 *
 * Forward FLOPs count a multiply-add as 2: dense 2*in*units, conv2d
 * 2*C*kh*kw*out_elems, conv_transpose2d 2*in_elems*filters*kh*kw, plus one
 * per output element for a bias; pools kh*kw per output element; per
 * element: add 1, relu 1, dropout 1, leaky_relu 2, sigmoid 4, tanh 4,
 * gelu 8, batch_norm and group_norm 4, bilinear upsample 7; flatten,
 * concat and nearest upsample 0.
 *
 * Returns a model owned by the caller (release with model_free), or NULL
 * after writing one message "FILE:LINE:COL: layer "NAME": problem" (or
 * "FILE:LINE:COL: problem" outside layers) into err. */
model *model_compile(const toml_value *model_table, char *err, size_t errlen);
/* model_compile with the input shape replaced by *input (the same layers
 * on another image size: what fits a wafer). */
model *model_compile_as(const toml_value *model_table, const model_shape *input, char *err,
                        size_t errlen);

/* What a plan decides about the model a daemon computes, applied as it is
 * compiled (model_recompile): nothing writes into a compiled model later. */
typedef struct model_options {
    const model_shape *input; /* the same layers on another input; NULL: the job's */
    bool keep_outputs;        /* every output kept for the backward pass (Plan.keep_outputs) */
    bool keep_costly;         /* every costly output kept: model.lighten off (Plan.keep_costly) */
    bool rows_as_depth;       /* model_rows_as_depth (Plan.rows_as_depth; also where full's is) */
    bool spill_packed;        /* model.spill_packed (Plan.spill_packed) */
} model_options;

/* The model of full's [model] table (model_table) compiled again with the
 * plan's options; what the job's data and [model] keys set beside the
 * layers (the inputs' encodings, activation and mixed precision) carried
 * over from full. Returns NULL with a message as model_compile. */
model *model_recompile(const toml_value *model_table, const model *full, const model_options *o,
                       char *err, size_t errlen);
/* Compiles the [model] table of a whole job document (the root table);
 * a missing [model] is an error. */
model *model_compile_document(const toml_value *root, char *err, size_t errlen);
void model_free(model *m);

/* The index of the layer called name, or -1. */
int model_find_layer(const model *m, const char *name);

/* Reads an initializer as a job gives it (init.c), a name ("zeros", in any
 * case) or a table with a "name" and the initializer's parameters
 * ({name = "glorot_uniform", gain = 1.0}), into *out with every parameter
 * resolved (defaults as the Model Zoo's create_initializer). A numeric
 * parameter may be given as a nonlinearity's name ("relu"): its gain, as
 * there. Returns 0, or -EINVAL with "FILE:LINE:COL: message" in err for an
 * unknown name (the known ones listed), an unknown parameter key or a value
 * of the wrong type or out of range. */
int model_init_parse(const toml_value *v, model_init *out, char *err, size_t errlen);

/* "dense", "conv2d", ... as written in job files. */
const char *layer_type_name(layer_type t);
/* "softmax_cross_entropy", ... as written in job files. */
const char *model_loss_name(model_loss l);
/* Writes a shape as "64x128x128" or "784" into buf; returns buf. */
const char *model_shape_str(const model_shape *s, char *buf, size_t n);
/* Elements of a shape. */
uint64_t model_shape_elems(const model_shape *s);

/* Whether the model's samples could be split into stripes of rows
 * (spatial partitions): an image input and no layer that needs whole
 * samples (dense, flatten). Whether a given count of stripes splits is
 * common/memplan/spatial.h's to say. */
bool model_splits(const model *m);

/* Rows as depth: an image model whose layers are all ones a volume has
 * (convolutions, transposed convolutions, pools, norms, activations,
 * dropout, concat, add) computed as the 3-D layers over [C, H, 1, W]: a
 * kh x kw window becomes kh x 1 x kw, and so on, the same elements in the
 * same order, the same arithmetic. What volumes have and images lack then
 * applies to the rows of a large image: a convolution's operands in bands
 * of rows (depth bands) and its backward pass in two (memplan_op.mid).
 * The tensors keep their shapes (a [O, I, kh, kw] weight holds the same
 * elements as [O, I, kh, 1, kw]): checkpoints are the image model's.
 * Returns 0 (m->rows_as_depth set), or -EINVAL with why in err when m is
 * not an image model of those layers alone (m unchanged). */
int model_rows_as_depth(model *m, char *err, size_t errlen);
