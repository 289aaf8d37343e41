/* Large buffers given back without stalling the other threads. Unmapping
 * gigabytes holds the process's memory map for as long as its pages take
 * to free (on a 2-core virtual machine, 75 ms for 512 MiB, more under
 * load), and every mmap, munmap or brk of another thread waits for it: a
 * daemon's event loop that allocates a frame's buffer while a pool thread
 * frees a released job's tensors stalled for 0.2 to 0.7 s. Giving the pages
 * back in pieces first (madvise) lets such a thread in between the pieces. */
#pragma once

#include <stddef.h>

#define PAGES_PIECE (32u << 20) /* bytes given back at a time */

/* Gives back the pages wholly inside [p, p + bytes) in pieces of
 * PAGES_PIECE; their contents become zero. The buffer stays allocated. */
void pages_release(void *p, size_t bytes);

/* free(p) for a buffer from malloc and friends, its pages given back in
 * pieces first when it is large (PAGES_PIECE or more); NULL is fine. */
void pages_free(void *p);
