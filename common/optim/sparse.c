/* The sparsity types' mask rules and schedules (sparse.h). */
#include "sparse.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

double sparse_hp_at(const sparse_hp *h, int64_t step, double hi)
{
    double s = (double)step, v;
    switch (h->kind) {
    case SPARSE_HP_LINEAR:
        v = h->init + h->slope * s;
        break;
    case SPARSE_HP_EXP:
        v = h->final + (h->init - h->final) * exp(-h->gamma * s);
        break;
    case SPARSE_HP_COSINE:
        v = h->minimum + (h->init - h->minimum) * 0.5 * (1.0 + cos(M_PI * s / h->half_period));
        break;
    case SPARSE_HP_CONSTANT:
    default:
        v = h->init;
        break;
    }
    if (!(v > 0))
        return 0;
    return v > hi ? hi : v;
}

bool sparse_is_update_step(const sparse_schedule *s, int64_t step)
{
    if (step < 1 || s->freq < 1 || step < s->start || (s->stop > 0 && step >= s->stop))
        return false;
    return (step - s->start) % s->freq == 0;
}

bool sparse_config_updates(const sparse_config *c, int64_t step)
{
    return c->type != SPARSE_NONE && c->type != SPARSE_STATIC &&
           sparse_is_update_step(&c->schedule, step);
}

static const char *const sparse__names[] = {NULL, "static", "gmp", "set", "rigl"};

const char *sparse_type_name(sparse_type t)
{
    return (unsigned)t < sizeof(sparse__names) / sizeof(sparse__names[0]) ? sparse__names[t]
                                                                          : NULL;
}

int sparse_type_from_name(const char *name, sparse_type *out)
{
    for (int i = SPARSE_STATIC; i <= SPARSE_RIGL; i++)
        if (strcmp(name, sparse__names[i]) == 0) {
            *out = (sparse_type)i;
            return 0;
        }
    return -EINVAL;
}

static uint64_t sparse__mix(uint64_t x)
{
    uint64_t z = x + 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

uint64_t sparse_key(uint64_t seed, uint32_t tensor_id)
{
    return sparse__mix(seed ^ ((uint64_t)tensor_id << 32));
}

double sparse_random(uint64_t key, int64_t step, uint64_t i)
{
    uint64_t h = sparse__mix(sparse__mix(key + (uint64_t)step) + i);
    return (double)(h >> 11) * 0x1.0p-53;
}

uint64_t sparse_keep_count(uint64_t n, double level)
{
    double pruned = nearbyint(level * (double)n); /* (the default mode: halves to even) */
    uint64_t keep = pruned >= (double)n ? 0 : n - (uint64_t)pruned;
    return n > 0 && keep == 0 ? 1 : keep;
}

void sparse_mask_scale_fan_in(float *w, const uint8_t *mask, uint64_t n, uint64_t rows)
{
    if (rows == 0 || n % rows != 0)
        rows = 1;
    uint64_t len = n / rows;
    for (uint64_t r = 0; r < rows; r++) {
        float *wr = w + r * len;
        const uint8_t *mr = mask + r * len;
        uint64_t kept = sparse_mask_count(mr, len);
        if (kept == 0 || kept == len)
            continue;
        float c = (float)sqrt((double)len / (double)kept);
        for (uint64_t i = 0; i < len; i++)
            if (mr[i])
                wr[i] *= c;
    }
}

uint64_t sparse_mask_count(const uint8_t *mask, uint64_t n)
{
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++)
        k += mask[i] != 0;
    return k;
}

void sparse_apply_f32(float *x, const uint8_t *mask, uint64_t lo, uint64_t hi)
{
    for (uint64_t i = lo; i < hi; i++)
        if (!mask[i])
            x[i] = 0.0f;
}

void sparse_apply_u16(uint16_t *x, const uint8_t *mask, uint64_t lo, uint64_t hi)
{
    for (uint64_t i = lo; i < hi; i++)
        if (!mask[i])
            x[i] = 0;
}

/* A candidate of a top-k: its score and index. */
typedef struct sparse__cand {
    double score;
    uint64_t i;
} sparse__cand;

/* Larger scores first, then lower indices. */
static int sparse__cmp(const void *a, const void *b)
{
    const sparse__cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* Sets mask[i] = mark for the k best of the nc candidates c (reordered). */
static void sparse__top(sparse__cand *c, uint64_t nc, uint64_t k, uint8_t *mask, uint8_t mark)
{
    if (k > nc)
        k = nc;
    qsort(c, nc, sizeof(*c), sparse__cmp);
    for (uint64_t r = 0; r < k; r++)
        mask[c[r].i] = mark;
}

int sparse_mask_init(uint8_t *mask, const float *w, uint64_t n, double level, sparse_init how,
                     uint64_t key)
{
    sparse__cand *c = malloc((n ? n : 1) * sizeof(*c));
    if (!c)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        c[i].i = i;
        c[i].score = how == SPARSE_INIT_TOPK ? fabs((double)w[i]) : sparse_random(key, 0, i);
    }
    memset(mask, 0, n);
    sparse__top(c, n, sparse_keep_count(n, level), mask, 1);
    free(c);
    return 0;
}

int sparse_mask_gmp(uint8_t *mask, const float *w, uint64_t n, uint64_t keep)
{
    sparse__cand *c = malloc((n ? n : 1) * sizeof(*c));
    if (!c)
        return -ENOMEM;
    for (uint64_t i = 0; i < n; i++) {
        c[i].i = i;
        c[i].score = mask[i] ? fabs((double)w[i]) : -1.0;
    }
    memset(mask, 0, n);
    sparse__top(c, n, keep, mask, 1);
    free(c);
    return 0;
}

int sparse_mask_regrow(uint8_t *mask, float *w, const float *grad, uint64_t n,
                       double drop_fraction, uint64_t key, int64_t step)
{
    sparse__cand *c = malloc((n ? n : 1) * sizeof(*c));
    if (!c)
        return -ENOMEM;
    uint64_t k = 0;
    for (uint64_t i = 0; i < n; i++)
        if (mask[i]) {
            c[k].i = i;
            c[k].score = fabs((double)w[i]);
            k++;
        }
    uint64_t drop = (uint64_t)nearbyint(drop_fraction * (double)k);
    if (drop > k)
        drop = k;
    /* the drop: the k - drop largest magnitudes of the kept stay */
    memset(mask, 0, n);
    sparse__top(c, k, k - drop, mask, 1);
    /* every position not kept now is a zero weight, and may regrow */
    uint64_t nc = 0;
    for (uint64_t i = 0; i < n; i++)
        if (!mask[i]) {
            w[i] = 0.0f;
            c[nc].i = i;
            c[nc].score = grad ? fabs((double)grad[i]) : sparse_random(key, step, i);
            nc++;
        }
    sparse__top(c, nc, drop, mask, 2);
    free(c);
    return 0;
}
