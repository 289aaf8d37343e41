/* Replays inputs through a fuzz target without libFuzzer, so that every
 * input ever kept in the corpus is checked by every build: each argument is
 * a file, or a directory whose regular files are replayed in name order. A
 * crash, an abort or a sanitizer report ends the process, which fails the
 * test; so does an argument that holds no input. */
#include <dirent.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fuzz.h"

/* Reads a whole file; NULL (with errno) on failure. */
static uint8_t *replay__read(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    if (!f)
        return NULL;
    uint8_t *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            cap = cap ? 2 * cap : 4096;
            uint8_t *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                errno = ENOMEM;
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n, f);
        n += got;
        if (got == 0)
            break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        errno = EIO;
        return NULL;
    }
    *len = n;
    return buf;
}

static int replay__file(const char *path)
{
    size_t len = 0;
    uint8_t *buf = replay__read(path, &len);
    if (!buf) {
        fprintf(stderr, "replay: %s: %s\n", path, strerror(errno));
        return -1;
    }
    /* A copy of exactly len bytes, so that ASan sees a read past the end. */
    uint8_t *input = malloc(len ? len : 1);
    if (!input) {
        free(buf);
        fprintf(stderr, "replay: %s: out of memory\n", path);
        return -1;
    }
    memcpy(input, buf, len);
    free(buf);
    fprintf(stderr, "replay: %s (%zu bytes)\n", path, len);
    LLVMFuzzerTestOneInput(input, len);
    free(input);
    return 0;
}

static int replay__cmp(const struct dirent **a, const struct dirent **b)
{
    return strcmp((*a)->d_name, (*b)->d_name);
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: %s FILE|DIR...\n", argv[0]);
        return 2;
    }
    size_t done = 0;
    for (int i = 1; i < argc; i++) {
        struct stat st;
        if (stat(argv[i], &st) < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        if (!S_ISDIR(st.st_mode)) {
            if (replay__file(argv[i]) < 0)
                return 1;
            done++;
            continue;
        }
        struct dirent **names;
        int n = scandir(argv[i], &names, NULL, replay__cmp);
        if (n < 0) {
            fprintf(stderr, "replay: %s: %s\n", argv[i], strerror(errno));
            return 1;
        }
        int rc = 0;
        size_t here = 0;
        for (int k = 0; k < n; k++) {
            char path[4096];
            int pn = snprintf(path, sizeof(path), "%s/%s", argv[i], names[k]->d_name);
            struct stat fs;
            if (rc == 0 && names[k]->d_name[0] != '.' && pn > 0 && (size_t)pn < sizeof(path) &&
                stat(path, &fs) == 0 && S_ISREG(fs.st_mode)) {
                if (replay__file(path) < 0)
                    rc = 1;
                here++;
            }
            free(names[k]);
        }
        free(names);
        if (rc)
            return rc;
        if (here == 0) {
            fprintf(stderr, "replay: %s holds no input\n", argv[i]);
            return 1;
        }
        done += here;
    }
    printf("replayed %zu input(s) without a crash\n", done);
    return 0;
}
