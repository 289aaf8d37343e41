/* Load on the coordinator while a training job runs: many authenticated
 * clients each poll the training job's status and their own jobs' at a fixed
 * rate, and together submit small jobs spread over the run. One more
 * connection, the observer, polls the training job often to time its steps
 * and the coordinator's status round trip. At the end every submission must
 * be accounted for: refused with a reason, or a job the coordinator still
 * answers for (queued, running, done, failed or cancelled).
 *
 * Prints one "name value" line per figure on stdout and exits 1 when a
 * submission is unaccounted for (or the run could not be made). With
 * --clients 0 only the observer runs: the unloaded baseline. */
#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>
#include <uv.h>

#include "conn.h"
#include "log.h"
#include "msg.h"

#define LOAD_INFLIGHT 64      /* requests one connection has out at most */
#define LOAD_DRAIN_MS 30000   /* wait for the last replies at most this long */
#define LOAD_CONNECT_EVERY 5  /* ms between two clients' dials (the listen backlog is 128) */

enum req_kind { REQ_TRAIN_STATUS, REQ_OWN_STATUS, REQ_SUBMIT, REQ_LIST, REQ_CHECK };

/* A request waiting for its reply; the coordinator answers each request of
 * a connection exactly once, in order. */
typedef struct load_req {
    enum req_kind kind;
    int sub;                  /* the submission it concerns, or -1 */
    uint64_t sent;            /* uv_hrtime when sent */
} load_req;

enum fate { FATE_UNSENT, FATE_SENT, FATE_ACCEPTED, FATE_REFUSED };

typedef struct load_sub {
    enum fate fate;
    char file[32];            /* "load-<k>.toml": how the job list names it */
    char job_id[40];          /* once accepted */
    char *reason;             /* once refused: the coordinator's message, owned */
    int state;                /* the last Appliance__JobState seen, 0: none */
} load_sub;

typedef struct load load;

typedef struct load_client {
    load *ld;
    int idx;                  /* 0.., or -1 for the observer */
    char name[32];            /* its Hello name: the coordinator counts its jobs by it */
    conn_config cfg;          /* names it in Hello; outlives the connection */
    conn *c;
    bool ready;               /* authenticated */
    bool closed;              /* its connection is gone */
    uv_timer_t poll;
    load_req q[LOAD_INFLIGHT]; /* requests in flight, a ring */
    size_t qhead, qn;
    int *own;                 /* submissions it got accepted */
    size_t nown, capown, next_own;
} load_client;

/* A growing array of round-trip times, in milliseconds. */
typedef struct load_times {
    double *v;                /* n of cap used, in arrival order until sorted */
    size_t n, cap;
} load_times;

enum phase { PHASE_RUN, PHASE_DRAIN, PHASE_LIST, PHASE_CHECK, PHASE_DONE };

struct load {
    uv_loop_t *loop;
    auth_secret secret;       /* the cluster secret every connection proves */
    char host[256];           /* the coordinator */
    int port;
    const char *train;        /* the training job's id */
    char *job_text;           /* the small job's file */
    char cwd[PATH_MAX];       /* sent as the jobs' base directory */
    int nclients, njobs;      /* --clients, --jobs */
    double seconds;           /* --seconds: the run, submissions in its first 80% */
    unsigned poll_ms, observe_ms; /* --poll-ms, --observe-ms */
    load_client *clients;     /* nclients of them */
    load_client obs;          /* the observer */
    load_sub *subs;           /* njobs of them */
    int next_sub;             /* the next submission to send */
    int next_client;          /* round robin of submissions */
    int connected;            /* clients that dialled so far */
    enum phase phase;         /* where the run is */
    uint64_t t_start;         /* uv_hrtime at start */
    uint64_t t0;              /* the observer authenticated: the run starts */
    uint64_t drain_start;     /* uv_hrtime when the run ended and draining began */
    uv_timer_t connector;     /* dials the next client */
    uv_timer_t submitter;     /* sends the submissions due */
    uv_timer_t clock;         /* ends the run, then the draining */
    /* The training job as the observer saw it: */
    uint64_t prev_step;       /* in the last status */
    bool seen_step;           /* a status came */
    bool timing;              /* the step changed once: the clock runs */
    uint64_t first_step, last_step; /* at the first and the last change seen */
    uint64_t t_first, t_last; /* uv_hrtime of those changes */
    int train_state;          /* its Appliance__JobState in the last status */
    /* Counters: */
    load_times obs_rtt;       /* the observer's status round trips */
    load_times all_rtt;       /* every status round trip */
    load_times submit_rtt;    /* submission to acceptance or refusal */
    uint64_t status_polls;    /* status queries answered */
    uint64_t status_errors;   /* of them, answered with an error */
    uint64_t unexpected;      /* replies no request was waiting for */
    uint64_t skipped_polls;   /* polls not sent: the connection had LOAD_INFLIGHT out */
    int ready_clients;        /* clients that authenticated */
    int closed_early;         /* connections that closed before the end */
    int check_next;           /* next submission to ask about (PHASE_CHECK) */
    int check_out;            /* those asked, not answered */
    bool failed;              /* the run itself went wrong */
};

static void times_add(load_times *t, double ms)
{
    if (t->n == t->cap) {
        size_t cap = t->cap ? t->cap * 2 : 1024;
        double *v = realloc(t->v, cap * sizeof(*v));
        if (!v)
            return;
        t->v = v;
        t->cap = cap;
    }
    t->v[t->n++] = ms;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The q-quantile (0..1) of t, sorting it; 0 when empty. */
static double times_quantile(load_times *t, double q)
{
    if (t->n == 0)
        return 0;
    qsort(t->v, t->n, sizeof(double), cmp_double);
    size_t k = (size_t)ceil(q * (double)t->n);
    return t->v[k ? k - 1 : 0];
}

static uint64_t ms_since(uint64_t t) { return (uv_hrtime() - t) / 1000000; }

/* ---- requests ---- */

static int send_req(load_client *cl, const Appliance__Envelope *env, enum req_kind kind, int sub)
{
    if (!cl->ready || cl->closed || cl->qn == LOAD_INFLIGHT)
        return -EAGAIN;
    if (conn_send_msg(cl->c, env) < 0)
        return -EIO;
    load_req *r = &cl->q[(cl->qhead + cl->qn++) % LOAD_INFLIGHT];
    r->kind = kind;
    r->sub = sub;
    r->sent = uv_hrtime();
    return 0;
}

static int send_status(load_client *cl, const char *id, enum req_kind kind, int sub)
{
    Appliance__JobStatusQuery q = APPLIANCE__JOB_STATUS_QUERY__INIT;
    q.job_id = (char *)id;
    ENVELOPE(env, job_status_query, JOB_STATUS_QUERY, &q);
    return send_req(cl, &env, kind, sub);
}

static int send_submit(load_client *cl, int sub)
{
    load *ld = cl->ld;
    Appliance__JobSubmit s = APPLIANCE__JOB_SUBMIT__INIT;
    s.file_name = ld->subs[sub].file;
    s.toml = ld->job_text;
    s.base_dir = ld->cwd;
    ENVELOPE(env, job_submit, JOB_SUBMIT, &s);
    int rc = send_req(cl, &env, REQ_SUBMIT, sub);
    if (rc == 0)
        ld->subs[sub].fate = FATE_SENT;
    return rc;
}

static void on_poll(uv_timer_t *t)
{
    load_client *cl = t->data;
    load *ld = cl->ld;
    if (ld->phase != PHASE_RUN)
        return;
    if (cl->idx < 0) {
        if (cl->qn == 0) /* one at a time: its round trips are the loop's latency */
            send_status(cl, ld->train, REQ_TRAIN_STATUS, -1);
        return;
    }
    if (send_status(cl, ld->train, REQ_TRAIN_STATUS, -1) < 0)
        ld->skipped_polls++;
    if (cl->nown) {
        int sub = cl->own[cl->next_own++ % cl->nown];
        if (send_status(cl, ld->subs[sub].job_id, REQ_OWN_STATUS, sub) < 0)
            ld->skipped_polls++;
    }
}

/* Sends the submissions due by now, spread evenly over 80% of the run. */
static void on_submit_tick(uv_timer_t *t)
{
    load *ld = t->data;
    if (ld->phase != PHASE_RUN || ld->nclients == 0 || !ld->t0)
        return;
    double span_ms = ld->seconds * 1000.0 * 0.8;
    int due = (int)((double)ms_since(ld->t0) / span_ms * ld->njobs) + 1;
    if (due > ld->njobs)
        due = ld->njobs;
    while (ld->next_sub < due) {
        int tries = 0;
        while (tries < ld->nclients) {
            load_client *cl = &ld->clients[ld->next_client];
            ld->next_client = (ld->next_client + 1) % ld->nclients;
            tries++;
            if (send_submit(cl, ld->next_sub) == 0)
                break;
        }
        if (ld->subs[ld->next_sub].fate != FATE_SENT)
            return; /* no client can take it now: the next tick tries again */
        ld->next_sub++;
    }
}

/* ---- the end: drain, list, ask about the rest, report ---- */

static void finish(load *ld);

static const char *const state_names[] = {"unknown", "queued", "running", "done", "failed",
                                          "cancelled"};

static void report(load *ld)
{
    int fates[4] = {0}, states[6] = {0};
    int no_reason = 0, per_submitter = 0, queue_full = 0, too_big = 0, other = 0, unaccounted = 0;
    for (int i = 0; i < ld->njobs; i++) {
        load_sub *s = &ld->subs[i];
        fates[s->fate]++;
        if (s->fate == FATE_REFUSED) {
            if (!s->reason || !s->reason[0])
                no_reason++;
            else if (strstr(s->reason, "--max-queued-per-submitter"))
                per_submitter++;
            else if (strstr(s->reason, "--max-queued-jobs"))
                queue_full++;
            else if (strstr(s->reason, "max_job_file"))
                too_big++;
            else
                other++;
            if (!s->reason || !s->reason[0])
                unaccounted++;
        } else if (s->fate == FATE_UNSENT) {
            continue; /* not submitted: the run was too short (a failure of its own) */
        } else if (s->state > 0 && s->state < 6) {
            states[s->state]++;
        } else {
            unaccounted++;
            if (unaccounted <= 10)
                fprintf(stderr, "load: %s (%s) unaccounted for\n", s->file,
                        s->job_id[0] ? s->job_id : "no reply");
        }
    }
    double step_sec = 0;
    if (ld->timing && ld->last_step > ld->first_step)
        step_sec = (double)(ld->t_last - ld->t_first) / 1e9 / (double)(ld->last_step - ld->first_step);
    printf("clients %d\n", ld->nclients);
    printf("clients_connected %d\n", ld->ready_clients);
    printf("clients_closed_early %d\n", ld->closed_early);
    printf("submitted %d\n", ld->next_sub);
    printf("accepted %d\n", fates[FATE_ACCEPTED]);
    printf("refused %d\n", fates[FATE_REFUSED]);
    printf("refused_per_submitter %d\n", per_submitter);
    printf("refused_queue_full %d\n", queue_full);
    printf("refused_job_file %d\n", too_big);
    printf("refused_other %d\n", other);
    printf("refused_without_reason %d\n", no_reason);
    for (int s = 1; s < 6; s++)
        printf("final_%s %d\n", state_names[s], states[s]);
    printf("unanswered %d\n", fates[FATE_SENT]);
    printf("unaccounted %d\n", unaccounted);
    printf("status_polls %llu\n", (unsigned long long)ld->status_polls);
    printf("status_errors %llu\n", (unsigned long long)ld->status_errors);
    printf("skipped_polls %llu\n", (unsigned long long)ld->skipped_polls);
    printf("unexpected_replies %llu\n", (unsigned long long)ld->unexpected);
    printf("train_steps %llu\n", (unsigned long long)(ld->last_step - ld->first_step));
    printf("train_step_sec %.6f\n", step_sec);
    printf("obs_rtt_p50_ms %.3f\n", times_quantile(&ld->obs_rtt, 0.5));
    printf("obs_rtt_p99_ms %.3f\n", times_quantile(&ld->obs_rtt, 0.99));
    printf("obs_rtt_samples %zu\n", ld->obs_rtt.n);
    printf("all_rtt_p50_ms %.3f\n", times_quantile(&ld->all_rtt, 0.5));
    printf("all_rtt_p99_ms %.3f\n", times_quantile(&ld->all_rtt, 0.99));
    printf("submit_rtt_p99_ms %.3f\n", times_quantile(&ld->submit_rtt, 0.99));
    struct rusage ru;
    if (getrusage(RUSAGE_SELF, &ru) == 0)
        printf("cpu_sec %.3f\n", (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
                                     (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6);
    fflush(stdout);
    /* One example of each kind of refusal (the limit it names), for the log. */
    static const char *const kinds[] = {"--max-queued-per-submitter", "--max-queued-jobs",
                                        "max_job_file", NULL};
    for (size_t k = 0; k < sizeof(kinds) / sizeof(kinds[0]); k++)
        for (int i = 0; i < ld->njobs; i++) {
            const char *r = ld->subs[i].reason;
            bool match = r && (kinds[k] ? strstr(r, kinds[k]) != NULL
                                        : !strstr(r, "--max-queued") && !strstr(r, "max_job_file"));
            if (match) {
                fprintf(stderr, "load: refused, e.g. %s: %s\n", ld->subs[i].file, r);
                break;
            }
        }
    if (unaccounted || ld->failed || (ld->njobs && ld->nclients && ld->next_sub < ld->njobs))
        ld->failed = true;
}

/* Asks the coordinator about accepted jobs the list did not show. */
static void check_more(load *ld)
{
    while (ld->check_next < ld->njobs) {
        load_sub *s = &ld->subs[ld->check_next];
        if (s->fate != FATE_ACCEPTED || s->state) {
            ld->check_next++;
            continue;
        }
        if (send_status(&ld->obs, s->job_id, REQ_CHECK, ld->check_next) < 0)
            break;
        ld->check_next++;
        ld->check_out++;
    }
    if (ld->check_out == 0)
        finish(ld);
}

/* One frame of the list; the last (last true) ends the listing. */
static void on_list(load *ld, const Appliance__JobList *l, bool last)
{
    for (size_t i = 0; i < l->n_jobs; i++) {
        const Appliance__JobStatus *st = l->jobs[i];
        int k;
        if (!st->file_name || sscanf(st->file_name, "load-%d.toml", &k) != 1 || k < 0 ||
            k >= ld->njobs)
            continue;
        load_sub *s = &ld->subs[k];
        if (s->fate == FATE_ACCEPTED && strcmp(s->job_id, st->job_id) != 0) {
            fprintf(stderr, "load: %s accepted as %s but listed as %s\n", s->file, s->job_id,
                    st->job_id);
            continue;
        }
        if (s->fate == FATE_SENT) { /* the reply was lost with its connection */
            s->fate = FATE_ACCEPTED;
            snprintf(s->job_id, sizeof(s->job_id), "%s", st->job_id);
        }
        s->state = st->state;
    }
    if (!last)
        return;
    if (l->omitted)
        fprintf(stderr, "load: the list left out %llu older jobs; asking for them one by one\n",
                (unsigned long long)l->omitted);
    ld->phase = PHASE_CHECK;
    check_more(ld);
}

static void on_clock(uv_timer_t *t)
{
    load *ld = t->data;
    if (!ld->t0 && ms_since(ld->t_start) > 10000) {
        fprintf(stderr, "load: the observer could not connect within 10 s\n");
        ld->failed = true;
        finish(ld);
        return;
    }
    if (ld->phase == PHASE_RUN && ld->t0 && ms_since(ld->t0) >= (uint64_t)(ld->seconds * 1000)) {
        ld->phase = PHASE_DRAIN;
        ld->drain_start = uv_hrtime();
        if (ld->next_sub < ld->njobs && ld->nclients)
            fprintf(stderr, "load: only %d of %d jobs could be submitted in %.0f s\n",
                    ld->next_sub, ld->njobs, ld->seconds);
    }
    if (ld->phase != PHASE_DRAIN)
        return;
    size_t out = ld->obs.qn;
    for (int i = 0; i < ld->nclients; i++)
        if (!ld->clients[i].closed)
            out += ld->clients[i].qn;
    if (out && ms_since(ld->drain_start) < LOAD_DRAIN_MS)
        return;
    if (out)
        fprintf(stderr, "load: %zu requests unanswered after %d ms\n", out, LOAD_DRAIN_MS);
    if (ld->njobs == 0 || ld->nclients == 0) {
        finish(ld);
        return;
    }
    ld->phase = PHASE_LIST;
    Appliance__JobListQuery q = APPLIANCE__JOB_LIST_QUERY__INIT;
    ENVELOPE(env, job_list_query, JOB_LIST_QUERY, &q);
    if (send_req(&ld->obs, &env, REQ_LIST, -1) < 0) {
        fprintf(stderr, "load: cannot ask for the job list\n");
        ld->failed = true;
        finish(ld);
    }
}

static void close_client(load_client *cl)
{
    if (cl->c && !cl->closed)
        conn_close(cl->c, 0, "done");
    if (!uv_is_closing((uv_handle_t *)&cl->poll))
        uv_close((uv_handle_t *)&cl->poll, NULL);
}

static void finish(load *ld)
{
    if (ld->phase == PHASE_DONE)
        return;
    ld->phase = PHASE_DONE;
    report(ld);
    uv_close((uv_handle_t *)&ld->connector, NULL);
    uv_close((uv_handle_t *)&ld->submitter, NULL);
    uv_close((uv_handle_t *)&ld->clock, NULL);
    close_client(&ld->obs);
    for (int i = 0; i < ld->nclients; i++)
        close_client(&ld->clients[i]);
}

/* ---- the connections ---- */

static void on_ready(conn *c)
{
    load_client *cl = c->data;
    load *ld = cl->ld;
    cl->ready = true;
    if (cl->idx < 0) {
        ld->t0 = uv_hrtime();
        uv_timer_start(&cl->poll, on_poll, 0, ld->observe_ms);
        return;
    }
    ld->ready_clients++;
    uv_timer_start(&cl->poll, on_poll, (uint64_t)(rand() % (int)ld->poll_ms), ld->poll_ms);
}

static void own_add(load_client *cl, int sub)
{
    if (cl->nown == cl->capown) {
        size_t cap = cl->capown ? cl->capown * 2 : 8;
        int *v = realloc(cl->own, cap * sizeof(*v));
        if (!v)
            return;
        cl->own = v;
        cl->capown = cap;
    }
    cl->own[cl->nown++] = sub;
}

static void on_train_status(load *ld, load_client *cl, const Appliance__JobStatus *st)
{
    if (cl->idx >= 0)
        return;
    ld->train_state = st->state;
    if (st->state != APPLIANCE__JOB_STATE__JOB_RUNNING || ld->phase != PHASE_RUN)
        return;
    uint64_t now = uv_hrtime();
    bool changed = ld->seen_step && st->step != ld->prev_step;
    ld->seen_step = true;
    ld->prev_step = st->step;
    if (!changed)
        return;
    if (!ld->timing) { /* the first change starts the clock */
        ld->timing = true;
        ld->first_step = st->step;
        ld->t_first = now;
    }
    ld->last_step = st->step;
    ld->t_last = now;
}

static void on_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    load_client *cl = c->data;
    load *ld = cl->ld;
    if (cl->qn == 0) {
        ld->unexpected++;
        return;
    }
    load_req r = cl->q[cl->qhead];
    /* A long list comes in several frames: the request is answered by the
     * last (JobList.more false). */
    bool more = r.kind == REQ_LIST && env->msg_case == APPLIANCE__ENVELOPE__MSG_JOB_LIST &&
                env->job_list->more;
    if (!more) {
        cl->qhead = (cl->qhead + 1) % LOAD_INFLIGHT;
        cl->qn--;
    }
    double rtt = (double)(uv_hrtime() - r.sent) / 1e6;
    bool is_error = env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR;
    const char *msg = is_error && env->error->message ? env->error->message : "";
    switch (r.kind) {
    case REQ_TRAIN_STATUS:
    case REQ_OWN_STATUS:
        ld->status_polls++;
        times_add(cl->idx < 0 ? &ld->obs_rtt : &ld->all_rtt, rtt);
        if (cl->idx < 0)
            times_add(&ld->all_rtt, rtt);
        if (env->msg_case != APPLIANCE__ENVELOPE__MSG_JOB_STATUS) {
            ld->status_errors++;
            if (ld->status_errors <= 5)
                fprintf(stderr, "load: status query answered with %s: %s\n",
                        frame_msg_name(env->msg_case), msg);
            return;
        }
        if (r.kind == REQ_TRAIN_STATUS)
            on_train_status(ld, cl, env->job_status);
        else
            ld->subs[r.sub].state = env->job_status->state;
        return;
    case REQ_SUBMIT: {
        load_sub *s = &ld->subs[r.sub];
        times_add(&ld->submit_rtt, rtt);
        if (env->msg_case == APPLIANCE__ENVELOPE__MSG_JOB_ACCEPTED) {
            s->fate = FATE_ACCEPTED;
            snprintf(s->job_id, sizeof(s->job_id), "%s", env->job_accepted->job_id);
            s->state = APPLIANCE__JOB_STATE__JOB_QUEUED;
            own_add(cl, r.sub);
        } else if (is_error) {
            s->fate = FATE_REFUSED;
            s->reason = strdup(msg);
        } else {
            ld->unexpected++;
        }
        return;
    }
    case REQ_LIST:
        if (env->msg_case != APPLIANCE__ENVELOPE__MSG_JOB_LIST) {
            fprintf(stderr, "load: the job list was answered with %s: %s\n",
                    frame_msg_name(env->msg_case), msg);
            ld->failed = true;
            finish(ld);
            return;
        }
        on_list(ld, env->job_list, !more);
        return;
    case REQ_CHECK:
        ld->check_out--;
        if (env->msg_case == APPLIANCE__ENVELOPE__MSG_JOB_STATUS)
            ld->subs[r.sub].state = env->job_status->state;
        else
            fprintf(stderr, "load: %s (%s): %s\n", ld->subs[r.sub].file, ld->subs[r.sub].job_id, msg);
        check_more(ld);
        return;
    }
}

static void on_close(conn *c, int err, const char *reason)
{
    load_client *cl = c->data;
    load *ld = cl->ld;
    cl->closed = true;
    cl->c = NULL;
    if (ld->phase == PHASE_DONE)
        return;
    ld->closed_early++;
    if (ld->closed_early <= 5)
        fprintf(stderr, "load: connection %s closed: %s\n", cl->name, reason);
    if (cl->idx < 0) {
        fprintf(stderr, "load: lost the observer connection\n");
        ld->failed = true;
        finish(ld);
    }
}

static const conn_ops load_ops = {.on_ready = on_ready, .on_frame = on_frame, .on_close = on_close};

static void dial(load *ld, load_client *cl)
{
    conn_config_default(&cl->cfg, &ld->secret, APPLIANCE__ROLE__ROLE_CLIENT, cl->name);
    cl->c = conn_connect(ld->loop, ld->host, ld->port, &cl->cfg, &load_ops, cl);
    if (!cl->c) {
        cl->closed = true;
        ld->failed = true;
    }
}

static void on_connect_tick(uv_timer_t *t)
{
    load *ld = t->data;
    if (ld->connected < ld->nclients && ld->phase == PHASE_RUN)
        dial(ld, &ld->clients[ld->connected++]);
    else
        uv_timer_stop(t);
}

static void init_client(load *ld, load_client *cl, int idx)
{
    cl->ld = ld;
    cl->idx = idx;
    if (idx < 0)
        snprintf(cl->name, sizeof(cl->name), "load-observer");
    else
        snprintf(cl->name, sizeof(cl->name), "load-%d", idx);
    uv_timer_init(ld->loop, &cl->poll);
    cl->poll.data = cl;
}

/* ---- set-up ---- */

static void usage(FILE *f)
{
    fprintf(f,
            "Usage: load --train JOB [--job-file FILE] [OPTIONS]\n"
            "\n"
            "  --coordinator HOST:PORT  the coordinator (env APPLIANCE_COORDINATOR)\n"
            "  --secret-file PATH       cluster secret (env APPLIANCE_SECRET_FILE)\n"
            "  --train JOB              the running training job to poll and time\n"
            "  --job-file FILE          the small job to submit (needed with --jobs)\n"
            "  --clients N              client connections (default 200; 0: observer only)\n"
            "  --jobs N                 jobs submitted in all (default 1000)\n"
            "  --seconds S              length of the run (default 30)\n"
            "  --poll-ms MS             each client's status polls (default 500)\n"
            "  --observe-ms MS          the observer's polls of the training job (default 25)\n");
}

static char *read_file(const char *path)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    char *buf = NULL;
    size_t n = 0;
    if (fseek(f, 0, SEEK_END) == 0) {
        long len = ftell(f);
        if (len >= 0 && len < (1 << 20) && fseek(f, 0, SEEK_SET) == 0 &&
            (buf = malloc((size_t)len + 1)))
            n = fread(buf, 1, (size_t)len, f);
    }
    fclose(f);
    if (buf)
        buf[n] = 0;
    return buf;
}

int main(int argc, char **argv)
{
    static load ld;
    const char *coordinator = getenv("APPLIANCE_COORDINATOR");
    const char *secret_file = getenv("APPLIANCE_SECRET_FILE");
    const char *job_file = NULL;
    ld.nclients = 200;
    ld.njobs = 1000;
    ld.seconds = 30;
    ld.poll_ms = 500;
    ld.observe_ms = 25;
    enum { O_COORD = 256, O_SECRET, O_TRAIN, O_JOB_FILE, O_CLIENTS, O_JOBS, O_SECONDS, O_POLL,
           O_OBSERVE, O_HELP };
    static const struct option longopts[] = {
        {"coordinator", required_argument, NULL, O_COORD},
        {"secret-file", required_argument, NULL, O_SECRET},
        {"train", required_argument, NULL, O_TRAIN},
        {"job-file", required_argument, NULL, O_JOB_FILE},
        {"clients", required_argument, NULL, O_CLIENTS},
        {"jobs", required_argument, NULL, O_JOBS},
        {"seconds", required_argument, NULL, O_SECONDS},
        {"poll-ms", required_argument, NULL, O_POLL},
        {"observe-ms", required_argument, NULL, O_OBSERVE},
        {"help", no_argument, NULL, O_HELP},
        {NULL, 0, NULL, 0},
    };
    int o;
    while ((o = getopt_long(argc, argv, "", longopts, NULL)) != -1) {
        switch (o) {
        case O_COORD: coordinator = optarg; break;
        case O_SECRET: secret_file = optarg; break;
        case O_TRAIN: ld.train = optarg; break;
        case O_JOB_FILE: job_file = optarg; break;
        case O_CLIENTS: ld.nclients = atoi(optarg); break;
        case O_JOBS: ld.njobs = atoi(optarg); break;
        case O_SECONDS: ld.seconds = atof(optarg); break;
        case O_POLL: ld.poll_ms = (unsigned)atoi(optarg); break;
        case O_OBSERVE: ld.observe_ms = (unsigned)atoi(optarg); break;
        case O_HELP: usage(stdout); return 0;
        default: usage(stderr); return 2;
        }
    }
    if (ld.nclients == 0)
        ld.njobs = 0;
    if (!ld.train || !coordinator || !secret_file || ld.nclients < 0 || ld.njobs < 0 ||
        ld.seconds <= 0 || ld.poll_ms == 0 || ld.observe_ms == 0 || (ld.njobs && !job_file)) {
        usage(stderr);
        return 2;
    }
    char err[512];
    if (conn_addr_parse(coordinator, ld.host, sizeof(ld.host), &ld.port) < 0 ||
        auth_secret_load(&ld.secret, secret_file, err, sizeof(err)) < 0) {
        fprintf(stderr, "load: bad coordinator address or secret file\n");
        return 2;
    }
    if (job_file && !(ld.job_text = read_file(job_file))) {
        fprintf(stderr, "load: cannot read %s\n", job_file);
        return 2;
    }
    if (!getcwd(ld.cwd, sizeof(ld.cwd)))
        ld.cwd[0] = 0;
    log_init("load", LOG_WARN);
    signal(SIGPIPE, SIG_IGN);
    srand((unsigned)getpid());
    ld.loop = uv_default_loop();
    ld.clients = calloc(ld.nclients ? (size_t)ld.nclients : 1, sizeof(*ld.clients));
    ld.subs = calloc(ld.njobs ? (size_t)ld.njobs : 1, sizeof(*ld.subs));
    if (!ld.clients || !ld.subs)
        return 1;
    for (int i = 0; i < ld.njobs; i++)
        snprintf(ld.subs[i].file, sizeof(ld.subs[i].file), "load-%d.toml", i);
    init_client(&ld, &ld.obs, -1);
    for (int i = 0; i < ld.nclients; i++)
        init_client(&ld, &ld.clients[i], i);
    uv_timer_init(ld.loop, &ld.connector);
    uv_timer_init(ld.loop, &ld.submitter);
    uv_timer_init(ld.loop, &ld.clock);
    ld.connector.data = ld.submitter.data = ld.clock.data = &ld;
    ld.t_start = uv_hrtime();
    dial(&ld, &ld.obs);
    uv_timer_start(&ld.connector, on_connect_tick, LOAD_CONNECT_EVERY, LOAD_CONNECT_EVERY);
    uv_timer_start(&ld.submitter, on_submit_tick, 10, 10);
    uv_timer_start(&ld.clock, on_clock, 50, 50);
    uv_run(ld.loop, UV_RUN_DEFAULT);
    uv_loop_close(ld.loop);
    int rc = ld.failed || ld.train_state != APPLIANCE__JOB_STATE__JOB_RUNNING ? 1 : 0;
    if (ld.train_state != APPLIANCE__JOB_STATE__JOB_RUNNING)
        fprintf(stderr, "load: the training job %s was not running to the end (%s)\n", ld.train,
                ld.train_state >= 0 && ld.train_state < 6 ? state_names[ld.train_state] : "?");
    for (int i = 0; i < ld.njobs; i++)
        free(ld.subs[i].reason);
    for (int i = 0; i < ld.nclients; i++)
        free(ld.clients[i].own);
    free(ld.subs);
    free(ld.clients);
    free(ld.job_text);
    free(ld.obs_rtt.v);
    free(ld.all_rtt.v);
    free(ld.submit_rtt.v);
    auth_secret_clear(&ld.secret);
    return rc;
}
