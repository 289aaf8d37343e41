/* The executor's dense layers on the sparse kernels (exec_sparse.c): a
 * layer whose weight is 90% zeros takes the sparse path and gives the
 * dense path's output, data gradient and weight gradient (the kept
 * positions' against double sums, zeros at the pruned ones); a weight
 * with no zeros stays on the GEMMs; the thread count changes no bit; a
 * relu's mostly-zero output takes the input-sparse path. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "kernels.h"
#include "op_sparse_dense.h"
#include "rng.h"
#include "toml.h"
#include "../check_loop.h"

enum { N = 64, F = 2048, UNITS = 2048 };

/* input [F] -> relu -> fc1 dense (UNITS), softmax cross entropy over the
 * UNITS logits: every pass of fc1 reads what no GEMM made */
static model *mlp(toml_value **root)
{
    char text[512], err[256];
    snprintf(text, sizeof(text),
             "[model]\ninput_shape = [%d]\nloss = \"softmax_cross_entropy\"\n"
             "[[model.layers]]\nname = \"r0\"\ntype = \"relu\"\n"
             "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = %d\n",
             F, UNITS);
    *root = toml_parse(text, strlen(text), "sparse.toml", err, sizeof(err));
    ck_assert_msg(*root != NULL, "%s", err);
    model *m = model_compile_document(*root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    ck_assert_int_eq(m->nlayers, 2);
    ck_assert_int_eq(m->layers[1].type, LAYER_DENSE);
    return m;
}

/* weights: fc1's weight with `zeros` of its elements exactly zero (a
 * random mask), its bias random */
static float **weights(const model *m, double zeros)
{
    float **t = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        t[i] = calloc(mt->elems, sizeof(float));
        for (uint64_t k = 0; k < mt->elems; k++) {
            bool pruned = mt->ndim == 2 && rng_uniform(5, (uint64_t)i, k) < zeros;
            float v = (float)((2.0 * rng_uniform(3, (uint64_t)i, k) - 1.0) * 0.05);
            t[i][k] = pruned ? 0.0f : (v == 0.0f ? 0.01f : v);
        }
    }
    return t;
}

static float **grads(const model *m)
{
    float **t = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++)
        t[i] = calloc(m->tensors[i].elems, sizeof(float));
    return t;
}

static void free_all(const model *m, float **t)
{
    for (int i = 0; i < m->ntensors; i++)
        free(t[i]);
    free(t);
}

/* inputs with `zeros` of them negative (zero after the relu) */
static void batch(float *x, int32_t *y, double zeros)
{
    for (size_t k = 0; k < (size_t)N * F; k++) {
        double u = rng_uniform(7, 0, k);
        x[k] = u < zeros ? -1.0f : (float)(rng_uniform(8, 0, k) * 2.0 + 0.1);
    }
    for (int s = 0; s < N; s++)
        y[s] = (int32_t)(rng_uniform(9, 0, (uint64_t)s) * UNITS);
}

/* One training step's results: fc1's output, the relu's output gradient
 * (fc1's data gradient), fc1's weight and bias gradients */
typedef struct result {
    float *out, *din, *dw, *db;
    double loss;
    int path;
    uint64_t passes[EXEC_PATHS];
    char how[320];
} result;

static void result_free(result *r)
{
    free(r->out);
    free(r->din);
    free(r->dw);
    free(r->db);
}

static void step(const model *m, float **w, const float *x, const int32_t *y, bool sparsity,
                 int threads, result *r)
{
    float **g = grads(m);
    exec e;
    char err[256];
    kernels_set_threads(threads);
    ck_assert_msg(exec_init_reference(&e, m, N, threads, w, g, err, sizeof(err)) == 0, "%s", err);
    float level[2] = {0.9f, 0.0f}; /* fc1.weight pruned, its bias not */
    if (sparsity)
        ck_assert_msg(exec_set_sparsity(&e, level, true, err, sizeof(err)) == 0, "%s", err);
    for (int i = 0; i < m->nlayers; i++)
        exec_forward(&e, i, x, 0, true);
    r->out = malloc(sizeof(float) * N * UNITS);
    memcpy(r->out, exec_output(&e, 1, x), sizeof(float) * N * UNITS);
    r->loss = exec_loss(&e, x, y, 1.0f / N);
    exec_backward(&e, 1, x, 0); /* (the relu has no input gradient to make) */
    r->din = malloc(sizeof(float) * N * F);
    memcpy(r->din, e.dact[e.res[0]], sizeof(float) * N * F);
    r->dw = g[m->layers[1].first_tensor];
    r->db = g[m->layers[1].first_tensor + 1];
    g[m->layers[1].first_tensor] = g[m->layers[1].first_tensor + 1] = NULL;
    r->path = exec_dense_path(&e, 1, r->how, sizeof(r->how));
    memcpy(r->passes, e.dense_passes, sizeof(r->passes));
    exec_deinit(&e);
    free_all(m, g);
    kernels_set_threads(1);
}

/* |a - b| within rel of the largest |b| */
static void close_to(const char *what, const float *a, const float *b, size_t count, double rel)
{
    double big = 0.0;
    for (size_t k = 0; k < count; k++)
        big = fmax(big, fabs(b[k]));
    for (size_t k = 0; k < count; k++)
        ck_check(fabs((double)a[k] - b[k]) <= rel * big + 1e-30,
                      "%s[%zu]: %.9g against %.9g (largest %.3g)", what, k, a[k], b[k], big);
}

START_TEST(sparse_weight_equals_dense)
{
    toml_value *root;
    model *m = mlp(&root);
    float **w = weights(m, 0.9);
    float *x = malloc(sizeof(float) * N * F);
    int32_t *y = malloc(sizeof(int32_t) * N);
    batch(x, y, 0.5);
    int threads = 2;
    result s, d;
    step(m, w, x, y, true, threads, &s);
    step(m, w, x, y, false, threads, &d);
    double ratio = op_sparse_dense_cost_ratio((size_t)(0.1 * F * UNITS), N, F, UNITS);
    printf("sparse: fc1 %s (passes: %llu sparse, %llu GEMM)\n", s.how,
           (unsigned long long)s.passes[EXEC_PATH_SPARSE_W],
           (unsigned long long)s.passes[EXEC_PATH_GEMM]);
    if (kernels_isa_level() >= KERNELS_ISA_AVX2)
        ck_assert_msg(ratio < 1.0, "the cost model predicts %.2f of dense at 90%%", ratio);
    if (ratio >= 1.0) {
        ck_assert_int_eq(s.path, EXEC_PATH_GEMM);
        goto done;
    }
    ck_assert_int_eq(s.path, EXEC_PATH_SPARSE_W);
    ck_assert_uint_eq(s.passes[EXEC_PATH_SPARSE_W], 2); /* forward and backward */
    ck_assert_uint_eq(s.passes[EXEC_PATH_GEMM], 0);
    const char *want = "sparse path, density 0.10, predicted ";
    ck_assert_msg(strncmp(s.how, want, strlen(want)) == 0, "%s", s.how);
    ck_assert_int_eq(d.path, -1); /* no exec_set_sparsity: the GEMMs, untold */
    ck_assert_msg(fabs(s.loss - d.loss) <= 1e-5 * fabs(d.loss), "loss %.9g against %.9g", s.loss,
                  d.loss);
    close_to("output", s.out, d.out, (size_t)N * UNITS, 1e-5);
    close_to("data gradient", s.din, d.din, (size_t)N * F, 1e-5);
    close_to("bias gradient", s.db, d.db, UNITS, 1e-5);
    /* the weight gradient: zero where pruned; where kept, the dense path's,
     * and dout^T in in double within (t + 2) u sum |terms| (dout: the loss's
     * gradient, recomputed here from the output) */
    double *p = malloc(sizeof(double) * N * UNITS);
    for (int i = 0; i < N; i++) { /* softmax - one-hot, over N */
        double mx = -INFINITY, sum = 0.0;
        for (int o = 0; o < UNITS; o++)
            mx = fmax(mx, s.out[(size_t)i * UNITS + o]);
        for (int o = 0; o < UNITS; o++)
            sum += p[(size_t)i * UNITS + o] = exp(s.out[(size_t)i * UNITS + o] - mx);
        for (int o = 0; o < UNITS; o++)
            p[(size_t)i * UNITS + o] = (p[(size_t)i * UNITS + o] / sum - (o == y[i])) / N;
    }
    const float *wf = w[m->layers[1].first_tensor];
    size_t kept = 0;
    for (int o = 0; o < UNITS; o++)
        for (int c = 0; c < F; c++) {
            size_t k = (size_t)o * F + c;
            if (wf[k] == 0.0f) {
                ck_check(s.dw[k] == 0.0f, "dW[%d][%d] pruned: %g", o, c, s.dw[k]);
                continue;
            }
            kept++;
            double ref = 0.0, mag = 0.0;
            for (int i = 0; i < N; i++) {
                double in = fmax(x[(size_t)i * F + c], 0.0);
                ref += p[(size_t)i * UNITS + o] * in;
                mag += fabs(p[(size_t)i * UNITS + o] * in);
            }
            /* the loss gradient's own rounding: a few u of each term */
            double tol = (N + 8) * 0x1p-24 * mag + 1e-12;
            ck_check(fabs(s.dw[k] - ref) <= tol, "dW[%d][%d] %.9g, double %.9g (tol %.3g)",
                          o, c, s.dw[k], ref, tol);
            ck_check(fabs(s.dw[k] - d.dw[k]) <= tol + 1e-6 * fabs(ref),
                          "dW[%d][%d] %.9g, the GEMMs' %.9g", o, c, s.dw[k], d.dw[k]);
        }
    ck_assert_msg(kept > 0.08 * F * UNITS && kept < 0.12 * F * UNITS, "%zu kept", kept);
    free(p);
done:
    result_free(&s);
    result_free(&d);
    free(x);
    free(y);
    free_all(m, w);
    model_free(m);
    toml_free(root);
}
END_TEST

START_TEST(dense_weight_stays_dense)
{
    toml_value *root;
    model *m = mlp(&root);
    float **w = weights(m, 0.0);
    float *x = malloc(sizeof(float) * N * F);
    int32_t *y = malloc(sizeof(int32_t) * N);
    batch(x, y, 0.5);
    result s;
    step(m, w, x, y, true, 2, &s);
    printf("dense: fc1 %s\n", s.how);
    ck_assert_int_eq(s.path, EXEC_PATH_GEMM);
    ck_assert_uint_eq(s.passes[EXEC_PATH_SPARSE_W] + s.passes[EXEC_PATH_SPARSE_IN], 0);
    ck_assert_uint_eq(s.passes[EXEC_PATH_GEMM], 2);
    ck_assert_msg(strstr(s.how, "dense path, density 1.00, the sparse kernels predicted ") == s.how,
                  "%s", s.how);
    ck_assert_msg(strstr(s.how, "the input 0.50"), "%s", s.how);
    result_free(&s);
    free(x);
    free(y);
    free_all(m, w);
    model_free(m);
    toml_free(root);
}
END_TEST

static void same_bits(const char *what, const float *a, const float *b, size_t count)
{
    for (size_t k = 0; k < count; k++)
        ck_check(memcmp(&a[k], &b[k], sizeof(float)) == 0, "%s[%zu]: %.9g on 1 thread, "
                      "%.9g on 2", what, k, a[k], b[k]);
}

/* the weight 90% zeros (the sparse weight path), then a dense weight over
 * inputs 98% zero (the input-sparse path where AVX-512 is) */
START_TEST(threads_change_no_bit)
{
    toml_value *root;
    model *m = mlp(&root);
    for (int c = 0; c < 2; c++) {
        float **w = weights(m, c == 0 ? 0.9 : 0.0);
        float *x = malloc(sizeof(float) * N * F);
        int32_t *y = malloc(sizeof(int32_t) * N);
        batch(x, y, c == 0 ? 0.5 : 0.98);
        result a, b;
        step(m, w, x, y, true, 1, &a);
        step(m, w, x, y, true, 2, &b);
        printf("%s: fc1 %s\n", c == 0 ? "90% zero weight" : "98% zero input", b.how);
        ck_assert_int_eq(a.path, b.path);
        if (c == 1 && kernels_isa_level() >= KERNELS_ISA_AVX512) {
            ck_assert_int_eq(b.path, EXEC_PATH_SPARSE_IN);
            ck_assert_uint_eq(b.passes[EXEC_PATH_SPARSE_IN], 2);
        }
        if (a.path != EXEC_PATH_GEMM) {
            same_bits("output", a.out, b.out, (size_t)N * UNITS);
            same_bits("data gradient", a.din, b.din, (size_t)N * F);
            same_bits("weight gradient", a.dw, b.dw, (size_t)F * UNITS);
            same_bits("bias gradient", a.db, b.db, UNITS);
        }
        /* the input-sparse path against the GEMMs */
        if (c == 1) {
            result d;
            step(m, w, x, y, false, 2, &d);
            close_to("input-sparse output", b.out, d.out, (size_t)N * UNITS, 1e-5);
            close_to("input-sparse data gradient", b.din, d.din, (size_t)N * F, 1e-5);
            close_to("input-sparse weight gradient", b.dw, d.dw, (size_t)F * UNITS, 1e-5);
            result_free(&d);
        }
        result_free(&a);
        result_free(&b);
        free(x);
        free(y);
        free_all(m, w);
    }
    model_free(m);
    toml_free(root);
}
END_TEST

/* Steps with new values at the same kept positions (refreshed in place),
 * then a changed pattern (made again), then an evaluation with the step
 * number unchanged: each forward pass the GEMMs' on the weights then.
 * Run _i 0 counts the weight's zeros at each pass; run 1 knows the masks'
 * schedule (gmp, a change after update 1, before step 2's pass) and counts
 * them at step 0 and step 2 alone, gathering the kept values between. */
START_TEST(weights_change_between_steps)
{
    toml_value *root;
    model *m = mlp(&root);
    float **w = weights(m, 0.9), **g = grads(m);
    float *x = malloc(sizeof(float) * N * F), *ref = malloc(sizeof(float) * N * UNITS);
    int32_t *y = malloc(sizeof(int32_t) * N);
    batch(x, y, 0.5);
    exec e, d;
    char err[256];
    kernels_set_threads(2);
    ck_assert_msg(exec_init(&e, m, N, 2, w, g, err, sizeof(err)) == 0, "%s", err);
    ck_assert_msg(exec_init(&d, m, N, 2, w, g, err, sizeof(err)) == 0, "%s", err);
    float level[2] = {0.9f, 0.0f};
    ck_assert_msg(exec_set_sparsity(&e, level, true, err, sizeof(err)) == 0, "%s", err);
    sparse_config masks = {.type = SPARSE_GMP, .schedule = {.freq = 2, .start = 0, .stop = 0}};
    ck_assert(!sparse_config_updates(&masks, 1) && sparse_config_updates(&masks, 2) &&
              !sparse_config_updates(&masks, 3));
    if (_i == 1)
        exec_set_mask_schedule(&e, &masks);
    float *wf = w[m->layers[1].first_tensor];
    size_t elems = (size_t)F * UNITS;
    for (int st = 0; st < 4; st++) {
        if (st == 1) /* new values, same pattern */
            for (size_t k = 0; k < elems; k++)
                wf[k] *= -1.5f;
        if (st == 2) /* a mask's step: some kept weights pruned, as many others kept */
            for (size_t k = 0; k + 1 < elems; k += 97)
                if ((wf[k] == 0.0f) != (wf[k + 1] == 0.0f)) {
                    float v = wf[k];
                    wf[k] = wf[k + 1];
                    wf[k + 1] = v;
                }
        if (st == 3) /* an evaluation after the update, under the same step number */
            for (size_t k = 0; k < elems; k++)
                wf[k] *= 0.5f;
        int64_t num = st < 3 ? st : 2;
        bool training = st < 3;
        for (int i = 0; i < m->nlayers; i++)
            exec_forward(&d, i, x, num, training);
        memcpy(ref, exec_output(&d, 1, x), sizeof(float) * N * UNITS);
        for (int i = 0; i < m->nlayers; i++)
            exec_forward(&e, i, x, num, training);
        char how[320];
        if (op_sparse_dense_cost_ratio(elems / 10, N, F, UNITS) < 1.0)
            ck_assert_int_eq(exec_dense_path(&e, 1, how, sizeof(how)), EXEC_PATH_SPARSE_W);
        char what[64];
        snprintf(what, sizeof(what), "step %d output", st);
        close_to(what, exec_output(&e, 1, x), ref, (size_t)N * UNITS, 1e-5);
    }
    ck_assert_uint_eq(e.weights_counted, _i == 1 ? 2 : 4);
    exec_deinit(&e);
    exec_deinit(&d);
    kernels_set_threads(1);
    free(x);
    free(ref);
    free(y);
    free_all(m, w);
    free_all(m, g);
    model_free(m);
    toml_free(root);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sparse-exec");
    TCase *tc = tcase_create("paths");
    tcase_set_timeout(tc, 540);
    tcase_add_test(tc, sparse_weight_equals_dense);
    tcase_add_test(tc, dense_weight_stays_dense);
    tcase_add_test(tc, threads_change_no_bit);
    tcase_add_loop_test(tc, weights_change_between_steps, 0, 2);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
