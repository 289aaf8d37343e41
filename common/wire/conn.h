/* A framed, authenticated connection over libuv TCP.
 *
 * Both ends authenticate (auth.h) before anything else passes. Writes go
 * straight from the caller's buffers (the header is encoded into a small
 * buffer, the payload is not copied) and are bounded: conn_can_send() tells a
 * producer to wait for on_drain instead of queueing more, and conn_send()
 * refuses outright past the hard cap. Reads of a payload go straight into the
 * destination the owner names in payload_dest. Two daemons on one host
 * share memory for large payloads (conn_config.shm_ring, conn_shm.h); a
 * connection dialled again whenever it closes is a link (conn_link.h). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "auth.h"
#include "conn_shm.h"
#include "frame.h"
#include "util.h"

typedef struct conn conn;
typedef struct conn_link conn_link; /* a reconnecting link: conn_link.h */

typedef struct conn_ops {
    /* Authenticated: the connection may now send and receive. */
    void (*on_ready)(conn *c);
    /* A frame after authentication. env and a reader-owned payload are freed
     * after the call returns. */
    void (*on_frame)(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len);
    /* Optional: where a payload goes (see frame_sink). */
    void *(*payload_dest)(conn *c, const Appliance__Envelope *env, uint32_t len, int *err);
    /* Optional: the write queue fell below the low watermark after a
     * producer was told to wait. */
    void (*on_drain)(conn *c);
    /* The last callback: the connection is closed and is freed right after. */
    void (*on_close)(conn *c, int err, const char *reason);
} conn_ops;

/* The key of a user a client names in its Hello; NULL for an unknown user. */
typedef const auth_secret *(*conn_user_key_fn)(void *arg, const char *user);

typedef struct conn_config {
    const auth_secret *secret;  /* the cluster secret, or the user's key when user is set;
                                 * NULL only when insecure */
    bool insecure;              /* no secret: Hello only, and only with peers that are
                                 * insecure too; peers with a secret are refused */
    const char *user;           /* dialling: authenticate as this user, secret being its
                                 * key; NULL or "": with the cluster secret */
    conn_user_key_fn user_key;  /* accepting: finds a user's key; NULL: users refused */
    void *user_key_arg;         /* passed to user_key */
    Appliance__Role role;       /* our role, sent in Hello */
    const char *name;           /* our name, sent in Hello */
    frame_limits limits;        /* on frames we accept */
    size_t high_water;          /* queued bytes above which conn_can_send is false */
    size_t queue_max;           /* queued bytes above which conn_send refuses and closes */
    uint32_t auth_timeout_ms;   /* a peer that has not authenticated by then is dropped */
    uint32_t connect_timeout_ms; /* a dial not connected by then fails (no answer to SYN) */
    size_t shm_ring;            /* bytes of the shared-memory ring offered to a peer on the
                                 * same host (both ends on loopback) for our large payloads;
                                 * 0: none offered, none taken (shm.h) */
    /* Optional: sees every message sent or received after authentication
     * (the flight recorder). */
    void (*tap)(void *arg, conn *c, const Appliance__Envelope *env, bool out);
    void *tap_arg;
} conn_config;

#define CONN_DEFAULT_HIGH_WATER (16u << 20)  /* queued bytes a producer fills up to */
/* Bytes a turn of the loop copies out of the peer's shared-memory ring
 * before the frames after them wait for a later turn (about what a
 * socket's buffer holds), so that timers and other connections run; and
 * bytes producers put into our ring before conn_can_send has them wait
 * for a later turn (at least one payload a turn goes). */
#define CONN_TURN_COPY (4u << 20)
#define CONN_DEFAULT_QUEUE_MAX (256u << 20)  /* queued bytes per connection, at most */
#define CONN_DEFAULT_AUTH_TIMEOUT_MS 5000u   /* to finish the handshake */
#define CONN_SHM_MIN_PAYLOAD (64u << 10)     /* smaller payloads always go over the socket */

/* Fills a configuration with defaults: 1 MiB headers, 64 MiB payloads, 16 MiB
 * high water, 256 MiB hard cap, 5 s to authenticate. secret may be NULL
 * (then set insecure). */
void conn_config_default(conn_config *cfg, const auth_secret *secret, Appliance__Role role,
                         const char *name);

enum conn_auth_state { CONN_AUTH_WAIT_HELLO, CONN_AUTH_WAIT_PROOF, CONN_READY };

struct conn {
    uv_tcp_t tcp;               /* the socket; first so container_of is trivial */
    uv_timer_t timer;           /* authentication and closing deadlines */
    uv_timer_t shm_poll;        /* while a producer waits for room in our ring */
    uv_idle_t rest;             /* feeds what a read left in rbuf, in a later turn */
    uv_idle_t next_turn;        /* a producer that spent the turn's share goes on */
    uv_connect_t connect_req;   /* dialling side */
    uv_getaddrinfo_t resolve_req;
    uv_loop_t *loop;
    const conn_config *cfg;     /* not owned; outlives the connection */
    const conn_ops *ops;        /* not owned */
    void *data;                 /* the owner's */
    void *user;                 /* per-connection state of the owner, NULL at first */
    int kind;                   /* the owner's classification of the peer, 0 at first */
    conn_link *link;            /* the reconnecting link that owns this dial, or NULL */
    void (*link_closed)(conn_link *l, conn *c); /* set with link: tells it the connection is
                                 * gone, after on_close and before it is freed */
    frame_reader reader;
    bool dialer;                /* we dialled (selects the proof label) */
    enum conn_auth_state auth;
    uint8_t my_nonce[AUTH_NONCE_LEN];
    uint8_t peer_nonce[AUTH_NONCE_LEN];
    Appliance__Role peer_role;  /* from the peer's Hello */
    char peer_name[64];         /* from the peer's Hello */
    char peer_addr[64];         /* "ip:port" as seen on the socket, or the dialled target */
    char peer_ip[48];           /* accepted: the peer's IP alone (per-address limits) */
    const auth_secret *key;     /* the key of this connection's proofs, once chosen */
    char auth_user[64];         /* the user authenticated by key; "": the cluster secret
                                 * (an operator), or an insecure peer */
    size_t queued;              /* bytes handed to uv_write and not yet written */
    bool blocked;               /* a producer was told to wait; on_drain is owed */
    bool connected;             /* the TCP connection is established */
    bool closing;               /* conn_close was called; no more callbacks but on_close */
    bool failing;               /* conn_fail was called: its Error frame is on its way, and
                                 * nothing more the peer sent is read or dispatched */
    bool resolving;             /* a getaddrinfo request is pending */
    bool paused;                /* reading stopped by conn_pause */
    bool reading;               /* the socket is being read (uv_read_start) */
    uint32_t rest_off, rest_len; /* bytes of rbuf read and not yet fed: the socket is
                                 * not read until they are */
    uint64_t turn_copied;       /* bytes taken from the peer's ring in this turn (and
                                 * conn_charge_read's) */
    bool turn_spent;            /* ... CONN_TURN_COPY or more: reading waits for the next */
    uint64_t turn_put;          /* bytes put into our ring (and conn_charge_send's) since
                                 * a producer last waited for a new turn (conn_can_send) */
    int handles_open;           /* handles to close and requests to return before freeing */
    int close_err;              /* passed to on_close */
    char close_reason[192];     /* passed to on_close */
    char peer_error[160];       /* message of the last Error frame the peer sent */
    uint64_t bytes_in;          /* counters for metrics */
    uint64_t bytes_out;
    conn_shm shm;               /* shared memory with a peer on this host: the rings */
    uint64_t shm_in, shm_out;   /* payload bytes through the rings */
    conn *prev, *next;          /* every live connection of the process, for metrics */
    uint8_t rbuf[64 * 1024];    /* read buffer for headers and small payloads */
};

/* Accepts a pending connection on server. Returns NULL on failure. */
conn *conn_accept(uv_stream_t *server, const conn_config *cfg, const conn_ops *ops, void *data);

/* Dials host:port (a name is resolved). The result arrives as on_ready or
 * on_close. Returns NULL when out of memory. */
conn *conn_connect(uv_loop_t *loop, const char *host, int port, const conn_config *cfg,
                   const conn_ops *ops, void *data);

typedef void (*conn_done_fn)(void *arg, int status);

/* Sends env followed by len bytes of payload, written from payload as it is
 * (the caller keeps it alive and unchanged until done runs). Returns 0, after
 * which done(arg, status) runs exactly once; or a negative code (-ECANCELED
 * when closing, -ENOTCONN before authentication, -EMSGSIZE for a header or
 * payload beyond the frame limits, -ENOBUFS past the hard cap of queued
 * bytes: a peer that does not read; the connection is then closed), after
 * which done is not called. */
int conn_send(conn *c, const Appliance__Envelope *env, const void *payload, uint32_t len,
              conn_done_fn done, void *arg);

/* Sends a message without payload. */
int conn_send_msg(conn *c, const Appliance__Envelope *env);

/* A shared ring (shm.h: one copy of what goes to several peers of this
 * host, each reading it through a slot of its own). conn_offer_shared
 * offers the peer a slot of ring, where the peer is on this host and
 * streams: 0, or a negative code (-ENOTSUP: not such a peer, or offered
 * already; -ENOSPC: no slot left), after which its payloads go as
 * conn_send's. The connection holds a reference to ring until it closes.
 * Once the peer mapped it (conn_shared_ready), conn_send_shared sends env
 * with the len bytes that shm_ring_put placed in ring at off, ending at
 * end: the socket carries only where they lie. Each payload put must be
 * sent to every peer that is ready, in the order put (each takes them in
 * turn); the room of the ring is what its slowest reader leaves.
 * conn_send_shared returns as conn_send, or -EINVAL when the peer has not
 * mapped ring. */
int conn_offer_shared(conn *c, struct shm_ring *ring);
bool conn_shared_ready(const conn *c, const struct shm_ring *ring);
int conn_send_shared(conn *c, const Appliance__Envelope *env, const struct shm_ring *ring,
                     uint64_t off, uint64_t end, uint32_t len);

/* True when len more bytes may be queued without passing the high water
 * mark. When false, on_drain runs once the queue has drained. */
bool conn_can_send(conn *c, size_t len);

/* Work the loop did for this connection's frames beyond what conn counts
 * itself (packing or expanding a sparse payload, sstream.h), in bytes of
 * the dense data it went over: counted against the turn's share of
 * putting (conn_can_send is then false until a later turn) or of reading
 * (the frames after the one being delivered wait for a later turn), so
 * that timers and other connections run between such bursts. */
void conn_charge_send(conn *c, size_t bytes);
void conn_charge_read(conn *c, size_t bytes);

/* Stops reading from the peer (TCP pushes back on it) until conn_resume;
 * called while a frame is delivered, the frames read after it wait too. */
void conn_pause(conn *c);
void conn_resume(conn *c);

/* Closes the connection; on_close(err, reason) follows from the loop. */
void conn_close(conn *c, int err, const char *reason);

/* Sends an Error frame with code and message to the peer, then closes. */
void conn_fail(conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

/* Bytes exchanged with each peer, by the role and name its Hello gave:
 * live connections and closed ones together (shm_in and shm_out: the
 * payload bytes of those that came and went through shared memory). fn
 * runs once per peer. */
typedef void (*conn_peer_fn)(void *arg, Appliance__Role role, const char *name, uint64_t in,
                             uint64_t out, uint64_t shm_in, uint64_t shm_out, size_t queued,
                             unsigned live);
void conn_peers(conn_peer_fn fn, void *arg);

/* Splits "HOST:PORT" or "[V6]:PORT". Returns 0 or -EINVAL. */
int conn_addr_parse(const char *s, char *host, size_t hostlen, int *port);

/* Binds and listens on "HOST:PORT" (port 0 picks a free one). Returns 0 or a
 * negative code with a message in err. */
int conn_listen(uv_loop_t *loop, uv_tcp_t *server, const char *hostport, uv_connection_cb cb,
                char *err, size_t errlen);

/* The "ip:port" a bound socket has. */
int conn_sockname(const uv_tcp_t *tcp, char *out, size_t outlen);
