/* worker: batches on credit. */
#include "worker.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"

static worker *wk_of(node *n) { return n->data; }

static void wk__job_free(wk_job *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->nfeeds; i++)
        if (j->feeds[i].c)
            j->feeds[i].c->user = NULL;
    free(j->feeds);
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    free(j);
}

static void wk__batch_sent(void *arg, int status)
{
    free(arg);
}

static void wk__pump(node *n, wk_feed *f)
{
    wk_job *j = f->job;
    const dataset *d = &j->data;
    uint32_t global = j->plan->global_batch;
    while (f->credits > 0 && f->next_step < j->plan->max_steps && conn_can_send(f->c, 0)) {
        uint64_t s = f->next_step;
        size_t xbytes = (size_t)f->batch * d->sample_elems * sizeof(float);
        size_t bytes = xbytes + (size_t)f->batch * sizeof(int32_t);
        uint8_t *buf = malloc(bytes);
        if (!buf) {
            log_error("job %s: out of memory for a batch of %zu bytes", j->id, bytes);
            return;
        }
        float *x = (float *)buf;
        int32_t *y = (int32_t *)(buf + xbytes);
        for (uint32_t i = 0; i < f->batch; i++) {
            uint64_t idx = dataset_index(d, s, global, f->offset + i);
            dataset_sample(d, idx, x + (size_t)i * d->sample_elems, &y[i]);
        }
        Appliance__Batch b = APPLIANCE__BATCH__INIT;
        b.step = s;
        b.replica = f->replica;
        b.n = f->batch;
        b.sample_elems = d->sample_elems;
        b.label_elems = 1;
        ENVELOPE(env, batch, BATCH, &b);
        if (conn_send(f->c, &env, buf, (uint32_t)bytes, wk__batch_sent, buf) < 0) {
            free(buf);
            return;
        }
        f->credits--;
        f->next_step += f->slots;
        j->batches_sent++;
    }
}

static void wk__job_start(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    worker *w = wk_of(n);
    Appliance__Plan *in = env->job_start->plan;
    if (w->job) {
        log_warn("job %s refused: busy with job %s", in->job_id, w->job->id);
        return;
    }
    char err[512];
    wk_job *j = calloc(1, sizeof(*j));
    if (!j)
        return;
    snprintf(j->id, sizeof(j->id), "%s", in->job_id);
    size_t plen = appliance__plan__get_packed_size(in);
    uint8_t *buf = malloc(plen ? plen : 1);
    appliance__plan__pack(in, buf);
    j->plan = appliance__plan__unpack(NULL, plen, buf);
    free(buf);
    Appliance__Plan *p = j->plan;
    if (dataset_open(&j->data, p->train_input, err, sizeof(err)) < 0) {
        log_error("job %s: %s", j->id, err);
        Appliance__JobAbort a = APPLIANCE__JOB_ABORT__INIT;
        a.job_id = j->id;
        a.reason = err;
        ENVELOPE(ae, job_abort, JOB_ABORT, &a);
        node_send_coordinator(n, &ae);
        wk__job_free(j);
        return;
    }
    j->feeds = calloc(p->n_workers ? p->n_workers : 1, sizeof(*j->feeds));
    for (size_t i = 0; i < p->n_workers; i++) {
        const Appliance__PlanWorker *pw = p->workers[i];
        if (pw->member_id != n->member_id || pw->replica >= p->n_replicas)
            continue;
        wk_feed *f = &j->feeds[j->nfeeds++];
        const Appliance__PlanReplica *r = p->replicas[pw->replica];
        f->replica = pw->replica;
        f->batch = r->batch;
        f->offset = r->batch_offset;
        f->slot = pw->slot;
        f->slots = pw->slots ? pw->slots : 1;
        f->next_step = p->first_step + (pw->slot + f->slots - p->first_step % f->slots) % f->slots;
        f->job = j;
    }
    w->job = j;
    log_info("job %s: feeding %zu replica(s), %llu floats per sample", j->id, j->nfeeds,
             (unsigned long long)j->data.sample_elems);
    /* Ready at once: the wse-nodes dial us. */
    Appliance__JobReady r = APPLIANCE__JOB_READY__INIT;
    r.job_id = j->id;
    r.member_id = n->member_id;
    ENVELOPE(re, job_ready, JOB_READY, &r);
    node_send_coordinator(n, &re);
    node_replay(n);
}

static void wk__stream_hello(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    wk_job *j = wk_of(n)->job;
    Appliance__StreamHello *h = env->stream_hello;
    if (!j || strcmp(h->job_id, j->id) != 0) {
        if (node_defer(n, c, env) < 0)
            conn_fail(c, -ENOENT, "no job %s on this worker", h->job_id);
        return;
    }
    for (size_t i = 0; i < j->nfeeds; i++)
        if (j->feeds[i].replica == h->index && !j->feeds[i].c) {
            j->feeds[i].c = c;
            c->user = &j->feeds[i];
            return;
        }
    conn_fail(c, -ENOENT, "this worker does not feed replica %u", h->index);
}

static void wk__credit(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    wk_feed *f = c->user;
    if (!f) {
        conn_fail(c, -EPROTO, "credit before stream hello");
        return;
    }
    if (env->credit->n > 64 || f->credits + env->credit->n > 64) {
        conn_fail(c, -EINVAL, "credit beyond the limit of 64 batches");
        return;
    }
    f->credits += env->credit->n;
    wk__pump(n, f);
}

static void wk__drain(node *n, conn *c)
{
    if (c->user)
        wk__pump(n, c->user);
}

static void wk__job_end(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    worker *w = wk_of(n);
    const char *id = env->msg_case == APPLIANCE__ENVELOPE__MSG_JOB_END ? env->job_end->job_id
                                                                      : env->job_abort->job_id;
    if (w->job && strcmp(w->job->id, id) == 0) {
        log_info("job %s: released after %llu batches", id, (unsigned long long)w->job->batches_sent);
        wk__job_free(w->job);
        w->job = NULL;
    }
}

static void wk__conn_close(node *n, conn *c, int err, const char *reason)
{
    wk_feed *f = c->user;
    if (f && f->c == c)
        f->c = NULL;
}

static void wk__shutdown(node *n)
{
    worker *w = wk_of(n);
    wk__job_free(w->job);
    w->job = NULL;
}

void worker_role(node_role *role)
{
    memset(role, 0, sizeof(*role));
    role->role = APPLIANCE__ROLE__ROLE_WORKER;
    role->component = "worker";
    role->usage_extra = "  --threads N              decoding threads (default 1)\n";
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_START] = wk__job_start;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_END] = wk__job_end;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_ABORT] = wk__job_end;
    role->handlers[APPLIANCE__ENVELOPE__MSG_STREAM_HELLO] = wk__stream_hello;
    role->handlers[APPLIANCE__ENVELOPE__MSG_CREDIT] = wk__credit;
    role->on_drain = wk__drain;
    role->on_conn_close = wk__conn_close;
    role->on_shutdown = wk__shutdown;
}
