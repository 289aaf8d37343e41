/* A connection's shared memory with a peer on this host: which connections
 * share memory, the offer of our ring (ShmOffer), the answer to the peer's
 * offer (ShmReply), the notice that we took from the peer's ring
 * (ShmDrained), and the use of both rings for payloads. The ring itself is
 * shm.h's.
 *
 * The connection (conn.c) holds one conn_shm, hands it the set-up messages
 * and the ring references its frame reader meets, and does what it asks
 * through conn_shm_ops; this module knows nothing else of the connection.
 * Not for the daemons: they see only conn_config.shm_ring and conn.h. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "envelope.pb-c.h"

struct shm_ring;

/* What the shared memory asks of its connection; ctx is conn_shm.ctx. */
typedef struct conn_shm_ops {
    /* Sends a message without payload: 0, or a negative code. */
    int (*send)(void *ctx, const Appliance__Envelope *env);
    /* The peer broke the protocol: an Error frame with code and why, then
     * the connection closes. */
    void (*fail)(void *ctx, int code, const char *why);
    /* Closes the connection. */
    void (*close)(void *ctx, int code, const char *why);
    /* The peer took from our ring and said so: a producer may go on. */
    void (*drained)(void *ctx);
} conn_shm_ops;

typedef struct conn_shm {
    const conn_shm_ops *ops;
    void *ctx;
    uv_tcp_t *tcp;              /* the connection's socket: where its two ends are */
    size_t ring;                /* bytes of the ring we offer; 0: none offered, none taken */
    Appliance__Role role;       /* ours */
    const char *name;           /* ours, or NULL */
    Appliance__Role peer_role;  /* from the peer's Hello, once authenticated */
    const char *peer_name;      /* printable; lives as long as the connection */
    struct shm_ring *tx;        /* our ring for what we send: offered, then (tx_on) used */
    struct shm_ring *rx;        /* the peer's ring for what it sends, mapped */
    struct shm_ring *shared;    /* a shared ring of ours offered to the peer (a
                                 * reference), or NULL */
    int shared_slot;            /* the peer's slot in it */
    unsigned shared_asked;      /* offers of shared rings not answered yet (the last
                                 * is shared's, those before of rings replaced) */
    struct shm_ring *rx_shared; /* the peer's shared ring, mapped */
    bool tx_on;                 /* the peer mapped tx */
    bool shared_on;             /* the peer mapped shared: it reads shared_slot */
    bool answered;              /* our offer was answered */
    bool offered;               /* the peer offered its ring (once) */
} conn_shm;

/* Before the connection does anything: no ring, ours or the peer's. ring,
 * role and name: conn_config's shm_ring, role and name. */
void conn_shm_init(conn_shm *s, const conn_shm_ops *ops, void *ctx, uv_tcp_t *tcp, size_t ring,
                   Appliance__Role role, const char *name);

/* The connection is authenticated with a peer of peer_role and peer_name:
 * our ring is offered, where the peer is on this host and both ends
 * stream. */
void conn_shm_ready(conn_shm *s, Appliance__Role peer_role, const char *peer_name);

/* A message after authentication: true when it was one of the shared
 * memory's (ShmOffer, ShmReply, ShmDrained), handled here; the owner never
 * sees those. */
bool conn_shm_frame(conn_shm *s, const Appliance__Envelope *env);

/* Offers the peer a slot of our shared ring (shm.h), where the peer is on
 * this host and both ends stream; the connection keeps a reference to the
 * ring until it closes. 0, or -ENOTSUP (not such a peer, or an offer
 * made already), -ENOSPC (no slot left), or the send's negative code. */
int conn_shm_offer_shared(conn_shm *s, struct shm_ring *ring);

/* The peer mapped ring, our shared ring: a payload put there may be sent
 * to it as a reference (FRAME_FLAG_SHARED). */
bool conn_shm_shared_ready(const conn_shm *s, const struct shm_ring *ring);

/* Copies the payload of len bytes at off ending at end out of the peer's
 * ring, or its shared ring where flags has FRAME_FLAG_SHARED, into dst
 * (shm_ring_take). *wake: the peer waits for room (conn_shm_tell_drained).
 * 0, or -EPROTO with why filled. */
int conn_shm_take(conn_shm *s, uint64_t off, uint64_t end, uint8_t *dst, uint32_t len,
                  uint16_t flags, bool *wake, char *why, size_t whylen);

/* Tells the peer we took from its ring (ShmDrained). 0, or a negative
 * code. */
int conn_shm_tell_drained(conn_shm *s);

/* Copies len bytes of src into our ring when the peer mapped it and it has
 * the room: true, with where they lie (shm_ring_put); false otherwise. */
bool conn_shm_put(conn_shm *s, const void *src, size_t len, uint64_t *off, uint64_t *end);

/* Bytes in our ring the peer has not taken yet; 0 while it is not in use. */
size_t conn_shm_used(const conn_shm *s);

/* Asks the peer to say when it next takes from our ring (in use). */
void conn_shm_wait(conn_shm *s);

/* Unmaps the rings and gives the shared ring's slot back (the connection
 * is gone). */
void conn_shm_free(conn_shm *s);
