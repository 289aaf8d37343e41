/* im2col + OpenBLAS against oneDNN, forward + backward, for the
 * convolution shapes of examples/unet.toml (512x512, batch 4) and of
 * examples/resnet_small.toml (32x32, batch 32), in one process: oneDNN on
 * the plain layouts (conv_path.c), and on its own layouts with the
 * reorders counted (conv_blocked.c), in float32 and in bfloat16 where the
 * processor has the instructions:
 *   BENCH conv_<shape>_onednn_vs_im2col <ratio> of_im2col
 *   BENCH conv_<shape>_blocked_vs_im2col <ratio> of_im2col
 *   BENCH conv_<shape>_direct_vs_im2col <ratio> of_im2col   (3x3 of 16
 *         outputs or fewer: forward and data gradient computed directly,
 *         conv_direct.c; the weight gradient on im2col in both)
 *   BENCH conv_<shape>_blocked_bf16_vs_im2col <ratio> of_im2col
 * oneDNN is given room for its scratchpad and buffers here even where the
 * planner's workspace would not hold them (the op then keeps im2col); one
 * line per shape says whether the plain path fits, what auto picks with
 * the planner's workspace, and what the default rule picks.
 *   bench_conv_paths [threads] [unet|resnet] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_blas.h"
#include "bench_util.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "op_conv2d.h"
#include "op_conv_transpose2d.h"

/* Timed rounds per path; the first one warms up. */
#define ROUNDS 3

/* One shape: a convolution, or a transposed one when transposed is set
 * (then the fields are op_conv_transpose2d_params' with out_pad 0). */
typedef struct shape {
    const char *model;   /* unet or resnet */
    const char *name;    /* layer(s) it stands for */
    int transposed;
    int n, c, h, w, k, r, s, stride, pad;
    int bias;            /* the layer has a bias */
} shape;

static const shape shapes[] = {
    /* U-Net: both convolutions of a level, the decoder's first (wider
     * input), the head, the up-convolutions */
    {"unet", "enc1_conv1", 0, 4, 3, 512, 512, 8, 3, 3, 1, 1, 0},
    {"unet", "enc1_conv2", 0, 4, 8, 512, 512, 8, 3, 3, 1, 1, 0},
    {"unet", "enc2_conv1", 0, 4, 8, 256, 256, 16, 3, 3, 1, 1, 0},
    {"unet", "enc2_conv2", 0, 4, 16, 256, 256, 16, 3, 3, 1, 1, 0},
    {"unet", "enc3_conv1", 0, 4, 16, 128, 128, 32, 3, 3, 1, 1, 0},
    {"unet", "enc3_conv2", 0, 4, 32, 128, 128, 32, 3, 3, 1, 1, 0},
    {"unet", "enc4_conv1", 0, 4, 32, 64, 64, 64, 3, 3, 1, 1, 0},
    {"unet", "enc4_conv2", 0, 4, 64, 64, 64, 64, 3, 3, 1, 1, 0},
    {"unet", "bottom_conv1", 0, 4, 64, 32, 32, 128, 3, 3, 1, 1, 0},
    {"unet", "bottom_conv2", 0, 4, 128, 32, 32, 128, 3, 3, 1, 1, 0},
    {"unet", "dec4_conv1", 0, 4, 128, 64, 64, 64, 3, 3, 1, 1, 0},
    {"unet", "dec3_conv1", 0, 4, 64, 128, 128, 32, 3, 3, 1, 1, 0},
    {"unet", "dec2_conv1", 0, 4, 32, 256, 256, 16, 3, 3, 1, 1, 0},
    {"unet", "dec1_conv1", 0, 4, 16, 512, 512, 8, 3, 3, 1, 1, 0},
    {"unet", "head", 0, 4, 8, 512, 512, 1, 1, 1, 1, 0, 1},
    {"unet", "up4", 1, 4, 128, 32, 32, 64, 2, 2, 2, 0, 1},
    {"unet", "up3", 1, 4, 64, 64, 64, 32, 2, 2, 2, 0, 1},
    {"unet", "up2", 1, 4, 32, 128, 128, 16, 2, 2, 2, 0, 1},
    {"unet", "up1", 1, 4, 16, 256, 256, 8, 2, 2, 2, 0, 1},
    /* resnet_small at its training batch */
    {"resnet", "stem", 0, 32, 3, 32, 32, 16, 3, 3, 1, 1, 0},
    {"resnet", "b1_conv", 0, 32, 16, 32, 32, 16, 3, 3, 1, 1, 0},
    {"resnet", "b2_conv1", 0, 32, 16, 32, 32, 32, 3, 3, 2, 1, 0},
    {"resnet", "b2_conv2", 0, 32, 32, 16, 16, 32, 3, 3, 1, 1, 0},
    {"resnet", "b2_down", 0, 32, 16, 32, 32, 32, 1, 1, 2, 0, 0},
    {"resnet", "b3_conv1", 0, 32, 32, 16, 16, 64, 3, 3, 2, 1, 0},
    {"resnet", "b3_conv2", 0, 32, 64, 8, 8, 64, 3, 3, 1, 1, 0},
    {"resnet", "b3_down", 0, 32, 32, 16, 16, 64, 1, 1, 2, 0, 0},
};

/* The tensors of one shape. */
typedef struct run {
    const shape *sh;
    op_conv2d_params p;             /* when !transposed */
    op_conv_transpose2d_params q;   /* when transposed */
    float *x, *w, *b, *y, *dy, *dx, *dw, *db;
    float *ws;
    size_t ws_bytes;                /* the planner's size */
    size_t room;                    /* allocated: room for oneDNN too */
} run;

static const void *params(const run *r)
{
    return r->sh->transposed ? (const void *)&r->q : (const void *)&r->p;
}

/* Forward then backward (every gradient; the bias's when it has one)
 * with a workspace of ws_bytes; returns the seconds taken. */
static double fwd_bwd(const run *r, size_t ws_bytes)
{
    const float *b = r->sh->bias ? r->b : NULL;
    float *db = r->sh->bias ? r->db : NULL;
    double t0 = bench_now();
    if (r->sh->transposed) {
        op_conv_transpose2d_forward(r->y, r->x, r->w, b, &r->q, r->ws, ws_bytes);
        op_conv_transpose2d_backward(r->dx, r->dw, db, r->dy, r->x, r->w,
                                     &r->q, r->ws, ws_bytes);
    } else {
        op_conv2d_forward(r->y, r->x, r->w, b, &r->p, r->ws, ws_bytes);
        op_conv2d_backward(r->dx, r->dw, db, r->dy, r->x, r->w, &r->p,
                           r->ws, ws_bytes);
    }
    return bench_now() - t0;
}

/* The oneDNN jobs the op runs for this shape: forward, then the backward
 * pieces (split in two for convolutions, one for transposed ones). */
static int jobs_of(const run *r, unsigned jobs[3])
{
    unsigned fwd = r->sh->bias ? KERN__DNNL_FWD_BIAS : KERN__DNNL_FWD;
    unsigned bw = r->sh->bias ? KERN__DNNL_BWD_W_BIAS : KERN__DNNL_BWD_W;
    jobs[0] = fwd;
    if (r->sh->transposed) {
        jobs[1] = bw | KERN__DNNL_BWD_D;
        return 2;
    }
    jobs[1] = bw;
    jobs[2] = KERN__DNNL_BWD_D;
    return 3;
}

static const char *path_name(kern__conv_path c)
{
    return c == KERN__CONV_ONEDNN ? "onednn" : c == KERN__CONV_IM2COL ? "im2col" : "undecided";
}

static void bench_shape(const shape *sh)
{
    run r = {.sh = sh};
    int oh, ow;
    size_t nw;
    if (sh->transposed) {
        r.q = (op_conv_transpose2d_params){
            .n = sh->n, .c = sh->c, .h = sh->h, .w = sh->w, .k = sh->k,
            .r = sh->r, .s = sh->s, .stride_h = sh->stride,
            .stride_w = sh->stride, .pad_h = sh->pad, .pad_w = sh->pad,
            .dil_h = 1, .dil_w = 1};
        oh = op_conv_transpose2d_out_h(&r.q);
        ow = op_conv_transpose2d_out_w(&r.q);
        r.ws_bytes = op_conv_transpose2d_workspace(&r.q);
    } else {
        r.p = (op_conv2d_params){
            .n = sh->n, .c = sh->c, .h = sh->h, .w = sh->w, .k = sh->k,
            .r = sh->r, .s = sh->s, .stride_h = sh->stride,
            .stride_w = sh->stride, .pad_h = sh->pad, .pad_w = sh->pad,
            .dil_h = 1, .dil_w = 1};
        oh = op_conv2d_out_h(&r.p);
        ow = op_conv2d_out_w(&r.p);
        r.ws_bytes = op_conv2d_workspace(&r.p);
    }
    nw = (size_t)sh->k * sh->c * sh->r * sh->s;
    size_t nx = (size_t)sh->n * sh->c * sh->h * sh->w;
    size_t ny = (size_t)sh->n * sh->k * oh * ow;

    unsigned jobs[3];
    int njobs = jobs_of(&r, jobs);
    size_t need = 0;
    int refused = 0;
    for (int j = 0; j < njobs; j++) {
        size_t s = kern__conv_scratch(sh->transposed, params(&r), jobs[j]);
        if (s == SIZE_MAX)
            refused = 1;
        else if (s > need)
            need = s;
    }
    r.room = need > r.ws_bytes ? need : r.ws_bytes;
    r.x = bench_alloc(nx, 1);
    r.w = bench_alloc(nw, 2);
    r.b = bench_alloc(sh->k, 3);
    r.y = bench_alloc(ny, 4);
    r.dy = bench_alloc(ny, 5);
    r.dx = bench_alloc(nx, 6);
    r.dw = bench_alloc(nw, 7);
    r.db = bench_alloc(sh->k, 8);
    r.ws = bench_alloc(r.room / sizeof(float) + 16, 9);

    char name[96];
    snprintf(name, sizeof(name), "%s_%s%s_c%d_k%d_%dx%d%s", sh->model,
             sh->transposed ? "convt_" : "", sh->name, sh->c, sh->k, sh->h,
             sh->w, sh->stride > 1 ? "_s2" : "");

    /* each path's rounds in a row, the first warming up, as auto does */
    double best_i = 1e300, best_o = 1e300;
    kern__conv_set_path(KERN__CONV_IM2COL);
    for (int round = 0; round < ROUNDS; round++) {
        double t = fwd_bwd(&r, r.ws_bytes);
        if (round > 0 && t < best_i)
            best_i = t;
    }
    kern__conv_set_path(KERN__CONV_ONEDNN);
    for (int round = 0; !refused && round < ROUNDS; round++) {
        kern__conv_ran_onednn();
        double t = fwd_bwd(&r, r.room);
        if (kern__conv_ran_onednn() == 0)
            break;
        if (round > 0 && t < best_o)
            best_o = t;
    }

    /* oneDNN's own layouts, float32 and bfloat16, with room for them */
    double best_b[2] = {1e300, 1e300};
    if (!sh->transposed) {
        size_t big = 8 * (nx + ny) * sizeof(float) + 8 * nw * sizeof(float) + ((size_t)64 << 20);
        float *ws2 = bench_alloc(big / sizeof(float), 10);
        const float *b = sh->bias ? r.b : NULL;
        float *db = sh->bias ? r.db : NULL;
        for (int bf = 0; bf < 2; bf++)
            for (int round = 0; round < ROUNDS; round++) {
                double t0 = bench_now();
                int ran = kern__conv_blocked_forward(bf, r.y, r.x, r.w, b, &r.p, ws2, big, NULL,
                                                     0, 0) &&
                          kern__conv_blocked_backward(bf, r.dx, r.dw, db, r.dy, r.x, r.w, &r.p,
                                                      ws2, big, NULL, 0, 0);
                double t = bench_now() - t0;
                if (!ran)
                    break;
                if (round > 0 && t < best_b[bf])
                    best_b[bf] = t;
            }
        free(ws2);
    }

    /* the default path where it computes the shape directly (conv_direct.c:
     * forward and data gradient; the weight gradient on im2col) */
    double best_d = 1e300;
    if (!sh->transposed && kern__conv3x3_direct_ok(&r.p, 0) && !convplan_conv2d_blocked_f32(&r.p)) {
        kern__conv_set_path(KERN__CONV_BLOCKED);
        for (int round = 0; round < ROUNDS; round++) {
            double t = fwd_bwd(&r, r.ws_bytes);
            if (round > 0 && t < best_d)
                best_d = t;
        }
    }

    /* auto as the model runs it: the planner's workspace */
    kern__conv_set_path(KERN__CONV_AUTO);
    fwd_bwd(&r, r.ws_bytes);
    const char *picks[3];
    for (int j = 0; j < njobs; j++)
        picks[j] = path_name(kern__conv_choice(sh->transposed, params(&r), jobs[j]));

    if (best_o < 1e300)
        printf("BENCH conv_%s_onednn_vs_im2col %.3f of_im2col\n", name,
               best_o / best_i);
    else
        printf("BENCH conv_%s_onednn_vs_im2col nan of_im2col\n", name);
    for (int bf = 0; bf < 2 && !sh->transposed; bf++) {
        if (best_b[bf] < 1e300)
            printf("BENCH conv_%s_blocked%s_vs_im2col %.3f of_im2col\n", name, bf ? "_bf16" : "",
                   best_b[bf] / best_i);
        else
            printf("BENCH conv_%s_blocked%s_vs_im2col nan of_im2col\n", name, bf ? "_bf16" : "");
    }
    if (best_d < 1e300)
        printf("BENCH conv_%s_direct_vs_im2col %.3f of_im2col\n", name, best_d / best_i);
    if (!sh->transposed)
        printf("  oneDNN's layouts: float32 %.1f ms, bfloat16 %.1f ms; the default runs float32 "
               "on %s, mixed precision on %s\n",
               best_b[0] < 1e300 ? best_b[0] * 1e3 : -1.0,
               best_b[1] < 1e300 ? best_b[1] * 1e3 : -1.0,
               convplan_conv2d_blocked_f32(&r.p) ? "oneDNN's layouts" : "im2col",
               convplan_conv2d_blocked_bf16(&r.p) ? "oneDNN's layouts" : "float32");
    const char *impl = kern__conv_impl(sh->transposed, params(&r), jobs[0]);
    printf("  im2col %.1f ms, onednn %.1f ms (%s), scratchpad %.1f MiB, "
           "workspace %.2f MiB: %s; auto: forward %s, %s %s%s%s\n",
           best_i * 1e3, best_o < 1e300 ? best_o * 1e3 : -1.0,
           impl ? impl : "refused", need / 1048576.0, r.ws_bytes / 1048576.0,
           refused ? "refused" : need <= r.ws_bytes ? "fits" : "does not fit",
           picks[0], sh->transposed ? "backward" : "weight grad", picks[1],
           njobs > 2 ? ", data grad " : "", njobs > 2 ? picks[2] : "");
    fflush(stdout);
    free(r.x); free(r.w); free(r.b); free(r.y); free(r.dy); free(r.dx);
    free(r.dw); free(r.db); free(r.ws);
}

int main(int argc, char **argv)
{
    if (bench_blas_guard(argv) < 0)
        return 1;
    kernels_set_threads(argc > 1 ? atoi(argv[1]) : 2);
    const char *only = argc > 2 ? argv[2] : NULL;
    if (!kern__conv_have_onednn()) {
        printf("conv_paths: skipped, the kernels were built without oneDNN\n");
        return 0;
    }
    printf("conv_paths: %d threads; ratio = oneDNN time / im2col time, "
           "forward + backward, best of %d\n", kernels_threads(), ROUNDS - 1);
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++)
        if (!only || strcmp(only, shapes[i].model) == 0)
            bench_shape(&shapes[i]);
    return 0;
}
