/* YAML job files: the Cerebras Model Zoo's params.yaml, read into the same
 * read-only tree of toml_value that toml_parse makes, so that everything
 * downstream reads either syntax. Errors read "NAME:LINE:COLUMN: message". */
#pragma once

#include <stddef.h>

#include "toml.h"

/* Most values a document may expand to, every copy an alias makes included:
 * a bound on the "billion laughs" (aliases of aliases of aliases ...). */
#define YAML_MAX_VALUES 1000000

/* Parses len bytes of UTF-8 YAML (one document; a leading BOM is skipped;
 * the text need not be NUL-terminated) into the tree toml_parse makes: the
 * top level must be a mapping (it becomes the root table), mappings become
 * tables, sequences arrays, and scalars are typed as PyYAML's safe loader
 * types them, plain scalars only (a quoted scalar is a string):
 *   - booleans: true/false/yes/no/on/off, each also Capitalized and UPPERCASE;
 *   - integers: decimal with an optional sign and '_' separators, 0x hex,
 *     0b binary, 0o and leading-0 octal, 1:30 sexagesimal; beyond 64 bits
 *     is an error;
 *   - floats: 1.5, -0.5, .5, 5.0e-4, 1.0E+3, .inf, -.inf, .nan (and their
 *     Capitalized and UPPERCASE forms); also 1e-4 and 1.0e5, which PyYAML
 *     leaves strings (see yaml.c);
 *   - null: ~, null, Null, NULL or nothing. A key whose value is null is
 *     left out of its table, as if it were not written, so that its default
 *     applies; a null in a sequence is an error;
 *   - dates and times are refused (PyYAML would make them datetimes).
 * Keys are the text of their scalar as written ("1: x" has the key "1").
 * Anchors and aliases (copied), and merge keys (<<: *a, <<: [*a, *b]) as
 * PyYAML merges them: keys written in the mapping win over merged ones,
 * earlier merged mappings over later ones. A merged key comes after the keys
 * written in the mapping, in the order of its mapping.
 * Refused, with the place: duplicate keys, tabs that indent, keys that are
 * not scalars, a second document, tags other than !!str, !!int, !!float,
 * !!bool, !!null, !!seq and !!map, more than YAML_MAX_VALUES values or
 * nesting deeper than TOML_MAX_DEPTH, and whatever libyaml refuses.
 * name is used in error messages and kept (copied) for toml_source_name.
 * Returns the root table, owned by the caller and released with toml_free,
 * or NULL after writing "name:line:col: message" into err (always
 * NUL-terminated when errlen > 0). */
toml_value *yaml_parse(const char *text, size_t len, const char *name, char *err, size_t errlen);
/* Reads and parses the file at path, which also names it in messages.
 * Errors of the file itself read "path: cannot open: No such file or directory". */
toml_value *yaml_parse_file(const char *path, char *err, size_t errlen);
