/* Counter-based random numbers. */
#include "rng.h"

#include <math.h>

static uint64_t mix(uint64_t z)
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

double rng_normal(uint64_t seed, uint64_t stream, uint64_t index)
{
    double u1 = rng_uniform(seed, stream, 2 * index);
    double u2 = rng_uniform(seed, stream, 2 * index + 1);
    if (u1 < 1e-300)
        u1 = 1e-300;
    return sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2);
}
