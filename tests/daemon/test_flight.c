/* The flight recorder's ring (order, wrap-around, what it leaves out, the
 * text of an event, silence) and the escaping of Prometheus label values. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

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
    usleep(50000); /* beyond twice the longest silence so far (the dump's) */
    ck_assert(flight_hung(&f, 0));
    ck_assert(!flight_hung(&f, 60000));
    flight_dump(&f, f.job, "test");
    /* a stream that came back from 250 ms of silence (since the last
     * gradient) is slow, not stuck: silent again, it is reported only after
     * twice that */
    usleep(200000);
    note_grad(2, 0, 0, false);
    usleep(100000);
    ck_assert(!flight_hung(&f, 0));
    usleep(500000);
    ck_assert(flight_hung(&f, 0));
    Appliance__JobEnd e = APPLIANCE__JOB_END__INIT;
    e.job_id = "job-1";
    ENVELOPE(end, job_end, JOB_END, &e);
    flight_note(&f, &end, "coordinator", false);
    ck_assert(!flight_hung(&f, 0)); /* ended: silence is expected */
}
END_TEST

/* The trace: one line per event in the columns its header names, the pass of
 * a weight chunk, monotonic times that do not go back, and a cap. */
START_TEST(trace_writes_one_line_per_event_and_stops_at_its_cap)
{
    char path[] = "/tmp/test-trace-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    char err[256];
    ck_assert_int_eq(flight_trace_open(&f, path, "wse-node-3", 400, err, sizeof(err)), 0);
    Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
    w.step = 7;
    w.tensor_id = 2;
    w.offset = 262144;
    w.count = 4096;
    w.pass = APPLIANCE__PASS__PASS_BACKWARD;
    ENVELOPE(env, weight_chunk, WEIGHT_CHUNK, &w);
    flight_note(&f, &env, "swarmx-0", false);
    note_grad(7, 2, 0, true);
    flight_trace_flush(&f);
    FILE *fp = fopen(path, "r");
    ck_assert_ptr_nonnull(fp);
    char line[3][256];
    for (int i = 0; i < 3; i++)
        ck_assert_ptr_nonnull(fgets(line[i], sizeof(line[i]), fp));
    fclose(fp);
    ck_assert_str_eq(line[0], "# appliance trace of wse-node-3: t_us dir msg peer step tensor offset "
                              "count pass eval\n");
    unsigned long long t1, t2;
    char rest[200];
    ck_assert_int_eq(sscanf(line[1], "%llu %199[^\n]", &t1, rest), 2);
    ck_assert_str_eq(rest, "in weight_chunk swarmx-0 7 2 262144 4096 backward 0");
    ck_assert_int_eq(sscanf(line[2], "%llu %199[^\n]", &t2, rest), 2);
    ck_assert_str_eq(rest, "out grad_chunk swarmx-1 7 2 0 256 - 0");
    ck_assert(t1 > 0 && t2 >= t1);
    /* About 60 bytes a line: the cap of 400 bytes is reached within a few
     * more events, after which nothing more is written. */
    for (int i = 0; i < 20; i++)
        note_grad(8, 2, (uint64_t)i * 256, true);
    ck_assert_ptr_null(f.trace);
    fp = fopen(path, "r");
    ck_assert_ptr_nonnull(fp);
    fseek(fp, 0, SEEK_END);
    long size = ftell(fp);
    fclose(fp);
    ck_assert_int_ge(size, 400);
    ck_assert_int_lt(size, 400 + 100);
    unlink(path);
    /* An unwritable place is refused with the file named. */
    ck_assert_int_lt(flight_trace_open(&f, "/nonexistent-dir/trace", "x", 400, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "/nonexistent-dir/trace"), "%s", err);
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
    tcase_add_test(tc, trace_writes_one_line_per_event_and_stops_at_its_cap);
    tcase_add_test(tc, label_values_are_escaped);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
