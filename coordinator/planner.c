/* jobspec + members -> Plan. */
#include "planner.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "arena.h"
#include "dataset.h"
#include "safetensors.h"
#include "fit.h"
#include "footprint.h"
#include "hosts.h"
#include "init.h"
#include "memplan.h"
#include "msgcheck.h"
#include "optim_plan.h"
#include "plan.h"
#include "sample.h"
#include "units.h"

/* What the input workers read for one split, in the arena (a->failed on
 * failure). The sample shape is the model's input. */
static Appliance__PlanInput *planner__input(arena *a, const jobspec *spec, const jobspec_input *si,
                                            const char *split)
{
    const model *m = spec->model;
    Appliance__PlanInput *in = arena_alloc(a, sizeof(*in));
    uint64_t *shape = arena_alloc(a, 4 * sizeof(uint64_t)); /* (a volume: C, D, H, W) */
    if (!in || !shape)
        return NULL;
    appliance__plan_input__init(in);
    in->data_processor = arena_strdup(a, si->data_processor);
    in->data_dir = arena_strdup(a, si->data_dir);
    in->split = arena_strdup(a, split);
    in->shuffle = si->shuffle;
    in->seed = (uint64_t)(si->shuffle_seed ? si->shuffle_seed : spec->seed);
    in->num_classes = (uint32_t)si->num_classes;
    in->num_samples = (uint64_t)si->num_samples;
    in->noise = si->noise;
    in->random_flip_horizontal = si->random_flip_horizontal;
    in->random_flip_vertical = si->random_flip_vertical;
    in->random_crop_padding = (uint32_t)si->random_crop_padding;
    in->normalize = arena_strdup(a, si->normalize_data_method);
    in->augment = si->augment_data;
    in->train_test_split = si->train_test_split;
    in->class_id = (int32_t)si->class_id;
    in->echo_type = arena_strdup(a, si->echo_type);
    in->aggregate_cartilage = si->aggregate_cartilage;
    in->input_unorm8 = m->input_unorm8; /* the job's, for both splits */
    in->labels_uint8 = m->labels_u8;
    in->n_sample_shape = (size_t)m->input.ndim;
    in->sample_shape = shape;
    for (int d = 0; d < m->input.ndim; d++)
        shape[d] = (uint64_t)m->input.d[d];
    return in;
}

uint64_t planner_step_timeout_ms(const jobspec *spec, const Appliance__Plan *p, unsigned threads)
{
    if (spec->step_timeout_seconds != JOBSPEC_AUTO)
        return (uint64_t)spec->step_timeout_seconds * 1000u;
    uint64_t share = 0, parts = p->spatial_partitions > 1 ? p->spatial_partitions : 1;
    for (size_t i = 0; i < p->n_replicas; i++)
        if (p->replicas[i]->batch > share)
            share = p->replicas[i]->batch;
    double work = 3.0 * (double)spec->model->flops * (double)share / (double)parts;
    double ms = 1e3 * PLANNER_STEP_TIMEOUT_WORK * work /
                (PLANNER_THREAD_FLOPS * (threads ? threads : 1));
    return ms > PLANNER_STEP_TIMEOUT_S * 1e3 ? (uint64_t)ms : PLANNER_STEP_TIMEOUT_S * 1000u;
}

/* Sizes the evaluation: the eval set (opened here, so that a missing or
 * damaged one is refused at submission) split over the replicas, in batches
 * no larger than a replica's training share. */
static int planner__eval(const jobspec *spec, Appliance__Plan *p, char *err, size_t errlen)
{
    dataset *d;
    char why[512];
    int rc = dataset_probe(&d, p->eval_input, why, sizeof(why));
    if (rc < 0) {
        snprintf(err, errlen, "%s: [eval_input]: %s", spec->source, why);
        return rc;
    }
    uint64_t size = dataset_size(d);
    dataset_close(d);
    uint64_t nr = p->n_replicas / msgcheck_parts(p); /* sample groups: each evaluates its shard */
    uint64_t share = UINT64_MAX;
    for (size_t i = 0; i < nr; i++)
        if (p->replicas[i]->batch < share)
            share = p->replicas[i]->batch;
    if (p->micro_batch && p->micro_batch < share) /* what a replica computes at once */
        share = p->micro_batch;
    uint64_t b = ((uint64_t)spec->eval.batch_size + nr - 1) / nr;
    p->eval_frequency = (uint64_t)spec->eval_frequency;
    p->eval_samples = size;
    p->eval_shard = (size + nr - 1) / nr;
    p->eval_batch = (uint32_t)(b < share ? b : share);
    p->eval_batches = (uint32_t)((p->eval_shard + p->eval_batch - 1) / p->eval_batch);
    return 0;
}

/* Whether a layer's backward pass reads its weights: to pass a gradient to
 * an input other than the model input (through flatten views: a dense
 * layer reading the flattened input computes no input gradient), and for
 * the norms' scale. */
static bool planner__bwd_needs_weights(const model *m, const model_layer *l)
{
    if (l->ntensors == 0)
        return false;
    if (l->type == LAYER_BATCH_NORM || l->type == LAYER_GROUP_NORM)
        return true;
    for (int i = 0; i < l->ninputs; i++)
        if (memplan_resolve(m, l->inputs[i]) >= 0)
            return true;
    return false;
}

/* Weight Streaming: how many layers the backward pass starts with (those
 * with tensors, from the last layer down) whose weights are still in the
 * wafer's two slots when it starts: the forward pass's last arrivals (a
 * layer in parts is as many arrivals), each needing its weights again.
 * Spatial partitions stream every layer again (0). */
static uint32_t planner__bwd_kept(const model *m, const Appliance__Plan *p)
{
    if (p->mode != APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING || p->spatial_partitions > 1)
        return 0;
    uint32_t kept = 0, arrivals = 0;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        const model_layer *ml = &m->layers[l];
        if (ml->ntensors == 0)
            continue;
        arrivals += footprint_ws_parts(m, l, p->ws_part_elems, p->chunk_elems).count;
        if (arrivals > 2 || !planner__bwd_needs_weights(m, ml))
            break;
        kept++;
    }
    return kept;
}

static const char *planner__init(const model *m, const model_tensor *t)
{
    const model_layer *l = &m->layers[t->layer];
    const char *suffix = strrchr(t->name, '.');
    suffix = suffix ? suffix + 1 : t->name;
    if (strcmp(suffix, "bias") == 0 || strcmp(suffix, "running_mean") == 0)
        return "zeros";
    if (strcmp(suffix, "running_var") == 0)
        return "ones";
    if (l->type == LAYER_BATCH_NORM || l->type == LAYER_GROUP_NORM)
        return "ones";
    /* He for weights feeding a rectifier, Xavier otherwise. */
    if (t->layer + 1 < m->nlayers) {
        layer_type next = m->layers[t->layer + 1].type;
        if (next == LAYER_RELU || next == LAYER_LEAKY_RELU || next == LAYER_GELU ||
            next == LAYER_BATCH_NORM || next == LAYER_GROUP_NORM)
            return "he_normal";
    }
    return "xavier_uniform";
}

static void planner__fans(const model *m, const model_tensor *t, uint64_t *fan_in, uint64_t *fan_out)
{
    const model_layer *l = &m->layers[t->layer];
    switch (l->type) {
    case LAYER_DENSE:
        *fan_in = (uint64_t)t->dims[1];
        *fan_out = (uint64_t)t->dims[0];
        break;
    case LAYER_CONV2D:
        *fan_in = (uint64_t)(t->dims[1] * t->dims[2] * t->dims[3]);
        *fan_out = (uint64_t)(t->dims[0] * t->dims[2] * t->dims[3]);
        break;
    case LAYER_CONV_TRANSPOSE2D:
        *fan_in = (uint64_t)(t->dims[1] * t->dims[2] * t->dims[3]);
        *fan_out = (uint64_t)(t->dims[0] * t->dims[2] * t->dims[3]);
        break;
    case LAYER_CONV3D: /* PyTorch's: dims 1 and 0 times the kernel's volume */
    case LAYER_CONV_TRANSPOSE3D:
        if (model_init_fans(t->dims, t->ndim, fan_in, fan_out) < 0) /* a bias */
            *fan_in = *fan_out = t->elems;
        break;
    default:
        *fan_in = *fan_out = t->elems;
    }
}

/* The initializer the job named for tensor t (its layer's weight_init for
 * ".weight", bias_init for ".bias"), or NULL for the planner's default. */
static const model_init *planner__job_init(const model *m, const model_tensor *t)
{
    const model_layer *l = &m->layers[t->layer];
    const char *suffix = strrchr(t->name, '.');
    suffix = suffix ? suffix + 1 : t->name;
    if (strcmp(suffix, "weight") == 0 && l->weight_init.name[0])
        return &l->weight_init;
    if (strcmp(suffix, "bias") == 0 && l->bias_init.name[0])
        return &l->bias_init;
    return NULL;
}

/* pt's initializer from the job's ji: the name and its parameters, and
 * PyTorch's fans (dims 1 and 0 times the rest), which an initializer that
 * computes from them needs a tensor of 2 or more dimensions for, as in
 * PyTorch. Returns 0, or -EINVAL with the message in err. */
static int planner__named_init(arena *a, const model *m, const model_tensor *t,
                               const model_init *ji, Appliance__PlanTensor *pt, const char *source,
                               char *err, size_t errlen)
{
    const model_layer *l = &m->layers[t->layer];
    bool weight = ji == &l->weight_init;
    if (model_init_fans(t->dims, t->ndim, &pt->fan_in, &pt->fan_out) < 0) {
        if (model_init_needs_fans(ji)) {
            snprintf(err, errlen, "%s:%d:%d: layer \"%s\": %s_initializer \"%s\" computes from "
                     "fans, which a tensor has only with 2 or more dimensions (%s has %d)", source,
                     l->pos.line, l->pos.col, l->name, weight ? "weight" : "bias", ji->name,
                     t->name, t->ndim);
            return -EINVAL;
        }
        pt->fan_in = pt->fan_out = t->elems;
    }
    Appliance__PlanInit *pi = arena_alloc(a, sizeof(*pi));
    if (!pi)
        return 0; /* the arena's failure, found by the caller */
    model_init_to_plan(ji, pi);
    pi->name = arena_strdup(a, ji->name);
    pi->mode = arena_strdup(a, ji->mode);
    pi->distribution = arena_strdup(a, ji->distribution);
    pi->nonlinearity = arena_strdup(a, ji->nonlinearity);
    pt->initializer = pi;
    pt->init = arena_strdup(a, ji->name);
    return 0;
}

/* The files of the checkpoint spec->checkpoint_path names (any one shard's
 * weights file): every shard's weights and optimizer state, and its step. */
static int planner__resume(const jobspec *spec, Appliance__Plan *p, arena *a, char *err,
                           size_t errlen)
{
    const char *path = spec->checkpoint_path;
    const char *slash = strrchr(path, '/');
    const char *base = slash ? slash + 1 : path;
    size_t dirlen = slash ? (size_t)(slash - path) : 0;
    unsigned long long step;
    unsigned shard, shards;
    int end = 0;
    if (sscanf(base, "checkpoint_%llu-shard%u-of-%u.safetensors%n", &step, &shard, &shards, &end) != 3 ||
        base[end] != 0 || shard < 1 || shard > shards || shards > 1024) {
        snprintf(err, errlen, "%s: runconfig.checkpoint_path \"%s\": expected a file named "
                 "checkpoint_STEP-shardK-of-N.safetensors", spec->source, path);
        return -EINVAL;
    }
    if (step >= (unsigned long long)spec->max_steps) {
        snprintf(err, errlen, "%s: the checkpoint is at step %llu and max_steps is %lld: nothing "
                 "to train", spec->source, step, (long long)spec->max_steps);
        return -EINVAL;
    }
    p->n_resume_weights = p->n_resume_optimizer = shards;
    p->resume_weights = arena_alloc(a, shards * sizeof(char *));
    p->resume_optimizer = arena_alloc(a, shards * sizeof(char *));
    if (!p->resume_weights || !p->resume_optimizer)
        return -ENOMEM;
    for (unsigned k = 1; k <= shards; k++) {
        char w[PATH_MAX + 64], o[PATH_MAX + 64];
        snprintf(w, sizeof(w), "%.*s%scheckpoint_%llu-shard%u-of-%u.safetensors", (int)dirlen, path,
                 slash ? "/" : "", step, k, shards);
        snprintf(o, sizeof(o), "%.*s%soptimizer_%llu-shard%u-of-%u.safetensors", (int)dirlen, path,
                 slash ? "/" : "", step, k, shards);
        const char *missing = access(w, R_OK) != 0 ? w : access(o, R_OK) != 0 ? o : NULL;
        if (missing) {
            snprintf(err, errlen, "%s: checkpoint file %s: %s", spec->source, missing, strerror(errno));
            return -ENOENT;
        }
        p->resume_weights[k - 1] = arena_strdup(a, w);
        p->resume_optimizer[k - 1] = arena_strdup(a, o);
    }
    st_file *f = st_open(p->resume_weights[0], err, errlen);
    if (!f)
        return -EINVAL;
    const char *meta = st_meta(f, "step");
    bool ok = meta && strtoull(meta, NULL, 10) == step;
    st_close(f);
    if (!ok) {
        snprintf(err, errlen, "%s: %s: its metadata does not say step %llu", spec->source,
                 p->resume_weights[0], step);
        return -EINVAL;
    }
    p->first_step = step;
    return 0;
}

static bool planner__live(const member *mb)
{
    return mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE ||
           mb->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY;
}

/* Picks live members of a role in member-id order: idle ones only, or any;
 * of wse-nodes, the simulated ones when sim, else the others. */
static size_t planner__pick(const members *ms, Appliance__Role role, member **out, size_t want,
                            bool idle, bool sim)
{
    size_t k = 0;
    for (size_t i = 0; i < ms->n && k < want; i++) {
        member *mb = &ms->v[i];
        if (mb->role == role && planner__live(mb) && mb->simulated == sim &&
            (!idle || (!mb->job[0] && mb->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE)))
            out[k++] = mb;
    }
    return k;
}

bool planner_place_members(const members *ms, const jobspec *spec, bool idle, planner_kind kind,
                           planner_place *pl)
{
    pl->nr = (size_t)spec->num_csx;
    pl->ns = (size_t)spec->num_wgt_servers;
    pl->nx = planner_tree_nodes(spec);
    pl->nw = 1;
    pl->real = pl->simulated = 0;
    for (size_t i = 0; i < ms->n; i++)
        if (ms->v[i].role == APPLIANCE__ROLE__ROLE_WSE_NODE && planner__live(&ms->v[i])) {
            pl->simulated += ms->v[i].simulated;
            pl->real += !ms->v[i].simulated;
        }
    /* real wse-nodes when there are enough, else simulated ones if there are */
    pl->sim = kind == PLANNER_ANY ? pl->real < pl->nr && pl->simulated >= pl->nr
                                  : kind == PLANNER_SIMULATED;
    pl->gr = planner__pick(ms, APPLIANCE__ROLE__ROLE_WSE_NODE, pl->reps, pl->nr, idle, pl->sim);
    pl->gs = planner__pick(ms, APPLIANCE__ROLE__ROLE_MEMORYX, pl->shards, pl->ns, idle, false);
    pl->gx = planner__pick(ms, APPLIANCE__ROLE__ROLE_SWARMX, pl->swarm, pl->nx, idle, false);
    pl->gw = planner__pick(ms, APPLIANCE__ROLE__ROLE_WORKER, pl->workers, 256, idle, false);
    return pl->gr >= pl->nr && pl->gs >= pl->ns && pl->gx >= pl->nx && pl->gw >= pl->nw;
}

#define PLANNER_NAMED 8 /* wse-nodes a refusal names of each kind; the rest are counted */

/* Appends the names of the live wse-nodes of one kind: " (a, b and 3 more)". */
static void planner__names(const members *ms, bool sim, size_t count, char *out, size_t len)
{
    size_t at = strlen(out), named = 0;
    for (size_t i = 0; i < ms->n && named < PLANNER_NAMED && at + 1 < len; i++) {
        const member *mb = &ms->v[i];
        if (mb->role != APPLIANCE__ROLE__ROLE_WSE_NODE || !planner__live(mb) || mb->simulated != sim)
            continue;
        snprintf(out + at, len - at, "%s%s", named ? ", " : " (", mb->name);
        at += strlen(out + at);
        named++;
    }
    if (at + 1 < len)
        snprintf(out + at, len - at, count > named ? " and %zu more)" : ")", count - named);
}

bool planner_kinds_refusal(const members *ms, const planner_place *pl, char *err, size_t errlen)
{
    /* with PLANNER_ANY: neither kind suffices alone, both together would */
    if (pl->real >= pl->nr || pl->simulated >= pl->nr || !pl->real || !pl->simulated ||
        pl->real + pl->simulated < pl->nr)
        return false;
    snprintf(err, errlen, "the job needs %zu wse-nodes; the cluster has %zu that compute", pl->nr,
             pl->real);
    planner__names(ms, false, pl->real, err, errlen);
    size_t at = strlen(err);
    snprintf(err + at, errlen - at, " and %zu that simulate their compute (--simulate-compute)",
             pl->simulated);
    planner__names(ms, true, pl->simulated, err, errlen);
    at = strlen(err);
    snprintf(err + at, errlen - at, "; a job runs on simulated wse-nodes only when all of its "
             "wse-nodes are simulated: lower runconfig.num_csx, or start wse-nodes of one kind");
    return true;
}

size_t planner_swarm_nodes(size_t replicas, size_t fanout)
{
    size_t total = 0;
    for (size_t k = (replicas + fanout - 1) / fanout;; k = (k + fanout - 1) / fanout) {
        total += k;
        if (k == 1)
            return total;
    }
}

bool planner_direct_alone(const jobspec *spec)
{
    return spec->num_wgt_servers == 1 && !spec->swarmx_relay && jobspec_parts(spec) == 1;
}

bool planner_direct(const jobspec *spec)
{
    return spec->num_csx == 1 && planner_direct_alone(spec);
}

size_t planner_tree_nodes(const jobspec *spec)
{
    return planner_direct(spec) ? 0 : planner_swarm_nodes((size_t)spec->num_csx,
                                                          (size_t)spec->swarmx_fanout);
}

uint64_t planner_replica_bytes(const model *m, uint64_t batch, unsigned threads,
                               Appliance__ExecMode mode, unsigned optimizer_states)
{
    return planner_replica_bytes_micro(m, batch, 0, threads, mode, optimizer_states);
}

uint64_t planner_replica_bytes_micro(const model *m, uint64_t batch, uint64_t micro,
                                     unsigned threads, Appliance__ExecMode mode,
                                     unsigned optimizer_states)
{
    footprint f;
    int share = (int)batch;
    if (footprint_init_micro(&f, m, share, micro ? (int)micro : share,
                             (int)(threads ? threads : 1)) < 0)
        return UINT64_MAX; /* cannot even plan it here: it does not fit */
    uint64_t bytes = footprint_replica_bytes(&f, m, mode, optimizer_states);
    footprint_free(&f);
    return bytes;
}

uint64_t planner_replica_bytes_unsimulated(const model *m, uint64_t batch, uint64_t micro,
                                           unsigned threads, Appliance__ExecMode mode)
{
    footprint f;
    int share = (int)batch;
    if (footprint_init_micro(&f, m, share, micro ? (int)micro : share,
                             (int)(threads ? threads : 1)) < 0)
        return 0;
    uint64_t bytes = f.exec + (mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED ? f.rounded : 0);
    footprint_free(&f);
    return bytes;
}

/* Why a job does not fit in Weight Streaming, and what would help: fewer
 * samples per replica while one fits, else a larger wafer or an image that
 * fits (never a batch below 1). */
static void planner__refuse_ws(const jobspec *spec, uint64_t share,
                               unsigned threads, unsigned states, uint64_t wafer, uint64_t need,
                               size_t nr, char *err, size_t errlen)
{
    const model *m = spec->model;
    const Appliance__ExecMode ws = APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING;
    char n1[32], w1[32], in[64];
    units_format_size(need, n1, sizeof(n1));
    units_format_size(wafer, w1, sizeof(w1));
    model_shape_str(&m->input, in, sizeof(in));
    int fit = fit_largest_batch(m, (int)threads, ws, states, wafer, (int)share);
    if (fit >= 1) {
        snprintf(err, errlen,
                 "%s: the model does not fit: Weight Streaming needs %s per replica for %llu "
                 "samples of %s, the smallest wafer has %s; %d sample(s) per replica fit: lower "
                 "train_input.batch_size to %llu or raise runconfig.num_csx to %llu",
                 spec->source, n1, (unsigned long long)share, in, w1, fit,
                 (unsigned long long)((uint64_t)fit * nr),
                 (unsigned long long)(((uint64_t)spec->train.batch_size + (uint64_t)fit - 1) / (uint64_t)fit));
        return;
    }
    char one[32], hint[192] = "";
    units_format_size(fit_replica_bytes(m, 1, (int)threads, ws, states), one, sizeof(one));
    const toml_value *mt = jobspec_model_table(spec);
    int side = mt ? fit_largest_side(mt, m, 1, (int)threads, ws, states, wafer) : -1;
    if (side > 0)
        snprintf(hint, sizeof(hint), ", or images of at most %lldx%dx%d",
                 (long long)m->input.d[0], side, side);
    /* half the kept activations may be what is missing */
    model half = *m;
    half.act_bf16 = true;
    uint64_t need_half = fit_replica_bytes(&half, 1, (int)threads, ws, states);
    if (!m->act_bf16 && need_half <= wafer) {
        char h1[32];
        units_format_size(need_half, h1, sizeof(h1));
        snprintf(hint + strlen(hint), sizeof(hint) - strlen(hint),
                 ", or [model] activation_dtype = \"bfloat16\" (needs %s)", h1);
    }
    snprintf(err, errlen,
             "%s: not even one sample of %s fits a wafer: Weight Streaming needs %s per replica "
             "for one sample, the smallest wafer has %s; use wse-nodes with more wafer memory "
             "(--wafer-memory)%s",
             spec->source, in, one, w1, hint);
}

/* What the plan has each of its members hold, summed per host against the
 * host's memory (hosts_check_plan): the replicas' plans (hold: what each
 * holds, less than its plan when it simulates its compute), the shards in
 * memory (the rest is in a disk tier), the swarmx nodes' chunk queues at
 * their bounds, the workers' batches in flight. need is each shard's
 * bytes (footprint_shards). Returns 0, 1 when a host has too little (err,
 * *share as hosts_check_plan), or -ENOMEM. */
static int planner__hosts(const model *m, const Appliance__Plan *p, const planner_members *pm,
                          const uint64_t *hold, const uint64_t *need, bool pipelined,
                          uint64_t *share, char *err, size_t errlen)
{
    size_t nw = pm->nworkers < 256 ? pm->nworkers : 256;
    size_t n = p->n_replicas + p->n_shards + p->n_swarm + nw;
    hosts_use *use = calloc(n ? n : 1, sizeof(*use));
    if (!use)
        return -ENOMEM;
    size_t k = 0;
    for (size_t i = 0; i < p->n_replicas; i++)
        use[k++] = (hosts_use){pm->replicas[i], hold[i]};
    for (size_t s = 0; s < p->n_shards; s++) {
        uint64_t have = pm->shards[s]->memory;
        bool memory = !have || need[s] <= have || pipelined;
        use[k++] = (hosts_use){pm->shards[s], memory ? need[s] : have};
    }
    uint64_t chunk = p->chunk_elems * sizeof(float); /* bfloat16 chunks are summed in float32 */
    for (size_t x = 0; x < p->n_swarm; x++) {
        const Appliance__PlanSwarmNode *sn = p->swarm[x];
        uint64_t ups = sn->parent < 0 ? p->n_shards : 1;
        uint64_t kids = sn->n_children_replicas + sn->n_children_swarmx;
        use[k++] = (hosts_use){pm->swarm[x], chunk * (PLAN_SWARM_MERGE_QUEUE * ups +
                                                       PLAN_SWARM_CHILD_QUEUE * kids) +
                                                  PLAN_SWARM_DOWN_MAX};
    }
    uint64_t in = model_shape_elems(&m->input), labels = footprint_label_elems(m);
    size_t w0 = k;
    for (size_t w = 0; w < nw; w++)
        use[k++] = (hosts_use){pm->workers[w], 0};
    uint64_t credits = p->feed_credits ? p->feed_credits : PLAN_FEED_CREDITS;
    for (size_t i = 0; nw && i < p->n_workers; i++) /* the workers the planner assigned, round robin */
        use[w0 + i % pm->nworkers].bytes +=
            credits * sample_batch_bytes(p->replicas[p->workers[i]->replica]->batch, in, labels,
                                         m->input_unorm8, m->labels_u8);
    int rc = hosts_check_plan(use, k, share, err, errlen);
    free(use);
    return rc;
}

/* [sparsity] as the plan carries it to memoryx; NULL when out of memory. */
static Appliance__PlanSparsity *planner__sparsity(arena *a, const jobspec_sparsity *js)
{
    Appliance__PlanSparsity *ps = arena_alloc(a, sizeof(*ps));
    Appliance__PlanSparseValue *lv = arena_alloc(a, sizeof(*lv));
    Appliance__PlanSparseValue *dv = arena_alloc(a, sizeof(*dv));
    if (!ps || !lv || !dv)
        return NULL;
    appliance__plan_sparsity__init(ps);
    ps->type = (char *)sparse_type_name(js->type);
    ps->init_method = js->init_method == SPARSE_INIT_TOPK ? "topk" : "random";
    ps->seed = (uint64_t)js->seed;
    ps->dense_streams = js->dense_streams;
    ps->init_scale = js->init_scale_fan_in ? "fan_in" : "none";
    ps->freq = js->schedule.freq;
    ps->start = js->schedule.start;
    ps->stop = js->schedule.stop;
    sparse_value_to_plan(&js->level_hp, lv);
    sparse_value_to_plan(&js->drop_fraction, dv);
    ps->level = lv;
    ps->drop_fraction = dv;
    return ps;
}

/* Builds the plan with every replica planned within cap at most (its
 * wafer memory, or less: its share of its host); *share as planner__hosts
 * when a host has too little (returned as 1). */
static int planner__build(const jobspec *spec, const char *job_id, const planner_members *pm,
                          uint64_t chunk_elems, uint64_t cap, uint64_t *share, uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    const model *m = spec->model;
    arena a;
    arena_init(&a);
    fit_stripes ps = {.parts = 1};
    int rc = -ENOMEM;
    Appliance__Plan *p = arena_alloc(&a, sizeof(*p));
    if (!p)
        goto done;
    appliance__plan__init(p);
    p->job_id = arena_strdup(&a, job_id);
    p->job_toml = arena_strdup(&a, spec->text);
    p->file_name = arena_strdup(&a, spec->source);
    p->seed = (uint64_t)spec->seed;
    p->max_steps = (uint64_t)spec->max_steps;
    p->global_batch = (uint32_t)spec->train.batch_size;
    p->chunk_elems = chunk_elems;
    p->model_dir = arena_strdup(&a, spec->model_dir);
    p->total_params = m->total_params;
    p->checkpoint_steps = (uint64_t)spec->checkpoint_steps;
    p->save_initial_checkpoint = spec->save_initial_checkpoint;
    if (spec->checkpoint_path[0]) {
        rc = planner__resume(spec, p, &a, err, errlen);
        if (rc < 0)
            goto done;
        rc = -ENOMEM;
    }

    /* Replicas and their batch shares: B/G each over G sample groups, the
     * remainder spread over the first groups; with spatial partitions a
     * group is K wse-nodes, one per stripe of its samples. */
    size_t nr = pm->nreplicas;
    uint64_t B = (uint64_t)spec->train.batch_size;
    unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
    /* the mode is chosen for the replica that needs the most: the largest
     * share on the most threads (the convolution workspace grows with them) */
    unsigned threads = 1;
    for (size_t i = 0; i < nr; i++)
        if (pm->replicas[i]->threads > threads)
            threads = pm->replicas[i]->threads;
    uint64_t wafer = UINT64_MAX;
    for (size_t i = 0; i < nr; i++)
        if (pm->replicas[i]->wafer_memory < wafer)
            wafer = pm->replicas[i]->wafer_memory;
    if (cap < wafer) { /* the wse-nodes of a host share its memory */
        wafer = cap;
        p->host_share = cap;
    }
    /* What one wse-node computes: the whole model, or a stripe's */
    rc = fit_choose_stripes(spec, nr, threads, wafer, chunk_elems, &ps, err, errlen);
    if (rc < 0)
        goto done;
    const jobspec *wspec = fit_stripes_spec(&ps, spec);
    /* what one wse-node computes, with this plan's decisions: a copy whose
     * layers and tensors are the compiled model's, read only */
    model wmv = *wspec->model, *wm = &wmv;
    size_t groups = nr / (size_t)ps.parts;
    uint64_t max_share = (B + groups - 1) / groups;
    p->spatial_partitions = ps.parts > 1 ? (uint32_t)ps.parts : 0;
    p->sync_batchnorm = spec->sync_batchnorm;
    p->rows_as_depth = ps.rows;
    fit_choice choice;
    rc = fit_choose(wspec, max_share, threads, wafer, &choice, err, errlen);
    if (rc < 0)
        goto done;
    rc = -ENOMEM;
    uint64_t extra = spatial_extra_bytes(&ps.sp, (int)(choice.micro ? choice.micro : max_share));
    /* every output kept, none made again, where the wafer holds them: each
     * wse-node's executor follows (Plan.keep_outputs) */
    fit_keep_outputs(wspec, max_share, threads, wafer, extra, &choice);
    fit_feed_one(wspec, max_share, threads, wafer, extra, &choice);
    uint64_t room = UINT64_MAX; /* the room of the smallest spill directory */
    for (size_t i = 0; i < nr; i++)
        if (pm->replicas[i]->disk < room)
            room = pm->replicas[i]->disk;
    fit_spill(wspec, max_share, threads, wafer, extra, nr ? room : 0, &choice);
    wm->spill_packed = choice.spill;
    p->spill_packed = choice.spill;
    wm->keep_outputs = choice.keep_outputs;
    wm->lighten = !choice.keep_costly;
    wm->feed_one = choice.feed_one;
    p->keep_outputs = choice.keep_outputs;
    p->keep_costly = choice.keep_costly;
    p->feed_credits = choice.feed_one ? 1 : 0;
    choice.need_pipe += extra;
    choice.need_ws += extra;
    uint64_t micro = choice.micro;
    p->micro_batch = (uint32_t)micro;
    uint64_t need_ws = choice.need_ws, need_pipe = choice.need_pipe;
    char a1[32], a2[32], a3[32], a4[32];
    units_format_size(need_pipe, a1, sizeof(a1));
    units_format_size(need_ws, a3, sizeof(a3));
    units_format_size(wafer, a2, sizeof(a2));
    units_format_size(m->act_bytes, a4, sizeof(a4));
    const bool pipelined = choice.mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    if (pipelined && need_pipe > wafer) {
        snprintf(err, errlen,
                 "%s: Pipelined does not fit: the weights, their gradients and optimizer state "
                 "and the activations of %llu samples need %s per replica, the smallest wafer has "
                 "%s; use mode = \"weight_streaming\" (needs %s) or \"auto\", lower "
                 "train_input.batch_size, or compute the share in micro-batches "
                 "(train_input.micro_batch_size = \"auto\")",
                 spec->source, (unsigned long long)(micro ? micro : max_share), a1, a2, a3);
        rc = -E2BIG;
        goto done;
    }
    if (!pipelined && need_ws > wafer) {
        /* the slots in parts of layers (footprint_ws_parts), if that fits */
        uint64_t part;
        need_ws = fit_ws_parts(wm, need_ws, wafer, chunk_elems, &part);
        p->ws_part_elems = part;
    }
    if (!pipelined && need_ws > wafer) {
        planner__refuse_ws(wspec, max_share, threads, states, wafer, need_ws, groups,
                           err, errlen);
        rc = -E2BIG;
        goto done;
    }
    p->mode = choice.mode;
    p->wire_bf16 = m->mixed_precision && !pipelined;

    p->n_replicas = nr;
    p->replicas = arena_alloc(&a, nr * sizeof(*p->replicas));
    uint64_t *hold = arena_alloc(&a, (nr ? nr : 1) * sizeof(uint64_t)); /* planner__hosts */
    if (!hold)
        goto done;
    uint64_t offset = 0;
    for (size_t i = 0; p->replicas && i < nr; i++) {
        Appliance__PlanReplica *r = arena_alloc(&a, sizeof(*r));
        if (!r)
            goto done;
        appliance__plan_replica__init(r);
        r->index = (uint32_t)i;
        r->member_id = pm->replicas[i]->id;
        r->addr = arena_strdup(&a, pm->replicas[i]->addr);
        size_t g = i / (size_t)ps.parts; /* its sample group */
        if (ps.parts > 1) {
            int64_t row0, rows;
            if (spatial_stripe_rows(m, ps.parts, (int)(i % (size_t)ps.parts), &row0, &rows, err,
                                    errlen) < 0) {
                rc = -EINVAL;
                goto done;
            }
            r->stripe_row0 = (uint32_t)row0;
            r->stripe_rows = (uint32_t)rows;
        }
        r->batch = (uint32_t)(B / groups + (g < B % groups ? 1 : 0));
        if (i % (size_t)ps.parts == 0 && i > 0)
            offset += p->replicas[i - 1]->batch;
        r->batch_offset = (uint32_t)offset;
        r->swarm_parent = 0;
        r->wafer_memory = pm->replicas[i]->wafer_memory;
        r->isa = pm->replicas[i]->isa;
        r->conv_block = pm->replicas[i]->conv_block;
        r->bf16 = pm->replicas[i]->bf16;
        uint64_t at_once = p->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED ? micro : 0;
        r->memory_needed = planner_replica_bytes_micro(wm, r->batch, at_once,
                                                       pm->replicas[i]->threads, p->mode, states) +
                           spatial_extra_bytes(&ps.sp, (int)(at_once ? at_once : r->batch));
        if (p->ws_part_elems) /* slots of parts rather than of whole layers */
            r->memory_needed = r->memory_needed - footprint_wslots_bytes(wm, 0, chunk_elems) +
                               footprint_wslots_bytes(wm, p->ws_part_elems, chunk_elems);
        hold[i] = r->memory_needed;
        if (pm->replicas[i]->simulated) { /* no executor: the plan's slots and batches */
            uint64_t unsim = planner_replica_bytes_unsimulated(wm, r->batch, at_once,
                                                               pm->replicas[i]->threads, p->mode);
            hold[i] = unsim < hold[i] ? hold[i] - unsim : 0;
        }
        p->replicas[i] = r;
    }

    /* Tensors, balanced over the shards by bytes (footprint_shards), none
     * more than its memoryx holds: a Pipelined job's without gradients, in
     * memory (memoryx takes the replicas' weights and state at checkpoints,
     * with no disk tier), a Weight Streaming job's in memory or in its
     * disk tier. */
    size_t nt = (size_t)m->ntensors;
    size_t ns = pm->nshards;
    footprint_sparse sp = {spec->sparsity.tensor_level, jobspec_sparsity_compact(&spec->sparsity)};
    const footprint_sparse *masks = spec->sparsity.present ? &sp : NULL;
    uint32_t *owner = arena_alloc(&a, (nt ? nt : 1) * sizeof(uint32_t));
    uint64_t *need = arena_alloc(&a, (ns ? ns : 1) * sizeof(uint64_t));
    if (!owner || !need || footprint_shards(m, states, !pipelined, masks, ns, owner, need) == UINT64_MAX)
        goto done;
    for (size_t s = 0; s < ns; s++) {
        uint64_t have = pm->shards[s]->memory, disk = pipelined ? 0 : pm->shards[s]->disk;
        if (!have || need[s] <= have || need[s] <= disk) /* in memory, or in its disk tier */
            continue;
        if (disk > have)
            have = disk;
        uint64_t total = 0, largest = 0;
        for (size_t i = 0; i < nt; i++) {
            uint64_t b = footprint_shard_bytes_of(m, i, states, !pipelined, masks);
            total += b;
            if (b > largest)
                largest = b;
        }
        char b1[32], b2[32], b3[32], b4[32];
        units_format_size(need[s], b1, sizeof(b1));
        units_format_size(have, b2, sizeof(b2));
        units_format_size(total, b3, sizeof(b3));
        units_format_size(largest, b4, sizeof(b4));
        if (pipelined && largest > have)
            snprintf(err, errlen,
                     "%s: memoryx cannot hold the model: one tensor with its optimizer state needs "
                     "%s, memoryx %s has %s of memory (a Pipelined job's checkpoints land in "
                     "memory: no disk tier); give memoryx more --memory, or mode = "
                     "\"weight_streaming\"", spec->source, b4, pm->shards[s]->name, b2);
        else if (pipelined)
            snprintf(err, errlen,
                     "%s: memoryx cannot hold the model: the weights and optimizer state need %s "
                     "in all, %s on shard %zu of %zu, memoryx %s has %s of memory (a Pipelined "
                     "job's checkpoints land in memory: no disk tier); run more memoryx shards "
                     "(runconfig.num_wgt_servers = %zu would do), give memoryx more --memory, or "
                     "mode = \"weight_streaming\"", spec->source, b3, b1, s + 1, ns,
                     pm->shards[s]->name, b2, footprint_shards_needed(m, states, false, masks, have));
        else if (largest > have)
            snprintf(err, errlen,
                     "%s: memoryx cannot hold the model: one tensor with its gradient and optimizer "
                     "state needs %s, memoryx %s has %s (in memory or its disk tier); give memoryx "
                     "more --memory or a --state-dir with more room",
                     spec->source, b4, pm->shards[s]->name, b2);
        else
            snprintf(err, errlen,
                     "%s: memoryx cannot hold the model: the weights, their gradients and optimizer "
                     "state need %s in all, %s on shard %zu of %zu, memoryx %s has %s (in memory "
                     "or its disk tier); run more memoryx shards (runconfig.num_wgt_servers = %zu "
                     "would do) or give memoryx more --memory or a --state-dir with more room",
                     spec->source, b3, b1, s + 1, ns, pm->shards[s]->name, b2,
                     footprint_shards_needed(m, states, true, masks, have));
        rc = -E2BIG;
        goto done;
    }
    p->n_tensors = nt;
    p->tensors = arena_alloc(&a, (nt ? nt : 1) * sizeof(*p->tensors));
    if (!p->tensors)
        goto done;
    for (size_t i = 0; i < nt; i++) {
        const model_tensor *t = &m->tensors[i];
        Appliance__PlanTensor *pt = arena_alloc(&a, sizeof(*pt));
        if (!pt)
            goto done;
        appliance__plan_tensor__init(pt);
        pt->id = t->id;
        pt->name = arena_strdup(&a, t->name);
        pt->n_dims = (size_t)t->ndim;
        pt->dims = arena_alloc(&a, (t->ndim > 0 ? (size_t)t->ndim : 1) * sizeof(uint64_t));
        if (!pt->dims)
            goto done;
        for (int d = 0; d < t->ndim; d++)
            pt->dims[d] = (uint64_t)t->dims[d];
        pt->shard = owner[i];
        pt->layer = (uint32_t)t->layer;
        pt->trainable = t->trainable;
        if (spec->sparsity.present && spec->sparsity.tensor_level)
            pt->sparsity = spec->sparsity.tensor_level[i];
        if (spec->sparsity.present && spec->sparsity.tensor_hp && pt->sparsity > 0) {
            if (!(pt->sparsity_level = arena_alloc(&a, sizeof(*pt->sparsity_level))))
                goto done;
            sparse_value_to_plan(&spec->sparsity.tensor_hp[i], pt->sparsity_level);
        }
        const model_init *ji = planner__job_init(m, t);
        if (!ji) {
            pt->init = arena_strdup(&a, planner__init(m, t));
            planner__fans(m, t, &pt->fan_in, &pt->fan_out);
        } else if (planner__named_init(&a, m, t, ji, pt, spec->source, err, errlen) < 0) {
            rc = -EINVAL;
            goto done;
        }
        p->tensors[i] = pt;
    }
    p->n_shards = ns;
    p->shards = arena_alloc(&a, ns * sizeof(*p->shards));
    for (size_t s = 0; p->shards && s < ns; s++) {
        Appliance__PlanShard *sh = arena_alloc(&a, sizeof(*sh));
        if (!sh)
            goto done;
        appliance__plan_shard__init(sh);
        sh->index = (uint32_t)s;
        sh->member_id = pm->shards[s]->id;
        sh->addr = arena_strdup(&a, pm->shards[s]->addr);
        for (size_t i = 0; i < nt; i++) /* its weights */
            if (owner[i] == s)
                sh->bytes += m->tensors[i].elems * sizeof(float);
        p->shards[s] = sh;
    }

    /* The tree: leaves take up to fanout replicas each; levels of up to
     * fanout nodes above them, up to one root (node 0). Nodes are numbered
     * from the root down, level by level. */
    size_t fan = (size_t)spec->swarmx_fanout;
    if (planner_direct(spec) && nr == 1 && ns == 1) { /* memoryx streams to the replica itself */
        p->replicas[0]->swarm_parent = -1;
    } else {
        size_t nsw = planner_swarm_nodes(nr, fan);
        if (pm->nswarm < nsw) {
            snprintf(err, errlen, "%s: %zu replicas with swarmx_fanout %zu need %zu swarmx nodes, "
                     "%zu are idle", spec->source, nr, fan, nsw, pm->nswarm);
            rc = -EAGAIN;
            goto done;
        }
        /* Level sizes, leaves first. */
        size_t level[64], nlevels = 0;
        for (size_t k = (nr + fan - 1) / fan;; k = (k + fan - 1) / fan) {
            level[nlevels++] = k;
            if (k == 1)
                break;
        }
        p->n_swarm = nsw;
        p->swarm = arena_alloc(&a, nsw * sizeof(*p->swarm));
        if (!p->swarm)
            goto done;
        size_t first = 0; /* index of the first node of the level being built, root level first */
        for (size_t lv = nlevels; lv-- > 0;) {
            size_t count = level[lv];
            size_t below = lv > 0 ? level[lv - 1] : nr; /* children of this level */
            size_t below_first = first + count;          /* their first index (nodes) */
            for (size_t k = 0; k < count; k++) {
                Appliance__PlanSwarmNode *sn = arena_alloc(&a, sizeof(*sn));
                if (!sn)
                    goto done;
                appliance__plan_swarm_node__init(sn);
                sn->index = (uint32_t)(first + k);
                sn->member_id = pm->swarm[first + k]->id;
                sn->addr = arena_strdup(&a, pm->swarm[first + k]->addr);
                sn->parent = lv + 1 == nlevels ? -1 : (int32_t)(first - level[lv + 1] + k / fan);
                size_t c0 = k * fan, c1 = c0 + fan < below ? c0 + fan : below;
                uint32_t *kids = arena_alloc(&a, (c1 - c0) * sizeof(uint32_t));
                if (!kids)
                    goto done;
                for (size_t c = c0; c < c1; c++)
                    kids[c - c0] = (uint32_t)(lv > 0 ? below_first + c : c);
                if (lv > 0) {
                    sn->children_swarmx = kids;
                    sn->n_children_swarmx = c1 - c0;
                } else {
                    sn->children_replicas = kids;
                    sn->n_children_replicas = c1 - c0;
                    for (size_t c = c0; c < c1; c++)
                        p->replicas[c]->swarm_parent = (int32_t)sn->index;
                }
                p->swarm[first + k] = sn;
            }
            first += count;
        }
    }

    /* Workers: num_workers_per_csx slots per replica, over the workers
     * available, round robin. */
    size_t per = (size_t)spec->num_workers_per_csx;
    p->n_workers = nr * per;
    p->workers = arena_alloc(&a, p->n_workers * sizeof(*p->workers));
    for (size_t i = 0; p->workers && i < p->n_workers; i++) {
        member *w = pm->workers[i % pm->nworkers];
        Appliance__PlanWorker *pw = arena_alloc(&a, sizeof(*pw));
        if (!pw)
            goto done;
        appliance__plan_worker__init(pw);
        pw->index = (uint32_t)i;
        pw->member_id = w->id;
        pw->addr = arena_strdup(&a, w->addr);
        pw->replica = (uint32_t)(i / per);
        pw->slot = (uint32_t)(i % per);
        pw->slots = (uint32_t)per;
        p->workers[i] = pw;
    }

    /* Layers, for people and for the schedule. */
    p->n_layers = (size_t)m->nlayers;
    p->layers = arena_alloc(&a, (p->n_layers ? p->n_layers : 1) * sizeof(*p->layers));
    p->fwd_stream = arena_alloc(&a, (nt ? nt : 1) * sizeof(uint32_t));
    p->bwd_stream = arena_alloc(&a, (nt ? nt : 1) * sizeof(uint32_t));
    p->grad_order = arena_alloc(&a, (nt ? nt : 1) * sizeof(uint32_t));
    if (!p->layers || !p->fwd_stream || !p->bwd_stream || !p->grad_order)
        goto done;
    for (int l = 0; l < m->nlayers; l++) {
        const model_layer *ml = &m->layers[l];
        Appliance__PlanLayer *pl = arena_alloc(&a, sizeof(*pl));
        if (!pl)
            goto done;
        appliance__plan_layer__init(pl);
        pl->name = arena_strdup(&a, ml->name);
        pl->type = arena_strdup(&a, layer_type_name(ml->type));
        pl->n_out_shape = (size_t)ml->out.ndim;
        pl->out_shape = arena_alloc(&a, 3 * sizeof(uint64_t));
        if (!pl->out_shape)
            goto done;
        for (int d = 0; d < ml->out.ndim; d++)
            pl->out_shape[d] = (uint64_t)ml->out.d[d];
        pl->params = ml->params;
        pl->act_bytes = ml->act_bytes;
        pl->flops = ml->flops;
        p->layers[l] = pl;
        for (int k = 0; k < ml->ntensors; k++)
            p->fwd_stream[p->n_fwd_stream++] = (uint32_t)(ml->first_tensor + k);
    }
    p->bwd_kept = planner__bwd_kept(m, p);
    uint32_t kept = 0;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        const model_layer *ml = &m->layers[l];
        /* Weight Streaming keeps two slots of weights: a layer whose
         * backward pass needs its weights gets them streamed again, but for
         * the first ones of the backward pass, still in the slots. */
        bool held = ml->ntensors > 0 && kept < p->bwd_kept;
        kept += held;
        bool again = p->mode == APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING && !held &&
                     planner__bwd_needs_weights(m, ml);
        for (int k = 0; k < ml->ntensors; k++) {
            uint32_t id = (uint32_t)(ml->first_tensor + k);
            if (again)
                p->bwd_stream[p->n_bwd_stream++] = id;
            p->grad_order[p->n_grad_order++] = id;
        }
    }

    Appliance__PlanOptimizer *opt = arena_alloc(&a, sizeof(*opt));
    if (!opt)
        goto done;
    appliance__plan_optimizer__init(opt);
    opt->type = arena_strdup(&a, spec->optimizer_type);
    opt->learning_rate = spec->learning_rate;
    opt->schedule = arena_strdup(&a, spec->lr_schedule);
    opt->warmup_steps = spec->warmup_steps;
    opt->decay_steps = spec->decay_steps ? spec->decay_steps : spec->max_steps;
    opt->end_learning_rate = spec->end_learning_rate;
    opt->step_size = spec->step_size;
    opt->gamma = spec->gamma;
    opt->momentum = spec->momentum;
    opt->dampening = spec->dampening;
    opt->nesterov = spec->nesterov;
    opt->beta1 = spec->beta1;
    opt->beta2 = spec->beta2;
    opt->eps = spec->eps;
    opt->weight_decay = spec->weight_decay;
    opt->max_gradient_norm = spec->max_gradient_norm;
    opt->no_bias_correction = !spec->correct_bias;
    if (spec->n_lr_segments > 0) {
        size_t nseg = spec->n_lr_segments;
        Appliance__PlanLrSegment *segs = arena_alloc(&a, nseg * sizeof(*segs));
        Appliance__PlanLrSegment **ptrs = arena_alloc(&a, nseg * sizeof(*ptrs));
        if (!segs || !ptrs || optim_segments_to_plan(spec->lr_segments, nseg, opt, segs, ptrs) < 0)
            goto done;
    }
    p->optimizer = opt;
    if (spec->sparsity.present && !(p->sparsity = planner__sparsity(&a, &spec->sparsity)))
        goto done;
    p->train_input = planner__input(&a, spec, &spec->train, "train");
    if (spec->eval.present) {
        p->eval_input = planner__input(&a, spec, &spec->eval, "eval");
        if (!p->eval_input)
            goto done;
        rc = planner__eval(spec, p, err, errlen);
        if (rc < 0)
            goto done;
        rc = -ENOMEM;
    }

    if (a.failed)
        goto done;
    rc = planner__hosts(m, p, pm, hold, need, pipelined, share, err, errlen);
    if (rc != 0)
        goto done;
    rc = -ENOMEM;
    *outlen = appliance__plan__get_packed_size(p);
    *out = malloc(*outlen ? *outlen : 1);
    if (!*out)
        goto done;
    appliance__plan__pack(p, *out);
    rc = 0;
done:
    if (rc == -ENOMEM)
        snprintf(err, errlen, "%s: out of memory building the plan", spec->source);
    fit_stripes_free(&ps);
    arena_free(&a);
    return rc;
}

int planner_build(const jobspec *spec, const char *job_id, const planner_members *pm,
                  uint64_t chunk_elems, uint8_t **out, size_t *outlen, char *err, size_t errlen)
{
    uint64_t share = 0, again = 0;
    int rc = planner__build(spec, job_id, pm, chunk_elems, UINT64_MAX, &share, out,
                            outlen, err, errlen);
    if (rc != 1)
        return rc;
    /* A host has too little for the plan: plan every replica within its
     * even share of its host, if that fits. */
    char first[1024], retry[1024], a[32];
    snprintf(first, sizeof(first), "%s", err);
    uint64_t wafer = UINT64_MAX;
    for (size_t i = 0; i < pm->nreplicas; i++)
        if (pm->replicas[i]->wafer_memory < wafer)
            wafer = pm->replicas[i]->wafer_memory;
    if (share > 0 && share < wafer) {
        rc = planner__build(spec, job_id, pm, chunk_elems, share, &again, out, outlen,
                            retry, sizeof(retry));
        if (rc == 0)
            return 0;
        if (rc == -ENOMEM) {
            snprintf(err, errlen, "%s", retry);
            return rc;
        }
        snprintf(err, errlen, "%s: %s; nor does the job fit with each wse-node planned within %s "
                 "(its even share of what the host has left): lower runconfig.num_csx or "
                 "train_input.batch_size, or run the job's wse-nodes on more hosts", spec->source, first,
                 units_format_size(share, a, sizeof(a)));
    } else if (share == 0) {
        snprintf(err, errlen, "%s: %s; the members other than its wse-nodes leave them no room: run "
                 "them on other hosts, or give memoryx a --memory below the host's (its disk tier "
                 "holds the rest)", spec->source, first);
    } else {
        snprintf(err, errlen, "%s: %s", spec->source, first);
    }
    return -E2BIG;
}
