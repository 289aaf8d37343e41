/* Large buffers given back in pieces (pages.h). */
#include "pages.h"

#include <malloc.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

void pages_release(void *p, size_t bytes)
{
    uintptr_t page = (uintptr_t)sysconf(_SC_PAGESIZE);
    uintptr_t a = ((uintptr_t)p + page - 1) & ~(page - 1), e = ((uintptr_t)p + bytes) & ~(page - 1);
    for (; a < e; a += PAGES_PIECE) {
        size_t n = e - a < PAGES_PIECE ? (size_t)(e - a) : PAGES_PIECE;
        (void)madvise((void *)a, n, MADV_DONTNEED); /* advice: a failure only means later */
    }
}

void pages_free(void *p)
{
    if (!p)
        return;
    size_t bytes = malloc_usable_size(p);
    if (bytes >= PAGES_PIECE)
        pages_release(p, bytes);
    free(p);
}
