/* Finished jobs past the memory bound: eviction, and answers from the
 * journal for the evicted ones. co->jobs stays in submission (seq) order. */
#include "history.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "job.h"
#include "log.h"
#include "msg.h"

#define HISTORY_LIST_ROWS 5000         /* journal rows one list reads at most */
#define HISTORY_LIST_BYTES (4u << 20)  /* packed statuses in one list reply at most */
#define HISTORY_FRAME_BYTES (256u << 10) /* of them in one frame at most */

static bool history__ended(const job *j)
{
    return j->state != APPLIANCE__JOB_STATE__JOB_QUEUED &&
           j->state != APPLIANCE__JOB_STATE__JOB_RUNNING;
}

/* Finished, and no log of it on its way to a client (jobctl.c holds it). */
static bool history__evictable(const coordinator *co, const job *j)
{
    return history__ended(j) && j != co->running && j->sending == 0;
}


void history_evict(coordinator *co, size_t slack)
{
    size_t keep = co->opt.max_job_history, ended = 0;
    for (size_t i = 0; i < co->njobs; i++)
        ended += history__evictable(co, co->jobs[i]);
    if (ended <= keep + slack)
        return;
    size_t drop = ended - keep, dropped = 0, k = 0;
    for (size_t i = 0; i < co->njobs; i++) {
        job *j = co->jobs[i];
        if (dropped < drop && history__evictable(co, j)) {
            job_free(j);
            dropped++;
        } else {
            co->jobs[k++] = j;
        }
    }
    co->njobs = k;
    co->jobs_evicted += dropped;
    log_debug("%zu finished job(s) evicted from memory (--max-job-history %zu)%s", dropped, keep,
              co->journal ? "; the journal keeps them" : "");
}

/* The job with sequence number seq among co->jobs, or NULL. */
static job *history__by_seq(coordinator *co, uint64_t seq)
{
    size_t lo = 0, hi = co->njobs;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (co->jobs[mid]->seq < seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < co->njobs && co->jobs[lo]->seq == seq ? co->jobs[lo] : NULL;
}

typedef struct history_fill {
    coordinator *co;
    job *j;
} history_fill;

static int history__fill(void *arg, const journal_job *jj)
{
    history_fill *f = arg;
    f->j->seq = jj->seq;
    return job_from_journal(f->co, f->j, jj);
}

job *history_load(coordinator *co, const char *id)
{
    if (!co->journal || !id || !id[0])
        return NULL;
    job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    history_fill f = {co, j};
    if (journal_get(co->journal, id, history__fill, &f) < 0) {
        job_free(j);
        return NULL;
    }
    j->from_journal = true;
    return j;
}

job *history_load_newest(coordinator *co, const char *owner)
{
    if (!co->journal)
        return NULL;
    job *j = calloc(1, sizeof(*j));
    if (!j)
        return NULL;
    history_fill f = {co, j};
    if (journal_recent(co->journal, owner, 1, NULL, history__fill, &f) < 0 || !j->id[0]) {
        job_free(j);
        return NULL;
    }
    j->from_journal = true;
    return j;
}

static int history__line(void *arg, uint64_t line, const char *text)
{
    job_append_log(arg, text);
    return 0;
}

void history_load_log(coordinator *co, job *j)
{
    if (co->journal && j->nlog == 0)
        journal_load_log(co->journal, j->id, history__line, j);
}

void history_release(job *j)
{
    if (j && j->from_journal)
        job_free(j);
}

/* One job of a list reply: in memory, or a journal row whose strings it owns. */
typedef struct history_item {
    uint64_t seq;
    job *j;                   /* the job in memory, or NULL */
    Appliance__JobStatus st;  /* from the row (j NULL), else filled when sent */
} history_item;

typedef struct history_items {
    coordinator *co;
    history_item *v;
    size_t n, cap;
} history_items;

static int history__push(history_items *it, uint64_t seq, job *j)
{
    if (it->n == it->cap) {
        size_t cap = it->cap ? it->cap * 2 : 256;
        history_item *v = realloc(it->v, cap * sizeof(*v));
        if (!v)
            return -ENOMEM;
        it->v = v;
        it->cap = cap;
    }
    history_item *x = &it->v[it->n++];
    memset(x, 0, sizeof(*x));
    x->seq = seq;
    x->j = j;
    return 0;
}

static int history__row(void *arg, const journal_job *jj)
{
    history_items *it = arg;
    job *j = history__by_seq(it->co, jj->seq);
    if (history__push(it, jj->seq, j) < 0)
        return -ENOMEM;
    if (j)
        return 0;
    Appliance__JobStatus *s = &it->v[it->n - 1].st;
    appliance__job_status__init(s);
    s->job_id = strdup(jj->id);
    s->file_name = strdup(jj->file);
    s->model_dir = strdup(jj->model_dir);
    s->message = strdup(jj->message);
    s->phase = (char *)msg_job_state_name((Appliance__JobState)jj->state);
    if (!s->job_id || !s->file_name || !s->model_dir || !s->message)
        return -ENOMEM;
    s->state = (Appliance__JobState)jj->state;
    s->step = jj->steps;
    s->max_steps = jj->max_steps;
    s->loss = jj->loss;
    s->priority = jj->priority;
    s->submitted_at = jj->submitted_at;
    s->eta_sec = -1;
    s->eval_accuracy = s->eval_iou = -1;
    if (jj->eval_step) {
        s->eval_step = jj->eval_step;
        s->eval_loss = jj->eval_loss;
        s->eval_accuracy = jj->eval_accuracy;
        s->eval_iou = jj->eval_iou;
    }
    return 0;
}

static int history__newest_first(const void *a, const void *b)
{
    uint64_t x = ((const history_item *)a)->seq, y = ((const history_item *)b)->seq;
    return x < y ? 1 : x > y ? -1 : 0;
}

/* Whether the items (sorted newest first) hold seq. */
static bool history__holds(const history_items *it, size_t n, uint64_t seq)
{
    size_t lo = 0, hi = n;
    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (it->v[mid].seq > seq)
            lo = mid + 1;
        else
            hi = mid;
    }
    return lo < n && it->v[lo].seq == seq;
}

/* Bytes of statuses one list reply takes at most: HISTORY_LIST_BYTES, and
 * never so much that the reply alone would get its reader dropped (the
 * queue cap of a connection, the backlog a client may leave unread), with
 * room for a frame more. */
static size_t history__budget(const coordinator *co, const conn *c)
{
    size_t cap = c->cfg->queue_max;
    if (co->opt.admission.max_client_backlog && co->opt.admission.max_client_backlog < cap)
        cap = co->opt.admission.max_client_backlog;
    cap = cap > 2 * HISTORY_FRAME_BYTES ? cap - HISTORY_FRAME_BYTES : cap / 2;
    return cap < HISTORY_LIST_BYTES ? cap : HISTORY_LIST_BYTES;
}

void history_list(coordinator *co, conn *c)
{
    history_items it = {.co = co};
    Appliance__JobStatus **ptrs = NULL;
    /* A user lists their own jobs, an operator every job. */
    const char *owner = c->auth_user[0] ? c->auth_user : NULL;
    uint64_t total = 0, beyond = 0; /* jobs in the journal; of them, older than the rows read */
    int rc = 0;
    if (co->journal) {
        rc = journal_recent(co->journal, owner, HISTORY_LIST_ROWS, &total, history__row, &it);
        beyond = total > it.n ? total - it.n : 0;
    }
    /* Jobs in memory the rows did not cover: no journal, or older than the
     * newest HISTORY_LIST_ROWS (a long-queued job). */
    size_t rows = it.n;
    for (size_t i = 0; rc == 0 && i < co->njobs; i++)
        if (jobs_visible(c, co->jobs[i]) && !history__holds(&it, rows, co->jobs[i]->seq)) {
            rc = history__push(&it, co->jobs[i]->seq, co->jobs[i]);
            if (co->journal && beyond)
                beyond--;
        }
    if (rc < 0 || !(ptrs = calloc(it.n ? it.n : 1, sizeof(*ptrs)))) {
        node_reply_error(c, -ENOMEM, "out of memory listing the jobs");
        goto out;
    }
    /* The newest jobs that fit the budget, sent oldest first. */
    if (it.n > 1)
        qsort(it.v, it.n, sizeof(*it.v), history__newest_first);
    size_t listed = 0, bytes = 0, budget = history__budget(co, c);
    for (; listed < it.n; listed++) {
        history_item *x = &it.v[listed];
        if (x->j)
            job_status(co, x->j, &x->st);
        bytes += appliance__job_status__get_packed_size(&x->st) + 8;
        if (bytes > budget)
            break;
    }
    for (size_t i = 0; i < listed; i++)
        ptrs[i] = &it.v[listed - 1 - i].st;
    /* In frames well below the header limit: JobList.more says another
     * follows; the last says how many jobs were left out. */
    size_t frame = c->cfg->limits.max_header / 2;
    if (frame > HISTORY_FRAME_BYTES)
        frame = HISTORY_FRAME_BYTES;
    size_t first = 0;
    do {
        size_t end = first, fb = 0;
        while (end < listed &&
               (end == first || fb + appliance__job_status__get_packed_size(ptrs[end]) + 8 <= frame))
            fb += appliance__job_status__get_packed_size(ptrs[end++]) + 8;
        Appliance__JobList l = APPLIANCE__JOB_LIST__INIT;
        l.n_jobs = end - first;
        l.jobs = ptrs + first;
        l.more = end < listed;
        l.omitted = l.more ? 0 : beyond + (it.n - listed);
        ENVELOPE(out, job_list, JOB_LIST, &l);
        if (conn_send_msg(c, &out) < 0)
            break;
        first = end;
    } while (first < listed);
out:
    for (size_t i = 0; i < it.n; i++)
        if (!it.v[i].j) {
            free(it.v[i].st.job_id);
            free(it.v[i].st.file_name);
            free(it.v[i].st.model_dir);
            free(it.v[i].st.message);
        }
    free(it.v);
    free(ptrs);
}
