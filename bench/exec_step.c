/* One replica's step in-process (the layer executor alone, no daemons).
 * First, where the processor computes in bfloat16, the MLP of
 * bench/vs_pytorch.sh in mixed precision with the kernels' own passes for
 * its GEMMs against each GEMM rounding and reordering its operands itself
 * (kernels_bf16_own_passes):
 *   BENCH dense_bf16_passes_step_mlp2048 <ratio> of_gemm_own_rounding
 * Then the blocked groups (exec.c: chains of convolutions, norms, relus and
 * adds kept in oneDNN's blocked layout, aBcd16b with AVX-512 and aBcd8b
 * with AVX2: run it under ONEDNN_MAX_CPU_ISA=AVX2 for the latter) against every tensor plain, on the
 * same model, batch and threads, their steps interleaved so that the
 * host's drift falls on both. Prints, per model and precision,
 *   BENCH blocked_groups_step_<model>[_bf16] <ratio> of_plain_layouts
 * (the median blocked step over the median plain one) and the layout
 * conversions' share of each. Two threads, as a wse-node on a 2-core host.
 *   bench_exec_step [STEPS [MODEL]]   (default 40 steps of each, every model) */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "exec.h"
#include "kernels.h"
#include "model.h"
#include "op_conv2d.h"
#include "rng.h"
#include "toml.h"

static double now(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* The [model] of a job's text */
static model *compile(const char *text, const char *name)
{
    char err[512];
    toml_value *root = toml_parse(text, strlen(text), name, err, sizeof(err));
    model *m = root ? model_compile_document(root, err, sizeof(err)) : NULL;
    if (!m) {
        fprintf(stderr, "bench_exec_step: %s: %s\n", name, err);
        exit(1);
    }
    toml_free(root);
    return m;
}

/* The [model] of an example job, its input side replaced where side > 0 */
static model *load(const char *file, int side)
{
    char path[1024];
    snprintf(path, sizeof(path), "%s/%s", EXAMPLES_DIR, file);
    FILE *f = fopen(path, "r");
    if (!f) {
        fprintf(stderr, "bench_exec_step: %s: cannot open it\n", path);
        exit(1);
    }
    static char text[1 << 16], out[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    snprintf(out, sizeof(out), "%s", text);
    char *at = side > 0 ? strstr(text, "input_shape = [") : NULL;
    if (at) { /* input_shape = [C, H, W] -> [C, side, side] */
        int c = atoi(at + strlen("input_shape = ["));
        char *end = strchr(at, ']');
        snprintf(out, sizeof(out), "%.*sinput_shape = [%d, %d, %d]%s", (int)(at - text), text, c,
                 side, side, end + 1);
    }
    return compile(out, file);
}

typedef struct net {
    const model *m;
    exec e;
    float **w, **g;
    double *t;      /* each step's seconds */
    double *lt;     /* per layer: forward and backward seconds over the steps */
    double layout;  /* layout conversions' seconds, over the steps */
    int passes;     /* kernels_bf16_own_passes while it steps */
} net;

static void net_init(net *t, const model *m, int n, int steps)
{
    t->m = m;
    t->w = calloc((size_t)m->ntensors, sizeof(float *));
    t->g = calloc((size_t)m->ntensors, sizeof(float *));
    t->t = calloc((size_t)steps, sizeof(double));
    t->lt = calloc(2 * (size_t)m->nlayers, sizeof(double));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        t->w[i] = malloc(mt->elems * sizeof(float));
        t->g[i] = calloc(mt->elems, sizeof(float));
        const char *dot = strrchr(mt->name, '.');
        const model_layer *l = &m->layers[mt->layer];
        bool norm = l->type == LAYER_BATCH_NORM || l->type == LAYER_GROUP_NORM;
        double fan_in = (double)mt->elems / (double)mt->dims[0];
        for (uint64_t k = 0; k < mt->elems; k++)
            t->w[i][k] = strcmp(dot, ".running_var") == 0 || (norm && strcmp(dot, ".weight") == 0)
                             ? 1.0f
                         : strcmp(dot, ".bias") == 0 || strcmp(dot, ".running_mean") == 0
                             ? 0.0f
                             : (float)((2.0 * rng_uniform(7, i, k) - 1.0) * sqrt(3.0 / fan_in));
    }
    char err[256];
    if (exec_init(&t->e, m, n, 2, t->w, t->g, err, sizeof(err)) < 0) {
        fprintf(stderr, "bench_exec_step: %s\n", err);
        exit(1);
    }
    t->e.seed = 11;
    t->passes = 1;
}

static void net_free(net *t)
{
    exec_deinit(&t->e);
    for (int i = 0; i < t->m->ntensors; i++) {
        free(t->w[i]);
        free(t->g[i]);
    }
    free(t->w);
    free(t->g);
    free(t->t);
    free(t->lt);
}

/* A training step of t: forward, loss, backward (the weights stay) */
static void net_step(net *t, const float *x, const int32_t *y, int64_t step, int n)
{
    kernels_bf16_own_passes(t->passes);
    double l0 = kernels_layout_seconds(), t0 = now();
    for (int i = 0; i < t->m->nlayers; i++) {
        double a = now();
        exec_forward(&t->e, i, x, step, true);
        t->lt[2 * i] += now() - a;
    }
    exec_loss(&t->e, x, y, 1.0f / (float)n);
    for (int i = t->m->nlayers - 1; i >= 0; i--) {
        double a = now();
        exec_backward(&t->e, i, x, step);
        t->lt[2 * i + 1] += now() - a;
    }
    t->t[step] = now() - t0;
    t->layout += kernels_layout_seconds() - l0;
}

static int cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp);
    return v[n / 2];
}

/* Steps of b and of p interleaved, the order alternating: their median
 * steps and layout seconds a step */
static void interleave(net *b, net *p, int n, int classes, int steps, double *tb, double *tp,
                       double *lb, double *lp)
{
    uint64_t in = model_shape_elems(&b->m->input);
    float *x = malloc((size_t)n * in * sizeof(float));
    int32_t *y = malloc((size_t)n * b->e.label_elems * sizeof(int32_t));
    for (uint64_t k = 0; k < (uint64_t)n * in; k++)
        x[k] = (float)rng_uniform(3, 0, k);
    for (uint64_t k = 0; k < (uint64_t)n * b->e.label_elems; k++)
        y[k] = (int32_t)(rng_hash(4, 0, k) % (uint64_t)classes);
    for (int s = 0; s < 3; s++) { /* first use: primitives made, pages touched */
        net_step(b, x, y, 0, n);
        net_step(p, x, y, 0, n);
    }
    b->layout = p->layout = 0;
    memset(b->lt, 0, 2 * (size_t)b->m->nlayers * sizeof(double));
    memset(p->lt, 0, 2 * (size_t)p->m->nlayers * sizeof(double));
    for (int64_t s = 0; s < steps; s++) {
        net_step(s % 2 ? p : b, x, y, s, n);
        net_step(s % 2 ? b : p, x, y, s, n);
    }
    kernels_bf16_own_passes(1);
    *lb = b->layout / steps, *lp = p->layout / steps;
    *tb = median(b->t, steps), *tp = median(p->t, steps);
    free(x);
    free(y);
}

static void run(const char *name, const char *file, int side, int n, int classes, bool mixed,
                int steps)
{
    model *mb = load(file, side), *mp = load(file, side);
    mb->mixed_precision = mp->mixed_precision = mixed;
    mp->blocked = false;
    net b, p;
    net_init(&b, mb, n, steps);
    net_init(&p, mp, n, steps);
    double tb, tp, lb, lp;
    interleave(&b, &p, n, classes, steps, &tb, &tp, &lb, &lp);
    printf("%s%s: %d of %d layers' outputs in aBcd%db (%s); step %.2f ms (layout %.2f ms a step) "
           "against %.2f ms (layout %.2f) with every tensor plain\n",
           name, mixed ? " in mixed precision" : "", b.e.blocked, mb->nlayers,
           op_conv2d_block_size(), kernels_isa_name(kernels_isa_level()), 1e3 * tb, 1e3 * lb,
           1e3 * tp, 1e3 * lp);
    printf("BENCH blocked_groups_step_%s%s %.3f of_plain_layouts\n", name, mixed ? "_bf16" : "",
           tb / tp);
    if (getenv("BENCH_LAYERS")) /* each layer's passes, blocked against plain */
        for (int i = 0; i < mb->nlayers; i++)
            for (int k = 0; k < 2; k++)
                if (b.lt[2 * i + k] + p.lt[2 * i + k] > 0.02 * steps * tp)
                    printf("  %-16s %-8s %s %.3f ms against %.3f\n", mb->layers[i].name,
                           k ? "backward" : "forward", b.e.blk[i] ? "blocked" : "plain  ",
                           1e3 * b.lt[2 * i + k] / steps, 1e3 * p.lt[2 * i + k] / steps);
    fflush(stdout);
    net_free(&b);
    net_free(&p);
    model_free(mb);
    model_free(mp);
}

/* The MLP of bench/vs_pytorch.sh in mixed precision (784-2048-2048-10,
 * batch 1024): the kernels' own passes for its GEMMs (a dense layer's one
 * pass over dY, B put in the matmul's layout by the kernels) against each
 * GEMM rounding and reordering its operands itself */
static void run_mlp(int steps)
{
    static const char text[] = "[model]\ninput_shape = [1, 28, 28]\n"
                               "loss = \"softmax_cross_entropy\"\nmixed_precision = true\n"
                               "[[model.layers]]\nname = \"flatten\"\ntype = \"flatten\"\n"
                               "[[model.layers]]\nname = \"fc1\"\ntype = \"dense\"\nunits = 2048\n"
                               "[[model.layers]]\nname = \"relu1\"\ntype = \"relu\"\n"
                               "[[model.layers]]\nname = \"fc2\"\ntype = \"dense\"\nunits = 2048\n"
                               "[[model.layers]]\nname = \"relu2\"\ntype = \"relu\"\n"
                               "[[model.layers]]\nname = \"fc3\"\ntype = \"dense\"\nunits = 10\n";
    model *mo = compile(text, "mlp2048"), *mf = compile(text, "mlp2048");
    net o, f;
    net_init(&o, mo, 1024, steps);
    net_init(&f, mf, 1024, steps);
    f.passes = 0;
    double to, tf, lo, lf;
    interleave(&o, &f, 1024, 10, steps, &to, &tf, &lo, &lf);
    printf("mlp2048 in mixed precision, batch 1024: step %.2f ms (rounding and layouts %.2f ms a "
           "step) against %.2f ms (%.2f) with each GEMM rounding and reordering its operands\n",
           1e3 * to, 1e3 * lo, 1e3 * tf, 1e3 * lf);
    printf("BENCH dense_bf16_passes_step_mlp2048 %.3f of_gemm_own_rounding\n", to / tf);
    fflush(stdout);
    net_free(&o);
    net_free(&f);
    model_free(mo);
    model_free(mf);
}

int main(int argc, char **argv)
{
    int steps = argc > 1 ? atoi(argv[1]) : 40;
    if (steps < 2)
        steps = 2;
    kernels_set_threads(2);
    const char *only = argc > 2 ? argv[2] : NULL; /* a model's name: that one alone */
    if (kernels_bf16_compute() && (!only || strcmp(only, "mlp2048") == 0))
        run_mlp(steps);
    for (int mixed = 0; mixed <= 1; mixed++) {
        if (!only || strcmp(only, "resnet_small") == 0)
            run("resnet_small", "resnet_small.toml", 0, 32, 10, mixed, steps);
        if (!only || strcmp(only, "unet128") == 0)
            run("unet128", "unet.toml", 128, 4, 2, mixed, steps / 4 > 2 ? steps / 4 : 2);
    }
    return 0;
}
