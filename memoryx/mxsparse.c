/* memoryx's masks of a sparse job (mxsparse.h). */
#include "mxsparse.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "footprint.h"
#include "sstream.h"
#include "optim_plan.h"

bool mxsparse_dynamic(const mx_job *j)
{
    return j->sparse.type == SPARSE_GMP || j->sparse.type == SPARSE_SET ||
           j->sparse.type == SPARSE_RIGL;
}

int mxsparse_setup(mx_job *j, uint64_t *bytes, char *why, size_t whylen)
{
    const Appliance__Plan *p = j->plan;
    if (sparse_from_plan(p->sparsity, &j->sparse) < 0) {
        snprintf(why, whylen, "the plan's sparsity section is not one memoryx can follow "
                 "(type \"%s\")", p->sparsity ? p->sparsity->type : "");
        return -EINVAL;
    }
    bool compact = j->sparse.type == SPARSE_STATIC && p->sparsity && !p->sparsity->dense_streams &&
                   !j->pipelined;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        const Appliance__PlanTensor *pt = p->tensors[t->id];
        t->level = j->sparse.type != SPARSE_NONE ? pt->sparsity : 0.0f;
        t->level_hp = j->sparse.level;
        if (j->sparse.type == SPARSE_GMP && pt->sparsity_level &&
            sparse_value_from_plan(pt->sparsity_level, &t->level_hp) < 0) {
            snprintf(why, whylen, "the plan's level schedule of %s is not one memoryx can follow "
                     "(kind \"%s\")", t->name, pt->sparsity_level->kind);
            return -EINVAL;
        }
        if (!(t->level > 0))
            continue;
        t->compact = compact && t->trainable;
        if (t->compact)
            t->nk = sparse_keep_count(t->n, t->level);
        unsigned states = t->trainable ? (unsigned)j->states : 0;
        *bytes += footprint_shard_sparse_bytes(t->n, t->level, t->compact, t->trainable, states,
                                               !j->pipelined) -
                  footprint_shard_tensor_bytes(t->n, t->trainable, states, !j->pipelined);
    }
    return 0;
}

int mxsparse_mode_check(const mx_job *j, char *why, size_t whylen)
{
    bool sparse = false;
    for (size_t i = 0; i < j->nt; i++)
        sparse |= j->t[i].level > 0;
    if (sparse && (j->pipelined || j->tier_window)) {
        snprintf(why, whylen, "shard %u: a sparse model trains in Weight Streaming with its "
                 "shard in memory (%s)", j->shard,
                 j->pipelined ? "this plan is Pipelined" : "this shard needs the disk tier");
        return -EINVAL;
    }
    return 0;
}

int mxsparse_alloc(mx_job *j, char *err, size_t errlen)
{
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        if (!(t->level > 0) || t->compact) /* (a compact tensor's comes with its weights) */
            continue;
        if (!(t->mask = calloc(t->n ? t->n : 1, 1))) {
            snprintf(err, errlen, "out of memory for the mask of %s", t->name);
            return -ENOMEM;
        }
    }
    return 0;
}

/* Zeroes t's weights (and twin) and state where mask[i] != 1, over
 * [lo, hi); regrown positions (2) become kept with zero state. */
static void mxsparse__settle(mx_tensor *t, uint64_t lo, uint64_t hi)
{
    size_t ns = t->trainable ? optim_state_count(&t->st) : 0;
    float *st[OPTIM_MAX_STATE];
    for (size_t s = 0; s < ns; s++)
        st[s] = optim_state_tensor(&t->st, s, NULL, NULL);
    for (uint64_t i = lo; i < hi; i++) {
        if (t->mask[i] == 1)
            continue;
        if (t->mask[i] == 0)
            t->w[i] = 0.0f;
        for (size_t s = 0; s < ns; s++)
            st[s][i] = 0.0f;
        if (t->w16)
            t->w16[i] = 0;
        if (t->mask[i] == 2) /* regrown: kept from now on, from zero */
            t->mask[i] = 1;
    }
}

/* The level GMP prunes t to after the update of step s (from 1): its own
 * schedule's (its pattern's, or the section's). */
static double mxsparse__gmp_level(const mx_tensor *t, int64_t s)
{
    return sparse_hp_at(&t->level_hp, s, 0.999999);
}

/* Chooses t's first mask from its weights (init_method), unless one was
 * read from the checkpoint. */
static int mxsparse__choose(mx_job *j, mx_tensor *t, char *err, size_t errlen)
{
    if (t->mask_loaded)
        return 0;
    double level = j->sparse.type == SPARSE_GMP
                       ? mxsparse__gmp_level(t, (int64_t)j->plan->first_step)
                       : (double)t->level;
    if (sparse_mask_init(t->mask, t->w, t->n, level, j->sparse.init,
                         sparse_key(j->sparse.seed, t->id)) < 0) {
        snprintf(err, errlen, "out of memory choosing the mask of %s", t->name);
        return -ENOMEM;
    }
    /* weights made here (not a checkpoint's): the kept ones at the
     * dense layer's fan-in variance, when asked */
    const Appliance__PlanTensor *pt = j->plan->tensors[t->id];
    if (j->sparse.init_scale_fan_in && j->plan->n_resume_weights == 0)
        sparse_mask_scale_fan_in(t->w, t->mask, t->n, pt->n_dims > 0 ? pt->dims[0] : 1);
    return 0;
}

int mxsparse_init(mx_job *j, char *err, size_t errlen)
{
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        if (!t->mask || t->compact)
            continue;
        int rc = mxsparse__choose(j, t, err, errlen);
        if (rc < 0)
            return rc;
        mxsparse__settle(t, 0, t->n);
    }
    return 0;
}

/* t's bits and ranks allocated (bits zeros). Returns 0 or -ENOMEM. */
static int mxsparse__bits_alloc(mx_tensor *t, char *err, size_t errlen)
{
    uint64_t nblocks = (t->n + FOOTPRINT_RANK_BLOCK - 1) / FOOTPRINT_RANK_BLOCK + 1;
    t->bits = calloc((t->n + 7) / 8 + 1, 1);
    t->rank = malloc(nblocks * sizeof(uint64_t));
    if (!t->bits || !t->rank) {
        snprintf(err, errlen, "out of memory for the mask bits of %s", t->name);
        return -ENOMEM;
    }
    return 0;
}

/* t's ranks from its bits; checks that they keep nk. */
static int mxsparse__ranks(mx_tensor *t, char *err, size_t errlen)
{
    uint64_t nblocks = (t->n + FOOTPRINT_RANK_BLOCK - 1) / FOOTPRINT_RANK_BLOCK + 1, k = 0;
    for (uint64_t b = 0; b + 1 < nblocks; b++) {
        uint64_t at = b * FOOTPRINT_RANK_BLOCK;
        t->rank[b] = k;
        k += sstream_count_bits(t->bits, at, t->n - at < FOOTPRINT_RANK_BLOCK
                                                 ? t->n - at : FOOTPRINT_RANK_BLOCK);
    }
    t->rank[nblocks - 1] = k;
    if (k != t->nk) { /* (static: mxsparse_check held a loaded mask to the level) */
        snprintf(err, errlen, "the mask of %s keeps %llu elements, its level %llu", t->name,
                 (unsigned long long)k, (unsigned long long)t->nk);
        return -EINVAL;
    }
    return 0;
}

/* The gradient and optimizer state of compact t's kept elements (zeros). */
static int mxsparse__kept_alloc(mx_job *j, mx_tensor *t, char *err, size_t errlen)
{
    uint64_t k = t->nk;
    bool st_ok = !t->trainable || optim_state_init(&t->st, &j->cfg, k) == 0;
    if (j->grad16 && t->trainable)
        t->g16 = calloc(k ? k : 1, sizeof(uint16_t));
    else if (!j->pipelined)
        t->g = calloc(k ? k : 1, sizeof(float));
    if (!st_ok || (!t->g && !t->g16)) {
        snprintf(err, errlen, "out of memory for tensor %s (%llu kept elements)", t->name,
                 (unsigned long long)k);
        return -ENOMEM;
    }
    return 0;
}

int mxsparse_compact(mx_job *j, mx_tensor *t, char *err, size_t errlen)
{
    if (!t->mask && !(t->mask = calloc(t->n ? t->n : 1, 1))) {
        snprintf(err, errlen, "out of memory for the mask of %s", t->name);
        return -ENOMEM;
    }
    int rc = mxsparse__choose(j, t, err, errlen);
    if (rc == 0)
        rc = mxsparse__bits_alloc(t, err, errlen);
    if (rc < 0)
        return rc;
    /* the kept weights to the front, in order (k <= i: in place) */
    uint64_t k = 0;
    for (uint64_t i = 0; i < t->n; i++)
        if (t->mask[i]) {
            t->bits[i / 8] |= (uint8_t)(1u << (i % 8));
            t->w[k++] = t->w[i];
        }
    if ((rc = mxsparse__ranks(t, err, errlen)) < 0)
        return rc;
    free(t->mask);
    t->mask = NULL;
    float *w = realloc(t->w, (k ? k : 1) * sizeof(float));
    if (w)
        t->w = w;
    return mxsparse__kept_alloc(j, t, err, errlen);
}

int mxsparse_compact_made(mx_job *j, mx_tensor *t, mxsparse_fill_fn fill, void *ctx, char *err,
                          size_t errlen)
{
    if (j->sparse.init == SPARSE_INIT_TOPK) { /* (its mask reads every weight: dense first) */
        if (!(t->w = malloc((t->n ? t->n : 1) * sizeof(float)))) {
            snprintf(err, errlen, "out of memory for tensor %s (%llu elements)", t->name,
                     (unsigned long long)t->n);
            return -ENOMEM;
        }
        fill(ctx, t, 0, t->n, t->w);
        return mxsparse_compact(j, t, err, errlen);
    }
    /* random: the mask from the seed alone, as bits; then the weights a
     * piece at a time, their kept ones kept */
    int rc = mxsparse__bits_alloc(t, err, errlen);
    if (rc == 0 && sparse_mask_init_bits(t->bits, NULL, t->n, t->level, j->sparse.init,
                                         sparse_key(j->sparse.seed, t->id)) < 0) {
        snprintf(err, errlen, "out of memory choosing the mask of %s", t->name);
        rc = -ENOMEM;
    }
    if (rc == 0)
        rc = mxsparse__ranks(t, err, errlen);
    if (rc < 0)
        return rc;
    enum { PIECE = 1 << 22 };
    float *piece = malloc(sizeof(float) * (t->n < PIECE ? (t->n ? t->n : 1) : PIECE));
    t->w = malloc((t->nk ? t->nk : 1) * sizeof(float));
    if (!piece || !t->w) {
        free(piece);
        snprintf(err, errlen, "out of memory for tensor %s (%llu kept elements)", t->name,
                 (unsigned long long)t->nk);
        return -ENOMEM;
    }
    for (uint64_t a = 0; a < t->n; a += PIECE) {
        uint64_t b = t->n - a < PIECE ? t->n : a + PIECE;
        fill(ctx, t, a, b, piece);
        sstream_take_kept(SSTREAM_DENSE, b - a, 0, sizeof(float), piece, t->bits, a,
                          t->w + mxsparse_rank(t, a), NULL, 0);
    }
    free(piece);
    /* weights made here: the kept ones at the dense layer's fan-in
     * variance, when asked (sparse_mask_scale_fan_in's rule, by rows) */
    const Appliance__PlanTensor *pt = j->plan->tensors[t->id];
    uint64_t rows = pt->n_dims > 0 ? pt->dims[0] : 1;
    if (j->sparse.init_scale_fan_in && rows > 0 && t->n % rows == 0) {
        uint64_t len = t->n / rows;
        for (uint64_t r = 0; r < rows; r++) {
            uint64_t lo = mxsparse_rank(t, r * len), hi = mxsparse_rank(t, (r + 1) * len);
            if (hi == lo || hi - lo == len)
                continue;
            float c = (float)sqrt((double)len / (double)(hi - lo));
            for (uint64_t k = lo; k < hi; k++)
                t->w[k] *= c;
        }
    }
    return mxsparse__kept_alloc(j, t, err, errlen);
}

uint64_t mxsparse_rank(const mx_tensor *t, uint64_t i)
{
    uint64_t b = i / FOOTPRINT_RANK_BLOCK;
    return t->rank[b] + sstream_count_bits(t->bits, b * FOOTPRINT_RANK_BLOCK,
                                           i - b * FOOTPRINT_RANK_BLOCK);
}

void mxsparse_expand(const mx_tensor *t, const void *vals, uint32_t elem, uint64_t a,
                     uint64_t count, void *out)
{
    sstream_pack_kept(SSTREAM_DENSE, t->bits, a, (const uint8_t *)vals + mxsparse_rank(t, a) * elem,
                      count, 0, elem, out);
}

int mxsparse_check(const mx_job *j, const mx_tensor *t, const char *file, char *err,
                   size_t errlen)
{
    uint64_t kept = 0;
    for (uint64_t i = 0; i < t->n; i++) {
        if (t->mask[i] > 1) {
            snprintf(err, errlen, "%s: mask \"%s.mask\" holds %u at element %llu (a mask is 0 or "
                     "1)", file, t->name, t->mask[i], (unsigned long long)i);
            return -EINVAL;
        }
        if (!t->mask[i] && t->w[i] != 0.0f) {
            snprintf(err, errlen, "%s: mask \"%s.mask\" disagrees with its weights: element %llu "
                     "is pruned but its weight is %g", file, t->name, (unsigned long long)i,
                     (double)t->w[i]);
            return -EINVAL;
        }
        kept += t->mask[i];
    }
    uint64_t want = sparse_keep_count(t->n, t->level);
    if (j->sparse.type != SPARSE_GMP && kept != want) {
        snprintf(err, errlen, "%s: mask \"%s.mask\" keeps %llu of %llu elements (density "
                 "%.4f); the job's sparsity %.4f keeps %llu", file, t->name,
                 (unsigned long long)kept, (unsigned long long)t->n,
                 (double)kept / (double)(t->n ? t->n : 1), (double)t->level,
                 (unsigned long long)want);
        return -EINVAL;
    }
    return 0;
}

/* Whether t's mask changes after the update of step index `step`. */
static bool mxsparse__changes(const mx_job *j, const mx_tensor *t, uint64_t lo, uint64_t hi,
                              uint64_t step)
{
    return t->mask && lo == 0 && hi == t->n && sparse_config_updates(&j->sparse, (int64_t)step + 1);
}

void mxsparse_before(const mx_job *j, mx_tensor *t, uint64_t lo, uint64_t hi, uint64_t step,
                     float **dense)
{
    *dense = NULL;
    if (!t->mask)
        return;
    if (j->sparse.type == SPARSE_RIGL && mxsparse__changes(j, t, lo, hi, step) &&
        (*dense = malloc(t->n * sizeof(float)))) {
        if (t->g16)
            bf16_unpack(*dense, t->g16, t->n);
        else
            memcpy(*dense, t->g, t->n * sizeof(float));
    }
    if (t->g16)
        sparse_apply_u16(t->g16, t->mask, lo, hi);
    else if (t->g)
        sparse_apply_f32(t->g, t->mask, lo, hi);
}

void mxsparse_after(const mx_job *j, mx_tensor *t, uint64_t lo, uint64_t hi, uint64_t step,
                    float *dense)
{
    if (!t->mask)
        return;
    /* While the mask holds, the update keeps pruned weights and their
     * state at zero by itself: their gradient is masked (mxsparse_before),
     * and SGD (momentum, weight decay) and Adam(W) move a weight of zero
     * with zero state and gradient by nothing. So the pass that zeroes
     * them runs where the mask changes alone (it was a fifth of a sparse
     * step's memoryx time). */
    if (mxsparse__changes(j, t, lo, hi, step)) {
        int64_t s = (int64_t)step + 1;
        uint64_t key = sparse_key(j->sparse.seed, t->id);
        switch (j->sparse.type) {
        case SPARSE_GMP:
            sparse_mask_gmp(t->mask, t->w, t->n,
                            sparse_keep_count(t->n, mxsparse__gmp_level(t, s)));
            break;
        case SPARSE_SET:
            sparse_mask_regrow(t->mask, t->w, NULL, t->n,
                               sparse_hp_at(&j->sparse.drop_fraction, s, 1.0), key, s);
            break;
        case SPARSE_RIGL:
            if (dense) /* (without its copy, out of memory: the mask stays) */
                sparse_mask_regrow(t->mask, t->w, dense, t->n,
                                   sparse_hp_at(&j->sparse.drop_fraction, s, 1.0), key, s);
            break;
        default:
            break;
        }
        mxsparse__settle(t, lo, hi);
    }
    free(dense);
}
