/* File system helpers. */
#include "fsutil.h"

#include <errno.h>
#include <stdbool.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

int fsutil_mkdir_p(const char *path)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);
    if (n == 0 || n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, 0755) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, 0755) < 0 && errno != EEXIST)
        return -errno;
    struct stat st;
    if (stat(buf, &st) < 0)
        return -errno;
    return S_ISDIR(st.st_mode) ? 0 : -ENOTDIR;
}

int fsutil_sync_dir(const char *path)
{
    char dir[PATH_MAX];
    size_t n = strlen(path);
    if (n >= sizeof(dir))
        return -ENAMETOOLONG;
    memcpy(dir, path, n + 1);
    char *slash = strrchr(dir, '/');
    if (slash == dir)
        dir[1] = 0; /* a file in / */
    else if (slash)
        *slash = 0;
    else
        memcpy(dir, ".", 2);
    int fd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    int rc = fsync(fd) < 0 ? -errno : 0;
    close(fd);
    return rc;
}

/* n bytes at offset, read into buf or written from it, in calls of at
 * most 1 GiB: short transfers go on (a short write, then the error: a full
 * disk); 0 bytes moved is -EIO. */
static int fsutil__pio_all(int fd, uint8_t *buf, size_t n, uint64_t offset, bool out)
{
    while (n) {
        size_t len = n > (1u << 30) ? (1u << 30) : n;
        ssize_t k = out ? pwrite(fd, buf, len, (off_t)offset) : pread(fd, buf, len, (off_t)offset);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        buf += k;
        offset += (uint64_t)k;
        n -= (size_t)k;
    }
    return 0;
}

int fsutil_pread_all(int fd, void *buf, size_t n, uint64_t offset)
{
    return fsutil__pio_all(fd, buf, n, offset, false);
}

int fsutil_pwrite_all(int fd, const void *buf, size_t n, uint64_t offset)
{
    return fsutil__pio_all(fd, (uint8_t *)buf, n, offset, true);
}
