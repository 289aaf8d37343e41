/* isa-exceeds CAP: exit status 0 when this processor has more than the
 * instruction set CAP (oneDNN's name, as ONEDNN_MAX_CPU_ISA takes it), so
 * that a run capped to it takes other paths than the run without a cap;
 * 1 when it has no more; 2 for a name oneDNN does not know. Prints both. */
#include <stdio.h>

#include "kernels.h"

int main(int argc, char **argv)
{
    kernels_isa cap;
    if (argc != 2 || kernels_isa_cap_of(argv[1], &cap) < 0) {
        fprintf(stderr, "usage: isa-exceeds CAP (SSE41, AVX2, AVX512_CORE, AVX512_CORE_BF16, "
                        "AVX512_CORE_AMX, ...)\n");
        return 2;
    }
    kernels_isa have = kernels_isa_processor();
    printf("this processor: %s; the cap: %s\n", kernels_isa_name(have), kernels_isa_name(cap));
    return have > cap ? 0 : 1;
}
