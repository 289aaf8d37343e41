/* toml-decode: prints a TOML document as the tagged JSON of the toml-test
 * suite, so the parser can be checked against the conformance cases. */
#include "toml.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void put_json_string(FILE *out, const char *s, size_t n)
{
    fputc('"', out);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        switch (c) {
        case '"': fputs("\\\"", out); break;
        case '\\': fputs("\\\\", out); break;
        case '\b': fputs("\\b", out); break;
        case '\f': fputs("\\f", out); break;
        case '\n': fputs("\\n", out); break;
        case '\r': fputs("\\r", out); break;
        case '\t': fputs("\\t", out); break;
        default:
            if (c < 0x20 || c == 0x7F)
                fprintf(out, "\\u%04x", c);
            else
                fputc(c, out);
        }
    }
    fputc('"', out);
}

/* The shortest decimal text that reads back as x. */
static void format_float(char *buf, size_t n, double x)
{
    if (isnan(x)) {
        snprintf(buf, n, "nan");
        return;
    }
    if (isinf(x)) {
        snprintf(buf, n, x < 0 ? "-inf" : "inf");
        return;
    }
    for (int prec = 1; prec <= 17; prec++) {
        snprintf(buf, n, "%.*g", prec, x);
        if (strtod(buf, NULL) == x)
            return;
    }
}

static void put_tagged(FILE *out, const char *type, const char *value, size_t n)
{
    fprintf(out, "{\"type\":\"%s\",\"value\":", type);
    put_json_string(out, value, n);
    fputc('}', out);
}

static void put_value(FILE *out, const toml_value *v)
{
    char buf[64];
    switch (toml_type_of(v)) {
    case TOML_TABLE:
        fputc('{', out);
        for (size_t i = 0; i < toml_table_len(v); i++) {
            if (i)
                fputc(',', out);
            put_json_string(out, toml_table_key(v, i), toml_table_key_len(v, i));
            fputc(':', out);
            put_value(out, toml_table_value(v, i));
        }
        fputc('}', out);
        break;
    case TOML_ARRAY:
        fputc('[', out);
        for (size_t i = 0; i < toml_array_len(v); i++) {
            if (i)
                fputc(',', out);
            put_value(out, toml_array_at(v, i));
        }
        fputc(']', out);
        break;
    case TOML_STRING:
        put_tagged(out, "string", toml_string(v), toml_string_len(v));
        break;
    case TOML_INTEGER:
        snprintf(buf, sizeof(buf), "%" PRId64, toml_int(v));
        put_tagged(out, "integer", buf, strlen(buf));
        break;
    case TOML_FLOAT:
        format_float(buf, sizeof(buf), toml_float(v));
        put_tagged(out, "float", buf, strlen(buf));
        break;
    case TOML_BOOL:
        put_tagged(out, "bool", toml_bool(v) ? "true" : "false", toml_bool(v) ? 4 : 5);
        break;
    }
}

static toml_value *parse_stdin(char *err, size_t errlen)
{
    size_t len = 0, cap = 65536;
    char *text = malloc(cap);
    toml_value *root = NULL;
    if (!text)
        goto oom;
    for (;;) {
        size_t n = fread(text + len, 1, cap - len, stdin);
        len += n;
        if (n == 0)
            break;
        if (len == cap) {
            char *p = realloc(text, cap *= 2);
            if (!p)
                goto oom;
            text = p;
        }
    }
    root = toml_parse(text, len, "<stdin>", err, errlen);
    free(text);
    return root;
oom:
    free(text);
    snprintf(err, errlen, "<stdin>: out of memory");
    return NULL;
}

int main(int argc, char **argv)
{
    char err[512];
    if (argc > 2 || (argc == 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0))) {
        fprintf(stderr, "usage: %s [FILE]\n"
                        "Prints FILE (or standard input) as toml-test tagged JSON.\n", argv[0]);
        return 2;
    }
    toml_value *root = argc == 2 && strcmp(argv[1], "-") != 0
                           ? toml_parse_file(argv[1], err, sizeof(err))
                           : parse_stdin(err, sizeof(err));
    if (!root) {
        fprintf(stderr, "%s\n", err);
        return 1;
    }
    put_value(stdout, root);
    fputc('\n', stdout);
    toml_free(root);
    return fflush(stdout) == 0 ? 0 : 1;
}
