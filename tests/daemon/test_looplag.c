/* The loop-lag monitor: a callback that blocks the loop for 300 ms is one
 * lag of at least that, counted past the bound and shown in the metrics; a
 * loop left alone lags little; quantiles over the recent lags. */
#include <check.h>
#include <string.h>
#include <unistd.h>

#include "looplag.h"

static looplag lag;

static void block_300ms(uv_timer_t *t)
{
    usleep(300 * 1000);
    uv_close((uv_handle_t *)t, NULL);
}

static void stop_loop(uv_timer_t *t)
{
    looplag_stop(&lag);
    uv_close((uv_handle_t *)t, NULL);
}

START_TEST(test_blocked_loop)
{
    uv_loop_t loop;
    uv_loop_init(&loop);
    looplag_start(&lag, &loop, 20, 250);
    uv_timer_t block, stop;
    uv_timer_init(&loop, &block);
    uv_timer_init(&loop, &stop);
    uv_timer_start(&block, block_300ms, 105, 0);
    uv_timer_start(&stop, stop_loop, 700, 0);
    uv_run(&loop, UV_RUN_DEFAULT);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
    /* the tick due during the block fired about 300 ms late, once */
    ck_assert_msg(lag.max_sec >= 0.25 && lag.max_sec < 1.0, "max lag %.3f", lag.max_sec);
    ck_assert_uint_eq(lag.over, 1);
    ck_assert_uint_ge(lag.hist.count, 10);
    /* one long lag among the ticks: the median is short */
    ck_assert_msg(looplag_quantile(&lag, 0.5) < 0.1, "median %.3f", looplag_quantile(&lag, 0.5));
    ck_assert_double_eq_tol(looplag_quantile(&lag, 1.0), lag.max_sec, 1e-6);
}
END_TEST

START_TEST(test_quantiles)
{
    looplag l;
    memset(&l, 0, sizeof(l));
    l.warn_sec = 10;
    metrics_hist_init(&l.hist, "x", "x");
    ck_assert_double_eq(looplag_quantile(&l, 0.99), 0.0);
    for (int i = 1; i <= 100; i++)
        looplag_observe(&l, i * 0.001);
    ck_assert_double_eq_tol(looplag_quantile(&l, 0.99), 0.099, 1e-6);
    ck_assert_double_eq_tol(looplag_quantile(&l, 0.0), 0.001, 1e-6);
    ck_assert_double_eq_tol(l.max_sec, 0.1, 1e-9);
    ck_assert_uint_eq(l.over, 0);
    /* the ring keeps the newest LOOPLAG_RECENT */
    for (int i = 0; i < LOOPLAG_RECENT; i++)
        looplag_observe(&l, 0.002);
    ck_assert_double_eq_tol(looplag_quantile(&l, 1.0), 0.002, 1e-6);
    ck_assert_double_eq_tol(l.max_sec, 0.1, 1e-9); /* the largest since start stays */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("looplag");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, test_blocked_loop);
    tcase_add_test(tc, test_quantiles);
    suite_add_tcase(s, tc);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
