/* "Did you mean": the known name nearest to a misspelt one, for messages
 * that refuse an unknown key or value. */
#pragma once

#include <stddef.h>

/* The name among names[0..n) nearest to s by edit distance (insertions,
 * deletions, substitutions and swaps of neighbours, letters compared
 * without case), or NULL when none is near enough to be a likely
 * misspelling: at most a third of the longer name's letters, and at most
 * 3, differ. */
const char *nearest_name(const char *s, const char *const *names, size_t n);

/* nearest_name over a list "a|b|c". Writes the nearest into out (size
 * bytes) and returns out, or returns NULL. */
const char *nearest_choice(const char *s, const char *choices, char *out, size_t size);
