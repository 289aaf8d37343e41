/* safetensors checkpoints: an 8-byte little-endian header length, a JSON
 * header naming each tensor's dtype, shape and byte range, then the raw
 * little-endian tensor bytes. Files written here load in numpy and PyTorch. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* Largest header a reader accepts (and a writer produces). */
#define ST_MAX_HEADER (100u * 1000u * 1000u)
/* Largest rank of a tensor. */
#define ST_MAX_DIMS 16

typedef enum st_dtype {
    ST_F32 = 0,
    ST_F64,
    ST_F16,
    ST_BF16,
    ST_I64,
    ST_I32,
    ST_I16,
    ST_I8,
    ST_U8,
    ST_BOOL,
    ST_DTYPE_COUNT,
} st_dtype;

/* "F32", "I64", ...; NULL for an out-of-range value. */
const char *st_dtype_name(st_dtype t);
/* Bytes per element; 0 for an out-of-range value. */
size_t st_dtype_size(st_dtype t);

/* ---- Writing ---- */

typedef struct st_writer st_writer;

/* Returns an empty writer, or NULL when out of memory. */
st_writer *st_writer_new(void);
void st_writer_free(st_writer *w);

/* Adds a tensor of ndim dims (copied) whose count elements are at data.
 * The name is copied; data is borrowed and must stay valid until
 * st_writer_write returns (data may be NULL for a writer that only lays
 * out a header: st_writer_header; st_writer_write then fails). Tensors are laid out in the order added.
 * Returns 0, -EINVAL (bad name or rank, count not the product of dims,
 * duplicate name, unknown dtype) or -ENOMEM. */
int st_writer_add(st_writer *w, const char *name, st_dtype dtype, const int64_t *dims,
                  int ndim, const void *data, size_t count);
/* st_writer_add for float32 data. */
int st_writer_add_f32(st_writer *w, const char *name, const int64_t *dims, int ndim,
                      const float *data, size_t count);
/* Makes elements [first, first + count) of a tensor added with
 * st_writer_add_fill into out (count elements of its dtype), as the file
 * is written. */
typedef void (*st_fill_fn)(void *ctx, uint64_t tag, size_t first, size_t count, void *out);

/* st_writer_add for data made as it is written, a piece at a time, by
 * fill(ctx, tag, ...) (ctx borrowed as data is): a tensor held in another
 * form (memoryx's compact tensors) is written in its dense form without
 * making it whole in memory. */
int st_writer_add_fill(st_writer *w, const char *name, st_dtype dtype, const int64_t *dims,
                       int ndim, size_t count, st_fill_fn fill, void *ctx, uint64_t tag);
/* Adds a "__metadata__" entry (both strings copied). Returns 0, -EINVAL for a
 * duplicate key or -ENOMEM. */
int st_writer_meta(st_writer *w, const char *key, const char *value);

/* The file's first bytes, the 8-byte length and the header, padded with
 * spaces to exactly total bytes (a multiple of 8), into out (total bytes):
 * the tensors' data follows at offset total, in the order added, with no
 * gaps. A file laid out this way can be written in place and its header
 * rewritten (new metadata) without moving the data. *need gets the
 * smallest total. Returns 0, -ENOSPC when total is too small (or not a
 * multiple of 8), -ENOMEM. */
int st_writer_header(const st_writer *w, size_t total, uint8_t *out, size_t *need);

/* Writes the file to "path.tmp-<pid>", fsyncs it, renames it to path and
 * fsyncs the directory, so path holds either the old file or the complete
 * new one. Returns 0 or a negative errno; on failure err says why and no
 * temporary file is left. The writer can be written again or freed. */
int st_writer_write(st_writer *w, const char *path, char *err, size_t errlen);

/* ---- Reading ---- */

typedef struct st_file st_file;

/* Reads and validates the whole file: header length within the file and
 * under ST_MAX_HEADER, strict JSON, known dtypes, sizes matching shapes,
 * offsets within the data section, contiguous and non-overlapping, unique
 * names, string metadata. Returns the file (free with st_close), or NULL
 * with err naming the file and the problem. */
st_file *st_open(const char *path, char *err, size_t errlen);
void st_close(st_file *f);

/* Like st_open, but reads and validates the header only and keeps the file
 * open: the data is read with st_read (or from st_fd at st_file_offset),
 * and st_data / st_data_raw give NULL. For files larger than memory. */
st_file *st_open_header(const char *path, char *err, size_t errlen);
/* The open file of st_open_header, or -1. */
int st_fd(const st_file *f);
/* Where tensor i's bytes start in the file. */
uint64_t st_file_offset(const st_file *f, size_t i);
/* Copies nbytes of tensor i's bytes from byte offset into dst, from memory
 * or the file. Returns 0, -EINVAL for a range outside the tensor, or a
 * negative errno (-EIO: the file is shorter than its header says). */
int st_read(const st_file *f, size_t i, uint64_t offset, void *dst, size_t nbytes);

/* Number of tensors; they are indexed 0..count-1 in file (offset) order. */
size_t st_count(const st_file *f);
const char *st_name(const st_file *f, size_t i);
st_dtype st_type(const st_file *f, size_t i);
/* The shape; *ndim receives the rank (0 for a scalar). */
const int64_t *st_dims(const st_file *f, size_t i, int *ndim);
/* Number of elements (the product of the dims). */
size_t st_numel(const st_file *f, size_t i);
/* The tensor's elements, owned by f; NULL unless the dtype is F32. */
const float *st_data(const st_file *f, size_t i);
/* The tensor's bytes whatever the dtype, owned by f; *nbytes gets the length. */
const void *st_data_raw(const st_file *f, size_t i, size_t *nbytes);
/* Index of the tensor called name, or -1. */
long st_find(const st_file *f, const char *name);

/* The "__metadata__" value for key (owned by f), or NULL. */
const char *st_meta(const st_file *f, const char *key);
size_t st_meta_count(const st_file *f);
/* The i-th metadata pair in file order. */
const char *st_meta_key(const st_file *f, size_t i);
const char *st_meta_value(const st_file *f, size_t i);
