/* bfloat16 conversions (bf16.h). */
#include "bf16.h"

#include <string.h>

static float bf16__widen(uint16_t h)
{
    uint32_t u = (uint32_t)h << 16;
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

/* Cloned for each vector width, called through the plain bf16_pack: clang
 * names a clone set's entry "bf16_pack.ifunc" and leaves callers in other
 * files unresolved (the fuzzing build's link). */
__attribute__((target_clones("avx512f", "avx2", "default")))
static void bf16__pack(uint16_t *out, const float *in, size_t count)
{
    /* to nearest, ties to even; a NaN stays one, quiet (no branch: the
     * loop vectorizes) */
    for (size_t i = 0; i < count; i++) {
        uint32_t u;
        memcpy(&u, &in[i], sizeof(u));
        uint32_t rounded = (u + 0x7fffu + ((u >> 16) & 1u)) >> 16;
        uint32_t quiet = (u >> 16) | 0x40u;
        out[i] = (uint16_t)((u & 0x7fffffffu) > 0x7f800000u ? quiet : rounded);
    }
}

void bf16_pack(uint16_t *out, const float *in, size_t count)
{
    bf16__pack(out, in, count);
}

void bf16_unpack(float *out, const uint16_t *in, size_t count)
{
    const uint8_t *ib = (const uint8_t *)in;
    uint8_t *ob = (uint8_t *)out;
    if (ib >= ob + count * sizeof(float) || ib + count * sizeof(uint16_t) <= ob) {
        for (size_t i = 0; i < count; i++) /* apart: a plain loop that vectorizes */
            out[i] = bf16__widen(in[i]);
        return;
    }
    /* overlapping (the payload at the upper half of out): a block at a time
     * through a copy, front to back; each block's output ends before the
     * input still to read begins */
    uint16_t block[256];
    for (size_t done = 0; done < count; done += 256) {
        size_t k = count - done < 256 ? count - done : 256;
        memcpy(block, ib + done * sizeof(uint16_t), k * sizeof(uint16_t));
        for (size_t i = 0; i < k; i++) {
            float f = bf16__widen(block[i]);
            memcpy(ob + (done + i) * sizeof(float), &f, sizeof(f));
        }
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
