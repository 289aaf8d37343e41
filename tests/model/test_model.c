/* Unit tests of the model graph compiler: shapes, parameter counts, FLOPs
 * and tensor layout checked against numbers worked out by hand, the exact
 * messages for bad graphs, and the example models in models/. */
#include "model.h"
#include "toml.h"

#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static const char *models_dir = "models";
static char err[512];

/* Compiles a job document; returns NULL (and err) on any error. The
 * document is freed; the model does not refer to it. */
static model *compile(const char *text)
{
    toml_value *root = toml_parse(text, strlen(text), "job.toml", err, sizeof(err));
    if (!root)
        return NULL;
    model *m = model_compile_document(root, err, sizeof(err));
    toml_free(root);
    return m;
}

static model *compile_ok(const char *text)
{
    model *m = compile(text);
    ck_assert_msg(m != NULL, "unexpected error: %s", err);
    return m;
}

#define ck_compile_error(text, want)                                        \
    do {                                                                    \
        model *m_ = compile(text);                                          \
        ck_assert_msg(m_ == NULL, "compiled, but must fail with: %s", (want)); \
        ck_assert_str_eq(err, (want));                                      \
    } while (0)

static void ck_shape(const model *m, const char *layer, const char *want)
{
    char buf[64];
    int i = model_find_layer(m, layer);
    ck_assert_msg(i >= 0, "no layer %s", layer);
    ck_assert_str_eq(model_shape_str(&m->layers[i].out, buf, sizeof(buf)), want);
}

START_TEST(test_shapes)
{
    model *m = compile_ok(
        "[model]\n"
        "input_shape = [3, 32, 32]\n"
        "loss = \"pixel_softmax_cross_entropy\"\n"
        "[[model.layers]]\n"
        "name = \"conv\"\n"
        "type = \"conv2d\"\n"
        "filters = 8\n"
        "kernel_size = [3, 5]\n"
        "stride = [2, 1]\n"
        "padding = [1, 2]\n"
        "dilation = [1, 2]\n"
        "[[model.layers]]\n"
        "name = \"pool\"\n"
        "type = \"max_pool2d\"\n"
        "kernel_size = 3\n"
        "stride = 2\n"
        "padding = 1\n"
        "[[model.layers]]\n"
        "name = \"up\"\n"
        "type = \"conv_transpose2d\"\n"
        "filters = 4\n"
        "kernel_size = 3\n"
        "stride = 2\n"
        "padding = 1\n"
        "output_padding = 1\n"
        "[[model.layers]]\n"
        "name = \"bil\"\n"
        "type = \"upsample\"\n"
        "mode = \"bilinear\"\n"
        "[[model.layers]]\n"
        "name = \"avg\"\n"
        "type = \"avg_pool2d\"\n"
        "kernel_size = 2\n"
        "[[model.layers]]\n"
        "name = \"cat\"\n"
        "type = \"concat\"\n"
        "inputs = [\"avg\", \"conv\", \"up\"]\n"
        "[[model.layers]]\n"
        "name = \"same\"\n"
        "type = \"conv2d\"\n"
        "filters = 2\n"
        "kernel_size = [5, 3]\n"
        "dilation = [1, 3]\n"
        "padding = \"same\"\n"
        "[[model.layers]]\n"
        "name = \"near\"\n"
        "type = \"upsample\"\n"
        "scale_factor = 3\n");
    /* conv: H = (32 + 2*1 - 1*(3-1) - 1) / 2 + 1 = 31/2 + 1 = 16,
     *       W = (32 + 2*2 - 2*(5-1) - 1) / 1 + 1 = 28 */
    ck_shape(m, "conv", "8x16x28");
    /* pool: H = (16 + 2 - 3) / 2 + 1 = 8, W = (28 + 2 - 3) / 2 + 1 = 14 */
    ck_shape(m, "pool", "8x8x14");
    /* transpose: H = (8-1)*2 - 2*1 + (3-1) + 1 + 1 = 16, W = (14-1)*2 - 2 + 2 + 1 + 1 = 28 */
    ck_shape(m, "up", "4x16x28");
    ck_shape(m, "bil", "4x32x56");
    /* avg pool, stride = kernel: 32/2 x 56/2 */
    ck_shape(m, "avg", "4x16x28");
    /* channels 4 + 8 + 4 */
    ck_shape(m, "cat", "16x16x28");
    /* "same": padding (5-1)/2 = 2 rows and 3*(3-1)/2 = 3 columns keep 16x28 */
    ck_shape(m, "same", "2x16x28");
    ck_shape(m, "near", "2x48x84");

    const model_layer *same = &m->layers[model_find_layer(m, "same")];
    ck_assert_int_eq(same->padding[0], 2);
    ck_assert_int_eq(same->padding[1], 3);
    const model_layer *cat = &m->layers[model_find_layer(m, "cat")];
    ck_assert_int_eq(cat->ninputs, 3);
    ck_assert_int_eq(cat->inputs[0], model_find_layer(m, "avg"));
    ck_assert_int_eq(cat->inputs[1], 0);
    ck_assert_int_eq(cat->inputs[2], 2);
    const model_layer *up = &m->layers[2];
    ck_assert_int_eq(up->inputs[0], 1); /* the previous layer by default */
    ck_assert_int_eq(m->layers[0].inputs[0], -1);
    ck_assert_int_eq(m->layers[model_find_layer(m, "bil")].mode, UPSAMPLE_BILINEAR);
    /* transpose weight is (C_in, filters, kh, kw) */
    const model_tensor *w = &m->tensors[up->first_tensor];
    ck_assert_str_eq(w->name, "up.weight");
    ck_assert(w->dims[0] == 8 && w->dims[1] == 4 && w->dims[2] == 3 && w->dims[3] == 3);
    model_free(m);
}
END_TEST

START_TEST(test_costs_and_tensors)
{
    model *m = compile_ok("[model]\n"
                          "input_shape = [3, 8, 8]\n"
                          "loss = \"softmax_cross_entropy\"\n"
                          "[[model.layers]]\n"
                          "name = \"conv\"\n"
                          "type = \"conv2d\"\n"
                          "filters = 4\n"
                          "kernel_size = 3\n"
                          "padding = 1\n"
                          "[[model.layers]]\n"
                          "name = \"bn\"\n"
                          "type = \"batch_norm\"\n"
                          "momentum = 0.01\n"
                          "[[model.layers]]\n"
                          "name = \"act\"\n"
                          "type = \"relu\"\n"
                          "[[model.layers]]\n"
                          "name = \"pool\"\n"
                          "type = \"max_pool2d\"\n"
                          "kernel_size = 2\n"
                          "[[model.layers]]\n"
                          "name = \"flat\"\n"
                          "type = \"flatten\"\n"
                          "[[model.layers]]\n"
                          "name = \"drop\"\n"
                          "type = \"dropout\"\n"
                          "rate = 0.25\n"
                          "[[model.layers]]\n"
                          "name = \"fc\"\n"
                          "type = \"dense\"\n"
                          "units = 10\n");
    ck_assert_int_eq(m->nlayers, 7);
    const model_layer *l = m->layers;
    /* conv 3->4, 3x3, out 4x8x8 = 256: params 4*3*9 + 4 = 112;
     * FLOPs 2*3*9*256 + 256 = 14080 */
    ck_assert_uint_eq(l[0].params, 112);
    ck_assert_uint_eq(l[0].flops, 14080);
    ck_assert_uint_eq(l[0].act_bytes, 1024);
    /* batch norm over 4 channels: 8 trainable, 8 buffered, 4 FLOPs per element */
    ck_assert_uint_eq(l[1].params, 8);
    ck_assert_uint_eq(l[1].buffers, 8);
    ck_assert_uint_eq(l[1].flops, 1024);
    ck_assert(l[1].momentum == 0.01 && l[1].eps == 1e-5);
    ck_assert_uint_eq(l[2].flops, 256);
    /* pool 2x2 -> 4x4x4 = 64 outputs of 4 comparisons */
    ck_assert_uint_eq(l[3].flops, 256);
    ck_assert_uint_eq(l[3].act_bytes, 256);
    ck_assert_uint_eq(l[4].flops, 0);
    ck_assert_int_eq(l[4].out.ndim, 1);
    ck_assert_int_eq(l[4].out.d[0], 64);
    ck_assert(l[5].rate == 0.25);
    ck_assert_uint_eq(l[5].flops, 64);
    /* dense 64->10: params 640 + 10 = 650; FLOPs 2*64*10 + 10 = 1290 */
    ck_assert_uint_eq(l[6].params, 650);
    ck_assert_uint_eq(l[6].flops, 1290);
    ck_assert_uint_eq(l[6].act_bytes, 40);
    /* totals: 112 + 8 + 650 = 770 parameters;
     * 14080 + 1024 + 256 + 256 + 0 + 64 + 1290 = 16970 FLOPs;
     * 1024 * 3 + 256 * 3 + 40 = 3880 activation bytes */
    ck_assert_uint_eq(m->total_params, 770);
    ck_assert_uint_eq(m->total_buffers, 8);
    ck_assert_uint_eq(m->flops, 16970);
    ck_assert_uint_eq(m->act_bytes, 3880);

    /* Tensors in layer order, weight before bias, running stats last. */
    static const char *names[] = {"conv.weight", "conv.bias", "bn.weight", "bn.bias",
                                  "bn.running_mean", "bn.running_var", "fc.weight", "fc.bias"};
    ck_assert_int_eq(m->ntensors, 8);
    for (int i = 0; i < 8; i++) {
        ck_assert_uint_eq(m->tensors[i].id, (unsigned)i);
        ck_assert_str_eq(m->tensors[i].name, names[i]);
        ck_assert(m->tensors[i].trainable == (i != 4 && i != 5));
    }
    ck_assert_int_eq(m->tensors[0].ndim, 4);
    ck_assert(m->tensors[0].dims[0] == 4 && m->tensors[0].dims[1] == 3 &&
              m->tensors[0].dims[2] == 3 && m->tensors[0].dims[3] == 3);
    ck_assert_uint_eq(m->tensors[0].elems, 108);
    ck_assert_int_eq(m->tensors[6].ndim, 2);
    ck_assert(m->tensors[6].dims[0] == 10 && m->tensors[6].dims[1] == 64);
    ck_assert_int_eq(m->tensors[6].layer, 6);
    ck_assert_int_eq(l[0].first_tensor, 0);
    ck_assert_int_eq(l[0].ntensors, 2);
    ck_assert_int_eq(l[1].first_tensor, 2);
    ck_assert_int_eq(l[1].ntensors, 4);
    ck_assert_int_eq(l[2].ntensors, 0);
    ck_assert_int_eq(l[6].first_tensor, 6);
    ck_assert_int_eq(l[6].pos.line, 28);
    ck_assert_int_eq(l[6].pos.col, 1);
    ck_assert_str_eq(m->source, "job.toml");
    ck_assert_int_eq(m->loss, LOSS_SOFTMAX_CROSS_ENTROPY);
    ck_assert_str_eq(layer_type_name(l[3].type), "max_pool2d");
    ck_assert_str_eq(model_loss_name(m->loss), "softmax_cross_entropy");
    model_free(m);
}
END_TEST

START_TEST(test_no_bias_and_features_input)
{
    model *m = compile_ok("[model]\n"
                          "input_shape = [20]\n"
                          "loss = \"bce_with_logits\"\n"
                          "[[model.layers]]\n"
                          "name = \"fc\"\n"
                          "type = \"dense\"\n"
                          "units = 5\n"
                          "bias = false\n"
                          "[[model.layers]]\n"
                          "name = \"skip\"\n"
                          "type = \"concat\"\n"
                          "inputs = [\"fc\", \"input\"]\n"
                          "[[model.layers]]\n"
                          "name = \"act\"\n"
                          "type = \"leaky_relu\"\n"
                          "negative_slope = 0.2\n");
    ck_assert_uint_eq(m->total_params, 100);
    ck_assert_int_eq(m->ntensors, 1);
    ck_assert_uint_eq(m->layers[0].flops, 200);
    ck_shape(m, "skip", "25");
    ck_assert(m->layers[2].negative_slope == 0.2);
    ck_assert_uint_eq(m->layers[2].flops, 50);
    model_free(m);
}
END_TEST

/* A model with an encoder/decoder skip whose sizes can be broken. */
#define SKIP_NET(pool_size)                                                     \
    "[model]\n"                                                                 \
    "input_shape = [3, 256, 256]\n"                                             \
    "loss = \"dice\"\n"                                                         \
    "[[model.layers]]\n"                                                        \
    "name = \"enc1\"\n"                                                         \
    "type = \"conv2d\"\n"                                                       \
    "filters = 32\n"                                                            \
    "kernel_size = 3\n"                                                         \
    "padding = 1\n"                                                             \
    "[[model.layers]]\n"                                                        \
    "name = \"enc1_relu\"\n"                                                    \
    "type = \"relu\"\n"                                                         \
    "[[model.layers]]\n"                                                        \
    "name = \"pool\"\n"                                                         \
    "type = \"max_pool2d\"\n"                                                   \
    "kernel_size = " pool_size "\n"                                             \
    "[[model.layers]]\n"                                                        \
    "name = \"up1\"\n"                                                          \
    "type = \"conv_transpose2d\"\n"                                             \
    "filters = 64\n"                                                            \
    "kernel_size = 2\n"                                                         \
    "stride = 2\n"                                                              \
    "[[model.layers]]\n"                                                        \
    "name = \"dec1_cat\"\n"                                                     \
    "type = \"concat\"\n"                                                       \
    "inputs = [\"up1\", \"enc1_relu\"]\n"

START_TEST(test_error_concat)
{
    model *m = compile_ok(SKIP_NET("2"));
    ck_shape(m, "dec1_cat", "96x256x256");
    model_free(m);
    ck_compile_error(SKIP_NET("4"),
                     "job.toml:23:1: layer \"dec1_cat\": concat inputs differ in spatial size: "
                     "\"up1\" is 64x128x128, \"enc1_relu\" is 32x256x256");
    ck_compile_error("[model]\n"
                     "input_shape = [10]\n"
                     "loss = \"bce_with_logits\"\n"
                     "[[model.layers]]\n"
                     "name = \"c\"\n"
                     "type = \"concat\"\n",
                     "job.toml:4:1: layer \"c\": concat needs at least 2 inputs, got 1");
}
END_TEST

#define RES_NET(stride)                                                         \
    "[model]\n"                                                                 \
    "input_shape = [3, 32, 32]\n"                                               \
    "loss = \"softmax_cross_entropy\"\n"                                        \
    "\n"                                                                        \
    "[[model.layers]]\n"                                                        \
    "name = \"conv1\"\n"                                                        \
    "type = \"conv2d\"\n"                                                       \
    "filters = 3\n"                                                             \
    "kernel_size = 3\n"                                                         \
    "padding = 1\n"                                                             \
    "stride = " stride "\n"                                                     \
    "[[model.layers]]\n"                                                        \
    "name = \"res\"\n"                                                          \
    "type = \"add\"\n"                                                          \
    "inputs = [\"conv1\", \"input\"]\n"                                         \
    "[[model.layers]]\n"                                                        \
    "name = \"flat\"\n"                                                         \
    "type = \"flatten\"\n"                                                      \
    "[[model.layers]]\n"                                                        \
    "name = \"fc\"\n"                                                           \
    "type = \"dense\"\n"                                                        \
    "units = 10\n"

START_TEST(test_error_add)
{
    model *m = compile_ok(RES_NET("1"));
    ck_assert_uint_eq(m->layers[1].flops, 3 * 32 * 32);
    model_free(m);
    ck_compile_error(RES_NET("2"), "job.toml:12:1: layer \"res\": add inputs differ in shape: "
                                   "\"conv1\" is 3x16x16, \"input\" is 3x32x32");
}
END_TEST

#define ONE_LAYER(body)                                                         \
    "[model]\n"                                                                 \
    "input_shape = [1, 28, 28]\n"                                               \
    "loss = \"softmax_cross_entropy\"\n"                                        \
    "[[model.layers]]\n"                                                        \
    "name = \"l1\"\n" body

START_TEST(test_error_keys_and_types)
{
    ck_compile_error(ONE_LAYER("type = \"dense2\"\nunits = 10\n"),
                     "job.toml:6:8: layer \"l1\": unknown layer type \"dense2\"");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = 4\nkernel = 3\n"),
                     "job.toml:8:1: layer \"l1\": unknown key \"kernel\" for a conv2d layer");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = 4\n"),
                     "job.toml:4:1: layer \"l1\": missing key \"kernel_size\" (conv2d layers need it)");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = 0\nkernel_size = 3\n"),
                     "job.toml:7:11: layer \"l1\": \"filters\" must be at least 1, got 0");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = 4\nkernel_size = [3, -1]\n"),
                     "job.toml:8:19: layer \"l1\": \"kernel_size\" must be between 1 and 16777216, got -1");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = \"4\"\nkernel_size = 3\n"),
                     "job.toml:7:11: layer \"l1\": \"filters\" must be an integer, not a string");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = 4\nkernel_size = 3\nstride = 2\n"
                               "padding = \"same\"\n"),
                     "job.toml:10:11: layer \"l1\": padding \"same\" needs stride 1 and an odd "
                     "kernel size, got kernel 3x3, stride 2x2");
    ck_compile_error(ONE_LAYER("type = \"dropout\"\nrate = 1.0\n"),
                     "job.toml:7:8: layer \"l1\": \"rate\" must be at least 0 and below 1, got 1");
    ck_compile_error(ONE_LAYER("type = \"group_norm\"\ngroups = 3\n"),
                     "job.toml:7:10: layer \"l1\": \"groups\" (3) must divide the 1 channels of \"input\"");
    ck_compile_error(ONE_LAYER("type = \"upsample\"\nmode = \"cubic\"\n"),
                     "job.toml:7:8: layer \"l1\": \"mode\" must be \"nearest\" or \"bilinear\"");
    ck_compile_error(ONE_LAYER("type = \"relu\"\nweight_initializer = \"zeros\"\n"),
                     "job.toml:7:1: layer \"l1\": \"weight_initializer\": the layer has no weight "
                     "tensor");
    ck_compile_error(ONE_LAYER("units = 3\n"),
                     "job.toml:4:1: layer \"l1\": missing key \"type\"");
    ck_compile_error("[model]\ninput_shape = [1, 28, 28]\nloss = \"softmax_cross_entropy\"\n"
                     "[[model.layers]]\ntype = \"relu\"\n",
                     "job.toml:4:1: layer 1: missing key \"name\"");
    ck_compile_error(ONE_LAYER("type = \"relu\"\n[[model.layers]]\nname = \"l1\"\ntype = \"relu\"\n"),
                     "job.toml:8:8: layer \"l1\": duplicate layer name (first defined at 5:8)");
    ck_compile_error(ONE_LAYER("type = \"relu\"\n[[model.layers]]\nname = \"a/b\"\ntype = \"relu\"\n"),
                     "job.toml:8:8: layer 2: name \"a/b\" must be 1 to 63 letters, digits, '_', '-' "
                     "or inner '.'");
    ck_compile_error(ONE_LAYER("type = \"relu\"\n[[model.layers]]\nname = \"a.\"\ntype = \"relu\"\n"),
                     "job.toml:8:8: layer 2: name \"a.\" must be 1 to 63 letters, digits, '_', '-' "
                     "or inner '.'");
}
END_TEST

START_TEST(test_error_inputs)
{
    ck_compile_error(ONE_LAYER("type = \"relu\"\n"
                               "[[model.layers]]\n"
                               "name = \"sum\"\n"
                               "type = \"add\"\n"
                               "inputs = [\"l1\", \"enc2\"]\n"),
                     "job.toml:10:17: layer \"sum\": unknown input \"enc2\"");
    ck_compile_error(ONE_LAYER("type = \"relu\"\n"
                               "inputs = [\"l2\"]\n"
                               "[[model.layers]]\n"
                               "name = \"l2\"\n"
                               "type = \"relu\"\n"),
                     "job.toml:7:11: layer \"l1\": input \"l2\" is defined later (layers run in "
                     "file order)");
    ck_compile_error(ONE_LAYER("type = \"relu\"\ninputs = [\"l1\"]\n"),
                     "job.toml:7:11: layer \"l1\": a layer cannot be its own input");
    ck_compile_error(ONE_LAYER("type = \"relu\"\ninputs = [\"input\", \"input\"]\n"),
                     "job.toml:4:1: layer \"l1\": relu takes 1 input, got 2");
}
END_TEST

START_TEST(test_error_shapes)
{
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\n"
                               "filters = 8\n"
                               "kernel_size = 3\n"
                               "[[model.layers]]\n"
                               "name = \"fc1\"\n"
                               "type = \"dense\"\n"
                               "units = 10\n"),
                     "job.toml:9:1: layer \"fc1\": dense needs 1-D input features, but \"l1\" "
                     "gives 8x26x26 (add a flatten layer)");
    ck_compile_error(ONE_LAYER("type = \"max_pool2d\"\nkernel_size = [1, 32]\n"),
                     "job.toml:4:1: layer \"l1\": output would be 1x28x0 from the 1x28x28 input of "
                     "\"input\" (kernel 1x32, stride 1x32, padding 0x0)");
    ck_compile_error(ONE_LAYER("type = \"max_pool2d\"\nkernel_size = 17\n"),
                     "job.toml:7:15: layer \"l1\": max_pool2d windows of at most 256 elements are "
                     "supported, got 17x17");
    ck_compile_error(ONE_LAYER("type = \"conv2d\"\nfilters = 2\nkernel_size = 5\ndilation = 7\n"),
                     "job.toml:4:1: layer \"l1\": output would be 2x0x0 from the 1x28x28 input of "
                     "\"input\" (kernel 5x5, stride 1x1, padding 0x0, dilation 7x7)");
    ck_compile_error(ONE_LAYER("type = \"flatten\"\n[[model.layers]]\nname = \"c\"\n"
                               "type = \"conv2d\"\nfilters = 1\nkernel_size = 1\n"),
                     "job.toml:7:1: layer \"c\": conv2d needs a C x H x W input, but \"l1\" gives 784");
    ck_compile_error(ONE_LAYER("type = \"relu\"\n"),
                     "job.toml:3:8: loss \"softmax_cross_entropy\" needs 1-D logits, one per class "
                     "(2 or more), but the last layer \"l1\" gives 1x28x28");
    ck_compile_error("[model]\ninput_shape = [784]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 10\n",
                     "job.toml:3:8: loss \"dice\" needs C x H x W mask logits, but the last layer "
                     "\"fc\" gives 10");
}
END_TEST

START_TEST(test_error_model_table)
{
    ck_compile_error("[train]\nsteps = 1\n", "job.toml:1:1: the job has no [model] table");
    ck_compile_error("[model]\ninput_shape = [1, 28]\nloss = \"dice\"\n",
                     "job.toml:2:15: \"input_shape\" must be [channels, height, width], [channels, depth, "
                     "height, width] or [features]");
    ck_compile_error("[model]\ninput_shape = [1, 0, 28]\nloss = \"dice\"\n",
                     "job.toml:2:19: \"input_shape\" sizes must be integers from 1 to 16777216");
    ck_compile_error("[model]\ninput_shape = [1, 2, 2]\nloss = \"mse\"\n",
                     "job.toml:3:8: \"loss\" must be one of \"softmax_cross_entropy\", "
                     "\"pixel_softmax_cross_entropy\" (\"ssce\"), \"bce_with_logits\" (\"bce\"), "
                     "\"dice\", \"bce_dice\", \"ssce_dice\", \"multilabel_bce\"");
    ck_compile_error("[model]\ninput_shape = [1, 2, 2]\nloss = \"dice\"\n",
                     "job.toml:1:1: [model] needs layers: one [[model.layers]] table for each");
    ck_compile_error("[model]\ninput_shape = [1, 2, 2]\nloss = \"dice\"\noptimizer = \"sgd\"\n",
                     "job.toml:4:1: unknown key \"optimizer\" in [model]");
}
END_TEST

static model *compile_file(const char *name)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", models_dir, name);
    toml_value *root = toml_parse_file(path, err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    model *m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    toml_free(root);
    return m;
}

/* Volumes: C x D x H x W shapes through the 3D layers and the layers that
 * take any spatial rank, their tensors (PyTorch's layouts) and costs; a 3D
 * layer on an image and an image layer on a volume refused. */
START_TEST(test_volumes)
{
    model *m = compile_ok("[model]\n"
                          "input_shape = [1, 16, 32, 32]\n"
                          "loss = \"pixel_softmax_cross_entropy\"\n"
                          "[[model.layers]]\nname = \"c1\"\ntype = \"conv3d\"\nfilters = 8\n"
                          "kernel_size = 3\npadding = 1\n"
                          "[[model.layers]]\nname = \"gn\"\ntype = \"group_norm\"\ngroups = 4\n"
                          "[[model.layers]]\nname = \"r\"\ntype = \"relu\"\n"
                          "[[model.layers]]\nname = \"p\"\ntype = \"max_pool3d\"\nkernel_size = 2\n"
                          "[[model.layers]]\nname = \"c2\"\ntype = \"conv3d\"\nfilters = 16\n"
                          "kernel_size = [1, 3, 3]\nstride = [1, 2, 2]\npadding = [0, 1, 1]\n"
                          "bias = false\n"
                          "[[model.layers]]\nname = \"up\"\ntype = \"conv_transpose3d\"\n"
                          "filters = 8\nkernel_size = 2\nstride = 2\n"
                          "[[model.layers]]\nname = \"a\"\ntype = \"avg_pool3d\"\n"
                          "kernel_size = [2, 1, 1]\n"
                          "[[model.layers]]\nname = \"u\"\ntype = \"upsample\"\nmode = \"trilinear\"\n"
                          "[[model.layers]]\nname = \"cat\"\ntype = \"concat\"\n"
                          "inputs = [\"u\", \"r\"]\n"
                          "[[model.layers]]\nname = \"head\"\ntype = \"conv3d\"\nfilters = 3\n"
                          "kernel_size = 1\n");
    ck_shape(m, "c1", "8x16x32x32");
    ck_shape(m, "gn", "8x16x32x32");
    ck_shape(m, "p", "8x8x16x16");
    ck_shape(m, "c2", "16x8x8x8");
    ck_shape(m, "up", "8x16x16x16");
    ck_shape(m, "a", "8x8x16x16");
    ck_shape(m, "u", "8x16x32x32");
    ck_shape(m, "cat", "16x16x32x32");
    ck_shape(m, "head", "3x16x32x32");
    const model_tensor *w = &m->tensors[m->layers[model_find_layer(m, "c1")].first_tensor];
    ck_assert_str_eq(w->name, "c1.weight");
    ck_assert_int_eq(w->ndim, 5);
    ck_assert_int_eq(w->dims[0], 8);
    ck_assert_int_eq(w->dims[1], 1);
    ck_assert_int_eq(w->dims[4], 3);
    ck_assert_uint_eq(w->elems, 8 * 27);
    w = &m->tensors[m->layers[model_find_layer(m, "up")].first_tensor];
    ck_assert_int_eq(w->dims[0], 16); /* in, out, kd, kh, kw */
    ck_assert_int_eq(w->dims[1], 8);
    ck_assert_uint_eq(w->elems, 16 * 8 * 8);
    int c2 = model_find_layer(m, "c2");
    ck_assert_uint_eq(m->layers[c2].params, 16 * 8 * 9);
    ck_assert_uint_eq(m->layers[c2].flops, 2ull * 8 * 9 * (16 * 8 * 8 * 8));
    ck_assert_uint_eq(m->total_params, (8 * 27 + 8) + 16 + 16 * 8 * 9 + (16 * 8 * 8 + 8) +
                                           (16 * 3 + 3));
    ck_assert(model_layer_is_3d(&m->layers[model_find_layer(m, "gn")]));
    model_free(m);
    ck_compile_error("[model]\ninput_shape = [1, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\nfilters = 2\nkernel_size = 3\n",
                     "job.toml:4:1: layer \"c\": conv3d needs a C x D x H x W input (a volume), "
                     "but \"input\" gives 1x28x28");
    ck_compile_error("[model]\ninput_shape = [1, 8, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"c\"\ntype = \"conv2d\"\nfilters = 2\nkernel_size = 3\n",
                     "job.toml:4:1: layer \"c\": conv2d needs a C x H x W input, but \"input\" "
                     "gives 1x8x28x28");
    ck_compile_error("[model]\ninput_shape = [1, 8, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\nfilters = 2\n"
                     "kernel_size = [3, 3]\n",
                     "job.toml:8:15: layer \"c\": \"kernel_size\" must be an integer or [depth, "
                     "height, width]");
    ck_compile_error("[model]\ninput_shape = [1, 8, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"u\"\ntype = \"upsample\"\nmode = \"bilinear\"\n",
                     "job.toml:7:8: layer \"u\": \"mode\" must be \"nearest\" or \"trilinear\" (the "
                     "input is a volume)");
    ck_compile_error("[model]\ninput_shape = [1, 2, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\nfilters = 2\nkernel_size = 3\n",
                     "job.toml:4:1: layer \"c\": output would be 2x0x26x26 from the 1x2x28x28 "
                     "input of \"input\" (kernel 3x3x3, stride 1x1x1, padding 0x0x0, dilation 1x1x1)");
    /* padding "same" on a volume's three axes, as on an image's two */
    m = compile_ok("[model]\ninput_shape = [1, 8, 28, 28]\nloss = \"dice\"\n"
                   "[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\nfilters = 2\n"
                   "kernel_size = [3, 5, 1]\ndilation = [2, 1, 1]\npadding = \"same\"\n");
    ck_shape(m, "c", "2x8x28x28");
    ck_assert_int_eq(m->layers[model_find_layer(m, "c")].padding[0], 2);
    ck_assert_int_eq(m->layers[model_find_layer(m, "c")].padding[1], 2);
    ck_assert_int_eq(m->layers[model_find_layer(m, "c")].padding[2], 0);
    model_free(m);
    ck_compile_error("[model]\ninput_shape = [1, 8, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\nfilters = 2\n"
                     "kernel_size = [3, 3, 3]\nstride = [1, 2, 1]\npadding = \"same\"\n",
                     "job.toml:10:11: layer \"c\": padding \"same\" needs stride 1 and an odd "
                     "kernel size, got kernel 3x3x3, stride 1x2x1");
    ck_compile_error("[model]\ninput_shape = [1, 8, 28, 28]\nloss = \"dice\"\n"
                     "[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\nfilters = 2\n"
                     "kernel_size = 3\npadding = \"full\"\n",
                     "job.toml:9:11: layer \"c\": \"padding\" must be an integer, [depth, height, "
                     "width] or \"same\", got \"full\"");
}
END_TEST

START_TEST(test_example_fc_mnist)
{
    /* 784*256 + 256 = 200960; 256*256 + 256 = 65792; 256*10 + 10 = 2570;
     * total 269322. FLOPs 401664 + 256 + 131328 + 256 + 5130 = 538634. */
    model *m = compile_file("fc_mnist.toml");
    ck_assert_int_eq(m->nlayers, 6);
    ck_assert_uint_eq(m->total_params, 269322);
    ck_assert_uint_eq(m->flops, 538634);
    ck_assert_int_eq(m->ntensors, 6);
    ck_assert_str_eq(m->tensors[4].name, "fc3.weight");
    ck_shape(m, "fc3", "10");
    model_free(m);
}
END_TEST

START_TEST(test_example_resnet_small)
{
    /* Convolutions have no bias; batch norm has 2C parameters (and 2C buffers).
     * stem: 16*3*9 = 432, bn 32                                       ->    464
     * block 1: 2 x (16*16*9 = 2304, bn 32)                            ->   4672
     * block 2: 32*16*9 = 4608, 32*32*9 = 9216, 1x1 down 32*16 = 512,
     *          3 bn of 64                                             ->  14528
     * block 3: 64*32*9 = 18432, 64*64*9 = 36864, down 64*32 = 2048,
     *          3 bn of 128                                            ->  57728
     * fc: 64*10 + 10                                                  ->    650
     * total 464 + 4672 + 14528 + 57728 + 650 = 78042; buffers 2*336 = 672 */
    model *m = compile_file("resnet_small.toml");
    ck_assert_uint_eq(m->total_params, 78042);
    ck_assert_uint_eq(m->total_buffers, 672);
    ck_shape(m, "b1_add", "16x32x32");
    ck_shape(m, "b2_add", "32x16x16");
    ck_shape(m, "b3_add", "64x8x8");
    ck_shape(m, "pool", "64x1x1");
    ck_shape(m, "fc", "10");
    model_free(m);
}
END_TEST

START_TEST(test_example_unet)
{
    /* Double conv block (Cin -> C, 3x3, no bias, batch norm after each):
     * 9*C*(Cin + C) + 4C.
     * enc1 (3->32) 10208, enc2 (32->64) 55552, enc3 (64->128) 221696,
     * enc4 (128->256) 885760, bottom (256->512) 3540992      -> 4714208
     * up 2x2 transposed conv with bias, Cin -> Cin/2: 4*Cin*Cin/2 + Cin/2:
     * up4 524544, up3 131200, up2 32832, up1 8224            ->  696800
     * decoders after the concat (2C -> C): dec4 1770496, dec3 442880,
     * dec2 110848, dec1 27776                                 -> 2352000
     * head 1x1 conv 32 -> 1 with bias: 33
     * total 4714208 + 696800 + 2352000 + 33 = 7763041 */
    model *m = compile_file("unet.toml");
    ck_assert_uint_eq(m->total_params, 7763041);
    ck_assert_uint_eq(m->total_buffers, 5888);
    ck_shape(m, "bottom_relu2", "512x32x32");
    ck_shape(m, "dec4_cat", "512x64x64");
    ck_shape(m, "dec1_cat", "64x512x512");
    ck_shape(m, "head", "1x512x512");
    ck_assert_int_eq(m->loss, LOSS_BCE_DICE);
    model_free(m);
}
END_TEST

static Suite *model_suite(void)
{
    Suite *s = suite_create("model");
    TCase *tc = tcase_create("compile");
    tcase_add_test(tc, test_shapes);
    tcase_add_test(tc, test_costs_and_tensors);
    tcase_add_test(tc, test_no_bias_and_features_input);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_error_concat);
    tcase_add_test(tc, test_error_add);
    tcase_add_test(tc, test_error_keys_and_types);
    tcase_add_test(tc, test_error_inputs);
    tcase_add_test(tc, test_error_shapes);
    tcase_add_test(tc, test_error_model_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("examples");
    tcase_add_test(tc, test_volumes);
    tcase_add_test(tc, test_example_fc_mnist);
    tcase_add_test(tc, test_example_resnet_small);
    tcase_add_test(tc, test_example_unet);
    suite_add_tcase(s, tc);
    return s;
}

/* usage: test_model [MODELS_DIR] */
int main(int argc, char **argv)
{
    if (argc > 1)
        models_dir = argv[1];
    SRunner *sr = srunner_create(model_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
