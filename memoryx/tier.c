/* memoryx's disk tier: files, mappings, pieces (tier.h). */
#include "tier.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "shardfile.h"
#include "fsutil.h"
#include "log.h"
#include "optim_plan.h"
#include "units.h"

#define TIER_PAGE 4096u
#define TIER_PREFIX "tier-"

static const char *const tier__suffix[TIER_FILES] = {
    "-weights.safetensors", "-optimizer.safetensors", "-gradients"};

static uint64_t tier__round(uint64_t v, uint64_t to)
{
    return (v + to - 1) / to * to;
}

/* The header bytes of the weights and optimizer files: room for the
 * longest metadata, a whole number of pages. */
static int tier__heads(const mx_job *j, uint64_t head[2])
{
    st_writer *ww = st_writer_new(), *ow = st_writer_new();
    int rc = ww && ow ? shardfile_layout(j, 0, true, false, ww, ow) : -ENOMEM;
    uint8_t probe[8];
    size_t need;
    for (int f = 0; f < 2 && rc == 0; f++) {
        rc = st_writer_header(f == TIER_WEIGHTS ? ww : ow, 8, probe, &need);
        if (rc == -ENOSPC)
            rc = 0;
        head[f] = tier__round(need, TIER_PAGE);
    }
    st_writer_free(ww);
    st_writer_free(ow);
    return rc;
}

/* Each tensor's place in the files, and the files' lengths. */
static void tier__place(mx_job *j, const uint64_t head[2], uint64_t len[TIER_FILES])
{
    len[TIER_WEIGHTS] = head[TIER_WEIGHTS];
    len[TIER_OPTIMIZER] = head[TIER_OPTIMIZER];
    len[TIER_GRADIENTS] = 0;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        uint64_t b = t->n * sizeof(float);
        t->w_at = len[TIER_WEIGHTS];
        len[TIER_WEIGHTS] += b;
        for (size_t s = 0; t->trainable && s < j->states; s++) {
            t->s_at[s] = len[TIER_OPTIMIZER];
            len[TIER_OPTIMIZER] += b;
        }
        t->g_at = len[TIER_GRADIENTS];
        len[TIER_GRADIENTS] += tier__round(b, TIER_PAGE);
    }
}

uint64_t tier_disk_bytes(const mx_job *j)
{
    /* what tier__place lays out, with a page for each header (the headers
     * are laid out when the files are made) */
    uint64_t bytes = 2 * TIER_PAGE;
    for (size_t i = 0; i < j->nt; i++) {
        const mx_tensor *t = &j->t[i];
        uint64_t b = t->n * sizeof(float);
        bytes += b * (1 + (t->trainable ? j->states : 0)) + tier__round(b, TIER_PAGE);
    }
    return bytes;
}

int tier_clean(const char *dir)
{
    DIR *d = opendir(dir);
    if (!d)
        return 0;
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (strncmp(e->d_name, TIER_PREFIX, strlen(TIER_PREFIX)) != 0)
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", dir, e->d_name);
        if (unlink(path) == 0) {
            log_warn("removed %s, a disk tier file an earlier memoryx left", path);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

static int tier__write_head(mx_tier *tr, int file, const st_writer *w, uint64_t head, char *err,
                            size_t errlen)
{
    uint8_t *buf = malloc(head);
    size_t need;
    int rc = buf ? st_writer_header(w, head, buf, &need) : -ENOMEM;
    if (rc == 0)
        rc = fsutil_pwrite_all(tr->fd[file], buf, head, 0);
    if (rc < 0)
        snprintf(err, errlen, "%s: writing its header: %s", tr->path[file], strerror(-rc));
    free(buf);
    return rc;
}

/* The files' headers with the metadata of step. */
static int tier__headers(mx_job *j, uint64_t step, bool widest, char *err, size_t errlen)
{
    mx_tier *tr = j->tier;
    st_writer *ww = st_writer_new(), *ow = st_writer_new();
    int rc = ww && ow ? shardfile_layout(j, step, widest, false, ww, ow) : -ENOMEM;
    if (rc < 0)
        snprintf(err, errlen, "cannot lay out the disk tier's headers: %s", strerror(-rc));
    if (rc == 0)
        rc = tier__write_head(tr, TIER_WEIGHTS, ww, tr->head[TIER_WEIGHTS], err, errlen);
    if (rc == 0)
        rc = tier__write_head(tr, TIER_OPTIMIZER, ow, tr->head[TIER_OPTIMIZER], err, errlen);
    st_writer_free(ww);
    st_writer_free(ow);
    return rc;
}

static mx_tier *tier__new(mx_job *j)
{
    mx_tier *tr = calloc(1, sizeof(*tr));
    if (!tr)
        return NULL;
    tr->job = j;
    tr->refs = 1;
    tr->ready_tail = &tr->ready;
    for (int f = 0; f < TIER_FILES; f++)
        tr->fd[f] = -1;
    j->tier = tr;
    return tr;
}

int tier_ahead(mx_job *j, uint64_t window)
{
    mx_tier *tr = tier__new(j);
    if (!tr)
        return -ENOMEM;
    tr->window = window;
    tr->ra_limit = window;
    return 0;
}

int tier_open(mx_job *j, const char *dir, uint64_t window, unsigned threads, char *err,
              size_t errlen)
{
    mx_tier *tr = tier__new(j);
    if (!tr) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    tr->files = true;
    int rc = tier__heads(j, tr->head);
    if (rc < 0) {
        snprintf(err, errlen, "cannot lay out the disk tier: %s", strerror(-rc));
        return rc;
    }
    tier__place(j, tr->head, tr->len);
    uint64_t total = tr->len[0] + tr->len[1] + tr->len[2];
    char b1[32], b2[32], b3[32], b4[32], b5[32];
    rc = fsutil_mkdir_p(dir);
    struct statvfs vs;
    if (rc == 0 && statvfs(dir, &vs) < 0)
        rc = -errno;
    if (rc < 0) {
        snprintf(err, errlen, "state directory %s: %s", dir, strerror(-rc));
        return rc;
    }
    uint64_t avail = (uint64_t)vs.f_bavail * vs.f_frsize;
    if (avail < total) {
        snprintf(err, errlen, "state directory %s has %s free; the disk tier of shard %u needs %s "
                 "(weights %s, optimizer state %s, gradients %s)", dir,
                 units_format_size(avail, b1, sizeof(b1)), j->shard,
                 units_format_size(total, b2, sizeof(b2)),
                 units_format_size(tr->len[0], b3, sizeof(b3)),
                 units_format_size(tr->len[1], b4, sizeof(b4)),
                 units_format_size(tr->len[2], b5, sizeof(b5)));
        return -ENOSPC;
    }
    for (int f = 0; f < TIER_FILES; f++) {
        snprintf(tr->path[f], sizeof(tr->path[f]), "%s/" TIER_PREFIX "%s-shard%u%s", dir, j->id,
                 j->shard + 1, tier__suffix[f]);
        tr->fd[f] = open(tr->path[f], O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (tr->fd[f] < 0) {
            rc = -errno;
            snprintf(err, errlen, "%s: cannot create it: %s", tr->path[f], strerror(-rc));
            return rc;
        }
        /* every block now: a full disk is found here, not as a fault on a
         * mapped page in the middle of a step */
        rc = tr->len[f] ? -posix_fallocate(tr->fd[f], 0, (off_t)tr->len[f]) : 0;
        if (rc < 0) {
            snprintf(err, errlen, "%s: cannot reserve %s in state directory %s: %s", tr->path[f],
                     units_format_size(tr->len[f], b1, sizeof(b1)), dir, strerror(-rc));
            return rc;
        }
        if (!tr->len[f])
            continue;
        void *m = mmap(NULL, tr->len[f], PROT_READ | PROT_WRITE, MAP_SHARED, tr->fd[f], 0);
        if (m == MAP_FAILED) {
            rc = -errno;
            snprintf(err, errlen, "%s: cannot map %s: %s", tr->path[f],
                     units_format_size(tr->len[f], b1, sizeof(b1)), strerror(-rc));
            return rc;
        }
        tr->map[f] = m;
    }
    rc = tier__headers(j, 0, true, err, errlen);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        t->w = (float *)(tr->map[TIER_WEIGHTS] + t->w_at);
        t->g = (float *)(tr->map[TIER_GRADIENTS] + t->g_at);
        float *bufs[OPTIM_MAX_STATE] = {0};
        for (size_t s = 0; t->trainable && s < j->states; s++)
            bufs[s] = (float *)(tr->map[TIER_OPTIMIZER] + t->s_at[s]);
        if (t->trainable && optim_state_init_at(&t->st, &j->cfg, t->n, bufs) < 0) {
            snprintf(err, errlen, "bad optimizer");
            return -EINVAL;
        }
    }
    /* the window: half reads ahead of the stream, a quarter takes the
     * gradients in, a quarter is the pieces the threads work on */
    uint64_t chunk = j->plan->chunk_elems * sizeof(float);
    tr->window = window;
    tr->ra_limit = window / 2 > chunk ? window / 2 : chunk;
    tr->g_limit = window / 4 > chunk ? window / 4 : chunk;
    uint64_t per = window / 4 / (threads ? threads : 1) / ((2 + j->states) * sizeof(float));
    tr->piece = per / 1024 * 1024;
    if (tr->piece < 1024)
        tr->piece = 1024;
    return 0;
}

void tier_done_with(mx_tier *tr, int file, const void *ptr, uint64_t bytes)
{
    if (!bytes)
        return;
    uintptr_t base = (uintptr_t)tr->map[file];
    uintptr_t a = (uintptr_t)ptr, b = a + bytes;
    /* a page shared with a neighbour goes too: a shared mapping loses
     * nothing by it, the page cache holds the data */
    uintptr_t pa = a / TIER_PAGE * TIER_PAGE, pb = tier__round(b, TIER_PAGE);
    if (pb > base + tr->len[file])
        pb = base + tr->len[file];
    if (pa < base)
        pa = base;
    if (file != TIER_GRADIENTS)
        sync_file_range(tr->fd[file], (off64_t)(pa - base), (off64_t)(pb - pa),
                        SYNC_FILE_RANGE_WRITE);
    madvise((void *)pa, pb - pa, MADV_DONTNEED);
}

/* The gradient of [a, b) of t was used: its blocks read as zeros again
 * and its dirty pages are dropped, never written. */
static void tier__drop_grad(mx_tier *tr, const mx_tensor *t, uint64_t a, uint64_t b)
{
    uint64_t from = t->g_at + a * sizeof(float), to = t->g_at + b * sizeof(float);
    if (b == t->n)
        to = tier__round(to, TIER_PAGE);
    madvise(tr->map[TIER_GRADIENTS] + from / TIER_PAGE * TIER_PAGE,
            tier__round(to, TIER_PAGE) - from / TIER_PAGE * TIER_PAGE, MADV_DONTNEED);
    if (fallocate(tr->fd[TIER_GRADIENTS], FALLOC_FL_ZERO_RANGE | FALLOC_FL_KEEP_SIZE, (off_t)from,
                  (off_t)(to - from)) < 0)
        (void)0; /* only an optimisation: the gradient is overwritten next step */
}

static void tier__piece_done(mx_job *j, mx_tensor *t, uint64_t a, uint64_t b)
{
    mx_tier *tr = j->tier;
    uint64_t bytes = (b - a) * sizeof(float);
    tier_done_with(tr, TIER_WEIGHTS, t->w + a, bytes);
    for (size_t s = 0; t->trainable && s < t->st.count; s++)
        tier_done_with(tr, TIER_OPTIMIZER, t->st.tensor[s] + a, bytes);
    tier__drop_grad(tr, t, a, b);
}

/* The pages of [a, b) of t's arrays are wanted soon: read them ahead. */
static void tier__want(mx_job *j, mx_tensor *t, uint64_t a, uint64_t b)
{
    uint64_t bytes = (b - a) * sizeof(float);
    const void *p[2 + OPTIM_MAX_STATE] = {t->w + a, t->g + a};
    size_t np = 2;
    for (size_t s = 0; t->trainable && s < t->st.count; s++)
        p[np++] = t->st.tensor[s] + a;
    for (size_t i = 0; i < np; i++) {
        uintptr_t pa = (uintptr_t)p[i] / TIER_PAGE * TIER_PAGE;
        madvise((void *)pa, tier__round((uintptr_t)p[i] + bytes, TIER_PAGE) - pa, MADV_WILLNEED);
    }
}

static void tier__update_range(mx_job *j, mx_tensor *t, uint64_t a, uint64_t b, float scale)
{
    tier__want(j, t, a, b);
    if (t->trainable) {
        optim_state r = optim_state_range(&t->st, a, b - a);
        optim_update(&j->cfg, &r, t->w + a, t->g + a, b - a, true, scale, (int64_t)j->step);
    } else {
        optim_update(&j->cfg, &t->st, t->w + a, t->g + a, b - a, false, scale, (int64_t)j->step);
    }
    tier__piece_done(j, t, a, b);
}

void tier_update(mx_job *j, mx_tensor *t, float scale)
{
    uint64_t piece = j->tier->piece;
    for (uint64_t a = 0; a < t->n; a += piece)
        tier__update_range(j, t, a, a + piece < t->n ? a + piece : t->n, scale);
    if (t->trainable)
        optim_state_set_step(&t->st, optim_state_step(&t->st) + 1);
}

void tier_update_step(mx_job *j)
{
    uint64_t piece = j->tier->piece;
    double sum = 0;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        if (!t->trainable)
            continue;
        double s = 0;
        for (uint64_t a = 0; a < t->n; a += piece) {
            uint64_t n = a + piece < t->n ? piece : t->n - a;
            s = optim_sum_squares_add(s, t->g + a, n);
            tier_done_with(j->tier, TIER_GRADIENTS, t->g + a, n * sizeof(float));
        }
        sum += s;
    }
    float scale = optim_clip_scale(sqrt(sum), j->cfg.max_gradient_norm);
    for (size_t i = 0; i < j->nt; i++)
        tier_update(j, &j->t[i], scale);
}

int tier_copy_in(mx_tier *tr, int file, uint64_t dst_off, int src_fd, uint64_t src_off,
                 uint64_t bytes)
{
    loff_t in = (loff_t)src_off, out = (loff_t)dst_off;
    while (bytes) {
        ssize_t k = copy_file_range(src_fd, &in, tr->fd[file], &out,
                                    bytes > (1u << 30) ? (1u << 30) : bytes, 0);
        if (k < 0 && errno == EINTR)
            continue;
        if (k < 0 && (errno == EXDEV || errno == ENOSYS || errno == EOPNOTSUPP || errno == EINVAL))
            break; /* no copy in the kernel here: through a buffer */
        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        bytes -= (uint64_t)k;
    }
    char buf[1 << 16];
    while (bytes) {
        size_t n = bytes > sizeof(buf) ? sizeof(buf) : bytes;
        int rc = fsutil_pread_all(src_fd, buf, n, (uint64_t)in);
        if (rc == 0)
            rc = fsutil_pwrite_all(tr->fd[file], buf, n, (uint64_t)out);
        if (rc < 0)
            return rc;
        in += (loff_t)n;
        out += (loff_t)n;
        bytes -= n;
    }
    return 0;
}

/* The tier file `file` becomes the checkpoint file path: renamed (last)
 * or copied in the kernel to a temporary name, fsynced and renamed. */
static int tier__install(mx_tier *tr, int file, bool last, const char *path, char *err,
                         size_t errlen)
{
    int rc;
    if (last) {
        if (fsync(tr->fd[file]) < 0) {
            rc = -errno;
            snprintf(err, errlen, "%s: fsync: %s", tr->path[file], strerror(-rc));
            return rc;
        }
        if (rename(tr->path[file], path) == 0) {
            tr->moved[file] = true;
            fsutil_sync_dir(path);
            return 0;
        }
        if (errno != EXDEV) {
            rc = -errno;
            snprintf(err, errlen, "%s: cannot rename it to %s: %s", tr->path[file], path,
                     strerror(-rc));
            return rc;
        }
    }
    char tmp[PATH_MAX + 32];
    snprintf(tmp, sizeof(tmp), "%s.tmp-%ld", path, (long)getpid());
    int fd = open(tmp, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, errlen, "%s: cannot create it: %s", tmp, strerror(-rc));
        return rc;
    }
    mx_tier dst = {.fd = {fd, fd, fd}};
    rc = tier_copy_in(&dst, 0, 0, tr->fd[file], 0, tr->len[file]);
    if (rc == 0 && fsync(fd) < 0)
        rc = -errno;
    if (close(fd) < 0 && rc == 0)
        rc = -errno;
    if (rc == 0 && rename(tmp, path) < 0)
        rc = -errno;
    if (rc < 0) {
        char b[32];
        snprintf(err, errlen, "%s: writing %s of checkpoint: %s", tmp,
                 units_format_size(tr->len[file], b, sizeof(b)), strerror(-rc));
        unlink(tmp);
        return rc;
    }
    fsutil_sync_dir(path);
    return 0;
}

int tier_checkpoint(mx_job *j, uint64_t step, bool last, char *path, size_t pathlen, char *err,
                    size_t errlen)
{
    mx_tier *tr = j->tier;
    int rc = fsutil_mkdir_p(j->plan->model_dir);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create model_dir %s: %s", j->plan->model_dir, strerror(-rc));
        return rc;
    }
    char opath[PATH_MAX];
    shardfile_paths(j, step, path, opath, pathlen < sizeof(opath) ? pathlen : sizeof(opath));
    rc = tier__headers(j, step, false, err, errlen);
    if (rc == 0)
        rc = tier__install(tr, TIER_OPTIMIZER, last, opath, err, errlen);
    if (rc == 0)
        rc = tier__install(tr, TIER_WEIGHTS, last, path, err, errlen);
    return rc;
}

void tier_close(mx_tier *tr)
{
    for (int f = 0; f < TIER_FILES; f++) {
        if (tr->map[f])
            munmap(tr->map[f], tr->len[f]);
        tr->map[f] = NULL;
        if (tr->fd[f] >= 0) {
            close(tr->fd[f]);
            if (!tr->moved[f])
                unlink(tr->path[f]);
        }
        tr->fd[f] = -1;
    }
}

void tier_put(mx_tier *tr)
{
    if (tr && --tr->refs == 0) {
        while (tr->ready) {
            mx_rbuf *b = tr->ready;
            tr->ready = b->next;
            free(b);
        }
        free(tr->ra_buf);
        free(tr);
    }
}
