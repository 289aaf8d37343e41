/* Packed weight chunks of sparse tensors (sstream.h). */
#include "sstream.h"

#include <errno.h>
#include <stdbool.h>
#include <string.h>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "errmsg.h"

/* Which elements of a chunk are kept: a byte per element (bytes[i] != 0),
 * or bits at..at+count-1 of a bit array (bit j%8 of byte j/8). */
typedef struct sstream__keep {
    const uint8_t *bytes;
    const uint8_t *bits;
    uint64_t at;
} sstream__keep;

/* Bits [i, i + n) of a bit array as a byte (n <= 8; the rest zero), reading
 * no byte past the one that holds bit i + n - 1. */
static inline unsigned sstream__bitrange(const uint8_t *bits, uint64_t i, unsigned n)
{
    unsigned sh = (unsigned)(i % 8);
    unsigned b = bits[i / 8] >> sh;
    if (sh + n > 8)
        b |= (unsigned)bits[i / 8 + 1] << (8 - sh);
    return b & ((1u << n) - 1);
}

static inline unsigned sstream__byte(const uint8_t *mask, uint64_t i, uint64_t count);

/* Elements [i, i + 8) of the chunk's keep as a byte, bit j for element
 * i + j (fewer past count: zeros). */
static inline unsigned sstream__get8(const sstream__keep *m, uint64_t i, uint64_t count)
{
    if (m->bytes)
        return sstream__byte(m->bytes, i, count);
    return sstream__bitrange(m->bits, m->at + i, count - i < 8 ? (unsigned)(count - i) : 8);
}

/* AVX-512 (F, BW, VL) for bitmask chunks, 16 elements a step: -1 not
 * asked yet, 0 off (no such processor, or sstream_simd(false)), 1 on. */
static int sstream__simd_on = -1;

static bool sstream__simd(void)
{
    int on = __atomic_load_n(&sstream__simd_on, __ATOMIC_RELAXED);
    if (on < 0) {
#if defined(__x86_64__)
        on = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
             __builtin_cpu_supports("avx512vl");
#else
        on = 0;
#endif
        __atomic_store_n(&sstream__simd_on, on, __ATOMIC_RELAXED);
    }
    return on > 0;
}

bool sstream_simd(bool on)
{
    __atomic_store_n(&sstream__simd_on, on ? -1 : 0, __ATOMIC_RELAXED);
    return sstream__simd();
}

#if defined(__x86_64__)
#define SSTREAM__AVX512 __attribute__((target("avx512f,avx512bw,avx512vl,popcnt")))

/* Packs the 16 elements at i, those of b kept, as sstream_pack does: the
 * values compressed in registers and written with masked stores
 * (compressing straight to memory is slow on some processors). Returns
 * how many it kept. */
SSTREAM__AVX512 static inline __attribute__((always_inline)) unsigned
sstream__pack16(uint32_t pk, __mmask16 b, uint64_t i, const uint8_t *s, uint32_t elem, uint8_t *o,
                uint8_t *vals, uint64_t kk)
{
    const __m512i lanes = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
    unsigned n = (unsigned)_mm_popcnt_u32(b);
    __mmask16 first = (__mmask16)((1u << n) - 1);
    if (pk == SSTREAM_BITMASK) {
        uint16_t b16 = (uint16_t)b;
        memcpy(o + i / 8, &b16, 2);
    } else {
        __m512i at = _mm512_maskz_compress_epi32(
            b, _mm512_add_epi32(_mm512_set1_epi32((int)(uint32_t)i), lanes));
        if (pk == SSTREAM_POS32)
            _mm512_mask_storeu_epi32(o + 4 * kk, first, at);
        else
            _mm256_mask_storeu_epi16(o + 2 * kk, first, _mm512_cvtepi32_epi16(at));
    }
    if (elem == 4) {
        __m512i v = _mm512_maskz_compress_epi32(b, _mm512_loadu_si512(s + 4 * i));
        _mm512_mask_storeu_epi32(vals + 4 * kk, first, v);
    } else {
        __m512i w = _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(s + 2 * i)));
        __m512i v = _mm512_maskz_compress_epi32(b, w);
        _mm256_mask_storeu_epi16(vals + 2 * kk, first, _mm512_cvtepi32_epi16(v));
    }
    return n;
}

/* Packs elements [0, 16 m) of a chunk (m the most whole blocks of 16 in
 * count) as sstream_pack does; *k counts the kept ones. Returns 16 m. */
SSTREAM__AVX512 static uint64_t sstream__pack_avx512(uint32_t pk, const sstream__keep *keep,
                                                     const uint8_t *s, uint64_t count,
                                                     uint32_t elem, uint8_t *o, uint8_t *vals,
                                                     uint64_t *k)
{
    uint64_t i = 0, kk = *k;
    if (keep->bytes) {
        for (; i + 16 <= count; i += 16) {
            __m512i m = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(keep->bytes + i)));
            kk += sstream__pack16(pk, _mm512_test_epi32_mask(m, m), i, s, elem, o, vals, kk);
        }
    } else if (keep->at % 8 == 0) { /* the bits as they lie: 2 bytes a block */
        const uint8_t *bits = keep->bits + keep->at / 8;
        for (; i + 16 <= count; i += 16) {
            uint16_t b16;
            memcpy(&b16, bits + i / 8, 2);
            kk += sstream__pack16(pk, (__mmask16)b16, i, s, elem, o, vals, kk);
        }
    } else {
        for (; i + 16 <= count; i += 16) {
            __mmask16 b = (__mmask16)(sstream__bitrange(keep->bits, keep->at + i, 8) |
                                      sstream__bitrange(keep->bits, keep->at + i + 8, 8) << 8);
            kk += sstream__pack16(pk, b, i, s, elem, o, vals, kk);
        }
    }
    *k = kk;
    return i;
}

/* The mask's nonzero bytes among [0, 64 m) (m the whole blocks of 64 in
 * count); *done = 64 m. */
SSTREAM__AVX512 static uint64_t sstream__count_avx512(const uint8_t *mask, uint64_t count,
                                                      uint64_t *done)
{
    uint64_t i = 0, k = 0;
    for (; i + 64 <= count; i += 64) {
        __m512i m = _mm512_loadu_si512(mask + i);
        k += (uint64_t)_mm_popcnt_u64(_mm512_test_epi8_mask(m, m));
    }
    *done = i;
    return k;
}

/* Expands elements [0, 16 m) of a bitmask chunk as sstream_expand does
 * (zeros written with them). Returns 16 m; *k counts the values taken. */
SSTREAM__AVX512 static uint64_t sstream__expand_avx512(const uint8_t *p, const uint8_t *vals,
                                                       uint64_t count, uint32_t elem, uint8_t *d,
                                                       uint64_t *k)
{
    uint64_t i = 0, kk = *k;
    for (; i + 16 <= count; i += 16) {
        uint16_t b16;
        memcpy(&b16, p + i / 8, 2);
        __mmask16 b = (__mmask16)b16;
        unsigned n = (unsigned)_mm_popcnt_u32(b16);
        __mmask16 first = (__mmask16)((1u << n) - 1);
        if (elem == 4) {
            __m512i v = _mm512_maskz_loadu_epi32(first, vals + 4 * kk);
            _mm512_storeu_si512(d + 4 * i, _mm512_maskz_expand_epi32(b, v));
        } else {
            __m512i v = _mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(first, vals + 2 * kk));
            _mm256_storeu_si256((__m256i *)(d + 2 * i),
                                _mm512_cvtepi32_epi16(_mm512_maskz_expand_epi32(b, v)));
        }
        kk += n;
    }
    *k = kk;
    return i;
}
#endif

/* n rounded up to a multiple of 4 */
static uint64_t sstream__pad4(uint64_t n)
{
    return (n + 3) & ~(uint64_t)3;
}

uint64_t sstream_index_bytes(uint32_t pk, uint64_t count, uint64_t kept)
{
    if (kept > count)
        return UINT64_MAX;
    switch (pk) {
    case SSTREAM_DENSE:
        return kept == 0 ? 0 : UINT64_MAX; /* (a dense chunk declares none kept) */
    case SSTREAM_BITMASK:
        return sstream__pad4((count + 7) / 8);
    case SSTREAM_POS16:
        return count <= SSTREAM_POS16_MAX ? sstream__pad4(2 * kept) : UINT64_MAX;
    case SSTREAM_POS32:
        return 4 * kept;
    default:
        return UINT64_MAX;
    }
}

uint64_t sstream_bytes(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem)
{
    uint64_t index = sstream_index_bytes(pk, count, kept);
    if (index == UINT64_MAX)
        return UINT64_MAX;
    return index + (pk == SSTREAM_DENSE ? count : kept) * elem;
}

/* The 8 mask bytes at m as 8 bits, bit i set when byte i is not zero. */
static inline unsigned sstream__bits8(const uint8_t *m)
{
    uint64_t w;
    memcpy(&w, m, 8);
    w |= w >> 4;
    w |= w >> 2;
    w |= w >> 1;
    w &= 0x0101010101010101ull; /* bit 0 of each byte: it was not zero */
    return (unsigned)((w * 0x0102040810204080ull) >> 56);
}

/* Bits [i, i + 8) of the mask as a byte (fewer past count: zeros). */
static inline unsigned sstream__byte(const uint8_t *mask, uint64_t i, uint64_t count)
{
    if (i + 8 <= count)
        return sstream__bits8(mask + i);
    unsigned b = 0;
    for (uint64_t k = i; k < count; k++)
        b |= (unsigned)(mask[k] != 0) << (k - i);
    return b;
}

/* The bits set in v (without the popcnt instruction, which the build
 * does not assume: a libgcc call per byte took 5% of a sparse step). */
static inline uint64_t sstream__popcount64(uint64_t v)
{
    v = v - ((v >> 1) & 0x5555555555555555ull);
    v = (v & 0x3333333333333333ull) + ((v >> 2) & 0x3333333333333333ull);
    v = (v + (v >> 4)) & 0x0f0f0f0f0f0f0f0full;
    return (v * 0x0101010101010101ull) >> 56;
}

/* The packing of the smallest payload for a chunk of count elements, k
 * of them kept (sstream_choose); *kept is k, or 0 for dense. */
static uint32_t sstream__choose(uint64_t count, uint64_t k, uint32_t elem, uint64_t *kept)
{
    *kept = k;
    uint32_t best = SSTREAM_DENSE;
    uint64_t least = count * elem;
    static const uint32_t packed[] = {SSTREAM_BITMASK, SSTREAM_POS16, SSTREAM_POS32};
    for (size_t p = 0; p < sizeof(packed) / sizeof(packed[0]); p++) {
        uint64_t b = sstream_bytes(packed[p], count, k, elem);
        if (b > 0 && b < least) { /* (never empty: a frame without payload is none) */
            least = b;
            best = packed[p];
        }
    }
    if (best == SSTREAM_DENSE)
        *kept = 0;
    return best;
}

uint32_t sstream_choose(const uint8_t *mask, uint64_t count, uint32_t elem, uint64_t *kept)
{
    uint64_t k = 0, i = 0;
#if defined(__x86_64__)
    if (sstream__simd())
        k = sstream__count_avx512(mask, count, &i);
#endif
    for (; i < count; i++)
        k += mask[i] != 0;
    return sstream__choose(count, k, elem, kept);
}

uint32_t sstream_choose_bits(const uint8_t *bits, uint64_t at, uint64_t count, uint32_t elem,
                             uint64_t *kept)
{
    return sstream__choose(count, sstream_count_bits(bits, at, count), elem, kept);
}

uint64_t sstream_count_bits(const uint8_t *bits, uint64_t at, uint64_t count)
{
    uint64_t k = 0, i = 0;
    for (; i < count && (at + i) % 8; i++) /* to a byte's start */
        k += bits[(at + i) / 8] >> ((at + i) % 8) & 1;
    for (; i + 64 <= count; i += 64) {
        uint64_t w;
        memcpy(&w, bits + (at + i) / 8, 8);
        k += sstream__popcount64(w);
    }
    for (; i + 8 <= count; i += 8)
        k += sstream__popcount64(bits[(at + i) / 8]);
    if (i < count)
        k += sstream__popcount64(sstream__bitrange(bits, at + i, (unsigned)(count - i)));
    return k;
}

/* Packs with elements of ELEM bytes (a constant in each copy, so that the
 * copies are plain loads and stores). */
#define SSTREAM__PACK(ELEM)                                                                    \
    for (uint64_t i = i0; i < count; i += 8) {                                                \
        unsigned bits = sstream__get8(keep, i, count);                                         \
        if (pk == SSTREAM_BITMASK)                                                             \
            o[i / 8] = (uint8_t)bits;                                                          \
        while (bits) {                                                                         \
            uint64_t at = i + (unsigned)__builtin_ctz(bits);                                  \
            bits &= bits - 1;                                                                  \
            if (pk == SSTREAM_POS16) {                                                         \
                uint16_t p16 = (uint16_t)at;                                                   \
                memcpy(o + 2 * k, &p16, 2);                                                    \
            } else if (pk == SSTREAM_POS32) {                                                  \
                uint32_t p32 = (uint32_t)at;                                                   \
                memcpy(o + 4 * k, &p32, 4);                                                    \
            }                                                                                  \
            memcpy(vals + k * (ELEM), s + at * (ELEM), (ELEM));                               \
            k++;                                                                               \
        }                                                                                      \
    }

static void sstream__pack(uint32_t pk, const sstream__keep *keep, const void *src, uint64_t count,
                          uint64_t kept, uint32_t elem, void *out)
{
    const uint8_t *s = src;
    uint8_t *o = out;
    if (pk == SSTREAM_DENSE) {
        memcpy(o, s, count * elem);
        return;
    }
    uint64_t index = sstream_index_bytes(pk, count, kept);
    uint8_t *vals = o + index;
    memset(o, 0, index); /* the bitmask's bits, and the padding */
    uint64_t k = 0, i0 = 0;
#if defined(__x86_64__)
    if ((elem == 4 || elem == 2) && sstream__simd())
        i0 = sstream__pack_avx512(pk, keep, s, count, elem, o, vals, &k);
#endif
    if (elem == 4) {
        SSTREAM__PACK(4)
    } else if (elem == 2) {
        SSTREAM__PACK(2)
    } else {
        SSTREAM__PACK(elem)
    }
}

void sstream_pack(uint32_t pk, const uint8_t *mask, const void *src, uint64_t count, uint64_t kept,
                  uint32_t elem, void *out)
{
    sstream__keep keep = {.bytes = mask};
    sstream__pack(pk, &keep, src, count, kept, elem, out);
}

void sstream_pack_bits(uint32_t pk, const uint8_t *bits, uint64_t at, const void *src,
                       uint64_t count, uint64_t kept, uint32_t elem, void *out)
{
    sstream__keep keep = {.bits = bits, .at = at};
    sstream__pack(pk, &keep, src, count, kept, elem, out);
}

int sstream_check(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem, const void *payload,
                  uint64_t len, char *err, size_t errlen)
{
    uint64_t want = sstream_bytes(pk, count, kept, elem);
    if (want == UINT64_MAX)
        return errmsg(-EINVAL, err, errlen, "%s packing of %llu kept of %llu elements",
                      sstream_name(pk), (unsigned long long)kept, (unsigned long long)count);
    if (len != want)
        return errmsg(-EINVAL, err, errlen, "%s packing of %llu kept of %llu elements in %llu "
                      "bytes, expected %llu (index truncated or padded)", sstream_name(pk),
                      (unsigned long long)kept, (unsigned long long)count,
                      (unsigned long long)len, (unsigned long long)want);
    const uint8_t *p = payload;
    uint64_t index = sstream_index_bytes(pk, count, kept);
    if (pk == SSTREAM_BITMASK) {
        uint64_t bytes = (count + 7) / 8, set = 0, b = 0;
        for (; b + 8 <= bytes; b += 8) {
            uint64_t v;
            memcpy(&v, p + b, 8);
            set += sstream__popcount64(v);
        }
        for (; b < bytes; b++)
            set += sstream__popcount64(p[b]);
        bool past = count % 8 && (p[bytes - 1] >> (count % 8));
        for (b = bytes; b < index; b++)
            past |= p[b] != 0;
        if (past)
            return errmsg(-EINVAL, err, errlen, "bitmask of %llu elements sets bits past its end",
                          (unsigned long long)count);
        if (set != kept)
            return errmsg(-EINVAL, err, errlen, "bitmask of %llu elements sets %llu bits, the "
                          "chunk says %llu kept", (unsigned long long)count,
                          (unsigned long long)set, (unsigned long long)kept);
    } else if (pk == SSTREAM_POS16 || pk == SSTREAM_POS32) {
        uint64_t prev = 0;
        for (uint64_t k = 0; k < kept; k++) {
            uint64_t at;
            if (pk == SSTREAM_POS16) {
                uint16_t v;
                memcpy(&v, p + 2 * k, 2);
                at = v;
            } else {
                uint32_t v;
                memcpy(&v, p + 4 * k, 4);
                at = v;
            }
            if (at >= count)
                return errmsg(-EINVAL, err, errlen, "position %llu (kept element %llu) past the "
                              "chunk's %llu elements", (unsigned long long)at,
                              (unsigned long long)k, (unsigned long long)count);
            if (k > 0 && at <= prev)
                return errmsg(-EINVAL, err, errlen, "position %llu (kept element %llu) after %llu: "
                              "positions must rise", (unsigned long long)at,
                              (unsigned long long)k, (unsigned long long)prev);
            prev = at;
        }
        for (uint64_t b = (pk == SSTREAM_POS16 ? 2 : 4) * kept; b < index; b++)
            if (p[b])
                return errmsg(-EINVAL, err, errlen, "positions' padding holds %u at byte %llu "
                              "(zeros)", p[b], (unsigned long long)b);
    }
    return 0;
}

/* The position of kept element k of a positions payload. */
static uint64_t sstream__pos(uint32_t pk, const uint8_t *p, uint64_t k)
{
    if (pk == SSTREAM_POS16) {
        uint16_t v;
        memcpy(&v, p + 2 * k, 2);
        return v;
    }
    uint32_t v;
    memcpy(&v, p + 4 * k, 4);
    return v;
}

/* Expands with elements of ELEM bytes (as SSTREAM__PACK). */
#define SSTREAM__EXPAND(ELEM)                                                                  \
    if (pk == SSTREAM_BITMASK) {                                                               \
        uint64_t k = k0, bytes = (count + 7) / 8;                                              \
        for (uint64_t b = i0 / 8; b < bytes; b++) {                                            \
            unsigned bits = p[b];                                                              \
            while (bits) {                                                                     \
                unsigned bit = (unsigned)__builtin_ctz(bits);                                  \
                bits &= bits - 1;                                                              \
                memcpy(d + (8 * b + bit) * (ELEM), vals + k * (ELEM), (ELEM));                 \
                k++;                                                                           \
            }                                                                                  \
        }                                                                                      \
    } else {                                                                                   \
        for (uint64_t k = 0; k < kept; k++)                                                    \
            memcpy(d + sstream__pos(pk, p, k) * (ELEM), vals + k * (ELEM), (ELEM));           \
    }

void sstream_expand(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem, const void *payload,
                    void *dst)
{
    const uint8_t *p = payload;
    uint8_t *d = dst;
    if (pk == SSTREAM_DENSE) {
        memcpy(d, p, count * elem);
        return;
    }
    const uint8_t *vals = p + sstream_index_bytes(pk, count, kept);
    uint64_t i0 = 0, k0 = 0; /* elements (a multiple of 8) and values done */
#if defined(__x86_64__)
    if (pk == SSTREAM_BITMASK && (elem == 4 || elem == 2) && sstream__simd())
        i0 = sstream__expand_avx512(p, vals, count, elem, d, &k0);
#endif
    memset(d + i0 * elem, 0, (count - i0) * elem);
    if (elem == 4) {
        SSTREAM__EXPAND(4)
    } else if (elem == 2) {
        SSTREAM__EXPAND(2)
    } else {
        SSTREAM__EXPAND(elem)
    }
}

void sstream_mark(uint32_t pk, uint64_t count, uint64_t kept, const void *payload, uint8_t *bits,
                  uint64_t at)
{
    const uint8_t *p = payload;
    uint64_t whole = at % 8 == 0 ? count / 8 : 0; /* bytes of bits set at once */
    if (whole && pk == SSTREAM_BITMASK)
        memcpy(bits + at / 8, p, whole);
    else if (whole)
        memset(bits + at / 8, pk == SSTREAM_DENSE ? 0xff : 0, whole);
    for (uint64_t i = 8 * whole; i < count; i++) {
        uint64_t b = at + i;
        bool on = pk == SSTREAM_DENSE || (pk == SSTREAM_BITMASK && (p[i / 8] >> (i % 8) & 1));
        if (on)
            bits[b / 8] |= (uint8_t)(1u << (b % 8));
        else
            bits[b / 8] &= (uint8_t)~(1u << (b % 8));
    }
    if (pk == SSTREAM_POS16 || pk == SSTREAM_POS32)
        for (uint64_t k = 0; k < kept; k++) {
            uint64_t b = at + sstream__pos(pk, p, k);
            bits[b / 8] |= (uint8_t)(1u << (b % 8));
        }
}

const char *sstream_name(uint32_t pk)
{
    switch (pk) {
    case SSTREAM_DENSE:
        return "dense";
    case SSTREAM_BITMASK:
        return "bitmask";
    case SSTREAM_POS16:
        return "16-bit positions";
    case SSTREAM_POS32:
        return "32-bit positions";
    default:
        return "unknown";
    }
}

/* Runs BODY for each element i < COUNT that bits AT..AT+COUNT-1 keep, with
 * k counting them from 0. */
#define SSTREAM__EACH_BIT(BITS, AT, COUNT, BODY)                                               \
    {                                                                                          \
        uint64_t k_ = 0;                                                                       \
        for (uint64_t i0_ = 0; i0_ < (COUNT); i0_ += 8) {                                      \
            unsigned b_ = sstream__bitrange((BITS), (AT) + i0_,                                \
                                            (COUNT) - i0_ < 8 ? (unsigned)((COUNT) - i0_) : 8); \
            while (b_) {                                                                       \
                uint64_t i = i0_ + (unsigned)__builtin_ctz(b_), k = k_++;                     \
                b_ &= b_ - 1;                                                                  \
                (void)i;                                                                       \
                (void)k;                                                                       \
                BODY                                                                           \
            }                                                                                  \
        }                                                                                      \
    }

void sstream_pack_kept(uint32_t pk, const uint8_t *bits, uint64_t at, const void *vals,
                       uint64_t count, uint64_t kept, uint32_t elem, void *out)
{
    uint8_t *o = out;
    const uint8_t *v = vals;
    if (pk == SSTREAM_DENSE) {
        memset(o, 0, count * elem);
        SSTREAM__EACH_BIT(bits, at, count, { memcpy(o + i * elem, v + k * elem, elem); })
        return;
    }
    uint64_t index = sstream_index_bytes(pk, count, kept);
    memset(o, 0, index);
    if (pk == SSTREAM_BITMASK) {
        uint64_t bytes = (count + 7) / 8;
        if (at % 8 == 0) {
            memcpy(o, bits + at / 8, bytes);
            if (count % 8)
                o[bytes - 1] &= (uint8_t)((1u << (count % 8)) - 1);
        } else {
            for (uint64_t b = 0; b < bytes; b++)
                o[b] = (uint8_t)sstream__bitrange(bits, at + 8 * b,
                                                  count - 8 * b < 8 ? (unsigned)(count - 8 * b) : 8);
        }
    } else if (pk == SSTREAM_POS16) {
        SSTREAM__EACH_BIT(bits, at, count, {
            uint16_t p16 = (uint16_t)i;
            memcpy(o + 2 * k, &p16, 2);
        })
    } else {
        SSTREAM__EACH_BIT(bits, at, count, {
            uint32_t p32 = (uint32_t)i;
            memcpy(o + 4 * k, &p32, 4);
        })
    }
    memcpy(o + index, v, kept * elem);
}

int64_t sstream_take_kept(uint32_t pk, uint64_t count, uint64_t kept, uint32_t elem,
                          const void *payload, const uint8_t *bits, uint64_t at, void *vals,
                          char *err, size_t errlen)
{
    const uint8_t *p = payload;
    uint8_t *v = vals;
    if (pk == SSTREAM_DENSE) {
        uint64_t n = 0;
        SSTREAM__EACH_BIT(bits, at, count, {
            memcpy(v + k * elem, p + i * elem, elem);
            n = k + 1;
        })
        return (int64_t)n;
    }
    uint64_t bad = UINT64_MAX, n = 0;
    if (pk == SSTREAM_BITMASK) {
        uint64_t bytes = (count + 7) / 8, b = 0;
        if (at % 8 == 0) /* whole bytes at once, up to the first that differs */
            for (uint64_t step = 4096; b < bytes;) {
                uint64_t m = bytes - b < step ? bytes - b : step;
                if (count % 8 && b + m == bytes)
                    m--; /* (the last byte's bits past count are not the mask's) */
                if (m == 0 || memcmp(bits + at / 8 + b, p + b, m) != 0)
                    break;
                b += m;
            }
        for (; b < bytes && bad == UINT64_MAX; b++) {
            unsigned want = sstream__bitrange(bits, at + 8 * b,
                                              count - 8 * b < 8 ? (unsigned)(count - 8 * b) : 8);
            if (want != p[b])
                bad = 8 * b + (unsigned)__builtin_ctz(want ^ p[b]);
        }
        n = kept;
    } else {
        SSTREAM__EACH_BIT(bits, at, count, {
            if (k >= kept || sstream__pos(pk, p, k) != i) {
                if (bad == UINT64_MAX)
                    bad = k < kept && sstream__pos(pk, p, k) < i ? sstream__pos(pk, p, k) : i;
            }
            n = k + 1;
        })
        if (bad == UINT64_MAX && n != kept)
            bad = sstream__pos(pk, p, n);
    }
    if (bad != UINT64_MAX)
        return errmsg(-EINVAL, err, errlen, "its %s index and the mask differ at element %llu "
                      "of the chunk", sstream_name(pk), (unsigned long long)bad);
    memcpy(v, p + sstream_index_bytes(pk, count, kept), kept * elem);
    return (int64_t)kept;
}
