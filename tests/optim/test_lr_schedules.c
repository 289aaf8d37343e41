/* The Model Zoo's schedulers (optim_segment) at chosen steps against rates
 * worked out by hand, boundaries included; lists run one after another;
 * the plan's copy of a schedule; Adam without bias correction. */
#include <check.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "optim_plan.h"

/* A config whose rate is the n segments seg. */
static optim_config sched(const optim_segment *seg, size_t n)
{
    optim_config c;
    optim_config_defaults(&c, OPTIM_SGD);
    c.nsegments = n;
    memcpy(c.segments, seg, n * sizeof(*seg));
    ck_assert_int_eq(optim_config_check(&c), 0);
    return c;
}

/* lr at step is want, to float32's rounding (relative) or 1e-12. */
#define LR_AT(c, step, want)                                                                     \
    do {                                                                                         \
        double got_ = optim_lr_at(&(c), (step)), want_ = (want);                                 \
        ck_assert_msg(fabs(got_ - want_) <= 1e-12 + 2e-7 * fabs(want_),                          \
                      "step %lld: %.9g, want %.9g", (long long)(step), got_, want_);             \
    } while (0)

START_TEST(test_constant)
{
    optim_segment s = {.kind = OPTIM_SCHED_CONSTANT, .initial = 0.01};
    optim_config c = sched(&s, 1);
    LR_AT(c, 0, 0.01);
    LR_AT(c, 123456789, 0.01);
}
END_TEST

START_TEST(test_linear_and_polynomial)
{
    /* Linear 1 -> 0.2 over 8: 1 - 0.1 t, 0.2 from t = 8 on */
    optim_segment s = {.kind = OPTIM_SCHED_POLYNOMIAL, .initial = 1, .end = 0.2,
                       .total_iters = 8, .power = 1};
    optim_config c = sched(&s, 1);
    LR_AT(c, 0, 1.0);
    LR_AT(c, 1, 0.9);
    LR_AT(c, 7, 0.3);
    LR_AT(c, 8, 0.2);
    LR_AT(c, 1000, 0.2);
    /* power 2, 1 -> 0 over 10: (1 - t/10)^2 */
    s = (optim_segment){.kind = OPTIM_SCHED_POLYNOMIAL, .initial = 1, .end = 0,
                        .total_iters = 10, .power = 2};
    c = sched(&s, 1);
    LR_AT(c, 1, 0.81);
    LR_AT(c, 5, 0.25);
    LR_AT(c, 9, 0.01);
    LR_AT(c, 10, 0.0);
    /* rising: 0 -> 2.5e-4 over 4000 */
    s = (optim_segment){.kind = OPTIM_SCHED_POLYNOMIAL, .initial = 0, .end = 2.5e-4,
                        .total_iters = 4000, .power = 1};
    c = sched(&s, 1);
    LR_AT(c, 0, 0.0);
    LR_AT(c, 1, 6.25e-8);
    LR_AT(c, 4000, 2.5e-4);
}
END_TEST

START_TEST(test_exponential)
{
    /* 0.1 * 0.5^(t/10) */
    optim_segment s = {.kind = OPTIM_SCHED_EXPONENTIAL, .initial = 0.1, .total_iters = 10,
                       .rate = 0.5};
    optim_config c = sched(&s, 1);
    LR_AT(c, 0, 0.1);
    LR_AT(c, 5, 0.07071067811865477);
    LR_AT(c, 10, 0.05);
    LR_AT(c, 25, 0.01767766952966369); /* it goes on past total_iters */
    /* staircase: 0.1 * 0.5^floor(t/10) */
    s.staircase = true;
    c = sched(&s, 1);
    LR_AT(c, 9, 0.1);
    LR_AT(c, 10, 0.05);
    LR_AT(c, 19, 0.05);
    LR_AT(c, 20, 0.025);
}
END_TEST

START_TEST(test_inverse_decays)
{
    /* 1 / (1 + 0.5 t / 10) */
    optim_segment s = {.kind = OPTIM_SCHED_INVERSE_EXP_TIME, .initial = 1, .total_iters = 10,
                       .rate = 0.5, .exponent = 1};
    optim_config c = sched(&s, 1);
    LR_AT(c, 0, 1.0);
    LR_AT(c, 5, 0.8);
    LR_AT(c, 10, 1.0 / 1.5);
    LR_AT(c, 20, 0.5);
    s.staircase = true; /* floor(t / 10) */
    c = sched(&s, 1);
    LR_AT(c, 5, 1.0);
    LR_AT(c, 10, 1.0 / 1.5);
    s.staircase = false;
    s.exponent = 2; /* 1 / (1 + 0.5 * 25 / 10) at t = 5 */
    c = sched(&s, 1);
    LR_AT(c, 5, 1.0 / 2.25);
    /* 2 * 1 / sqrt(max(t, 4)) */
    s = (optim_segment){.kind = OPTIM_SCHED_INVERSE_SQRT, .initial = 2, .scale = 1, .period = 4};
    c = sched(&s, 1);
    LR_AT(c, 0, 1.0);
    LR_AT(c, 4, 1.0);
    LR_AT(c, 16, 0.5);
    LR_AT(c, 100, 0.2);
}
END_TEST

START_TEST(test_cosines)
{
    /* 0.001 + 0.099 (1 + cos(pi t / 10)) / 2, then 0.001 */
    optim_segment s = {.kind = OPTIM_SCHED_COSINE_DECAY, .initial = 0.1, .end = 0.001,
                       .total_iters = 10};
    optim_config c = sched(&s, 1);
    LR_AT(c, 0, 0.1);
    LR_AT(c, 3, 0.07959536998847742);
    LR_AT(c, 5, 0.0505);
    LR_AT(c, 10, 0.001);
    LR_AT(c, 20, 0.001);
    /* annealing goes on: back up after T_max */
    s = (optim_segment){.kind = OPTIM_SCHED_COSINE_ANNEALING, .initial = 1, .end = 0, .period = 10};
    c = sched(&s, 1);
    LR_AT(c, 5, 0.5);
    LR_AT(c, 10, 0.0);
    LR_AT(c, 15, 0.5);
    LR_AT(c, 20, 1.0);
}
END_TEST

START_TEST(test_step)
{
    /* 0.1 * 0.5^floor(t / 3) */
    optim_segment s = {.kind = OPTIM_SCHED_STEP, .initial = 0.1, .rate = 0.5, .period = 3};
    optim_config c = sched(&s, 1);
    LR_AT(c, 2, 0.1);
    LR_AT(c, 3, 0.05);
    LR_AT(c, 8, 0.025);
    LR_AT(c, 9, 0.0125);
}
END_TEST

/* The Model Zoo's U-Net (Inria aerial): Linear 0 -> 2.5e-4 over 4000 steps,
 * then Linear 2.5e-4 -> 0 over 10000; the first update is step 0. */
START_TEST(test_warmup_then_decay)
{
    optim_segment s[2] = {
        {.kind = OPTIM_SCHED_POLYNOMIAL, .initial = 0, .end = 2.5e-4, .total_iters = 4000,
         .power = 1},
        {.kind = OPTIM_SCHED_POLYNOMIAL, .initial = 2.5e-4, .end = 0, .total_iters = 10000,
         .power = 1},
    };
    optim_config c = sched(s, 2);
    LR_AT(c, 0, 0.0);             /* the first update: nothing yet */
    LR_AT(c, 1, 6.25e-8);
    LR_AT(c, 2000, 1.25e-4);
    LR_AT(c, 3999, 2.499375e-4);
    LR_AT(c, 4000, 2.5e-4);       /* the second starts at its own step 0 */
    LR_AT(c, 4001, 2.49975e-4);
    LR_AT(c, 9000, 1.25e-4);
    LR_AT(c, 13999, 2.5e-8);
    LR_AT(c, 14000, 0.0);         /* the last holds its end */
    LR_AT(c, 50000, 0.0);
}
END_TEST

/* PiecewiseConstant is runs of constants: milestones [3, 7], rates
 * [1, 0.5, 0.25]. */
START_TEST(test_piecewise)
{
    optim_segment s[3] = {
        {.kind = OPTIM_SCHED_CONSTANT, .initial = 1, .total_iters = 3},
        {.kind = OPTIM_SCHED_CONSTANT, .initial = 0.5, .total_iters = 4},
        {.kind = OPTIM_SCHED_CONSTANT, .initial = 0.25},
    };
    optim_config c = sched(s, 3);
    LR_AT(c, 0, 1.0);
    LR_AT(c, 2, 1.0);
    LR_AT(c, 3, 0.5);
    LR_AT(c, 6, 0.5);
    LR_AT(c, 7, 0.25);
    LR_AT(c, 1000000, 0.25);
    /* a decay after a constant: its t starts at the boundary */
    optim_segment d[2] = {
        {.kind = OPTIM_SCHED_CONSTANT, .initial = 0.1, .total_iters = 2},
        {.kind = OPTIM_SCHED_EXPONENTIAL, .initial = 0.2, .total_iters = 1, .rate = 0.5},
    };
    c = sched(d, 2);
    LR_AT(c, 1, 0.1);
    LR_AT(c, 2, 0.2);
    LR_AT(c, 4, 0.05);
}
END_TEST

START_TEST(test_names)
{
    optim_sched k;
    bool one = false;
    const struct {
        const char *name;
        optim_sched kind;
        bool one;
    } ok[] = {
        {"Constant", OPTIM_SCHED_CONSTANT, false},
        {"ConstantLR", OPTIM_SCHED_CONSTANT, false},
        {"linear", OPTIM_SCHED_POLYNOMIAL, true},
        {"LinearLR", OPTIM_SCHED_POLYNOMIAL, true},
        {"POLYNOMIAL", OPTIM_SCHED_POLYNOMIAL, false},
        {"ExponentialLR", OPTIM_SCHED_EXPONENTIAL, false},
        {"InverseExponentialTimeDecay", OPTIM_SCHED_INVERSE_EXP_TIME, false},
        {"InverseSquareRootDecayLR", OPTIM_SCHED_INVERSE_SQRT, false},
        {"CosineDecay", OPTIM_SCHED_COSINE_DECAY, false},
        {"steplr", OPTIM_SCHED_STEP, false},
        {"CosineAnnealingLR", OPTIM_SCHED_COSINE_ANNEALING, false},
    };
    for (size_t i = 0; i < sizeof(ok) / sizeof(ok[0]); i++) {
        ck_assert_msg(optim_sched_from_name(ok[i].name, &k, &one) == 0, "%s", ok[i].name);
        ck_assert_int_eq(k, ok[i].kind);
        ck_assert_int_eq(one, ok[i].one);
        optim_sched back;
        ck_assert_int_eq(optim_sched_from_plan_name(optim_sched_name(k), &back), 0);
        ck_assert_int_eq(back, k);
    }
    ck_assert_int_eq(optim_sched_from_name("Cyclic", &k, NULL), -EINVAL);
    ck_assert_int_eq(optim_sched_from_name("LR", &k, NULL), -EINVAL);
    ck_assert_int_eq(optim_sched_from_name("", &k, NULL), -EINVAL);
    ck_assert_int_eq(optim_sched_from_plan_name("Linear", &k), -EINVAL);
}
END_TEST

START_TEST(test_check)
{
    optim_segment s[2] = {
        {.kind = OPTIM_SCHED_CONSTANT, .initial = 1}, /* not the last: needs total_iters */
        {.kind = OPTIM_SCHED_CONSTANT, .initial = 1},
    };
    ck_assert_int_eq(optim_segments_check(s, 2), -EINVAL);
    s[0].total_iters = 5;
    ck_assert_int_eq(optim_segments_check(s, 2), 0);
    s[1].initial = NAN;
    ck_assert_int_eq(optim_segments_check(s, 2), -EINVAL);
    s[1] = (optim_segment){.kind = OPTIM_SCHED_STEP, .initial = 1, .rate = 0.5}; /* step_size 0 */
    ck_assert_int_eq(optim_segments_check(s, 2), -EINVAL);
    s[1] = (optim_segment){.kind = OPTIM_SCHED_COSINE_DECAY, .initial = 1}; /* total_iters 0 */
    ck_assert_int_eq(optim_segments_check(s, 2), -EINVAL);
    s[1].kind = (optim_sched)99;
    ck_assert_int_eq(optim_segments_check(s, 2), -EINVAL);
    ck_assert_int_eq(optim_segments_check(s, OPTIM_MAX_SEGMENTS + 1), -EINVAL);
    optim_config c;
    optim_config_defaults(&c, OPTIM_ADAM);
    c.nsegments = 2;
    memcpy(c.segments, s, sizeof(s));
    ck_assert_int_eq(optim_config_check(&c), -EINVAL);
}
END_TEST

/* A schedule goes through the plan and comes back the same. */
START_TEST(test_plan_round_trip)
{
    optim_segment s[3] = {
        {.kind = OPTIM_SCHED_POLYNOMIAL, .initial = 0, .end = 1e-3, .total_iters = 10, .power = 1},
        {.kind = OPTIM_SCHED_EXPONENTIAL, .initial = 1e-3, .total_iters = 20, .rate = 0.9,
         .staircase = true},
        {.kind = OPTIM_SCHED_INVERSE_SQRT, .initial = 1, .scale = 0.01, .period = 30},
    };
    Appliance__PlanOptimizer po;
    appliance__plan_optimizer__init(&po);
    po.type = "adamw";
    po.schedule = "constant";
    po.learning_rate = 0.5; /* not used: the segments give the rates */
    po.beta1 = 0.9;
    po.beta2 = 0.999;
    po.no_bias_correction = true;
    Appliance__PlanLrSegment store[3], *ptrs[3];
    ck_assert_int_eq(optim_segments_to_plan(s, 3, &po, store, ptrs), 0);
    ck_assert_str_eq(po.lr_segments[2]->scheduler, "inverse_square_root_decay");
    /* through the wire */
    size_t len = appliance__plan_optimizer__get_packed_size(&po);
    uint8_t *buf = malloc(len);
    appliance__plan_optimizer__pack(&po, buf);
    Appliance__PlanOptimizer *back = appliance__plan_optimizer__unpack(NULL, len, buf);
    ck_assert_ptr_nonnull(back);
    optim_config c, want = sched(s, 3);
    ck_assert_int_eq(optim_from_plan(back, &c), 0);
    ck_assert(!c.correct_bias);
    ck_assert_uint_eq(c.nsegments, 3);
    for (int64_t step = 0; step < 100; step += 3)
        ck_assert_float_eq(optim_lr_at(&c, step), optim_lr_at(&want, step));
    /* an unknown kind or too many segments: refused */
    back->lr_segments[1]->scheduler[0] = 'X';
    ck_assert_int_eq(optim_from_plan(back, &c), -EINVAL);
    appliance__plan_optimizer__free_unpacked(back, NULL);
    po.n_lr_segments = OPTIM_MAX_SEGMENTS + 1;
    ck_assert_int_eq(optim_from_plan(&po, &c), -EINVAL);
    free(buf);
    /* an old plan: no segments, bias corrected */
    appliance__plan_optimizer__init(&po);
    po.type = "adam";
    po.schedule = "constant";
    po.learning_rate = 0.5;
    po.beta1 = 0.9;
    po.beta2 = 0.999;
    ck_assert_int_eq(optim_from_plan(&po, &c), 0);
    ck_assert(c.correct_bias);
    ck_assert_uint_eq(c.nsegments, 0);
    ck_assert_float_eq(optim_lr_at(&c, 7), 0.5f);
}
END_TEST

/* Two updates of w = 1 with gradients 0.5 then -0.25, lr 0.1, betas 0.9
 * and 0.999, eps 1e-8, no bias correction: w -= lr m / (sqrt(v) + eps).
 * t=1: m = 0.05, v = 0.00025: w = 1 - 0.1 * 0.05 / 0.0158113983 = 0.683772434;
 * t=2: m = 0.02, v = 0.00031225: w = 0.683772434 - 0.1 * 0.02 / 0.0176705970
 * = 0.570590131. AdamW with decay 0.1 scales w by 0.99 first: 0.673772434,
 * then 0.673772434 * 0.99 - 0.113181303 = 0.553852407. The betas are
 * float32's (0.999 is 0.99900001287: 1 - beta2 is 1.3e-5 smaller), which
 * moves each by 2e-6: the values below are the formula's with those. */
START_TEST(test_no_bias_correction)
{
    const optim_type types[2] = {OPTIM_ADAM, OPTIM_ADAMW};
    const double want[2][2] = {{0.6837703229174252, 0.5705872717231637},
                               {0.6737703229174252, 0.5538495684939895}};
    for (int k = 0; k < 2; k++) {
        optim_config c;
        optim_config_defaults(&c, types[k]);
        c.correct_bias = false;
        c.weight_decay = k ? 0.1f : 0.0f;
        optim_state st;
        ck_assert_int_eq(optim_state_init(&st, &c, 1), 0);
        float w = 1.0f, g0 = 0.5f, g1 = -0.25f;
        optim_step(&c, &st, &w, &g0, 1.0f, 0.1f);
        ck_assert_msg(fabs(w - want[k][0]) < 1e-6, "%d: first %.9g", k, w);
        optim_step(&c, &st, &w, &g1, 1.0f, 0.1f);
        ck_assert_msg(fabs(w - want[k][1]) < 1e-6, "%d: second %.9g", k, w);
        optim_state_deinit(&st);
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("optim-schedules");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, test_constant);
    tcase_add_test(tc, test_linear_and_polynomial);
    tcase_add_test(tc, test_exponential);
    tcase_add_test(tc, test_inverse_decays);
    tcase_add_test(tc, test_cosines);
    tcase_add_test(tc, test_step);
    tcase_add_test(tc, test_warmup_then_decay);
    tcase_add_test(tc, test_piecewise);
    tcase_add_test(tc, test_names);
    tcase_add_test(tc, test_check);
    tcase_add_test(tc, test_plan_round_trip);
    tcase_add_test(tc, test_no_bias_correction);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
