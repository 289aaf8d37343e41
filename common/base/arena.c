/* Bump allocator: 64 KiB blocks, larger requests get their own block. */
#include "arena.h"

#include <stdlib.h>
#include <string.h>

struct arena_block {
    arena_block *next;
    size_t used, size;
    max_align_t data[];
};

void arena_init(arena *a)
{
    a->head = NULL;
    a->failed = 0;
}

void *arena_alloc(arena *a, size_t n)
{
    size_t align = sizeof(max_align_t);
    n = (n + align - 1) / align * align;
    if (a->failed)
        return NULL;
    arena_block *b = a->head;
    if (!b || b->size - b->used < n) {
        size_t size = n > 65536 ? n : 65536;
        b = malloc(sizeof(*b) + size);
        if (!b) {
            a->failed = 1;
            return NULL;
        }
        b->size = size;
        b->used = 0;
        b->next = a->head;
        a->head = b;
    }
    void *p = (char *)b->data + b->used;
    b->used += n;
    memset(p, 0, n);
    return p;
}

char *arena_strdup(arena *a, const char *s)
{
    size_t n = strlen(s) + 1;
    char *p = arena_alloc(a, n);
    if (p)
        memcpy(p, s, n);
    return p;
}

void arena_free(arena *a)
{
    arena_block *b = a->head;
    while (b) {
        arena_block *next = b->next;
        free(b);
        b = next;
    }
    a->head = NULL;
}
