/* Sparsity of parameter tensors: the Model Zoo's sparsity types (static,
 * GMP, SET, RigL), their schedules, and the mask rules memoryx applies.
 * A mask is one byte an element (1: kept, 0: pruned); a pruned weight is
 * an exact zero, and so is its optimizer state. Every choice is a top-k
 * over a score, ties going to the lower index, so that a rule gives the
 * same mask wherever it runs (tests/memoryx/sparse_ref.py is the same rule
 * in numpy). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

typedef enum sparse_type {
    SPARSE_NONE = 0,  /* dense */
    SPARSE_STATIC,    /* the mask chosen at the start never changes */
    SPARSE_GMP,       /* gradual magnitude pruning to the scheduled level */
    SPARSE_SET,       /* drop the smallest magnitudes, regrow at random */
    SPARSE_RIGL,      /* drop the smallest magnitudes, regrow the largest gradients */
} sparse_type;

typedef enum sparse_init {
    SPARSE_INIT_RANDOM, /* kept positions drawn at random (seeded) */
    SPARSE_INIT_TOPK,   /* the largest magnitudes kept */
} sparse_init;

/* A value over steps: a level (GMP) or a drop fraction (SET, RigL). */
typedef enum sparse_hp_kind {
    SPARSE_HP_CONSTANT, /* init */
    SPARSE_HP_LINEAR,   /* init + slope * step */
    SPARSE_HP_EXP,      /* final + (init - final) * exp(-gamma * step) */
    SPARSE_HP_COSINE,   /* minimum + (init - minimum) * (1 + cos(pi * step / half_period)) / 2 */
} sparse_hp_kind;

typedef struct sparse_hp {
    sparse_hp_kind kind;
    double init;        /* the value at step 0 */
    double slope;       /* linear */
    double gamma;       /* exp: the rate, > 0 */
    double final;       /* exp: the value it tends to */
    double half_period; /* cosine: steps from init down to minimum */
    double minimum;     /* cosine */
} sparse_hp;

/* The value of h at step, clamped to [0, hi]. */
double sparse_hp_at(const sparse_hp *h, int64_t step, double hi);

/* When a dynamic type's mask changes: after the update of step s (the
 * s-th update, counted from 1) when start <= s, s < stop (stop 0: no end)
 * and (s - start) is a multiple of freq. */
typedef struct sparse_schedule {
    int64_t freq;       /* >= 1 */
    int64_t start;      /* >= 0 */
    int64_t stop;       /* 0: none; else > start */
} sparse_schedule;

bool sparse_is_update_step(const sparse_schedule *s, int64_t step);

/* A job's sparsity as memoryx applies it (the plan's PlanSparsity). */
typedef struct sparse_config {
    sparse_type type;           /* SPARSE_NONE: dense */
    sparse_init init;
    uint64_t seed;              /* the masks' (sparse_key) */
    sparse_schedule schedule;   /* gmp, set, rigl */
    sparse_hp level;            /* gmp: the level at each step */
    sparse_hp drop_fraction;    /* set, rigl */
    bool init_scale_fan_in;     /* init_scale "fan_in": sparse_mask_scale_fan_in on the
                                   first masks of weights made, not loaded */
} sparse_config;

/* Whether the mask changes after the update of step (counted from 1). */
bool sparse_config_updates(const sparse_config *c, int64_t step);

/* "static", "gmp", "set", "rigl" (NULL for none); and back (-EINVAL). */
const char *sparse_type_name(sparse_type t);
int sparse_type_from_name(const char *name, sparse_type *out);

/* A seeded score in [0, 1) for element i at step (key: a tensor's, from
 * sparse_key): a counter-based hash (splitmix64), the same in any order. */
uint64_t sparse_key(uint64_t seed, uint32_t tensor_id);
double sparse_random(uint64_t key, int64_t step, uint64_t i);

/* Elements kept of n at level (the fraction pruned): n - round(level * n),
 * halves to even (numpy's round), at least 1 when n > 0. */
uint64_t sparse_keep_count(uint64_t n, double level);

/* The first mask of a tensor: the sparse_keep_count(n, level) positions of
 * the largest |w| (topk) or of the largest sparse_random(key, 0, i)
 * (random) kept. mask has n bytes. Returns 0 or -ENOMEM. */
int sparse_mask_init(uint8_t *mask, const float *w, uint64_t n, double level, sparse_init how,
                     uint64_t key);
/* The same written as bits (bit i%8 of byte i/8: 1 kept, into bits of
 * (n + 7) / 8 bytes, zeros first), never a byte an element: a random mask
 * reads no weight (w may be NULL). */
int sparse_mask_init_bits(uint8_t *bits, const float *w, uint64_t n, double level,
                          sparse_init how, uint64_t key);

/* GMP at a step: the keep largest |w| of the kept positions stay (pruned
 * ones rank below every kept one, by index), the rest is pruned. Returns 0
 * or -ENOMEM. */
int sparse_mask_gmp(uint8_t *mask, const float *w, uint64_t n, uint64_t keep);

/* SET (grad NULL) or RigL at a step: of the k kept positions,
 * round(drop_fraction * k) with the smallest |w| are dropped; as many are
 * regrown among every position not kept after the drop (the dropped ones
 * included): those of the largest sparse_random(key, step, i) (SET) or
 * |grad| (RigL, the dense gradient). Positions that are not kept after the
 * drop have their weight set to zero in w (a regrown weight starts at
 * zero), and are returned in *zeroed when not NULL (count). Returns 0 or
 * -ENOMEM. */
int sparse_mask_regrow(uint8_t *mask, float *w, const float *grad, uint64_t n,
                       double drop_fraction, uint64_t key, int64_t step);

/* Sparsity-aware initialisation: w is rows x (n / rows), a row one output's
 * fan-in (a dense layer's (out, in), a convolution's (K, C, R, S)). Each
 * row's kept weights are multiplied by sqrt(row length / kept in the row),
 * so that the row's sum over its inputs has the variance it has dense (the
 * initialisers draw each weight independently); a row that keeps all or
 * nothing is left alone. Pruned weights are not read. */
void sparse_mask_scale_fan_in(float *w, const uint8_t *mask, uint64_t n, uint64_t rows);

/* Kept elements of mask (n bytes). */
uint64_t sparse_mask_count(const uint8_t *mask, uint64_t n);

/* x[i] = 0 where mask[i] is 0, for [lo, hi). */
void sparse_apply_f32(float *x, const uint8_t *mask, uint64_t lo, uint64_t hi);
void sparse_apply_u16(uint16_t *x, const uint8_t *mask, uint64_t lo, uint64_t hi);
