/* What fits a wafer: the largest batch a replica can take at the job's
 * input, and the largest square image it can take at a given batch, in a
 * mode, by the footprint (footprint.h). What `appliance-submit --plan`
 * answers a user's first question with. */
#pragma once

#include <stdint.h>

#include "footprint.h"
#include "jobspec.h"
#include "spatial.h"
#include "toml.h"

/* The largest side a square input can have: the model's limit of a
 * dimension. */
#define FIT_MAX_SIDE 65536
#define FIT_MAX_CUBE 4096 /* a volume's side: 4096^3 voxels, far past any host */

/* Bytes a replica of `batch` samples on `threads` threads needs in mode
 * (footprint_replica_bytes), or UINT64_MAX when out of memory to plan. */
uint64_t fit_replica_bytes(const model *m, int batch, int threads, Appliance__ExecMode mode,
                           unsigned optimizer_states);

/* The same for a share computed in micro-batches of `micro` samples
 * (footprint_init_micro). */
uint64_t fit_replica_bytes_micro(const model *m, int share, int micro, int threads,
                                 Appliance__ExecMode mode, unsigned optimizer_states);

/* What a replica of batch samples needs on a wafer, as the searches below
 * count it: in Weight Streaming with the layers in parts when whole ones
 * do not fit (fit_ws_parts, a default coordinator's chunk); with one batch
 * in flight where two do not fit (fit_feed_one); with the bfloat16 copies
 * spilled where only that fits and m->spill_room holds them (fit_spill). */
uint64_t fit_bytes_on(const model *m, int batch, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer);

/* The largest micro-batch, at most share, with which a replica of `share`
 * samples fits in wafer bytes; 0 when not even micro-batches of one do. */
int fit_largest_micro(const model *m, int share, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer);

/* The largest batch, at most max_batch, whose replica fits in wafer bytes;
 * 0 when not even one sample fits. */
int fit_largest_batch(const model *m, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer, int max_batch);

/* The largest side S such that the model of model_table compiles on a
 * [C, S, S] input (C the job's channels; a volume's model: a cube,
 * [C, S, S, S]) and a replica of `batch` samples
 * fits in wafer bytes. Sides are tried in steps of the smallest power of
 * two (at most 256) by which the job's side can grow with the model still
 * compiling, so pooling levels stay whole. Returns S, 0 when none fits, -1 when
 * the model's input is neither an image nor a volume. */
int fit_largest_side(const toml_value *model_table, const model *m, int batch, int threads,
                     Appliance__ExecMode mode, unsigned optimizer_states, uint64_t wafer);

/* The largest input of the job's own aspect that fits as above: its sides
 * (D, H, W of a volume; H, W of an image) scaled together, each a multiple
 * of the step, the shape in *out (the job's when none fits). Returns the
 * smallest side, 0 when none fits, -1 when the input is neither an image
 * nor a volume. */
int fit_largest_aspect(const toml_value *model_table, const model *m, int batch, int threads,
                       Appliance__ExecMode mode, unsigned optimizer_states, uint64_t wafer,
                       model_shape *out);

/* What a job runs as on wse-nodes of `wafer` bytes and `threads` threads,
 * with a batch share of `share` samples: the one decision the coordinator's
 * planner and `appliance-submit --plan --wafer-memory` both take. */
typedef struct fit_choice {
    Appliance__ExecMode mode;  /* the file's mode, or what "auto" picks: Pipelined when it fits */
    uint64_t micro;            /* micro-batch (Pipelined only), 0: the whole share at once */
    uint64_t need_pipe;        /* bytes per replica in Pipelined, with the micro-batch */
    uint64_t need_ws;          /* bytes per replica in Weight Streaming */
    bool keep_outputs;         /* fit_keep_outputs: every output kept, none recomputed */
    bool keep_costly;          /* fit_keep_outputs: not every output, but every costly one
                                  (no convolution made again but the cheap ones: model.lighten
                                  off) */
    bool feed_one;             /* fit_feed_one: one batch in flight from each worker */
    bool spill;                /* fit_spill: the bfloat16 copies in a file (model.spill_packed) */
    uint64_t spilled;          /* fit_spill: that file's bytes */
} fit_choice;

/* Weight Streaming in parts (footprint_ws_parts): when a replica needs
 * need_ws bytes with slots of whole layers and that is more than the wafer,
 * the part_elems (to *part; 0 when whole layers fit or no split helps)
 * whose slots fit, and what the replica then needs; need_ws otherwise. */
uint64_t fit_ws_parts(const model *m, uint64_t need_ws, uint64_t wafer, uint64_t chunk_elems,
                      uint64_t *part);

/* The chunk of a default coordinator, in elements (the plan's chunk_elems). */
#define FIT_DEFAULT_CHUNK_ELEMS ((1u << 20) / 4)

/* train_input.micro_batch_size: an integer below the share sets it (and
 * Pipelined); "auto" takes none when the whole share fits in Pipelined, else
 * the largest micro-batch that does. Returns 0, or -E2BIG with the reason
 * in err when the micro-batch asked for cannot run (in Weight Streaming, or
 * too large for the wafer: the message says what fits). Whether the chosen
 * mode fits is the caller's to say (need_* against wafer). */
int fit_choose(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
               fit_choice *c, char *err, size_t errlen);

/* After fit_choose: whether the chosen mode (in whole layers, for Weight
 * Streaming) still fits with every layer's output kept for the backward
 * pass rather than made again (model.keep_outputs), with `extra` bytes
 * beside the executor's (spatial_extra_bytes). If so, sets
 * c->keep_outputs and the chosen mode's need (without extra) to what it
 * needs so. Never with bfloat16 activations: who asks for them asks for
 * the memory. Else whether it fits with every costly output kept (the
 * lean plan not lightened, model.lighten off: fewer convolutions made
 * again); if so sets c->keep_costly and the need likewise. */
void fit_keep_outputs(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                      uint64_t extra, fit_choice *c);

/* After fit_keep_outputs: where the chosen mode's need and `extra` are
 * more than the wafer, whether they fit with one batch in flight from
 * each worker rather than two (model.feed_one, Plan.feed_credits 1: the
 * next batch then comes after a step rather than during it, which a step
 * of minutes does not notice). If so sets c->feed_one and the mode's need
 * (without extra). */
void fit_feed_one(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                  uint64_t extra, fit_choice *c);

/* After fit_feed_one: where the chosen mode's need and `extra` are still
 * more than the wafer, whether they fit with the bfloat16 copies of the
 * kept outputs (act_bf16) in a file of at most `disk` bytes rather than
 * in memory (model.spill_packed, Plan.spill_packed: each is written once
 * a step and read back where the backward pass reads it). If so sets
 * c->spill, c->spilled and the mode's need (without extra), two batches
 * in flight again where that still fits. */
void fit_spill(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
               uint64_t extra, uint64_t disk, fit_choice *c);

/* Spatial partitions: the job as one wse-node of a replica sees it, its
 * model the stripe's (spatial_compile), and what crosses the stripes'
 * borders. parts 1: the job itself, sp empty. */
typedef struct fit_stripes {
    int parts;
    jobspec spec;     /* the job with the stripe's model (owned) when parts > 1; its
                       * document is the job's (not owned) */
    spatial_plan sp;
    /* parts 1: the whole sample with rows as depth (model_rows_as_depth),
     * spec's model that one (owned) */
    bool rows;
} fit_stripes;

#define FIT_MAX_STRIPES 64 /* stripes of one sample (msgcheck's limit) */

/* Fills ps for `parts` stripes of spec's samples, compiled from spec's
 * [model] table. Returns 0, or a negative code with a message naming the file, the layer
 * and the numbers when the model does not split. Free with
 * fit_stripes_free. */
int fit_stripes_of(const jobspec *spec, int parts, fit_stripes *ps, char *err, size_t errlen);
void fit_stripes_free(fit_stripes *ps);

/* The job a wse-node computes by ps: its stripe's or its rows as depth, or
 * spec itself. */
static inline const jobspec *fit_stripes_spec(const fit_stripes *ps, const jobspec *spec)
{
    return ps->parts > 1 || ps->rows ? &ps->spec : spec;
}

/* The stripes of the job on nr wse-nodes of `threads` threads and `wafer`
 * bytes: runconfig.spatial_partitions, or for "auto" none when a sample
 * fits one wafer, else the fewest that divide the wse-nodes and fit (none
 * when no count fits: the plan of whole samples then says why). Whole
 * samples of an image model that do not fit as they are take rows as
 * depth (ps->rows) where that fits, or where none fits and it needs less.
 * Returns 0 or a negative code with a message. */
int fit_choose_stripes(const jobspec *spec, size_t nr, unsigned threads, uint64_t wafer,
                       uint64_t chunk_elems, fit_stripes *ps, char *err, size_t errlen);
