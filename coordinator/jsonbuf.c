/* JSON text for the web API. */
#include "jsonbuf.h"

#include "jsonstr.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static bool jsonbuf__grow(jsonbuf *b, size_t more)
{
    if (b->oom)
        return false;
    if (b->len + more + 1 <= b->cap)
        return true;
    size_t cap = b->cap ? b->cap : 1024;
    while (cap < b->len + more + 1)
        cap *= 2;
    char *p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

void jsonbuf_printf(jsonbuf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0 || !jsonbuf__grow(b, (size_t)n))
        return;
    va_start(ap, fmt);
    vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    b->len += (size_t)n;
}

void jsonbuf_str(jsonbuf *b, const char *s)
{
    s = s ? s : "";
    if (!jsonbuf__grow(b, JSON_QUOTED_MAX(strlen(s))))
        return;
    b->len += json_quote(b->p + b->len, s);
    b->p[b->len] = 0;
}

void jsonbuf_num(jsonbuf *b, double x)
{
    if (isfinite(x))
        jsonbuf_printf(b, "%.17g", x);
    else
        jsonbuf_printf(b, "null");
}

char *jsonbuf_steal(jsonbuf *b, size_t *len)
{
    if (b->oom || !jsonbuf__grow(b, 0)) {
        jsonbuf_deinit(b);
        return NULL;
    }
    b->p[b->len] = 0;
    char *p = b->p;
    if (len)
        *len = b->len;
    memset(b, 0, sizeof(*b));
    return p;
}

void jsonbuf_deinit(jsonbuf *b)
{
    free(b->p);
    memset(b, 0, sizeof(*b));
}
