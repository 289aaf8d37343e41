/* The daemon frame: options, listener, coordinator link, dispatch, shutdown. */
#include "node.h"

#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "plan.h"
#include "sdnotify.h"
#include "toml.h"
#include "units.h"

static void node__usage(const node_role *role, FILE *f)
{
    bool coord = role->role == APPLIANCE__ROLE__ROLE_COORDINATOR;
    fprintf(f,
            "Usage: %s [OPTIONS]\n"
            "\n"
            "Options:\n"
            "  --listen HOST:PORT       address to listen on (default 127.0.0.1:%s)\n"
            "  --advertise HOST:PORT    address other daemons dial (default: the bound address)\n"
            "%s"
            "  --secret-file PATH       cluster secret (env APPLIANCE_SECRET_FILE)\n"
            "  --insecure               run without a secret: no authentication at all\n"
            "  --config FILE            TOML configuration; keys as the long options with '_'\n"
            "  --name NAME              name in logs and in the member list\n"
            "  --port-file PATH         write the bound port there once listening\n"
            "  --log-level LEVEL        debug, info, warn or error (default info)\n"
            "  --heartbeat-ms MS        heartbeat interval (default 1000)\n"
            "  --metrics HOST:PORT      serve Prometheus metrics at http://HOST:PORT/metrics\n"
            "  --trace FILE             append every stream message sent or received to FILE,\n"
            "                           one line each with its monotonic time (docs/cli.md)\n"
            "  --trace-max SIZE         stop tracing after SIZE bytes (default 1G)\n"
            "%s"
            "  --help                   show this text\n"
            "\n"
            "Limits on peers (docs/security.md):\n"
            "  --max-connections N      accepted connections open at once (default %u)\n"
            "  --max-connections-per-address N  of them from one IP address (default %u)\n"
            "  --auth-timeout-ms MS     to finish authenticating (default %u)\n"
            "  --max-frame-header SIZE  protobuf header of a frame (default 1M)\n"
            "  --max-frame-payload SIZE raw payload of a frame (default 64M)\n"
            "  --max-queued-bytes SIZE  queued for one peer before it is dropped (default 256M)\n",
            role->component, coord ? "7070" : "0",
            coord ? "" : "  --coordinator HOST:PORT  the coordinator (env APPLIANCE_COORDINATOR)\n",
            role->usage_extra ? role->usage_extra : "", NODE_DEFAULT_MAX_CONNECTIONS,
            NODE_DEFAULT_MAX_CONNECTIONS_PER_ADDRESS, CONN_DEFAULT_AUTH_TIMEOUT_MS);
}

enum {
    OPT_LISTEN = 256, OPT_ADVERTISE, OPT_COORDINATOR, OPT_SECRET, OPT_CONFIG, OPT_NAME,
    OPT_PORT_FILE, OPT_STATE_DIR, OPT_LOG_LEVEL, OPT_WAFER, OPT_MEMORY, OPT_THREADS,
    OPT_HB, OPT_HB_TIMEOUT, OPT_METRICS, OPT_INSECURE, OPT_MAX_CONNS, OPT_MAX_CONNS_ADDR,
    OPT_AUTH_TIMEOUT, OPT_MAX_HEADER, OPT_MAX_PAYLOAD, OPT_MAX_QUEUED, OPT_USERS_FILE,
    OPT_MAX_JOB_FILE, OPT_MAX_MODEL_PARAMS, OPT_MAX_STEPS, OPT_MAX_QUEUED_JOBS,
    OPT_MAX_PER_SUBMITTER, OPT_MAX_HISTORY, OPT_MAX_BACKLOG, OPT_TRACE, OPT_TRACE_MAX, OPT_HELP,
};

static const struct option node__longopts[] = {
    {"listen", required_argument, NULL, OPT_LISTEN},
    {"advertise", required_argument, NULL, OPT_ADVERTISE},
    {"coordinator", required_argument, NULL, OPT_COORDINATOR},
    {"secret-file", required_argument, NULL, OPT_SECRET},
    {"config", required_argument, NULL, OPT_CONFIG},
    {"name", required_argument, NULL, OPT_NAME},
    {"port-file", required_argument, NULL, OPT_PORT_FILE},
    {"state-dir", required_argument, NULL, OPT_STATE_DIR},
    {"log-level", required_argument, NULL, OPT_LOG_LEVEL},
    {"wafer-memory", required_argument, NULL, OPT_WAFER},
    {"memory", required_argument, NULL, OPT_MEMORY},
    {"threads", required_argument, NULL, OPT_THREADS},
    {"heartbeat-ms", required_argument, NULL, OPT_HB},
    {"heartbeat-timeout-ms", required_argument, NULL, OPT_HB_TIMEOUT},
    {"metrics", required_argument, NULL, OPT_METRICS},
    {"trace", required_argument, NULL, OPT_TRACE},
    {"trace-max", required_argument, NULL, OPT_TRACE_MAX},
    {"insecure", no_argument, NULL, OPT_INSECURE},
    {"max-connections", required_argument, NULL, OPT_MAX_CONNS},
    {"max-connections-per-address", required_argument, NULL, OPT_MAX_CONNS_ADDR},
    {"auth-timeout-ms", required_argument, NULL, OPT_AUTH_TIMEOUT},
    {"max-frame-header", required_argument, NULL, OPT_MAX_HEADER},
    {"max-frame-payload", required_argument, NULL, OPT_MAX_PAYLOAD},
    {"max-queued-bytes", required_argument, NULL, OPT_MAX_QUEUED},
    {"users-file", required_argument, NULL, OPT_USERS_FILE},
    {"max-job-file", required_argument, NULL, OPT_MAX_JOB_FILE},
    {"max-model-params", required_argument, NULL, OPT_MAX_MODEL_PARAMS},
    {"max-steps", required_argument, NULL, OPT_MAX_STEPS},
    {"max-queued-jobs", required_argument, NULL, OPT_MAX_QUEUED_JOBS},
    {"max-queued-per-submitter", required_argument, NULL, OPT_MAX_PER_SUBMITTER},
    {"max-job-history", required_argument, NULL, OPT_MAX_HISTORY},
    {"max-client-backlog", required_argument, NULL, OPT_MAX_BACKLOG},
    {"help", no_argument, NULL, OPT_HELP},
    {NULL, 0, NULL, 0},
};

/* Which role-specific options a role takes. */
static bool node__role_has(const node_role *role, int opt)
{
    Appliance__Role r = role->role;
    switch (opt) {
    case OPT_COORDINATOR: return r != APPLIANCE__ROLE__ROLE_COORDINATOR;
    case OPT_STATE_DIR: return r == APPLIANCE__ROLE__ROLE_COORDINATOR || r == APPLIANCE__ROLE__ROLE_MEMORYX;
    case OPT_WAFER: return r == APPLIANCE__ROLE__ROLE_WSE_NODE;
    case OPT_MEMORY: return r == APPLIANCE__ROLE__ROLE_MEMORYX;
    case OPT_THREADS: return r == APPLIANCE__ROLE__ROLE_WSE_NODE || r == APPLIANCE__ROLE__ROLE_MEMORYX ||
                             r == APPLIANCE__ROLE__ROLE_WORKER;
    case OPT_HB_TIMEOUT:
    case OPT_USERS_FILE:
    case OPT_MAX_JOB_FILE:
    case OPT_MAX_MODEL_PARAMS:
    case OPT_MAX_STEPS:
    case OPT_MAX_QUEUED_JOBS:
    case OPT_MAX_PER_SUBMITTER:
    case OPT_MAX_HISTORY:
    case OPT_MAX_BACKLOG: return r == APPLIANCE__ROLE__ROLE_COORDINATOR;
    default: return true;
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

/* Applies one option value; returns 0 or prints why not and returns -1. */
static int node__apply(node_options *o, int opt, const char *val, const char *where)
{
    uint64_t v;
    char *end;
    switch (opt) {
    case OPT_LISTEN: node__copy(o->listen, sizeof(o->listen), val, "--listen"); break;
    case OPT_ADVERTISE: node__copy(o->advertise, sizeof(o->advertise), val, "--advertise"); break;
    case OPT_COORDINATOR: node__copy(o->coordinator, sizeof(o->coordinator), val, "--coordinator"); break;
    case OPT_SECRET: node__copy(o->secret_file, sizeof(o->secret_file), val, "--secret-file"); break;
    case OPT_CONFIG: node__copy(o->config, sizeof(o->config), val, "--config"); break;
    case OPT_NAME: node__copy(o->name, sizeof(o->name), val, "--name"); break;
    case OPT_PORT_FILE: node__copy(o->port_file, sizeof(o->port_file), val, "--port-file"); break;
    case OPT_STATE_DIR: node__copy(o->state_dir, sizeof(o->state_dir), val, "--state-dir"); break;
    case OPT_METRICS: node__copy(o->metrics, sizeof(o->metrics), val, "--metrics"); break;
    case OPT_TRACE: node__copy(o->trace, sizeof(o->trace), val, "--trace"); break;
    case OPT_USERS_FILE: node__copy(o->users_file, sizeof(o->users_file), val, "--users-file"); break;
    case OPT_INSECURE:
        if (strcmp(val, "true") != 0 && strcmp(val, "false") != 0) {
            fprintf(stderr, "%s: \"%s\": expected true or false\n", where, val);
            return -1;
        }
        o->insecure = strcmp(val, "true") == 0;
        break;
    case OPT_MAX_HEADER:
    case OPT_MAX_PAYLOAD:
    case OPT_MAX_QUEUED:
    case OPT_TRACE_MAX:
    case OPT_MAX_JOB_FILE:
    case OPT_MAX_MODEL_PARAMS: {
        /* Bounds that keep a frame's lengths in 32 bits and leave room for
         * the frames the daemons must exchange (a plan, a chunk). */
        static const struct { int opt; uint64_t min, max; } bounds[] = {
            {OPT_MAX_HEADER, 64u << 10, 256u << 20},
            {OPT_MAX_PAYLOAD, 1u << 20, 1u << 30},
            {OPT_MAX_QUEUED, 4u << 20, UINT64_C(1) << 40},
            {OPT_TRACE_MAX, 4u << 10, UINT64_C(1) << 50},
            {OPT_MAX_JOB_FILE, 1u << 10, 256u << 20},
            {OPT_MAX_MODEL_PARAMS, 1, UINT64_C(1) << 40},
        };
        if (units_parse_size(val, &v) < 0) {
            fprintf(stderr, "%s: size \"%s\": expected a number with an optional K, M, G or T "
                            "suffix\n", where, val);
            return -1;
        }
        for (size_t i = 0; i < sizeof(bounds) / sizeof(bounds[0]); i++)
            if (bounds[i].opt == opt && (v < bounds[i].min || v > bounds[i].max)) {
                fprintf(stderr, "%s: \"%s\": expected from %llu to %llu\n", where, val,
                        (unsigned long long)bounds[i].min, (unsigned long long)bounds[i].max);
                return -1;
            }
        if (opt == OPT_MAX_HEADER)
            o->max_frame_header = v;
        else if (opt == OPT_MAX_PAYLOAD)
            o->max_frame_payload = v;
        else if (opt == OPT_MAX_QUEUED)
            o->max_queued_bytes = v;
        else if (opt == OPT_TRACE_MAX)
            o->trace_max = v;
        else if (opt == OPT_MAX_JOB_FILE)
            o->max_job_file = v;
        else
            o->max_model_params = v;
        break;
    }
    case OPT_MAX_STEPS: {
        long long n = strtoll(val, &end, 10);
        if (*end || end == val || n <= 0) {
            fprintf(stderr, "%s: \"%s\": expected a positive integer\n", where, val);
            return -1;
        }
        o->max_steps = (uint64_t)n;
        break;
    }
    case OPT_LOG_LEVEL:
        o->log_level = log_level_parse(val);
        if (o->log_level < 0) {
            fprintf(stderr, "%s: log level \"%s\": expected debug, info, warn or error\n", where, val);
            return -1;
        }
        break;
    case OPT_WAFER:
    case OPT_MEMORY:
    case OPT_MAX_BACKLOG:
        if (units_parse_size(val, &v) < 0 || v == 0) {
            fprintf(stderr, "%s: size \"%s\": expected bytes with an optional K, M, G or T suffix\n",
                    where, val);
            return -1;
        }
        if (opt == OPT_WAFER)
            o->wafer_memory = v;
        else if (opt == OPT_MEMORY)
            o->memory = v;
        else
            o->max_client_backlog = v;
        break;
    case OPT_THREADS:
    case OPT_HB:
    case OPT_HB_TIMEOUT:
    case OPT_MAX_CONNS:
    case OPT_MAX_CONNS_ADDR:
    case OPT_AUTH_TIMEOUT:
    case OPT_MAX_QUEUED_JOBS:
    case OPT_MAX_PER_SUBMITTER:
    case OPT_MAX_HISTORY: {
        long n = strtol(val, &end, 10);
        if (*end || end == val || n <= 0 || n > 10000000) {
            fprintf(stderr, "%s: \"%s\": expected a positive integer\n", where, val);
            return -1;
        }
        if (opt == OPT_THREADS)
            o->threads = (int)n;
        else if (opt == OPT_HB)
            o->heartbeat_ms = (uint32_t)n;
        else if (opt == OPT_HB_TIMEOUT)
            o->heartbeat_timeout_ms = (uint32_t)n;
        else if (opt == OPT_MAX_QUEUED_JOBS)
            o->max_queued_jobs = (uint32_t)n;
        else if (opt == OPT_MAX_PER_SUBMITTER)
            o->max_queued_per_submitter = (uint32_t)n;
        else if (opt == OPT_MAX_HISTORY)
            o->max_job_history = (uint32_t)n;
        else if (opt == OPT_MAX_CONNS)
            o->max_connections = (uint32_t)n;
        else if (opt == OPT_MAX_CONNS_ADDR)
            o->max_connections_per_address = (uint32_t)n;
        else
            o->auth_timeout_ms = (uint32_t)n;
        break;
    }
    default:
        return -1;
    }
    return 0;
}

int node__load_config(node_options *o, const node_role *role, const char *path,
                      const bool *given);

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

void node_parse_args(node_options *o, const node_role *role, int argc, char **argv)
{
    memset(o, 0, sizeof(*o));
    o->log_level = LOG_INFO;
    o->heartbeat_ms = 1000;
    o->heartbeat_timeout_ms = 3000;
    o->max_connections = NODE_DEFAULT_MAX_CONNECTIONS;
    o->max_connections_per_address = NODE_DEFAULT_MAX_CONNECTIONS_PER_ADDRESS;
    o->auth_timeout_ms = CONN_DEFAULT_AUTH_TIMEOUT_MS;
    o->max_frame_header = FRAME_DEFAULT_MAX_HEADER;
    o->max_frame_payload = FRAME_DEFAULT_MAX_PAYLOAD;
    o->max_queued_bytes = CONN_DEFAULT_QUEUE_MAX;
    o->trace_max = UINT64_C(1) << 30;
    o->max_job_file = NODE_DEFAULT_MAX_JOB_FILE;
    o->max_model_params = NODE_DEFAULT_MAX_MODEL_PARAMS;
    o->max_steps = NODE_DEFAULT_MAX_STEPS;
    o->max_queued_jobs = 1000;
    o->max_queued_per_submitter = 100;
    o->max_job_history = 1000;
    o->max_client_backlog = 8u << 20;
    bool given[OPT_HELP + 1] = {false};
    int c;
    opterr = 0;
    while ((c = getopt_long(argc, argv, "", node__longopts, NULL)) != -1) {
        if (c == OPT_HELP) {
            node__usage(role, stdout);
            exit(0);
        }
        if (c == '?' || c == ':') {
            fprintf(stderr, "%s: unknown or incomplete option \"%s\" (see --help)\n",
                    role->component, argv[optind - 1]);
            exit(2);
        }
        if (!node__role_has(role, c)) {
            fprintf(stderr, "%s: option \"%s\" does not apply to %s (see --help)\n",
                    role->component, argv[optind - 1], role->component);
            exit(2);
        }
        if (node__apply(o, c, c == OPT_INSECURE ? "true" : optarg, argv[optind - 1]) < 0)
            exit(2);
        given[c] = true;
    }
    node__check_credentials(o, role, "the command line");
    /* The credentials are one setting: a file does not add a secret to a
     * command line's --insecure, nor the other way round. */
    if (given[OPT_INSECURE] || given[OPT_SECRET])
        given[OPT_INSECURE] = given[OPT_SECRET] = true;
    if (optind < argc) {
        fprintf(stderr, "%s: unexpected argument \"%s\" (see --help)\n", role->component, argv[optind]);
        exit(2);
    }
    if (o->config[0] && node__load_config(o, role, o->config, given) < 0)
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
    if (o->insecure && o->users_file[0]) {
        fprintf(stderr, "%s: --users-file needs authentication: it does not go with --insecure\n",
                role->component);
        exit(2);
    }
    if (o->max_queued_bytes < o->max_frame_header + o->max_frame_payload + FRAME_PREFIX_LEN) {
        fprintf(stderr, "%s: --max-queued-bytes must hold at least one whole frame "
                        "(--max-frame-header + --max-frame-payload)\n", role->component);
        exit(2);
    }
    if (o->max_connections_per_address > o->max_connections)
        o->max_connections_per_address = o->max_connections;
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
        r.threads = (uint32_t)n->opt.threads;
        r.pid = (uint32_t)getpid();
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
        uv_timer_start(&n->heartbeat, node__heartbeat, n->opt.heartbeat_ms, n->opt.heartbeat_ms);
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
                               uint64_t out, size_t queued, unsigned live)
{
    metrics_buf *b = arg;
    char esc[160];
    name = metrics_label_escape(name, esc, sizeof(esc)); /* peers name themselves */
    metrics_printf(b, "appliance_peer_bytes_received_total{peer=\"%s\",peer_role=\"%s\"} %llu\n",
                   name, msg_role_name(role), (unsigned long long)in);
    metrics_printf(b, "appliance_peer_bytes_sent_total{peer=\"%s\",peer_role=\"%s\"} %llu\n", name,
                   msg_role_name(role), (unsigned long long)out);
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
    uint64_t limit = n->role->role == APPLIANCE__ROLE__ROLE_WSE_NODE ? n->opt.wafer_memory
                     : n->role->role == APPLIANCE__ROLE__ROLE_MEMORYX ? n->opt.memory
                                                                      : 0;
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
                      "# HELP appliance_peer_queued_bytes Bytes queued for a peer, not yet written.\n"
                      "# TYPE appliance_peer_queued_bytes gauge\n"
                      "# HELP appliance_peer_connections Live connections with a peer.\n"
                      "# TYPE appliance_peer_connections gauge\n");
    conn_peers(node__peer_metrics, b);
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
    if (n->ccfg.high_water > n->ccfg.queue_max / 4)
        n->ccfg.high_water = n->ccfg.queue_max / 4;
    /* The coordinator paces long replies (logs) to the high water: they must
     * stay below the backlog after which it disconnects a client. */
    if (role->role == APPLIANCE__ROLE__ROLE_COORDINATOR &&
        n->ccfg.high_water > n->opt.max_client_backlog / 2)
        n->ccfg.high_water = n->opt.max_client_backlog / 2;
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
int node__load_config(node_options *o, const node_role *role, const char *path, const bool *given)
{
    char err[512];
    toml_value *root = toml_parse_file(path, err, sizeof(err));
    if (!root) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < toml_table_len(root) && rc == 0; i++) {
        const char *key = toml_table_key(root, i);
        const toml_value *v = toml_table_value(root, i);
        toml_pos kp = toml_table_key_pos(root, i);
        char opt[64];
        snprintf(opt, sizeof(opt), "%s", key);
        for (char *p = opt; *p; p++)
            if (*p == '_')
                *p = '-';
        const struct option *lo = NULL;
        for (const struct option *q = node__longopts; q->name; q++)
            if (strcmp(q->name, opt) == 0 && q->val != OPT_HELP && q->val != OPT_CONFIG)
                lo = q;
        if (!lo || !node__role_has(role, lo->val)) {
            toml_errorf(err, sizeof(err), path, kp, "unknown key \"%s\" for %s", key,
                        role->component);
            fprintf(stderr, "%s\n", err);
            rc = -1;
            break;
        }
        if (given[lo->val])
            continue;
        char val[PATH_MAX];
        if (toml_type_of(v) == TOML_STRING)
            snprintf(val, sizeof(val), "%s", toml_string(v));
        else if (toml_type_of(v) == TOML_INTEGER)
            snprintf(val, sizeof(val), "%lld", (long long)toml_int(v));
        else if (toml_type_of(v) == TOML_BOOL)
            snprintf(val, sizeof(val), "%s", toml_bool(v) ? "true" : "false");
        else {
            toml_errorf(err, sizeof(err), path, toml_pos_of(v),
                        "%s: expected a string, an integer or a boolean", key);
            fprintf(stderr, "%s\n", err);
            rc = -1;
            break;
        }
        char where[PATH_MAX + 80];
        toml_pos vp = toml_pos_of(v);
        snprintf(where, sizeof(where), "%s:%d:%d: %s", path, vp.line, vp.col, key);
        if (node__apply(o, lo->val, val, where) < 0)
            rc = -1;
    }
    toml_free(root);
    return rc;
}
