/* Fuzz target: the IDX reader of MNIST-format data sets (common/dataset/ds_mnist.c)
 * behind dataset_open, as the input workers and the coordinator use it.
 *
 * Input: one byte of flags (bits 0-1: the model's input shape as [R*C],
 * [R, C] or [1, R, C]; bit 2: shuffle; bit 3: the evaluation split; bits
 * 4-5: random flips), one byte of num_classes, the length of the images
 * file (16 bits, little-endian), the images file, then the labels file. The
 * shape follows the images header, so that a consistent file opens. */
#include <string.h>

#include "dataset.h"
#include "fuzz.h"
#include "scratch.h"

static uint32_t be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a few samples as the worker does for training and evaluation. */
static void read_some(const dataset *d)
{
    uint64_t size = dataset_size(d);
    FUZZ_ASSERT(size > 0);
    uint32_t n = size < 3 ? (uint32_t)size : 3;
    size_t bytes = dataset_batch_bytes(d, n);
    FUZZ_ASSERT(bytes == (size_t)n * (dataset_sample_elems(d) * 4 + dataset_label_elems(d) * 4));
    uint8_t *buf = malloc(bytes);
    FUZZ_ASSERT(buf != NULL);
    char err[512];
    FUZZ_ASSERT(dataset_range(d, 0, n, buf, err, sizeof(err)) == 0);
    FUZZ_ASSERT(dataset_batch(d, 5, n, 0, n, buf, err, sizeof(err)) == 0);
    const float *x = (const float *)buf;
    for (size_t i = 0; i < (size_t)n * dataset_sample_elems(d); i++)
        FUZZ_ASSERT(x[i] >= 0.0f && x[i] <= 1.0f);
    /* Beyond the set: refused, with a message. */
    err[0] = '\0';
    FUZZ_ASSERT(dataset_read(d, 0, size, (float *)buf, (int32_t *)buf, err, sizeof(err)) < 0);
    FUZZ_ASSERT(err[0] != '\0');
    free(buf);
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
    bool eval = flags & 8;
    fuzz_scratch_write(eval ? "t10k-images-idx3-ubyte" : "train-images-idx3-ubyte", data, ilen);
    fuzz_scratch_write(eval ? "t10k-labels-idx1-ubyte" : "train-labels-idx1-ubyte", data + ilen,
                       size - ilen);

    uint64_t rows = 1, cols = 1;
    if (ilen >= 16) {
        rows = be32(data + 8);
        cols = be32(data + 12);
    }
    uint64_t shape[3];
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    in.data_processor = "mnist";
    in.data_dir = (char *)fuzz_scratch_dir();
    in.split = eval ? "eval" : "train";
    in.num_classes = classes;
    in.shuffle = flags & 4;
    in.seed = 7;
    in.sample_shape = shape;
    switch (flags & 3) {
    case 0:
        shape[0] = rows * cols;
        in.n_sample_shape = 1;
        break;
    case 1:
        shape[0] = rows;
        shape[1] = cols;
        in.n_sample_shape = 2;
        break;
    default:
        shape[0] = 1;
        shape[1] = rows;
        shape[2] = cols;
        in.n_sample_shape = 3;
        in.random_flip_horizontal = flags & 16;
        in.random_flip_vertical = flags & 32;
        break;
    }
    dataset *d;
    char err[512];
    err[0] = '\0';
    int rc = dataset_open(&d, &in, err, sizeof(err));
    if (rc < 0) {
        FUZZ_ASSERT(d == NULL);
        FUZZ_ASSERT(err[0] != '\0' && memchr(err, '\0', sizeof(err)) != NULL);
        return 0;
    }
    FUZZ_ASSERT(dataset_sample_elems(d) == rows * cols && dataset_label_elems(d) == 1);
    read_some(d);
    dataset_close(d);
    return 0;
}
