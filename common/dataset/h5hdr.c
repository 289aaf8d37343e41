/* HDF5 superblocks read by hand (h5hdr.h). The layouts, from the HDF5 File
 * Format Specification: after the 8-byte signature, version 0 and 1 give
 * four version bytes, the sizes of offsets and lengths, the B-tree K
 * values and flags (version 1 four bytes more), then the base, free-space,
 * end-of-file and driver addresses; version 2 and 3 give the sizes, a
 * flags byte, then the base, extension, end-of-file and root addresses.
 * The end-of-file address is absolute (libhdf5 writes the file's size). */
#include "h5hdr.h"

#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fsutil.h"

static const uint8_t h5hdr__signature[8] = {0x89, 'H', 'D', 'F', '\r', '\n', 0x1a, '\n'};

/* A little-endian address of n bytes; all ones is "undefined". */
static uint64_t h5hdr__addr(const uint8_t *p, unsigned n)
{
    uint64_t v = 0;
    bool ones = true;
    for (unsigned i = 0; i < n; i++) {
        v |= (uint64_t)p[i] << (8 * i);
        ones = ones && p[i] == 0xff;
    }
    return ones ? UINT64_MAX : v;
}

/* Reads what is there of n bytes at off; returns the bytes read or -errno. */
static long h5hdr__pread(int fd, uint8_t *buf, size_t n, uint64_t off, uint64_t size)
{
    if (off >= size)
        return 0;
    if (n > size - off)
        n = (size_t)(size - off);
    int rc = fsutil_pread_all(fd, buf, n, off);
    return rc < 0 ? rc : (long)n;
}

int h5hdr_read(const char *path, h5hdr *h, char *err, size_t errlen)
{
    memset(h, 0, sizeof(*h));
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    struct stat st;
    if (fd < 0 || fstat(fd, &st) < 0) {
        int e = errno;
        snprintf(err, errlen, "%s: cannot open: %s", path, strerror(e));
        if (fd >= 0)
            close(fd);
        return -e;
    }
    int rc = -EINVAL;
    if (!S_ISREG(st.st_mode)) {
        snprintf(err, errlen, "%s: not a regular file", path);
        goto done;
    }
    h->file_size = (uint64_t)st.st_size;
    uint8_t b[64];
    long n = 0;
    bool found = false;
    for (uint64_t off = 0; off + sizeof(h5hdr__signature) <= h->file_size && !found;
         off = off ? 2 * off : 512) {
        if ((n = h5hdr__pread(fd, b, sizeof(b), off, h->file_size)) < 0) {
            rc = (int)n;
            snprintf(err, errlen, "%s: cannot read: %s", path, strerror((int)-n));
            goto done;
        }
        found = (size_t)n >= sizeof(h5hdr__signature) &&
                memcmp(b, h5hdr__signature, sizeof(h5hdr__signature)) == 0;
        h->sig_offset = off;
    }
    if (!found) {
        snprintf(err, errlen, "%s: not an HDF5 file: no HDF5 signature (at byte 0, 512, 1024, "
                 "...) in its %llu bytes", path, (unsigned long long)h->file_size);
        goto done;
    }
    h->version = n > 8 ? b[8] : 0;
    size_t at, need;
    if (n > 8 && h->version <= 1) {
        h->offset_size = n > 13 ? b[13] : 0;
        at = h->version == 0 ? 24 : 28;
    } else if (n > 8 && h->version <= 3) {
        h->offset_size = n > 9 ? b[9] : 0;
        at = 12;
    } else if (n > 8) {
        snprintf(err, errlen, "%s: HDF5 superblock version %u; libhdf5 writes 0 to 3", path,
                 h->version);
        goto done;
    } else
        at = 0;
    need = at + 3 * (size_t)h->offset_size;
    if (at == 0 || (size_t)n < 14 || (size_t)n < need) {
        snprintf(err, errlen, "%s: truncated HDF5 file: %llu bytes, cut inside its superblock",
                 path, (unsigned long long)h->file_size);
        goto done;
    }
    if (h->offset_size != 2 && h->offset_size != 4 && h->offset_size != 8) {
        snprintf(err, errlen, "%s: HDF5 superblock with %u-byte addresses; the reader takes 2, 4 "
                 "or 8", path, h->offset_size);
        goto done;
    }
    const unsigned o = h->offset_size;
    h->base = h5hdr__addr(b + at, o);
    /* v0/1: base, free space, end of file; v2/3: base, extension, end of file */
    h->eof = h5hdr__addr(b + at + 2 * o, o);
    if (h->eof != UINT64_MAX && h->file_size < h->eof) {
        snprintf(err, errlen, "%s: truncated HDF5 file: %llu bytes, its superblock says %llu",
                 path, (unsigned long long)h->file_size, (unsigned long long)h->eof);
        goto done;
    }
    rc = 0;
done:
    close(fd);
    return rc;
}
