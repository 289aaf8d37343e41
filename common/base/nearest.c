/* "Did you mean" (nearest.h): the optimal string alignment distance,
 * which counts a swap of two neighbouring letters as one edit (the most
 * common typing slip). */
#include "nearest.h"

#include <ctype.h>
#include <stdlib.h>
#include <string.h>

#define NEAREST_MAX_LEN 64 /* longer names are never suggested */

static size_t nearest__min3(size_t a, size_t b, size_t c)
{
    size_t m = a < b ? a : b;
    return m < c ? m : c;
}

/* The distance between a (la letters) and b (lb), or SIZE_MAX when either
 * is too long to compare. */
static size_t nearest__distance(const char *a, size_t la, const char *b, size_t lb)
{
    if (la > NEAREST_MAX_LEN || lb > NEAREST_MAX_LEN)
        return (size_t)-1;
    size_t d[NEAREST_MAX_LEN + 1][NEAREST_MAX_LEN + 1];
    for (size_t i = 0; i <= la; i++)
        d[i][0] = i;
    for (size_t j = 0; j <= lb; j++)
        d[0][j] = j;
    for (size_t i = 1; i <= la; i++)
        for (size_t j = 1; j <= lb; j++) {
            int ai = tolower((unsigned char)a[i - 1]), bj = tolower((unsigned char)b[j - 1]);
            size_t cost = ai != bj;
            d[i][j] = nearest__min3(d[i - 1][j] + 1, d[i][j - 1] + 1, d[i - 1][j - 1] + cost);
            if (i > 1 && j > 1 && ai == tolower((unsigned char)b[j - 2]) &&
                tolower((unsigned char)a[i - 2]) == bj && d[i - 2][j - 2] + 1 < d[i][j])
                d[i][j] = d[i - 2][j - 2] + 1;
        }
    return d[la][lb];
}

static const char *nearest__pick(const char *s, const char *name, size_t len, size_t *best,
                                 const char *cur)
{
    size_t ls = strlen(s);
    size_t longer = ls > len ? ls : len;
    size_t limit = longer / 3 < 3 ? longer / 3 : 3;
    if (limit == 0)
        limit = 1;
    size_t dist = nearest__distance(s, ls, name, len);
    if (dist <= limit && dist < *best) {
        *best = dist;
        return name;
    }
    return cur;
}

const char *nearest_name(const char *s, const char *const *names, size_t n)
{
    const char *best_name = NULL;
    size_t best = (size_t)-1;
    for (size_t i = 0; i < n; i++)
        best_name = nearest__pick(s, names[i], strlen(names[i]), &best, best_name);
    return best_name;
}

const char *nearest_choice(const char *s, const char *choices, char *out, size_t size)
{
    const char *best_name = NULL;
    size_t best = (size_t)-1, best_len = 0;
    for (const char *p = choices; *p;) {
        const char *bar = strchr(p, '|');
        size_t len = bar ? (size_t)(bar - p) : strlen(p);
        const char *prev = best_name;
        best_name = nearest__pick(s, p, len, &best, best_name);
        if (best_name != prev)
            best_len = len;
        p += len + (bar ? 1 : 0);
    }
    if (!best_name || best_len + 1 > size)
        return NULL;
    memcpy(out, best_name, best_len);
    out[best_len] = '\0';
    return out;
}
