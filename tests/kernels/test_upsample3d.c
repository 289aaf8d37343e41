/* Nearest and trilinear upsampling of volumes: hand values (the 1-D
 * weights of PyTorch's align_corners=False along each axis), the forward
 * passes against a direct double reference and the backward passes
 * against central differences of it, on integer scales per axis (1 to 3)
 * and odd sizes, and two threads giving one thread's bits. */
#include <check.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "kernels.h"
#include "kt.h"
#include "op_upsample3d.h"

/* PyTorch's linear taps along one axis, in double. */
static void taps(int o, int in, int out, int *i0, int *i1, double *l)
{
    double src = (double)in / out * (o + 0.5) - 0.5;
    if (src < 0)
        src = 0;
    *i0 = (int)src < in - 1 ? (int)src : in - 1;
    *i1 = *i0 < in - 1 ? *i0 + 1 : *i0;
    *l = src - *i0;
}

START_TEST(test_hand_values)
{
    /* x = 100 z + 10 y + x over 2x3x4, doubled along every axis: the
     * trilinear image of a sum of 1-D functions is the sum of their 1-D
     * interpolations: [a b] -> [a, .75a + .25b, .25a + .75b, b] */
    float x[24], y[8 * 6 * 4 * 2], n[8 * 6 * 4 * 2];
    for (int z = 0; z < 2; z++)
        for (int r = 0; r < 3; r++)
            for (int c = 0; c < 4; c++)
                x[(z * 3 + r) * 4 + c] = 100.0f * z + 10.0f * r + c;
    op_upsample3d_trilinear_forward(y, x, 1, 1, 2, 3, 4, 4, 6, 8);
    op_upsample3d_nearest_forward(n, x, 1, 1, 2, 3, 4, 4, 6, 8);
    const double U[4] = {0, 0.25, 0.75, 1};
    const double V[6] = {0, 0.25, 0.75, 1.25, 1.75, 2};
    const double W[8] = {0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3};
    for (int z = 0; z < 4; z++)
        for (int r = 0; r < 6; r++)
            for (int c = 0; c < 8; c++) {
                double want = 100 * U[z] + 10 * V[r] + W[c];
                ck_assert_double_eq_tol(y[(z * 6 + r) * 8 + c], want, 1e-4);
                ck_assert_float_eq(n[(z * 6 + r) * 8 + c], x[((z / 2) * 3 + r / 2) * 4 + c / 2]);
            }
}
END_TEST

/* The double reference of either mode. */
struct up_fd {
    int n, c, d, h, w, od, oh, ow, trilinear;
    double *x, *y;
    const float *r;
};

static double up_fd_loss(void *ctx)
{
    struct up_fd *u = ctx;
    size_t vol = (size_t)u->d * u->h * u->w, o = 0;
    for (int v = 0; v < u->n * u->c; v++)
        for (int oz = 0; oz < u->od; oz++)
            for (int oy = 0; oy < u->oh; oy++)
                for (int ox = 0; ox < u->ow; ox++, o++) {
                    const double *x = u->x + v * vol;
                    if (!u->trilinear) {
                        int z = (int)((long long)oz * u->d / u->od),
                            y = (int)((long long)oy * u->h / u->oh),
                            xx = (int)((long long)ox * u->w / u->ow);
                        u->y[o] = x[((size_t)z * u->h + y) * u->w + xx];
                        continue;
                    }
                    int z[2], y[2], xx[2];
                    double lz, ly, lx, acc = 0;
                    taps(oz, u->d, u->od, &z[0], &z[1], &lz);
                    taps(oy, u->h, u->oh, &y[0], &y[1], &ly);
                    taps(ox, u->w, u->ow, &xx[0], &xx[1], &lx);
                    for (int a = 0; a < 2; a++)
                        for (int b = 0; b < 2; b++)
                            for (int e = 0; e < 2; e++)
                                acc += (a ? lz : 1 - lz) * (b ? ly : 1 - ly) * (e ? lx : 1 - lx) *
                                       x[((size_t)z[a] * u->h + y[b]) * u->w + xx[e]];
                    u->y[o] = acc;
                }
    return kt_dot(u->y, u->r, o);
}

START_TEST(test_gradients_fd)
{
    kt_rng r;
    kt_rng_init(&r, 341);
    for (int t = 0; t < 24; t++) {
        int n = kt_int(&r, 1, 2), c = kt_int(&r, 1, 3), d = kt_int(&r, 1, 5), h = kt_int(&r, 1, 5),
            w = kt_int(&r, 1, 6);
        int od = d * kt_int(&r, 1, 3), oh = h * kt_int(&r, 1, 3), ow = w * kt_int(&r, 1, 3);
        if (t % 6 == 5) /* and sizes no integer scale makes */
            od = d + kt_int(&r, 1, 4), ow = w + kt_int(&r, 0, 3);
        int tri = t & 1;
        size_t nx = (size_t)n * c * d * h * w, ny = (size_t)n * c * od * oh * ow;
        float *x = kt_falloc(nx), *y = kt_falloc(ny), *R = kt_falloc(ny), *dx = kt_falloc(nx);
        kt_fill(&r, x, nx, -1, 1);
        kt_fill(&r, R, ny, -1, 1);
        kt_fill(&r, dx, nx, 7, 8); /* stale values must be overwritten */
        struct up_fd u = {n, c, d, h, w, od, oh, ow, tri, kt_dalloc(nx), kt_dalloc(ny), R};
        kt_to_double(u.x, x, nx);
        up_fd_loss(&u);
        if (tri) {
            op_upsample3d_trilinear_forward(y, x, n, c, d, h, w, od, oh, ow);
            op_upsample3d_trilinear_backward(dx, R, n, c, d, h, w, od, oh, ow);
        } else {
            op_upsample3d_nearest_forward(y, x, n, c, d, h, w, od, oh, ow);
            op_upsample3d_nearest_backward(dx, R, n, c, d, h, w, od, oh, ow);
        }
        ck_assert_msg(kt_relerr(y, u.y, ny) < 1e-6, "case %d forward %g", t, kt_relerr(y, u.y, ny));
        double *g = kt_dalloc(nx);
        kt_fd_grad(g, u.x, nx, up_fd_loss, &u, 1e-3);
        ck_assert_msg(kt_relerr(dx, g, nx) < 1e-4, "case %d dx %g", t, kt_relerr(dx, g, nx));
        free(x); free(y); free(R); free(dx); free(u.x); free(u.y); free(g);
    }
}
END_TEST

START_TEST(test_threads)
{
    int n = 2, c = 6, d = 9, h = 10, w = 11, od = 18, oh = 20, ow = 22;
    size_t nx = (size_t)n * c * d * h * w, ny = (size_t)n * c * od * oh * ow;
    kt_rng r;
    kt_rng_init(&r, 342);
    float *x = kt_falloc(nx), *dy = kt_falloc(ny);
    kt_fill(&r, x, nx, -1, 1);
    kt_fill(&r, dy, ny, -1, 1);
    float *y[2][2], *dx[2][2];
    for (int t = 0; t < 2; t++) {
        kernels_set_threads(t + 1);
        for (int m = 0; m < 2; m++) {
            y[t][m] = kt_falloc(ny);
            dx[t][m] = kt_falloc(nx);
            if (m) {
                op_upsample3d_trilinear_forward(y[t][m], x, n, c, d, h, w, od, oh, ow);
                op_upsample3d_trilinear_backward(dx[t][m], dy, n, c, d, h, w, od, oh, ow);
            } else {
                op_upsample3d_nearest_forward(y[t][m], x, n, c, d, h, w, od, oh, ow);
                op_upsample3d_nearest_backward(dx[t][m], dy, n, c, d, h, w, od, oh, ow);
            }
        }
    }
    kernels_set_threads(1);
    for (int m = 0; m < 2; m++) {
        ck_assert(memcmp(y[0][m], y[1][m], ny * sizeof(float)) == 0);
        ck_assert(memcmp(dx[0][m], dx[1][m], nx * sizeof(float)) == 0);
        for (int t = 0; t < 2; t++) {
            free(y[t][m]);
            free(dx[t][m]);
        }
    }
    free(x);
    free(dy);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("upsample3d");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hand_values);
    tcase_add_test(tc, test_gradients_fd);
    tcase_add_test(tc, test_threads);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
