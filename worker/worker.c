/* worker: batches on credit, produced in the thread pool. */
#include "worker.h"

#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "plan.h"
#include "sample.h"

static worker *wk_of(node *n) { return n->data; }

/* A batch is filled by up to this many threads of the pool at once... */
#define WK_PARTS_MAX 8
/* ...each filling at least this many of its bytes: a smaller share costs
 * more to hand over than it saves. */
#define WK_PART_MIN_BYTES ((size_t)64 << 10)

/* The samples [lo, hi) of a batch, filled by one thread of the pool. */
typedef struct wk_part {
    uv_work_t req;
    struct wk_batch *batch;
    uint32_t lo, hi;
    int rc;                   /* of dataset_batch_part, with err */
    char err[512];
} wk_part;

/* One batch: produced in the thread pool, its samples in parts over the
 * free threads (on a host the worker shares with a wse-node, one thread
 * filling a whole batch would delay one of the wse-node's threads only,
 * and the others would wait for it), then queued on its feed and sent in
 * chunks as the connection has room. */
typedef struct wk_batch {
    wk_part part[WK_PARTS_MAX];
    uint32_t parts_left;      /* its parts still in the thread pool */
    struct wk_batch *next;    /* in its feed's send queue */
    unsigned refs;            /* the producer or the queue, and each chunk being written */
    size_t sent;              /* bytes handed to the connection */
    wk_feed *feed;
    uint64_t step;
    uint64_t global;          /* the global batch */
    uint32_t eval_batch;      /* 0: training; k > 0: eval batch k-1 of the eval at step */
    uint64_t first;           /* eval: the first sample of the eval set */
    uint64_t sample_elems;    /* inputs per sample as sent: a stripe's with spatial partitions */
    uint32_t label_elems;     /* labels per sample as sent */
    uint32_t n;               /* samples */
    uint64_t queued_at;       /* uv_now when it was queued */
    uint8_t *buf;             /* the batch's bytes (sample.h) */
    size_t bytes;
    int rc;                   /* the first failing part's, with err */
    char err[512];
} wk_batch;

static void wk__batch_unref(wk_batch *b)
{
    if (--b->refs == 0) {
        free(b->buf);
        free(b);
    }
}

/* Drops the batches a feed has not sent (its wse-node went away). */
static void wk__drop_queue(wk_feed *f)
{
    while (f->queue) {
        wk_batch *b = f->queue;
        f->queue = b->next;
        wk__batch_unref(b);
    }
    f->queue_tail = NULL;
}

static void wk__job_free(wk_job *j)
{
    if (!j)
        return;
    for (size_t i = 0; i < j->nfeeds; i++)
        wk__drop_queue(&j->feeds[i]);
    dataset_close(j->data);
    dataset_close(j->eval_data);
    free(j->feeds);
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    free(j);
}

/* Ends the job on this worker (jobhost_ops.release): no more batches; the
 * memory goes once the thread pool has given back every request of the
 * job. */
static void wk__release(jobhost *h, void *job, jobhost_end end, const char *why)
{
    worker *w = wk_of(h->n);
    wk_job *j = job;
    if (end == JOBHOST_RELEASED)
        log_info("job %s: released after %llu batches", j->id, (unsigned long long)j->batches_sent);
    else if (end == JOBHOST_COORDINATOR_LOST)
        log_warn("job %s: released after %llu batches: lost the coordinator", j->id,
                 (unsigned long long)j->batches_sent);
    w->job = NULL;
    j->state = WK_RELEASED;
    for (size_t i = 0; i < j->nfeeds; i++) {
        if (j->feeds[i].c) {
            j->feeds[i].c->user = NULL;
            j->feeds[i].c = NULL;
        }
        wk__drop_queue(&j->feeds[i]);
    }
    if (j->inflight == 0)
        wk__job_free(j);
}

static void wk__chunk_sent(void *arg, int status)
{
    wk__batch_unref(arg);
}

/* Sends the feed's queued batches, each in frames of at most a chunk, in
 * order, while the connection has room; its on_drain calls again. */
static void wk__send(worker *w, wk_feed *f)
{
    wk_job *j = f->job;
    const size_t chunk = j->plan->chunk_elems * sizeof(float);
    while (f->c && f->queue) {
        wk_batch *b = f->queue;
        do {
            size_t len = b->bytes - b->sent < chunk ? b->bytes - b->sent : chunk;
            if (!conn_can_send(f->c, len))
                return;
            Appliance__Batch m = APPLIANCE__BATCH__INIT;
            m.step = b->step;
            m.replica = f->replica;
            m.n = b->n;
            m.eval_batch = b->eval_batch;
            const dataset *d = b->eval_batch ? j->eval_data : j->data;
            m.sample_elems = b->sample_elems ? b->sample_elems : dataset_sample_elems(d);
            m.label_elems = b->sample_elems ? b->label_elems : dataset_label_elems(d);
            m.offset = b->sent;
            m.total = b->bytes;
            ENVELOPE(env, batch, BATCH, &m);
            if (conn_send(f->c, &env, b->buf + b->sent, (uint32_t)len, wk__chunk_sent, b) < 0) {
                conn_fail(f->c, -ENOBUFS, "worker: cannot queue the batch of step %llu",
                          (unsigned long long)b->step);
                return; /* the connection's close drops the queue */
            }
            b->refs++;
            b->sent += len;
        } while (b->sent < b->bytes);
        f->queue = b->next;
        if (!f->queue)
            f->queue_tail = NULL;
        j->batches_sent++;
        w->batches++;
        metrics_hist_observe(&w->batch_hist, (double)(uv_now(w->n->loop) - b->queued_at) / 1000.0);
        wk__batch_unref(b);
    }
}

static void wk__pump_all(worker *w, wk_job *j);

/* Spatial partitions: the stripe's rows (a slab's planes) of every sample
 * of the batch at buf (batch_stripe); 0 when the samples are not images or
 * volumes with a label per pixel (voxel), or the rows are not theirs. */
static size_t wk__stripe(uint8_t *buf, uint32_t n, const dataset *d, const Appliance__PlanInput *in,
                         uint64_t r0, uint64_t h)
{
    if (in->n_sample_shape != 3 && in->n_sample_shape != 4)
        return 0;
    /* a volume's slab: planes of its depth, each H x W, as an image's rows */
    uint64_t c = in->sample_shape[0], H = in->sample_shape[1], W = in->sample_shape[2];
    if (in->n_sample_shape == 4)
        W *= in->sample_shape[3];
    if (dataset_sample_elems(d) != c * H * W || dataset_label_elems(d) != H * W)
        return 0;
    batch_layout l = {.n = n, .c = c, .h = H, .w = W,
                      .input_size = sample_input_size(in->input_unorm8),
                      .label_size = sample_label_size(in->labels_uint8)};
    return batch_stripe(buf, &l, r0, h);
}

static void wk__part_work(uv_work_t *req)
{
    wk_part *pt = container_of(req, wk_part, req);
    wk_batch *b = pt->batch;
    const wk_feed *f = b->feed;
    const Appliance__Plan *p = f->job->plan;
    const dataset *d = b->eval_batch ? f->job->eval_data : f->job->data;
    if (b->eval_batch)
        pt->rc = dataset_range_part(d, b->first, b->n, pt->lo, pt->hi, b->buf, pt->err,
                                    sizeof(pt->err));
    else
        pt->rc = dataset_batch_part(d, b->step, b->global, f->offset, f->batch, pt->lo, pt->hi,
                                    b->buf, pt->err, sizeof(pt->err));
    uint32_t parts = msgcheck_parts(p);
    if (pt->rc < 0 || parts < 2) /* a striped batch is one part: the whole of it is here */
        return;
    const Appliance__PlanInput *in = b->eval_batch ? p->eval_input : p->train_input;
    const Appliance__PlanReplica *r = p->replicas[f->replica];
    size_t bytes = wk__stripe(b->buf, b->n, d, in, r->stripe_row0, r->stripe_rows);
    if (!bytes && b->n) {
        pt->rc = -EINVAL;
        snprintf(pt->err, sizeof(pt->err), "spatial partitions need images with a label per pixel; "
                 "%s gives %llu inputs and %llu labels per sample", in->data_processor,
                 (unsigned long long)dataset_sample_elems(d),
                 (unsigned long long)dataset_label_elems(d));
        return;
    }
    uint64_t H = in->sample_shape[1];
    b->bytes = bytes;
    b->sample_elems = dataset_sample_elems(d) / H * r->stripe_rows;
    b->label_elems = (uint32_t)(dataset_label_elems(d) / H * r->stripe_rows);
}

static void wk__batch_done(wk_batch *b);

/* A part is back on the loop: the batch is done with its last. */
static void wk__part_done(uv_work_t *req, int status)
{
    wk_part *pt = container_of(req, wk_part, req);
    wk_batch *b = pt->batch;
    if (status < 0 && pt->rc >= 0) {
        pt->rc = status;
        snprintf(pt->err, sizeof(pt->err), "%s", uv_strerror(status));
    }
    if (pt->rc < 0 && b->rc >= 0) {
        b->rc = pt->rc;
        memcpy(b->err, pt->err, sizeof(b->err));
    }
    if (--b->parts_left > 0) {
        b->feed->job->inflight--; /* not the last: the job waits for that */
        return;
    }
    wk__batch_done(b);
}

/* Queues b's production: in parts over the pool's free threads when
 * may_split (a striped batch is cut after it is whole: one part), at least
 * WK_PART_MIN_BYTES each. Returns 0 or uv_queue_work's error when no part
 * could be queued; if only some were, the batch fails when they are back. */
static int wk__batch_queue(worker *w, wk_job *j, wk_batch *b, bool may_split)
{
    uint32_t parts = 1;
    if (may_split) {
        parts = w->max_inflight > j->inflight ? w->max_inflight - j->inflight : 1;
        size_t most = b->bytes / WK_PART_MIN_BYTES;
        if (parts > most)
            parts = most ? (uint32_t)most : 1;
        if (parts > WK_PARTS_MAX)
            parts = WK_PARTS_MAX;
        if (parts > b->n)
            parts = b->n ? b->n : 1;
    }
    b->parts_left = parts;
    if (parts > j->most_parts) {
        j->most_parts = parts;
        if (parts > 1)
            log_info("job %s: batches of %u samples (%zu bytes) filled in %u parts", j->id, b->n,
                     b->bytes, parts);
    }
    for (uint32_t i = 0; i < parts; i++) {
        wk_part *pt = &b->part[i];
        pt->batch = b;
        pt->lo = (uint32_t)((uint64_t)b->n * i / parts);
        pt->hi = (uint32_t)((uint64_t)b->n * (i + 1) / parts);
        int rc = uv_queue_work(w->n->loop, &pt->req, wk__part_work, wk__part_done);
        if (rc < 0) {
            if (i == 0)
                return rc;
            b->parts_left = i;
            b->rc = rc;
            snprintf(b->err, sizeof(b->err), "cannot queue part %u of %u: %s", i + 1, parts,
                     uv_strerror(rc));
            return 0;
        }
        j->inflight++;
    }
    return 0;
}

/* Every part of b is back (its last still counted in j->inflight). */
static void wk__batch_done(wk_batch *b)
{
    wk_feed *f = b->feed;
    wk_job *j = f->job;
    worker *w = j->w;
    j->inflight--;
    if (j->state == WK_RELEASED) {
        wk__batch_unref(b);
        if (j->inflight == 0)
            wk__job_free(j);
        return;
    }
    if (b->rc < 0) {
        /* releases the job: the batches still in production are dropped */
        jobhost_fail(&w->jobs, "step %llu: %s", (unsigned long long)b->step, b->err);
        wk__batch_unref(b);
        return;
    }
    if (f->c) { /* else the wse-node went away; it aborts the job itself */
        if (f->queue_tail)
            f->queue_tail->next = b;
        else
            f->queue = b;
        f->queue_tail = b;
        wk__send(w, f);
    } else {
        wk__batch_unref(b);
    }
    wk__pump_all(w, j); /* a slot of the thread pool is free */
}

/* Starts producing f's next batches while it has credits, its connection
 * has room, and the thread pool has a free slot. Returns false when out of
 * slots. */
static bool wk__pump(worker *w, wk_feed *f)
{
    wk_job *j = f->job;
    if (!f->c || j->state != WK_FEEDING)
        return true;
    size_t bytes = dataset_batch_bytes(j->data, f->batch);
    while (f->credits > 0 && f->next_step < j->plan->max_steps) {
        if (j->inflight >= w->max_inflight)
            return false;
        wk_batch *b = calloc(1, sizeof(*b));
        uint8_t *buf = malloc(bytes);
        if (!b || !buf) {
            free(b);
            free(buf);
            log_error("job %s: out of memory for a batch of %zu bytes", j->id, bytes);
            return true;
        }
        b->refs = 1;
        b->feed = f;
        b->step = f->next_step;
        b->global = j->plan->global_batch;
        b->n = f->batch;
        b->buf = buf;
        b->bytes = bytes;
        b->queued_at = uv_now(w->n->loop);
        if (wk__batch_queue(w, j, b, msgcheck_parts(j->plan) < 2) < 0) {
            free(buf);
            free(b);
            return true;
        }
        f->credits--;
        f->next_step += f->slots;
    }
    return true;
}

/* Every feed in turn, starting after the one served first last time. */
static void wk__pump_all(worker *w, wk_job *j)
{
    for (size_t k = 0; k < j->nfeeds; k++) {
        size_t i = (j->next_feed + k) % j->nfeeds;
        if (!wk__pump(w, &j->feeds[i])) {
            j->next_feed = (i + 1) % j->nfeeds;
            return;
        }
    }
}

static void wk__open_work(uv_work_t *req)
{
    wk_job *j = container_of(req, wk_job, open_req);
    j->open_rc = dataset_open(&j->data, j->plan->train_input, j->open_err, sizeof(j->open_err));
    if (j->open_rc == 0 && j->plan->eval_input)
        j->open_rc = dataset_open(&j->eval_data, j->plan->eval_input, j->open_err, sizeof(j->open_err));
}

static void wk__open_done(uv_work_t *req, int status)
{
    wk_job *j = container_of(req, wk_job, open_req);
    worker *w = j->w;
    node *n = w->n;
    j->inflight--;
    if (j->state == WK_RELEASED) {
        if (j->inflight == 0)
            wk__job_free(j);
        return;
    }
    if (status < 0) {
        j->open_rc = status;
        snprintf(j->open_err, sizeof(j->open_err), "%s", uv_strerror(status));
    }
    if (j->open_rc < 0) {
        jobhost_fail(&w->jobs, "%s", j->open_err);
        return;
    }
    j->state = WK_FEEDING;
    log_info("job %s: feeding %zu replica(s), %llu %s inputs and %u %s labels per sample, %llu "
             "samples per epoch", j->id, j->nfeeds, (unsigned long long)dataset_sample_elems(j->data),
             dataset_input_unorm8(j->data) ? "8-bit" : "float32", dataset_label_elems(j->data),
             dataset_labels_u8(j->data) ? "8-bit" : "int32", (unsigned long long)dataset_size(j->data));
    /* Ready: the wse-nodes dial us; hellos that came early are replayed. */
    Appliance__JobReady r = APPLIANCE__JOB_READY__INIT;
    r.job_id = j->id;
    r.member_id = n->member_id;
    ENVELOPE(re, job_ready, JOB_READY, &r);
    node_send_coordinator(n, &re);
    node_replay(n);
}

/* Starts a job (jobhost_ops.start): the feeds of our replicas, and the data
 * set opened in the thread pool; JobReady once it is open. */
static void *wk__start(jobhost *h, Appliance__Plan *p, char *why, size_t whylen)
{
    node *n = h->n;
    worker *w = wk_of(n);
    wk_job *j = calloc(1, sizeof(*j));
    if (!j || !(j->feeds = calloc(p->n_workers ? p->n_workers : 1, sizeof(*j->feeds)))) {
        free(j);
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    snprintf(j->id, sizeof(j->id), "%s", p->job_id);
    j->w = w;
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
    j->plan = p; /* read by the opening thread */
    if (uv_queue_work(n->loop, &j->open_req, wk__open_work, wk__open_done) < 0) {
        j->plan = NULL; /* the jobhost frees it */
        wk__job_free(j);
        snprintf(why, whylen, "cannot start opening the data set");
        return NULL;
    }
    j->inflight++;
    w->job = j;
    return j;
}

static void wk__stream_hello(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    wk_job *j = wk_of(n)->job;
    Appliance__StreamHello *h = env->stream_hello;
    if (!j || strcmp(h->job_id, j->id) != 0 || j->state != WK_FEEDING) {
        if (node_defer(n, c, env) < 0)
            conn_fail(c, -ENOENT, "no job %s on this worker", h->job_id);
        return;
    }
    char why[256];
    if (msgcheck_stream_hello(h, APPLIANCE__ROLE__ROLE_WSE_NODE, j->plan, why, sizeof(why)) < 0) {
        conn_fail(c, -EINVAL, "%s", why);
        return;
    }
    /* the feed of that replica and slot: the wse-node's links to one
     * worker may arrive in any order */
    for (size_t i = 0; i < j->nfeeds; i++)
        if (j->feeds[i].replica == h->index && j->feeds[i].slot == h->slot && !j->feeds[i].c) {
            j->feeds[i].c = c;
            c->user = &j->feeds[i];
            return;
        }
    conn_fail(c, -ENOENT, "this worker does not feed replica %u in slot %u (or it has that link)",
              h->index, h->slot);
}

/* An eval batch the replica asks for: its share of the eval set is the
 * samples [group * eval_shard, (group + 1) * eval_shard) of its sample group
 * (its replica, or its K stripes with spatial partitions), eval_batch at
 * a time. */
static void wk__eval_request(worker *w, wk_feed *f, conn *c, const Appliance__Credit *cr)
{
    wk_job *j = f->job;
    const Appliance__Plan *p = j->plan;
    uint32_t k = cr->eval_batch - 1;
    if (!j->eval_data || k >= p->eval_batches) {
        conn_fail(c, -EINVAL, "no eval batch %u in this job", cr->eval_batch);
        return;
    }
    uint64_t group = f->replica / msgcheck_parts(p); /* the stripes of a group share its shard */
    uint64_t lo = group * p->eval_shard + (uint64_t)k * p->eval_batch;
    uint64_t hi = (group + 1) * p->eval_shard;
    if (hi > p->eval_samples)
        hi = p->eval_samples;
    if (lo + p->eval_batch < hi)
        hi = lo + p->eval_batch;
    uint32_t count = lo < hi ? (uint32_t)(hi - lo) : 0;
    size_t bytes = dataset_batch_bytes(j->eval_data, count);
    wk_batch *b = calloc(1, sizeof(*b));
    uint8_t *buf = malloc(bytes ? bytes : 1);
    if (!b || !buf) {
        free(buf);
        free(b);
        jobhost_fail(&w->jobs, "out of memory for an eval batch");
        return;
    }
    b->refs = 1;
    b->n = count;
    b->bytes = bytes;
    b->buf = buf;
    b->feed = f;
    b->step = cr->eval_step;
    b->eval_batch = cr->eval_batch;
    b->first = lo;
    b->queued_at = uv_now(w->n->loop);
    if (wk__batch_queue(w, j, b, msgcheck_parts(p) < 2) < 0) {
        free(b->buf);
        free(b);
        jobhost_fail(&w->jobs, "cannot queue an eval batch");
        return;
    }
}

static void wk__credit(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    wk_feed *f = c->user;
    if (!f) {
        conn_fail(c, -EPROTO, "credit before stream hello");
        return;
    }
    char why[256];
    if (msgcheck_credit(env->credit, f->job->plan, why, sizeof(why)) < 0) {
        conn_fail(c, -EINVAL, "%s", why);
        return;
    }
    if (env->credit->eval_batch > 0) {
        wk__eval_request(wk_of(n), f, c, env->credit);
        return;
    }
    if (f->credits + env->credit->n > MSGCHECK_MAX_CREDITS) {
        conn_fail(c, -EINVAL, "credit beyond the limit of %d batches", MSGCHECK_MAX_CREDITS);
        return;
    }
    f->credits += env->credit->n;
    wk__pump_all(wk_of(n), f->job);
}

static void wk__drain(node *n, conn *c)
{
    wk_feed *f = c->user;
    if (f) {
        wk__send(wk_of(n), f);
        wk__pump_all(wk_of(n), f->job);
    }
}

/* A wse-node's feed link closed while the job runs: a fault (the job may be
 * recovered without it); after the job it is the wse-node letting go. */
static void wk__conn_close(node *n, conn *c, int err, const char *reason)
{
    worker *w = wk_of(n);
    wk_feed *f = c->user;
    if (!f || f->c != c)
        return;
    f->c = NULL;
    c->user = NULL;
    wk__drop_queue(f);
    if (w->job == f->job)
        jobhost_peer_lost(&w->jobs, "lost wse-node %s (replica %u): %s", c->peer_name[0] ? c->peer_name
                      : c->peer_addr, f->replica, reason);
}

static void wk__coordinator_lost(node *n)
{
    jobhost_end_job(&wk_of(n)->jobs, JOBHOST_COORDINATOR_LOST, "lost the coordinator");
}

static void wk__shutdown(node *n)
{
    jobhost_end_job(&wk_of(n)->jobs, JOBHOST_SHUTDOWN, "shutdown");
}

static void wk__metrics(node *n, metrics_buf *b)
{
    worker *w = wk_of(n);
    metrics_printf(b, "# HELP appliance_batches_total Batches sent to wse-nodes.\n"
                      "# TYPE appliance_batches_total counter\nappliance_batches_total %llu\n"
                      "# HELP appliance_batches_in_production Batches being read and decoded.\n"
                      "# TYPE appliance_batches_in_production gauge\nappliance_batches_in_production %u\n",
                   (unsigned long long)w->batches, w->job ? w->job->inflight : 0);
    metrics_hist_render(&w->batch_hist, b, NULL);
}

static const options_key wk__keys[] = {
    {"threads", "N", OPTIONS_U32, offsetof(worker_options, threads), 0, 1, 10000000,
     "threads producing batches, each batch in parts over the free ones (default 1)"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static const jobhost_ops wk__jobhost_ops = {wk__start, wk__release};

void worker_role(node_role *role, worker *w, node *n)
{
    memset(role, 0, sizeof(*role));
    role->role = APPLIANCE__ROLE__ROLE_WORKER;
    role->component = "worker";
    memset(w, 0, sizeof(*w));
    w->n = n;
    w->opt.threads = 1;
    role->options = (options_table){NULL, wk__keys, &w->opt};
    jobhost_init(&w->jobs, n, role, &wk__jobhost_ops);
    role->handlers[APPLIANCE__ENVELOPE__MSG_STREAM_HELLO] = wk__stream_hello;
    role->handlers[APPLIANCE__ENVELOPE__MSG_CREDIT] = wk__credit;
    role->on_drain = wk__drain;
    role->on_conn_close = wk__conn_close;
    role->on_shutdown = wk__shutdown;
    role->on_coordinator_lost = wk__coordinator_lost;
    role->metrics = wk__metrics;
}
