/* wse-node: the links of a replica: weights from its swarmx parent (or
 * memoryx, in a plan without a tree) into
 * their slots (held while a slot is busy), batches from its workers on
 * credit. */
#include "wjob.h"

#include <errno.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"
#include "bf16.h"
#include "msgcheck.h"
#include "sstream.h"

/* ---- links ---- */

static void wn__up_ready(conn *c)
{
    wn_job *j = c->data;
    wn__hello(c, j);
    j->up_ready = true;
    wn__maybe_ready(j);
}

static void *wn__up_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    wn_job *j = c->data;
    j->arrival = WN_ARRIVE_NONE;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_COLLECTIVE && j->stripes &&
        j->state != WN_RELEASED) {
        j->arrival = WN_ARRIVE_TOTAL;
        return wn_stripes_collective_dest(j->stripes, env, len, err);
    }
    if (j->pipelined && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK && j->state != WN_RELEASED) {
        const Appliance__GradChunk *g = env->grad_chunk;
        if (msgcheck_grad_chunk(g, j->plan, len, NULL, 0) < 0 || g->step != j->step ||
            j->t[g->tensor_id].rg_have + g->count > j->t[g->tensor_id].n) {
            *err = -EINVAL;
            return NULL;
        }
        j->arrival = WN_ARRIVE_REDUCED;
        return j->t[g->tensor_id].rg + g->offset;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK || j->state == WN_RELEASED) {
        *err = -EPROTO;
        return NULL;
    }
    const Appliance__WeightChunk *w = env->weight_chunk;
    char why[512];
    if (msgcheck_weight_chunk(w, j->plan, len, why, sizeof(why)) < 0) {
        log_warn("job %s: %s", j->id, why);
        *err = -EINVAL;
        return NULL;
    }
    if (plan_stream_expect(&j->cur, j->plan, w, why, sizeof(why)) < 0) {
        log_warn("job %s: from %s: %s", j->id, j->up_name, why);
        *err = -EPROTO;
        return NULL;
    }
    if (j->ws_ready) {
        bool blocked = false;
        float *dst = w->step == j->step && !j->staged
                         ? wslots_dest(&j->ws, w->tensor_id, w->pass == APPLIANCE__PASS__PASS_BACKWARD,
                                       w->offset, w->count, &blocked)
                         : NULL;
        if (dst && ((uint32_t)w->packing != SSTREAM_DENSE || j->t[w->tensor_id].kept_only)) {
            /* in a buffer, expanded once in (kept_only: its kept values taken) */
            if (!j->packed_buf &&
                !(j->packed_buf = malloc(j->plan->chunk_elems * sizeof(float)))) {
                *err = -ENOMEM;
                return NULL;
            }
            j->packed_dst = dst;
            j->arrival = WN_ARRIVE_PACKED;
            return j->packed_buf; /* (msgcheck: under count elements' bytes, a chunk's at most) */
        }
        if (dst && j->plan->wire_bf16) { /* bfloat16: kept as it came, widened beside; */
            uint16_t *kept = wslots_dest16(&j->ws, dst, w->count);
            j->arrival = WN_ARRIVE_SLOT_BF16;
            /* a layer in parts: in the upper half of its place, widened in place */
            return kept ? (void *)kept : (void *)((uint8_t *)dst + 2 * w->count);
        }
        if (dst)
            j->arrival = WN_ARRIVE_SLOT;
        else if (blocked || (j->staged && w->step == j->step) || wn__must_read(j))
            j->arrival = WN_ARRIVE_HELD;
        else {
            log_warn("job %s: weight chunk out of schedule: tensor %u step %llu offset %llu "
                     "(replica at step %llu)", j->id, w->tensor_id, (unsigned long long)w->step,
                     (unsigned long long)w->offset, (unsigned long long)j->step);
            *err = -EINVAL;
        }
        return dst; /* NULL and staged: the reader holds it, on_frame keeps it */
    }
    /* Pipelined: the resident weights (and a resumed job's optimizer state) */
    float *dst = j->res_ready && (uint64_t)len == w->count * sizeof(float) && w->step >= j->step
                     ? wresident_dest(&j->res, w->tensor_id, w->state, w->offset, w->count, w->total)
                     : NULL;
    if (!dst) {
        log_warn("job %s: weight chunk refused: tensor %u state %u step %llu offset %llu count %llu "
                 "total %llu (%u bytes); replica at step %llu", j->id, w->tensor_id, w->state,
                 (unsigned long long)w->step, (unsigned long long)w->offset,
                 (unsigned long long)w->count, (unsigned long long)w->total, len,
                 (unsigned long long)j->step);
        *err = -EINVAL;
    }
    j->arrival = dst ? WN_ARRIVE_RESIDENT : WN_ARRIVE_NONE;
    return dst;
}

/* When a simulated replica counts a frame from its link up as landed: a
 * weight chunk when its sender sent it (sent_us, this host's monotonic
 * clock) or when a slot could first have taken it (the last task's
 * deadline), whichever is later, and never after now; not when this
 * process got round to reading it, which on a host's cores shared by
 * many replicas is the host's delay, not the fabric's. A time from
 * another clock (a sender on another host: in the future, or more than
 * 10 s ago) counts as now. */
static double wn__sim_landing(const wn_job *j, const Appliance__Envelope *env)
{
    double now = wn__now();
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK || !env->weight_chunk->sent_us)
        return now;
    double sent = (double)env->weight_chunk->sent_us * 1e-6;
    if (sent > now || now - sent > 10.0)
        return now;
    return sent > j->sim_free ? sent : j->sim_free < now ? j->sim_free : now;
}

static void wn__up_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    wn_job *j = c->data;
    if (j->state == WN_RELEASED)
        return;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR) {
        wn__fault(j->n, j, "%s refused: %s", j->up_name, env->error->message);
        return;
    }
    /* where payload_dest put it */
    wn_arrival a = payload ? j->arrival : WN_ARRIVE_NONE;
    j->arrival = WN_ARRIVE_NONE;
    if (j->sim)
        j->sim_input = wn__sim_landing(j, env);
    const Appliance__WeightChunk *w = env->weight_chunk;
    switch (a) {
    case WN_ARRIVE_TOTAL:
        wn_stripes_collective(j->stripes, env);
        if (j->staged) /* chunks read past while the total was awaited: flow control again */
            wn__pause(j);
        return;
    case WN_ARRIVE_REDUCED: {
        wn_tensor *t = &j->t[env->grad_chunk->tensor_id];
        t->rg_have += env->grad_chunk->count;
        if (t->rg_have == t->n)
            j->rg_done++;
        break;
    }
    case WN_ARRIVE_PACKED:
    case WN_ARRIVE_HELD: {
        char why[400];
        if (msgcheck_weight_payload(w, j->plan, payload, len, why, sizeof(why)) < 0) {
            wn__fault(j->n, j, "bad weight chunk from %s: %s", j->up_name, why);
            return;
        }
        if (a == WN_ARRIVE_PACKED) {
            wn__land(j, w->tensor_id, j->packed_dst, payload, w->count, (uint32_t)w->packing,
                     w->kept, w->offset);
            conn_charge_read(c, w->count * msgcheck_wire_elem(j->plan)); /* the loop's work */
            if (wslots_received(&j->ws, w->count))
                wn__pause(j);
            break;
        }
        /* Its slot may have freed while the rest of it was read. */
        if (wn__stage(j, w, payload) < 0) {
            wn__abort(j->n, j, "out of memory holding a weight chunk");
            return;
        }
        wn__pause(j);
        wn__unstage(j);
        if (j->state == WN_RELEASED)
            return;
        break;
    }
    case WN_ARRIVE_SLOT_BF16: /* in the slot's twin, or in the upper half of its place */
        wn__land(j, w->tensor_id, wslots_in_twin(&j->ws, payload)
                        ? wslots_dest32(&j->ws, (const uint16_t *)payload)
                        : (float *)(payload - 2 * w->count),
                 payload, w->count, SSTREAM_DENSE, 0, w->offset);
        /* fall through */
    case WN_ARRIVE_SLOT:
        if (wslots_received(&j->ws, w->count))
            wn__pause(j);
        break;
    case WN_ARRIVE_RESIDENT:
        wresident_received(&j->res, w->tensor_id, w->count);
        break;
    case WN_ARRIVE_NONE:
        conn_fail(c, -EPROTO, "unexpected %s from %s", frame_msg_name(env->msg_case), j->up_name);
        return;
    }
    wn__advance(j);
}

static void wn__up_close(conn *c, int err, const char *reason)
{
    wn_job *j = c->data;
    if (j->state == WN_RELEASED)
        return;
    if (j->up_ready) {
        j->up_ready = false;
        if (wn_of(j->n)->job == j)
            jobhost_peer_lost(&wn_of(j->n)->jobs, "lost %s %s: %s", j->up_name, c->peer_addr, reason);
    }
}

/* The link up has room again: the gradients waiting go on. */
static void wn__up_drain(conn *c)
{
    wn_job *j = c->data;
    if (!j || j->state == WN_RELEASED)
        return;
    int rc = wn__grad_pump(j);
    if (rc < 0) {
        wn__fault(j->n, j, "cannot send gradients: %s", strerror(-rc));
        return;
    }
    rc = wn__upload_pump(j);
    if (rc < 0)
        wn__fault(j->n, j, "cannot send the weights for the checkpoint: %s", strerror(-rc));
    else
        wn__advance(j);
}

const conn_ops wn__up_ops = {
    .on_ready = wn__up_ready,
    .on_frame = wn__up_frame,
    .payload_dest = wn__up_dest,
    .on_drain = wn__up_drain,
    .on_close = wn__up_close,
};

static void wn__feed_ready(conn *c)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    wn__hello_slot(c, j, f->slot); /* the worker serves this link the steps of its slot */
    Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
    cr.n = WN_CREDITS(j->plan);
    ENVELOPE(ce, credit, CREDIT, &cr);
    conn_send_msg(c, &ce);
    f->ready = true;
    if (f == &j->feeds[0] && j->stage == WN_EVAL) { /* an evaluation first: its batches */
        wn__eval_request(j, j->eval_k);
        wn__eval_request(j, j->eval_k + 1);
    }
    wn__maybe_ready(j);
}

/* The buffer of the training batch of `step` whose frames are arriving
 * (full false) or have arrived (full true), or NULL. */
static wn_batch *wn__batch_of(wn_job *j, uint64_t step, bool full)
{
    for (size_t i = 0; i < j->nbatches; i++)
        if (j->batches[i].step == step && j->batches[i].full == full)
            return &j->batches[i];
    return NULL;
}

/* A batch frame refused: why, in the wse-node's log (the link then fails
 * with the frame's size). */
static void *wn__feed_refuse(conn *c, wn_job *j, int *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static void *wn__feed_refuse(conn *c, wn_job *j, int *err, int code, const char *fmt, ...)
{
    char why[320];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    log_warn("job %s: batch frame from worker %s refused: %s", j->id, c->peer_addr, why);
    *err = code;
    return NULL;
}

/* Where a frame of a batch goes: its place in the buffer of that batch.
 * A batch's first frame (offset 0) takes a free buffer; the others must
 * follow on from the bytes already there. */
static void *wn__feed_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_BATCH || j->state == WN_RELEASED) {
        *err = -EPROTO;
        return NULL;
    }
    const Appliance__Batch *b = env->batch;
    char why[256];
    if (msgcheck_batch(b, j->plan, len, why, sizeof(why)) < 0)
        return wn__feed_refuse(c, j, err, -EINVAL, "%s", why);
    if (b->sample_elems != j->in_elems || b->label_elems != j->ex.label_elems)
        return wn__feed_refuse(c, j, err, -EINVAL, "samples of %llu elements and %u labels, the "
                               "model takes %llu and %u", (unsigned long long)b->sample_elems,
                               b->label_elems, (unsigned long long)j->in_elems,
                               j->ex.label_elems);
    if (b->eval_batch > 0) {
        wn_eval_buf *eb = wn__eval_buf(j, b->eval_batch - 1);
        if (!eb || eb->full || b->step != j->step || b->offset != (b->offset ? eb->got : 0) ||
            (b->offset && b->n != eb->n))
            return wn__feed_refuse(c, j, err, -EINVAL, "evaluation batch %u of step %llu at "
                                   "byte %llu: %s", b->eval_batch, (unsigned long long)b->step,
                                   (unsigned long long)b->offset,
                                   !eb ? "no buffer for it" : eb->full ? "its buffer is full"
                                   : b->step != j->step ? "not this step's" : "out of order");
        eb->n = b->n;
        eb->got = b->offset;
        return eb->data + b->offset;
    }
    if (b->replica != j->replica || b->step < j->step || b->step % f->slots != f->slot)
        return wn__feed_refuse(c, j, err, -EINVAL, "batch of replica %u step %llu, this is "
                               "replica %u at step %llu, the link's steps are %u mod %u",
                               b->replica, (unsigned long long)b->step, j->replica,
                               (unsigned long long)j->step, f->slot, f->slots);
    wn_batch *t = wn__batch_of(j, b->step, false);
    if (t) {
        if (t->from != f || b->offset != t->got) /* out of order, or a batch begun twice */
            return wn__feed_refuse(c, j, err, -EINVAL, "batch of step %llu at byte %llu: %s",
                                   (unsigned long long)b->step, (unsigned long long)b->offset,
                                   t->from != f ? "begun on another link" : "out of order");
        return t->data + b->offset;
    }
    if (b->offset != 0 || wn__batch_of(j, b->step, true))
        return wn__feed_refuse(c, j, err, -EINVAL, "batch of step %llu at byte %llu: %s",
                               (unsigned long long)b->step, (unsigned long long)b->offset,
                               b->offset ? "no start" : "already here");
    for (size_t i = 0; i < j->nbatches; i++)
        if (j->batches[i].step == UINT64_MAX) {
            j->batches[i].step = b->step;
            j->batches[i].full = false;
            j->batches[i].got = 0;
            j->batches[i].from = f;
            return j->batches[i].data;
        }
    /* the worker sent beyond its credits */
    return wn__feed_refuse(c, j, err, -ENOBUFS, "batch of step %llu beyond the link's credits "
                           "(%zu buffers, all taken)", (unsigned long long)b->step, j->nbatches);
}

static void wn__feed_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    if (j->state == WN_RELEASED)
        return;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR) {
        wn__fault(j->n, j, "worker %s refused: %s", c->peer_addr, env->error->message);
        return;
    }
    /* An eval batch of no samples (a share of the eval set smaller than the
     * replicas) comes as one frame without a payload. */
    const Appliance__Batch *b = env->batch;
    bool empty_eval = env->msg_case == APPLIANCE__ENVELOPE__MSG_BATCH && b->eval_batch > 0 &&
                      b->n == 0 && b->total == 0 && b->offset == 0 && len == 0;
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_BATCH || (!payload && !empty_eval)) {
        conn_fail(c, -EPROTO, "unexpected %s from a worker", frame_msg_name(env->msg_case));
        return;
    }
    if (b->eval_batch > 0) {
        wn_eval_buf *eb = wn__eval_buf(j, b->eval_batch - 1);
        if (empty_eval) {
            if (!eb || eb->full || b->step != j->step) {
                conn_fail(c, -EINVAL, "eval batch %u of step %llu not asked for", b->eval_batch,
                          (unsigned long long)b->step);
                return;
            }
            eb->n = 0;
        }
        eb->got += len;
        if (eb->got == b->total) {
            eb->full = true;
            eb->landed = wn__now();
            wn__advance(j);
        }
        return;
    }
    wn_batch *t = wn__batch_of(j, b->step, false);
    t->got += len;
    if (t->got == b->total) {
        t->full = true;
        t->landed = wn__now();
        wn__advance(j);
    }
}

static void wn__feed_close(conn *c, int err, const char *reason)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    if (j->state == WN_RELEASED)
        return;
    if (f->ready) {
        f->ready = false;
        if (wn_of(j->n)->job == j)
            jobhost_peer_lost(&wn_of(j->n)->jobs, "lost worker %s: %s", c->peer_addr, reason);
    }
}

const conn_ops wn__feed_ops = {
    .on_ready = wn__feed_ready,
    .on_frame = wn__feed_frame,
    .payload_dest = wn__feed_dest,
    .on_close = wn__feed_close,
};
