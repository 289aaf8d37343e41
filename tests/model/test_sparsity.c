/* [sparsity]: each key read in TOML and in the Model Zoo's YAML, the
 * patterns resolved to each tensor's level, and one message with its
 * position per mistake. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "jobspec.h"

/* conv (with bias) -> batch norm -> relu -> flatten -> fc1 -> fc2 */
static const char *head = "[train_input]\nnum_classes = 3\n";
static const char *model_part = "[model]\n"
                                "input_shape = [1, 6, 6]\n"
                                "loss = \"softmax_cross_entropy\"\n"
                                "[[model.layers]]\nname = \"conv\"\ntype = \"conv2d\"\n"
                                "filters = 4\nkernel_size = 3\npadding = 1\n"
                                "[[model.layers]]\nname = \"bn\"\ntype = \"batch_norm\"\n"
                                "[[model.layers]]\nname = \"act\"\ntype = \"relu\"\n"
                                "[[model.layers]]\nname = \"flat\"\ntype = \"flatten\"\n"
                                "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 16\n"
                                "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 3\n";

static jobspec *parse(const char *section, char *err, size_t errlen)
{
    char text[8192];
    snprintf(text, sizeof(text), "%s%s%s", head, section, model_part);
    return jobspec_parse(text, strlen(text), "job.toml", "/home/me", err, errlen);
}

/* The level of the tensor called name. */
static double level_of(const jobspec *j, const char *name)
{
    for (int i = 0; i < j->model->ntensors; i++)
        if (strcmp(j->model->tensors[i].name, name) == 0)
            return j->sparsity.tensor_level[i];
    ck_abort_msg("no tensor %s", name);
    return -1;
}

START_TEST(default_patterns)
{
    char err[512] = "";
    jobspec *j = parse("[sparsity]\nsparsity = 0.9\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(j->sparsity.present);
    ck_assert_int_eq(j->sparsity.type, SPARSE_STATIC);
    ck_assert_int_eq(j->sparsity.init_method, SPARSE_INIT_RANDOM);
    ck_assert_int_eq(j->sparsity.seed, j->seed);
    ck_assert(!j->sparsity.dense_streams); /* packed streams unless told */
    /* the weights of the convolution and of the dense layers; never a
     * bias or the norm's tensors */
    ck_assert_double_eq_tol(level_of(j, "conv.weight"), 0.9, 1e-7);
    ck_assert_double_eq_tol(level_of(j, "fc1.weight"), 0.9, 1e-7);
    ck_assert_double_eq_tol(level_of(j, "fc2.weight"), 0.9, 1e-7);
    ck_assert_double_eq(level_of(j, "conv.bias"), 0);
    ck_assert_double_eq(level_of(j, "fc1.bias"), 0);
    ck_assert_double_eq(level_of(j, "bn.weight"), 0);
    ck_assert_double_eq(level_of(j, "bn.running_mean"), 0);
    jobspec_free(j);
    /* no section: dense */
    j = parse("", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(!j->sparsity.present);
    jobspec_free(j);
}
END_TEST

START_TEST(dynamic_types)
{
    char err[512] = "";
    jobspec *j = parse("[runconfig]\nmax_steps = 100\n[sparsity]\ntype = \"rigl\"\nsparsity = 0.75\n"
                       "init_method = \"topk\"\nseed = 5\n"
                       "param_name_patterns = [\"fc[12]\\\\.weight\"]\n"
                       "schedule = {freq = 10, start = 20, stop = 80}\n"
                       "drop_fraction = {type = \"cosine\", init = 0.3, half_period = 80}\n",
                       err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    const jobspec_sparsity *s = &j->sparsity;
    ck_assert_int_eq(s->type, SPARSE_RIGL);
    ck_assert_int_eq(s->init_method, SPARSE_INIT_TOPK);
    ck_assert_int_eq(s->seed, 5);
    ck_assert_int_eq(s->schedule.freq, 10);
    ck_assert_int_eq(s->schedule.start, 20);
    ck_assert_int_eq(s->schedule.stop, 80);
    ck_assert_int_eq(s->drop_fraction.kind, SPARSE_HP_COSINE);
    ck_assert_double_eq_tol(sparse_hp_at(&s->drop_fraction, 40, 1.0), 0.15, 1e-12);
    ck_assert_double_eq(level_of(j, "conv.weight"), 0);
    ck_assert_double_eq_tol(level_of(j, "fc1.weight"), 0.75, 1e-7);
    /* the schedule's steps: 20, 30, ..., 70 */
    ck_assert(!sparse_is_update_step(&s->schedule, 10));
    ck_assert(sparse_is_update_step(&s->schedule, 20));
    ck_assert(!sparse_is_update_step(&s->schedule, 25));
    ck_assert(sparse_is_update_step(&s->schedule, 70));
    ck_assert(!sparse_is_update_step(&s->schedule, 80));
    ck_assert_str_eq(j->mode, "auto");
    jobspec_free(j);
    /* gmp: the level over steps; per-pattern levels for static */
    j = parse("[runconfig]\nmax_steps = 100\n[sparsity]\ntype = \"gmp\"\n"
              "sparsity = {type = \"exp\", init = 0.0, final = 0.9, gamma = 0.05}\n"
              "schedule = {freq = 10, stop = 61}\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    /* the plan shows its last level (step 60) */
    ck_assert_double_eq_tol(j->sparsity.level, 0.9 - 0.9 * exp(-3.0), 1e-9);
    jobspec_free(j);
    j = parse("[sparsity]\nsparsity = {\"fc1\\\\.weight\" = 0.5, \"conv\\\\..*ght\" = 0.25}\n", err,
              sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_double_eq_tol(level_of(j, "fc1.weight"), 0.5, 1e-7);
    ck_assert_double_eq_tol(level_of(j, "conv.weight"), 0.25, 1e-7);
    ck_assert_double_eq(level_of(j, "fc2.weight"), 0);
    jobspec_free(j);
}
END_TEST

/* The level schedule of the tensor called name (gmp with levels per pattern). */
static const sparse_hp *hp_of(const jobspec *j, const char *name)
{
    ck_assert_ptr_nonnull(j->sparsity.tensor_hp);
    for (int i = 0; i < j->model->ntensors; i++)
        if (strcmp(j->model->tensors[i].name, name) == 0)
            return &j->sparsity.tensor_hp[i];
    ck_abort_msg("no tensor %s", name);
    return NULL;
}

START_TEST(gmp_per_pattern)
{
    char err[512] = "";
    /* each pattern its own level: a number (pruned to it at the first mask)
     * or a schedule; the last level (step 60) is what the plan shows */
    jobspec *j = parse("[runconfig]\nmax_steps = 100\n[sparsity]\ntype = \"gmp\"\n"
                       "sparsity = {\"fc1\\\\.weight\" = {type = \"exp\", init = 0.0, final = 0.9, "
                       "gamma = 0.05}, \"fc2\\\\.weight\" = 0.5, \"conv\\\\.weight\" = {type = "
                       "\"linear\", init = 0.1, slope = 0.01}}\n"
                       "schedule = {freq = 10, stop = 61}\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_int_eq(j->sparsity.type, SPARSE_GMP);
    ck_assert_double_eq_tol(level_of(j, "fc1.weight"), 0.9 - 0.9 * exp(-3.0), 1e-7);
    ck_assert_double_eq_tol(level_of(j, "fc2.weight"), 0.5, 1e-7);
    ck_assert_double_eq_tol(level_of(j, "conv.weight"), 0.7, 1e-7);
    ck_assert_double_eq(level_of(j, "fc1.bias"), 0);
    const sparse_hp *h = hp_of(j, "fc1.weight");
    ck_assert_int_eq(h->kind, SPARSE_HP_EXP);
    ck_assert_double_eq_tol(sparse_hp_at(h, 20, 0.999999), 0.9 - 0.9 * exp(-1.0), 1e-12);
    h = hp_of(j, "fc2.weight");
    ck_assert_int_eq(h->kind, SPARSE_HP_CONSTANT);
    ck_assert_double_eq_tol(sparse_hp_at(h, 0, 0.999999), 0.5, 1e-12);
    h = hp_of(j, "conv.weight");
    ck_assert_int_eq(h->kind, SPARSE_HP_LINEAR);
    ck_assert_double_eq_tol(sparse_hp_at(h, 30, 0.999999), 0.4, 1e-12);
    jobspec_free(j);
    /* the run ends before stop: the last level is the last step's */
    j = parse("[runconfig]\nmax_steps = 20\n[sparsity]\ntype = \"gmp\"\n"
              "sparsity = {\"fc[12]\\\\.weight\" = {type = \"linear\", init = 0.0, slope = 0.02}}\n"
              "schedule = {freq = 5, stop = 100}\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_double_eq_tol(level_of(j, "fc1.weight"), 0.4, 1e-7);
    ck_assert_double_eq_tol(level_of(j, "fc2.weight"), 0.4, 1e-7);
    ck_assert_double_eq(level_of(j, "conv.weight"), 0);
    jobspec_free(j);
    /* one schedule for every tensor: no per-tensor schedules */
    j = parse("[runconfig]\nmax_steps = 100\n[sparsity]\ntype = \"gmp\"\n"
              "sparsity = {type = \"linear\", init = 0.0, slope = 0.01}\n"
              "param_name_patterns = [\"fc1\\\\.weight\"]\nschedule = {freq = 10, stop = 51}\n",
              err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_ptr_null(j->sparsity.tensor_hp);
    ck_assert_double_eq_tol(level_of(j, "fc1.weight"), 0.5, 1e-7);
    ck_assert_double_eq(level_of(j, "fc2.weight"), 0);
    jobspec_free(j);
    /* the Model Zoo's YAML: a group per pattern, {sparsity: ...} */
    const char *yaml = "train_input: {num_classes: 3}\n"
                       "runconfig: {max_steps: 100}\n"
                       "sparsity:\n"
                       "    type: gmp\n"
                       "    init_method: topk\n"
                       "    schedule: {freq: 10, stop: 91}\n"
                       "    param_name_patterns:\n"
                       "      fc1.weight:\n"
                       "        sparsity: {type: cosine, init: 0.0, minimum: 0.8, "
                       "half_period: 90}\n"
                       "      fc2.weight: {sparsity: 0.3}\n"
                       "model:\n"
                       "    input_shape: [6]\n"
                       "    loss: softmax_cross_entropy\n"
                       "    layers:\n"
                       "      - {name: fc1, type: dense, units: 5}\n"
                       "      - {name: fc2, type: dense, units: 3}\n";
    j = jobspec_parse(yaml, strlen(yaml), "params.yaml", NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_int_eq(j->sparsity.init_method, SPARSE_INIT_TOPK);
    ck_assert_double_eq_tol(j->sparsity.tensor_level[0], 0.8, 1e-7); /* fc1.weight at 90 */
    ck_assert_double_eq(j->sparsity.tensor_level[1], 0);             /* fc1.bias */
    ck_assert_double_eq_tol(j->sparsity.tensor_level[2], 0.3, 1e-7); /* fc2.weight */
    ck_assert_int_eq(j->sparsity.tensor_hp[0].kind, SPARSE_HP_COSINE);
    ck_assert_double_eq_tol(sparse_hp_at(&j->sparsity.tensor_hp[0], 45, 0.999999), 0.4, 1e-12);
    jobspec_free(j);
    /* a level outside [0, 1) in one pattern names that pattern, in YAML */
    const char *bad = "train_input: {num_classes: 3}\n"
                      "sparsity:\n"
                      "    type: gmp\n"
                      "    schedule: {freq: 10}\n"
                      "    sparsity:\n"
                      "      fc1.weight: {type: exp, init: 0.0, final: 1.5, gamma: 0.1}\n"
                      "model:\n"
                      "    input_shape: [6]\n"
                      "    loss: softmax_cross_entropy\n"
                      "    layers:\n"
                      "      - {name: fc1, type: dense, units: 3}\n";
    ck_assert_ptr_null(jobspec_parse(bad, strlen(bad), "params.yaml", NULL, err, sizeof(err)));
    ck_assert_str_eq(err, "params.yaml:6:49: sparsity.sparsity.\"fc1.weight\".final: 1.5 is not "
                          "a sparsity level in [0, 1)");
}
END_TEST

START_TEST(dense_streams)
{
    char err[512] = "";
    jobspec *j = parse("[sparsity]\nsparsity = 0.9\ncompressed_streams = false\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(j->sparsity.dense_streams);
    jobspec_free(j);
    j = parse("[sparsity]\nsparsity = 0.9\ncompressed_streams = true\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(!j->sparsity.dense_streams);
    ck_assert(!j->sparsity.init_scale_fan_in); /* the weights as initialised unless told */
    jobspec_free(j);
    j = parse("[sparsity]\nsparsity = 0.9\ninit_scale = \"fan_in\"\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(j->sparsity.init_scale_fan_in);
    jobspec_free(j);
    j = parse("[sparsity]\nsparsity = 0.9\ninit_scale = \"none\"\n", err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert(!j->sparsity.init_scale_fan_in);
    jobspec_free(j);
}
END_TEST

START_TEST(yaml_section)
{
    const char *yaml = "train_input: {num_classes: 3}\n"
                       "sparsity:\n"
                       "    sparsity: 0.75\n"
                       "    init_method: \"random\"\n"
                       "    type: \"set\"\n"
                       "    drop_fraction:\n"
                       "      type: \"cosine\"\n"
                       "      init: 0.3\n"
                       "      half_period: 3584\n"
                       "    schedule:\n"
                       "      freq: 100\n"
                       "      stop: 3584\n"
                       "    param_name_patterns:\n"
                       "      - \"fc1.weight\"\n"
                       "      - \".*2.weight\"\n"
                       "model:\n"
                       "    input_shape: [6]\n"
                       "    loss: softmax_cross_entropy\n"
                       "    layers:\n"
                       "      - {name: fc1, type: dense, units: 5}\n"
                       "      - {name: fc2, type: dense, units: 3}\n";
    char err[512] = "";
    jobspec *j = jobspec_parse(yaml, strlen(yaml), "params.yaml", NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_int_eq(j->sparsity.type, SPARSE_SET);
    ck_assert_int_eq(j->sparsity.schedule.freq, 100);
    ck_assert_int_eq(j->sparsity.schedule.stop, 3584);
    ck_assert_double_eq(j->sparsity.drop_fraction.half_period, 3584);
    ck_assert_double_eq_tol(j->sparsity.tensor_level[0], 0.75, 1e-7); /* fc1.weight */
    ck_assert_double_eq(j->sparsity.tensor_level[1], 0);              /* fc1.bias */
    ck_assert_double_eq_tol(j->sparsity.tensor_level[2], 0.75, 1e-7); /* fc2.weight */
    jobspec_free(j);
    /* the Model Zoo's later spelling: algorithm, update, param_filter (globs) */
    const char *mz22 = "train_input: {num_classes: 3}\n"
                       "sparsity:\n"
                       "    sparsity: 0.75\n"
                       "    init_method: random\n"
                       "    algorithm: rigl\n"
                       "    drop_fraction: {type: cosine, init: 0.3, half_period: 3584}\n"
                       "    update: {freq: 100, stop: 3584}\n"
                       "    param_filter:\n"
                       "      - '*c[12].weight'\n"
                       "model:\n"
                       "    input_shape: [6]\n"
                       "    loss: softmax_cross_entropy\n"
                       "    layers:\n"
                       "      - {name: fc1, type: dense, units: 5}\n"
                       "      - {name: fc2, type: dense, units: 3}\n";
    j = jobspec_parse(mz22, strlen(mz22), "params.yaml", NULL, err, sizeof(err));
    ck_assert_msg(j != NULL, "%s", err);
    ck_assert_int_eq(j->sparsity.type, SPARSE_RIGL);
    ck_assert_int_eq(j->sparsity.schedule.freq, 100);
    ck_assert_str_eq(j->sparsity.patterns[0], ".*c[12]\\.weight");
    ck_assert_double_eq_tol(j->sparsity.tensor_level[0], 0.75, 1e-7); /* fc1.weight */
    ck_assert_double_eq(j->sparsity.tensor_level[1], 0);              /* fc1.bias */
    ck_assert_double_eq_tol(j->sparsity.tensor_level[2], 0.75, 1e-7); /* fc2.weight */
    jobspec_free(j);
    /* a YAML mistake is named where it is */
    const char *bad = "train_input: {num_classes: 3}\n"
                      "sparsity:\n"
                      "    sparsity: 1.0\n"
                      "model:\n"
                      "    input_shape: [6]\n"
                      "    loss: softmax_cross_entropy\n"
                      "    layers:\n"
                      "      - {name: fc1, type: dense, units: 3}\n";
    ck_assert_ptr_null(jobspec_parse(bad, strlen(bad), "params.yaml", NULL, err, sizeof(err)));
    ck_assert_str_eq(err, "params.yaml:3:15: sparsity.sparsity: 1 is not a sparsity level: it "
                          "must be in [0, 1) (the fraction of weights pruned)");
}
END_TEST

static int nbad;
static void refused(const char *section, const char *expect)
{
    char err[512] = "";
    jobspec *j = parse(section, err, sizeof(err));
    ck_assert_msg(j == NULL, "accepted: %s", section);
    if (strcmp(err, expect) != 0) {
        fprintf(stderr, "GOT  %s\nWANT %s\n", err, expect);
        nbad++;
    }
}

START_TEST(mistakes)
{
    /* (the section starts on line 3) */
    refused("[sparsity]\nsparsity = 0.9\ncompressed_streams = \"no\"\n",
            "job.toml:5:22: sparsity.compressed_streams: expected true or false");
    refused("[sparsity]\nsparsity = -0.1\n",
            "job.toml:4:12: sparsity.sparsity: -0.1 is not a sparsity level: it must be in "
            "[0, 1) (the fraction of weights pruned)");
    refused("[sparsity]\nsparsity = 0.5\nparam_name_pattern = \"fc1.weight\"\n",
            "job.toml:5:1: unknown key \"param_name_pattern\" in [sparsity] (did you mean "
            "\"param_name_patterns\"?)");
    refused("[sparsity]\nsparsity = 0.5\ntype = \"rigel\"\nschedule = {freq = 1}\n",
            "job.toml:5:8: sparsity.type: \"rigel\" is not one of static|gmp|set|rigl (did you "
            "mean \"rigl\"?)");
    refused("[sparsity]\nsparsity = 0.5\nparam_name_patterns = [\"fc3\\\\.weight\"]\n",
            "job.toml:5:24: sparsity: pattern \"fc3\\.weight\" matches no tensor of the model "
            "(did you mean \"fc1.weight\"?)");
    refused("[sparsity]\nsparsity = 0.5\nparam_name_patterns = [\"fc1\\\\.weight\", \"fc.*\"]\n",
            "job.toml:5:40: sparsity: pattern \"fc.*\" matches \"fc1.bias\", a bias: only weights "
            "are pruned, never biases or norms");
    refused("[sparsity]\nsparsity = 0.5\nparam_name_patterns = \"bn\\\\..*\"\n",
            "job.toml:5:23: sparsity: pattern \"bn\\..*\" matches \"bn.weight\", a norm's "
            "tensor: only weights are pruned, never biases or norms");
    refused("[sparsity]\nsparsity = 0.5\nparam_name_patterns = \"fc1(\"\n",
            "job.toml:5:23: sparsity.param_name_patterns: \"fc1(\" is not a regular expression: "
            "Unmatched ( or \\(");
    refused("[sparsity]\ntype = \"set\"\nsparsity = 0.5\nschedule = {freq = 10, start = 50, "
            "stop = 20}\n",
            "job.toml:6:43: sparsity.schedule.stop: 20 is not after start 50: the mask updates "
            "from start up to (not including) stop");
    refused("[sparsity]\ntype = \"gmp\"\nsparsity = 0.5\n",
            "job.toml:3:1: [sparsity]: type \"gmp\" needs a schedule (freq, and start, stop) of "
            "its mask updates");
    refused("[sparsity]\nsparsity = 0.5\nschedule = {freq = 10}\n",
            "job.toml:5:1: sparsity.schedule: a static mask never changes; a schedule is for "
            "gmp, set and rigl");
    refused("[sparsity]\ntype = \"rigl\"\nsparsity = 0.5\nschedule = {freq = 10, stpo = 3}\n",
            "job.toml:6:24: unknown key \"stpo\" in sparsity.schedule (did you mean \"stop\"?)");
    refused("[sparsity]\ntype = \"set\"\nsparsity = 0.5\nschedule = {freq = 10}\n"
            "drop_fraction = {type = \"cosin\", init = 0.3, half_period = 10}\n",
            "job.toml:7:25: sparsity.drop_fraction.type: \"cosin\" is not one of "
            "constant|linear|exp|cosine (did you mean \"cosine\"?)");
    refused("[sparsity]\nsparsity = 0.5\ntype = \"set\"\nalgorithm = \"rigl\"\n",
            "job.toml:6:1: sparsity.algorithm: the same as sparsity.type (line 5); give one of "
            "them");
    refused("[sparsity]\nsparsity = 0.5\ndrop_fraction = 0.2\n",
            "job.toml:5:1: sparsity.drop_fraction: only set and rigl drop and regrow");
    refused("[sparsity]\nsparsity = 0.9\ninit_scale = \"fan-in\"\n",
            "job.toml:5:14: sparsity.init_scale: \"fan-in\" is not one of none|fan_in (did you "
            "mean \"fan_in\"?)");
    refused("[sparsity]\nsparsity = 0.9\ninit_scale = true\n",
            "job.toml:5:14: sparsity.init_scale: expected one of none|fan_in (\"fan_in\": the kept "
            "initial weights scaled to the dense layer's fan-in variance)");
    /* gmp's levels per pattern: each named where it is */
    refused("[sparsity]\ntype = \"gmp\"\nschedule = {freq = 10}\n"
            "sparsity = {\"fc1\\\\.weight\" = 0.5, \"fc2\\\\.weight\" = 1.2}\n",
            "job.toml:6:52: sparsity.sparsity.\"fc2\\.weight\": 1.2 is not a sparsity level: it "
            "must be in [0, 1) (the fraction of weights pruned)");
    refused("[sparsity]\ntype = \"gmp\"\nschedule = {freq = 10}\n"
            "sparsity = {\"fc1\\\\.weight\" = {type = \"exp\", init = 0.0, final = 0.9}}\n",
            "job.toml:6:30: sparsity.sparsity.\"fc1\\.weight\": this schedule needs gamma");
    refused("[sparsity]\ntype = \"gmp\"\nschedule = {freq = 10}\n"
            "sparsity = {\"fc1\\\\.weight\" = {type = \"linear\", init = -0.1, slope = 0.01}}\n",
            "job.toml:6:55: sparsity.sparsity.\"fc1\\.weight\".init: -0.1 is not a sparsity "
            "level in [0, 1)");
    refused("[sparsity]\ntype = \"gmp\"\nschedule = {freq = 10}\n"
            "sparsity = {\"fc3\\\\.weight\" = 0.5}\n",
            "job.toml:6:13: sparsity: pattern \"fc3\\.weight\" matches no tensor of the model "
            "(did you mean \"fc1.weight\"?)");
    refused("[sparsity]\nsparsity = {\"fc1\\\\.weight\" = {type = \"linear\", init = 0.1, "
            "slope = 0.01}}\n",
            "job.toml:4:30: sparsity.sparsity.\"fc1\\.weight\": a level schedule is for type "
            "\"gmp\"; static keeps one level");
    refused("[runconfig]\nmode = \"pipelined\"\n[sparsity]\nsparsity = 0.5\n",
            "job.toml:4:1: runconfig.mode \"pipelined\": a sparse model (the [sparsity] section, "
            "line 5) trains in Weight Streaming, where memoryx keeps the masks; use "
            "\"weight_streaming\" or \"auto\"");
    ck_assert_int_eq(nbad, 0);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sparsity");
    TCase *t = tcase_create("parse");
    tcase_add_test(t, default_patterns);
    tcase_add_test(t, dynamic_types);
    tcase_add_test(t, gmp_per_pattern);
    tcase_add_test(t, yaml_section);
    tcase_add_test(t, dense_streams);
    tcase_add_test(t, mistakes);
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
