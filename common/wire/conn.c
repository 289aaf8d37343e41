/* Framed, authenticated TCP connections over libuv; their shared memory with a
 * peer on this host is conn_shm.c's, reconnecting links are conn_link.c's. */
#include "conn.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "conn_shm.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"

typedef struct conn_write {
    uv_write_t req;
    conn *c;
    uint8_t *head;     /* prefix + header (+ a shared-memory payload's place), owned */
    size_t total;      /* bytes on the socket: head + payload */
    size_t logical;    /* bytes of the frame, its payload wherever it went */
    conn_done_fn done; /* may be NULL */
    void *arg;
} conn_write;

/* ---- per-peer byte counts ---- */

#define CONN_PEERS_MAX 256 /* peers remembered after their connections closed */

typedef struct conn_peer {
    Appliance__Role role;
    char name[64];
    uint64_t in, out;       /* of closed connections (live ones are added when reported) */
    uint64_t shm_in, shm_out;
    size_t queued;
    unsigned live;
} conn_peer;

static conn *conn__live;                   /* every live connection */
static conn_peer conn__closed[CONN_PEERS_MAX];
static size_t conn__nclosed;

static conn_peer *conn__peer_of(conn_peer *tab, size_t *n, size_t cap, Appliance__Role role,
                                const char *name)
{
    for (size_t i = 0; i < *n; i++)
        if (tab[i].role == role && strcmp(tab[i].name, name) == 0)
            return &tab[i];
    if (*n == cap)
        return NULL;
    conn_peer *p = &tab[(*n)++];
    memset(p, 0, sizeof(*p));
    p->role = role;
    snprintf(p->name, sizeof(p->name), "%s", name);
    return p;
}

void conn_peers(conn_peer_fn fn, void *arg)
{
    static conn_peer tab[CONN_PEERS_MAX];
    size_t n = conn__nclosed;
    memcpy(tab, conn__closed, n * sizeof(*tab));
    for (conn *c = conn__live; c; c = c->next) {
        if (c->auth != CONN_READY)
            continue;
        conn_peer *p = conn__peer_of(tab, &n, CONN_PEERS_MAX, c->peer_role, c->peer_name);
        if (!p)
            continue;
        p->in += c->bytes_in;
        p->out += c->bytes_out;
        p->shm_in += c->shm_in;
        p->shm_out += c->shm_out;
        p->queued += c->queued;
        p->live++;
    }
    for (size_t i = 0; i < n; i++)
        fn(arg, tab[i].role, tab[i].name, tab[i].in, tab[i].out, tab[i].shm_in, tab[i].shm_out,
           tab[i].queued, tab[i].live);
}

void conn_config_default(conn_config *cfg, const auth_secret *secret, Appliance__Role role,
                         const char *name)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->secret = secret;
    cfg->role = role;
    cfg->name = name;
    cfg->limits.max_header = FRAME_DEFAULT_MAX_HEADER;
    cfg->limits.max_payload = FRAME_DEFAULT_MAX_PAYLOAD;
    cfg->insecure = secret == NULL;
    cfg->high_water = CONN_DEFAULT_HIGH_WATER;
    cfg->queue_max = CONN_DEFAULT_QUEUE_MAX;
    cfg->auth_timeout_ms = CONN_DEFAULT_AUTH_TIMEOUT_MS;
    cfg->connect_timeout_ms = 3000;
}

/* ---- closing ---- */

/* One of the things a closing connection waits for is done: a handle
 * closed, or a resolver request returned. The last one frees it. */
static void conn__unref(conn *c)
{
    if (--c->handles_open > 0)
        return;
    if (c->ops->on_close)
        c->ops->on_close(c, c->close_err, c->close_reason);
    if (c->prev)
        c->prev->next = c->next;
    else
        conn__live = c->next;
    if (c->next)
        c->next->prev = c->prev;
    if (c->auth == CONN_READY) {
        conn_peer *p = conn__peer_of(conn__closed, &conn__nclosed, CONN_PEERS_MAX, c->peer_role,
                                     c->peer_name);
        if (p) {
            p->in += c->bytes_in;
            p->out += c->bytes_out;
            p->shm_in += c->shm_in;
            p->shm_out += c->shm_out;
        }
    }
    frame_reader_deinit(&c->reader);
    conn_shm_free(&c->shm);
    if (c->link)
        c->link_closed(c->link, c);
    free(c);
}

static void conn__handle_closed(uv_handle_t *h)
{
    conn__unref(h->data);
}

/* Neither the socket nor what a read left in rbuf is read any more. */
static void conn__stop_reading(conn *c)
{
    uv_read_stop((uv_stream_t *)&c->tcp);
    c->reading = false;
    uv_idle_stop(&c->rest);
}

void conn_close(conn *c, int err, const char *reason)
{
    if (c->closing)
        return;
    c->closing = true;
    c->close_err = err;
    if (reason != c->close_reason)
        snprintf(c->close_reason, sizeof(c->close_reason), "%s", reason ? reason : "closed");
    if (c->resolving) {
        /* The request lives inside c and its callback still runs (at once
         * when cancelled, later when the resolver is at work): c waits. */
        c->handles_open++;
        uv_cancel((uv_req_t *)&c->resolve_req);
    }
    conn__stop_reading(c);
    uv_timer_stop(&c->timer);
    uv_timer_stop(&c->shm_poll);
    uv_idle_stop(&c->next_turn);
    uv_close((uv_handle_t *)&c->tcp, conn__handle_closed);
    uv_close((uv_handle_t *)&c->timer, conn__handle_closed);
    uv_close((uv_handle_t *)&c->shm_poll, conn__handle_closed);
    uv_close((uv_handle_t *)&c->rest, conn__handle_closed);
    uv_close((uv_handle_t *)&c->next_turn, conn__handle_closed);
}

static void conn__fail_deadline(uv_timer_t *t)
{
    conn *c = t->data;
    conn_close(c, c->close_err, c->close_reason);
}

static void conn__fail_written(void *arg, int status)
{
    conn *c = arg;
    conn_close(c, c->close_err, c->close_reason);
}

void conn_fail(conn *c, int code, const char *fmt, ...)
{
    if (c->closing || c->failing) /* the first reason stands */
        return;
    char msg[192]; /* as long as close_reason */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    c->close_err = code;
    snprintf(c->close_reason, sizeof(c->close_reason), "%s", msg);
    c->failing = true;
    conn__stop_reading(c);
    if (!c->connected) {
        conn_close(c, code, msg);
        return;
    }
    Appliance__Error e = APPLIANCE__ERROR__INIT;
    e.code = code;
    e.message = msg;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_ERROR;
    env.error = &e;
    /* The error frame is best effort: close once written or after 1 s. */
    enum conn_auth_state saved = c->auth;
    c->auth = CONN_READY;
    int rc = conn_send(c, &env, NULL, 0, conn__fail_written, c);
    c->auth = saved;
    if (rc < 0) {
        conn_close(c, code, msg);
        return;
    }
    uv_timer_stop(&c->timer);
    uv_timer_start(&c->timer, conn__fail_deadline, 1000, 0);
}

/* ---- writing ---- */

/* Bytes sent and not yet read by the peer as far as a producer is
 * concerned: queued on the socket, and in our ring. */
static size_t conn__in_flight(const conn *c)
{
    return c->queued + conn_shm_used(&c->shm);
}

static void conn__shm_poll(uv_timer_t *t);

/* While our ring holds what keeps a producer waiting: the peer is asked to
 * say when it takes more (ShmDrained), and the ring is looked at every
 * millisecond besides, since the peer may have stopped reading what we
 * send (conn_pause) and with it our notices. */
static void conn__shm_watch(conn *c)
{
    conn_shm_wait(&c->shm);
    if (!uv_is_active((uv_handle_t *)&c->shm_poll))
        uv_timer_start(&c->shm_poll, conn__shm_poll, 1, 1);
}

/* A producer told to wait may go on once half the high water is free
 * (the socket has written, or the peer took from our ring). */
static void conn__maybe_drain(conn *c)
{
    if (!c->blocked || c->closing) {
        uv_timer_stop(&c->shm_poll);
        return;
    }
    bool ring = conn_shm_used(&c->shm) > 0;
    if (conn__in_flight(c) > c->cfg->high_water / 2 && ring)
        conn__shm_watch(c);
    if (conn__in_flight(c) <= c->cfg->high_water / 2) {
        uv_timer_stop(&c->shm_poll);
        c->blocked = false;
        if (c->ops->on_drain)
            c->ops->on_drain(c);
    } else if (!ring) {
        uv_timer_stop(&c->shm_poll); /* the socket's writes will say */
    }
}

static void conn__shm_poll(uv_timer_t *t)
{
    conn__maybe_drain(t->data);
}

static void conn__write_done(uv_write_t *req, int status)
{
    conn_write *w = container_of(req, conn_write, req);
    conn *c = w->c;
    c->queued -= w->total;
    if (status == 0)
        c->bytes_out += w->logical;
    free(w->head);
    conn_done_fn done = w->done;
    void *arg = w->arg;
    free(w);
    if (done)
        done(arg, status);
    if (status < 0 && status != UV_ECANCELED && !c->closing) {
        char why[96];
        snprintf(why, sizeof(why), "write failed: %s", uv_strerror(status));
        conn_close(c, status, why);
        return;
    }
    conn__maybe_drain(c);
}

/* Sends a frame: its payload over the socket, or put into our ring, or
 * (shared) already in a shared ring at shared_off, ending at shared_end. */
static int conn__send(conn *c, const Appliance__Envelope *env, const void *payload, uint32_t len,
                      const uint64_t *shared_ref, conn_done_fn done, void *arg)
{
    if (c->closing)
        return -ECANCELED;
    if (c->auth != CONN_READY && env->msg_case != APPLIANCE__ENVELOPE__MSG_HELLO &&
        env->msg_case != APPLIANCE__ENVELOPE__MSG_AUTH_PROOF)
        return -ENOTCONN;
    size_t hlen;
    if (len > c->cfg->limits.max_payload)
        return -EMSGSIZE;
    if (appliance__envelope__get_packed_size(env) > c->cfg->limits.max_header)
        return -EMSGSIZE; /* the peer would refuse it: the caller must split it */
    uint8_t *head = frame_encode_flags(env, len, 0, FRAME_SHM_REF_LEN, &hlen);
    if (!head)
        return -ENOMEM;
    /* a large payload into our ring when the peer mapped it and it has the
     * room: the socket then carries where it lies */
    uint64_t off, end;
    bool shm = shared_ref || (len >= CONN_SHM_MIN_PAYLOAD &&
                              conn_shm_put(&c->shm, payload, len, &off, &end));
    if (shm) {
        if (shared_ref)
            off = shared_ref[0], end = shared_ref[1];
        frame_prefix_encode_flags(head, (uint32_t)(hlen - FRAME_PREFIX_LEN), len,
                                  shared_ref ? FRAME_FLAG_SHM | FRAME_FLAG_SHARED : FRAME_FLAG_SHM);
        for (int i = 0; i < 8; i++) {
            head[hlen + (size_t)i] = (uint8_t)(off >> (8 * i));
            head[hlen + 8 + (size_t)i] = (uint8_t)(end >> (8 * i));
        }
    }
    size_t sock_payload = shm ? FRAME_SHM_REF_LEN : len;
    size_t total = hlen + sock_payload;
    if (c->queued + total > c->cfg->queue_max) {
        /* Producers wait at the high water mark; only a peer that stops
         * reading what it asked for gets here. Dropping one message would
         * leave it with a wrong picture: it goes. */
        free(head);
        char why[192];
        snprintf(why, sizeof(why),
                 "peer does not read: %zu bytes queued for it, more than the limit of %zu "
                 "(max_queued_bytes)", c->queued + total, c->cfg->queue_max);
        conn_close(c, -ENOBUFS, why);
        return -ENOBUFS;
    }
    conn_write *w = malloc(sizeof(*w));
    if (!w) {
        free(head);
        if (shm) /* the peer would never take it: the ring is out of step */
            conn_close(c, -ENOMEM, "out of memory for a frame whose payload is in shared memory");
        return -ENOMEM;
    }
    w->c = c;
    w->head = head;
    w->total = total;
    w->logical = hlen + len;
    w->done = done;
    w->arg = arg;
    uv_buf_t bufs[2] = {uv_buf_init((char *)head, (unsigned)(shm ? total : hlen)),
                        uv_buf_init((char *)(uintptr_t)payload, len)};
    int rc = uv_write(&w->req, (uv_stream_t *)&c->tcp, bufs, len && !shm ? 2 : 1,
                      conn__write_done);
    if (rc < 0) {
        free(head);
        free(w);
        if (shm) /* the peer would never take it: the ring is out of step */
            conn_close(c, rc, "cannot write a frame whose payload is in shared memory");
        return rc;
    }
    if (shm) {
        c->shm_out += len;
        if (!shared_ref) /* a shared payload was put once, by its owner */
            c->turn_put += len;
    }
    c->queued += total;
    if (c->cfg->tap && c->auth == CONN_READY)
        c->cfg->tap(c->cfg->tap_arg, c, env, true);
    return 0;
}

int conn_send(conn *c, const Appliance__Envelope *env, const void *payload, uint32_t len,
              conn_done_fn done, void *arg)
{
    return conn__send(c, env, payload, len, NULL, done, arg);
}

int conn_offer_shared(conn *c, struct shm_ring *ring)
{
    if (c->closing || c->auth != CONN_READY)
        return -ENOTCONN;
    return conn_shm_offer_shared(&c->shm, ring);
}

bool conn_shared_ready(const conn *c, const struct shm_ring *ring)
{
    return !c->closing && conn_shm_shared_ready(&c->shm, ring);
}

int conn_send_shared(conn *c, const Appliance__Envelope *env, const struct shm_ring *ring,
                     uint64_t off, uint64_t end, uint32_t len)
{
    if (!conn_shared_ready(c, ring) || len == 0)
        return -EINVAL;
    uint64_t ref[2] = {off, end};
    return conn__send(c, env, NULL, len, ref, NULL, NULL);
}

int conn_send_msg(conn *c, const Appliance__Envelope *env)
{
    return conn_send(c, env, NULL, 0, NULL, NULL);
}

/* A new turn of the loop after a producer spent a turn's share of our
 * ring (conn_can_send): it may go on. */
static void conn__next_turn(uv_idle_t *t)
{
    conn *c = t->data;
    uv_idle_stop(t);
    c->turn_put = 0;
    conn__maybe_drain(c);
}

bool conn_can_send(conn *c, size_t len)
{
    if (c->closing)
        return false;
    if (c->turn_put >= CONN_TURN_COPY) {
        /* Copying into the ring is the loop's own work (the first pass
         * over a fresh ring faults its pages in: 16 MiB took 0.15 s on a
         * 2-core virtual machine, 0.6 s with AddressSanitizer): a turn's
         * share, then timers and other connections run. */
        c->blocked = true;
        uv_idle_start(&c->next_turn, conn__next_turn);
        return false;
    }
    size_t q = conn__in_flight(c);
    if (q + len <= c->cfg->high_water || q == 0)
        return true;
    c->blocked = true;
    if (conn_shm_used(&c->shm) > 0) {
        /* watched from now on (a take since the first look counts now) */
        conn__shm_watch(c);
        q = conn__in_flight(c);
        if (q + len <= c->cfg->high_water || q == 0) {
            uv_timer_stop(&c->shm_poll);
            c->blocked = false;
            return true;
        }
    }
    return false;
}

/* ---- authentication ---- */

static int conn__send_hello(conn *c)
{
    auth_nonce(c->my_nonce);
    Appliance__Hello h = APPLIANCE__HELLO__INIT;
    h.role = c->cfg->role;
    h.name = (char *)(c->cfg->name ? c->cfg->name : "");
    h.nonce.data = c->my_nonce;
    h.nonce.len = AUTH_NONCE_LEN;
    h.version = FRAME_VERSION;
    h.insecure = c->cfg->insecure;
    if (c->dialer && c->cfg->user)
        h.user = (char *)c->cfg->user;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_HELLO;
    env.hello = &h;
    return conn_send_msg(c, &env);
}

/* ---- shared memory with a peer on this host (conn_shm.h) ---- */

static int conn__shm_send(void *ctx, const Appliance__Envelope *env)
{
    return conn_send_msg(ctx, env);
}

static void conn__shm_fail(void *ctx, int code, const char *why)
{
    conn_fail(ctx, code, "%s", why);
}

static void conn__shm_close(void *ctx, int code, const char *why)
{
    conn_close(ctx, code, why);
}

static void conn__shm_drained(void *ctx)
{
    conn__maybe_drain(ctx);
}

static const conn_shm_ops conn__shm_ops = {
    .send = conn__shm_send,
    .fail = conn__shm_fail,
    .close = conn__shm_close,
    .drained = conn__shm_drained,
};

void conn_charge_send(conn *c, size_t bytes)
{
    c->turn_put += bytes;
}

void conn_charge_read(conn *c, size_t bytes)
{
    c->turn_copied += bytes;
    if (c->turn_copied >= CONN_TURN_COPY)
        c->reader.yield = true; /* as conn__shm_take: the frames after this one wait */
}

/* The frame reader meets a payload in the peer's ring: copied out, and
 * counted against the turn's share. */
static int conn__shm_take(void *ctx, uint64_t off, uint64_t end, uint8_t *dst, uint32_t len,
                          uint16_t flags, char *why, size_t whylen)
{
    conn *c = ctx;
    bool wake;
    int rc = conn_shm_take(&c->shm, off, end, dst, len, flags, &wake, why, whylen);
    if (rc < 0)
        return rc;
    c->bytes_in += len;
    c->shm_in += len;
    c->turn_copied += len;
    if (c->turn_copied >= CONN_TURN_COPY)
        c->reader.yield = true; /* the frames after this one wait for a later turn */
    if (wake && !c->closing && !c->failing && conn_shm_tell_drained(&c->shm) < 0) {
        snprintf(why, whylen, "cannot tell the sender its ring has room");
        return -EIO;
    }
    return 0;
}

static void conn__ready(conn *c)
{
    c->auth = CONN_READY;
    uv_timer_stop(&c->timer);
    conn_shm_ready(&c->shm, c->peer_role, c->peer_name);
    if (c->ops->on_ready)
        c->ops->on_ready(c);
}

/* Picks the key of this connection's proofs once the peer's Hello is in:
 * the cluster secret, or the key of the user a client names. Returns false
 * after failing the connection. */
static bool conn__choose_key(conn *c, const Appliance__Hello *h)
{
    static auth_secret nobody; /* for unknown users: the proof fails as for a wrong key */
    const char *user = h->user ? h->user : "";
    if (c->dialer) {
        snprintf(c->auth_user, sizeof(c->auth_user), "%s", c->cfg->user ? c->cfg->user : "");
        c->key = c->cfg->secret;
        return true;
    }
    if (!user[0]) {
        c->key = c->cfg->secret;
        return true;
    }
    if (!c->cfg->user_key) {
        char name[64];
        msg_printable(name, sizeof(name), user);
        conn_fail(c, -EACCES, "user \"%s\" refused: this daemon takes no user keys, only the "
                  "cluster secret", name);
        return false;
    }
    if (strlen(user) >= sizeof(c->auth_user)) {
        conn_fail(c, -EACCES, "user name longer than %zu characters", sizeof(c->auth_user) - 1);
        return false;
    }
    /* A name with characters no user has matches nobody, and logs as it is. */
    msg_printable(c->auth_user, sizeof(c->auth_user), user);
    c->key = c->cfg->user_key(c->cfg->user_key_arg, c->auth_user);
    if (!c->key) {
        if (nobody.len == 0)
            auth_secret_random(&nobody);
        c->key = &nobody;
    }
    return true;
}

static void conn__auth_frame(conn *c, Appliance__Envelope *env)
{
    const uint8_t *dialer_nonce = c->dialer ? c->my_nonce : c->peer_nonce;
    const uint8_t *acceptor_nonce = c->dialer ? c->peer_nonce : c->my_nonce;
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_HELLO: {
        Appliance__Hello *h = env->hello;
        if (c->auth != CONN_AUTH_WAIT_HELLO) {
            conn_fail(c, -EPROTO, "unexpected second hello");
            return;
        }
        char why[128];
        int rc = msgcheck_hello(h, why, sizeof(why));
        if (rc < 0) {
            conn_fail(c, rc, "%s", why);
            return;
        }
        memcpy(c->peer_nonce, h->nonce.data, AUTH_NONCE_LEN);
        c->peer_role = h->role;
        msg_printable(c->peer_name, sizeof(c->peer_name), h->name);
        if (h->insecure && c->cfg->insecure) {
            conn__ready(c); /* both sides chose to run without authentication */
            return;
        }
        if (h->insecure) {
            conn_fail(c, -EACCES, "refused \"%s\": it runs --insecure (no cluster secret), and "
                      "authentication is required here", c->peer_name);
            return;
        }
        if (c->cfg->insecure) {
            conn_fail(c, -EACCES, "refused \"%s\": it authenticates with a secret, and "
                      "authentication is off here (--insecure)", c->peer_name);
            return;
        }
        if (!conn__choose_key(c, h))
            return;
        uint8_t mac[AUTH_MAC_LEN];
        auth_proof(mac, c->key, c->dialer, c->dialer ? c->my_nonce : c->peer_nonce,
                   c->dialer ? c->peer_nonce : c->my_nonce, c->auth_user);
        Appliance__AuthProof p = APPLIANCE__AUTH_PROOF__INIT;
        p.mac.data = mac;
        p.mac.len = AUTH_MAC_LEN;
        Appliance__Envelope out = APPLIANCE__ENVELOPE__INIT;
        out.msg_case = APPLIANCE__ENVELOPE__MSG_AUTH_PROOF;
        out.auth_proof = &p;
        c->auth = CONN_AUTH_WAIT_PROOF;
        if (conn_send_msg(c, &out) < 0)
            conn_close(c, -EIO, "cannot send authentication proof");
        return;
    }
    case APPLIANCE__ENVELOPE__MSG_AUTH_PROOF:
        if (c->auth != CONN_AUTH_WAIT_PROOF) {
            conn_fail(c, -EPROTO, "authentication proof before hello");
            return;
        }
        if (!auth_verify(env->auth_proof->mac.data, env->auth_proof->mac.len, c->key,
                         !c->dialer, dialer_nonce, acceptor_nonce, c->auth_user)) {
            if (c->auth_user[0])
                conn_fail(c, -EACCES, "authentication failed: wrong key for user \"%s\", or no "
                          "such user", c->auth_user);
            else
                conn_fail(c, -EACCES, "authentication failed: wrong cluster secret");
            return;
        }
        conn__ready(c);
        return;
    case APPLIANCE__ENVELOPE__MSG_ERROR: {
        char why[192], msg[160];
        msg_printable(msg, sizeof(msg), env->error->message);
        snprintf(why, sizeof(why), "refused by peer: %s", msg);
        conn_close(c, env->error->code < 0 ? env->error->code : -EACCES, why);
        return;
    }
    default:
        conn_fail(c, -EACCES, "%s before authentication", frame_msg_name(env->msg_case));
        return;
    }
}

/* ---- reading ---- */

static int conn__on_frame(void *ctx, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    conn *c = ctx;
    if (c->closing || c->failing) /* frames behind the one that failed it, in the same read */
        return -ECANCELED;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR)
        msg_printable(c->peer_error, sizeof(c->peer_error), env->error->message);
    if (c->auth != CONN_READY) {
        if (len > 0) {
            conn_fail(c, -EACCES, "payload before authentication");
            return -EACCES;
        }
        conn__auth_frame(c, env);
    } else if (conn_shm_frame(&c->shm, env)) {
        /* the peer's rings, once mapped, are read */
        c->reader.shm_ok = c->shm.rx != NULL || c->shm.rx_shared != NULL;
        if (len > 0 && !c->closing)
            conn_fail(c, -EPROTO, "a shared-memory set-up message with a payload");
    } else {
        if (c->cfg->tap)
            c->cfg->tap(c->cfg->tap_arg, c, env, false);
        c->ops->on_frame(c, env, payload, len);
    }
    return c->closing ? -ECANCELED : 0;
}

static void *conn__payload_dest(void *ctx, const Appliance__Envelope *env, uint32_t len, int *err)
{
    conn *c = ctx;
    if (c->auth != CONN_READY || c->closing || c->failing) {
        *err = -EACCES;
        return NULL;
    }
    return c->ops->payload_dest ? c->ops->payload_dest(c, env, len, err) : NULL;
}

static void conn__alloc(uv_handle_t *h, size_t suggested, uv_buf_t *buf)
{
    conn *c = h->data;
    uint8_t *dst;
    size_t len;
    if (frame_reader_direct(&c->reader, &dst, &len) && len >= sizeof(c->rbuf) / 4) {
        /* Large payload: the socket reads straight into its destination. */
        *buf = uv_buf_init((char *)dst, len > (1u << 30) ? (1u << 30) : (unsigned)len);
        return;
    }
    *buf = uv_buf_init((char *)c->rbuf, sizeof(c->rbuf));
}

static void conn__read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf);
static void conn__feed_rest(uv_idle_t *t);

/* Reads the socket exactly when frames may be delivered and nothing read
 * waits to be fed, and feeds what waits in a later turn of the loop. Called
 * after everything that changes one of those. */
static void conn__sync_reading(conn *c)
{
    if (c->closing || c->failing || !c->connected)
        return;
    bool want = !c->paused && c->rest_len == 0 && !c->turn_spent;
    if (want && !c->reading) {
        int rc = uv_read_start((uv_stream_t *)&c->tcp, conn__alloc, conn__read);
        if (rc < 0) {
            conn_close(c, rc, "cannot resume reading");
            return;
        }
        c->reading = true;
    } else if (!want && c->reading) {
        uv_read_stop((uv_stream_t *)&c->tcp);
        c->reading = false;
    }
    if (!c->paused && (c->rest_len > 0 || c->turn_spent)) {
        uv_idle_start(&c->rest, conn__feed_rest); /* once a turn, before the poll */
    } else {
        uv_idle_stop(&c->rest);
    }
}

/* Feeds len bytes at rbuf + off to the reader, up to the frame that took
 * the turn's share of the peer's ring; the rest is kept for a later turn.
 * The share is the turn's, not the read's: libuv reads a socket again in
 * the same turn while its reads fill the buffer. */
static void conn__feed(conn *c, size_t off, size_t len)
{
    size_t used = 0;
    c->rest_len = 0; /* the owner may pause and resume inside: nothing waits meanwhile */
    int rc = frame_reader_feed_part(&c->reader, c->rbuf + off, len, &used);
    if (rc < 0) {
        if (!c->closing && rc != -ECANCELED)
            conn_fail(c, rc, "%s", c->reader.error_text);
        return;
    }
    if (used < len) {
        c->rest_off = (uint32_t)(off + used);
        c->rest_len = (uint32_t)(len - used);
    }
    if (c->turn_copied >= CONN_TURN_COPY)
        c->turn_spent = true; /* no more reads in this turn */
    conn__sync_reading(c);
}

/* Runs once a turn, before the poll, while bytes wait or the turn's share
 * was spent, and the connection is neither paused nor closing
 * (conn__sync_reading and conn__stop_reading stop it): a new turn's share. */
static void conn__feed_rest(uv_idle_t *t)
{
    conn *c = t->data;
    c->turn_copied = 0;
    c->turn_spent = false;
    if (c->rest_len > 0)
        conn__feed(c, c->rest_off, c->rest_len);
    else
        conn__sync_reading(c);
}

static void conn__read(uv_stream_t *s, ssize_t n, const uv_buf_t *buf)
{
    conn *c = s->data;
    if (c->closing || c->failing)
        return;
    if (n < 0) {
        if (n == UV_EOF && c->peer_error[0]) {
            char why[192];
            snprintf(why, sizeof(why), "closed by peer: %s", c->peer_error);
            conn_close(c, -ECONNRESET, why);
        } else if (n == UV_EOF)
            conn_close(c, -ECONNRESET, "peer closed the connection");
        else {
            char why[96];
            snprintf(why, sizeof(why), "read failed: %s", uv_strerror((int)n));
            conn_close(c, (int)n, why);
        }
        return;
    }
    if (n == 0)
        return;
    c->bytes_in += (uint64_t)n;
    if ((uint8_t *)buf->base == c->rbuf) {
        conn__feed(c, 0, (size_t)n);
        return;
    }
    int rc = frame_reader_advance(&c->reader, (size_t)n);
    if (rc < 0 && !c->closing && rc != -ECANCELED)
        conn_fail(c, rc, "%s", c->reader.error_text);
}

void conn_pause(conn *c)
{
    if (c->closing || c->paused || !c->connected)
        return;
    c->paused = true;
    c->reader.yield = true; /* in a feed: the frames after this one wait */
    conn__sync_reading(c);
}

void conn_resume(conn *c)
{
    if (c->closing || c->failing || !c->paused)
        return;
    c->paused = false;
    conn__sync_reading(c);
}

/* ---- set-up ---- */

static void conn__auth_deadline(uv_timer_t *t)
{
    conn *c = t->data;
    conn_fail(c, -ETIMEDOUT, "not authenticated within %u ms", c->cfg->auth_timeout_ms);
}

static void conn__connect_deadline(uv_timer_t *t)
{
    conn *c = t->data;
    char why[160];
    snprintf(why, sizeof(why), "cannot connect to %s: no answer within %u ms", c->peer_addr,
             c->cfg->connect_timeout_ms);
    conn_close(c, -ETIMEDOUT, why);
}

static conn *conn__new(uv_loop_t *loop, const conn_config *cfg, const conn_ops *ops, void *data)
{
    conn *c = calloc(1, sizeof(*c));
    if (!c)
        return NULL;
    c->loop = loop;
    c->cfg = cfg;
    c->ops = ops;
    c->data = data;
    uv_tcp_init(loop, &c->tcp);
    uv_timer_init(loop, &c->timer);
    uv_timer_init(loop, &c->shm_poll);
    c->shm_poll.data = c;
    uv_idle_init(loop, &c->rest);
    c->rest.data = c;
    uv_idle_init(loop, &c->next_turn);
    c->next_turn.data = c;
    c->tcp.data = c;
    c->timer.data = c;
    c->handles_open = 5;
    conn_shm_init(&c->shm, &conn__shm_ops, c, &c->tcp, cfg->shm_ring, cfg->role, cfg->name);
    c->next = conn__live;
    if (conn__live)
        conn__live->prev = c;
    conn__live = c;
    frame_sink sink = {.payload_dest = conn__payload_dest,
                       .on_frame = conn__on_frame,
                       .shm_take = conn__shm_take,
                       .ctx = c};
    frame_reader_init(&c->reader, &cfg->limits, &sink);
    return c;
}

static void conn__start(conn *c)
{
    c->connected = true;
    uv_tcp_nodelay(&c->tcp, 1);
    uv_timer_start(&c->timer, conn__auth_deadline, c->cfg->auth_timeout_ms, 0);
    conn__sync_reading(c);
    if (c->closing)
        return;
    int rc = conn__send_hello(c);
    if (rc < 0)
        conn_close(c, rc, "cannot start the connection");
}

conn *conn_accept(uv_stream_t *server, const conn_config *cfg, const conn_ops *ops, void *data)
{
    conn *c = conn__new(server->loop, cfg, ops, data);
    if (!c)
        return NULL;
    if (uv_accept(server, (uv_stream_t *)&c->tcp) < 0) {
        conn_close(c, -EIO, "accept failed");
        return NULL;
    }
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    char ip[INET6_ADDRSTRLEN] = "?";
    int port = 0;
    if (uv_tcp_getpeername(&c->tcp, (struct sockaddr *)&ss, &len) == 0) {
        if (ss.ss_family == AF_INET) {
            uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in *)&ss)->sin_port);
        } else if (ss.ss_family == AF_INET6) {
            uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
            port = ntohs(((struct sockaddr_in6 *)&ss)->sin6_port);
        }
    }
    snprintf(c->peer_addr, sizeof(c->peer_addr), "%s:%d", ip, port);
    snprintf(c->peer_ip, sizeof(c->peer_ip), "%s", ip);
    conn__start(c);
    return c;
}

static void conn__connected(uv_connect_t *req, int status)
{
    conn *c = container_of(req, conn, connect_req);
    if (c->closing)
        return;
    if (status < 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot connect to %s: %s", c->peer_addr, uv_strerror(status));
        conn_close(c, status, why);
        return;
    }
    conn__start(c);
}

static void conn__resolved(uv_getaddrinfo_t *req, int status, struct addrinfo *res)
{
    conn *c = container_of(req, conn, resolve_req);
    c->resolving = false;
    if (c->closing) { /* conn_close counted this request */
        uv_freeaddrinfo(res);
        conn__unref(c);
        return;
    }
    if (status < 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot resolve %s: %s", c->peer_addr, uv_strerror(status));
        conn_close(c, status, why);
        uv_freeaddrinfo(res);
        return;
    }
    int rc = uv_tcp_connect(&c->connect_req, &c->tcp, res->ai_addr, conn__connected);
    uv_freeaddrinfo(res);
    if (rc < 0) {
        char why[128];
        snprintf(why, sizeof(why), "cannot connect to %s: %s", c->peer_addr, uv_strerror(rc));
        conn_close(c, rc, why);
    }
}

conn *conn_connect(uv_loop_t *loop, const char *host, int port, const conn_config *cfg,
                   const conn_ops *ops, void *data)
{
    conn *c = conn__new(loop, cfg, ops, data);
    if (!c)
        return NULL;
    c->dialer = true;
    snprintf(c->peer_addr, sizeof(c->peer_addr), "%s:%d", host, port);
    /* Until connected; conn__start replaces it with the authentication deadline. */
    if (cfg->connect_timeout_ms)
        uv_timer_start(&c->timer, conn__connect_deadline, cfg->connect_timeout_ms, 0);
    char service[16];
    snprintf(service, sizeof(service), "%d", port);
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM};
    c->resolving = true;
    int rc = uv_getaddrinfo(loop, &c->resolve_req, conn__resolved, host, service, &hints);
    if (rc < 0) {
        c->resolving = false;
        char why[128];
        snprintf(why, sizeof(why), "cannot resolve %s: %s", c->peer_addr, uv_strerror(rc));
        conn_close(c, rc, why);
    }
    return c;
}

int conn_addr_parse(const char *s, char *host, size_t hostlen, int *port)
{
    const char *colon;
    const char *h = s;
    size_t hl;
    if (s[0] == '[') {
        const char *end = strchr(s, ']');
        if (!end || end[1] != ':')
            return -EINVAL;
        h = s + 1;
        hl = (size_t)(end - h);
        colon = end + 1;
    } else {
        colon = strrchr(s, ':');
        if (!colon)
            return -EINVAL;
        hl = (size_t)(colon - s);
    }
    if (hl == 0 || hl >= hostlen)
        return -EINVAL;
    char *endp;
    long p = strtol(colon + 1, &endp, 10);
    if (*endp || endp == colon + 1 || p < 0 || p > 65535)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = 0;
    *port = (int)p;
    return 0;
}

int conn_listen(uv_loop_t *loop, uv_tcp_t *server, const char *hostport, uv_connection_cb cb,
                char *err, size_t errlen)
{
    char host[256];
    int port;
    if (conn_addr_parse(hostport, host, sizeof(host), &port) < 0) {
        snprintf(err, errlen, "bad listen address \"%s\": expected HOST:PORT", hostport);
        return -EINVAL;
    }
    struct sockaddr_storage ss;
    if (uv_ip4_addr(host, port, (struct sockaddr_in *)&ss) < 0 &&
        uv_ip6_addr(host, port, (struct sockaddr_in6 *)&ss) < 0) {
        snprintf(err, errlen, "bad listen address \"%s\": HOST must be a numeric IP", hostport);
        return -EINVAL;
    }
    uv_tcp_init(loop, server);
    int rc = uv_tcp_bind(server, (struct sockaddr *)&ss, 0);
    if (rc == 0)
        rc = uv_listen((uv_stream_t *)server, 128, cb);
    if (rc < 0) {
        snprintf(err, errlen, "cannot listen on %s: %s", hostport, uv_strerror(rc));
        return rc;
    }
    return 0;
}

int conn_sockname(const uv_tcp_t *tcp, char *out, size_t outlen)
{
    struct sockaddr_storage ss;
    int len = sizeof(ss);
    int rc = uv_tcp_getsockname(tcp, (struct sockaddr *)&ss, &len);
    if (rc < 0)
        return rc;
    char ip[INET6_ADDRSTRLEN];
    if (ss.ss_family == AF_INET6) {
        uv_ip6_name((struct sockaddr_in6 *)&ss, ip, sizeof(ip));
        snprintf(out, outlen, "[%s]:%d", ip, ntohs(((struct sockaddr_in6 *)&ss)->sin6_port));
    } else {
        uv_ip4_name((struct sockaddr_in *)&ss, ip, sizeof(ip));
        snprintf(out, outlen, "%s:%d", ip, ntohs(((struct sockaddr_in *)&ss)->sin_port));
    }
    return 0;
}
