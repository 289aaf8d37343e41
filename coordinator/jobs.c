/* Jobs on the coordinator: submission, compilation into a plan, placement on
 * idle members, the barrier before the first step, step accounting, and the
 * end of a job (done, failed) with every member released. */
#include <errno.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>
#include <time.h>

#include "job.h"
#include "jobspec.h"
#include "jobview.h"
#include "optim_plan.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "plan.h"
#include "planner.h"
#include "units.h"

#define JOB_LOG_MAX 100000            /* log lines kept per job */


job *job_find(coordinator *co, const char *id)
{
    for (size_t i = 0; i < co->njobs; i++)
        if (strcmp(co->jobs[i]->id, id) == 0)
            return co->jobs[i];
    return NULL;
}

/* Position among the queued jobs in the order they will start. */
static uint32_t job__queue_position(coordinator *co, const job *j)
{
    if (j->state != APPLIANCE__JOB_STATE__JOB_QUEUED)
        return 0;
    uint32_t pos = 1;
    for (size_t i = 0; i < co->njobs; i++) {
        const job *o = co->jobs[i];
        if (o != j && o->state == APPLIANCE__JOB_STATE__JOB_QUEUED &&
            (o->priority < j->priority || (o->priority == j->priority && o->seq < j->seq)))
            pos++;
    }
    return pos;
}

void job_status(coordinator *co, job *j, Appliance__JobStatus *s)
{
    appliance__job_status__init(s);
    s->job_id = j->id;
    s->state = j->state;
    s->step = j->steps_done;
    s->max_steps = j->max_steps;
    s->loss = j->last_loss;
    s->model_dir = j->model_dir;
    s->message = j->message;
    s->phase = j->phase;
    s->file_name = j->file;
    s->priority = j->priority;
    s->queue_position = job__queue_position(co, j);
    s->submitted_at = j->submitted_at;
    s->learning_rate = j->last_lr;
    s->eta_sec = -1;
    uint64_t now = uv_now(co->n->loop);
    if (j->t_start)
        s->elapsed_sec = (double)((j->t_end ? j->t_end : now) - j->t_start) / 1000.0;
    s->eval_accuracy = s->eval_iou = -1;
    if (j->have_eval) {
        s->eval_step = j->last_eval_step;
        s->eval_loss = j->last_eval_loss;
        s->eval_accuracy = j->last_eval_accuracy;
        s->eval_iou = j->last_eval_iou;
    }
    /* The rate of training: up to now while the job runs, up to its last
     * step once it has ended. */
    bool running = j->state == APPLIANCE__JOB_STATE__JOB_RUNNING;
    uint64_t until = running ? now : j->t_step;
    if (j->t_train && until > j->t_train && j->samples) {
        double secs = (double)(until - j->t_train) / 1000.0;
        s->samples_per_sec = steps_rate(j->samples, j->t_train, until);
        uint64_t trained = j->steps_done - j->first_step;
        if (running && trained > 0)
            s->eta_sec = secs / (double)trained * (double)(j->max_steps - j->steps_done);
    }
}

bool jobs_visible(const conn *c, const job *j)
{
    return !c->auth_user[0] || strcmp(c->auth_user, j->owner) == 0;
}

void job_notify(coordinator *co, job *j)
{
    if (j->nfollowers == 0)
        return;
    Appliance__JobStatus s;
    job_status(co, j, &s);
    ENVELOPE(env, job_status, JOB_STATUS, &s);
    for (size_t i = 0; i < j->nfollowers; i++)
        conn_send_msg(j->followers[i], &env);
}

void job_save(coordinator *co, job *j)
{
    if (!co->journal)
        return;
    journal_job jj = {
        .id = j->id, .seq = j->seq, .state = j->state, .priority = j->priority,
        .file = j->file, .toml = j->toml ? j->toml : "", .base_dir = j->base_dir,
        .model_dir = j->model_dir, .message = j->message, .submitted_at = j->submitted_at,
        .steps = j->steps_done, .max_steps = j->max_steps, .loss = j->last_loss,
        .eval_step = j->have_eval ? j->last_eval_step : 0, .eval_loss = j->last_eval_loss,
        .eval_accuracy = j->have_eval ? j->last_eval_accuracy : -1,
        .eval_iou = j->have_eval ? j->last_eval_iou : -1,
    };
    journal_put(co->journal, &jj);
}

void job_save_recovery(coordinator *co, const job *j)
{
    if (!co->journal)
        return;
    journal_recovery r = {.restarts = j->restarts, .have_ckpt = j->have_ckpt,
                          .ckpt_step = j->ckpt_step, .kind = j->kind};
    journal_put_recovery(co->journal, j->id, &r);
}

/* Sends lines [from, nlog) to a log reader. */
void job_send_log(job *j, conn *c, uint64_t from, bool end)
{
    Appliance__JobLogLines m = APPLIANCE__JOB_LOG_LINES__INIT;
    m.job_id = j->id;
    m.first = from;
    m.n_lines = from < j->nlog ? j->nlog - from : 0;
    m.lines = j->log + (from < j->nlog ? from : j->nlog);
    m.end = end;
    ENVELOPE(env, job_log_lines, JOB_LOG_LINES, &m);
    conn_send_msg(c, &env);
}

/* Adds a line the journal already holds (loading) or a new one. */
void job_append_log(job *j, const char *line)
{
    if (j->nlog >= JOB_LOG_MAX)
        return;
    if (j->nlog == j->caplog) {
        size_t cap = j->caplog ? j->caplog * 2 : 32;
        char **v = realloc(j->log, cap * sizeof(*v));
        if (!v)
            return;
        j->log = v;
        j->caplog = cap;
    }
    char *copy = strdup(line);
    if (copy)
        j->log[j->nlog++] = copy;
}

void job_log(coordinator *co, job *j, const char *fmt, ...)
{
    char text[1200];
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    int n = (int)strftime(text, sizeof(text), "%Y-%m-%dT%H:%M:%SZ ", &tm);
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(text + n, sizeof(text) - (size_t)n, fmt, ap);
    va_end(ap);
    uint64_t line = j->nlog;
    job_append_log(j, text);
    if (j->nlog == line)
        return; /* past the limit */
    if (co->journal)
        journal_log(co->journal, j->id, line, text);
    for (size_t i = 0; i < j->nreaders; i++) {
        job_send_log(j, j->readers[i].c, j->readers[i].next, false);
        j->readers[i].next = j->nlog;
    }
}

job *job_new(coordinator *co, uint64_t seq)
{
    if (co->njobs == co->capjobs) {
        size_t cap = co->capjobs ? co->capjobs * 2 : 16;
        job **v = realloc(co->jobs, cap * sizeof(*v));
        if (!v)
            return NULL;
        co->jobs = v;
        co->capjobs = cap;
    }
    job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    co->jobs[co->njobs++] = j;
    j->seq = seq;
    if (seq >= co->next_seq)
        co->next_seq = seq + 1;
    snprintf(j->id, sizeof(j->id), "job-%llu", (unsigned long long)seq);
    j->priority = 2;
    return j;
}

void job__send_all(coordinator *co, job *j, const Appliance__Envelope *env)
{
    for (size_t i = 0; i < j->nmembers; i++) {
        member *mb = members_by_id(&co->members, j->members[i]);
        if (mb && mb->c)
            conn_send_msg(mb->c, env);
    }
}

void job__release(coordinator *co, job *j)
{
    for (size_t i = 0; i < j->nmembers; i++) {
        member *mb = members_by_id(&co->members, j->members[i]);
        if (mb && strcmp(mb->job, j->run_id) == 0) {
            mb->job[0] = 0;
            if (mb->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY)
                mb->state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE;
        }
    }
    if (co->running == j)
        co->running = NULL;
}

/* Frees what only a running attempt needs; the summaries stay open for the
 * next attempt unless the job ends. */
void job__drop_run(job *j, bool ending)
{
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    j->plan = NULL;
    free(j->plan_bytes);
    j->plan_bytes = NULL;
    free(j->members);
    j->members = NULL;
    j->nmembers = 0;
    steps_free(&j->flight);
    if (ending) {
        summaries_close(j->sum);
        j->sum = NULL;
    }
}

void job_end(coordinator *co, job *j, Appliance__JobState state, const char *why)
{
    bool running = j->state == APPLIANCE__JOB_STATE__JOB_RUNNING;
    if (!running && j->state != APPLIANCE__JOB_STATE__JOB_QUEUED)
        return;
    j->state = state;
    snprintf(j->message, sizeof(j->message), "%s", why);
    snprintf(j->phase, sizeof(j->phase), "%s", msg_job_state_name(state));
    if (running && state == APPLIANCE__JOB_STATE__JOB_DONE) {
        log_info("job %s done: %llu steps, loss %.6f", j->id, (unsigned long long)j->steps_done,
                 j->last_loss);
        Appliance__JobEnd e = APPLIANCE__JOB_END__INIT;
        e.job_id = j->run_id;
        ENVELOPE(env, job_end, JOB_END, &e);
        job__send_all(co, j, &env);
    } else if (running) {
        log_error("job %s %s at step %llu: %s", j->id, msg_job_state_name(state),
                  (unsigned long long)j->steps_done, why);
        Appliance__JobAbort a = APPLIANCE__JOB_ABORT__INIT;
        a.job_id = j->run_id;
        a.reason = (char *)why;
        ENVELOPE(env, job_abort, JOB_ABORT, &a);
        job__send_all(co, j, &env);
    }
    j->recovering = false;
    if (running)
        j->t_end = uv_now(co->n->loop);
    if (state == APPLIANCE__JOB_STATE__JOB_DONE)
        job_log(co, j, "done: %llu steps, final loss %.6f", (unsigned long long)j->steps_done,
                j->last_loss);
    else
        job_log(co, j, "%s at step %llu: %s", msg_job_state_name(state),
                (unsigned long long)j->steps_done, why);
    if (j->sum)
        summaries_flush(j->sum);
    job__release(co, j);
    job_notify(co, j); /* the final status: followers exit on it */
    j->nfollowers = 0;
    for (size_t i = 0; i < j->nreaders; i++)
        job_send_log(j, j->readers[i].c, j->readers[i].next, true);
    j->nreaders = 0;
    job__drop_run(j, true);
    free(j->toml); /* kept in the journal */
    j->toml = NULL;
    jobspec_free(j->spec);
    j->spec = NULL;
    job_save(co, j);
    if (running)
        jobs_schedule(co);
}

bool jobs_feasible(coordinator *co, const jobspec *spec, char *err, size_t errlen)
{
    planner_place pl;
    if (planner_place_members(&co->members, spec, false, PLANNER_ANY, &pl))
        return true;
    char why[768];
    if (planner_kinds_refusal(&co->members, &pl, why, sizeof(why))) {
        snprintf(err, errlen, "%s: %s", spec->source, why);
        return false;
    }
    snprintf(err, errlen,
             "%s: the job needs %zu wse-node(s), %zu memoryx, %zu swarmx and at least 1 worker; "
             "the cluster has %zu wse-node(s), %zu memoryx, %zu swarmx, %zu worker(s)",
             spec->source, pl.nr, pl.ns, pl.nx, pl.gr, pl.gs, pl.gx, pl.gw);
    return false;
}

int jobs_plan(coordinator *co, const jobspec *spec, const char *id, bool idle, int kind,
              uint8_t **plan, size_t *len, member ***used, size_t *nused, char *err,
              size_t errlen)
{
    planner_place pl;
    if (!planner_place_members(&co->members, spec, idle, (planner_kind)kind, &pl)) {
        snprintf(err, errlen, "%s: not enough idle members", spec->source);
        return -EAGAIN;
    }
    planner_members pm = {pl.reps, pl.nr, pl.shards, pl.ns, pl.swarm, pl.nx, pl.workers, pl.gw};
    int rc = planner_build(spec, id, &pm, co->opt.chunk_bytes / sizeof(float), plan, len, err,
                           errlen);
    if (rc < 0 || !used)
        return rc;
    size_t nw = pl.gw < (size_t)spec->num_csx * (size_t)spec->num_workers_per_csx
                    ? pl.gw
                    : (size_t)spec->num_csx * (size_t)spec->num_workers_per_csx;
    *nused = pl.nr + pl.ns + pl.nx + nw;
    *used = calloc(*nused, sizeof(member *));
    if (!*used) {
        free(*plan);
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    size_t k = 0;
    for (size_t i = 0; i < pl.nr; i++)
        (*used)[k++] = pl.reps[i];
    for (size_t i = 0; i < pl.ns; i++)
        (*used)[k++] = pl.shards[i];
    for (size_t i = 0; i < pl.nx; i++)
        (*used)[k++] = pl.swarm[i];
    for (size_t i = 0; i < nw; i++)
        (*used)[k++] = pl.workers[i];
    return 0;
}

int job__launch(coordinator *co, job *j, const jobspec *spec)
{
    char err[1024];
    planner_place pl;
    if (!planner_place_members(&co->members, spec, true, (planner_kind)j->kind, &pl))
        return 0;
    if (j->restarts)
        snprintf(j->run_id, sizeof(j->run_id), "%s.r%u", j->id, j->restarts);
    else
        snprintf(j->run_id, sizeof(j->run_id), "%s", j->id);
    j->max_restarts = (uint32_t)spec->max_num_restarts;
    j->progress_at = uv_now(co->n->loop);
    member **used = NULL;
    size_t nused = 0;
    int rc = jobs_plan(co, spec, j->run_id, true, j->kind, &j->plan_bytes, &j->plan_len, &used, &nused,
                       err, sizeof(err));
    if (rc == 0 && !(j->plan = appliance__plan__unpack(NULL, j->plan_len, j->plan_bytes))) {
        snprintf(err, sizeof(err), "cannot decode the plan");
        rc = -EPROTO;
    }
    if (rc < 0) {
        free(used);
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, err);
        return -1;
    }
    j->log_steps = (uint64_t)spec->log_steps;
    unsigned threads = 0; /* the fewest a wse-node of the job has */
    for (size_t i = 0; i < nused; i++)
        if (used[i]->role == APPLIANCE__ROLE__ROLE_WSE_NODE && used[i]->threads &&
            (!threads || used[i]->threads < threads))
            threads = used[i]->threads;
    j->step_timeout_ms = planner_step_timeout_ms(spec, j->plan, threads);
    if (spec->step_timeout_seconds == JOBSPEC_AUTO &&
        j->step_timeout_ms > PLANNER_STEP_TIMEOUT_S * 1000u)
        job_log(co, j, "a step may take long: no progress for %llu s is a stall "
                "(runconfig.step_timeout_seconds unset: %d times the step's work at %.0f GFLOP/s "
                "a thread)", (unsigned long long)(j->step_timeout_ms / 1000),
                PLANNER_STEP_TIMEOUT_WORK, PLANNER_THREAD_FLOPS / 1e9);
    j->members = calloc(nused, sizeof(uint32_t));
    j->nmembers = j->members ? nused : 0;
    for (size_t i = 0; i < j->nmembers; i++) {
        j->members[i] = used[i]->id;
        snprintf(used[i]->job, sizeof(used[i]->job), "%s", j->run_id);
        used[i]->state = APPLIANCE__MEMBER_STATE__MEMBER_BUSY;
    }
    free(used);
    free(j->plan_json);
    j->plan_json = jobview_plan_json(spec, j->plan, &co->members);
    j->view_replicas = j->plan->n_replicas < 64 ? (uint32_t)j->plan->n_replicas : 64;
    j->steps_done = j->first_step = j->plan->first_step;
    steps_free(&j->flight);
    /* Pipelined: the replicas apply the updates, memoryx commits no step
     * (it takes the weights at checkpoints) */
    bool pipelined = j->plan->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    steps_init(&j->flight, j->first_step, (uint32_t)j->plan->n_replicas,
               pipelined ? 0 : (uint32_t)j->plan->n_shards);
    j->max_steps = j->plan->max_steps;
    if (!j->t_start)
        j->t_start = uv_now(co->n->loop);
    j->t_train = 0;
    j->samples = 0;
    j->ready = j->ready_wse = j->finished = 0;
    evals_reset(&j->pending_evals);
    j->step_at = uv_now(co->n->loop);
    j->recovering = false;
    j->state = APPLIANCE__JOB_STATE__JOB_RUNNING;
    snprintf(j->phase, sizeof(j->phase), "compiling");
    co->running = j;
    /* TensorBoard summaries beside the checkpoints. */
    char serr[512];
    if (!j->sum) {
        j->sum = summaries_open(j->model_dir, serr, sizeof(serr));
        if (!j->sum)
            job_log(co, j, "no TensorBoard summaries: %s", serr);
    }
    static const char *const modes[] = {"auto", "pipelined", "weight streaming"};
    job_log(co, j, "%s: %zu replica(s), %s mode, global batch %u, steps %llu to %llu",
            j->restarts ? "restarted" : "started", j->plan->n_replicas,
            modes[j->plan->mode < 3 ? j->plan->mode : 0], j->plan->global_batch,
            (unsigned long long)j->plan->first_step, (unsigned long long)j->plan->max_steps);
    j->kind = pl.sim ? PLANNER_SIMULATED : PLANNER_REAL; /* later attempts keep it */
    if (pl.sim)
        job_log(co, j, "simulated compute: its %zu wse-nodes run no kernel (--simulate-compute); "
                "the losses are not the model's", j->plan->n_replicas);
    if (j->plan->host_share) {
        char share[32];
        job_log(co, j, "each replica planned within %s, its share of its host's memory: the "
                "wse-nodes of one host declare more than it has",
                units_format_size(j->plan->host_share, share, sizeof(share)));
    }
    log_info("job %s started: %s, %zu replica(s), %llu steps, global batch %u", j->id, j->file,
             j->plan->n_replicas, (unsigned long long)j->plan->max_steps, j->plan->global_batch);
    job_save(co, j);
    job_save_recovery(co, j);
    Appliance__JobStart st = APPLIANCE__JOB_START__INIT;
    st.plan = j->plan;
    ENVELOPE(start, job_start, JOB_START, &st);
    job__send_all(co, j, &start);
    job_notify(co, j);
    return 1;
}

/* Starts a queued job on idle members (see job__launch). */
int job__start(coordinator *co, job *j)
{
    if (!j->spec) {
        job_end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, j->spec_error);
        return -1;
    }
    return job__launch(co, j, j->spec);
}


void jobs_schedule(coordinator *co)
{
    while (!co->running && !co->n->stopping) {
        job *next = NULL;
        for (size_t i = 0; i < co->njobs; i++) {
            job *j = co->jobs[i];
            if (j->state == APPLIANCE__JOB_STATE__JOB_QUEUED &&
                (!next || j->priority < next->priority ||
                 (j->priority == next->priority && j->seq < next->seq)))
                next = j;
        }
        if (!next || job__start(co, next) == 0)
            return;
    }
}

int job_from_journal(coordinator *co, job *j, const journal_job *jj)
{
    snprintf(j->id, sizeof(j->id), "%s", jj->id);
    j->state = (Appliance__JobState)jj->state;
    j->priority = jj->priority >= 1 && jj->priority <= 3 ? jj->priority : 2;
    snprintf(j->file, sizeof(j->file), "%s", jj->file);
    snprintf(j->owner, sizeof(j->owner), "%s", jj->owner ? jj->owner : "");
    /* A user's queued jobs count against them again (admission_submitter). */
    snprintf(j->submitter, sizeof(j->submitter), "%s", j->owner);
    snprintf(j->base_dir, sizeof(j->base_dir), "%s", jj->base_dir);
    snprintf(j->model_dir, sizeof(j->model_dir), "%s", jj->model_dir);
    snprintf(j->message, sizeof(j->message), "%s", jj->message);
    snprintf(j->phase, sizeof(j->phase), "%s", msg_job_state_name(j->state));
    j->submitted_at = jj->submitted_at;
    j->steps_done = jj->steps;
    j->max_steps = jj->max_steps;
    j->last_loss = jj->loss;
    if (jj->eval_step) {
        j->have_eval = true;
        j->last_eval_step = jj->eval_step;
        j->last_eval_loss = jj->eval_loss;
        j->last_eval_accuracy = jj->eval_accuracy;
        j->last_eval_iou = jj->eval_iou;
    }
    if (j->state != APPLIANCE__JOB_STATE__JOB_QUEUED && j->state != APPLIANCE__JOB_STATE__JOB_RUNNING)
        return 0;
    if (!(j->toml = strdup(jj->toml)))
        return -ENOMEM;
    /* where a journaled job enters this coordinator: parsed once here */
    j->spec = jobspec_parse(j->toml, strlen(j->toml), j->file, j->base_dir, j->spec_error,
                            sizeof(j->spec_error));
    return 0;
}

void jobs_client_closed(coordinator *co, conn *c)
{
    for (size_t i = 0; i < co->njobs; i++) {
        job *j = co->jobs[i];
        size_t k = 0;
        for (size_t f = 0; f < j->nfollowers; f++)
            if (j->followers[f] != c)
                j->followers[k++] = j->followers[f];
        j->nfollowers = k;
        k = 0;
        for (size_t r = 0; r < j->nreaders; r++)
            if (j->readers[r].c != c)
                j->readers[k++] = j->readers[r];
        j->nreaders = k;
    }
}

void job_free(job *j)
{
    job__drop_run(j, true);
    jobview_free(j);
    free(j->toml);
    jobspec_free(j->spec);
    free(j->followers);
    free(j->readers);
    for (size_t l = 0; l < j->nlog; l++)
        free(j->log[l]);
    free(j->log);
    free(j);
}

void jobs_shutdown(coordinator *co)
{
    for (size_t i = 0; i < co->njobs; i++) {
        job_free(co->jobs[i]);
    }
    free(co->jobs);
    co->jobs = NULL;
    co->njobs = co->capjobs = 0;
    co->running = NULL;
    journal_close(co->journal);
    co->journal = NULL;
}
