/* wse-node: one replica of a job. */
#include "replica.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "jobspec.h"
#include "kernels.h"
#include "log.h"
#include "msg.h"
#include "model_plan.h"
#include "msgcheck.h"
#include "op_activation.h"
#include "op_dense.h"
#include "optim_plan.h"
#include "plan.h"
#include "op_loss.h"

static wse_node *wn_of(node *n) { return n->data; }

static double wn__now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

/* ---- job life cycle ---- */

static void wn__free_buffers(wn_job *j)
{
    if (j->ex_ready)
        exec_deinit(&j->ex);
    if (j->ws_ready)
        wslots_deinit(&j->ws);
    while (j->staged) {
        wn_staged *next = j->staged->next;
        free(j->staged);
        j->staged = next;
    }
    if (j->t)
        for (size_t i = 0; i < j->plan->n_tensors; i++) {
            free(j->t[i].w);
            free(j->t[i].g);
            if (j->t[i].rg != j->t[i].g)
                free(j->t[i].rg);
            optim_state_deinit(&j->t[i].st);
        }
    free(j->t);
    free(j->wp);
    free(j->gp);
    if (j->batches)
        for (size_t i = 0; i < j->nbatches; i++)
            free(j->batches[i].data);
    free(j->ebuf[0].data);
    free(j->ebuf[1].data);
    free(j->batches);
    free(j->feeds);
    model_free(j->m);
    if (j->plan)
        appliance__plan__free_unpacked(j->plan, NULL);
    free(j);
}

static void wn__job_link_stopped(wn_job *j)
{
    if (--j->links_open == 0 && !j->busy)
        wn__free_buffers(j);
}

static void wn__up_stopped(conn_link *l)
{
    wn__job_link_stopped(l->data);
}

static void wn__feed_stopped(conn_link *l)
{
    wn_feed *f = l->data;
    wn__job_link_stopped(f->job);
}

/* Drops the job: links close, buffers go once no task uses them. */
static void wn__release(node *n, wn_job *j)
{
    if (j->state == WN_RELEASED)
        return;
    wn_state was = j->state;
    j->state = WN_RELEASED;
    wse_node *w = wn_of(n);
    if (w->job == j)
        w->job = NULL;
    if (was == WN_ALLOCATING) { /* freed when the allocation ends */
        j->links_open = 0;
        if (!j->busy)
            wn__free_buffers(j);
        return;
    }
    j->links_open = 1 + (int)j->nfeeds;
    conn_link_stop(&j->up, wn__up_stopped);
    for (size_t i = 0; i < j->nfeeds; i++)
        conn_link_stop(&j->feeds[i].link, wn__feed_stopped);
}

static void wn__abort_as(node *n, wn_job *j, bool fault, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
#define wn__abort(n, j, ...) wn__abort_as(n, j, false, __VA_ARGS__)
#define wn__fault(n, j, ...) wn__abort_as(n, j, true, __VA_ARGS__)

/* Fails the job j (or reports a fault): the jobhost tells the coordinator
 * and releases it. A job already let go is left alone. */
static void wn__abort_as(node *n, wn_job *j, bool fault, const char *fmt, ...)
{
    wse_node *w = wn_of(n);
    if (w->job != j)
        return;
    va_list ap;
    va_start(ap, fmt);
    jobhost_vabort(&w->jobs, fault, fmt, ap);
    va_end(ap);
}

static void wn__maybe_ready(wn_job *j)
{
    if (j->state != WN_LINKING || !j->up_ready)
        return;
    for (size_t i = 0; i < j->nfeeds; i++)
        if (!j->feeds[i].ready)
            return;
    j->state = WN_RUNNING;
    Appliance__JobReady r = APPLIANCE__JOB_READY__INIT;
    r.job_id = j->id;
    r.member_id = j->n->member_id;
    ENVELOPE(env, job_ready, JOB_READY, &r);
    node_send_coordinator(j->n, &env);
    log_info("job %s: replica %u ready (%u samples per step)", j->id, j->replica, j->batch);
}

/* ---- compute ---- */

static wn_batch *wn__batch_for(wn_job *j, uint64_t step)
{
    for (size_t i = 0; i < j->nbatches; i++)
        if (j->batches[i].step == step && j->batches[i].full)
            return &j->batches[i];
    return NULL;
}

static void wn__param(void *ctx, size_t i, optim_param *out)
{
    wn_tensor *t = &((wn_job *)ctx)->t[i];
    *out = (optim_param){t->w, t->rg, t->n, t->trainable, &t->st};
}

/* Pipelined: applies the all-reduced gradients to the resident weights
 * with the step memoryx runs on its copy (optim_apply_step): bit for bit
 * the same. */
static void wn__update(wn_job *j)
{
    optim_apply_step(&j->cfg, j->plan->n_tensors, wn__param, j, (int64_t)j->step);
}

static void wn__unstage(wn_job *j);
static void wn__advance(wn_job *j);

/* The buffer holding (or awaiting) eval batch k, or NULL. */
static wn_eval_buf *wn__eval_buf(wn_job *j, uint32_t k)
{
    for (int i = 0; i < 2; i++)
        if (j->ebuf[i].k == (int32_t)k)
            return &j->ebuf[i];
    return NULL;
}

/* Asks the replica's first worker for eval batch k into a free buffer. */
static void wn__eval_request(wn_job *j, uint32_t k)
{
    if (k >= j->plan->eval_batches || wn__eval_buf(j, k))
        return;
    wn_eval_buf *eb = wn__eval_buf(j, (uint32_t)-1);
    conn *c = conn_link_conn(&j->feeds[0].link);
    if (!eb || !c)
        return;
    eb->k = (int32_t)k;
    eb->full = false;
    Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
    cr.eval_batch = k + 1;
    cr.eval_step = j->step;
    ENVELOPE(env, credit, CREDIT, &cr);
    conn_send_msg(c, &env);
}

/* Starts the pass the stage needs over the streamed weights, and lets held
 * chunks of it land. */
static void wn__begin_pass(wn_job *j)
{
    if (!j->ws_ready)
        return;
    wslots_new_pass(&j->ws, j->stage == WN_EVAL);
    wn__unstage(j);
}

/* Begins the evaluation of the weights at the current step. */
static void wn__eval_begin(wn_job *j)
{
    j->stage = WN_EVAL;
    j->layer = 0;
    j->eval_k = 0;
    memset(&j->metrics, 0, sizeof(j->metrics));
    wn__eval_request(j, 0);
    wn__eval_request(j, 1);
}

/* Eval batch eval_k went through every layer: the next, or the report. */
static void wn__eval_next(wn_job *j)
{
    wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
    if (eb)
        eb->k = -1;
    j->layer = 0;
    if (++j->eval_k < j->plan->eval_batches) {
        wn__eval_request(j, j->eval_k + 1);
        j->stage = WN_EVAL;
        wn__begin_pass(j);
        return;
    }
    const exec_metrics *mt = &j->metrics;
    Appliance__EvalReport r = APPLIANCE__EVAL_REPORT__INIT;
    r.job_id = j->id;
    r.step = j->step;
    r.replica = j->replica;
    r.samples = mt->samples;
    r.correct = mt->correct;
    r.loss_sum = mt->loss;
    r.n_intersection = r.n_union_ = mt->classes;
    r.intersection = (uint64_t *)mt->inter;
    r.union_ = (uint64_t *)mt->uni;
    ENVELOPE(env, eval_report, EVAL_REPORT, &r);
    node_send_coordinator(j->n, &env);
    j->stage = WN_FORWARD;
    if (j->step >= j->plan->max_steps) {
        j->state = WN_FINISHED;
        return;
    }
    wn__begin_pass(j);
}

/* Runs the current stage on the compute thread. */
static void wn__work(void *arg)
{
    wn_job *j = arg;
    double t0 = wn__now();
    if (j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS) {
        const wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
        const float *ex = (const float *)eb->data;
        const int32_t *ey = (const int32_t *)(eb->data + (size_t)eb->n * j->in_elems * sizeof(float));
        exec_set_batch(&j->ex, (int)eb->n);
        if (j->stage == WN_EVAL) {
            exec_forward(&j->ex, j->layer, ex, (int64_t)j->step, false);
        } else if (exec_eval(&j->ex, ex, ey, &j->metrics) < 0) {
            j->compute_err = -EINVAL;
            snprintf(j->compute_msg, sizeof(j->compute_msg),
                     "evaluation at step %llu: a label out of range", (unsigned long long)j->step);
        }
        exec_set_batch(&j->ex, (int)j->batch);
        j->compute_sec += wn__now() - t0;
        return;
    }
    wn_batch *b = wn__batch_for(j, j->step);
    const float *x = (const float *)b->data;
    const int32_t *y = (const int32_t *)(b->data + (size_t)j->batch * j->in_elems * sizeof(float));
    if (j->stage == WN_FORWARD) {
        if (j->layer == 0)
            exec_zero_grads(&j->ex);
        exec_forward(&j->ex, j->layer, x, (int64_t)j->step, true);
    } else if (j->stage == WN_LOSS) {
        j->loss_sum = exec_loss(&j->ex, x, y, 1.0f / (float)j->plan->global_batch);
        if (!isfinite(j->loss_sum)) {
            j->compute_err = -EINVAL;
            snprintf(j->compute_msg, sizeof(j->compute_msg),
                     "loss of step %llu is not finite: a label out of range, or training diverged",
                     (unsigned long long)j->step);
        }
    } else if (j->stage == WN_BACKWARD) {
        exec_backward(&j->ex, j->layer, x, (int64_t)j->step);
    } else {
        wn__update(j);
    }
    j->compute_sec += wn__now() - t0;
}

static void wn__advance(wn_job *j);
static void wn__unstage(wn_job *j);

static void wn__grad_sent(void *arg, int status)
{
    wn_tensor *t = arg;
    t->sends--;
    if (t->job->state != WN_RELEASED)
        wn__advance(t->job);
}

/* Sends the gradients of a layer's trainable tensors up, in chunks. */
static int wn__send_grads(wn_job *j, const model_layer *l)
{
    conn *up = conn_link_conn(&j->up);
    if (!up)
        return -ENOTCONN;
    for (int k = 0; k < l->ntensors; k++) {
        const model_tensor *mt = &j->m->tensors[l->first_tensor + k];
        wn_tensor *t = &j->t[mt->id];
        for (uint64_t off = 0; off < t->n; off += j->plan->chunk_elems) {
            uint64_t count = t->n - off < j->plan->chunk_elems ? t->n - off : j->plan->chunk_elems;
            Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
            g.step = j->step;
            g.tensor_id = mt->id;
            g.offset = off;
            g.count = count;
            g.total = t->n;
            ENVELOPE(env, grad_chunk, GRAD_CHUNK, &g);
            int rc = conn_send(up, &env, j->gp[mt->id] + off, (uint32_t)(count * sizeof(float)),
                               wn__grad_sent, t);
            if (rc < 0)
                return rc;
            t->sends++;
        }
    }
    return 0;
}

static void wn__step_done(wn_job *j)
{
    Appliance__StepReport r = APPLIANCE__STEP_REPORT__INIT;
    r.job_id = j->id;
    r.step = j->step;
    r.replica = j->replica;
    r.loss_sum = j->loss_sum;
    r.samples = j->batch;
    r.compute_sec = j->compute_sec;
    metrics_hist_observe(&wn_of(j->n)->step_hist, j->compute_sec);
    wn_of(j->n)->steps++;
    ENVELOPE(env, step_report, STEP_REPORT, &r);
    node_send_coordinator(j->n, &env);
    /* The batch's slot is free again: one more credit to its worker. */
    wn_batch *b = wn__batch_for(j, j->step);
    wn_feed *f = b->from;
    b->step = UINT64_MAX;
    b->full = false;
    conn *c = conn_link_conn(&f->link);
    if (c) {
        Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
        cr.n = 1;
        ENVELOPE(ce, credit, CREDIT, &cr);
        conn_send_msg(c, &ce);
    }
    j->step++;
    j->stage = WN_FORWARD;
    j->layer = 0;
    j->compute_sec = 0;
    j->rg_done = 0;
    for (size_t i = 0; i < j->plan->n_tensors; i++)
        j->t[i].rg_have = 0;
    if (plan_eval_at(j->plan, j->step))
        wn__eval_begin(j);
    else if (j->step >= j->plan->max_steps)
        j->state = WN_FINISHED;
    wn__begin_pass(j);
}

static void wn__work_done(void *arg)
{
    wn_job *j = arg;
    j->busy = false;
    if (j->state == WN_RELEASED) {
        if (j->links_open == 0)
            wn__free_buffers(j);
        return;
    }
    if (j->compute_err) {
        wn__abort(j->n, j, "%s", j->compute_msg);
        return;
    }
    const model *m = j->m;
    if (j->ws_ready && (j->stage == WN_FORWARD || j->stage == WN_BACKWARD || j->stage == WN_EVAL) &&
        wslots_consume(&j->ws, j->layer, j->stage == WN_BACKWARD))
        wn__unstage(j); /* a slot is free: held chunks land, reading resumes */
    if (j->state == WN_RELEASED)
        return;
    if (j->stage == WN_EVAL) {
        if (++j->layer == m->nlayers)
            j->stage = WN_EVAL_METRICS;
    } else if (j->stage == WN_EVAL_METRICS) {
        wn__eval_next(j);
    } else if (j->stage == WN_FORWARD) {
        if (++j->layer == m->nlayers)
            j->stage = WN_LOSS;
    } else if (j->stage == WN_LOSS) {
        j->stage = WN_BACKWARD;
        j->layer = m->nlayers - 1;
    } else if (j->stage == WN_BACKWARD) {
        int rc = wn__send_grads(j, &m->layers[j->layer]);
        if (rc < 0) {
            wn__fault(j->n, j, "cannot send gradients of %s: %s", m->layers[j->layer].name,
                      strerror(-rc));
            return;
        }
        if (--j->layer < 0) {
            if (j->pipelined)
                j->stage = WN_UPDATE; /* once the reduced gradients are in */
            else
                wn__step_done(j);
        }
    } else {
        wn__step_done(j);
    }
    wn__advance(j);
}

/* Optimizer state tensors memoryx streams with a tensor: a resumed
 * Pipelined job carries its state over. */
static size_t wn__states_streamed(const wn_job *j, const wn_tensor *t)
{
    return j->pipelined && t->trainable && j->plan->n_resume_weights > 0 ? optim_state_count(&t->st) : 0;
}

/* Whether the weights of a layer are complete for the current step. */
static bool wn__weights_ready(wn_job *j, const model_layer *l)
{
    for (int k = 0; k < l->ntensors; k++) {
        const wn_tensor *t = &j->t[l->first_tensor + k];
        if (j->pipelined) { /* resident since the first step, with the
                              * optimizer state of a resumed job */
            if (t->have < t->n * (1 + wn__states_streamed(j, t)))
                return false;
            continue;
        }
        if (t->step != j->step || t->have < t->n)
            return false;
    }
    return true;
}

/* Whether gradients of a layer are still being sent. */
static bool wn__sending(const wn_job *j, int layer)
{
    const model_layer *l = &j->m->layers[layer];
    for (int k = 0; k < l->ntensors; k++)
        if (j->t[l->first_tensor + k].sends > 0)
            return true;
    return false;
}

/* An eval batch with no samples for this replica: nothing to compute, but
 * in Weight Streaming its weights arrive and must be let through. */
static void wn__eval_skip(wn_job *j)
{
    const model *m = j->m;
    while (j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS) {
        if (j->stage == WN_EVAL_METRICS) {
            wn__eval_next(j);
            if (j->stage == WN_EVAL && wn__eval_buf(j, j->eval_k) && wn__eval_buf(j, j->eval_k)->full &&
                wn__eval_buf(j, j->eval_k)->n > 0)
                wn__advance(j);
            return;
        }
        if (j->ws_ready) {
            if (!wslots_ready(&j->ws, j->layer, false))
                return; /* resumes when the weights come */
            if (wslots_consume(&j->ws, j->layer, false))
                wn__unstage(j);
            if (j->state == WN_RELEASED)
                return;
        }
        if (++j->layer == m->nlayers)
            j->stage = WN_EVAL_METRICS;
    }
}

/* Starts the next compute task if what it needs is there. */
static void wn__advance(wn_job *j)
{
    if (j->busy || j->state >= WN_FINISHED)
        return;
    if (j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS) {
        const wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
        if (!eb || !eb->full)
            return;
        if (eb->n == 0) { /* an empty share: the weights still go by */
            wn__eval_skip(j);
            return;
        }
    } else if (!wn__batch_for(j, j->step)) {
        return;
    }
    bool backward = j->stage == WN_BACKWARD;
    if (j->ws_ready && (j->stage == WN_FORWARD || backward || j->stage == WN_EVAL)) {
        /* Weight Streaming: the layer's weights in their slot, and the
         * gradient slot free of gradients not yet sent. */
        if (!wslots_ready(&j->ws, j->layer, backward))
            return;
        int blocker = backward ? wslots_grad_blocker(&j->ws, j->layer) : -1;
        if (blocker >= 0 && wn__sending(j, blocker))
            return;
        wslots_bind(&j->ws, j->layer, backward, j->wp, j->gp);
    } else if ((j->stage == WN_FORWARD || j->stage == WN_EVAL) &&
               !wn__weights_ready(j, &j->m->layers[j->layer])) {
        return;
    }
    if (j->stage == WN_UPDATE && j->plan->n_replicas > 1 && j->rg_done < j->plan->n_tensors)
        return;
    if (backward && wn__sending(j, j->layer)) /* its gradients of the last step must have left */
        return;
    if (compute_submit(&wn_of(j->n)->comp, wn__work, wn__work_done, j) < 0) {
        wn__abort(j->n, j, "out of memory queueing a compute task");
        return;
    }
    j->busy = true;
}

/* ---- links ---- */

static void wn__up_ready(conn *c)
{
    wn_job *j = c->data;
    Appliance__StreamHello h = APPLIANCE__STREAM_HELLO__INIT;
    h.job_id = j->id;
    h.role = APPLIANCE__ROLE__ROLE_WSE_NODE;
    h.index = j->replica;
    h.member_id = j->n->member_id;
    ENVELOPE(env, stream_hello, STREAM_HELLO, &h);
    conn_send_msg(c, &env);
    j->up_ready = true;
    wn__maybe_ready(j);
}

static void *wn__up_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    wn_job *j = c->data;
    if (j->pipelined && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK && j->state != WN_RELEASED) {
        const Appliance__GradChunk *g = env->grad_chunk;
        if (msgcheck_grad_chunk(g, j->plan, len, NULL, 0) < 0 || g->step != j->step ||
            j->t[g->tensor_id].rg_have + g->count > j->t[g->tensor_id].n) {
            *err = -EINVAL;
            return NULL;
        }
        return j->t[g->tensor_id].rg + g->offset;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK || j->state == WN_RELEASED) {
        *err = -EPROTO;
        return NULL;
    }
    const Appliance__WeightChunk *w = env->weight_chunk;
    char why[512];
    if (msgcheck_weight_chunk(w, j->plan, len, why, sizeof(why)) < 0) {
        log_warn("job %s: %s", j->id, why);
        *err = -EINVAL;
        return NULL;
    }
    if (plan_stream_expect(&j->cur, j->plan, w, why, sizeof(why)) < 0) {
        log_warn("job %s: from swarmx: %s", j->id, why);
        *err = -EPROTO;
        return NULL;
    }
    if (j->ws_ready) {
        bool blocked = false;
        float *dst = w->step == j->step && (uint64_t)len == w->count * sizeof(float) && !j->staged
                         ? wslots_dest(&j->ws, w->tensor_id, w->pass == APPLIANCE__PASS__PASS_BACKWARD,
                                       w->offset, w->count, &blocked)
                         : NULL;
        j->chunk_staged = !dst && (blocked || (j->staged && w->step == j->step));
        if (!dst && !j->chunk_staged) {
            log_warn("job %s: weight chunk out of schedule: tensor %u step %llu offset %llu "
                     "(replica at step %llu)", j->id, w->tensor_id, (unsigned long long)w->step,
                     (unsigned long long)w->offset, (unsigned long long)j->step);
            *err = -EINVAL;
        }
        return dst; /* NULL and staged: the reader holds it, on_frame keeps it */
    }
    wn_tensor *t = &j->t[w->tensor_id];
    float *base = t->w;
    if (w->state > 0) { /* optimizer state of a resumed Pipelined job */
        const char *sname;
        size_t scount;
        base = j->pipelined && t->trainable && w->state <= optim_state_count(&t->st)
                   ? optim_state_tensor(&t->st, w->state - 1, &sname, &scount)
                   : NULL;
    }
    if (!base || w->total != t->n || w->offset > t->n || w->count > t->n - w->offset ||
        (uint64_t)len != w->count * sizeof(float) || w->step < j->step) {
        log_warn("job %s: weight chunk refused: tensor %u step %llu offset %llu count %llu "
                 "total %llu (%u bytes); replica at step %llu, tensor has %llu elements",
                 j->id, w->tensor_id, (unsigned long long)w->step, (unsigned long long)w->offset,
                 (unsigned long long)w->count, (unsigned long long)w->total, len,
                 (unsigned long long)j->step, (unsigned long long)t->n);
        *err = -EINVAL;
        return NULL;
    }
    return base + w->offset;
}

static void wn__pause(wn_job *j)
{
    conn *up = conn_link_conn(&j->up);
    if (up && !j->up_paused) {
        conn_pause(up);
        j->up_paused = true;
    }
}

/* Keeps a chunk that came before its slot was free. */
static int wn__stage(wn_job *j, const Appliance__WeightChunk *w, const uint8_t *payload)
{
    wn_staged *st = malloc(sizeof(*st) + w->count * sizeof(float));
    if (!st)
        return -ENOMEM;
    st->next = NULL;
    st->tensor = w->tensor_id;
    st->backward = w->pass == APPLIANCE__PASS__PASS_BACKWARD;
    st->offset = w->offset;
    st->count = w->count;
    memcpy(st->data, payload, w->count * sizeof(float));
    wn_of(j->n)->staged++;
    if (j->staged_tail)
        j->staged_tail->next = st;
    else
        j->staged = st;
    j->staged_tail = st;
    return 0;
}

/* A slot freed: held chunks land in order; reading resumes once none is
 * held and the next arrival has a slot. */
static void wn__unstage(wn_job *j)
{
    while (j->staged) {
        wn_staged *st = j->staged;
        bool blocked;
        float *dst = wslots_dest(&j->ws, st->tensor, st->backward, st->offset, st->count, &blocked);
        if (!dst) {
            if (!blocked)
                wn__abort(j->n, j, "held weight chunk of tensor %u out of schedule", st->tensor);
            return;
        }
        memcpy(dst, st->data, st->count * sizeof(float));
        bool next_blocked = wslots_received(&j->ws, st->count);
        j->staged = st->next;
        if (!j->staged)
            j->staged_tail = NULL;
        free(st);
        if (next_blocked)
            return;
    }
    conn *up = conn_link_conn(&j->up);
    if (up && j->up_paused) {
        j->up_paused = false;
        conn_resume(up);
    }
}

static void wn__up_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    wn_job *j = c->data;
    if (j->state == WN_RELEASED)
        return;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR) {
        wn__fault(j->n, j, "swarmx refused: %s", env->error->message);
        return;
    }
    if (j->pipelined && env->msg_case == APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK && payload) {
        wn_tensor *t = &j->t[env->grad_chunk->tensor_id];
        t->rg_have += env->grad_chunk->count;
        if (t->rg_have == t->n)
            j->rg_done++;
        wn__advance(j);
        return;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK || !payload) {
        conn_fail(c, -EPROTO, "unexpected %s from swarmx", frame_msg_name(env->msg_case));
        return;
    }
    const Appliance__WeightChunk *w = env->weight_chunk;
    if (j->ws_ready) {
        if (j->chunk_staged) {
            /* Its slot may have freed while the rest of it was read. */
            if (wn__stage(j, w, payload) < 0) {
                wn__abort(j->n, j, "out of memory holding a weight chunk");
                return;
            }
            wn__pause(j);
            wn__unstage(j);
            if (j->state == WN_RELEASED)
                return;
        } else if (wslots_received(&j->ws, w->count)) {
            wn__pause(j);
        }
        wn__advance(j);
        return;
    }
    wn_tensor *t = &j->t[w->tensor_id];
    if (t->step != w->step) {
        t->step = w->step;
        t->have = 0;
    }
    t->have += w->count;
    wn__advance(j);
}

static void wn__up_close(conn *c, int err, const char *reason)
{
    wn_job *j = c->data;
    if (j->state == WN_RELEASED)
        return;
    if (j->up_ready) {
        j->up_ready = false;
        wn__fault(j->n, j, "lost swarmx %s: %s", c->peer_addr, reason);
    }
}

static const conn_ops wn__up_ops = {
    .on_ready = wn__up_ready,
    .on_frame = wn__up_frame,
    .payload_dest = wn__up_dest,
    .on_close = wn__up_close,
};

static void wn__feed_ready(conn *c)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    Appliance__StreamHello h = APPLIANCE__STREAM_HELLO__INIT;
    h.job_id = j->id;
    h.role = APPLIANCE__ROLE__ROLE_WSE_NODE;
    h.index = j->replica;
    h.member_id = j->n->member_id;
    ENVELOPE(env, stream_hello, STREAM_HELLO, &h);
    conn_send_msg(c, &env);
    Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
    cr.n = WN_CREDITS;
    ENVELOPE(ce, credit, CREDIT, &cr);
    conn_send_msg(c, &ce);
    f->ready = true;
    if (f == &j->feeds[0] && j->stage == WN_EVAL) { /* an evaluation first: its batches */
        wn__eval_request(j, j->eval_k);
        wn__eval_request(j, j->eval_k + 1);
    }
    wn__maybe_ready(j);
}

static void *wn__feed_dest(conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_BATCH || j->state == WN_RELEASED) {
        *err = -EPROTO;
        return NULL;
    }
    const Appliance__Batch *b = env->batch;
    if (msgcheck_batch(b, j->plan, len, NULL, 0) < 0 || b->sample_elems != j->in_elems ||
        b->label_elems != j->ex.label_elems) {
        *err = -EINVAL;
        return NULL;
    }
    if (b->eval_batch > 0) {
        wn_eval_buf *eb = wn__eval_buf(j, b->eval_batch - 1);
        if (!eb || eb->full || b->step != j->step) {
            *err = -EINVAL;
            return NULL;
        }
        eb->n = b->n;
        return eb->data;
    }
    if (b->replica != j->replica || b->step < j->step || b->step % f->slots != f->slot) {
        *err = -EINVAL;
        return NULL;
    }
    for (size_t i = 0; i < j->nbatches; i++)
        if (j->batches[i].step == UINT64_MAX) {
            j->batches[i].step = b->step;
            j->batches[i].full = false;
            j->batches[i].from = f;
            return j->batches[i].data;
        }
    *err = -ENOBUFS; /* the worker sent beyond its credits */
    return NULL;
}

static void wn__feed_frame(conn *c, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    if (j->state == WN_RELEASED)
        return;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_ERROR) {
        wn__fault(j->n, j, "worker %s refused: %s", c->peer_addr, env->error->message);
        return;
    }
    /* An eval batch of no samples (a share of the eval set smaller than the
     * replicas) comes without a payload. */
    bool empty_eval = env->msg_case == APPLIANCE__ENVELOPE__MSG_BATCH &&
                      env->batch->eval_batch > 0 && env->batch->n == 0 && len == 0;
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_BATCH || (!payload && !empty_eval)) {
        conn_fail(c, -EPROTO, "unexpected %s from a worker", frame_msg_name(env->msg_case));
        return;
    }
    if (env->batch->eval_batch > 0) {
        wn_eval_buf *eb = wn__eval_buf(j, env->batch->eval_batch - 1);
        eb->full = true;
        if (env->batch->n == 0)
            eb->n = 0;
        wn__advance(j);
        return;
    }
    for (size_t i = 0; i < j->nbatches; i++)
        if (j->batches[i].data == payload)
            j->batches[i].full = true;
    wn__advance(j);
}

static void wn__feed_close(conn *c, int err, const char *reason)
{
    wn_feed *f = c->data;
    wn_job *j = f->job;
    if (j->state == WN_RELEASED)
        return;
    if (f->ready) {
        f->ready = false;
        wn__fault(j->n, j, "lost worker %s: %s", c->peer_addr, reason);
    }
}

static const conn_ops wn__feed_ops = {
    .on_ready = wn__feed_ready,
    .on_frame = wn__feed_frame,
    .payload_dest = wn__feed_dest,
    .on_close = wn__feed_close,
};

/* ---- handlers ---- */

/* A job start this replica cannot go on with: what was built is freed, the
 * plan is the jobhost's to free. Returns NULL for wn__start. */
static void *wn__start_failed(wn_job *j, char *why, size_t whylen, const char *reason)
{
    snprintf(why, whylen, "%s", reason);
    j->plan = NULL;
    j->state = WN_RELEASED;
    wn__free_buffers(j);
    return NULL;
}

/* Allocates a job's buffers (on the compute thread). */
static int wn__job_buffers(wn_job *j, char *err, size_t errlen)
{
    Appliance__Plan *p = j->plan;
    const model *m = j->m;
    bool oom = false;
    j->t = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(*j->t));
    j->wp = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(float *));
    j->gp = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(float *));
    oom |= !j->t || !j->wp || !j->gp;
    j->pipelined = p->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    if (j->pipelined && optim_from_plan(p->optimizer, &j->cfg) < 0) {
        snprintf(err, errlen, "bad optimizer in the plan");
        return -EINVAL;
    }
    if (!j->pipelined) {
        /* Weight Streaming: weights and gradients pass through two slots
         * each; only the small batch-norm statistics have their own room. */
        int rc = wslots_init(&j->ws, m, p->fwd_stream, p->n_fwd_stream, p->bwd_stream, p->n_bwd_stream);
        if (rc < 0) {
            snprintf(err, errlen, "%s", rc == -ENOMEM ? "out of memory for the weight slots"
                                           : "the plan's weight schedule does not stream whole layers in order");
            return rc;
        }
        j->ws_ready = true;
    }
    for (size_t i = 0; !oom && i < p->n_tensors; i++) {
        wn_tensor *t = &j->t[i];
        t->n = m->tensors[i].elems;
        t->step = UINT64_MAX;
        t->trainable = m->tensors[i].trainable;
        t->job = j;
        if (j->ws_ready) {
            if (!t->trainable)
                oom |= !(j->gp[i] = t->g = malloc(t->n * sizeof(float)));
            continue;
        }
        j->wp[i] = t->w = malloc(t->n * sizeof(float));
        j->gp[i] = t->g = malloc(t->n * sizeof(float));
        oom |= !t->w || !t->g;
        if (j->pipelined) {
            /* One replica: its own gradient is the reduced one. */
            t->rg = p->n_replicas > 1 ? malloc(t->n * sizeof(float)) : t->g;
            oom |= !t->rg;
            oom |= t->trainable && optim_state_init(&t->st, &j->cfg, t->n) < 0;
            if (t->trainable && !oom) /* one update per step so far */
                optim_state_set_step(&t->st, (int64_t)p->first_step);
        }
    }
    if (!oom) {
        if (exec_init(&j->ex, m, (int)j->batch, (int)wn_of(j->n)->opt.threads, j->wp, j->gp, err,
                      errlen) < 0)
            return -ENOMEM;
        j->ex_ready = true;
        j->ex.seed = p->seed;
        j->ex.sample_offset = j->batch_offset;
        j->ex.replica_share = 1.0f / (float)p->n_replicas;
    }
    /* Workers feeding us, and a batch slot per credit each. */
    size_t nf = 0;
    for (size_t i = 0; i < p->n_workers; i++)
        if (p->workers[i]->replica == j->replica)
            nf++;
    j->feeds = calloc(nf ? nf : 1, sizeof(*j->feeds));
    j->nbatches = nf * WN_CREDITS;
    j->batches = calloc(j->nbatches ? j->nbatches : 1, sizeof(*j->batches));
    j->batch_bytes = (size_t)j->batch * (j->in_elems * sizeof(float) + j->ex.label_elems * sizeof(int32_t));
    oom |= !j->feeds || !j->batches;
    for (size_t i = 0; !oom && i < j->nbatches; i++) {
        j->batches[i].step = UINT64_MAX;
        oom |= !(j->batches[i].data = malloc(j->batch_bytes));
    }
    if (oom || nf == 0) {
        snprintf(err, errlen, oom ? "out of memory for the job's buffers" : "no worker feeds replica %u", j->replica);
        return -ENOMEM;
    }
    j->ebuf[0].k = j->ebuf[1].k = -1;
    if (p->eval_batches > 0) {
        j->ebuf_bytes = (size_t)p->eval_batch * (j->in_elems + j->ex.label_elems) * 4;
        for (int i = 0; i < 2; i++)
            if (!(j->ebuf[i].data = malloc(j->ebuf_bytes ? j->ebuf_bytes : 1))) {
                snprintf(err, errlen, "out of memory for the evaluation batches");
                return -ENOMEM;
            }
    }
    return 0;
}

static void wn__job_alloc(void *arg)
{
    wn_job *j = arg;
    j->compute_err = wn__job_buffers(j, j->compute_msg, sizeof(j->compute_msg));
}

/* The buffers are there: the links to the swarmx parent and the workers. */
static void wn__job_allocated(void *arg)
{
    wn_job *j = arg;
    node *n = j->n;
    j->busy = false;
    if (j->state == WN_RELEASED) {
        if (j->links_open == 0)
            wn__free_buffers(j);
        return;
    }
    if (j->compute_err) {
        j->compute_err = 0;
        wn__abort(n, j, "%s", j->compute_msg); /* the coordinator hears why, nothing stays */
        return;
    }
    Appliance__Plan *p = j->plan;
    if (plan_eval_at(p, j->step)) { /* resuming where an evaluation is due */
        wn__eval_begin(j);
        if (j->ws_ready)
            wslots_new_pass(&j->ws, true);
    }
    j->state = WN_LINKING;
    conn_link_start(&j->up, n->loop, p->swarm[j->swarm_parent]->addr, &n->ccfg, &wn__up_ops, j);
    for (size_t i = 0; i < p->n_workers; i++) {
        const Appliance__PlanWorker *pw = p->workers[i];
        if (pw->replica != j->replica)
            continue;
        wn_feed *f = &j->feeds[j->nfeeds++];
        f->job = j;
        f->slot = pw->slot;
        f->slots = pw->slots ? pw->slots : 1;
        conn_link_start(&f->link, n->loop, pw->addr, &n->ccfg, &wn__feed_ops, f);
    }
    log_info("job %s: replica %u of %zu, %u samples per step, %zu worker(s)", j->id, j->replica,
             p->n_replicas, j->batch, j->nfeeds);
}

/* Starts a job (jobhost_ops.start): the replica's share of the plan and its
 * model; the buffers are allocated on the compute thread, then the links
 * start (wn__job_allocated). */
static void *wn__start(jobhost *h, Appliance__Plan *p, char *why, size_t whylen)
{
    node *n = h->n;
    wse_node *w = wn_of(n);
    wn_job *j = calloc(1, sizeof(*j));
    if (!j) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    j->n = n;
    snprintf(j->id, sizeof(j->id), "%s", p->job_id);
    j->plan = p;
    const Appliance__PlanReplica *me = NULL;
    for (size_t i = 0; i < p->n_replicas; i++)
        if (p->replicas[i]->member_id == n->member_id)
            me = p->replicas[i];
    char err[1024];
    jobspec *spec = jobspec_parse(p->job_toml, strlen(p->job_toml), p->file_name, NULL, err, sizeof(err));
    if (spec) {
        j->m = spec->model;
        spec->model = NULL;
        jobspec_free(spec);
    }
    if (!me || !j->m || p->n_swarm == 0) {
        if (!me)
            snprintf(err, sizeof(err), "plan has no replica for member %u", n->member_id);
        else if (p->n_swarm == 0)
            snprintf(err, sizeof(err), "plan has no swarmx node");
        return wn__start_failed(j, why, whylen, err);
    }
    if (model_plan_check(p, j->m, err, sizeof(err)) < 0)
        return wn__start_failed(j, why, whylen, err);
    j->replica = me->index;
    j->batch = me->batch;
    j->step = p->first_step;
    j->in_elems = model_shape_elems(&j->m->input);
    j->batch_offset = me->batch_offset;
    j->swarm_parent = me->swarm_parent >= 0 && (size_t)me->swarm_parent < p->n_swarm ? me->swarm_parent : 0;
    /* The buffers are allocated (and touched) on the compute thread: a
     * large model takes a while, and heartbeats must go on meanwhile. */
    j->state = WN_ALLOCATING;
    j->busy = true;
    if (compute_submit(&w->comp, wn__job_alloc, wn__job_allocated, j) < 0) {
        j->busy = false;
        return wn__start_failed(j, why, whylen, "out of memory queueing the buffer allocation");
    }
    w->job = j;
    return j;
}

/* Lets the job go (jobhost_ops.release): links close, buffers go once no
 * task uses them. */
static void wn__release_job(jobhost *h, void *job, jobhost_end end, const char *why)
{
    wn_job *j = job;
    if (end == JOBHOST_RELEASED)
        log_info("job %s: released at step %llu", j->id, (unsigned long long)j->step);
    else if (end == JOBHOST_COORDINATOR_LOST)
        log_warn("job %s: released at step %llu: lost the coordinator", j->id,
                 (unsigned long long)j->step);
    wn__release(h->n, j);
}

static void wn__describe_wait(node *n, char *out, size_t len)
{
    wn_job *j = wn_of(n)->job;
    if (!j) {
        snprintf(out, len, "nothing: no job");
        return;
    }
    static const char *const stages[] = {"forward pass", "loss", "backward pass", "update",
                                         "evaluation", "evaluation metrics"};
    const char *stage = (unsigned)j->stage < 6 ? stages[j->stage] : "?";
    const char *layer = j->m && j->layer >= 0 && j->layer < j->m->nlayers ? j->m->layers[j->layer].name : "-";
    if (j->busy)
        snprintf(out, len, "its own compute task: step %llu, %s of layer %s", (unsigned long long)j->step,
                 stage, layer);
    else if (j->pipelined && j->stage == WN_UPDATE)
        snprintf(out, len, "the reduced gradients of step %llu from swarmx node %u (%zu tensors complete)",
                 (unsigned long long)j->step, j->swarm_parent, j->rg_done);
    else
        snprintf(out, len, "step %llu, %s of layer %s: its weights from swarmx node %u or its batch "
                 "from %zu worker(s)", (unsigned long long)j->step, stage, layer, j->swarm_parent,
                 j->nfeeds);
}

/* The coordinator owns the job; a restarted one recovers it. */
static void wn__coordinator_lost(node *n)
{
    jobhost_end_job(&wn_of(n)->jobs, JOBHOST_COORDINATOR_LOST, "lost the coordinator");
}

static void wn__shutdown(node *n)
{
    wse_node *w = wn_of(n);
    jobhost_end_job(&w->jobs, JOBHOST_SHUTDOWN, "shutdown");
    compute_stop(&w->comp); /* after the task in flight; calls every done */
}

static void wn__fill_register(node *n, Appliance__Register *r)
{
    r->wafer_memory = wn_of(n)->opt.wafer_memory;
}

static void wn__metrics(node *n, metrics_buf *b)
{
    wse_node *w = wn_of(n);
    metrics_printf(b, "# HELP appliance_steps_total Training steps this replica computed.\n"
                      "# TYPE appliance_steps_total counter\nappliance_steps_total %llu\n",
                   (unsigned long long)w->steps);
    metrics_printf(b, "# HELP appliance_weight_chunks_held_total Weight chunks held until their slot was free.\n"
                      "# TYPE appliance_weight_chunks_held_total counter\n"
                      "appliance_weight_chunks_held_total %llu\n", (unsigned long long)w->staged);
    metrics_hist_render(&w->step_hist, b, NULL);
}

static const options_key wn__keys[] = {
    {"wafer-memory", "SIZE", OPTIONS_SIZE, offsetof(wse_node_options, wafer_memory), 0, 0, 0,
     "declared on-wafer memory (default 40G, at most the host's memory)"},
    {"threads", "N", OPTIONS_U32, offsetof(wse_node_options, threads), 0, 1, 10000000,
     "BLAS threads for the kernels (default 1)"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static const jobhost_ops wn__jobhost_ops = {wn__start, wn__release_job};

void wse_node_role(node_role *role, wse_node *w, node *n)
{
    memset(role, 0, sizeof(*role));
    role->role = APPLIANCE__ROLE__ROLE_WSE_NODE;
    role->component = "wse-node";
    memset(w, 0, sizeof(*w));
    w->n = n;
    w->opt.threads = 1;
    role->options = (options_table){NULL, wn__keys, &w->opt};
    jobhost_init(&w->jobs, n, role, &wn__jobhost_ops);
    role->fill_register = wn__fill_register;
    role->on_shutdown = wn__shutdown;
    role->on_coordinator_lost = wn__coordinator_lost;
    role->describe_wait = wn__describe_wait;
    role->metrics = wn__metrics;
}
