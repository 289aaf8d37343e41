/* Membership handlers: registration, heartbeats, the member list. */
#include "coordinator.h"
#include "job.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/time.h>

#include "driver.h"
#include "hosts.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"

static coordinator *co_of(node *n) { return n->data; }

void coordinator_member_lost(coordinator *co, member *mb, const char *why)
{
    if (mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE ||
        mb->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY)
        mb->state = APPLIANCE__MEMBER_STATE__MEMBER_LOST;
    log_warn("member %u (%s %s at %s) lost: %s", mb->id, msg_role_name(mb->role), mb->name,
             mb->addr, why);
    if (mb->job[0])
        driver_member_lost(co, mb);
}

static void co__on_sweep_lost(member *mb, void *arg)
{
    coordinator *co = arg;
    char why[64];
    snprintf(why, sizeof(why), "no heartbeat for %u ms", co->members.timeout_ms);
    co->heartbeats_missed++;
    coordinator_member_lost(co, mb, why);
    if (mb->c) {
        conn *c = mb->c;
        mb->c = NULL;
        conn_close(c, -ETIMEDOUT, "missed heartbeats");
    }
}

static void co__sweep(uv_timer_t *t)
{
    coordinator *co = t->data;
    members_sweep(&co->members, uv_now(t->loop), co__on_sweep_lost, co);
    jobs_tick(co);
    co->clients_dropped += admission_sweep_clients(co->n, &co->opt.admission);
}

static void co__register(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    Appliance__Register *r = env->register_;
    char why[160];
    if (msgcheck_register(r, c->peer_role, why, sizeof(why)) < 0) {
        log_warn("%s from %s: role %s, name \"%s\"", why, c->peer_addr, msg_role_name(r->role),
                 r->name ? r->name : "");
        conn_fail(c, -EINVAL, "%s", why);
        return;
    }
    if (members_by_conn(&co->members, c)) {
        conn_fail(c, -EALREADY, "already registered on this connection");
        return;
    }
    member *dup;
    member *mb = members_register(&co->members, c, r, uv_now(n->loop), &dup);
    if (!mb) {
        if (dup) {
            log_warn("registration of %s \"%s\" from %s refused: member %u already has that name",
                     msg_role_name(r->role), r->name, c->peer_addr, dup->id);
            conn_fail(c, -EEXIST, "a live %s named \"%s\" is already registered",
                      msg_role_name(r->role), r->name);
        } else {
            conn_fail(c, -ENOMEM, "out of memory");
        }
        return;
    }
    c->user = mb;
    log_info("member %u registered: %s %s at %s%s", mb->id, msg_role_name(mb->role), mb->name,
             mb->addr, mb->simulated ? " (simulated compute)" : "");
    char over[1024] = "";
    if (hosts_declared_over(&co->members, mb, over, sizeof(over)))
        log_warn("%s", over);
    Appliance__RegisterAck ack = APPLIANCE__REGISTER_ACK__INIT;
    ack.warning = over;
    ack.member_id = mb->id;
    ack.heartbeat_ms = n->opt.heartbeat_ms;
    ack.timeout_ms = co->opt.heartbeat_timeout_ms;
    Appliance__Envelope out = APPLIANCE__ENVELOPE__INIT;
    out.msg_case = APPLIANCE__ENVELOPE__MSG_REGISTER_ACK;
    out.register_ack = &ack;
    conn_send_msg(c, &out);
    driver_member_joined(co);
}

static void co__heartbeat(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    member *mb = members_by_conn(&co_of(n)->members, c);
    if (!mb) {
        conn_fail(c, -EPROTO, "heartbeat before registration");
        return;
    }
    mb->last_seen = uv_now(n->loop);
    Appliance__Heartbeat *hb = env->heartbeat;
    mb->lag_p99 = isfinite(hb->loop_lag_p99) && hb->loop_lag_p99 >= 0 ? hb->loop_lag_p99 : 0;
    mb->lag_max = isfinite(hb->loop_lag_max) && hb->loop_lag_max >= 0 ? hb->loop_lag_max : 0;
    mb->load1 = isfinite(hb->load1) ? hb->load1 : -1;
    conn_send_msg(c, env); /* the answer: the member knows the coordinator is there */
}

static void co__deregister(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    member *mb = members_by_conn(&co->members, c);
    if (!mb)
        return;
    log_info("member %u (%s %s) deregistered", mb->id, msg_role_name(mb->role), mb->name);
    if (mb->job[0])
        driver_member_lost(co, mb);
    mb->state = APPLIANCE__MEMBER_STATE__MEMBER_GONE;
    mb->c = NULL;
    c->user = NULL;
}

static void co__cluster_query(node *n, conn *c, Appliance__Envelope *env, uint8_t *p, uint32_t len)
{
    coordinator *co = co_of(n);
    size_t k = co->members.n;
    Appliance__Member *ms = calloc(k ? k : 1, sizeof(*ms));
    Appliance__Member **ptrs = calloc(k ? k : 1, sizeof(*ptrs));
    if (!ms || !ptrs) {
        free(ms);
        free(ptrs);
        node_reply_error(c, -ENOMEM, "out of memory");
        return;
    }
    uint64_t now = uv_now(n->loop);
    for (size_t i = 0; i < k; i++) {
        member *mb = &co->members.v[i];
        appliance__member__init(&ms[i]);
        ms[i].member_id = mb->id;
        ms[i].role = mb->role;
        ms[i].name = mb->name;
        ms[i].advertised_addr = mb->addr;
        ms[i].state = mb->state;
        ms[i].wafer_memory = mb->wafer_memory;
        ms[i].memory = mb->memory;
        ms[i].threads = mb->threads;
        ms[i].last_seen_ms_ago = now - mb->last_seen;
        job *j = mb->job[0] ? job_find(co, mb->job) : NULL;
        ms[i].job_id = !j || jobs_visible(c, j) ? mb->job : ""; /* users see only their own */
        ms[i].peer_addr = mb->peer;
        ms[i].host_id = mb->host_id;
        ms[i].host_name = mb->host_name;
        ms[i].host_memory = mb->host_memory;
        ms[i].isa = mb->isa;
        ms[i].conv_block = mb->conv_block;
        ms[i].bf16 = mb->bf16;
        ms[i].simulated = mb->simulated;
        ptrs[i] = &ms[i];
    }
    /* a line for each host whose live members declare more than it has:
     * the first live member of each host speaks for it */
    char (*lines)[1024] = calloc(k ? k : 1, sizeof(*lines));
    char **warnings = calloc(k ? k : 1, sizeof(*warnings));
    size_t nw = 0;
    for (size_t i = 0; lines && warnings && i < k; i++) {
        member *mb = &co->members.v[i];
        if (mb->state != APPLIANCE__MEMBER_STATE__MEMBER_ALIVE &&
            mb->state != APPLIANCE__MEMBER_STATE__MEMBER_BUSY)
            continue;
        bool first = true;
        for (size_t j = 0; j < i && first; j++) {
            const member *o = &co->members.v[j];
            first = !((o->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE ||
                       o->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY) &&
                      o->host_id[0] && strcmp(o->host_id, mb->host_id) == 0);
        }
        if (first && hosts_declared_over(&co->members, mb, lines[nw], sizeof(lines[nw]))) {
            warnings[nw] = lines[nw];
            nw++;
        }
    }
    Appliance__ClusterInfo info = APPLIANCE__CLUSTER_INFO__INIT;
    info.n_members = k;
    info.members = ptrs;
    info.n_warnings = nw;
    info.warnings = warnings;
    Appliance__Envelope out = APPLIANCE__ENVELOPE__INIT;
    out.msg_case = APPLIANCE__ENVELOPE__MSG_CLUSTER_INFO;
    out.cluster_info = &info;
    conn_send_msg(c, &out);
    free(ms);
    free(ptrs);
    free(lines);
    free(warnings);
}

static void co__conn_close(node *n, conn *c, int err, const char *reason)
{
    coordinator *co = co_of(n);
    member *mb = members_by_conn(&co->members, c);
    if (mb) {
        mb->c = NULL;
        if (mb->state != APPLIANCE__MEMBER_STATE__MEMBER_GONE && !n->stopping)
            coordinator_member_lost(co, mb, reason);
    }
    jobs_client_closed(co, c);
    jobctl_client_forget(co, c);
}

static void co__drain(node *n, conn *c)
{
    jobctl_client_drain(co_of(n), c);
}

static void co__shutdown(node *n)
{
    coordinator *co = co_of(n);
    uv_timer_stop(&co->sweep);
    uv_close((uv_handle_t *)&co->sweep, NULL);
    jobs_shutdown(co);
}

static void co__metrics(node *n, metrics_buf *b)
{
    coordinator *co = co_of(n);
    size_t by[6] = {0};
    for (size_t i = 0; i < co->njobs; i++)
        if ((unsigned)co->jobs[i]->state < 6)
            by[co->jobs[i]->state]++;
    metrics_printf(b, "# HELP appliance_jobs Jobs the coordinator knows, by state.\n"
                      "# TYPE appliance_jobs gauge\n");
    for (int i = 1; i < 6; i++)
        metrics_printf(b, "appliance_jobs{state=\"%s\"} %zu\n",
                       msg_job_state_name((Appliance__JobState)i), by[i]);
    size_t by_member[5] = {0};
    for (size_t i = 0; i < co->members.n; i++)
        if ((unsigned)co->members.v[i].state < 5)
            by_member[co->members.v[i].state]++;
    metrics_printf(b, "# HELP appliance_members Members, by state.\n# TYPE appliance_members gauge\n");
    for (int i = 1; i < 5; i++)
        metrics_printf(b, "appliance_members{state=\"%s\"} %zu\n",
                       msg_member_state_name((Appliance__MemberState)i), by_member[i]);
    metrics_printf(b, "# HELP appliance_heartbeats_missed_total Members lost because their heartbeats stopped.\n"
                      "# TYPE appliance_heartbeats_missed_total counter\n"
                      "appliance_heartbeats_missed_total %llu\n",
                   (unsigned long long)co->heartbeats_missed);
    size_t queued = 0;
    for (size_t i = 0; i < co->njobs; i++)
        queued += co->jobs[i]->state == APPLIANCE__JOB_STATE__JOB_QUEUED;
    metrics_printf(b, "# HELP appliance_queue_depth Jobs waiting in the queue.\n"
                      "# TYPE appliance_queue_depth gauge\nappliance_queue_depth %zu\n", queued);
    metrics_printf(b, "# HELP appliance_jobs_refused_total Submissions refused by an admission limit.\n"
                      "# TYPE appliance_jobs_refused_total counter\nappliance_jobs_refused_total %llu\n"
                      "# HELP appliance_jobs_evicted_total Finished jobs evicted from memory (the journal keeps them).\n"
                      "# TYPE appliance_jobs_evicted_total counter\nappliance_jobs_evicted_total %llu\n"
                      "# HELP appliance_clients_dropped_total Clients disconnected for leaving replies unread.\n"
                      "# TYPE appliance_clients_dropped_total counter\nappliance_clients_dropped_total %llu\n",
                   (unsigned long long)co->jobs_refused, (unsigned long long)co->jobs_evicted,
                   (unsigned long long)co->clients_dropped);
    metrics_hist_render(&co->step_hist, b, NULL);
    /* the running job's last step, as Unix time: an alert compares it with
     * the clock (deploy/prometheus) */
    metrics_printf(b, "# HELP appliance_job_last_step_timestamp_seconds When the running job last "
                      "completed a step (or, before its first, started), Unix time.\n"
                      "# TYPE appliance_job_last_step_timestamp_seconds gauge\n");
    job *r = co->running;
    if (r && r->state == APPLIANCE__JOB_STATE__JOB_RUNNING && r->step_at) {
        struct timeval tv;
        gettimeofday(&tv, NULL);
        double now = (double)tv.tv_sec + (double)tv.tv_usec * 1e-6;
        double ago = (double)(uv_now(n->loop) - r->step_at) / 1000.0;
        metrics_printf(b, "appliance_job_last_step_timestamp_seconds{job_id=\"%s\"} %.3f\n", r->id,
                       now - ago);
    }
}

#define CO__OPT(f) offsetof(coordinator_options, f)
#define CO__STR(f) CO__OPT(f), sizeof(((coordinator_options *)0)->f)
static const options_key co__keys[] = {
    {"state-dir", "DIR", OPTIONS_STRING, CO__STR(state_dir), 0, 0,
     "the job journal (journal.sqlite); without it jobs are not kept"},
    {"heartbeat-timeout-ms", "MS", OPTIONS_U32, CO__OPT(heartbeat_timeout_ms), 0, 1, 10000000,
     "silence after which a member is lost (default 3000)"},
    {"users-file", "PATH", OPTIONS_STRING, CO__STR(users_file), 0, 0,
     "users and their keys: a user sees only their own jobs"},
    {"max-job-file", "SIZE", OPTIONS_SIZE, CO__OPT(admission.max_job_file), 0, 1u << 10, 256u << 20,
     "bytes of a submitted job file (default 256K)"},
    {"max-model-params", "N", OPTIONS_SIZE, CO__OPT(max_model_params), 0, 1, UINT64_C(1) << 40,
     "trainable parameters of a submitted model (default: what the memoryx members hold)"},
    {"max-steps", "N", OPTIONS_U64, CO__OPT(max_steps), 0, 1, INT64_MAX,
     "runconfig.max_steps of a submitted job (default 100000000)"},
    {"max-queued-jobs", "N", OPTIONS_U32, CO__OPT(admission.max_queued_jobs), 0, 1, 10000000,
     "jobs waiting in the queue at most (default 1000)"},
    {"max-queued-per-submitter", "N", OPTIONS_U32, CO__OPT(admission.max_queued_per_submitter), 0, 1, 10000000,
     "of those, from one submitter (default 100)"},
    {"max-job-history", "N", OPTIONS_U32, CO__OPT(max_job_history), 0, 1, 10000000,
     "finished jobs kept in memory; older ones are read\nback from the journal (default 1000)"},
    {"chunk-size", "SIZE", OPTIONS_SIZE, CO__OPT(chunk_bytes), 0, 1u << 10, 64u << 20,
     "payload of a frame of weights, gradients or input\nbatches in a job's streams; a multiple of 4,\nat most every daemon's --max-frame-payload (default 1M)"},
    {"max-client-backlog", "SIZE", OPTIONS_SIZE, CO__OPT(admission.max_client_backlog), 0, 0, 0,
     "unread replies after which a client is\ndisconnected (default 8M)"},
    {"http", "ADDR", OPTIONS_STRING, CO__STR(http), 0, 0,
     "IPv4:PORT serving the web page of the cluster and\nits jobs, and its JSON API (docs/web.md); off by\ndefault"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static int co__check_options(const node_options *frame, void *opts)
{
    const coordinator_options *o = opts;
    if (frame->insecure && o->users_file[0]) {
        fprintf(stderr, "coordinator: --users-file needs authentication: it does not go with --insecure\n");
        return -1;
    }
    if (o->chunk_bytes % sizeof(float) != 0 || o->chunk_bytes > frame->max_frame_payload) {
        fprintf(stderr, "coordinator: --chunk-size %llu is not a multiple of 4 at most "
                        "--max-frame-payload (%llu)\n", (unsigned long long)o->chunk_bytes,
                (unsigned long long)frame->max_frame_payload);
        return -1;
    }
    return 0;
}

void coordinator_role(node_role *role, coordinator_options *opt)
{
    memset(role, 0, sizeof(*role));
    role->role = APPLIANCE__ROLE__ROLE_COORDINATOR;
    role->component = "coordinator";
    memset(opt, 0, sizeof(*opt));
    opt->heartbeat_timeout_ms = 3000;
    opt->admission.max_job_file = COORDINATOR_DEFAULT_MAX_JOB_FILE;
    opt->max_model_params = COORDINATOR_DEFAULT_MAX_MODEL_PARAMS;
    opt->chunk_bytes = COORDINATOR_DEFAULT_CHUNK;
    opt->max_steps = COORDINATOR_DEFAULT_MAX_STEPS;
    opt->admission.max_queued_jobs = 1000;
    opt->admission.max_queued_per_submitter = 100;
    opt->max_job_history = 1000;
    opt->admission.max_client_backlog = 8u << 20;
    role->options = (options_table){NULL, co__keys, opt};
    role->check_options = co__check_options;
    role->handlers[APPLIANCE__ENVELOPE__MSG_REGISTER] = co__register;
    role->handlers[APPLIANCE__ENVELOPE__MSG_HEARTBEAT] = co__heartbeat;
    role->handlers[APPLIANCE__ENVELOPE__MSG_DEREGISTER] = co__deregister;
    role->handlers[APPLIANCE__ENVELOPE__MSG_CLUSTER_QUERY] = co__cluster_query;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_SUBMIT] = jobctl_handle_submit;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_STATUS_QUERY] = jobctl_handle_status;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_READY] = driver_handle_ready;
    role->handlers[APPLIANCE__ENVELOPE__MSG_STEP_REPORT] = driver_handle_step_report;
    role->handlers[APPLIANCE__ENVELOPE__MSG_STEP_COMMITTED] = driver_handle_step_committed;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_FINISHED] = driver_handle_finished;
    role->handlers[APPLIANCE__ENVELOPE__MSG_EVAL_REPORT] = driver_handle_eval_report;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_CANCEL] = jobctl_handle_cancel;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_LIST_QUERY] = jobctl_handle_list;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_LOG_QUERY] = jobctl_handle_logs;
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_ABORT] = driver_handle_abort;
    role->handlers[APPLIANCE__ENVELOPE__MSG_CHECKPOINT_WRITTEN] = driver_handle_checkpoint;
    /* What a client holding a user key (not the cluster secret) may ask. */
    static const Appliance__Envelope__MsgCase user_msgs[] = {
        APPLIANCE__ENVELOPE__MSG_JOB_SUBMIT, APPLIANCE__ENVELOPE__MSG_JOB_STATUS_QUERY,
        APPLIANCE__ENVELOPE__MSG_JOB_CANCEL, APPLIANCE__ENVELOPE__MSG_JOB_LIST_QUERY,
        APPLIANCE__ENVELOPE__MSG_JOB_LOG_QUERY, APPLIANCE__ENVELOPE__MSG_CLUSTER_QUERY,
    };
    for (size_t i = 0; i < sizeof(user_msgs) / sizeof(user_msgs[0]); i++)
        role->user_msgs[user_msgs[i]] = true;
    role->on_conn_close = co__conn_close;
    role->on_drain = co__drain;
    role->on_shutdown = co__shutdown;
    role->metrics = co__metrics;
}

void coordinator_init(coordinator *co, node *n)
{
    coordinator_options opt = co->opt; /* parsed before; the rest starts empty */
    memset(co, 0, sizeof(*co));
    co->opt = opt;
    co->n = n;
    members_init(&co->members, co->opt.heartbeat_timeout_ms);
    uv_timer_init(n->loop, &co->sweep);
    co->sweep.data = co;
    uint32_t every = co->opt.heartbeat_timeout_ms / 4 ? co->opt.heartbeat_timeout_ms / 4 : 1;
    uv_timer_start(&co->sweep, co__sweep, every, every);
    co->next_seq = 1;
    metrics_hist_init(&co->step_hist, "appliance_step_seconds",
                      "Time between committed training steps of the running job.");
    if (co->opt.state_dir[0]) {
        char err[512];
        co->journal = journal_open(co->opt.state_dir, err, sizeof(err));
        if (!co->journal)
            log_error("no job journal: %s", err);
    }
    jobctl_load(co);
}
