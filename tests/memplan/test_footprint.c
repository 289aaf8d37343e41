/* The footprint (common/memplan/footprint.c) is what runs: the executor's
 * buffers are the footprint's rows for every model and thread count, the
 * convolution workspace grows with the wse-node's threads exactly as the
 * kernels size it, and the optimizer state count matches the optimizer
 * library's. */
#include <check.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "exec.h"
#include "footprint.h"
#include "kernels.h"
#include "convplan.h"
#include "op_conv2d.h"
#include "optim.h"
#include "toml.h"

/* A model file with its input shape replaced (the U-Net at 64x64: the
 * same layers, a test-sized image). */
static model *load(const char *file, const char *from, const char *to)
{
    char path[1024], err[512];
    snprintf(path, sizeof(path), "%s/%s", MODELS_DIR, file);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s", path);
    static char text[1 << 16], out[1 << 16];
    size_t len = fread(text, 1, sizeof(text) - 1, f);
    fclose(f);
    text[len] = '\0';
    char *at = from ? strstr(text, from) : NULL;
    if (from)
        ck_assert_msg(at != NULL, "%s has no %s", file, from);
    if (at)
        snprintf(out, sizeof(out), "%.*s%s%s", (int)(at - text), text, to, at + strlen(from));
    else
        snprintf(out, sizeof(out), "%s", text);
    toml_value *root = toml_parse(out, strlen(out), file, err, sizeof(err));
    ck_assert_msg(root != NULL, "%s", err);
    model *m = model_compile_document(root, err, sizeof(err));
    ck_assert_msg(m != NULL, "%s: %s", file, err);
    toml_free(root);
    return m;
}

/* A buffer of `want` bytes: malloc gave at least that, and not a block
 * meant for much more. */
static void check_block(const void *p, uint64_t want, const char *what)
{
    if (!want) {
        ck_assert_msg(p == NULL, "%s: allocated, the footprint says none", what);
        return;
    }
    ck_assert_msg(p != NULL, "%s: not allocated", what);
    size_t got = malloc_usable_size((void *)p);
    ck_assert_msg(got >= want && got < want + 8192, "%s: %zu bytes for %llu", what, got,
                  (unsigned long long)want);
}

static void exec_matches(const model *m, int n, int threads)
{
    float **w = calloc((size_t)m->ntensors + 1, sizeof(float *));
    float **g = calloc((size_t)m->ntensors + 1, sizeof(float *));
    exec e;
    char err[256];
    ck_assert_int_eq(exec_init(&e, m, n, threads, w, g, err, sizeof(err)), 0);
    footprint f;
    ck_assert_int_eq(footprint_init(&f, m, n, threads), 0);
    ck_assert_uint_eq(e.bytes, f.exec);
    ck_assert_uint_eq(e.ws_bytes, f.workspace);
    ck_assert_uint_eq(e.label_elems, f.label_elems);
    /* one arena of the plan's size, the workspace, the float inputs */
    check_block(e.arena, f.arena, "arena");
    ck_assert_uint_eq(e.arena_bytes, f.arena);
    check_block(e.ws, f.workspace, "workspace");
    check_block(e.input, f.input, "float inputs");
    check_block(e.again, f.again, "weights of the convolutions made again");
    ck_assert_uint_eq(f.arena + f.workspace + f.input + f.again, f.exec);
    /* the lean arena holds less than keeping everything, at least the
     * kept outputs, and every placed buffer lies inside it */
    ck_assert_uint_lt(f.arena, f.eager);
    ck_assert_uint_ge(f.arena, f.kept);
    ck_assert_uint_ge(f.arena, f.plan.peak_live);
    for (uint32_t k = 0; k < f.plan.nevents; k++)
        ck_assert_uint_lt(f.plan.events[k].offset, f.arena);
    footprint_free(&f);
    exec_deinit(&e);
    free(w);
    free(g);
}

START_TEST(executor_allocates_the_footprint)
{
    struct {
        const char *file, *from, *to;
    } models[] = {
        {"fc_mnist.toml", NULL, NULL},
        {"resnet_small.toml", NULL, NULL},
        {"unet.toml", "[3, 512, 512]", "[3, 64, 64]"},
    };
    for (size_t i = 0; i < sizeof(models) / sizeof(models[0]); i++) {
        model *m = load(models[i].file, models[i].from, models[i].to);
        for (int n = 1; n <= 3; n += 2)
            for (int t = 1; t <= 4; t *= 4)
                exec_matches(m, n, t);
        model_free(m);
    }
}
END_TEST

/* A mixed-precision model plans its dense layers' bfloat16 operands as
 * workspace, and the kernels run their bfloat16 GEMMs within it. */
START_TEST(workspace_of_bf16_dense)
{
    model *m = load("fc_mnist.toml", "[model]", "[model]\nmixed_precision = true");
    model *m32 = load("fc_mnist.toml", NULL, NULL);
    ck_assert(m->mixed_precision && !m32->mixed_precision);
    footprint f, f32;
    ck_assert_int_eq(footprint_init(&f, m, 64, 2), 0);
    ck_assert_int_eq(footprint_init(&f32, m32, 64, 2), 0);
    uint64_t want = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const model_layer *l = &m->layers[i];
        if (l->type != LAYER_DENSE)
            continue;
        uint64_t b = convplan_dense_bf16_workspace(64, (int)l->in.d[0], (int)l->units);
        ck_assert_uint_eq(f.layers[i].workspace, b);
        ck_assert_uint_ge(b, 2 * (64 * l->in.d[0] + l->in.d[0] * l->units));
        want = b > want ? b : want;
    }
    ck_assert_uint_gt(want, 0);
    ck_assert_uint_eq(f.workspace, (want + 63) / 64 * 64);
    ck_assert_uint_eq(f32.workspace, 0);
    /* a Pipelined replica keeps the dense layers' weights rounded: counted
     * in its bytes, not in Weight Streaming's, not in float32 */
    uint64_t rounded = 0;
    for (int i = 0; i < m->nlayers; i++)
        if (m->layers[i].type == LAYER_DENSE) {
            ck_assert(footprint_keeps_rounded(m, i, 64) && !footprint_keeps_rounded(m32, i, 64));
            rounded += m->tensors[m->layers[i].first_tensor].elems * 2;
        }
    ck_assert_uint_eq(f.rounded, rounded);
    ck_assert_uint_eq(f32.rounded, 0);
    ck_assert_uint_eq(footprint_replica_bytes(&f, m, APPLIANCE__EXEC_MODE__MODE_PIPELINED, 1),
                      f.exec + f.batches + 4 * f.weights + rounded);
    ck_assert_uint_eq(footprint_replica_bytes(&f32, m32, APPLIANCE__EXEC_MODE__MODE_PIPELINED, 1),
                      f32.exec + f32.batches + 4 * f32.weights);
    /* a layer whose bfloat16 operands pass the bound plans none: it
     * computes in float32 */
    ck_assert_uint_eq(convplan_dense_bf16_workspace(32, 16384, 16384), 0);
    ck_assert_uint_gt(convplan_dense_bf16_workspace(1024, 4096, 4096), 0);
    footprint_free(&f);
    footprint_free(&f32);
    model_free(m);
    model_free(m32);
}
END_TEST

START_TEST(workspace_grows_with_threads)
{
    model *m = load("unet.toml", "[3, 512, 512]", "[3, 64, 64]");
    footprint f1, f4;
    ck_assert_int_eq(footprint_init(&f1, m, 2, 1), 0);
    ck_assert_int_eq(footprint_init(&f4, m, 2, 4), 0);
    ck_assert_uint_gt(f4.workspace, f1.workspace);
    ck_assert_uint_eq(f4.exec - f1.exec, f4.workspace - f1.workspace);
    ck_assert_uint_eq(footprint_replica_bytes(&f4, m, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 1) -
                          footprint_replica_bytes(&f1, m, APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING, 1),
                      f4.workspace - f1.workspace);
    /* the kernels size a convolution's workspace by the same plan */
    kernels_set_threads(3);
    for (int i = 0; i < m->nlayers; i++) {
        const model_layer *l = &m->layers[i];
        if (l->type != LAYER_CONV2D)
            continue;
        op_conv2d_params p = {
            .n = 2, .c = (int)l->in.d[0], .h = (int)l->in.d[1], .w = (int)l->in.d[2],
            .k = (int)l->filters, .r = l->kernel[0], .s = l->kernel[1],
            .stride_h = l->stride[0], .stride_w = l->stride[1], .pad_h = l->padding[0],
            .pad_w = l->padding[1], .dil_h = l->dilation[0], .dil_w = l->dilation[1],
        };
        ck_assert_uint_eq(op_conv2d_workspace(&p), footprint_workspace_bytes(l, 2, 3));
    }
    kernels_set_threads(1);
    footprint_free(&f1);
    footprint_free(&f4);
    model_free(m);
}
END_TEST

START_TEST(optimizer_states)
{
    struct {
        const char *name;
        optim_type type;
        float momentum;
    } opts[] = {
        {"sgd", OPTIM_SGD, 0.0f}, {"sgd", OPTIM_SGD, 0.9f}, {"adam", OPTIM_ADAM, 0.0f},
        {"adamw", OPTIM_ADAMW, 0.0f},
    };
    for (size_t i = 0; i < sizeof(opts) / sizeof(opts[0]); i++) {
        optim_config cfg;
        memset(&cfg, 0, sizeof(cfg));
        cfg.type = opts[i].type;
        cfg.lr = 0.1f;
        cfg.momentum = opts[i].momentum;
        cfg.beta1 = 0.9f;
        cfg.beta2 = 0.999f;
        optim_state st;
        ck_assert_int_eq(optim_state_init(&st, &cfg, 8), 0);
        ck_assert_uint_eq(optim_state_count(&st),
                          footprint_optimizer_states(opts[i].name, opts[i].momentum));
        optim_state_deinit(&st);
    }
}
END_TEST

START_TEST(labels_and_batches)
{
    model *m = load("fc_mnist.toml", NULL, NULL);
    footprint f;
    ck_assert_int_eq(footprint_init(&f, m, 5, 1), 0);
    ck_assert_uint_eq(f.label_elems, 1);
    ck_assert_uint_eq(f.batches, 2 * 5 * (28 * 28 + 1) * 4);
    ck_assert_uint_eq(f.weights, (m->total_params + m->total_buffers) * 4);
    footprint_free(&f);
    /* an evaluation's batches beside, as many, at most the share's size;
     * one of each with one batch in flight (model.feed_one) */
    m->eval_batch = 3;
    ck_assert_int_eq(footprint_init(&f, m, 5, 1), 0);
    ck_assert_uint_eq(f.batches, 2 * (5 + 3) * (28 * 28 + 1) * 4);
    footprint_free(&f);
    m->eval_batch = 100;
    m->feed_one = true;
    ck_assert_int_eq(footprint_init(&f, m, 5, 1), 0);
    ck_assert_uint_eq(f.batches, (5 + 5) * (28 * 28 + 1) * 4);
    footprint_free(&f);
    model_free(m);
    m = load("unet.toml", "[3, 512, 512]", "[3, 64, 64]");
    ck_assert_uint_eq(footprint_label_elems(m), 64 * 64);
    model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("footprint");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, executor_allocates_the_footprint);
    tcase_add_test(tc, workspace_grows_with_threads);
    tcase_add_test(tc, workspace_of_bf16_dense);
    tcase_add_test(tc, optimizer_states);
    tcase_add_test(tc, labels_and_batches);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
