/* wse-node: spatial partitions: the halo links between the stripes of a
 * sample group, the sums on the swarmx tree, and the executor's blocking
 * calls into them (replica.h). */
#include "wjob.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "msg.h"
#include "msgcheck.h"

/* ---- the compute thread's side (exec_parts) ---- */

/* The stage of the job, as the compute task it runs sees it. */
static bool wns__eval(const wn_job *j)
{
    return j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS;
}

/* Whether the rows the posted exchange expects from direction d are in. */
static bool wns__arrived(const wn_stripes *p, int d)
{
    size_t want = d == 0 ? p->h->n_from_up : p->h->n_from_down;
    if (!want)
        return true;
    const wn_halo_in *in = &p->in[d][p->head[d]];
    return p->nq[d] > 0 && in->got == in->total;
}

/* Waits, holding mu, until done(p) or the job ends; the time goes to
 * wait_sec. */
static int wns__wait(wn_stripes *p, bool (*done)(const wn_stripes *p))
{
    double t0 = wn__now();
    while (!p->err && !done(p))
        pthread_cond_wait(&p->cv, &p->mu);
    p->wait_sec += wn__now() - t0;
    return p->err;
}

static bool wns__halo_done(const wn_stripes *p)
{
    return p->sent && p->sends == 0 && wns__arrived(p, 0) && wns__arrived(p, 1);
}

static bool wns__sum_done(const wn_stripes *p)
{
    return p->sent && p->sends == 0 && p->sum_done;
}

/* Takes the message at the head of direction d into dst (n floats),
 * checking it is the one this exchange expects. */
static int wns__take(wn_stripes *p, int d, float *dst, size_t n)
{
    if (!n)
        return 0;
    wn_halo_in *in = &p->in[d][p->head[d]];
    int rc = 0;
    if (in->tag != p->tag || in->step != p->step || in->eval != p->eval || in->total != n) {
        log_warn("job %s: halo rows from the stripe %s: tag %u of step %llu%s, %llu floats; "
                 "expected tag %u of step %llu%s, %zu floats", p->job->id, d ? "below" : "above",
                 in->tag, (unsigned long long)in->step, in->eval ? " (evaluation)" : "",
                 (unsigned long long)in->total, p->tag, (unsigned long long)p->step,
                 p->eval ? " (evaluation)" : "", n);
        rc = -EPROTO;
    } else {
        memcpy(dst, in->buf, n * sizeof(float));
    }
    p->head[d] = (p->head[d] + 1) % 2;
    p->nq[d]--;
    return rc;
}

static int wns__exchange_begin(void *ctx, uint32_t tag, const exec_halo *h)
{
    wn_stripes *p = ctx;
    pthread_mutex_lock(&p->mu);
    if (p->err) {
        pthread_mutex_unlock(&p->mu);
        return p->err;
    }
    p->want = WNS_HALO;
    p->tag = tag;
    p->step = p->job->step;
    p->eval = wns__eval(p->job);
    p->h = h;
    p->sent = false;
    pthread_mutex_unlock(&p->mu);
    uv_async_send(&p->wake);
    return 0;
}

static int wns__exchange_end(void *ctx, uint32_t tag, const exec_halo *h)
{
    wn_stripes *p = ctx;
    pthread_mutex_lock(&p->mu);
    if (p->want != WNS_HALO || p->tag != tag || p->h != h) { /* the executor's own mistake */
        pthread_mutex_unlock(&p->mu);
        return -EPROTO;
    }
    int rc = wns__wait(p, wns__halo_done);
    if (!rc)
        rc = wns__take(p, 0, h->from_up, h->n_from_up);
    if (!rc)
        rc = wns__take(p, 1, h->from_down, h->n_from_down);
    if (rc && !p->err)
        p->err = rc;
    p->want = WNS_IDLE;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

static int wns__sum(void *ctx, uint32_t tag, bool batch, double *v, size_t count)
{
    wn_stripes *p = ctx;
    if (count > MSGCHECK_MAX_COLLECTIVE)
        return -E2BIG;
    pthread_mutex_lock(&p->mu);
    if (p->err) {
        pthread_mutex_unlock(&p->mu);
        return p->err;
    }
    p->want = WNS_SUM;
    p->tag = tag;
    p->step = p->job->step;
    p->eval = wns__eval(p->job);
    p->v = v;
    p->count = count;
    p->all = batch;
    p->sent = p->sum_done = false;
    pthread_mutex_unlock(&p->mu);
    uv_async_send(&p->wake);
    pthread_mutex_lock(&p->mu);
    int rc = wns__wait(p, wns__sum_done);
    p->want = WNS_IDLE;
    pthread_mutex_unlock(&p->mu);
    return rc;
}

exec_parts wn_stripes_exec(wn_stripes *p, bool sync_batchnorm)
{
    exec_parts e = {.part = (int)p->part, .parts = (int)p->parts, .sp = &p->sp,
                    .sync_batchnorm = sync_batchnorm, .exchange_begin = wns__exchange_begin,
                    .exchange_end = wns__exchange_end, .sum = wns__sum, .ctx = p};
    return e;
}

double wn_stripes_take_wait(wn_stripes *p)
{
    pthread_mutex_lock(&p->mu);
    double s = p->wait_sec;
    p->wait_sec = 0;
    pthread_mutex_unlock(&p->mu);
    return s;
}

void wn_stripes_abort(wn_stripes *p, int err)
{
    pthread_mutex_lock(&p->mu);
    if (!p->err)
        p->err = err;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- the loop's side: sending what the compute thread posted ---- */

static void wns__sent(void *arg, int status)
{
    wn_stripes *p = arg;
    pthread_mutex_lock(&p->mu);
    p->sends--;
    if (status < 0 && !p->err)
        p->err = status;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* n floats from src to a neighbour, in frames of at most a chunk. */
static int wns__send_rows(wn_stripes *p, conn *c, const float *src, size_t n)
{
    uint64_t chunk = p->job->plan->chunk_elems;
    if (!c)
        return -ENOTCONN;
    for (uint64_t off = 0; off < n; off += chunk) {
        Appliance__Halo h = APPLIANCE__HALO__INIT;
        h.step = p->step;
        h.tag = p->tag;
        h.eval = p->eval;
        h.offset = off;
        h.count = n - off < chunk ? n - off : chunk;
        h.total = n;
        ENVELOPE(env, halo, HALO, &h);
        int rc = conn_send(c, &env, src + off, (uint32_t)(h.count * sizeof(float)), wns__sent, p);
        if (rc < 0)
            return rc;
        pthread_mutex_lock(&p->mu);
        p->sends++;
        pthread_mutex_unlock(&p->mu);
        p->halo_bytes += h.count * sizeof(float);
    }
    return 0;
}

static int wns__send_sum(wn_stripes *p)
{
    conn *up = conn_link_conn(&p->job->up);
    if (!up)
        return -ENOTCONN;
    Appliance__Collective c = APPLIANCE__COLLECTIVE__INIT;
    c.step = p->step;
    c.tag = p->tag;
    c.group = p->group;
    c.all = p->all;
    c.count = (uint32_t)p->count;
    c.eval = p->eval;
    ENVELOPE(env, collective, COLLECTIVE, &c);
    int rc = conn_send(up, &env, p->v, (uint32_t)(p->count * sizeof(double)), wns__sent, p);
    if (rc < 0)
        return rc;
    pthread_mutex_lock(&p->mu);
    p->sends++;
    pthread_mutex_unlock(&p->mu);
    p->sums++;
    return 0;
}

static void wns__wake(uv_async_t *a)
{
    wn_stripes *p = a->data;
    pthread_mutex_lock(&p->mu);
    int want = p->sent || p->err ? WNS_IDLE : p->want;
    pthread_mutex_unlock(&p->mu);
    if (want == WNS_IDLE)
        return;
    int rc = 0;
    if (want == WNS_HALO) {
        const exec_halo *h = p->h;
        if (h->n_up)
            rc = wns__send_rows(p, conn_link_conn(&p->above), h->up, h->n_up);
        if (!rc && h->n_down)
            rc = wns__send_rows(p, p->below, h->down, h->n_down);
    } else {
        rc = wns__send_sum(p);
    }
    pthread_mutex_lock(&p->mu);
    p->sent = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    if (rc < 0)
        wn__fault(p->job->n, p->job, "cannot send to the %s: %s",
                  want == WNS_SUM ? "swarmx tree" : "neighbouring stripes", strerror(-rc));
    else if (want == WNS_SUM) /* its total comes behind the weight chunks */
        wn__resume_up(p->job);
}

/* ---- the loop's side: rows arriving ---- */

/* Where a halo frame from direction d lands: the message it belongs to,
 * begun by its first frame in the next free buffer of the ring. */
static void *wns__halo_dest(wn_stripes *p, int d, const Appliance__Envelope *env, uint32_t len,
                            int *err)
{
    const Appliance__Halo *h = env->halo;
    char why[256];
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_HALO ||
        msgcheck_halo(h, p->job->plan, len, why, sizeof(why)) < 0) {
        if (env->msg_case == APPLIANCE__ENVELOPE__MSG_HALO)
            log_warn("job %s: from the stripe %s: %s", p->job->id, d ? "below" : "above", why);
        *err = env->msg_case == APPLIANCE__ENVELOPE__MSG_HALO ? -EINVAL : -EPROTO;
        return NULL;
    }
    if (h->total > p->msg_max) {
        log_warn("job %s: halo rows of %llu floats from the stripe %s; the largest this model "
                 "exchanges is %llu", p->job->id, (unsigned long long)h->total,
                 d ? "below" : "above", (unsigned long long)p->msg_max);
        *err = -EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    wn_halo_in *in = NULL;
    if (p->nq[d] > 0) {
        wn_halo_in *last = &p->in[d][(p->head[d] + p->nq[d] - 1) % 2];
        if (last->got < last->total)
            in = last;
    }
    if (!in && h->offset == 0 && p->nq[d] < 2) {
        in = &p->in[d][(p->head[d] + p->nq[d]) % 2];
        in->total = h->total;
        in->got = 0;
        in->tag = h->tag;
        in->step = h->step;
        in->eval = h->eval;
        p->nq[d]++;
    }
    bool ok = in && in->total == h->total && in->tag == h->tag && in->got == h->offset;
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        log_warn("job %s: halo frame at %llu of %llu (tag %u) from the stripe %s out of order",
                 p->job->id, (unsigned long long)h->offset, (unsigned long long)h->total, h->tag,
                 d ? "below" : "above");
        *err = -EPROTO;
        return NULL;
    }
    return in->buf + h->offset;
}

/* A halo frame landed: the message may be complete. */
static void wns__halo_frame(wn_stripes *p, int d, const Appliance__Envelope *env)
{
    pthread_mutex_lock(&p->mu);
    wn_halo_in *in = &p->in[d][(p->head[d] + p->nq[d] - 1) % 2];
    in->got += env->halo->count;
    if (in->got == in->total)
        pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

void *wn_stripes_collective_dest(wn_stripes *p, const Appliance__Envelope *env, uint32_t len, int *err)
{
    const Appliance__Collective *c = env->collective;
    char why[256];
    if (msgcheck_collective(c, p->job->plan, len, why, sizeof(why)) < 0) {
        log_warn("job %s: from swarmx: %s", p->job->id, why);
        *err = -EINVAL;
        return NULL;
    }
    pthread_mutex_lock(&p->mu);
    bool ok = p->want == WNS_SUM && p->sent && !p->sum_done && c->total && c->tag == p->tag &&
              c->step == p->step && c->eval == p->eval && c->count == p->count &&
              c->all == p->all;
    pthread_mutex_unlock(&p->mu);
    if (!ok) {
        log_warn("job %s: a collective total from swarmx (tag %u of step %llu, %u doubles) that "
                 "this replica did not ask for", p->job->id, c->tag, (unsigned long long)c->step,
                 c->count);
        *err = -EPROTO;
        return NULL;
    }
    return p->v; /* the compute thread waits on it, unread, until sum_done */
}

bool wn_stripes_awaiting_total(wn_stripes *p)
{
    pthread_mutex_lock(&p->mu);
    bool w = p->want == WNS_SUM && p->sent && !p->sum_done && !p->err;
    pthread_mutex_unlock(&p->mu);
    return w;
}

void wn_stripes_collective(wn_stripes *p, const Appliance__Envelope *env)
{
    (void)env;
    pthread_mutex_lock(&p->mu);
    p->sum_done = true;
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
}

/* ---- the links ---- */

static void wns__above_ready(conn *c)
{
    wn_stripes *p = c->data;
    wn_job *j = p->job;
    wn__hello(c, j);
    p->above_ready = true;
    wn__maybe_ready(j);
}

static void *wns__above_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    wn_stripes *p = c->data;
    if (p->job->state == WN_RELEASED) {
        *err = -ECANCELED;
        return NULL;
    }
    return wns__halo_dest(p, 0, env, len, err);
}

static void wns__above_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    wn_stripes *p = c->data;
    if (p->job->state == WN_RELEASED)
        return;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR) {
        if (p->job->state != WN_FINISHED) /* else the job simply ended there first */
            wn__fault(p->job->n, p->job, "the stripe above refused: %s", env->error->message);
        return;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_HALO || !payload) {
        conn_fail(c, -EPROTO, "unexpected %s from the stripe above",
                  frame_msg_name(env->msg_case));
        return;
    }
    wns__halo_frame(p, 0, env);
}

static void wns__above_close(conn *c, int err, const char *reason)
{
    wn_stripes *p = c->data;
    wn_job *j = p->job;
    if (j->state == WN_RELEASED || !p->above_ready)
        return;
    p->above_ready = false;
    if (j->state == WN_FINISHED) /* the job ended there first */
        return;
    wn_stripes_abort(p, -ECONNRESET);
    if (wn_of(j->n)->job == j)
        jobhost_peer_lost(&wn_of(j->n)->jobs, "lost the stripe above, replica %u at %s: %s",
                          j->replica - 1, c->peer_addr, reason);
}

static const conn_ops wns__above_ops = {
    .on_ready = wns__above_ready,
    .on_frame = wns__above_frame,
    .payload_dest = wns__above_dest,
    .on_close = wns__above_close,
};

void wn_stripes_link(wn_stripes *p)
{
    wn_job *j = p->job;
    if (p->part == 0)
        return;
    node *n = j->n;
    conn_link_start(&p->above, n->loop, j->plan->replicas[j->replica - 1]->addr, &n->ccfg,
                    &wns__above_ops, p);
}

/* The stripe below says hello on the connection it dialled. */
static void wns__hello(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    wn_job *j = wn_of(n)->job;
    Appliance__StreamHello *h = env->stream_hello;
    if (!j || strcmp(h->job_id, j->id) != 0 || j->state == WN_ALLOCATING) {
        if (node_defer(n, c, env) < 0)
            conn_fail(c, -ENOENT, "no job %s on this wse-node", h->job_id);
        return;
    }
    char why[256];
    if (msgcheck_stream_hello(h, APPLIANCE__ROLE__ROLE_WSE_NODE, j->plan, why, sizeof(why)) < 0) {
        conn_fail(c, -EINVAL, "%s", why);
        return;
    }
    wn_stripes *p = j->stripes;
    if (!p || p->part + 1 == p->parts || h->index != j->replica + 1) {
        conn_fail(c, -ENOENT, "replica %u is not the stripe below replica %u", h->index,
                  j->replica);
        return;
    }
    if (p->below) {
        conn_fail(c, -EEXIST, "the stripe below is already linked");
        return;
    }
    p->below = c;
    c->user = p;
    wn__maybe_ready(j);
}

static void wns__below_frame(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    wn_stripes *p = c->user;
    if (!p || p->below != c) {
        conn_fail(c, -EPROTO, "halo rows before stream hello");
        return;
    }
    wns__halo_frame(p, 1, env);
}

static void *wns__role_dest(node *n, conn *c, const Appliance__Envelope *env, uint32_t len,
                            int *err)
{
    wn_stripes *p = c->user;
    if (!p || p->below != c) {
        *err = -EPROTO;
        return NULL;
    }
    return wns__halo_dest(p, 1, env, len, err);
}

static void wns__conn_close(node *n, conn *c, int err, const char *reason)
{
    wn_stripes *p = c->user;
    if (!p || p->below != c)
        return;
    p->below = NULL;
    c->user = NULL;
    wn_job *j = p->job;
    wn_stripes_abort(p, -ECONNRESET);
    if (j->state == WN_RELEASED) {
        j->stripes_link_closed(j);
        return;
    }
    if (j->state == WN_FINISHED) /* the job ended there first */
        return;
    if (wn_of(n)->job == j)
        jobhost_peer_lost(&wn_of(n)->jobs, "lost the stripe below, replica %u at %s: %s",
                          j->replica + 1, c->peer_addr, reason);
}

void wn_stripes_role(node_role *role)
{
    role->handlers[APPLIANCE__ENVELOPE__MSG_STREAM_HELLO] = wns__hello;
    role->handlers[APPLIANCE__ENVELOPE__MSG_HALO] = wns__below_frame;
    role->payload_dest = wns__role_dest;
    role->on_conn_close = wns__conn_close;
}

/* ---- life ---- */

int wn_stripes_init(wn_job *j, spatial_plan *sp, int n, char *err, size_t errlen)
{
    wn_stripes *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    uint32_t parts = msgcheck_parts(j->plan);
    p->job = j;
    p->part = j->replica % parts;
    p->parts = parts;
    p->group = j->replica / parts;
    p->sp = *sp;
    memset(sp, 0, sizeof(*sp));
    p->msg_max = p->sp.msg_elems * (uint64_t)(n > 0 ? n : 1);
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    j->stripes = p;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++)
            if (!(p->in[d][k].buf = malloc(p->msg_max * sizeof(float) + 1))) {
                snprintf(err, errlen, "out of memory for the halo rows (%llu bytes)",
                         (unsigned long long)(4 * p->msg_max * sizeof(float)));
                return -ENOMEM;
            }
    if (uv_async_init(j->n->loop, &p->wake, wns__wake) < 0) {
        snprintf(err, errlen, "cannot make the halo rows' wake-up");
        return -ENOMEM;
    }
    p->wake.data = p;
    p->wake_open = true;
    return 0;
}

static void wns__above_stopped(conn_link *l)
{
    wn_stripes *p = l->data;
    p->job->stripes_link_closed(p->job);
}

int wn_stripes_stop(wn_stripes *p)
{
    int links = 0;
    wn_stripes_abort(p, -ECANCELED);
    if (p->part > 0) {
        conn_link_stop(&p->above, wns__above_stopped);
        links++;
    }
    if (p->below) {
        conn_close(p->below, 0, "the job ended");
        links++;
    }
    return links;
}

static void wns__wake_closed(uv_handle_t *h)
{
    wn_stripes *p = h->data;
    for (int d = 0; d < 2; d++)
        for (int k = 0; k < 2; k++)
            free(p->in[d][k].buf);
    spatial_plan_free(&p->sp);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p);
}

void wn_stripes_free(wn_stripes *p)
{
    if (!p)
        return;
    if (p->wake_open) {
        uv_close((uv_handle_t *)&p->wake, wns__wake_closed);
        return;
    }
    p->wake.data = p;
    wns__wake_closed((uv_handle_t *)&p->wake);
}
