/* A bump allocator for building nested protobuf messages that are packed
 * once and then dropped together. */
#pragma once

#include <stddef.h>

typedef struct arena_block arena_block;

typedef struct arena {
    arena_block *head;   /* blocks, newest first */
    int failed;          /* an allocation failed; every later one returns NULL */
} arena;

void arena_init(arena *a);
/* Zeroed memory for n bytes, aligned for any type; NULL when out of memory. */
void *arena_alloc(arena *a, size_t n);
char *arena_strdup(arena *a, const char *s);
void arena_free(arena *a);
