/* [sparsity]: the Model Zoo's sparsity section (type, sparsity, init_method,
 * param_name_patterns, schedule, drop_fraction, seed), read into a checked
 * structure and resolved against the model's tensors: each tensor's level
 * (0: dense). docs/sparsity.md documents the keys; internal to the model
 * library, which jobspec.c calls. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "model.h"
#include "sparse.h"
#include "toml.h"

#define JOBSPEC_SPARSE_PATTERNS 32

typedef struct jobspec_sparsity {
    bool present;                 /* the section was given */
    sparse_type type;             /* SPARSE_STATIC unless given */
    sparse_init init_method;      /* random unless given */
    double level;                 /* the fraction pruned of a tensor whose pattern gives none;
                                   * gmp: its level schedule's last value */
    sparse_hp level_hp;           /* gmp: the level over steps (constant: level) */
    sparse_schedule schedule;     /* gmp, set, rigl: when the mask changes */
    sparse_hp drop_fraction;      /* set, rigl: the fraction of kept weights dropped */
    int64_t seed;                 /* the masks' seed (runconfig.seed unless given) */
    bool seed_given;
    bool dense_streams;           /* compressed_streams = false: sparse weights stream dense */
    bool init_scale_fan_in;       /* init_scale = "fan_in": kept initial weights rescaled to
                                   * the dense fan-in variance (default "none") */
    size_t npatterns;             /* 0: the default (dense and convolution weights) */
    bool globs;                   /* they were given as param_filter's globs (kept converted) */
    char patterns[JOBSPEC_SPARSE_PATTERNS][256]; /* regular expressions over whole names */
    double pattern_level[JOBSPEC_SPARSE_PATTERNS]; /* its own level, or < 0: level; gmp: its
                                   * schedule's level at step 0 */
    sparse_hp pattern_hp[JOBSPEC_SPARSE_PATTERNS]; /* gmp, where pattern_level >= 0: its own
                                   * level over steps (constant: a number given) */
    float *tensor_level;          /* per model tensor (model.ntensors): its level, 0 for dense
                                   * (gmp: the last level of its schedule within max_steps);
                                   * owned, set by jobspec_sparsity_resolve */
    sparse_hp *tensor_hp;         /* gmp with levels per pattern: per model tensor, its level
                                   * over steps (its pattern's); NULL otherwise; owned, set by
                                   * jobspec_sparsity_resolve */
} jobspec_sparsity;

/* Reads the [sparsity] table t into s (cleared first). Returns 0, or
 * -EINVAL with "FILE:LINE:COL: message" in err. */
int jobspec_sparsity_read(const toml_value *t, jobspec_sparsity *s, char *err, size_t errlen);

/* Each tensor of m gets its level from the first pattern that matches its
 * whole name (tensor_level, allocated; gmp with levels per pattern: its
 * level schedule too, tensor_hp). t is the [sparsity] table, for
 * positions. A pattern that matches no tensor, or a bias or a norm's
 * tensor, is refused. max_steps: GMP's levels are checked up to it.
 * Returns 0, -ENOMEM, or -EINVAL with the message in err. */
int jobspec_sparsity_resolve(const toml_value *t, jobspec_sparsity *s, const model *m,
                             int64_t max_steps, char *err, size_t errlen);

void jobspec_sparsity_deinit(jobspec_sparsity *s);

/* Whether memoryx holds the pruned tensors compact, their kept elements
 * alone (a static mask, streamed packed: memoryx/mxsparse.c). */
bool jobspec_sparsity_compact(const jobspec_sparsity *s);
