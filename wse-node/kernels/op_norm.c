/* Batch and group normalisation: statistics and their gradients reduced in
 * double over the elements they normalise. */
#include "op_norm.h"

#include <math.h>
#include <stddef.h>

void op_batchnorm_forward_train(float *out, float *save_mean,
                                float *save_invstd, float *running_mean,
                                float *running_var, const float *in,
                                const float *gamma, const float *beta, int n,
                                int c, int hw, float momentum, float eps)
{
    /* in, out (n, c, hw); gamma, beta, running_*, save_* (c) */
    size_t m = (size_t)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double sum = 0.0;
        for (int i = 0; i < n; i++) {
            const float *x = in + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++)
                sum += x[j];
        }
        double mean = m ? sum / m : 0.0, sq = 0.0;
        for (int i = 0; i < n; i++) {
            const float *x = in + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++)
                sq += (x[j] - mean) * (x[j] - mean);
        }
        double var = m ? sq / m : 0.0;
        double invstd = 1.0 / sqrt(var + eps);
        save_mean[ch] = (float)mean;
        save_invstd[ch] = (float)invstd;
        if (running_mean)
            running_mean[ch] = (float)((1.0 - momentum) * running_mean[ch] +
                                       momentum * mean);
        if (running_var) {
            double unbiased = m > 1 ? sq / (m - 1) : var;
            running_var[ch] = (float)((1.0 - momentum) * running_var[ch] +
                                      momentum * unbiased);
        }
        float a, b;
        op_norm_coeffs((float)invstd, (float)mean, gamma ? gamma[ch] : 1.0f,
                       beta ? beta[ch] : 0.0f, &a, &b);
        for (int i = 0; i < n; i++) {
            const float *x = in + ((size_t)i * c + ch) * hw;
            float *y = out + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++)
                y[j] = x[j] * a + b;
        }
    }
}

void op_batchnorm_forward_eval(float *out, const float *in,
                               const float *gamma, const float *beta,
                               const float *running_mean,
                               const float *running_var, int n, int c,
                               int hw, float eps)
{
    /* in, out (n, c, hw); gamma, beta, running_* (c) */
    for (int ch = 0; ch < c; ch++) {
        double invstd = 1.0 / sqrt((double)running_var[ch] + eps);
        float a = (float)invstd * (gamma ? gamma[ch] : 1.0f);
        float b = (beta ? beta[ch] : 0.0f) - running_mean[ch] * a;
        for (int i = 0; i < n; i++) {
            const float *x = in + ((size_t)i * c + ch) * hw;
            float *y = out + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++)
                y[j] = x[j] * a + b;
        }
    }
}

void op_batchnorm_backward(float *din, float *dgamma, float *dbeta,
                           const float *dout, const float *in,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, int n, int c, int hw)
{
    /* dout, in, din (n, c, hw); gamma, save_*, dgamma, dbeta (c);
     * xhat = (x - mean) * invstd, dgamma = sum(dy * xhat), dbeta = sum(dy),
     * dx = gamma * invstd * (dy - dbeta/m - xhat * dgamma/m) */
    size_t m = (size_t)n * hw;
    for (int ch = 0; ch < c; ch++) {
        double mean = save_mean[ch], invstd = save_invstd[ch];
        double sdy = 0.0, sdyx = 0.0;
        for (int i = 0; i < n; i++) {
            const float *x = in + ((size_t)i * c + ch) * hw;
            const float *dy = dout + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++) {
                sdy += dy[j];
                sdyx += dy[j] * ((x[j] - mean) * invstd);
            }
        }
        if (dgamma)
            dgamma[ch] = (float)sdyx;
        if (dbeta)
            dbeta[ch] = (float)sdy;
        if (!din || m == 0)
            continue;
        float g = (float)(invstd * (gamma ? gamma[ch] : 1.0f));
        float mdy = (float)(sdy / m), mdyx = (float)(sdyx / m);
        float fmean = (float)mean, finv = (float)invstd;
        for (int i = 0; i < n; i++) {
            const float *x = in + ((size_t)i * c + ch) * hw;
            const float *dy = dout + ((size_t)i * c + ch) * hw;
            float *dx = din + ((size_t)i * c + ch) * hw;
            for (int j = 0; j < hw; j++) {
                float xhat = (x[j] - fmean) * finv;
                dx[j] = g * (dy[j] - mdy - xhat * mdyx);
            }
        }
    }
}

void op_groupnorm_forward(float *out, float *save_mean, float *save_invstd,
                          const float *in, const float *gamma,
                          const float *beta, int n, int c, int hw,
                          int groups, float eps)
{
    /* in, out (n, c, hw); gamma, beta (c); save_* (n, groups) */
    int cg = c / groups;
    size_t m = (size_t)cg * hw;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < groups; g++) {
            const float *x = in + ((size_t)i * c + (size_t)g * cg) * hw;
            float *y = out + ((size_t)i * c + (size_t)g * cg) * hw;
            double sum = 0.0, sq = 0.0;
            for (size_t j = 0; j < m; j++)
                sum += x[j];
            double mean = m ? sum / m : 0.0;
            for (size_t j = 0; j < m; j++)
                sq += (x[j] - mean) * (x[j] - mean);
            double invstd = 1.0 / sqrt((m ? sq / m : 0.0) + eps);
            save_mean[i * groups + g] = (float)mean;
            save_invstd[i * groups + g] = (float)invstd;
            for (int k = 0; k < cg; k++) {
                int ch = g * cg + k;
                float a, b;
                op_norm_coeffs((float)invstd, (float)mean, gamma ? gamma[ch] : 1.0f,
                               beta ? beta[ch] : 0.0f, &a, &b);
                for (int j = 0; j < hw; j++)
                    y[(size_t)k * hw + j] = x[(size_t)k * hw + j] * a + b;
            }
        }
}

void op_groupnorm_backward(float *din, float *dgamma, float *dbeta,
                           const float *dout, const float *in,
                           const float *gamma, const float *save_mean,
                           const float *save_invstd, int n, int c, int hw,
                           int groups)
{
    /* dout, in, din (n, c, hw); gamma, dgamma, dbeta (c); save_* (n,
     * groups). With dxhat = dy * gamma over one group of m elements:
     * dx = invstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
    int cg = c / groups;
    size_t m = (size_t)cg * hw;
    if (dgamma || dbeta) {
        for (int ch = 0; ch < c; ch++) {
            double sdy = 0.0, sdyx = 0.0;
            for (int i = 0; i < n; i++) {
                int g = ch / cg;
                double mean = save_mean[i * groups + g];
                double invstd = save_invstd[i * groups + g];
                const float *x = in + ((size_t)i * c + ch) * hw;
                const float *dy = dout + ((size_t)i * c + ch) * hw;
                for (int j = 0; j < hw; j++) {
                    sdy += dy[j];
                    sdyx += dy[j] * ((x[j] - mean) * invstd);
                }
            }
            if (dgamma)
                dgamma[ch] = (float)sdyx;
            if (dbeta)
                dbeta[ch] = (float)sdy;
        }
    }
    if (!din || m == 0)
        return;
    for (int i = 0; i < n; i++)
        for (int g = 0; g < groups; g++) {
            size_t off = ((size_t)i * c + (size_t)g * cg) * hw;
            double mean = save_mean[i * groups + g];
            double invstd = save_invstd[i * groups + g];
            double s1 = 0.0, s2 = 0.0;
            for (int k = 0; k < cg; k++) {
                float gm = gamma ? gamma[g * cg + k] : 1.0f;
                const float *x = in + off + (size_t)k * hw;
                const float *dy = dout + off + (size_t)k * hw;
                for (int j = 0; j < hw; j++) {
                    double dxh = (double)dy[j] * gm;
                    s1 += dxh;
                    s2 += dxh * ((x[j] - mean) * invstd);
                }
            }
            float m1 = (float)(s1 / m), m2 = (float)(s2 / m);
            float fmean = (float)mean, finv = (float)invstd;
            for (int k = 0; k < cg; k++) {
                float gm = gamma ? gamma[g * cg + k] : 1.0f;
                const float *x = in + off + (size_t)k * hw;
                const float *dy = dout + off + (size_t)k * hw;
                float *dx = din + off + (size_t)k * hw;
                for (int j = 0; j < hw; j++) {
                    float xhat = (x[j] - fmean) * finv;
                    dx[j] = finv * (dy[j] * gm - m1 - xhat * m2);
                }
            }
        }
}

void op_norm_affine(float *out, const float *in, const float *a, const float *b, int n, int c,
                    int hw, bool per_sample)
{
    for (int i = 0; i < n; i++)
        for (int ch = 0; ch < c; ch++) {
            size_t k = per_sample ? (size_t)i * c + ch : (size_t)ch;
            const float *x = in + ((size_t)i * c + ch) * hw;
            float *y = out + ((size_t)i * c + ch) * hw;
            const float ak = a[k], bk = b[k];
            for (int j = 0; j < hw; j++)
                y[j] = x[j] * ak + bk;
        }
}
