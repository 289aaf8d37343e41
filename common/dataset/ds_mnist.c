/* mnist: the IDX files of MNIST (or any data set in that format), read
 * once at open and checked strictly: train-images-idx3-ubyte and
 * train-labels-idx1-ubyte for the training split, t10k-images-idx3-ubyte and
 * t10k-labels-idx1-ubyte for the evaluation split. Pixels become x / 255. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "dataset_reader.h"

/* An IDX file above this size is refused (MNIST's largest is 47 MB). */
#define DS_MNIST_MAX_FILE_BYTES (128u << 20)
#define DS_MNIST_IMAGES_MAGIC 0x00000803u /* unsigned bytes, 3 dimensions */
#define DS_MNIST_LABELS_MAGIC 0x00000801u /* unsigned bytes, 1 dimension */

typedef struct ds_mnist {
    uint8_t *image_file;      /* the images file as read; owned */
    uint8_t *label_file;      /* the labels file as read; owned */
    const uint8_t *pixels;    /* count * rows * cols, row-major, inside image_file */
    const uint8_t *labels;    /* count, inside label_file, each < num_classes */
    uint64_t count;
    uint32_t rows, cols;
} ds_mnist;

static uint32_t ds_mnist__be32(const uint8_t *p)
{
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

/* Reads a whole file of at most DS_MNIST_MAX_FILE_BYTES. */
static int ds_mnist__slurp(const char *path, uint8_t **out, size_t *len, char *err, size_t errlen)
{
    *out = NULL;
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        return -e;
    }
    int rc = 0;
    uint8_t *buf = NULL;
    struct stat st;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: %s", path, strerror(-rc));
        goto done;
    }
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        rc = -EINVAL;
        goto done;
    }
    if ((uint64_t)st.st_size > DS_MNIST_MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s: %lld bytes, above the limit of %u bytes for an IDX file", path,
                 (long long)st.st_size, DS_MNIST_MAX_FILE_BYTES);
        rc = -EFBIG;
        goto done;
    }
    size_t size = (size_t)st.st_size;
    buf = malloc(size ? size : 1);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory for %zu bytes", path, size);
        rc = -ENOMEM;
        goto done;
    }
    size_t got = 0;
    while (got < size) {
        ssize_t r = read(fd, buf + got, size - got);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0) {
            rc = r < 0 ? -errno : -EIO;
            snprintf(err, errlen, "%s: read failed: %s", path,
                     r < 0 ? strerror(-rc) : "the file shrank while being read");
            goto done;
        }
        got += (size_t)r;
    }
    *out = buf;
    *len = size;
    buf = NULL;
done:
    free(buf);
    close(fd);
    return rc;
}

static int ds_mnist__path(char *dst, const dataset *d, const char *name, char *err, size_t errlen)
{
    int n = snprintf(dst, PATH_MAX, "%s/%s", d->data_dir, name);
    if (n < 0 || n >= PATH_MAX) {
        snprintf(err, errlen, "data_dir \"%s\": path too long", d->data_dir);
        return -ENAMETOOLONG;
    }
    return 0;
}

/* The model takes a sample of rows x cols pixels as [rows*cols],
 * [rows, cols] or [1, rows, cols]. */
static bool ds_mnist__shape_fits(const dataset *d, uint32_t rows, uint32_t cols)
{
    switch (d->ndim) {
    case 1:
        return d->shape[0] == (uint64_t)rows * cols;
    case 2:
        return d->shape[0] == rows && d->shape[1] == cols;
    default:
        return d->shape[0] == 1 && d->shape[1] == rows && d->shape[2] == cols;
    }
}

static void ds_mnist__close(dataset *d)
{
    ds_mnist *m = d->priv;
    if (!m)
        return;
    free(m->image_file);
    free(m->label_file);
    free(m);
    d->priv = NULL;
}

static int ds_mnist__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    if (!d->data_dir[0]) {
        snprintf(err, errlen, "mnist: data_dir is not set");
        return -EINVAL;
    }
    if (ds_refuse_volume(d, "mnist", err, errlen) < 0)
        return -EINVAL;
    ds_mnist *m = calloc(1, sizeof(*m));
    if (!m) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = m;
    const char *prefix = d->eval ? "t10k" : "train";
    char ipath[PATH_MAX], lpath[PATH_MAX], name[64];
    snprintf(name, sizeof(name), "%s-images-idx3-ubyte", prefix);
    int rc = ds_mnist__path(ipath, d, name, err, errlen);
    if (rc < 0)
        return rc;
    snprintf(name, sizeof(name), "%s-labels-idx1-ubyte", prefix);
    if ((rc = ds_mnist__path(lpath, d, name, err, errlen)) < 0)
        return rc;

    size_t ilen, llen;
    if ((rc = ds_mnist__slurp(ipath, &m->image_file, &ilen, err, errlen)) < 0)
        return rc;
    const uint8_t *h = m->image_file;
    if (ilen < 16) {
        snprintf(err, errlen, "%s: %zu bytes, too short for the 16-byte header of an IDX image "
                 "file", ipath, ilen);
        return -EINVAL;
    }
    if (ds_mnist__be32(h) != DS_MNIST_IMAGES_MAGIC) {
        snprintf(err, errlen, "%s: magic number 0x%08x, expected 0x%08x (unsigned bytes in 3 "
                 "dimensions): not an IDX image file", ipath, ds_mnist__be32(h),
                 DS_MNIST_IMAGES_MAGIC);
        return -EINVAL;
    }
    uint32_t count = ds_mnist__be32(h + 4), rows = ds_mnist__be32(h + 8), cols = ds_mnist__be32(h + 12);
    if (count == 0 || rows == 0 || cols == 0) {
        snprintf(err, errlen, "%s: the header gives %u images of %ux%u pixels; none may be zero",
                 ipath, count, rows, cols);
        return -EINVAL;
    }
    if ((uint64_t)rows * cols > DS_MNIST_MAX_FILE_BYTES) {
        snprintf(err, errlen, "%s: the header gives images of %ux%u pixels, more than an IDX file "
                 "may hold", ipath, rows, cols);
        return -EINVAL;
    }
    uint64_t want = 16 + (uint64_t)count * rows * cols;
    if (want != ilen) {
        snprintf(err, errlen, "%s: %zu bytes, but the header's %u images of %ux%u pixels need "
                 "%llu", ipath, ilen, count, rows, cols, (unsigned long long)want);
        return -EINVAL;
    }
    if (!ds_mnist__shape_fits(d, rows, cols)) {
        snprintf(err, errlen, "%s: images of %ux%u pixels do not fit the model input; give "
                 "input_shape = [1, %u, %u] or [%u]", ipath, rows, cols, rows, cols, rows * cols);
        return -EINVAL;
    }

    if ((rc = ds_mnist__slurp(lpath, &m->label_file, &llen, err, errlen)) < 0)
        return rc;
    h = m->label_file;
    if (llen < 8) {
        snprintf(err, errlen, "%s: %zu bytes, too short for the 8-byte header of an IDX label "
                 "file", lpath, llen);
        return -EINVAL;
    }
    if (ds_mnist__be32(h) != DS_MNIST_LABELS_MAGIC) {
        snprintf(err, errlen, "%s: magic number 0x%08x, expected 0x%08x (unsigned bytes in 1 "
                 "dimension): not an IDX label file", lpath, ds_mnist__be32(h),
                 DS_MNIST_LABELS_MAGIC);
        return -EINVAL;
    }
    uint32_t nlabels = ds_mnist__be32(h + 4);
    if (8 + (uint64_t)nlabels != llen) {
        snprintf(err, errlen, "%s: %zu bytes, but the header's %u labels need %llu", lpath, llen,
                 nlabels, 8 + (unsigned long long)nlabels);
        return -EINVAL;
    }
    if (nlabels != count) {
        snprintf(err, errlen, "%s has %u labels but %s has %u images", lpath, nlabels, ipath,
                 count);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < nlabels; i++)
        if (h[8 + i] >= d->num_classes) {
            snprintf(err, errlen, "%s: label %u of sample %u is not below num_classes %u", lpath,
                     h[8 + i], i, d->num_classes);
            return -EINVAL;
        }

    m->pixels = m->image_file + 16;
    m->labels = m->label_file + 8;
    m->count = count;
    m->rows = rows;
    m->cols = cols;
    d->size = count;
    d->sample_elems = (uint64_t)rows * cols;
    d->label_elems = 1;
    return 0;
}

static int ds_mnist__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                          size_t errlen)
{
    const ds_mnist *m = d->priv;
    const uint8_t *p = m->pixels + idx * d->sample_elems;
    if (d->input_unorm8)
        memcpy(x, p, d->sample_elems);
    else
        sample_unorm8_to_float(x, p, d->sample_elems);
    ds_put_label(d, labels, 0, m->labels[idx]);
    return 0;
}

const dataset_reader ds_mnist_reader = {
    .name = "mnist",
    .open = ds_mnist__open,
    .close = ds_mnist__close,
    .read = ds_mnist__read,
};
