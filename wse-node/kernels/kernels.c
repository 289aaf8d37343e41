/* Process-wide settings of the operator library. */
#include "kernels.h"

#include <cblas.h>

void kernels_set_threads(int n)
{
    if (n < 1)
        n = 1;
    openblas_set_num_threads(n);
}

int kernels_threads(void)
{
    return openblas_get_num_threads();
}
