/* Step accounting of a running job: reports and commits, counted in order. */
#include "steps.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

void steps_init(steps *s, uint64_t first, uint32_t replicas, uint32_t shards)
{
    *s = (steps){.done = first, .replicas = replicas, .shards = shards};
}

void steps_free(steps *s)
{
    free(s->ring);
    s->ring = NULL;
    s->cap = 0;
}

/* The slot of `step`, the ring grown to hold it; NULL for a step already
 * counted, beyond the window, or when out of memory (*err says which). */
static job_step *steps__slot(steps *s, uint64_t step, int *err)
{
    *err = -ERANGE;
    if (step < s->done)
        return NULL;
    uint64_t span = step - s->done + 1;
    if (span > STEPS_WINDOW)
        return NULL;
    if (span > s->cap) {
        size_t cap = s->cap ? s->cap : 8;
        while (cap < span)
            cap *= 2;
        job_step *r = malloc(cap * sizeof(*r));
        if (!r) {
            *err = -ENOMEM;
            return NULL;
        }
        for (size_t i = 0; i < cap; i++)
            r[i].step = UINT64_MAX;
        for (size_t i = 0; i < s->cap; i++)
            if (s->ring[i].step != UINT64_MAX)
                r[s->ring[i].step & (cap - 1)] = s->ring[i];
        free(s->ring);
        s->ring = r;
        s->cap = cap;
    }
    job_step *x = &s->ring[step & (s->cap - 1)];
    if (x->step != step) {
        memset(x, 0, sizeof(*x));
        x->step = step;
    }
    return x;
}

int steps_report(steps *s, uint64_t step, double loss_sum, double compute_sec)
{
    int err;
    job_step *x = steps__slot(s, step, &err);
    if (!x)
        return err;
    x->loss_sum += loss_sum;
    x->reports++;
    if (compute_sec > x->compute_max)
        x->compute_max = compute_sec;
    return 0;
}

int steps_commit(steps *s, uint64_t step)
{
    int err;
    job_step *x = steps__slot(s, step, &err);
    if (!x)
        return err;
    x->commits++;
    return 0;
}

int steps_next(steps *s, job_step *out)
{
    if (!s->cap)
        return 0;
    job_step *x = &s->ring[s->done & (s->cap - 1)];
    if (x->step != s->done || x->reports < s->replicas || x->commits < s->shards)
        return 0;
    *out = *x;
    x->step = UINT64_MAX;
    s->done++;
    return 1;
}

double steps_rate(uint64_t samples, uint64_t first_ms, uint64_t last_ms)
{
    return last_ms > first_ms ? (double)samples * 1000.0 / (double)(last_ms - first_ms) : 0.0;
}
