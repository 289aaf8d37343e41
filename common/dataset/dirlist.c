/* Sorted directory listings for the readers of image directories. */
#include "dirlist.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

static int dirlist__cmp(const void *a, const void *b)
{
    return strcmp(*(char *const *)a, *(char *const *)b);
}

void dirlist_deinit(dirlist *l)
{
    for (size_t i = 0; i < l->count; i++)
        free(l->names[i]);
    free(l->names);
    l->names = NULL;
    l->count = 0;
}

int dirlist_read(dirlist *out, const char *dir, enum dirlist_kind kind, const char *suffix,
                 char *err, size_t errlen)
{
    out->names = NULL;
    out->count = 0;
    DIR *dh = opendir(dir);
    if (!dh) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open the directory: %s", dir, strerror(e));
        return -e;
    }
    size_t cap = 0, slen = strlen(suffix);
    int rc = 0;
    struct dirent *de;
    while ((de = readdir(dh)) != NULL) {
        size_t len = strlen(de->d_name);
        if (de->d_name[0] == '.' || len <= slen || strcasecmp(de->d_name + len - slen, suffix) != 0)
            continue;
        char path[PATH_MAX];
        struct stat st;
        int pn = snprintf(path, sizeof(path), "%s/%s", dir, de->d_name);
        if (pn < 0 || (size_t)pn >= sizeof(path) || stat(path, &st) < 0 ||
            !(kind == DIRLIST_DIRS ? S_ISDIR(st.st_mode) : S_ISREG(st.st_mode)))
            continue;
        if (out->count == cap) {
            size_t ncap = cap ? 2 * cap : 64;
            char **nn = realloc(out->names, ncap * sizeof(*nn));
            if (!nn) {
                rc = -ENOMEM;
                break;
            }
            out->names = nn;
            cap = ncap;
        }
        if (!(out->names[out->count] = strdup(de->d_name))) {
            rc = -ENOMEM;
            break;
        }
        out->count++;
    }
    closedir(dh);
    if (rc < 0) {
        snprintf(err, errlen, "%s: out of memory listing the directory", dir);
        dirlist_deinit(out);
        return rc;
    }
    if (out->count > 1)
        qsort(out->names, out->count, sizeof(*out->names), dirlist__cmp);
    return 0;
}

bool dirlist_has(const dirlist *l, const char *name)
{
    return l->count && bsearch(&name, l->names, l->count, sizeof(*l->names), dirlist__cmp) != NULL;
}
