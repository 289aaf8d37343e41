/* Options of a daemon as tables: the command line and the --config file
 * parsed against the tables of the modules that own them. */
#include "options.h"

#include <errno.h>
#include <getopt.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "toml.h"
#include "units.h"

#define OPTIONS__KEYS_MAX 64 /* keys of one table (one bit each in options_given) */
#define OPTIONS__HELP -2     /* getopt value of --help */

static void *options__field(const options_table *t, const options_key *k)
{
    return (char *)t->base + k->offset;
}

const options_key *options_find(const options_table *t, size_t nt, const char *name, size_t *table)
{
    for (size_t i = 0; i < nt; i++)
        for (const options_key *k = t[i].keys; k->name; k++)
            if (strcmp(k->name, name) == 0) {
                if (table)
                    *table = i;
                return k;
            }
    return NULL;
}

/* The bounds of a number key, its defaults filled in. */
static void options__bounds(const options_key *k, uint64_t *min, uint64_t *max)
{
    *min = k->min ? k->min : 1;
    *max = k->max ? k->max : k->kind == OPTIONS_U32 ? UINT32_MAX : UINT64_MAX;
}

int options_apply(const options_table *t, const options_key *k, const char *val, const char *where)
{
    void *f = options__field(t, k);
    uint64_t v = 0, min, max;
    switch (k->kind) {
    case OPTIONS_STRING:
        if (strlen(val) >= k->size) {
            fprintf(stderr, "%s is too long (at most %zu characters)\n", where, k->size - 1);
            return -EINVAL;
        }
        strcpy(f, val);
        return 0;
    case OPTIONS_FLAG:
        if (strcmp(val, "true") != 0 && strcmp(val, "false") != 0) {
            fprintf(stderr, "%s: \"%s\": expected true or false\n", where, val);
            return -EINVAL;
        }
        *(bool *)f = strcmp(val, "true") == 0;
        return 0;
    case OPTIONS_LOG_LEVEL: {
        int level = log_level_parse(val);
        if (level < 0) {
            fprintf(stderr, "%s: log level \"%s\": expected debug, info, warn or error\n", where, val);
            return -EINVAL;
        }
        *(int *)f = level;
        return 0;
    }
    case OPTIONS_SIZE:
        if (units_parse_size(val, &v) < 0) {
            fprintf(stderr, "%s: size \"%s\": expected bytes with an optional K, M, G or T suffix\n",
                    where, val);
            return -EINVAL;
        }
        break;
    case OPTIONS_U32:
    case OPTIONS_U64: {
        char *end;
        errno = 0;
        unsigned long long n = strtoull(val, &end, 10);
        if (*end || end == val || val[0] == '-' || errno == ERANGE) {
            fprintf(stderr, "%s: \"%s\": expected a positive integer\n", where, val);
            return -EINVAL;
        }
        v = n;
        break;
    }
    }
    options__bounds(k, &min, &max);
    if (v < min || v > max) {
        if (min == 1 && (max == UINT32_MAX || max == UINT64_MAX))
            fprintf(stderr, "%s: \"%s\": expected a positive %s\n", where, val,
                    k->kind == OPTIONS_SIZE ? "size" : "integer");
        else
            fprintf(stderr, "%s: \"%s\": expected from %llu to %llu\n", where, val,
                    (unsigned long long)min, (unsigned long long)max);
        return -EINVAL;
    }
    if (k->kind == OPTIONS_U32)
        *(uint32_t *)f = (uint32_t)v;
    else
        *(uint64_t *)f = v;
    return 0;
}

static void options__mark(options_given *g, size_t table, size_t key)
{
    g->bits[table] |= UINT64_C(1) << key;
}

bool options_was_given(const options_given *g, const options_table *t, size_t table,
                       const options_key *k)
{
    return g->bits[table] >> (size_t)(k - t[table].keys) & 1;
}

int options_parse_argv(const options_table *t, size_t nt, int argc, char **argv,
                       const char *component, void (*usage)(FILE *f, void *arg), void *usage_arg,
                       options_given *given)
{
    struct option lo[OPTIONS_TABLES_MAX * OPTIONS__KEYS_MAX + 2];
    size_t n = 0;
    if (nt > OPTIONS_TABLES_MAX) {
        fprintf(stderr, "%s: %zu option tables, at most %d\n", component, nt, OPTIONS_TABLES_MAX);
        exit(2);
    }
    for (size_t i = 0; i < nt; i++)
        for (const options_key *k = t[i].keys; k->name; k++) {
            size_t ki = (size_t)(k - t[i].keys);
            if (ki >= OPTIONS__KEYS_MAX) {
                fprintf(stderr, "%s: option table %zu has more than %d keys\n", component, i,
                        OPTIONS__KEYS_MAX);
                exit(2);
            }
            lo[n++] = (struct option){k->name, k->kind == OPTIONS_FLAG ? no_argument : required_argument,
                                      NULL, (int)(i * OPTIONS__KEYS_MAX + ki)};
        }
    lo[n++] = (struct option){"help", no_argument, NULL, OPTIONS__HELP};
    lo[n] = (struct option){NULL, 0, NULL, 0};
    memset(given, 0, sizeof(*given));
    int c;
    opterr = 0;
    optind = 1;
    while ((c = getopt_long(argc, argv, "", lo, NULL)) != -1) {
        if (c == OPTIONS__HELP) {
            usage(stdout, usage_arg);
            exit(0);
        }
        if (c == '?' || c == ':' || c < 0) {
            fprintf(stderr, "%s: unknown or incomplete option \"%s\" (see --help)\n", component,
                    argv[optind - 1]);
            exit(2);
        }
        size_t ti = (size_t)c / OPTIONS__KEYS_MAX, ki = (size_t)c % OPTIONS__KEYS_MAX;
        const options_key *k = &t[ti].keys[ki];
        char where[80];
        snprintf(where, sizeof(where), "--%s", k->name);
        if (options_apply(&t[ti], k, k->kind == OPTIONS_FLAG ? "true" : optarg, where) < 0)
            exit(2);
        options__mark(given, ti, ki);
    }
    return optind;
}

int options_load_file(const options_table *t, size_t nt, const char *path, const char *component,
                      const options_given *given)
{
    char err[512];
    toml_value *root = toml_parse_file(path, err, sizeof(err));
    if (!root) {
        fprintf(stderr, "%s\n", err);
        return -1;
    }
    int rc = 0;
    for (size_t i = 0; i < toml_table_len(root) && rc == 0; i++) {
        const char *key = toml_table_key(root, i);
        const toml_value *v = toml_table_value(root, i);
        toml_pos kp = toml_table_key_pos(root, i);
        char name[64];
        snprintf(name, sizeof(name), "%s", key);
        for (char *p = name; *p; p++)
            if (*p == '_')
                *p = '-';
        size_t ti;
        const options_key *k = options_find(t, nt, name, &ti);
        if (!k || strcmp(name, "config") == 0) {
            toml_errorf(err, sizeof(err), path, kp, "unknown key \"%s\" for %s", key, component);
            fprintf(stderr, "%s\n", err);
            rc = -1;
            break;
        }
        if (options_was_given(given, t, ti, k))
            continue;
        char val[PATH_MAX];
        if (toml_type_of(v) == TOML_STRING)
            snprintf(val, sizeof(val), "%s", toml_string(v));
        else if (toml_type_of(v) == TOML_INTEGER)
            snprintf(val, sizeof(val), "%lld", (long long)toml_int(v));
        else if (toml_type_of(v) == TOML_BOOL)
            snprintf(val, sizeof(val), "%s", toml_bool(v) ? "true" : "false");
        else {
            toml_errorf(err, sizeof(err), path, toml_pos_of(v),
                        "%s: expected a string, an integer or a boolean", key);
            fprintf(stderr, "%s\n", err);
            rc = -1;
            break;
        }
        char where[PATH_MAX + 80];
        toml_pos vp = toml_pos_of(v);
        snprintf(where, sizeof(where), "%s:%d:%d: %s", path, vp.line, vp.col, key);
        if (options_apply(&t[ti], k, val, where) < 0)
            rc = -1;
    }
    toml_free(root);
    return rc;
}

void options_usage(FILE *f, const options_table *t)
{
    for (const options_key *k = t->keys; k->name; k++) {
        char head[96];
        snprintf(head, sizeof(head), "  --%s%s%s", k->name, k->arg ? " " : "", k->arg ? k->arg : "");
        if (strlen(head) <= 25)
            fprintf(f, "%-27s", head);
        else
            fprintf(f, "%s  ", head);
        for (const char *p = k->help; *p; p++) {
            fputc(*p, f);
            if (*p == '\n' && p[1])
                fprintf(f, "%27s", "");
        }
        if (!*k->help || k->help[strlen(k->help) - 1] != '\n')
            fputc('\n', f);
    }
}
