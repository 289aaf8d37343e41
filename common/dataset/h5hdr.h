/* The superblock of an HDF5 file read by hand (the HDF5 File Format
 * Specification, versions 0 to 3), without libhdf5: enough for the
 * planner to know a file is HDF5 and whole. What it holds (datasets,
 * their shapes and types) is libhdf5's to read (ds_skm_read.c). */
#pragma once

#include <stddef.h>
#include <stdint.h>

typedef struct h5hdr {
    uint64_t file_size;       /* bytes of the file */
    uint64_t sig_offset;      /* where the signature is: 0, or a user block's 512, 1024, ... */
    unsigned version;         /* of the superblock: 0 to 3 */
    unsigned offset_size;     /* bytes of a file address: 2, 4 or 8 */
    uint64_t base;            /* the base address: addresses are from here */
    uint64_t eof;             /* the end-of-file address (from base); UINT64_MAX: undefined */
} h5hdr;

/* Reads path's superblock into *h: looks for the signature at 0, 512,
 * 1024, 2048, ... as libhdf5 does, and checks that the file is as long as
 * its end-of-file address says (a truncated copy is not). Returns 0, or a
 * negative code with a message naming path: -ENOENT and the like when it
 * cannot be opened, -EINVAL when it is not an HDF5 file (no signature), of
 * a superblock version or address size libhdf5 does not write, or
 * truncated. Thread-safe. */
int h5hdr_read(const char *path, h5hdr *h, char *err, size_t errlen);
