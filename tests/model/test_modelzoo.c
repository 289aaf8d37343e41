/* The Model Zoo's job keys (common/model/modelzoo.c): the U-Net template
 * builds, for each of the Model Zoo's 2D U-Net configurations, the tensors
 * its PyTorch modules have, name for name and shape for shape (the
 * reference: modelzoo_unet_tensors.txt, printed by
 * bench/modelzoo/unet_reference.py), and the layers in its order; and each
 * key it cannot honour is refused where it was written. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "jobspec.h"
#include "modelzoo.h"

static const char *reference_path;

/* A U-Net job in the Model Zoo's keys (TOML: the same document YAML makes). */
typedef struct mz_config {
    const char *name;
    const char *image_shape, *encoder, *decoder, *norm, *bias, *loss;
    int classes;
    int layers; /* layers the template builds: counted from the modules */
} mz_config;

/* layers: per conv block conv + norm + act (3, or 2 without a norm); per
 * encoder level its block (2 convs) and a pool; the bottleneck; per decoder
 * level a transposed conv, a concat and a block; the final conv. */
#define UNET_LAYERS(levels, per_conv) \
    ((levels) * (2 * (per_conv) + 1) + 2 * (per_conv) + (levels) * (2 + 2 * (per_conv)) + 1)

static const mz_config configs[] = {
    {"cityscapes", "[256, 512, 3]", "[32, 64, 128, 256, 512]", "[256, 128, 64, 32]",
     "norm_layer = \"group\"\nnorm_kwargs = {num_groups = 16}\n", "true", "ssce", 20,
     UNET_LAYERS(4, 3)},
    {"severstal", "[256, 256, 1]", "[32, 64, 128, 256]", "[128, 64, 32]",
     "norm_layer = \"batchnorm2d\"\n", "false", "bce", 2, UNET_LAYERS(3, 3)},
    {"inria_5120_rgb", "[5120, 5120, 3]", "[32, 64, 128, 256, 512, 1024]",
     "[512, 256, 128, 64, 32]", "norm_layer = \"group\"\nnorm_kwargs = {num_groups = 16}\n",
     "true", "bce", 2, UNET_LAYERS(5, 3)},
    {"inria_7168", "[7168, 7168, 1]", "[32, 64, 128, 256]", "[128, 64, 32]",
     "norm_layer = \"group\"\nnorm_kwargs = {num_groups = 16}\n", "false", "bce", 2,
     UNET_LAYERS(3, 3)},
};

static jobspec *parse_config(const mz_config *c, const char *extra, char *err, size_t errlen)
{
    char text[4096];
    snprintf(text, sizeof(text),
             "[train_input]\n"
             "data_processor = \"synthetic_segmentation\"\n"
             "image_shape = %s\n"
             "normalize_data_method = \"zero_centered\"\n"
             "batch_size = 1\n"
             "num_classes = %d\n"
             "num_workers = 4\n"
             "[model]\n"
             "nonlinearity = \"ReLU\"\n"
             "skip_connect = true\n"
             "enable_bias = %s\n"
             "downscale_method = \"max_pool\"\n"
             "convs_per_block = [\"3x3_conv\", \"3x3_conv\"]\n"
             "encoder_filters = %s\n"
             "decoder_filters = %s\n"
             "residual_blocks = false\n"
             "initializer = {name = \"glorot_uniform\", gain = 1.0}\n"
             "bias_initializer = \"zeros\"\n"
             "loss = \"%s\"\n"
             "mixed_precision = true\n"
             "use_bfloat16 = true\n"
             "%s%s",
             c->image_shape, c->classes, c->bias, c->encoder, c->decoder, c->loss, c->norm,
             extra ? extra : "");
    return jobspec_parse(text, strlen(text), "params.toml", NULL, err, errlen);
}

/* The reference's block for config name: its tensors ("name [d0, d1, ...]")
 * and its parameter count. */
typedef struct ref_tensor {
    char name[96];
    long long dims[4];
    int ndim;
} ref_tensor;

static int read_reference(const char *config, ref_tensor *out, int max, long long *params)
{
    FILE *f = fopen(reference_path, "r");
    ck_assert_msg(f != NULL, "cannot open %s", reference_path);
    char line[256];
    int n = -1;
    while (fgets(line, sizeof(line), f)) {
        if (line[0] != ' ') {
            if (n >= 0)
                break;
            size_t len = strlen(config);
            if (strncmp(line, config, len) == 0 && line[len] == ':') {
                int count;
                ck_assert_int_eq(sscanf(line + len, ": %d tensors, %lld parameters", &count, params), 2);
                n = 0;
            }
            continue;
        }
        if (n < 0)
            continue;
        ck_assert_int_lt(n, max);
        ref_tensor *t = &out[n++];
        char dims[128];
        ck_assert_int_eq(sscanf(line, " %95s [%127[^]]", t->name, dims), 2);
        t->ndim = 0;
        for (char *p = strtok(dims, ", "); p; p = strtok(NULL, ", "))
            t->dims[t->ndim++] = atoll(p);
    }
    fclose(f);
    ck_assert_msg(n > 0, "no reference for %s in %s", config, reference_path);
    return n;
}

START_TEST(unet_tensors_match_the_model_zoo)
{
    const mz_config *c = &configs[_i];
    char err[512] = "";
    jobspec *j = parse_config(c, NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s: %s", c->name, err);
    const model *m = j->model;
    ref_tensor ref[160];
    long long params;
    int n = read_reference(c->name, ref, 160, &params);
    ck_assert_msg(m->ntensors == n, "%s: %d tensors, the Model Zoo's U-Net has %d", c->name,
                  m->ntensors, n);
    /* by name: a checkpoint is a map of names (the state dict lists the
     * decoder's blocks before its transposed convolutions; the appliance
     * lists tensors in the order they compute) */
    for (int i = 0; i < n; i++) {
        const model_tensor *t = NULL;
        for (int k = 0; k < m->ntensors && !t; k++)
            if (strcmp(m->tensors[k].name, ref[i].name) == 0)
                t = &m->tensors[k];
        ck_assert_msg(t != NULL, "%s: no tensor %s", c->name, ref[i].name);
        ck_assert_msg(t->ndim == ref[i].ndim, "%s: %s has %d dims, expected %d", c->name,
                      t->name, t->ndim, ref[i].ndim);
        for (int d = 0; d < t->ndim; d++)
            ck_assert_msg(t->dims[d] == ref[i].dims[d], "%s: %s dim %d is %lld, expected %lld",
                          c->name, t->name, d, (long long)t->dims[d], ref[i].dims[d]);
    }
    ck_assert_msg((long long)m->total_params == params, "%s: %llu parameters, expected %lld",
                  c->name, (unsigned long long)m->total_params, params);
    ck_assert_int_eq(m->nlayers, c->layers);
    /* the input, the loss, and the output's channels */
    ck_assert_int_eq(m->input.ndim, 3);
    const model_layer *last = &m->layers[m->nlayers - 1];
    ck_assert_str_eq(last->name, "final_conv.conv");
    ck_assert_int_eq(last->out.d[0], c->classes == 2 ? 1 : c->classes);
    ck_assert_int_eq(last->out.d[1], m->input.d[1]);
    ck_assert_int_eq(m->loss, c->classes == 2 ? LOSS_BCE_WITH_LOGITS
                                              : LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY);
    ck_assert(m->mixed_precision);
    ck_assert(!m->include_background); /* ignore_background_class defaults to true */
    ck_assert_int_eq(j->train.num_classes, c->classes);
    jobspec_free(j);
}
END_TEST

/* The order of the layers: the encoder's first block, its pool, ..., the
 * first decoder level's transposed convolution and its concatenation of
 * (upsampled, skip). */
START_TEST(unet_layer_order)
{
    char err[512] = "";
    jobspec *j = parse_config(&configs[3], NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    const model *m = j->model;
    const char *expect[] = {
        "encoder.unet_blocks.0.layers.0.conv", "encoder.unet_blocks.0.layers.0.norm_layer",
        "encoder.unet_blocks.0.layers.0.act", "encoder.unet_blocks.0.layers.1.conv",
        "encoder.unet_blocks.0.layers.1.norm_layer", "encoder.unet_blocks.0.layers.1.act",
        "encoder.pooling_layers.0",
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++)
        ck_assert_str_eq(m->layers[i].name, expect[i]);
    int cat = model_find_layer(m, "decoder.skip_concat.0");
    ck_assert_int_ge(cat, 0);
    ck_assert_int_eq(m->layers[cat].ninputs, 2);
    ck_assert_str_eq(m->layers[m->layers[cat].inputs[0]].name, "decoder.transpose_layers.0");
    ck_assert_str_eq(m->layers[m->layers[cat].inputs[1]].name, "encoder.unet_blocks.2.layers.1.act");
    ck_assert_int_eq(m->layers[cat].out.d[0], 128 + 128);
    ck_assert_int_eq(m->layers[cat].out.d[1], 7168 / 4);
    int gn = model_find_layer(m, "bottleneck.layers.1.norm_layer");
    ck_assert_int_eq(m->layers[gn].type, LAYER_GROUP_NORM);
    ck_assert_int_eq(m->layers[gn].groups, 16);
    /* the initializers: glorot (gain 1) for the convolutions' weights,
     * zeros for every bias, the norms' weights the default (ones) */
    int conv = model_find_layer(m, "decoder.unet_blocks.1.layers.0.conv");
    ck_assert_str_eq(m->layers[conv].weight_init.name, "xavier_uniform");
    ck_assert_double_eq(m->layers[conv].weight_init.gain, 1.0);
    int up = model_find_layer(m, "decoder.transpose_layers.1");
    ck_assert_str_eq(m->layers[up].weight_init.name, "xavier_uniform");
    ck_assert_str_eq(m->layers[gn].weight_init.name, "");
    ck_assert_str_eq(m->layers[gn].bias_init.name, "zeros");
    ck_assert_str_eq(m->layers[m->nlayers - 1].bias_init.name, "zeros");
    jobspec_free(j);
}
END_TEST

/* strided convolutions, the first of each block downscaling, one block
 * that does not, the bottleneck that does; group_instance norms; residual
 * blocks; an initial convolution; dropout. */
/* A key written twice, and a misspelt one, where they were written. */
START_TEST(unet_key_mistakes)
{
    char err[512] = "";
    jobspec *j = parse_config(&configs[1], "skip_connect = true\n", err, sizeof(err));
    ck_assert_msg(j == NULL, "a key written twice was accepted");
    ck_assert_str_eq(err, "params.toml:23:1: duplicate key \"skip_connect\" (first defined at "
                          "10:1)");
    j = parse_config(&configs[1], "downscale_method_ = 1\n", err, sizeof(err));
    ck_assert(j == NULL);
    ck_assert_str_eq(err, "params.toml:23:1: unknown key \"downscale_method_\" for the U-Net "
                          "[model] (did you mean \"downscale_method\"?)");
}
END_TEST

START_TEST(unet_strided)
{
    char err[512] = "";
    char text[4096];
    snprintf(text, sizeof(text),
             "[train_input]\n"
             "data_processor = \"synthetic_segmentation\"\n"
             "image_shape = [64, 64, 1]\n"
             "batch_size = 1\n"
             "num_classes = 5\n"
             "[model]\n"
             "nonlinearity = \"relu\"\n"
             "norm_layer = \"group_instance\"\n"
             "enable_bias = false\n"
             "downscale_method = \"strided_conv\"\n"
             "encoder_filters = [8, 16, 32, 64]\n"
             "decoder_filters = [32, 16, 8]\n"
             "downscale_first_conv = true\n"
             "downscale_encoder_blocks = [false, true, true]\n"
             "downscale_bottleneck = true\n"
             "loss = \"ssce\"\n"
             "eval_ignore_classes = [0]\n"
             "ignore_background_class = false\n");
    jobspec *j = jobspec_parse(text, strlen(text), "params.toml", NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    const model *m = j->model;
    /* no pools; block 0 keeps the size, blocks 1 and 2 and the bottleneck halve it */
    ck_assert_int_lt(model_find_layer(m, "encoder.pooling_layers.0"), 0);
    int l = model_find_layer(m, "encoder.unet_blocks.0.layers.0.conv");
    ck_assert_int_eq(m->layers[l].stride[0], 1);
    l = model_find_layer(m, "encoder.unet_blocks.1.layers.0.conv");
    ck_assert_int_eq(m->layers[l].stride[0], 2);
    ck_assert_int_eq(m->layers[l].padding[0], 1);
    ck_assert_int_eq(m->layers[l].out.d[1], 32);
    l = model_find_layer(m, "bottleneck.layers.0.conv");
    ck_assert_int_eq(m->layers[l].out.d[1], 8);
    l = model_find_layer(m, "encoder.unet_blocks.1.layers.0.norm_layer.instancenorm");
    ck_assert_int_ge(l, 0);
    ck_assert_int_eq(m->layers[l].groups, 16);
    /* the skip of a strided block: its last convolution's input */
    int cat = model_find_layer(m, "decoder.skip_concat.0");
    ck_assert_str_eq(m->layers[m->layers[cat].inputs[1]].name,
                     "encoder.unet_blocks.2.layers.0.act");
    ck_assert_int_eq(m->layers[cat].out.d[1], 16);
    ck_assert_int_eq(m->layers[m->nlayers - 1].out.d[0], 5);
    ck_assert_int_eq(m->layers[m->nlayers - 1].out.d[1], 64);
    ck_assert_int_eq(m->loss, LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY);
    ck_assert(m->include_background);
    ck_assert_uint_eq(m->eval_ignore, 1);
    jobspec_free(j);
}
END_TEST

/* use_conv3d: the same U-Net on volumes (the Model Zoo's SKM-TEA layers,
 * smaller), its image_shape [D, H, W] and input_channels. */
START_TEST(unet_volumes)
{
    char err[512] = "";
    const char *text = "[train_input]\n"
                       "data_processor = \"synthetic_volume\"\n"
                       "image_shape = [32, 64, 64]\n"
                       "batch_size = 1\n"
                       "num_classes = 5\n"
                       "[model]\n"
                       "nonlinearity = \"relu\"\n"
                       "norm_layer = \"group_instance\"\n"
                       "use_conv3d = true\n"
                       "enable_bias = false\n"
                       "downscale_method = \"strided_conv\"\n"
                       "input_channels = 2\n"
                       "encoder_filters = [8, 16, 32, 64]\n"
                       "decoder_filters = [32, 16, 8]\n"
                       "downscale_first_conv = true\n"
                       "downscale_encoder_blocks = [false, true, true]\n"
                       "downscale_bottleneck = true\n"
                       "loss = \"ssce_dice\"\n";
    jobspec *j = jobspec_parse(text, strlen(text), "params.toml", NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    const model *m = j->model;
    ck_assert_int_eq(m->input.ndim, 4);
    ck_assert_int_eq(m->input.d[0], 2);
    ck_assert_int_eq(m->input.d[1], 32);
    int l = model_find_layer(m, "encoder.unet_blocks.1.layers.0.conv");
    ck_assert_int_eq(m->layers[l].type, LAYER_CONV3D);
    ck_assert_int_eq(m->layers[l].out.d[1], 16); /* D halved */
    l = model_find_layer(m, "decoder.transpose_layers.0");
    ck_assert_int_eq(m->layers[l].type, LAYER_CONV_TRANSPOSE3D);
    const model_tensor *w = &m->tensors[m->layers[0].first_tensor];
    ck_assert_str_eq(w->name, "encoder.unet_blocks.0.layers.0.conv.weight");
    ck_assert_int_eq(w->ndim, 5);
    ck_assert_int_eq(w->dims[1], 2);
    const model_layer *last = &m->layers[m->nlayers - 1];
    ck_assert_int_eq(last->out.d[0], 5);
    ck_assert_int_eq(last->out.d[3], 64);
    ck_assert_int_eq(m->loss, LOSS_SSCE_DICE);
    jobspec_free(j);
    /* a side the downscales do not divide */
    const char *bad = "[train_input]\nimage_shape = [34, 64, 64]\nbatch_size = 1\nnum_classes = 5\n"
                      "[model]\nnonlinearity = \"relu\"\nuse_conv3d = true\n"
                      "encoder_filters = [8, 16, 32]\ndecoder_filters = [16, 8]\n";
    ck_assert_ptr_null(jobspec_parse(bad, strlen(bad), "params.toml", NULL, err, sizeof(err)));
    ck_assert_str_eq(err, "params.toml:2:15: the volume's sides (34 x 64 x 64) must be multiples "
                          "of 4: the U-Net halves them 2 times and doubles them back");
}
END_TEST

static void refused(const char *model_keys, const char *expect)
{
    char text[4096], err[512] = "";
    snprintf(text, sizeof(text),
             "[train_input]\n"
             "image_shape = [64, 96, 3]\n"
             "batch_size = 1\n"
             "num_classes = 2\n"
             "[model]\n"
             "%s",
             model_keys);
    jobspec *j = jobspec_parse(text, strlen(text), "params.toml", NULL, err, sizeof(err));
    ck_assert_msg(j == NULL, "accepted: %s", model_keys);
    ck_assert_str_eq(err, expect);
}

#define UNET_KEYS "nonlinearity = \"ReLU\"\nencoder_filters = [8, 16, 32]\ndecoder_filters = [16, 8]\n"

START_TEST(unet_refusals)
{
    refused("nonlinearity = \"swish\"\nencoder_filters = [8, 16]\ndecoder_filters = [8]\n",
            "params.toml:6:16: model.nonlinearity: \"swish\" is not one of ReLU, leaky_relu, "
            "GELU, sigmoid, tanh, linear");
    refused("nonlinearity = \"ReLU\"\nencoder_filters = [8, 16]\ndecoder_filters = [8, 4]\n",
            "params.toml:8:19: model.decoder_filters: 2 levels, but encoder_filters has 2: the "
            "encoder needs one more (the bottleneck)");
    refused(UNET_KEYS "norm_layer = \"layernorm\"\n",
            "params.toml:9:14: model.norm_layer: \"layernorm\" is not one the appliance builds: "
            "batchnorm2d, group (with norm_kwargs.num_groups), group_instance, instance2d, or none");
    refused(UNET_KEYS "norm_layer = \"group\"\n",
            "params.toml:9:14: model.norm_layer \"group\" needs norm_kwargs.num_groups");
    refused(UNET_KEYS "convs_per_block = [\"3x3_dw_conv\"]\n",
            "params.toml:9:20: model.convs_per_block: \"3x3_dw_conv\" (depthwise convolutions) "
            "is not built yet");
    refused(UNET_KEYS "loss = \"ssce_dice\"\nnorm_layer = \"none\"\nlos = 1\n",
            "params.toml:11:1: unknown key \"los\" for the U-Net [model] (did you mean "
            "\"loss\"?)");
    refused(UNET_KEYS "residual_blocks = true\ndownscale_method = \"strided_conv\"\n",
            "params.toml:9:19: model.residual_blocks: needs downscale_method \"max_pool\"");
    refused("nonlinearity = \"ReLU\"\nencoder_filters = [8, 16, 32, 64, 128, 256, 512]\n"
            "decoder_filters = [256, 128, 64, 32, 16, 8]\n",
            "params.toml:2:15: the image's sides (64 x 96) must be multiples of 64: the U-Net "
            "halves them 6 times and doubles them back");
    refused(UNET_KEYS "mixed_precision = true\nuse_bfloat16 = false\n",
            "params.toml:10:16: use_bfloat16 = false with mixed precision is float16, which is "
            "not supported: mixed precision here is bfloat16 (use_bfloat16 = true)");
    refused(UNET_KEYS "loss = \"ssce\"\ninput_channels = 1\n",
            "params.toml:10:1: model.input_channels 1 differs from the 3 channels of "
            "train_input.image_shape");
}
END_TEST

int main(int argc, char **argv)
{
    reference_path = argc > 1 ? argv[1] : "modelzoo_unet_tensors.txt";
    Suite *s = suite_create("modelzoo");
    TCase *tc = tcase_create("unet");
    tcase_add_loop_test(tc, unet_tensors_match_the_model_zoo, 0,
                        (int)(sizeof(configs) / sizeof(configs[0])));
    tcase_add_test(tc, unet_layer_order);
    tcase_add_test(tc, unet_key_mistakes);
    tcase_add_test(tc, unet_strided);
    tcase_add_test(tc, unet_refusals);
    tcase_add_test(tc, unet_volumes);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
