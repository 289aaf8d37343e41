/* Resize weights and nearest-neighbour maps (resample.h). The bicubic
 * weights follow the computation of PyTorch's antialiased interpolation
 * step for step in float32, so that the same inputs give the same weights;
 * it has not been compared bit for bit with PyTorch here. */
#include "resample.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>

/* Keys' cubic convolution kernel with a = -0.5 (Pillow's, and PyTorch's
 * when antialiasing). */
static float resample__cubic(float x)
{
    const float a = -0.5f;
    x = fabsf(x);
    if (x < 1.0f)
        return ((a + 2.0f) * x - (a + 3.0f)) * x * x + 1.0f;
    if (x < 2.0f)
        return ((a * x - 5.0f * a) * x + 8.0f * a) * x - 4.0f * a;
    return 0.0f;
}

void resample_axis_deinit(resample_axis *a)
{
    free(a->first);
    free(a->len);
    free(a->w);
    a->first = a->len = NULL;
    a->w = NULL;
}

int resample_axis_init(resample_axis *a, uint32_t n, uint32_t m)
{
    float scale = (float)n / (float)m;
    float support = scale >= 1.0f ? 2.0f * scale : 2.0f;
    float invscale = scale >= 1.0f ? 1.0f / scale : 1.0f;
    a->n = n;
    a->m = m;
    a->taps = (uint32_t)ceilf(support) * 2 + 1;
    a->first = calloc(m, sizeof(*a->first));
    a->len = calloc(m, sizeof(*a->len));
    a->w = calloc((size_t)m * a->taps, sizeof(*a->w));
    if (!a->first || !a->len || !a->w) {
        resample_axis_deinit(a);
        return -ENOMEM;
    }
    for (uint32_t k = 0; k < m; k++) {
        float center = scale * ((float)k + 0.5f);
        int64_t lo = (int64_t)(center - support + 0.5f), hi = (int64_t)(center + support + 0.5f);
        if (lo < 0)
            lo = 0;
        if (hi > (int64_t)n)
            hi = n;
        if (hi - lo > (int64_t)a->taps)
            hi = lo + a->taps;
        float *w = a->w + (size_t)k * a->taps, total = 0.0f;
        for (int64_t j = 0; j < hi - lo; j++) {
            w[j] = resample__cubic(((float)(j + lo) - center + 0.5f) * invscale);
            total += w[j];
        }
        for (int64_t j = 0; j < hi - lo && total != 0.0f; j++)
            w[j] /= total;
        a->first[k] = (uint32_t)lo;
        a->len[k] = (uint32_t)(hi - lo);
    }
    return 0;
}

float resample_axis_apply(const resample_axis *a, uint32_t k, const float *in, size_t stride)
{
    const float *w = a->w + (size_t)k * a->taps;
    const float *p = in + (size_t)a->first[k] * stride;
    float t = 0.0f;
    for (uint32_t j = 0; j < a->len[k]; j++)
        t += p[(size_t)j * stride] * w[j];
    return t;
}

void resample_nearest_pil(uint32_t n, uint32_t m, uint32_t *src)
{
    double step = (double)n / m, pos = step * 0.5;
    for (uint32_t k = 0; k < m; k++, pos += step) {
        uint32_t i = pos < 0 ? 0 : (uint32_t)pos;
        src[k] = i < n ? i : n - 1;
    }
}

void resample_nearest_torch(uint32_t n, uint32_t m, uint32_t *src)
{
    float scale = (float)n / (float)m;
    for (uint32_t k = 0; k < m; k++) {
        if (m == n)
            src[k] = k;
        else if (m == 2 * n)
            src[k] = k >> 1;
        else {
            uint64_t i = (uint64_t)floorf((float)k * scale);
            src[k] = i < n ? (uint32_t)i : n - 1;
        }
    }
}
