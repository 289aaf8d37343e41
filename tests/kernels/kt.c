/* Helpers shared by the kernel test suites. */
#include "kt.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "kernels.h"

void kt_rng_init(kt_rng *r, uint64_t seed)
{
    r->s = seed;
}

static uint64_t next(kt_rng *r)
{
    uint64_t z = (r->s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

double kt_uniform(kt_rng *r, double lo, double hi)
{
    return lo + (hi - lo) * ((next(r) >> 11) * 0x1.0p-53);
}

int kt_int(kt_rng *r, int lo, int hi)
{
    return lo + (int)(next(r) % (uint64_t)(hi - lo + 1));
}

void kt_fill(kt_rng *r, float *x, size_t n, double lo, double hi)
{
    for (size_t i = 0; i < n; i++)
        x[i] = (float)kt_uniform(r, lo, hi);
}

void kt_to_double(double *d, const float *f, size_t n)
{
    for (size_t i = 0; i < n; i++)
        d[i] = f[i];
}

void kt_to_float(float *f, const double *d, size_t n)
{
    for (size_t i = 0; i < n; i++)
        f[i] = (float)d[i];
}

double kt_dot(const double *out, const float *r, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += out[i] * r[i];
    return s;
}

void kt_fd_grad(double *g, double *x, size_t n, kt_loss_fn loss, void *ctx,
                double h)
{
    for (size_t i = 0; i < n; i++) {
        double keep = x[i];
        x[i] = keep + h;
        double lp = loss(ctx);
        x[i] = keep - h;
        double lm = loss(ctx);
        x[i] = keep;
        g[i] = (lp - lm) / (2.0 * h);
    }
}

double kt_relerr(const float *a, const double *b, size_t n)
{
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        err = fmax(err, fabs(a[i] - b[i]));
        scale = fmax(scale, fabs(b[i]));
    }
    if (scale == 0.0)
        return err == 0.0 ? 0.0 : INFINITY;
    return err / scale;
}

double kt_relerr_ff(const float *a, const float *b, size_t n)
{
    double err = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        if (isnan(a[i]) || isnan(b[i]))
            return INFINITY;
        err = fmax(err, fabs((double)a[i] - b[i]));
        scale = fmax(scale, fabs((double)b[i]));
    }
    if (scale == 0.0)
        return err == 0.0 ? 0.0 : INFINITY;
    return err / scale;
}

float *kt_falloc(size_t n)
{
    float *p = calloc(n ? n : 1, sizeof(float));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    return p;
}

double *kt_dalloc(size_t n)
{
    double *p = calloc(n ? n : 1, sizeof(double));
    if (!p) {
        fprintf(stderr, "out of memory\n");
        abort();
    }
    return p;
}

int kt_run(Suite *s)
{
    kernels_set_threads(1);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}

void kt_blk16(float *blk, float *plain, int n, int c, size_t hw, int to_blk)
{
    kt_blk(blk, plain, n, c, hw, to_blk, 16);
}

void kt_blk(float *blk, float *plain, int n, int c, size_t hw, int to_blk, int B)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++)
            for (size_t q = 0; q < hw; q++) {
                size_t b = (((size_t)i * (c / B) + ch / B) * hw + q) * B + ch % B;
                size_t pl = ((size_t)i * c + ch) * hw + q;
                if (to_blk)
                    blk[b] = plain[pl];
                else
                    plain[pl] = blk[b];
            }
}
