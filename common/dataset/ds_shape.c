/* What every reader of image files checks of its input, and how it sizes
 * its set (dataset_reader.h): below the readers, so that they and the
 * reader tables of probe.c call it one way. */
#include "dataset_reader.h"

#include <errno.h>
#include <stdio.h>

int ds_image_input_check(const dataset *d, const char *me, char *err, size_t errlen)
{
    if (!d->data_dir[0]) {
        snprintf(err, errlen, "%s: data_dir is not set", me);
        return -EINVAL;
    }
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
