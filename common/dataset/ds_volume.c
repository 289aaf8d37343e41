/* synthetic_volume: volumes of any size (C, D, H, W) with a few solids
 * (spheres, boxes, ellipsoids) of classes 1..K-1 in a background of class
 * 0, and the label of every voxel. Each class has its own brightness per
 * channel and stripe texture (from the seed, shared by both splits); the
 * solids, their places and the voxel noise come from the split's sample
 * seed and the index; voxels are 8-bit values, as a scanner's after
 * windowing. O(C * D * H * W) per sample. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_reader.h"
#include "rng.h"

#define DS_VOL_MAX_CLASSES 4096
#define DS_VOL_MAX_SHAPES 4       /* solids per volume: 1..DS_VOL_MAX_SHAPES */
#define DS_VOL_TEXTURE 0.06f      /* amplitude of a class's stripes */
#define DS_VOL_NOISE 0.05         /* standard deviation of voxel noise at noise = 1 */

/* rng streams; other numbers than synthetic_segmentation's, so that a
 * volume of depth 1 is not one of its images */
enum { DS_VOL_LOOK = 0x766f6c00, DS_VOL_SHAPE, DS_VOL_NOISE_STREAM };

enum ds_vol_solid { DS_VOL_SPHERE, DS_VOL_BOX, DS_VOL_ELLIPSOID };

/* How class k looks: a level per channel and stripes across one of four
 * directions. */
typedef struct ds_vol {
    float *level;             /* [K][C] mean intensity of each class and channel, in [0, 1] */
    uint32_t *period;         /* [K] stripe period in voxels, >= 2 */
    uint8_t *orient;          /* [K] stripes across 0 depth, 1 rows, 2 columns, 3 the diagonal */
    float noise_half;         /* half-width of the uniform voxel noise */
} ds_vol;

static void ds_vol__close(dataset *d)
{
    ds_vol *s = d->priv;
    if (!s)
        return;
    free(s->level);
    free(s->period);
    free(s->orient);
    free(s);
    d->priv = NULL;
}

static int ds_vol__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    if (ds_volume_input_check(d, "synthetic_volume", err, errlen) < 0)
        return -EINVAL;
    uint32_t K = d->num_classes, C = d->channels;
    if (K < 2 || K > DS_VOL_MAX_CLASSES) {
        snprintf(err, errlen, "synthetic_volume: num_classes %u is not in [2, %u] (class 0 is "
                 "the background)", K, DS_VOL_MAX_CLASSES);
        return -EINVAL;
    }
    ds_vol *s = calloc(1, sizeof(*s));
    if (!s) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    d->priv = s;
    s->level = malloc((size_t)K * C * sizeof(float));
    s->period = malloc(K * sizeof(uint32_t));
    s->orient = malloc(K);
    if (!s->level || !s->period || !s->orient) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    uint32_t side = d->height < d->width ? d->height : d->width;
    for (uint32_t k = 0; k < K; k++) {
        /* The background is dark; the classes spread over [0.45, 0.9] by
         * index, each channel shifted by up to +-0.1, so that classes
         * differ in brightness and, with more channels, in their mix. */
        float base = k == 0 ? 0.2f : 0.45f + 0.45f * (float)(k - 1) / (float)(K > 2 ? K - 2 : 1);
        for (uint32_t c = 0; c < C; c++) {
            float tint = 0.2f * ((float)rng_uniform(d->seed, DS_VOL_LOOK, (uint64_t)k * C + c) - 0.5f);
            float v = base + (C > 1 ? tint : 0.0f);
            s->level[(size_t)k * C + c] = v < 0 ? 0 : v > 1 ? 1 : v;
        }
        uint64_t h = rng_hash(d->seed, DS_VOL_LOOK, ((uint64_t)1 << 40) + k);
        uint32_t p = side / (6 + 4 * (uint32_t)(h % 4));
        s->period[k] = p < 2 ? 2 : p;
        s->orient[k] = (uint8_t)((k + (h >> 8)) % 4);
    }
    s->noise_half = (float)(d->noise * DS_VOL_NOISE * sqrt(3.0));
    ds_volume_sizes(d, d->num_samples);
    return 0;
}

static double ds_vol__u(uint64_t key, uint64_t shape, uint64_t what)
{
    return rng_uniform(key, DS_VOL_SHAPE, shape * 16 + what);
}

/* lo .. hi clipped to [0, n - 1]; false when nothing is left. */
static bool ds_vol__span(double c, double r, uint32_t n, long *lo, long *hi)
{
    *lo = lround(floor(c - r));
    *hi = lround(ceil(c + r));
    if (*lo < 0)
        *lo = 0;
    if (*hi > (long)n - 1)
        *hi = (long)n - 1;
    return *lo <= *hi;
}

/* Paints solid n of class cls into the labels (later solids cover earlier
 * ones), touching only its bounding box. A sphere's radius follows the
 * smallest side; an ellipsoid's and a box's half extents each their own
 * axis, so that thin volumes get solids too. */
static void ds_vol__solid(const dataset *d, void *labels, uint64_t key, uint32_t n, uint32_t cls)
{
    const uint32_t D = d->depth, H = d->height, W = d->width;
    double side = D < H ? D : H;
    side = side < W ? side : W;
    double cz = ds_vol__u(key, n, 1) * D, cy = ds_vol__u(key, n, 2) * H;
    double cx = ds_vol__u(key, n, 3) * W;
    int type = (int)(rng_hash(key, DS_VOL_SHAPE, n * 16 + 4) % 3);
    double rz, ry, rx;
    if (type == DS_VOL_SPHERE) {
        rz = ry = rx = side * (0.12 + 0.2 * ds_vol__u(key, n, 5));
    } else {
        double lo = type == DS_VOL_BOX ? 0.06 : 0.08, span = type == DS_VOL_BOX ? 0.14 : 0.17;
        rz = D * (lo + span * ds_vol__u(key, n, 6));
        ry = H * (lo + span * ds_vol__u(key, n, 7));
        rx = W * (lo + span * ds_vol__u(key, n, 8));
    }
    rz = rz < 0.5 ? 0.5 : rz;
    ry = ry < 0.5 ? 0.5 : ry;
    rx = rx < 0.5 ? 0.5 : rx;
    long z0, z1, y0, y1, x0, x1;
    if (!ds_vol__span(cz, rz, D, &z0, &z1) || !ds_vol__span(cy, ry, H, &y0, &y1) ||
        !ds_vol__span(cx, rx, W, &x0, &x1))
        return;
    for (long z = z0; z <= z1; z++) {
        double dz = ((double)z + 0.5 - cz) / rz;
        for (long y = y0; y <= y1; y++) {
            double dy = ((double)y + 0.5 - cy) / ry;
            size_t row = ((size_t)z * H + (size_t)y) * W;
            for (long x = x0; x <= x1; x++) {
                double dx = ((double)x + 0.5 - cx) / rx;
                bool in = type == DS_VOL_BOX ? fabs(dz) <= 1 && fabs(dy) <= 1 && fabs(dx) <= 1
                                             : dz * dz + dy * dy + dx * dx <= 1;
                if (in)
                    ds_put_label(d, labels, row + (size_t)x, cls);
            }
        }
    }
}

static int ds_vol__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                        size_t errlen)
{
    const ds_vol *s = d->priv;
    const uint32_t C = d->channels, D = d->depth, H = d->height, W = d->width;
    const uint32_t K = d->num_classes;
    const size_t dhw = (size_t)D * H * W;
    uint64_t key = rng_hash(d->sample_seed, DS_VOL_SHAPE, idx);
    memset(labels, 0, dhw * sample_label_size(d->labels_u8));
    uint32_t nsolids = 1 + (uint32_t)(rng_hash(key, DS_VOL_SHAPE, 0) % DS_VOL_MAX_SHAPES);
    for (uint32_t n = 1; n <= nsolids; n++) {
        uint32_t cls = 1 + (uint32_t)(rng_hash(key, DS_VOL_SHAPE, n * 16) % (K - 1));
        ds_vol__solid(d, labels, key, n, cls);
    }
    /* Voxels: the class's level, its stripes and uniform noise; one hash
     * gives the noise of four channels. */
    const float amp = DS_VOL_TEXTURE, nh = s->noise_half;
    for (uint32_t z = 0; z < D; z++)
        for (uint32_t y = 0; y < H; y++)
            for (uint32_t xx = 0; xx < W; xx++) {
                size_t p = ((size_t)z * H + y) * W + xx;
                uint32_t k = ds_get_label(d, labels, p);
                uint32_t proj = s->orient[k] == 0   ? z
                                : s->orient[k] == 1 ? y
                                : s->orient[k] == 2 ? xx
                                                    : xx + y + z;
                float tex = (proj / s->period[k]) & 1 ? amp : -amp;
                uint64_t h = 0;
                for (uint32_t c = 0; c < C; c++) {
                    if (c % 4 == 0)
                        h = rng_hash(key, DS_VOL_NOISE_STREAM + c / 4, p);
                    float u = (float)((h >> (16 * (c % 4))) & 0xffff) * (1.0f / 65535.0f);
                    float v = s->level[(size_t)k * C + c] + tex + nh * (2.0f * u - 1.0f);
                    v = v < 0 ? 0 : v > 1 ? 1 : v;
                    ds_put_unorm8(d, x, c * dhw + p, (uint8_t)lrintf(v * 255.0f));
                }
            }
    return 0;
}

const dataset_reader ds_volume_reader = {
    .name = "synthetic_volume",
    .open = ds_vol__open,
    .close = ds_vol__close,
    .read = ds_vol__read,
};
