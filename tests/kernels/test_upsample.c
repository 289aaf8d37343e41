/* Nearest and bilinear upsampling: PyTorch's values for a 2x2 input, and
 * gradients against central differences of double references for integer
 * and fractional scales, up and down. */
#include <check.h>
#include <math.h>
#include <stdlib.h>

#include "kt.h"
#include "op_upsample.h"

START_TEST(test_hand_values)
{
    const float x[4] = {1, 2, 3, 4};
    float y[16];
    /* nearest 2x: every pixel repeated in a 2x2 block */
    op_upsample_nearest_forward(y, x, 1, 1, 2, 2, 4, 4);
    const float en[16] = {1, 1, 2, 2, 1, 1, 2, 2, 3, 3, 4, 4, 3, 3, 4, 4};
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq(y[i], en[i]);
    /* bilinear 2x, align_corners=False: source coordinate
     * (d + 0.5)/2 - 0.5 = -0.25 (clamped to 0), 0.25, 0.75, 1.25 (second
     * tap clamped), so a row [1 2] becomes [1, 1.25, 1.75, 2] and rows mix
     * the same way: torch.nn.functional.interpolate gives these values. */
    op_upsample_bilinear_forward(y, x, 1, 1, 2, 2, 4, 4);
    const float eb[16] = {1.0f, 1.25f, 1.75f, 2.0f, 1.5f, 1.75f, 2.25f, 2.5f,
                          2.5f, 2.75f, 3.25f, 3.5f, 3.0f, 3.25f, 3.75f, 4.0f};
    for (int i = 0; i < 16; i++)
        ck_assert_float_eq_tol(y[i], eb[i], 1e-6f);
    /* backward of nearest 2x sums each 2x2 block */
    float dx[4];
    op_upsample_nearest_backward(dx, en, 1, 1, 2, 2, 4, 4);
    ck_assert_float_eq(dx[0], 4);
    ck_assert_float_eq(dx[3], 16);
}
END_TEST

struct up_fd {
    int n, c, h, w, oh, ow, bilinear;
    double *x, *y;
    const float *r;
};

static double up_fd_loss(void *ctx)
{
    struct up_fd *u = ctx;
    for (int pl = 0; pl < u->n * u->c; pl++)
        for (int oy = 0; oy < u->oh; oy++)
            for (int ox = 0; ox < u->ow; ox++) {
                const double *x = u->x + (size_t)pl * u->h * u->w;
                double v;
                if (!u->bilinear) {
                    int sy = (int)floor((double)oy * u->h / u->oh);
                    int sx = (int)floor((double)ox * u->w / u->ow);
                    v = x[sy * u->w + sx];
                } else {
                    double fy = fmax(0.0, (oy + 0.5) * u->h / u->oh - 0.5);
                    double fx = fmax(0.0, (ox + 0.5) * u->w / u->ow - 0.5);
                    int y0 = (int)fy, x0 = (int)fx;
                    int y1 = y0 < u->h - 1 ? y0 + 1 : y0;
                    int x1 = x0 < u->w - 1 ? x0 + 1 : x0;
                    double ly = fy - y0, lx = fx - x0;
                    v = (1 - ly) * ((1 - lx) * x[y0 * u->w + x0] + lx * x[y0 * u->w + x1]) +
                        ly * ((1 - lx) * x[y1 * u->w + x0] + lx * x[y1 * u->w + x1]);
                }
                u->y[((size_t)pl * u->oh + oy) * u->ow + ox] = v;
            }
    return kt_dot(u->y, u->r, (size_t)u->n * u->c * u->oh * u->ow);
}

START_TEST(test_gradients_fd)
{
    static const int shapes[][4] = {
        /* h, w, oh, ow */
        {3, 5, 6, 10}, {4, 4, 8, 8}, {5, 7, 7, 9}, {6, 5, 4, 3}, {1, 3, 2, 7},
        {7, 3, 14, 3},
    };
    kt_rng r;
    kt_rng_init(&r, 41);
    for (size_t s = 0; s < sizeof(shapes) / sizeof(shapes[0]); s++)
        for (int bil = 0; bil < 2; bil++) {
            int n = 2, c = 3, h = shapes[s][0], w = shapes[s][1];
            int oh = shapes[s][2], ow = shapes[s][3];
            size_t nx = (size_t)n * c * h * w, ny = (size_t)n * c * oh * ow;
            float *x = kt_falloc(nx), *y = kt_falloc(ny), *R = kt_falloc(ny);
            float *dx = kt_falloc(nx);
            kt_fill(&r, x, nx, -1, 1);
            kt_fill(&r, R, ny, -1, 1);
            struct up_fd u = {n, c, h, w, oh, ow, bil, kt_dalloc(nx), kt_dalloc(ny), R};
            kt_to_double(u.x, x, nx);
            up_fd_loss(&u);
            if (bil) {
                op_upsample_bilinear_forward(y, x, n, c, h, w, oh, ow);
                op_upsample_bilinear_backward(dx, R, n, c, h, w, oh, ow);
            } else {
                op_upsample_nearest_forward(y, x, n, c, h, w, oh, ow);
                op_upsample_nearest_backward(dx, R, n, c, h, w, oh, ow);
            }
            ck_assert_msg(kt_relerr(y, u.y, ny) < 1e-5, "shape %zu bil %d fwd", s, bil);
            double *g = kt_dalloc(nx);
            kt_fd_grad(g, u.x, nx, up_fd_loss, &u, 1e-4);
            ck_assert_msg(kt_relerr(dx, g, nx) < 1e-3, "shape %zu bil %d dx", s, bil);
            free(x); free(y); free(R); free(dx); free(u.x); free(u.y); free(g);
        }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("upsample");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, test_hand_values);
    tcase_add_test(tc, test_gradients_fd);
    suite_add_tcase(s, tc);
    return kt_run(s);
}
