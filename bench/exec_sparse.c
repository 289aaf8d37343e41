/* The executor's dense layers on the sparse kernels (exec_sparse.c)
 * against the GEMMs, one replica's training step in-process on 2 threads,
 * the two executors' steps interleaved so that the host's drift falls on
 * both, medians:
 *   BENCH exec_mlp_sparse90_step_vs_dense <ratio> of_dense
 * an MLP 4096-4096-4096-4096-1000 (relus between), batch 256, every dense
 * weight 90% zeros, with exec_set_sparsity and a static mask's schedule
 * (exec_set_mask_schedule: the zeros counted at the first step, the kept
 * values gathered anew each step, as Weight Streaming brings them anew
 * each step) over the same step on the GEMMs;
 *   BENCH exec_relu_input<Z>_step_vs_dense <ratio> of_dense
 * natural sparsity: a relu then a 4096 x 4096 dense layer, batch 256, the
 * relu's output Z% zeros (98 and 50), the input-sparse path where the
 * executor takes it over the GEMMs;
 *   BENCH conv3x3_sparse90_im2col_fwd_vs_onednn <ratio> of_onednn
 * a 3x3 convolution (256 -> 256 channels, 14 x 14, batch 8, padding 1) at
 * 90% zero weights, lowered to columns and run through the sparse kernel,
 * over op_conv2d_forward (oneDNN) on the dense weight. Beside the first:
 *   BENCH exec_mlp_sparse90_step_counted_vs_dense <ratio> of_dense
 * the same with no schedule known: the weights' zeros counted each step;
 *   BENCH exec_mlp_sparse90_step_measured_earlier_vs_dense <ratio> of_dense
 * the same sparse step once its weights were measured in an earlier call
 * of the same step (what the per-step gathering costs).
 *   bench_exec_sparse [STEPS]   (default 8 of each) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec.h"
#include "kernels.h"
#include "model.h"
#include "op_conv2d.h"
#include "op_sparse_dense.h"
#include "rng.h"
#include "toml.h"

enum { N = 256, THREADS = 2 };

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int k)
{
    qsort(v, (size_t)k, sizeof(double), cmp);
    return k % 2 ? v[k / 2] : 0.5 * (v[k / 2 - 1] + v[k / 2]);
}

static model *compile(const char *text)
{
    char err[512];
    toml_value *root = toml_parse(text, strlen(text), "bench.toml", err, sizeof(err));
    model *m = root ? model_compile_document(root, err, sizeof(err)) : NULL;
    if (!m) {
        fprintf(stderr, "bench_exec_sparse: %s\n", err);
        exit(1);
    }
    toml_free(root);
    return m;
}

/* Every dense weight with `zeros` of it exactly zero, He-uniform elsewhere */
static float **weights(const model *m, double zeros)
{
    float **w = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        w[i] = calloc(mt->elems, sizeof(float));
        if (mt->ndim != 2)
            continue;
        double a = sqrt(6.0 / (double)mt->dims[1]);
        for (uint64_t k = 0; k < mt->elems; k++)
            w[i][k] = rng_uniform(5, (uint64_t)i, k) < zeros
                          ? 0.0f
                          : (float)((2.0 * rng_uniform(3, (uint64_t)i, k) - 1.0) * a) + 1e-7f;
    }
    return w;
}

static float **zeros_like(const model *m)
{
    float **g = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++)
        g[i] = calloc(m->tensors[i].elems, sizeof(float));
    return g;
}

static void step(exec *e, const float *x, const int32_t *y, int64_t s)
{
    const model *m = e->m;
    for (int i = 0; i < m->nlayers; i++)
        exec_forward(e, i, x, s, true);
    exec_loss(e, x, y, 1.0f / N);
    for (int i = m->nlayers - 1; i >= 0; i--)
        if (m->layers[i].inputs[0] >= 0 || m->layers[i].ntensors) /* not a relu on the input */
            exec_backward(e, i, x, s);
}

static void say_path(void *ctx, int layer, const char *line)
{
    const exec *e = ctx;
    printf("  %s: %s\n", e->m->layers[layer].name, line);
}

/* The median step of m with and without exec_set_sparsity, interleaved;
 * returns sparse over dense */
static double compare(const char *name, const model *m, double wzeros, double xzeros, int steps,
                      double *kept_ratio, double *counted_ratio)
{
    float **w = weights(m, wzeros), **g = zeros_like(m);
    size_t in = model_shape_elems(&m->input);
    float *x = malloc(sizeof(float) * N * in);
    int32_t *y = malloc(sizeof(int32_t) * N);
    for (size_t k = 0; k < (size_t)N * in; k++)
        x[k] = rng_uniform(9, 0, k) < xzeros ? -1.0f : (float)rng_uniform(8, 0, k);
    int classes = (int)model_shape_elems(&m->layers[m->nlayers - 1].out);
    for (int i = 0; i < N; i++)
        y[i] = (int32_t)(rng_uniform(10, 0, (uint64_t)i) * classes);
    exec sp, de, sc;
    char err[256];
    float level[64];
    for (int i = 0; i < m->ntensors && i < 64; i++)
        level[i] = m->tensors[i].ndim == 2 && wzeros > 0 ? (float)wzeros : 0.0f;
    if (exec_init(&sp, m, N, THREADS, w, g, err, sizeof(err)) < 0 ||
        exec_init(&de, m, N, THREADS, w, g, err, sizeof(err)) < 0 ||
        exec_init(&sc, m, N, THREADS, w, g, err, sizeof(err)) < 0 ||
        exec_set_sparsity(&sp, level, true, err, sizeof(err)) < 0 ||
        exec_set_sparsity(&sc, level, true, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench_exec_sparse: %s\n", err);
        exit(1);
    }
    sparse_config masks = {.type = SPARSE_STATIC};
    exec_set_mask_schedule(&sp, &masks);
    sp.path_note = say_path;
    sp.path_ctx = &sp;
    printf("%s:\n", name);
    double *ts = calloc((size_t)steps, sizeof(double)), *td = calloc((size_t)steps, sizeof(double));
    double *tk = calloc((size_t)steps, sizeof(double)), *tc = calloc((size_t)steps, sizeof(double));
    step(&sp, x, y, 0); /* warm: pages, the first compressed form */
    step(&de, x, y, 0);
    step(&sc, x, y, 0);
    for (int s = 1; s <= steps; s++) { /* a new step number: the weights measured again */
        double t0 = now();
        step(&sp, x, y, s);
        double t1 = now();
        step(&de, x, y, s);
        double t2 = now();
        step(&sp, x, y, s); /* the same step again: nothing measured, the values kept */
        double t3 = now();
        step(&sc, x, y, s);
        ts[s - 1] = t1 - t0;
        td[s - 1] = t2 - t1;
        tk[s - 1] = t3 - t2;
        tc[s - 1] = now() - t3;
    }
    double ms = median(ts, steps), md = median(td, steps), mk = median(tk, steps);
    double mc = median(tc, steps);
    printf("  step: %.1f ms on the executor's paths (%.1f ms with the zeros counted each step, "
           "%.1f ms with the kept values gathered in an earlier step), %.1f ms on the GEMMs "
           "(medians of %d); passes: %llu sparse weight, %llu sparse input, %llu GEMM\n",
           ms * 1e3, mc * 1e3, mk * 1e3, md * 1e3, steps, (unsigned long long)sp.dense_passes[EXEC_PATH_SPARSE_W],
           (unsigned long long)sp.dense_passes[EXEC_PATH_SPARSE_IN],
           (unsigned long long)sp.dense_passes[EXEC_PATH_GEMM]);
    if (kept_ratio)
        *kept_ratio = mk / md;
    if (counted_ratio)
        *counted_ratio = mc / md;
    free(tk);
    free(tc);
    exec_deinit(&sc);
    exec_deinit(&sp);
    exec_deinit(&de);
    for (int i = 0; i < m->ntensors; i++) {
        free(w[i]);
        free(g[i]);
    }
    free(w);
    free(g);
    free(x);
    free(y);
    free(ts);
    free(td);
    return ms / md;
}

/* (n, c, h, w) -> rows (n * oh * ow) of c * 9 columns, padding 1, stride 1 */
static void im2col_rows(float *col, const float *img, int n, int c, int h, int w)
{
    for (int s = 0; s < n; s++)
        for (int i = 0; i < h; i++)
            for (int j = 0; j < w; j++) {
                float *row = col + (((size_t)s * h + i) * w + j) * (size_t)c * 9;
                for (int ch = 0; ch < c; ch++)
                    for (int r = 0; r < 3; r++)
                        for (int q = 0; q < 3; q++) {
                            int y = i + r - 1, xx = j + q - 1;
                            row[ch * 9 + r * 3 + q] =
                                y < 0 || y >= h || xx < 0 || xx >= w
                                    ? 0.0f
                                    : img[(((size_t)s * c + ch) * h + y) * w + xx];
                        }
            }
}

static double conv_compare(int steps)
{
    enum { CN = 8, C = 256, K = 256, H = 14, W = 14 };
    op_conv2d_params p = {.n = CN, .c = C, .h = H, .w = W, .k = K, .r = 3, .s = 3,
                          .pad_h = 1, .pad_w = 1};
    size_t nin = (size_t)CN * C * H * W, nw = (size_t)K * C * 9, rows = (size_t)CN * H * W;
    float *in = malloc(sizeof(float) * nin), *wt = malloc(sizeof(float) * nw);
    float *out = malloc(sizeof(float) * rows * K), *ref = malloc(sizeof(float) * rows * K);
    float *col = malloc(sizeof(float) * rows * C * 9), *o2 = malloc(sizeof(float) * rows * K);
    for (size_t k = 0; k < nin; k++)
        in[k] = (float)rng_uniform(1, 0, k);
    for (size_t k = 0; k < nw; k++)
        wt[k] = rng_uniform(2, 0, k) < 0.9 ? 0.0f : (float)(rng_uniform(3, 0, k) - 0.5);
    char err[160];
    sparse_w *sw = sparse_w_new(wt, NULL, K, C * 9, err, sizeof(err));
    size_t wsb = op_conv2d_workspace(&p), sws = op_sparse_dense_workspace(sw, (int)rows);
    void *ws = malloc(wsb), *sws_p = malloc(sws);
    double *ts = calloc((size_t)steps + 1, sizeof(double)), *td = calloc((size_t)steps + 1, sizeof(double));
    for (int s = 0; s <= steps; s++) {
        double t0 = now();
        im2col_rows(col, in, CN, C, H, W);
        op_sparse_dense_forward(o2, col, sw, NULL, (int)rows, sws_p, sws);
        for (int b = 0; b < CN; b++) /* (n, oh*ow, k) -> (n, k, oh*ow) */
            for (int q = 0; q < H * W; q++)
                for (int k = 0; k < K; k++)
                    out[((size_t)b * K + k) * H * W + q] = o2[((size_t)b * H * W + q) * K + k];
        double t1 = now();
        op_conv2d_forward(ref, in, wt, NULL, &p, ws, wsb);
        double t2 = now();
        if (s) { /* the first round warms */
            ts[s - 1] = t1 - t0;
            td[s - 1] = t2 - t1;
        }
    }
    double err_max = 0.0, big = 0.0;
    for (size_t k = 0; k < rows * K; k++) {
        err_max = fmax(err_max, fabs((double)out[k] - ref[k]));
        big = fmax(big, fabs(ref[k]));
    }
    double ms = median(ts, steps), md = median(td, steps);
    printf("conv 3x3 %d -> %d, %d x %d, batch %d, 90%% zero weight: im2col + sparse kernel %.2f ms "
           "(the sparse product alone predicted %.2f of the dense GEMM for the forward and "
           "backward), oneDNN %.2f ms; largest difference %.2g of %.2g\n", C, K, H, W, CN,
           ms * 1e3, op_sparse_dense_cost_ratio(sw->nnz, (int)rows, C * 9, K), md * 1e3,
           err_max, big);
    if (err_max > 1e-4 * big) {
        fprintf(stderr, "bench_exec_sparse: the lowered sparse convolution disagrees with oneDNN\n");
        exit(1);
    }
    sparse_w_free(sw);
    free(in), free(wt), free(out), free(ref), free(col), free(o2), free(ws), free(sws_p);
    free(ts), free(td);
    return ms / md;
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 8;
    if (steps < 1)
        steps = 1;
    kernels_set_threads(THREADS);
    model *mlp = compile("[model]\ninput_shape = [4096]\nloss = \"softmax_cross_entropy\"\n"
                         "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 4096\n"
                         "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
                         "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 4096\n"
                         "[[model.layers]]\nname = \"r2\"\ntype = \"relu\"\n"
                         "[[model.layers]]\nname = \"fc3\"\ntype = \"dense\"\nunits = 4096\n"
                         "[[model.layers]]\nname = \"r3\"\ntype = \"relu\"\n"
                         "[[model.layers]]\nname = \"fc4\"\ntype = \"dense\"\nunits = 1000\n");
    double rk = 0.0, rc = 0.0;
    double r = compare("MLP 4096-4096-4096-4096-1000, batch 256, dense weights 90% zeros", mlp,
                       0.9, 0.0, steps, &rk, &rc);
    printf("BENCH exec_mlp_sparse90_step_vs_dense %.3f of_dense\n", r);
    printf("BENCH exec_mlp_sparse90_step_counted_vs_dense %.3f of_dense\n", rc);
    printf("BENCH exec_mlp_sparse90_step_measured_earlier_vs_dense %.3f of_dense\n", rk);
    model_free(mlp);
    model *relu = compile("[model]\ninput_shape = [4096]\nloss = \"softmax_cross_entropy\"\n"
                          "[[model.layers]]\nname = \"r0\"\ntype = \"relu\"\n"
                          "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 4096\n");
    int zs[2] = {98, 50};
    for (int i = 0; i < 2; i++) {
        char name[128];
        snprintf(name, sizeof(name), "relu -> dense 4096 x 4096, batch 256, the relu's output %d%% "
                 "zeros", zs[i]);
        r = compare(name, relu, 0.0, zs[i] / 100.0, steps, NULL, NULL);
        printf("BENCH exec_relu_input%d_step_vs_dense %.3f of_dense\n", zs[i], r);
    }
    model_free(relu);
    printf("BENCH conv3x3_sparse90_im2col_fwd_vs_onednn %.3f of_onednn\n", conv_compare(steps));
    return 0;
}
