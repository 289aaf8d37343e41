/* memoryx: the handlers of its messages and of its modules' news, the
 * shard's table (its tensors made from the plan, initialised or loaded),
 * and the order of a job's steps. The stream is pump.c's, the update
 * update.c's, checkpoints checkpoint.c's, the disk tier tier.c's and
 * tierio.c's: this file calls them, they answer through mx_job_ops. */
#include "mx.h"

#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "checkpoint.h"
#include "footprint.h"
#include "init.h"
#include "log.h"
#include "msg.h"
#include "msgcheck.h"
#include "sstream.h"
#include "mxjob.h"
#include "mxsparse.h"
#include "optim_plan.h"
#include "plan.h"
#include "pump.h"
#include "tier.h"
#include "tierio.h"
#include "units.h"
#include "update.h"

#include <sys/statvfs.h>

static memoryx *mx_of(node *n) { return n->data; }

/* ---- weights ---- */

/* Initial weights [a, b) of t from the job seed (ctx, the plan), into out
 * (an mxsparse_fill_fn): a pure function of (seed, tensor id, element), so
 * the sharding does not change them (init.c). The plan's initializer was
 * checked when the job started. */
static void mx__fill(void *ctx, mx_tensor *t, uint64_t a, uint64_t b, float *out)
{
    const Appliance__Plan *p = ctx;
    const Appliance__PlanTensor *pt = p->tensors[t->id];
    model_init in;
    if (model_init_from_plan(pt, &in) == 0)
        model_init_fill(&in, pt->fan_in, pt->fan_out, p->seed, 0x1000 + pt->id, a, b, out);
}

/* The weights of t from the seed; in the disk tier a piece at a time. */
static void mx__init_tensor(mx_job *j, mx_tensor *t, const Appliance__Plan *p)
{
    uint64_t piece = tier_files(j) ? j->tier->piece : t->n;
    for (uint64_t a = 0; a < t->n; a += piece) {
        uint64_t b = a + piece < t->n ? a + piece : t->n;
        mx__fill((void *)p, t, a, b, t->w + a);
        if (tier_files(j))
            tier_done_with(j->tier, TIER_WEIGHTS, t->w + a, (b - a) * sizeof(float));
    }
}

/* ---- the step: what follows each module's news ----
 *
 * The order of the steps is a cycle, and it stays in this file: the end of
 * a step's stream (mx__pump) makes the step done (mx__step_done), which
 * starts the next (mx__start_step), whose stream is pumped. The modules it
 * drives call none of this: what they have to say comes back through the
 * job's mx_job_ops (mx__job_ops, below). */

static void mx__start_step(node *n, mx_job *j);
static void mx__maybe_turn(node *n, mx_job *j);
static void mx__upload_drain(node *n, mx_job *j);

/* Commits the step, then its checkpoint or the next step follows. */
static void mx__step_done(node *n, mx_job *j)
{
    update_commit(j, j->step);
    if (plan_checkpoint_after(j->plan, j->step)) {
        ckpt_after(j, j->step);
        return;
    }
    j->step++;
    mx__start_step(n, j);
}

/* Sends what the link takes of the step's stream (pump_send); at its end,
 * the step may be done, or the next may start streaming. */
static void mx__pump(node *n, mx_job *j)
{
    if (!pump_send(j))
        return;
    /* the stream of a training step is over and every tensor is updated
     * (the last update came back, or a shard without tensors): the step is
     * done, once: not again while its checkpoint is written or after the
     * last step */
    if (j->state == MX_RUNNING && j->ckpt_kind == MX_CKPT_NONE && j->cur.done &&
        j->cur.training && j->updated == j->nt && !j->turned)
        mx__step_done(n, j);
    else
        mx__maybe_turn(n, j);
}

/* Elements [offset, offset + count) of t's reduced gradient are in its
 * buffer (update_grad_in); with t's last, the next step may stream. */
static void mx__grad_in(node *n, mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count)
{
    if (update_grad_in(j, t, offset, count))
        mx__maybe_turn(n, j);
}

static void mx__start_step(node *n, mx_job *j)
{
    pump_start(j);
    update_start(j);
    mx__pump(n, j);
    /* the gradients of this step that came early, then the link again
     * (Pipelined: no gradients come, held chunks are uploads) */
    while (!j->pipelined && j->held && j->held->step == j->step && mx_of(n)->job == j) {
        mx_held *h = j->held;
        j->held = h->next;
        if (!j->held)
            j->held_tail = &j->held;
        if (tier_files(j)) {
            tierio_grad_wire(j, h->tensor, h->offset, h->count, h->data, h);
            continue;
        }
        char why[256];
        if (update_grad_land(j, h->tensor, h->offset, h->count, h->data, h->packing, h->kept, why,
                             sizeof(why)) < 0) {
            mxjob_abort(j, "bad gradient chunk of %s [%llu, +%llu) from %s: %s", h->tensor->name,
                        (unsigned long long)h->offset, (unsigned long long)h->count,
                        mxjob_down_name(j), why);
            free(h);
            return;
        }
        mx__grad_in(n, j, h->tensor, h->offset, h->count);
        free(h);
    }
    if (mx_of(n)->job == j && j->down && !j->held &&
        (!j->tier || j->tier->g_bytes < j->tier->g_limit))
        conn_resume(j->down);
}

/* After an update came back: the step is done when every tensor is updated
 * and its stream is over (once: not while its checkpoint is written; the
 * pump may have found it done already and started the next). */
static void mx__maybe_step_done(node *n, mx_job *j)
{
    if (mx_of(n)->job == j && j->state == MX_RUNNING && j->ckpt_kind == MX_CKPT_NONE &&
        j->updated == j->nt && !j->turned && !pump_streaming(j))
        mx__step_done(n, j);
}

/* Every tensor's gradient of the step is in, its stream is over and no
 * checkpoint follows it, but updates still run: the next step's stream
 * starts now, its chunks waiting for their parts' updates (pump_send), so
 * the first layer's first parts go while its last ones update; the step is
 * committed when its last update is back (update.c). Not with clipping or
 * the disk tier (one piece of work a step, or a tensor: update_whole), nor
 * before a checkpoint, which must see every update done. */
static void mx__maybe_turn(node *n, mx_job *j)
{
    if (mx_of(n)->job != j || j->state != MX_RUNNING || j->ckpt_kind != MX_CKPT_NONE ||
        j->turned || !j->cur.done || !j->cur.training || j->grads_in < j->nt ||
        j->updated == j->nt || update_whole(j) ||
        plan_checkpoint_after(j->plan, j->step))
        return;
    j->turned = true;
    mx_of(n)->early_streams++;
    j->turn_step = j->step;
    j->turn_left = j->nt - j->updated;
    log_debug("job %s: step %llu streams while %zu tensor(s) of step %llu update", j->id,
              (unsigned long long)j->step + 1, j->turn_left, (unsigned long long)j->step);
    j->step++;
    mx__start_step(n, j);
}

/* mx_job_ops.update_back: the stream may go on with the updated parts'
 * weights, and the step may be done. */
static void mx__update_back(mx_job *j)
{
    mx__pump(j->mx->n, j);
    mx__maybe_step_done(j->mx->n, j);
}

/* mx_job_ops.chunk_read: the read-ahead chunk may be sent. */
static void mx__chunk_read(mx_job *j)
{
    mx__pump(j->mx->n, j);
}

/* mx_job_ops.grad_written: the disk tier has the gradient chunk. */
static void mx__grad_written(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count)
{
    mx__grad_in(j->mx->n, j, t, offset, count);
}

/* mx_job_ops.checkpoint_written: what the checkpoint was for. */
static void mx__checkpoint_written(mx_job *j, mx_ckpt_kind kind, uint64_t step)
{
    node *n = j->mx->n;
    switch (kind) {
    case MX_CKPT_INITIAL:
        log_info("job %s: streaming from step %llu", j->id, (unsigned long long)j->step);
        mx__start_step(n, j);
        break;
    case MX_CKPT_STEP:
        if (j->pipelined) { /* the next upload may come */
            mx__upload_drain(n, j);
            break;
        }
        j->step++;
        mx__start_step(n, j);
        break;
    case MX_CKPT_FINAL: {
        Appliance__JobFinished f = APPLIANCE__JOB_FINISHED__INIT;
        f.job_id = j->id;
        f.shard = j->shard;
        f.checkpoint = j->ckpt_path;
        ENVELOPE(fe, job_finished, JOB_FINISHED, &f);
        node_send_coordinator(n, &fe);
        j->state = MX_FINISHED;
        if (plan_eval_at(j->plan, step)) { /* the final evaluation's weights */
            j->step = step;
            mx__start_step(n, j);
        }
        break;
    }
    case MX_CKPT_NONE:
        break;
    }
}

static const mx_job_ops mx__job_ops = {mx__update_back, mx__chunk_read, mx__grad_written,
                                       mx__checkpoint_written};

/* ---- handlers ---- */

/* A job start that cannot go on: what was built is freed, the plan is the
 * jobhost's to free. Returns NULL for mx__start. */
static void *mx__start_failed(mx_job *j, char *why, size_t whylen, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

static void *mx__start_failed(mx_job *j, char *why, size_t whylen, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(why, whylen, fmt, ap);
    va_end(ap);
    j->plan = NULL;
    mxjob_free(j);
    return NULL;
}

static void mx__maybe_ready(node *n, mx_job *j);
static uint64_t mx__memory(node *n);
static uint64_t mx__disk(node *n);

/* In the thread pool: the shard's tensors allocated and initialised from
 * the seed, or loaded from the checkpoint the job resumes from. Touches
 * the job's own tensors only. */
static void mx__load_work(uv_work_t *req)
{
    mx_job *j = container_of(req, mx_job, load_req);
    const Appliance__Plan *p = j->plan;
    bool resume = p->n_resume_weights > 0;
    j->load_rc = 0;
    if (j->tier_window) {
        const char *dir = j->mx->opt.state_dir;
        tier_clean(dir);
        j->load_rc = tier_open(j, dir, j->tier_window, j->mx->opt.threads, j->load_err,
                               sizeof(j->load_err));
        if (j->load_rc < 0)
            return;
    }
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        if (!tier_files(j) && t->compact) {
            /* made a piece at a time, its kept elements kept
             * (mxsparse_compact_made; resumed: as the checkpoint is read,
             * ckpt_load) */
            if (!resume && (j->load_rc = mxsparse_compact_made(j, t, mx__fill, (void *)p,
                                                               j->load_err,
                                                               sizeof(j->load_err))) < 0)
                return;
            continue;
        } else if (!tier_files(j)) {
            t->w = malloc(t->n * sizeof(float));
            /* Pipelined: no gradient comes to memoryx */
            if (j->grad16 && t->trainable)
                t->g16 = malloc(t->n * sizeof(uint16_t));
            else if (!j->pipelined)
                t->g = malloc(t->n * sizeof(float));
            bool st_ok = !t->trainable || optim_state_init(&t->st, &j->cfg, t->n) == 0;
            if (!t->w || (!t->g && !t->g16 && !j->pipelined) || !st_ok) {
                snprintf(j->load_err, sizeof(j->load_err),
                         "out of memory for tensor %s (%llu elements)", t->name,
                         (unsigned long long)t->n);
                j->load_rc = -ENOMEM;
                return;
            }
            /* its pages now, here: the first step's gradients land in
             * them on the event loop, which would otherwise stop at
             * every first touch (4 GB of them for a billion parameters) */
            if (t->g)
                memset(t->g, 0, t->n * sizeof(float));
            if (t->g16)
                memset(t->g16, 0, t->n * sizeof(uint16_t));
        }
        if (!resume) /* a resumed job's tensors all come from the checkpoint */
            mx__init_tensor(j, t, p);
    }
    if (!j->tier && !j->twins && p->wire_bf16 && tier_ahead(j, 32u << 20) < 0) {
        snprintf(j->load_err, sizeof(j->load_err), "out of memory");
        j->load_rc = -ENOMEM;
        return;
    }
    ckpt_clean_partial(j);
    if ((j->load_rc = mxsparse_alloc(j, j->load_err, sizeof(j->load_err))) < 0)
        return;
    if (p->n_resume_weights > 0) {
        char err[480];
        if (ckpt_load(j, err, sizeof(err)) < 0) {
            snprintf(j->load_err, sizeof(j->load_err), "cannot resume: %s", err);
            j->load_rc = -EIO;
            return;
        }
    }
    if ((j->load_rc = mxsparse_init(j, j->load_err, sizeof(j->load_err))) < 0)
        return;
    for (size_t i = 0; j->twins && i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        t->w16 = malloc(mx_len(t) * sizeof(uint16_t));
        if (!t->w16) {
            snprintf(j->load_err, sizeof(j->load_err),
                     "out of memory for the bfloat16 weights of %s (%llu elements)", t->name,
                     (unsigned long long)t->n);
            j->load_rc = -ENOMEM;
            return;
        }
        bf16_pack(t->w16, t->w, mx_len(t));
    }
}

/* Back on the loop: the job can take its swarmx link and report ready. */
static void mx__load_done(uv_work_t *req, int status)
{
    mx_job *j = container_of(req, mx_job, load_req);
    if (mxjob_pool_back(j))
        return;
    node *n = j->mx->n;
    if (status < 0 || j->load_rc < 0) {
        j->state = MX_STARTED; /* the release frees it now */
        jobhost_fail(&j->mx->jobs, "%s", status < 0 ? uv_strerror(status) : j->load_err);
        return;
    }
    if (j->plan->n_resume_weights > 0)
        log_info("job %s: resumed from the checkpoint of step %llu", j->id, (unsigned long long)j->step);
    uint64_t kept = 0, all = 0;
    size_t compact = 0;
    for (size_t i = 0; i < j->nt; i++)
        if (j->t[i].compact) {
            compact++;
            kept += j->t[i].nk;
            all += j->t[i].n;
        }
    if (compact)
        log_info("job %s: %zu sparse tensor(s) held compact: their %llu kept elements of %llu "
                 "(%.3f), with a bit an element of mask", j->id, compact, (unsigned long long)kept,
                 (unsigned long long)all, (double)kept / (double)(all ? all : 1));
    if (tier_files(j)) {
        char b1[32], b2[32];
        log_info("job %s: shard %u is in the disk tier: %s in %s, through a window of %s of RAM",
                 j->id, j->shard, units_format_size(j->tier->len[0] + j->tier->len[1] +
                                                    j->tier->len[2], b1, sizeof(b1)),
                 j->mx->opt.state_dir, units_format_size(j->tier->window, b2, sizeof(b2)));
    }
    log_info("job %s: shard %u holds %zu tensors (%llu bytes with optimizer state%s%s), made "
             "in %.1f s", j->id, j->shard, j->nt, (unsigned long long)j->load_bytes,
             j->grad16 ? ", the gradients in bfloat16" : "",
             j->twins ? " and the weights in bfloat16 for the wire" : "",
             (double)(uv_hrtime() - j->work_start) * 1e-9);
    j->state = MX_STARTED;
    node_replay(n);
    mx__maybe_ready(n, j);
}

/* Starts a job (jobhost_ops.start): the shard's tensors initialised from
 * the seed or loaded from the checkpoint the job resumes from, in the
 * thread pool (mx__load_work); the loop goes on meanwhile. */
static void *mx__start(jobhost *h, Appliance__Plan *p, char *why, size_t whylen)
{
    node *n = h->n;
    memoryx *mx = mx_of(n);
    mx_job *j = calloc(1, sizeof(*j));
    if (!j) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    snprintf(j->id, sizeof(j->id), "%s", p->job_id);
    j->plan = p;
    bool found = false;
    for (size_t i = 0; i < p->n_shards; i++)
        if (p->shards[i]->member_id == n->member_id) {
            j->shard = p->shards[i]->index;
            found = true;
        }
    if (!found)
        return mx__start_failed(j, why, whylen, "plan has no shard for member %u", n->member_id);
    optim_state probe;
    if (optim_from_plan(p->optimizer, &j->cfg) < 0 || optim_state_init(&probe, &j->cfg, 1) < 0)
        return mx__start_failed(j, why, whylen, "bad optimizer in the plan: %s",
                                p->optimizer ? p->optimizer->type : "none");
    j->states = optim_state_count(&probe);
    optim_state_deinit(&probe);
    j->nids = p->n_tensors;
    j->by_id = calloc(j->nids ? j->nids : 1, sizeof(*j->by_id));
    j->t = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(*j->t));
    j->held_tail = &j->held;
    if (!j->by_id || !j->t)
        return mx__start_failed(j, why, whylen, "out of memory");
    uint64_t bytes = 0;
    j->pipelined = p->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    j->up_step = UINT64_MAX;
    for (size_t i = 0; i < p->n_tensors; i++) {
        const Appliance__PlanTensor *pt = p->tensors[i];
        if (pt->id != i)
            return mx__start_failed(j, why, whylen, "plan tensor %zu has id %u", i, pt->id);
        if (pt->shard != j->shard)
            continue;
        model_init in;
        if (model_init_from_plan(pt, &in) < 0)
            return mx__start_failed(j, why, whylen, "plan tensor %s: unknown initializer \"%s\"",
                                    pt->name, pt->initializer ? pt->initializer->name : pt->init);
        mx_tensor *t = &j->t[j->nt++];
        t->job = j;
        t->mx = mx;
        t->loop = n->loop;
        t->id = pt->id;
        snprintf(t->name, sizeof(t->name), "%s", pt->name);
        t->n = 1;
        for (size_t d = 0; d < pt->n_dims; d++)
            t->n *= pt->dims[d];
        t->trainable = pt->trainable;
        j->by_id[t->id] = t;
        bytes += footprint_shard_tensor_bytes(t->n, t->trainable, (unsigned)j->states,
                                              !j->pipelined);
        if (j->pipelined) /* no gradient comes; the upload brings weights and state */
            j->up_need += t->n * (1 + (t->trainable ? j->states : 0));
    }
    char sp_why[256];
    if (mxsparse_setup(j, &bytes, sp_why, sizeof(sp_why)) < 0)
        return mx__start_failed(j, why, whylen, "%s", sp_why);
    /* bfloat16 on the wire in Weight Streaming: a trainable tensor's
     * gradient stays in bfloat16 as it comes (g16), widened a block at a
     * time by its update: half the memory of a float32 one and no pass
     * widening it; not where the step clips the gradients' global norm
     * (which reads them all first), nor in the disk tier */
    bool g16 = p->wire_bf16 && !j->pipelined && !(j->cfg.max_gradient_norm > 0);
    uint64_t g_saved = 0;
    for (size_t i = 0; g16 && i < j->nt; i++)
        if (j->t[i].trainable)
            g_saved += mx_len(&j->t[i]) * (sizeof(float) - sizeof(uint16_t));
    uint64_t have = mx__memory(n);
    if (bytes - g_saved > have) {
        /* more than memory holds: the disk tier, through a window of it */
        char b1[32], b2[32], b3[32], b4[32];
        uint64_t disk = mx__disk(n), need = tier_disk_bytes(j);
        if (!mx->opt.state_dir[0] || mx->opt.no_disk_tier)
            return mx__start_failed(j, why, whylen, "shard %u needs %s, this memoryx has %s of "
                                    "memory and no disk tier (--state-dir, --no-disk-tier)",
                                    j->shard, units_format_size(bytes, b1, sizeof(b1)),
                                    units_format_size(have, b2, sizeof(b2)));
        if (need > disk)
            return mx__start_failed(j, why, whylen, "shard %u needs %s, more than this memoryx's "
                                    "%s of memory, and its disk tier %s, more than the %s free in "
                                    "%s", j->shard, units_format_size(bytes, b1, sizeof(b1)),
                                    units_format_size(have, b2, sizeof(b2)),
                                    units_format_size(need, b3, sizeof(b3)),
                                    units_format_size(disk, b4, sizeof(b4)), mx->opt.state_dir);
        j->tier_window = have;
    } else {
        j->grad16 = g16;
        bytes -= g_saved;
    }
    if (j->pipelined && j->tier_window) {
        char b1[32], b2[32];
        return mx__start_failed(j, why, whylen, "shard %u of a Pipelined job needs %s in memory "
                                "(memoryx takes the replicas' weights and optimizer state at "
                                "checkpoints), this memoryx has %s; run more memoryx shards or "
                                "mode = \"weight_streaming\"", j->shard,
                                units_format_size(bytes, b1, sizeof(b1)),
                                units_format_size(have, b2, sizeof(b2)));
    }
    /* bfloat16 on the wire, in memory: the weights rounded as they are
     * updated, while in cache, and streamed from there (no pass rounding
     * them again for every step's stream), where memory has room for them */
    uint64_t twin_bytes = 0;
    for (size_t i = 0; i < j->nt; i++)
        twin_bytes += mx_len(&j->t[i]) * sizeof(uint16_t);
    if (p->wire_bf16 && !j->tier_window && bytes + twin_bytes <= have) {
        j->twins = true;
        bytes += twin_bytes;
    }
    if (mxsparse_mode_check(j, sp_why, sizeof(sp_why)) < 0)
        return mx__start_failed(j, why, whylen, "%s", sp_why);
    if (update_parts(j) < 0)
        return mx__start_failed(j, why, whylen, "out of memory");
    j->load_bytes = bytes;
    j->step = p->first_step;
    j->mx = mx;
    j->ops = &mx__job_ops;
    j->state = MX_LOADING;
    j->work_start = uv_hrtime();
    if (uv_queue_work(n->loop, &j->load_req, mx__load_work, mx__load_done) < 0)
        return mx__start_failed(j, why, whylen, "cannot start loading the shard");
    j->pool_work = 1;
    mx->job = j;
    node_replay(n);
    return j;
}

static void mx__maybe_ready(node *n, mx_job *j)
{
    if (j->state != MX_STARTED || !j->down)
        return;
    j->state = MX_READY;
    Appliance__JobReady r = APPLIANCE__JOB_READY__INIT;
    r.job_id = j->id;
    r.member_id = n->member_id;
    ENVELOPE(env, job_ready, JOB_READY, &r);
    node_send_coordinator(n, &env);
}

static void mx__stream_hello(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    mx_job *j = mx_of(n)->job;
    Appliance__StreamHello *h = env->stream_hello;
    char why[256];
    if (msgcheck_stream_hello(h, APPLIANCE__ROLE__ROLE_UNKNOWN, NULL, NULL, 0) < 0) {
        conn_fail(c, -EPROTO, "a %s may not stream from memoryx", msg_role_name(h->role));
        return;
    }
    if (!j || strcmp(h->job_id, j->id) != 0) {
        if (node_defer(n, c, env) < 0)
            conn_fail(c, -ENOENT, "no job %s on this memoryx", h->job_id);
        return;
    }
    /* the root of the tree, or the one replica of a plan without one */
    Appliance__Role want = j->plan->n_swarm ? APPLIANCE__ROLE__ROLE_SWARMX : APPLIANCE__ROLE__ROLE_WSE_NODE;
    if (msgcheck_stream_hello(h, want, j->plan, why, sizeof(why)) < 0) {
        conn_fail(c, -EPROTO, "job %s streams to %s: %s", j->id,
                  want == APPLIANCE__ROLE__ROLE_SWARMX ? "the swarmx root" : "its replica", why);
        return;
    }
    if (want == APPLIANCE__ROLE__ROLE_SWARMX && j->plan->swarm[h->index]->parent >= 0) {
        conn_fail(c, -EPROTO, "job %s streams to the swarmx root, not to tree node %u", j->id,
                  h->index);
        return;
    }
    if (j->down && j->down != c) {
        conn_fail(c, -EEXIST, "job %s already has its stream link", j->id);
        return;
    }
    j->down = c;
    c->kind = 1;
    log_info("job %s: %s %s connected from %s", j->id, msg_role_name(h->role), c->peer_name,
             c->peer_addr);
    mx__maybe_ready(n, j);
}

static void mx__job_go(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    mx_job *j = mx_of(n)->job;
    if (!j || strcmp(env->job_go->job_id, j->id) != 0 || j->state >= MX_RUNNING)
        return;
    j->state = MX_RUNNING;
    if (j->plan->save_initial_checkpoint) {
        ckpt_start(j, j->step, MX_CKPT_INITIAL);
        return;
    }
    log_info("job %s: streaming from step %llu", j->id, (unsigned long long)j->step);
    mx__start_step(n, j);
}

/* Pipelined: where a chunk of the first replica's upload lands (the
 * weights or an optimizer state of one of our tensors, in order), or NULL
 * with *err and why. */
static void *mx__upload_dest(mx_job *j, const Appliance__WeightChunk *w, uint32_t len, int *err,
                             char *why, size_t whylen)
{
    *err = -EINVAL;
    if (msgcheck_weight_chunk(w, j->plan, len, why, whylen) < 0)
        return NULL;
    mx_tensor *t = j->by_id[w->tensor_id];
    size_t states = t && t->trainable ? optim_state_count(&t->st) : 0;
    if (!t || w->state > states) {
        snprintf(why, whylen, "upload of tensor %u state %u: not one of shard %u's", w->tensor_id,
                 w->state, j->shard);
        return NULL;
    }
    if (j->up_step == UINT64_MAX) {
        if (w->step < j->plan->first_step || w->step >= j->plan->max_steps ||
            !plan_checkpoint_after(j->plan, w->step)) {
            snprintf(why, whylen, "upload after step %llu: no checkpoint follows it",
                     (unsigned long long)w->step);
            return NULL;
        }
        j->up_step = w->step;
        j->up_have = 0;
        for (size_t i = 0; i < j->nt; i++)
            memset(j->t[i].up_off, 0, sizeof(j->t[i].up_off));
    } else if (w->step != j->up_step) {
        snprintf(why, whylen, "upload after step %llu while the one after step %llu is not complete",
                 (unsigned long long)w->step, (unsigned long long)j->up_step);
        return NULL;
    }
    if (w->offset != t->up_off[w->state]) {
        snprintf(why, whylen, "upload of %s state %u at %llu, expected %llu", t->name, w->state,
                 (unsigned long long)w->offset, (unsigned long long)t->up_off[w->state]);
        return NULL;
    }
    if (t->writes > 0) { /* cannot happen: the first step needed every weight written */
        snprintf(why, whylen, "upload of %s while its weights are still being sent", t->name);
        return NULL;
    }
    *err = 0;
    if (w->state == 0)
        return t->w + w->offset;
    const char *name;
    size_t count;
    return optim_state_tensor(&t->st, w->state - 1, &name, &count) + w->offset;
}

/* Gradient chunks land straight in the tensor's gradient buffer; a
 * Pipelined job's uploads in its weights and optimizer state. */
static void *mx__payload_dest(node *n, conn *c, const Appliance__Envelope *env, uint32_t len, int *err)
{
    mx_job *j = mx_of(n)->job;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK && j && c == j->down &&
        j->pipelined && env->weight_chunk->pass == APPLIANCE__PASS__PASS_CHECKPOINT &&
        j->state == MX_RUNNING) {
        char why[256];
        j->up_dest = NULL;
        if (j->ckpt_kind != MX_CKPT_NONE || j->held) {
            /* the last upload's checkpoint is being written: this chunk
             * waits in the reader's buffer (mx__upload_chunk holds it) and
             * the link stops until the checkpoint is written */
            conn_pause(c);
            *err = 0;
            return NULL;
        }
        void *dest = mx__upload_dest(j, env->weight_chunk, len, err, why, sizeof(why));
        if (!dest)
            log_warn("job %s: from %s: %s", j->id, c->peer_addr, why);
        j->up_dest = dest;
        return dest;
    }
    if (env->msg_case != APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK || !j || c != j->down || j->pipelined) {
        *err = -EPROTO;
        return NULL;
    }
    const Appliance__GradChunk *g = env->grad_chunk;
    mx_tensor *t = g->tensor_id < j->nids ? j->by_id[g->tensor_id] : NULL;
    if (!t || msgcheck_grad_chunk(g, j->plan, len, NULL, 0) < 0) {
        *err = -EINVAL;
        return NULL;
    }
    if (g->step > j->step && (j->grads_in == j->nt || c->paused)) {
        /* Pipelined replicas run ahead: the next step's gradients come while
         * this step's last updates still read the buffers. They wait in a
         * buffer of the reader's (mx__grad_chunk holds them) and the link
         * stops until the steps they belong to start. */
        conn_pause(c);
        return NULL;
    }
    if (g->step != j->step) {
        *err = -EINVAL;
        return NULL;
    }
    if (tier_files(j)) { /* into a buffer, written to the gradients file in the thread pool */
        free(j->tier->gbuf);
        if (!(j->tier->gbuf = malloc(len ? len : 1)))
            *err = -ENOMEM;
        return j->tier->gbuf;
    }
    if ((uint32_t)g->packing != SSTREAM_DENSE || t->compact) { /* in a buffer, expanded once in */
        if (!j->gpack && !(j->gpack = malloc(j->plan->chunk_elems * sizeof(float))))
            *err = -ENOMEM;
        return j->gpack; /* (msgcheck: under count elements' bytes, a chunk's at most) */
    }
    return update_grad_dest(j, t, g->offset, g->count);
}


/* Pipelined: count elements of t's weights (state 0) or optimizer state
 * are in; when the upload is whole, its checkpoint is written and the link
 * waits meanwhile (the next upload would land in what is written). */
static void mx__upload_in(node *n, mx_job *j, mx_tensor *t, uint32_t state, uint64_t count)
{
    t->up_off[state] += count;
    j->up_have += count;
    if (j->up_have < j->up_need)
        return;
    uint64_t step = j->up_step;
    j->up_step = UINT64_MAX;
    for (size_t i = 0; i < j->nt; i++)
        if (j->t[i].trainable) /* one update a step, as the replica counts them */
            optim_state_set_step(&j->t[i].st, (int64_t)step + 1);
    log_debug("job %s: the weights after step %llu are in", j->id, (unsigned long long)step);
    if (j->down)
        conn_pause(j->down);
    j->step = step;
    ckpt_after(j, step);
}

/* Pipelined: a chunk of the first replica's upload, in place
 * (mx__payload_dest), or held in the reader's buffer while the last
 * upload's checkpoint is written. */
static void mx__upload_chunk(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    mx_job *j = mx_of(n)->job;
    const Appliance__WeightChunk *w = env->weight_chunk;
    if (!j || c != j->down || !j->pipelined || j->state != MX_RUNNING || !pl ||
        w->pass != APPLIANCE__PASS__PASS_CHECKPOINT || w->tensor_id >= j->nids ||
        !j->by_id[w->tensor_id]) {
        conn_fail(c, -EPROTO, "unexpected weight chunk");
        return;
    }
    mx_tensor *t = j->by_id[w->tensor_id];
    bool in_place = pl == j->up_dest;
    j->up_dest = NULL;
    if (in_place) {
        mx__upload_in(n, j, t, w->state, w->count);
        return;
    }
    /* in the reader's buffer: its frame began while a checkpoint was
     * written (which may be over by now); it lands in order after the
     * ones held before it, checked then (mx__upload_drain) */
    if (w->count > UINT32_MAX / sizeof(float) || len != w->count * sizeof(float)) {
        conn_fail(c, -EPROTO, "weight chunk of %llu elements in %u bytes",
                  (unsigned long long)w->count, len);
        return;
    }
    log_debug("job %s: an upload chunk after step %llu waits for the checkpoint of step %llu",
              j->id, (unsigned long long)w->step, (unsigned long long)j->ckpt_step);
    mx_held *h = malloc(sizeof(*h) + len);
    if (!h) {
        mxjob_abort(j, "out of memory for an upload chunk after step %llu",
                    (unsigned long long)w->step);
        return;
    }
    *h = (mx_held){.step = w->step, .tensor = t, .offset = w->offset, .count = w->count,
                   .state = w->state};
    memcpy(h->data, pl, len);
    *j->held_tail = h;
    j->held_tail = &h->next;
    if (j->ckpt_kind == MX_CKPT_NONE)
        mx__upload_drain(n, j);
}

/* Pipelined, once a checkpoint is written: the upload chunks held
 * meanwhile, in order, until one completes an upload again. */
static void mx__upload_drain(node *n, mx_job *j)
{
    while (j->held && j->ckpt_kind == MX_CKPT_NONE && mx_of(n)->job == j) {
        mx_held *h = j->held;
        j->held = h->next;
        if (!j->held)
            j->held_tail = &j->held;
        Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
        w.step = h->step;
        w.tensor_id = h->tensor->id;
        w.offset = h->offset;
        w.count = h->count;
        w.total = h->tensor->n;
        w.state = h->state;
        w.pass = APPLIANCE__PASS__PASS_CHECKPOINT;
        char why[256];
        int err;
        float *dest = mx__upload_dest(j, &w, (uint32_t)(h->count * sizeof(float)), &err, why,
                                      sizeof(why));
        if (!dest) {
            free(h);
            mxjob_abort(j, "upload from the first replica: %s", why);
            return;
        }
        memcpy(dest, h->data, h->count * sizeof(float));
        mx_tensor *t = h->tensor;
        uint32_t state = h->state;
        uint64_t count = h->count;
        free(h);
        mx__upload_in(n, j, t, state, count);
    }
    if (mx_of(n)->job == j && !j->held && j->ckpt_kind == MX_CKPT_NONE && j->down)
        conn_resume(j->down);
}

static void mx__grad_chunk(node *n, conn *c, Appliance__Envelope *env, uint8_t *pl, uint32_t len)
{
    mx_job *j = mx_of(n)->job;
    const Appliance__GradChunk *g = env->grad_chunk;
    if (!j || c != j->down || len == 0) {
        conn_fail(c, -EPROTO, "unexpected gradient chunk");
        return;
    }
    mx_tensor *t = j->by_id[g->tensor_id];
    char why[400];
    if (msgcheck_grad_payload(g, j->plan, pl, len, why, sizeof(why)) < 0) {
        mxjob_abort(j, "bad gradient chunk from %s: %s", c->peer_addr, why);
        return;
    }
    mx_of(n)->grad_bytes += len;
    mx_of(n)->grad_dense_bytes += g->count * msgcheck_wire_elem(j->plan);
    if (g->step > j->step) { /* held until its step starts (mx__payload_dest) */
        mx_held *h = malloc(sizeof(*h) + len);
        if (!h) {
            mxjob_abort(j, "out of memory for a gradient chunk of step %llu",
                        (unsigned long long)g->step);
            return;
        }
        h->next = NULL;
        h->step = g->step;
        h->tensor = t;
        h->offset = g->offset;
        h->count = g->count;
        h->packing = (uint32_t)g->packing;
        h->kept = g->kept;
        memcpy(h->data, pl, len);
        *j->held_tail = h;
        j->held_tail = &h->next;
        log_debug("job %s: step %llu: holding %s [%llu, +%llu) of step %llu", j->id,
                  (unsigned long long)j->step, t->name, (unsigned long long)g->offset,
                  (unsigned long long)g->count, (unsigned long long)g->step);
        return;
    }
    if (tier_files(j)) {
        void *own = pl == j->tier->gbuf ? pl : malloc(len);
        if (own == j->tier->gbuf)
            j->tier->gbuf = NULL;
        else if (own)
            memcpy(own, pl, len);
        if (!own) {
            mxjob_abort(j, "out of memory for a gradient chunk");
            return;
        }
        tierio_grad_wire(j, t, g->offset, g->count, own, own);
        return;
    }
    /* in place; or a chunk that was to be held, but whose step started
     * while its payload still arrived: in the reader's buffer */
    if (update_grad_land(j, t, g->offset, g->count, pl, (uint32_t)g->packing, g->kept, why,
                         sizeof(why)) < 0) {
        mxjob_abort(j, "bad gradient chunk of %s [%llu, +%llu) from %s: %s", t->name,
                    (unsigned long long)g->offset, (unsigned long long)g->count, c->peer_addr, why);
        return;
    }
    if (t->compact) /* taken here: a copy of the payload (dense: a gather) */
        conn_charge_read(c, len);
    else if ((uint32_t)g->packing != SSTREAM_DENSE) /* expanded here: the loop's work */
        conn_charge_read(c, g->count * msgcheck_wire_elem(j->plan));
    mx__grad_in(n, j, t, g->offset, g->count);
}

/* Lets the job go (jobhost_ops.release). */
static void mx__release(jobhost *h, void *job, jobhost_end end, const char *why)
{
    mx_job *j = job;
    if (end == JOBHOST_RELEASED)
        log_info("job %s: released", j->id);
    else if (end == JOBHOST_COORDINATOR_LOST)
        log_warn("job %s: released: lost the coordinator", j->id);
    mx_of(h->n)->job = NULL;
    if (tier_files(j) && j->tier->read_ns)
        log_info("job %s: disk tier: the weight stream read %.1f GB from %s in %.1f s (%.0f MB/s)",
                 j->id, (double)j->tier->read_bytes * 1e-9, j->tier->path[TIER_WEIGHTS],
                 (double)j->tier->read_ns * 1e-9,
                 (double)j->tier->read_bytes * 1e3 / (double)j->tier->read_ns);
    if (j->pool_work > 0) /* the thread pool still has some of it */
        j->released = true;
    else
        mxjob_free_later(j);
}

static void mx__drain(node *n, conn *c)
{
    mx_job *j = mx_of(n)->job;
    if (j && c == j->down)
        mx__pump(n, j);
}

static void mx__conn_close(node *n, conn *c, int err, const char *reason)
{
    mx_job *j = mx_of(n)->job;
    if (j && c == j->down) {
        j->down = NULL;
        jobhost_peer_lost(&mx_of(n)->jobs, "lost %s %s: %s", mxjob_down_name(j), c->peer_addr, reason);
    }
}

/* The memory memoryx offers the planner and holds shards in: --memory, or
 * else what the host (or its cgroup) has. */
static uint64_t mx__memory(node *n)
{
    uint64_t mem = mx_of(n)->opt.memory;
    if (!mem)
        mem = n->opt.host_memory; /* --host-memory, or what this host (its cgroup) has */
    return mem;
}

/* The room its disk tier has: what the state directory's file system has
 * free (0 without one). */
static uint64_t mx__disk(node *n)
{
    const char *dir = mx_of(n)->opt.state_dir;
    struct statvfs vs;
    if (!dir[0] || mx_of(n)->opt.no_disk_tier || statvfs(dir, &vs) < 0)
        return 0;
    uint64_t free_bytes = (uint64_t)vs.f_bavail * vs.f_frsize;
    return free_bytes < mx_of(n)->opt.disk ? free_bytes : mx_of(n)->opt.disk;
}

static void mx__fill_register(node *n, Appliance__Register *r)
{
    r->memory = mx__memory(n);
    r->disk = mx__disk(n);
}

static void mx__shutdown(node *n)
{
    jobhost_end_job(&mx_of(n)->jobs, JOBHOST_SHUTDOWN, "shutdown");
}

static void mx__describe_wait(node *n, char *out, size_t len)
{
    mx_job *j = mx_of(n)->job;
    if (!j)
        snprintf(out, len, "nothing: no job");
    else if (j->state < MX_RUNNING)
        snprintf(out, len, "the coordinator's go for the first step");
    else if (j->ckpt_kind != MX_CKPT_NONE)
        snprintf(out, len, "the checkpoint of step %llu to be written", (unsigned long long)j->ckpt_step);
    else if (j->turned)
        snprintf(out, len, "the update of step %llu (%zu of %zu tensors left) to stream step %llu",
                 (unsigned long long)j->turn_step, j->turn_left, j->nt, (unsigned long long)j->step);
    else if (pump_streaming(j))
        snprintf(out, len, "the link to %s to take the weights of step %llu (%zu of %zu tensors "
                 "updated)", mxjob_down_name(j), (unsigned long long)j->step, j->updated, j->nt);
    else
        snprintf(out, len, "%s of step %llu from %s: %zu of %zu tensors updated",
                 j->plan->n_swarm ? "the reduced gradients" : "the gradients",
                 (unsigned long long)j->step, mxjob_down_name(j), j->updated, j->nt);
}

/* The coordinator owns the job: without it no step can be committed, and a
 * restarted coordinator recovers the job from its last checkpoint. */
static void mx__coordinator_lost(node *n)
{
    jobhost_end_job(&mx_of(n)->jobs, JOBHOST_COORDINATOR_LOST, "lost the coordinator");
}

static void mx__metrics(node *n, metrics_buf *b)
{
    memoryx *mx = mx_of(n);
    metrics_printf(b, "# HELP appliance_steps_committed_total Steps whose updates this shard applied.\n"
                      "# TYPE appliance_steps_committed_total counter\n"
                      "appliance_steps_committed_total %llu\n", (unsigned long long)mx->steps);
    metrics_printf(b, "# HELP appliance_steps_streamed_early_total Steps whose weight stream "
                      "began before every update of the step before was back.\n"
                      "# TYPE appliance_steps_streamed_early_total counter\n"
                      "appliance_steps_streamed_early_total %llu\n",
                   (unsigned long long)mx->early_streams);
    metrics_printf(b, "# HELP appliance_checkpoints_total Checkpoint files written.\n"
                      "# TYPE appliance_checkpoints_total counter\nappliance_checkpoints_total %llu\n",
                   (unsigned long long)mx->checkpoints);
    metrics_printf(b, "# HELP appliance_checkpoint_failures_total Checkpoints that could not be "
                      "written (each fails its job).\n"
                      "# TYPE appliance_checkpoint_failures_total counter\n"
                      "appliance_checkpoint_failures_total %llu\n",
                   (unsigned long long)mx->checkpoint_failures);
    metrics_printf(b, "# HELP appliance_weight_stream_bytes_total Payload bytes of the weight "
                      "chunks sent down (sparse tensors' packed).\n"
                      "# TYPE appliance_weight_stream_bytes_total counter\n"
                      "appliance_weight_stream_bytes_total %llu\n"
                      "# HELP appliance_weight_stream_dense_bytes_total What those chunks would "
                      "have taken dense.\n"
                      "# TYPE appliance_weight_stream_dense_bytes_total counter\n"
                      "appliance_weight_stream_dense_bytes_total %llu\n"
                      "# HELP appliance_grad_stream_bytes_total Payload bytes of the gradient "
                      "chunks received (sparse tensors' packed).\n"
                      "# TYPE appliance_grad_stream_bytes_total counter\n"
                      "appliance_grad_stream_bytes_total %llu\n"
                      "# HELP appliance_grad_stream_dense_bytes_total What those chunks would "
                      "have taken dense.\n"
                      "# TYPE appliance_grad_stream_dense_bytes_total counter\n"
                      "appliance_grad_stream_dense_bytes_total %llu\n",
                   (unsigned long long)mx->stream_bytes, (unsigned long long)mx->stream_dense_bytes,
                   (unsigned long long)mx->grad_bytes, (unsigned long long)mx->grad_dense_bytes);
    metrics_hist_render(&mx->chunk_hist, b, NULL);
    const mx_tier *tr = mx->job && tier_files(mx->job) ? mx->job->tier : NULL;
    metrics_printf(b, "# HELP appliance_tier_read_bytes_total Weight stream bytes read from the "
                      "disk tier's files (this job).\n"
                      "# TYPE appliance_tier_read_bytes_total counter\n"
                      "appliance_tier_read_bytes_total %llu\n"
                      "# HELP appliance_tier_read_seconds_total Time the reads of the disk tier "
                      "took (this job).\n"
                      "# TYPE appliance_tier_read_seconds_total counter\n"
                      "appliance_tier_read_seconds_total %.6f\n",
                   (unsigned long long)(tr ? tr->read_bytes : 0), tr ? (double)tr->read_ns * 1e-9 : 0.0);
}

static const options_key mx__keys[] = {
    {"memory", "SIZE", OPTIONS_SIZE, offsetof(memoryx_options, memory), 0, 0, 0,
     "memory for weights and optimizer state (default: unlimited)"},
    {"threads", "N", OPTIONS_U32, offsetof(memoryx_options, threads), 0, 1, 10000000,
     "tensors updated at once, in the thread pool (default 1)"},
    {"state-dir", "DIR", OPTIONS_STRING, offsetof(memoryx_options, state_dir),
     sizeof(((memoryx_options *)0)->state_dir), 0, 0,
     "scratch directory; the disk tier's files (a shard larger than --memory)"},
    {"disk", "SIZE", OPTIONS_SIZE, offsetof(memoryx_options, disk), 0, 1, UINT64_MAX,
     "room for the disk tier in --state-dir (default: what its file system has free)"},
    {"no-disk-tier", NULL, OPTIONS_FLAG, offsetof(memoryx_options, no_disk_tier), 0, 0, 0,
     "no disk tier: a shard larger than --memory is refused"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static const jobhost_ops mx__jobhost_ops = {mx__start, mx__release};

void memoryx_role(node_role *role, memoryx *mx, node *n)
{
    memset(role, 0, sizeof(*role));
    role->role = APPLIANCE__ROLE__ROLE_MEMORYX;
    role->component = "memoryx";
    memset(mx, 0, sizeof(*mx));
    mx->n = n;
    mx->opt.threads = 1;
    mx->opt.disk = UINT64_MAX;
    role->options = (options_table){NULL, mx__keys, &mx->opt};
    jobhost_init(&mx->jobs, n, role, &mx__jobhost_ops);
    role->handlers[APPLIANCE__ENVELOPE__MSG_JOB_GO] = mx__job_go;
    role->handlers[APPLIANCE__ENVELOPE__MSG_STREAM_HELLO] = mx__stream_hello;
    role->handlers[APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK] = mx__grad_chunk;
    role->handlers[APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK] = mx__upload_chunk;
    role->payload_dest = mx__payload_dest;
    role->on_drain = mx__drain;
    role->on_conn_close = mx__conn_close;
    role->fill_register = mx__fill_register;
    role->on_shutdown = mx__shutdown;
    role->on_coordinator_lost = mx__coordinator_lost;
    role->describe_wait = mx__describe_wait;
    role->metrics = mx__metrics;
}
