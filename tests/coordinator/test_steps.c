/* Step accounting (coordinator/steps.c): a step counts once every replica
 * reported it and every shard committed it, in order even when reports
 * and commits come out of order or run ahead; steps already counted or far
 * beyond the window are refused; the training rate. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>

#include "steps.h"

START_TEST(counts_in_order)
{
    steps s;
    steps_init(&s, 5, 2, 1); /* resumed at step 5; two replicas, one shard */
    job_step d;
    ck_assert_int_eq(steps_next(&s, &d), 0);
    ck_assert_int_eq(steps_report(&s, 5, 1.5, 0.2), 0);
    ck_assert_int_eq(steps_commit(&s, 5), 0);
    ck_assert_int_eq(steps_next(&s, &d), 0); /* one replica still to report */
    /* step 6 completes first: it waits behind step 5 */
    ck_assert_int_eq(steps_report(&s, 6, 1.0, 0.1), 0);
    ck_assert_int_eq(steps_report(&s, 6, 2.0, 0.4), 0);
    ck_assert_int_eq(steps_commit(&s, 6), 0);
    ck_assert_int_eq(steps_next(&s, &d), 0);
    ck_assert_int_eq(steps_report(&s, 5, 2.5, 0.3), 0);
    ck_assert_int_eq(steps_next(&s, &d), 1);
    ck_assert_uint_eq(d.step, 5);
    ck_assert_double_eq(d.loss_sum, 4.0);
    ck_assert_double_eq(d.compute_max, 0.3);
    ck_assert_uint_eq(s.done, 6);
    ck_assert_int_eq(steps_next(&s, &d), 1);
    ck_assert_uint_eq(d.step, 6);
    ck_assert_double_eq(d.loss_sum, 3.0);
    ck_assert_double_eq(d.compute_max, 0.4);
    ck_assert_int_eq(steps_next(&s, &d), 0);
    ck_assert_uint_eq(s.done, 7);
    /* a counted step again, and one far ahead */
    ck_assert_int_eq(steps_report(&s, 6, 1.0, 0.1), -ERANGE);
    ck_assert_int_eq(steps_commit(&s, 4), -ERANGE);
    ck_assert_int_eq(steps_report(&s, 7 + STEPS_WINDOW, 1.0, 0.1), -ERANGE);
    steps_free(&s);
}
END_TEST

/* Pipelined replicas run ahead of the commits: the window grows and keeps
 * every step in flight. */
START_TEST(window_grows)
{
    steps s;
    steps_init(&s, 0, 1, 2);
    for (uint64_t k = 0; k < 100; k++)
        ck_assert_int_eq(steps_report(&s, k, (double)k, 0.0), 0);
    ck_assert_uint_ge(s.cap, 100);
    job_step d;
    for (uint64_t k = 0; k < 100; k++) {
        ck_assert_int_eq(steps_commit(&s, k), 0);
        ck_assert_int_eq(steps_next(&s, &d), 0); /* the second shard */
        ck_assert_int_eq(steps_commit(&s, k), 0);
        ck_assert_int_eq(steps_next(&s, &d), 1);
        ck_assert_uint_eq(d.step, k);
        ck_assert_double_eq(d.loss_sum, (double)k);
    }
    ck_assert_uint_eq(s.done, 100);
    steps_free(&s);
}
END_TEST

START_TEST(rate)
{
    ck_assert_double_eq(steps_rate(0, 0, 0), 0.0);
    ck_assert_double_eq(steps_rate(640, 1000, 1000), 0.0);
    ck_assert_double_eq_tol(steps_rate(640, 1000, 3000), 320.0, 1e-9);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("steps");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, counts_in_order);
    tcase_add_test(tc, window_grows);
    tcase_add_test(tc, rate);
    suite_add_tcase(su, tc);
    SRunner *sr = srunner_create(su);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
