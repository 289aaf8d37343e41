/* synthetic_segmentation: images of any size (C, H, W) with a few shapes
 * (discs, rectangles, triangles) of classes 1..K-1 over a background of
 * class 0, and the mask giving the class of every pixel. Each class has its
 * own colour and stripe texture (from the seed, shared by both splits); the
 * shapes, their places and the pixel noise come from the split's sample
 * seed and the index; pixels are 8-bit values, as a camera's would be.
 * O(H * W * C) per sample. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dataset_reader.h"
#include "rng.h"

#define DS_SEG_MAX_CLASSES 4096
#define DS_SEG_MAX_SHAPES 4       /* shapes per image: 1..DS_SEG_MAX_SHAPES */
#define DS_SEG_TEXTURE 0.06f      /* amplitude of a class's stripes */
#define DS_SEG_NOISE 0.05         /* standard deviation of pixel noise at noise = 1 */

enum { DS_SEG_LOOK = 1, DS_SEG_SHAPE, DS_SEG_NOISE_STREAM }; /* rng streams */

/* How class k looks: a colour per channel and stripes. */
typedef struct ds_seg {
    float *level;             /* [K][C] mean intensity of each class and channel, in [0, 1] */
    uint32_t *period;         /* [K] stripe period in pixels, >= 2 */
    uint8_t *orient;          /* [K] stripes: 0 horizontal, 1 vertical, 2 and 3 diagonal */
    float noise_half;         /* half-width of the uniform pixel noise */
} ds_seg;

static void ds_seg__close(dataset *d)
{
    ds_seg *s = d->priv;
    if (!s)
        return;
    free(s->level);
    free(s->period);
    free(s->orient);
    free(s);
    d->priv = NULL;
}

static int ds_seg__open(dataset *d, const Appliance__PlanInput *in, char *err, size_t errlen)
{
    if (ds_refuse_volume(d, "synthetic_segmentation", err, errlen) < 0)
        return -EINVAL;
    if (d->ndim != 3) {
        snprintf(err, errlen, "synthetic_segmentation: the model input must be [C, H, W]");
        return -EINVAL;
    }
    uint32_t K = d->num_classes, C = d->channels;
    if (K < 2 || K > DS_SEG_MAX_CLASSES) {
        snprintf(err, errlen, "synthetic_segmentation: num_classes %u is not in [2, %u] (class 0 "
                 "is the background)", K, DS_SEG_MAX_CLASSES);
        return -EINVAL;
    }
    ds_seg *s = calloc(1, sizeof(*s));
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
         * index, each channel tinted by up to +-0.1, so classes differ in
         * brightness and, with colour, in hue. */
        float base = k == 0 ? 0.2f : 0.45f + 0.45f * (float)(k - 1) / (float)(K > 2 ? K - 2 : 1);
        for (uint32_t c = 0; c < C; c++) {
            float tint = 0.2f * ((float)rng_uniform(d->seed, DS_SEG_LOOK, (uint64_t)k * C + c) - 0.5f);
            float v = base + (C > 1 ? tint : 0.0f);
            s->level[(size_t)k * C + c] = v < 0 ? 0 : v > 1 ? 1 : v;
        }
        uint64_t h = rng_hash(d->seed, DS_SEG_LOOK, ((uint64_t)1 << 40) + k);
        uint32_t p = side / (6 + 4 * (uint32_t)(h % 4));
        s->period[k] = p < 2 ? 2 : p;
        s->orient[k] = (uint8_t)((k + (h >> 8)) % 4);
    }
    s->noise_half = (float)(d->noise * DS_SEG_NOISE * sqrt(3.0));
    d->size = d->num_samples;
    d->sample_elems = (uint64_t)C * d->height * d->width;
    d->label_elems = d->height * d->width;
    return 0;
}

static double ds_seg__u(uint64_t key, uint64_t shape, uint64_t what)
{
    return rng_uniform(key, DS_SEG_SHAPE, shape * 16 + what);
}

/* Paints one shape of class cls into the mask (later shapes cover earlier
 * ones), touching only its bounding box. */
static void ds_seg__shape(const dataset *d, void *mask, uint32_t H, uint32_t W, uint64_t key,
                          uint32_t n, uint32_t cls)
{
    double side = H < W ? H : W;
    double cx = ds_seg__u(key, n, 1) * W, cy = ds_seg__u(key, n, 2) * H;
    double r = side * (0.08 + 0.17 * ds_seg__u(key, n, 3));
    if (r < 1)
        r = 1;
    int type = (int)(rng_hash(key, DS_SEG_SHAPE, n * 16 + 4) % 3);
    double hw = r, hh = r; /* half extents of the bounding box */
    double vx[3] = {0}, vy[3] = {0};
    if (type == 1) { /* rectangle */
        hw = r * (0.6 + 0.8 * ds_seg__u(key, n, 5));
        hh = r * (0.6 + 0.8 * ds_seg__u(key, n, 6));
    } else if (type == 2) { /* triangle: three corners around the centre */
        double a0 = 6.283185307179586 * ds_seg__u(key, n, 7);
        for (int i = 0; i < 3; i++) {
            double a = a0 + 2.0943951023931953 * i + 0.5 * (ds_seg__u(key, n, 8 + i) - 0.5);
            double ri = r * (0.8 + 0.4 * ds_seg__u(key, n, 11 + i));
            vx[i] = cx + ri * cos(a);
            vy[i] = cy + ri * sin(a);
        }
        hw = hh = 1.2 * r;
    }
    long x0 = lround(floor(cx - hw)), x1 = lround(ceil(cx + hw));
    long y0 = lround(floor(cy - hh)), y1 = lround(ceil(cy + hh));
    if (x0 < 0)
        x0 = 0;
    if (y0 < 0)
        y0 = 0;
    if (x1 > (long)W - 1)
        x1 = (long)W - 1;
    if (y1 > (long)H - 1)
        y1 = (long)H - 1;
    /* Triangle edges as e(x, y) = a x + b y + c, oriented so inside is >= 0. */
    double ea[3] = {0}, eb[3] = {0}, ec[3] = {0};
    if (type == 2) {
        double area = (vx[1] - vx[0]) * (vy[2] - vy[0]) - (vy[1] - vy[0]) * (vx[2] - vx[0]);
        double sgn = area < 0 ? -1 : 1;
        for (int i = 0; i < 3; i++) {
            int j = (i + 1) % 3;
            ea[i] = sgn * (vy[i] - vy[j]);
            eb[i] = sgn * (vx[j] - vx[i]);
            ec[i] = sgn * (vx[i] * vy[j] - vx[j] * vy[i]);
        }
    }
    for (long y = y0; y <= y1; y++) {
        double py = (double)y + 0.5;
        for (long x = x0; x <= x1; x++) {
            double px = (double)x + 0.5;
            bool in;
            if (type == 0)
                in = (px - cx) * (px - cx) + (py - cy) * (py - cy) <= r * r;
            else if (type == 1)
                in = fabs(px - cx) <= hw && fabs(py - cy) <= hh;
            else
                in = ea[0] * px + eb[0] * py + ec[0] >= 0 && ea[1] * px + eb[1] * py + ec[1] >= 0 &&
                     ea[2] * px + eb[2] * py + ec[2] >= 0;
            if (in)
                ds_put_label(d, mask, (size_t)y * W + (size_t)x, cls);
        }
    }
}

static int ds_seg__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                        size_t errlen)
{
    const ds_seg *s = d->priv;
    const uint32_t C = d->channels, H = d->height, W = d->width, K = d->num_classes;
    const size_t hw = (size_t)H * W;
    uint64_t key = rng_hash(d->sample_seed, DS_SEG_SHAPE, idx);
    memset(labels, 0, hw * sample_label_size(d->labels_u8));
    uint32_t nshapes = 1 + (uint32_t)(rng_hash(key, DS_SEG_SHAPE, 0) % DS_SEG_MAX_SHAPES);
    for (uint32_t n = 1; n <= nshapes; n++) {
        uint32_t cls = 1 + (uint32_t)(rng_hash(key, DS_SEG_SHAPE, n * 16) % (K - 1));
        ds_seg__shape(d, labels, H, W, key, n, cls);
    }
    /* Pixels: the class's colour, its stripes and uniform noise; one hash
     * gives the noise of four channels. */
    const float amp = DS_SEG_TEXTURE, nh = s->noise_half;
    for (uint32_t y = 0; y < H; y++)
        for (uint32_t xx = 0; xx < W; xx++) {
            size_t p = (size_t)y * W + xx;
            uint32_t k = ds_get_label(d, labels, p);
            uint32_t proj;
            switch (s->orient[k]) {
            case 0:
                proj = y;
                break;
            case 1:
                proj = xx;
                break;
            case 2:
                proj = xx + y;
                break;
            default:
                proj = xx + (H - y);
                break;
            }
            float tex = (proj / s->period[k]) & 1 ? amp : -amp;
            uint64_t h = 0;
            for (uint32_t c = 0; c < C; c++) {
                if (c % 4 == 0)
                    h = rng_hash(key, DS_SEG_NOISE_STREAM + c / 4, p);
                float u = (float)((h >> (16 * (c % 4))) & 0xffff) * (1.0f / 65535.0f);
                float v = s->level[(size_t)k * C + c] + tex + nh * (2.0f * u - 1.0f);
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                ds_put_unorm8(d, x, c * hw + p, (uint8_t)lrintf(v * 255.0f));
            }
        }
    return 0;
}

const dataset_reader ds_segmentation_reader = {
    .name = "synthetic_segmentation",
    .open = ds_seg__open,
    .close = ds_seg__close,
    .read = ds_seg__read,
};
