/* Fuzz target: the safetensors reader (common/safetensors.c), which reads
 * checkpoints to resume from. The input is the file; it is handed to
 * st_open through an in-memory file, and whatever opens is read through
 * every accessor: each byte of each tensor, each name and metadata key
 * looked up again. */
#include <errno.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "safetensors.h"

/* An in-memory file that lives as long as the process, rewritten per input. */
static int fuzz_fd = -1;
static char fuzz_path[64];

static void fuzz_file(const uint8_t *data, size_t size)
{
    if (fuzz_fd < 0) {
        fuzz_fd = memfd_create("fuzz.safetensors", MFD_CLOEXEC);
        FUZZ_ASSERT(fuzz_fd >= 0);
        snprintf(fuzz_path, sizeof(fuzz_path), "/proc/self/fd/%d", fuzz_fd);
    }
    FUZZ_ASSERT(ftruncate(fuzz_fd, 0) == 0);
    size_t done = 0;
    while (done < size) {
        ssize_t n = pwrite(fuzz_fd, data + done, size - done, (off_t)done);
        FUZZ_ASSERT(n > 0);
        done += (size_t)n;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_file(data, size);
    char err[512];
    st_file *f = st_open(fuzz_path, err, sizeof(err));
    if (!f) {
        FUZZ_ASSERT(memchr(err, '\0', sizeof(err)) != NULL);
        FUZZ_ASSERT(strncmp(err, fuzz_path, strlen(fuzz_path)) == 0);
        return 0;
    }
    volatile uint8_t sum = 0;
    size_t first_bytes;
    const uint8_t *base = st_count(f) ? st_data_raw(f, 0, &first_bytes) : NULL;
    uint64_t prev_end = 0;
    for (size_t i = 0; i < st_count(f); i++) {
        const char *name = st_name(f, i);
        FUZZ_ASSERT(name != NULL);
        FUZZ_ASSERT(st_find(f, name) == (long)i);
        FUZZ_ASSERT(st_dtype_name(st_type(f, i)) != NULL);
        int ndim = -1;
        const int64_t *dims = st_dims(f, i, &ndim);
        FUZZ_ASSERT(ndim >= 0);
        size_t numel = 1;
        for (int d = 0; d < ndim; d++) {
            FUZZ_ASSERT(dims[d] >= 0);
            numel *= (size_t)dims[d];
        }
        FUZZ_ASSERT(numel == st_numel(f, i));
        size_t nbytes = 0;
        const uint8_t *raw = st_data_raw(f, i, &nbytes);
        FUZZ_ASSERT(nbytes == numel * st_dtype_size(st_type(f, i)));
        for (size_t k = 0; k < nbytes; k++)
            sum ^= raw[k];
        const float *x = st_data(f, i);
        if (x)
            for (size_t k = 0; k < numel; k++)
                sum ^= (uint8_t)(x[k] > 0);
        /* Tensors come in offset order and do not overlap. */
        uint64_t off = (uint64_t)(raw - base);
        FUZZ_ASSERT(off >= prev_end);
        prev_end = off + nbytes;
    }
    for (size_t i = 0; i < st_meta_count(f); i++) {
        const char *k = st_meta_key(f, i), *v = st_meta_value(f, i);
        FUZZ_ASSERT(k && v);
        FUZZ_ASSERT(st_meta(f, k) == v);
    }
    (void)sum;
    st_close(f);
    return 0;
}
