/* bfloat16 conversions (bf16.h). */
#include "bf16.h"

#include <string.h>

static uint16_t bf16__round(float f)
{
    uint32_t u;
    memcpy(&u, &f, sizeof(u));
    if ((u & 0x7fffffffu) > 0x7f800000u) /* NaN: keep it one, quiet */
        return (uint16_t)((u >> 16) | 0x40);
    return (uint16_t)((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}

static float bf16__widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

void bf16_pack(uint16_t *out, const float *in, size_t count)
{
    for (size_t i = 0; i < count; i++)
        out[i] = bf16__round(in[i]);
}

void bf16_unpack(float *out, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++) {
        uint16_t h;
        memcpy(&h, in + i, sizeof(h)); /* read before out[i] may cover it */
        float f = bf16__widen(h);
        memcpy(out + i, &f, sizeof(f));
    }
}

void bf16_add(float *acc, const uint16_t *in, size_t count)
{
    for (size_t i = 0; i < count; i++)
        acc[i] += bf16__widen(in[i]);
}

void bf16_pack_in_place(void *buf, size_t count)
{
    /* a block at a time through a copy: the packed values trail the ones
     * still to read */
    float block[256];
    uint16_t out[256];
    uint8_t *p = buf;
    for (size_t done = 0; done < count; done += 256) {
        size_t k = count - done < 256 ? count - done : 256;
        memcpy(block, p + done * sizeof(float), k * sizeof(float));
        bf16_pack(out, block, k);
        memcpy(p + done * sizeof(uint16_t), out, k * sizeof(uint16_t));
    }
}
