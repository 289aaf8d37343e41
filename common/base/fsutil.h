/* File system helpers. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Creates path and its missing parents with mode 0755 (like mkdir -p).
 * Returns 0 or a negative errno. */
int fsutil_mkdir_p(const char *path);

/* fsyncs the directory holding path, so that a rename into it is durable.
 * Returns 0 or a negative errno. */
int fsutil_sync_dir(const char *path);

/* Reads (writes) exactly n bytes at offset, across short transfers and
 * EINTR. Returns 0, a negative errno, or -EIO when the file ends first
 * (or a write makes no progress). */
int fsutil_pread_all(int fd, void *buf, size_t n, uint64_t offset);
int fsutil_pwrite_all(int fd, const void *buf, size_t n, uint64_t offset);
