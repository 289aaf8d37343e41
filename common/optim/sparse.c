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

/* (a select and an unconditional store: the compiler's vectors, where a
 * conditional store kept it to one element at a time) */
void sparse_apply_f32(float *x, const uint8_t *mask, uint64_t lo, uint64_t hi)
{
    for (uint64_t i = lo; i < hi; i++)
        x[i] = mask[i] ? x[i] : 0.0f;
}

void sparse_apply_u16(uint16_t *x, const uint8_t *mask, uint64_t lo, uint64_t hi)
{
    for (uint64_t i = lo; i < hi; i++)
        x[i] = mask[i] ? x[i] : 0;
}

/* The top k of a set of candidates, by score (larger first) and index
 * (lower first among equal scores), found in O(n) time and constant
 * memory: a radix selection over the scores' bits, 16 at a time, each
 * pass recomputing the scores (a hash, or an array read), so that no
 * candidate list of 16 bytes an element is made (4 GiB for one 16384 x
 * 16384 layer, and minutes of sorting). */
typedef struct sparse__scorer {
    /* candidate i's score into *s; false when i is no candidate */
    bool (*score)(const struct sparse__scorer *sc, uint64_t i, double *s);
    const uint8_t *mask;
    const float *w, *grad;
    uint64_t key;
    int64_t step;
} sparse__scorer;

/* The score's bits, ordered as the scores are (0 and -0 as one). */
static uint64_t sparse__order(double s)
{
    uint64_t u;
    if (s == 0.0)
        s = 0.0;
    memcpy(&u, &s, sizeof(u));
    return u >> 63 ? ~u : u | (1ull << 63);
}

/* Where the top k of sc's candidates among [0, n) end: those whose
 * ordered score is above *at, and the first *ties (by index) of those at
 * it. Returns the candidates' count (k more than that: all of them). */
static uint64_t sparse__threshold(const sparse__scorer *sc, uint64_t n, uint64_t k, uint64_t *at,
                                  uint64_t *ties)
{
    static const int digits = 4, bits = 16;
    uint64_t *hist = calloc((size_t)1 << bits, sizeof(uint64_t));
    uint64_t prefix = 0, need = k, cands = 0;
    for (int level = 0; level < digits && hist; level++) {
        int shift = 64 - bits * (level + 1);
        memset(hist, 0, sizeof(uint64_t) << bits);
        for (uint64_t i = 0; i < n; i++) {
            double s;
            if (!sc->score(sc, i, &s))
                continue;
            uint64_t o = sparse__order(s);
            if (level > 0 && o >> (shift + bits) != prefix)
                continue;
            hist[(o >> shift) & 0xffff]++;
        }
        uint64_t d = 0xffff;
        if (level == 0) {
            for (uint64_t t = 0; t <= 0xffff; t++)
                cands += hist[t];
            if (k >= cands)
                break; /* every candidate */
        }
        for (;; d--) { /* (need is at most the candidates under the prefix) */
            if (need <= hist[d])
                break;
            need -= hist[d];
        }
        prefix = prefix << bits | d;
    }
    free(hist);
    if (!hist) { /* (out of memory for 512 KiB: everything, as a sort would not do) */
        *at = 0;
        *ties = UINT64_MAX;
        return cands;
    }
    if (k >= cands) { /* every candidate: above the lowest order there is, ties all */
        *at = 0;
        *ties = UINT64_MAX;
        return cands;
    }
    *at = prefix;
    *ties = need;
    return cands;
}

/* Sets mask[i] = mark for the k best of sc's candidates among [0, n)
 * and 0 for the other candidates (others untouched); with bits instead of
 * mask, sets bit i of the best (the others left as they are). Returns 0
 * or -ENOMEM. */
static int sparse__top_into(const sparse__scorer *sc, uint64_t n, uint64_t k, uint8_t *mask,
                            uint8_t mark, uint8_t *bits)
{
    uint64_t at = UINT64_MAX, ties = 0;
    if (k > 0)
        sparse__threshold(sc, n, k, &at, &ties);
    for (uint64_t i = 0; i < n; i++) {
        double s;
        if (!sc->score(sc, i, &s))
            continue;
        uint64_t o = sparse__order(s);
        bool take = k > 0 && (o > at || (o == at && ties > 0));
        if (take && o == at)
            ties--;
        if (bits)
            bits[i / 8] |= (uint8_t)((unsigned)take << (i % 8));
        else
            mask[i] = take ? mark : 0;
    }
    return 0;
}

static int sparse__top(const sparse__scorer *sc, uint64_t n, uint64_t k, uint8_t *mask,
                       uint8_t mark)
{
    return sparse__top_into(sc, n, k, mask, mark, NULL);
}

static bool sparse__random_score(const sparse__scorer *sc, uint64_t i, double *s)
{
    *s = sparse_random(sc->key, sc->step, i);
    return true;
}

static bool sparse__magnitude_score(const sparse__scorer *sc, uint64_t i, double *s)
{
    *s = fabs((double)sc->w[i]);
    return true;
}

/* GMP: the kept weights by magnitude, then the pruned ones (-1) */
static bool sparse__kept_magnitude_score(const sparse__scorer *sc, uint64_t i, double *s)
{
    *s = sc->mask[i] ? fabs((double)sc->w[i]) : -1.0;
    return true;
}

/* the drop: kept weights alone, by magnitude */
static bool sparse__drop_score(const sparse__scorer *sc, uint64_t i, double *s)
{
    if (!sc->mask[i])
        return false;
    *s = fabs((double)sc->w[i]);
    return true;
}

/* the regrowth: positions not kept, by gradient magnitude or at random */
static bool sparse__grow_score(const sparse__scorer *sc, uint64_t i, double *s)
{
    if (sc->mask[i])
        return false;
    *s = sc->grad ? fabs((double)sc->grad[i]) : sparse_random(sc->key, sc->step, i);
    return true;
}

int sparse_mask_init(uint8_t *mask, const float *w, uint64_t n, double level, sparse_init how,
                     uint64_t key)
{
    sparse__scorer sc = {.w = w, .key = key, .step = 0,
                         .score = how == SPARSE_INIT_TOPK ? sparse__magnitude_score
                                                          : sparse__random_score};
    return sparse__top(&sc, n, sparse_keep_count(n, level), mask, 1);
}

int sparse_mask_init_bits(uint8_t *bits, const float *w, uint64_t n, double level,
                          sparse_init how, uint64_t key)
{
    sparse__scorer sc = {.w = w, .key = key, .step = 0,
                         .score = how == SPARSE_INIT_TOPK ? sparse__magnitude_score
                                                          : sparse__random_score};
    return sparse__top_into(&sc, n, sparse_keep_count(n, level), NULL, 1, bits);
}

int sparse_mask_gmp(uint8_t *mask, const float *w, uint64_t n, uint64_t keep)
{
    sparse__scorer sc = {.score = sparse__kept_magnitude_score, .mask = mask, .w = w};
    return sparse__top(&sc, n, keep, mask, 1);
}

int sparse_mask_regrow(uint8_t *mask, float *w, const float *grad, uint64_t n,
                       double drop_fraction, uint64_t key, int64_t step)
{
    uint64_t k = sparse_mask_count(mask, n);
    uint64_t drop = (uint64_t)nearbyint(drop_fraction * (double)k);
    if (drop > k)
        drop = k;
    /* the drop: the k - drop largest magnitudes of the kept stay */
    sparse__scorer sc = {.score = sparse__drop_score, .mask = mask, .w = w, .grad = grad,
                         .key = key, .step = step};
    sparse__top(&sc, n, k - drop, mask, 1);
    /* every position not kept now is a zero weight, and may regrow */
    for (uint64_t i = 0; i < n; i++)
        if (!mask[i])
            w[i] = 0.0f;
    sc.score = sparse__grow_score;
    return sparse__top(&sc, n, drop, mask, 2);
}
