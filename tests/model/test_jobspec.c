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
            "eval_input, model, optimizer or sparsity)");
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
            "InriaAerialDataProcessor|SeverstalBinaryClassDataProcessor|CityscapesDataProcessor|"
            "synthetic_volume|SkmDataProcessor");
    refused("[train_input]\nnum_classes = 3\ndata_processor = \"InriaAerialDataprocessor\"\n",
            "job.toml:3:18: train_input.data_processor: \"InriaAerialDataprocessor\" is not one of "
            "synthetic_classification|synthetic_segmentation|mnist|png_segmentation|"
            "InriaAerialDataProcessor|SeverstalBinaryClassDataProcessor|CityscapesDataProcessor|"
            "synthetic_volume|SkmDataProcessor (did you mean \"InriaAerialDataProcessor\"?)");
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

/* An [optimizer] section (line 3 of the head) parsed, or NULL with err. */
static jobspec *optimizer(const char *keys, char *err, size_t errlen)
{
    char head[2048];
    snprintf(head, sizeof(head), "[train_input]\nnum_classes = 3\n[optimizer]\n%s", keys);
    return parse(head, err, errlen);
}

static void optimizer_refused(const char *keys, const char *expect)
{
    char err[1024] = "";
    jobspec *j = optimizer(keys, err, sizeof(err));
    ck_assert_msg(j == NULL, "accepted: %s", keys);
    ck_assert_str_eq(err, expect);
}

/* The Model Zoo's [optimizer]: learning_rate as a schedule or a list of
 * them, its spellings of the other keys. */
START_TEST(optimizer_model_zoo)
{
    char err[1024] = "";
    /* one schedule, inline */
    jobspec *j = optimizer("learning_rate = {scheduler = \"Linear\", initial_learning_rate = 0.0, "
                           "end_learning_rate = 0.00025, total_iters = 4000}\n",
                           err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_uint_eq(j->n_lr_segments, 1);
    ck_assert_int_eq(j->lr_segments[0].kind, OPTIM_SCHED_POLYNOMIAL);
    ck_assert_double_eq(j->lr_segments[0].power, 1.0);
    ck_assert_int_eq(j->lr_segments[0].total_iters, 4000);
    ck_assert_double_eq(j->lr_segments[0].end, 0.00025);
    jobspec_free(j);
    /* the U-Net's (Inria aerial) list of two, and the Model Zoo's spellings */
    j = optimizer("optimizer_type = \"AdamW\"\nweight_decay_rate = 0.01\ncorrect_bias = false\n"
                  "loss_scaling_factor = \"dynamic\"\nmax_gradient_norm = 1.0\n"
                  "[[optimizer.learning_rate]]\nscheduler = \"Linear\"\n"
                  "initial_learning_rate = 0.0\nend_learning_rate = 0.00025\ntotal_iters = 4000\n"
                  "[[optimizer.learning_rate]]\nscheduler = \"Linear\"\n"
                  "initial_learning_rate = 0.00025\nend_learning_rate = 0.0\ntotal_iters = 10000\n",
                  err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_str_eq(j->optimizer_type, "adamw");
    ck_assert_double_eq(j->weight_decay, 0.01);
    ck_assert(!j->correct_bias);
    ck_assert_double_eq(j->loss_scaling_factor, 0); /* dynamic */
    ck_assert_uint_eq(j->n_lr_segments, 2);
    ck_assert_double_eq(j->lr_segments[1].initial, 0.00025);
    ck_assert_int_eq(j->lr_segments[1].total_iters, 10000);
    optim_config c;
    optim_config_defaults(&c, OPTIM_ADAMW);
    c.nsegments = j->n_lr_segments;
    memcpy(c.segments, j->lr_segments, sizeof(c.segments));
    ck_assert_float_eq(optim_lr_at(&c, 0), 0.0f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 4000), 0.00025f, 1e-12f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 9000), 0.000125f, 1e-11f);
    jobspec_free(j);
    /* the U-Net's (Cityscapes) PiecewiseConstant: its initial_learning_rate
     * is not used, as in the Model Zoo */
    j = optimizer("optimizer_type = \"Adam\"\nlearning_rate = {initial_learning_rate = 5.0e-4, "
                  "scheduler = \"PiecewiseConstant\", milestones = [10000], "
                  "learning_rates = [5.0e-4, 1.0e-5]}\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_str_eq(j->optimizer_type, "adam");
    ck_assert_uint_eq(j->n_lr_segments, 2);
    ck_assert_int_eq(j->lr_segments[0].kind, OPTIM_SCHED_CONSTANT);
    ck_assert_int_eq(j->lr_segments[0].total_iters, 10000);
    ck_assert_double_eq(j->lr_segments[0].initial, 5.0e-4);
    ck_assert_double_eq(j->lr_segments[1].initial, 1.0e-5);
    jobspec_free(j);
    /* the older spelling (boundaries, values); MultiStep as constants */
    j = optimizer("learning_rate = {scheduler = \"PiecewiseConstantLR\", boundaries = [3, 7], "
                  "values = [1, 0.5, 0.25]}\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_uint_eq(j->n_lr_segments, 3);
    ck_assert_int_eq(j->lr_segments[1].total_iters, 4);
    jobspec_free(j);
    j = optimizer("learning_rate = {scheduler = \"multisteplr\", initial_learning_rate = 1, "
                  "gamma = 0.1, milestones = [2, 5]}\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_uint_eq(j->n_lr_segments, 3);
    ck_assert_int_eq(j->lr_segments[0].total_iters, 2);
    ck_assert_int_eq(j->lr_segments[1].total_iters, 3);
    ck_assert_double_eq_tol(j->lr_segments[2].initial, 0.01, 1e-15);
    jobspec_free(j);
    /* decay_steps for total_iters; a list ending in a scheduler without one */
    j = optimizer("learning_rate = [{scheduler = \"exponential\", initial_learning_rate = 0.1, "
                  "decay_steps = 10, decay_rate = 0.5, staircase = true}, "
                  "{scheduler = \"InverseSquareRootDecay\", warmup_steps = 8307, scale = 1.0}]\n",
                  err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_uint_eq(j->n_lr_segments, 2);
    ck_assert_int_eq(j->lr_segments[0].total_iters, 10);
    ck_assert(j->lr_segments[0].staircase);
    ck_assert_int_eq(j->lr_segments[1].period, 8307);
    ck_assert_double_eq(j->lr_segments[1].initial, 1.0); /* its default */
    jobspec_free(j);
    /* a number as a string (YAML's 1e-5), the type in capitals */
    j = optimizer("learning_rate = \"1e-5\"\noptimizer_type = \"SGD\"\nloss_scaling_factor = 128\n",
                  err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_double_eq(j->learning_rate, 1e-5);
    ck_assert_str_eq(j->optimizer_type, "sgd");
    ck_assert_uint_eq(j->n_lr_segments, 0);
    ck_assert(j->correct_bias);
    jobspec_free(j);
    /* the appliance's own keys as before */
    j = optimizer("learning_rate = 0.1\nlr_schedule = \"cosine\"\nwarmup_steps = 10\n", err,
                  sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_uint_eq(j->n_lr_segments, 0);
    ck_assert_str_eq(j->lr_schedule, "cosine");
    jobspec_free(j);
}
END_TEST

START_TEST(optimizer_mistakes)
{
    optimizer_refused("learning_rate = {scheduler = \"Cyclic\", base_lr = 0.1}\n",
                      "job.toml:4:30: optimizer.learning_rate.scheduler: unknown scheduler "
                      "\"Cyclic\" (known: Constant, Linear, Polynomial, Exponential, "
                      "InverseExponentialTimeDecay, InverseSquareRootDecay, CosineDecay, "
                      "PiecewiseConstant, Step, MultiStep, CosineAnnealing)");
    optimizer_refused("learning_rate = {initial_learning_rate = 0.1}\n",
                      "job.toml:4:17: optimizer.learning_rate: missing \"scheduler\" (one of "
                      "Constant, Linear, Polynomial, Exponential, InverseExponentialTimeDecay, "
                      "InverseSquareRootDecay, CosineDecay, PiecewiseConstant, Step, MultiStep, "
                      "CosineAnnealing)");
    optimizer_refused("learning_rate = {scheduler = \"Linear\", initial_learning_rate = 0.1, "
                      "end_learning_rate = 0, total_iters = 10, power = 2}\n",
                      "job.toml:4:110: optimizer.learning_rate.power: not a parameter of Linear "
                      "(it takes initial_learning_rate, end_learning_rate, total_iters, cycle)");
    optimizer_refused("learning_rate = {scheduler = \"Linear\", initial_learning_rate = 0.1, "
                      "end_learning_rate = 0}\n",
                      "job.toml:4:17: optimizer.learning_rate: Linear needs total_iters");
    optimizer_refused("learning_rate = {scheduler = \"Linear\", initial_learning_rate = 0.1, "
                      "end_learning_rate = 0, total_iters = 10, steps = 10}\n",
                      "job.toml:4:110: optimizer.learning_rate.steps: the same parameter as "
                      "total_iters (line 4); give one of them");
    optimizer_refused("learning_rate = [{scheduler = \"Constant\", learning_rate = 0.1}, "
                      "{scheduler = \"Constant\", learning_rate = 0.01}]\n",
                      "job.toml:4:18: optimizer.learning_rate[0]: needs total_iters, the steps "
                      "it runs before the next schedule of the list starts (every one but the "
                      "last)");
    optimizer_refused("learning_rate = [{scheduler = \"Step\", initial_learning_rate = 1, "
                      "step_size = 3, gamma = 0.5}, {scheduler = \"Constant\", learning_rate = 0.1}]\n",
                      "job.toml:4:31: optimizer.learning_rate[0]: Step runs to the end of "
                      "training: only the last schedule of a list can be one");
    optimizer_refused("learning_rate = {scheduler = \"PiecewiseConstant\", milestones = [10000], "
                      "learning_rates = [5.0e-4]}\n",
                      "job.toml:4:90: optimizer.learning_rate.learning_rates: 1 rates for 1 "
                      "milestones: give one more rate than milestones (the first before the first "
                      "milestone, the last from the last one on)");
    optimizer_refused("learning_rate = {scheduler = \"MultiStep\", initial_learning_rate = 1, "
                      "gamma = 0.1, milestones = [5, 2]}\n",
                      "job.toml:4:100: optimizer.learning_rate.milestones[1]: 2 is not after the "
                      "milestone before it (5): milestones must increase");
    optimizer_refused("learning_rate = {scheduler = \"Linear\", initial_learning_rate = 0.1, "
                      "end_learning_rate = 0, total_iters = 0}\n",
                      "job.toml:4:106: optimizer.learning_rate.total_iters: 0 is out of range "
                      "[1, 1000000000000]");
    optimizer_refused("learning_rate = []\n",
                      "job.toml:4:17: optimizer.learning_rate: an empty list of schedules");
    optimizer_refused("learning_rate = [1.0]\n",
                      "job.toml:4:18: optimizer.learning_rate[0]: expected a schedule (a table "
                      "with a \"scheduler\"), found float");
    optimizer_refused("learning_rate = true\n",
                      "job.toml:4:17: optimizer.learning_rate: expected a number, a schedule or a "
                      "list of schedules, found boolean");
    optimizer_refused("warmup_steps = 100\nlearning_rate = {scheduler = \"Linear\", "
                      "initial_learning_rate = 0.1, end_learning_rate = 0, total_iters = 10}\n",
                      "job.toml:4:1: optimizer.warmup_steps: goes with a learning_rate number, not "
                      "with the schedule of optimizer.learning_rate (line 5): give it as a "
                      "schedule of the list (a warm-up: a Linear from 0)");
    optimizer_refused("learning_rate = {scheduler = \"Linear\", initial_learning_rate = 0.1, "
                      "end_learning_rate = 0, total_iters = 10, main_scheduler = \"chained\"}\n",
                      "job.toml:4:127: optimizer.learning_rate.main_scheduler: \"chained\" (the "
                      "Model Zoo's ChainedScheduler, which multiplies the schedules) is not "
                      "available in this version; \"sequential\" is");
    optimizer_refused("optimizer_type = \"Lamb\"\n",
                      "job.toml:4:18: optimizer.optimizer_type: \"Lamb\" is not one of SGD, Adam, "
                      "AdamW (any case)");
    optimizer_refused("weight_decay = 0.1\nweight_decay_rate = 0.01\n",
                      "job.toml:5:1: optimizer.weight_decay_rate: the same as "
                      "optimizer.weight_decay (line 4); give one of them");
    optimizer_refused("correct_bias = false\n",
                      "job.toml:4:1: optimizer.correct_bias: only Adam and AdamW correct a bias; "
                      "SGD has none to correct");
    optimizer_refused("loss_scaling_factor = 0.5\n",
                      "job.toml:4:23: optimizer.loss_scaling_factor: expected \"dynamic\" or a "
                      "number >= 1");
    /* seventeen pieces */
    optimizer_refused("learning_rate = {scheduler = \"PiecewiseConstant\", milestones = [1, 2, 3, "
                      "4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], learning_rates = [1, 1, 1, 1, "
                      "1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1]}\n",
                      "job.toml:4:17: optimizer.learning_rate: more than 16 schedules (a "
                      "PiecewiseConstant or MultiStep counts one per piece)");
}
END_TEST


/* The syntax: by the name's extension, else by the text; a valid job in
 * one syntax is never read as the other. */
START_TEST(formats)
{
    const char *toml = "# a job\n\n[runconfig]\nmax_steps = 3\n";
    const char *toml_key = "  title = \"a: b\"\n[runconfig]\n";
    const char *yaml = "# a job\nruncon\"fig\": {max_steps: 3}\n";
    const char *yaml2 = "\n---\ntrain_input: &t\n    a = 1\n";
    ck_assert_int_eq(jobspec_format_of("job.toml", yaml, strlen(yaml)), JOBSPEC_FORMAT_TOML);
    ck_assert_int_eq(jobspec_format_of("params.yaml", toml, strlen(toml)), JOBSPEC_FORMAT_YAML);
    ck_assert_int_eq(jobspec_format_of("P.YML", toml, strlen(toml)), JOBSPEC_FORMAT_YAML);
    ck_assert_int_eq(jobspec_format_of("job", toml, strlen(toml)), JOBSPEC_FORMAT_TOML);
    ck_assert_int_eq(jobspec_format_of("job", toml_key, strlen(toml_key)), JOBSPEC_FORMAT_TOML);
    ck_assert_int_eq(jobspec_format_of("job.conf", yaml, strlen(yaml)), JOBSPEC_FORMAT_YAML);
    ck_assert_int_eq(jobspec_format_of("job.conf", yaml2, strlen(yaml2)), JOBSPEC_FORMAT_YAML);
    jobspec_format f;
    ck_assert_int_eq(jobspec_format_parse("YAML", &f), 0);
    ck_assert_int_eq(f, JOBSPEC_FORMAT_YAML);
    ck_assert_int_lt(jobspec_format_parse("json", &f), 0);
}
END_TEST

/* A job written in YAML is the job the same keys in TOML make. */
START_TEST(yaml_is_the_same_job)
{
    const char *yaml = "runconfig:\n"
                       "    max_steps: 5\n"
                       "    num_csx: 2\n"
                       "    model_dir: out\n"
                       "train_input: &t\n"
                       "    batch_size: 10\n"
                       "    num_classes: 3\n"
                       "    shuffle: No\n"
                       "eval_input:\n"
                       "    <<: *t\n"
                       "    batch_size: 4\n"
                       "optimizer: {optimizer_type: SGD, learning_rate: 1, momentum: 0.5}\n"
                       "model:\n"
                       "    input_shape: [6]\n"
                       "    loss: softmax_cross_entropy\n"
                       "    layers:\n"
                       "      - {name: fc, type: dense, units: 3}\n";
    char err[512] = "";
    jobspec *y = jobspec_parse(yaml, strlen(yaml), "params.yaml", "/home/me", err, sizeof(err));
    ck_assert_msg(y != NULL, "%s", err);
    jobspec *t = parse("[runconfig]\nmax_steps = 5\nnum_csx = 2\nmodel_dir = \"out\"\n"
                       "[train_input]\nbatch_size = 10\nnum_classes = 3\nshuffle = false\n"
                       "[eval_input]\nbatch_size = 4\nnum_classes = 3\nshuffle = false\n"
                       "[optimizer]\noptimizer_type = \"sgd\"\nlearning_rate = 1\nmomentum = 0.5\n",
                       err, sizeof(err));
    ck_assert_msg(t != NULL, "%s", err);
    ck_assert_int_eq(y->max_steps, t->max_steps);
    ck_assert_int_eq(y->num_csx, t->num_csx);
    ck_assert_str_eq(y->model_dir, t->model_dir);
    ck_assert_int_eq(y->train.batch_size, 10);
    ck_assert_int_eq(y->eval.batch_size, 4);
    ck_assert_int_eq(y->eval.num_classes, 3); /* merged from train_input */
    ck_assert(!y->train.shuffle && !y->eval.shuffle);
    ck_assert_str_eq(y->optimizer_type, t->optimizer_type);
    ck_assert_double_eq(y->learning_rate, t->learning_rate);
    ck_assert_double_eq(y->momentum, t->momentum);
    ck_assert_int_eq(y->model->total_params, t->model->total_params);
    ck_assert_str_eq(y->model->layers[0].name, "fc");
    jobspec_free(y);
    jobspec_free(t);
    /* a mistake in YAML is named where it is, with the nearest key */
    const char *bad = "runconfig:\n  max_step: 5\ntrain_input: {num_classes: 3}\n";
    ck_assert_ptr_null(jobspec_parse(bad, strlen(bad), "params.yaml", NULL, err, sizeof(err)));
    ck_assert_str_eq(err, "params.yaml:2:3: unknown key \"max_step\" in [runconfig] (did you mean "
                          "\"max_steps\"?)");
    /* a volume's model is planned and computed, whole */
    const char *vol = "[train_input]\nnum_classes = 2\n[model]\ninput_shape = [1, 8, 8, 8]\n"
                      "loss = \"bce\"\n[[model.layers]]\nname = \"c\"\ntype = \"conv3d\"\n"
                      "filters = 1\nkernel_size = 1\n";
    jobspec *vj = jobspec_parse(vol, strlen(vol), "job.toml", NULL, err, sizeof(err));
    ck_assert_msg(vj != NULL, "%s", err);
    ck_assert_int_eq(vj->model->input.ndim, 4);
    jobspec_free(vj);
    /* a volume splits into slabs of its planes, as an image into stripes */
    const char *vsp = "[runconfig]\nnum_csx = 2\nspatial_partitions = 2\n"
                      "[train_input]\nnum_classes = 2\nbatch_size = 2\n[model]\n"
                      "input_shape = [1, 8, 8, 8]\nloss = \"bce\"\n[[model.layers]]\nname = \"c\"\n"
                      "type = \"conv3d\"\nfilters = 1\nkernel_size = 1\n";
    vj = jobspec_parse(vsp, strlen(vsp), "job.toml", NULL, err, sizeof(err));
    ck_assert_msg(vj != NULL, "%s", err);
    ck_assert_int_eq(jobspec_parts(vj), 2);
    jobspec_free(vj);
    /* the same text as TOML, forced, is TOML's error */
    ck_assert_ptr_null(jobspec_parse_as(bad, strlen(bad), "params.yaml", JOBSPEC_FORMAT_TOML, NULL,
                                        err, sizeof(err)));
    ck_assert_msg(strncmp(err, "params.yaml:1:10: ", 18) == 0, "%s", err);
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
    tcase_add_test(t, optimizer_model_zoo);
    tcase_add_test(t, optimizer_mistakes);
    tcase_add_test(t, formats);
    tcase_add_test(t, yaml_is_the_same_job);
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
