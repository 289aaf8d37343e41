/* The scratch directory of the file-reading fuzz targets. */
#include "scratch.h"

#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fuzz.h"

static char scratch_dir[PATH_MAX];
/* Paths written, to remove at exit (a target writes a handful). */
static char *scratch_files[16];
static size_t scratch_nfiles;
static char *scratch_dirs[8];
static size_t scratch_ndirs;

static void scratch_cleanup(void)
{
    for (size_t i = 0; i < scratch_nfiles; i++) {
        unlink(scratch_files[i]);
        free(scratch_files[i]);
    }
    for (size_t i = scratch_ndirs; i-- > 0;) {
        rmdir(scratch_dirs[i]);
        free(scratch_dirs[i]);
    }
    rmdir(scratch_dir);
}

const char *fuzz_scratch_dir(void)
{
    if (!scratch_dir[0]) {
        const char *tmp = getenv("TMPDIR");
        snprintf(scratch_dir, sizeof(scratch_dir), "%s/appliance-fuzz-XXXXXX",
                 tmp && tmp[0] ? tmp : "/tmp");
        FUZZ_ASSERT(mkdtemp(scratch_dir) != NULL);
        atexit(scratch_cleanup);
    }
    return scratch_dir;
}

static void scratch_remember(char **list, size_t *n, size_t cap, const char *path)
{
    for (size_t i = 0; i < *n; i++)
        if (strcmp(list[i], path) == 0)
            return;
    FUZZ_ASSERT(*n < cap);
    list[*n] = strdup(path);
    FUZZ_ASSERT(list[*n] != NULL);
    (*n)++;
}

void fuzz_scratch_write(const char *name, const uint8_t *data, size_t len)
{
    char path[2 * PATH_MAX];
    int pn = snprintf(path, sizeof(path), "%s/%s", fuzz_scratch_dir(), name);
    FUZZ_ASSERT(pn > 0 && (size_t)pn < sizeof(path));
    for (char *s = path + strlen(scratch_dir) + 1; (s = strchr(s, '/')) != NULL; s++) {
        *s = '\0';
        if (mkdir(path, 0700) == 0)
            scratch_remember(scratch_dirs, &scratch_ndirs, 8, path);
        *s = '/';
    }
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    FUZZ_ASSERT(fd >= 0);
    scratch_remember(scratch_files, &scratch_nfiles, 16, path);
    size_t done = 0;
    while (done < len) {
        ssize_t n = write(fd, data + done, len - done);
        FUZZ_ASSERT(n > 0);
        done += (size_t)n;
    }
    FUZZ_ASSERT(close(fd) == 0);
}
