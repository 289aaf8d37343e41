/* Small synthetic data sets in the layouts of the Model Zoo U-Net's three
 * 2D sets (Inria Aerial TIFF, Severstal JPEG + train.csv, Cityscapes PNG)
 * and its 3D one (SKM-TEA: HDF5 volumes and COCO-style annotations), for
 * tests, examples and cluster tests: never a download. Each image is a
 * textured background with shapes drawn in, brighter than it, and its
 * mask is the shapes, so that a U-Net can learn them; each volume the
 * same with solids, one knee tissue each. A pixel (voxel) is a pure
 * function of (seed, image, y, x): the tests compute what was written
 * (mzdata_scene, mzdata_rgb, mzdata_label, mzdata_skm_voxel) instead of
 * reading it back. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mzdata_kind { MZDATA_INRIA, MZDATA_SEVERSTAL, MZDATA_CITYSCAPES, MZDATA_SKM };

/* How the TIFF files of an Inria set are laid out (libtiff's numbers). */
typedef struct mzdata_tiff {
    uint32_t tile;            /* tile side (a multiple of 16); 0: strips */
    uint32_t rows_per_strip;  /* strips: rows in each; 0: libtiff's default */
    uint16_t compression;     /* COMPRESSION_NONE (1), _LZW (5), _ADOBE_DEFLATE (8), _PACKBITS */
    bool planar;              /* RGB in separate planes rather than interleaved */
    uint16_t bits;            /* 8; 16 writes images no reader takes (tests) */
} mzdata_tiff;

/* How the HDF5 files of an SKM-TEA set are written. */
enum {
    MZDATA_SKM_NO_ECHO1 = 1u << 0, /* leave a dataset out (tests) */
    MZDATA_SKM_NO_ECHO2 = 1u << 1,
    MZDATA_SKM_NO_SEG = 1u << 2,
};

typedef struct mzdata_hdf5 {
    uint32_t chunk;           /* chunks of this side (clipped), deflated; 0: contiguous (h5py's) */
    bool latest;              /* libhdf5's latest format (superblock 3); false: h5py's (0) */
    unsigned leave_out;       /* MZDATA_SKM_NO_*: datasets not written (tests) */
    uint32_t seg_classes;     /* tissues in seg (6; others only for tests) */
} mzdata_hdf5;

typedef struct mzdata_opts {
    enum mzdata_kind kind;
    uint32_t height, width;   /* of every image (SKM: a volume's X and Y, the model's H and W) */
    uint32_t depth;           /* SKM only: a volume's Z, the model's D */
    uint32_t channels;        /* 1 gray or 3 RGB files (not SKM) */
    uint32_t count;           /* training images (Severstal: all images); evaluation: a quarter */
    uint64_t seed;
    mzdata_tiff tiff;         /* Inria only */
    int jpeg_quality;         /* Severstal only: 1..100 */
    mzdata_hdf5 hdf5;         /* SKM only */
} mzdata_opts;

/* Fills the defaults: 64x64 RGB, 8 images, seed 1, stripped uncompressed
 * 8-bit TIFF, JPEG quality 95; SKM volumes of 16x32x32 (D x H x W) in
 * contiguous datasets, h5py's format. */
void mzdata_defaults(mzdata_opts *o, enum mzdata_kind kind);

/* Writes the set into dir (created, with its subdirectories). Returns 0, or
 * -1 with a message in err. */
int mzdata_write(const mzdata_opts *o, const char *dir, char *err, size_t errlen);

/* One image's shapes (a volume's solids). */
#define MZDATA_MAX_SHAPES 8
typedef struct mzdata_shape {
    int kind;                 /* 0 disc, 1 rectangle (SKM: ellipsoid, box) */
    int32_t cy, cx, ry, rx;   /* centre and half sizes (a disc: ellipse of radii ry, rx) */
    int32_t cz, rz;           /* SKM: centre and half size in depth */
    uint32_t label;           /* Inria and Severstal 1; Cityscapes a label id; SKM a tissue 0..5 */
} mzdata_shape;

typedef struct mzdata_scene {
    enum mzdata_kind kind;
    uint64_t seed;            /* of this image */
    uint32_t height, width;
    uint32_t depth;           /* SKM */
    uint32_t nshapes;
    mzdata_shape shapes[MZDATA_MAX_SHAPES];
    uint32_t severstal_class; /* Severstal: the class of its defects (1..4); 0: none */
} mzdata_scene;

/* Image `index` of split `eval` (false: training) of a set. */
void mzdata_scene_make(mzdata_scene *s, const mzdata_opts *o, bool eval, uint32_t index);

/* The label of pixel (y, x): Inria and Severstal 0 or 1; Cityscapes a
 * label id (0..33). */
uint32_t mzdata_label(const mzdata_scene *s, uint32_t y, uint32_t x);
/* The colour of pixel (y, x) as written (before any JPEG loss); a gray
 * file holds mzdata_gray of it. */
void mzdata_rgb(const mzdata_scene *s, uint32_t y, uint32_t x, uint8_t rgb[3]);
uint8_t mzdata_gray(const uint8_t rgb[3]);

/* SKM: voxel (h, w, d) of a volume, the file's (X, Y, Z): its two echoes
 * as written (16-bit; some above 2^12, so that squares round in float32)
 * and its tissues, bit t for tissue t (patellar cartilage, femoral
 * cartilage, medial and lateral tibial cartilage, medial and lateral
 * meniscus): solids may overlap, and a voxel then has several. */
void mzdata_skm_voxel(const mzdata_scene *s, uint32_t h, uint32_t w, uint32_t d, int16_t echo[2],
                      unsigned *tissues);

/* Writes an SKM set (mzdata_write does): dir/image_files/MTR_NNN.h5 and
 * dir/annotations/v1.0.0/{train,val,test}.json (test: empty), the
 * annotations listing the files in no order of their own. */
int mzdata_skm_write(const mzdata_opts *o, const char *dir, char *err, size_t errlen);

/* File names: Inria "NAME.tif", Severstal "NAME.jpg", Cityscapes
 * "CITY/CITY_000000_0000NN" (before _leftImg8bit.png), SKM "MTR_NNN.h5"
 * (odd numbers train, even evaluate; in name order by index). */
void mzdata_name(const mzdata_opts *o, bool eval, uint32_t index, char *dst, size_t len);
/* Images of a split. */
uint32_t mzdata_count(const mzdata_opts *o, bool eval);
