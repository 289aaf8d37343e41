/* The coordinator's journal replayed (coordinator/journal.c, and
 * job_from_journal in jobs.c) and admission (admission.c), without a
 * daemon: jobs put into a journal on disk come back after it is closed and
 * opened again, each with its state, text, log and recovery record; a
 * queued job's text is parsed once as it is loaded, and one that no longer
 * compiles says why; admission refuses by file size, per submitter and
 * for a full queue, naming the limit. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sqlite3.h>
#include <unistd.h>

#include "admission.h"
#include "job.h"
#include "journal.h"
#include "planner.h"

static const char *job_text =
    "[runconfig]\nmax_steps = 7\nnum_csx = 1\n"
    "[train_input]\ndata_processor = \"synthetic_classification\"\nbatch_size = 4\n"
    "num_classes = 3\nnum_samples = 16\n"
    "[model]\ninput_shape = [5]\nloss = \"softmax_cross_entropy\"\n"
    "[[model.layers]]\nname = \"fc\"\ntype = \"dense\"\nunits = 3\n"
    "[optimizer]\nlearning_rate = 0.1\n";

static char dir[64];

static void setup(void)
{
    snprintf(dir, sizeof(dir), "/tmp/journal-test-XXXXXX");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

typedef struct loaded {
    job *jobs[8];
    size_t n;
    coordinator *co;
} loaded;

static int load_one(void *arg, const journal_job *jj)
{
    loaded *l = arg;
    ck_assert_uint_lt(l->n, 8);
    job *j = calloc(1, sizeof(*j));
    ck_assert_ptr_nonnull(j);
    j->seq = jj->seq;
    ck_assert_int_eq(job_from_journal(l->co, j, jj), 0);
    l->jobs[l->n++] = j;
    return 0;
}

static int count_lines(void *arg, uint64_t line, const char *text)
{
    int *n = arg;
    ck_assert_uint_eq(line, (uint64_t)*n + 1);
    ck_assert_str_eq(text, *n == 0 ? "started" : "step 1 loss 2.5");
    (*n)++;
    return 0;
}

static journal_job row(const char *id, uint64_t seq, Appliance__JobState state, const char *toml)
{
    journal_job jj = {.id = id, .seq = seq, .state = state, .priority = 2, .file = "job.toml",
                      .toml = toml, .base_dir = "/srv/jobs", .model_dir = "/srv/jobs/model",
                      .message = "", .submitted_at = 1700000000.5, .steps = 3, .max_steps = 7,
                      .loss = 1.25};
    return jj;
}

START_TEST(replayed_after_reopening)
{
    char err[256];
    journal *jn = journal_open(dir, err, sizeof(err));
    ck_assert_msg(jn != NULL, "%s", err);
    journal_job a = row("job-1", 1, APPLIANCE__JOB_STATE__JOB_DONE, job_text);
    a.message = "done";
    a.eval_step = 6;
    a.eval_accuracy = 0.75;
    journal_job b = row("job-2", 2, APPLIANCE__JOB_STATE__JOB_RUNNING, job_text);
    journal_job c = row("job-3", 3, APPLIANCE__JOB_STATE__JOB_QUEUED,
                        "[runconfig]\nmax_steps = \"many\"\n");
    ck_assert_int_eq(journal_put(jn, &a), 0);
    ck_assert_int_eq(journal_put(jn, &b), 0);
    ck_assert_int_eq(journal_put(jn, &c), 0);
    ck_assert_int_eq(journal_set_owner(jn, "job-2", "alice"), 0);
    ck_assert_int_eq(journal_log(jn, "job-2", 1, "started"), 0);
    ck_assert_int_eq(journal_log(jn, "job-2", 2, "step 1 loss 2.5"), 0);
    journal_recovery put = {.restarts = 1, .have_ckpt = true, .ckpt_step = 2,
                            .kind = PLANNER_SIMULATED};
    ck_assert_int_eq(journal_put_recovery(jn, "job-2", &put), 0);
    journal_close(jn);

    jn = journal_open(dir, err, sizeof(err));
    ck_assert_msg(jn != NULL, "%s", err);
    coordinator co = {0};
    loaded l = {.co = &co};
    ck_assert_int_eq(journal_load(jn, load_one, &l), 0);
    ck_assert_uint_eq(l.n, 3);
    /* oldest first, each as it was put */
    ck_assert_str_eq(l.jobs[0]->id, "job-1");
    ck_assert_int_eq(l.jobs[0]->state, APPLIANCE__JOB_STATE__JOB_DONE);
    ck_assert_str_eq(l.jobs[0]->message, "done");
    ck_assert(l.jobs[0]->have_eval && l.jobs[0]->last_eval_step == 6);
    ck_assert_double_eq(l.jobs[0]->last_eval_accuracy, 0.75);
    /* an ended job keeps neither its text nor a parsed spec */
    ck_assert_ptr_null(l.jobs[0]->toml);
    ck_assert_ptr_null(l.jobs[0]->spec);
    /* a running one: its text parsed once, here */
    job *r = l.jobs[1];
    ck_assert_str_eq(r->owner, "alice");
    ck_assert_str_eq(r->base_dir, "/srv/jobs");
    ck_assert_uint_eq(r->steps_done, 3);
    ck_assert_double_eq(r->last_loss, 1.25);
    ck_assert_ptr_nonnull(r->spec);
    ck_assert_int_eq(r->spec->max_steps, 7);
    ck_assert_uint_eq(r->spec->model->total_params, 5 * 3 + 3);
    ck_assert_str_eq(r->spec->text, job_text);
    int lines = 0;
    ck_assert_int_eq(journal_load_log(jn, "job-2", count_lines, &lines), 0);
    ck_assert_int_eq(lines, 2);
    journal_recovery got;
    ck_assert_int_eq(journal_get_recovery(jn, "job-2", &got), 0);
    ck_assert(got.restarts == 1 && got.have_ckpt && got.ckpt_step == 2);
    ck_assert_int_eq(got.kind, PLANNER_SIMULATED); /* recovered onto the same kind */
    ck_assert_int_eq(journal_get_recovery(jn, "job-1", &got), 0);
    ck_assert(got.restarts == 0 && !got.have_ckpt && got.kind == PLANNER_ANY);
    /* a queued job whose text no longer compiles: no spec, and why */
    ck_assert_ptr_null(l.jobs[2]->spec);
    ck_assert_msg(strstr(l.jobs[2]->spec_error, "job.toml:2:") &&
                      strstr(l.jobs[2]->spec_error, "max_steps"),
                  "%s", l.jobs[2]->spec_error);
    for (size_t i = 0; i < l.n; i++)
        job_free(l.jobs[i]);
    journal_close(jn);
}
END_TEST

/* A journal written before kinds were kept (schema 1: no kind column)
 * opens, keeps its recovery rows, and reads them as any kind; after that
 * it keeps kinds. */
START_TEST(older_journal_migrates)
{
    char path[128], err[256];
    snprintf(path, sizeof(path), "%s/journal.sqlite", dir);
    sqlite3 *db;
    ck_assert_int_eq(sqlite3_open(path, &db), SQLITE_OK);
    const char *v1 =
        "CREATE TABLE jobs(id TEXT PRIMARY KEY, seq INTEGER NOT NULL, state INTEGER NOT NULL,"
        " priority INTEGER NOT NULL, file TEXT, toml TEXT, base_dir TEXT, model_dir TEXT,"
        " message TEXT, submitted_at REAL, steps INTEGER, max_steps INTEGER, loss REAL,"
        " eval_step INTEGER, eval_loss REAL, eval_accuracy REAL, eval_iou REAL);"
        "CREATE TABLE job_recovery(job_id TEXT PRIMARY KEY, restarts INTEGER NOT NULL,"
        " ckpt_step INTEGER NOT NULL);"
        "CREATE TABLE job_log(job_id TEXT NOT NULL, line INTEGER NOT NULL, text TEXT NOT NULL,"
        " PRIMARY KEY(job_id, line));"
        "CREATE TABLE job_owner(job_id TEXT PRIMARY KEY, owner TEXT NOT NULL);"
        "INSERT INTO job_recovery VALUES('job-4', 2, 30);"
        "PRAGMA user_version = 1;";
    ck_assert_int_eq(sqlite3_exec(db, v1, NULL, NULL, NULL), SQLITE_OK);
    sqlite3_close(db);
    journal *jn = journal_open(dir, err, sizeof(err));
    ck_assert_msg(jn != NULL, "%s", err);
    journal_recovery r;
    ck_assert_int_eq(journal_get_recovery(jn, "job-4", &r), 0);
    ck_assert(r.restarts == 2 && r.have_ckpt && r.ckpt_step == 30 && r.kind == PLANNER_ANY);
    r.kind = PLANNER_REAL;
    ck_assert_int_eq(journal_put_recovery(jn, "job-4", &r), 0);
    journal_close(jn);
    jn = journal_open(dir, err, sizeof(err));
    ck_assert_msg(jn != NULL, "%s", err);
    ck_assert_int_eq(journal_get_recovery(jn, "job-4", &r), 0);
    ck_assert(r.restarts == 2 && r.ckpt_step == 30 && r.kind == PLANNER_REAL);
    journal_close(jn);
}
END_TEST

START_TEST(admission_refuses_naming_the_limit)
{
    admission_limits lim = {.max_job_file = 100, .max_queued_jobs = 3,
                            .max_queued_per_submitter = 2, .max_client_backlog = 1};
    job q[4] = {0};
    job *jobs[4] = {&q[0], &q[1], &q[2], &q[3]};
    char err[256];
    /* the file's size, even for a plan */
    ck_assert_int_eq(admission_check(&lim, jobs, 0, "alice", "big.toml", 101, true, err,
                                     sizeof(err)), -EFBIG);
    ck_assert_msg(strstr(err, "big.toml: the job file has 101 bytes") &&
                      strstr(err, "max_job_file = 100 bytes"), "%s", err);
    ck_assert_int_eq(admission_check(&lim, jobs, 0, "alice", "a.toml", 100, false, err,
                                     sizeof(err)), 0);
    /* alice has two queued (a running one does not count) */
    for (int i = 0; i < 4; i++) {
        q[i].state = APPLIANCE__JOB_STATE__JOB_QUEUED;
        snprintf(q[i].submitter, sizeof(q[i].submitter), "%s", i < 2 ? "alice" : "10.0.0.2/x");
    }
    q[3].state = APPLIANCE__JOB_STATE__JOB_RUNNING;
    ck_assert_int_eq(admission_check(&lim, jobs, 4, "alice", "a.toml", 10, false, err,
                                     sizeof(err)), -EBUSY);
    ck_assert_msg(strstr(err, "user alice already has 2 jobs queued") &&
                      strstr(err, "--max-queued-per-submitter 2"), "%s", err);
    /* a plan only is never queued */
    ck_assert_int_eq(admission_check(&lim, jobs, 4, "alice", "a.toml", 10, true, err,
                                     sizeof(err)), 0);
    /* another submitter: the queue (three waiting) is full */
    ck_assert_int_eq(admission_check(&lim, jobs, 4, "bob", "b.toml", 10, false, err,
                                     sizeof(err)), -EBUSY);
    ck_assert_msg(strstr(err, "the queue is full, 3 jobs are waiting (--max-queued-jobs 3)"),
                  "%s", err);
    q[0].state = APPLIANCE__JOB_STATE__JOB_DONE;
    ck_assert_int_eq(admission_check(&lim, jobs, 4, "bob", "b.toml", 10, false, err,
                                     sizeof(err)), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("journal");
    TCase *t = tcase_create("replay");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, replayed_after_reopening);
    tcase_add_test(t, older_journal_migrates);
    tcase_add_test(t, admission_refuses_naming_the_limit);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
