/* Severstal's train.csv and its run-length masks (rle.h). A row's runs
 * are decoded when its sample is read, so a malformed one fails that read,
 * naming the line. */
#include "rle.h"

#include <ctype.h>
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Cuts the next field of a line at *p (up to `end`) in place: unquotes it,
 * terminates it, and moves *p past its comma. Returns the field, or NULL
 * for an unterminated quote. */
static char *rle__field(char **p, char *end, bool *last)
{
    char *s = *p, *out = s, *f = s;
    if (s < end && *s == '"') {
        s++;
        for (;;) {
            if (s >= end)
                return NULL;
            if (*s == '"') {
                if (s + 1 < end && s[1] == '"') {
                    *out++ = '"';
                    s += 2;
                    continue;
                }
                s++;
                break;
            }
            *out++ = *s++;
        }
        while (s < end && *s != ',') /* text after the closing quote: kept out */
            s++;
    } else {
        while (s < end && *s != ',')
            s++;
        out = s;
    }
    *last = s >= end;
    *out = '\0';
    *p = s < end ? s + 1 : end;
    return f;
}

void rle_table_deinit(rle_table *t)
{
    free(t->text);
    free(t->rows);
    t->text = NULL;
    t->rows = NULL;
    t->count = 0;
}

/* Parses a ClassId: a decimal integer, as pandas reads the column. */
static int rle__class(const char *s, uint32_t *v)
{
    char *e;
    errno = 0;
    unsigned long n = strtoul(s, &e, 10);
    if (!isdigit((unsigned char)s[0]) || *e || errno || n > UINT32_MAX)
        return -1;
    *v = (uint32_t)n;
    return 0;
}

int rle_table_parse(rle_table *t, const char *text, size_t len, const char *name, char *err,
                    size_t errlen)
{
    memset(t, 0, sizeof(*t));
    if (!(t->text = malloc(len + 1))) {
        snprintf(err, errlen, "%s: out of memory", name);
        return -ENOMEM;
    }
    memcpy(t->text, text, len);
    t->text[len] = '\0';
    size_t cap = 0;
    int col_image = -1, col_class = -1, col_runs = -1, ncols = 0;
    uint32_t line = 0;
    char *p = t->text, *end = t->text + len;
    if (len >= 3 && memcmp(p, "\xef\xbb\xbf", 3) == 0) /* a UTF-8 byte order mark */
        p += 3;
    while (p < end) {
        char *eol = memchr(p, '\n', (size_t)(end - p));
        char *next = eol ? eol + 1 : end;
        if (!eol)
            eol = end;
        if (eol > p && eol[-1] == '\r')
            eol--;
        line++;
        if (eol == p) { /* a blank line */
            p = next;
            continue;
        }
        if (memchr(p, '\0', (size_t)(eol - p))) {
            snprintf(err, errlen, "%s: line %u: a NUL byte; not a CSV text file", name, line);
            goto fail;
        }
        char *fields[16];
        int n = 0;
        bool last = false;
        char *s = p;
        while (!last) {
            char *f = rle__field(&s, eol, &last);
            if (!f) {
                snprintf(err, errlen, "%s: line %u: a quote that does not end", name, line);
                goto fail;
            }
            if (n < 16)
                fields[n] = f;
            n++;
        }
        p = next;
        if (col_image < 0) { /* the header */
            for (int i = 0; i < n && i < 16; i++) {
                if (strcmp(fields[i], "ImageId") == 0)
                    col_image = i;
                else if (strcmp(fields[i], "ClassId") == 0)
                    col_class = i;
                else if (strcmp(fields[i], "EncodedPixels") == 0)
                    col_runs = i;
            }
            if (col_image < 0 || col_class < 0 || col_runs < 0) {
                snprintf(err, errlen, "%s: line %u: the header does not name the columns "
                         "ImageId, ClassId and EncodedPixels (the older ImageId_ClassId layout "
                         "is not read)", name, line);
                goto fail;
            }
            ncols = n;
            continue;
        }
        if (n != ncols) {
            snprintf(err, errlen, "%s: line %u: %d fields; the header has %d", name, line, n,
                     ncols);
            goto fail;
        }
        rle_row r = {fields[col_image], 0, fields[col_runs], line};
        if (rle__class(fields[col_class], &r.class_id) < 0) {
            snprintf(err, errlen, "%s: line %u: ClassId \"%.32s\" is not a whole number", name,
                     line, fields[col_class]);
            goto fail;
        }
        if (!r.image[0]) {
            snprintf(err, errlen, "%s: line %u: no ImageId", name, line);
            goto fail;
        }
        if (t->count == cap) {
            size_t ncap = cap ? 2 * cap : 256;
            rle_row *nr = realloc(t->rows, ncap * sizeof(*nr));
            if (!nr) {
                snprintf(err, errlen, "%s: out of memory", name);
                rle_table_deinit(t);
                return -ENOMEM;
            }
            t->rows = nr;
            cap = ncap;
        }
        t->rows[t->count++] = r;
    }
    if (col_image < 0) {
        snprintf(err, errlen, "%s: empty: no header (ImageId,ClassId,EncodedPixels)", name);
        goto fail;
    }
    return 0;
fail:
    rle_table_deinit(t);
    return -EINVAL;
}

/* Reads a whole number of up to 12 digits at *s (after white space).
 * Returns 1 with *v, 0 at the end of the string, -1 for a token that is
 * not one (its start in *bad). */
static int rle__number(const char **s, uint64_t *v, const char **bad)
{
    const char *p = *s;
    while (*p == ' ' || *p == '\t')
        p++;
    if (!*p) {
        *s = p;
        return 0;
    }
    uint64_t n = 0;
    const char *start = p;
    while (*p >= '0' && *p <= '9' && p - start < 12)
        n = n * 10 + (uint64_t)(*p++ - '0');
    if (p == start || (*p && *p != ' ' && *p != '\t')) {
        *bad = start;
        return -1;
    }
    *v = n;
    *s = p;
    return 1;
}

int rle_decode(const char *runs, uint32_t h, uint32_t w, uint8_t *mask, char *err, size_t errlen)
{
    const uint64_t total = (uint64_t)h * w;
    memset(mask, 0, total);
    const char *s = runs, *bad = NULL;
    while (*s == ' ' || *s == '\t')
        s++;
    if (!*s || strcmp(s, "-1") == 0)
        return 0;
    uint64_t count = 0, start = 0, len;
    for (;;) {
        uint64_t v;
        int got = rle__number(&s, &v, &bad);
        if (got < 0) {
            int n = 0;
            while (bad[n] && bad[n] != ' ' && bad[n] != '\t' && n < 24)
                n++;
            snprintf(err, errlen, "EncodedPixels: \"%.*s\" (number %llu) is not a whole number",
                     n, bad, (unsigned long long)count + 1);
            return -EINVAL;
        }
        if (got == 0)
            break;
        count++;
        if (count % 2) {
            start = v;
            continue;
        }
        len = v;
        if (start < 1 || start > total || len > total - (start - 1)) {
            snprintf(err, errlen, "EncodedPixels: run %llu (start %llu, length %llu) passes the "
                     "%ux%u image's %llu pixels", (unsigned long long)count / 2,
                     (unsigned long long)start, (unsigned long long)len, w, h,
                     (unsigned long long)total);
            return -EINVAL;
        }
        for (uint64_t k = start - 1; k < start - 1 + len; k++)
            mask[(k % h) * w + k / h] = 1;
    }
    if (count % 2) {
        snprintf(err, errlen, "EncodedPixels: %llu numbers; runs are pairs (start, length)",
                 (unsigned long long)count);
        return -EINVAL;
    }
    return 0;
}
