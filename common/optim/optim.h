/* Optimizers applied to parameter tensors: SGD (momentum, Nesterov), Adam
 * and AdamW with PyTorch's update rules, learning-rate schedules (the
 * appliance's own, and the Cerebras Model Zoo's schedulers run one after
 * another) and global gradient-norm clipping. The state of each parameter tensor is a set of
 * named tensors plus a step counter that a checkpoint writer can enumerate
 * and restore. */
#ifndef OPTIM_H
#define OPTIM_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum optim_type {
    OPTIM_SGD,      /* SGD, optional momentum / Nesterov / L2 decay */
    OPTIM_ADAM,     /* Adam, weight decay as L2 added to the gradient */
    OPTIM_ADAMW,    /* Adam with decoupled weight decay */
} optim_type;

typedef enum optim_schedule {
    OPTIM_LR_CONSTANT,  /* lr */
    OPTIM_LR_COSINE,    /* cosine from lr to end_lr over decay_steps */
    OPTIM_LR_STEP,      /* lr * gamma^floor(t / step_size) */
} optim_schedule;

/* The Model Zoo's schedulers (cerebras.pytorch.optim.lr_scheduler), as
 * closed forms of t, the step counted from the scheduler's start (0 at its
 * first update). PiecewiseConstant and MultiStep are runs of constants;
 * Linear is Polynomial of power 1. */
typedef enum optim_sched {
    OPTIM_SCHED_CONSTANT,         /* initial */
    OPTIM_SCHED_POLYNOMIAL,       /* end + (initial - end) (1 - t / total_iters)^power,
                                     end from t = total_iters on */
    OPTIM_SCHED_EXPONENTIAL,      /* initial rate^(t / total_iters) (staircase: the exponent
                                     floored) */
    OPTIM_SCHED_INVERSE_EXP_TIME, /* initial / (1 + rate t^exponent / total_iters) (staircase:
                                     the quotient floored) */
    OPTIM_SCHED_INVERSE_SQRT,     /* initial scale / sqrt(max(t, period)) */
    OPTIM_SCHED_COSINE_DECAY,     /* end + (initial - end) (1 + cos(pi min(t, total_iters) /
                                     total_iters)) / 2 */
    OPTIM_SCHED_STEP,             /* initial rate^floor(t / period) */
    OPTIM_SCHED_COSINE_ANNEALING, /* end + (initial - end) (1 + cos(pi t / period)) / 2 (no
                                     clamp: it rises again after period) */
    OPTIM_SCHED_COUNT,
} optim_sched;

/* Schedules a list may hold (a PiecewiseConstant or MultiStep counts one
 * per piece). */
#define OPTIM_MAX_SEGMENTS 16

/* One scheduler of a list. Each but the last runs for total_iters steps,
 * then the next starts from its own t = 0; the last runs to the end. */
typedef struct optim_segment {
    optim_sched kind;
    int64_t total_iters; /* steps it runs (>= 1, but 0 for a last one that needs none); the
                            decay length of polynomial, exponential, inverse time and
                            cosine decay */
    double initial;      /* initial_learning_rate (constant: learning_rate), >= 0 */
    double end;          /* end_learning_rate (polynomial, cosine decay), eta_min (cosine
                            annealing), >= 0 */
    double power;        /* polynomial: exponent (Linear: 1) */
    double rate;         /* decay_rate (exponential, inverse time), gamma (step) */
    bool staircase;      /* exponential, inverse time: floor the exponent or quotient */
    double exponent;     /* inverse time: step_exponent */
    double scale;        /* inverse sqrt: factor */
    int64_t period;      /* step: step_size; cosine annealing: T_max; inverse sqrt:
                            warmup_steps; >= 1 */
} optim_segment;

/* Everything that defines an optimizer. optim_config_defaults fills it. */
typedef struct optim_config {
    optim_type type;
    float lr;                 /* base learning rate, >= 0 */
    optim_schedule schedule;  /* schedule after the warm-up */
    int64_t warmup_steps;     /* linear warm-up length, 0 for none */
    int64_t decay_steps;      /* cosine: steps from lr to end_lr, > 0 */
    float end_lr;             /* cosine: learning rate after decay_steps */
    int64_t step_size;        /* step decay: steps between decays, > 0 */
    float gamma;              /* step decay: factor per decay */
    float momentum;           /* SGD momentum, >= 0 (0: no buffer) */
    float dampening;          /* SGD dampening, in [0, 1] */
    int nesterov;             /* SGD Nesterov momentum (needs momentum > 0
                                 and dampening 0) */
    float beta1, beta2;       /* Adam moment decay rates, in [0, 1) */
    float eps;                /* Adam denominator term, >= 0 */
    float weight_decay;       /* >= 0: L2 for SGD and Adam, decoupled for
                                 AdamW */
    float max_gradient_norm;  /* global-norm clipping threshold, 0 for none */
    bool correct_bias;        /* Adam, AdamW: divide by 1 - beta^t (true by default;
                                 false: the Model Zoo's correct_bias = false, BERT's) */
    /* The Model Zoo's schedule: when nsegments > 0, it gives the rate and
     * lr, schedule, warmup_steps and the keys of those schedules are not
     * used. */
    size_t nsegments;
    optim_segment segments[OPTIM_MAX_SEGMENTS];
} optim_config;

/* The type named "sgd", "adam" or "adamw" (any case). Returns 0, or
 * -EINVAL for any other name (out untouched). */
int optim_type_from_name(const char *name, optim_type *out);
const char *optim_type_name(optim_type type);

/* The schedule named "constant", "cosine" or "step" (any case). Returns 0
 * or -EINVAL. */
int optim_schedule_from_name(const char *name, optim_schedule *out);
const char *optim_schedule_name(optim_schedule schedule);

/* The scheduler a Model Zoo name means, in any case, with or without its
 * "LR" suffix: "Constant", "Linear" (polynomial of power 1), "Polynomial",
 * "Exponential", "InverseExponentialTimeDecay", "InverseSquareRootDecay",
 * "CosineDecay", "Step", "CosineAnnealing". *power_one is set for Linear.
 * PiecewiseConstant and MultiStep are not one scheduler (their caller makes
 * runs of constants of them). Returns 0 or -EINVAL. */
int optim_sched_from_name(const char *name, optim_sched *out, bool *power_one);
/* The name of a kind, as the plan carries it ("constant", "polynomial",
 * "exponential", "inverse_exponential_time_decay",
 * "inverse_square_root_decay", "cosine_decay", "step", "cosine_annealing"),
 * and back (exact). */
const char *optim_sched_name(optim_sched kind);
int optim_sched_from_plan_name(const char *name, optim_sched *out);

/* Returns 0 if the segments make a schedule optim_lr_at can follow (each
 * kind known, rates finite and >= 0, every one but the last of at least one
 * step, the lengths and periods its formula divides by >= 1), -EINVAL
 * otherwise. */
int optim_segments_check(const optim_segment *seg, size_t n);

/* PyTorch's defaults for type: lr 1e-3 (0.01 for SGD), betas 0.9 and
 * 0.999, eps 1e-8, weight decay 0 (0.01 for AdamW), no momentum, constant
 * schedule, no warm-up, no clipping, bias correction. */
void optim_config_defaults(optim_config *cfg, optim_type type);

/* Returns 0 if cfg is usable, -EINVAL otherwise. */
int optim_config_check(const optim_config *cfg);

/* Learning rate of the update with 0-based index step (the Model Zoo's too:
 * its first update uses its scheduler's step 0). With segments: the one
 * whose span holds step, at t = step - its start. Otherwise: during the warm-up
 * (step < warmup_steps) it rises linearly, lr * (step + 1) / warmup_steps,
 * so the first update is not wasted and the last warm-up step uses lr.
 * From then on t = step - warmup_steps drives the schedule:
 * constant: lr; cosine: end_lr + (lr - end_lr) * (1 + cos(pi t /
 * decay_steps)) / 2 up to t = decay_steps, end_lr after; step:
 * lr * gamma^floor(t / step_size). */
float optim_lr_at(const optim_config *cfg, int64_t step);

/* Sum of squares of g (n), in double: partial sums of shards add up to the
 * square of the global norm. */
double optim_sum_squares(const float *g, size_t n);

/* The L2 norm of the concatenation of `count` tensors grads[i] (sizes[i]
 * elements each). */
double optim_global_norm(const float *const *grads, const size_t *sizes,
                         size_t count);

/* The factor to multiply every gradient by so that the global norm is at
 * most max_norm: min(1, max_norm / (norm + 1e-6)), as PyTorch's
 * clip_grad_norm_. 1 when max_norm <= 0 (no clipping). NAN when norm is
 * not finite: the caller should skip the step. */
float optim_clip_scale(double norm, float max_norm);

#define OPTIM_MAX_STATE 2

/* Optimizer state of one parameter tensor. */
typedef struct optim_state {
    optim_type type;                   /* the config it was made for */
    size_t n;                          /* elements of the parameter */
    int64_t step;                      /* updates applied so far */
    size_t count;                      /* state tensors in use */
    float *tensor[OPTIM_MAX_STATE];    /* owned, n floats each, zeroed */
    const char *name[OPTIM_MAX_STATE]; /* "momentum_buffer", "exp_avg",
                                          "exp_avg_sq" */
    int borrowed;                      /* the tensors are the caller's
                                          (optim_state_init_at) */
} optim_state;

/* Sets up the state of a tensor of n elements for cfg: SGD with momentum
 * has "momentum_buffer", Adam and AdamW "exp_avg" and "exp_avg_sq", all
 * zero, step 0. Returns 0, -EINVAL for a bad config, -ENOMEM. */
int optim_state_init(optim_state *st, const optim_config *cfg, size_t n);

/* optim_state_init with the state tensors at bufs[i] (n floats each, as
 * many as the optimizer keeps: optim_state_count), owned by the caller and
 * left as they are (a resumed or zeroed store). */
int optim_state_init_at(optim_state *st, const optim_config *cfg, size_t n, float *const *bufs);

/* The state of elements [off, off + n) of st's tensor, sharing st's
 * tensors and step: optim_step on it updates that range as a step of the
 * whole tensor would (the optimizers work element by element), except that
 * st's step count is the caller's to advance once the whole tensor is
 * done. */
optim_state optim_state_range(const optim_state *st, size_t off, size_t n);

/* s plus the sum of squares of g (n) in double, in index order:
 * optim_sum_squares of a tensor is the chain of this over its pieces. */
double optim_sum_squares_add(double s, const float *g, size_t n);

/* Frees the state tensors; st may then be initialised again. */
void optim_state_deinit(optim_state *st);

/* Number of named state tensors, for checkpoint writers. */
size_t optim_state_count(const optim_state *st);

/* The i-th state tensor (i < optim_state_count), its name and element
 * count (each out pointer may be NULL). The tensor stays owned by st; a
 * checkpoint reader restores by writing into it. NULL if i is out of
 * range. */
float *optim_state_tensor(optim_state *st, size_t i, const char **name,
                          size_t *count);

/* The state tensor called name, or NULL. */
float *optim_state_find(optim_state *st, const char *name, size_t *count);

/* The step counter (updates applied); restore it with the tensors. */
int64_t optim_state_step(const optim_state *st);
void optim_state_set_step(optim_state *st, int64_t step);

/* Applies one update to w (st->n elements) from gradient g times
 * grad_scale (the clipping factor, 1 for none) with learning rate lr (from
 * optim_lr_at), and advances st->step. PyTorch's rules:
 * SGD: g += wd w; buf = g on the first step, else momentum buf +
 *   (1 - dampening) g; g = g + momentum buf (Nesterov) or buf; w -= lr g.
 * Adam: g += wd w; m = b1 m + (1 - b1) g; v = b2 v + (1 - b2) g^2;
 *   w -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps), t = step + 1;
 *   without correct_bias: w -= lr * m / (sqrt(v) + eps).
 * AdamW: w *= 1 - lr wd, then Adam without the L2 term. */
void optim_step(const optim_config *cfg, optim_state *st, float *w,
                const float *g, float grad_scale, float lr);

#endif
