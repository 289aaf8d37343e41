/* memoryx's disk tier. A shard whose weights, gradients and optimizer
 * state need more than memoryx's memory keeps them in three files under its
 * state directory, mapped but never read on the event loop:
 *
 *   tier-<job>-shard<k>-weights.safetensors    every tensor's weights
 *   tier-<job>-shard<k>-optimizer.safetensors  the optimizer state, "<tensor>.<state>"
 *   tier-<job>-shard<k>-gradients              this step's reduced gradients
 *
 * The first two are laid out as the shard's checkpoint files are (a header
 * with room for the checkpoint's metadata, then the tensors in order), so
 * a checkpoint is the file copied in the kernel (copy_file_range), or, the
 * last one, the file renamed into model_dir: the shard never passes through
 * memory twice. Space for all three is reserved when the job starts, so a
 * full disk is found then, not in the middle of a step.
 *
 * Memory stays within a window of RAM (memoryx's --memory): the weight
 * stream is read ahead into buffers in the thread pool (a cursor runs ahead
 * of the stream's), gradient chunks are written from buffers (both driven
 * from the loop: tierio.h), and the
 * thread pool's work (initialisation, the optimizer's update, loading)
 * goes through the mappings a piece at a time, each piece's pages started
 * on their way to the disk and dropped from memoryx's memory once done
 * (write-behind; the page cache keeps what it can). Nothing is fsynced but
 * checkpoints.
 *
 * What is here works on the tier's files and memory and calls nothing of
 * memoryx's modules: they call it. */
#pragma once

#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <uv.h>

#include "plan_stream.h"
#include "store.h"

enum { TIER_WEIGHTS, TIER_OPTIMIZER, TIER_GRADIENTS, TIER_FILES };

/* A weight chunk read ahead, waiting for its turn or being sent. */
typedef struct mx_rbuf {
    struct mx_rbuf *next;
    struct mx_tier *tier;
    mx_tensor *t;         /* valid while tier->job is */
    plan_chunk ch;
    uint64_t bytes;
    uint64_t sent_at;
    uint64_t read_ns;     /* how long its read took */
    float data[];
} mx_rbuf;

typedef struct mx_tier {
    mx_job *job;                  /* NULL once the job is freed */
    bool files;                   /* the shard is in the files; false: in memory, and only
                                     the read-ahead is used (rounding the stream to bfloat16
                                     off the event loop: tier_ahead) */
    unsigned refs;                /* the job, and each buffer a link still sends from */
    char path[TIER_FILES][PATH_MAX];
    int fd[TIER_FILES];
    uint8_t *map[TIER_FILES];
    uint64_t len[TIER_FILES];
    uint64_t head[2];             /* header bytes of the weights and optimizer files */
    bool moved[TIER_FILES];       /* renamed into model_dir by the last checkpoint */
    uint64_t window;              /* bytes of RAM it may use */
    uint64_t piece;               /* elements per piece of pool work */
    /* read-ahead, on the loop */
    plan_stream ra;               /* the next chunk to read */
    bool reading;                 /* a read is in the thread pool */
    uv_work_t ra_req;
    mx_rbuf *ra_buf;              /* that read's buffer */
    int ra_rc;
    mx_rbuf *ready, **ready_tail; /* read, in stream order */
    uint64_t ra_bytes, ra_limit;  /* read and not yet sent, and its bound */
    uint64_t g_bytes, g_limit;    /* gradient bytes not yet written, and their bound */
    uint64_t read_bytes;          /* bytes read so far */
    uint64_t read_ns;             /* time spent reading them */
    void *gbuf;                   /* the buffer the last gradient payload went to */
} mx_tier;

/* Whether j's tensors are in the disk tier's files. */
static inline bool tier_files(const mx_job *j)
{
    return j->tier && j->tier->files;
}

/* For a job whose tensors are in memory and whose stream goes out as
 * bfloat16: a tier without files whose read-ahead rounds the weights into
 * buffers in the thread pool, at most `window` bytes ahead. Returns 0 or
 * -ENOMEM. */
int tier_ahead(mx_job *j, uint64_t window);

/* The bytes a disk tier for j's tensors takes on disk. */
uint64_t tier_disk_bytes(const mx_job *j);

/* Removes the tier files a killed memoryx left in dir (any job's: a
 * memoryx holds one job at a time). Returns how many. */
int tier_clean(const char *dir);

/* In the thread pool: creates, reserves and maps the files of j's tier in
 * dir (window: bytes of RAM), and points every tensor's weights, optimizer
 * state and gradient into them. The optimizer state reads as zeros.
 * Returns 0, or a negative errno with err naming the file or the directory
 * and the numbers. */
int tier_open(mx_job *j, const char *dir, uint64_t window, unsigned threads, char *err,
              size_t errlen);

/* In the thread pool: the pages of [ptr, ptr + bytes) of the tier's
 * mappings are done with: their writing starts and they leave memoryx's
 * memory (a clean or dirty page stays in the page cache). */
void tier_done_with(mx_tier *tr, int file, const void *ptr, uint64_t bytes);

/* In the thread pool: the optimizer's update of tensor t, a piece at a
 * time (scale: the clipping factor). The step count advances once. */
void tier_update(mx_job *j, mx_tensor *t, float scale);

/* In the thread pool: the whole step's update with global-norm clipping,
 * the norm summed in the same order as optim_apply_step. */
void tier_update_step(mx_job *j);

/* In the thread pool: copies bytes from src_fd at src_off into file at
 * dst_off, in the kernel. Returns 0 or a negative errno. */
int tier_copy_in(mx_tier *tr, int file, uint64_t dst_off, int src_fd, uint64_t src_off,
                 uint64_t bytes);

/* In the thread pool: writes the checkpoint of `step` from the tier's
 * files (the optimizer file first); `last`: the job ends with it, so the
 * files may be renamed into place rather than copied. The weights file's
 * path goes to path. Returns 0 or a negative errno with err naming the file. */
int tier_checkpoint(mx_job *j, uint64_t step, bool last, char *path, size_t pathlen, char *err,
                    size_t errlen);

/* In the thread pool: unmaps, closes and removes the files (those renamed
 * into model_dir stay). */
void tier_close(mx_tier *tr);

/* On the loop: drops the job's reference; the tier goes with the last. */
void tier_put(mx_tier *tr);
