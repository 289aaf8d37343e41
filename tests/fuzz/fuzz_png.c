/* Fuzz target: the PNG segmentation reader (common/dataset/ds_png.c) behind
 * dataset_open and dataset_read: headers checked at open, pixels of the
 * image and its mask decoded per sample, then the augmentation.
 *
 * Input: one byte of flags (bit 0: random horizontal flip, bit 1: vertical
 * flip, bits 2-3: random crop padding, bit 4: leave the chunk CRCs as they
 * are instead of making them right), one byte of num_classes, the length of
 * the image (16 bits, little-endian), the image, then the mask (the image
 * again when empty). The model input follows the image's header, so that a
 * consistent pair opens; images of more than FUZZ_PNG_MAX_PIXELS are
 * skipped (a job file states its input size, and memory follows it). */
#include <string.h>

#include "dataset.h"
#include "fuzz.h"
#include "scratch.h"

#define FUZZ_PNG_MAX_PIXELS (1u << 18)

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* The CRC-32 of PNG chunks (polynomial 0xedb88320, reflected). */
static uint32_t png_crc(const uint8_t *p, size_t n)
{
    static uint32_t table[256];
    if (!table[1])
        for (uint32_t i = 0; i < 256; i++) {
            uint32_t c = i;
            for (int k = 0; k < 8; k++)
                c = c & 1 ? 0xedb88320u ^ (c >> 1) : c >> 1;
            table[i] = c;
        }
    uint32_t c = 0xffffffffu;
    for (size_t i = 0; i < n; i++)
        c = table[(c ^ p[i]) & 0xff] ^ (c >> 8);
    return c ^ 0xffffffffu;
}

/* Rewrites the CRC of every complete chunk, so that mutations reach the
 * decoder instead of stopping at the checksum. */
static void fix_crcs(uint8_t *png, size_t len)
{
    size_t pos = 8;
    while (pos + 12 <= len) {
        uint64_t n = be32(png + pos);
        if (n > len - pos - 12)
            return;
        uint32_t crc = png_crc(png + pos + 4, 4 + (size_t)n);
        uint8_t *at = png + pos + 8 + n;
        at[0] = (uint8_t)(crc >> 24);
        at[1] = (uint8_t)(crc >> 16);
        at[2] = (uint8_t)(crc >> 8);
        at[3] = (uint8_t)crc;
        pos += 12 + (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 4)
        return 0;
    uint8_t flags = data[0];
    uint32_t classes = data[1];
    size_t ilen = (size_t)data[2] | (size_t)data[3] << 8;
    data += 4;
    size -= 4;
    if (ilen > size)
        ilen = size;
    size_t mlen = size - ilen;
    const uint8_t *mask = mlen ? data + ilen : data;
    if (!mlen)
        mlen = ilen;
    /* The model input from the image's IHDR (it follows the signature). */
    if (ilen < 33)
        return 0;
    uint64_t w = be32(data + 16), h = be32(data + 20);
    uint32_t channels = data[25] & 2 ? 3 : 1;
    if (w == 0 || h == 0 || w * h > FUZZ_PNG_MAX_PIXELS)
        return 0;

    uint8_t *img = malloc(ilen), *msk = malloc(mlen);
    FUZZ_ASSERT(img && msk);
    memcpy(img, data, ilen);
    memcpy(msk, mask, mlen);
    if (!(flags & 16)) {
        fix_crcs(img, ilen);
        fix_crcs(msk, mlen);
    }
    fuzz_scratch_write("images/a.png", img, ilen);
    fuzz_scratch_write("masks/a.png", msk, mlen);
    free(img);
    free(msk);

    uint64_t shape[3] = {channels, h, w};
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    in.data_processor = "png_segmentation";
    in.data_dir = (char *)fuzz_scratch_dir();
    in.num_classes = classes;
    in.seed = 11;
    in.sample_shape = shape;
    in.n_sample_shape = 3;
    in.random_flip_horizontal = flags & 1;
    in.random_flip_vertical = flags & 2;
    in.random_crop_padding = (flags >> 2) & 3;
    dataset *d;
    char err[512];
    err[0] = '\0';
    int rc = dataset_open(&d, &in, err, sizeof(err));
    if (rc < 0) {
        FUZZ_ASSERT(d == NULL);
        FUZZ_ASSERT(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        return 0;
    }
    FUZZ_ASSERT(dataset_size(d) == 1);
    FUZZ_ASSERT(dataset_sample_elems(d) == channels * h * w && dataset_label_elems(d) == h * w);
    float *x = malloc(channels * h * w * sizeof(float));
    int32_t *labels = malloc(h * w * sizeof(int32_t));
    FUZZ_ASSERT(x && labels);
    err[0] = '\0';
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        rc = dataset_read(d, epoch, 0, x, labels, err, sizeof(err));
        if (rc < 0) { /* pixels that do not decode, or a label out of range */
            FUZZ_ASSERT(err[0] != '\0');
            break;
        }
        for (uint64_t i = 0; i < channels * h * w; i++)
            FUZZ_ASSERT(x[i] >= 0.0f && x[i] <= 1.0f);
        uint32_t nclasses = classes ? classes : 1;
        for (uint64_t i = 0; i < h * w; i++)
            FUZZ_ASSERT(labels[i] >= 0 && (labels[i] < (int32_t)nclasses || (nclasses <= 2 && labels[i] <= 1)));
    }
    free(x);
    free(labels);
    dataset_close(d);
    return 0;
}
