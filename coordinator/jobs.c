/* Jobs on the coordinator: submission, compilation into a plan, placement on
 * idle members, the barrier before the first step, step accounting, and the
 * end of a job (done, failed) with every member released. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "coordinator.h"
#include "jobspec.h"
#include "log.h"
#include "msg.h"
#include "plan.h"
#include "planner.h"

#define JOB_CHUNK_ELEMS (256u * 1024) /* 1 MiB of float32 per chunk */
#define JOB_STEP_WINDOW (1u << 20)    /* steps whose reports may be in flight at most */

typedef struct job_step {
    uint64_t step;        /* which step this slot holds, UINT64_MAX if none */
    double loss_sum;      /* sum over replicas of their loss sums */
    uint32_t reports;     /* replicas that reported */
    uint32_t commits;     /* shards that committed */
} job_step;

struct job {
    char id[40];
    Appliance__JobState state;
    char file[256];
    char model_dir[PATH_MAX];
    char message[1024];   /* why it failed, or the final word */
    char phase[32];       /* compiling, loading weights, training, checkpointing */
    uint8_t *plan_bytes;  /* packed plan, owned */
    size_t plan_len;
    Appliance__Plan *plan; /* unpacked from plan_bytes, owned */
    uint32_t *members;    /* member ids the job uses */
    size_t nmembers;
    size_t ready;         /* members that reported ready */
    size_t finished;      /* shards that wrote their final checkpoint */
    uint64_t steps_done;
    double last_loss;
    job_step *ring;       /* steps in flight, by step % ring_cap (a power of two) */
    size_t ring_cap;
    conn *follower;       /* client following the job, or NULL */
    bool json;
    uint64_t t_start, t_train; /* uv_now at acceptance and at the first step */
    uint64_t samples;      /* trained */
    uint64_t log_steps;    /* progress goes to the follower every log_steps steps */
    /* Evaluation: the reports of the one in progress, and the last result. */
    uint64_t eval_step;    /* the step being evaluated */
    uint32_t eval_reports; /* replicas that reported it */
    uint64_t eval_samples, eval_correct;
    double eval_loss_sum;
    uint32_t eval_classes;
    uint64_t eval_inter[256], eval_union[256];
    bool have_eval;        /* a result below */
    uint64_t last_eval_step;
    double last_eval_loss, last_eval_accuracy, last_eval_iou;
};

static coordinator *co_of(node *n) { return n->data; }

static const char *job__state_name(Appliance__JobState s)
{
    switch (s) {
    case APPLIANCE__JOB_STATE__JOB_QUEUED: return "queued";
    case APPLIANCE__JOB_STATE__JOB_RUNNING: return "running";
    case APPLIANCE__JOB_STATE__JOB_DONE: return "done";
    case APPLIANCE__JOB_STATE__JOB_FAILED: return "failed";
    case APPLIANCE__JOB_STATE__JOB_CANCELLED: return "cancelled";
    default: return "unknown";
    }
}

static job *job__find(coordinator *co, const char *id)
{
    for (size_t i = 0; i < co->njobs; i++)
        if (strcmp(co->jobs[i]->id, id) == 0)
            return co->jobs[i];
    return NULL;
}

static void job__status(coordinator *co, job *j, Appliance__JobStatus *s)
{
    appliance__job_status__init(s);
    s->job_id = j->id;
    s->state = j->state;
    s->step = j->steps_done;
    s->max_steps = j->plan ? j->plan->max_steps : 0;
    s->loss = j->last_loss;
    s->model_dir = j->model_dir;
    s->message = j->message;
    s->phase = j->phase;
    uint64_t now = uv_now(co->n->loop);
    s->elapsed_sec = (double)(now - j->t_start) / 1000.0;
    s->eval_accuracy = s->eval_iou = -1;
    if (j->have_eval) {
        s->eval_step = j->last_eval_step;
        s->eval_loss = j->last_eval_loss;
        s->eval_accuracy = j->last_eval_accuracy;
        s->eval_iou = j->last_eval_iou;
    }
    if (j->t_train && now > j->t_train)
        s->samples_per_sec = (double)j->samples * 1000.0 / (double)(now - j->t_train);
}

static void job__notify(coordinator *co, job *j)
{
    if (!j->follower)
        return;
    Appliance__JobStatus s;
    job__status(co, j, &s);
    ENVELOPE(env, job_status, JOB_STATUS, &s);
    conn_send_msg(j->follower, &env);
}

static void job__send_all(coordinator *co, job *j, const Appliance__Envelope *env)
{
    for (size_t i = 0; i < j->nmembers; i++) {
        member *mb = members_by_id(&co->members, j->members[i]);
        if (mb && mb->c)
            conn_send_msg(mb->c, env);
    }
}

static void job__release(coordinator *co, job *j)
{
    for (size_t i = 0; i < j->nmembers; i++) {
        member *mb = members_by_id(&co->members, j->members[i]);
        if (mb && strcmp(mb->job, j->id) == 0) {
            mb->job[0] = 0;
            if (mb->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY)
                mb->state = APPLIANCE__MEMBER_STATE__MEMBER_ALIVE;
        }
    }
    if (co->running == j)
        co->running = NULL;
}

/* Ends a job: every member is told, the follower gets the final status. */
static void job__end(coordinator *co, job *j, Appliance__JobState state, const char *why)
{
    if (j->state != APPLIANCE__JOB_STATE__JOB_RUNNING)
        return;
    j->state = state;
    snprintf(j->message, sizeof(j->message), "%s", why);
    snprintf(j->phase, sizeof(j->phase), "%s", job__state_name(state));
    if (state == APPLIANCE__JOB_STATE__JOB_DONE) {
        log_info("job %s done: %llu steps, loss %.6f", j->id, (unsigned long long)j->steps_done,
                 j->last_loss);
        Appliance__JobEnd e = APPLIANCE__JOB_END__INIT;
        e.job_id = j->id;
        ENVELOPE(env, job_end, JOB_END, &e);
        job__send_all(co, j, &env);
    } else {
        log_error("job %s %s at step %llu: %s", j->id, job__state_name(state),
                  (unsigned long long)j->steps_done, why);
        Appliance__JobAbort a = APPLIANCE__JOB_ABORT__INIT;
        a.job_id = j->id;
        a.reason = (char *)why;
        ENVELOPE(env, job_abort, JOB_ABORT, &a);
        job__send_all(co, j, &env);
    }
    job__release(co, j);
    job__notify(co, j);
    j->follower = NULL;
}

/* Picks idle members of a role in member-id order. */
static size_t job__pick(coordinator *co, Appliance__Role role, member **out, size_t want)
{
    size_t k = 0;
    for (size_t i = 0; i < co->members.n && k < want; i++) {
        member *mb = &co->members.v[i];
        if (mb->role == role && mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE && !mb->job[0])
            out[k++] = mb;
    }
    return k;
}

static job *job__new(coordinator *co)
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
    snprintf(j->id, sizeof(j->id), "job-%llu-%04llu", (unsigned long long)(uv_now(co->n->loop) % 1000000),
             (unsigned long long)++co->next_job);
    j->t_start = uv_now(co->n->loop);
    return j;
}

void jobs_handle_submit(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobSubmit *s = env->job_submit;
    const char *file = s->file_name && s->file_name[0] ? s->file_name : "job.toml";
    char err[1024];
    jobspec *spec = jobspec_parse(s->toml, strlen(s->toml), file, s->base_dir, err, sizeof(err));
    if (!spec) {
        log_info("job file %s from %s refused: %s", file, c->peer_addr, err);
        node_reply_error(c, -EINVAL, "%s", err);
        return;
    }
    if (co->running && !s->plan_only) {
        node_reply_error(c, -EBUSY, "%s: the cluster is running job %s; try again when it ends",
                         file, co->running->id);
        jobspec_free(spec);
        return;
    }
    /* Placement: idle members, in member-id order. */
    size_t nr = (size_t)spec->num_csx, ns = (size_t)spec->num_wgt_servers;
    member *reps[1024], *shards[64], *swarm[1024], *workers[256];
    size_t nx = planner_swarm_nodes(nr, (size_t)spec->swarmx_fanout);
    size_t gr = job__pick(co, APPLIANCE__ROLE__ROLE_WSE_NODE, reps, nr);
    size_t gs = job__pick(co, APPLIANCE__ROLE__ROLE_MEMORYX, shards, ns);
    size_t gx = job__pick(co, APPLIANCE__ROLE__ROLE_SWARMX, swarm, nx);
    size_t gw = job__pick(co, APPLIANCE__ROLE__ROLE_WORKER, workers, 256);
    if (gr < nr || gs < ns || gx < nx || gw < 1) {
        node_reply_error(c, -EAGAIN,
                         "%s: the job needs %zu wse-node(s), %zu memoryx, %zu swarmx and at least 1 "
                         "worker; idle now: %zu wse-node(s), %zu memoryx, %zu swarmx, %zu worker(s)",
                         file, nr, ns, nx, gr, gs, gx, gw);
        jobspec_free(spec);
        return;
    }
    job *j = job__new(co);
    if (!j) {
        node_reply_error(c, -ENOMEM, "out of memory");
        jobspec_free(spec);
        return;
    }
    snprintf(j->file, sizeof(j->file), "%s", file);
    snprintf(j->model_dir, sizeof(j->model_dir), "%s", spec->model_dir);
    j->log_steps = (uint64_t)spec->log_steps;
    planner_members pm = {reps, nr, shards, ns, swarm, nx, workers, gw};
    int rc = planner_build(spec, j->id, s->toml, &pm, JOB_CHUNK_ELEMS, &j->plan_bytes, &j->plan_len,
                           err, sizeof(err));
    jobspec_free(spec);
    if (rc == 0)
        j->plan = appliance__plan__unpack(NULL, j->plan_len, j->plan_bytes);
    if (j->plan)
        j->steps_done = j->plan->first_step;
    if (rc < 0 || !j->plan) {
        j->state = APPLIANCE__JOB_STATE__JOB_FAILED;
        snprintf(j->message, sizeof(j->message), "%s", rc < 0 ? err : "cannot decode the plan");
        node_reply_error(c, rc < 0 ? rc : -EPROTO, "%s", j->message);
        return;
    }
    Appliance__JobAccepted acc = APPLIANCE__JOB_ACCEPTED__INIT;
    acc.job_id = j->id;
    acc.plan = j->plan;
    ENVELOPE(out, job_accepted, JOB_ACCEPTED, &acc);
    if (s->plan_only) {
        j->state = APPLIANCE__JOB_STATE__JOB_DONE;
        snprintf(j->message, sizeof(j->message), "plan only");
        conn_send_msg(c, &out);
        return;
    }
    /* The members this job uses. */
    j->nmembers = nr + ns + nx + (gw < j->plan->n_workers ? gw : j->plan->n_workers);
    j->members = calloc(j->nmembers, sizeof(uint32_t));
    if (!j->members) {
        node_reply_error(c, -ENOMEM, "out of memory");
        return;
    }
    size_t k = 0;
    for (size_t i = 0; i < nr; i++)
        j->members[k++] = reps[i]->id;
    for (size_t i = 0; i < ns; i++)
        j->members[k++] = shards[i]->id;
    for (size_t i = 0; i < nx; i++)
        j->members[k++] = swarm[i]->id;
    for (size_t i = 0; i < gw && i < j->plan->n_workers; i++)
        j->members[k++] = workers[i]->id;
    for (size_t i = 0; i < j->nmembers; i++) {
        member *mb = members_by_id(&co->members, j->members[i]);
        snprintf(mb->job, sizeof(mb->job), "%s", j->id);
        mb->state = APPLIANCE__MEMBER_STATE__MEMBER_BUSY;
    }
    j->state = APPLIANCE__JOB_STATE__JOB_RUNNING;
    snprintf(j->phase, sizeof(j->phase), "loading weights");
    co->running = j;
    j->follower = s->follow ? c : NULL;
    conn_send_msg(c, &out);
    Appliance__JobStart st = APPLIANCE__JOB_START__INIT;
    st.plan = j->plan;
    ENVELOPE(start, job_start, JOB_START, &st);
    job__send_all(co, j, &start);
    log_info("job %s accepted from %s: %s, %zu replica(s), %llu steps, global batch %u", j->id,
             c->peer_addr, j->file, nr, (unsigned long long)j->plan->max_steps,
             j->plan->global_batch);
}

void jobs_handle_status(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    job *j = job__find(co, env->job_status_query->job_id);
    if (!j) {
        node_reply_error(c, -ENOENT, "no job %s", env->job_status_query->job_id);
        return;
    }
    Appliance__JobStatus s;
    job__status(co, j, &s);
    ENVELOPE(out, job_status, JOB_STATUS, &s);
    conn_send_msg(c, &out);
}

/* The running job, if the message is for it and comes from one of its
 * members; NULL (and a log line) otherwise. */
static job *job__of_member(coordinator *co, conn *c, const char *job_id, member **mbp)
{
    member *mb = members_by_conn(&co->members, c);
    job *j = co->running;
    if (!mb || !j || strcmp(j->id, job_id) != 0 || strcmp(mb->job, job_id) != 0) {
        log_warn("message for job %s from %s ignored: not a member of a running job with that id",
                 job_id, c->peer_addr);
        return NULL;
    }
    if (mbp)
        *mbp = mb;
    return j;
}

void jobs_handle_ready(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    job *j = job__of_member(co, c, env->job_ready->job_id, NULL);
    if (!j)
        return;
    if (++j->ready < j->nmembers)
        return;
    snprintf(j->phase, sizeof(j->phase), "training");
    j->t_train = uv_now(n->loop);
    log_info("job %s: every member ready, training starts", j->id);
    Appliance__JobGo go = APPLIANCE__JOB_GO__INIT;
    go.job_id = j->id;
    ENVELOPE(out, job_go, JOB_GO, &go);
    for (size_t i = 0; i < j->plan->n_shards; i++) {
        member *mb = members_by_id(&co->members, j->plan->shards[i]->member_id);
        if (mb && mb->c)
            conn_send_msg(mb->c, &out);
    }
    job__notify(co, j);
}

/* The record of a step in flight. Replicas report a step as they finish it
 * and memoryx commits it once updated; in Pipelined mode the replicas may
 * run ahead of the commits by as many steps as the gradient queues hold, so
 * the window grows (up to JOB_STEP_WINDOW). NULL when out of memory or past
 * the window. */
static job_step *job__slot(job *j, uint64_t step)
{
    if (step < j->steps_done)
        return NULL; /* a step already committed */
    uint64_t span = step - j->steps_done + 1;
    if (span > JOB_STEP_WINDOW)
        return NULL;
    if (span > j->ring_cap) {
        size_t cap = j->ring_cap ? j->ring_cap : 8;
        while (cap < span)
            cap *= 2;
        job_step *r = malloc(cap * sizeof(*r));
        if (!r)
            return NULL;
        for (size_t i = 0; i < cap; i++)
            r[i].step = UINT64_MAX;
        for (size_t i = 0; i < j->ring_cap; i++)
            if (j->ring[i].step != UINT64_MAX)
                r[j->ring[i].step & (cap - 1)] = j->ring[i];
        free(j->ring);
        j->ring = r;
        j->ring_cap = cap;
    }
    job_step *s = &j->ring[step & (j->ring_cap - 1)];
    if (s->step != step) {
        memset(s, 0, sizeof(*s));
        s->step = step;
    }
    return s;
}

/* Done once every shard wrote its final checkpoint and every step's
 * reports are in (they travel on other connections and may come later). */
static void job__maybe_finish(coordinator *co, job *j)
{
    bool evaluated = !plan_eval_at(j->plan, j->plan->max_steps) ||
                     (j->have_eval && j->last_eval_step == j->plan->max_steps);
    if (j->finished >= j->plan->n_shards && j->steps_done >= j->plan->max_steps && evaluated)
        job__end(co, j, APPLIANCE__JOB_STATE__JOB_DONE, "done");
}

static bool job__step_complete(const job *j, const job_step *s)
{
    return s->reports >= j->plan->n_replicas && s->commits >= j->plan->n_shards;
}

static void job__maybe_step_done(coordinator *co, job *j, job_step *s)
{
    /* Steps commit in order: this one and any complete ones after it. */
    if (!j->ring_cap)
        return;
    s = &j->ring[j->steps_done & (j->ring_cap - 1)];
    if (s->step != j->steps_done || !job__step_complete(j, s))
        return;
    j->steps_done = s->step + 1;
    j->last_loss = s->loss_sum / (double)j->plan->global_batch;
    j->samples += j->plan->global_batch;
    s->step = UINT64_MAX;
    bool last = j->steps_done >= j->plan->max_steps;
    if (last)
        snprintf(j->phase, sizeof(j->phase), "checkpointing");
    if (last || j->steps_done % j->log_steps == 0) {
        log_info("job %s: step %llu/%llu loss %.6f", j->id, (unsigned long long)j->steps_done,
                 (unsigned long long)j->plan->max_steps, j->last_loss);
        job__notify(co, j);
    }
    job__maybe_finish(co, j);
    if (j->state == APPLIANCE__JOB_STATE__JOB_RUNNING)
        job__maybe_step_done(co, j, NULL);
}

void jobs_handle_step_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__StepReport *r = env->step_report;
    job *j = job__of_member(co, c, r->job_id, NULL);
    if (!j)
        return;
    job_step *s = job__slot(j, r->step);
    char why[160];
    if (!s) {
        snprintf(why, sizeof(why), "step report for step %llu from replica %u out of order",
                 (unsigned long long)r->step, r->replica);
        job__end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    if (!isfinite(r->loss_sum)) {
        snprintf(why, sizeof(why), "loss of replica %u is not finite at step %llu: training diverged",
                 r->replica, (unsigned long long)r->step);
        job__end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    s->loss_sum += r->loss_sum;
    s->reports++;
    job__maybe_step_done(co, j, s);
}

void jobs_handle_step_committed(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__StepCommitted *r = env->step_committed;
    job *j = job__of_member(co, c, r->job_id, NULL);
    if (!j)
        return;
    job_step *s = job__slot(j, r->step);
    if (!s) {
        char why[160];
        snprintf(why, sizeof(why), "commit of step %llu from shard %u out of order",
                 (unsigned long long)r->step, r->shard);
        job__end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
        return;
    }
    s->commits++;
    job__maybe_step_done(co, j, s);
}

void jobs_handle_eval_report(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__EvalReport *r = env->eval_report;
    job *j = job__of_member(co, c, r->job_id, NULL);
    if (!j)
        return;
    if (r->n_intersection != r->n_union_ || r->n_intersection > 256) {
        job__end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, "malformed evaluation report");
        return;
    }
    if (j->eval_reports == 0 || j->eval_step != r->step) {
        j->eval_step = r->step;
        j->eval_reports = 0;
        j->eval_samples = j->eval_correct = 0;
        j->eval_loss_sum = 0;
        j->eval_classes = 0;
        memset(j->eval_inter, 0, sizeof(j->eval_inter));
        memset(j->eval_union, 0, sizeof(j->eval_union));
    }
    j->eval_samples += r->samples;
    j->eval_correct += r->correct;
    j->eval_loss_sum += r->loss_sum;
    if (r->n_intersection > j->eval_classes)
        j->eval_classes = (uint32_t)r->n_intersection;
    for (size_t i = 0; i < r->n_intersection; i++) {
        j->eval_inter[i] += r->intersection[i];
        j->eval_union[i] += r->union_[i];
    }
    if (++j->eval_reports < j->plan->n_replicas)
        return;
    j->eval_reports = 0;
    j->have_eval = true;
    j->last_eval_step = r->step;
    j->last_eval_loss = j->eval_samples ? j->eval_loss_sum / (double)j->eval_samples : 0;
    j->last_eval_accuracy = -1;
    j->last_eval_iou = -1;
    if (j->eval_classes == 0) {
        j->last_eval_accuracy = j->eval_samples ? (double)j->eval_correct / (double)j->eval_samples : 0;
    } else {
        /* mean IoU over the foreground classes (1..) that occur */
        double sum = 0;
        int k = 0;
        for (uint32_t cls = 1; cls < j->eval_classes; cls++)
            if (j->eval_union[cls] > 0) {
                sum += (double)j->eval_inter[cls] / (double)j->eval_union[cls];
                k++;
            }
        j->last_eval_iou = k ? sum / k : 0;
    }
    log_info("job %s: evaluation at step %llu over %llu samples: loss %.6f%s%.4f", j->id,
             (unsigned long long)r->step, (unsigned long long)j->eval_samples, j->last_eval_loss,
             j->eval_classes ? ", IoU " : ", accuracy ",
             j->eval_classes ? j->last_eval_iou : j->last_eval_accuracy);
    job__notify(co, j);
    job__maybe_finish(co, j);
}

void jobs_handle_finished(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__JobFinished *f = env->job_finished;
    job *j = job__of_member(co, c, f->job_id, NULL);
    if (!j)
        return;
    log_info("job %s: shard %u wrote %s", j->id, f->shard, f->checkpoint);
    j->finished++;
    job__maybe_finish(co, j);
}

void jobs_handle_abort(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    member *mb = NULL;
    job *j = job__of_member(co, c, env->job_abort->job_id, &mb);
    if (!j)
        return;
    char why[900];
    snprintf(why, sizeof(why), "%s %s: %s", node_role_name(mb->role), mb->name,
             env->job_abort->reason ? env->job_abort->reason : "aborted");
    job__end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
}

void jobs_member_lost(coordinator *co, member *mb)
{
    job *j = co->running;
    if (!j || strcmp(mb->job, j->id) != 0)
        return;
    char why[256];
    snprintf(why, sizeof(why), "lost %s %s (member %u)", node_role_name(mb->role), mb->name, mb->id);
    job__end(co, j, APPLIANCE__JOB_STATE__JOB_FAILED, why);
}

void jobs_client_closed(coordinator *co, conn *c)
{
    for (size_t i = 0; i < co->njobs; i++)
        if (co->jobs[i]->follower == c)
            co->jobs[i]->follower = NULL;
}

void jobs_shutdown(coordinator *co)
{
    for (size_t i = 0; i < co->njobs; i++) {
        job *j = co->jobs[i];
        if (j->plan)
            appliance__plan__free_unpacked(j->plan, NULL);
        free(j->plan_bytes);
        free(j->members);
        free(j->ring);
        free(j);
    }
    free(co->jobs);
    co->jobs = NULL;
    co->njobs = co->capjobs = 0;
    co->running = NULL;
}
