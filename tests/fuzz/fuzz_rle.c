/* Fuzz target: Severstal's train.csv parser and run-length decoder
 * (common/dataset/rle.c), as SeverstalBinaryClassDataProcessor uses them.
 *
 * Input: the mask's height and width (a byte each, 1 to 64), then the
 * text of a train.csv. Every row that parses is decoded; a mask that
 * decodes must encode back to runs that decode to it again. */
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "rle.h"

/* Kaggle's encoding of a mask: runs of 1 down the columns. */
static void encode(const uint8_t *mask, uint32_t h, uint32_t w, char *out, size_t cap)
{
    size_t len = 0;
    uint32_t total = h * w, start = 0;
    int in = 0;
    out[0] = '\0';
    for (uint32_t k = 0; k <= total; k++) {
        int on = k < total && mask[(k % h) * w + k / h];
        if (on && !in)
            start = k;
        if (!on && in) {
            int n = snprintf(out + len, cap - len, "%s%u %u", len ? " " : "", start + 1, k - start);
            FUZZ_ASSERT(n > 0 && (size_t)n < cap - len);
            len += (size_t)n;
        }
        in = on;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    uint32_t h = data[0] % 64 + 1, w = data[1] % 64 + 1;
    data += 2;
    size -= 2;
    rle_table t;
    char err[512];
    err[0] = '\0';
    if (rle_table_parse(&t, (const char *)data, size, "train.csv", err, sizeof(err)) < 0) {
        FUZZ_ASSERT(err[0] != '\0' && strncmp(err, "train.csv: ", 11) == 0);
        return 0;
    }
    static uint8_t mask[64 * 64], again[64 * 64];
    static char runs[64 * 64 * 12];
    for (size_t i = 0; i < t.count && i < 64; i++) {
        const rle_row *r = &t.rows[i];
        FUZZ_ASSERT(r->image[0] != '\0' && r->line >= 2);
        err[0] = '\0';
        if (rle_decode(r->runs, h, w, mask, err, sizeof(err)) < 0) {
            FUZZ_ASSERT(strncmp(err, "EncodedPixels: ", 15) == 0);
            continue;
        }
        for (uint32_t k = 0; k < h * w; k++)
            FUZZ_ASSERT(mask[k] <= 1);
        encode(mask, h, w, runs, sizeof(runs));
        FUZZ_ASSERT(rle_decode(runs, h, w, again, err, sizeof(err)) == 0);
        FUZZ_ASSERT(memcmp(mask, again, (size_t)h * w) == 0);
    }
    rle_table_deinit(&t);
    return 0;
}
