/* Jobs as clients see them: submission into the queue, status (once or
 * followed), the list, cancellation, the log (once or followed), and the
 * journal that keeps all of it across restarts of the coordinator. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "admission.h"
#include "footprint.h"
#include "history.h"
#include "job.h"
#include "log.h"
#include "msg.h"
#include "planner.h"
#include "units.h"

/* Replies are split into frames of about this many bytes, far below the
 * default header limit; less when the limit is set lower. */
#define JOBCTL_REPLY_CHUNK (256u * 1024)

static size_t jobctl__chunk(const conn *c)
{
    size_t half = c->cfg->limits.max_header / 2;
    return half < JOBCTL_REPLY_CHUNK ? half : JOBCTL_REPLY_CHUNK;
}

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

void jobctl_handle_submit(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobSubmit *s = env->job_submit;
    char file[256]; /* as it goes into logs and statuses: one printable line */
    snprintf(file, sizeof(file), "%s", s->file_name && s->file_name[0] ? s->file_name : "job.toml");
    for (char *q = file; *q; q++)
        if ((unsigned char)*q < 0x20 || *q == 0x7f)
            *q = '?';
    const char *base = s->base_dir ? s->base_dir : "";
    char err[1024];
    char submitter[ADMISSION_SUBMITTER_LEN];
    admission_submitter(c, submitter, sizeof(submitter));
    size_t toml_len = strlen(s->toml);
    int arc = admission_check(&co->opt.admission, co->jobs, co->njobs, submitter, file, toml_len,
                              s->plan_only, err, sizeof(err));
    if (arc < 0) {
        co->jobs_refused++;
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        node_reply_error(c, arc, "%s", err);
        return;
    }
    const coordinator_options *lim = &co->opt;
    jobspec *spec = jobspec_parse(s->toml, toml_len, file, base, err, sizeof(err));
    if (!spec) {
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        node_reply_error(c, -EINVAL, "%s", err);
        return;
    }
    char sz[32];
    if ((uint64_t)spec->max_steps > lim->max_steps)
        snprintf(err, sizeof(err), "%s: runconfig.max_steps = %lld is more than this coordinator "
                 "accepts (max_steps = %llu)", file, (long long)spec->max_steps,
                 (unsigned long long)lim->max_steps);
    else if (lim->max_model_params && spec->model->total_params > lim->max_model_params)
        snprintf(err, sizeof(err), "%s: the model has %llu trainable parameters (%s of float32 "
                 "weights), more than this coordinator accepts (max_model_params = %llu)", file,
                 (unsigned long long)spec->model->total_params,
                 units_format_size(spec->model->total_params * 4, sz, sizeof(sz)),
                 (unsigned long long)lim->max_model_params);
    else
        err[0] = 0;
    if (!err[0] && !lim->max_model_params) {
        /* by default, what the memoryx members can hold: weights, reduced
         * gradients and the optimizer's state (footprint.h); none yet: the
         * plan checks the shards it is given */
        uint64_t mem = 0;
        for (size_t i = 0; i < co->members.n; i++) {
            const member *mb = &co->members.v[i];
            if (mb->role == APPLIANCE__ROLE__ROLE_MEMORYX &&
                mb->state != APPLIANCE__MEMBER_STATE__MEMBER_LOST && mb->memory)
                mem += mb->memory > mb->disk ? mb->memory : mb->disk; /* RAM, or its disk tier */
        }
        unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
        /* a gradient each unless the job asks for Pipelined (mode = "auto"
         * may pick Weight Streaming) */
        bool grads = strcmp(spec->mode, "pipelined") != 0;
        uint64_t need = 0;
        footprint_sparse sp = {spec->sparsity.tensor_level, jobspec_sparsity_compact(&spec->sparsity)};
        for (int i = 0; i < spec->model->ntensors; i++)
            if (spec->model->tensors[i].trainable) /* (the parameters alone) */
                need += footprint_shard_sparse_bytes(
                    spec->model->tensors[i].elems,
                    spec->sparsity.present ? (double)sp.level[i] : 0.0, sp.compact, true, states,
                    grads);
        char s1[32], s2[32];
        if (mem && need > mem)
            snprintf(err, sizeof(err), "%s: the model has %llu trainable parameters (%s of float32 "
                     "weights); with their gradients and optimizer state they need %s, more than "
                     "the memoryx members of this cluster hold (%s in all, in memory or in their "
                     "disk tiers): add memoryx members, give them more --memory, or a --state-dir "
                     "with more room", file,
                     (unsigned long long)spec->model->total_params,
                     units_format_size(spec->model->total_params * 4, sz, sizeof(sz)),
                     units_format_size(need, s1, sizeof(s1)), units_format_size(mem, s2, sizeof(s2)));
    }
    if (err[0]) {
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        co->jobs_refused++;
        node_reply_error(c, -EFBIG, "%s", err);
        jobspec_free(spec);
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
    int rc = jobs_plan(co, spec, "plan", false, PLANNER_ANY, &buf, &blen, NULL, NULL, err, sizeof(err));
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
    snprintf(j->owner, sizeof(j->owner), "%s", c->auth_user);
    snprintf(j->base_dir, sizeof(j->base_dir), "%s", base);
    snprintf(j->model_dir, sizeof(j->model_dir), "%s", spec->model_dir);
    j->priority = (uint32_t)(spec->job_priority[1] - '0');
    j->max_steps = (uint64_t)spec->max_steps;
    j->submitted_at = jobctl__now();
    j->state = APPLIANCE__JOB_STATE__JOB_QUEUED;
    snprintf(j->phase, sizeof(j->phase), "queued");
    j->spec = spec;
    if (s->follow)
        jobctl__follow(j, c);
    job_save(co, j);
    if (co->journal)
        journal_set_owner(co->journal, j->id, j->owner);
    if (j->owner[0])
        job_log(co, j, "submitted from %s by user %s: %s, priority p%u", c->peer_addr, j->owner,
                j->file, j->priority);
    else
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

/* The job a query names, "" for the newest the client may see; NULL after
 * replying an error. Another user's job is not there for this client: the
 * answer is the same as for a job that never was. A finished job evicted
 * from memory is read back from the journal: give it back with
 * history_release. */
static job *jobctl__named(coordinator *co, conn *c, const char *id)
{
    job *j = NULL;
    if (!id || !id[0]) {
        for (size_t i = co->njobs; i > 0 && !j; i--)
            if (jobs_visible(c, co->jobs[i - 1]))
                j = co->jobs[i - 1];
        if (!j && c->auth_user[0]) /* a user whose jobs were all evicted */
            j = history_load_newest(co, c->auth_user);
    } else {
        j = job_find(co, id);
        if (!j)
            j = history_load(co, id);
        if (j && !jobs_visible(c, j)) {
            history_release(j);
            j = NULL;
        }
    }
    if (!j)
        node_reply_error(c, -ENOENT, "no job %s", id && id[0] ? id : "yet");
    return j;
}

void jobctl_handle_status(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
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

void jobctl_handle_list(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    history_list(co_of(n), c);
}

void jobctl_handle_cancel(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    job *j = jobctl__named(co, c, env->job_cancel->job_id);
    if (!j)
        return;
    if (jobctl__ended(j) || j->from_journal) { /* only finished jobs are evicted */
        node_reply_error(c, -EALREADY, "job %s has already ended: %s", j->id, msg_job_state_name(j->state));
        history_release(j);
        return;
    }
    char why[160];
    if (c->auth_user[0])
        snprintf(why, sizeof(why), "cancelled by user %s at %s", c->auth_user, c->peer_addr);
    else
        snprintf(why, sizeof(why), "cancelled by a client at %s", c->peer_addr);
    log_info("job %s %s", j->id, why);
    job_end(co, j, APPLIANCE__JOB_STATE__JOB_CANCELLED, why);
    jobctl__send_status(co, j, c);
    jobs_schedule(co);
}

/* A job's log on its way to a client, a frame at a time as the
 * connection drains: a long log never sits whole in a write queue. The job
 * stays in memory until its log is sent (j->sending); one read back from
 * the journal is freed then. */
struct jobctl_send {
    conn *c;
    job *j;
    uint64_t next;        /* the next line to send */
    bool follow;          /* once caught up, the client reads new lines as they come */
};


/* Sends what the connection takes of s. Returns true when s is finished:
 * everything sent, or (following) the client became a reader of the job. */
static bool jobctl__pump(jobctl_send *s)
{
    job *j = s->j;
    size_t chunk = jobctl__chunk(s->c);
    for (;;) {
        uint64_t end = s->next;
        size_t bytes = 0;
        while (end < j->nlog && (end == s->next || bytes + strlen(j->log[end]) + 8 <= chunk))
            bytes += strlen(j->log[end++]) + 8;
        bool caught_up = end >= j->nlog;
        if (caught_up && s->follow && !jobctl__ended(j)) {
            if (end > s->next)
                job_send_log(j, s->c, s->next, false);
            for (size_t i = 0; i < j->nreaders; i++)
                if (j->readers[i].c == s->c)
                    return true;
            if (j->nreaders >= JOB_FOLLOWERS_MAX) {
                node_reply_error(s->c, -ENOBUFS, "job %s has %u log readers, the most it takes",
                                 j->id, JOB_FOLLOWERS_MAX);
                return true;
            }
            job_reader *v = realloc(j->readers, (j->nreaders + 1) * sizeof(*v));
            if (!v)
                return true;
            j->readers = v;
            j->readers[j->nreaders].c = s->c;
            j->readers[j->nreaders].next = j->nlog;
            j->nreaders++;
            return true;
        }
        if (!conn_can_send(s->c, bytes + 64))
            return false; /* jobctl_client_drain goes on */
        Appliance__JobLogLines m = APPLIANCE__JOB_LOG_LINES__INIT;
        m.job_id = j->id;
        m.first = s->next;
        m.n_lines = end > s->next ? end - s->next : 0;
        m.lines = j->log + (s->next < j->nlog ? s->next : j->nlog);
        m.end = caught_up;
        ENVELOPE(env, job_log_lines, JOB_LOG_LINES, &m);
        if (conn_send_msg(s->c, &env) < 0 || caught_up)
            return true;
        s->next = end;
    }
}

/* A send is over (finished or its client gone): the job may go. */
static void jobctl__done(jobctl_send *s)
{
    s->j->sending--;
    if (s->j->sending == 0)
        history_release(s->j);
}

/* Sends a log now, or after the client's earlier ones (one at a time per
 * client, in request order). */
static void jobctl__start(coordinator *co, jobctl_send *s)
{
    s->j->sending++;
    bool waiting = false;
    for (size_t i = 0; i < co->nlog_sends && !waiting; i++)
        waiting = co->log_sends[i].c == s->c;
    if (!waiting && jobctl__pump(s)) {
        jobctl__done(s);
        return;
    }
    jobctl_send *v = realloc(co->log_sends, (co->nlog_sends + 1) * sizeof(*v));
    if (!v) {
        jobctl__done(s);
        if (waiting)
            node_reply_error(s->c, -ENOMEM, "out of memory");
        else
            conn_fail(s->c, -ENOMEM, "out of memory"); /* a log half sent */
        return;
    }
    co->log_sends = v;
    co->log_sends[co->nlog_sends++] = *s;
}

void jobctl_handle_logs(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobLogQuery *q = env->job_log_query;
    job *j = jobctl__named(co, c, q->job_id);
    if (!j)
        return;
    if (j->from_journal)
        history_load_log(co, j);
    jobctl_send s = {.c = c, .j = j, .next = q->from, .follow = q->follow && !j->from_journal};
    jobctl__start(co, &s);
}

void jobctl_client_drain(coordinator *co, conn *c)
{
    /* The client's logs in request order: the first unfinished one stops it. */
    for (size_t i = 0; i < co->nlog_sends;) {
        if (co->log_sends[i].c != c) {
            i++;
            continue;
        }
        if (!jobctl__pump(&co->log_sends[i]))
            return;
        jobctl__done(&co->log_sends[i]);
        memmove(&co->log_sends[i], &co->log_sends[i + 1],
                (co->nlog_sends - i - 1) * sizeof(*co->log_sends));
        co->nlog_sends--;
    }
}

void jobctl_client_forget(coordinator *co, conn *c)
{
    size_t k = 0;
    for (size_t i = 0; i < co->nlog_sends; i++)
        if (co->log_sends[i].c != c)
            co->log_sends[k++] = co->log_sends[i];
        else
            jobctl__done(&co->log_sends[i]);
    co->nlog_sends = k;
    if (k == 0) {
        free(co->log_sends);
        co->log_sends = NULL;
    }
}

/* ---- the journal ---- */

static int jobctl__load_line(void *arg, uint64_t line, const char *text)
{
    job_append_log(arg, text);
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

void jobctl_load(coordinator *co)
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
