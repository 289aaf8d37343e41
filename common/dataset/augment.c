/* Random flips, quarter turns and crops, seeded per (seed, epoch, index). */
#include "augment.h"

#include <assert.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "rng.h"

#define AUGMENT_STREAM 0x6175676du /* "augm": draws no other part of the worker makes */
#define AUGMENT_STREAM_MZ 0x6d7a6175u /* "mzau": the Model Zoo's augment_data */

unsigned augment_draw(uint64_t seed, uint64_t epoch, uint64_t idx, bool flip_h, bool flip_v)
{
    if (!flip_h && !flip_v)
        return 0;
    uint64_t r = rng_hash(rng_hash(seed, AUGMENT_STREAM, epoch), AUGMENT_STREAM, idx);
    unsigned flags = 0;
    if (flip_h && (r & 1))
        flags |= AUGMENT_FLIP_H;
    if (flip_v && (r & 2))
        flags |= AUGMENT_FLIP_V;
    return flags;
}

unsigned augment_draw_mz(uint64_t seed, uint64_t epoch, uint64_t idx, bool square)
{
    uint64_t r = rng_hash(rng_hash(seed, AUGMENT_STREAM_MZ, epoch), AUGMENT_STREAM_MZ, idx);
    unsigned flags = 0;
    if (r & 1)
        flags |= AUGMENT_FLIP_H;
    if (r & 2)
        flags |= AUGMENT_BRIGHTEN;
    /* 0, 1 or 2 from the top 32 bits, by multiplying rather than a modulo,
     * so that each is as likely as 2^32 allows */
    unsigned turns = (unsigned)(((r >> 32) * 3) >> 32);
    if (!square)
        turns = (turns * 2) % 4;
    return flags | turns << AUGMENT_TURN_SHIFT;
}

/* augment__flip_T: mirrors one (H, W) plane of T in place. */
#define AUGMENT_FLIP_PLANE(T)                                                                     \
    static void augment__flip_##T(T *p, uint32_t h, uint32_t w, unsigned flags)                   \
    {                                                                                             \
        if (flags & AUGMENT_FLIP_H)                                                               \
            for (uint32_t y = 0; y < h; y++) {                                                    \
                T *row = p + (size_t)y * w;                                                       \
                for (uint32_t a = 0, b = w - 1; a < b; a++, b--) {                                \
                    T t = row[a];                                                                 \
                    row[a] = row[b];                                                              \
                    row[b] = t;                                                                   \
                }                                                                                 \
            }                                                                                     \
        if (flags & AUGMENT_FLIP_V)                                                               \
            for (uint32_t a = 0, b = h - 1; a < b; a++, b--) {                                    \
                T *ra = p + (size_t)a * w, *rb = p + (size_t)b * w;                               \
                for (uint32_t x = 0; x < w; x++) {                                                \
                    T t = ra[x];                                                                  \
                    ra[x] = rb[x];                                                                \
                    rb[x] = t;                                                                    \
                }                                                                                 \
            }                                                                                     \
    }

AUGMENT_FLIP_PLANE(uint8_t)
AUGMENT_FLIP_PLANE(uint32_t)

/* augment__turn_T: one quarter turn counter-clockwise of an (n, n) plane in
 * place, out[y][x] = in[x][n-1-y] (torch.rot90 with k = 1), by cycles of
 * four pixels. */
#define AUGMENT_TURN_PLANE(T)                                                                     \
    static void augment__turn_##T(T *p, uint32_t n)                                               \
    {                                                                                             \
        for (uint32_t y = 0; y < n / 2; y++)                                                      \
            for (uint32_t x = 0; x < (n + 1) / 2; x++) {                                          \
                size_t p0 = (size_t)y * n + x, p1 = (size_t)x * n + (n - 1 - y);                  \
                size_t p2 = (size_t)(n - 1 - y) * n + (n - 1 - x);                                \
                size_t p3 = (size_t)(n - 1 - x) * n + y;                                          \
                T t = p[p0];                                                                      \
                p[p0] = p[p1];                                                                    \
                p[p1] = p[p2];                                                                    \
                p[p2] = p[p3];                                                                    \
                p[p3] = t;                                                                        \
            }                                                                                     \
    }

AUGMENT_TURN_PLANE(uint8_t)
AUGMENT_TURN_PLANE(uint32_t)

/* Flips one plane of values of `size` bytes. */
static void augment__flip(void *p, size_t size, uint32_t h, uint32_t w, unsigned flags)
{
    if (size == 1)
        augment__flip_uint8_t(p, h, w, flags);
    else
        augment__flip_uint32_t(p, h, w, flags);
}

/* Transforms one plane of values of `size` bytes: the flips, then the
 * turns (two are both flips). */
static void augment__plane(void *p, size_t size, uint32_t h, uint32_t w, unsigned flags)
{
    unsigned turns = AUGMENT_TURNS(flags);
    unsigned flips = flags & (AUGMENT_FLIP_H | AUGMENT_FLIP_V);
    if (flips)
        augment__flip(p, size, h, w, flips);
    if (turns & 1) {
        assert(h == w);
        if (size == 1)
            augment__turn_uint8_t(p, h);
        else
            augment__turn_uint32_t(p, h);
    }
    if (turns & 2)
        augment__flip(p, size, h, w, AUGMENT_FLIP_H | AUGMENT_FLIP_V);
}

void augment_apply(unsigned flags, const augment_image *img)
{
    flags &= AUGMENT_FLIP_H | AUGMENT_FLIP_V | AUGMENT_TURN_MASK;
    if (!flags || !img->h || !img->w)
        return;
    size_t plane = (size_t)img->h * img->w;
    for (uint32_t k = 0; k < img->c; k++)
        augment__plane((uint8_t *)img->x + k * plane * img->x_size, img->x_size, img->h, img->w,
                       flags);
    if (img->mask)
        augment__plane(img->mask, img->mask_size, img->h, img->w, flags);
}

/* augment__shift_T: moves one (H, W) plane by (dy, dx), filling with zero. */
#define AUGMENT_SHIFT_PLANE(T)                                                                    \
    static void augment__shift_##T(T *p, uint32_t h, uint32_t w, int dy, int dx)                  \
    {                                                                                             \
        int H = (int)h, W = (int)w;                                                               \
        for (int i = 0; i < H; i++) { /* rows, in an order that reads before it writes */        \
            int y = dy > 0 ? H - 1 - i : i, src = y - dy;                                         \
            if (src >= 0 && src < H)                                                              \
                memmove(p + (size_t)y * w, p + (size_t)src * w, w * sizeof(T));                   \
            else                                                                                  \
                memset(p + (size_t)y * w, 0, w * sizeof(T));                                      \
        }                                                                                         \
        if (dx == 0)                                                                              \
            return;                                                                               \
        int keep = W - (dx > 0 ? dx : -dx);                                                       \
        for (int y = 0; y < H; y++) {                                                             \
            T *row = p + (size_t)y * w;                                                           \
            if (keep <= 0) {                                                                      \
                memset(row, 0, w * sizeof(T));                                                    \
            } else if (dx > 0) {                                                                  \
                memmove(row + dx, row, (size_t)keep * sizeof(T));                                 \
                memset(row, 0, (size_t)dx * sizeof(T));                                           \
            } else {                                                                              \
                memmove(row, row - dx, (size_t)keep * sizeof(T));                                 \
                memset(row + keep, 0, (size_t)(-dx) * sizeof(T));                                 \
            }                                                                                     \
        }                                                                                         \
    }

AUGMENT_SHIFT_PLANE(uint8_t)
AUGMENT_SHIFT_PLANE(uint32_t)

static void augment__shift(void *p, size_t size, uint32_t h, uint32_t w, int dy, int dx)
{
    if (size == 1)
        augment__shift_uint8_t(p, h, w, dy, dx);
    else
        augment__shift_uint32_t(p, h, w, dy, dx);
}

void augment_crop(uint64_t seed, uint64_t epoch, uint64_t idx, uint32_t pad,
                  const augment_image *img)
{
    if (pad == 0 || !img->h || !img->w)
        return;
    uint64_t r = rng_hash(rng_hash(seed, AUGMENT_STREAM + 1, epoch), AUGMENT_STREAM + 1, idx);
    int span = 2 * (int)pad + 1;
    int dy = (int)(r % (uint64_t)span) - (int)pad;
    int dx = (int)((r >> 32) % (uint64_t)span) - (int)pad;
    size_t plane = (size_t)img->h * img->w;
    for (uint32_t k = 0; k < img->c; k++)
        augment__shift((uint8_t *)img->x + k * plane * img->x_size, img->x_size, img->h, img->w,
                       dy, dx);
    if (img->mask)
        augment__shift(img->mask, img->mask_size, img->h, img->w, dy, dx);
}
