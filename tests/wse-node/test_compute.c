/* The wse-node's compute thread (wse-node/compute.c): tasks run in order
 * on their own thread, their done callbacks on the loop; a task's progress
 * calls reach the loop while it runs, before its done, coalesced. */
#include <check.h>
#include <pthread.h>
#include <time.h>
#include <uv.h>

#include "compute.h"
#include "kt.h"

typedef struct probe {
    compute *c;
    uv_loop_t *loop;
    pthread_t loop_thread;
    int stage;           /* the task's, written before each progress call */
    int seen[8];         /* the stages the progress callbacks read, in order */
    int nseen;
    int done_at;         /* nseen when the done callback ran; -1 before */
    int wrong_thread;    /* a callback off the loop's thread */
    int waited_ok;       /* the task saw its first progress call answered */
} probe;

static void sleep_ms(int ms)
{
    struct timespec ts = {0, ms * 1000000L};
    nanosleep(&ts, NULL);
}

static void on_progress(void *arg)
{
    probe *p = arg;
    if (!pthread_equal(pthread_self(), p->loop_thread))
        p->wrong_thread++;
    if (p->nseen < 8)
        p->seen[p->nseen++] = __atomic_load_n(&p->stage, __ATOMIC_ACQUIRE);
}

static void task(void *arg)
{
    probe *p = arg;
    /* one call, answered while the task still runs */
    __atomic_store_n(&p->stage, 1, __ATOMIC_RELEASE);
    compute_progress(p->c, on_progress, p);
    for (int i = 0; i < 2000 && __atomic_load_n(&p->nseen, __ATOMIC_ACQUIRE) == 0; i++)
        sleep_ms(1);
    p->waited_ok = __atomic_load_n(&p->nseen, __ATOMIC_ACQUIRE) == 1;
    /* then three at once: coalesced where the loop has not come between
     * them, the last call reading the last stage; the task ends right
     * after, and its done must wait for that call */
    for (int s = 2; s <= 4; s++) {
        __atomic_store_n(&p->stage, s, __ATOMIC_RELEASE);
        compute_progress(p->c, on_progress, p);
    }
}

static void done(void *arg)
{
    probe *p = arg;
    if (!pthread_equal(pthread_self(), p->loop_thread))
        p->wrong_thread++;
    p->done_at = p->nseen;
    uv_stop(p->loop);
}

START_TEST(progress_reaches_the_loop_before_done)
{
    uv_loop_t loop;
    compute c;
    probe p = {.c = &c, .loop = &loop, .loop_thread = pthread_self(), .done_at = -1};
    ck_assert_int_eq(uv_loop_init(&loop), 0);
    ck_assert_int_eq(compute_start(&c, &loop, 1), 0);
    ck_assert_int_eq(compute_submit(&c, task, done, &p), 0);
    uv_run(&loop, UV_RUN_DEFAULT); /* until done stops it */
    compute_stop(&c);
    ck_assert_int_eq(uv_run(&loop, UV_RUN_DEFAULT), 0);
    ck_assert_int_eq(p.wrong_thread, 0);
    ck_assert_msg(p.waited_ok, "the first progress call was not answered while the task ran");
    /* the first call, then the three coalesced into one or two calls that
     * end with the last stage, all before done */
    ck_assert_int_ge(p.nseen, 2);
    ck_assert_int_le(p.nseen, 4);
    ck_assert_int_eq(p.seen[0], 1);
    ck_assert_int_eq(p.seen[p.nseen - 1], 4);
    for (int i = 1; i < p.nseen; i++)
        ck_assert_int_ge(p.seen[i], p.seen[i - 1]);
    ck_assert_int_eq(p.done_at, p.nseen);
    ck_assert_int_eq(uv_loop_close(&loop), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("compute");
    TCase *tc = tcase_create("compute");
    tcase_set_timeout(tc, 30);
    tcase_add_test(tc, progress_reaches_the_loop_before_done);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
