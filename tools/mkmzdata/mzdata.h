/* Small synthetic data sets in the layouts of the Model Zoo U-Net's three
 * 2D sets (Inria Aerial TIFF, Severstal JPEG + train.csv, Cityscapes PNG),
 * for tests, examples and cluster tests: never a download. Each image is
 * a textured background with shapes drawn in, brighter than it, and its
 * mask is the shapes, so that a U-Net can learn them. A pixel is a pure
 * function of (seed, image, y, x): the tests compute what was written
 * (mzdata_scene, mzdata_rgb, mzdata_label) instead of reading it back. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

enum mzdata_kind { MZDATA_INRIA, MZDATA_SEVERSTAL, MZDATA_CITYSCAPES };

/* How the TIFF files of an Inria set are laid out (libtiff's numbers). */
typedef struct mzdata_tiff {
    uint32_t tile;            /* tile side (a multiple of 16); 0: strips */
    uint32_t rows_per_strip;  /* strips: rows in each; 0: libtiff's default */
    uint16_t compression;     /* COMPRESSION_NONE (1), _LZW (5), _ADOBE_DEFLATE (8), _PACKBITS */
    bool planar;              /* RGB in separate planes rather than interleaved */
    uint16_t bits;            /* 8; 16 writes images no reader takes (tests) */
} mzdata_tiff;

typedef struct mzdata_opts {
    enum mzdata_kind kind;
    uint32_t height, width;   /* of every image */
    uint32_t channels;        /* 1 gray or 3 RGB files */
    uint32_t count;           /* training images (Severstal: all images); evaluation: a quarter */
    uint64_t seed;
    mzdata_tiff tiff;         /* Inria only */
    int jpeg_quality;         /* Severstal only: 1..100 */
} mzdata_opts;

/* Fills the defaults: 64x64 RGB, 8 images, seed 1, stripped uncompressed
 * 8-bit TIFF, JPEG quality 95. */
void mzdata_defaults(mzdata_opts *o, enum mzdata_kind kind);

/* Writes the set into dir (created, with its subdirectories). Returns 0, or
 * -1 with a message in err. */
int mzdata_write(const mzdata_opts *o, const char *dir, char *err, size_t errlen);

/* One image's shapes. */
#define MZDATA_MAX_SHAPES 8
typedef struct mzdata_shape {
    int kind;                 /* 0 disc, 1 rectangle */
    int32_t cy, cx, ry, rx;   /* centre and half sizes (a disc: ellipse of radii ry, rx) */
    uint32_t label;           /* Inria and Severstal 1; Cityscapes a label id */
} mzdata_shape;

typedef struct mzdata_scene {
    enum mzdata_kind kind;
    uint64_t seed;            /* of this image */
    uint32_t height, width;
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

/* File names: Inria "NAME.tif", Severstal "NAME.jpg", Cityscapes
 * "CITY/CITY_000000_0000NN" (before _leftImg8bit.png). */
void mzdata_name(const mzdata_opts *o, bool eval, uint32_t index, char *dst, size_t len);
/* Images of a split. */
uint32_t mzdata_count(const mzdata_opts *o, bool eval);
