/* SkmDataProcessor, decoding (libhdf5). A file holds echo1 and echo2, [X,
 * Y, Z] 16-bit volumes, and seg, [X, Y, Z, 6] one-hot tissues; the Model
 * Zoo makes its input (C, Z, X, Y) and its labels (Z, X, Y): the model's
 * (C, D, H, W) is the file's Z, X, Y, with no resizing. Z varies fastest
 * in the file, so the reader reads slabs of a few X rows at a time (each
 * one run of the file, [k, Y, Z]) and scatters them into the sample: a
 * slab along Z would touch the whole dataset for every slab. Memory beyond
 * the sample: one slab of one dataset. */
#include <errno.h>
#include <hdf5.h>
#include <math.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ds_skm.h"
#include "h5hdr.h"

/* X rows (slices of the model's H) read at once; the tests change it. A
 * chunked dataset is read in whole chunk rows when its chunks are at most
 * DS_SKM_MAX_CHUNK_ROWS rows, so that no chunk is decompressed twice. */
size_t ds_skm__slab_rows = 4;
#define DS_SKM_MAX_CHUNK_ROWS 16

/* The largest slab buffer a read has held, in bytes (for the tests). */
_Atomic size_t ds_skm__largest_slab;

/* libhdf5 calls, one thread at a time: Debian's build is thread-safe (one
 * global lock inside), but another build need not be. */
static pthread_mutex_t ds_skm__lock = PTHREAD_MUTEX_INITIALIZER;

static void ds_skm__enter(void)
{
    pthread_mutex_lock(&ds_skm__lock);
    /* the error stack is the thread's: report through messages, not stderr */
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
}

static void ds_skm__leave(void)
{
    pthread_mutex_unlock(&ds_skm__lock);
}

typedef struct ds_skm_why {
    char msg[200];
} ds_skm_why;

static herr_t ds_skm__walk(unsigned n, const H5E_error2_t *e, void *arg)
{
    ds_skm_why *w = arg;
    if (n == 0 && e->desc)
        snprintf(w->msg, sizeof(w->msg), "%s", e->desc);
    return 0;
}

/* The innermost message of libhdf5's error stack (where the error was
 * found), or "" (within ds_skm__enter). */
static const char *ds_skm__why(ds_skm_why *w)
{
    w->msg[0] = 0;
    H5Ewalk2(H5E_DEFAULT, H5E_WALK_UPWARD, ds_skm__walk, w);
    return w->msg;
}

static const char *ds_skm__class_name(H5T_class_t c)
{
    switch (c) {
    case H5T_INTEGER: return "integer";
    case H5T_FLOAT: return "floating-point";
    case H5T_TIME: return "time";
    case H5T_STRING: return "string";
    case H5T_BITFIELD: return "bitfield";
    case H5T_OPAQUE: return "opaque";
    case H5T_COMPOUND: return "compound";
    case H5T_REFERENCE: return "reference";
    case H5T_ENUM: return "enum";
    case H5T_VLEN: return "variable-length";
    case H5T_ARRAY: return "array";
    default: return "unknown";
    }
}

/* dims as "[a, b, c]". */
static void ds_skm__dims(char *dst, size_t len, const hsize_t *dims, int rank)
{
    size_t at = 0;
    at += (size_t)snprintf(dst, len, "[");
    for (int i = 0; i < rank && at < len; i++)
        at += (size_t)snprintf(dst + at, len - at, "%s%llu", i ? ", " : "",
                               (unsigned long long)dims[i]);
    if (at < len)
        snprintf(dst + at, len - at, "]");
}

/* One dataset of a file, open and checked. */
typedef struct ds_skm_set {
    const char *name;         /* "echo1", "echo2" or "seg" */
    hid_t id;                 /* the dataset; H5I_INVALID_HID: not open */
    hid_t memtype;            /* read as: native float (an echo), seg's native integer or enum */
    size_t esize;             /* bytes of one value in memory */
    hsize_t chunk_rows;       /* X rows of a chunk; 0: not chunked */
} ds_skm_set;

/* An open file and the datasets the echo_type reads: set[0] the first
 * echo, set[1] the second (two-echo types), set[2] seg. */
typedef struct ds_skm_file {
    const char *path;
    hid_t f;
    ds_skm_set set[3];
} ds_skm_file;

/* Within ds_skm__enter. */
static void ds_skm__close_file(ds_skm_file *h)
{
    for (int i = 0; i < 3; i++) {
        if (h->set[i].memtype >= 0)
            H5Tclose(h->set[i].memtype);
        if (h->set[i].id >= 0)
            H5Dclose(h->set[i].id);
        h->set[i].memtype = h->set[i].id = H5I_INVALID_HID;
    }
    if (h->f >= 0)
        H5Fclose(h->f);
    h->f = H5I_INVALID_HID;
}

/* Opens dataset s->name of the file and checks its shape against the
 * model's volume ([H, W, D] for an echo, [H, W, D, 6] for seg) and its
 * type. Within ds_skm__enter. */
static int ds_skm__open_set(const dataset *d, const ds_skm *p, ds_skm_file *h, ds_skm_set *s,
                            char *err, size_t errlen)
{
    const bool seg = strcmp(s->name, "seg") == 0;
    ds_skm_why why;
    hid_t space = H5I_INVALID_HID, type = H5I_INVALID_HID, dcpl = H5I_INVALID_HID;
    int rc = -EINVAL;
    if (H5Lexists(h->f, s->name, H5P_DEFAULT) <= 0) {
        if (seg)
            snprintf(err, errlen, "%s: no dataset \"seg\" (the segmentation)", h->path);
        else
            snprintf(err, errlen, "%s: no dataset \"%s\" (echo_type \"%s\" reads it)", h->path,
                     s->name, ds_skm__echo_name(p->echo));
        return -EINVAL;
    }
    if ((s->id = H5Dopen2(h->f, s->name, H5P_DEFAULT)) < 0) {
        snprintf(err, errlen, "%s: \"%s\" is not a dataset that opens: %s", h->path, s->name,
                 ds_skm__why(&why));
        return -EINVAL;
    }
    hsize_t dims[H5S_MAX_RANK];
    int rank;
    if ((space = H5Dget_space(s->id)) < 0 ||
        (rank = H5Sget_simple_extent_ndims(space)) < 0 ||
        H5Sget_simple_extent_dims(space, dims, NULL) < 0) {
        snprintf(err, errlen, "%s: %s: corrupt dataspace: %s", h->path, s->name,
                 ds_skm__why(&why));
        goto done;
    }
    const hsize_t want[4] = {d->height, d->width, d->depth, DS_SKM_SEG_CLASSES};
    const int want_rank = seg ? 4 : 3;
    bool same = rank == want_rank;
    for (int i = 0; same && i < rank; i++)
        same = dims[i] == want[i];
    if (!same) {
        char got[200], need[120];
        ds_skm__dims(got, sizeof(got), dims, rank);
        ds_skm__dims(need, sizeof(need), want, want_rank);
        snprintf(err, errlen, "%s: %s is %s; the model input [%u, %u, %u, %u] (C, D, H, W) "
                 "needs [H, W, D%s] = %s", h->path, s->name, got, d->channels, d->depth,
                 d->height, d->width, seg ? ", 6 tissues" : "", need);
        goto done;
    }
    type = H5Dget_type(s->id);
    H5T_class_t cls = type >= 0 ? H5Tget_class(type) : H5T_NO_CLASS;
    if (!seg && cls != H5T_INTEGER && cls != H5T_FLOAT) {
        snprintf(err, errlen, "%s: %s holds %s values; an echo is integers or floats", h->path,
                 s->name, ds_skm__class_name(cls));
        goto done;
    }
    if (seg && cls != H5T_INTEGER && cls != H5T_ENUM && cls != H5T_BITFIELD) {
        snprintf(err, errlen, "%s: seg holds %s values; a segmentation is booleans or integers",
                 h->path, ds_skm__class_name(cls));
        goto done;
    }
    s->memtype = seg ? H5Tget_native_type(type, H5T_DIR_ASCEND) : H5Tcopy(H5T_NATIVE_FLOAT);
    s->esize = s->memtype >= 0 ? H5Tget_size(s->memtype) : 0;
    if (s->esize == 0 || s->esize > 8) {
        snprintf(err, errlen, "%s: %s: values of %zu bytes; the reader takes at most 8", h->path,
                 s->name, s->esize);
        goto done;
    }
    s->chunk_rows = 0;
    if ((dcpl = H5Dget_create_plist(s->id)) >= 0 && H5Pget_layout(dcpl) == H5D_CHUNKED) {
        hsize_t chunk[H5S_MAX_RANK];
        if (H5Pget_chunk(dcpl, rank, chunk) == rank)
            s->chunk_rows = chunk[0];
    }
    rc = 0;
done:
    if (dcpl >= 0)
        H5Pclose(dcpl);
    if (type >= 0)
        H5Tclose(type);
    if (space >= 0)
        H5Sclose(space);
    return rc;
}

/* Opens path and the datasets the echo_type reads, checked. Takes the
 * lock; *h is to be closed (ds_skm__close_file) whatever it returns. */
static int ds_skm__open_file(const dataset *d, const ds_skm *p, const char *path, ds_skm_file *h,
                             char *err, size_t errlen)
{
    memset(h, 0, sizeof(*h));
    h->path = path;
    h->f = H5I_INVALID_HID;
    for (int i = 0; i < 3; i++)
        h->set[i].id = h->set[i].memtype = H5I_INVALID_HID;
    h->set[0].name = p->echo == DS_SKM_ECHO2 ? "echo2" : "echo1";
    h->set[1].name = p->echo == DS_SKM_ECHO1_ECHO2_MC || p->echo == DS_SKM_RSS ? "echo2" : NULL;
    h->set[2].name = "seg";
    /* the truncation libhdf5 would find, said as the planner says it */
    h5hdr hd;
    int rc = h5hdr_read(path, &hd, err, errlen);
    if (rc < 0)
        return rc;
    ds_skm__enter();
    ds_skm_why why;
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS);
#if H5_VERSION_GE(1, 10, 7)
    /* read-only: no locks, which some file systems refuse */
    if (fapl >= 0)
        H5Pset_file_locking(fapl, false, true);
#endif
    h->f = fapl >= 0 ? H5Fopen(path, H5F_ACC_RDONLY, fapl) : H5I_INVALID_HID;
    if (h->f < 0) {
        /* (before the next call, which clears the error stack) */
        snprintf(err, errlen, "%s: corrupt HDF5 file: %s", path, ds_skm__why(&why));
        rc = -EINVAL;
    }
    if (fapl >= 0)
        H5Pclose(fapl);
    if (rc < 0)
        goto done;
    for (int i = 0; i < 3 && rc == 0; i++)
        if (h->set[i].name)
            rc = ds_skm__open_set(d, p, h, &h->set[i], err, errlen);
done:
    ds_skm__leave();
    return rc;
}

static void ds_skm__close_locked(ds_skm_file *h)
{
    ds_skm__enter();
    ds_skm__close_file(h);
    ds_skm__leave();
}

/* X rows of set s read at once. */
static uint32_t ds_skm__rows(const ds_skm_set *s, uint32_t H)
{
    uint64_t k = ds_skm__slab_rows ? ds_skm__slab_rows : 1;
    if (s->chunk_rows > 1 && s->chunk_rows <= DS_SKM_MAX_CHUNK_ROWS)
        k = (k + s->chunk_rows - 1) / s->chunk_rows * s->chunk_rows;
    return k < H ? (uint32_t)k : H;
}

/* Reads X rows r0 .. r0+k-1 of set s into buf: [k, W, D] values, and 6
 * per voxel for seg. Takes the lock. */
static int ds_skm__slab(const dataset *d, const ds_skm_file *h, const ds_skm_set *s, uint32_t r0,
                        uint32_t k, void *buf, char *err, size_t errlen)
{
    const bool seg = s == &h->set[2];
    hsize_t start[4] = {r0, 0, 0, 0}, count[4] = {k, d->width, d->depth, DS_SKM_SEG_CLASSES};
    ds_skm_why why;
    int rc = 0;
    ds_skm__enter();
    hid_t fspace = H5Dget_space(s->id);
    hid_t mspace = H5Screate_simple(seg ? 4 : 3, count, NULL);
    if (fspace < 0 || mspace < 0 ||
        H5Sselect_hyperslab(fspace, H5S_SELECT_SET, start, NULL, count, NULL) < 0 ||
        H5Dread(s->id, s->memtype, mspace, fspace, H5P_DEFAULT, buf) < 0) {
        snprintf(err, errlen, "%s: %s: cannot read X rows %u to %u: %s", h->path, s->name, r0,
                 r0 + k - 1, ds_skm__why(&why));
        rc = -EIO;
    }
    if (mspace >= 0)
        H5Sclose(mspace);
    if (fspace >= 0)
        H5Sclose(fspace);
    ds_skm__leave();
    return rc;
}

static void ds_skm__note_slab(size_t bytes)
{
    size_t seen = atomic_load_explicit(&ds_skm__largest_slab, memory_order_relaxed);
    while (bytes > seen && !atomic_compare_exchange_weak_explicit(
                               &ds_skm__largest_slab, &seen, bytes, memory_order_relaxed,
                               memory_order_relaxed))
        ;
}

/* How an echo's values go into channel c of the sample. */
enum ds_skm_pass {
    DS_SKM_PUT,               /* the value, normalized (ds_put_value) */
    DS_SKM_SQUARE,            /* its square in float32, kept for DS_SKM_RSS_ADD */
    DS_SKM_RSS_ADD,           /* sqrt(what is there + its square), normalized */
};

static int ds_skm__echo(const dataset *d, const ds_skm_file *h, const ds_skm_set *s, uint32_t c,
                        enum ds_skm_pass pass, float *x, char *err, size_t errlen)
{
    const uint32_t D = d->depth, H = d->height, W = d->width;
    const size_t hw = (size_t)H * W, plane = (size_t)W * D;
    const uint32_t k = ds_skm__rows(s, H);
    float *buf = malloc((size_t)k * plane * sizeof(float));
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", h->path);
        return -ENOMEM;
    }
    ds_skm__note_slab((size_t)k * plane * sizeof(float));
    float *xc = x + (size_t)c * D * hw;
    int rc = 0;
    for (uint32_t r0 = 0; r0 < H && rc == 0; r0 += k) {
        uint32_t rows = H - r0 < k ? H - r0 : k;
        if ((rc = ds_skm__slab(d, h, s, r0, rows, buf, err, errlen)) < 0)
            break;
        /* each output row (z, r0 + r) whole, gathering down the slab's
         * D-long runs: the writes go along one row, the reads stay in one
         * slab row (blocks of z would write rows a power-of-two apart,
         * which share cache sets) */
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t z = 0; z < D; z++) {
                const float *v = buf + (size_t)r * plane + z;
                float *out = xc + (size_t)z * hw + (size_t)(r0 + r) * W;
                for (uint32_t w = 0; w < W; w++) {
                    float e = v[(size_t)w * D];
                    /* float32 steps, as numpy's: the square, the sum, the root */
                    if (pass == DS_SKM_PUT)
                        ds_put_value(d, out, w, e);
                    else if (pass == DS_SKM_SQUARE)
                        out[w] = e * e;
                    else
                        ds_put_value(d, out, w, sqrtf(out[w] + e * e));
                }
            }
    }
    free(buf);
    return rc;
}

/* The label of a voxel from its one-hot tissues t[0..5] (each esize bytes,
 * nonzero: set), as the Model Zoo's to_categorical makes it: 0 when none
 * is set, else 1 + the first set (argmax takes the first of equals); with
 * aggregate_cartilage the tissues are first merged into patellar,
 * femoral, tibial (medial or lateral) and meniscus (medial or lateral). */
static uint32_t ds_skm__label(const uint8_t *t, size_t esize, bool aggregate)
{
    bool on[DS_SKM_SEG_CLASSES];
    for (int i = 0; i < DS_SKM_SEG_CLASSES; i++) {
        on[i] = t[(size_t)i * esize] != 0;
        for (size_t b = 1; b < esize; b++) /* (h5py's bool: one byte) */
            on[i] = on[i] || t[(size_t)i * esize + b] != 0;
    }
    if (!aggregate) {
        for (int i = 0; i < DS_SKM_SEG_CLASSES; i++)
            if (on[i])
                return (uint32_t)i + 1;
        return 0;
    }
    return on[0] ? 1 : on[1] ? 2 : on[2] || on[3] ? 3 : on[4] || on[5] ? 4 : 0;
}

static int ds_skm__seg(const dataset *d, const ds_skm *p, const ds_skm_file *h, void *labels,
                       char *err, size_t errlen)
{
    const ds_skm_set *s = &h->set[2];
    const uint32_t D = d->depth, H = d->height, W = d->width;
    const size_t hw = (size_t)H * W, voxel = DS_SKM_SEG_CLASSES * s->esize;
    const size_t plane = (size_t)W * D * voxel;
    const uint32_t k = ds_skm__rows(s, H);
    uint8_t *buf = malloc((size_t)k * plane);
    if (!buf) {
        snprintf(err, errlen, "%s: out of memory", h->path);
        return -ENOMEM;
    }
    ds_skm__note_slab((size_t)k * plane);
    int rc = 0;
    for (uint32_t r0 = 0; r0 < H && rc == 0; r0 += k) {
        uint32_t rows = H - r0 < k ? H - r0 : k;
        if ((rc = ds_skm__slab(d, h, s, r0, rows, buf, err, errlen)) < 0)
            break;
        for (uint32_t r = 0; r < rows; r++)
            for (uint32_t z = 0; z < D; z++) {
                const uint8_t *t = buf + (size_t)r * plane + (size_t)z * voxel;
                size_t at = (size_t)z * hw + (size_t)(r0 + r) * W;
                for (uint32_t w = 0; w < W; w++, t += (size_t)D * voxel)
                    ds_put_label(d, labels, at + w, ds_skm__label(t, s->esize, p->aggregate));
            }
    }
    free(buf);
    return rc;
}

static int ds_skm__read(const dataset *d, uint64_t idx, void *x, void *labels, char *err,
                        size_t errlen)
{
    const ds_skm *p = d->priv;
    ds_skm_file h;
    int rc = ds_skm__open_file(d, p, p->files[idx], &h, err, errlen);
    if (rc == 0) {
        switch (p->echo) {
        case DS_SKM_ECHO1:
        case DS_SKM_ECHO2:
            rc = ds_skm__echo(d, &h, &h.set[0], 0, DS_SKM_PUT, x, err, errlen);
            break;
        case DS_SKM_ECHO1_ECHO2_MC:
            if ((rc = ds_skm__echo(d, &h, &h.set[0], 0, DS_SKM_PUT, x, err, errlen)) == 0)
                rc = ds_skm__echo(d, &h, &h.set[1], 1, DS_SKM_PUT, x, err, errlen);
            break;
        case DS_SKM_RSS:
            if ((rc = ds_skm__echo(d, &h, &h.set[0], 0, DS_SKM_SQUARE, x, err, errlen)) == 0)
                rc = ds_skm__echo(d, &h, &h.set[1], 0, DS_SKM_RSS_ADD, x, err, errlen);
            break;
        }
    }
    if (rc == 0)
        rc = ds_skm__seg(d, p, &h, labels, err, errlen);
    ds_skm__close_locked(&h);
    if (rc < 0) {
        /* the file's message, with the sample it was for */
        size_t n = strlen(err);
        snprintf(err + n, errlen > n ? errlen - n : 0, " (sample %llu)", (unsigned long long)idx);
    }
    return rc;
}

/* The probe's open, then every file's datasets checked with libhdf5: a
 * missing echo or a volume of another shape is refused when the worker
 * opens the set, not at its first batch. */
static int ds_skm__open_checked(dataset *d, const Appliance__PlanInput *in, char *err,
                                size_t errlen)
{
    int rc = ds_skm__open(d, in, err, errlen);
    const ds_skm *p = d->priv;
    for (size_t i = 0; rc == 0 && i < p->count; i++) {
        ds_skm_file h;
        rc = ds_skm__open_file(d, p, p->files[i], &h, err, errlen);
        ds_skm__close_locked(&h);
    }
    return rc;
}

const dataset_reader ds_skm_reader = {
    .name = "SkmDataProcessor",
    .open = ds_skm__open_checked,
    .close = ds_skm__close,
    .read = ds_skm__read,
};
