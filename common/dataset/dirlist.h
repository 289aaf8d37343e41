/* Sorted listings of a directory's files or subdirectories, as the
 * directory-based readers take them (Python's sorted(os.listdir), in byte
 * order). */
#pragma once

#include <stdbool.h>
#include <stddef.h>

typedef struct dirlist {
    char **names;             /* sorted by strcmp; owned */
    size_t count;
} dirlist;

enum dirlist_kind { DIRLIST_FILES, DIRLIST_DIRS };

/* Lists dir's regular files (or subdirectories) whose names end in
 * `suffix` (compared without case; "" takes all), leaving out hidden names
 * (a leading '.'). Returns 0 with *out filled (dirlist_deinit), or a
 * negative code with a message naming dir. */
int dirlist_read(dirlist *out, const char *dir, enum dirlist_kind kind, const char *suffix,
                 char *err, size_t errlen);
void dirlist_deinit(dirlist *l);

/* Whether name is in the listing. */
bool dirlist_has(const dirlist *l, const char *name);
