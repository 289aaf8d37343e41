/* A wse-node's sparse gradient chunk packed from the bits of the weights
 * it kept (sstream_choose_bits, sstream_pack_bits) against the way it was
 * packed before: the bits spread into a byte mask, then counted and packed
 * from the bytes. 262,144 float32 elements a chunk (1 MiB dense), 10% kept;
 * the median of 201 runs of each, in one process. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bench_util.h"
#include "sstream.h"

enum { COUNT = 262144, RUNS = 201 };

static uint64_t spread[256]; /* a byte of bits as 8 bytes of 0 or 1 */

static uint64_t by_bytes(const uint8_t *bits, const float *src, uint8_t *out)
{
    uint8_t *mask = malloc(COUNT);
    for (uint64_t i = 0; i < COUNT; i += 8)
        memcpy(mask + i, &spread[bits[i / 8]], 8);
    uint64_t kept;
    uint32_t pk = sstream_choose(mask, COUNT, 4, &kept);
    sstream_pack(pk, mask, src, COUNT, kept, 4, out);
    free(mask);
    return kept;
}

static uint64_t by_bits(const uint8_t *bits, const float *src, uint8_t *out)
{
    uint64_t kept;
    uint32_t pk = sstream_choose_bits(bits, 0, COUNT, 4, &kept);
    sstream_pack_bits(pk, bits, 0, src, COUNT, kept, 4, out);
    return kept;
}

int main(void)
{
    for (unsigned b = 0; b < 256; b++)
        for (int k = 0; k < 8; k++)
            spread[b] |= (uint64_t)(b >> k & 1) << (8 * k);
    uint8_t *bits = calloc(COUNT / 8, 1);
    unsigned seed = 5;
    for (uint64_t i = 0; i < COUNT; i++) {
        seed = seed * 1664525u + 1013904223u;
        if ((seed >> 8) % 10 == 0)
            bits[i / 8] |= (uint8_t)(1u << (i % 8));
    }
    float *src = bench_alloc(COUNT, 9);
    uint8_t *a = malloc(COUNT * 4), *b = malloc(COUNT * 4);
    double ta[RUNS], tb[RUNS];
    for (int r = 0; r < RUNS; r++) {
        double t0 = bench_now();
        uint64_t ka = by_bytes(bits, src, a);
        double t1 = bench_now();
        uint64_t kb = by_bits(bits, src, b);
        double t2 = bench_now();
        if (ka != kb || memcmp(a, b, sstream_bytes(SSTREAM_BITMASK, COUNT, ka, 4)) != 0) {
            fprintf(stderr, "grad_pack: the two ways differ\n");
            return 1;
        }
        ta[r] = t1 - t0;
        tb[r] = t2 - t1;
    }
    double ma = bench_median(ta, RUNS), mb = bench_median(tb, RUNS);
    printf("BENCH grad_pack_bytes_262k_10pct_ms %.4f ms\n", ma * 1e3);
    printf("BENCH grad_pack_bits_262k_10pct_ms %.4f ms\n", mb * 1e3);
    printf("BENCH grad_pack_bits_262k_10pct %.3f of_byte_mask_path\n", mb / ma);
    free(bits);
    free(src);
    free(a);
    free(b);
    return 0;
}
