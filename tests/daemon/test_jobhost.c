/* The daemon side of a job's life (common/daemon/jobhost.c): a start with
 * its plan checked, a second start refused while busy, end messages matched
 * by id, a start that fails, failures and faults released once, the
 * coordinator lost and shutdown. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "jobhost.h"

typedef struct fake_job {
    int id;
} fake_job;

static int starts, releases;
static bool start_fails;
static jobhost_end last_end;
static char last_why[512];
static fake_job the_job = {7};

static void *fake_start(jobhost *h, Appliance__Plan *plan, char *why, size_t whylen)
{
    starts++;
    ck_assert_ptr_eq(h->plan, plan);
    ck_assert_str_eq(h->id, plan->job_id);
    if (start_fails) {
        snprintf(why, whylen, "no tree node for member 9");
        return NULL;
    }
    appliance__plan__free_unpacked(plan, NULL); /* the job owns its plan */
    return &the_job;
}

static void fake_release(jobhost *h, void *job, jobhost_end end, const char *why)
{
    ck_assert_ptr_eq(job, &the_job);
    ck_assert_ptr_null(h->job); /* a report from release finds no job */
    releases++;
    last_end = end;
    snprintf(last_why, sizeof(last_why), "%s", why);
}

static const jobhost_ops ops = {fake_start, fake_release};

static node n;
static node_role role;
static jobhost h;
static Appliance__Plan plan;
static Appliance__PlanShard shard, *shards[1] = {&shard};
static Appliance__PlanSwarmNode root, *swarm[1] = {&root};
static Appliance__PlanReplica replica, *replicas[1] = {&replica};
static Appliance__JobStart js;
static Appliance__Envelope start_env;

static void setup(void)
{
    memset(&n, 0, sizeof(n));
    memset(&role, 0, sizeof(role));
    role.component = "test";
    n.role = &role;
    n.loop = uv_default_loop();
    starts = releases = 0;
    start_fails = false;
    last_why[0] = '\0';
    jobhost_init(&h, &n, &role, &ops);
    /* the smallest plan msgcheck_plan takes: a shard, a swarmx root, a replica */
    appliance__plan__init(&plan);
    plan.job_id = "job-3.r1";
    plan.chunk_elems = 16;
    appliance__plan_shard__init(&shard);
    appliance__plan_swarm_node__init(&root);
    root.parent = -1;
    appliance__plan_replica__init(&replica);
    plan.shards = shards;
    plan.n_shards = 1;
    plan.swarm = swarm;
    plan.n_swarm = 1;
    plan.replicas = replicas;
    plan.n_replicas = 1;
    appliance__job_start__init(&js);
    js.plan = &plan;
    appliance__envelope__init(&start_env);
    start_env.msg_case = APPLIANCE__ENVELOPE__MSG_JOB_START;
    start_env.job_start = &js;
}

static void teardown(void)
{
    flight_free(&n.flight);
}

static void send_end(const char *id, bool abort)
{
    Appliance__JobEnd e = APPLIANCE__JOB_END__INIT;
    Appliance__JobAbort a = APPLIANCE__JOB_ABORT__INIT;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    if (abort) {
        a.job_id = (char *)id;
        env.msg_case = APPLIANCE__ENVELOPE__MSG_JOB_ABORT;
        env.job_abort = &a;
    } else {
        e.job_id = (char *)id;
        env.msg_case = APPLIANCE__ENVELOPE__MSG_JOB_END;
        env.job_end = &e;
    }
    role.handlers[env.msg_case](&n, NULL, &env, NULL, 0);
}

START_TEST(start_and_end_by_id)
{
    ck_assert_ptr_eq(jobhost_of(&n), &h);
    ck_assert_ptr_eq(role.handlers[APPLIANCE__ENVELOPE__MSG_JOB_START], jobhost_handle_start);
    role.handlers[APPLIANCE__ENVELOPE__MSG_JOB_START](&n, NULL, &start_env, NULL, 0);
    ck_assert_int_eq(starts, 1);
    ck_assert_ptr_eq(h.job, &the_job);
    ck_assert_str_eq(h.id, "job-3.r1");
    /* busy: a second start is refused without reaching the role */
    plan.job_id = "job-4";
    role.handlers[APPLIANCE__ENVELOPE__MSG_JOB_START](&n, NULL, &start_env, NULL, 0);
    ck_assert_int_eq(starts, 1);
    ck_assert_str_eq(h.id, "job-3.r1");
    /* another job's end, or an earlier attempt's, is not ours */
    send_end("job-4", false);
    send_end("job-3", true);
    ck_assert_int_eq(releases, 0);
    send_end("job-3.r1", true);
    ck_assert_int_eq(releases, 1);
    ck_assert_int_eq(last_end, JOBHOST_RELEASED);
    ck_assert_ptr_null(h.job);
    ck_assert_str_eq(h.id, "");
    send_end("job-3.r1", false); /* once only */
    ck_assert_int_eq(releases, 1);
}
END_TEST

START_TEST(start_that_fails)
{
    start_fails = true;
    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    ck_assert_int_eq(starts, 1);
    ck_assert_int_eq(releases, 0);
    ck_assert_ptr_null(h.job);
    ck_assert_ptr_null(h.plan);
    ck_assert_str_eq(h.id, "");
    /* not busy afterwards */
    start_fails = false;
    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    ck_assert_ptr_eq(h.job, &the_job);
}
END_TEST

START_TEST(fail_fault_and_losses)
{
    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    jobhost_fault(&h, "lost child %s: %s", "127.0.0.1:9", "reset");
    ck_assert_int_eq(releases, 1);
    ck_assert_int_eq(last_end, JOBHOST_FAULT);
    ck_assert_str_eq(last_why, "lost child 127.0.0.1:9: reset");
    jobhost_fail(&h, "no job: nothing happens"); /* no job any more */
    ck_assert_int_eq(releases, 1);

    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    jobhost_fail(&h, "step %d: label %d out of range", 4, 12);
    ck_assert_int_eq(releases, 2);
    ck_assert_int_eq(last_end, JOBHOST_FAILED);
    ck_assert_str_eq(last_why, "step 4: label 12 out of range");

    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    jobhost_end_job(&h, JOBHOST_COORDINATOR_LOST, "lost the coordinator");
    ck_assert_int_eq(releases, 3);
    ck_assert_int_eq(last_end, JOBHOST_COORDINATOR_LOST);
    jobhost_end_job(&h, JOBHOST_SHUTDOWN, "shutdown");
    ck_assert_int_eq(releases, 3);
    ck_assert_str_eq(jobhost_end_name(JOBHOST_FAULT), "fault");
}
END_TEST

/* A stream peer's closed link is a fault only if the job has not ended
 * JOBHOST_PEER_GRACE_MS later: the peers of a finished job take its JobEnd
 * in any order. */
START_TEST(peer_lost_waits_for_the_end)
{
    /* the coordinator's JobEnd comes: released, no fault */
    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    jobhost_peer_lost(&h, "lost child %s: %s", "127.0.0.1:9", "peer closed the connection");
    ck_assert_int_eq(releases, 0);
    ck_assert_ptr_eq(h.job, &the_job);
    send_end("job-3.r1", false);
    ck_assert_int_eq(releases, 1);
    ck_assert_int_eq(last_end, JOBHOST_RELEASED);
    uv_run(n.loop, UV_RUN_NOWAIT);
    ck_assert_int_eq(releases, 1);
    /* nothing comes: after the grace the loss is a fault, reported once */
    jobhost_handle_start(&n, NULL, &start_env, NULL, 0);
    uint64_t t0 = uv_now(n.loop);
    jobhost_peer_lost(&h, "lost child %s: %s", "127.0.0.1:9", "reset");
    jobhost_peer_lost(&h, "a second loss is the same fault");
    uv_ref((uv_handle_t *)&h.grace); /* the test's loop runs until it fires */
    uv_run(n.loop, UV_RUN_ONCE);
    uv_update_time(n.loop);
    ck_assert_int_eq(releases, 2);
    ck_assert_int_eq(last_end, JOBHOST_FAULT);
    ck_assert_str_eq(last_why, "lost child 127.0.0.1:9: reset");
    ck_assert_uint_ge(uv_now(n.loop) - t0, JOBHOST_PEER_GRACE_MS - 5);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jobhost");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, start_and_end_by_id);
    tcase_add_test(tc, start_that_fails);
    tcase_add_test(tc, fail_fault_and_losses);
    tcase_add_test(tc, peer_lost_waits_for_the_end);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
