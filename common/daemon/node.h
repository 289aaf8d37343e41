/* What every daemon shares: options and configuration, the cluster secret,
 * a listening socket whose connections authenticate before anything else, a
 * reconnecting link to the coordinator with registration and heartbeats,
 * message dispatch by type, and a clean shutdown on SIGTERM/SIGINT. A
 * daemon's main fills a node_role and calls node_run. */
#pragma once

#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <uv.h>

#include "conn.h"
#include "conn_link.h"
#include "flight.h"
#include "looplag.h"
#include "metrics.h"
#include "options.h"

typedef struct node node;

/* A message handler; env and the payload are freed after it returns. */
typedef void (*node_handler)(node *n, conn *c, Appliance__Envelope *env, uint8_t *payload,
                             uint32_t len);

#define NODE_MSG_MAX 48 /* > the largest Envelope oneof number */

/* The options of the daemon frame; a role's own options are in its table
 * (node_role.options) and its own struct. */
typedef struct node_options {
    char listen[128];          /* HOST:PORT to bind; port 0 picks one */
    char advertise[128];       /* HOST:PORT others dial; default: the bound address */
    char coordinator[128];     /* HOST:PORT of the coordinator (not for the coordinator) */
    char host_id[64];          /* the host it counts as running on (host.h); "" when unknown */
    uint64_t host_memory;      /* that host's memory, bytes (host.h); 0 when unknown */
    char secret_file[PATH_MAX];
    bool insecure;             /* --insecure: no secret, only insecure peers */
    char config[PATH_MAX];     /* optional TOML configuration */
    char name[64];             /* component name in logs and listings */
    char port_file[PATH_MAX];  /* written with the bound port once listening */
    char metrics[128];         /* HOST:PORT serving Prometheus /metrics, or "" */
    char trace[PATH_MAX];      /* every stream event appended there (flight.h), or "" */
    uint64_t trace_max;        /* bytes of trace written at most */
    int log_level;
    uint32_t heartbeat_ms;     /* interval of heartbeats */
    /* Limits on peers (docs/security.md). */
    uint32_t max_connections;  /* accepted connections open at once */
    uint32_t max_connections_per_address; /* of them, from one IP address */
    uint32_t auth_timeout_ms;  /* a connection not authenticated by then is closed */
    uint64_t max_frame_header; /* bytes of a frame's protobuf header accepted */
    uint64_t max_frame_payload; /* bytes of a frame's raw payload accepted */
    uint64_t max_queued_bytes; /* bytes queued for one peer before it is dropped */
    uint64_t shm_ring;         /* shared-memory ring offered to a peer on this host */
    bool no_shm;               /* --no-shm: none offered, none taken */
    uint32_t nice;             /* --nice: a lower CPU priority (1 to 19), 0: unchanged */
    bool niced_group;          /* the session's autogroup took it too */
    uint32_t realtime;         /* --realtime: SCHED_FIFO at this priority (1 to 99), 0: no */
} node_options;

#define NODE_DEFAULT_MAX_CONNECTIONS 1024u
#define NODE_DEFAULT_SHM_RING (32u << 20)
#define NODE_DEFAULT_MAX_CONNECTIONS_PER_ADDRESS 256u

typedef struct node_role {
    Appliance__Role role;
    const char *component;            /* "coordinator", "wse-node", ... */
    /* The role's own options (keys, heading, and the struct they fill: set
     * base before node_parse_args), or keys NULL for none. */
    options_table options;
    /* Optional: checks the role's options against each other and the
     * frame's after parsing; returns 0, or -1 after printing why. */
    int (*check_options)(const node_options *frame, void *opts);
    node_handler handlers[NODE_MSG_MAX]; /* by Envelope msg case */
    /* Which messages a client authenticated as a user (not with the cluster
     * secret) may send; anything else closes its connection. */
    bool user_msgs[NODE_MSG_MAX];
    /* Optional hooks. */
    void *(*payload_dest)(node *n, conn *c, const Appliance__Envelope *env, uint32_t len, int *err);
    void (*on_conn_ready)(node *n, conn *c);
    void (*on_conn_close)(node *n, conn *c, int err, const char *reason);
    void (*on_drain)(node *n, conn *c);
    void (*on_registered)(node *n);   /* the coordinator acknowledged us */
    void (*on_coordinator_lost)(node *n);
    /* Optional: what the role's job waits for now, for the flight recorder's
     * dump ("weights of layer fc2 for step 7 from swarmx swarmx-1"). */
    void (*describe_wait)(node *n, char *out, size_t len);
    /* Optional: true while the role's job is computing (a silent stream is
     * then no sign of a stall: no flight recorder dump). */
    bool (*computing)(node *n);
    void (*on_shutdown)(node *n);     /* release the role's resources */
    void (*fill_register)(node *n, Appliance__Register *r);
    /* Optional: the role's own Prometheus metrics (see metrics.h). */
    void (*metrics)(node *n, struct metrics_buf *b);
} node_role;

/* A message that arrived before the state it needs. */
typedef struct node_deferred {
    conn *c;                   /* where it came from */
    uint8_t *packed;           /* the Envelope, packed; owned */
    size_t len;
    uint64_t deadline;         /* uv_now after which the peer is refused */
} node_deferred;

#define NODE_DEFER_MAX 64      /* deferred messages held at once */
#define NODE_DEFER_MS 10000    /* how long one is held */
#define NODE_SILENT_MS 30000   /* a running job's stream silent this long: the flight recorder is logged */

struct node {
    uv_loop_t *loop;
    const node_role *role;
    node_options opt;
    auth_secret secret;
    conn_config ccfg;          /* for every connection of this daemon */
    conn_user_key_fn user_key; /* set before node_run to accept user keys (the coordinator) */
    void *user_key_arg;
    uv_tcp_t server;
    char bound[64];            /* the address actually bound */
    conn_link coord;           /* to the coordinator (not on the coordinator) */
    uint32_t member_id;        /* given by the coordinator; 0 before */
    bool registered;
    uv_timer_t heartbeat;
    uint64_t hb_seq;
    uint64_t coord_heard;      /* uv_now of the last frame from the coordinator */
    uint32_t coord_timeout_ms; /* silent this long, the coordinator is lost (0: never) */
    uv_signal_t sigterm, sigint;
    bool stopping;
    conn **conns;              /* accepted connections still open */
    size_t nconns, capconns;
    node_deferred deferred[NODE_DEFER_MAX];
    size_t ndeferred;
    uv_timer_t defer_timer;    /* expires deferred messages */
    flight flight;             /* the last stream and job events */
    uv_timer_t flight_timer;   /* dumps the recorder when a job's stream goes silent */
    looplag lag;               /* how long the loop is kept from its work (/metrics) */
    struct jobhost *jobs;      /* the role's job life cycle (jobhost.h), or NULL */
    uint32_t threads;          /* compute threads, reported at registration; set by the role */
    uint64_t memory_limit;     /* memory the role may use (wafer, memoryx --memory) in /metrics; 0: none */
    uint64_t reply_backlog;    /* unread reply bytes a client may leave (the coordinator); 0: no bound */
    void *data;                /* the role's state */
};

/* Sets the daemon's floating-point mode (fpmode.h) and parses argv (and
 * the --config file); on --help prints usage and exits 0;
 * on a bad option prints a message and exits 2. */
void node_parse_args(node_options *o, const node_role *role, int argc, char **argv);

/* Loads the secret, listens, dials the coordinator (unless it is the
 * coordinator), runs the loop until shutdown. Returns the process exit code. */
int node_run(node *n, const node_role *role, uv_loop_t *loop);

/* Begins a clean shutdown (as SIGTERM does). */
void node_shutdown(node *n);

/* Sends to the coordinator if connected; returns 0 or a negative code. */
int node_send_coordinator(node *n, const Appliance__Envelope *env);

/* Holds env from c until node_replay (a stream hello that arrived before
 * its job start, over another connection). A message still held after
 * NODE_DEFER_MS fails its connection with "why". Returns 0 or -ENOBUFS. */
int node_defer(node *n, conn *c, const Appliance__Envelope *env);
/* Hands every held message to its handler again (after a job started). */
void node_replay(node *n);

/* A job failed here: logs why and tells the coordinator, which ends the
 * job everywhere. why is written into (why_len bytes) for the caller. */
void node_job_failed(node *n, const char *job_id, char *why, size_t why_len, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* The same with a va_list; fault marks a fault outside the job (a peer or
 * link lost, a peer that no longer knows the job): the coordinator may
 * recover the job from its last checkpoint instead of failing it. */
void node_job_vabort(node *n, const char *job_id, bool fault, char *why, size_t why_len,
                     const char *fmt, va_list ap) __attribute__((format(printf, 6, 0)));

/* The plan of a JobStart, checked (a bad one fails the connection c) and
 * copied for the role to own (free with appliance__plan__free_unpacked).
 * NULL, and logged, when it is bad, when busy_with names the job this
 * daemon still runs, or when out of memory. */
Appliance__Plan *node_job_start_plan(conn *c, const Appliance__Envelope *env, const char *busy_with);

/* Sends an Error reply with code and message (the connection stays open). */
void node_reply_error(conn *c, int code, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
