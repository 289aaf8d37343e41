/* What the web page keeps of a job: every step until the bound, then every
 * other one, the last step always; a resumed attempt's steps replace the
 * ones after its checkpoint; and the JSON text the API writes. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "jobview.h"
#include "jsonbuf.h"

static double loss_of(uint64_t step) { return 1.0 / (double)(step + 1); }

static void record(job *j, uint64_t from, uint64_t to)
{
    for (uint64_t s = from; s <= to; s++) {
        job_point pt = {.step = s, .loss = loss_of(s), .samples_per_sec = (double)s};
        jobview_record_step(j, &pt);
    }
}

START_TEST(every_step_until_the_bound)
{
    job *j = calloc(1, sizeof(*j));
    j->max_steps = 100;
    record(j, 1, 100);
    ck_assert_uint_eq(j->npoints, 100);
    ck_assert_uint_eq(j->point_stride, 1);
    for (size_t i = 0; i < j->npoints; i++) {
        ck_assert_uint_eq(j->points[i].step, i + 1);
        ck_assert(j->points[i].loss == loss_of(i + 1));
    }
    jobview_free(j);
    ck_assert_ptr_null(j->points);
    free(j);
}
END_TEST

START_TEST(thinned_by_halves)
{
    job *j = calloc(1, sizeof(*j));
    const uint64_t n = 5 * JOBVIEW_POINTS_MAX + 7; /* the last step off every stride */
    j->max_steps = n;
    record(j, 1, n);
    ck_assert_uint_le(j->npoints, JOBVIEW_POINTS_MAX);
    ck_assert_uint_eq(j->point_stride, 8); /* 5x the bound: halved three times */
    ck_assert_uint_ge(j->npoints, JOBVIEW_POINTS_MAX / 2);
    for (size_t i = 0; i + 1 < j->npoints; i++) {
        ck_assert_uint_eq(j->points[i].step % j->point_stride, 0);
        ck_assert_uint_lt(j->points[i].step, j->points[i + 1].step);
        ck_assert(j->points[i].loss == loss_of(j->points[i].step));
    }
    ck_assert_uint_eq(j->points[j->npoints - 1].step, n); /* the last step is kept */
    ck_assert_uint_eq(j->points[j->npoints - 2].step, n - n % 8);
    jobview_free(j);
    free(j);
}
END_TEST

START_TEST(a_resumed_attempt_replaces_its_steps)
{
    job *j = calloc(1, sizeof(*j));
    j->max_steps = 100;
    record(j, 1, 70);
    /* a fault at step 70; the attempt resumes from the checkpoint of step 50 */
    job_point pt = {.step = 51, .loss = 42};
    jobview_record_step(j, &pt);
    ck_assert_uint_eq(j->npoints, 51);
    ck_assert(j->points[50].loss == 42);
    ck_assert(j->points[49].loss == loss_of(50));
    job_eval_point e = {.step = 20, .loss = 1, .accuracy = 0.5, .iou = -1};
    jobview_record_eval(j, &e);
    e.step = 40;
    jobview_record_eval(j, &e);
    e.step = 40;
    e.accuracy = 0.75; /* the evaluation of step 40 again, after the resume */
    jobview_record_eval(j, &e);
    ck_assert_uint_eq(j->nevals, 2);
    ck_assert(j->evals[1].accuracy == 0.75);
    jobview_free(j);
    free(j);
}
END_TEST

START_TEST(json_text)
{
    jsonbuf b = {0};
    jsonbuf_printf(&b, "[");
    jsonbuf_str(&b, "a \"quoted\" \\ line\nwith\ttabs </script>\x01");
    jsonbuf_printf(&b, ",");
    jsonbuf_num(&b, 0.1);
    jsonbuf_printf(&b, ",");
    jsonbuf_num(&b, NAN);
    jsonbuf_printf(&b, ",");
    jsonbuf_num(&b, INFINITY);
    jsonbuf_printf(&b, ",");
    jsonbuf_str(&b, NULL);
    jsonbuf_printf(&b, "]");
    size_t len;
    char *t = jsonbuf_steal(&b, &len);
    ck_assert_str_eq(t, "[\"a \\\"quoted\\\" \\\\ line\\nwith\\ttabs \\u003c/script>\\u0001\","
                        "0.10000000000000001,null,null,\"\"]");
    ck_assert_uint_eq(len, strlen(t));
    ck_assert(strtod("0.10000000000000001", NULL) == 0.1); /* %.17g reads back exactly */
    free(t);
    ck_assert_ptr_null(b.p);
    /* a long text grows the buffer */
    for (int i = 0; i < 10000; i++)
        jsonbuf_printf(&b, "%d,", i);
    t = jsonbuf_steal(&b, &len);
    ck_assert_uint_eq(len, strlen(t));
    ck_assert(strncmp(t + len - 5, "9999,", 5) == 0);
    free(t);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jobview");
    TCase *t = tcase_create("points");
    tcase_add_test(t, every_step_until_the_bound);
    tcase_add_test(t, thinned_by_halves);
    tcase_add_test(t, a_resumed_attempt_replaces_its_steps);
    tcase_add_test(t, json_text);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
