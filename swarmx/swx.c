/* swarmx: broadcast down, reduce up. */
#include "swx.h"

#include <errno.h>
#include <stdlib.h>

#include "shm.h"
#include <string.h>

#include "flight.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "plan.h"
#include "queue.h"

#define SWX_UPSTREAM 1             /* conn kind: our link to memoryx or the parent */
#define SWX_DOWN_MAX PLAN_SWARM_DOWN_MAX /* weight bytes buffered for slow children */

static swarmx *swx_of(node *n) { return n->data; }

static void swx__up_stopped(conn_link *l)
{
    swx_up *u = container_of(l, swx_up, link);
    swx_job *j = u->job;
    if (--j->stopping_up == 0) {
        free(j->up);
        free(j);
    }
}

static void swx__job_free(swx_job *j)
{
    if (!j || j->state == SWX_RELEASED)
        return;
    j->state = SWX_RELEASED;
    for (size_t i = 0; i < j->nkids; i++) {
        swx_buf *b = j->kids[i].head;
        while (b) {
            swx_buf *next = b->next;
            swx_buf_unref(b);
            b = next;
        }
    }
    free(j->kids);
    shm_ring_free(j->shared); /* the job's reference; the children's connections hold theirs */
    j->shared = NULL;
    swx_colls_free(&j->colls);
    for (size_t i = 0; i < j->nup; i++)
        while (j->up[i].qhead) {
            swx_buf *next = j->up[i].qhead->next;
            swx_buf_unref(j->up[i].qhead);
            j->up[i].qhead = next;
        }
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    j->plan = NULL;
    j->stopping_up = j->nup;
    if (j->nup == 0) {
        free(j->up);
        free(j);
        return;
    }
    for (size_t i = 0; i < j->nup; i++)
        conn_link_stop(&j->up[i].link, swx__up_stopped);
}

/* Fails the job j (or reports a fault): the jobhost tells the coordinator
 * and releases it. A job already let go is left alone. */
#define swx__abort(n, j, ...) jobhost_abort_job(&swx_of(n)->jobs, j, false, __VA_ARGS__)
#define swx__fault(n, j, ...) jobhost_abort_job(&swx_of(n)->jobs, j, true, __VA_ARGS__)

static void swx__maybe_ready(node *n, swx_job *j)
{
    if (j->state != SWX_LINKING)
        return;
    for (size_t i = 0; i < j->nup; i++)
        if (!j->up[i].ready)
            return;
    for (size_t i = 0; i < j->nkids; i++)
        if (!j->kids[i].c)
            return;
    j->state = SWX_STREAMING;
    Appliance__JobReady r = APPLIANCE__JOB_READY__INIT;
    r.job_id = j->id;
    r.member_id = n->member_id;
    ENVELOPE(env, job_ready, JOB_READY, &r);
    node_send_coordinator(n, &env);
    log_info("job %s: tree node %u ready (%zu up, %zu children)", j->id, j->index, j->nup, j->nkids);
}

/* ---- down: weights ---- */

typedef struct swx_send {
    swx_buf *b;
    swx_job *j;
} swx_send;

static void swx__resume_up(swx_job *j)
{
    for (size_t i = 0; i < j->nup; i++) {
        conn *c = conn_link_conn(&j->up[i].link);
        if (c)
            conn_resume(c);
    }
}

static void swx__down_sent(void *arg, int status)
{
    swx_send *s = arg;
    swx_job *j = s->j;
    if (j->state != SWX_RELEASED) {
        j->pending_down -= s->b->len;
        if (j->pending_down <= SWX_DOWN_MAX / 2)
            swx__resume_up(j);
    }
    swx_buf_unref(s->b);
    free(s);
}

/* Forwards a frame to every child, cut-through; pauses `from` (the
 * upstream) while the children's queues are too long. */
/* A weight chunk on its way down must be the next of the job's stream as
 * the plan defines it (plan_stream.h), every shard's chunks counted: a
 * shard that streams out of order or a chunk that does not match its place
 * fails the job here, not as wrong weights on the wse-nodes. Returns 0, or
 * -EPROTO after aborting the job. */
static int swx__expect(node *n, swx_job *j, const Appliance__WeightChunk *w, const char *from)
{
    char why[512];
    if (plan_stream_expect(&j->cur, j->plan, w, why, sizeof(why)) == 0)
        return 0;
    swx__abort(n, j, "from %s: %s", from, why);
    return -EPROTO;
}

/* Sends b to child k (what it is, for messages), without a copy: the child
 * holds a reference until its write is done, and the bytes count as
 * pending down until then; or, where shared (b's place in the job's shared
 * ring: offset, end) and the child reads that ring, only where b lies. A
 * child not connected is skipped (its loss ends the job). Returns 0, or
 * < 0 after failing the job. */
static int swx__send_child(node *n, swx_job *j, swx_child *k, const Appliance__Envelope *env,
                           swx_buf *b, const uint64_t *shared, const char *what)
{
    conn *c = k->c;
    if (!c)
        return 0;
    if (shared && conn_shared_ready(c, j->shared)) {
        int rc = conn_send_shared(c, env, j->shared, shared[0], shared[1], b->len);
        if (rc < 0)
            swx__fault(n, j, "cannot forward %s to %s: %s", what, c->peer_addr, strerror(-rc));
        return rc;
    }
    swx_send *s = malloc(sizeof(*s));
    if (!s) {
        swx__abort(n, j, "out of memory forwarding %s", what);
        return -ENOMEM;
    }
    s->b = b;
    s->j = j;
    b->refs++;
    int rc = conn_send(c, env, b->data, b->len, swx__down_sent, s);
    if (rc < 0) {
        b->refs--;
        free(s);
        swx__fault(n, j, "cannot forward %s to %s: %s", what, c->peer_addr, strerror(-rc));
        return rc;
    }
    j->pending_down += b->len;
    return 0;
}

/* Puts b once into the job's shared ring when a child reads it and it has
 * the room: true, with where b lies. */
static bool swx__put_shared(swx_job *j, const swx_buf *b, uint64_t *off, uint64_t *end)
{
    if (!j->shared || !shm_ring_has_readers(j->shared) || b->len < CONN_SHM_MIN_PAYLOAD)
        return false;
    bool ready = false;
    for (size_t i = 0; i < j->nkids && !ready; i++)
        ready = j->kids[i].c && conn_shared_ready(j->kids[i].c, j->shared);
    return ready && shm_ring_put(j->shared, b->data, b->len, off, end);
}

static void swx__send_down(node *n, swx_job *j, conn *from, const Appliance__Envelope *env, swx_buf *b)
{
    /* a weight chunk goes on stamped with when this node sent it */
    Appliance__Envelope out;
    Appliance__WeightChunk wc;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK) {
        wc = *env->weight_chunk;
        wc.sent_us = flight_now_us();
        out = *env;
        out.weight_chunk = &wc;
        env = &out;
    }
    /* the children that read the shared ring get where b lies in it,
     * copied there once; the others, b itself */
    uint64_t ref[2];
    bool shared = swx__put_shared(j, b, &ref[0], &ref[1]);
    if (shared)
        j->shared_bytes += b->len;
    for (size_t i = 0; i < j->nkids; i++)
        if (swx__send_child(n, j, &j->kids[i], env, b, shared ? ref : NULL, "weights") < 0)
            return;
    j->chunks_down++;
    swx_of(n)->chunks_down++;
    if (from && j->pending_down > SWX_DOWN_MAX)
        conn_pause(from); /* a slow child stalls the producer, not our memory */
}

/* ---- up: gradients ---- */

static void swx__up_sent(void *arg, int status)
{
    swx_buf_unref(arg);
}

static void swx__send_down(node *n, swx_job *j, conn *from, const Appliance__Envelope *env, swx_buf *b);

static void swx__child_resume(swx_child *k, void *arg)
{
    if (k->c)
        conn_resume(k->c);
}

/* The link up for a tensor's chunks: the root's to the shard owning it. */
static conn *swx__route_up(swx_job *j, uint32_t tensor_id)
{
    if (!j->root)
        return conn_link_conn(&j->up[0].link);
    uint32_t shard = j->plan->tensors[tensor_id]->shard;
    for (size_t i = 0; i < j->nup; i++)
        if (j->up[i].shard == shard)
            return conn_link_conn(&j->up[i].link);
    return NULL;
}

/* Sums the children's gradient chunks in child order as they complete
 * (queue.c) and sends each sum up. */
static void swx__reduce(node *n, swx_job *j)
{
    for (;;) {
        swx_buf *sum;
        char why[256];
        int rc = swx_reduce_take(j->kids, j->nkids, &sum, j->plan->wire_bf16, swx__child_resume,
                                 NULL, why, sizeof(why));
        if (rc < 0)
            swx__abort(n, j, "%s", why);
        if (rc <= 0)
            return;
        const Appliance__GradChunk *h = &sum->hdr;
        Appliance__GradChunk hdr = *h;
        ENVELOPE(env, grad_chunk, GRAD_CHUNK, &hdr);
        /* Pipelined: the root's sum is the all-reduced gradient; every
         * replica applies it to its resident weights, and it goes no
         * further (memoryx takes the weights at checkpoints). */
        if (j->root && j->plan->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED) {
            j->chunks_up++; /* reduced, counted as those sent up elsewhere */
            swx_of(n)->chunks_up++;
            swx__send_down(n, j, NULL, &env, sum);
            swx_buf_unref(sum);
            if (!j->plan)
                return; /* aborted */
            continue;
        }
        conn *up = swx__route_up(j, h->tensor_id);
        rc = up ? conn_send(up, &env, sum->data, sum->len, swx__up_sent, sum) : -ENOTCONN;
        if (rc < 0) {
            swx_buf_unref(sum);
            swx__fault(n, j, "cannot send gradients up: %s", strerror(-rc));
            return;
        }
        j->chunks_up++;
        swx_of(n)->chunks_up++;
        if (!conn_can_send(up, 0)) /* memoryx is behind: hold the children back */
            for (size_t i = 0; i < j->nkids; i++)
                if (j->kids[i].c)
                    conn_pause(j->kids[i].c);
    }
}

/* Pipelined: a chunk of the first replica's weights and optimizer state
 * for memoryx's checkpoint, passed on up as it came. */
static void swx__upload(node *n, swx_job *j, conn *c, Appliance__Envelope *env, swx_buf *b)
{
    const Appliance__WeightChunk *w = env->weight_chunk;
    char why[256];
    int bad = j->plan->mode != APPLIANCE__EXEC_MODE__MODE_PIPELINED ||
              w->pass != APPLIANCE__PASS__PASS_CHECKPOINT;
    if (bad)
        snprintf(why, sizeof(why), "weights sent up outside a Pipelined job's checkpoint");
    if (bad || msgcheck_weight_chunk(w, j->plan, b->len, why, sizeof(why)) < 0) {
        swx_buf_unref(b);
        swx__abort(n, j, "bad weight chunk from %s: %s", c->peer_addr, why);
        return;
    }
    conn *up = swx__route_up(j, w->tensor_id);
    int rc = up ? conn_send(up, env, b->data, b->len, swx__up_sent, b) : -ENOTCONN;
    if (rc < 0) {
        swx_buf_unref(b);
        swx__fault(n, j, "cannot send the weights for the checkpoint up: %s", strerror(-rc));
        return;
    }
    if (!conn_can_send(up, 0)) /* resumed when the link up drains */
        conn_pause(c);
}

static void swx__grad_chunk(node *n, swx_job *j, conn *c, Appliance__Envelope *env, swx_buf *b)
{
    swx_child *k = c->user;
    if (!k) {
        swx_buf_unref(b);
        conn_fail(c, -EPROTO, "gradient chunk before stream hello");
        return;
    }
    const Appliance__GradChunk *g = env->grad_chunk;
    char why[256];
    if (msgcheck_grad_chunk(g, j->plan, b->len, why, sizeof(why)) < 0 ||
        msgcheck_grad_payload(g, j->plan, b->data, b->len, why, sizeof(why)) < 0) {
        swx_buf_unref(b);
        swx__abort(n, j, "bad gradient chunk from %s: %s", c->peer_addr, why);
        return;
    }
    b->hdr = *g;
    b->hdr.base.unknown_fields = NULL;
    b->hdr.base.n_unknown_fields = 0;
    if (swx_child_push(k, b))
        conn_pause(c);
    swx__reduce(n, j);
}

/* Payloads of both directions land in a buffer we keep (forwarded as is). */
static void *swx__payload_dest(node *n, conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK &&
        env->msg_case != APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK &&
        env->msg_case != APPLIANCE__ENVELOPE__MSG_COLLECTIVE) {
        *err = -EPROTO;
        return NULL;
    }
    swx_buf *b = swx_buf_new(len);
    if (!b) {
        *err = -ENOMEM;
        return NULL;
    }
    return b->data;
}


/* Forwards the held chunks whose turn has come. */
static void swx__merge_drain(node *n, swx_job *j)
{
    size_t from;
    bool unpause;
    swx_buf *b;
    while (j->state != SWX_RELEASED && (b = swx_merge_take(j->up, j->nup, j->next_seq, &from, &unpause))) {
        conn *uc = conn_link_conn(&j->up[from].link);
        if (unpause && uc)
            conn_resume(uc);
        if (swx__expect(n, j, &b->whdr, uc ? uc->peer_addr : "a shard") < 0) {
            swx_buf_unref(b);
            return;
        }
        ENVELOPE(env, weight_chunk, WEIGHT_CHUNK, &b->whdr);
        swx__send_down(n, j, uc, &env, b);
        swx_buf_unref(b);
        j->next_seq++;
    }
}

/* The root over several memoryx shards: each shard streams its own tensors
 * in schedule order; chunks carry their place in the job's whole stream, and
 * go down in that order. */
static void swx__merge(node *n, swx_job *j, conn *c, const Appliance__Envelope *env, swx_buf *b)
{
    swx_up *u = c->data;
    b->whdr = *env->weight_chunk;
    b->whdr.base.unknown_fields = NULL;
    b->whdr.base.n_unknown_fields = 0;
    if (b->whdr.seq < j->next_seq) {
        swx_buf_unref(b);
        swx__abort(n, j, "weight chunk %llu from %s came twice", (unsigned long long)b->whdr.seq,
                   c->peer_addr);
        return;
    }
    if (swx_merge_push(u, b))
        conn_pause(c);
    swx__merge_drain(n, j);
}

static void swx__on_data(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    swx_job *j = swx_of(n)->job;
    swx_buf *b = payload ? container_of(payload, swx_buf, data) : NULL;
    if (!j || !b) {
        swx_buf_unref(b);
        conn_fail(c, -EPROTO, "%s without a job or payload", frame_msg_name(env->msg_case));
        return;
    }
    bool from_up = c->kind == SWX_UPSTREAM;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK && !from_up) {
        if (!c->user) {
            swx_buf_unref(b);
            conn_fail(c, -EPROTO, "weight chunk before stream hello");
            return;
        }
        swx__upload(n, j, c, env, b); /* Pipelined: up for the checkpoint */
    } else if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK && from_up && j->nup > 1) {
        swx__merge(n, j, c, env, b); /* several shards: in the order of the schedule */
    } else if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK ||
               (from_up && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK)) {
        /* Weights, or (pipelined) the reduced gradient, on their way down. */
        if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK &&
            swx__expect(n, j, env->weight_chunk, c->peer_addr) < 0) {
            swx_buf_unref(b);
            return;
        }
        swx__send_down(n, j, c, env, b);
        swx_buf_unref(b);
    } else if (from_up) {
        swx_buf_unref(b);
        conn_fail(c, -EPROTO, "unexpected %s from upstream", frame_msg_name(env->msg_case));
    } else {
        swx__grad_chunk(n, j, c, env, b);
    }
}

/* ---- collective sums (spatial partitions) ---- */

/* Who sent a collective frame, for messages: "replica 3 at ADDR". */
static void swx__coll_peer(const swx_job *j, conn *c, char *out, size_t len)
{
    const swx_child *k = c->user;
    if (c->kind == SWX_UPSTREAM)
        snprintf(out, len, "%s %s", j->root ? "memoryx" : "the parent", c->peer_addr);
    else
        snprintf(out, len, "%s %u at %s", k->replica ? "replica" : "tree node", k->index, c->peer_addr);
}

/* Sends a total down to the children in its scope, the buffer shared as a
 * weight chunk's is; `from` (the parent, or NULL at the root) pauses while
 * the children are behind. A failed send fails the job. */
static void swx__coll_down(node *n, swx_job *j, conn *from, const Appliance__Envelope *env,
                           uint32_t scope, swx_buf *b)
{
    for (size_t i = 0; i < j->nkids; i++)
        if (swx_colls_in_scope(&j->colls, i, scope) &&
            swx__send_child(n, j, &j->kids[i], env, b, NULL, "a collective total") < 0)
            return;
    if (from && j->pending_down > SWX_DOWN_MAX)
        conn_pause(from);
}

/* Every child in scope has contributed to h's key: a node sends the sum up
 * to its parent, the root sends it down as the total. Takes sum. The frame
 * is h's but for the count and direction, and group 0 when the scope is
 * every wse-node (whichever group the children named). */
static void swx__coll_done(node *n, swx_job *j, const Appliance__Collective *h, swx_buf *sum)
{
    j->collectives++;
    swx_of(n)->collectives++;
    Appliance__Collective out = APPLIANCE__COLLECTIVE__INIT;
    out.step = h->step;
    out.tag = h->tag;
    out.group = h->all ? 0 : h->group;
    out.all = h->all;
    out.count = sum->len / (uint32_t)sizeof(double);
    out.eval = h->eval;
    out.total = j->root;
    ENVELOPE(env, collective, COLLECTIVE, &out);
    if (j->root) {
        swx__coll_down(n, j, NULL, &env, h->all ? SWX_COLL_ALL : h->group, sum);
        swx_buf_unref(sum);
        return;
    }
    conn *up = conn_link_conn(&j->up[0].link);
    int rc = up ? conn_send(up, &env, sum->data, sum->len, swx__up_sent, sum) : -ENOTCONN;
    if (rc < 0) {
        swx_buf_unref(sum);
        swx__fault(n, j, "cannot send a collective sum up: %s", strerror(-rc));
    }
}

/* Whether a collective frame goes the way it may: partial sums up from a
 * child, totals down from the parent (memoryx sends none). Returns 0, or
 * -EPROTO after failing the job. */
static int swx__coll_direction(node *n, swx_job *j, conn *c, const Appliance__Collective *h,
                               const char *peer)
{
    bool from_up = c->kind == SWX_UPSTREAM;
    const char *bad = NULL;
    if (from_up && j->root)
        bad = "memoryx sends no collective sums";
    else if (from_up && !h->total)
        bad = "a partial sum from upstream (only totals come down)";
    else if (!from_up && h->total)
        bad = "a total from a child (totals only come down)";
    if (!bad)
        return 0;
    swx__abort(n, j, "collective sum from %s: %s", peer, bad);
    return -EPROTO;
}

/* A Collective frame, from a child or the parent: checked, then a child's
 * partial sum goes into the table (collective.c) and a parent's total on
 * to the children in its scope. Takes b. */
static void swx__collective(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    swx_job *j = swx_of(n)->job;
    swx_buf *b = payload ? container_of(payload, swx_buf, data) : NULL;
    if (!j || (c->kind != SWX_UPSTREAM && !c->user)) {
        swx_buf_unref(b);
        conn_fail(c, -EPROTO, "collective sum %s", j ? "before stream hello" : "without a job");
        return;
    }
    const Appliance__Collective *h = env->collective;
    char peer[128], why[256];
    swx__coll_peer(j, c, peer, sizeof(peer));
    /* a payload of count doubles, so b is set once this passes */
    if (msgcheck_collective(h, j->plan, len, why, sizeof(why)) < 0) {
        swx_buf_unref(b);
        swx__abort(n, j, "bad collective sum from %s: %s", peer, why);
        return;
    }
    if (swx__coll_direction(n, j, c, h, peer) < 0) {
        swx_buf_unref(b);
        return;
    }
    swx_coll_key key = {.step = h->step, .tag = h->tag, .scope = h->all ? SWX_COLL_ALL : h->group,
                        .eval = h->eval};
    if (c->kind == SWX_UPSTREAM) {
        size_t in = 0;
        for (size_t i = 0; i < j->nkids; i++)
            in += swx_colls_in_scope(&j->colls, i, key.scope);
        if (in == 0)
            swx__abort(n, j, "collective total of group %u from %s: no replica of it beneath tree "
                       "node %u", h->group, peer, j->index);
        else
            swx__coll_down(n, j, c, env, key.scope, b);
        swx_buf_unref(b);
        return;
    }
    swx_buf *sum;
    int rc = swx_colls_add(&j->colls, &key, (size_t)((swx_child *)c->user - j->kids), b, &sum, why,
                           sizeof(why));
    if (rc < 0)
        swx__abort(n, j, "collective sum from %s: %s", peer, why);
    else if (rc == 1)
        swx__coll_done(n, j, h, sum);
}

/* ---- links ---- */

static void swx__up_ready(conn *c)
{
    swx_up *u = c->data;
    swx_job *j = u->job;
    c->kind = SWX_UPSTREAM;
    Appliance__StreamHello h = APPLIANCE__STREAM_HELLO__INIT;
    h.job_id = j->id;
    h.role = APPLIANCE__ROLE__ROLE_SWARMX;
    h.index = j->index;
    ENVELOPE(env, stream_hello, STREAM_HELLO, &h);
    conn_send_msg(c, &env);
    u->ready = true;
    swx__maybe_ready(j->n, j);
}

static void swx__up_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    swx_up *u = c->data;
    if (u->job->state == SWX_RELEASED) {
        swx_buf_unref(payload ? container_of(payload, swx_buf, data) : NULL);
        return;
    }
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_COLLECTIVE) {
        swx__collective(u->job->n, c, env, payload, len);
        return;
    }
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK ||
        env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK) {
        swx__on_data(u->job->n, c, env, payload, len);
        return;
    }
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR) {
        swx__fault(u->job->n, u->job, "upstream %s refused: %s", c->peer_addr, env->error->message);
        return;
    }
    conn_fail(c, -EPROTO, "unexpected %s from upstream", frame_msg_name(env->msg_case));
}

static void *swx__up_payload_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    swx_up *u = c->data;
    return swx__payload_dest(u->job->n, c, env, len, err);
}

static void swx__up_close(conn *c, int err, const char *reason)
{
    swx_up *u = c->data;
    if (u->job->state == SWX_RELEASED)
        return;
    if (u->ready) {
        u->ready = false;
        if (swx_of(u->job->n)->job == u->job)
            jobhost_peer_lost(&swx_of(u->job->n)->jobs, "lost upstream %s: %s", c->peer_addr,
                              reason);
    }
}

/* The link up drained: the children may send again (unless their own
 * queues are full). */
static void swx__up_drain(conn *c)
{
    swx_up *u = c->data;
    swx_job *j = u->job;
    if (j->state == SWX_RELEASED)
        return;
    for (size_t i = 0; i < j->nkids; i++)
        if (j->kids[i].c && j->kids[i].queued < SWX_CHILD_QUEUE_MAX)
            conn_resume(j->kids[i].c);
}

static const conn_ops swx__up_conn_ops = {
    .on_ready = swx__up_ready,
    .on_frame = swx__up_frame,
    .payload_dest = swx__up_payload_dest,
    .on_drain = swx__up_drain,
    .on_close = swx__up_close,
};

/* ---- handlers ---- */

/* Starts a job (jobhost_ops.start): our tree node of the plan, its
 * children, and the links up (to every memoryx shard at the root). */
static void *swx__start(jobhost *h, Appliance__Plan *p, char *why, size_t whylen)
{
    node *n = h->n;
    swarmx *s = swx_of(n);
    const Appliance__PlanSwarmNode *me = NULL;
    for (size_t i = 0; i < p->n_swarm; i++)
        if (p->swarm[i]->member_id == n->member_id)
            me = p->swarm[i];
    if (!me) {
        snprintf(why, whylen, "plan has no tree node for member %u", n->member_id);
        return NULL;
    }
    swx_job *j = calloc(1, sizeof(*j));
    if (!j) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    j->n = n;
    snprintf(j->id, sizeof(j->id), "%s", p->job_id);
    j->index = me->index;
    j->root = me->parent < 0;
    j->nkids = me->n_children_replicas + me->n_children_swarmx;
    j->kids = calloc(j->nkids ? j->nkids : 1, sizeof(*j->kids));
    size_t k = 0;
    for (size_t i = 0; j->kids && i < me->n_children_replicas; i++, k++) {
        j->kids[k].replica = true;
        j->kids[k].index = me->children_replicas[i];
    }
    for (size_t i = 0; j->kids && i < me->n_children_swarmx; i++, k++)
        j->kids[k].index = me->children_swarmx[i];
    j->nup = j->root ? p->n_shards : 1;
    j->up = calloc(j->nup, sizeof(*j->up));
    if (!j->kids || !j->up) {
        snprintf(why, whylen, "out of memory");
        j->nup = 0;
        swx__job_free(j);
        return NULL;
    }
    /* Spatial partitions: the groups beneath each child, for the scope of
     * collective sums. */
    if ((msgcheck_parts(p) > 1 || p->sync_batchnorm) && swx_colls_init(&j->colls, p, me, why, whylen) < 0) {
        j->nup = 0;
        swx__job_free(j);
        return NULL;
    }
    for (size_t i = 0; i < j->nup; i++) {
        const char *addr;
        if (j->root) {
            addr = p->shards[i]->addr;
            j->up[i].shard = p->shards[i]->index;
        } else {
            addr = p->swarm[me->parent]->addr;
        }
        j->up[i].job = j;
        if (conn_link_start(&j->up[i].link, n->loop, addr, &n->ccfg, &swx__up_conn_ops, &j->up[i]) < 0) {
            snprintf(why, whylen, "bad upstream address %s", addr);
            j->nup = i; /* the links started so far are stopped */
            swx__job_free(j);
            return NULL;
        }
    }
    j->plan = p;
    s->job = j;
    log_info("job %s: tree node %u, %s, %zu children", j->id, j->index,
             j->root ? "root" : "inner", j->nkids);
    node_replay(n);
    return j;
}

/* A child on this host reads what goes down to all children from the
 * job's shared ring (made at the first such child), where shared memory
 * is on: one copy instead of one a child. */
static void swx__offer_shared(node *n, swx_job *j, conn *c)
{
    if (!n->ccfg.shm_ring)
        return;
    if (!j->shared) {
        char why[160];
        j->shared = shm_ring_create_shared(n->ccfg.shm_ring, why, sizeof(why));
        if (!j->shared) {
            log_warn("job %s: no shared ring for the children on this host: %s", j->id, why);
            return;
        }
    }
    int rc = conn_offer_shared(c, j->shared);
    if (rc < 0 && rc != -ENOTSUP && rc != -ENOSPC)
        log_warn("job %s: cannot offer %s the shared ring: %s", j->id, c->peer_addr,
                 strerror(-rc));
}

static void swx__stream_hello(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    swx_job *j = swx_of(n)->job;
    Appliance__StreamHello *h = env->stream_hello;
    if (!j || strcmp(h->job_id, j->id) != 0) {
        if (node_defer(n, c, env) < 0)
            conn_fail(c, -ENOENT, "no job %s on this swarmx", h->job_id);
        return;
    }
    char why[256];
    if (msgcheck_stream_hello(h, APPLIANCE__ROLE__ROLE_UNKNOWN, j->plan, why, sizeof(why)) < 0) {
        conn_fail(c, -EINVAL, "%s", why);
        return;
    }
    bool replica = h->role == APPLIANCE__ROLE__ROLE_WSE_NODE;
    for (size_t i = 0; i < j->nkids; i++) {
        swx_child *k = &j->kids[i];
        if (k->replica == replica && k->index == h->index) {
            if (k->c) {
                conn_fail(c, -EEXIST, "child %u already connected", h->index);
                return;
            }
            k->c = c;
            c->user = k;
            swx__offer_shared(n, j, c);
            swx__maybe_ready(n, j);
            return;
        }
    }
    conn_fail(c, -ENOENT, "%s %u is not a child of tree node %u", msg_role_name(h->role), h->index,
              j->index);
}

/* Lets the job go (jobhost_ops.release): the children's links stay open
 * for the next job; the links up close. */
static void swx__release(jobhost *h, void *job, jobhost_end end, const char *why)
{
    swarmx *s = swx_of(h->n);
    swx_job *j = job;
    if (end == JOBHOST_RELEASED || end == JOBHOST_COORDINATOR_LOST)
        log_info("job %s: released%s after %llu chunks down (%llu bytes through the shared "
                 "ring), %llu up", j->id,
                 end == JOBHOST_COORDINATOR_LOST ? ": lost the coordinator" : "",
                 (unsigned long long)j->chunks_down, (unsigned long long)j->shared_bytes,
                 (unsigned long long)j->chunks_up);
    s->job = NULL;
    for (size_t i = 0; i < j->nkids; i++)
        if (j->kids[i].c)
            j->kids[i].c->user = NULL;
    swx__job_free(j);
}

static void swx__describe_wait(node *n, char *out, size_t len)
{
    swx_job *j = swx_of(n)->job;
    if (!j)
        snprintf(out, len, "nothing: no job");
    else
        snprintf(out, len, "weight chunks from its %zu upstream link(s) or gradient chunks from its %zu "
                 "children (tree node %u; %llu chunks down, %llu up, %zu bytes not yet written down, "
                 "%zu collective sums waiting for children)",
                 j->nup, j->nkids, j->index, (unsigned long long)j->chunks_down,
                 (unsigned long long)j->chunks_up, j->pending_down, j->colls.npending);
}

/* The coordinator owns the job; a restarted one recovers it. */
static void swx__coordinator_lost(node *n)
{
    jobhost_end_job(&swx_of(n)->jobs, JOBHOST_COORDINATOR_LOST, "lost the coordinator");
}

static void swx__conn_close(node *n, conn *c, int err, const char *reason)
{
    swx_job *j = swx_of(n)->job;
    swx_child *k = c->user;
    if (j && k && k->c == c) {
        k->c = NULL;
        jobhost_peer_lost(&swx_of(n)->jobs, "lost child %s: %s", c->peer_addr, reason);
    }
}

static void swx__shutdown(node *n)
{
    jobhost_end_job(&swx_of(n)->jobs, JOBHOST_SHUTDOWN, "shutdown");
}

static void swx__metrics(node *n, metrics_buf *b)
{
    swarmx *s = swx_of(n);
    size_t held = 0;
    for (size_t i = 0; s->job && i < s->job->nup; i++)
        held += s->job->up[i].qlen;
    size_t waiting = 0;
    for (size_t i = 0; s->job && i < s->job->nkids; i++)
        waiting += s->job->kids[i].queued;
    metrics_printf(b, "# HELP appliance_chunks_forwarded_total Weight chunks sent down to the children.\n"
                      "# TYPE appliance_chunks_forwarded_total counter\n"
                      "appliance_chunks_forwarded_total %llu\n"
                      "# HELP appliance_chunks_reduced_total Gradient chunks summed and sent on (up, or "
                      "down from a Pipelined job's root).\n"
                      "# TYPE appliance_chunks_reduced_total counter\n"
                      "appliance_chunks_reduced_total %llu\n"
                      "# HELP appliance_pending_down_bytes Weight bytes not yet written to every child.\n"
                      "# TYPE appliance_pending_down_bytes gauge\nappliance_pending_down_bytes %zu\n"
                      "# HELP appliance_merge_queue Weight chunks held for their turn (several shards).\n"
                      "# TYPE appliance_merge_queue gauge\nappliance_merge_queue %zu\n"
                      "# HELP appliance_reduce_queue Gradient chunks waiting for the other children.\n"
                      "# TYPE appliance_reduce_queue gauge\nappliance_reduce_queue %zu\n"
                      "# HELP appliance_collectives_reduced_total Collective sums completed over the "
                      "children (sent up, or down as totals from the root).\n"
                      "# TYPE appliance_collectives_reduced_total counter\n"
                      "appliance_collectives_reduced_total %llu\n"
                      "# HELP appliance_collectives_pending Collective sums waiting for children.\n"
                      "# TYPE appliance_collectives_pending gauge\nappliance_collectives_pending %zu\n",
                   (unsigned long long)s->chunks_down, (unsigned long long)s->chunks_up,
                   s->job ? s->job->pending_down : 0, held, waiting,
                   (unsigned long long)s->collectives, s->job ? s->job->colls.npending : 0);
}

static const jobhost_ops swx__jobhost_ops = {swx__start, swx__release};

void swarmx_role(node_role *role, swarmx *s, node *n)
{
    memset(role, 0, sizeof(*role));
    role->role = APPLIANCE__ROLE__ROLE_SWARMX;
    role->component = "swarmx";
    memset(s, 0, sizeof(*s));
    s->n = n;
    jobhost_init(&s->jobs, n, role, &swx__jobhost_ops);
    role->handlers[APPLIANCE__ENVELOPE__MSG_STREAM_HELLO] = swx__stream_hello;
    role->handlers[APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK] = swx__on_data;
    role->handlers[APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK] = swx__on_data;
    role->handlers[APPLIANCE__ENVELOPE__MSG_COLLECTIVE] = swx__collective;
    role->payload_dest = swx__payload_dest;
    role->on_conn_close = swx__conn_close;
    role->on_shutdown = swx__shutdown;
    role->on_coordinator_lost = swx__coordinator_lost;
    role->describe_wait = swx__describe_wait;
    role->metrics = swx__metrics;
}
