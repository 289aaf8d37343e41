/* The 3-D convolutions of a 3D U-Net's first level (the SKM-TEA one:
 * 1 -> 32 and 32 -> 32 channels, 3x3x3, padding 1, on a 64^3 volume,
 * batch 1), forward + backward, as bench/conv3d_vs_torch.sh compares them
 * with PyTorch: one line per shape and precision,
 *   TIME conv3d_<shape> <f32|bf16|vol2col> fwd <ms> bwd <ms> total <ms> median <ms>
 * (the fastest of the timed rounds, the first round only warming up: the
 * host is shared, and other work only ever makes a round slower; and the
 * rounds' median total), and
 * how each piece runs. The first layer's input gradient is not computed
 * (its input is the data), as PyTorch does not for an input without
 * requires_grad.
 *   bench_conv3d [threads] [rounds] [size] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "op_conv3d.h"

typedef struct shape {
    const char *name;
    int c, k;
    int din; /* the input gradient is wanted */
} shape;

static const shape shapes[] = {
    {"c1k32", 1, 32, 0},
    {"c32k32", 32, 32, 1},
};

/* Times forward + backward of p in the precision asked for: the fastest
 * round's into fwd and bwd, the median total into med (seconds). */
static void time_it(const op_conv3d_params *p, int din_wanted, int bf16, int rounds, double *fwd,
                    double *bwd, double *med)
{
    size_t nx = (size_t)p->n * p->c * p->d * p->h * p->w;
    size_t nw = (size_t)p->k * p->c * p->kd * p->kh * p->kw;
    size_t ny = (size_t)p->n * p->k * op_conv3d_out_d(p) * op_conv3d_out_h(p) * op_conv3d_out_w(p);
    float *x = bench_alloc(nx, 1), *w = bench_alloc(nw, 2), *b = bench_alloc(p->k, 3);
    float *y = bench_alloc(ny, 4), *dy = bench_alloc(ny, 5), *dx = bench_alloc(nx, 6);
    float *dw = bench_alloc(nw, 7), *db = bench_alloc(p->k, 8);
    size_t wsb = bf16 ? op_conv3d_bf16_workspace(p) : op_conv3d_workspace(p);
    float *ws = bench_alloc(wsb / sizeof(float) + 16, 9);
    double *tt = calloc(rounds, sizeof(double));
    *fwd = *bwd = 1e30;
    for (int r = 0; r <= rounds; r++) {
        double t0 = bench_now();
        if (bf16)
            op_conv3d_forward_bf16(y, x, w, b, p, ws, wsb);
        else
            op_conv3d_forward(y, x, w, b, p, ws, wsb);
        double t1 = bench_now();
        if (bf16)
            op_conv3d_backward_bf16(din_wanted ? dx : NULL, dw, db, dy, x, w, p, ws, wsb);
        else
            op_conv3d_backward(din_wanted ? dx : NULL, dw, db, dy, x, w, p, ws, wsb);
        double t2 = bench_now();
        if (r > 0 && t2 - t0 < *fwd + *bwd) {
            *fwd = t1 - t0;
            *bwd = t2 - t1;
        }
        if (r > 0)
            tt[r - 1] = t2 - t0;
    }
    *med = bench_median(tt, rounds);
    free(x), free(w), free(b), free(y), free(dy), free(dx), free(dw), free(db), free(ws);
    free(tt);
}

int main(int argc, char **argv)
{
    int threads = argc > 1 ? atoi(argv[1]) : 2;
    int rounds = argc > 2 ? atoi(argv[2]) : 5;
    int size = argc > 3 ? atoi(argv[3]) : 64;
    kernels_set_threads(threads);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        const shape *s = &shapes[i];
        op_conv3d_params p = {.n = 1, .c = s->c, .d = size, .h = size, .w = size, .k = s->k,
                              .kd = 3, .kh = 3, .kw = 3, .pad_d = 1, .pad_h = 1, .pad_w = 1};
        static const char *const kinds[] = {"f32", "bf16", "vol2col"};
        for (int kind = 0; kind < 3; kind++) {
            char how[512];
            kern__conv_set_path(kind == 2 ? KERN__CONV_IM2COL : KERN__CONV_BLOCKED);
            op_conv3d_describe(&p, kind == 1, how, sizeof(how));
            printf("conv3d_%s_%d %s: %s\n", s->name, size, kinds[kind], how);
            double f, b, m;
            time_it(&p, s->din, kind == 1, rounds, &f, &b, &m);
            printf("TIME conv3d_%s_%d %s fwd %.2f bwd %.2f total %.2f median %.2f\n", s->name,
                   size, kinds[kind], f * 1e3, b * 1e3, (f + b) * 1e3, m * 1e3);
            fflush(stdout);
        }
        kern__conv_set_path(KERN__CONV_BLOCKED);
    }
    return 0;
}
