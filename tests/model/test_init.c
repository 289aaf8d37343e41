/* Initializers: each one's sample mean, spread and bounds on a large tensor
 * against its formula; the same weights however the range is split; fans
 * and gains as PyTorch's; model_init_parse's good and bad inputs; the
 * plan's copy. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "init.h"
#include "rng.h"

#define N (1u << 20)

/* Sample statistics of w (n). */
typedef struct {
    double mean, sd, min, max;
} stats;

static stats stats_of(const float *w, size_t n)
{
    stats s = {0, 0, INFINITY, -INFINITY};
    double sum = 0, sq = 0;
    for (size_t i = 0; i < n; i++) {
        sum += w[i];
        sq += (double)w[i] * w[i];
        s.min = w[i] < s.min ? w[i] : s.min;
        s.max = w[i] > s.max ? w[i] : s.max;
    }
    s.mean = sum / (double)n;
    s.sd = sqrt(sq / (double)n - s.mean * s.mean);
    return s;
}

/* Fills N elements by in and checks mean and sd within the sampling error
 * (sd to 1%, mean to 6 standard errors) and every value within [lo, hi]. */
static stats check_fill(const model_init *in, uint64_t fan_in, uint64_t fan_out, double mean,
                        double sd, double lo, double hi)
{
    float *w = malloc(N * sizeof(float));
    model_init_fill(in, fan_in, fan_out, 7, 0x1003, 0, N, w);
    stats s = stats_of(w, N);
    free(w);
    ck_assert_msg(fabs(s.mean - mean) <= 6 * sd / sqrt((double)N) + 1e-12,
                  "%s: mean %.6g, want %.6g", in->name, s.mean, mean);
    ck_assert_msg(fabs(s.sd - sd) <= 0.01 * sd + 1e-12, "%s: sd %.6g, want %.6g", in->name, s.sd,
                  sd);
    ck_assert_msg(s.min >= (float)lo && s.max <= (float)hi, "%s: [%.6g, %.6g] outside [%.6g, %.6g]",
                  in->name, s.min, s.max, lo, hi);
    return s;
}

static model_init named(const char *name)
{
    model_init in;
    memset(&in, 0, sizeof(in));
    strcpy(in.name, name);
    return in;
}

START_TEST(test_uniforms)
{
    /* glorot_uniform, gain 2, fans 300 and 100: bound 2 sqrt(6 / 400) */
    model_init in = named("xavier_uniform");
    in.gain = 2.0;
    double r = 2.0 * sqrt(6.0 / 400.0);
    stats s = check_fill(&in, 300, 100, 0.0, r / sqrt(3.0), -r, r);
    ck_assert(s.max > 0.999 * r && s.min < -0.999 * r); /* the whole interval */
    /* kaiming_uniform's defaults (leaky_relu of slope 0: gain sqrt 2), fan_in 75:
     * bound sqrt(3) sqrt(2) / sqrt(75) */
    in = named("kaiming_uniform");
    strcpy(in.mode, "fan_in");
    strcpy(in.nonlinearity, "leaky_relu");
    r = sqrt(6.0 / 75.0);
    check_fill(&in, 75, 200, 0.0, r / sqrt(3.0), -r, r);
    /* uniform(-1, 3): mean 1, sd 4 / sqrt(12) */
    in = named("uniform");
    in.a = -1;
    in.b = 3;
    check_fill(&in, 0, 0, 1.0, 4.0 / sqrt(12.0), -1, 3);
    /* lecun_uniform: variance_scaling(1, fan_in, uniform): bound sqrt(3 / fan_in) */
    in = named("lecun_uniform");
    in.scale = 1;
    strcpy(in.mode, "fan_in");
    strcpy(in.distribution, "uniform");
    r = sqrt(3.0 / 50.0);
    check_fill(&in, 50, 9, 0.0, r / sqrt(3.0), -r, r);
    /* variance_scaling(3, fan_avg, uniform), fans 20 and 40: bound sqrt(3 * 3 / 30) */
    in = named("variance_scaling");
    in.scale = 3;
    strcpy(in.mode, "fan_avg");
    strcpy(in.distribution, "uniform");
    r = sqrt(9.0 / 30.0);
    check_fill(&in, 20, 40, 0.0, r / sqrt(3.0), -r, r);
}
END_TEST

START_TEST(test_normals)
{
    /* normal(2, 0.5) */
    model_init in = named("normal");
    in.mean = 2;
    in.std = 0.5;
    check_fill(&in, 0, 0, 2.0, 0.5, -INFINITY, INFINITY);
    /* xavier_normal gain 1.5, fans 30 and 70: sd 1.5 sqrt(2 / 100) */
    in = named("xavier_normal");
    in.gain = 1.5;
    check_fill(&in, 30, 70, 0.0, 1.5 * sqrt(0.02), -INFINITY, INFINITY);
    /* kaiming_normal, fan_out of a conv (64, 32, 3, 3): 576; relu: sd sqrt(2) / 24 */
    in = named("kaiming_normal");
    strcpy(in.mode, "fan_out");
    strcpy(in.nonlinearity, "relu");
    check_fill(&in, 288, 576, 0.0, sqrt(2.0) / 24.0, -INFINITY, INFINITY);
    /* tanh, slope ignored: 5/3 / sqrt(288) */
    strcpy(in.mode, "fan_in");
    strcpy(in.nonlinearity, "tanh");
    in.a = 0.3;
    check_fill(&in, 288, 576, 0.0, 5.0 / 3.0 / sqrt(288.0), -INFINITY, INFINITY);
    /* variance_scaling(2, fan_out, normal), fan_out 8: sd sqrt(2 / 8) */
    in = named("variance_scaling");
    in.scale = 2;
    strcpy(in.mode, "fan_out");
    strcpy(in.distribution, "normal");
    check_fill(&in, 100, 8, 0.0, 0.5, -INFINITY, INFINITY);
}
END_TEST

START_TEST(test_truncated)
{
    /* truncated_normal(0.5, 1, 0, 2): the moments of a cut normal, alpha =
     * -0.5, beta = 1.5: mean mu + sigma (phi(alpha) - phi(beta)) / Z, variance
     * sigma^2 (1 + (alpha phi(alpha) - beta phi(beta)) / Z - ((phi(alpha) -
     * phi(beta)) / Z)^2), Z = Phi(beta) - Phi(alpha) */
    model_init in = named("truncated_normal");
    in.mean = 0.5;
    in.std = 1;
    in.a = 0;
    in.b = 2;
    double al = -0.5, be = 1.5;
    double pa = exp(-al * al / 2) / sqrt(2 * M_PI), pb = exp(-be * be / 2) / sqrt(2 * M_PI);
    double z = 0.5 * erfc(-be / M_SQRT2) - 0.5 * erfc(-al / M_SQRT2);
    double mean = 0.5 + (pa - pb) / z;
    double var = 1 + (al * pa - be * pb) / z - ((pa - pb) / z) * ((pa - pb) / z);
    stats s = check_fill(&in, 0, 0, mean, sqrt(var), 0, 2);
    ck_assert(s.min < 0.001 && s.max > 1.999);
    /* the Model Zoo's default cut-offs: 2 std either side of 0; the std of a
     * normal cut at 2 std is 0.8796 std */
    in = named("truncated_normal");
    in.std = 0.05;
    in.a = -0.1;
    in.b = 0.1;
    check_fill(&in, 0, 0, 0.0, 0.05 * 0.87962566103423978, -0.1, 0.1);
    /* lecun_normal: variance_scaling(1, fan_in, truncated_normal), fan_in
     * 100: sd sqrt(1 / 100) / 0.8796, cut at -2 and 2 (trunc_normal_'s
     * defaults, as the Model Zoo calls it): nothing is cut at that sd */
    in = named("lecun_normal");
    in.scale = 1;
    strcpy(in.mode, "fan_in");
    strcpy(in.distribution, "truncated_normal");
    check_fill(&in, 100, 3, 0.0, 0.1 / 0.87962566103423978, -2, 2);
}
END_TEST

START_TEST(test_constants)
{
    model_init in = named("constant");
    in.val = 0.25;
    float w[5];
    model_init_fill(&in, 0, 0, 1, 2, 10, 15, w);
    for (int i = 0; i < 5; i++)
        ck_assert_float_eq(w[i], 0.25f);
    in = named("ones");
    model_init_fill(&in, 0, 0, 1, 2, 0, 5, w);
    ck_assert_float_eq(w[4], 1.0f);
    in = named("zeros");
    model_init_fill(&in, 0, 0, 1, 2, 0, 5, w);
    ck_assert_float_eq(w[0], 0.0f);
}
END_TEST

/* The weights are a function of (seed, stream, element): a range split
 * anywhere gives the whole range's bits. */
START_TEST(test_determinism)
{
    const char *names[] = {"uniform", "normal", "xavier_uniform", "xavier_normal",
                           "kaiming_uniform", "kaiming_normal", "truncated_normal",
                           "variance_scaling", "he_normal"};
    enum { M = 5000 };
    static float whole[M], parts[M], again[M];
    for (size_t k = 0; k < sizeof(names) / sizeof(names[0]); k++) {
        model_init in = named(names[k]);
        in.a = -0.1;
        in.b = 0.2;
        in.std = 0.05;
        in.gain = 1;
        in.scale = 1;
        strcpy(in.mode, "fan_in");
        strcpy(in.distribution, "truncated_normal");
        strcpy(in.nonlinearity, "relu");
        model_init_fill(&in, 30, 40, 11, 0x1005, 0, M, whole);
        model_init_fill(&in, 30, 40, 11, 0x1005, 0, 1234, parts);
        model_init_fill(&in, 30, 40, 11, 0x1005, 1234, 1235, parts + 1234);
        model_init_fill(&in, 30, 40, 11, 0x1005, 1235, M, parts + 1235);
        ck_assert_msg(memcmp(whole, parts, sizeof(whole)) == 0, "%s: split differs", names[k]);
        model_init_fill(&in, 30, 40, 12, 0x1005, 0, M, again); /* another seed */
        ck_assert_msg(memcmp(whole, again, sizeof(whole)) != 0, "%s: seed ignored", names[k]);
        model_init_fill(&in, 30, 40, 11, 0x1006, 0, M, again); /* another tensor */
        ck_assert_msg(memcmp(whole, again, sizeof(whole)) != 0, "%s: stream ignored", names[k]);
    }
    /* the planner's he_normal as it always was: sqrt(2 / fan_in) z */
    model_init in = named("he_normal");
    model_init_fill(&in, 50, 7, 3, 0x1000, 0, 100, whole);
    for (int i = 0; i < 100; i++)
        ck_assert_float_eq(whole[i], (float)(sqrt(2.0 / 50.0) * rng_normal(3, 0x1000, (uint64_t)i)));
    in = named("xavier_uniform");
    in.gain = 1;
    model_init_fill(&in, 50, 7, 3, 0x1000, 0, 100, whole);
    for (int i = 0; i < 100; i++)
        ck_assert_float_eq(whole[i], (float)(sqrt(6.0 / 57.0) *
                                             (2.0 * rng_uniform(3, 0x1000, (uint64_t)i) - 1.0)));
}
END_TEST

START_TEST(test_fans_and_gains)
{
    uint64_t fi, fo;
    int64_t dense[2] = {10, 784};
    ck_assert_int_eq(model_init_fans(dense, 2, &fi, &fo), 0);
    ck_assert_uint_eq(fi, 784);
    ck_assert_uint_eq(fo, 10);
    int64_t conv[4] = {8, 3, 5, 5}; /* (out, in, kh, kw) */
    ck_assert_int_eq(model_init_fans(conv, 4, &fi, &fo), 0);
    ck_assert_uint_eq(fi, 75);
    ck_assert_uint_eq(fo, 200);
    int64_t tconv[4] = {3, 8, 5, 5}; /* transposed: (in, out, kh, kw), fans from dims 1 and 0 */
    ck_assert_int_eq(model_init_fans(tconv, 4, &fi, &fo), 0);
    ck_assert_uint_eq(fi, 200);
    ck_assert_uint_eq(fo, 75);
    int64_t bias[1] = {8};
    ck_assert_int_eq(model_init_fans(bias, 1, &fi, &fo), -EINVAL);

    double g;
    ck_assert_int_eq(model_init_gain("tanh", 0, false, &g), 0);
    ck_assert_double_eq_tol(g, 5.0 / 3.0, 1e-15);
    ck_assert_int_eq(model_init_gain("relu", 0, false, &g), 0);
    ck_assert_double_eq_tol(g, sqrt(2.0), 1e-15);
    ck_assert_int_eq(model_init_gain("leaky_relu", 0, false, &g), 0); /* slope 0.01 */
    ck_assert_double_eq_tol(g, sqrt(2.0 / 1.0001), 1e-15);
    ck_assert_int_eq(model_init_gain("leaky_relu", 0.2, true, &g), 0);
    ck_assert_double_eq_tol(g, sqrt(2.0 / 1.04), 1e-15);
    ck_assert_int_eq(model_init_gain("conv_transpose2d", 0, false, &g), 0);
    ck_assert_double_eq(g, 1.0);
    ck_assert_int_eq(model_init_gain("selu", 0, false, &g), 0);
    ck_assert_double_eq(g, 0.75);
    ck_assert_int_eq(model_init_gain("swish", 0, false, &g), -EINVAL);

    model_init in = named("kaiming_normal");
    ck_assert(model_init_needs_fans(&in));
    in = named("truncated_normal");
    ck_assert(!model_init_needs_fans(&in));
}
END_TEST

/* Parses the value of "w" in doc. */
static int parse_w(const char *doc, model_init *out, char *err, size_t errlen)
{
    toml_value *root = toml_parse(doc, strlen(doc), "model.toml", err, errlen);
    ck_assert_msg(root != NULL, "%s", err);
    int rc = model_init_parse(toml_table_get(root, "w"), out, err, errlen);
    toml_free(root);
    return rc;
}

static model_init parsed(const char *doc)
{
    model_init in;
    char err[512] = "";
    ck_assert_msg(parse_w(doc, &in, err, sizeof(err)) == 0, "%s: %s", doc, err);
    return in;
}

static void parse_refused(const char *doc, const char *expect)
{
    model_init in;
    char err[512] = "";
    ck_assert_msg(parse_w(doc, &in, err, sizeof(err)) == -EINVAL, "accepted: %s", doc);
    ck_assert_str_eq(err, expect);
}

START_TEST(test_parse)
{
    model_init in = parsed("w = \"zeros\"\n");
    ck_assert_str_eq(in.name, "zeros");
    in = parsed("w = \"Glorot_Uniform\"\n");
    ck_assert_str_eq(in.name, "xavier_uniform");
    ck_assert_double_eq(in.gain, 1.0);
    in = parsed("w = {name = \"glorot_uniform\", gain = 2.0}\n");
    ck_assert_str_eq(in.name, "xavier_uniform");
    ck_assert_double_eq(in.gain, 2.0);
    in = parsed("w = {name = \"xavier_normal\", gain = \"relu\"}\n"); /* a gain by name */
    ck_assert_double_eq_tol(in.gain, sqrt(2.0), 1e-15);
    in = parsed("w = {name = \"kaiming_normal\", mode = \"fan_out\", nonlinearity = \"relu\"}\n");
    ck_assert_str_eq(in.mode, "fan_out");
    ck_assert_str_eq(in.nonlinearity, "relu");
    ck_assert_double_eq(in.a, 0.0);
    in = parsed("w = \"kaiming_uniform\"\n");
    ck_assert_str_eq(in.mode, "fan_in");
    ck_assert_str_eq(in.nonlinearity, "leaky_relu");
    in = parsed("w = {name = \"truncated_normal\", std = 0.1}\n"); /* cut at 2 std of 0 */
    ck_assert_double_eq(in.a, -0.2);
    ck_assert_double_eq(in.b, 0.2);
    ck_assert_double_eq(in.mean, 0.0);
    in = parsed("w = {name = \"truncated_normal\", mean = 1, std = 0.1, b = 3}\n");
    ck_assert_double_eq(in.a, -0.2);
    ck_assert_double_eq(in.b, 3.0);
    in = parsed("w = \"normal\"\n");
    ck_assert_double_eq(in.std, 0.05);
    in = parsed("w = {name = \"uniform\"}\n");
    ck_assert_double_eq(in.a, -0.05);
    ck_assert_double_eq(in.b, 0.05);
    in = parsed("w = {name = \"constant\", val = 0.5}\n");
    ck_assert_double_eq(in.val, 0.5);
    in = parsed("w = \"lecun_normal\"\n");
    ck_assert_str_eq(in.distribution, "truncated_normal");
    ck_assert_double_eq(in.scale, 1.0);
    in = parsed("w = {name = \"variance_scaling\", scale = 2, mode = \"fan_avg\", "
                "distribution = \"uniform\"}\n");
    ck_assert_str_eq(in.mode, "fan_avg");
    ck_assert_str_eq(in.distribution, "uniform");

    parse_refused("w = \"glorot\"\n",
                  "model.toml:1:5: unknown initializer \"glorot\" (known: constant, ones, zeros, "
                  "uniform, normal, xavier_normal, glorot_normal, xavier_uniform, glorot_uniform, "
                  "truncated_normal, variance_scaling, lecun_normal, lecun_uniform, "
                  "kaiming_normal, kaiming_uniform)");
    parse_refused("w = {gain = 2.0}\n",
                  "model.toml:1:5: initializer: missing \"name\" (one of constant, ones, zeros, "
                  "uniform, normal, xavier_normal, glorot_normal, xavier_uniform, glorot_uniform, "
                  "truncated_normal, variance_scaling, lecun_normal, lecun_uniform, "
                  "kaiming_normal, kaiming_uniform)");
    parse_refused("w = {name = \"glorot_uniform\", gian = 2.0}\n",
                  "model.toml:1:31: initializer \"glorot_uniform\": unknown parameter \"gian\" (it "
                  "takes gain)");
    parse_refused("w = {name = \"zeros\", val = 1}\n",
                  "model.toml:1:22: initializer \"zeros\": unknown parameter \"val\" (it takes "
                  "none)");
    parse_refused("w = {name = \"kaiming_normal\", mode = \"fan_avg\"}\n",
                  "model.toml:1:38: initializer \"kaiming_normal\": mode: \"fan_avg\" is not one of "
                  "fan_in|fan_out");
    parse_refused("w = {name = \"kaiming_uniform\", nonlinearity = \"swish\"}\n",
                  "model.toml:1:47: initializer \"kaiming_uniform\": nonlinearity: \"swish\" is not "
                  "one of linear|conv1d|conv2d|conv3d|conv_transpose1d|conv_transpose2d|"
                  "conv_transpose3d|sigmoid|tanh|relu|leaky_relu|selu");
    parse_refused("w = {name = \"variance_scaling\", distribution = \"untruncated_normal\"}\n",
                  "model.toml:1:48: initializer \"variance_scaling\": distribution: "
                  "\"untruncated_normal\" is not one of truncated_normal|normal|uniform");
    parse_refused("w = {name = \"uniform\", a = 1, b = -1}\n",
                  "model.toml:1:5: initializer \"uniform\": a must not be above b");
    parse_refused("w = {name = \"truncated_normal\", std = 0}\n",
                  "model.toml:1:5: initializer \"truncated_normal\": std must be > 0 and a below b");
    parse_refused("w = {name = \"xavier_normal\", gain = \"big\"}\n",
                  "model.toml:1:37: initializer \"xavier_normal\": gain: expected a number (or a "
                  "nonlinearity's name for its gain), found string \"big\"");
    parse_refused("w = {name = \"normal\", std = true}\n",
                  "model.toml:1:29: initializer \"normal\": std: expected a number (or a "
                  "nonlinearity's name for its gain), found boolean");
    parse_refused("w = {name = 3}\n",
                  "model.toml:1:13: initializer: name: expected a string, found integer");
    parse_refused("w = 3\n",
                  "model.toml:1:5: initializer: expected a name or a table with a name and "
                  "parameters, found integer");
    parse_refused("w = {name = \"normal\", std = nan}\n",
                  "model.toml:1:29: initializer \"normal\": std: nan is not a finite number");
}
END_TEST

/* An initializer through the plan and back; the planner's defaults; what a
 * peer must not send. */
START_TEST(test_plan)
{
    model_init in = parsed("w = {name = \"kaiming_uniform\", a = 0.2, mode = \"fan_out\"}\n");
    Appliance__PlanInit pi;
    model_init_to_plan(&in, &pi);
    Appliance__PlanTensor pt;
    appliance__plan_tensor__init(&pt);
    pt.name = "fc.weight";
    pt.init = "kaiming_uniform";
    pt.initializer = &pi;
    size_t len = appliance__plan_tensor__get_packed_size(&pt);
    uint8_t *buf = malloc(len);
    appliance__plan_tensor__pack(&pt, buf);
    Appliance__PlanTensor *back = appliance__plan_tensor__unpack(NULL, len, buf);
    free(buf);
    ck_assert_ptr_nonnull(back);
    model_init out;
    ck_assert_int_eq(model_init_from_plan(back, &out), 0);
    ck_assert_str_eq(out.name, "kaiming_uniform");
    ck_assert_double_eq(out.a, 0.2);
    ck_assert_str_eq(out.mode, "fan_out");
    ck_assert_str_eq(out.nonlinearity, "leaky_relu");
    strcpy(back->initializer->mode, "fan_x");
    ck_assert_int_eq(model_init_from_plan(back, &out), -EINVAL);
    back->initializer->name[0] = 'K'; /* names as the planner writes them, only */
    ck_assert_int_eq(model_init_from_plan(back, &out), -EINVAL);
    appliance__plan_tensor__free_unpacked(back, NULL);
    appliance__plan_init__init(&pi);
    pi.name = "normal";
    pi.std = NAN;
    ck_assert_int_eq(model_init_from_plan(&pt, &out), -EINVAL);
    /* without an initializer: init's default name */
    pt.initializer = NULL;
    pt.init = "he_normal";
    ck_assert_int_eq(model_init_from_plan(&pt, &out), 0);
    ck_assert_str_eq(out.name, "he_normal");
    pt.init = "glorot_uniform";
    ck_assert_int_eq(model_init_from_plan(&pt, &out), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("model-init");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_uniforms);
    tcase_add_test(tc, test_normals);
    tcase_add_test(tc, test_truncated);
    tcase_add_test(tc, test_constants);
    tcase_add_test(tc, test_determinism);
    tcase_add_test(tc, test_fans_and_gains);
    tcase_add_test(tc, test_parse);
    tcase_add_test(tc, test_plan);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
