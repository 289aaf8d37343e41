/* Writing SKM-TEA sets (mzdata.h) with libhdf5: each volume as the Model
 * Zoo's resize_skm_tea_files.py leaves it, echo1 and echo2 int16 [X, Y,
 * Z] and seg h5py's bool (an int8 enum FALSE/TRUE) [X, Y, Z, 6], written
 * an X plane at a time; and the COCO-style annotations naming them. */
#include <errno.h>
#include <hdf5.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "mzdata.h"

/* One dataset being written. */
typedef struct mzskm_set {
    hid_t id;                 /* H5I_INVALID_HID: left out */
    hid_t space;              /* the file's dataspace */
    int rank;
} mzskm_set;

static int mzskm__create(hid_t f, const mzdata_opts *o, const char *name, hid_t type, int rank,
                         mzskm_set *s)
{
    const hsize_t dims[4] = {o->height, o->width, o->depth, o->hdf5.seg_classes};
    s->rank = rank;
    s->space = H5Screate_simple(rank, dims, NULL);
    hid_t dcpl = H5Pcreate(H5P_DATASET_CREATE);
    if (s->space < 0 || dcpl < 0)
        return -1;
    if (o->hdf5.chunk) {
        hsize_t chunk[4];
        for (int i = 0; i < rank; i++)
            chunk[i] = i == 3 || dims[i] < o->hdf5.chunk ? dims[i] : o->hdf5.chunk;
        if (H5Pset_chunk(dcpl, rank, chunk) < 0 || H5Pset_deflate(dcpl, 4) < 0) {
            H5Pclose(dcpl);
            return -1;
        }
    }
    s->id = H5Dcreate2(f, name, type, s->space, H5P_DEFAULT, dcpl, H5P_DEFAULT);
    H5Pclose(dcpl);
    return s->id < 0 ? -1 : 0;
}

/* Writes X plane h (W x D values, times 6 for seg) of set s. */
static int mzskm__plane(mzskm_set *s, const mzdata_opts *o, hid_t memtype, uint32_t h,
                        const void *buf)
{
    if (s->id < 0)
        return 0;
    hsize_t start[4] = {h, 0, 0, 0}, count[4] = {1, o->width, o->depth, o->hdf5.seg_classes};
    hid_t mspace = H5Screate_simple(s->rank, count, NULL);
    int rc = mspace >= 0 &&
                     H5Sselect_hyperslab(s->space, H5S_SELECT_SET, start, NULL, count, NULL) >= 0 &&
                     H5Dwrite(s->id, memtype, mspace, s->space, H5P_DEFAULT, buf) >= 0
                 ? 0
                 : -1;
    if (mspace >= 0)
        H5Sclose(mspace);
    return rc;
}

static void mzskm__close(mzskm_set *s)
{
    if (s->id >= 0)
        H5Dclose(s->id);
    if (s->space >= 0)
        H5Sclose(s->space);
    s->id = s->space = H5I_INVALID_HID;
}

/* One volume into path. */
static int mzskm__file(const mzdata_opts *o, const mzdata_scene *sc, const char *path, char *err,
                       size_t errlen)
{
    const uint32_t H = o->height, W = o->width, D = o->depth, T = o->hdf5.seg_classes;
    const size_t plane = (size_t)W * D;
    mzskm_set set[3] = {{H5I_INVALID_HID, H5I_INVALID_HID, 0},
                        {H5I_INVALID_HID, H5I_INVALID_HID, 0},
                        {H5I_INVALID_HID, H5I_INVALID_HID, 0}};
    int16_t *e1 = malloc(plane * sizeof(int16_t)), *e2 = malloc(plane * sizeof(int16_t));
    int8_t *seg = malloc(plane * T);
    hid_t fapl = H5Pcreate(H5P_FILE_ACCESS), f = H5I_INVALID_HID, boolean = H5I_INVALID_HID;
    int rc = -1;
    if (!e1 || !e2 || !seg || fapl < 0) {
        snprintf(err, errlen, "out of memory");
        goto done;
    }
    if (o->hdf5.latest)
        H5Pset_libver_bounds(fapl, H5F_LIBVER_LATEST, H5F_LIBVER_LATEST);
    if ((f = H5Fcreate(path, H5F_ACC_TRUNC, H5P_DEFAULT, fapl)) < 0) {
        snprintf(err, errlen, "%s: cannot create", path);
        goto done;
    }
    /* numpy's bool as h5py writes it */
    int8_t no = 0, yes = 1;
    boolean = H5Tenum_create(H5T_NATIVE_INT8);
    if (boolean < 0 || H5Tenum_insert(boolean, "FALSE", &no) < 0 ||
        H5Tenum_insert(boolean, "TRUE", &yes) < 0 ||
        (!(o->hdf5.leave_out & MZDATA_SKM_NO_ECHO1) &&
         mzskm__create(f, o, "echo1", H5T_STD_I16LE, 3, &set[0]) < 0) ||
        (!(o->hdf5.leave_out & MZDATA_SKM_NO_ECHO2) &&
         mzskm__create(f, o, "echo2", H5T_STD_I16LE, 3, &set[1]) < 0) ||
        (!(o->hdf5.leave_out & MZDATA_SKM_NO_SEG) &&
         mzskm__create(f, o, "seg", boolean, 4, &set[2]) < 0)) {
        snprintf(err, errlen, "%s: cannot create its datasets", path);
        goto done;
    }
    for (uint32_t h = 0; h < H; h++) {
        for (uint32_t w = 0; w < W; w++)
            for (uint32_t d = 0; d < D; d++) {
                int16_t echo[2];
                unsigned tissues;
                size_t at = (size_t)w * D + d;
                mzdata_skm_voxel(sc, h, w, d, echo, &tissues);
                e1[at] = echo[0];
                e2[at] = echo[1];
                for (uint32_t t = 0; t < T; t++)
                    seg[at * T + t] = (int8_t)((tissues >> t) & 1);
            }
        if (mzskm__plane(&set[0], o, H5T_NATIVE_INT16, h, e1) < 0 ||
            mzskm__plane(&set[1], o, H5T_NATIVE_INT16, h, e2) < 0 ||
            mzskm__plane(&set[2], o, boolean, h, seg) < 0) {
            snprintf(err, errlen, "%s: cannot write X plane %u", path, h);
            goto done;
        }
    }
    rc = 0;
done:
    for (int i = 0; i < 3; i++)
        mzskm__close(&set[i]);
    if (boolean >= 0)
        H5Tclose(boolean);
    if (f >= 0 && H5Fclose(f) < 0 && rc == 0) {
        snprintf(err, errlen, "%s: cannot write", path);
        rc = -1;
    }
    if (fapl >= 0)
        H5Pclose(fapl);
    free(e1);
    free(e2);
    free(seg);
    return rc;
}

/* The annotations of a split: its images last to first (the reader
 * sorts them, as the Model Zoo does), among what COCO-style files hold. */
static int mzskm__json(const mzdata_opts *o, const char *dir, const char *split, bool eval,
                       uint32_t count, char *err, size_t errlen)
{
    static const char *const tissues[] = {"patellar cartilage", "femoral cartilage",
                                          "tibial cartilage (medial)",
                                          "tibial cartilage (lateral)", "meniscus (medial)",
                                          "meniscus (lateral)"};
    char path[PATH_MAX];
    snprintf(path, sizeof(path), "%s/annotations/v1.0.0/%s.json", dir, split);
    FILE *f = fopen(path, "w");
    if (!f) {
        snprintf(err, errlen, "%s: cannot create: %s", path, strerror(errno));
        return -1;
    }
    fprintf(f, "{\n    \"info\": {\"description\": \"mkmzdata: SKM-TEA layout\", \"version\": "
               "\"1.0.0\"},\n    \"categories\": [");
    for (int t = 0; t < 6; t++)
        fprintf(f, "%s\n        {\"id\": %d, \"name\": \"%s\"}", t ? "," : "", t + 1, tissues[t]);
    fprintf(f, "\n    ],\n    \"images\": [");
    for (uint32_t i = count; i-- > 0;) {
        char name[64];
        mzdata_name(o, eval, i, name, sizeof(name));
        fprintf(f, "%s\n        {\"id\": %u, \"file_name\": \"%s\", \"scan_id\": \"%.7s\", "
                   "\"matrix_shape\": [%u, %u, %u], \"voxel_spacing\": [0.3125, 0.3125, 0.8]}",
                i + 1 < count ? "," : "", i + 1, name, name, o->height, o->width, o->depth);
    }
    fprintf(f, "%s],\n    \"annotations\": []\n}\n", count ? "\n    " : "");
    if (fclose(f) != 0) {
        snprintf(err, errlen, "%s: cannot write", path);
        return -1;
    }
    return 0;
}

int mzdata_skm_write(const mzdata_opts *o, const char *dir, char *err, size_t errlen)
{
    char sub[PATH_MAX], path[PATH_MAX + 64];
    int e;
    snprintf(sub, sizeof(sub), "%s/annotations/v1.0.0", dir);
    if ((e = fsutil_mkdir_p(sub)) < 0) {
        snprintf(err, errlen, "%s: cannot make the directory: %s", sub, strerror(-e));
        return -1;
    }
    snprintf(sub, sizeof(sub), "%s/image_files", dir);
    if ((e = fsutil_mkdir_p(sub)) < 0) {
        snprintf(err, errlen, "%s: cannot make the directory: %s", sub, strerror(-e));
        return -1;
    }
    H5Eset_auto2(H5E_DEFAULT, NULL, NULL);
    for (int split = 0; split < 2; split++) {
        bool eval = split == 1;
        uint32_t n = mzdata_count(o, eval);
        for (uint32_t i = 0; i < n; i++) {
            mzdata_scene s;
            char name[64];
            mzdata_scene_make(&s, o, eval, i);
            mzdata_name(o, eval, i, name, sizeof(name));
            snprintf(path, sizeof(path), "%s/%s", sub, name);
            if (mzskm__file(o, &s, path, err, errlen) < 0)
                return -1;
        }
        if (mzskm__json(o, dir, eval ? "val" : "train", eval, n, err, errlen) < 0)
            return -1;
    }
    return mzskm__json(o, dir, "test", true, 0, err, errlen);
}
