/* Simulated compute (wse-node/sim.c): the option parsed once with clear
 * errors, each layer's time under each mode against hand-computed values,
 * and the time spent as asked. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "mlp.h"
#include "sim.h"

/* A measured table in a temporary file; its path into path. */
static void table(char *path, size_t len, const char *text)
{
    snprintf(path, len, "%s/sim-table-XXXXXX", getenv("TMPDIR") ? getenv("TMPDIR") : "/tmp");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

START_TEST(options)
{
    sim_config c;
    char err[512];
    ck_assert_int_eq(sim_config_parse(&c, "", err, sizeof(err)), 0);
    ck_assert_int_eq(c.mode, SIM_OFF);
    ck_assert_int_eq(sim_config_parse(&c, "off", err, sizeof(err)), 0);
    ck_assert_int_eq(c.mode, SIM_OFF);
    ck_assert_int_eq(sim_config_parse(&c, "cs2", err, sizeof(err)), 0);
    ck_assert_int_eq(c.mode, SIM_CS2);
    ck_assert_double_eq(c.rate, 1e15);
    ck_assert_int_eq(sim_config_parse(&c, "cs2:250", err, sizeof(err)), 0);
    ck_assert_double_eq(c.rate, 250e12);
    ck_assert_int_eq(sim_config_parse(&c, "0.004", err, sizeof(err)), 0);
    ck_assert_int_eq(c.mode, SIM_PER_SAMPLE);
    ck_assert_double_eq(c.per_sample, 0.004);
    ck_assert_int_eq(sim_config_parse(&c, "fast", err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "\"fast\"") && strstr(err, "measured:FILE"), "%s", err);
    ck_assert_int_eq(sim_config_parse(&c, "cs2:0", err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "cs2:TFLOPS"), "%s", err);
    ck_assert_int_eq(sim_config_parse(&c, "-1", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(sim_config_parse(&c, "measured:/nonexistent/t.txt", err, sizeof(err)), -ENOENT);
    ck_assert_msg(strstr(err, "/nonexistent/t.txt"), "%s", err);
    char path[256];
    table(path, sizeof(path), "fc1 0.001 0.002\nfc2 x 0.1\n");
    char arg[300];
    snprintf(arg, sizeof(arg), "measured:%s", path);
    ck_assert_int_eq(sim_config_parse(&c, arg, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, path) && strstr(err, ":2:"), "%s", err);
    unlink(path);
    table(path, sizeof(path), "fc1 0.001 0.002\nfc1 0.001 0.002\n");
    snprintf(arg, sizeof(arg), "measured:%s", path);
    ck_assert_int_eq(sim_config_parse(&c, arg, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "\"fc1\" twice"), "%s", err);
    unlink(path);
}
END_TEST

START_TEST(times)
{
    model *m = mlp_compile(MLP3);
    sim_config c;
    sim_times t;
    char err[512];
    /* seconds per sample, split by FLOPs: the layers add up to the step */
    ck_assert_int_eq(sim_config_parse(&c, "0.003", err, sizeof(err)), 0);
    ck_assert_int_eq(sim_times_init(&t, &c, m, err, sizeof(err)), 0);
    double sum = 0;
    for (int i = 0; i < m->nlayers; i++) {
        sum += sim_layer_sec(&t, i, false, 1) + sim_layer_sec(&t, i, true, 1);
        ck_assert_double_eq_tol(sim_layer_sec(&t, i, true, 1), 2 * sim_layer_sec(&t, i, false, 1),
                                1e-18);
        ck_assert_double_eq_tol(sim_layer_sec(&t, i, false, 1),
                                0.001 * (double)m->layers[i].flops / (double)m->flops, 1e-15);
    }
    ck_assert_double_eq_tol(sum, 0.003, 1e-12);
    ck_assert_double_eq_tol(sim_layer_sec(&t, 2, false, 10), 10 * sim_layer_sec(&t, 2, false, 1),
                            1e-15);
    ck_assert_double_eq_tol(t.loss, log(3.0), 1e-12); /* fc3: 3 classes */
    sim_times_deinit(&t);
    /* cs2: fc2's forward FLOPs (2 * 8 * 6 + 6) at 1 PFLOP/s */
    ck_assert_int_eq(sim_config_parse(&c, "cs2", err, sizeof(err)), 0);
    ck_assert_int_eq(sim_times_init(&t, &c, m, err, sizeof(err)), 0);
    ck_assert_double_eq_tol(sim_layer_sec(&t, 2, false, 1), 102e-15, 1e-20);
    ck_assert_double_eq_tol(sim_layer_sec(&t, 2, true, 4), 4 * 204e-15, 1e-20);
    sim_times_deinit(&t);
    /* a measured table: the fused relu (a view) may be left out */
    char path[256], arg[300];
    table(path, sizeof(path), "# layer fwd bwd (s per sample)\nfc1 0.001 0.002\n\nfc2 0.003 0.006 # wide\nfc3 0.0005 0.001\n");
    snprintf(arg, sizeof(arg), "measured:%s", path);
    ck_assert_int_eq(sim_config_parse(&c, arg, err, sizeof(err)), 0);
    ck_assert_uint_eq(c.n, 3);
    ck_assert_int_eq(sim_times_init(&t, &c, m, err, sizeof(err)), 0);
    ck_assert_double_eq(sim_layer_sec(&t, 0, false, 2), 0.002);
    ck_assert_double_eq(sim_layer_sec(&t, 1, true, 2), 0);
    ck_assert_double_eq(sim_layer_sec(&t, 2, true, 2), 0.012);
    ck_assert_double_eq(sim_layer_sec(&t, 3, false, 2), 0.001);
    sim_times_deinit(&t);
    sim_config_deinit(&c);
    unlink(path);
    /* a layer the table lacks, or one the model lacks: named */
    ck_assert_int_eq(sim_config_parse(&c, arg, err, sizeof(err)), -ENOENT); /* gone */
    table(path, sizeof(path), "fc1 0.001 0.002\nfc3 0.001 0.002\n");
    snprintf(arg, sizeof(arg), "measured:%s", path);
    ck_assert_int_eq(sim_config_parse(&c, arg, err, sizeof(err)), 0);
    ck_assert_int_eq(sim_times_init(&t, &c, m, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "no line for layer \"fc2\""), "%s", err);
    sim_config_deinit(&c);
    unlink(path);
    table(path, sizeof(path), "fc1 0 0\nfc2 0 0\nfc3 0 0\nfc4 0 0\n");
    snprintf(arg, sizeof(arg), "measured:%s", path);
    ck_assert_int_eq(sim_config_parse(&c, arg, err, sizeof(err)), 0);
    ck_assert_int_eq(sim_times_init(&t, &c, m, err, sizeof(err)), -EINVAL);
    ck_assert_msg(strstr(err, "\"fc4\", which the job's model has not"), "%s", err);
    sim_config_deinit(&c);
    unlink(path);
    model_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("sim");
    TCase *t = tcase_create("sim");
    tcase_add_test(t, options);
    tcase_add_test(t, times);
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
