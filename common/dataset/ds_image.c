/* Samples from decoded pixels: channel conversion, resizing and tiling
 * (ds_image.h). */
#include "ds_image.h"

#include <assert.h>
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static uint32_t ds_image__min(uint32_t a, uint32_t limit)
{
    return limit && limit < a ? limit : a;
}

/* Repeats the (mh, mw) block at the top left of an (h, w) plane of values
 * of `size` bytes over the whole plane: out[y][x] = in[y % mh][x % mw], as
 * the Model Zoo's tile_image_transform lays copies side by side. In place:
 * each copy reads values already in their final place. */
static void ds_image__tile(uint8_t *p, size_t size, uint32_t h, uint32_t w, uint32_t mh,
                           uint32_t mw)
{
    size_t rowbytes = (size_t)w * size;
    if (mw < w)
        for (uint32_t y = 0; y < mh; y++) {
            uint8_t *row = p + y * rowbytes;
            for (size_t b = (size_t)mw * size; b < rowbytes; b++)
                row[b] = row[b - (size_t)mw * size];
        }
    for (uint32_t y = mh; y < h; y++)
        memcpy(p + y * rowbytes, p + (size_t)(y - mh) * rowbytes, rowbytes);
}

int ds_image_init(ds_image *s, const dataset *d, void *x, uint32_t fc, uint32_t fh, uint32_t fw,
                  uint32_t max_h, uint32_t max_w, char *err, size_t errlen)
{
    memset(s, 0, sizeof(*s));
    s->d = d;
    s->x = x;
    s->fc = fc;
    s->fh = fh;
    s->fw = fw;
    s->mh = ds_image__min(d->height, max_h);
    s->mw = ds_image__min(d->width, max_w);
    s->resize = s->mh != fh || s->mw != fw;
    if (!s->resize)
        return 0;
    if (resample_axis_init(&s->ax, fw, s->mw) < 0 || resample_axis_init(&s->ay, fh, s->mh) < 0 ||
        !(s->tmp = malloc((size_t)d->channels * fh * s->mw * sizeof(float))) ||
        !(s->row = malloc((size_t)fw * sizeof(float)))) {
        ds_image_deinit(s);
        snprintf(err, errlen, "out of memory resizing %ux%u to %ux%u", fw, fh, s->mw, s->mh);
        return -ENOMEM;
    }
    return 0;
}

/* Channel c of the model's input for a pixel whose file channels are
 * ch[k][i * stride]. */
static inline uint8_t ds_image__value(const ds_image *s, const uint8_t *const *ch, size_t at,
                                      uint32_t c)
{
    if (s->fc == s->d->channels)
        return ch[c][at];
    if (s->fc == 1) /* gray to RGB: every channel the gray (Pillow's "RGB" of "L") */
        return ch[0][at];
    return ds_image_luma(ch[0][at], ch[1][at], ch[2][at]);
}

void ds_image_span(ds_image *s, uint32_t y, uint32_t x0, uint32_t n, const uint8_t *const *ch,
                   size_t stride)
{
    const dataset *d = s->d;
    const size_t plane = (size_t)d->height * d->width;
    if (!s->resize) {
        for (uint32_t c = 0; c < d->channels; c++) {
            size_t at = c * plane + (size_t)y * d->width + x0;
            for (uint32_t i = 0; i < n; i++)
                ds_put_unorm8(d, s->x, at + i, ds_image__value(s, ch, (size_t)i * stride, c));
        }
        return;
    }
    assert(x0 == 0 && n == s->fw && y < s->fh);
    for (uint32_t c = 0; c < d->channels; c++) {
        for (uint32_t i = 0; i < n; i++)
            s->row[i] = ds_image__value(s, ch, (size_t)i * stride, c);
        float *out = s->tmp + ((size_t)c * s->fh + y) * s->mw;
        for (uint32_t k = 0; k < s->mw; k++)
            out[k] = resample_axis_apply(&s->ax, k, s->row, 1);
    }
}

void ds_image_finish(ds_image *s)
{
    const dataset *d = s->d;
    const size_t plane = (size_t)d->height * d->width;
    if (s->resize)
        for (uint32_t c = 0; c < d->channels; c++) {
            const float *in = s->tmp + (size_t)c * s->fh * s->mw;
            for (uint32_t k = 0; k < s->mh; k++)
                for (uint32_t i = 0; i < s->mw; i++) {
                    /* back to 8 bits as torchvision does after a bicubic
                     * resize: clamped, rounded half to even */
                    float v = resample_axis_apply(&s->ay, k, in + i, s->mw);
                    v = nearbyintf(fminf(fmaxf(v, 0.0f), 255.0f));
                    ds_put_unorm8(d, s->x, c * plane + (size_t)k * d->width + i, (uint8_t)v);
                }
        }
    if (s->mh == d->height && s->mw == d->width)
        return;
    size_t size = sample_input_size(d->input_unorm8);
    for (uint32_t c = 0; c < d->channels; c++)
        ds_image__tile((uint8_t *)s->x + c * plane * size, size, d->height, d->width, s->mh, s->mw);
}

void ds_image_deinit(ds_image *s)
{
    resample_axis_deinit(&s->ax);
    resample_axis_deinit(&s->ay);
    free(s->tmp);
    free(s->row);
    s->tmp = s->row = NULL;
}

int ds_mask_init(ds_mask *m, const dataset *d, void *labels, uint32_t fh, uint32_t fw,
                 uint32_t max_h, uint32_t max_w, enum ds_nearest rule, char *err, size_t errlen)
{
    memset(m, 0, sizeof(*m));
    m->d = d;
    m->labels = labels;
    m->fh = fh;
    m->fw = fw;
    m->mh = ds_image__min(d->height, max_h);
    m->mw = ds_image__min(d->width, max_w);
    m->resize = m->mh != fh || m->mw != fw;
    if (!m->resize)
        return 0;
    m->sx = malloc((size_t)m->mw * sizeof(*m->sx));
    m->sy = malloc((size_t)m->mh * sizeof(*m->sy));
    if (!m->sx || !m->sy) {
        ds_mask_deinit(m);
        snprintf(err, errlen, "out of memory resizing a mask");
        return -ENOMEM;
    }
    void (*nearest)(uint32_t, uint32_t, uint32_t *) =
        rule == DS_NEAREST_PIL ? resample_nearest_pil : resample_nearest_torch;
    nearest(fw, m->mw, m->sx);
    nearest(fh, m->mh, m->sy);
    return 0;
}

void ds_mask_span(ds_mask *m, uint32_t y, uint32_t x0, uint32_t n, const uint8_t *cls)
{
    const dataset *d = m->d;
    if (!m->resize) {
        size_t at = (size_t)y * d->width + x0;
        for (uint32_t i = 0; i < n; i++)
            ds_put_label(d, m->labels, at + i, cls[i]);
        return;
    }
    assert(x0 == 0 && n == m->fw);
    /* the output rows that take this input row (the map never decreases) */
    for (; m->next < m->mh && m->sy[m->next] <= y; m->next++) {
        if (m->sy[m->next] != y)
            continue;
        size_t at = (size_t)m->next * d->width;
        for (uint32_t i = 0; i < m->mw; i++)
            ds_put_label(d, m->labels, at + i, cls[m->sx[i]]);
    }
}

void ds_mask_finish(ds_mask *m)
{
    const dataset *d = m->d;
    if (m->mh != d->height || m->mw != d->width)
        ds_image__tile(m->labels, sample_label_size(d->labels_u8), d->height, d->width, m->mh,
                       m->mw);
}

void ds_mask_deinit(ds_mask *m)
{
    free(m->sx);
    free(m->sy);
    m->sx = m->sy = NULL;
}
