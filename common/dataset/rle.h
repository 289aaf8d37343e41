/* The run-length masks of Kaggle's Severstal steel defect set: train.csv
 * (ImageId,ClassId,EncodedPixels) parsed into rows, and one row's runs
 * decoded into a mask. */
#pragma once

#include <stddef.h>
#include <stdint.h>

/* One row of train.csv. The strings point into the table's copy of the
 * text. */
typedef struct rle_row {
    const char *image;        /* ImageId, a file name */
    uint32_t class_id;        /* ClassId */
    const char *runs;         /* EncodedPixels: "start length ..." ("" or "-1": none) */
    uint32_t line;            /* its line in the file, from 1 (the header) */
} rle_row;

typedef struct rle_table {
    char *text;               /* the file's text, cut into the rows' strings; owned */
    rle_row *rows;            /* in file order; owned */
    size_t count;
} rle_table;

/* Parses the text of a train.csv: a header naming the columns ImageId,
 * ClassId and EncodedPixels (in any order, other columns ignored), then a
 * row per line (\n or \r\n; blank lines skipped), fields separated by
 * commas, optionally in double quotes ("" for a quote). Copies the text.
 * Returns 0 with *t filled (rle_table_deinit), or -EINVAL with a message
 * naming `name` and the line. */
int rle_table_parse(rle_table *t, const char *text, size_t len, const char *name, char *err,
                    size_t errlen);
void rle_table_deinit(rle_table *t);

/* Decodes runs into mask (h * w bytes, row-major, y * w + x), 1 inside a
 * run and 0 elsewhere. A run is a 1-based start and a length, pairs
 * separated by white space; pixel k (from 0) of the image is in column k /
 * h, row k % h (top to bottom, then left to right, as Kaggle numbers
 * them). "" and "-1" are empty masks. Returns 0, or -EINVAL with a
 * message (the count of numbers, the token or the run that is wrong). */
int rle_decode(const char *runs, uint32_t h, uint32_t w, uint8_t *mask, char *err, size_t errlen);
