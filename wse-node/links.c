/* wse-node: the links of a replica: weights from its swarmx parent (or
 * memoryx, in a plan without a tree) into
 * their slots (held while a slot is busy), batches from its workers on
 * credit. */
#include "replica.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"
#include "bf16.h"
#include "msgcheck.h"

/* ---- links ---- */

void wn__hello(conn *c, const wn_job *j)
{
    Appliance__StreamHello h = APPLIANCE__STREAM_HELLO__INIT;
    h.job_id = (char *)j->id;
    h.role = APPLIANCE__ROLE__ROLE_WSE_NODE;
    h.index = j->replica;
    h.member_id = j->n->member_id;
    ENVELOPE(env, stream_hello, STREAM_HELLO, &h);
    conn_send_msg(c, &env);
}

static void wn__up_ready(conn *c)
{
    wn_job *j = c->data;
    wn__hello(c, j);
    j->up_ready = true;
    wn__maybe_ready(j);
}

/* Whether reading from swarmx goes on whatever the slots say: the
 * compute thread waits for a collective total (spatial partitions), which
 * comes down the same stream behind weight chunks that wait for a slot
 * the computation frees. Paused there, the two would wait for each other
 * (a Weight Streaming job in stripes stopped at its first norm). */
static bool wn__must_read(wn_job *j)
{
    return j->stripes && wn_stripes_awaiting_total(j->stripes);
}

static void *wn__up_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    wn_job *j = c->data;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_COLLECTIVE && j->stripes &&
        j->state != WN_RELEASED)
        return wn_stripes_collective_dest(j->stripes, env, len, err);
    if (j->pipelined && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK && j->state != WN_RELEASED) {
        const Appliance__GradChunk *g = env->grad_chunk;
        if (msgcheck_grad_chunk(g, j->plan, len, NULL, 0) < 0 || g->step != j->step ||
            j->t[g->tensor_id].rg_have + g->count > j->t[g->tensor_id].n) {
            *err = -EINVAL;
            return NULL;
        }
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
        if (dst && j->plan->wire_bf16) { /* bfloat16: kept as it came, widened beside; */
            uint16_t *kept = wslots_dest16(&j->ws, dst, w->count);
            /* a layer in parts: in the upper half of its place, widened in place */
            return kept ? (void *)kept : (void *)((uint8_t *)dst + 2 * w->count);
        }
        j->chunk_staged =
            !dst && (blocked || (j->staged && w->step == j->step) || wn__must_read(j));
        if (!dst && !j->chunk_staged) {
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
    return dst;
}

static void wn__pause(wn_job *j)
{
    conn *up = conn_link_conn(&j->up);
    if (up && !j->up_paused && !wn__must_read(j)) {
        conn_pause(up);
        j->up_paused = true;
    }
}

void wn__read_for_total(wn_job *j)
{
    conn *up = conn_link_conn(&j->up);
    if (up && j->up_paused && j->state != WN_RELEASED) {
        j->up_paused = false;
        conn_resume(up);
    }
}

/* Keeps a chunk that came before its slot was free. */
static int wn__stage(wn_job *j, const Appliance__WeightChunk *w, const uint8_t *payload)
{
    size_t bytes = w->count * msgcheck_wire_elem(j->plan);
    wn_staged *st = malloc(sizeof(*st) + bytes);
    if (!st)
        return -ENOMEM;
    st->next = NULL;
    st->tensor = w->tensor_id;
    st->backward = w->pass == APPLIANCE__PASS__PASS_BACKWARD;
    st->step = w->step;
    st->offset = w->offset;
    st->count = w->count;
    memcpy(st->data, payload, bytes);
    wn_of(j->n)->staged++;
    if (j->staged_tail)
        j->staged_tail->next = st;
    else
        j->staged = st;
    j->staged_tail = st;
    return 0;
}

/* Whether tensor t's weights are read in bfloat16 alone: the weight
 * matrix of a dense layer streamed whole, whose GEMMs take the slot's twin
 * (wslots_bind, exec's w16). */
static bool wn__twin_only(const wn_job *j, uint32_t t)
{
    if (!j->twin_only || t >= (uint32_t)j->m->ntensors)
        return false;
    int li = j->m->tensors[t].layer;
    const model_layer *l = &j->m->layers[li];
    return l->type == LAYER_DENSE && (int)t == l->first_tensor && j->ws.parts[li].count == 1;
}

/* count weights of tensor t's chunk, as the wire carries them (float32 or
 * bfloat16), into dst: copied; or kept in bfloat16 (wslots_dest16: the
 * GEMMs take them as they are) and widened into dst, unless nothing reads
 * them there (wn__twin_only). */
static void wn__land(const wn_job *j, uint32_t t, float *dst, const void *payload, uint64_t count)
{
    if (!j->plan->wire_bf16) {
        if (payload != dst)
            memcpy(dst, payload, count * sizeof(float));
        return;
    }
    uint16_t *kept = wslots_dest16(&j->ws, dst, count);
    bool twin = kept != NULL;
    if (!kept) /* a layer in parts: widened in place, from the upper half */
        kept = (uint16_t *)((uint8_t *)dst + 2 * count);
    if (payload != kept)
        memcpy(kept, payload, 2 * count);
    if (!twin || !wn__twin_only(j, t))
        bf16_unpack(dst, kept, count);
}

/* A slot freed: held chunks land in order; reading resumes once none is
 * held and the next arrival has a slot. */
void wn__unstage(wn_job *j)
{
    while (j->staged) {
        wn_staged *st = j->staged;
        bool blocked;
        if (st->step != j->step) /* the next step's, read while a total was awaited */
            return;
        float *dst = wslots_dest(&j->ws, st->tensor, st->backward, st->offset, st->count, &blocked);
        if (!dst) {
            if (!blocked)
                wn__abort(j->n, j, "held weight chunk of tensor %u out of schedule", st->tensor);
            return;
        }
        wn__land(j, st->tensor, dst, st->data, st->count);
        bool next_blocked = wslots_received(&j->ws, st->count);
        j->staged = st->next;
        if (!j->staged)
            j->staged_tail = NULL;
        free(st);
        if (next_blocked)
            return;
    }
    conn *up = conn_link_conn(&j->up);
    if (up && j->up_paused) {
        j->up_paused = false;
        conn_resume(up);
    }
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
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_COLLECTIVE && j->stripes && payload) {
        wn_stripes_collective(j->stripes, env);
        if (j->staged) /* chunks read past while the total was awaited: flow control again */
            wn__pause(j);
        return;
    }
    if (j->pipelined && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK && payload) {
        wn_tensor *t = &j->t[env->grad_chunk->tensor_id];
        t->rg_have += env->grad_chunk->count;
        if (t->rg_have == t->n)
            j->rg_done++;
        wn__advance(j);
        return;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK || !payload) {
        conn_fail(c, -EPROTO, "unexpected %s from %s", frame_msg_name(env->msg_case), j->up_name);
        return;
    }
    const Appliance__WeightChunk *w = env->weight_chunk;
    if (j->ws_ready) {
        if (j->chunk_staged) {
            /* Its slot may have freed while the rest of it was read. */
            if (wn__stage(j, w, payload) < 0) {
                wn__abort(j->n, j, "out of memory holding a weight chunk");
                return;
            }
            wn__pause(j);
            wn__unstage(j);
            if (j->state == WN_RELEASED)
                return;
        } else {
            if (j->plan->wire_bf16) /* in the slot's twin, or in the upper half of its place */
                wn__land(j, w->tensor_id, wslots_in_twin(&j->ws, payload)
                                ? wslots_dest32(&j->ws, (const uint16_t *)payload)
                                : (float *)(payload - 2 * w->count),
                         payload, w->count);
            if (wslots_received(&j->ws, w->count))
                wn__pause(j);
        }
        wn__advance(j);
        return;
    }
    wresident_received(&j->res, w->tensor_id, w->count);
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
    wn__hello(c, j);
    Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
    cr.n = WN_CREDITS;
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
    if (msgcheck_batch(b, j->plan, len, NULL, 0) < 0 || b->sample_elems != j->in_elems ||
        b->label_elems != j->ex.label_elems) {
        *err = -EINVAL;
        return NULL;
    }
    if (b->eval_batch > 0) {
        wn_eval_buf *eb = wn__eval_buf(j, b->eval_batch - 1);
        if (!eb || eb->full || b->step != j->step || b->offset != (b->offset ? eb->got : 0) ||
            (b->offset && b->n != eb->n)) {
            *err = -EINVAL;
            return NULL;
        }
        eb->n = b->n;
        eb->got = b->offset;
        return eb->data + b->offset;
    }
    if (b->replica != j->replica || b->step < j->step || b->step % f->slots != f->slot) {
        *err = -EINVAL;
        return NULL;
    }
    wn_batch *t = wn__batch_of(j, b->step, false);
    if (t) {
        if (t->from != f || b->offset != t->got) {
            *err = -EINVAL; /* out of order, or a batch begun twice */
            return NULL;
        }
        return t->data + b->offset;
    }
    if (b->offset != 0 || wn__batch_of(j, b->step, true)) {
        *err = -EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < j->nbatches; i++)
        if (j->batches[i].step == UINT64_MAX) {
            j->batches[i].step = b->step;
            j->batches[i].full = false;
            j->batches[i].got = 0;
            j->batches[i].from = f;
            return j->batches[i].data;
        }
    *err = -ENOBUFS; /* the worker sent beyond its credits */
    return NULL;
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
            wn__advance(j);
        }
        return;
    }
    wn_batch *t = wn__batch_of(j, b->step, false);
    t->got += len;
    if (t->got == b->total) {
        t->full = true;
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
