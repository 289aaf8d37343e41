/* The input checks and sizes the readers share: what a reader of images
 * or of volumes asks of the model's input, in the same words for all.
 * Below the readers, which probe.c and dataset.c pick. */
#include "dataset_reader.h"

#include <errno.h>
#include <stdio.h>

int ds_image_input_check(const dataset *d, const char *me, char *err, size_t errlen)
{
    if (!d->data_dir[0]) {
        snprintf(err, errlen, "%s: data_dir is not set", me);
        return -EINVAL;
    }
    if (ds_refuse_volume(d, me, err, errlen) < 0)
        return -EINVAL;
    if (d->ndim != 3 || (d->channels != 1 && d->channels != 3)) {
        snprintf(err, errlen, "%s: the model input must be [C, H, W] with C = 1 (gray) or 3 (RGB)",
                 me);
        return -EINVAL;
    }
    return 0;
}

void ds_image_sizes(dataset *d, uint64_t count)
{
    d->size = count;
    d->sample_elems = (uint64_t)d->channels * d->height * d->width;
    d->label_elems = d->height * d->width;
}

int ds_refuse_volume(const dataset *d, const char *me, char *err, size_t errlen)
{
    if (d->ndim != 4)
        return 0;
    snprintf(err, errlen, "%s: the model input [%u, %u, %u, %u] is a volume [C, D, H, W]; the "
             "reader takes images [C, H, W] (volumes: synthetic_volume, SkmDataProcessor)", me,
             d->channels, d->depth, d->height, d->width);
    return -EINVAL;
}

int ds_volume_input_check(const dataset *d, const char *me, char *err, size_t errlen)
{
    if (d->ndim == 4)
        return 0;
    snprintf(err, errlen, "%s: the model input has %zu dimension(s); the reader makes volumes "
             "[C, D, H, W]", me, d->ndim);
    return -EINVAL;
}

void ds_volume_sizes(dataset *d, uint64_t count)
{
    d->size = count;
    d->sample_elems = (uint64_t)d->channels * d->depth * d->height * d->width;
    d->label_elems = d->depth * d->height * d->width;
}
