/* Optimizers, learning-rate schedules and gradient clipping. Updates run
 * in float per element; bias corrections and norms in double. */
#include "optim.h"
#include "pages.h"

#include <errno.h>
#include <math.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

static const char *const type_names[] = {
    [OPTIM_SGD] = "sgd",
    [OPTIM_ADAM] = "adam",
    [OPTIM_ADAMW] = "adamw",
};

static const char *const schedule_names[] = {
    [OPTIM_LR_CONSTANT] = "constant",
    [OPTIM_LR_COSINE] = "cosine",
    [OPTIM_LR_STEP] = "step",
};

int optim_type_from_name(const char *name, optim_type *out)
{
    for (size_t i = 0; name && i < sizeof(type_names) / sizeof(type_names[0]); i++) {
        if (strcasecmp(name, type_names[i]) == 0) {
            *out = (optim_type)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *optim_type_name(optim_type type)
{
    if ((unsigned)type >= sizeof(type_names) / sizeof(type_names[0]))
        return "unknown";
    return type_names[type];
}

int optim_schedule_from_name(const char *name, optim_schedule *out)
{
    for (size_t i = 0; name && i < sizeof(schedule_names) / sizeof(schedule_names[0]); i++) {
        if (strcasecmp(name, schedule_names[i]) == 0) {
            *out = (optim_schedule)i;
            return 0;
        }
    }
    return -EINVAL;
}

const char *optim_schedule_name(optim_schedule schedule)
{
    if ((unsigned)schedule >= sizeof(schedule_names) / sizeof(schedule_names[0]))
        return "unknown";
    return schedule_names[schedule];
}

/* The Model Zoo's names (lower case, without "lr") and the plan's. */
static const struct {
    const char *zoo;
    optim_sched kind;
    bool power_one;
} sched_zoo[] = {
    {"constant", OPTIM_SCHED_CONSTANT, false},
    {"linear", OPTIM_SCHED_POLYNOMIAL, true},
    {"polynomial", OPTIM_SCHED_POLYNOMIAL, false},
    {"exponential", OPTIM_SCHED_EXPONENTIAL, false},
    {"inverseexponentialtimedecay", OPTIM_SCHED_INVERSE_EXP_TIME, false},
    {"inversesquarerootdecay", OPTIM_SCHED_INVERSE_SQRT, false},
    {"cosinedecay", OPTIM_SCHED_COSINE_DECAY, false},
    {"step", OPTIM_SCHED_STEP, false},
    {"cosineannealing", OPTIM_SCHED_COSINE_ANNEALING, false},
};

static const char *const sched_names[] = {
    [OPTIM_SCHED_CONSTANT] = "constant",
    [OPTIM_SCHED_POLYNOMIAL] = "polynomial",
    [OPTIM_SCHED_EXPONENTIAL] = "exponential",
    [OPTIM_SCHED_INVERSE_EXP_TIME] = "inverse_exponential_time_decay",
    [OPTIM_SCHED_INVERSE_SQRT] = "inverse_square_root_decay",
    [OPTIM_SCHED_COSINE_DECAY] = "cosine_decay",
    [OPTIM_SCHED_STEP] = "step",
    [OPTIM_SCHED_COSINE_ANNEALING] = "cosine_annealing",
};

int optim_sched_from_name(const char *name, optim_sched *out, bool *power_one)
{
    size_t n = name ? strlen(name) : 0;
    if (n > 2 && strcasecmp(name + n - 2, "lr") == 0)
        n -= 2;
    for (size_t i = 0; n && i < sizeof(sched_zoo) / sizeof(sched_zoo[0]); i++) {
        if (strlen(sched_zoo[i].zoo) == n && strncasecmp(name, sched_zoo[i].zoo, n) == 0) {
            *out = sched_zoo[i].kind;
            if (power_one)
                *power_one = sched_zoo[i].power_one;
            return 0;
        }
    }
    return -EINVAL;
}

const char *optim_sched_name(optim_sched kind)
{
    if ((unsigned)kind >= OPTIM_SCHED_COUNT)
        return "unknown";
    return sched_names[kind];
}

int optim_sched_from_plan_name(const char *name, optim_sched *out)
{
    for (unsigned i = 0; name && i < OPTIM_SCHED_COUNT; i++) {
        if (strcmp(name, sched_names[i]) == 0) {
            *out = (optim_sched)i;
            return 0;
        }
    }
    return -EINVAL;
}

/* x is a finite number >= 0 (NaN fails). */
static bool optim__rate_ok(double x)
{
    return x >= 0 && isfinite(x);
}

int optim_segments_check(const optim_segment *seg, size_t n)
{
    if (n > OPTIM_MAX_SEGMENTS)
        return -EINVAL;
    for (size_t i = 0; i < n; i++) {
        const optim_segment *s = &seg[i];
        bool last = i + 1 == n;
        if ((unsigned)s->kind >= OPTIM_SCHED_COUNT || s->total_iters < 0 ||
            (!last && s->total_iters < 1) || !optim__rate_ok(s->initial))
            return -EINVAL;
        switch (s->kind) {
        case OPTIM_SCHED_CONSTANT:
            break;
        case OPTIM_SCHED_POLYNOMIAL:
            if (s->total_iters < 1 || !optim__rate_ok(s->end) || !isfinite(s->power))
                return -EINVAL;
            break;
        case OPTIM_SCHED_EXPONENTIAL:
            if (s->total_iters < 1 || !optim__rate_ok(s->rate))
                return -EINVAL;
            break;
        case OPTIM_SCHED_INVERSE_EXP_TIME:
            if (s->total_iters < 1 || !optim__rate_ok(s->rate) || !isfinite(s->exponent))
                return -EINVAL;
            break;
        case OPTIM_SCHED_INVERSE_SQRT:
            if (s->period < 1 || !optim__rate_ok(s->scale))
                return -EINVAL;
            break;
        case OPTIM_SCHED_COSINE_DECAY:
            if (s->total_iters < 1 || !optim__rate_ok(s->end))
                return -EINVAL;
            break;
        case OPTIM_SCHED_STEP:
            if (s->period < 1 || !optim__rate_ok(s->rate))
                return -EINVAL;
            break;
        case OPTIM_SCHED_COSINE_ANNEALING:
            if (s->period < 1 || !optim__rate_ok(s->end))
                return -EINVAL;
            break;
        default:
            return -EINVAL;
        }
    }
    return 0;
}

/* The rate of one scheduler at its own step t >= 0, in double (the Model
 * Zoo computes it in float32 tensors: the two agree to float32's
 * rounding). */
static double optim__segment_lr(const optim_segment *s, int64_t t)
{
    double x = (double)t, n = (double)s->total_iters;
    switch (s->kind) {
    case OPTIM_SCHED_POLYNOMIAL:
        /* (cycle, which the Model Zoo accepts, changes nothing: its
         * multiple of total_iters is 1 below total_iters, and from there
         * on the end rate holds) */
        if (t >= s->total_iters)
            return s->end;
        return s->end + (s->initial - s->end) * pow(1.0 - x / n, s->power);
    case OPTIM_SCHED_EXPONENTIAL: {
        double p = x / n;
        return s->initial * pow(s->rate, s->staircase ? floor(p) : p);
    }
    case OPTIM_SCHED_INVERSE_EXP_TIME: {
        double a = pow(x, s->exponent) / n;
        return s->initial / (1.0 + s->rate * (s->staircase ? floor(a) : a));
    }
    case OPTIM_SCHED_INVERSE_SQRT:
        return s->initial * s->scale / sqrt(t > s->period ? x : (double)s->period);
    case OPTIM_SCHED_COSINE_DECAY: {
        double c = t < s->total_iters ? x : n;
        return s->end + (s->initial - s->end) * 0.5 * (1.0 + cos(M_PI * c / n));
    }
    case OPTIM_SCHED_STEP:
        return s->initial * pow(s->rate, (double)(t / s->period));
    case OPTIM_SCHED_COSINE_ANNEALING:
        return s->end + (s->initial - s->end) * 0.5 * (1.0 + cos(M_PI * x / (double)s->period));
    case OPTIM_SCHED_CONSTANT:
    default:
        return s->initial;
    }
}

void optim_config_defaults(optim_config *cfg, optim_type type)
{
    memset(cfg, 0, sizeof(*cfg));
    cfg->type = type;
    cfg->lr = type == OPTIM_SGD ? 0.01f : 1e-3f;
    cfg->schedule = OPTIM_LR_CONSTANT;
    cfg->decay_steps = 1;
    cfg->step_size = 1;
    cfg->gamma = 1.0f;
    cfg->beta1 = 0.9f;
    cfg->beta2 = 0.999f;
    cfg->eps = 1e-8f;
    cfg->weight_decay = type == OPTIM_ADAMW ? 0.01f : 0.0f;
    cfg->correct_bias = true;
}

int optim_config_check(const optim_config *cfg)
{
    if ((unsigned)cfg->type > OPTIM_ADAMW ||
        (unsigned)cfg->schedule > OPTIM_LR_STEP)
        return -EINVAL;
    /* written so that NaN fails every test */
    if (!(cfg->lr >= 0) || !(cfg->weight_decay >= 0) ||
        !(cfg->max_gradient_norm >= 0) || cfg->warmup_steps < 0)
        return -EINVAL;
    if (optim_segments_check(cfg->segments, cfg->nsegments) < 0)
        return -EINVAL;
    if (cfg->schedule == OPTIM_LR_COSINE &&
        (cfg->decay_steps <= 0 || !(cfg->end_lr >= 0)))
        return -EINVAL;
    if (cfg->schedule == OPTIM_LR_STEP &&
        (cfg->step_size <= 0 || !(cfg->gamma >= 0)))
        return -EINVAL;
    if (cfg->type == OPTIM_SGD) {
        if (!(cfg->momentum >= 0) || !(cfg->dampening >= 0 && cfg->dampening <= 1))
            return -EINVAL;
        if (cfg->nesterov && (cfg->momentum <= 0 || cfg->dampening != 0))
            return -EINVAL;
    } else {
        if (!(cfg->beta1 >= 0 && cfg->beta1 < 1) ||
            !(cfg->beta2 >= 0 && cfg->beta2 < 1) || !(cfg->eps >= 0))
            return -EINVAL;
    }
    return 0;
}

float optim_lr_at(const optim_config *cfg, int64_t step)
{
    if (step < 0)
        step = 0;
    if (cfg->nsegments > 0) {
        int64_t start = 0;
        for (size_t i = 0;; i++) {
            const optim_segment *s = &cfg->segments[i];
            if (i + 1 == cfg->nsegments || step - start < s->total_iters)
                return (float)optim__segment_lr(s, step - start);
            start += s->total_iters;
        }
    }
    if (step < cfg->warmup_steps)
        return (float)((double)cfg->lr * (double)(step + 1) / (double)cfg->warmup_steps);
    int64_t t = step - cfg->warmup_steps;
    switch (cfg->schedule) {
    case OPTIM_LR_COSINE:
        if (t >= cfg->decay_steps)
            return cfg->end_lr;
        return (float)(cfg->end_lr + (cfg->lr - (double)cfg->end_lr) * 0.5 *
                                         (1.0 + cos(M_PI * (double)t / (double)cfg->decay_steps)));
    case OPTIM_LR_STEP:
        return (float)(cfg->lr * pow(cfg->gamma, (double)(t / cfg->step_size)));
    case OPTIM_LR_CONSTANT:
    default:
        return cfg->lr;
    }
}

double optim_sum_squares_add(double s, const float *g, size_t n)
{
    for (size_t i = 0; i < n; i++)
        s += (double)g[i] * g[i];
    return s;
}

double optim_sum_squares(const float *g, size_t n)
{
    return optim_sum_squares_add(0.0, g, n);
}

double optim_global_norm(const float *const *grads, const size_t *sizes,
                         size_t count)
{
    double s = 0.0;
    for (size_t i = 0; i < count; i++)
        s += optim_sum_squares(grads[i], sizes[i]);
    return sqrt(s);
}

float optim_clip_scale(double norm, float max_norm)
{
    if (!(max_norm > 0))
        return 1.0f;
    if (!isfinite(norm))
        return NAN;
    double c = max_norm / (norm + 1e-6);
    return c < 1.0 ? (float)c : 1.0f;
}

static int optim__state_names(optim_state *st, const optim_config *cfg, size_t n)
{
    memset(st, 0, sizeof(*st));
    if (optim_config_check(cfg) < 0)
        return -EINVAL;
    st->type = cfg->type;
    st->n = n;
    if (cfg->type == OPTIM_SGD) {
        if (cfg->momentum > 0)
            st->name[st->count++] = "momentum_buffer";
    } else {
        st->name[st->count++] = "exp_avg";
        st->name[st->count++] = "exp_avg_sq";
    }
    return 0;
}

int optim_state_init_at(optim_state *st, const optim_config *cfg, size_t n, float *const *bufs)
{
    if (optim__state_names(st, cfg, n) < 0)
        return -EINVAL;
    for (size_t i = 0; i < st->count; i++)
        st->tensor[i] = bufs[i];
    st->borrowed = 1;
    return 0;
}

optim_state optim_state_range(const optim_state *st, size_t off, size_t n)
{
    optim_state r = *st;
    r.n = n;
    r.borrowed = 1;
    for (size_t i = 0; i < r.count; i++)
        r.tensor[i] = st->tensor[i] + off;
    return r;
}

int optim_state_init(optim_state *st, const optim_config *cfg, size_t n)
{
    if (optim__state_names(st, cfg, n) < 0)
        return -EINVAL;
    for (size_t i = 0; i < st->count; i++) {
        st->tensor[i] = calloc(n ? n : 1, sizeof(float));
        if (!st->tensor[i]) {
            optim_state_deinit(st);
            return -ENOMEM;
        }
    }
    return 0;
}

void optim_state_deinit(optim_state *st)
{
    for (size_t i = 0; !st->borrowed && i < OPTIM_MAX_STATE; i++)
        pages_free(st->tensor[i]);
    memset(st, 0, sizeof(*st));
}

size_t optim_state_count(const optim_state *st)
{
    return st->count;
}

float *optim_state_tensor(optim_state *st, size_t i, const char **name,
                          size_t *count)
{
    if (i >= st->count)
        return NULL;
    if (name)
        *name = st->name[i];
    if (count)
        *count = st->n;
    return st->tensor[i];
}

float *optim_state_find(optim_state *st, const char *name, size_t *count)
{
    for (size_t i = 0; i < st->count; i++)
        if (strcmp(st->name[i], name) == 0)
            return optim_state_tensor(st, i, NULL, count);
    return NULL;
}

int64_t optim_state_step(const optim_state *st)
{
    return st->step;
}

void optim_state_set_step(optim_state *st, int64_t step)
{
    st->step = step;
}

/* The updates' loops take one element at a time, each on its own: built at
 * -O3 with -ffp-contract=off (meson.build), they vectorize and every
 * product is still rounded before it is added, so each clone (AVX-512,
 * AVX2, SSE2) gives the bits of the scalar loop. */
#define OPTIM_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

OPTIM_CLONES
static void sgd_loop(size_t n, float *restrict w, const float *restrict g, float *restrict buf,
                     float gs, float wd, float mom, float damp, float lr, bool first, bool nesterov)
{
    if (!buf) {
        for (size_t i = 0; i < n; i++)
            w[i] -= lr * (g[i] * gs + wd * w[i]);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        float d = g[i] * gs + wd * w[i];
        float b = first ? d : mom * buf[i] + damp * d;
        buf[i] = b;
        w[i] -= lr * (nesterov ? d + mom * b : b);
    }
}

static void sgd_step(const optim_config *cfg, optim_state *st, float *w,
                     const float *g, float gs, float lr)
{
    /* w, g, buf (n) */
    sgd_loop(st->n, w, g, st->count ? st->tensor[0] : NULL, gs, cfg->weight_decay, cfg->momentum,
             1.0f - cfg->dampening, lr, st->step == 0, cfg->nesterov);
}

OPTIM_CLONES
static void adam_loop(size_t n, float *restrict w, const float *restrict g, float *restrict m,
                      float *restrict v, float gs, float l2, float keep, float b1, float b2,
                      float eps, float step_size, float inv_sqrt_bc2)
{
    for (size_t i = 0; i < n; i++) {
        float wi = w[i] * keep;
        float d = g[i] * gs + l2 * w[i];
        float mi = b1 * m[i] + (1.0f - b1) * d;
        float vi = b2 * v[i] + (1.0f - b2) * d * d;
        m[i] = mi;
        v[i] = vi;
        w[i] = wi - step_size * mi / (sqrtf(vi) * inv_sqrt_bc2 + eps);
    }
}

static void adam_step(const optim_config *cfg, optim_state *st, float *w,
                      const float *g, float gs, float lr)
{
    /* w, g, m, v (n) */
    double t = (double)(st->step + 1);
    double bc1 = 1.0 - pow(cfg->beta1, t), bc2 = 1.0 - pow(cfg->beta2, t);
    if (!cfg->correct_bias)
        bc1 = bc2 = 1.0;
    float step_size = (float)(lr / bc1);
    float inv_sqrt_bc2 = (float)(1.0 / sqrt(bc2));
    float l2 = cfg->type == OPTIM_ADAM ? cfg->weight_decay : 0.0f;
    float keep = cfg->type == OPTIM_ADAMW ? 1.0f - lr * cfg->weight_decay : 1.0f;
    adam_loop(st->n, w, g, st->tensor[0], st->tensor[1], gs, l2, keep, cfg->beta1, cfg->beta2,
              cfg->eps, step_size, inv_sqrt_bc2);
}

void optim_step(const optim_config *cfg, optim_state *st, float *w,
                const float *g, float grad_scale, float lr)
{
    if (cfg->type == OPTIM_SGD)
        sgd_step(cfg, st, w, g, grad_scale, lr);
    else
        adam_step(cfg, st, w, g, grad_scale, lr);
    st->step++;
}
