/* SeverstalBinaryClassDataProcessor: data_dir/train_images/NAME.jpg and
 * data_dir/train.csv (ImageId,ClassId,EncodedPixels), as the Model Zoo
 * reads Kaggle's Severstal steel defects: the samples are the rows of
 * train.csv whose ClassId is class_id, in file order; the first
 * floor(train_test_split * rows) train and the rest evaluate (0.85 when
 * train_test_split is 0). The mask is 1 inside the row's runs. As in the
 * Model Zoo, an image without a row of the class is in neither split, and
 * one with two rows of it is two samples. Open parses train.csv and reads
 * the header of every image it names (by hand: no libjpeg), so that the
 * planner can size and check the set; ds_severstal_read.c decodes. */
#include <errno.h>
#include <limits.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "ds_severstal.h"

/* train.csv of Kaggle's set is 7 MB; a file far beyond it is not one. */
#define DS_SEVERSTAL_MAX_CSV (256u << 20)
#define DS_SEVERSTAL_DEFAULT_SPLIT 0.85

int ds_severstal__check(const char *path, const imghdr_jpeg *h, char *err, size_t errlen)
{
    if (h->precision != 8) {
        snprintf(err, errlen, "%s: a %u-bit JPEG; the reader takes 8-bit", path, h->precision);
        return -EINVAL;
    }
    if (h->components != 1 && h->components != 3) {
        snprintf(err, errlen, "%s: a JPEG of %u components%s; the reader takes gray or colour",
                 path, h->components, h->components == 4 ? " (CMYK)" : "");
        return -EINVAL;
    }
    if (h->width > IMGHDR_MAX_SIDE || h->height > IMGHDR_MAX_SIDE) {
        snprintf(err, errlen, "%s: %ux%u pixels (at most %u a side)", path, h->width, h->height,
                 IMGHDR_MAX_SIDE);
        return -EINVAL;
    }
    return (int)h->components;
}

int ds_severstal__path(char *dst, const ds_severstal *p, const rle_row *r, char *err,
                       size_t errlen)
{
    int n = snprintf(dst, PATH_MAX, "%s/%s", p->images, r->image);
    if (n < 0 || n >= PATH_MAX) {
        snprintf(err, errlen, "%s/%s: path too long", p->images, r->image);
        return -ENAMETOOLONG;
    }
    return 0;
}

void ds_severstal__close(dataset *d)
{
    ds_severstal *p = d->priv;
    if (!p)
        return;
    rle_table_deinit(&p->table);
    free(p->rows);
    free(p->images);
    free(p->csv);
    free(p);
    d->priv = NULL;
}

/* Reads the whole of train.csv (a few MB) into *text. */
static int ds_severstal__slurp(const char *path, char **text, size_t *len, char *err,
                               size_t errlen)
{
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        if (f)
            fclose(f);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > DS_SEVERSTAL_MAX_CSV) {
        snprintf(err, errlen, "%s: not a regular file of at most %u MiB", path,
                 DS_SEVERSTAL_MAX_CSV >> 20);
        fclose(f);
        return -EINVAL;
    }
    *len = (size_t)st.st_size;
    *text = malloc(*len + 1);
    if (!*text || fread(*text, 1, *len, f) != *len) {
        snprintf(err, errlen, "%s: %s", path, *text ? "cannot read it" : "out of memory");
        free(*text);
        *text = NULL;
        fclose(f);
        return -EIO;
    }
    fclose(f);
    return 0;
}

int ds_severstal__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    const char *me = "SeverstalBinaryClassDataProcessor";
    if (ds_image_input_check(d, me, err, errlen) < 0)
        return -EINVAL;
    if (d->num_classes > 2) {
        snprintf(err, errlen, "%s: masks are defect or not: num_classes must be 1 or 2, not %u",
                 me, d->num_classes);
        return -EINVAL;
    }
    if (d->class_id < 1 || d->class_id > 4) {
        if (d->class_id < 0)
            snprintf(err, errlen, "%s: class_id is not set: the defect class (1 to 4) whose runs "
                     "form the mask", me);
        else
            snprintf(err, errlen, "%s: class_id %d: Severstal's defect classes are 1 to 4", me,
                     d->class_id);
        return -EINVAL;
    }
    ds_severstal *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = p;
    if (asprintf(&p->images, "%s/train_images", d->data_dir) < 0 ||
        asprintf(&p->csv, "%s/train.csv", d->data_dir) < 0) {
        p->images = p->csv = NULL;
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    char *text = NULL;
    size_t len = 0;
    int rc = ds_severstal__slurp(p->csv, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    rc = rle_table_parse(&p->table, text, len, p->csv, err, errlen);
    free(text);
    if (rc < 0)
        return rc;

    /* The Model Zoo's selection and split: the rows of the class in file
     * order, the first floor(split * rows) to train. */
    size_t total = 0;
    for (size_t i = 0; i < p->table.count; i++)
        total += p->table.rows[i].class_id == (uint32_t)d->class_id;
    double split = d->train_test_split > 0 ? d->train_test_split : DS_SEVERSTAL_DEFAULT_SPLIT;
    size_t train = (size_t)floor(split * (double)total);
    size_t lo = d->eval ? train : 0, hi = d->eval ? total : train;
    if (hi == lo) {
        if (total == 0)
            snprintf(err, errlen, "%s: no rows of ClassId %d", p->csv, d->class_id);
        else
            snprintf(err, errlen, "%s: train_test_split %g of the %zu rows of ClassId %d leaves "
                     "the %s split empty", p->csv, split, total, d->class_id,
                     d->eval ? "evaluation" : "training");
        return -EINVAL;
    }
    if (!(p->rows = malloc((hi - lo) * sizeof(*p->rows)))) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    for (size_t i = 0, k = 0; i < p->table.count; i++) {
        if (p->table.rows[i].class_id != (uint32_t)d->class_id)
            continue;
        if (k >= lo && k < hi)
            p->rows[p->count++] = (uint32_t)i;
        k++;
    }
    for (size_t i = 0; i < p->count; i++) {
        const rle_row *r = &p->table.rows[p->rows[i]];
        char path[PATH_MAX];
        imghdr_jpeg hd;
        if (strchr(r->image, '/')) {
            snprintf(err, errlen, "%s: line %u: ImageId \"%s\" is not a file name", p->csv,
                     r->line, r->image);
            return -EINVAL;
        }
        if ((rc = ds_severstal__path(path, p, r, err, errlen)) < 0 ||
            (rc = imghdr_jpeg_read(path, &hd, err, errlen)) < 0 ||
            (rc = ds_severstal__check(path, &hd, err, errlen)) < 0) {
            size_t n = strlen(err);
            snprintf(err + n, errlen > n ? errlen - n : 0, " (%s line %u)", p->csv, r->line);
            return rc;
        }
    }
    ds_image_sizes(d, p->count);
    return 0;
}

/* The reader without its decoding: what dataset_probe opens. */
const dataset_reader ds_severstal_probe_reader = {
    .name = "SeverstalBinaryClassDataProcessor",
    .open = ds_severstal__open,
    .close = ds_severstal__close,
};
