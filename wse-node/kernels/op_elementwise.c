/* Elementwise addition and flatten. The additions and copies split in
 * ranges over the operators' threads (an element's sum is the same on
 * any). */
#include "op_elementwise.h"

#include "kernels.h"

/* Elements a thread takes at the least */
#define GRAIN (64 * 1024)

typedef struct add_job {
    float *out;
    const float *a, *b;
} add_job;

static void add_range(void *ctx, size_t lo, size_t hi)
{
    const add_job *j = ctx;
    for (size_t i = lo; i < hi; i++)
        j->out[i] = j->a[i] + j->b[i];
}

void op_add_forward(float *out, const float *a, const float *b, size_t count)
{
    /* a, b, out (count) */
    add_job j = {out, a, b};
    kernels_for(count, GRAIN, add_range, &j);
}

void op_add_into(float *acc, const float *a, size_t count)
{
    op_add_forward(acc, acc, a, count);
}

void op_add_backward(float *da, float *db, const float *dout, size_t count)
{
    /* dout, da, db (count) */
    if (da && da != dout)
        kernels_copy(da, dout, count);
    if (db && db != dout)
        kernels_copy(db, dout, count);
}

void op_flatten_forward(float *out, const float *in, size_t count)
{
    /* in (n, c, h, w) = out (n, c*h*w), count elements */
    if (out != in)
        kernels_copy(out, in, count);
}

void op_flatten_backward(float *din, const float *dout, size_t count)
{
    /* dout (n, c*h*w) = din (n, c, h, w), count elements */
    if (din != dout)
        kernels_copy(din, dout, count);
}
