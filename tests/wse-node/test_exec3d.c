/* Volumes in the executor: a small 3D U-Net (conv3d, group norm, relu,
 * max_pool3d, conv_transpose3d, concat, a 1x1x1 head) on 16^3 volumes,
 * its whole-model gradients against central differences of the loss and
 * its loss falling under SGD; avg_pool3d and trilinear upsampling the
 * same way; and the memory plan's bytes for the 3D layers the buffers the
 * executor holds. */
#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "footprint.h"
#include "kernels.h"
#include "kernels_internal.h"
#include "memplan.h"
#include "op_conv3d.h"
#include "op_conv_transpose3d.h"
#include "rng.h"
#include "spatial.h"
#include "toml.h"

enum { N = 2, S = 16 }; /* samples, volume side */

/* input [1, 16, 16, 16] -> c1 conv3d 3^3 (8) -> gn -> relu -> max_pool3d 2
 * -> c2 conv3d 3^3 (16) -> relu -> up conv_transpose3d 2^3 s2 (8) ->
 * concat with the first level -> c3 conv3d 3^3 (8) -> relu -> head 1^3 (2) */
static const char *unet3d =
    "[model]\ninput_shape = [1, 16, 16, 16]\nloss = \"%s\"\n"
    "[[model.layers]]\nname = \"c1\"\ntype = \"conv3d\"\nfilters = 8\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"gn\"\ntype = \"group_norm\"\ngroups = 4\n"
    "[[model.layers]]\nname = \"r1\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"p\"\ntype = \"max_pool3d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"c2\"\ntype = \"conv3d\"\nfilters = 16\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"r2\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"up\"\ntype = \"conv_transpose3d\"\nfilters = 8\n"
    "kernel_size = 2\nstride = 2\n"
    "[[model.layers]]\nname = \"cat\"\ntype = \"concat\"\ninputs = [\"up\", \"r1\"]\n"
    "[[model.layers]]\nname = \"c3\"\ntype = \"conv3d\"\nfilters = 8\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"r3\"\ntype = \"relu\"\n"
    "[[model.layers]]\nname = \"head\"\ntype = \"conv3d\"\nfilters = 2\nkernel_size = 1\n";

/* avg_pool3d, trilinear and nearest upsampling, a conv3d without bias */
static const char *pools3d =
    "[model]\ninput_shape = [1, 16, 16, 16]\nloss = \"%s\"\n"
    "[[model.layers]]\nname = \"c1\"\ntype = \"conv3d\"\nfilters = 4\nkernel_size = 3\n"
    "padding = 1\n"
    "[[model.layers]]\nname = \"a\"\ntype = \"avg_pool3d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"t\"\ntype = \"tanh\"\n"
    "[[model.layers]]\nname = \"u\"\ntype = \"upsample\"\nmode = \"trilinear\"\n"
    "[[model.layers]]\nname = \"c2\"\ntype = \"conv3d\"\nfilters = 4\nkernel_size = 3\n"
    "padding = 1\nbias = false\n"
    "[[model.layers]]\nname = \"a2\"\ntype = \"avg_pool3d\"\nkernel_size = 2\n"
    "[[model.layers]]\nname = \"u2\"\ntype = \"upsample\"\n"
    "[[model.layers]]\nname = \"head\"\ntype = \"conv3d\"\nfilters = 2\nkernel_size = 1\n";

static model *compile(const char *fmt, const char *loss, toml_value **root)
{
    char text[4096], err[256];
    snprintf(text, sizeof(text), fmt, loss);
    *root = toml_parse(text, strlen(text), "vol.toml", err, sizeof(err));
    ck_assert_msg(*root != NULL, "%s", err);
    model *m = model_compile_document(*root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s", err);
    return m;
}

static float **tensors(const model *m, bool random)
{
    float **t = calloc((size_t)m->ntensors, sizeof(float *));
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *mt = &m->tensors[i];
        t[i] = calloc(mt->elems, sizeof(float));
        bool norm = strstr(mt->name, "gn") == mt->name;
        double fan_in = (double)mt->elems / (double)mt->dims[0];
        for (uint64_t k = 0; random && k < mt->elems; k++)
            t[i][k] = norm ? (mt->dims[0] && strstr(mt->name, "weight") ? 1.0f : 0.0f)
                           : (float)((2.0 * rng_uniform(5, (uint64_t)i, k) - 1.0) *
                                     sqrt(3.0 / fan_in));
    }
    return t;
}

static void free_tensors(const model *m, float **t)
{
    for (int i = 0; i < m->ntensors; i++)
        free(t[i]);
    free(t);
}

/* Volumes the model can learn: a voxel is of class 1 inside a ball whose
 * centre moves with the sample, the input the ball's indicator blurred
 * plus noise. */
static void make_batch(float *x, int32_t *y)
{
    for (int s = 0; s < N; s++)
        for (int z = 0; z < S; z++)
            for (int i = 0; i < S; i++)
                for (int j = 0; j < S; j++) {
                    double cz = 7 + 2 * s, cy = 8 - s, cx = 7.5;
                    double r2 = (z - cz) * (z - cz) + (i - cy) * (i - cy) + (j - cx) * (j - cx);
                    size_t v = (((size_t)s * S + z) * S + i) * S + j;
                    y[v] = r2 < 25.0;
                    x[v] = (float)(exp(-r2 / 30.0) +
                                   0.3 * (rng_uniform(9, (uint64_t)s, v) - 0.5));
                }
}

static double run(exec *e, const model *m, const float *x, const int32_t *y, bool backward)
{
    for (int i = 0; i < m->nlayers; i++)
        exec_forward(e, i, x, 0, true);
    double l = exec_loss(e, x, y, 1.0f);
    for (int i = m->nlayers - 1; backward && i >= 0; i--)
        exec_backward(e, i, x, 0);
    return l;
}

/* Every trainable tensor's gradient at a few elements against central
 * differences of the loss (double sums of float32 passes: h large enough
 * for float's rounding, small enough for the relus' and the argmaxes'
 * kinks, which a few elements may meet: at most one miss in ten). */
static void gradients(const char *fmt, const char *loss)
{
    toml_value *root;
    model *m = compile(fmt, loss, &root);
    float **w = tensors(m, true), **g = tensors(m, false);
    exec e;
    char err[256];
    ck_assert_msg(exec_init(&e, m, N, 1, w, g, err, sizeof(err)) == 0, "%s", err);
    size_t vox = (size_t)N * S * S * S;
    float *x = malloc(vox * sizeof(float));
    int32_t *y = malloc(vox * sizeof(int32_t));
    make_batch(x, y);
    double l0 = run(&e, m, x, y, true);
    ck_assert(isfinite(l0));
    int checked = 0, missed = 0;
    double worst = 0;
    for (int t = 0; t < m->ntensors; t++) {
        const model_tensor *mt = &m->tensors[t];
        if (!mt->trainable)
            continue;
        float *keep = malloc(mt->elems * sizeof(float));
        memcpy(keep, g[t], mt->elems * sizeof(float));
        for (int q = 0; q < 4; q++) {
            uint64_t k = (uint64_t)(rng_uniform(11, (uint64_t)t, (uint64_t)q) * mt->elems);
            float w0 = w[t][k], h = 1e-2f;
            w[t][k] = w0 + h;
            double lp = run(&e, m, x, y, false);
            w[t][k] = w0 - h;
            double lm = run(&e, m, x, y, false);
            w[t][k] = w0;
            double fd = (lp - lm) / (2.0 * h), an = keep[k];
            double err_rel = fabs(fd - an) / fmax(fabs(fd) + fabs(an), 1e-2);
            if (err_rel > worst)
                worst = err_rel;
            missed += err_rel > 2e-2;
            checked++;
            ck_assert_msg(err_rel < 0.2, "%s[%llu]: analytic %g, central differences %g",
                          mt->name, (unsigned long long)k, an, fd);
        }
        free(keep);
    }
    printf("%s (%s): %d gradients against central differences, %d beyond 2%%, worst %.3g\n",
           fmt == unet3d ? "3D U-Net" : "pools and upsampling", loss, checked, missed, worst);
    ck_assert_msg(missed * 10 <= checked, "%d of %d gradients beyond 2%%", missed, checked);
    exec_deinit(&e);
    free(x);
    free(y);
    free_tensors(m, w);
    free_tensors(m, g);
    model_free(m);
    toml_free(root);
}

START_TEST(unet3d_gradients)
{
    gradients(unet3d, "pixel_softmax_cross_entropy");
}
END_TEST

START_TEST(pools3d_gradients)
{
    gradients(pools3d, "ssce_dice");
}
END_TEST

/* SGD with momentum on one batch: the loss falls. */
static void trains(const char *loss, bool mixed, double *first, double *last)
{
    toml_value *root;
    model *m = compile(unet3d, loss, &root);
    m->mixed_precision = mixed;
    float **w = tensors(m, true), **g = tensors(m, false), **v = tensors(m, false);
    exec e;
    char err[256];
    ck_assert_msg(exec_init(&e, m, N, 1, w, g, err, sizeof(err)) == 0, "%s", err);
    size_t vox = (size_t)N * S * S * S;
    float *x = malloc(vox * sizeof(float));
    int32_t *y = malloc(vox * sizeof(int32_t));
    make_batch(x, y);
    for (int step = 0; step < 20; step++) {
        for (int i = 0; i < m->nlayers; i++)
            exec_forward(&e, i, x, step, true);
        double l = exec_loss(&e, x, y, 1.0f / N) / N;
        ck_assert_msg(isfinite(l), "step %d: loss %g", step, l);
        for (int i = m->nlayers - 1; i >= 0; i--)
            exec_backward(&e, i, x, step);
        for (int i = 0; i < m->ntensors; i++)
            for (uint64_t q = 0; m->tensors[i].trainable && q < m->tensors[i].elems; q++) {
                v[i][q] = 0.9f * v[i][q] + g[i][q];
                w[i][q] -= 0.05f * v[i][q];
            }
        if (step == 0)
            *first = l;
        *last = l;
    }
    exec_metrics mt;
    memset(&mt, 0, sizeof(mt));
    for (int i = 0; i < m->nlayers; i++)
        exec_forward(&e, i, x, 20, false);
    ck_assert_int_eq(exec_eval(&e, x, y, &mt), 0);
    printf("3D U-Net %s%s: mean loss %.6f at the first step, %.6f after 20; voxels right "
           "%.4f\n", loss, mixed ? " (mixed precision)" : "", *first, *last,
           (double)mt.correct / (double)vox);
    exec_deinit(&e);
    free(x);
    free(y);
    free_tensors(m, w);
    free_tensors(m, g);
    free_tensors(m, v);
    model_free(m);
    toml_free(root);
}

START_TEST(unet3d_trains)
{
    double first, last;
    trains("pixel_softmax_cross_entropy", false, &first, &last);
    ck_assert_msg(last < 0.7 * first, "%g then %g", first, last);
    trains("ssce_dice", false, &first, &last);
    ck_assert_msg(last < 0.8 * first, "%g then %g", first, last);
}
END_TEST

START_TEST(unet3d_trains_mixed)
{
    double first, last;
    trains("pixel_softmax_cross_entropy", true, &first, &last);
    ck_assert_msg(last < 0.7 * first, "%g then %g", first, last);
}
END_TEST

/* The plan's bytes for the 3D layers are what the executor holds: max
 * pooling's argmax a byte an output, a volume's outputs and gradients
 * n x C x D x H x W floats, and the workspace at least what the 3D
 * kernels ask, so that the executor's total is the plan's. */
START_TEST(plan_matches)
{
    toml_value *root;
    model *m = compile(unet3d, "ssce_dice", &root);
    m->blocked = true; /* asked for: the 3D layers keep them plain */
    for (int mixed = 0; mixed < 2; mixed++) {
        m->mixed_precision = mixed;
        footprint f;
        ck_assert_int_eq(footprint_init(&f, m, N, kernels_threads()), 0);
        for (int i = 0; i < m->nlayers; i++) {
            const model_layer *l = &m->layers[i];
            uint64_t out = (uint64_t)N * model_shape_elems(&l->out);
            /* (a relu fused into its group norm is the norm's view) */
            ck_assert_uint_eq(f.layers[i].act, model_layer_is_view(l) ? 0 : out * sizeof(float));
            if (l->type == LAYER_MAX_POOL3D)
                ck_assert_uint_eq(f.layers[i].aux, out);
            size_t k = 0;
            if (l->type == LAYER_CONV3D) {
                op_conv3d_params p = {
                    .n = N, .c = (int)l->in.d[0], .d = (int)l->in.d[1], .h = (int)l->in.d[2],
                    .w = (int)l->in.d[3], .k = (int)l->filters, .kd = l->kernel[0],
                    .kh = l->kernel[1], .kw = l->kernel[2], .pad_d = l->padding[0],
                    .pad_h = l->padding[1], .pad_w = l->padding[2]};
                k = mixed ? op_conv3d_bf16_workspace(&p) : op_conv3d_workspace(&p);
            } else if (l->type == LAYER_CONV_TRANSPOSE3D) {
                op_conv_transpose3d_params p = {
                    .n = N, .c = (int)l->in.d[0], .d = (int)l->in.d[1], .h = (int)l->in.d[2],
                    .w = (int)l->in.d[3], .k = (int)l->filters, .kd = 2, .kh = 2, .kw = 2,
                    .stride_d = 2, .stride_h = 2, .stride_w = 2};
                k = op_conv_transpose3d_workspace(&p);
            }
            ck_assert_msg(f.layers[i].workspace >= k, "%s: the plan's workspace %llu, the "
                          "kernel's %zu", l->name, (unsigned long long)f.layers[i].workspace, k);
            if (k)
                printf("%s%s: workspace planned %llu bytes, the kernels ask %zu\n", l->name,
                       mixed ? " (mixed)" : "", (unsigned long long)f.layers[i].workspace, k);
        }
        float **w = tensors(m, true), **g = tensors(m, false);
        exec e;
        char err[256];
        ck_assert_msg(exec_init(&e, m, N, kernels_threads(), w, g, err, sizeof(err)) == 0, "%s",
                      err);
        ck_assert_uint_eq(e.arena_bytes, f.arena);
        ck_assert_uint_eq(e.ws_bytes, f.workspace);
        ck_assert_uint_eq(e.bytes, f.exec);
        ck_assert_int_eq(e.blocked, 0); /* blocked groups take no volume's tensor */
        exec_deinit(&e);
        free_tensors(m, w);
        free_tensors(m, g);
        footprint_free(&f);
    }
    model_free(m);
    toml_free(root);
}
END_TEST

/* The plan's workspace bounds what the kernels ask for the 3D U-Net's
 * convolutions at the sizes of SKM-TEA's (a first layer of one channel,
 * 32 to 32 and 64 to 64 channels, an up-convolution), in float32 and in
 * mixed precision, on the kernels' threads. */
START_TEST(workspace_bound)
{
    static const struct {
        layer_type type;
        int c, k, side, ker, stride;
    } shapes[] = {
        {LAYER_CONV3D, 1, 32, 64, 3, 1},          {LAYER_CONV3D, 32, 32, 64, 3, 1},
        {LAYER_CONV3D, 64, 64, 32, 3, 1},         {LAYER_CONV3D, 32, 2, 64, 1, 1},
        {LAYER_CONV_TRANSPOSE3D, 64, 32, 32, 2, 2},
        /* SKM-TEA's full-resolution layers at 128^3, in depth bands */
        {LAYER_CONV3D, 64, 32, 128, 3, 1},        {LAYER_CONV3D, 32, 32, 128, 3, 1},
        {LAYER_CONV_TRANSPOSE3D, 64, 32, 64, 2, 2},
    };
    for (size_t i = 0; i < sizeof(shapes) / sizeof(shapes[0]); i++) {
        model_layer l;
        memset(&l, 0, sizeof(l));
        l.type = shapes[i].type;
        int s = shapes[i].side, o = l.type == LAYER_CONV3D ? s : s * 2;
        l.in = (model_shape){4, {shapes[i].c, s, s, s}};
        l.out = (model_shape){4, {shapes[i].k, o, o, o}};
        l.filters = shapes[i].k;
        for (int a = 0; a < 3; a++) {
            l.kernel[a] = shapes[i].ker;
            l.stride[a] = shapes[i].stride;
            l.dilation[a] = 1;
            l.padding[a] = shapes[i].ker == 3;
        }
        for (int bf16 = 0; bf16 < 2; bf16++) {
            size_t k;
            if (l.type == LAYER_CONV3D) {
                op_conv3d_params p = {.n = 1, .c = shapes[i].c, .d = s, .h = s, .w = s,
                                      .k = shapes[i].k, .kd = l.kernel[0], .kh = l.kernel[1],
                                      .kw = l.kernel[2], .pad_d = l.padding[0],
                                      .pad_h = l.padding[1], .pad_w = l.padding[2]};
                k = bf16 ? op_conv3d_bf16_workspace(&p) : op_conv3d_workspace(&p);
            } else {
                if (bf16)
                    continue;
                op_conv_transpose3d_params p = {.n = 1, .c = shapes[i].c, .d = s, .h = s, .w = s,
                                                .k = shapes[i].k, .kd = 2, .kh = 2, .kw = 2,
                                                .stride_d = 2, .stride_h = 2, .stride_w = 2};
                k = op_conv_transpose3d_workspace(&p);
            }
            uint64_t plan = footprint_vol_workspace(&l, 1, kernels_threads(), bf16);
            if (bf16) { /* the footprint's rule in mixed precision: the larger path's */
                uint64_t f = footprint_vol_workspace(&l, 1, kernels_threads(), false);
                plan = plan > f ? plan : f;
            }
            printf("%s %d->%d on %d^3%s: workspace planned %.1f MiB, the kernels ask %.1f MiB\n",
                   l.type == LAYER_CONV3D ? "conv3d" : "conv_transpose3d", shapes[i].c,
                   shapes[i].k, s, bf16 ? " (mixed)" : "", plan / 1048576.0, k / 1048576.0);
            ck_assert_msg(plan >= k, "shape %zu: planned %llu, the kernels %zu", i,
                          (unsigned long long)plan, k);
            /* in bands (c3d_band.c), where oneDNN runs: a band's copies,
             * not the GiB of the whole layer's */
            if (s * (l.type == LAYER_CONV3D ? 1 : 2) >= 128 && kern__conv_have_onednn() &&
                kernels_isa_level() >= KERNELS_ISA_AVX2)
                ck_assert_msg(plan < ((uint64_t)400 << 20) && k < ((size_t)400 << 20),
                              "shape %zu: planned %llu, the kernels %zu", i,
                              (unsigned long long)plan, k);
        }
    }
}
END_TEST

/* A volume splits into slabs of its depth's planes: as many as the
 * model's downsampling leaves slices of, and no window may reach past the
 * neighbouring slab; the refusals give the numbers. */
START_TEST(slab_limits)
{
    toml_value *root;
    model *m = compile(unet3d, "ssce_dice", &root);
    ck_assert(model_splits(m));
    const toml_value *mt = toml_table_get(root, "model");
    model *slab = NULL;
    spatial_plan sp;
    char err[256];
    ck_assert_msg(spatial_compile(mt, m, 8, 7, NULL, &slab, &sp, err, sizeof(err)) == 0, "%s",
                  err);
    ck_assert_int_eq(sp.row0, 14);
    ck_assert_int_eq(sp.rows, 2);
    ck_assert_int_eq(slab->input.d[1], 2);
    ck_assert_int_eq(slab->input.d[2], 16);
    ck_assert_int_eq(sp.layers[0].kind, SPATIAL_GATHER); /* c1: a plane each way */
    ck_assert_int_eq(sp.layers[0].top, 1);
    ck_assert_int_eq(sp.layers[3].kind, SPATIAL_LOCAL);  /* 2x2x2 pooling */
    ck_assert_int_eq(sp.layers[6].kind, SPATIAL_LOCAL);  /* the stride-2 transposed conv */
    spatial_plan_free(&sp);
    model_free(slab);
    ck_assert_int_lt(spatial_compile(mt, m, 16, 0, NULL, &slab, &sp, err, sizeof(err)), 0);
    ck_assert_str_eq(err, "vol.toml: runconfig.spatial_partitions = 16: the input's 16 planes "
                          "make 8 slice(s) of 2 planes, the model's downsampling: at most 8 "
                          "slabs, not 16");
    model_free(m);
    toml_free(root);

    /* c2 with a 5-wide window on the one plane a slab of 8 has there */
    char text[4096];
    snprintf(text, sizeof(text), "%s", unet3d);
    char *c2 = strstr(text, "filters = 16\nkernel_size = 3\npadding = 1");
    ck_assert_ptr_nonnull(c2);
    memcpy(c2, "filters = 16\nkernel_size = 5\npadding = 2", 40);
    m = compile(text, "ssce_dice", &root);
    ck_assert_int_lt(spatial_compile(toml_table_get(root, "model"), m, 8, 0, NULL, &slab, &sp,
                                     err, sizeof(err)), 0);
    ck_assert_ptr_null(slab);
    ck_assert_msg(strstr(err, ": layer \"c2\" (conv3d) reaches 2 planes beyond its slab, which "
                              "has only 1 planes there: use fewer slabs or a larger volume"),
                  "%s", err);
    model_free(m);
    toml_free(root);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("exec3d");
    TCase *t = tcase_create("volumes");
    tcase_set_timeout(t, 600);
    tcase_add_test(t, plan_matches);
    tcase_add_test(t, slab_limits);
    tcase_add_test(t, workspace_bound);
    tcase_add_test(t, unet3d_gradients);
    tcase_add_test(t, pools3d_gradients);
    tcase_add_test(t, unet3d_trains);
    tcase_add_test(t, unet3d_trains_mixed);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
