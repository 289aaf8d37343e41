/* Just enough JSON for the annotation files of a data set (COCO-style, as
 * SKM-TEA's annotations/v1.0.0/train.json): the whole text is checked
 * (RFC 8259, plus the NaN and Infinity that Python's json module takes),
 * and one string field of the objects of one array of the top-level object
 * is collected. No library: the coordinator's planner reads them too. */
#pragma once

#include <stddef.h>

/* Parses text (len bytes, NUL bytes refused) as one JSON value, which must
 * be an object, and collects, in order, the string `field` of every element
 * of its array `array` ("images" and "file_name": each image's file). As
 * Python's json does, a key given twice counts as its last value. Returns
 * 0 with *out (count strings, each and the array owned by the caller:
 * jsonscan_free) or a negative code with a message in err: -EINVAL for
 * text that is not JSON (with its line and column), an `array` that is
 * missing or not an array of objects, or an element without its `field`
 * string (which element); -ENOMEM. Strings are UTF-8 with the escapes
 * decoded; one that would hold a NUL (\u0000) or a lone surrogate is
 * refused. Nesting deeper than 64 is refused. */
int jsonscan_strings(const char *text, size_t len, const char *array, const char *field,
                     char ***out, size_t *count, char *err, size_t errlen);

/* Frees what jsonscan_strings returned; NULL is fine. */
void jsonscan_free(char **strings, size_t count);
