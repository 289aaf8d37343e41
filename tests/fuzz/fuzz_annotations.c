/* Fuzz target: the annotations of an SKM-TEA split (common/dataset/
 * jsonscan.c), as SkmDataProcessor's open reads them, in the planner too.
 *
 * Input: the text of a train.json. Whatever it is, the scan returns a
 * message or the names; names that come back are valid UTF-8 without NUL
 * and, written out again as JSON, must scan back to the same names. */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "fuzz.h"
#include "jsonscan.h"

/* s as a JSON string: quotes and backslashes escaped, controls as \u00XX. */
static void put_string(FILE *f, const char *s)
{
    fputc('"', f);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\')
            fprintf(f, "\\%c", c);
        else if (c < 0x20)
            fprintf(f, "\\u%04x", c);
        else
            fputc(c, f);
    }
    fputc('"', f);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char **names = NULL, err[512];
    size_t n = 0;
    int rc = jsonscan_strings((const char *)data, size, "images", "file_name", &names, &n, err,
                              sizeof(err));
    if (rc < 0) {
        FUZZ_ASSERT(rc == -EINVAL || rc == -ENOMEM);
        FUZZ_ASSERT(names == NULL && n == 0 && err[0]);
        return 0;
    }
    char *text = NULL;
    size_t len = 0;
    FILE *f = open_memstream(&text, &len);
    FUZZ_ASSERT(f);
    fputs("{\"images\": [", f);
    for (size_t i = 0; i < n; i++) {
        FUZZ_ASSERT(names[i]);
        fputs(i ? ", {\"file_name\": " : "{\"file_name\": ", f);
        put_string(f, names[i]);
        fputc('}', f);
    }
    fputs("]}", f);
    fclose(f);
    char **again = NULL;
    size_t m = 0;
    rc = jsonscan_strings(text, len, "images", "file_name", &again, &m, err, sizeof(err));
    FUZZ_ASSERT(rc == 0);
    FUZZ_ASSERT(m == n);
    for (size_t i = 0; i < n; i++)
        FUZZ_ASSERT(strcmp(names[i], again[i]) == 0);
    jsonscan_free(again, m);
    jsonscan_free(names, n);
    free(text);
    return 0;
}
