/* A strict JSON reader that keeps one string field of one array's objects
 * (jsonscan.h); everything else is checked and skipped. */
#include "jsonscan.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define JSONSCAN_MAX_DEPTH 64

typedef struct jsonscan {
    const char *s;            /* the text */
    size_t len;               /* its bytes */
    size_t pos;               /* the next byte to read */
    int depth;                /* arrays and objects open around pos */
    int rc;                   /* 0, or the first error's code (its message is in err) */
    char *err;
    size_t errlen;
} jsonscan;

/* A growing string (the value being decoded). */
typedef struct jsonscan_buf {
    char *p;
    size_t len, cap;
    bool oom;
} jsonscan_buf;

static void jsonscan__put(jsonscan_buf *b, const char *s, size_t n)
{
    if (b->oom)
        return;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 32;
        while (cap < b->len + n + 1)
            cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void jsonscan__fail(jsonscan *j, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Keeps the first error. */
static void jsonscan__fail(jsonscan *j, int rc, const char *fmt, ...)
{
    if (j->rc)
        return;
    j->rc = rc;
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(j->err, j->errlen, fmt, ap);
    va_end(ap);
}

/* A syntax error at pos, with its line and column (1-based, in bytes). */
static void jsonscan__syntax(jsonscan *j, const char *what)
{
    unsigned line = 1, col = 1;
    for (size_t i = 0; i < j->pos && i < j->len; i++) {
        if (j->s[i] == '\n') {
            line++;
            col = 1;
        } else
            col++;
    }
    if (j->pos >= j->len)
        jsonscan__fail(j, -EINVAL, "not JSON: %s, found the end of the file (line %u, column %u)",
                       what, line, col);
    else
        jsonscan__fail(j, -EINVAL, "not JSON at line %u, column %u: %s", line, col, what);
}

static void jsonscan__ws(jsonscan *j)
{
    while (j->pos < j->len && (j->s[j->pos] == ' ' || j->s[j->pos] == '\t' ||
                               j->s[j->pos] == '\n' || j->s[j->pos] == '\r'))
        j->pos++;
}

/* Skips white space; true when c is next (not taken). */
static bool jsonscan__at(jsonscan *j, char c)
{
    jsonscan__ws(j);
    return j->pos < j->len && j->s[j->pos] == c;
}

static bool jsonscan__take(jsonscan *j, char c, const char *what)
{
    if (!jsonscan__at(j, c)) {
        jsonscan__syntax(j, what);
        return false;
    }
    j->pos++;
    return true;
}

static int jsonscan__hex4(jsonscan *j)
{
    if (j->len - j->pos < 4)
        return -1;
    int v = 0;
    for (int i = 0; i < 4; i++) {
        char c = j->s[j->pos + i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0)
            return -1;
        v = v * 16 + d;
    }
    j->pos += 4;
    return v;
}

/* Bytes of the well-formed UTF-8 character at s (n bytes left), or 0. */
static size_t jsonscan__utf8_len(const unsigned char *s, size_t n)
{
    size_t k;
    uint32_t min, cp;
    if (s[0] < 0x80)
        return 1;
    if ((s[0] & 0xe0) == 0xc0)
        k = 2, min = 0x80, cp = s[0] & 0x1fu;
    else if ((s[0] & 0xf0) == 0xe0)
        k = 3, min = 0x800, cp = s[0] & 0x0fu;
    else if ((s[0] & 0xf8) == 0xf0)
        k = 4, min = 0x10000, cp = s[0] & 0x07u;
    else
        return 0;
    if (k > n)
        return 0;
    for (size_t i = 1; i < k; i++) {
        if ((s[i] & 0xc0) != 0x80)
            return 0;
        cp = (cp << 6) | (s[i] & 0x3fu);
    }
    if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff))
        return 0;
    return k;
}

static void jsonscan__utf8(jsonscan_buf *b, uint32_t cp)
{
    char u[4];
    size_t n;
    if (cp < 0x80) {
        u[0] = (char)cp;
        n = 1;
    } else if (cp < 0x800) {
        u[0] = (char)(0xc0 | (cp >> 6));
        u[1] = (char)(0x80 | (cp & 0x3f));
        n = 2;
    } else if (cp < 0x10000) {
        u[0] = (char)(0xe0 | (cp >> 12));
        u[1] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[2] = (char)(0x80 | (cp & 0x3f));
        n = 3;
    } else {
        u[0] = (char)(0xf0 | (cp >> 18));
        u[1] = (char)(0x80 | ((cp >> 12) & 0x3f));
        u[2] = (char)(0x80 | ((cp >> 6) & 0x3f));
        u[3] = (char)(0x80 | (cp & 0x3f));
        n = 4;
    }
    jsonscan__put(b, u, n);
}

/* A string: decoded into *out (owned by the caller) when out is given,
 * else only checked. Python's json takes lone surrogates and \u0000; a C
 * string cannot hold them, so a kept string refuses them. */
static bool jsonscan__string(jsonscan *j, char **out)
{
    if (!jsonscan__take(j, '"', "expected a string"))
        return false;
    jsonscan_buf b = {0};
    if (out)
        jsonscan__put(&b, "", 0);
    for (;;) {
        if (j->pos >= j->len) {
            jsonscan__syntax(j, "unterminated string");
            goto fail;
        }
        unsigned char c = (unsigned char)j->s[j->pos];
        if (c == '"') {
            j->pos++;
            break;
        }
        if (c < 0x20) {
            jsonscan__syntax(j, "control character in a string");
            goto fail;
        }
        if (c != '\\') {
            size_t k = jsonscan__utf8_len((const unsigned char *)j->s + j->pos, j->len - j->pos);
            if (!k) {
                jsonscan__syntax(j, "invalid UTF-8 in a string");
                goto fail;
            }
            if (out)
                jsonscan__put(&b, j->s + j->pos, k);
            j->pos += k;
            continue;
        }
        const size_t esc = j->pos++; /* the backslash, for messages */
        char e = j->pos < j->len ? j->s[j->pos++] : 0;
        const char *simple = e == '"' ? "\"" : e == '\\' ? "\\" : e == '/' ? "/" : e == 'b' ? "\b"
                             : e == 'f' ? "\f" : e == 'n' ? "\n" : e == 'r' ? "\r"
                             : e == 't' ? "\t" : NULL;
        if (simple) {
            if (out)
                jsonscan__put(&b, simple, 1);
            continue;
        }
        if (e != 'u') {
            j->pos = esc;
            jsonscan__syntax(j, "unknown escape in a string");
            goto fail;
        }
        int hi = jsonscan__hex4(j);
        if (hi < 0) {
            jsonscan__syntax(j, "bad \\u escape");
            goto fail;
        }
        uint32_t cp = (uint32_t)hi;
        if (hi >= 0xd800 && hi <= 0xdbff && j->len - j->pos >= 6 && j->s[j->pos] == '\\' &&
            j->s[j->pos + 1] == 'u') {
            size_t at = j->pos;
            j->pos += 2;
            int lo = jsonscan__hex4(j);
            if (lo >= 0xdc00 && lo <= 0xdfff)
                cp = 0x10000 + (((uint32_t)hi - 0xd800) << 10) + ((uint32_t)lo - 0xdc00);
            else
                j->pos = at; /* a lone high surrogate, then another escape */
        }
        if (out && (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff))) {
            j->pos = esc;
            jsonscan__syntax(j, cp ? "a lone surrogate (\\ud800 to \\udfff) in a name"
                                   : "\\u0000 in a name");
            goto fail;
        }
        if (out)
            jsonscan__utf8(&b, cp);
    }
    if (b.oom) {
        jsonscan__fail(j, -ENOMEM, "out of memory");
        goto fail;
    }
    if (out)
        *out = b.p;
    return true;
fail:
    free(b.p);
    return false;
}

static bool jsonscan__digits(jsonscan *j)
{
    size_t start = j->pos;
    while (j->pos < j->len && j->s[j->pos] >= '0' && j->s[j->pos] <= '9')
        j->pos++;
    return j->pos > start;
}

static bool jsonscan__word(jsonscan *j, const char *w)
{
    size_t n = strlen(w);
    if (j->len - j->pos < n || memcmp(j->s + j->pos, w, n) != 0)
        return false;
    j->pos += n;
    return true;
}

/* A number as RFC 8259 writes it, or Python's NaN, Infinity, -Infinity. */
static bool jsonscan__number(jsonscan *j)
{
    if (jsonscan__word(j, "NaN") || jsonscan__word(j, "Infinity") ||
        jsonscan__word(j, "-Infinity"))
        return true;
    if (j->pos < j->len && j->s[j->pos] == '-')
        j->pos++;
    size_t int_start = j->pos;
    if (!jsonscan__digits(j)) {
        jsonscan__syntax(j, "expected a value");
        return false;
    }
    if (j->pos - int_start > 1 && j->s[int_start] == '0') {
        j->pos = int_start;
        jsonscan__syntax(j, "a leading zero in a number");
        return false;
    }
    if (j->pos < j->len && j->s[j->pos] == '.') {
        j->pos++;
        if (!jsonscan__digits(j)) {
            jsonscan__syntax(j, "expected digits after '.'");
            return false;
        }
    }
    if (j->pos < j->len && (j->s[j->pos] == 'e' || j->s[j->pos] == 'E')) {
        j->pos++;
        if (j->pos < j->len && (j->s[j->pos] == '+' || j->s[j->pos] == '-'))
            j->pos++;
        if (!jsonscan__digits(j)) {
            jsonscan__syntax(j, "expected digits in an exponent");
            return false;
        }
    }
    return true;
}

static bool jsonscan__value(jsonscan *j);

/* The members of an object, '{' taken: each key into *key (owned by the
 * caller), then member(arg, key) reads its value. */
typedef bool (*jsonscan_member_fn)(jsonscan *j, void *arg, const char *key);

static bool jsonscan__members(jsonscan *j, jsonscan_member_fn member, void *arg)
{
    if (jsonscan__at(j, '}')) {
        j->pos++;
        return true;
    }
    for (;;) {
        char *key = NULL;
        if (!jsonscan__string(j, &key))
            return false;
        bool ok = jsonscan__take(j, ':', "expected ':'") && member(j, arg, key);
        free(key);
        if (!ok)
            return false;
        if (jsonscan__at(j, ',')) {
            j->pos++;
            continue;
        }
        return jsonscan__take(j, '}', "expected ',' or '}'");
    }
}

static bool jsonscan__skip_member(jsonscan *j, void *arg, const char *key)
{
    return jsonscan__value(j);
}

/* Any value, checked and skipped. */
static bool jsonscan__value(jsonscan *j)
{
    jsonscan__ws(j);
    if (j->pos >= j->len) {
        jsonscan__syntax(j, "expected a value");
        return false;
    }
    char c = j->s[j->pos];
    if (c == '"')
        return jsonscan__string(j, NULL);
    if (c == '{' || c == '[') {
        if (++j->depth > JSONSCAN_MAX_DEPTH) {
            jsonscan__syntax(j, "nested deeper than 64");
            return false;
        }
        j->pos++;
        bool ok;
        if (c == '{')
            ok = jsonscan__members(j, jsonscan__skip_member, NULL);
        else if (jsonscan__at(j, ']')) {
            j->pos++;
            ok = true;
        } else {
            for (;;) {
                if (!(ok = jsonscan__value(j)))
                    break;
                if (jsonscan__at(j, ',')) {
                    j->pos++;
                    continue;
                }
                ok = jsonscan__take(j, ']', "expected ',' or ']'");
                break;
            }
        }
        j->depth--;
        return ok;
    }
    if (jsonscan__word(j, "true") || jsonscan__word(j, "false") || jsonscan__word(j, "null"))
        return true;
    return jsonscan__number(j);
}

/* What the scan keeps. */
typedef struct jsonscan_out {
    const char *array, *field;
    bool found;               /* the top-level object has `array` */
    char **strings;           /* one per element of the last `array` */
    size_t count, cap;
    char *value;              /* the current element's `field`; NULL: none yet */
} jsonscan_out;

static bool jsonscan__element_member(jsonscan *j, void *arg, const char *key)
{
    jsonscan_out *o = arg;
    if (strcmp(key, o->field) != 0)
        return jsonscan__value(j);
    free(o->value);
    o->value = NULL;
    if (jsonscan__at(j, '"'))
        return jsonscan__string(j, &o->value);
    return jsonscan__value(j); /* not a string: the element has no name */
}

/* The array `array`: each element an object with the string `field`. */
static bool jsonscan__array(jsonscan *j, jsonscan_out *o)
{
    jsonscan_free(o->strings, o->count);
    o->strings = NULL;
    o->count = o->cap = 0;
    o->found = true;
    if (!jsonscan__at(j, '[')) {
        jsonscan__fail(j, -EINVAL, "\"%s\" is not an array", o->array);
        return false;
    }
    j->pos++;
    if (jsonscan__at(j, ']')) {
        j->pos++;
        return true;
    }
    for (;;) {
        if (!jsonscan__at(j, '{')) {
            if (jsonscan__value(j))
                jsonscan__fail(j, -EINVAL, "%s[%zu] is not an object", o->array, o->count);
            return false;
        }
        j->pos++;
        j->depth += 2;
        o->value = NULL;
        bool ok = jsonscan__members(j, jsonscan__element_member, o);
        j->depth -= 2;
        if (ok && !o->value)
            jsonscan__fail(j, -EINVAL, "%s[%zu] has no \"%s\" string", o->array, o->count,
                           o->field);
        if (!ok || !o->value) {
            free(o->value);
            o->value = NULL;
            return false;
        }
        if (o->count == o->cap) {
            size_t cap = o->cap ? 2 * o->cap : 16;
            char **p = realloc(o->strings, cap * sizeof(*p));
            if (!p) {
                free(o->value);
                o->value = NULL;
                jsonscan__fail(j, -ENOMEM, "out of memory");
                return false;
            }
            o->strings = p;
            o->cap = cap;
        }
        o->strings[o->count++] = o->value;
        o->value = NULL;
        if (jsonscan__at(j, ',')) {
            j->pos++;
            continue;
        }
        return jsonscan__take(j, ']', "expected ',' or ']'");
    }
}

static bool jsonscan__top_member(jsonscan *j, void *arg, const char *key)
{
    jsonscan_out *o = arg;
    return strcmp(key, o->array) == 0 ? jsonscan__array(j, o) : jsonscan__value(j);
}

int jsonscan_strings(const char *text, size_t len, const char *array, const char *field,
                     char ***out, size_t *count, char *err, size_t errlen)
{
    *out = NULL;
    *count = 0;
    jsonscan j = {.s = text, .len = len, .err = err, .errlen = errlen};
    jsonscan_out o = {.array = array, .field = field};
    const char *nul = memchr(text, 0, len);
    if (nul) {
        j.pos = (size_t)(nul - text);
        jsonscan__syntax(&j, "a NUL byte");
        return j.rc;
    }
    /* (a UTF-8 byte-order mark is refused, as Python's json refuses it) */
    if (!jsonscan__at(&j, '{')) {
        if (j.pos < j.len && jsonscan__value(&j))
            jsonscan__fail(&j, -EINVAL, "not a JSON object with an \"%s\" array", array);
        else if (!j.rc)
            jsonscan__syntax(&j, "expected a value");
        goto fail;
    }
    j.pos++;
    j.depth = 1;
    if (!jsonscan__members(&j, jsonscan__top_member, &o))
        goto fail;
    jsonscan__ws(&j);
    if (j.pos < j.len) {
        jsonscan__syntax(&j, "extra data after the top-level object");
        goto fail;
    }
    if (!o.found) {
        jsonscan__fail(&j, -EINVAL, "no \"%s\" array in its top-level object", array);
        goto fail;
    }
    *out = o.strings;
    *count = o.count;
    return 0;
fail:
    jsonscan_free(o.strings, o.count);
    return j.rc ? j.rc : -EINVAL;
}

void jsonscan_free(char **strings, size_t count)
{
    if (!strings)
        return;
    for (size_t i = 0; i < count; i++)
        free(strings[i]);
    free(strings);
}
