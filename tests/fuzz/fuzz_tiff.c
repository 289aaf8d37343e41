/* Fuzz target: the Inria TIFF reader (common/dataset/ds_inria.c: headers
 * read by hand at open; ds_inria_read.c: libtiff, by strips, tiles or
 * rows) behind dataset_open and dataset_read, with augment_data and the
 * standard score.
 *
 * Input: one byte of flags (bit 0: the model reads gray (C = 1) rather
 * than RGB; bit 1: augment_data; bit 2: strips above 64 bytes are read
 * row by row; bit 3: normalize = standard_score), the length of the image
 * (16 bits, little-endian), the image, then the mask (the image again when
 * empty). The model input takes the image's size from its header (read by
 * hand, as open does), so that a consistent pair opens; images of more
 * than FUZZ_TIFF_MAX_PIXELS are skipped. */
#include <math.h>
#include <string.h>

#include "dataset.h"
#include "fuzz.h"
#include "imghdr.h"
#include "scratch.h"

#define FUZZ_TIFF_MAX_PIXELS (1u << 16)

extern size_t ds_inria__strip_limit;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 3)
        return 0;
    uint8_t flags = data[0];
    size_t ilen = (size_t)data[1] | (size_t)data[2] << 8;
    data += 3;
    size -= 3;
    if (ilen > size)
        ilen = size;
    size_t mlen = size - ilen;
    const uint8_t *mask = mlen ? data + ilen : data;
    if (!mlen)
        mlen = ilen;
    fuzz_scratch_write("train/images/a.tif", data, ilen);
    fuzz_scratch_write("train/gt/a.tif", mask, mlen);
    char path[4096], err[512];
    snprintf(path, sizeof(path), "%s/train/images/a.tif", fuzz_scratch_dir());
    imghdr_tiff h;
    err[0] = '\0';
    if (imghdr_tiff_read(path, &h, err, sizeof(err)) < 0) {
        FUZZ_ASSERT(err[0] != '\0');
        return 0;
    }
    if ((uint64_t)h.width * h.height > FUZZ_TIFF_MAX_PIXELS)
        return 0;
    uint32_t C = flags & 1 ? 1 : 3;
    uint64_t shape[3] = {C, h.height, h.width};
    bool standard = flags & 8;
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    in.data_processor = "InriaAerialDataProcessor";
    in.data_dir = (char *)fuzz_scratch_dir();
    in.num_classes = 2;
    in.seed = 5;
    in.sample_shape = shape;
    in.n_sample_shape = 3;
    in.augment = flags & 2;
    in.normalize = standard ? "standard_score" : "zero_one";
    in.input_unorm8 = !standard;
    in.labels_uint8 = true;
    in.class_id = -1;
    ds_inria__strip_limit = flags & 4 ? 64 : 16u << 20;
    dataset *d;
    err[0] = '\0';
    int rc = dataset_open(&d, &in, err, sizeof(err));
    if (rc < 0) {
        FUZZ_ASSERT(d == NULL);
        FUZZ_ASSERT(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        return 0;
    }
    FUZZ_ASSERT(dataset_size(d) == 1);
    uint64_t n = C * (uint64_t)h.height * h.width;
    FUZZ_ASSERT(dataset_sample_elems(d) == n && dataset_label_elems(d) == (uint64_t)h.height * h.width);
    void *x = malloc(n * sizeof(float));
    uint8_t *labels = malloc((size_t)h.height * h.width);
    FUZZ_ASSERT(x && labels);
    for (uint64_t epoch = 0; epoch < 2; epoch++) {
        err[0] = '\0';
        rc = dataset_read(d, epoch, 0, x, labels, err, sizeof(err));
        if (rc < 0) { /* pixels that do not decode */
            FUZZ_ASSERT(err[0] != '\0' && strstr(err, "(sample 0)") != NULL);
            break;
        }
        for (uint64_t i = 0; i < (uint64_t)h.height * h.width; i++)
            FUZZ_ASSERT(labels[i] <= 1);
        if (standard)
            for (uint64_t i = 0; i < n; i++)
                FUZZ_ASSERT(isfinite(((float *)x)[i]));
    }
    free(x);
    free(labels);
    dataset_close(d);
    return 0;
}
