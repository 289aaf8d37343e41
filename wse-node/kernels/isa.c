/* The instruction sets the kernels' own vector code may use (kernels.h,
 * kernels_isa): the processor's, capped by the same variable that caps
 * oneDNN's, so that one setting runs every path of an older machine. */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "kernels.h"

static const char *const names[] = {
    [KERNELS_ISA_BASE] = "sse41",
    [KERNELS_ISA_AVX2] = "avx2",
    [KERNELS_ISA_AVX512] = "avx512_core",
    [KERNELS_ISA_AVX512_BF16] = "avx512_core_bf16",
    [KERNELS_ISA_AMX] = "avx512_core_amx",
};

const char *kernels_isa_name(kernels_isa isa)
{
    return isa >= KERNELS_ISA_BASE && isa <= KERNELS_ISA_AMX ? names[isa] : "unknown";
}

static kernels_isa processor_isa(void)
{
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bw") ||
        !__builtin_cpu_supports("avx512vl") || !__builtin_cpu_supports("avx512dq"))
        return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") ? KERNELS_ISA_AVX2
                                                                               : KERNELS_ISA_BASE;
    if (!__builtin_cpu_supports("avx512bf16"))
        return KERNELS_ISA_AVX512;
#if __GNUC__ >= 11 && !defined(__clang__)
    if (__builtin_cpu_supports("amx-bf16") && __builtin_cpu_supports("amx-tile"))
        return KERNELS_ISA_AMX;
#endif
    return KERNELS_ISA_AVX512_BF16;
#else
    return KERNELS_ISA_BASE;
#endif
}

int kernels_isa_cap_of(const char *v, kernels_isa *cap)
{
    /* oneDNN's names (its ONEDNN_MAX_CPU_ISA), each to the highest set of
     * ours it allows: AVX alone allows none of our vector code */
    static const struct {
        const char *name;
        kernels_isa isa;
    } caps[] = {
        {"SSE41", KERNELS_ISA_BASE},
        {"AVX", KERNELS_ISA_BASE},
        {"AVX2", KERNELS_ISA_AVX2},
        {"AVX2_VNNI", KERNELS_ISA_AVX2},
        {"AVX512_CORE", KERNELS_ISA_AVX512},
        {"AVX512_CORE_VNNI", KERNELS_ISA_AVX512},
        {"AVX512_CORE_BF16", KERNELS_ISA_AVX512_BF16},
        {"AVX512_CORE_FP16", KERNELS_ISA_AVX512_BF16},
        {"AVX512_CORE_AMX", KERNELS_ISA_AMX},
        {"AVX512_CORE_AMX_FP16", KERNELS_ISA_AMX},
        {"ALL", KERNELS_ISA_AMX},
    };
    for (size_t i = 0; v && i < sizeof(caps) / sizeof(caps[0]); i++)
        if (strcasecmp(v, caps[i].name) == 0) {
            *cap = caps[i].isa;
            return 0;
        }
    return -1;
}

kernels_isa kernels_isa_processor(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        v = (int)processor_isa();
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return (kernels_isa)v;
}

kernels_isa kernels_isa_level(void)
{
    static int known = -1;
    int v = __atomic_load_n(&known, __ATOMIC_RELAXED);
    if (v < 0) {
        kernels_isa isa = kernels_isa_processor(), cap;
        const char *env = getenv("ONEDNN_MAX_CPU_ISA");
        if (!env) /* oneDNN's older name, which it reads too */
            env = getenv("DNNL_MAX_CPU_ISA");
        if (kernels_isa_cap_of(env, &cap) == 0 && cap < isa)
            isa = cap;
        v = (int)isa;
        __atomic_store_n(&known, v, __ATOMIC_RELAXED);
    }
    return (kernels_isa)v;
}
