/* Fuzz target: the TOML parser (common/toml.c). A document that parses is
 * walked through every accessor, written out again as TOML (inline tables
 * and arrays, every string escaped) and parsed back: both trees must be the
 * same. A document that fails must say where, as "fuzz.toml:LINE:COL: ". */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "toml.h"

#define FUZZ_TOML_NAME "fuzz.toml"

typedef struct fuzz_buf {
    char *p;
    size_t len, cap;
} fuzz_buf;

static void buf_put(fuzz_buf *b, const char *s, size_t n)
{
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (b->len + n + 1 > cap)
            cap *= 2;
        char *p = realloc(b->p, cap);
        FUZZ_ASSERT(p != NULL);
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = '\0';
}

static void buf_puts(fuzz_buf *b, const char *s)
{
    buf_put(b, s, strlen(s));
}

/* A basic string: quotes, backslashes and control characters escaped;
 * the parser already checked that the bytes are UTF-8. */
static void write_string(fuzz_buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[8];
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            buf_put(b, esc, 2);
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof(esc), "\\u%04x", c);
            buf_puts(b, esc);
        } else {
            buf_put(b, (const char *)&s[i], 1);
        }
    }
    buf_puts(b, "\"");
}

static void write_value(fuzz_buf *b, const toml_value *v)
{
    char num[64];
    switch (toml_type_of(v)) {
    case TOML_STRING:
        write_string(b, toml_string(v), toml_string_len(v));
        break;
    case TOML_INTEGER:
        snprintf(num, sizeof(num), "%" PRId64, toml_int(v));
        buf_puts(b, num);
        break;
    case TOML_FLOAT: {
        double x = toml_float(v);
        if (isnan(x))
            buf_puts(b, "nan");
        else if (isinf(x))
            buf_puts(b, x > 0 ? "inf" : "-inf");
        else {
            snprintf(num, sizeof(num), "%.17g", x);
            if (!strpbrk(num, ".e"))
                strcat(num, ".0");
            buf_puts(b, num);
        }
        break;
    }
    case TOML_BOOL:
        buf_puts(b, toml_bool(v) ? "true" : "false");
        break;
    case TOML_ARRAY:
        buf_puts(b, "[");
        for (size_t i = 0; i < toml_array_len(v); i++) {
            if (i)
                buf_puts(b, ", ");
            write_value(b, toml_array_at(v, i));
        }
        buf_puts(b, "]");
        break;
    case TOML_TABLE:
        buf_puts(b, "{");
        for (size_t i = 0; i < toml_table_len(v); i++) {
            buf_puts(b, i ? ", " : " ");
            write_string(b, toml_table_key(v, i), toml_table_key_len(v, i));
            buf_puts(b, " = ");
            write_value(b, toml_table_value(v, i));
        }
        buf_puts(b, " }");
        break;
    }
}

/* Every accessor on every value, and the promises of toml.h. */
static void walk(const toml_value *v)
{
    toml_pos pos = toml_pos_of(v);
    FUZZ_ASSERT(pos.line >= 1 && pos.col >= 1);
    FUZZ_ASSERT(toml_type_name(toml_type_of(v)) != NULL);
    FUZZ_ASSERT(strcmp(toml_source_name(v), FUZZ_TOML_NAME) == 0);
    switch (toml_type_of(v)) {
    case TOML_STRING:
        FUZZ_ASSERT(toml_string(v)[toml_string_len(v)] == '\0');
        FUZZ_ASSERT(strlen(toml_string(v)) <= toml_string_len(v));
        break;
    case TOML_ARRAY:
        for (size_t i = 0; i < toml_array_len(v); i++)
            walk(toml_array_at(v, i));
        break;
    case TOML_TABLE:
        for (size_t i = 0; i < toml_table_len(v); i++) {
            const char *k = toml_table_key(v, i);
            size_t kl = toml_table_key_len(v, i);
            FUZZ_ASSERT(k[kl] == '\0');
            toml_pos kp = toml_table_key_pos(v, i);
            FUZZ_ASSERT(kp.line >= 1 && kp.col >= 1);
            /* Keys are unique: a lookup finds this very entry. */
            FUZZ_ASSERT(toml_table_getn(v, k, kl) == toml_table_value(v, i));
            if (strlen(k) == kl) {
                FUZZ_ASSERT(toml_table_find(v, k) == (long)i);
                FUZZ_ASSERT(toml_table_get(v, k) == toml_table_value(v, i));
            }
            walk(toml_table_value(v, i));
        }
        break;
    default:
        break;
    }
}

static bool same(const toml_value *a, const toml_value *b)
{
    if (toml_type_of(a) != toml_type_of(b))
        return false;
    switch (toml_type_of(a)) {
    case TOML_STRING:
        return toml_string_len(a) == toml_string_len(b) &&
               memcmp(toml_string(a), toml_string(b), toml_string_len(a)) == 0;
    case TOML_INTEGER:
        return toml_int(a) == toml_int(b);
    case TOML_FLOAT: {
        double x = toml_float(a), y = toml_float(b);
        return (isnan(x) && isnan(y)) || (x == y && signbit(x) == signbit(y));
    }
    case TOML_BOOL:
        return toml_bool(a) == toml_bool(b);
    case TOML_ARRAY:
        if (toml_array_len(a) != toml_array_len(b))
            return false;
        for (size_t i = 0; i < toml_array_len(a); i++)
            if (!same(toml_array_at(a, i), toml_array_at(b, i)))
                return false;
        return true;
    case TOML_TABLE:
        if (toml_table_len(a) != toml_table_len(b))
            return false;
        for (size_t i = 0; i < toml_table_len(a); i++) {
            size_t kl = toml_table_key_len(a, i);
            if (kl != toml_table_key_len(b, i) ||
                memcmp(toml_table_key(a, i), toml_table_key(b, i), kl) != 0 ||
                !same(toml_table_value(a, i), toml_table_value(b, i)))
                return false;
        }
        return true;
    }
    return false;
}

/* "fuzz.toml:LINE:COL: message" */
static void check_error(const char *err, size_t errlen)
{
    FUZZ_ASSERT(memchr(err, '\0', errlen) != NULL);
    size_t n = strlen(FUZZ_TOML_NAME);
    FUZZ_ASSERT(strncmp(err, FUZZ_TOML_NAME ":", n + 1) == 0);
    const char *p = err + n + 1;
    for (int field = 0; field < 2; field++) {
        FUZZ_ASSERT(isdigit((unsigned char)*p));
        while (isdigit((unsigned char)*p))
            p++;
        FUZZ_ASSERT(*p == ':');
        p++;
    }
    FUZZ_ASSERT(*p == ' ' && p[1] != '\0');
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[512];
    toml_value *root = toml_parse((const char *)data, size, FUZZ_TOML_NAME, err, sizeof(err));
    if (!root) {
        check_error(err, sizeof(err));
        return 0;
    }
    FUZZ_ASSERT(toml_type_of(root) == TOML_TABLE);
    walk(root);

    fuzz_buf b = {0};
    buf_puts(&b, "");
    for (size_t i = 0; i < toml_table_len(root); i++) {
        write_string(&b, toml_table_key(root, i), toml_table_key_len(root, i));
        buf_puts(&b, " = ");
        write_value(&b, toml_table_value(root, i));
        buf_puts(&b, "\n");
    }
    toml_value *again = toml_parse(b.p, b.len, FUZZ_TOML_NAME, err, sizeof(err));
    if (!again)
        fprintf(stderr, "written again:\n%s\nrefused: %s\n", b.p, err);
    FUZZ_ASSERT(again != NULL);
    if (!same(root, again))
        fprintf(stderr, "written again:\n%s\n", b.p);
    FUZZ_ASSERT(same(root, again));
    toml_free(again);
    free(b.p);
    toml_free(root);
    return 0;
}
