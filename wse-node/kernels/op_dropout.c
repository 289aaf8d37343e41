/* Dropout on a counter-based generator: one Philox block gives the draws of
 * four consecutive global elements. */
#include "op_dropout.h"

#include <string.h>

void op_philox4x32(uint32_t out[4], const uint32_t ctr[4],
                   const uint32_t key[2])
{
    uint32_t c0 = ctr[0], c1 = ctr[1], c2 = ctr[2], c3 = ctr[3];
    uint32_t k0 = key[0], k1 = key[1];
    for (int round = 0; round < 10; round++) {
        uint64_t p0 = (uint64_t)0xD2511F53u * c0;
        uint64_t p1 = (uint64_t)0xCD9E8D57u * c2;
        uint32_t n0 = (uint32_t)(p1 >> 32) ^ c1 ^ k0;
        uint32_t n2 = (uint32_t)(p0 >> 32) ^ c3 ^ k1;
        c1 = (uint32_t)p1;
        c3 = (uint32_t)p0;
        c0 = n0;
        c2 = n2;
        k0 += 0x9E3779B9u;
        k1 += 0xBB67AE85u;
    }
    out[0] = c0;
    out[1] = c1;
    out[2] = c2;
    out[3] = c3;
}

static uint64_t splitmix64(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Generator state of one walk over consecutive global elements. */
typedef struct draws {
    uint32_t key[2];   /* Philox key from seed and layer */
    uint32_t ctr[4];   /* block index (0, 1), step (2, 3) */
    uint32_t buf[4];   /* draws of the current block */
    uint64_t block;    /* block held in buf, UINT64_MAX before the first */
} draws;

static void draws_init(draws *d, const op_dropout_key *key)
{
    uint64_t k = splitmix64(key->seed ^ splitmix64((uint64_t)(int64_t)key->layer));
    d->key[0] = (uint32_t)k;
    d->key[1] = (uint32_t)(k >> 32);
    d->ctr[2] = (uint32_t)(uint64_t)key->step;
    d->ctr[3] = (uint32_t)((uint64_t)key->step >> 32);
    d->block = UINT64_MAX;
}

static uint32_t draw_at(draws *d, uint64_t e)
{
    uint64_t b = e >> 2;
    if (b != d->block) {
        d->ctr[0] = (uint32_t)b;
        d->ctr[1] = (uint32_t)(b >> 32);
        op_philox4x32(d->buf, d->ctr, d->key);
        d->block = b;
    }
    return d->buf[e & 3];
}

static uint32_t threshold_of(float p)
{
    return (uint32_t)((double)p * 4294967296.0);
}

void op_dropout_mask(uint8_t *mask, size_t count, uint64_t first, float p,
                     const op_dropout_key *key)
{
    /* mask (count) */
    if (p <= 0.0f || p >= 1.0f) {
        memset(mask, p <= 0.0f, count);
        return;
    }
    draws d;
    draws_init(&d, key);
    uint32_t t = threshold_of(p);
    for (size_t i = 0; i < count; i++)
        mask[i] = draw_at(&d, first + i) >= t;
}

/* out = in * mask * scale; shared by forward and backward, which are the
 * same linear map. */
static void apply(float *out, const float *in, size_t count, uint64_t first,
                  float p, const op_dropout_key *key)
{
    if (p <= 0.0f) {
        if (out != in)
            memmove(out, in, sizeof(float) * count);
        return;
    }
    if (p >= 1.0f) {
        memset(out, 0, sizeof(float) * count);
        return;
    }
    draws d;
    draws_init(&d, key);
    uint32_t t = threshold_of(p);
    float scale = (float)(1.0 / (1.0 - (double)p));
    for (size_t i = 0; i < count; i++)
        out[i] = draw_at(&d, first + i) >= t ? in[i] * scale : 0.0f;
}

void op_dropout_forward(float *out, const float *in, size_t count,
                        uint64_t first, float p, const op_dropout_key *key)
{
    /* in, out (count) */
    apply(out, in, count, first, p, key);
}

void op_dropout_backward(float *din, const float *dout, size_t count,
                         uint64_t first, float p, const op_dropout_key *key)
{
    /* dout, din (count) */
    apply(din, dout, count, first, p, key);
}
