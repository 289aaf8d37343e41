/* The daemon side of a job's life: start, the end messages, failures and
 * faults, the coordinator lost, shutdown; the roles fill in start and
 * release. */
#include "jobhost.h"

#include <stdio.h>
#include <string.h>

#include "log.h"

void jobhost_init(jobhost *h, node *n, node_role *role, const jobhost_ops *ops)
{
    memset(h, 0, sizeof(*h));
    h->n = n;
    h->ops = ops;
    n->jobs = h;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_START] = jobhost_handle_start;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_END] = jobhost_handle_end;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_ABORT] = jobhost_handle_end;
}

jobhost *jobhost_of(node *n)
{
    return n->jobs;
}

const char *jobhost_end_name(jobhost_end end)
{
    switch (end) {
    case JOBHOST_RELEASED: return "released";
    case JOBHOST_FAILED: return "failed";
    case JOBHOST_FAULT: return "fault";
    case JOBHOST_COORDINATOR_LOST: return "lost the coordinator";
    case JOBHOST_SHUTDOWN: return "shutdown";
    }
    return "?";
}

/* Releases the role's job and forgets the job. */
static void jobhost__release(jobhost *h, jobhost_end end, const char *why)
{
    void *job = h->job;
    if (h->grace_armed) { /* a lost peer that was part of the end */
        uv_timer_stop(&h->grace);
        h->grace_armed = false;
        if (end == JOBHOST_RELEASED)
            log_info("job %s: %s, as the job ended", h->id, h->lost);
    }
    /* cleared first: a release that ends in another report finds no job */
    h->job = NULL;
    h->plan = NULL;
    if (job)
        h->ops->release(h, job, end, why);
    h->id[0] = '\0';
}

void jobhost_handle_start(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    jobhost *h = jobhost_of(n);
    Appliance__Plan *p = node_job_start_plan(c, env, h->job ? h->id : NULL);
    if (!p)
        return;
    snprintf(h->id, sizeof(h->id), "%s", p->job_id);
    h->plan = p;
    char why[512] = "";
    void *job = h->ops->start(h, p, why, sizeof(why));
    if (job) {
        h->job = job;
        return;
    }
    appliance__plan__free_unpacked(p, NULL);
    h->plan = NULL;
    char msg[512];
    node_job_failed(n, h->id, msg, sizeof(msg), "%s", why[0] ? why : "the job could not start here");
    h->id[0] = '\0';
}

void jobhost_handle_end(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    jobhost *h = jobhost_of(n);
    const char *id = env->msg_case == APPLIANCE__ENVELOPE__MSG_JOB_END ? env->job_end->job_id
                                                                      : env->job_abort->job_id;
    if (h->job && strcmp(h->id, id) == 0)
        jobhost__release(h, JOBHOST_RELEASED, "released");
}

void jobhost_end_job(jobhost *h, jobhost_end end, const char *why)
{
    if (h->job)
        jobhost__release(h, end, why);
}

void jobhost_abort_job(jobhost *h, const void *job, bool fault, const char *fmt, ...)
{
    if (!job || h->job != job)
        return;
    va_list ap;
    va_start(ap, fmt);
    jobhost_vabort(h, fault, fmt, ap);
    va_end(ap);
}

void jobhost_vabort(jobhost *h, bool fault, const char *fmt, va_list ap)
{
    if (!h->job)
        return;
    char why[512];
    node_job_vabort(h->n, h->id, fault, why, sizeof(why), fmt, ap);
    jobhost__release(h, fault ? JOBHOST_FAULT : JOBHOST_FAILED, why);
}

void jobhost_fail(jobhost *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jobhost_vabort(h, false, fmt, ap);
    va_end(ap);
}

static void jobhost__grace_over(uv_timer_t *t)
{
    jobhost *h = t->data;
    if (!h->grace_armed)
        return;
    h->grace_armed = false;
    jobhost_fault(h, "%s", h->lost);
}

void jobhost_peer_lost(jobhost *h, const char *fmt, ...)
{
    if (!h->job || h->grace_armed)
        return;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(h->lost, sizeof(h->lost), fmt, ap);
    va_end(ap);
    if (!h->grace_init) {
        if (uv_timer_init(h->n->loop, &h->grace) < 0) {
            jobhost_fault(h, "%s", h->lost);
            return;
        }
        h->grace.data = h;
        uv_unref((uv_handle_t *)&h->grace);
        h->grace_init = true;
    }
    h->grace_armed = true;
    uv_timer_start(&h->grace, jobhost__grace_over, JOBHOST_PEER_GRACE_MS, 0);
}

void jobhost_fault(jobhost *h, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    jobhost_vabort(h, true, fmt, ap);
    va_end(ap);
}
