/* Parsing and printing of byte sizes ("40G", "512MiB", "1e9"). */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Parses a size: a number with an optional suffix K, M, G, T (powers of
 * 1024; "KB"/"KiB" spellings accepted). Returns 0 or -EINVAL. */
int units_parse_size(const char *s, uint64_t *out);

/* Formats bytes as "1.5 GiB" into buf; returns buf. */
const char *units_format_size(uint64_t bytes, char *buf, size_t len);
