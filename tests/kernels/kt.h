/* Helpers shared by the kernel test suites: a seeded generator, tensors
 * filled with random values, central finite differences in double and the
 * error measure every gradient check uses. */
#ifndef KT_H
#define KT_H

#include <check.h>
#include <stddef.h>
#include <stdint.h>

/* Deterministic generator (splitmix64) so that every run tests the same
 * shapes and values. */
typedef struct kt_rng {
    uint64_t s;   /* state, advanced by a constant per draw */
} kt_rng;

void kt_rng_init(kt_rng *r, uint64_t seed);
double kt_uniform(kt_rng *r, double lo, double hi);
int kt_int(kt_rng *r, int lo, int hi); /* in [lo, hi] inclusive */

/* Fills x[0..n) with uniform values in [lo, hi). */
void kt_fill(kt_rng *r, float *x, size_t n, double lo, double hi);
/* Copies a float tensor into a double one and back. */
void kt_to_double(double *d, const float *f, size_t n);
void kt_to_float(float *f, const double *d, size_t n);

/* The loss every gradient check differentiates: sum(out * r) in double. */
double kt_dot(const double *out, const float *r, size_t n);

/* Loss evaluated from the current contents of the double tensors the
 * context points to. */
typedef double (*kt_loss_fn)(void *ctx);

/* Central differences: g[i] = (L(x + h e_i) - L(x - h e_i)) / 2h for every
 * element of x, which is restored afterwards. */
void kt_fd_grad(double *g, double *x, size_t n, kt_loss_fn loss, void *ctx,
                double h);

/* max_i |a_i - b_i| / max_i |b_i| (0 when both are zero): the error relative
 * to the scale of the reference tensor b. */
double kt_relerr(const float *a, const double *b, size_t n);
double kt_relerr_ff(const float *a, const float *b, size_t n);

/* A plain (n, c, hw) tensor into oneDNN's aBcd16b layout (n, c / 16, hw,
 * 16) (to_blk), or back; c a multiple of 16. */
void kt_blk16(float *blk, float *plain, int n, int c, size_t hw, int to_blk);
/* The same in blocks of B channels (aBcd8b for 8); c a multiple of B. */
void kt_blk(float *blk, float *plain, int n, int c, size_t hw, int to_blk, int B);

/* Scratch allocations that abort on failure (tests only). */
float *kt_falloc(size_t n);
double *kt_dalloc(size_t n);

/* Runs every test case of s with one BLAS thread and returns the exit status
 * for main. */
int kt_run(Suite *s);

#endif
