/* Spatial partitions: one sample split into `parts` horizontal stripes,
 * each computed by its own wse-node (runconfig spatial_partitions), of
 * heights in slices of the model's downsampling (spatial_stripe_rows).
 * Every stripe runs the model compiled for its input (the same layers on
 * C x its rows x W), and the layers that
 * read rows beyond their stripe take them from the stripes above and below
 * (halo rows). This module checks that a model splits, and says per layer
 * which rows cross a stripe's border. Pure arithmetic. */
#pragma once

#include <stdbool.h>
#include <stdint.h>

#include "model.h"

typedef enum {
    SPATIAL_LOCAL,    /* the stripe's own rows make its output rows */
    SPATIAL_GATHER,   /* a window over rows (convolution, pooling): `top` rows from the
                       * stripe above and `bottom` from the one below make the input;
                       * backward, their gradients go back to their owners */
    SPATIAL_SCATTER,  /* a transposed convolution: the stripe's inputs write `top` rows
                       * of the stripe above and `bottom` of the one below, which add
                       * them; backward, those rows' gradients come back */
    SPATIAL_BILINEAR, /* bilinear upsampling: one row above and one below */
} spatial_kind;

typedef struct spatial_layer {
    spatial_kind kind;
    int top, bottom; /* halo rows (gather: of the input; scatter: of the output); bottom may
                      * be negative for a gather (the last rows are read only by the stripe
                      * below) */
    bool in_place;   /* a gather whose kernel reads the halo rows where they are (a unit-stride
                      * convolution), rather than from a copy of its input with them */
} spatial_layer;

typedef struct spatial_plan {
    int parts;               /* stripes per sample */
    int part;                /* the stripe this plan is of */
    int64_t full_h;          /* rows of the whole input */
    int64_t row0, rows;      /* the stripe's input rows: [row0, row0 + rows) */
    int nlayers;
    spatial_layer *layers;   /* per layer; owned */
    uint64_t halo_elems;     /* per sample: the largest extended buffer a gather or scatter
                              * layer works in (its rows with both halos, all channels) */
    uint64_t kept_elems;     /* per sample: halo rows kept from the forward pass for the
                              * backward pass, over every gather layer */
    uint64_t msg_elems;      /* per sample: the largest halo message, in one direction */
    uint64_t red_doubles;    /* per sample: the longest vector of sums a norm or the loss
                              * totals over the stripes (plus one count) */
} spatial_plan;

/* The elements of one row of a shape split into stripes: its width for
 * an image (C x H x W), a plane (H x W) for a volume (C x D x H x W), whose
 * "rows" along the split are its depth's planes (slabs). */
static inline int64_t spatial_row_elems(const model_shape *s)
{
    return s->ndim == 4 ? s->d[2] * s->d[3] : s->ndim == 3 ? s->d[2] : 1;
}

/* "rows" of an image, "planes" of a volume: for messages. */
static inline const char *spatial_rows_word(const model_shape *s)
{
    return s->ndim == 4 ? "planes" : "rows";
}

/* The rows of stripe `part` of `parts` of model `full`'s input: [*row0,
 * *row0 + *rows). The input's height goes in slices of the model's
 * downsampling (the least multiple of every layer's input rows per output
 * row: 16 for four 2x2 poolings), as evenly as they go, the first stripes
 * taking a slice more; so every layer of every stripe has whole rows.
 * Returns 0, or -EINVAL with a message naming the numbers (a model without
 * an image input, a layer whose rows are not a whole fraction of the
 * input's, fewer slices than stripes). */
int spatial_stripe_rows(const model *full, int parts, int part, int64_t *row0, int64_t *rows,
                        char *err, size_t errlen);

/* Fills sp for stripe `part` of `full` split into `parts` stripes,
 * `stripe` being the same model compiled at that stripe's rows
 * (spatial_stripe_rows). Refuses, with a message naming
 * the layer and the numbers: a layer that needs whole samples (dense,
 * flatten); rows that do not split into whole rows of every stripe at some
 * layer (the input height is then not a multiple of parts times the
 * model's downsampling, which the message gives); a halo wider than a
 * stripe. parts 1 gives a plan with every layer local. Returns 0 or
 * -EINVAL / -ENOMEM. */
int spatial_plan_init(spatial_plan *sp, const model *full, const model *stripe, int parts,
                      int part, char *err, size_t errlen);
void spatial_plan_free(spatial_plan *sp);

/* The model stripe `part` computes: the [model] table compiled at its
 * rows (spatial_stripe_rows) and with the plan's options (keep_outputs,
 * keep_costly; plan NULL: neither; its input ignored) (model_recompile),
 * into *stripe (the caller's: model_free), and sp filled
 * (spatial_plan_init). Returns 0, or a negative code with a message
 * ("FILE:LINE:COL: layer ..." for a layer that does not split). */
int spatial_compile(const toml_value *model_table, const model *full, int parts, int part,
                    const model_options *plan, model **stripe, spatial_plan *sp, char *err,
                    size_t errlen);

/* The bytes of a stripe's executor beyond the memory plan's, for n
 * samples: the two extended buffers, the kept halo rows and the sums. */
uint64_t spatial_extra_bytes(const spatial_plan *sp, int n);
