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
