/* A connection's shared memory with a peer on this host (conn_shm.h). */
#include "conn_shm.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "frame.h"
#include "log.h"
#include "msg.h"
#include "shm.h"

static bool conn_shm__addr_loopback(const struct sockaddr_storage *ss)
{
    if (ss->ss_family == AF_INET)
        return (ntohl(((const struct sockaddr_in *)ss)->sin_addr.s_addr) >> 24) == 127;
    if (ss->ss_family == AF_INET6) {
        const struct in6_addr *a = &((const struct sockaddr_in6 *)ss)->sin6_addr;
        return IN6_IS_ADDR_LOOPBACK(a) || (IN6_IS_ADDR_V4MAPPED(a) && a->s6_addr[12] == 127);
    }
    return false;
}

/* Both ends of the connection on a loopback address: the peer is a
 * process of this host (and of this network namespace). */
static bool conn_shm__local_peer(conn_shm *s)
{
    struct sockaddr_storage a, b;
    int la = sizeof(a), lb = sizeof(b);
    return uv_tcp_getpeername(s->tcp, (struct sockaddr *)&a, &la) == 0 &&
           uv_tcp_getsockname(s->tcp, (struct sockaddr *)&b, &lb) == 0 &&
           conn_shm__addr_loopback(&a) && conn_shm__addr_loopback(&b);
}

/* The roles that stream tensors and batches to each other; the
 * coordinator's and the clients' messages are small. */
static bool conn_shm__streams(Appliance__Role r)
{
    return r == APPLIANCE__ROLE__ROLE_MEMORYX || r == APPLIANCE__ROLE__ROLE_SWARMX ||
           r == APPLIANCE__ROLE__ROLE_WORKER || r == APPLIANCE__ROLE__ROLE_WSE_NODE;
}

/* Whether this connection may share memory: it is on, both ends stream,
 * and the peer is on this host. */
static bool conn_shm__wanted(conn_shm *s)
{
    return s->ring && conn_shm__streams(s->role) && conn_shm__streams(s->peer_role) &&
           conn_shm__local_peer(s);
}

void conn_shm_init(conn_shm *s, const conn_shm_ops *ops, void *ctx, uv_tcp_t *tcp, size_t ring,
                   Appliance__Role role, const char *name)
{
    memset(s, 0, sizeof(*s));
    s->ops = ops;
    s->ctx = ctx;
    s->tcp = tcp;
    s->ring = ring;
    s->role = role;
    s->name = name;
    s->peer_name = "";
    s->shared_slot = -1;
}

/* Offers the peer a ring for our large payloads, where it is on this host. */
/* Sends the peer the offer of ring (ShmOffer): our own, or (slot >= 0) a
 * slot of a shared one. 0, or the send's negative code. */
static int conn_shm__offer(conn_shm *s, const struct shm_ring *ring, int slot)
{
    Appliance__ShmOffer o = APPLIANCE__SHM_OFFER__INIT;
    o.pid = (uint32_t)getpid();
    o.fd = shm_ring_fd(ring);
    o.size = shm_ring_map_len(ring);
    o.token.data = (uint8_t *)(uintptr_t)shm_ring_token(ring);
    o.token.len = SHM_TOKEN_LEN;
    o.shared = slot >= 0;
    o.slot = slot >= 0 ? (uint32_t)slot : 0;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_SHM_OFFER;
    env.shm_offer = &o;
    return s->ops->send(s->ctx, &env);
}

void conn_shm_ready(conn_shm *s, Appliance__Role peer_role, const char *peer_name)
{
    s->peer_role = peer_role;
    s->peer_name = peer_name;
    if (!conn_shm__wanted(s))
        return;
    char why[128];
    s->tx = shm_ring_create(s->ring, why, sizeof(why));
    if (!s->tx) {
        log_warn("%s: payloads go over the socket: no shared-memory ring (%s)", s->peer_name, why);
        return;
    }
    if (conn_shm__offer(s, s->tx, -1) < 0) {
        shm_ring_free(s->tx);
        s->tx = NULL;
    }
}

/* The peer offers its ring: mapped where this side takes them and it is on
 * this host, and the answer says so or why not. */
static void conn_shm__offered(conn_shm *s, const Appliance__ShmOffer *o)
{
    if (!o->shared && s->offered) {
        s->ops->fail(s->ctx, -EPROTO, "a second shared-memory offer");
        return;
    }
    if (o->shared) {
        /* a shared ring replaces the one before (each job of the sender
         * has its own): everything sent through that one came before */
        shm_ring_free(s->rx_shared);
        s->rx_shared = NULL;
    } else {
        s->offered = true;
    }
    char why[160] = "";
    struct shm_ring **ring = o->shared ? &s->rx_shared : &s->rx;
    if (!conn_shm__wanted(s))
        snprintf(why, sizeof(why), "%s shares no memory with it (--no-shm, another host, or "
                 "a role that does not stream)", s->name ? s->name : "this end");
    else if (o->shared && o->slot >= SHM_READERS)
        snprintf(why, sizeof(why), "reader slot %u of a shared ring with %d", o->slot,
                 SHM_READERS);
    else
        *ring = shm_ring_open_slot(o->pid, o->fd, o->size, o->token.data, o->token.len,
                                   o->shared ? (int)o->slot : -1, why, sizeof(why));
    Appliance__ShmReply r = APPLIANCE__SHM_REPLY__INIT;
    r.ok = *ring != NULL;
    r.reason = why;
    r.shared = o->shared;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_SHM_REPLY;
    env.shm_reply = &r;
    if (*ring && o->shared)
        log_info("%s (%s) reads what it sends to several peers of this host into a "
                 "%zu KiB shared ring: slot %u is ours", s->peer_name,
                 msg_role_name(s->peer_role), shm_ring_size(*ring) >> 10, o->slot);
    else if (*ring)
        log_info("%s (%s) is on this host: its large payloads come through a %zu KiB "
                 "shared-memory ring", s->peer_name, msg_role_name(s->peer_role),
                 shm_ring_size(*ring) >> 10);
    else
        log_debug("%s (%s): its payloads come over the socket: %s", s->peer_name,
                  msg_role_name(s->peer_role), why);
    if (s->ops->send(s->ctx, &env) < 0)
        s->ops->close(s->ctx, -EIO, "cannot answer a shared-memory offer");
}

/* The answer to the offer of our shared ring: the slot read from now on,
 * or given back. */
static void conn_shm__answered_shared(conn_shm *s, const Appliance__ShmReply *r)
{
    if (s->shared_asked == 0) {
        s->ops->fail(s->ctx, -EPROTO, "an answer to no offer of a shared ring");
        return;
    }
    if (--s->shared_asked > 0 || !s->shared)
        return; /* the answer about a ring replaced since */
    if (r->ok) {
        shm_ring_attach(s->shared, s->shared_slot);
        s->shared_on = true;
        return;
    }
    char why[160];
    msg_printable(why, sizeof(why), r->reason);
    log_debug("%s: our shared ring is not read there: %s", s->peer_name, why);
    shm_ring_release(s->shared, s->shared_slot);
    s->shared_slot = -1;
}

static void conn_shm__answered(conn_shm *s, const Appliance__ShmReply *r)
{
    if (r->shared) {
        conn_shm__answered_shared(s, r);
        return;
    }
    if (!s->tx || s->answered) {
        s->ops->fail(s->ctx, -EPROTO, "a shared-memory answer to no offer");
        return;
    }
    s->answered = true;
    shm_ring_offered(s->tx);
    if (r->ok) {
        s->tx_on = true;
        return;
    }
    char why[160];
    msg_printable(why, sizeof(why), r->reason);
    log_debug("%s: our payloads go over the socket: %s", s->peer_name, why);
    shm_ring_free(s->tx);
    s->tx = NULL;
}

bool conn_shm_frame(conn_shm *s, const Appliance__Envelope *env)
{
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_SHM_OFFER:
        conn_shm__offered(s, env->shm_offer);
        return true;
    case APPLIANCE__ENVELOPE__MSG_SHM_REPLY:
        conn_shm__answered(s, env->shm_reply);
        return true;
    case APPLIANCE__ENVELOPE__MSG_SHM_DRAINED:
        if (!s->tx_on) {
            s->ops->fail(s->ctx, -EPROTO,
                         "a shared-memory drain notice, and no ring of ours in use");
            return true;
        }
        s->ops->drained(s->ctx);
        return true;
    default:
        return false;
    }
}

int conn_shm_offer_shared(conn_shm *s, struct shm_ring *ring)
{
    if (s->shared == ring || !conn_shm__wanted(s))
        return -ENOTSUP;
    if (s->shared) {
        /* another ring (a job before): the peer takes what we sent through
         * it before it maps this one, which replaces it */
        shm_ring_release(s->shared, s->shared_slot);
        shm_ring_free(s->shared);
        s->shared = NULL;
        s->shared_slot = -1;
        s->shared_on = false;
    }
    int slot = shm_ring_reserve(ring);
    if (slot < 0)
        return -ENOSPC;
    int rc = conn_shm__offer(s, ring, slot);
    if (rc < 0) {
        shm_ring_release(ring, slot);
        return rc;
    }
    s->shared = shm_ring_ref(ring);
    s->shared_slot = slot;
    s->shared_asked++;
    return 0;
}

bool conn_shm_shared_ready(const conn_shm *s, const struct shm_ring *ring)
{
    return s->shared_on && s->shared == ring;
}

int conn_shm_take(conn_shm *s, uint64_t off, uint64_t end, uint8_t *dst, uint32_t len,
                  uint16_t flags, bool *wake, char *why, size_t whylen)
{
    struct shm_ring *r = flags & FRAME_FLAG_SHARED ? s->rx_shared : s->rx;
    if (!r) {
        snprintf(why, whylen, "no %sring mapped", flags & FRAME_FLAG_SHARED ? "shared " : "");
        return -EPROTO;
    }
    return shm_ring_take(r, off, end, dst, len, wake, why, whylen);
}

int conn_shm_tell_drained(conn_shm *s)
{
    Appliance__ShmDrained d = APPLIANCE__SHM_DRAINED__INIT;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_SHM_DRAINED;
    env.shm_drained = &d;
    return s->ops->send(s->ctx, &env);
}

bool conn_shm_put(conn_shm *s, const void *src, size_t len, uint64_t *off, uint64_t *end)
{
    return s->tx_on && shm_ring_put(s->tx, src, len, off, end);
}

size_t conn_shm_used(const conn_shm *s)
{
    return s->tx_on ? shm_ring_used(s->tx) : 0;
}

void conn_shm_wait(conn_shm *s)
{
    shm_ring_wait(s->tx);
}

void conn_shm_free(conn_shm *s)
{
    shm_ring_free(s->tx);
    shm_ring_free(s->rx);
    shm_ring_free(s->rx_shared);
    if (s->shared) {
        shm_ring_release(s->shared, s->shared_slot);
        shm_ring_free(s->shared); /* our reference */
    }
    s->tx = s->rx = s->rx_shared = s->shared = NULL;
    s->shared_slot = -1;
    s->tx_on = s->shared_on = false;
}
