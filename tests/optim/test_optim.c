/* Optimizers against steps worked out by hand (two updates each, on a
 * one-element tensor w = 1 with lr 0.1), learning-rate schedules at chosen
 * steps, clipping, names, and checkpoint-style save and restore. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "kt.h"
#include "optim.h"
#include "optim_plan.h"

/* Runs two updates with gradients g0, g1 and checks w after each. */
static void two_steps(const optim_config *cfg, float g0, float g1, double w1,
                      double w2)
{
    optim_state st;
    ck_assert_int_eq(optim_state_init(&st, cfg, 1), 0);
    float w = 1.0f;
    optim_step(cfg, &st, &w, &g0, 1.0f, 0.1f);
    ck_assert_msg(fabs(w - w1) < 1e-6, "first step %.9g != %.9g", w, w1);
    optim_step(cfg, &st, &w, &g1, 1.0f, 0.1f);
    ck_assert_msg(fabs(w - w2) < 1e-6, "second step %.9g != %.9g", w, w2);
    ck_assert_int_eq(optim_state_step(&st), 2);
    optim_state_deinit(&st);
}

START_TEST(test_sgd)
{
    optim_config c;
    optim_config_defaults(&c, OPTIM_SGD);
    /* plain: w = 1 - 0.1*0.5 = 0.95, then 0.90 */
    two_steps(&c, 0.5f, 0.5f, 0.95, 0.90);
    /* L2 0.1: g = 0.5 + 0.1*1 = 0.6 -> 0.94; g = 0.5 + 0.094 -> 0.8806 */
    c.weight_decay = 0.1f;
    two_steps(&c, 0.5f, 0.5f, 0.94, 0.8806);
    /* momentum 0.9: buf = g = 0.5 on the first step -> 0.95;
     * buf = 0.9*0.5 + 0.5 = 0.95 -> 0.95 - 0.095 = 0.855 */
    c.weight_decay = 0;
    c.momentum = 0.9f;
    two_steps(&c, 0.5f, 0.5f, 0.95, 0.855);
    /* Nesterov: step g + 0.9 buf = 0.5 + 0.45 = 0.95 -> 0.905;
     * buf 0.95, step 0.5 + 0.855 = 1.355 -> 0.7695 */
    c.nesterov = 1;
    two_steps(&c, 0.5f, 0.5f, 0.905, 0.7695);
    /* momentum 0.9, dampening 0.5, L2 0.1, gradients 0.5 then -1:
     * d = 0.6, buf = 0.6 (no dampening on the first step) -> 0.94;
     * d = -1 + 0.094 = -0.906, buf = 0.54 - 0.453 = 0.087 -> 0.9313 */
    c.nesterov = 0;
    c.dampening = 0.5f;
    c.weight_decay = 0.1f;
    two_steps(&c, 0.5f, -1.0f, 0.94, 0.9313);
}
END_TEST

START_TEST(test_adam)
{
    optim_config c;
    optim_config_defaults(&c, OPTIM_ADAM);
    /* gradients 0.5 then -0.25, betas 0.9/0.999, eps 1e-8.
     * t=1: m = 0.05, v = 0.00025, m^ = 0.5, v^ = 0.25:
     *   w = 1 - 0.1 * 0.5/(0.5 + 1e-8) = 0.900000002
     * t=2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 =
     *   0.00031225; m^ = 0.02/0.19 = 0.1052632, v^ = 0.00031225/0.001999
     *   = 0.1562031, sqrt 0.3952254: w = 0.9 - 0.0266337 = 0.8733663 */
    two_steps(&c, 0.5f, -0.25f, 0.900000002, 0.8733663);
    /* L2 0.1 folds 0.1 w into the gradient: 0.6 then -0.25 + 0.09 */
    c.weight_decay = 0.1f;
    two_steps(&c, 0.5f, -0.25f, 0.9000000017, 0.8544414);
    /* AdamW: w *= 1 - 0.1*0.1 first: 0.99 - 0.1 = 0.89; then
     * 0.89*0.99 - 0.0266337 = 0.8544663 */
    optim_config_defaults(&c, OPTIM_ADAMW);
    ck_assert_float_eq(c.weight_decay, 0.01f);
    c.weight_decay = 0.1f;
    two_steps(&c, 0.5f, -0.25f, 0.890000002, 0.8544663);
}
END_TEST

START_TEST(test_grad_scale)
{
    /* grad_scale multiplies the gradient: SGD 0.5 * 2 -> w = 1 - 0.1 */
    optim_config c;
    optim_config_defaults(&c, OPTIM_SGD);
    optim_state st;
    ck_assert_int_eq(optim_state_init(&st, &c, 1), 0);
    float w = 1, g = 0.5f;
    optim_step(&c, &st, &w, &g, 2.0f, 0.1f);
    ck_assert_float_eq_tol(w, 0.9f, 1e-7f);
    optim_state_deinit(&st);
}
END_TEST

START_TEST(test_schedules)
{
    optim_config c;
    optim_config_defaults(&c, OPTIM_SGD);
    c.lr = 0.1f;
    ck_assert_float_eq(optim_lr_at(&c, 0), 0.1f);
    ck_assert_float_eq(optim_lr_at(&c, 1000000), 0.1f);
    /* warm-up 4 then constant: 0.025 0.05 0.075 0.1, 0.1 */
    c.warmup_steps = 4;
    ck_assert_float_eq_tol(optim_lr_at(&c, 0), 0.025f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 2), 0.075f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 3), 0.1f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 9), 0.1f, 1e-8f);
    /* then cosine to 0.001 over 10 steps: t = step - 4.
     * t=0: 0.1; t=3: 0.001 + 0.099*(1 + cos(0.3 pi))/2 = 0.0795954;
     * t=5: 0.001 + 0.099/2 = 0.0505; t>=10: 0.001 */
    c.schedule = OPTIM_LR_COSINE;
    c.decay_steps = 10;
    c.end_lr = 0.001f;
    ck_assert_float_eq_tol(optim_lr_at(&c, 1), 0.05f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 4), 0.1f, 1e-7f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 7), 0.0795954f, 1e-7f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 9), 0.0505f, 1e-7f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 14), 0.001f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 500), 0.001f, 1e-8f);
    /* step decay without warm-up, gamma 0.5 every 3 steps:
     * 0..2: 0.1, 3..5: 0.05, 6..8: 0.025, 9: 0.0125 */
    c.warmup_steps = 0;
    c.schedule = OPTIM_LR_STEP;
    c.step_size = 3;
    c.gamma = 0.5f;
    ck_assert_float_eq_tol(optim_lr_at(&c, 2), 0.1f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 3), 0.05f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 8), 0.025f, 1e-8f);
    ck_assert_float_eq_tol(optim_lr_at(&c, 9), 0.0125f, 1e-8f);
}
END_TEST

START_TEST(test_clipping)
{
    /* tensors [3 4] and [12]: norm sqrt(9 + 16 + 144) = 13 */
    const float a[2] = {3, 4}, b[1] = {12};
    const float *g[2] = {a, b};
    const size_t n[2] = {2, 1};
    double norm = optim_global_norm(g, n, 2);
    ck_assert_double_eq_tol(norm, 13.0, 1e-12);
    ck_assert_double_eq_tol(optim_sum_squares(a, 2) + optim_sum_squares(b, 1), 169.0, 1e-12);
    /* max 6.5: 6.5/(13 + 1e-6) = 0.49999996 */
    ck_assert_float_eq_tol(optim_clip_scale(norm, 6.5f), 0.5f, 1e-7f);
    ck_assert_float_eq(optim_clip_scale(norm, 20.0f), 1.0f);
    ck_assert_float_eq(optim_clip_scale(norm, 0.0f), 1.0f);
    ck_assert(isnan(optim_clip_scale(INFINITY, 1.0f)));
    ck_assert(isnan(optim_clip_scale(NAN, 1.0f)));
}
END_TEST

/* The tensors of one step: [3 4] and [12] (norm 13), and a buffer whose
 * value is assigned, not optimized. */
typedef struct step_fixture {
    float w[3][2];
    float g[3][2];
    optim_state st[3];
} step_fixture;

static void step_param(void *ctx, size_t i, optim_param *out)
{
    step_fixture *f = ctx;
    static const size_t n[3] = {2, 1, 2};
    *out = (optim_param){f->w[i], f->g[i], n[i], i < 2, &f->st[i], NULL, NULL};
}

/* optim_apply_step: the clipping factor of the trainable tensors' global
 * norm (the buffer's values do not count), then SGD on each; a buffer
 * takes the reduced value. */
START_TEST(test_apply_step)
{
    optim_config c;
    optim_config_defaults(&c, OPTIM_SGD);
    c.lr = 0.1f;
    c.max_gradient_norm = 6.5f;
    step_fixture f = {
        .w = {{1, 1}, {1, 0}, {5, 6}},
        .g = {{3, 4}, {12, 0}, {100, 200}},
    };
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(optim_state_init(&f.st[i], &c, 2), 0);
    optim_apply_step(&c, 3, step_param, &f, 0);
    float s = optim_clip_scale(13.0, 6.5f); /* the buffer's 100, 200 left out */
    ck_assert_float_eq(f.w[0][0], 1.0f - 0.1f * (3 * s));
    ck_assert_float_eq(f.w[0][1], 1.0f - 0.1f * (4 * s));
    ck_assert_float_eq(f.w[1][0], 1.0f - 0.1f * (12 * s));
    ck_assert_float_eq_tol(f.w[1][0], 1.0f - 0.6f, 1e-6f);
    ck_assert_float_eq(f.w[2][0], 100.0f);
    ck_assert_float_eq(f.w[2][1], 200.0f);
    ck_assert_int_eq(optim_state_step(&f.st[0]), 1);
    /* without clipping the gradients go in whole */
    c.max_gradient_norm = 0;
    optim_apply_step(&c, 3, step_param, &f, 1);
    ck_assert_float_eq(f.w[1][0], (1.0f - 0.1f * (12 * s)) - 0.1f * 12);
    for (int i = 0; i < 3; i++)
        optim_state_deinit(&f.st[i]);
}
END_TEST

/* Two large tensors and a buffer, for the split step. */
enum { SPLIT_N = 100003 };
typedef struct split_fixture {
    float *w[3], *g[3];
    optim_state st[3];
    uint16_t *w16[3]; /* or NULL */
    uint16_t *g16[3]; /* or NULL: g */
} split_fixture;

static void split_param(void *ctx, size_t i, optim_param *out)
{
    split_fixture *f = ctx;
    *out = (optim_param){f->w[i], f->g[i], SPLIT_N, i < 2, &f->st[i], f->w16[i], f->g16[i]};
}

/* The rule's defaults with a rate, momentum and weight decay. */
static void split_config(optim_config *c, optim_type type)
{
    optim_config_defaults(c, type);
    c->lr = 0.01f;
    c->momentum = 0.9f;
    c->weight_decay = 0.01f;
}

/* optim_apply_step_split through the kernels' two threads is bit for bit
 * optim_apply_step, for every rule, with clipping, over several steps
 * (SGD's first step and Adam's bias corrections count the steps); the
 * split step's bfloat16 copies are its weights rounded, after every step. */
START_TEST(test_apply_step_split)
{
    const optim_type types[] = {OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW};
    kt_rng r;
    kt_rng_init(&r, 5);
    for (size_t t = 0; t < 3; t++) {
        optim_config c;
        split_config(&c, types[t]);
        c.max_gradient_norm = 50.0f;
        split_fixture a = {0}, b = {0};
        uint16_t *want = malloc(sizeof(uint16_t) * SPLIT_N);
        for (int i = 0; i < 3; i++) {
            b.w16[i] = malloc(sizeof(uint16_t) * SPLIT_N);
            a.w[i] = kt_falloc(SPLIT_N), a.g[i] = kt_falloc(SPLIT_N);
            b.w[i] = kt_falloc(SPLIT_N), b.g[i] = kt_falloc(SPLIT_N);
            kt_fill(&r, a.w[i], SPLIT_N, -1, 1);
            kt_fill(&r, a.g[i], SPLIT_N, -1, 1);
            memcpy(b.w[i], a.w[i], sizeof(float) * SPLIT_N);
            memcpy(b.g[i], a.g[i], sizeof(float) * SPLIT_N);
            ck_assert_int_eq(optim_state_init(&a.st[i], &c, SPLIT_N), 0);
            ck_assert_int_eq(optim_state_init(&b.st[i], &c, SPLIT_N), 0);
        }
        kernels_set_threads(2);
        for (int64_t step = 0; step < 3; step++) {
            optim_apply_step(&c, 3, split_param, &a, step);
            optim_apply_step_split(&c, 3, split_param, &b, step, kernels_for);
            for (int i = 0; i < 3; i++) {
                bf16_pack(want, b.w[i], SPLIT_N);
                ck_assert_msg(memcmp(want, b.w16[i], sizeof(uint16_t) * SPLIT_N) == 0,
                              "%s: tensor %d's bfloat16 copy is not its weights rounded "
                              "after step %lld", optim_type_name(types[t]), i, (long long)step);
            }
        }
        free(want);
        kernels_set_threads(1);
        ck_assert_int_eq(optim_state_step(&b.st[0]), 3);
        for (int i = 0; i < 3; i++) {
            ck_assert_msg(memcmp(a.w[i], b.w[i], sizeof(float) * SPLIT_N) == 0,
                          "%s: tensor %d differs when split", optim_type_name(types[t]), i);
            ck_assert_int_eq(optim_state_step(&a.st[i]), optim_state_step(&b.st[i]));
            for (size_t k = 0; k < optim_state_count(&a.st[i]); k++)
                ck_assert(memcmp(optim_state_tensor(&a.st[i], k, NULL, NULL),
                                 optim_state_tensor(&b.st[i], k, NULL, NULL),
                                 sizeof(float) * SPLIT_N) == 0);
            optim_state_deinit(&a.st[i]), optim_state_deinit(&b.st[i]);
            free(a.w[i]), free(a.g[i]), free(b.w[i]), free(b.g[i]), free(b.w16[i]);
        }
    }
}
END_TEST

/* b holds a's weights, bfloat16 copies, step counts and state bit for bit
 * (rule and how name the case in the message). */
static void split_same(split_fixture *a, split_fixture *b, const char *rule, const char *how)
{
    for (int i = 0; i < 3; i++) {
        ck_assert_msg(memcmp(a->w[i], b->w[i], sizeof(float) * SPLIT_N) == 0,
                      "%s: tensor %d differs (%s)", rule, i, how);
        ck_assert(memcmp(a->w16[i], b->w16[i], sizeof(uint16_t) * SPLIT_N) == 0);
        ck_assert_int_eq(optim_state_step(&a->st[i]), optim_state_step(&b->st[i]));
        for (size_t q = 0; q < optim_state_count(&a->st[i]); q++)
            ck_assert(memcmp(optim_state_tensor(&a->st[i], q, NULL, NULL),
                             optim_state_tensor(&b->st[i], q, NULL, NULL),
                             sizeof(float) * SPLIT_N) == 0);
    }
}

static void split_free(split_fixture *f, int count)
{
    for (int k = 0; k < count; k++)
        for (int i = 0; i < 3; i++) {
            optim_state_deinit(&f[k].st[i]);
            free(f[k].w[i]), free(f[k].g[i]), free(f[k].w16[i]), free(f[k].g16[i]);
        }
}

/* count fixtures of the same random weights and gradients, fresh state
 * and room for bfloat16 copies; tensors below nb16 have gradients in
 * bfloat16: the reference f[0] is given them widened, the others in g16. */
static void split_make(split_fixture *f, int count, const optim_config *c, kt_rng *r, int nb16)
{
    memset(f, 0, sizeof(*f) * (size_t)count);
    for (int i = 0; i < 3; i++) {
        uint16_t *g16 = malloc(sizeof(uint16_t) * SPLIT_N);
        float *w = kt_falloc(SPLIT_N), *g = kt_falloc(SPLIT_N);
        kt_fill(r, w, SPLIT_N, -1, 1);
        kt_fill(r, g, SPLIT_N, -1, 1);
        bf16_pack(g16, g, SPLIT_N);
        if (i < nb16)
            bf16_unpack(g, g16, SPLIT_N); /* what the reference is given */
        for (int k = 0; k < count; k++) {
            f[k].w[i] = kt_falloc(SPLIT_N);
            memcpy(f[k].w[i], w, sizeof(float) * SPLIT_N);
            f[k].w16[i] = malloc(sizeof(uint16_t) * SPLIT_N);
            ck_assert_int_eq(optim_state_init(&f[k].st[i], c, SPLIT_N), 0);
            if (k == 0 || i >= nb16) {
                f[k].g[i] = kt_falloc(SPLIT_N);
                memcpy(f[k].g[i], g, sizeof(float) * SPLIT_N);
            } else {
                f[k].g16[i] = malloc(sizeof(uint16_t) * SPLIT_N);
                memcpy(f[k].g16[i], g16, sizeof(uint16_t) * SPLIT_N);
            }
        }
        free(g16), free(w), free(g);
    }
}

/* A bfloat16 gradient (g16, as memoryx keeps what the wire brings),
 * widened a block at a time by the update, on one thread and split: the
 * weights, state and bfloat16 copies bit for bit those of the whole
 * gradient widened first, for every rule over several steps; the buffer
 * still takes its float32 value. */
START_TEST(test_apply_step_g16)
{
    const optim_type types[] = {OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW};
    kt_rng r;
    kt_rng_init(&r, 9);
    for (size_t t = 0; t < 3; t++) {
        optim_config c;
        split_config(&c, types[t]);
        split_fixture f[3]; /* the reference, one thread, split */
        split_make(f, 3, &c, &r, 2);
        kernels_set_threads(2);
        for (int64_t step = 0; step < 3; step++) {
            optim_apply_step(&c, 3, split_param, &f[0], step);
            optim_apply_step(&c, 3, split_param, &f[1], step);
            optim_apply_step_split(&c, 3, split_param, &f[2], step, kernels_for);
        }
        kernels_set_threads(1);
        split_same(&f[0], &f[1], optim_type_name(types[t]), "a bfloat16 gradient, one thread");
        split_same(&f[0], &f[2], optim_type_name(types[t]), "a bfloat16 gradient, split");
        ck_assert_int_eq(optim_state_step(&f[1].st[0]), 3);
        split_free(f, 3);
    }
}
END_TEST

/* A tensor updated in parts as their gradients come (memoryx's parts):
 * optim_update_range over ranges of uneven sizes in a scrambled order, then
 * optim_update_finish once, is bit for bit optim_apply_step over several
 * steps, for every rule, with a bfloat16 gradient or a float32 one, the
 * weights' bfloat16 copy and a buffer. */
START_TEST(test_update_range)
{
    const optim_type types[] = {OPTIM_SGD, OPTIM_ADAM, OPTIM_ADAMW};
    enum { PART = 7919 };
    size_t nparts = (SPLIT_N + PART - 1) / PART;
    kt_rng r;
    kt_rng_init(&r, 11);
    for (size_t t = 0; t < 3; t++) {
        optim_config c;
        split_config(&c, types[t]);
        split_fixture f[2]; /* the reference, in parts */
        split_make(f, 2, &c, &r, 1);
        for (int64_t step = 0; step < 3; step++) {
            optim_apply_step(&c, 3, split_param, &f[0], step);
            for (size_t i = 0; i < 3; i++) {
                optim_param p;
                split_param(&f[1], i, &p);
                for (size_t k = 0; k < nparts; k++) {
                    size_t q = (k * 5 + (size_t)step) % nparts; /* 5 and nparts coprime */
                    size_t lo = q * PART, hi = lo + PART < SPLIT_N ? lo + PART : SPLIT_N;
                    optim_update_range(&c, &p, lo, hi, step);
                }
                optim_update_finish(&p);
            }
        }
        split_same(&f[0], &f[1], optim_type_name(types[t]), "updated in parts");
        ck_assert_int_eq(optim_state_step(&f[1].st[0]), 3);
        split_free(f, 2);
    }
}
END_TEST

START_TEST(test_names_and_config)
{
    optim_type t = OPTIM_SGD;
    ck_assert_int_eq(optim_type_from_name("adamw", &t), 0);
    ck_assert_int_eq(t, OPTIM_ADAMW);
    ck_assert_int_eq(optim_type_from_name("Adam", &t), 0);
    ck_assert_int_eq(t, OPTIM_ADAM);
    ck_assert_int_eq(optim_type_from_name("SGD", &t), 0);
    ck_assert_int_eq(t, OPTIM_SGD);
    ck_assert_int_eq(optim_type_from_name("lamb", &t), -EINVAL);
    ck_assert_int_eq(optim_type_from_name("", &t), -EINVAL);
    ck_assert_int_eq(optim_type_from_name(NULL, &t), -EINVAL);
    ck_assert_int_eq(t, OPTIM_SGD);
    ck_assert_str_eq(optim_type_name(OPTIM_ADAMW), "adamw");
    optim_schedule s;
    ck_assert_int_eq(optim_schedule_from_name("cosine", &s), 0);
    ck_assert_int_eq(s, OPTIM_LR_COSINE);
    ck_assert_int_eq(optim_schedule_from_name("linear", &s), -EINVAL);
    ck_assert_str_eq(optim_schedule_name(OPTIM_LR_STEP), "step");

    optim_config c;
    optim_config_defaults(&c, OPTIM_SGD);
    ck_assert_int_eq(optim_config_check(&c), 0);
    c.nesterov = 1; /* needs momentum */
    ck_assert_int_eq(optim_config_check(&c), -EINVAL);
    c.momentum = 0.9f;
    ck_assert_int_eq(optim_config_check(&c), 0);
    c.lr = NAN;
    ck_assert_int_eq(optim_config_check(&c), -EINVAL);
    optim_config_defaults(&c, OPTIM_ADAM);
    c.beta2 = 1.0f;
    ck_assert_int_eq(optim_config_check(&c), -EINVAL);
    optim_state st;
    ck_assert_int_eq(optim_state_init(&st, &c, 4), -EINVAL);
    optim_config_defaults(&c, OPTIM_SGD);
    c.schedule = OPTIM_LR_COSINE;
    c.decay_steps = 0;
    ck_assert_int_eq(optim_config_check(&c), -EINVAL);
}
END_TEST

START_TEST(test_state_save_restore)
{
    /* Three Adam steps, save the state as a checkpoint writer would (by
     * enumeration), restore into a fresh state (by name), and check that
     * both continue identically. */
    enum { N = 37 };
    kt_rng r;
    kt_rng_init(&r, 91);
    optim_config c;
    optim_config_defaults(&c, OPTIM_ADAMW);
    optim_state a, b;
    ck_assert_int_eq(optim_state_init(&a, &c, N), 0);
    ck_assert_uint_eq(optim_state_count(&a), 2);
    float w[N], g[N], saved[2][N];
    const char *names[2];
    kt_fill(&r, w, N, -1, 1);
    for (int s = 0; s < 3; s++) {
        kt_fill(&r, g, N, -1, 1);
        optim_step(&c, &a, w, g, 1.0f, optim_lr_at(&c, s));
    }
    for (size_t i = 0; i < optim_state_count(&a); i++) {
        size_t count = 0;
        float *t = optim_state_tensor(&a, i, &names[i], &count);
        ck_assert_uint_eq(count, N);
        memcpy(saved[i], t, sizeof(saved[i]));
    }
    ck_assert_str_eq(names[0], "exp_avg");
    ck_assert_str_eq(names[1], "exp_avg_sq");
    ck_assert_ptr_null(optim_state_tensor(&a, 2, NULL, NULL));

    ck_assert_int_eq(optim_state_init(&b, &c, N), 0);
    for (int i = 0; i < 2; i++) {
        size_t count = 0;
        float *t = optim_state_find(&b, names[i], &count);
        ck_assert_ptr_nonnull(t);
        memcpy(t, saved[i], sizeof(float) * count);
    }
    ck_assert_ptr_null(optim_state_find(&b, "momentum_buffer", NULL));
    optim_state_set_step(&b, optim_state_step(&a));
    float w2[N];
    memcpy(w2, w, sizeof(w));
    for (int s = 3; s < 6; s++) {
        kt_fill(&r, g, N, -1, 1);
        optim_step(&c, &a, w, g, 1.0f, optim_lr_at(&c, s));
        optim_step(&c, &b, w2, g, 1.0f, optim_lr_at(&c, s));
    }
    ck_assert_int_eq(memcmp(w, w2, sizeof(w)), 0);
    optim_state_deinit(&a);
    optim_state_deinit(&b);

    /* SGD: a momentum buffer only with momentum */
    optim_config_defaults(&c, OPTIM_SGD);
    ck_assert_int_eq(optim_state_init(&a, &c, N), 0);
    ck_assert_uint_eq(optim_state_count(&a), 0);
    optim_state_deinit(&a);
    c.momentum = 0.9f;
    ck_assert_int_eq(optim_state_init(&a, &c, N), 0);
    ck_assert_uint_eq(optim_state_count(&a), 1);
    ck_assert_str_eq(a.name[0], "momentum_buffer");
    optim_state_deinit(&a);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_sgd);
    tcase_add_test(tc, test_adam);
    tcase_add_test(tc, test_grad_scale);
    tcase_add_test(tc, test_schedules);
    tcase_add_test(tc, test_clipping);
    tcase_add_test(tc, test_apply_step);
    tcase_add_test(tc, test_apply_step_split);
    tcase_add_test(tc, test_apply_step_g16);
    tcase_add_test(tc, test_update_range);
    tcase_add_test(tc, test_names_and_config);
    tcase_add_test(tc, test_state_save_restore);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
