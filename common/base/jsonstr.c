/* JSON string literals: jsonstr.h. */
#include "jsonstr.h"

#include <stdlib.h>
#include <string.h>

size_t json_quote(char *out, const char *s)
{
    static const char hex[] = "0123456789abcdef";
    char *o = out;
    *o++ = '"';
    for (const unsigned char *q = (const unsigned char *)s; *q; q++) {
        switch (*q) {
        case '"': *o++ = '\\'; *o++ = '"'; break;
        case '\\': *o++ = '\\'; *o++ = '\\'; break;
        case '\n': *o++ = '\\'; *o++ = 'n'; break;
        case '\r': *o++ = '\\'; *o++ = 'r'; break;
        case '\t': *o++ = '\\'; *o++ = 't'; break;
        default:
            if (*q < 0x20 || *q == 0x7f || *q == '<') {
                *o++ = '\\';
                *o++ = 'u';
                *o++ = '0';
                *o++ = '0';
                *o++ = hex[*q >> 4];
                *o++ = hex[*q & 15];
            } else {
                *o++ = (char)*q;
            }
        }
    }
    *o++ = '"';
    return (size_t)(o - out);
}

char *json_quote_alloc(const char *s, size_t *n)
{
    char *out = malloc(JSON_QUOTED_MAX(strlen(s)));
    if (out)
        *n = json_quote(out, s);
    return out;
}
