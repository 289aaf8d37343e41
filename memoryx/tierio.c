/* memoryx's disk tier on the event loop: reads ahead, gradient writes
 * (tierio.h). */
#include "tierio.h"

#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "fsutil.h"
#include "msgcheck.h"
#include "mxjob.h"
#include "update.h"

/* A gradient chunk being written to the gradients file. */
typedef struct mx_gwrite {
    uv_work_t req;
    mx_job *job;
    mx_tensor *t;
    uint64_t offset, count;
    void *data;                   /* count floats */
    void *owned;                  /* freed when written */
    int rc;
} mx_gwrite;

void tierio_sent(void *arg, int status)
{
    mx_rbuf *b = arg;
    mx_tier *tr = b->tier;
    tr->ra_bytes -= b->bytes;
    if (tr->job) {
        if (status == 0)
            metrics_hist_observe(&b->t->mx->chunk_hist,
                                 (double)(uv_now(b->t->loop) - b->sent_at) / 1000.0);
        tierio_read_more(tr->job);
    }
    free(b);
    tier_put(tr);
}

mx_rbuf *tierio_ready(mx_job *j, uint64_t seq)
{
    mx_rbuf *b = j->tier->ready;
    if (b && b->ch.seq == seq)
        return b;
    tierio_read_more(j);
    return NULL;
}

void tierio_sending(mx_tier *tr, mx_rbuf *b, uint64_t now)
{
    tr->ready = b->next;
    if (!tr->ready)
        tr->ready_tail = &tr->ready;
    tr->refs++;
    b->sent_at = now;
}

/* In the thread pool: the next chunk of the stream read into its buffer. */
static void tierio__read_work(uv_work_t *req)
{
    mx_tier *tr = container_of(req, mx_tier, ra_req);
    mx_rbuf *b = tr->ra_buf;
    const mx_tensor *t = b->t;
    uint64_t start = uv_hrtime();
    tr->ra_rc = 0;
    if (!tr->files) { /* in memory: rounded into the buffer */
        const float *src = b->ch.state == 0 ? t->w
                                            : optim_state_tensor((optim_state *)&t->st,
                                                                 b->ch.state - 1, NULL, NULL);
        bf16_pack((uint16_t *)b->data, src + b->ch.offset, b->ch.count);
        b->read_ns = uv_hrtime() - start;
        return;
    }
    uint64_t at = (b->ch.state == 0 ? t->w_at : t->s_at[b->ch.state - 1]) +
                  b->ch.offset * sizeof(float);
    int fd = tr->fd[b->ch.state == 0 ? TIER_WEIGHTS : TIER_OPTIMIZER];
    tr->ra_rc = fsutil_pread_all(fd, b->data, b->bytes, at);
    b->read_ns = uv_hrtime() - start;
    if (tr->ra_rc == 0 && tr->job->plan->wire_bf16) /* rounded for the wire, here off the loop */
        bf16_pack_in_place(b->data, b->ch.count);
}

static void tierio__read_done(uv_work_t *req, int status)
{
    mx_tier *tr = container_of(req, mx_tier, ra_req);
    mx_job *j = tr->job;
    mx_rbuf *b = tr->ra_buf;
    tr->ra_buf = NULL;
    tr->reading = false;
    if (mxjob_pool_back(j)) {
        free(b);
        return;
    }
    if (status < 0 || tr->ra_rc < 0) {
        free(b);
        mxjob_abort(j, "disk tier: reading the weight stream from %s: %s", tr->path[TIER_WEIGHTS],
                    status < 0 ? uv_strerror(status) : strerror(-tr->ra_rc));
        return;
    }
    tr->read_bytes += b->bytes;
    tr->read_ns += b->read_ns;
    b->next = NULL;
    *tr->ready_tail = b;
    tr->ready_tail = &b->next;
    j->ops->chunk_read(j);
    tierio_read_more(j);
}

void tierio_read_more(mx_job *j)
{
    mx_tier *tr = j->tier;
    plan_chunk ch;
    if (tr->reading || j->released || !plan_stream_next(&tr->ra, &ch))
        return;
    /* not a chunk whose part still updates (the next step's stream starts
     * while the last updates run: mx__maybe_turn): read, or rounded for the
     * wire, now it would carry the weights before the update, or half of
     * them. pump_send asks again once the update is back. */
    if (update_busy(j->by_id[ch.tensor], ch.offset, ch.count))
        return;
    uint64_t bytes = ch.count * sizeof(float);
    if (tr->ra_bytes > 0 && tr->ra_bytes + bytes > tr->ra_limit)
        return;
    mx_rbuf *b = malloc(sizeof(*b) + bytes);
    if (!b) {
        mxjob_abort(j, "out of memory for a read-ahead buffer of %llu bytes",
                    (unsigned long long)bytes);
        return;
    }
    b->tier = tr;
    b->t = j->by_id[ch.tensor];
    b->ch = ch;
    b->bytes = bytes;
    tr->ra_buf = b;
    int rc = uv_queue_work(j->mx->n->loop, &tr->ra_req, tierio__read_work, tierio__read_done);
    if (rc < 0) {
        tr->ra_buf = NULL;
        free(b);
        mxjob_abort(j, "disk tier: a read cannot start: %s", uv_strerror(rc));
        return;
    }
    plan_stream_take(&tr->ra);
    tr->ra_bytes += bytes;
    tr->reading = true;
    j->pool_work++;
}

/* In the thread pool: a gradient chunk into the gradients file. */
static void tierio__grad_work(uv_work_t *req)
{
    mx_gwrite *w = container_of(req, mx_gwrite, req);
    mx_tier *tr = w->job->tier;
    w->rc = fsutil_pwrite_all(tr->fd[TIER_GRADIENTS], w->data, w->count * sizeof(float),
                              w->t->g_at + w->offset * sizeof(float));
}

static void tierio__grad_done(uv_work_t *req, int status)
{
    mx_gwrite *w = container_of(req, mx_gwrite, req);
    mx_job *j = w->job;
    mx_tensor *t = w->t;
    uint64_t offset = w->offset, count = w->count;
    int rc = status < 0 ? status : w->rc;
    free(w->owned);
    free(w);
    if (mxjob_pool_back(j))
        return;
    mx_tier *tr = j->tier;
    tr->g_bytes -= count * sizeof(float);
    if (rc < 0) {
        mxjob_abort(j, "disk tier: writing the gradient of %s to %s: %s", t->name,
                    tr->path[TIER_GRADIENTS], status < 0 ? uv_strerror(rc) : strerror(-rc));
        return;
    }
    if (j->down && j->down->paused && !j->held && tr->g_bytes < tr->g_limit)
        conn_resume(j->down);
    j->ops->grad_written(j, t, offset, count);
}

/* count gradient elements of t at offset, in data (owned: freed once
 * written), go to the gradients file; the link pauses while the window's
 * share for gradients is full. */
static void tierio__grad(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count, void *data,
                         void *owned)
{
    mx_tier *tr = j->tier;
    mx_gwrite *w = malloc(sizeof(*w));
    if (!w) {
        free(owned);
        mxjob_abort(j, "out of memory for a gradient write");
        return;
    }
    *w = (mx_gwrite){.job = j, .t = t, .offset = offset, .count = count, .data = data,
                         .owned = owned};
    int rc = uv_queue_work(j->mx->n->loop, &w->req, tierio__grad_work, tierio__grad_done);
    if (rc < 0) {
        free(owned);
        free(w);
        mxjob_abort(j, "disk tier: a gradient write cannot start: %s", uv_strerror(rc));
        return;
    }
    j->pool_work++;
    tr->g_bytes += count * sizeof(float);
    if (tr->g_bytes >= tr->g_limit && j->down)
        conn_pause(j->down);
}

void tierio_grad_wire(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count, void *payload,
                      void *owned)
{
    if (!j->plan->wire_bf16) {
        tierio__grad(j, t, offset, count, payload, owned);
        return;
    }
    float *f = malloc(count * sizeof(float));
    if (f)
        bf16_unpack(f, payload, count);
    free(owned);
    if (!f) {
        mxjob_abort(j, "out of memory for a gradient chunk");
        return;
    }
    tierio__grad(j, t, offset, count, f, f);
}
