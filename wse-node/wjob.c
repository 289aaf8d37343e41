/* wse-node: what every file of a replica calls and that calls none of
 * them: the clock, the job's abort, the hello on a link, JobReady once every
 * link is up, and reading from the link up again. (wjob.h) */
#include "wjob.h"

#include <time.h>

#include "log.h"
#include "msg.h"

double wn__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* Sends JobReady once the link up, every feed and the neighbouring stripes
 * are up (wn_stripes_ready reads the stripes' state: no call). */
void wn__maybe_ready(wn_job *j)
{
    if (j->state != WN_LINKING || !j->up_ready || (j->stripes && !wn_stripes_ready(j->stripes)))
        return;
    for (size_t i = 0; i < j->nfeeds; i++)
        if (!j->feeds[i].ready)
            return;
    j->state = WN_RUNNING;
    Appliance__JobReady r = APPLIANCE__JOB_READY__INIT;
    r.job_id = j->id;
    r.member_id = j->n->member_id;
    ENVELOPE(env, job_ready, JOB_READY, &r);
    node_send_coordinator(j->n, &env);
    if (j->nmicro > 1)
        log_info("job %s: replica %u ready (%u samples per step, in %u micro-batches of %u)", j->id,
                 j->replica, j->batch, j->nmicro, j->mb);
    else
        log_info("job %s: replica %u ready (%u samples per step)", j->id, j->replica, j->batch);
}

/* The hello a replica says on every link it dials (slot: a feed's, 0 on
 * the others). */
void wn__hello_slot(conn *c, const wn_job *j, uint32_t slot)
{
    Appliance__StreamHello h = APPLIANCE__STREAM_HELLO__INIT;
    h.job_id = (char *)j->id;
    h.role = APPLIANCE__ROLE__ROLE_WSE_NODE;
    h.index = j->replica;
    h.member_id = j->n->member_id;
    h.slot = slot;
    ENVELOPE(env, stream_hello, STREAM_HELLO, &h);
    conn_send_msg(c, &env);
}

void wn__hello(conn *c, const wn_job *j)
{
    wn__hello_slot(c, j, 0);
}

/* Reading from the link up goes on (a slot freed, or the compute thread
 * waits for a collective total that comes down the same stream). */
void wn__resume_up(wn_job *j)
{
    conn *up = conn_link_conn(&j->up);
    if (up && j->up_paused && j->state != WN_RELEASED) {
        j->up_paused = false;
        conn_resume(up);
    }
}
