/* Options of a daemon as tables: each module names the options it owns (a
 * long option, its configuration key, its type, its bounds, its line of
 * --help) and where each value goes in its own struct, as nginx's modules
 * own their directives. The daemon frame parses the command line and the
 * --config file against its own table and the role's, and knows no role's
 * fields. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

typedef enum options_kind {
    OPTIONS_STRING,    /* char[size]: copied; longer is an error */
    OPTIONS_FLAG,      /* bool: no argument on the command line, true/false in a file */
    OPTIONS_SIZE,      /* uint64_t: bytes with an optional K, M, G or T suffix, in [min, max] */
    OPTIONS_U32,       /* uint32_t: a positive integer in [min, max] */
    OPTIONS_U64,       /* uint64_t: a positive integer in [min, max] */
    OPTIONS_LOG_LEVEL, /* int: debug, info, warn or error (log.h) */
} options_kind;

typedef struct options_key {
    const char *name;  /* long option without "--"; its configuration key has '_' for '-' */
    const char *arg;   /* the argument's name in --help ("SIZE"); NULL for a flag */
    options_kind kind;
    size_t offset;     /* of the value in the table's struct (offsetof) */
    size_t size;       /* bytes of a string's buffer */
    uint64_t min, max; /* bounds of a number (both 0: from 1 up to the type's largest) */
    const char *help;  /* --help text; '\n' continues it on the next line */
} options_key;

/* A table: keys up to one with a NULL name, and the struct they fill. */
typedef struct options_table {
    const char *title;        /* heading in --help ("wse-node options"), or NULL */
    const options_key *keys;
    void *base;               /* the struct the keys' offsets point into */
} options_table;

#define OPTIONS_TABLES_MAX 4 /* tables one parse takes */

/* Where a key came from, for the rule that the command line wins over a
 * file. One bit per key of each table. */
typedef struct options_given {
    uint64_t bits[OPTIONS_TABLES_MAX];
} options_given;

/* The key of the tables named name (a long option without "--"), with its
 * table's index in *table; NULL when no table has it. */
const options_key *options_find(const options_table *t, size_t nt, const char *name, size_t *table);

/* Parses val for key k into its table's struct. where names the origin in
 * messages ("--threads", "node.toml:3:11: threads"). Returns 0, or -EINVAL
 * after printing why to stderr. */
int options_apply(const options_table *t, const options_key *k, const char *val, const char *where);

/* Parses argv against the tables (getopt_long, every key a long option;
 * --help prints usage and exits 0; anything else unknown exits 2 with a
 * message naming the option and component). Marks what it set in *given.
 * Returns the index of the first argument that is not an option. */
int options_parse_argv(const options_table *t, size_t nt, int argc, char **argv,
                       const char *component, void (*usage)(FILE *f, void *arg), void *usage_arg,
                       options_given *given);

/* Applies a TOML configuration file: every key must be a key of one of the
 * tables ("file:line:col: unknown key \"k\" for COMPONENT"); keys already in
 * *given (the command line's) are skipped. Returns 0, or -1 after printing
 * why to stderr. */
int options_load_file(const options_table *t, size_t nt, const char *path, const char *component,
                      const options_given *given);

/* Writes the --help lines of a table's keys. */
void options_usage(FILE *f, const options_table *t);

/* Whether key k of table `table` was given. */
bool options_was_given(const options_given *g, const options_table *t, size_t table,
                       const options_key *k);
