/* JSON string literals: the one escaper the programs' JSON output shares
 * (the client's --json, safetensors headers, the coordinator's web API). */
#pragma once

#include <stddef.h>

/* Bytes json_quote writes at most for a string of n bytes: every byte as
 * a six-byte \u escape, and the two quotes. */
#define JSON_QUOTED_MAX(n) ((n) * 6 + 2)

/* Writes s as a JSON string literal into out (room for
 * JSON_QUOTED_MAX(strlen(s)) bytes), quotes included and no NUL; returns
 * the bytes written. Quotes and backslashes are escaped, as are control
 * bytes and DEL (\n, \r and \t in their short forms) and '<', so that the
 * text never closes a <script> element of a page that inlines it; other
 * bytes, UTF-8 among them, are copied as they are. */
size_t json_quote(char *out, const char *s);

/* The same literal in a buffer of its own (the caller frees it), its
 * length in *n; NULL when out of memory. */
char *json_quote_alloc(const char *s, size_t *n);
