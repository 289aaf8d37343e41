/* Packed weight chunks (common/wire/sstream.c): round trips at densities
 * 0, 1%, 10%, 50% and 100% in float32 and bfloat16, chunk lengths around
 * the bitmask's byte edges and the 16-bit positions' limit; the packing
 * chosen is the smallest, and never larger than dense. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sstream.h"

static char err[256];

/* A mask of count elements keeping about density of them (exactly none at
 * 0 and all at 1), from a fixed linear congruential sequence. */
static void make_mask(uint8_t *mask, uint64_t count, double density, uint64_t seed)
{
    uint64_t x = seed * 6364136223846793005ull + 1442695040888963407ull;
    for (uint64_t i = 0; i < count; i++) {
        x = x * 6364136223846793005ull + 1442695040888963407ull;
        mask[i] = (double)(x >> 11) / 9007199254740992.0 < density;
    }
}

/* Packs count elements (elem bytes, all nonzero) under mask, checks the
 * payload, expands it, and compares with the elements masked by hand.
 * Returns the payload's bytes. */
static uint64_t round_trip(const uint8_t *mask, uint64_t count, uint32_t elem, uint32_t *pk_out)
{
    uint8_t *src = malloc(count * elem + 1), *want = malloc(count * elem + 1);
    uint8_t *out = malloc(count * elem + 1);
    ck_assert_ptr_nonnull(src);
    for (uint64_t i = 0; i < count * elem; i++)
        src[i] = (uint8_t)(i * 7 + 1) | 1; /* every element nonzero */
    for (uint64_t i = 0; i < count; i++)
        if (mask[i])
            memcpy(want + i * elem, src + i * elem, elem);
        else
            memset(want + i * elem, 0, elem);
    uint64_t kept;
    uint32_t pk = sstream_choose(mask, count, elem, &kept);
    uint64_t bytes = sstream_bytes(pk, count, kept, elem);
    ck_assert_uint_le(bytes, count * elem);
    uint8_t *pl = malloc(bytes + 1);
    ck_assert_ptr_nonnull(pl);
    sstream_pack(pk, mask, src, count, kept, elem, pl);
    ck_assert_int_eq(sstream_check(pk, count, kept, elem, pl, bytes, err, sizeof(err)), 0);
    memset(out, 0xA5, count * elem);
    sstream_expand(pk, count, kept, elem, pl, out);
    if (pk == SSTREAM_DENSE) /* dense sends every element: the sender masked them */
        ck_assert_int_eq(memcmp(out, src, count * elem), 0);
    else
        ck_assert_int_eq(memcmp(out, want, count * elem), 0);
    /* the smallest of the three, never above dense */
    uint64_t k = 0;
    for (uint64_t i = 0; i < count; i++)
        k += mask[i];
    uint64_t least = count * elem;
    for (uint32_t p = SSTREAM_BITMASK; p <= SSTREAM_POS32; p++) {
        uint64_t b = sstream_bytes(p, count, k, elem);
        if (b > 0 && b < least)
            least = b;
    }
    ck_assert_uint_eq(bytes, least);
    /* the index as bits of a tensor, at a byte's start and past it */
    for (uint64_t at = 0; at <= 5; at += 5) {
        uint8_t *bits = malloc((at + count + 7) / 8 + 1);
        memset(bits, 0x5a, (at + count + 7) / 8 + 1);
        sstream_mark(pk, count, kept, pl, bits, at);
        uint64_t wrong = 0;
        for (uint64_t i = 0; i < count; i++)
            wrong += (unsigned)(bits[(at + i) / 8] >> ((at + i) % 8) & 1) !=
                     (pk == SSTREAM_DENSE ? 1u : (unsigned)(mask[i] != 0));
        for (uint64_t i = 0; i < at; i++) /* the bits before it untouched */
            wrong += (bits[i / 8] >> (i % 8) & 1) != (0x5au >> (i % 8) & 1);
        ck_assert_uint_eq(wrong, 0);
        free(bits);
    }
    free(src);
    free(want);
    free(out);
    free(pl);
    *pk_out = pk;
    return bytes;
}

START_TEST(densities)
{
    static const double dens[] = {0.0, 0.01, 0.10, 0.50, 1.0};
    static const uint64_t counts[] = {1, 7, 8, 9, 1000, 65536, 65537, 262144};
    for (uint32_t elem = 2; elem <= 4; elem += 2)
        for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
            for (size_t d = 0; d < sizeof(dens) / sizeof(dens[0]); d++) {
                uint64_t n = counts[c];
                uint8_t *mask = malloc(n);
                make_mask(mask, n, dens[d], c * 10 + d);
                uint32_t pk;
                uint64_t bytes = round_trip(mask, n, elem, &pk);
                if (dens[d] == 0.0 && n >= 8) { /* nothing kept: the bitmask alone */
                    ck_assert_uint_eq(pk, SSTREAM_BITMASK);
                    ck_assert_uint_eq(bytes, (n + 31) / 32 * 4);
                }
                ck_assert_uint_gt(bytes, 0);
                if (dens[d] == 1.0)
                    ck_assert_uint_eq(pk, SSTREAM_DENSE);
                if (n >= 1000 && dens[d] == 0.10) { /* a bitmask and a tenth of the values */
                    ck_assert_uint_eq(pk, SSTREAM_BITMASK);
                    ck_assert_uint_le(bytes, n * elem * (elem == 4 ? 0.15 : 0.2));
                }
                if (n >= 1000 && dens[d] == 0.01) /* positions: 16-bit while they reach */
                    ck_assert_uint_eq(pk, n <= SSTREAM_POS16_MAX ? SSTREAM_POS16 : SSTREAM_POS32);
                free(mask);
            }
}
END_TEST

/* Bytes at 90% pruned fall with the density, as the stream's do. */
START_TEST(bytes_scale_with_density)
{
    uint64_t n = 262144;
    uint8_t *mask = malloc(n);
    uint64_t prev = UINT64_MAX;
    for (double d = 0.5; d >= 0.01; d /= 2) {
        make_mask(mask, n, d, 3);
        uint32_t pk;
        uint64_t bytes = round_trip(mask, n, 4, &pk);
        ck_assert_uint_lt(bytes, prev);
        prev = bytes;
    }
    free(mask);
}
END_TEST

START_TEST(refusals)
{
    uint8_t pl[32] = {0};
    /* a truncated index */
    ck_assert_int_eq(sstream_check(SSTREAM_POS32, 100, 3, 4, pl, 20, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "32-bit positions packing of 3 kept of 100 elements in 20 bytes, "
                     "expected 24 (index truncated or padded)");
    /* 16-bit positions cannot reach past 65536 elements */
    ck_assert_int_eq(sstream_check(SSTREAM_POS16, 70000, 1, 4, pl, 6, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "16-bit positions packing of 1 kept of 70000 elements");
    /* more kept than the chunk has */
    ck_assert_int_eq(sstream_check(SSTREAM_BITMASK, 8, 9, 4, pl, 37, err, sizeof(err)), -EINVAL);
    /* an index past the end */
    uint32_t pos = 100;
    memcpy(pl, &pos, 4);
    ck_assert_int_eq(sstream_check(SSTREAM_POS32, 100, 1, 2, pl, 6, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "position 100 (kept element 0) past the chunk's 100 elements");
    /* the bitmask's count disagrees */
    memset(pl, 0, sizeof(pl));
    pl[0] = 0xff;
    ck_assert_int_eq(sstream_check(SSTREAM_BITMASK, 16, 7, 2, pl, 18, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "bitmask of 16 elements sets 8 bits, the chunk says 7 kept");
    /* a bit in the bitmask's padding */
    pl[0] = 0x7f;
    pl[3] = 0x01;
    ck_assert_int_eq(sstream_check(SSTREAM_BITMASK, 16, 7, 2, pl, 18, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "bitmask of 16 elements sets bits past its end");
    /* the positions' padding */
    uint16_t p3[4] = {1, 2, 3, 9};
    memcpy(pl, p3, sizeof(p3));
    ck_assert_int_eq(sstream_check(SSTREAM_POS16, 16, 3, 4, pl, 20, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "positions' padding holds 9 at byte 6 (zeros)");
    p3[3] = 0;
    memcpy(pl, p3, sizeof(p3));
    ck_assert_int_eq(sstream_check(SSTREAM_POS16, 16, 3, 4, pl, 20, err, sizeof(err)), 0);
    ck_assert_int_eq(sstream_check(9, 16, 7, 2, pl, 16, err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "unknown packing of 7 kept of 16 elements");
}
END_TEST

/* Every packing of chunks from 1 to 70,000 elements at densities from 0
 * to 1, float32 and bfloat16: the vector path (where the processor has
 * it) writes the same payload bytes as the plain loops, and each path
 * expands either's payload to the same elements, zeros elsewhere. */
START_TEST(vector_path_same_bytes)
{
    static const uint64_t counts[] = {1, 15, 16, 17, 31, 100, 1000, 65536, 70000};
    static const double levels[] = {0.0, 0.01, 0.1, 0.5, 1.0};
    const uint32_t elems[] = {2, 4};
    bool vec = sstream_simd(true);
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t d = 0; d < sizeof(levels) / sizeof(levels[0]); d++)
            for (size_t e = 0; e < 2; e++)
                for (uint32_t pk = SSTREAM_BITMASK; pk <= SSTREAM_POS32; pk++) {
                    uint64_t count = counts[c];
                    uint32_t elem = elems[e];
                    uint8_t *mask = malloc(count);
                    make_mask(mask, count, levels[d], 3 + c);
                    uint64_t kept = 0;
                    for (uint64_t i = 0; i < count; i++)
                        kept += mask[i];
                    for (int v = 0; v < 2; v++) { /* both paths count the same */
                        uint64_t k;
                        sstream_simd(v);
                        uint32_t chosen = sstream_choose(mask, count, elem, &k);
                        ck_assert_uint_eq(chosen == SSTREAM_DENSE ? kept : k, kept);
                    }
                    uint64_t bytes = sstream_bytes(pk, count, kept, elem);
                    if (bytes == UINT64_MAX) { /* POS16 past its limit */
                        free(mask);
                        continue;
                    }
                    uint8_t *src = malloc(count * elem), *a = malloc(bytes + 1);
                    uint8_t *b = malloc(bytes + 1), *xa = malloc(count * elem);
                    uint8_t *xb = malloc(count * elem);
                    for (uint64_t i = 0; i < count * elem; i++)
                        src[i] = (uint8_t)(i * 13 + 5) | 1;
                    sstream_simd(false);
                    sstream_pack(pk, mask, src, count, kept, elem, a);
                    memset(xa, 0xA5, count * elem);
                    sstream_expand(pk, count, kept, elem, a, xa);
                    sstream_simd(true);
                    sstream_pack(pk, mask, src, count, kept, elem, b);
                    ck_assert_msg(memcmp(a, b, bytes) == 0, "%s, %llu elements of %u bytes, "
                                  "density %g: the payloads differ", sstream_name(pk),
                                  (unsigned long long)count, elem, levels[d]);
                    memset(xb, 0x5A, count * elem);
                    sstream_expand(pk, count, kept, elem, b, xb);
                    ck_assert_msg(memcmp(xa, xb, count * elem) == 0, "%s, %llu elements of %u "
                                  "bytes, density %g: the expansions differ", sstream_name(pk),
                                  (unsigned long long)count, elem, levels[d]);
                    for (uint64_t i = 0; i < count; i++) /* src masked by hand, into a */
                        for (uint32_t k = 0; k < elem; k++)
                            xa[i * elem + k] = mask[i] ? src[i * elem + k] : 0;
                    ck_assert(memcmp(xa, xb, count * elem) == 0);
                    free(mask);
                    free(src);
                    free(a);
                    free(b);
                    free(xa);
                    free(xb);
                }
    ck_assert(sstream_simd(true) == vec);
}
END_TEST

/* Packing from a bit array at any bit offset gives what packing from the
 * byte mask of those bits gives, on both paths; the bits around the range
 * (set here) are not read as kept, and nothing past the array is read
 * (its exact size, for the sanitizers). */
/* mask's count elements as bits at..at+count-1 of a new bit array, the
 * bits outside the range set */
static uint8_t *bits_of(const uint8_t *mask, uint64_t count, uint64_t at)
{
    size_t nbits = (size_t)((at + count + 7) / 8);
    uint8_t *bits = malloc(nbits);
    memset(bits, 0xff, nbits);
    for (uint64_t i = 0; i < count; i++)
        if (!mask[i])
            bits[(at + i) / 8] &= (uint8_t)~(1u << ((at + i) % 8));
    return bits;
}

START_TEST(bits_same_as_bytes)
{
    static const uint64_t counts[] = {1, 7, 8, 9, 16, 17, 63, 64, 65, 1000, 70000};
    static const uint64_t ats[] = {0, 1, 3, 7, 8, 13};
    static const double levels[] = {0.0, 0.1, 0.5, 1.0};
    bool vec = sstream_simd(true);
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t o = 0; o < sizeof(ats) / sizeof(ats[0]); o++)
            for (size_t d = 0; d < sizeof(levels) / sizeof(levels[0]); d++) {
                uint64_t count = counts[c], at = ats[o];
                uint8_t *mask = malloc(count);
                make_mask(mask, count, levels[d], 11 + c + o);
                uint8_t *bits = bits_of(mask, count, at);
                for (uint32_t elem = 2; elem <= 4; elem += 2) {
                    uint8_t *src = malloc(count * elem);
                    for (uint64_t i = 0; i < count * elem; i++)
                        src[i] = (uint8_t)(i * 7 + 3) | 1;
                    for (int v = 0; v < 2; v++) {
                        sstream_simd(v);
                        uint64_t kb, kk;
                        uint32_t want = sstream_choose(mask, count, elem, &kb);
                        uint32_t got = sstream_choose_bits(bits, at, count, elem, &kk);
                        ck_assert_msg(got == want && kk == kb, "%llu elements at bit %llu: %s of "
                                      "%llu kept from bits, %s of %llu from bytes",
                                      (unsigned long long)count, (unsigned long long)at,
                                      sstream_name(got), (unsigned long long)kk,
                                      sstream_name(want), (unsigned long long)kb);
                        uint64_t kept = 0;
                        for (uint64_t i = 0; i < count; i++)
                            kept += mask[i];
                        for (uint32_t pk = SSTREAM_BITMASK; pk <= SSTREAM_POS32; pk++) {
                            uint64_t bytes = sstream_bytes(pk, count, kept, elem);
                            if (bytes == UINT64_MAX)
                                continue;
                            uint8_t *a = malloc(bytes + 1), *b = malloc(bytes + 1);
                            sstream_pack(pk, mask, src, count, kept, elem, a);
                            sstream_pack_bits(pk, bits, at, src, count, kept, elem, b);
                            ck_assert_msg(memcmp(a, b, bytes) == 0, "%s, %llu elements of %u "
                                          "bytes at bit %llu, %s path: the payloads differ",
                                          sstream_name(pk), (unsigned long long)count, elem,
                                          (unsigned long long)at, v ? "vector" : "plain");
                            free(a);
                            free(b);
                        }
                    }
                    free(src);
                }
                free(bits);
                free(mask);
            }
    ck_assert(sstream_simd(true) == vec);
}
END_TEST

/* A sender that stores only the kept elements (memoryx's compact
 * tensors) packs the same bytes from them as from their dense form, for
 * every packing and dense; a receiver that stores them so takes back the
 * same values, and refuses a payload whose index keeps other elements
 * than its bits, naming the first. */
START_TEST(kept_alone_same_as_dense)
{
    static const uint64_t counts[] = {1, 7, 8, 9, 17, 64, 65, 1000, 70000};
    static const uint64_t ats[] = {0, 3, 8, 13};
    static const double levels[] = {0.0, 0.01, 0.1, 0.5, 1.0};
    for (size_t c = 0; c < sizeof(counts) / sizeof(counts[0]); c++)
        for (size_t o = 0; o < sizeof(ats) / sizeof(ats[0]); o++)
            for (size_t d = 0; d < sizeof(levels) / sizeof(levels[0]); d++) {
                uint64_t count = counts[c], at = ats[o];
                uint8_t *mask = malloc(count);
                make_mask(mask, count, levels[d], 29 + c + o);
                uint8_t *bits = bits_of(mask, count, at);
                uint64_t kept = 0;
                for (uint64_t i = 0; i < count; i++)
                    kept += mask[i];
                for (uint32_t elem = 2; elem <= 4; elem += 2) {
                    uint8_t *dense = malloc(count * elem), *vals = malloc(count * elem + 1);
                    uint8_t *back = malloc(count * elem + 1);
                    uint64_t k = 0;
                    for (uint64_t i = 0; i < count; i++) {
                        for (uint32_t e = 0; e < elem; e++) {
                            dense[i * elem + e] = mask[i] ? (uint8_t)(i * 5 + e + 1) | 1 : 0;
                            if (mask[i])
                                vals[k * elem + e] = dense[i * elem + e];
                        }
                        k += mask[i];
                    }
                    ck_assert_uint_eq(k, kept);
                    for (uint32_t pk = SSTREAM_DENSE; pk <= SSTREAM_POS32; pk++) {
                        uint64_t kk = pk == SSTREAM_DENSE ? 0 : kept;
                        uint64_t bytes = sstream_bytes(pk, count, kk, elem);
                        if (bytes == UINT64_MAX || bytes == 0)
                            continue;
                        uint8_t *a = malloc(bytes), *b = malloc(bytes);
                        sstream_pack_bits(pk, bits, at, dense, count, kk, elem, a);
                        sstream_pack_kept(pk, bits, at, vals, count, kk, elem, b);
                        ck_assert_msg(memcmp(a, b, bytes) == 0, "%s, %llu elements of %u bytes at "
                                      "bit %llu: the payloads differ", sstream_name(pk),
                                      (unsigned long long)count, elem, (unsigned long long)at);
                        memset(back, 0xA5, count * elem + 1);
                        int64_t got = sstream_take_kept(pk, count, kk, elem, b, bits, at, back, err,
                                                        sizeof(err));
                        ck_assert_msg(got == (int64_t)kept, "%s: took %lld of %llu: %s",
                                      sstream_name(pk), (long long)got, (unsigned long long)kept,
                                      err);
                        ck_assert_int_eq(memcmp(back, vals, kept * elem), 0);
                        /* the receiver's bits keep one more, or one fewer */
                        if (pk != SSTREAM_DENSE && count > 1) {
                            uint64_t flip = count / 2;
                            bits[(at + flip) / 8] ^= (uint8_t)(1u << ((at + flip) % 8));
                            ck_assert_int_eq(sstream_take_kept(pk, count, kk, elem, b, bits, at,
                                                               back, err, sizeof(err)), -EINVAL);
                            char want[64];
                            snprintf(want, sizeof(want), "differ at element %llu",
                                     (unsigned long long)flip);
                            ck_assert_msg(strstr(err, want), "%s: %s", sstream_name(pk), err);
                            bits[(at + flip) / 8] ^= (uint8_t)(1u << ((at + flip) % 8));
                        }
                        free(a);
                        free(b);
                    }
                    free(dense);
                    free(vals);
                    free(back);
                }
                free(bits);
                free(mask);
            }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("sstream");
    TCase *t = tcase_create("sstream");
    tcase_set_timeout(t, 60);
    tcase_add_test(t, densities);
    tcase_add_test(t, bytes_scale_with_density);
    tcase_add_test(t, refusals);
    tcase_add_test(t, vector_path_same_bytes);
    tcase_add_test(t, bits_same_as_bytes);
    tcase_add_test(t, kept_alone_same_as_dense);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
