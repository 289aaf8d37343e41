/* memoryx's masks of a sparse job ([sparsity], docs/sparsity.md): chosen
 * when the shard is made (or read back from the checkpoint resumed from),
 * applied to each update's gradient before the optimizer and to the weights
 * and optimizer state after it, and changed at the schedule's steps (GMP,
 * SET, RigL: sparse.h's rules, on the whole tensor: a dynamic job updates
 * each tensor in one piece of work). */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "store.h"

/* Reads the plan's sparsity into j->sparse and each tensor's level, and
 * which tensors are held compact (a static mask streamed packed: their
 * kept elements alone); turns *bytes, the shard's dense footprint, into
 * what it holds so (footprint_shard_sparse_bytes: the compact tensors'
 * kept elements and bits, the others' masks). Returns 0, or -EINVAL with
 * the reason in why (a section memoryx cannot follow). */
int mxsparse_setup(mx_job *j, uint64_t *bytes, char *why, size_t whylen);

/* Once the shard's place is known: -EINVAL with the reason in why where
 * a sparse shard would be Pipelined or in the disk tier. */
int mxsparse_mode_check(const mx_job *j, char *why, size_t whylen);

/* Makes compact tensor t from its dense weights in t->w (made from the
 * seed, or read with t->mask from a checkpoint, mask_loaded): the mask
 * chosen where none was read, then w cut to the kept elements (realloc'd),
 * bits and ranks made, the mask freed, and the gradient and optimizer
 * state allocated for the kept elements (zeros). Returns 0 or -ENOMEM
 * (err says which tensor). */
int mxsparse_compact(mx_job *j, mx_tensor *t, char *err, size_t errlen);

/* Elements [a, b) of t's weights as made (from the seed) into out. */
typedef void (*mxsparse_fill_fn)(void *ctx, mx_tensor *t, uint64_t a, uint64_t b, float *out);

/* Makes compact tensor t from weights made by fill, never whole in their
 * dense form where its mask needs none of them (init_method random: the
 * mask chosen from the seed alone as bits, then the weights a piece at a
 * time, their kept ones kept); topk makes them whole first
 * (mxsparse_compact). Returns 0, -ENOMEM or -EINVAL (err says which
 * tensor). */
int mxsparse_compact_made(mx_job *j, mx_tensor *t, mxsparse_fill_fn fill, void *ctx, char *err,
                          size_t errlen);

/* The kept elements of compact tensor t before element i (i <= t->n). */
uint64_t mxsparse_rank(const mx_tensor *t, uint64_t i);

/* Elements [a, a + count) of compact tensor t in their dense form, zeros
 * where pruned, into out (count elements of elem bytes), from vals (t's
 * kept elements, elem bytes each: its weights, twin or a state). */
void mxsparse_expand(const mx_tensor *t, const void *vals, uint32_t elem, uint64_t a,
                     uint64_t count, void *out);

/* Whether the job changes its masks during training (gmp, set, rigl). */
bool mxsparse_dynamic(const mx_job *j);

/* In the load: each sparse tensor's mask allocated (before the checkpoint
 * is read). Returns 0 or -ENOMEM (err says which tensor). */
int mxsparse_alloc(mx_job *j, char *err, size_t errlen);

/* After the weights are made or read: the masks not read from the
 * checkpoint chosen from them (init_method), and the weights and state
 * zeroed where pruned. Returns 0 or -ENOMEM. */
int mxsparse_init(mx_job *j, char *err, size_t errlen);

/* Checks a mask read from file `file` for t: every byte 0 or 1, no weight
 * kept out of it, and (static, set, rigl) as many kept as t's level
 * keeps. Returns 0, or -EINVAL with the reason in err. */
int mxsparse_check(const mx_job *j, const mx_tensor *t, const char *file, char *err,
                   size_t errlen);

/* Before the optimizer updates elements [lo, hi) of t at `step` (the
 * step's index, from 0): the gradient there masked, its dense copy kept
 * first where RigL's mask changes after this update (*dense, the caller's
 * to free with mxsparse_after). */
void mxsparse_before(const mx_job *j, mx_tensor *t, uint64_t lo, uint64_t hi, uint64_t step,
                     float **dense);

/* After it: where the whole tensor was updated and the schedule says so,
 * the mask changes, and weights (and their bfloat16 twin) and optimizer
 * state are zeroed where it prunes now (regrown elements kept from zero);
 * elsewhere the update kept them zero (dense: mxsparse_before's copy,
 * freed here). */
void mxsparse_after(const mx_job *j, mx_tensor *t, uint64_t lo, uint64_t hi, uint64_t step,
                    float *dense);
