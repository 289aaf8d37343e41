/* The daemon frame: options, listener, coordinator link, dispatch, shutdown. */
#include "node.h"

#include <errno.h>
#include <malloc.h>
#include <sched.h>
#include <stddef.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include "fpmode.h"
#include "host.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "options.h"
#include "plan.h"
#include "sdnotify.h"
#include "shm.h"
#include "toml.h"
#include "units.h"

/* The loop's lag is measured every 50 ms; a lag past 250 ms (a quarter of a
 * heartbeat) is logged: the loop ran work that belongs on a thread. */
#define NODE_LAG_INTERVAL_MS 50
#define NODE_LAG_WARN_MS 250

/* The daemon frame's own options; a role adds its table (node_role.options). */
static const options_key node__keys[] = {
    {"listen", "HOST:PORT", OPTIONS_STRING, offsetof(node_options, listen),
     sizeof(((node_options *)0)->listen), 0, 0,
     "address to listen on (default 127.0.0.1:0; the coordinator's 127.0.0.1:7070)"},
    {"advertise", "HOST:PORT", OPTIONS_STRING, offsetof(node_options, advertise),
     sizeof(((node_options *)0)->advertise), 0, 0,
     "address other daemons dial (default: the bound address)"},
    {"secret-file", "PATH", OPTIONS_STRING, offsetof(node_options, secret_file),
     sizeof(((node_options *)0)->secret_file), 0, 0, "cluster secret (env APPLIANCE_SECRET_FILE)"},
    {"insecure", NULL, OPTIONS_FLAG, offsetof(node_options, insecure), 0, 0, 0,
     "run without a secret: no authentication at all"},
    {"config", "FILE", OPTIONS_STRING, offsetof(node_options, config),
     sizeof(((node_options *)0)->config), 0, 0, "TOML configuration; keys as the long options with '_'"},
    {"name", "NAME", OPTIONS_STRING, offsetof(node_options, name), sizeof(((node_options *)0)->name),
     0, 0, "name in logs and in the member list"},
    {"port-file", "PATH", OPTIONS_STRING, offsetof(node_options, port_file),
     sizeof(((node_options *)0)->port_file), 0, 0, "write the bound port there once listening"},
    {"log-level", "LEVEL", OPTIONS_LOG_LEVEL, offsetof(node_options, log_level), 0, 0, 0,
     "debug, info, warn or error (default info)"},
    {"heartbeat-ms", "MS", OPTIONS_U32, offsetof(node_options, heartbeat_ms), 0, 1, 10000000,
     "heartbeat interval (default 1000; at most a third of the coordinator's timeout)"},
    {"metrics", "HOST:PORT", OPTIONS_STRING, offsetof(node_options, metrics),
     sizeof(((node_options *)0)->metrics), 0, 0, "serve Prometheus metrics at http://HOST:PORT/metrics"},
    {"trace", "FILE", OPTIONS_STRING, offsetof(node_options, trace), sizeof(((node_options *)0)->trace),
     0, 0, "append every stream message sent or received to FILE,\none line each with its monotonic "
     "time (docs/cli.md)"},
    {"trace-max", "SIZE", OPTIONS_SIZE, offsetof(node_options, trace_max), 0, 4u << 10,
     UINT64_C(1) << 50, "stop tracing after SIZE bytes (default 1G)"},
    {"nice", "N", OPTIONS_U32, offsetof(node_options, nice), 0, 1, 19,
     "run at a lower CPU priority, 1 to 19, where daemons share\na host's cores (default: "
     "unchanged; appliance-up gives input\nworkers 10)"},
    {"realtime", "PRIO", OPTIONS_U32, offsetof(node_options, realtime), 0, 1, 99,
     "run every thread under the real-time policy SCHED_FIFO at\nPRIO (1 to 99), ahead of the "
     "host's other processes (needs\nCAP_SYS_NICE or RLIMIT_RTPRIO; appliance-up\n"
     "--fabric-realtime gives memoryx and swarmx 1)"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

/* Every role but the coordinator's dials the coordinator. */
static const options_key node__link_keys[] = {
    {"coordinator", "HOST:PORT", OPTIONS_STRING, offsetof(node_options, coordinator),
     sizeof(((node_options *)0)->coordinator), 0, 0, "the coordinator (env APPLIANCE_COORDINATOR)"},
    {"host-id", "ID", OPTIONS_STRING, offsetof(node_options, host_id),
     sizeof(((node_options *)0)->host_id), 0, 0,
     "the host this daemon counts as running on: the coordinator\ncounts the memory of members with one id together\n"
     "(default: the kernel's boot id; env APPLIANCE_HOST_ID)"},
    {"host-memory", "SIZE", OPTIONS_SIZE, offsetof(node_options, host_memory), 0, 1 << 20, 0,
     "that host's memory (default: its physical memory, or\nthe cgroup's memory.max where lower)"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

/* Bounds that keep a frame's lengths in 32 bits and leave room for the
 * frames the daemons must exchange (a plan, a chunk). */
static const options_key node__limit_keys[] = {
    {"max-connections", "N", OPTIONS_U32, offsetof(node_options, max_connections), 0, 1, 10000000,
     "accepted connections open at once (default 1024)"},
    {"max-connections-per-address", "N", OPTIONS_U32,
     offsetof(node_options, max_connections_per_address), 0, 1, 10000000,
     "of them from one IP address (default 256)"},
    {"auth-timeout-ms", "MS", OPTIONS_U32, offsetof(node_options, auth_timeout_ms), 0, 1, 10000000,
     "to finish authenticating (default 10000)"},
    {"max-frame-header", "SIZE", OPTIONS_SIZE, offsetof(node_options, max_frame_header), 0, 64u << 10,
     256u << 20, "protobuf header of a frame (default 1M)"},
    {"max-frame-payload", "SIZE", OPTIONS_SIZE, offsetof(node_options, max_frame_payload), 0, 1u << 20,
     1u << 30, "raw payload of a frame (default 64M)"},
    {"max-queued-bytes", "SIZE", OPTIONS_SIZE, offsetof(node_options, max_queued_bytes), 0, 4u << 20,
     UINT64_C(1) << 40, "queued for one peer before it is dropped (default 256M)"},
    {"shm-ring", "SIZE", OPTIONS_SIZE, offsetof(node_options, shm_ring), 0, SHM_RING_MIN,
     SHM_RING_MAX, "shared memory offered to each peer on this host for large payloads "
     "(default 32M)"},
    {"no-shm", NULL, OPTIONS_FLAG, offsetof(node_options, no_shm), 0, 0, 0,
     "no shared memory with peers on this host: every payload over the socket"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

/* The tables of a daemon: the frame's, the coordinator link's (not on the
 * coordinator), the role's, the limits on peers. Returns how many. */
static size_t node__tables(options_table *t, node_options *o, const node_role *role)
{
    size_t n = 0;
    t[n++] = (options_table){"Options", node__keys, o};
    if (role->role != APPLIANCE__ROLE__ROLE_COORDINATOR)
        t[n++] = (options_table){NULL, node__link_keys, o};
    if (role->options.keys)
        t[n++] = role->options;
    t[n++] = (options_table){"Limits on peers (docs/security.md)", node__limit_keys, o};
    return n;
}

typedef struct node__usage_arg {
    const options_table *t;
    size_t nt;
    const char *component;
} node__usage_arg;

static void node__usage(FILE *f, void *arg)
{
    const node__usage_arg *u = arg;
    fprintf(f, "Usage: %s [OPTIONS]\n", u->component);
    bool helped = false;
    for (size_t i = 0; i < u->nt; i++) {
        if (u->t[i].title)
            fprintf(f, "\n%s:\n", u->t[i].title);
        options_usage(f, &u->t[i]);
        if (!helped && (i + 1 == u->nt || u->t[i + 1].title)) {
            fprintf(f, "  --help                   show this text\n");
            helped = true;
        }
    }
}

/* The credentials come whole from the first place that names any: the
 * command line, the configuration file, the environment. A place naming
 * both a secret and --insecure is a mistake, never resolved silently. */
static void node__check_credentials(const node_options *o, const node_role *role, const char *where)
{
    if (o->insecure && o->secret_file[0]) {
        fprintf(stderr, "%s: %s gives both a cluster secret and insecure mode: choose one\n",
                role->component, where);
        exit(2);
    }
}

static void node__copy(char *dst, size_t len, const char *src, const char *what)
{
    if (strlen(src) >= len) {
        fprintf(stderr, "%s is too long (at most %zu characters)\n", what, len - 1);
        exit(2);
    }
    strcpy(dst, src);
}

/* Payloads of about a MiB (a chunk of weights or gradients, a batch) come
 * and go many times a step. glibc serves a block above its mmap threshold
 * (which it moves, up to 32 MiB) with a fresh mapping, and gives a heap
 * top above its trim threshold back to the kernel: either way the next
 * such block faults its pages in again, each cleared by the kernel. With
 * 64 replicas on one host that was most of the fabric's CPU (docs/deploy.md,
 * "Scaling"). Fixed thresholds keep those blocks in the heap for the next
 * one; a block above 64 MiB (a large tensor, a slab of activations) is
 * still mapped and unmapped on its own, and at most 256 MiB of free heap
 * top stays resident. GLIBC_TUNABLES's malloc settings, where given, win. */
static void node__malloc_tune(void)
{
    const char *t = getenv("GLIBC_TUNABLES");
    if (t && strstr(t, "glibc.malloc."))
        return;
    mallopt(M_MMAP_THRESHOLD, 64 << 20);
    mallopt(M_TRIM_THRESHOLD, 256 << 20);
}

/* --nice: the process's priority and, where the kernel groups each
 * session's processes (autogroup) and the daemon leads its own session
 * (appliance-up starts each so), its group's, which is what weighs against
 * the other daemons' sessions; a process's own nice only orders it within
 * its group. Before any thread starts, so that every thread inherits it. */
static void node__nice(node_options *o, const char *component)
{
    if (!o->nice)
        return;
    if (setpriority(PRIO_PROCESS, 0, (int)o->nice) < 0)
        fprintf(stderr, "%s: --nice %u: %s (running at the priority it was given)\n", component,
                o->nice, strerror(errno));
    /* its own session's group only: in a session it shares (a shell's),
     * the group is the others' too, and its own nice orders it there */
    FILE *f = getsid(0) == getpid() ? fopen("/proc/self/autogroup", "w") : NULL;
    if (f) { /* (absent without autogroup: nothing to do) */
        bool ok = fprintf(f, "%u", o->nice) > 0;
        o->niced_group = fclose(f) == 0 && ok;
    }
}

/* --realtime: SCHED_FIFO for the process, before any thread starts, so
 * that every thread inherits it. Asked for, it must hold: exits 2 naming
 * what is missing. */
static void node__realtime(const node_options *o, const char *component)
{
    if (!o->realtime)
        return;
    if (o->nice) {
        fprintf(stderr, "%s: --realtime and --nice: give one of them\n", component);
        exit(2);
    }
    struct sched_param sp = {.sched_priority = (int)o->realtime};
    if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0) {
        struct rlimit rl = {0};
        getrlimit(RLIMIT_RTPRIO, &rl);
        fprintf(stderr, "%s: --realtime %u: sched_setscheduler(SCHED_FIFO): %s (it needs "
                "CAP_SYS_NICE, or an RLIMIT_RTPRIO of %u or more; this process's is %llu)\n",
                component, o->realtime, strerror(errno), o->realtime,
                (unsigned long long)rl.rlim_cur);
        exit(2);
    }
}

void node_parse_args(node_options *o, const node_role *role, int argc, char **argv)
{
    /* the first thing every daemon does, before it starts any thread */
    fpmode_flush_subnormals();
    node__malloc_tune();
    memset(o, 0, sizeof(*o));
    o->log_level = LOG_INFO;
    o->heartbeat_ms = 1000;
    o->max_connections = NODE_DEFAULT_MAX_CONNECTIONS;
    o->max_connections_per_address = NODE_DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
    o->auth_timeout_ms = CONN_DEFAULT_AUTH_TIMEOUT_MS;
    o->max_frame_header = FRAME_DEFAULT_MAX_HEADER;
    o->max_frame_payload = FRAME_DEFAULT_MAX_PAYLOAD;
    o->max_queued_bytes = CONN_DEFAULT_QUEUE_MAX;
    o->shm_ring = NODE_DEFAULT_SHM_RING;
    o->trace_max = UINT64_C(1) << 30;
    options_table t[OPTIONS_TABLES_MAX];
    size_t nt = node__tables(t, o, role);
    node__usage_arg u = {t, nt, role->component};
    options_given given;
    int first = options_parse_argv(t, nt, argc, argv, role->component, node__usage, &u, &given);
    node__check_credentials(o, role, "the command line");
    /* The credentials are one setting: a file does not add a secret to a
     * command line's --insecure, nor the other way round. */
    const options_key *ins = options_find(t, nt, "insecure", NULL);
    const options_key *sec = options_find(t, nt, "secret-file", NULL);
    if (options_was_given(&given, t, 0, ins) || options_was_given(&given, t, 0, sec))
        given.bits[0] |= UINT64_C(1) << (ins - node__keys) | UINT64_C(1) << (sec - node__keys);
    if (first < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", role->component, argv[first]);
        exit(2);
    }
    if (o->config[0] && options_load_file(t, nt, o->config, role->component, &given) < 0)
        exit(2);
    node__check_credentials(o, role, o->config);
    if (!o->listen[0])
        strcpy(o->listen, role->role == APPLIANCE__ROLE__ROLE_COORDINATOR ? "127.0.0.1:7070"
                                                                        : "127.0.0.1:0");
    const char *env;
    if (!o->coordinator[0] && (env = getenv("APPLIANCE_COORDINATOR")))
        node__copy(o->coordinator, sizeof(o->coordinator), env, "APPLIANCE_COORDINATOR");
    if (!o->secret_file[0] && !o->insecure && (env = getenv("APPLIANCE_SECRET_FILE")) && env[0])
        node__copy(o->secret_file, sizeof(o->secret_file), env, "APPLIANCE_SECRET_FILE");
    if (!o->name[0])
        snprintf(o->name, sizeof(o->name), "%s-%d", role->component, (int)getpid());
    if (!o->host_id[0] && (env = getenv("APPLIANCE_HOST_ID")) && env[0])
        node__copy(o->host_id, sizeof(o->host_id), env, "APPLIANCE_HOST_ID");
    if (!o->host_id[0] && host_identity(o->host_id, sizeof(o->host_id)) < 0)
        o->host_id[0] = 0; /* unknown: the coordinator counts this member alone */
    if (!o->host_memory)
        o->host_memory = host_memory();
    if (role->role != APPLIANCE__ROLE__ROLE_COORDINATOR && !o->coordinator[0]) {
        fprintf(stderr, "%s: no coordinator: give --coordinator HOST:PORT or set APPLIANCE_COORDINATOR\n",
                role->component);
        exit(2);
    }
    if (!o->secret_file[0] && !o->insecure) {
        fprintf(stderr, "%s: no cluster secret: give --secret-file PATH or set APPLIANCE_SECRET_FILE "
                        "(or --insecure to run without authentication)\n", role->component);
        exit(2);
    }
    if (role->check_options && role->check_options(o, role->options.base) < 0)
        exit(2);
    if (o->max_queued_bytes < o->max_frame_header + o->max_frame_payload + FRAME_PREFIX_LEN) {
        fprintf(stderr, "%s: --max-queued-bytes must hold at least one whole frame "
                        "(--max-frame-header + --max-frame-payload)\n", role->component);
        exit(2);
    }
    if (o->max_connections_per_address > o->max_connections)
        o->max_connections_per_address = o->max_connections;
    node__nice(o, role->component);
    node__realtime(o, role->component);
}

/* ---- connections ---- */

static void node__remove_conn(node *n, conn *c)
{
    for (size_t i = 0; i < n->nconns; i++)
        if (n->conns[i] == c) {
            n->conns[i] = n->conns[--n->nconns];
            return;
        }
}

static void node__on_ready(conn *c)
{
    node *n = c->data;
    log_debug("connection %s %s: authenticated %s \"%s\"%s%s", c->dialer ? "to" : "from",
              c->peer_addr, msg_role_name(c->peer_role), c->peer_name,
              c->auth_user[0] ? " as user " : n->opt.insecure ? " (insecure)" : "", c->auth_user);
    if (c->link == &n->coord) {
        Appliance__Register r = APPLIANCE__REGISTER__INIT;
        r.role = n->role->role;
        r.name = n->opt.name;
        r.advertised_addr = n->opt.advertise[0] ? n->opt.advertise : n->bound;
        r.threads = n->threads;
        r.pid = (uint32_t)getpid();
        char host[64];
        if (gethostname(host, sizeof(host)) < 0)
            host[0] = 0;
        host[sizeof(host) - 1] = 0;
        r.host_id = n->opt.host_id;
        r.host_name = host;
        r.host_memory = n->opt.host_memory;
        if (n->role->fill_register)
            n->role->fill_register(n, &r);
        Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
        env.msg_case = APPLIANCE__ENVELOPE__MSG_REGISTER;
        env.register_ = &r;
        if (conn_send_msg(c, &env) < 0)
            conn_close(c, -EIO, "cannot send registration");
        return;
    }
    if (n->role->on_conn_ready)
        n->role->on_conn_ready(n, c);
}

static void node__heartbeat(uv_timer_t *t)
{
    node *n = t->data;
    conn *c = conn_link_conn(&n->coord);
    if (!c || !n->registered)
        return;
    uint64_t silent = uv_now(n->loop) - n->coord_heard;
    if (n->coord_timeout_ms && silent > n->coord_timeout_ms) {
        char why[96];
        snprintf(why, sizeof(why), "the coordinator has not answered for %llu ms",
                 (unsigned long long)silent);
        conn_close(c, -ETIMEDOUT, why); /* the link dials again */
        return;
    }
    Appliance__Heartbeat hb = APPLIANCE__HEARTBEAT__INIT;
    hb.member_id = n->member_id;
    hb.seq = ++n->hb_seq;
    hb.loop_lag_p99 = looplag_quantile(&n->lag, 0.99);
    hb.loop_lag_max = n->lag.max_sec;
    double load[1];
    hb.load1 = getloadavg(load, 1) == 1 ? load[0] : -1;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_HEARTBEAT;
    env.heartbeat = &hb;
    conn_send_msg(c, &env);
}

static void node__flight_dump(node *n, const char *job_id, const char *why);

static void node__on_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    node *n = c->data;
    if (c->link == &n->coord) {
        n->coord_heard = uv_now(n->loop);
        if (env->msg_case == APPLIANCE__ENVELOPE__MSG_HEARTBEAT)
            return; /* its answer to ours */
    }
    if (c->link == &n->coord && env->msg_case == APPLIANCE__ENVELOPE__MSG_REGISTER_ACK) {
        bool first = !n->registered;
        n->member_id = env->register_ack->member_id;
        n->coord_timeout_ms = env->register_ack->timeout_ms;
        n->registered = true;
        log_info("registered with the coordinator at %s as member %u", c->peer_addr, n->member_id);
        if (env->register_ack->warning && env->register_ack->warning[0])
            log_warn("the coordinator warns: %s", env->register_ack->warning);
        /* at least three heartbeats within the coordinator's timeout: one
         * a timeout apart would let either side find the other silent for
         * a timeout by a millisecond (both use the same bound) */
        uint64_t every = n->opt.heartbeat_ms;
        if (n->coord_timeout_ms && every > n->coord_timeout_ms / 3)
            every = n->coord_timeout_ms / 3 ? n->coord_timeout_ms / 3 : 1;
        uv_timer_start(&n->heartbeat, node__heartbeat, every, every);
        if (n->role->on_registered)
            n->role->on_registered(n);
        if (first)
            sdnotify_ready();
        return;
    }
    /* Messages behind a held one wait with it, in order. */
    for (size_t i = 0; i < n->ndeferred; i++)
        if (n->deferred[i].c == c) {
            if (len > 0 || node_defer(n, c, env) < 0)
                conn_fail(c, -ENOBUFS, "too many messages before the job they belong to");
            return;
        }
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_JOB_ABORT && c->link == &n->coord)
        node__flight_dump(n, env->job_abort->job_id,
                          env->job_abort->reason ? env->job_abort->reason : "aborted by the coordinator");
    unsigned mc = (unsigned)env->msg_case;
    node_handler h = mc < NODE_MSG_MAX ? n->role->handlers[mc] : NULL;
    if (len == 0) /* control messages; tensor frames would drown the log */
        log_debug("%s from %s (%s \"%s\")", frame_msg_name(env->msg_case), c->peer_addr,
                  msg_role_name(c->peer_role), c->peer_name);
    if (h && c->auth_user[0] && !n->role->user_msgs[mc]) {
        log_warn("%s from %s (user %s) refused: users may not send it; closing that connection",
                 frame_msg_name(env->msg_case), c->peer_addr, c->auth_user);
        conn_fail(c, -EPERM, "%s is not allowed for user \"%s\"", frame_msg_name(env->msg_case),
                  c->auth_user);
        return;
    }
    if (!h) {
        log_warn("unexpected %s from %s (%s): closing that connection", frame_msg_name(env->msg_case),
                 c->peer_addr, msg_role_name(c->peer_role));
        conn_fail(c, -EPROTO, "unexpected message %s for a %s", frame_msg_name(env->msg_case),
                  n->role->component);
        return;
    }
    h(n, c, env, payload, len);
}

static void *node__payload_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    node *n = c->data;
    return n->role->payload_dest ? n->role->payload_dest(n, c, env, len, err) : NULL;
}

static void node__on_drain(conn *c)
{
    node *n = c->data;
    if (n->role->on_drain)
        n->role->on_drain(n, c);
}

static void node__drop_deferred(node *n, conn *c)
{
    size_t k = 0;
    for (size_t i = 0; i < n->ndeferred; i++) {
        if (n->deferred[i].c == c)
            free(n->deferred[i].packed);
        else
            n->deferred[k++] = n->deferred[i];
    }
    n->ndeferred = k;
}

static void node__defer_expire(uv_timer_t *t)
{
    node *n = t->data;
    uint64_t now = uv_now(n->loop);
    for (size_t i = 0; i < n->ndeferred;) {
        node_deferred *d = &n->deferred[i];
        if (d->deadline > now) {
            i++;
            continue;
        }
        conn *c = d->c;
        Appliance__Envelope *env = appliance__envelope__unpack(NULL, d->len, d->packed);
        log_warn("%s from %s held %u ms without the state it needs: refused",
                 env ? frame_msg_name(env->msg_case) : "message", c->peer_addr, NODE_DEFER_MS);
        if (env)
            appliance__envelope__free_unpacked(env, NULL);
        node__drop_deferred(n, c);
        conn_fail(c, -ETIMEDOUT, "no job for this stream arrived within %u ms", NODE_DEFER_MS);
        i = 0;
    }
    if (n->ndeferred == 0)
        uv_timer_stop(&n->defer_timer);
}

int node_defer(node *n, conn *c, const Appliance__Envelope *env)
{
    if (n->ndeferred == NODE_DEFER_MAX)
        return -ENOBUFS;
    size_t len = appliance__envelope__get_packed_size(env);
    uint8_t *buf = malloc(len ? len : 1);
    if (!buf)
        return -ENOMEM;
    appliance__envelope__pack(env, buf);
    node_deferred *d = &n->deferred[n->ndeferred++];
    d->c = c;
    d->packed = buf;
    d->len = len;
    d->deadline = uv_now(n->loop) + NODE_DEFER_MS;
    if (!uv_is_active((uv_handle_t *)&n->defer_timer))
        uv_timer_start(&n->defer_timer, node__defer_expire, 500, 500);
    return 0;
}

void node_replay(node *n)
{
    /* Handlers may defer again: take the current set first. */
    size_t count = n->ndeferred;
    node_deferred held[NODE_DEFER_MAX];
    memcpy(held, n->deferred, count * sizeof(*held));
    n->ndeferred = 0;
    for (size_t i = 0; i < count; i++) {
        Appliance__Envelope *env = appliance__envelope__unpack(NULL, held[i].len, held[i].packed);
        free(held[i].packed);
        if (!env || held[i].c->closing) {
            if (env)
                appliance__envelope__free_unpacked(env, NULL);
            continue;
        }
        bool again = false; /* an earlier message of this connection is held again */
        for (size_t k = 0; k < n->ndeferred; k++)
            again |= n->deferred[k].c == held[i].c;
        unsigned mc = (unsigned)env->msg_case;
        node_handler h = mc < NODE_MSG_MAX ? n->role->handlers[mc] : NULL;
        if (again)
            node_defer(n, held[i].c, env);
        else if (h)
            h(n, held[i].c, env, NULL, 0);
        appliance__envelope__free_unpacked(env, NULL);
    }
}

static void node__on_close(conn *c, int err, const char *reason)
{
    node *n = c->data;
    node__drop_deferred(n, c);
    if (c->link == &n->coord) {
        if (n->registered && !n->stopping)
            log_warn("lost the coordinator at %s: %s", c->peer_addr, reason);
        else if (!n->stopping) {
            /* Backoff tries up to every 5 s; say so at most every 4 s. */
            static uint64_t last_said;
            uint64_t now = uv_now(n->loop);
            if (last_said == 0 || now - last_said >= 4000) {
                last_said = now;
                log_warn("coordinator %s not reached: %s; retrying", c->peer_addr, reason);
            } else {
                log_debug("coordinator %s not reached: %s; retrying", c->peer_addr, reason);
            }
        }
        bool was = n->registered;
        n->registered = false;
        uv_timer_stop(&n->heartbeat);
        if (was && n->flight.job[0])
            node__flight_dump(n, n->flight.job, "lost the coordinator");
        if (was && n->role->on_coordinator_lost)
            n->role->on_coordinator_lost(n);
        return;
    }
    if (!c->link)
        node__remove_conn(n, c);
    log_debug("connection %s %s closed: %s", c->dialer ? "to" : "from", c->peer_addr, reason);
    /* Refusals and broken limits are logged with the peer's address and name. */
    bool refused = err == -EACCES || err == -ENOBUFS || err == -EMSGSIZE || err == -EBADMSG ||
                   err == -EPROTONOSUPPORT;
    if (refused || (c->auth != CONN_READY && !n->stopping)) {
        if (c->peer_name[0])
            log_warn("connection %s %s (%s \"%s\"%s%s): %s", c->dialer ? "to" : "from",
                     c->peer_addr, msg_role_name(c->peer_role), c->peer_name,
                     c->auth_user[0] ? ", user " : "", c->auth_user, reason);
        else
            log_warn("connection %s %s: %s", c->dialer ? "to" : "from", c->peer_addr, reason);
    }
    if (n->role->on_conn_close)
        n->role->on_conn_close(n, c, err, reason);
}

static const conn_ops node__ops = {
    .on_ready = node__on_ready,
    .on_frame = node__on_frame,
    .payload_dest = node__payload_dest,
    .on_drain = node__on_drain,
    .on_close = node__on_close,
};

/* Every message after authentication passes here (conn_config.tap). */
static void node__tap(void *arg, conn *c, const Appliance__Envelope *env, bool out)
{
    node *n = arg;
    flight_note(&n->flight, env, c->peer_name[0] ? c->peer_name : c->peer_addr, out);
}

static void node__flight_check(uv_timer_t *t)
{
    node *n = t->data;
    flight_trace_flush(&n->flight);
    if (n->role->computing && n->role->computing(n))
        return;
    if (flight_hung(&n->flight, NODE_SILENT_MS)) {
        char why[96];
        snprintf(why, sizeof(why), "its stream has been silent for %u s", NODE_SILENT_MS / 1000);
        node__flight_dump(n, n->flight.job, why);
    }
}

static void node__on_connection(uv_stream_t *server, int status)
{
    node *n = server->data;
    if (status < 0) {
        log_warn("accept: %s", uv_strerror(status));
        return;
    }
    if (n->nconns == n->capconns) {
        size_t cap = n->capconns ? n->capconns * 2 : 16;
        conn **p = realloc(n->conns, cap * sizeof(*p));
        if (!p) {
            log_error("out of memory accepting a connection");
            return;
        }
        n->conns = p;
        n->capconns = cap;
    }
    conn *c = conn_accept(server, &n->ccfg, &node__ops, n);
    if (!c)
        return;
    n->conns[n->nconns++] = c;
    log_debug("connection from %s accepted", c->peer_addr);
    /* Limits: the connection was accepted to be told why it goes. */
    size_t open = 0, same = 0, closing = 0;
    for (size_t i = 0; i + 1 < n->nconns; i++) {
        if (n->conns[i]->closing) {
            closing++;
            continue;
        }
        open++;
        same += strcmp(n->conns[i]->peer_ip, c->peer_ip) == 0;
    }
    if (open >= n->opt.max_connections) {
        if (closing >= n->opt.max_connections) /* a flood: no error frames for it */
            conn_close(c, -EMFILE, "too many connections");
        else
            conn_fail(c, -EMFILE, "too many connections: %zu open, the limit (max_connections)",
                      open);
    } else if (same >= n->opt.max_connections_per_address) {
        if (closing >= n->opt.max_connections)
            conn_close(c, -EMFILE, "too many connections from one address");
        else
            conn_fail(c, -EMFILE,
                      "too many connections from %s: %zu open, the limit "
                      "(max_connections_per_address)", c->peer_ip, same);
    }
}

int node_send_coordinator(node *n, const Appliance__Envelope *env)
{
    conn *c = conn_link_conn(&n->coord);
    if (!c || !n->registered)
        return -ENOTCONN;
    return conn_send_msg(c, env);
}

Appliance__Plan *node_job_start_plan(conn *c, const Appliance__Envelope *env, const char *busy_with)
{
    const Appliance__Plan *in = env->job_start->plan;
    char why[256];
    if (msgcheck_plan(in, why, sizeof(why)) < 0) {
        conn_fail(c, -EINVAL, "%s", why);
        return NULL;
    }
    if (busy_with) {
        log_warn("job %s refused: busy with job %s", in->job_id, busy_with);
        return NULL;
    }
    Appliance__Plan *p = plan_copy(in);
    if (!p)
        log_error("job %s refused: out of memory copying its plan", in->job_id);
    return p;
}

void node_reply_error(conn *c, int code, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    Appliance__Error e = APPLIANCE__ERROR__INIT;
    e.code = code;
    e.message = msg;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_ERROR;
    env.error = &e;
    conn_send_msg(c, &env);
}

/* The flight recorder's dump, headed by why and what the job waited for. */
static void node__flight_dump(node *n, const char *job_id, const char *why)
{
    char wait[256] = "", head[1024];
    if (n->role->describe_wait)
        n->role->describe_wait(n, wait, sizeof(wait));
    snprintf(head, sizeof(head), "%s%s%s", why, wait[0] ? "; it was waiting for " : "", wait);
    flight_dump(&n->flight, job_id, head);
}

static void node__job_abort(node *n, const char *job_id, bool fault, const char *why)
{
    log_error("job %s: %s%s", job_id, why, fault ? " (a fault: the job may be recovered)" : "");
    node__flight_dump(n, job_id, why);
    Appliance__JobAbort a = APPLIANCE__JOB_ABORT__INIT;
    a.job_id = (char *)job_id;
    a.reason = (char *)why;
    a.fault = fault;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_JOB_ABORT;
    env.job_abort = &a;
    node_send_coordinator(n, &env);
}

void node_job_vabort(node *n, const char *job_id, bool fault, char *why, size_t why_len,
                     const char *fmt, va_list ap)
{
    vsnprintf(why, why_len, fmt, ap);
    node__job_abort(n, job_id, fault, why);
}

void node_job_failed(node *n, const char *job_id, char *why, size_t why_len, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    node_job_vabort(n, job_id, false, why, why_len, fmt, ap);
    va_end(ap);
}

/* ---- metrics ---- */

static void node__peer_metrics(void *arg, Appliance__Role role, const char *name, uint64_t in,
                               uint64_t out, uint64_t shm_in, uint64_t shm_out, size_t queued,
                               unsigned live)
{
    metrics_buf *b = arg;
    char esc[160];
    name = metrics_label_escape(name, esc, sizeof(esc)); /* peers name themselves */
    metrics_printf(b, "appliance_peer_bytes_received_total{peer=\"%s\",peer_role=\"%s\"} %llu\n",
                   name, msg_role_name(role), (unsigned long long)in);
    metrics_printf(b, "appliance_peer_bytes_sent_total{peer=\"%s\",peer_role=\"%s\"} %llu\n", name,
                   msg_role_name(role), (unsigned long long)out);
    metrics_printf(b, "appliance_peer_shm_bytes_received_total{peer=\"%s\",peer_role=\"%s\"} %llu\n",
                   name, msg_role_name(role), (unsigned long long)shm_in);
    metrics_printf(b, "appliance_peer_shm_bytes_sent_total{peer=\"%s\",peer_role=\"%s\"} %llu\n",
                   name, msg_role_name(role), (unsigned long long)shm_out);
    metrics_printf(b, "appliance_peer_queued_bytes{peer=\"%s\",peer_role=\"%s\"} %zu\n", name,
                   msg_role_name(role), queued);
    metrics_printf(b, "appliance_peer_connections{peer=\"%s\",peer_role=\"%s\"} %u\n", name,
                   msg_role_name(role), live);
}

/* What every daemon reports: memory, connections, bytes per peer. */
static void node__metrics(void *arg, metrics_buf *b)
{
    node *n = arg;
    long pages = 0, rss = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    if (f) {
        if (fscanf(f, "%ld %ld", &pages, &rss) != 2)
            rss = 0;
        fclose(f);
    }
    uint64_t limit = n->memory_limit;
    metrics_printf(b, "# HELP appliance_memory_bytes Resident memory of the daemon.\n"
                      "# TYPE appliance_memory_bytes gauge\n"
                      "appliance_memory_bytes{daemon=\"%s\"} %lld\n",
                   n->opt.name, (long long)rss * (long long)sysconf(_SC_PAGESIZE));
    metrics_printf(b, "# HELP appliance_memory_limit_bytes Memory the daemon may use (wafer memory, memoryx --memory); 0: none.\n"
                      "# TYPE appliance_memory_limit_bytes gauge\n"
                      "appliance_memory_limit_bytes{daemon=\"%s\"} %llu\n",
                   n->opt.name, (unsigned long long)limit);
    metrics_printf(b, "# HELP appliance_registered Whether the daemon is registered with the coordinator.\n"
                      "# TYPE appliance_registered gauge\nappliance_registered %d\n",
                   n->role->role == APPLIANCE__ROLE__ROLE_COORDINATOR || n->registered);
    metrics_printf(b, "# HELP appliance_heartbeats_sent_total Heartbeats sent to the coordinator.\n"
                      "# TYPE appliance_heartbeats_sent_total counter\nappliance_heartbeats_sent_total %llu\n",
                   (unsigned long long)n->hb_seq);
    metrics_printf(b, "# HELP appliance_peer_bytes_received_total Bytes received from a peer.\n"
                      "# TYPE appliance_peer_bytes_received_total counter\n"
                      "# HELP appliance_peer_bytes_sent_total Bytes sent to a peer.\n"
                      "# TYPE appliance_peer_bytes_sent_total counter\n"
                      "# HELP appliance_peer_shm_bytes_received_total Of those, payload bytes that came through a shared-memory ring (a peer on this host).\n"
                      "# TYPE appliance_peer_shm_bytes_received_total counter\n"
                      "# HELP appliance_peer_shm_bytes_sent_total Of those, payload bytes that went through a shared-memory ring.\n"
                      "# TYPE appliance_peer_shm_bytes_sent_total counter\n"
                      "# HELP appliance_peer_queued_bytes Bytes queued for a peer, not yet written.\n"
                      "# TYPE appliance_peer_queued_bytes gauge\n"
                      "# HELP appliance_peer_connections Live connections with a peer.\n"
                      "# TYPE appliance_peer_connections gauge\n");
    conn_peers(node__peer_metrics, b);
    looplag_render(&n->lag, b);
    if (n->role->metrics)
        n->role->metrics(n, b);
}

/* ---- shutdown ---- */

static void node__on_signal(uv_signal_t *s, int signum)
{
    node *n = s->data;
    log_info("%s received: shutting down", signum == SIGTERM ? "SIGTERM" : "SIGINT");
    node_shutdown(n);
}

static void node__deregistered(void *arg, int status)
{
    node *n = arg;
    conn_link_stop(&n->coord, NULL);
}

void node_shutdown(node *n)
{
    if (n->stopping)
        return;
    n->stopping = true;
    sdnotify_stopping();
    if (n->role->on_shutdown)
        n->role->on_shutdown(n);
    uv_close((uv_handle_t *)&n->sigterm, NULL);
    uv_close((uv_handle_t *)&n->sigint, NULL);
    uv_timer_stop(&n->heartbeat);
    uv_close((uv_handle_t *)&n->heartbeat, NULL);
    uv_timer_stop(&n->defer_timer);
    uv_close((uv_handle_t *)&n->defer_timer, NULL);
    uv_close((uv_handle_t *)&n->flight_timer, NULL);
    looplag_stop(&n->lag);
    for (size_t i = 0; i < n->ndeferred; i++)
        free(n->deferred[i].packed);
    n->ndeferred = 0;
    uv_close((uv_handle_t *)&n->server, NULL);
    metrics_stop();
    for (size_t i = 0; i < n->nconns; i++)
        conn_close(n->conns[i], -ECANCELED, "daemon shutting down");
    if (n->role->role != APPLIANCE__ROLE__ROLE_COORDINATOR) {
        conn *c = conn_link_conn(&n->coord);
        Appliance__Deregister d = APPLIANCE__DEREGISTER__INIT;
        d.member_id = n->member_id;
        Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
        env.msg_case = APPLIANCE__ENVELOPE__MSG_DEREGISTER;
        env.deregister = &d;
        if (!c || !n->registered || conn_send(c, &env, NULL, 0, node__deregistered, n) < 0)
            conn_link_stop(&n->coord, NULL);
    }
}

/* ---- start ---- */

static int node__write_port_file(node *n)
{
    char host[64];
    int port;
    if (conn_addr_parse(n->bound, host, sizeof(host), &port) < 0)
        return -EINVAL;
    char tmp[PATH_MAX + 8];
    snprintf(tmp, sizeof(tmp), "%s.tmp", n->opt.port_file);
    FILE *f = fopen(tmp, "w");
    if (!f)
        return -errno;
    fprintf(f, "%d\n", port);
    if (fclose(f) != 0 || rename(tmp, n->opt.port_file) != 0)
        return -errno;
    return 0;
}

int node_run(node *n, const node_role *role, uv_loop_t *loop)
{
    char err[512];
    n->loop = loop;
    n->role = role;
    log_init(role->component, (enum log_level)n->opt.log_level);
    if (n->opt.insecure) {
        log_warn("running --insecure: no cluster secret, the cluster is unauthenticated: anyone "
                 "who reaches its ports can join it and submit, read or cancel jobs");
    } else if (auth_secret_load(&n->secret, n->opt.secret_file, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return 1;
    }
    conn_config_default(&n->ccfg, n->opt.insecure ? NULL : &n->secret, role->role, n->opt.name);
    n->ccfg.tap = node__tap;
    n->ccfg.tap_arg = n;
    n->ccfg.user_key = n->user_key;
    n->ccfg.user_key_arg = n->user_key_arg;
    n->ccfg.auth_timeout_ms = n->opt.auth_timeout_ms;
    n->ccfg.limits.max_header = (uint32_t)n->opt.max_frame_header;
    n->ccfg.limits.max_payload = (uint32_t)n->opt.max_frame_payload;
    n->ccfg.queue_max = n->opt.max_queued_bytes;
    n->ccfg.shm_ring = n->opt.no_shm ? 0 : n->opt.shm_ring;
    if (n->ccfg.high_water > n->ccfg.queue_max / 4)
        n->ccfg.high_water = n->ccfg.queue_max / 4;
    /* The coordinator paces long replies (logs) to the high water: they must
     * stay below the backlog after which it disconnects a client. */
    if (n->reply_backlog && n->ccfg.high_water > n->reply_backlog / 2)
        n->ccfg.high_water = n->reply_backlog / 2;
    n->server.data = n;
    if (conn_listen(loop, &n->server, n->opt.listen, node__on_connection, err, sizeof(err)) < 0) {
        log_error("%s", err);
        return 1;
    }
    n->server.data = n;
    conn_sockname(&n->server, n->bound, sizeof(n->bound));
    if (n->opt.port_file[0] && node__write_port_file(n) < 0) {
        log_error("cannot write port file %s: %s", n->opt.port_file, strerror(errno));
        return 1;
    }
    log_info("%s listening on %s", n->opt.name, n->bound);
    if (n->opt.nice)
        log_info("running at nice %d%s", getpriority(PRIO_PROCESS, 0),
                 n->opt.niced_group ? ", its session's group too" : "");
    if (n->opt.realtime) {
        struct sched_param sp = {0};
        sched_getparam(0, &sp);
        log_info("running under SCHED_FIFO at real-time priority %d%s", sp.sched_priority,
                 sched_getscheduler(0) == SCHED_FIFO ? "" : " (lost: another policy now)");
    }
    if (n->opt.trace[0]) {
        if (flight_trace_open(&n->flight, n->opt.trace, n->opt.name, n->opt.trace_max, err,
                              sizeof(err)) < 0) {
            log_error("%s", err);
            return 1;
        }
        log_info("tracing the stream to %s (at most %llu bytes)", n->opt.trace,
                 (unsigned long long)n->opt.trace_max);
    }
    sdnotify_watchdog_start(loop);
    if (role->role == APPLIANCE__ROLE__ROLE_COORDINATOR)
        sdnotify_ready();
    if (n->opt.metrics[0]) {
        int mport = metrics_start(loop, n->opt.metrics, err, sizeof(err));
        if (mport < 0) {
            log_error("%s", err);
            return 1;
        }
        metrics_add_source(node__metrics, n);
        char mhost[64];
        int unused;
        conn_addr_parse(n->opt.metrics, mhost, sizeof(mhost), &unused);
        log_info("metrics at http://%s:%d/metrics", mhost, mport);
    }
    uv_signal_init(loop, &n->sigterm);
    uv_signal_init(loop, &n->sigint);
    n->sigterm.data = n;
    n->sigint.data = n;
    uv_signal_start(&n->sigterm, node__on_signal, SIGTERM);
    uv_signal_start(&n->sigint, node__on_signal, SIGINT);
    uv_timer_init(loop, &n->heartbeat);
    n->heartbeat.data = n;
    uv_timer_init(loop, &n->defer_timer);
    n->defer_timer.data = n;
    uv_timer_init(loop, &n->flight_timer);
    n->flight_timer.data = n;
    uv_timer_start(&n->flight_timer, node__flight_check, 1000, 1000);
    looplag_start(&n->lag, loop, NODE_LAG_INTERVAL_MS, NODE_LAG_WARN_MS);
    if (role->role != APPLIANCE__ROLE__ROLE_COORDINATOR) {
        if (conn_link_start(&n->coord, loop, n->opt.coordinator, &n->ccfg, &node__ops, n) < 0) {
            log_error("bad coordinator address \"%s\": expected HOST:PORT", n->opt.coordinator);
            return 1;
        }
    }
    signal(SIGPIPE, SIG_IGN);
    uv_run(loop, UV_RUN_DEFAULT);
    free(n->conns);
    flight_free(&n->flight);
    auth_secret_clear(&n->secret);
    log_info("stopped");
    return 0;
}

/* Daemon configuration: a TOML file whose keys are the long options with
 * '_' for '-' (listen = "0.0.0.0:7070", wafer_memory = "40G", threads = 2).
 * Options given on the command line win. */
