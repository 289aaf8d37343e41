/* Fuzz target: the YAML reader (common/toml/yaml.c). A document that parses
 * is walked through every accessor and checked against the limits, written
 * out again as flow-style YAML (every string double-quoted and escaped,
 * every key explicit) and parsed back: both trees must be the same. A
 * document that fails must say where, as "fuzz.yaml:LINE:COL: ". */
#include <ctype.h>
#include <inttypes.h>
#include <math.h>
#include <string.h>

#include "fuzz.h"
#include "yaml.h"

#define FUZZ_YAML_NAME "fuzz.yaml"

/* Trees larger than this are checked but not written out again: aliases
 * make a million values out of a few kilobytes, and each run should stay
 * fast. */
#define FUZZ_YAML_REWRITE_MAX 20000

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

/* A double-quoted scalar. What YAML would not keep as written is escaped:
 * quotes and backslashes, C0 and C1 controls and DEL (not printable), NEL,
 * LS and PS (line breaks, which a quoted scalar folds), U+FEFF and the
 * non-characters U+FFFE and U+FFFF. The bytes are UTF-8 (the parser
 * checked them). */
static void write_string(fuzz_buf *b, const char *s, size_t n)
{
    buf_puts(b, "\"");
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        char esc[16];
        size_t len = c >= 0xF0 ? 4 : c >= 0xE0 ? 3 : c >= 0xC0 ? 2 : 1;
        FUZZ_ASSERT(i + len <= n);
        uint32_t cp = len == 1 ? c : (uint32_t)c & (0x7Fu >> len);
        for (size_t k = 1; k < len; k++)
            cp = (cp << 6) | ((uint32_t)s[i + k] & 0x3F);
        if (c == '"' || c == '\\') {
            esc[0] = '\\';
            esc[1] = (char)c;
            buf_put(b, esc, 2);
        } else if (cp < 0x20 || (cp >= 0x7F && cp <= 0x9F) || cp == 0x2028 || cp == 0x2029 ||
                   cp == 0xFEFF || cp == 0xFFFE || cp == 0xFFFF) {
            snprintf(esc, sizeof(esc), "\\u%04" PRIX32, cp);
            buf_puts(b, esc);
        } else {
            buf_put(b, s + i, len);
        }
        i += len - 1;
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
            buf_puts(b, ".nan");
        else if (isinf(x))
            buf_puts(b, x > 0 ? ".inf" : "-.inf");
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
        /* explicit keys (? key : value): a simple key may not pass 1024 characters */
        buf_puts(b, "{");
        for (size_t i = 0; i < toml_table_len(v); i++) {
            buf_puts(b, i ? ", ? " : "? ");
            write_string(b, toml_table_key(v, i), toml_table_key_len(v, i));
            buf_puts(b, " : ");
            write_value(b, toml_table_value(v, i));
        }
        buf_puts(b, "}");
        break;
    }
}

/* Every accessor on every value, the promises of toml.h and the limits of
 * yaml.h; returns the number of values under v (v included). */
static size_t walk(const toml_value *v, int depth)
{
    size_t n = 1;
    toml_pos pos = toml_pos_of(v);
    FUZZ_ASSERT(pos.line >= 1 && pos.col >= 1);
    FUZZ_ASSERT(toml_type_name(toml_type_of(v)) != NULL);
    FUZZ_ASSERT(strcmp(toml_source_name(v), FUZZ_YAML_NAME) == 0);
    switch (toml_type_of(v)) {
    case TOML_STRING:
        FUZZ_ASSERT(toml_string(v)[toml_string_len(v)] == '\0');
        FUZZ_ASSERT(strlen(toml_string(v)) <= toml_string_len(v));
        break;
    case TOML_ARRAY:
        FUZZ_ASSERT(depth <= TOML_MAX_DEPTH);
        for (size_t i = 0; i < toml_array_len(v); i++)
            n += walk(toml_array_at(v, i), depth + 1);
        break;
    case TOML_TABLE:
        FUZZ_ASSERT(depth <= TOML_MAX_DEPTH);
        for (size_t i = 0; i < toml_table_len(v); i++) {
            const char *k = toml_table_key(v, i);
            size_t kl = toml_table_key_len(v, i);
            FUZZ_ASSERT(k[kl] == '\0');
            toml_pos kp = toml_table_key_pos(v, i);
            FUZZ_ASSERT(kp.line >= 1 && kp.col >= 1);
            /* Keys are unique: a lookup finds this very entry. */
            FUZZ_ASSERT(toml_table_getn(v, k, kl) == toml_table_value(v, i));
            if (strlen(k) == kl)
                FUZZ_ASSERT(toml_table_find(v, k) == (long)i);
            n += walk(toml_table_value(v, i), depth + 1);
        }
        break;
    case TOML_FLOAT:
    case TOML_INTEGER:
    case TOML_BOOL:
        break;
    }
    return n;
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

/* "fuzz.yaml:LINE:COL: message" */
static void check_error(const char *err, size_t errlen)
{
    FUZZ_ASSERT(memchr(err, '\0', errlen) != NULL);
    size_t n = strlen(FUZZ_YAML_NAME);
    FUZZ_ASSERT(strncmp(err, FUZZ_YAML_NAME ":", n + 1) == 0);
    const char *p = err + n + 1;
    for (int field = 0; field < 2; field++) {
        FUZZ_ASSERT(isdigit((unsigned char)*p) && *p != '0');
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
    toml_value *root = yaml_parse((const char *)data, size, FUZZ_YAML_NAME, err, sizeof(err));
    if (!root) {
        check_error(err, sizeof(err));
        return 0;
    }
    FUZZ_ASSERT(toml_type_of(root) == TOML_TABLE);
    size_t values = walk(root, 0);
    FUZZ_ASSERT(values <= YAML_MAX_VALUES + 1); /* the root is not counted */
    if (values > FUZZ_YAML_REWRITE_MAX) {
        toml_free(root);
        return 0;
    }

    fuzz_buf b = {0};
    write_value(&b, root);
    buf_puts(&b, "\n");
    toml_value *again = yaml_parse(b.p, b.len, FUZZ_YAML_NAME, err, sizeof(err));
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
