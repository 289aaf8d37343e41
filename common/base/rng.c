/* Counter-based random numbers.
 *
 * The normals use no libm: the logarithm and the cosine of Box-Muller are
 * polynomials here, in additions, multiplications, a division and a square
 * root, each rounded as IEEE 754 says. So a normal has the same bits on
 * every machine and C library, and in each of the clones of rng_normal_n
 * (built with -ffp-contract=off: no product is fused into its sum), which
 * vectorize: memoryx draws one for every weight it initializes. The data
 * workers draw cheaper ones, in float32 (rng_normal_f32_n, at the end):
 * 800K for one batch of 1024 MNIST-sized samples.
 * Each is within a few units in the last place of
 * sqrt(-2 log u1) cos(2 pi u2) computed in exact arithmetic. */
#include "rng.h"

#include <string.h>

static inline uint64_t mix(uint64_t z)
{
    z += 0x9e3779b97f4a7c15ull;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

uint64_t rng_hash(uint64_t seed, uint64_t stream, uint64_t index)
{
    return mix(mix(mix(seed) ^ stream) ^ index);
}

double rng_uniform(uint64_t seed, uint64_t stream, uint64_t index)
{
    return (double)(rng_hash(seed, stream, index) >> 11) * (1.0 / 9007199254740992.0);
}

/* c[0] z^(n-1) + c[1] z^(n-2) + ... + c[n-1], by Horner's rule (n is a
 * constant at every call: the loop unrolls) */
static inline double rng__horner(const double *c, int n, double z)
{
    double r = c[0];
    for (int i = 1; i < n; i++)
        r = r * z + c[i];
    return r;
}

/* log(u) for a normal double u in (0, 1]: u = 2^e m with m in
 * [sqrt(1/2), sqrt(2)), f = m - 1 (exact), s = f / (2 + f), and
 * log(1 + f) = 2 atanh(s) = f - s f + s R(s^2), R's terms those of the
 * series of atanh (s^2 <= 0.0295: the 10 terms leave 1e-17). The leading
 * f is exact and e ln 2 is split in two, so the sum keeps its last bits. */
static inline double rng__log(double u)
{
    uint64_t b;
    memcpy(&b, &u, sizeof(b));
    int64_t e = (int64_t)(b >> 52) - 1023;
    uint64_t mb = (b & 0x000fffffffffffffull) | 0x3ff0000000000000ull;
    double m;
    memcpy(&m, &mb, sizeof(m));
    int64_t big = m > 1.4142135623730951;
    m = big ? m * 0.5 : m;
    e += big;
    double f = m - 1.0;
    double s = f / (2.0 + f);
    double z = s * s;
    static const double atanh_c[] = {2.0 / 21.0, 2.0 / 19.0, 2.0 / 17.0, 2.0 / 15.0, 2.0 / 13.0,
                                     2.0 / 11.0, 2.0 / 9.0,  2.0 / 7.0,  2.0 / 5.0,  2.0 / 3.0};
    double r = rng__horner(atanh_c, 10, z) * z;
    double hfsq = 0.5 * f * f;
    double de = (double)e;
    /* ln 2 = LN2_HI + LN2_LO, LN2_HI with 21 zero bits at its end: e LN2_HI
     * is exact for |e| < 2^11 */
    const double LN2_HI = 6.93147180369123816490e-01, LN2_LO = 1.90821492927058770002e-10;
    return de * LN2_HI - ((hfsq - (s * (hfsq + r) + de * LN2_LO)) - f);
}

/* cos(2 pi k / 2^53) for an integer k in [0, 2^53): k = q 2^51 + j with j
 * in [-2^50, 2^50] (integers, so exact), x = 2 pi j / 2^53 in [-pi/4, pi/4],
 * and the quarter turn q picks cos x, -sin x, -cos x or sin x; Taylor
 * series to x^18 and x^17 (the next terms are below 3e-18). */
static inline double rng__cos_turn(uint64_t k)
{
    int64_t q = (int64_t)((k + (UINT64_C(1) << 50)) >> 51);
    int64_t j = (int64_t)k - (q << 51);
    double x = (double)j * (6.283185307179586 / 9007199254740992.0);
    double z = x * x;
    static const double cos_c[] = {1.0 / 6402373705728000.0, -1.0 / 20922789888000.0,
                                   1.0 / 87178291200.0,      -1.0 / 479001600.0,
                                   1.0 / 3628800.0,          -1.0 / 40320.0,
                                   1.0 / 720.0,              -1.0 / 24.0,
                                   0.5}; /* 1/18!, -1/16!, ..., 1/2 */
    static const double sin_c[] = {1.0 / 355687428096000.0, -1.0 / 1307674368000.0,
                                   1.0 / 6227020800.0,      -1.0 / 39916800.0,
                                   1.0 / 362880.0,          -1.0 / 5040.0,
                                   1.0 / 120.0,             -1.0 / 6.0}; /* 1/17!, ..., -1/3! */
    double c = 1.0 - rng__horner(cos_c, 9, z) * z;
    double sn = x + x * (rng__horner(sin_c, 8, z) * z);
    double v = (q & 1) ? sn : c;
    return ((q + 1) & 2) ? -v : v;
}

/* Box-Muller on the uniforms 2i and 2i + 1 of the stream whose hash prefix
 * is h. u1 = 0 is taken as 1e-300. */
static inline double rng__normal(uint64_t h, uint64_t index)
{
    uint64_t k1 = mix(h ^ (2 * index)) >> 11, k2 = mix(h ^ (2 * index + 1)) >> 11;
    double u1 = k1 ? (double)(int64_t)k1 * (1.0 / 9007199254740992.0) : 1e-300;
    return __builtin_sqrt(-2.0 * rng__log(u1)) * rng__cos_turn(k2);
}

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    return rng__normal(mix(mix(seed) ^ stream), index);
}

/* A static function: clang names the dispatcher of an external clone
 * differently. */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
static void rng__normal_loop(uint64_t h, uint64_t first, size_t n, double *out)
{
    for (size_t i = 0; i < n; i++)
        out[i] = rng__normal(h, first + i);
}

void rng_normal_n(uint64_t seed, uint64_t stream, uint64_t first, size_t n, double *out)
{
    rng__normal_loop(mix(mix(seed) ^ stream), first, n, out);
}

/* ---- float32 normals for data (rng_normal_f32_n) ---- */

/* log(u) for u in (0, 1], float32: u = 2^e m with m in [sqrt(1/2),
 * sqrt(2)), f = m - 1, s = f / (2 + f), log(1 + f) = f - s f + s R(s^2)
 * with R the series of 2 atanh to s^9 (s^2 <= 0.0295: the next term is
 * below 1e-9 of f), then e ln 2 in two parts as the double version does. */
static inline float rng__logf(float u)
{
    uint32_t b;
    memcpy(&b, &u, sizeof(b));
    int32_t e = (int32_t)(b >> 23) - 127;
    uint32_t mb = (b & 0x007fffffu) | 0x3f800000u;
    float m;
    memcpy(&m, &mb, sizeof(m));
    int32_t big = m > 1.41421356f;
    m = big ? m * 0.5f : m;
    e += big;
    float f = m - 1.0f;
    float s = f / (2.0f + f);
    float z = s * s;
    float r = ((((2.0f / 9.0f) * z + 2.0f / 7.0f) * z + 2.0f / 5.0f) * z + 2.0f / 3.0f) * z;
    float hfsq = 0.5f * f * f;
    float de = (float)e;
    /* ln 2 = LN2_HI + LN2_LO, LN2_HI with 12 zero bits at its end */
    const float LN2_HI = 6.9313812256e-01f, LN2_LO = 9.0580006145e-06f;
    return de * LN2_HI - ((hfsq - (s * (hfsq + r) + de * LN2_LO)) - f);
}

/* One Box-Muller draw on hash k: u1 from its top 24 bits, in (0, 1], the
 * angle from its low 24 bits in quarter turns (the quadrant picks signs
 * and swaps cos and sin of x in [-pi/4, pi/4], Taylor series to x^8 and
 * x^9: under 3e-8). */
static inline void rng__pair_f32(uint64_t k, float *cos_out, float *sin_out)
{
    float u1 = (float)((k >> 40) + 1) * (1.0f / 16777216.0f);
    int32_t k2 = (int32_t)(k & 0xffffffu);
    int32_t q = (k2 + (1 << 21)) >> 22;
    int32_t j = k2 - (q << 22);
    float x = (float)j * (6.28318530718f / 16777216.0f);
    float z = x * x;
    float c = 1.0f + ((((1.0f / 40320.0f) * z - 1.0f / 720.0f) * z + 1.0f / 24.0f) * z - 0.5f) * z;
    float sn = x + x * ((((1.0f / 362880.0f) * z - 1.0f / 5040.0f) * z + 1.0f / 120.0f) * z -
                        1.0f / 6.0f) * z;
    float rad = __builtin_sqrtf(-2.0f * rng__logf(u1));
    /* cos(q pi/2 + x): c, -sn, -c, sn; sin: sn, c, -sn, -c */
    float cv = (q & 1) ? sn : c, sv = (q & 1) ? c : sn;
    cv = ((q + 1) & 2) ? -cv : cv;
    sv = (q & 2) ? -sv : sv;
    *cos_out = rad * cv;
    *sin_out = rad * sv;
}

float rng_normal_f32(uint64_t seed, uint64_t stream, uint64_t index)
{
    float c, s;
    rng__pair_f32(mix(mix(mix(seed) ^ stream) ^ (index >> 1)), &c, &s);
    return index & 1 ? s : c;
}

/* The draws of pairs p0 .. p0+n-1: cos parts to c, sin parts to s. */
__attribute__((target_clones("arch=x86-64-v4", "avx2", "default")))
static void rng__pairs_f32_loop(uint64_t h, uint64_t p0, size_t n, float *c, float *s)
{
    for (size_t i = 0; i < n; i++)
        rng__pair_f32(mix(h ^ (p0 + i)), &c[i], &s[i]);
}

void rng_normal_f32_n(uint64_t seed, uint64_t stream, uint64_t first, size_t n, float *out)
{
    uint64_t h = mix(mix(seed) ^ stream);
    float c[256], s[256];
    uint64_t p = first >> 1, end = first + n; /* pairs p .. cover [first, end) */
    while (2 * p < end) {
        size_t np = (size_t)((end - 2 * p + 1) / 2);
        if (np > 256)
            np = 256;
        rng__pairs_f32_loop(h, p, np, c, s);
        if (2 * p >= first && 2 * (p + np) <= end) { /* every pair inside: no test each */
            float *o = out + (2 * p - first);
            for (size_t i = 0; i < np; i++) {
                o[2 * i] = c[i];
                o[2 * i + 1] = s[i];
            }
            p += np;
            continue;
        }
        for (size_t i = 0; i < np; i++) {
            uint64_t a = 2 * (p + i); /* normals a (cos) and a + 1 (sin) */
            if (a >= first && a < end)
                out[a - first] = c[i];
            if (a + 1 >= first && a + 1 < end)
                out[a + 1 - first] = s[i];
        }
        p += np;
    }
}
