/* wse-node: one replica of a job: its life (start, buffers, links, end) and
 * the handlers of its role. The steps are in step.c, the links in links.c. */
#include "replica.h"
#include "wjob.h"

#include <errno.h>
#include <fcntl.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "jobspec.h"
#include "kernels.h"
#include "log.h"
#include "msgcheck.h"
#include "op_conv2d.h"
#include "op_sparse_dense.h"
#include "msg.h"
#include "model_plan.h"
#include "optim_plan.h"
#include "plan.h"
#include "sample.h"
#include "sparse.h"
#include "units.h"


static int wn__spill_open(wn_job *j, char *err, size_t errlen);
/* ---- job life cycle ---- */

static void wn__job_link_stopped(wn_job *j)
{
    if (--j->links_open == 0 && !j->busy)
        wn__free_buffers(j);
}

static void wn__stripes_link_closed(wn_job *j)
{
    wn__job_link_stopped(j);
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
    if (j->stripes) /* a compute task blocked on the other stripes gives up */
        wn_stripes_abort(j->stripes, -ECANCELED);
    if (was == WN_ALLOCATING) { /* freed when the allocation ends */
        j->links_open = 0;
        if (!j->busy)
            wn__free_buffers(j);
        return;
    }
    j->links_open = 1 + (int)j->nfeeds + 1; /* and one held while the stripes' links close */
    if (j->stripes)
        j->links_open += wn_stripes_stop(j->stripes);
    conn_link_stop(&j->up, wn__up_stopped);
    for (size_t i = 0; i < j->nfeeds; i++)
        conn_link_stop(&j->feeds[i].link, wn__feed_stopped);
    wn__job_link_stopped(j);
}

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

/* A dense layer's path, chosen at its first pass and again when it
 * changes (exec_set_sparsity): logged from the compute thread */
static void wn__path_note(void *ctx, int layer, const char *line)
{
    wn_job *j = ctx;
    log_info("job %s: layer %s: %s", j->id, j->m->layers[layer].name, line);
}

/* The dense layers' sparse paths (exec_set_sparsity): each tensor's level
 * from the plan; a weight's zeros are its pruned positions for the masks
 * that never regrow a weight at zero (static, gmp) */
static int wn__job_sparsity(wn_job *j, char *err, size_t errlen)
{
    Appliance__Plan *p = j->plan;
    float *level = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(float));
    if (!level) {
        snprintf(err, errlen, "out of memory for the tensors' sparsity");
        return -ENOMEM;
    }
    for (size_t i = 0; i < p->n_tensors; i++)
        level[i] = p->tensors[i]->sparsity;
    bool zeros_pruned = p->sparsity && (strcmp(p->sparsity->type, "static") == 0 ||
                                        strcmp(p->sparsity->type, "gmp") == 0);
    if (p->sparsity && !zeros_pruned)
        log_info("job %s: the dense layers stay on the GEMMs: %s masks regrow weights at zero, "
                 "whose gradients the sparse kernels would not make", j->id, p->sparsity->type);
    j->ex.path_note = wn__path_note;
    j->ex.path_ctx = j;
    int rc = exec_set_sparsity(&j->ex, level, zeros_pruned, err, errlen);
    free(level);
    sparse_config masks;
    if (rc == 0 && zeros_pruned && sparse_from_plan(p->sparsity, &masks) == 0)
        exec_set_mask_schedule(&j->ex, &masks); /* counted where masks change, not each step */
    return rc;
}

/* The dense layers whose static mask's weights stream, compute and go
 * back as their kept values alone (exec_set_kept_only): a static mask on
 * packed streams in float32, the layer streamed whole in one batch (no
 * micro-batches, no stripes), where the cost model predicts the sparse
 * kernels faster at the level the plan gives. The others expand their
 * packed chunks as they land. */
static int wn__kept_only(wn_job *j, char *err, size_t errlen)
{
    Appliance__Plan *p = j->plan;
    const model *m = j->m;
    if (!p->sparsity || strcmp(p->sparsity->type, "static") != 0 || p->sparsity->dense_streams ||
        p->wire_bf16 || m->mixed_precision || j->stripes || j->nmicro > 1 || j->pipelined)
        return 0;
    for (int li = 0; li < m->nlayers; li++) {
        const model_layer *l = &m->layers[li];
        if (l->type != LAYER_DENSE || j->ws.parts[li].count != 1)
            continue;
        uint32_t t = (uint32_t)l->first_tensor;
        wn_tensor *wt = &j->t[t];
        float level = p->tensors[t]->sparsity;
        if (!(level > 0.0f) || !msgcheck_grads_pack(p, t) ||
            op_sparse_dense_cost_ratio(sparse_keep_count(wt->n, level), (int)j->batch,
                                       (int)l->in.d[0], (int)l->units) >= 1.0)
            continue;
        if (!(wt->kept_bits = calloc((wt->n + 7) / 8 + 1, 1))) {
            snprintf(err, errlen, "out of memory for the kept bits of %s", l->name);
            return -ENOMEM;
        }
        if (exec_set_kept_only(&j->ex, li, wt->kept_bits, err, errlen) < 0)
            return -EINVAL;
        wt->kept_only = true;
        log_info("job %s: layer %s: its weight streams, computes and goes back as its kept "
                 "values alone (a static mask at %.2f)", j->id, l->name, (double)level);
    }
    return 0;
}

/* Allocates a job's buffers (on the compute thread). */
static int wn__job_buffers(wn_job *j, char *err, size_t errlen)
{
    Appliance__Plan *p = j->plan;
    const model *m = j->m;
    bool oom = false;
    j->t = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(*j->t));
    j->gq = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(*j->gq));
    j->wp = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(float *));
    j->gp = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(float *));
    j->w16p = calloc(p->n_tensors ? p->n_tensors : 1, sizeof(uint16_t *));
    oom |= !j->t || !j->gq || !j->wp || !j->gp || !j->w16p;
    j->pipelined = p->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    if (j->pipelined && optim_from_plan(p->optimizer, &j->cfg) < 0) {
        snprintf(err, errlen, "bad optimizer in the plan");
        return -EINVAL;
    }
    if (!j->pipelined) {
        /* Weight Streaming: weights and gradients pass through two slots
         * each; only the small batch-norm statistics have their own room. */
        int rc = wslots_init(&j->ws, m, p->fwd_stream, p->n_fwd_stream, p->bwd_stream,
                             p->n_bwd_stream, p->bwd_kept, p->ws_part_elems, p->chunk_elems);
        if (rc < 0) {
            snprintf(err, errlen, "%s", rc == -ENOMEM ? "out of memory for the weight slots"
                                           : "the plan's weight schedule does not stream whole layers in order");
            return rc;
        }
        j->ws_ready = true;
        /* the GEMMs of a whole dense layer read its weights in bfloat16
         * from the slot's twin: widening them too would be work nothing
         * reads (a GEMM that falls back widens them itself) */
        j->twin_only = p->wire_bf16 && m->mixed_precision && kernels_bf16_compute();
        if (p->bwd_kept)
            log_info("job %s: the backward pass starts on the %u layer(s) whose weights the "
                     "forward pass left in the slots (%d of %d arrivals a step streamed again)",
                     j->id, p->bwd_kept, j->ws.narrivals - j->ws.nfwd, j->ws.narrivals);
    } else {
        /* Pipelined: every tensor resident, streamed in once. */
        if (wresident_init(&j->res, m) < 0) {
            snprintf(err, errlen, "out of memory for the resident weights");
            return -ENOMEM;
        }
        j->res_ready = true;
    }
    for (size_t i = 0; !oom && i < p->n_tensors; i++) {
        wn_tensor *t = &j->t[i];
        t->n = m->tensors[i].elems;
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
            /* a resumed job streams the optimizer state after the weights */
            uint32_t states = t->trainable && p->n_resume_weights > 0
                                  ? (uint32_t)optim_state_count(&t->st) : 0;
            if (!oom)
                wresident_bind_tensor(&j->res, i, t->w, t->n, t->trainable ? &t->st : NULL, states);
        }
    }
    /* Pipelined in mixed precision: the dense layers' weights are kept
     * rounded, once per update instead of twice per step in the GEMMs */
    uint64_t w16_bytes = 0;
    uint32_t mb = p->micro_batch && p->micro_batch < j->batch ? p->micro_batch : j->batch;
    for (int li = 0; !oom && !j->sim && j->pipelined && kernels_bf16_compute() && li < m->nlayers;
         li++) {
        const model_layer *l = &m->layers[li];
        if (!footprint_keeps_rounded(m, li, (int)mb))
            continue;
        wn_tensor *t = &j->t[l->first_tensor];
        oom |= !(j->w16p[l->first_tensor] = t->w16 = malloc(t->n * sizeof(uint16_t)));
        w16_bytes += t->n * sizeof(uint16_t);
    }
    if (w16_bytes && !oom)
        log_info("job %s: the dense layers' weights are kept rounded to bfloat16 (%llu bytes), "
                 "made again by each update", j->id, (unsigned long long)w16_bytes);
    if (!oom) {
        j->mb = mb;
        j->nmicro = j->mb ? (j->batch + j->mb - 1) / j->mb : 1;
    }
    if (!oom && j->sim) {
        /* simulated compute: no executor, so no activation, workspace
         * or float input is allocated; the weight gradients the passes
         * "make" are zeros; the batches are still checked against the
         * labels a sample has (links.c) */
        j->ex.label_elems = footprint_label_elems(m);
        for (size_t i = 0; i < p->n_tensors; i++)
            if (j->t[i].g)
                memset(j->t[i].g, 0, j->t[i].n * sizeof(float));
        footprint f;
        if (footprint_init_micro(&f, m, (int)j->batch, (int)j->mb,
                                 (int)wn_of(j->n)->opt.threads) == 0) {
            log_info("job %s: simulated compute: the executor's %llu bytes (activations, "
                     "workspace, inputs) are not allocated", j->id, (unsigned long long)f.exec);
            footprint_free(&f);
        }
    } else if (!oom) {
        if (exec_init_micro(&j->ex, m, (int)j->batch, (int)j->mb, (int)wn_of(j->n)->opt.threads,
                            j->wp, j->gp, err, errlen) < 0)
            return -ENOMEM;
        j->ex_ready = true;
        j->ex.w16 = j->w16p;
        j->ex.w16_stale = j->twin_only;
        if (wn__job_sparsity(j, err, errlen) < 0 || wn__kept_only(j, err, errlen) < 0)
            return -ENOMEM;
        log_info("job %s: %s%s; the step's buffers take %llu bytes", j->id,
                 p->keep_outputs   ? "every layer's output is kept for the backward pass"
                 : p->keep_costly ? "the cheap layers' outputs are computed again in the "
                                    "backward pass"
                                  : "the cheap layers' outputs, and the large convolutions' "
                                    "whose absence saves the most, are computed again in the "
                                    "backward pass",
                 p->rows_as_depth ? "; its 2-D layers run as 3-D ones over [C, H, 1, W] (rows "
                                    "as depth)" : "",
                 (unsigned long long)j->ex.arena_bytes);
        if (p->spill_packed && wn__spill_open(j, err, errlen) < 0)
            return -EIO;
        if (j->stripes) {
            exec_parts ep = wn_stripes_exec(j->stripes, p->sync_batchnorm);
            if (exec_set_parts(&j->ex, &ep, err, errlen) < 0)
                return -ENOMEM;
        }
        for (int i = 0; i < m->nlayers; i++) { /* what this processor runs */
            char how[384];
            if (exec_conv_path(&j->ex, i, how, sizeof(how)) >= 0)
                log_info("job %s: layer %s: %s", j->id, m->layers[i].name, how);
        }
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
    j->nbatches = nf * WN_CREDITS(p);
    if (WN_CREDITS(p) == 1)
        log_info("job %s: one batch in flight from each worker (the plan's: the replica fits its "
                 "wafer only so)", j->id);
    j->batches = calloc(j->nbatches ? j->nbatches : 1, sizeof(*j->batches));
    uint32_t label_elems = j->ex.label_elems;
    j->batch_bytes = (size_t)sample_batch_bytes(j->batch, j->in_elems, label_elems,
                                                m->input_unorm8, m->labels_u8);
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
        j->ebuf_bytes = (size_t)sample_batch_bytes(p->eval_batch, j->in_elems, label_elems,
                                                   m->input_unorm8, m->labels_u8);
        /* as many as training batches: the plan counts them so */
        for (int i = 0; i < (int)WN_CREDITS(p) && i < 2; i++)
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

/* The buffers are there: the links up (to the swarmx parent or memoryx) and to
 * the workers. */
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
    const char *up = j->swarm_parent < 0 ? p->shards[0]->addr : p->swarm[j->swarm_parent]->addr;
    conn_link_start(&j->up, n->loop, up, &n->ccfg, &wn__up_ops, j);
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
    if (j->stripes) {
        wn_stripes_link(j->stripes); /* the stripe below dials us: its hello may be held */
        node_replay(n);
    }
    if (j->stripes && j->stripes->parts > 1)
        log_info("job %s: replica %u of %zu: stripe %u of %u of sample group %u (%lld of %lld "
                 "rows), %u samples per step, %zu worker(s)", j->id, j->replica, p->n_replicas,
                 j->stripes->part + 1, j->stripes->parts, j->stripes->group,
                 (long long)j->stripes->sp.rows, (long long)j->stripes->sp.full_h, j->batch,
                 j->nfeeds);
    else
        log_info("job %s: replica %u of %zu, %u samples per step, %zu worker(s)", j->id,
                 j->replica, p->n_replicas, j->batch, j->nfeeds);
}

int wn_spill_dir_check(const char *dir, char *room, size_t roomlen, char *err, size_t errlen)
{
    int fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    struct statvfs vs;
    if (fd < 0 || fstatvfs(fd, &vs) < 0) {
        int e = errno;
        snprintf(err, errlen, "%.160s: cannot make an unnamed file there: %s", dir, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    close(fd);
    units_format_size((uint64_t)vs.f_bavail * vs.f_frsize, room, roomlen);
    return 0;
}

/* The executor's spill file (model.spill_packed): unnamed, in --spill-dir,
 * with direct I/O where the file system has it (no page cache filled by a
 * file read back once); gone when closed. */
static int wn__spill_open(wn_job *j, char *err, size_t errlen)
{
    const char *dir = wn_of(j->n)->opt.spill_dir;
    if (!dir[0]) {
        snprintf(err, errlen, "the plan spills the bfloat16 copies, and this wse-node has no "
                 "--spill-dir");
        return -EINVAL;
    }
    int fd = open(dir, O_TMPFILE | O_RDWR | O_DIRECT | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EINVAL)
        fd = open(dir, O_TMPFILE | O_RDWR | O_CLOEXEC, 0600);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "spill file in %.160s: %s", dir, strerror(e));
        return -e;
    }
    j->spill_fd = fd;
    if (exec_set_spill(&j->ex, fd, err, errlen) < 0)
        return -ENOMEM;
    log_info("job %s: the bfloat16 copies of the kept outputs spill to a file in %.160s (%llu "
             "bytes, written and read back each step)", j->id, dir,
             (unsigned long long)j->ex.spill_file);
    return 0;
}

/* The model this replica computes, from the plan's job parsed once: the
 * whole model checked against the plan, then compiled again with the
 * plan's decisions (its stripe's rows, kept outputs) into j->m; with
 * spatial partitions, its links to the neighbouring stripes set up. */
static int wn__plan_model(wn_job *j, const Appliance__PlanReplica *me, char *err, size_t errlen)
{
    const Appliance__Plan *p = j->plan;
    jobspec *spec = jobspec_parse(p->job_toml, strlen(p->job_toml), p->file_name, NULL, err,
                                  errlen);
    if (!spec)
        return -EINVAL;
    uint32_t parts = msgcheck_parts(p);
    spatial_plan sp = {.parts = 1};
    model_options o = {.keep_outputs = p->keep_outputs, .keep_costly = p->keep_costly,
                       .rows_as_depth = p->rows_as_depth, .spill_packed = p->spill_packed};
    int rc = model_plan_check(p, spec->model, err, errlen);
    if (rc == 0 && parts > 1) {
        rc = spatial_compile(jobspec_model_table(spec), spec->model, (int)parts,
                             (int)(me->index % parts), &o, &j->m, &sp, err, errlen);
        if (rc == 0 && (sp.row0 != me->stripe_row0 || sp.rows != me->stripe_rows)) {
            snprintf(err, errlen, "the plan gives replica %u the input rows [%u, +%u), its stripe "
                     "is [%lld, +%lld)", me->index, me->stripe_row0, me->stripe_rows,
                     (long long)sp.row0, (long long)sp.rows);
            rc = -EINVAL;
        }
    } else if (rc == 0) {
        j->m = model_recompile(jobspec_model_table(spec), spec->model, &o, err, errlen);
        rc = j->m ? 0 : -EINVAL;
    }
    jobspec_free(spec);
    j->replica = me->index; /* with stripes, the stripe is replica % parts */
    if (rc == 0 && parts > 1)
        rc = wn_stripes_init(j, &sp, (int)me->batch, err, errlen);
    spatial_plan_free(&sp);
    return rc;
}

/* Starts a job (jobhost_ops.start): the replica's share of the plan and its
 * model; the buffers are allocated on the compute thread, then the links
 * start (wn__job_allocated). */
static void *wn__start(jobhost *h, Appliance__Plan *p, char *why, size_t whylen)
{
    node *n = h->n;
    wse_node *w = wn_of(n);
    wn_job *j = calloc(1, sizeof(*j));
    if (j)
        j->spill_fd = -1;
    if (!j) {
        snprintf(why, whylen, "out of memory");
        return NULL;
    }
    j->n = n;
    j->stripes_link_closed = wn__stripes_link_closed;
    snprintf(j->id, sizeof(j->id), "%s", p->job_id);
    j->plan = p;
    const Appliance__PlanReplica *me = NULL;
    for (size_t i = 0; i < p->n_replicas; i++)
        if (p->replicas[i]->member_id == n->member_id)
            me = p->replicas[i];
    char err[1024];
    if (!me) {
        snprintf(err, sizeof(err), "plan has no replica for member %u", n->member_id);
        return wn__start_failed(j, why, whylen, err);
    }
    if (wn__plan_model(j, me, err, sizeof(err)) < 0)
        return wn__start_failed(j, why, whylen, err);
    if (msgcheck_parts(p) == 1 && p->sync_batchnorm && p->n_replicas > 1) {
        spatial_plan none = {.parts = 1}; /* whole samples: batch norm's sums on the tree */
        j->replica = me->index;
        if (wn_stripes_init(j, &none, (int)me->batch, err, sizeof(err)) < 0)
            return wn__start_failed(j, why, whylen, err);
    }
    if (w->sim.mode != SIM_OFF) {
        if (j->stripes)
            return wn__start_failed(j, why, whylen,
                                    "simulated compute (--simulate-compute) runs neither spatial "
                                    "partitions nor synchronised batch norm: their exchanges are "
                                    "the executor's");
        if (sim_times_init(&j->sim_t, &w->sim, j->m, err, sizeof(err)) < 0)
            return wn__start_failed(j, why, whylen, err);
        j->sim = true;
    }
    j->layer_sec[0] = calloc(3 * (size_t)(j->m->nlayers ? j->m->nlayers : 1), sizeof(double));
    if (!j->layer_sec[0])
        return wn__start_failed(j, why, whylen, "out of memory");
    j->layer_sec[1] = j->layer_sec[0] + j->m->nlayers;
    j->chain_sec = j->layer_sec[0] + 2 * (size_t)j->m->nlayers;
    j->replica = me->index;
    j->batch = me->batch;
    j->step = p->first_step;
    j->in_elems = model_shape_elems(&j->m->input);
    j->batch_offset = me->batch_offset;
    j->swarm_parent = me->swarm_parent; /* in the tree, or -1 without one (msgcheck_plan) */
    if (j->swarm_parent < 0)
        snprintf(j->up_name, sizeof(j->up_name), "memoryx");
    else
        snprintf(j->up_name, sizeof(j->up_name), "swarmx node %d", (int)j->swarm_parent);
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

static bool wn__computing(node *n)
{
    return wn_of(n)->job && wn_of(n)->job->busy;
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
        snprintf(out, len, "the reduced gradients of step %llu from %s (%zu tensors complete)",
                 (unsigned long long)j->step, j->up_name, j->rg_done);
    else
        snprintf(out, len, "step %llu, %s of layer %s: its weights from %s or its batch "
                 "from %zu worker(s)", (unsigned long long)j->step, stage, layer, j->up_name,
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
    struct statvfs vs; /* the room its spill directory offers (model.spill_packed) */
    const char *dir = wn_of(n)->opt.spill_dir;
    r->disk = dir[0] && statvfs(dir, &vs) == 0 ? (uint64_t)vs.f_bavail * vs.f_frsize : 0;
    r->isa = (char *)kernels_isa_name(kernels_isa_level());
    r->conv_block = (uint32_t)op_conv2d_block_size();
    r->bf16 = kernels_bf16_compute() != 0;
    r->simulated = wn_of(n)->sim.mode != SIM_OFF;
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
    metrics_printf(b, "# HELP appliance_step_phase_seconds_total Time by phase of the steps: computing a "
                      "stage, or waiting with the compute thread idle.\n"
                      "# TYPE appliance_step_phase_seconds_total counter\n");
    for (int i = 0; i < WN_PHASES; i++)
        metrics_printf(b, "appliance_step_phase_seconds_total{phase=\"%s\"} %.9g\n",
                       wn_phase_names[i], w->phase_total[i]);
    metrics_printf(b, "# HELP appliance_layout_seconds_total Compute time spent moving operands "
                      "between the plain float32 tensors and oneDNN's blocked layouts or bfloat16 "
                      "(reorders and rounding), within the layers' time.\n"
                      "# TYPE appliance_layout_seconds_total counter\n"
                      "appliance_layout_seconds_total %.9g\n", kernels_layout_seconds());
    /* by layer: the running job's, or else the last job's */
    wn_job *j = w->job;
    int nl = j && j->layer_sec[0] ? j->m->nlayers : w->nlayers;
    if (nl > 0) {
        metrics_printf(b, "# HELP appliance_layer_seconds_total Compute time by layer and pass of the "
                          "running job, or else of the last.\n"
                          "# TYPE appliance_layer_seconds_total counter\n");
        for (int l = 0; l < nl; l++) {
            char name[160];
            metrics_label_escape(j && j->layer_sec[0] ? j->m->layers[l].name : w->layer_names[l],
                                 name, sizeof(name));
            const double *sec = j && j->layer_sec[0] ? j->layer_sec[0] : w->layer_sec;
            metrics_printf(b, "appliance_layer_seconds_total{layer=\"%s\",pass=\"forward\"} %.9g\n"
                              "appliance_layer_seconds_total{layer=\"%s\",pass=\"backward\"} %.9g\n",
                           name, sec[l], name, sec[nl + l]);
        }
    }
    if (j && j->ex_ready) { /* exec_sparse.c: which path the dense layers' passes took */
        static const char *const paths[EXEC_PATHS] = {"gemm", "sparse_weight", "sparse_input"};
        metrics_printf(b, "# HELP appliance_dense_passes_total Passes (forward or backward) of the "
                          "running job's dense layers by path: the GEMMs, the sparse kernels on a "
                          "pruned weight's kept positions, or over a relu's nonzero outputs.\n"
                          "# TYPE appliance_dense_passes_total counter\n");
        for (int i = 0; i < EXEC_PATHS; i++)
            metrics_printf(b, "appliance_dense_passes_total{path=\"%s\"} %llu\n", paths[i],
                           (unsigned long long)__atomic_load_n(&j->ex.dense_passes[i],
                                                               __ATOMIC_RELAXED));
    }
    metrics_printf(b, "# HELP appliance_blas_info The BLAS core type the kernels run (failed: the core "
                      "that failed its start-up self-check before it).\n"
                      "# TYPE appliance_blas_info gauge\n"
                      "appliance_blas_info{core=\"%s\",failed=\"%s\"} 1\n", w->blas.core, w->blas.failed);
}

static const options_key wn__keys[] = {
    {"wafer-memory", "SIZE", OPTIONS_SIZE, offsetof(wse_node_options, wafer_memory), 0, 0, 0,
     "declared on-wafer memory (default 40G, at most the host's memory)"},
    {"wafer-share", "FRACTION", OPTIONS_STRING, offsetof(wse_node_options, wafer_share),
     sizeof(((wse_node_options *)0)->wafer_share), 0, 0,
     "without --wafer-memory: declare this share of the host's\nmemory, at most the default 40G "
     "(0.375, or 0.75/2:\nthree quarters shared by two)"},
    {"simulate-compute", "MODE", OPTIONS_STRING, offsetof(wse_node_options, simulate),
     sizeof(((wse_node_options *)0)->simulate), 0, 0,
     "do everything but the kernels: each layer spends the time\nof cs2 (its FLOPs at a nominal "
     "1 PFLOP/s), cs2:TFLOPS,\nSECONDS (a step's per sample, split by FLOPs) or\nmeasured:FILE "
     "(\"LAYER FWD BWD\" seconds per sample);\nno activations are allocated (default off)"},
    {"threads", "N", OPTIONS_U32, offsetof(wse_node_options, threads), 0, 1, 10000000,
     "BLAS threads for the kernels (default 1)"},
    {"spill-dir", "DIR", OPTIONS_STRING, offsetof(wse_node_options, spill_dir),
     sizeof(((wse_node_options *)0)->spill_dir), 0, 0,
     "where a replica that fits its wafer only so keeps the\nbfloat16 copies of its kept "
     "outputs, in a file written\nand read back each step (default: none)"},
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
    wn_stripes_role(role);
    role->fill_register = wn__fill_register;
    role->on_shutdown = wn__shutdown;
    role->on_coordinator_lost = wn__coordinator_lost;
    role->describe_wait = wn__describe_wait;
    role->computing = wn__computing;
    role->metrics = wn__metrics;
}
