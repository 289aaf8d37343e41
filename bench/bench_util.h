/* Timing helpers shared by the benchmarks. Each benchmark prints lines
 * "BENCH <name> <value> <unit>"; a ratio's unit names its baseline. */
#ifndef BENCH_UTIL_H
#define BENCH_UTIL_H

#include <stdio.h>
#include <stdlib.h>
#include <time.h>

static inline double bench_now(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static inline float *bench_alloc(size_t n, unsigned seed)
{
    float *p = aligned_alloc(64, ((n * sizeof(float) + 63) / 64) * 64);
    if (!p) {
        fprintf(stderr, "out of memory\n");
        exit(1);
    }
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) * (1.0f / 16777216.0f) - 0.5f;
    }
    return p;
}

static int bench_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of n timings (sorts t). */
static inline double bench_median(double *t, int n)
{
    qsort(t, n, sizeof(double), bench_cmp);
    return n % 2 ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

/* Best (smallest) of n timings: the machine is shared, and other work only
 * ever makes a run slower. */
static inline double bench_best(const double *t, int n)
{
    double b = t[0];
    for (int i = 1; i < n; i++)
        if (t[i] < b)
            b = t[i];
    return b;
}

#endif
