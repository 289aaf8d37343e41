/* The optimizer of a job, from its plan. */
#include "optim_plan.h"

#include <errno.h>
#include <math.h>
#include <string.h>

#include "bf16.h"

int optim_from_plan(const Appliance__PlanOptimizer *po, optim_config *cfg)
{
    optim_type type;
    if (!po || optim_type_from_name(po->type, &type) < 0)
        return -EINVAL;
    optim_config_defaults(cfg, type);
    if (optim_schedule_from_name(po->schedule, &cfg->schedule) < 0)
        return -EINVAL;
    cfg->lr = (float)po->learning_rate;
    cfg->warmup_steps = po->warmup_steps;
    cfg->decay_steps = po->decay_steps;
    cfg->end_lr = (float)po->end_learning_rate;
    cfg->step_size = po->step_size;
    cfg->gamma = (float)po->gamma;
    cfg->momentum = (float)po->momentum;
    cfg->dampening = (float)po->dampening;
    cfg->nesterov = po->nesterov;
    cfg->beta1 = (float)po->beta1;
    cfg->beta2 = (float)po->beta2;
    cfg->eps = (float)po->eps;
    cfg->weight_decay = (float)po->weight_decay;
    cfg->max_gradient_norm = (float)po->max_gradient_norm;
    cfg->correct_bias = !po->no_bias_correction;
    if (po->n_lr_segments > OPTIM_MAX_SEGMENTS)
        return -EINVAL;
    cfg->nsegments = po->n_lr_segments;
    for (size_t i = 0; i < po->n_lr_segments; i++) {
        const Appliance__PlanLrSegment *ps = po->lr_segments[i];
        optim_segment *s = &cfg->segments[i];
        if (!ps || optim_sched_from_plan_name(ps->scheduler, &s->kind) < 0)
            return -EINVAL;
        s->total_iters = ps->total_iters;
        s->initial = ps->initial_learning_rate;
        s->end = ps->end_learning_rate;
        s->power = ps->power;
        s->rate = ps->decay_rate;
        s->staircase = ps->staircase;
        s->exponent = ps->step_exponent;
        s->scale = ps->scale;
        s->period = ps->period;
    }
    return optim_config_check(cfg);
}

int optim_segments_to_plan(const optim_segment *seg, size_t n, Appliance__PlanOptimizer *po,
                           Appliance__PlanLrSegment *store, Appliance__PlanLrSegment **ptrs)
{
    if (n > OPTIM_MAX_SEGMENTS)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        Appliance__PlanLrSegment *ps = &store[i];
        const optim_segment *s = &seg[i];
        appliance__plan_lr_segment__init(ps);
        ps->scheduler = (char *)optim_sched_name(s->kind);
        ps->total_iters = s->total_iters;
        ps->initial_learning_rate = s->initial;
        ps->end_learning_rate = s->end;
        ps->power = s->power;
        ps->decay_rate = s->rate;
        ps->staircase = s->staircase;
        ps->step_exponent = s->exponent;
        ps->scale = s->scale;
        ps->period = s->period;
        ptrs[i] = ps;
    }
    po->n_lr_segments = n;
    po->lr_segments = n ? ptrs : NULL;
    return 0;
}


void optim_update(const optim_config *cfg, optim_state *st, float *w, const float *g, size_t n,
                  bool trainable, float grad_scale, int64_t step)
{
    if (!trainable) {
        memcpy(w, g, n * sizeof(float));
        return;
    }
    optim_step(cfg, st, w, g, grad_scale, optim_lr_at(cfg, step));
}

/* One tensor's update, for its ranges. */
typedef struct optim_split {
    const optim_config *cfg;
    const optim_param *p;
    float scale, lr;
} optim_split;

/* Elements updated before their bfloat16 copy is rounded: 64 KiB of
 * weights, in cache still. */
#define OPTIM_W16_BLOCK 16384
/* Elements of a bfloat16 gradient widened at a time: 16 KiB of float32 on
 * the updating thread's stack. */
#define OPTIM_G16_BLOCK 4096

static void optim__range(void *ctx, size_t lo, size_t hi)
{
    const optim_split *s = ctx;
    const optim_param *p = s->p;
    float wide[OPTIM_G16_BLOCK];
    size_t block = p->g16 ? OPTIM_G16_BLOCK : p->w16 ? OPTIM_W16_BLOCK : hi - lo;
    for (size_t b = lo; b < hi; b += block) {
        size_t e = hi - b < block ? hi : b + block;
        optim_state r = optim_state_range(p->st, b, e - b);
        const float *g = p->g + b;
        if (p->g16) {
            bf16_unpack(wide, p->g16 + b, e - b);
            g = wide;
        }
        optim_step(s->cfg, &r, p->w + b, g, s->scale, s->lr);
        if (p->w16)
            bf16_pack(p->w16 + b, p->w + b, e - b);
    }
}

void optim_apply_step(const optim_config *cfg, size_t count, optim_param_fn get, void *ctx,
                      int64_t step)
{
    optim_apply_step_split(cfg, count, get, ctx, step, NULL);
}

void optim_apply_step_split(const optim_config *cfg, size_t count, optim_param_fn get, void *ctx,
                            int64_t step, optim_for_fn par)
{
    optim_param p;
    float scale = 1.0f;
    if (cfg->max_gradient_norm > 0) {
        double sum = 0;
        for (size_t i = 0; i < count; i++) {
            get(ctx, i, &p);
            if (p.trainable)
                sum += optim_sum_squares(p.g, p.n);
        }
        scale = optim_clip_scale(sqrt(sum), cfg->max_gradient_norm);
    }
    for (size_t i = 0; i < count; i++) {
        get(ctx, i, &p);
        if (!p.trainable || (!par && !p.g16)) {
            optim_update(cfg, p.st, p.w, p.g, p.n, p.trainable, scale, step);
            if (p.w16)
                bf16_pack(p.w16, p.w, p.n);
            continue;
        }
        /* the ranges (a bfloat16 gradient without par: one, a block at a
         * time) update borrowed views: the tensor's step count advances
         * once, here */
        optim_split s = {cfg, &p, scale, optim_lr_at(cfg, step)};
        int64_t t = optim_state_step(p.st);
        if (par)
            par(p.n, 32768, optim__range, &s);
        else
            optim__range(&s, 0, p.n);
        optim_state_set_step(p.st, t + 1);
    }
}

void optim_update_range(const optim_config *cfg, const optim_param *p, size_t lo, size_t hi,
                        int64_t step)
{
    if (!p->trainable) {
        memcpy(p->w + lo, p->g + lo, (hi - lo) * sizeof(float));
        if (p->w16)
            bf16_pack(p->w16 + lo, p->w + lo, hi - lo);
        return;
    }
    optim_split s = {cfg, p, 1.0f, optim_lr_at(cfg, step)};
    optim__range(&s, lo, hi);
}

void optim_update_finish(const optim_param *p)
{
    if (p->trainable)
        optim_state_set_step(p->st, optim_state_step(p->st) + 1);
}

static const char *const optim__hp_kinds[] = {
    [SPARSE_HP_CONSTANT] = "constant",
    [SPARSE_HP_LINEAR] = "linear",
    [SPARSE_HP_EXP] = "exp",
    [SPARSE_HP_COSINE] = "cosine",
};

void sparse_value_to_plan(const sparse_hp *h, Appliance__PlanSparseValue *v)
{
    appliance__plan_sparse_value__init(v);
    v->kind = (char *)optim__hp_kinds[h->kind];
    v->init = h->init;
    v->slope = h->slope;
    v->gamma = h->gamma;
    v->final = h->final;
    v->half_period = h->half_period;
    v->minimum = h->minimum;
}

int sparse_value_from_plan(const Appliance__PlanSparseValue *v, sparse_hp *h)
{
    memset(h, 0, sizeof(*h));
    if (!v)
        return 0;
    size_t k = 0;
    while (k < sizeof(optim__hp_kinds) / sizeof(optim__hp_kinds[0]) &&
           strcmp(optim__hp_kinds[k], v->kind) != 0)
        k++;
    if (k == sizeof(optim__hp_kinds) / sizeof(optim__hp_kinds[0]) || !isfinite(v->init) ||
        (k == SPARSE_HP_COSINE && !(v->half_period > 0)))
        return -EINVAL;
    h->kind = (sparse_hp_kind)k;
    h->init = v->init;
    h->slope = v->slope;
    h->gamma = v->gamma;
    h->final = v->final;
    h->half_period = v->half_period;
    h->minimum = v->minimum;
    return 0;
}

int sparse_from_plan(const Appliance__PlanSparsity *ps, sparse_config *out)
{
    memset(out, 0, sizeof(*out));
    if (!ps)
        return 0;
    if (sparse_type_from_name(ps->type, &out->type) < 0)
        return -EINVAL;
    if (strcmp(ps->init_method, "topk") == 0)
        out->init = SPARSE_INIT_TOPK;
    else if (strcmp(ps->init_method, "random") == 0 || !ps->init_method[0])
        out->init = SPARSE_INIT_RANDOM;
    else
        return -EINVAL;
    out->seed = ps->seed;
    if (ps->init_scale && strcmp(ps->init_scale, "fan_in") == 0)
        out->init_scale_fan_in = true;
    else if (ps->init_scale && ps->init_scale[0] && strcmp(ps->init_scale, "none") != 0)
        return -EINVAL;
    out->schedule = (sparse_schedule){ps->freq, ps->start, ps->stop};
    bool dynamic = out->type != SPARSE_STATIC;
    if (dynamic && (ps->freq < 1 || ps->start < 0 || (ps->stop != 0 && ps->stop <= ps->start)))
        return -EINVAL;
    if (sparse_value_from_plan(ps->level, &out->level) < 0 ||
        sparse_value_from_plan(ps->drop_fraction, &out->drop_fraction) < 0)
        return -EINVAL;
    return 0;
}
