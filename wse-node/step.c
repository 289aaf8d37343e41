/* wse-node: the steps of a replica: each layer's forward and backward pass
 * on the compute thread as soon as its weights and batch are in, the loss,
 * the gradients sent up, the Pipelined update, evaluation. */
#include "wjob.h"

#include <errno.h>
#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "kernels.h"
#include "msg.h"
#include "msgcheck.h"
#include "optim_plan.h"
#include "plan.h"

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
    *out = (optim_param){t->w, t->rg, t->n, t->trainable, &t->st, t->w16, NULL};
}

/* Pipelined: applies the all-reduced gradients to the resident weights
 * with the step memoryx runs on its copy (optim_apply_step), split over
 * the kernels' threads: bit for bit the same. */
static void wn__update(wn_job *j)
{
    optim_apply_step_split(&j->cfg, j->plan->n_tensors, wn__param, j, (int64_t)j->step,
                           kernels_for);
}

/* The buffer holding (or awaiting) eval batch k, or NULL; k (uint32_t)-1:
 * a free one. There are one or two (WN_CREDITS). */
wn_eval_buf *wn__eval_buf(wn_job *j, uint32_t k)
{
    for (int i = 0; i < 2; i++)
        if (j->ebuf[i].data && j->ebuf[i].k == (int32_t)k)
            return &j->ebuf[i];
    return NULL;
}

/* Asks the replica's first worker for eval batch k into a free buffer. */
void wn__eval_request(wn_job *j, uint32_t k)
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
void wn__eval_begin(wn_job *j)
{
    j->stage = WN_EVAL;
    j->layer = 0;
    j->part = 0;
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
    j->part = 0;
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

/* Parts the current layer's pass goes in: 1 but in Weight Streaming in
 * parts (wslots.h). */
static uint32_t wn__parts(const wn_job *j)
{
    return j->ws_ready ? wslots_parts(&j->ws, j->layer) : 1;
}

/* The forward pass of layer `layer` (the current one, or further in its
 * chain), or of the current layer's part. A weight kept rounded is made
 * before its first one (updates keep it so after). */
static void wn__forward(wn_job *j, int layer, bool training)
{
    const model_layer *l = &j->m->layers[layer];
    wn_tensor *t = l->ntensors ? &j->t[l->first_tensor] : NULL;
    if (t && t->w16 && !t->w16_made) {
        bf16_pack(t->w16, t->w, t->n);
        t->w16_made = true;
    }
    uint32_t parts = wn__parts(j);
    if (parts > 1) {
        uint64_t r0, r1;
        wslots_part_rows(&j->ws, layer, j->part, &r0, &r1);
        exec_forward_part(&j->ex, layer, r0, r1, j->part == 0, j->part + 1 == parts, j->x,
                          (int64_t)j->step, training);
    } else {
        exec_forward(&j->ex, layer, j->x, (int64_t)j->step, training);
    }
}

/* The range of tensor k of layer `layer` (the current one, or one of its
 * backward chain) whose gradient goes up: its first element and count;
 * false when none does (a part before the last, for the tensors after the
 * weight). */
static bool wn__grad_range(wn_job *j, int layer, int k, uint64_t *from, uint64_t *count)
{
    const model_layer *l = &j->m->layers[layer];
    uint32_t parts = wn__parts(j); /* 1 unless in parts, where there is no chain */
    const wn_tensor *t = &j->t[l->first_tensor + k];
    if (parts > 1 && k > 0 && j->part + 1 < parts)
        return false;
    *from = 0;
    *count = t->n;
    if (parts > 1 && k == 0) {
        uint64_t r0, r1;
        wslots_part_rows(&j->ws, layer, j->part, &r0, &r1);
        *from = r0 * (uint64_t)l->in.d[0];
        *count = (r1 - r0) * (uint64_t)l->in.d[0];
    }
    return true;
}

/* A gradient's range rounded chunk by chunk, for its ranges of chunks. */
typedef struct wn_round {
    float *g;
    uint64_t count, chunk;
} wn_round;

static void wn__round_chunks(void *ctx, size_t lo, size_t hi)
{
    const wn_round *r = ctx;
    for (size_t c = lo; c < hi; c++) {
        uint64_t at = c * r->chunk, n = r->count - at < r->chunk ? r->count - at : r->chunk;
        bf16_pack_in_place(r->g + at, n);
    }
}

/* Mixed precision, on the compute thread: the gradients this task made,
 * rounded to bfloat16 in place for the wire, each chunk the pump sends
 * (plan->chunk_elems from the range's start) packed at the start of its
 * own place, so that the chunks are rounded apart on the operators'
 * threads. */
static void wn__round_grads(wn_job *j)
{
    const model_layer *l = &j->m->layers[j->layer];
    for (int k = 0; k < l->ntensors; k++) {
        uint64_t from, count;
        float *g = j->gp[l->first_tensor + k];
        if (!g || !wn__grad_range(j, j->layer, k, &from, &count) || count == 0)
            continue;
        wn_round r = {g, count, j->plan->chunk_elems};
        kernels_for((size_t)((count + r.chunk - 1) / r.chunk), 1, wn__round_chunks, &r);
    }
}

/* On the compute thread: the task that began at t0 ended; its time blocked
 * on the other stripes is not compute time. */
static void wn__task_time(wn_job *j, double t0)
{
    j->task_end = wn__now();
    j->stripes_wait = j->stripes ? wn_stripes_take_wait(j->stripes) : 0;
    j->task_sec = j->task_end - t0 - j->stripes_wait;
    j->compute_sec += j->task_sec;
}

static void wn__grads_progress(void *arg);

/* Whether the gradients leave the replica: all but Pipelined with one
 * replica, whose gradient is the reduced one and stays here (memoryx takes
 * the weights at checkpoints). */
static bool wn__grads_go_up(const wn_job *j)
{
    return !(j->pipelined && j->plan->n_replicas == 1);
}

/* The loss of the micro-batch whose first sample in the share is `first`,
 * on the compute thread. */
static void wn__loss(wn_job *j, const wn_batch *b, uint32_t first)
{
    double loss = exec_loss(&j->ex, j->x, exec_labels(&j->ex, b->data, (int)j->batch, (int)first),
                            1.0f / (float)j->plan->global_batch);
    j->loss_sum += loss;
    if (!isfinite(loss)) {
        j->compute_err = -EINVAL;
        snprintf(j->compute_msg, sizeof(j->compute_msg),
                 "loss of step %llu is not finite: a label out of range, or training diverged",
                 (unsigned long long)j->step);
    }
}

/* Simulated compute (sim.h): the gradients of a layer's pass that go up
 * are zeros. Weight Streaming's slots held another layer's: zeroed;
 * Pipelined's own buffers are zero since the start. */
static void wn__sim_zero_grads(wn_job *j, int layer)
{
    const model_layer *l = &j->m->layers[layer];
    for (int k = 0; j->ws_ready && k < l->ntensors; k++) {
        uint64_t from, count;
        float *g = j->gp[l->first_tensor + k];
        if (g && wn__grad_range(j, layer, k, &from, &count))
            memset(g, 0, count * sizeof(float));
    }
}

/* Samples in the current micro-batch of the share. */
static uint32_t wn__micro_count(const wn_job *j)
{
    uint32_t first = j->micro * j->mb;
    return j->batch - first < j->mb ? j->batch - first : j->mb;
}

/* Simulated compute (sim.h) runs on the loop, not the compute thread: a
 * task's layers are deadlines of one timer, so that a replica's simulated
 * step costs no thread hand-over, futex or sleep per layer (with 64 replicas
 * on one host those system calls were most of the wse-nodes' CPU). The
 * task spends its layers' time (a part its share), the loss is a uniform
 * prediction's, an evaluation counts its samples and nothing correct; a
 * Pipelined update is not applied. */
typedef struct wn_sim_task {
    uv_timer_t timer;
    wn_job *j;
    double t0;   /* the task's start (wn__now) */
    double due;  /* when the run of layers that runs now ends */
    double mark; /* when the last wake-up's layers ended */
    int c;       /* the first layer not ended, in the task's chain */
} wn_sim_task;

/* The layers a task spends time on, and the seconds of its c-th. */
static int wn__sim_layers(const wn_job *j)
{
    if (j->stage == WN_EVAL)
        return 1;
    return j->stage == WN_FORWARD || j->stage == WN_BACKWARD ? j->chain : 0;
}

static double wn__sim_sec(wn_job *j, int c)
{
    const sim_times *st = &j->sim_t;
    if (j->stage == WN_EVAL)
        return sim_layer_sec(st, j->layer, false, wn__eval_buf(j, j->eval_k)->n) / wn__parts(j);
    bool backward = j->stage == WN_BACKWARD;
    return sim_layer_sec(st, backward ? j->layer - c : j->layer + c, backward, wn__micro_count(j)) /
           wn__parts(j);
}

/* The c-th layer's time is spent (`sec` of it, measured): its gradients,
 * zeros, go up while the chain runs on, as the kernels' would. */
static void wn__sim_layer_done(wn_job *j, int c, double sec)
{
    if (j->stage == WN_EVAL)
        return;
    j->chain_sec[c] = sec;
    if (j->stage != WN_BACKWARD)
        return;
    wn__sim_zero_grads(j, j->layer - c);
    bool last_micro = j->micro + 1 >= j->nmicro;
    if (last_micro && c + 1 < j->chain && !j->ws_ready && wn__grads_go_up(j) &&
        j->m->layers[j->layer - c].ntensors && j->state != WN_RELEASED) {
        j->grads_ready = j->layer - c;
        wn__grads_progress(j);
    }
}

/* What the task leaves beside its layers' time. */
static void wn__sim_end(wn_job *j)
{
    const sim_times *st = &j->sim_t;
    uint32_t count = wn__micro_count(j);
    if (j->stage == WN_EVAL_METRICS) {
        const wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
        j->metrics.samples += eb->n;
        j->metrics.loss += st->loss * eb->n;
    } else if (j->stage == WN_FORWARD) {
        if (j->fuse_loss)
            j->loss_sum += st->loss * count;
        j->fused_sec[0] = 0;
    } else if (j->stage == WN_LOSS) {
        j->loss_sum += st->loss * count;
    } else if (j->stage == WN_BACKWARD) {
        j->fused_sec[1] = 0;
    }
}

static void wn__sim_closed(uv_handle_t *h)
{
    free(h->data);
}

static void wn__work_done(void *arg);

/* The last layer of the run of the chain's layers from c on whose ends
 * are one wake-up: a layer's end within the chain does nothing another
 * daemon waits for, its gradients going up with the task's end, except in
 * a Pipelined backward pass, where each layer's go up as it ends
 * (wn__sim_layer_done). So a Weight Streaming task, and any forward or
 * evaluation pass, wakes its wse-node once, at the chain's end: 64
 * simulated replicas on one host woke some 20 times a step each, most to
 * do nothing. */
static int wn__sim_wake_at(const wn_job *j, int c, int n)
{
    return j->stage == WN_BACKWARD && !j->ws_ready ? c : n - 1;
}

/* The seconds of the chain's layers c to e */
static double wn__sim_span(wn_job *j, int c, int e)
{
    double sec = 0;
    for (int k = c; k <= e; k++)
        sec += wn__sim_sec(j, k);
    return sec;
}

/* Ends the layers whose time is up (each at its time as measured, the last
 * of a wake-up's run with the rest of the time the run took), then waits
 * for the next run's end (to the nearest millisecond, libuv's timers'
 * unit; the deadlines add up exactly, so the task's time does not drift),
 * or ends the task. */
static void wn__sim_run(uv_timer_t *tm)
{
    wn_sim_task *t = tm->data;
    wn_job *j = t->j;
    int n = wn__sim_layers(j);
    while (t->c < n) {
        double now = wn__now();
        if (t->due - now >= 0.0005) {
            uv_update_time(tm->loop);
            uv_timer_start(tm, wn__sim_run, (uint64_t)((t->due - now) * 1000 + 0.5), 0);
            return;
        }
        int e = wn__sim_wake_at(j, t->c, n);
        double rest = now - t->mark;
        for (; t->c < e; t->c++) {
            double sec = wn__sim_sec(j, t->c);
            wn__sim_layer_done(j, t->c, sec);
            rest -= sec;
        }
        wn__sim_layer_done(j, t->c, rest > 0 ? rest : 0);
        t->mark = now;
        if (++t->c < n)
            t->due += wn__sim_span(j, t->c, wn__sim_wake_at(j, t->c, n));
    }
    wn__sim_end(j);
    wn__task_time(j, t->t0);
    j->sim_free = t->due;
    uv_close((uv_handle_t *)tm, wn__sim_closed);
    wn__work_done(j);
}

/* With sim: when the batch the current task reads landed, 0 for a task
 * that reads none. Only that batch gates the task: the next steps'
 * batches land while this step computes (the workers run ahead), and a
 * wafer does not wait for them. */
static double wn__sim_batch_landed(wn_job *j)
{
    if (j->stage == WN_FORWARD || j->stage == WN_LOSS) {
        const wn_batch *b = wn__batch_for(j, j->step);
        return b ? b->landed : 0;
    }
    if (j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS) {
        const wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
        return eb ? eb->landed : 0;
    }
    return 0;
}

/* Starts the job's current task as simulated compute. Returns 0 or
 * -ENOMEM. */
static int wn__sim_start(wn_job *j)
{
    wn_sim_task *t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    uv_timer_init(j->n->loop, &t->timer);
    t->timer.data = t;
    t->j = j;
    t->t0 = wn__now();
    /* The simulated wafer starts the task when it could have: its last
     * task's end or its last input's landing, whichever came later, not
     * when this process got round to it (64 replicas on one host's cores
     * wake late, and a wafer does not wait for its host's scheduler: the
     * lateness is the host's, not the fabric's, and would add up over a
     * step's tasks). A late input still starts it late. */
    double v = j->sim_free > j->sim_input ? j->sim_free : j->sim_input, b = wn__sim_batch_landed(j);
    if (b > v)
        v = b;
    t->mark = v > 0 && v < t->t0 ? v : t->t0;
    int n = wn__sim_layers(j);
    t->due = t->mark + (n > 0 ? wn__sim_span(j, 0, wn__sim_wake_at(j, 0, n)) : 0);
    /* the first check in a later turn of the loop, as a compute task's end */
    uv_update_time(j->n->loop);
    uv_timer_start(&t->timer, wn__sim_run, 0, 0);
    return 0;
}

/* Runs the current stage on the compute thread. */
static void wn__work(void *arg)
{
    wn_job *j = arg;
    double t0 = wn__now();
    if (j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS) {
        const wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
        exec_set_batch(&j->ex, (int)eb->n);
        if (j->stage == WN_EVAL && j->layer == 0)
            j->x = exec_take_input(&j->ex, eb->data, 0);
        if (j->stage == WN_EVAL) {
            wn__forward(j, j->layer, false);
        } else if (exec_eval(&j->ex, j->x, exec_labels(&j->ex, eb->data, (int)eb->n, 0),
                             &j->metrics) < 0) {
            j->compute_err = -EINVAL;
            snprintf(j->compute_msg, sizeof(j->compute_msg),
                     "evaluation at step %llu: a label out of range", (unsigned long long)j->step);
        }
        wn__task_time(j, t0);
        return;
    }
    wn_batch *b = wn__batch_for(j, j->step);
    uint32_t first = j->micro * j->mb; /* the micro-batch's first sample in the share */
    if (j->stage == WN_FORWARD) {
        if (j->layer == 0) {
            uint32_t count = wn__micro_count(j);
            exec_set_batch(&j->ex, (int)count);
            j->ex.sample_offset = (uint64_t)j->batch_offset + first;
            j->ex.micro_later = j->ex.accumulate = j->micro > 0;
            j->ex.micro_more = j->micro + 1 < j->nmicro;
            j->x = exec_take_input(&j->ex, b->data, (int)first);
        }
        for (int c = 0; c < j->chain; c++) {
            double t = wn__now();
            wn__forward(j, j->layer + c, true);
            j->chain_sec[c] = wn__now() - t;
        }
        if (j->fuse_loss) {
            double t = wn__now();
            wn__loss(j, b, first);
            j->fused_sec[0] = wn__now() - t;
        }
    } else if (j->stage == WN_LOSS) {
        wn__loss(j, b, first);
    } else if (j->stage == WN_BACKWARD) {
        uint32_t parts = wn__parts(j);
        if (parts > 1) {
            uint64_t r0, r1;
            wslots_part_rows(&j->ws, j->layer, j->part, &r0, &r1);
            exec_backward_part(&j->ex, j->layer, r0, r1, j->part == 0, j->part + 1 == parts, j->x,
                               (int64_t)j->step);
        } else {
            bool last_micro = j->micro + 1 >= j->nmicro;
            for (int c = 0; c < j->chain; c++) {
                double t = wn__now();
                exec_backward(&j->ex, j->layer - c, j->x, (int64_t)j->step);
                j->chain_sec[c] = wn__now() - t;
                /* a layer's gradients go up while the chain runs on (Weight
                 * Streaming: only views follow it, and its gradients are yet
                 * to be rounded for the wire at the task's end) */
                if (last_micro && c + 1 < j->chain && !j->ws_ready && wn__grads_go_up(j) &&
                    j->m->layers[j->layer - c].ntensors) {
                    __atomic_store_n(&j->grads_ready, j->layer - c, __ATOMIC_RELEASE);
                    compute_progress(&wn_of(j->n)->comp, wn__grads_progress, j);
                }
            }
        }
        if (j->plan->wire_bf16)
            wn__round_grads(j);
        if (j->fuse_update) {
            double t = wn__now();
            wn__update(j);
            j->fused_sec[1] = wn__now() - t;
        }
    } else {
        wn__update(j);
    }
    wn__task_time(j, t0);
}

static void wn__grad_sent(void *arg, int status)
{
    wn_tensor *t = arg;
    t->sends--;
    if (t->job->state != WN_RELEASED)
        wn__advance(t->job);
}

static void wn__packed_grad_sent(void *arg, int status)
{
    wn_packed_grad *pg = arg;
    wn_tensor *t = pg->t;
    free(pg);
    wn__grad_sent(t, status);
}


/* Sends the queued gradients up, a chunk at a time, while the link to
 * swarmx has room (a layer's gradients may be far larger than what a link
 * may queue); on_drain calls it again. Returns 0 or a negative errno. */
int wn__grad_pump(wn_job *j)
{
    if (j->gq_head == j->gq_len)
        return 0;
    conn *up = conn_link_conn(&j->up);
    if (!up)
        return -ENOTCONN;
    while (j->gq_head < j->gq_len) {
        uint32_t id = j->gq[j->gq_head];
        wn_tensor *t = &j->t[id];
        while (t->send_off < t->send_end) {
            uint64_t off = t->send_off;
            uint64_t count = t->send_end - off < j->plan->chunk_elems ? t->send_end - off
                                                                     : j->plan->chunk_elems;
            if (!conn_can_send(up, count * msgcheck_wire_elem(j->plan)))
                return 0;
            Appliance__GradChunk g = APPLIANCE__GRAD_CHUNK__INIT;
            g.step = t->send_step;
            g.tensor_id = id;
            g.offset = off;
            g.count = count;
            g.total = t->n;
            /* bfloat16: rounded in place on the compute thread, at the
             * start of the chunk's own place (wn__round_grads) */
            const void *src = t->send_base + (off - t->send_from);
            uint32_t bytes = (uint32_t)(count * msgcheck_wire_elem(j->plan));
            wn_packed_grad *pg = wn__pack_grad(j, t, off, count, src, &g, &bytes); /* sparse */
            if (!pg && t->kept_only) /* (its slot holds no dense gradient to send instead) */
                return -ENOMEM;
            if (pg) /* the loop's work, a turn's share at most (conn_can_send) */
                conn_charge_send(up, count * msgcheck_wire_elem(j->plan));
            ENVELOPE(env, grad_chunk, GRAD_CHUNK, &g);
            int rc = pg ? conn_send(up, &env, pg->data, bytes, wn__packed_grad_sent, pg)
                        : conn_send(up, &env, src, bytes, wn__grad_sent, t);
            if (rc < 0) {
                free(pg);
                return rc;
            }
            t->sends++;
            t->send_off += count;
        }
        t->sends--; /* no longer queued */
        j->gq_head++;
    }
    j->gq_head = j->gq_len = 0;
    return 0;
}

static void wn__upload_sent(void *arg, int status)
{
    wn_job *j = arg;
    j->up_sends--;
    if (j->state == WN_RELEASED)
        return;
    if (status < 0 && j->up_busy) {
        wn__fault(j->n, j, "the weights after step %llu could not be sent for the checkpoint: %s",
                  (unsigned long long)j->up_step, uv_strerror(status));
        return;
    }
    if (j->up_sends == 0 && j->up_tensor == j->plan->n_tensors && j->up_busy) {
        j->up_busy = false;
        wn__advance(j);
    }
}

int wn__upload_pump(wn_job *j)
{
    if (!j->up_busy)
        return 0;
    conn *up = conn_link_conn(&j->up);
    if (!up)
        return -ENOTCONN;
    while (j->up_tensor < j->plan->n_tensors) {
        wn_tensor *t = &j->t[j->up_tensor];
        uint32_t states = t->trainable ? (uint32_t)optim_state_count(&t->st) : 0;
        if (j->up_state > states) { /* the next tensor */
            j->up_tensor++;
            j->up_state = 0;
            j->up_off = 0;
            continue;
        }
        if (j->up_off >= t->n) { /* its next state */
            j->up_state++;
            j->up_off = 0;
            continue;
        }
        uint64_t count = t->n - j->up_off < j->plan->chunk_elems ? t->n - j->up_off
                                                                : j->plan->chunk_elems;
        if (!conn_can_send(up, count * sizeof(float)))
            return 0;
        const float *src = t->w;
        if (j->up_state > 0) {
            const char *name;
            size_t n;
            src = optim_state_tensor(&t->st, j->up_state - 1, &name, &n);
        }
        Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
        w.step = j->up_step;
        w.tensor_id = (uint32_t)j->up_tensor;
        w.offset = j->up_off;
        w.count = count;
        w.total = t->n;
        w.pass = APPLIANCE__PASS__PASS_CHECKPOINT;
        w.state = j->up_state;
        ENVELOPE(env, weight_chunk, WEIGHT_CHUNK, &w);
        int rc = conn_send(up, &env, src + j->up_off, (uint32_t)(count * sizeof(float)),
                           wn__upload_sent, j);
        if (rc < 0)
            return rc;
        j->up_sends++;
        j->up_off += count;
    }
    if (j->up_sends == 0) /* nothing to send (no tensors) */
        j->up_busy = false;
    return 0;
}

/* Pipelined, after the update of the current step: the first replica
 * sends its weights and optimizer state up when a checkpoint follows. */
static void wn__maybe_upload(wn_job *j)
{
    if (!j->pipelined || j->replica != 0 || !plan_checkpoint_after(j->plan, j->step))
        return;
    j->up_busy = true;
    j->up_step = j->step;
    j->up_tensor = 0;
    j->up_state = 0;
    j->up_off = 0;
    int rc = wn__upload_pump(j);
    if (rc < 0)
        wn__fault(j->n, j, "cannot send the weights after step %llu for the checkpoint: %s",
                  (unsigned long long)j->step, strerror(-rc));
}

/* After the update: the weights go up for a checkpoint that follows; -1
 * when that released the job. */
static int wn__updated(wn_job *j)
{
    wn__maybe_upload(j);
    return j->state == WN_RELEASED ? -1 : 0;
}

/* Queues the gradients of a layer's trainable tensors to be sent up, in
 * chunks (wn__grad_pump sends them). In parts: the part's rows of the
 * weight, and the rest with the last part. */
static void wn__queue_grads(wn_job *j, int layer)
{
    if (!wn__grads_go_up(j))
        return;
    const model_layer *l = &j->m->layers[layer];
    for (int k = 0; k < l->ntensors; k++) {
        const model_tensor *mt = &j->m->tensors[l->first_tensor + k];
        wn_tensor *t = &j->t[mt->id];
        uint64_t from, count;
        if (!wn__grad_range(j, layer, k, &from, &count))
            continue;
        t->send_from = from;
        t->send_end = from + count;
        t->send_off = t->send_from;
        t->send_base = j->gp[mt->id];
        t->send_step = j->step;
        t->sends++; /* queued: its gradient must not change */
        j->gq[j->gq_len++] = mt->id;
    }
}

/* Queues the gradients of a backward chain's layers, from the one after
 * the last queued down to `to`. */
static void wn__queue_down_to(wn_job *j, int to)
{
    while (j->grads_queued > to)
        wn__queue_grads(j, --j->grads_queued);
}

/* On the loop, while a backward chain runs on: the gradients of its layers
 * down to the one the compute thread finished last start up. */
static void wn__grads_progress(void *arg)
{
    wn_job *j = arg;
    if (j->state == WN_RELEASED)
        return;
    int to = __atomic_load_n(&j->grads_ready, __ATOMIC_ACQUIRE);
    wn__queue_down_to(j, to);
    int rc = wn__grad_pump(j);
    if (rc < 0)
        wn__fault(j->n, j, "cannot send gradients of %s: %s", j->m->layers[to].name,
                  strerror(-rc));
}

/* After a task: the next one is on its way to the compute thread (it
 * need not wait while the loop copies megabytes into the socket), then
 * the gradients the task made start up. */
static void wn__advance_and_send(wn_job *j, const model_layer *sent)
{
    wn__advance(j);
    if (!sent || j->state == WN_RELEASED)
        return;
    int rc = wn__grad_pump(j);
    if (rc < 0)
        wn__fault(j->n, j, "cannot send gradients of %s: %s", sent->name, strerror(-rc));
}

const char *const wn_phase_names[WN_PHASES] = {
    "forward", "loss", "backward", "update", "evaluation",
    "wait_batch", "wait_weights", "wait_gradients_sent", "wait_reduced", "wait_stripes",
    "wait_checkpoint", "other",
};

/* The idle time since the last mark goes to what the replica waited for;
 * from now on it waits for `what`. */
static void wn__wait(wn_job *j, enum wn_phase what)
{
    double now = wn__now();
    if (j->mark > 0) {
        j->phase[j->wait] += now - j->mark;
        wn_of(j->n)->phase_total[j->wait] += now - j->mark;
    }
    j->mark = now;
    j->wait = what;
}

static void wn__phase_add(wn_job *j, enum wn_phase ph, double sec)
{
    j->phase[ph] += sec;
    wn_of(j->n)->phase_total[ph] += sec;
}

/* A task finished: its time goes to its stage (and layer). */
static void wn__task_done(wn_job *j)
{
    static const enum wn_phase of_stage[] = {
        [WN_FORWARD] = WN_PH_FORWARD, [WN_LOSS] = WN_PH_LOSS, [WN_BACKWARD] = WN_PH_BACKWARD,
        [WN_UPDATE] = WN_PH_UPDATE, [WN_EVAL] = WN_PH_EVAL, [WN_EVAL_METRICS] = WN_PH_EVAL,
    };
    double loss = j->fuse_loss ? j->fused_sec[0] : 0, update = j->fuse_update ? j->fused_sec[1] : 0;
    wn__phase_add(j, of_stage[j->stage], j->task_sec - loss - update);
    wn__phase_add(j, WN_PH_LOSS, loss);
    wn__phase_add(j, WN_PH_UPDATE, update);
    wn__phase_add(j, WN_PH_WAIT_STRIPES, j->stripes_wait); /* blocked on the other stripes in the task */
    bool chained = j->stage == WN_FORWARD || j->stage == WN_BACKWARD;
    /* each layer of the chain its own time (a task that ran on into the
     * loss or the update timed its one layer so too) */
    if (chained && (j->chain > 1 || j->fuse_loss || j->fuse_update)) {
        for (int c = 0; c < j->chain; c++)
            j->layer_sec[j->stage == WN_BACKWARD][j->layer + (j->stage == WN_BACKWARD ? -c : c)] +=
                j->chain_sec[c];
    } else if (chained && j->layer_sec[0] && j->layer >= 0 && j->layer < j->m->nlayers) {
        j->layer_sec[j->stage == WN_BACKWARD][j->layer] += j->task_sec;
    }
    j->mark = j->task_end; /* the loop's delay in taking the result up is "other" */
    j->wait = WN_PH_OTHER;
}

/* The step is done: its report and its batch's credit are owed
 * (wn__notify), and the job turns to the next step. */
static void wn__step_done(wn_job *j)
{
    wn_report *r = &j->report;
    r->msg = (Appliance__StepReport)APPLIANCE__STEP_REPORT__INIT;
    r->msg.job_id = j->id;
    r->msg.step = j->step;
    r->msg.replica = j->replica;
    r->msg.loss_sum = j->loss_sum;
    r->msg.samples = j->stripes && j->stripes->part > 0 ? 0 : j->batch; /* a group's first stripe counts them */
    r->msg.compute_sec = j->compute_sec;
    wn__wait(j, j->wait); /* the step's time so far, in its phases */
    for (int i = 0; i < WN_PHASES; i++) {
        appliance__step_phase__init(&r->phase[i]);
        r->phase[i].name = (char *)wn_phase_names[i];
        r->phase[i].sec = j->phase[i];
        r->phases[i] = &r->phase[i];
    }
    r->msg.phases = r->phases;
    r->msg.n_phases = WN_PHASES;
    metrics_hist_observe(&wn_of(j->n)->step_hist, j->compute_sec);
    wn_of(j->n)->steps++;
    /* The batch's slot is free again: one more credit to its worker. */
    wn_batch *b = wn__batch_for(j, j->step);
    r->credit_to = b->from;
    r->owed = true;
    r->credit_owed = true;
    b->step = UINT64_MAX;
    b->full = false;
    j->step++;
    j->stage = WN_FORWARD;
    j->layer = 0;
    j->part = 0;
    j->micro = 0;
    j->loss_sum = 0;
    j->compute_sec = 0;
    memset(j->phase, 0, sizeof(j->phase));
    j->rg_done = 0;
    for (size_t i = 0; i < j->plan->n_tensors; i++)
        j->t[i].rg_have = 0;
    if (plan_eval_at(j->plan, j->step))
        wn__eval_begin(j);
    else if (j->step >= j->plan->max_steps)
        j->state = WN_FINISHED;
    wn__begin_pass(j);
}

/* Sends the credit of the batch of the step wn__step_done finished. In
 * Weight Streaming it waits until the next step's first task starts (its
 * weights are in) or the job waits for a batch: the next batch but one then
 * does not come in with the weights at the step's turn, where every hop of
 * the chain from the last gradients to the first weights waits for it (on
 * one link, or on one host's cores: 64 simulated replicas, 0.187 to 0.178
 * s a step); the rest of the step is left for it to arrive. */
static void wn__credit(wn_job *j)
{
    wn_report *r = &j->report;
    if (!r->credit_owed || j->state == WN_RELEASED)
        return;
    r->credit_owed = false;
    conn *c = conn_link_conn(&r->credit_to->link);
    if (c) {
        Appliance__Credit cr = APPLIANCE__CREDIT__INIT;
        cr.n = 1;
        ENVELOPE(ce, credit, CREDIT, &cr);
        conn_send_msg(c, &ce);
    }
}

/* Sends the report of the step wn__step_done finished (and in Pipelined
 * its batch's credit), once the next task is on its way: a message wakes
 * its peer, on this host often in the loop's place, and the compute thread
 * waited meanwhile (resnet_small: 0.1 to 4 ms a step). */
static void wn__notify(wn_job *j)
{
    wn_report *r = &j->report;
    if (!r->owed || j->state == WN_RELEASED)
        return;
    r->owed = false;
    ENVELOPE(env, step_report, STEP_REPORT, &r->msg);
    node_send_coordinator(j->n, &env);
    if (!j->ws_ready || j->state == WN_FINISHED)
        wn__credit(j);
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
    /* the stripes fell out of step (a stripe lost): a fault the job
     * recovers from, before any error of the task, which may only be its
     * consequence (a loss summed without the lost stripe's share) */
    if (j->stripes && exec_parts_error(&j->ex)) {
        wn__fault(j->n, j, "step %llu: the exchange with the other stripes of the samples "
                  "failed: %s", (unsigned long long)j->step, strerror(-exec_parts_error(&j->ex)));
        return;
    }
    if (j->compute_err) {
        wn__abort(j->n, j, "%s", j->compute_msg);
        return;
    }
    if (j->ex_ready && exec_spill_error(&j->ex)) {
        wn__abort(j->n, j, "step %llu: the spill file in %s failed: %s",
                  (unsigned long long)j->step, wn_of(j->n)->opt.spill_dir,
                  strerror(-exec_spill_error(&j->ex)));
        return;
    }
    wn__task_done(j);
    const model *m = j->m;
    bool more_parts = false;
    if (j->ws_ready && (j->stage == WN_FORWARD || j->stage == WN_BACKWARD || j->stage == WN_EVAL)) {
        more_parts = j->part + 1 < wn__parts(j);
        if (wslots_consume(&j->ws, j->layer, j->part, j->stage == WN_BACKWARD))
            wn__unstage(j); /* a slot is free: held chunks land, reading resumes */
    }
    if (j->state == WN_RELEASED)
        return;
    if (more_parts) { /* the layer's next part; in the backward pass this one's gradients go up */
        const model_layer *sent = j->stage == WN_BACKWARD ? &m->layers[j->layer] : NULL;
        if (sent)
            wn__queue_grads(j, j->layer);
        j->part++;
        wn__advance_and_send(j, sent);
        return;
    }
    const model_layer *sent = NULL;
    if (j->stage == WN_EVAL) {
        if (++j->layer == m->nlayers)
            j->stage = WN_EVAL_METRICS;
    } else if (j->stage == WN_EVAL_METRICS) {
        wn__eval_next(j);
    } else if (j->stage == WN_FORWARD) {
        j->layer += j->chain - 1; /* the chain's last */
        if (++j->layer == m->nlayers)
            j->stage = WN_LOSS;
        if (j->fuse_loss) { /* the task computed the loss too */
            j->stage = WN_BACKWARD;
            j->layer = m->nlayers - 1;
        }
    } else if (j->stage == WN_LOSS) {
        j->stage = WN_BACKWARD;
        j->layer = m->nlayers - 1;
    } else if (j->stage == WN_BACKWARD) {
        j->layer -= j->chain - 1; /* the chain's last */
        /* the gradients go up once the step's last micro-batch added to them */
        bool last_micro = j->micro + 1 >= j->nmicro;
        if (last_micro) { /* what wn__grads_progress has not queued yet */
            sent = &m->layers[j->layer];
            wn__queue_down_to(j, j->layer);
        }
        if (--j->layer < 0) {
            if (!last_micro) { /* the next micro-batch of the share */
                j->micro++;
                j->stage = WN_FORWARD;
                j->layer = 0;
    j->part = 0;
            } else if (j->pipelined && !j->fuse_update) {
                j->stage = WN_UPDATE; /* once the reduced gradients are in */
            } else {
                if (j->fuse_update && wn__updated(j) < 0)
                    return;
                wn__step_done(j);
            }
        }
    } else {
        if (j->stage == WN_UPDATE && wn__updated(j) < 0)
            return;
        wn__step_done(j);
    }
    j->part = 0;
    wn__advance_and_send(j, sent);
    wn__notify(j);
}

/* Whether the weights of a layer are complete for the current step: in its
 * slot (Weight Streaming), or resident since the first step (Pipelined). */
static bool wn__weights_ready(wn_job *j, const model_layer *l)
{
    if (j->res_ready)
        return wresident_ready(&j->res, (int)(l - j->m->layers));
    return false; /* Weight Streaming asks its slots (wslots_ready) */
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

/* How many layers the next task computes, from the current one: with the
 * weights resident (Pipelined, no stripes), a training forward pass runs
 * every layer whose weights are in, and a backward pass every layer whose
 * gradients of the last step have left; the gradients of each layer of it
 * start up as soon as it is done (wn__grads_progress). One task instead of
 * one each spares the compute thread a round trip through the loop per
 * layer. In Weight Streaming (no stripes, the layer whole) a layer's task
 * takes the views that follow it in the pass (a flatten, a fused relu):
 * they compute nothing, and a task of their own waited for the loop, busy
 * with the streams (the mixed-precision MLP: 2 to 9 ms a view). */
static int wn__chain(wn_job *j)
{
    int c = 1, nl = j->m->nlayers;
    if (j->ws_ready) {
        const model_layer *ls = j->m->layers;
        /* (a layer's parts only in a pass over the layers: the loss and
         * the update have none) */
        bool pass = j->stage == WN_FORWARD || j->stage == WN_BACKWARD;
        if (!pass || j->stripes || wn__parts(j) != 1)
            return 1;
        if (j->stage == WN_FORWARD)
            while (j->layer + c < nl && model_layer_is_view(&ls[j->layer + c]))
                c++;
        else
            while (j->layer - c >= 0 && model_layer_is_view(&ls[j->layer - c]))
                c++;
        return c;
    }
    if (!j->res_ready || j->stripes || j->plan->wire_bf16)
        return 1;
    if (j->stage == WN_FORWARD) {
        while (j->layer + c < nl && wresident_ready(&j->res, j->layer + c))
            c++;
    } else if (j->stage == WN_BACKWARD) {
        while (j->layer - c >= 0 && !wn__sending(j, j->layer - c))
            c++;
    }
    return c;
}

/* Whether the task about to start runs on into the next stage (wn_job's
 * fuse_loss, fuse_update): where the loop would only hand that stage to
 * the compute thread again. The loss follows a forward pass that reached
 * the last layer. The update follows a Pipelined backward pass that reached
 * the first layer in the step's last micro-batch, with one replica (no
 * reduced gradients to wait for) and no weights on their way up for a
 * checkpoint (only the update's end starts that). Not with stripes or
 * parts, whose tasks are a layer's or a part's. */
static void wn__fuse(wn_job *j)
{
    /* (a layer's parts asked only in a training pass: an evaluation's
     * metrics, the loss and the update have no layer) */
    bool pass = j->stage == WN_FORWARD || j->stage == WN_BACKWARD;
    bool whole = pass && !j->stripes && wn__parts(j) == 1;
    j->fuse_loss = whole && j->stage == WN_FORWARD && j->layer + j->chain == j->m->nlayers;
    j->fuse_update = whole && j->stage == WN_BACKWARD && j->pipelined && !wn__grads_go_up(j) &&
                     !j->up_busy && j->layer - (j->chain - 1) == 0 && j->micro + 1 >= j->nmicro;
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
            if (!wslots_ready(&j->ws, j->layer, j->part, false))
                return; /* resumes when the weights come */
            bool more = j->part + 1 < wn__parts(j);
            if (wslots_consume(&j->ws, j->layer, j->part, false))
                wn__unstage(j);
            if (j->state == WN_RELEASED)
                return;
            if (more) {
                j->part++;
                continue;
            }
            j->part = 0;
        }
        if (++j->layer == m->nlayers)
            j->stage = WN_EVAL_METRICS;
    }
}

/* Starts the next compute task if what it needs is there. */
void wn__advance(wn_job *j)
{
    if (j->busy || j->state >= WN_FINISHED)
        return;
    if (j->stage == WN_EVAL || j->stage == WN_EVAL_METRICS) {
        const wn_eval_buf *eb = wn__eval_buf(j, j->eval_k);
        if (!eb || !eb->full) {
            wn__credit(j);
            wn__wait(j, WN_PH_WAIT_BATCH);
            return;
        }
        if (eb->n == 0) { /* an empty share: the weights still go by */
            wn__eval_skip(j);
            return;
        }
    } else if (!wn__batch_for(j, j->step)) {
        wn__credit(j);
        wn__wait(j, WN_PH_WAIT_BATCH);
        return;
    }
    bool backward = j->stage == WN_BACKWARD;
    if (j->ws_ready && (j->stage == WN_FORWARD || backward || j->stage == WN_EVAL)) {
        /* Weight Streaming: the layer's weights in their slot, and the
         * gradient slot free of gradients not yet sent. */
        if (!wslots_ready(&j->ws, j->layer, j->part, backward)) {
            wn__wait(j, WN_PH_WAIT_WEIGHTS);
            return;
        }
        int blocker = backward ? wslots_grad_blocker(&j->ws, j->layer, j->part) : -1;
        if (blocker >= 0 && wn__sending(j, blocker)) {
            wn__wait(j, WN_PH_WAIT_GRADS_SENT);
            return;
        }
        wslots_bind(&j->ws, j->layer, j->part, backward, j->wp, j->gp,
                    j->plan->wire_bf16 ? j->w16p : NULL);
    } else if ((j->stage == WN_FORWARD || j->stage == WN_EVAL) &&
               !wn__weights_ready(j, &j->m->layers[j->layer])) {
        wn__wait(j, WN_PH_WAIT_WEIGHTS);
        return;
    }
    if (j->stage == WN_UPDATE && j->plan->n_replicas > 1 && j->rg_done < j->plan->n_tensors) {
        wn__wait(j, WN_PH_WAIT_REDUCED);
        return;
    }
    if (j->stage == WN_UPDATE && j->up_busy) { /* the weights it changes are still on their way */
        wn__wait(j, WN_PH_WAIT_CHECKPOINT);
        return;
    }
    if (backward && wn__sending(j, j->layer)) { /* its gradients of the last step must have left */
        wn__wait(j, WN_PH_WAIT_GRADS_SENT);
        return;
    }
    j->chain = wn__chain(j);
    wn__fuse(j);
    j->grads_queued = j->grads_ready = j->layer + 1; /* a backward chain's: none yet */
    /* the wait ends now, before the task can start: once it is queued the
     * compute thread may take the cores and this thread come back only
     * after the task, whose time would count twice */
    wn__wait(j, j->wait);
    j->mark = 0; /* computing */
    if (j->sim ? wn__sim_start(j) < 0
               : compute_submit(&wn_of(j->n)->comp, wn__work, wn__work_done, j) < 0) {
        wn__abort(j->n, j, "out of memory queueing a compute task");
        return;
    }
    j->busy = true;
    wn__credit(j);
}

