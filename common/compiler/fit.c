/* What fits a wafer: the largest batch, the largest square image. */
#include "fit.h"

#include <stdbool.h>
#include <stddef.h>

uint64_t fit_replica_bytes(const model *m, int batch, int threads, Appliance__ExecMode mode,
                           unsigned optimizer_states)
{
    footprint f;
    if (footprint_init(&f, m, batch, threads) < 0)
        return UINT64_MAX;
    uint64_t bytes = footprint_replica_bytes(&f, m, mode, optimizer_states);
    footprint_free(&f);
    return bytes;
}

int fit_largest_batch(const model *m, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer, int max_batch)
{
    /* the need grows with the batch: bisect [lo fits, hi does not] */
    if (fit_replica_bytes(m, 1, threads, mode, optimizer_states) > wafer)
        return 0;
    int lo = 1, hi = max_batch + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fit_replica_bytes(m, mid, threads, mode, optimizer_states) <= wafer)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Whether the model compiles on a [c, side, side] input and, when it does,
 * the bytes of a replica with the sample encodings of `like` (UINT64_MAX
 * when it does not). */
static uint64_t fit__side_bytes(const toml_value *mt, const model *like, int64_t c, int64_t side,
                                int batch, int threads, Appliance__ExecMode mode, unsigned states)
{
    model_shape in = {.ndim = 3, .d = {c, side, side}};
    char err[256];
    model *m = model_compile_as(mt, &in, err, sizeof(err));
    if (!m)
        return UINT64_MAX;
    m->input_unorm8 = like->input_unorm8;
    m->labels_u8 = like->labels_u8;
    uint64_t bytes = fit_replica_bytes(m, batch, threads, mode, states);
    model_free(m);
    return bytes;
}

int fit_largest_side(const toml_value *mt, const model *m, int batch, int threads,
                     Appliance__ExecMode mode, unsigned optimizer_states, uint64_t wafer)
{
    if (m->input.ndim != 3)
        return -1;
    int64_t c = m->input.d[0], side = m->input.d[1] < m->input.d[2] ? m->input.d[1] : m->input.d[2];
    /* the step: the smallest power of two (at most 256) by which the job's
     * side can grow and the model still compile (a U-Net's pooling levels
     * want multiples of 16) */
    int64_t step = 1;
    while (step < 256 &&
           fit__side_bytes(mt, m, c, side + step, 1, threads, mode, optimizer_states) == UINT64_MAX)
        step *= 2;
    /* bisect over multiples of step: k * step fits, hi * step does not */
    int64_t lo = 0, hi = FIT_MAX_SIDE / step + 1;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        if (fit__side_bytes(mt, m, c, mid * step, batch, threads, mode, optimizer_states) <= wafer)
            lo = mid;
        else
            hi = mid;
    }
    return (int)(lo * step);
}
