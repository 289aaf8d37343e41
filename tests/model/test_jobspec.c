/* Job files: values and defaults, and one clear message per mistake. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "jobspec.h"

static const char *model_part = "[model]\n"
                                "input_shape = [6]\n"
                                "loss = \"softmax_cross_entropy\"\n"
                                "[[model.layers]]\n"
                                "name = \"fc\"\n"
                                "type = \"dense\"\n"
                                "units = 3\n";

static jobspec *parse(const char *head, char *err, size_t errlen)
{
    char text[4096];
    snprintf(text, sizeof(text), "%s%s", head, model_part);
    return jobspec_parse(text, strlen(text), "job.toml", "/home/me", err, errlen);
}

START_TEST(values_and_defaults)
{
    char err[512] = "";
    jobspec *j = parse("[runconfig]\nmax_steps = 5\nnum_csx = 2\nmodel_dir = \"out\"\n"
                       "[train_input]\nbatch_size = 10\nnum_classes = 3\n"
                       "[optimizer]\nlearning_rate = 1\nmomentum = 0.5\n",
                       err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_int_eq(j->max_steps, 5);
    ck_assert_int_eq(j->num_csx, 2);
    ck_assert_int_eq(j->log_steps, 10);             /* default */
    ck_assert_int_eq(j->num_wgt_servers, 1);        /* default */
    ck_assert_str_eq(j->mode, "auto");              /* default */
    ck_assert_str_eq(j->model_dir, "/home/me/out"); /* relative to the submit directory */
    ck_assert_int_eq(j->train.batch_size, 10);
    ck_assert(j->train.shuffle);
    ck_assert_double_eq(j->learning_rate, 1.0);     /* an integer where a float goes */
    ck_assert_double_eq(j->momentum, 0.5);
    ck_assert_int_eq(j->model->nlayers, 1);
    jobspec_free(j);
}
END_TEST

static void refused(const char *head, const char *expect)
{
    char err[512] = "";
    jobspec *j = parse(head, err, sizeof(err));
    ck_assert_msg(j == NULL, "accepted: %s", head);
    ck_assert_str_eq(err, expect);
}

START_TEST(mistakes)
{
    refused("[runconfig]\nmax_step = 5\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:1: unknown key \"max_step\" in [runconfig] (did you mean \"max_steps\"?)");
    refused("[runconfig]\nnum_cxs = 5\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:1: unknown key \"num_cxs\" in [runconfig] (did you mean \"num_csx\"?)");
    refused("[runconfig]\nmode = \"pipelind\"\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:8: runconfig.mode: \"pipelind\" is not one of auto|pipelined|weight_streaming "
            "(did you mean \"pipelined\"?)");
    refused("[runconfig]\nmax_steps = \"5\"\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:13: runconfig.max_steps: expected an integer, found string");
    refused("[runconfig]\nnum_csx = 0\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:11: runconfig.num_csx: 0 is out of range [1, 1024]");
    refused("[runconfig]\nmode = \"fast\"\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:8: runconfig.mode: \"fast\" is not one of auto|pipelined|weight_streaming");
    refused("[train_input]\nnum_classes = 3\n[runconfig]\nnum_csx = 4\n[train_input.x]\n",
            "job.toml:5:14: unknown key \"x\" in [train_input]");
    refused("[train_inputs]\nnum_classes = 3\n",
            "job.toml:1:2: unknown section \"train_inputs\" (expected runconfig, train_input, "
            "eval_input, model or optimizer)");
    refused("[runconfig]\nnum_csx = 8\n[train_input]\nbatch_size = 4\nnum_classes = 3\n",
            "job.toml:4:14: train_input.batch_size 4 is smaller than runconfig.num_csx 8: every "
            "replica needs at least one sample");
    refused("[train_input]\nnum_classes = 10\n",
            "job.toml:6:1: layer \"fc\": softmax_cross_entropy needs 10 logits "
            "(train_input.num_classes), the layer gives 3");
    refused("[runconfig]\nmax_steps = 1 x\n", "job.toml:2:15: expected end of line after value, found 'x'");
}
END_TEST

START_TEST(unbuilt_keys_refused)
{
    refused("[runconfig]\neval_frequency = 10\n[train_input]\nnum_classes = 3\n",
            "job.toml:2:1: runconfig.eval_frequency: evaluation needs an [eval_input] section");
    refused("[runconfig]\nnum_wgt_servers = 2\n[train_input]\nnum_classes = 3\n[optimizer]\n"
            "max_gradient_norm = 1.0\n",
            "job.toml:6:1: optimizer.max_gradient_norm: gradient-norm clipping across several "
            "memoryx shards (num_wgt_servers > 1) is not available in this version yet");
    refused("[train_input]\nnum_classes = 3\n[optimizer]\nnesterov = true\n",
            "job.toml:4:12: optimizer.nesterov: needs momentum > 0 and dampening = 0");
    char err[512] = "";
    jobspec *j = parse("[runconfig]\neval_frequency = 0\n[train_input]\nnum_classes = 3\n", err,
                       sizeof(err));
    ck_assert_msg(j != NULL, "%s", err); /* 0 asks for nothing */
    jobspec_free(j);
}
END_TEST

START_TEST(input_keys)
{
    char err[512] = "";
    jobspec *j = parse("[train_input]\nnum_classes = 3\ndata_processor = \"mnist\"\n"
                       "data_dir = \"data/mnist\"\nrandom_flip_horizontal = true\n",
                       err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_str_eq(j->train.data_processor, "mnist");
    ck_assert_str_eq(j->train.data_dir, "/home/me/data/mnist");
    ck_assert(j->train.random_flip_horizontal);
    ck_assert(!j->train.random_flip_vertical); /* default */
    ck_assert(j->model->input_unorm8 && j->model->labels_u8); /* MNIST travels as its bytes */
    jobspec_free(j);
    /* Batches travel in what both inputs can take: Gaussian eval features
     * are float32, so the job's inputs are. */
    j = parse("[train_input]\nnum_classes = 3\ndata_processor = \"mnist\"\n"
              "data_dir = \"data/mnist\"\n[eval_input]\nnum_classes = 3\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(!j->model->input_unorm8 && j->model->labels_u8);
    jobspec_free(j);
    refused("[train_input]\nnum_classes = 3\ndata_processor = \"png_segmentation\"\n",
            "job.toml:3:18: train_input.data_dir: required by data_processor "
            "\"png_segmentation\"");
    refused("[train_input]\nnum_classes = 3\ndata_processor = \"imagenet\"\n",
            "job.toml:3:18: train_input.data_processor: \"imagenet\" is not one of "
            "synthetic_classification|synthetic_segmentation|mnist|png_segmentation|"
            "InriaAerialDataProcessor|SeverstalBinaryClassDataProcessor|CityscapesDataProcessor");
    refused("[train_input]\nnum_classes = 3\ndata_processor = \"InriaAerialDataprocessor\"\n",
            "job.toml:3:18: train_input.data_processor: \"InriaAerialDataprocessor\" is not one of "
            "synthetic_classification|synthetic_segmentation|mnist|png_segmentation|"
            "InriaAerialDataProcessor|SeverstalBinaryClassDataProcessor|CityscapesDataProcessor "
            "(did you mean \"InriaAerialDataProcessor\"?)");
    refused("[train_input]\nnum_classes = 3\nrandom_flip_vertical = 1\n",
            "job.toml:3:24: train_input.random_flip_vertical: expected true or false, found "
            "integer");
}
END_TEST

/* Every example job file compiles, with the model the docs describe. */
START_TEST(examples_compile)
{
    static const struct {
        const char *file;
        uint64_t params;
    } examples[] = {
        {"quickstart.toml", 32 * 4 + 4},
        {"fc_mnist.toml", 784 * 256 + 256 + 256 * 256 + 256 + 256 * 10 + 10},
        {"mnist.toml", 784 * 128 + 128 + 128 * 10 + 10},
        {"unet.toml", 486553},
        {"resnet_small.toml", 78042},
    };
    for (size_t i = 0; i < sizeof(examples) / sizeof(examples[0]); i++) {
        char path[512], err[512];
        snprintf(path, sizeof(path), "%s/%s", EXAMPLES_DIR, examples[i].file);
        FILE *f = fopen(path, "r");
        ck_assert_msg(f != NULL, "%s", path);
        static char text[1 << 16];
        size_t n = fread(text, 1, sizeof(text) - 1, f);
        fclose(f);
        text[n] = 0;
        jobspec *j = jobspec_parse(text, n, path, "/src", err, sizeof(err));
        ck_assert_msg(j != NULL, "%s", err);
        ck_assert_msg(j->model->total_params == examples[i].params, "%s: %llu parameters", path,
                      (unsigned long long)j->model->total_params);
        jobspec_free(j);
    }
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("jobspec");
    TCase *t = tcase_create("parse");
    tcase_add_test(t, values_and_defaults);
    tcase_add_test(t, mistakes);
    tcase_add_test(t, unbuilt_keys_refused);
    tcase_add_test(t, examples_compile);
    tcase_add_test(t, input_keys);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
