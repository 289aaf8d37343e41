/* A scratch directory for the targets whose code under test reads files by
 * name (the data set readers): created once per process under $TMPDIR (or
 * /tmp), emptied and removed at exit. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* The directory; created on the first call. */
const char *fuzz_scratch_dir(void);

/* Writes len bytes to the file at dir/name (subdirectories are made as
 * needed), replacing what was there. */
void fuzz_scratch_write(const char *name, const uint8_t *data, size_t len);
