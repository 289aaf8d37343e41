/* Jobs as clients see them: submission into the queue, status (once or
 * followed), the list, cancellation, the log (once or followed), and the
 * journal that keeps all of it across restarts of the coordinator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "admission.h"
#include "history.h"
#include "job.h"
#include "log.h"
#include "msg.h"

#define JOB_FOLLOWERS_MAX 1024 /* clients following one job (status or log) at most */

static coordinator *co_of(node *n) { return n->data; }

static double jobctl__now(void)
{
    struct timeval tv;
    gettimeofday(&tv, NULL);
    return (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
}

static int jobctl__follow(job *j, conn *c)
{
    for (size_t i = 0; i < j->nfollowers; i++)
        if (j->followers[i] == c)
            return 0;
    if (j->nfollowers >= JOB_FOLLOWERS_MAX)
        return -ENOBUFS;
    conn **v = realloc(j->followers, (j->nfollowers + 1) * sizeof(*v));
    if (!v)
        return -ENOMEM;
    j->followers = v;
    j->followers[j->nfollowers++] = c;
    return 0;
}

static bool jobctl__ended(const job *j)
{
    return j->state != APPLIANCE__JOB_STATE__JOB_QUEUED &&
           j->state != APPLIANCE__JOB_STATE__JOB_RUNNING;
}

static void jobctl__send_status(coordinator *co, job *j, conn *c)
{
    Appliance__JobStatus s;
    job_status(co, j, &s);
    ENVELOPE(out, job_status, JOB_STATUS, &s);
    conn_send_msg(c, &out);
}

void jobs_handle_submit(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobSubmit *s = env->job_submit;
    const char *file = s->file_name && s->file_name[0] ? s->file_name : "job.toml";
    const char *base = s->base_dir ? s->base_dir : "";
    char err[1024];
    char submitter[ADMISSION_SUBMITTER_LEN];
    admission_submitter(c, submitter, sizeof(submitter));
    int arc = admission_check(co, submitter, strlen(s->toml), s->plan_only, err, sizeof(err));
    if (arc < 0) {
        log_info("job file %s from %s %s", file, submitter, err);
        node_reply_error(c, arc, "%s", err);
        return;
    }
    jobspec *spec = jobspec_parse(s->toml, strlen(s->toml), file, base, err, sizeof(err));
    if (!spec) {
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        node_reply_error(c, -EINVAL, "%s", err);
        return;
    }
    if (!jobs_feasible(co, spec, err, sizeof(err))) {
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        node_reply_error(c, -EAGAIN, "%s", err);
        jobspec_free(spec);
        return;
    }
    /* The plan on the cluster as it is: what does not fit is refused now,
     * not when the job's turn comes. */
    uint8_t *buf = NULL;
    size_t blen = 0;
    int rc = jobs_plan(co, spec, "plan", s->toml, false, &buf, &blen, NULL, NULL, err, sizeof(err));
    if (rc < 0) {
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        node_reply_error(c, rc, "%s", err);
        jobspec_free(spec);
        return;
    }
    if (!s->plan_only)
        free(buf);
    if (s->plan_only) {
        Appliance__Plan *plan = appliance__plan__unpack(NULL, blen, buf);
        if (!plan) {
            node_reply_error(c, -EPROTO, "cannot decode the plan");
        } else {
            Appliance__JobAccepted acc = APPLIANCE__JOB_ACCEPTED__INIT;
            acc.job_id = "plan";
            acc.plan = plan;
            ENVELOPE(out, job_accepted, JOB_ACCEPTED, &acc);
            conn_send_msg(c, &out);
            appliance__plan__free_unpacked(plan, NULL);
        }
        free(buf);
        jobspec_free(spec);
        return;
    }
    history_evict(co, 0);
    job *j = job_new(co, co->next_seq);
    if (!j || !(j->toml = strdup(s->toml))) {
        node_reply_error(c, -ENOMEM, "out of memory");
        jobspec_free(spec);
        return;
    }
    snprintf(j->file, sizeof(j->file), "%s", file);
    snprintf(j->submitter, sizeof(j->submitter), "%s", submitter);
    snprintf(j->base_dir, sizeof(j->base_dir), "%s", base);
    snprintf(j->model_dir, sizeof(j->model_dir), "%s", spec->model_dir);
    j->priority = (uint32_t)(spec->job_priority[1] - '0');
    j->max_steps = (uint64_t)spec->max_steps;
    j->submitted_at = jobctl__now();
    j->state = APPLIANCE__JOB_STATE__JOB_QUEUED;
    snprintf(j->phase, sizeof(j->phase), "queued");
    jobspec_free(spec);
    if (s->follow)
        jobctl__follow(j, c);
    job_save(co, j);
    job_log(co, j, "submitted from %s: %s, priority p%u", c->peer_addr, j->file, j->priority);
    Appliance__JobAccepted acc = APPLIANCE__JOB_ACCEPTED__INIT;
    acc.job_id = j->id;
    ENVELOPE(out, job_accepted, JOB_ACCEPTED, &acc);
    conn_send_msg(c, &out);
    jobs_schedule(co);
    if (j->state == APPLIANCE__JOB_STATE__JOB_QUEUED) {
        Appliance__JobStatus st;
        job_status(co, j, &st);
        job_log(co, j, "queued at position %u", st.queue_position);
        job_notify(co, j);
    }
}

/* The job a query names, "" for the newest; NULL after replying an error.
 * A finished job evicted from memory is read back from the journal: give it
 * back with history_release. */
static job *jobctl__named(coordinator *co, conn *c, const char *id)
{
    if ((!id || !id[0]) && co->njobs > 0)
        return co->jobs[co->njobs - 1];
    job *j = id ? job_find(co, id) : NULL;
    if (!j)
        j = history_load(co, id);
    if (!j)
        node_reply_error(c, -ENOENT, "no job %s", id && id[0] ? id : "yet");
    return j;
}

void jobs_handle_status(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    job *j = jobctl__named(co, c, env->job_status_query->job_id);
    if (!j)
        return;
    jobctl__send_status(co, j, c);
    if (env->job_status_query->follow && !jobctl__ended(j) && jobctl__follow(j, c) < 0)
        node_reply_error(c, -ENOBUFS, "job %s has %u followers, the most it takes", j->id,
                         JOB_FOLLOWERS_MAX);
    history_release(j);
}

void jobs_handle_list(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    history_list(co_of(n), c);
}

void jobs_handle_cancel(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    job *j = jobctl__named(co, c, env->job_cancel->job_id);
    if (!j)
        return;
    if (jobctl__ended(j)) {
        node_reply_error(c, -EALREADY, "job %s has already ended: %s", j->id, job_state_name(j->state));
        history_release(j);
        return;
    }
    char why[128];
    snprintf(why, sizeof(why), "cancelled by a client at %s", c->peer_addr);
    log_info("job %s %s", j->id, why);
    job_end(co, j, APPLIANCE__JOB_STATE__JOB_CANCELLED, why);
    jobctl__send_status(co, j, c);
    jobs_schedule(co);
}

void jobs_handle_logs(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobLogQuery *q = env->job_log_query;
    job *j = jobctl__named(co, c, q->job_id);
    if (!j)
        return;
    if (j->from_journal)
        history_load_log(co, j);
    bool follow = q->follow && !jobctl__ended(j);
    job_send_log(j, c, q->from, !follow);
    if (!follow) {
        history_release(j);
        return;
    }
    for (size_t i = 0; i < j->nreaders; i++)
        if (j->readers[i].c == c)
            return;
    if (j->nreaders >= JOB_FOLLOWERS_MAX) {
        node_reply_error(c, -ENOBUFS, "job %s has %u log readers, the most it takes", j->id,
                         JOB_FOLLOWERS_MAX);
        return;
    }
    job_reader *v = realloc(j->readers, (j->nreaders + 1) * sizeof(*v));
    if (!v)
        return;
    j->readers = v;
    j->readers[j->nreaders].c = c;
    j->readers[j->nreaders].next = j->nlog;
    j->nreaders++;
}

/* ---- the journal ---- */

static int jobctl__load_line(void *arg, uint64_t line, const char *text)
{
    job_append_log(arg, text);
    return 0;
}

int job_from_journal(coordinator *co, job *j, const journal_job *jj)
{
    snprintf(j->id, sizeof(j->id), "%s", jj->id);
    j->state = (Appliance__JobState)jj->state;
    j->priority = jj->priority >= 1 && jj->priority <= 3 ? jj->priority : 2;
    snprintf(j->file, sizeof(j->file), "%s", jj->file);
    snprintf(j->base_dir, sizeof(j->base_dir), "%s", jj->base_dir);
    snprintf(j->model_dir, sizeof(j->model_dir), "%s", jj->model_dir);
    snprintf(j->message, sizeof(j->message), "%s", jj->message);
    snprintf(j->phase, sizeof(j->phase), "%s", job_state_name(j->state));
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
    if ((j->state == APPLIANCE__JOB_STATE__JOB_QUEUED || j->state == APPLIANCE__JOB_STATE__JOB_RUNNING) &&
        !(j->toml = strdup(jj->toml)))
        return -ENOMEM;
    return 0;
}

static int jobctl__load_job(void *arg, const journal_job *jj)
{
    coordinator *co = arg;
    job *j = job_new(co, jj->seq);
    if (!j || job_from_journal(co, j, jj) < 0)
        return -ENOMEM;
    journal_load_log(co->journal, j->id, jobctl__load_line, j);
    history_evict(co, 64); /* a long journal loads within the memory bound */
    return 0;
}

void jobs_load(coordinator *co)
{
    if (!co->journal)
        return;
    if (journal_load(co->journal, jobctl__load_job, co) < 0)
        log_error("journal: could not load every job");
    size_t queued = 0, failed = 0, recovering = 0;
    for (size_t i = 0; i < co->njobs; i++) {
        job *j = co->jobs[i];
        if (j->state == APPLIANCE__JOB_STATE__JOB_RUNNING) {
            /* It was running when the coordinator stopped: its daemons let
             * it go when they lost the coordinator. It recovers from its
             * newest complete checkpoint once they have registered again. */
            if (job_recover_loaded(co, j) == 0)
                recovering++;
            else
                failed++;
        } else if (j->state == APPLIANCE__JOB_STATE__JOB_QUEUED) {
            queued++;
        }
    }
    if (co->njobs)
        log_info("journal: %zu job(s) known, %zu queued again, %zu recovering, %zu failed as "
                 "interrupted", co->njobs, queued, recovering, failed);
}
