/* What the headers of TIFF and JPEG files say, read by hand: the planner
 * sizes and checks a data set (dataset_probe) without libtiff or libjpeg.
 * The decoders (ds_inria_read.c, ds_severstal_read.c) read the same fields
 * again through their libraries. */
#pragma once

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* Images wider or taller than this are refused before decoding. */
#define IMGHDR_MAX_SIDE 65536u

/* The TIFF tags' values that decide whether and how a file decodes. */
enum {
    IMGHDR_TIFF_MINISWHITE = 0,  /* PhotometricInterpretation */
    IMGHDR_TIFF_MINISBLACK = 1,
    IMGHDR_TIFF_RGB = 2,
    IMGHDR_TIFF_PALETTE = 3,
    IMGHDR_TIFF_CHUNKY = 1,      /* PlanarConfiguration */
    IMGHDR_TIFF_SEPARATE = 2,
    IMGHDR_TIFF_UINT = 1,        /* SampleFormat */
};

/* The first image (IFD) of a TIFF file. */
typedef struct imghdr_tiff {
    uint32_t width, height;
    uint32_t bits;            /* BitsPerSample of the first sample */
    bool bits_differ;         /* the samples do not all have `bits` */
    uint32_t samples;         /* SamplesPerPixel */
    uint32_t photometric;     /* IMGHDR_TIFF_*; UINT32_MAX when the tag is missing */
    uint32_t planar;          /* IMGHDR_TIFF_CHUNKY or _SEPARATE */
    uint32_t sample_format;   /* IMGHDR_TIFF_UINT, 2 int, 3 float, ... */
    uint32_t compression;     /* 1 none, 5 LZW, 8 deflate, 32773 PackBits, ... */
    bool tiled;               /* TileWidth given: tiles rather than strips */
} imghdr_tiff;

/* Reads the header and the first directory of the TIFF (or BigTIFF) file
 * at path. Returns 0, or a negative code with a message naming path. */
int imghdr_tiff_read(const char *path, imghdr_tiff *h, char *err, size_t errlen);

/* What a JPEG's frame header (SOFn) says. */
typedef struct imghdr_jpeg {
    uint32_t width, height;
    uint32_t components;      /* 1 gray, 3 colour (YCbCr or RGB), 4 CMYK */
    uint32_t precision;       /* bits per sample: 8 (12 and 16 exist) */
} imghdr_jpeg;

/* Reads the markers of the JPEG file at path up to its frame header.
 * Returns 0, or a negative code with a message naming path. */
int imghdr_jpeg_read(const char *path, imghdr_jpeg *h, char *err, size_t errlen);
