/* mkmzdata: writes a small synthetic data set in the layout of one of the
 * Model Zoo U-Net's processors (mzdata.h), for tests and examples. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#include "mzdata.h"

static void usage(FILE *f)
{
    fprintf(f,
            "usage: mkmzdata inria|severstal|cityscapes|skm DIR [options]\n"
            "  --size HxW        image height and width (default 64x64)\n"
            "  --size DxHxW      skm: volume depth, height and width (default 16x32x32)\n"
            "  --channels C      1 (gray) or 3 (RGB) files (default 3; not skm)\n"
            "  --count N         training images (Severstal: all; default 8); evaluation: N/4\n"
            "  --seed S          what the images look like (default 1)\n"
            "Inria TIFF layout:\n"
            "  --tile T          tiles of T x T (a multiple of 16) instead of strips\n"
            "  --rows-per-strip R\n"
            "  --compression none|lzw|deflate|packbits\n"
            "  --planar          RGB in separate planes\n"
            "Severstal:\n"
            "  --quality Q       JPEG quality 1..100 (default 95)\n"
            "SKM-TEA (HDF5):\n"
            "  --chunk C         datasets in chunks of C a side, deflated (default contiguous)\n");
}

static int parse_u32(const char *s, uint32_t lo, uint32_t hi, uint32_t *v)
{
    char *e;
    errno = 0;
    unsigned long n = strtoul(s, &e, 10);
    if (!*s || *e || errno || n < lo || n > hi)
        return -1;
    *v = (uint32_t)n;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && (strcmp(argv[1], "-h") == 0 || strcmp(argv[1], "--help") == 0)) {
        usage(stdout);
        return 0;
    }
    if (argc < 3) {
        usage(stderr);
        return 2;
    }
    mzdata_opts o;
    if (strcmp(argv[1], "inria") == 0)
        mzdata_defaults(&o, MZDATA_INRIA);
    else if (strcmp(argv[1], "severstal") == 0)
        mzdata_defaults(&o, MZDATA_SEVERSTAL);
    else if (strcmp(argv[1], "cityscapes") == 0)
        mzdata_defaults(&o, MZDATA_CITYSCAPES);
    else if (strcmp(argv[1], "skm") == 0)
        mzdata_defaults(&o, MZDATA_SKM);
    else {
        fprintf(stderr, "mkmzdata: \"%s\" is none of inria, severstal, cityscapes, skm\n",
                argv[1]);
        return 2;
    }
    const bool skm = o.kind == MZDATA_SKM;
    const char *dir = argv[2];
    for (int i = 3; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        uint32_t n;
        bool ok = v != NULL;
        if (strcmp(a, "--planar") == 0) {
            o.tiff.planar = true;
            continue;
        }
        if (strcmp(a, "--size") == 0 && v && skm) {
            /* the solids' arithmetic is exact in 64 bits up to 1024 a side */
            unsigned dd, h, w;
            char tail;
            ok = sscanf(v, "%ux%ux%u%c", &dd, &h, &w, &tail) == 3 && dd >= 1 && h >= 1 &&
                 w >= 1 && dd <= 1024 && h <= 1024 && w <= 1024;
            o.depth = dd;
            o.height = h;
            o.width = w;
        } else if (strcmp(a, "--size") == 0 && v) {
            unsigned h, w;
            char tail;
            ok = sscanf(v, "%ux%u%c", &h, &w, &tail) == 2 && h >= 4 && w >= 4 && h <= 16384 &&
                 w <= 16384;
            o.height = h;
            o.width = w;
        } else if (strcmp(a, "--chunk") == 0 && v && skm) {
            ok = parse_u32(v, 1, 1024, &o.hdf5.chunk) == 0;
        } else if (strcmp(a, "--channels") == 0 && v && !skm) {
            ok = parse_u32(v, 1, 3, &n) == 0 && n != 2;
            o.channels = n;
        } else if (strcmp(a, "--count") == 0 && v) {
            /* skm: MTR_001 .. MTR_999 */
            ok = parse_u32(v, 1, skm ? 499 : 100000, &o.count) == 0;
        } else if (strcmp(a, "--seed") == 0 && v) {
            char *e;
            errno = 0;
            o.seed = strtoull(v, &e, 10);
            ok = *v && !*e && !errno;
        } else if (strcmp(a, "--tile") == 0 && v) {
            ok = parse_u32(v, 16, 4096, &o.tiff.tile) == 0 && o.tiff.tile % 16 == 0;
        } else if (strcmp(a, "--rows-per-strip") == 0 && v) {
            ok = parse_u32(v, 1, 1u << 30, &o.tiff.rows_per_strip) == 0;
        } else if (strcmp(a, "--compression") == 0 && v) {
            o.tiff.compression = strcmp(v, "none") == 0       ? COMPRESSION_NONE
                                 : strcmp(v, "lzw") == 0      ? COMPRESSION_LZW
                                 : strcmp(v, "deflate") == 0  ? COMPRESSION_ADOBE_DEFLATE
                                 : strcmp(v, "packbits") == 0 ? COMPRESSION_PACKBITS
                                                              : 0;
            ok = o.tiff.compression != 0;
        } else if (strcmp(a, "--quality") == 0 && v) {
            ok = parse_u32(v, 1, 100, &n) == 0;
            o.jpeg_quality = (int)n;
        } else {
            fprintf(stderr, "mkmzdata: unknown option %s\n", a);
            usage(stderr);
            return 2;
        }
        if (!ok) {
            fprintf(stderr, "mkmzdata: %s: bad value \"%s\"\n", a, v ? v : "");
            return 2;
        }
        i++;
    }
    char err[512];
    if (mzdata_write(&o, dir, err, sizeof(err)) < 0) {
        fprintf(stderr, "mkmzdata: %s\n", err);
        return 1;
    }
    return 0;
}
