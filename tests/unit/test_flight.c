/* The flight recorder's ring (order, wrap-around, what it leaves out, the
 * text of an event, silence) and the escaping of Prometheus label values. */
#include <check.h>
#include <string.h>

#include "flight.h"
#include "metrics.h"
#include "msg.h"

static flight f;

static void note_grad(uint64_t step, uint32_t tensor, uint64_t offset, bool out)
{
    Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
    g.step = step;
    g.tensor_id = tensor;
    g.offset = offset;
    g.count = 256;
    ENVELOPE(env, grad_chunk, GRAD_CHUNK, &g);
    flight_note(&f, &env, "swarmx-1", out);
}

static void setup(void)
{
    memset(&f, 0, sizeof(f));
}

static void teardown(void)
{
    flight_free(&f);
}

START_TEST(ring_keeps_the_newest_in_order)
{
    for (uint64_t i = 0; i < FLIGHT_CAP + 10; i++)
        note_grad(i, 3, i * 256, false);
    char line[256];
    ck_assert(flight_format(&f, 0, line, sizeof(line)));
    ck_assert_msg(strstr(line, "grad_chunk from swarmx-1 step 10 layer ? tensor 3 chunk @2560 +256"),
                  "oldest kept: %s", line);
    ck_assert(flight_format(&f, FLIGHT_CAP - 1, line, sizeof(line)));
    ck_assert_msg(strstr(line, "step 521 "), "newest: %s", line);
    ck_assert(!flight_format(&f, FLIGHT_CAP, line, sizeof(line)));
}
END_TEST

START_TEST(job_start_names_layers_and_heartbeats_are_left_out)
{
    Appliance__PlanTensor t0 = APPLIANCE__PLAN_TENSOR__INIT, t1 = APPLIANCE__PLAN_TENSOR__INIT;
    t0.id = 0;
    t0.layer = 2;
    t1.id = 1;
    t1.layer = 5;
    Appliance__PlanTensor *ts[] = {&t0, &t1};
    Appliance__Plan p = APPLIANCE__PLAN__INIT;
    p.job_id = "job-4.r1";
    p.n_tensors = 2;
    p.tensors = ts;
    Appliance__JobStart st = APPLIANCE__JOB_START__INIT;
    st.plan = &p;
    ENVELOPE(start, job_start, JOB_START, &st);
    flight_note(&f, &start, "coordinator", false);
    ck_assert_str_eq(f.job, "job-4.r1");
    Appliance__Heartbeat hb = APPLIANCE__HEARTBEAT__INIT;
    ENVELOPE(beat, heartbeat, HEARTBEAT, &hb);
    flight_note(&f, &beat, "coordinator", true);
    note_grad(7, 1, 0, true);
    ck_assert_uint_eq(f.n, 2);
    char line[256];
    ck_assert(flight_format(&f, 1, line, sizeof(line)));
    ck_assert_msg(strstr(line, "grad_chunk to swarmx-1 step 7 layer 5 tensor 1 chunk @0 +256"), "%s", line);
}
END_TEST

START_TEST(silence_is_reported_once_and_not_after_the_end)
{
    Appliance__Plan p = APPLIANCE__PLAN__INIT;
    p.job_id = "job-1";
    Appliance__JobStart st = APPLIANCE__JOB_START__INIT;
    st.plan = &p;
    ENVELOPE(start, job_start, JOB_START, &st);
    flight_note(&f, &start, "coordinator", false);
    ck_assert(flight_hung(&f, 0));
    flight_dump(&f, f.job, "test");
    ck_assert(!flight_hung(&f, 0)); /* nothing new since the dump */
    note_grad(1, 0, 0, false);
    ck_assert(flight_hung(&f, 0));
    ck_assert(!flight_hung(&f, 60000));
    Appliance__JobEnd e = APPLIANCE__JOB_END__INIT;
    e.job_id = "job-1";
    ENVELOPE(end, job_end, JOB_END, &e);
    flight_note(&f, &end, "coordinator", false);
    ck_assert(!flight_hung(&f, 0)); /* ended: silence is expected */
}
END_TEST

START_TEST(label_values_are_escaped)
{
    char out[32];
    ck_assert_str_eq(metrics_label_escape("wse-node-1", out, sizeof(out)), "wse-node-1");
    ck_assert_str_eq(metrics_label_escape("a\"b\\c\nd", out, sizeof(out)), "a\\\"b\\\\c\\nd");
    /* Cut short, never inside an escape. */
    ck_assert_str_eq(metrics_label_escape("abc\"def", out, 5), "abc");
    ck_assert_str_eq(metrics_label_escape("", out, sizeof(out)), "");
}
END_TEST

int main(void)
{
    Suite *s = suite_create("flight");
    TCase *tc = tcase_create("flight");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, ring_keeps_the_newest_in_order);
    tcase_add_test(tc, job_start_names_layers_and_heartbeats_are_left_out);
    tcase_add_test(tc, silence_is_reported_once_and_not_after_the_end);
    tcase_add_test(tc, label_values_are_escaped);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
