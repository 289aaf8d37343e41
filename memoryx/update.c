/* memoryx's optimizer update of a step (update.h). */
#include "update.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "sstream.h"
#include "mxjob.h"
#include "mxsparse.h"
#include "optim_plan.h"
#include "tier.h"

bool update_whole(const mx_job *j)
{
    /* (a mask that changes is chosen over the whole tensor) */
    return j->tier_window || j->cfg.max_gradient_norm > 0 || mxsparse_dynamic(j);
}

int update_parts(mx_job *j)
{
    uint64_t chunk = j->plan->chunk_elems ? j->plan->chunk_elems : UPDATE_PART_MIN;
    uint64_t part = chunk * ((UPDATE_PART_MIN + chunk - 1) / chunk);
    bool whole = update_whole(j);
    j->nparts = 0;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        t->part_elems = whole || t->n <= part ? (t->n ? t->n : 1) : part;
        t->nparts = (uint32_t)((t->n + t->part_elems - 1) / t->part_elems);
        if (t->nparts == 0)
            t->nparts = 1;
        t->parts_left = t->nparts;
        if (!(t->parts = calloc(t->nparts, sizeof(*t->parts))))
            return -ENOMEM;
        for (uint32_t k = 0; k < t->nparts; k++) {
            mx_part *q = &t->parts[k];
            q->t = t;
            q->lo = k * t->part_elems;
            q->hi = q->lo + t->part_elems < t->n ? q->lo + t->part_elems : t->n;
        }
        j->nparts += t->nparts;
    }
    j->ready = calloc(j->nparts ? j->nparts : 1, sizeof(*j->ready));
    return j->ready ? 0 : -ENOMEM;
}

/* The part of t that element `at` is in. */
static mx_part *update__part_at(const mx_tensor *t, uint64_t at)
{
    uint64_t i = at / t->part_elems;
    return &t->parts[i < t->nparts ? i : t->nparts - 1];
}

bool update_busy(const mx_tensor *t, uint64_t offset, uint64_t count)
{
    const mx_part *end = t->parts + t->nparts;
    for (const mx_part *p = update__part_at(t, offset); p < end && p->lo < offset + count; p++)
        if (p->busy)
            return true;
    return false;
}

void update_start(mx_job *j)
{
    j->updated = 0;
    j->grads_in = 0;
    for (size_t i = 0; i < j->nt; i++) {
        j->t[i].grad_have = 0;
        j->t[i].updated = false;
    }
}

void *update_grad_dest(const mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count)
{
    if (t->g16)
        return t->g16 + offset;
    return j->plan->wire_bf16 ? (void *)((uint8_t *)(t->g + offset) + 2 * count)
                              : (void *)(t->g + offset);
}

int update_grad_land(const mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count,
                     const void *payload, uint32_t packing, uint64_t kept, char *err,
                     size_t errlen)
{
    uint32_t elem = msgcheck_wire_elem(j->plan);
    if (t->compact) {
        uint64_t at = mxsparse_rank(t, offset), nk = mxsparse_rank(t, offset + count) - at;
        /* float32 from bfloat16: in the upper half of its place, widened there */
        void *dest = t->g16 ? (void *)(t->g16 + at)
                     : elem == 2 ? (void *)((uint8_t *)(t->g + at) + 2 * nk)
                                 : (void *)(t->g + at);
        int64_t got = sstream_take_kept(packing, count, kept, elem, payload, t->bits, offset, dest,
                                        err, errlen);
        if (got < 0)
            return (int)got;
        if (elem == 2 && !t->g16)
            bf16_unpack(t->g + at, dest, nk);
        return 0;
    }
    void *dest = update_grad_dest(j, t, offset, count);
    if (packing != SSTREAM_DENSE)
        sstream_expand(packing, count, kept, elem, payload, dest);
    else if (payload != dest)
        memcpy(dest, payload, count * elem);
    if (j->plan->wire_bf16 && !t->g16)
        bf16_unpack(t->g + offset, dest, count);
    return 0;
}

/* The tensor ctx (i unused) as the optimizer takes it. */
static void update__tensor_param(void *ctx, size_t i, optim_param *out)
{
    mx_tensor *t = ctx;
    (void)i;
    *out = (optim_param){t->w, t->g, mx_len(t), t->trainable, &t->st, t->w16, t->g16};
}

static void update__param(void *ctx, size_t i, optim_param *out)
{
    update__tensor_param(&((mx_job *)ctx)->t[i], 0, out);
}

/* The update of one part with its reduced gradient, in the thread pool:
 * the optimizer for parameters, assignment for buffers (the replicas'
 * averaged running statistics), a bfloat16 gradient widened and the
 * weights' bfloat16 twin rounded a block at a time (optim_update_range; no
 * clipping here: that is update__step_work's). Touches that part only; the
 * disk tier's tensors are one part, updated through its window. */
static void update__part_work(uv_work_t *req)
{
    mx_part *p = container_of(req, mx_part, req);
    mx_tensor *t = p->t;
    mx_job *j = t->job;
    if (tier_files(j)) {
        tier_update(j, t, 1.0f);
        return;
    }
    optim_param op;
    float *dense;
    mxsparse_before(j, t, p->lo, p->hi, p->step, &dense);
    update__tensor_param(t, 0, &op);
    /* (a compact tensor: its kept elements in the part) */
    uint64_t lo = t->compact ? mxsparse_rank(t, p->lo) : p->lo;
    uint64_t hi = t->compact ? mxsparse_rank(t, p->hi) : p->hi;
    optim_update_range(&j->cfg, &op, lo, hi, (int64_t)p->step);
    mxsparse_after(j, t, p->lo, p->hi, p->step, dense);
}

static void update__next(mx_job *j);
static void update__step_start(mx_job *j);

/* Back on the loop: one more part updated; its tensor may be updated, and
 * with the last tensor of a step that streams early (turned) that step is
 * committed. */
static void update__part_done(uv_work_t *req, int status)
{
    mx_part *p = container_of(req, mx_part, req);
    mx_tensor *t = p->t;
    mx_job *j = t->job;
    p->busy = false;
    j->updating--;
    if (mxjob_pool_back(j))
        return;
    if (status < 0) {
        mxjob_abort(j, "tensor %s: update cancelled: %s", t->name, uv_strerror(status));
        return;
    }
    if (--t->parts_left == 0) {
        t->parts_left = t->nparts;
        if (!tier_files(j)) { /* (the tier's update counts its own step) */
            optim_param op;
            update__tensor_param(t, 0, &op);
            optim_update_finish(&op);
        }
        if (j->turned && p->step == j->turn_step) {
            log_debug("job %s: step %llu: %s updated (%zu left)", j->id,
                      (unsigned long long)p->step, t->name, j->turn_left - 1);
            if (--j->turn_left == 0) {
                j->turned = false;
                update_commit(j, p->step);
            }
        } else {
            j->updated++;
            log_debug("job %s: step %llu: %s updated (%zu of %zu)", j->id,
                      (unsigned long long)j->step, t->name, j->updated, j->nt);
        }
    }
    update__next(j);
    j->ops->update_back(j);
}

/* Starts the updates of parts whose gradient is complete, at most --threads
 * at a time. */
static void update__next(mx_job *j)
{
    unsigned limit = j->mx->opt.threads ? j->mx->opt.threads : 1;
    while (j->ready_head < j->ready_len && j->updating < limit) {
        mx_part *p = j->ready[j->ready_head];
        if (p->t->writes > 0)
            break; /* update_writes_done resumes */
        int rc = uv_queue_work(j->mx->n->loop, &p->req, update__part_work, update__part_done);
        if (rc < 0) {
            mxjob_abort(j, "tensor %s: update cannot start: %s", p->t->name, uv_strerror(rc));
            return;
        }
        j->ready_head++;
        j->updating++;
        j->pool_work++;
    }
    if (j->ready_head == j->ready_len) /* drained: a step's parts fit again */
        j->ready_head = j->ready_len = 0;
}

/* With clipping, every gradient of the step must be in: the global norm
 * scales them all (the step a Pipelined wse-node runs too), in the thread
 * pool. */
static void update__step_work(uv_work_t *req)
{
    mx_job *j = container_of(req, mx_job, step_req);
    if (tier_files(j)) {
        tier_update_step(j);
        return;
    }
    float **dense = calloc(j->nt ? j->nt : 1, sizeof(*dense));
    for (size_t i = 0; dense && i < j->nt; i++)
        mxsparse_before(j, &j->t[i], 0, j->t[i].n, j->step, &dense[i]);
    optim_apply_step(&j->cfg, j->nt, update__param, j, (int64_t)j->step);
    for (size_t i = 0; dense && i < j->nt; i++)
        mxsparse_after(j, &j->t[i], 0, j->t[i].n, j->step, dense[i]);
    free(dense);
}

static void update__step_work_done(uv_work_t *req, int status)
{
    mx_job *j = container_of(req, mx_job, step_req);
    for (size_t i = 0; i < j->nt; i++)
        j->t[i].parts[0].busy = false;
    j->updating--;
    if (mxjob_pool_back(j))
        return;
    if (status < 0) {
        mxjob_abort(j, "the update of step %llu was cancelled: %s", (unsigned long long)j->step,
                    uv_strerror(status));
        return;
    }
    j->updated = j->nt;
    j->ops->update_back(j);
}

void update_commit(mx_job *j, uint64_t step)
{
    Appliance__StepCommitted sc = APPLIANCE__STEP_COMMITTED__INIT;
    sc.job_id = j->id;
    sc.step = step;
    sc.shard = j->shard;
    j->mx->steps++;
    ENVELOPE(env, step_committed, STEP_COMMITTED, &sc);
    node_send_coordinator(j->mx->n, &env);
}

/* A part's gradient is complete: its update is due. */
static void update__part_ready(mx_job *j, mx_part *p)
{
    mx_tensor *t = p->t;
    if (j->ready_len == j->nparts) {
        mxjob_abort(j, "tensor %s: more updates due than parts", t->name);
        return;
    }
    p->have = 0;
    p->busy = true;
    p->step = j->step;
    j->ready[j->ready_len++] = p;
    update__next(j);
}

bool update_grad_in(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count)
{
    t->grad_have += count;
    if (t->updated || t->grad_have > t->n) {
        mxjob_abort(j, "tensor %s: gradient received twice in step %llu", t->name,
                    (unsigned long long)j->step);
        return false;
    }
    bool clip = j->cfg.max_gradient_norm > 0;
    uint64_t end = offset + count;
    for (mx_part *p = update__part_at(t, offset); !clip && p < t->parts + t->nparts && p->lo < end;
         p++) {
        uint64_t a = offset > p->lo ? offset : p->lo, b = end < p->hi ? end : p->hi;
        p->have += b - a;
        if (p->busy || p->have > p->hi - p->lo) {
            mxjob_abort(j, "tensor %s: gradient received twice in step %llu", t->name,
                        (unsigned long long)j->step);
            return false;
        }
        if (p->have == p->hi - p->lo) {
            update__part_ready(j, p);
            if (j->mx->job != j)
                return false;
        }
    }
    if (t->grad_have < t->n)
        return false;
    t->updated = true; /* its gradient is complete */
    j->grads_in++;
    if (!clip)
        return true;
    t->parts[0].busy = true; /* (its one part) */
    if (j->grads_in < j->nt)
        return false;
    update__step_start(j);
    return false;
}

/* Whether a weight chunk of any of j's tensors is still being written. */
static bool update__writing(const mx_job *j)
{
    for (size_t i = 0; i < j->nt; i++)
        if (j->t[i].writes > 0)
            return true;
    return false;
}

/* With clipping, every gradient is in: the step's update, once no weight
 * chunk is being written (update_writes_done resumes it). */
static void update__step_start(mx_job *j)
{
    j->step_due = update__writing(j);
    if (j->step_due)
        return;
    int rc = uv_queue_work(j->mx->n->loop, &j->step_req, update__step_work, update__step_work_done);
    if (rc < 0) {
        mxjob_abort(j, "the update of step %llu cannot start: %s", (unsigned long long)j->step,
                    uv_strerror(rc));
        return;
    }
    j->updating++;
    j->pool_work++;
}

void update_writes_done(mx_job *j)
{
    if (j->released || j->mx->job != j)
        return;
    if (j->step_due)
        update__step_start(j);
    else
        update__next(j);
}
