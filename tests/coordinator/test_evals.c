/* Evaluation totals (coordinator/evals.c): an evaluation is ready once every
 * replica reported it, whatever order the reports of several evaluations
 * arrive in; its loss, accuracy and IoU are the totals' ratios; a slot held
 * by an evaluation that never completes is given up, and said so. */
#include <check.h>
#include <stdlib.h>

#include "evals.h"

static evals *fresh(void)
{
    evals *e = malloc(sizeof(*e));
    ck_assert_ptr_nonnull(e);
    evals_reset(e);
    return e;
}

static evals_report cls(uint64_t step, uint64_t samples, uint64_t correct, double loss_sum)
{
    return (evals_report){.step = step, .samples = samples, .correct = correct, .loss_sum = loss_sum};
}

START_TEST(reports_of_two_evaluations_interleaved)
{
    evals *e = fresh();
    evals_result res;
    /* replica 1 finished step 40's evaluation before replica 0 reported step 20's */
    evals_report a20 = cls(20, 100, 90, 30.0), b40 = cls(40, 100, 95, 20.0);
    evals_report b20 = cls(20, 100, 80, 50.0), a40 = cls(40, 100, 97, 10.0);
    ck_assert_int_eq(evals_add(e, &a20, 2, false, &res), 0);
    ck_assert_int_eq(evals_add(e, &b40, 2, false, &res), 0);
    ck_assert_uint_eq(res.dropped_step, 0);
    ck_assert_int_eq(evals_add(e, &b20, 2, false, &res), 1);
    ck_assert_uint_eq(res.step, 20);
    ck_assert_uint_eq(res.samples, 200);
    ck_assert_double_eq_tol(res.loss, 0.4, 1e-12);
    ck_assert_double_eq_tol(res.accuracy, 0.85, 1e-12);
    ck_assert_double_eq(res.iou, -1);
    ck_assert_int_eq(evals_add(e, &a40, 2, false, &res), 1);
    ck_assert_uint_eq(res.step, 40);
    ck_assert_double_eq_tol(res.loss, 0.15, 1e-12);
    ck_assert_double_eq_tol(res.accuracy, 0.96, 1e-12);
    free(e);
}
END_TEST

START_TEST(mean_iou_over_classes_that_occur)
{
    evals *e = fresh();
    evals_result res;
    /* class 0 background, class 2 never occurs */
    uint64_t i0[] = {50, 10, 0, 30}, u0[] = {60, 20, 0, 40};
    uint64_t i1[] = {40, 20, 0, 10}, u1[] = {50, 20, 0, 20};
    evals_report r0 = {.step = 5, .samples = 2, .loss_sum = 1.0, .nclasses = 4, .inter = i0, .uni = u0};
    evals_report r1 = {.step = 5, .samples = 2, .loss_sum = 3.0, .nclasses = 4, .inter = i1, .uni = u1};
    ck_assert_int_eq(evals_add(e, &r0, 2, false, &res), 0);
    ck_assert_int_eq(evals_add(e, &r1, 2, false, &res), 1);
    ck_assert_double_eq(res.accuracy, -1);
    ck_assert_double_eq_tol(res.loss, 1.0, 1e-12);
    /* classes 1 and 3: 30/40 and 40/60 */
    ck_assert_double_eq_tol(res.iou, (30.0 / 40.0 + 40.0 / 60.0) / 2, 1e-12);
    ck_assert_double_eq_tol(res.dice, (60.0 / 70.0 + 80.0 / 100.0) / 2, 1e-12);
    /* with the background counted: 90/110 too */
    ck_assert_int_eq(evals_add(e, &r0, 2, true, &res), 0);
    ck_assert_int_eq(evals_add(e, &r1, 2, true, &res), 1);
    ck_assert_double_eq_tol(res.iou, (90.0 / 110.0 + 30.0 / 40.0 + 40.0 / 60.0) / 3, 1e-12);
    free(e);
}
END_TEST

START_TEST(an_evaluation_that_never_completes_gives_up_its_slot)
{
    evals *e = fresh();
    evals_result res;
    /* a replica was lost after reporting step 10: only one report of 2 */
    evals_report lost = cls(10, 10, 5, 1.0);
    ck_assert_int_eq(evals_add(e, &lost, 2, false, &res), 0);
    /* EVALS_PENDING - 1 later evaluations in flight at once fill the rest */
    for (uint64_t k = 1; k < EVALS_PENDING; k++) {
        evals_report r = cls(10 + 10 * k, 10, 5, 1.0);
        ck_assert_int_eq(evals_add(e, &r, 2, false, &res), 0);
        ck_assert_uint_eq(res.dropped_step, 0);
    }
    /* the next one takes the oldest's slot and says which it dropped */
    evals_report next = cls(10 + 10 * EVALS_PENDING, 10, 7, 2.0);
    ck_assert_int_eq(evals_add(e, &next, 2, false, &res), 0);
    ck_assert_uint_eq(res.dropped_step, 10);
    ck_assert_uint_eq(res.dropped_reports, 1);
    ck_assert_int_eq(evals_add(e, &next, 2, false, &res), 1);
    ck_assert_uint_eq(res.step, 10 + 10 * EVALS_PENDING);
    ck_assert_double_eq_tol(res.accuracy, 0.7, 1e-12);
    /* the others still complete */
    evals_report r20 = cls(20, 10, 9, 1.0);
    ck_assert_int_eq(evals_add(e, &r20, 2, false, &res), 1);
    ck_assert_double_eq_tol(res.accuracy, 0.7, 1e-12); /* (5 + 9) / 20 */
    free(e);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("evals");
    TCase *tc = tcase_create("evals");
    tcase_add_test(tc, reports_of_two_evaluations_interleaved);
    tcase_add_test(tc, mean_iou_over_classes_that_occur);
    tcase_add_test(tc, an_evaluation_that_never_completes_gives_up_its_slot);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
