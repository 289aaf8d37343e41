/* SkmDataProcessor (SKM-TEA knee MRI, as the Model Zoo reads it): the
 * files of a split are those that data_dir/annotations/v1.0.0/train.json
 * (val.json for evaluation) names in its "images" list, each
 * data_dir/image_files/FILE_NAME, sorted; one volume per file. Open reads
 * the annotations and each file's superblock by hand, so that the planner
 * needs no libhdf5; ds_skm_read.c checks the datasets and reads them. */
#include "ds_skm.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "h5hdr.h"
#include "jsonscan.h"

/* Annotations larger than this are refused before reading (SKM-TEA's are
 * a few MB). */
#define DS_SKM_MAX_JSON (256u << 20)

static const char *const ds_skm__echo_names[] = {
    [DS_SKM_ECHO1] = "echo1",
    [DS_SKM_ECHO2] = "echo2",
    [DS_SKM_ECHO1_ECHO2_MC] = "echo1-echo2-mc",
    [DS_SKM_RSS] = "root_sum_of_squares",
};

const char *ds_skm__echo_name(enum ds_skm_echo e)
{
    return ds_skm__echo_names[e];
}

void ds_skm__close(dataset *d)
{
    ds_skm *p = d->priv;
    if (!p)
        return;
    jsonscan_free(p->files, p->count);
    free(p);
    d->priv = NULL;
}

/* Reads the whole of path into *text (NUL-terminated). */
static int ds_skm__slurp(const char *path, char **text, size_t *len, char *err, size_t errlen)
{
    *text = NULL;
    FILE *f = fopen(path, "rb");
    struct stat st;
    if (!f || fstat(fileno(f), &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        if (f)
            fclose(f);
        return -e;
    }
    if (!S_ISREG(st.st_mode) || st.st_size > DS_SKM_MAX_JSON) {
        snprintf(err, errlen, "%s: not a regular file of at most %u MiB", path,
                 DS_SKM_MAX_JSON >> 20);
        fclose(f);
        return -EINVAL;
    }
    *len = (size_t)st.st_size;
    *text = malloc(*len + 1);
    if (!*text || fread(*text, 1, *len, f) != *len) {
        int rc = *text ? -EIO : -ENOMEM;
        snprintf(err, errlen, "%s: %s", path, *text ? "cannot read it" : "out of memory");
        free(*text);
        *text = NULL;
        fclose(f);
        return rc;
    }
    (*text)[*len] = 0;
    fclose(f);
    return 0;
}

static int ds_skm__cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

/* The input checks every SkmDataProcessor makes, reading nothing. */
static int ds_skm__input(dataset *d, const Appliance__PlanInput *in, ds_skm *p, char *err,
                         size_t errlen)
{
    const char *me = "SkmDataProcessor";
    if (!d->data_dir[0]) {
        snprintf(err, errlen, "%s: data_dir is not set", me);
        return -EINVAL;
    }
    if (ds_volume_input_check(d, me, err, errlen) < 0)
        return -EINVAL;
    const char *echo = in->echo_type && in->echo_type[0] ? in->echo_type : "echo1";
    size_t e = 0;
    while (e < 4 && strcmp(echo, ds_skm__echo_names[e]) != 0)
        e++;
    if (e == 4) {
        snprintf(err, errlen, "%s: echo_type \"%s\" is none of echo1, echo2, echo1-echo2-mc, "
                 "root_sum_of_squares", me, echo);
        return -EINVAL;
    }
    p->echo = (enum ds_skm_echo)e;
    uint32_t channels = p->echo == DS_SKM_ECHO1_ECHO2_MC ? 2 : 1;
    if (d->channels != channels) {
        snprintf(err, errlen, "%s: echo_type \"%s\" gives %u channel%s%s; the model input [%u, "
                 "%u, %u, %u] has %u", me, echo, channels, channels == 1 ? "" : "s",
                 channels == 1 ? "" : " (echo1, echo2)", d->channels, d->depth, d->height,
                 d->width, d->channels);
        return -EINVAL;
    }
    if (d->input_unorm8) {
        snprintf(err, errlen, "%s: the echoes are 16-bit values: the inputs travel as float32, "
                 "not as 8 bits (input_unorm8)", me);
        return -EINVAL;
    }
    p->aggregate = in->aggregate_cartilage;
    uint32_t classes = p->aggregate ? 5 : 1 + DS_SKM_SEG_CLASSES;
    if (d->num_classes != classes) {
        if (p->aggregate)
            snprintf(err, errlen, "%s: with aggregate_cartilage the labels are 5 classes "
                     "(background, patellar cartilage, femoral cartilage, tibial cartilage, "
                     "meniscus): num_classes must be 5, not %u", me, d->num_classes);
        else
            snprintf(err, errlen, "%s: without aggregate_cartilage the labels are 7 classes "
                     "(background and seg's 6): num_classes must be 7, not %u", me,
                     d->num_classes);
        return -EINVAL;
    }
    return 0;
}

/* The split's file names from its annotations, as paths in image_files/,
 * sorted (the Model Zoo's sorted() of the joined paths). */
static int ds_skm__list(dataset *d, ds_skm *p, char *err, size_t errlen)
{
    char json[PATH_MAX];
    int n = snprintf(json, sizeof(json), "%s/annotations/v1.0.0/%s.json", d->data_dir,
                     d->eval ? "val" : "train");
    if (n < 0 || (size_t)n >= sizeof(json)) {
        snprintf(err, errlen, "data_dir \"%s\": path too long", d->data_dir);
        return -ENAMETOOLONG;
    }
    char *text, why[400];
    size_t len = 0;
    int rc = ds_skm__slurp(json, &text, &len, err, errlen);
    if (rc < 0)
        return rc;
    rc = jsonscan_strings(text, len, "images", "file_name", &p->files, &p->count, why,
                          sizeof(why));
    free(text);
    if (rc < 0) {
        snprintf(err, errlen, "%s: %s", json, why);
        return rc;
    }
    if (p->count == 0) {
        snprintf(err, errlen, "%s: no images (its \"images\" is empty)", json);
        return -ENOENT;
    }
    for (size_t i = 0; i < p->count; i++) {
        const char *name = p->files[i];
        if (!name[0] || strchr(name, '/') || strcmp(name, ".") == 0 || strcmp(name, "..") == 0) {
            snprintf(err, errlen, "%s: images[%zu].file_name \"%s\" is not the name of a file "
                     "in image_files/", json, i, name);
            return -EINVAL;
        }
        char *path;
        if (asprintf(&path, "%s/image_files/%s", d->data_dir, name) < 0) {
            snprintf(err, errlen, "out of memory");
            return -ENOMEM;
        }
        free(p->files[i]);
        p->files[i] = path;
        if (strlen(path) >= PATH_MAX) {
            snprintf(err, errlen, "%s: path too long", path);
            return -ENAMETOOLONG;
        }
    }
    qsort(p->files, p->count, sizeof(*p->files), ds_skm__cmp);
    return 0;
}

int ds_skm__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    ds_skm *p = calloc(1, sizeof(*p));
    if (!p) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = p;
    int rc;
    if ((rc = ds_skm__input(d, in, p, err, errlen)) < 0 ||
        (rc = ds_skm__list(d, p, err, errlen)) < 0)
        return rc;
    for (size_t i = 0; i < p->count; i++) {
        h5hdr h;
        if ((rc = h5hdr_read(p->files[i], &h, err, errlen)) < 0)
            return rc;
    }
    /* the Model Zoo scores each echo channel on its own */
    d->norm_per_channel = true;
    ds_volume_sizes(d, p->count);
    return 0;
}

/* The reader without its decoding: what dataset_probe opens. */
const dataset_reader ds_skm_probe_reader = {
    .name = "SkmDataProcessor",
    .open = ds_skm__open,
    .close = ds_skm__close,
};
