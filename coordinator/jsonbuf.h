/* A growing text buffer for the JSON the coordinator's web API answers
 * with: printf into it, strings escaped, numbers that JSON takes. */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct jsonbuf {
    char *p;       /* the text, NUL-terminated once anything was written; owned */
    size_t len;    /* bytes of text */
    size_t cap;    /* bytes allocated */
    bool oom;      /* an allocation failed: the text is incomplete */
} jsonbuf;

/* Appends formatted text. */
void jsonbuf_printf(jsonbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* Appends s as a JSON string, quoted and escaped (NULL as ""). */
void jsonbuf_str(jsonbuf *b, const char *s);
/* Appends x as a JSON number with %.17g (exact), or null when not finite. */
void jsonbuf_num(jsonbuf *b, double x);
/* Takes the text (the caller frees it); the buffer is empty again. NULL
 * when an allocation failed. */
char *jsonbuf_steal(jsonbuf *b, size_t *len);
void jsonbuf_deinit(jsonbuf *b);
