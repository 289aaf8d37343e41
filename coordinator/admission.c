/* Admission limits on job submissions and on clients that stop reading. */
#include "admission.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "job.h"
#include "log.h"

void admission_submitter(const conn *c, char *out, size_t outlen)
{
    if (c->auth_user[0]) {
        snprintf(out, outlen, "%s", c->auth_user);
        return;
    }
    /* peer_addr is "IP:PORT"; the port changes with every connection. */
    const char *colon = strrchr(c->peer_addr, ':');
    int hostlen = colon ? (int)(colon - c->peer_addr) : (int)strlen(c->peer_addr);
    snprintf(out, outlen, "%.*s/%s", hostlen, c->peer_addr, c->peer_name[0] ? c->peer_name : "-");
}

int admission_check(const admission_limits *o, struct job *const *jobs, size_t njobs,
                    const char *submitter, const char *file, size_t toml_len, bool plan_only,
                    char *err, size_t errlen)
{
    if (toml_len > o->max_job_file) {
        snprintf(err, errlen,
                 "%s: the job file has %zu bytes, more than this coordinator accepts "
                 "(max_job_file = %llu bytes)",
                 file, toml_len, (unsigned long long)o->max_job_file);
        return -EFBIG;
    }
    if (plan_only)
        return 0;
    size_t queued = 0, mine = 0;
    for (size_t i = 0; i < njobs; i++) {
        const job *j = jobs[i];
        if (j->state != APPLIANCE__JOB_STATE__JOB_QUEUED)
            continue;
        queued++;
        mine += strcmp(j->submitter, submitter) == 0;
    }
    if (mine >= o->max_queued_per_submitter) {
        snprintf(err, errlen,
                 "%s%s already has %zu jobs queued, the most one submitter may have "
                 "(--max-queued-per-submitter %u); submit again when one has started",
                 strchr(submitter, '/') ? "" : "user ", submitter, mine,
                 o->max_queued_per_submitter);
        return -EBUSY;
    }
    if (queued >= o->max_queued_jobs) {
        snprintf(err, errlen,
                 "the queue is full, %zu jobs are waiting (--max-queued-jobs %u); "
                 "submit again when one has started",
                 queued, o->max_queued_jobs);
        return -EBUSY;
    }
    return 0;
}

unsigned admission_sweep_clients(node *n, const admission_limits *lim)
{
    unsigned dropped = 0;
    for (size_t i = 0; i < n->nconns; i++) {
        conn *c = n->conns[i];
        if (c->closing || c->auth != CONN_READY || c->peer_role != APPLIANCE__ROLE__ROLE_CLIENT ||
            c->queued <= lim->max_client_backlog)
            continue;
        log_warn("client %s (%s) leaves %zu bytes of replies unread, more than "
                 "--max-client-backlog %llu: disconnected",
                 c->peer_addr, c->peer_name, c->queued, (unsigned long long)lim->max_client_backlog);
        dropped++;
        conn_close(c, -ENOBUFS, "the client does not read its replies");
    }
    return dropped;
}
