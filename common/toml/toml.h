/* TOML 1.0 parser for job files and daemon configuration.
 * Builds a read-only tree of values; date-times are recognised and refused.
 * Errors read "NAME:LINE:COLUMN: message", columns counting characters. */
#pragma once

#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Deepest nesting of tables and arrays a document may have (the root is 0). */
#define TOML_MAX_DEPTH 256

typedef enum {
    TOML_TABLE,
    TOML_ARRAY,
    TOML_STRING,
    TOML_INTEGER,
    TOML_FLOAT,
    TOML_BOOL,
} toml_type;

typedef struct toml_value toml_value;

/* A place in the source text, both 1-based; the column counts characters. */
typedef struct {
    int line; /* 1 for the first line */
    int col;  /* 1 for the first character of the line */
} toml_pos;

/* Parses len bytes of UTF-8 text (a leading BOM is skipped; the text need
 * not be NUL-terminated). name is used in error messages and kept (copied)
 * for toml_source_name. Returns the root table, owned by the caller and
 * released with toml_free, or NULL after writing "name:line:col: message"
 * into err (always NUL-terminated when errlen > 0). */
toml_value *toml_parse(const char *text, size_t len, const char *name,
                       char *err, size_t errlen);
/* Reads and parses the file at path, which also names it in messages.
 * Errors of the file itself read "path: cannot open: No such file or directory". */
toml_value *toml_parse_file(const char *path, char *err, size_t errlen);
/* A parser of a document's text (toml_parse, yaml_parse). */
typedef toml_value *(*toml_parse_fn)(const char *text, size_t len, const char *name, char *err,
                                     size_t errlen);
/* Reads the file at path and parses it with parse, the path naming it in
 * messages ("path: cannot open: ..." for the file itself). */
toml_value *toml_read_file(const char *path, toml_parse_fn parse, char *err, size_t errlen);
/* Releases a tree returned by toml_parse or toml_parse_file; only the root
 * may be passed. NULL is fine. */
void toml_free(toml_value *root);

toml_type toml_type_of(const toml_value *v);
/* "table", "array", "string", "integer", "float" or "boolean", for messages. */
const char *toml_type_name(toml_type t);
/* Where v starts: the first character of a value, the '[' of the header that
 * defined a table, or the key that created a table implicitly. */
toml_pos toml_pos_of(const toml_value *v);
/* The name given to the parser; owned by the tree. */
const char *toml_source_name(const toml_value *v);

/* Tables: keys in definition order. Keys are UTF-8, NUL-terminated, and may
 * contain NUL (from "\u0000"), hence toml_table_key_len. Returned pointers
 * belong to the tree. Indexes must be below toml_table_len. */
size_t toml_table_len(const toml_value *t);
const char *toml_table_key(const toml_value *t, size_t i);
size_t toml_table_key_len(const toml_value *t, size_t i);
/* Where the key was written (for a table from a header: its part in the
 * header that defined it). */
toml_pos toml_table_key_pos(const toml_value *t, size_t i);
const toml_value *toml_table_value(const toml_value *t, size_t i);
/* The value of key in t, or NULL if absent. Constant time on average. */
const toml_value *toml_table_get(const toml_value *t, const char *key);
const toml_value *toml_table_getn(const toml_value *t, const char *key, size_t keylen);
/* Index of key in t, or -1 if absent. */
long toml_table_find(const toml_value *t, const char *key);

/* Arrays may mix types. Returned pointers belong to the tree. */
size_t toml_array_len(const toml_value *a);
const toml_value *toml_array_at(const toml_value *a, size_t i);

/* Scalars; calling one on a value of another type is a programming error.
 * Strings are NUL-terminated but may contain NUL, hence toml_string_len. */
const char *toml_string(const toml_value *v);
size_t toml_string_len(const toml_value *v);
int64_t toml_int(const toml_value *v);
double toml_float(const toml_value *v);
bool toml_bool(const toml_value *v);

/* Writes "source:line:col: " followed by the formatted message into err, the
 * shape every consumer of a parsed document uses to report a bad value.
 * Returns -EINVAL, so that a check can end with `return toml_errorf(...)`. */
int toml_errorf(char *err, size_t errlen, const char *source, toml_pos pos,
                const char *fmt, ...) __attribute__((format(printf, 5, 6)));
int toml_verrorf(char *err, size_t errlen, const char *source, toml_pos pos,
                 const char *fmt, va_list ap) __attribute__((format(printf, 5, 0)));

/* ---- Building a document ----
 * For readers of other syntaxes (YAML) and for what expands a document (a
 * model template's layers): values made for a root carry its source name
 * and the positions given, so that messages about them name the place in
 * the file they came from. A value belongs to the caller until it is put
 * into a table or array. */

/* An empty document named source (copied). NULL when out of memory. */
toml_value *toml_new_root(const char *source);
toml_value *toml_new_table(const toml_value *root, toml_pos pos);
toml_value *toml_new_array(const toml_value *root, toml_pos pos);
toml_value *toml_new_string(const toml_value *root, toml_pos pos, const char *s, size_t len);
toml_value *toml_new_int(const toml_value *root, toml_pos pos, int64_t i);
toml_value *toml_new_float(const toml_value *root, toml_pos pos, double f);
toml_value *toml_new_bool(const toml_value *root, toml_pos pos, bool b);
/* Adds key -> v to table t, taking v. Returns 0, -EEXIST when t has the key
 * (v stays the caller's), or -ENOMEM. */
int toml_table_set(toml_value *t, const char *key, size_t keylen, toml_pos keypos, toml_value *v);
/* Removes key from t and returns its value (the caller's now), or NULL. */
toml_value *toml_table_take(toml_value *t, const char *key);
/* Appends v to array a, taking it. Returns 0 or -ENOMEM. */
int toml_array_push(toml_value *a, toml_value *v);
/* A deep copy of v (positions kept) for root's document. NULL when out of
 * memory. */
toml_value *toml_clone(const toml_value *root, const toml_value *v);
/* Frees a value that is in no document (toml_free frees a root). */
void toml_value_free(toml_value *v);
