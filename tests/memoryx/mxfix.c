/* What memoryx's unit tests share (mxfix.h). */
#include "mxfix.h"

#include <check.h>
#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "log.h"
#include "optim_plan.h"
#include "plan.h"
#include "rng.h"
#include "tier.h"
#include "update.h"

memoryx fix_mx;
node fix_node;
static node_role fix__role;

int fix_releases;
char fix_why[512];
int fix_update_backs, fix_chunk_reads, fix_grads_written, fix_checkpoints;
uint64_t fix_grad_elems;
mx_ckpt_kind fix_ckpt_kind;
uint64_t fix_ckpt_step;

Appliance__Plan *fix_plan(const fix_spec *s)
{
    Appliance__Plan p = APPLIANCE__PLAN__INIT;
    Appliance__PlanTensor pt[s->nt], *ppt[s->nt];
    uint64_t dims[s->nt][2];
    uint32_t fwd[s->nt], bwd[s->nt];
    size_t nbwd = 0;
    for (size_t i = 0; i < s->nt; i++) {
        const fix_tensor *f = &s->tensors[i];
        appliance__plan_tensor__init(&pt[i]);
        ppt[i] = &pt[i];
        pt[i].id = (uint32_t)i;
        pt[i].name = (char *)f->name;
        dims[i][0] = f->rows;
        dims[i][1] = f->cols;
        pt[i].dims = dims[i];
        pt[i].n_dims = f->cols ? 2 : 1;
        pt[i].shard = f->shard;
        pt[i].init = (char *)f->init;
        pt[i].fan_in = f->cols ? f->cols : f->rows;
        pt[i].fan_out = f->rows;
        pt[i].trainable = f->trainable;
        fwd[i] = (uint32_t)i;
        if (s->tensors[s->nt - 1 - i].trainable)
            bwd[nbwd++] = (uint32_t)(s->nt - 1 - i);
    }
    Appliance__PlanShard sh[s->shards ? s->shards : 1], *psh[s->shards ? s->shards : 1];
    for (uint32_t k = 0; k < s->shards; k++) {
        appliance__plan_shard__init(&sh[k]);
        sh[k].index = k;
        sh[k].member_id = k + 1;
        psh[k] = &sh[k];
    }
    Appliance__PlanOptimizer o = APPLIANCE__PLAN_OPTIMIZER__INIT;
    o.type = (char *)s->optimizer;
    o.learning_rate = 0.05;
    o.schedule = (char *)"constant";
    o.momentum = s->momentum;
    o.weight_decay = 0.01;
    o.max_gradient_norm = s->max_norm;
    o.beta1 = 0.9;
    o.beta2 = 0.999;
    o.eps = 1e-8;
    p.job_id = (char *)"job-7";
    p.mode = APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING;
    p.seed = s->seed;
    p.max_steps = s->max_steps;
    p.chunk_elems = s->chunk;
    p.model_dir = (char *)(s->model_dir ? s->model_dir : "");
    p.tensors = ppt;
    p.n_tensors = s->nt;
    p.shards = psh;
    p.n_shards = s->shards;
    p.fwd_stream = fwd;
    p.n_fwd_stream = s->nt;
    p.bwd_stream = bwd;
    p.n_bwd_stream = nbwd;
    p.optimizer = &o;
    p.wire_bf16 = s->bf16;
    Appliance__Plan *copy = plan_copy(&p);
    ck_assert_ptr_nonnull(copy);
    return copy;
}

static void *fix__start(jobhost *h, Appliance__Plan *plan, char *why, size_t whylen)
{
    snprintf(why, whylen, "jobs are made by fix_job");
    return NULL;
}

/* Lets the job go as mx.c's release does, recording why. */
static void fix__release(jobhost *h, void *job, jobhost_end end, const char *why)
{
    mx_job *j = job;
    fix_releases++;
    snprintf(fix_why, sizeof(fix_why), "%s", why);
    fix_mx.job = NULL;
    if (j->pool_work > 0)
        j->released = true;
    else
        mxjob_free_later(j);
}

static const jobhost_ops fix__jobhost_ops = {fix__start, fix__release};

void fix_init(unsigned threads, bool own_jobhost)
{
    log_init("memoryx-test", LOG_WARN);
    memset(&fix_node, 0, sizeof(fix_node));
    memoryx_role(&fix__role, &fix_mx, &fix_node);
    fix_node.loop = uv_default_loop();
    fix_node.role = &fix__role;
    fix_node.data = &fix_mx;
    fix_mx.opt.threads = threads;
    metrics_hist_init(&fix_mx.chunk_hist, "chunk", "a chunk written");
    if (own_jobhost)
        jobhost_init(&fix_mx.jobs, &fix_node, &fix__role, &fix__jobhost_ops);
    fix_releases = 0;
    fix_why[0] = '\0';
    fix_reset_news();
}

static void fix__update_back(mx_job *j)
{
    fix_update_backs++;
}

static void fix__chunk_read(mx_job *j)
{
    fix_chunk_reads++;
}

static void fix__grad_written(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count)
{
    fix_grads_written++;
    fix_grad_elems += count;
}

static void fix__checkpoint_written(mx_job *j, mx_ckpt_kind kind, uint64_t step)
{
    fix_checkpoints++;
    fix_ckpt_kind = kind;
    fix_ckpt_step = step;
}

const mx_job_ops fix_ops = {fix__update_back, fix__chunk_read, fix__grad_written,
                            fix__checkpoint_written};

void fix_reset_news(void)
{
    fix_update_backs = fix_chunk_reads = fix_grads_written = fix_checkpoints = 0;
    fix_grad_elems = 0;
    fix_ckpt_kind = MX_CKPT_NONE;
    fix_ckpt_step = UINT64_MAX;
}

float fix_value(uint64_t stream, uint64_t i)
{
    return (float)(2.0 * rng_uniform(12345, stream, i) - 1.0);
}

/* The tensors' memory, as mx.c's load makes it (zeros). */
static void fix__alloc(mx_job *j, mx_tensor *t)
{
    t->w = calloc(t->n, sizeof(float));
    if (j->grad16 && t->trainable)
        t->g16 = calloc(t->n, sizeof(uint16_t));
    else
        t->g = calloc(t->n, sizeof(float));
    ck_assert(t->w && (t->g || t->g16));
    if (t->trainable)
        ck_assert_int_eq(optim_state_init(&t->st, &j->cfg, t->n), 0);
}

mx_job *fix_job(Appliance__Plan *p, uint32_t shard, unsigned flags, const char *dir,
                uint64_t window)
{
    mx_job *j = calloc(1, sizeof(*j));
    ck_assert_ptr_nonnull(j);
    snprintf(j->id, sizeof(j->id), "%s", p->job_id);
    j->plan = p;
    j->shard = shard;
    ck_assert_int_eq(optim_from_plan(p->optimizer, &j->cfg), 0);
    optim_state probe;
    ck_assert_int_eq(optim_state_init(&probe, &j->cfg, 1), 0);
    j->states = optim_state_count(&probe);
    optim_state_deinit(&probe);
    j->nids = p->n_tensors;
    j->by_id = calloc(j->nids, sizeof(*j->by_id));
    j->t = calloc(p->n_tensors, sizeof(*j->t));
    ck_assert(j->by_id && j->t);
    j->held_tail = &j->held;
    j->up_step = UINT64_MAX;
    j->mx = &fix_mx;
    j->ops = &fix_ops;
    for (size_t i = 0; i < p->n_tensors; i++) {
        const Appliance__PlanTensor *pt = p->tensors[i];
        if (pt->shard != shard)
            continue;
        mx_tensor *t = &j->t[j->nt++];
        t->job = j;
        t->mx = &fix_mx;
        t->loop = fix_node.loop;
        t->id = pt->id;
        snprintf(t->name, sizeof(t->name), "%s", pt->name);
        t->n = plan_stream_tensor_elems(p, pt->id);
        t->trainable = pt->trainable;
        j->by_id[t->id] = t;
    }
    j->grad16 = flags & FIX_G16;
    j->twins = flags & FIX_TWINS;
    if (flags & FIX_TIER) {
        char err[512];
        j->tier_window = window;
        int rc = tier_open(j, dir, window, fix_mx.opt.threads, err, sizeof(err));
        ck_assert_msg(rc == 0, "tier_open: %s", err);
    } else {
        for (size_t i = 0; i < j->nt; i++)
            fix__alloc(j, &j->t[i]);
    }
    for (size_t i = 0; !(flags & FIX_NOFILL) && i < j->nt; i++)
        for (uint64_t e = 0; e < j->t[i].n; e++)
            j->t[i].w[e] = fix_value(j->t[i].id, e);
    for (size_t i = 0; j->twins && i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        ck_assert_ptr_nonnull(t->w16 = malloc(t->n * sizeof(uint16_t)));
        bf16_pack(t->w16, t->w, t->n);
    }
    ck_assert_int_eq(update_parts(j), 0);
    j->step = p->first_step;
    j->state = MX_RUNNING;
    fix_mx.job = j;
    fix_mx.jobs.job = j;
    fix_mx.jobs.plan = p;
    snprintf(fix_mx.jobs.id, sizeof(fix_mx.jobs.id), "%s", j->id);
    return j;
}

void fix_end(void)
{
    jobhost_end_job(&fix_mx.jobs, JOBHOST_RELEASED, "released");
    fix_run();
}

void fix_run(void)
{
    uv_run(fix_node.loop, UV_RUN_DEFAULT);
}

void fix_tmpdir(char *out, size_t len)
{
    const char *base = getenv("TMPDIR");
    snprintf(out, len, "%s/mxtest-XXXXXX", base && base[0] ? base : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(out));
}

void fix_rmdir(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0)
            continue;
        char path[4096];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        unlink(path);
    }
    closedir(d);
    ck_assert_int_eq(rmdir(dir), 0);
}

bool fix_same(const float *a, const float *b, size_t n)
{
    return memcmp(a, b, n * sizeof(float)) == 0;
}
