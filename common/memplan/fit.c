/* What fits a wafer: the largest batch, the largest square image. */
#include "fit.h"

#include <errno.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "units.h"

uint64_t fit_replica_bytes(const model *m, int batch, int threads, Appliance__ExecMode mode,
                           unsigned optimizer_states)
{
    return fit_replica_bytes_micro(m, batch, batch, threads, mode, optimizer_states);
}

uint64_t fit_replica_bytes_micro(const model *m, int share, int micro, int threads,
                                 Appliance__ExecMode mode, unsigned optimizer_states)
{
    footprint f;
    if (footprint_init_micro(&f, m, share, micro, threads) < 0)
        return UINT64_MAX;
    uint64_t bytes = footprint_replica_bytes(&f, m, mode, optimizer_states);
    footprint_free(&f);
    return bytes;
}

int fit_largest_micro(const model *m, int share, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer)
{
    if (fit_replica_bytes_micro(m, share, 1, threads, mode, optimizer_states) > wafer)
        return 0;
    int lo = 1, hi = share + 1; /* lo fits, hi does not */
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fit_replica_bytes_micro(m, share, mid, threads, mode, optimizer_states) <= wafer)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

uint64_t fit_bytes_on(const model *m, int batch, int threads, Appliance__ExecMode mode,
                           unsigned optimizer_states, uint64_t wafer)
{
    uint64_t need = fit_replica_bytes(m, batch, threads, mode, optimizer_states), part;
    /* the bfloat16 copies in a spill file where that is what fits (fit_spill) */
    if (need != UINT64_MAX && need > wafer && m->act_bf16 && m->spill_room && !m->spill_packed) {
        model sm = *m; /* its layers and tensors shared, read only */
        sm.spill_packed = true;
        footprint f;
        if (footprint_init(&f, &sm, batch, threads) == 0) {
            uint64_t spilled = f.spilled, n = footprint_replica_bytes(&f, &sm, mode,
                                                                      optimizer_states);
            footprint_free(&f);
            if (spilled <= m->spill_room && n < need)
                need = n;
        }
    }
    /* one batch in flight holds one batch's bytes less (footprint.batches) */
    if (need != UINT64_MAX && need > wafer && !m->feed_one)
        need -= footprint_batch_bytes(m, batch);
    if (mode == APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING && need != UINT64_MAX)
        need = fit_ws_parts(m, need, wafer, FIT_DEFAULT_CHUNK_ELEMS, &part);
    return need;
}

int fit_largest_batch(const model *m, int threads, Appliance__ExecMode mode,
                      unsigned optimizer_states, uint64_t wafer, int max_batch)
{
    /* the need grows with the batch: bisect [lo fits, hi does not] */
    if (fit_bytes_on(m, 1, threads, mode, optimizer_states, wafer) > wafer)
        return 0;
    int lo = 1, hi = max_batch + 1;
    while (hi - lo > 1) {
        int mid = lo + (hi - lo) / 2;
        if (fit_bytes_on(m, mid, threads, mode, optimizer_states, wafer) <= wafer)
            lo = mid;
        else
            hi = mid;
    }
    return lo;
}

/* Whether the model compiles on input `in` and, when it does, the bytes of
 * a replica with the sample encodings of `like` (UINT64_MAX when it does
 * not). */
static uint64_t fit__shape_bytes(const toml_value *mt, const model *like, const model_shape *in,
                                 int batch, int threads, Appliance__ExecMode mode, unsigned states,
                                 uint64_t wafer)
{
    char err[256];
    model *m = model_compile_as(mt, in, err, sizeof(err));
    if (!m)
        return UINT64_MAX;
    m->input_unorm8 = like->input_unorm8;
    m->labels_u8 = like->labels_u8;
    m->eval_batch = like->eval_batch;
    m->spill_room = like->spill_room;
    if (like->rows_as_depth && model_rows_as_depth(m, err, sizeof(err)) < 0) {
        model_free(m);
        return UINT64_MAX;
    }
    uint64_t bytes = fit_bytes_on(m, batch, threads, mode, states, wafer);
    model_free(m);
    return bytes;
}

/* The job's input with its spatial sides scaled so that the smallest is
 * `base`, each rounded to a multiple of step (at least step): a square or
 * cube when `cube`. */
/* The input as the job gives it: an image's [C, H, W] where the model takes
 * its rows as depth. */
static model_shape fit__job_input(const model *m)
{
    if (!m->rows_as_depth)
        return m->input;
    return (model_shape){.ndim = 3, .d = {m->input.d[0], m->input.d[1], m->input.d[3], 1}};
}

static model_shape fit__scaled(const model_shape *job, int64_t base, int64_t step, bool cube)
{
    model_shape in = *job;
    int64_t least = in.d[1];
    for (int i = 2; i < in.ndim; i++)
        least = in.d[i] < least ? in.d[i] : least;
    for (int i = 1; i < in.ndim; i++) {
        if (cube) {
            in.d[i] = base;
            continue;
        }
        /* nearest multiple of step to d * base / least */
        int64_t k = (job->d[i] * base + least * step / 2) / (least * step);
        in.d[i] = (k < 1 ? 1 : k) * step;
    }
    return in;
}

/* The largest base side (a multiple of the step by which the job's sides
 * can grow with the model still compiling) whose scaled input fits; its
 * shape in *out. */
static int fit__largest_scaled(const toml_value *mt, const model *m, int batch, int threads,
                               Appliance__ExecMode mode, unsigned states, uint64_t wafer, bool cube,
                               model_shape *out)
{
    const model_shape job = fit__job_input(m);
    if (job.ndim != 3 && job.ndim != 4)
        return -1;
    int64_t least = job.d[1], most = job.d[1];
    for (int i = 2; i < job.ndim; i++) {
        least = job.d[i] < least ? job.d[i] : least;
        most = job.d[i] > most ? job.d[i] : most;
    }
    if (cube)
        most = least;
    /* the step: the smallest power of two (at most 256) by which the job's
     * sides can grow and the model still compile (a U-Net's pooling levels
     * want multiples of 16) */
    int64_t step = 1;
    for (; step < 256; step *= 2) {
        model_shape grown = job;
        for (int i = 1; i < grown.ndim; i++)
            grown.d[i] = (cube ? least : grown.d[i]) + step;
        if (fit__shape_bytes(mt, m, &grown, 1, threads, mode, states, wafer) != UINT64_MAX)
            break;
    }
    /* bisect over bases of k * step: lo fits, hi does not (the largest
     * side stays within the model's limit of a dimension) */
    int64_t limit = job.ndim == 4 ? FIT_MAX_CUBE : FIT_MAX_SIDE;
    int64_t lo = 0, hi = limit * least / most / step + 1;
    while (hi - lo > 1) {
        int64_t mid = lo + (hi - lo) / 2;
        model_shape in = fit__scaled(&job, mid * step, step, cube);
        if (fit__shape_bytes(mt, m, &in, batch, threads, mode, states, wafer) <= wafer)
            lo = mid;
        else
            hi = mid;
    }
    if (out)
        *out = lo ? fit__scaled(&job, lo * step, step, cube) : job;
    return (int)(lo * step);
}

int fit_largest_side(const toml_value *mt, const model *m, int batch, int threads,
                     Appliance__ExecMode mode, unsigned optimizer_states, uint64_t wafer)
{
    return fit__largest_scaled(mt, m, batch, threads, mode, optimizer_states, wafer, true, NULL);
}

int fit_largest_aspect(const toml_value *mt, const model *m, int batch, int threads,
                       Appliance__ExecMode mode, unsigned optimizer_states, uint64_t wafer,
                       model_shape *out)
{
    return fit__largest_scaled(mt, m, batch, threads, mode, optimizer_states, wafer, false, out);
}

int fit_choose(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
               fit_choice *c, char *err, size_t errlen)
{
    const model *m = spec->model;
    const Appliance__ExecMode pipe = APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    const Appliance__ExecMode ws = APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING;
    unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
    int sh = (int)share, th = (int)(threads ? threads : 1);
    bool want_pipe = strcmp(spec->mode, "pipelined") == 0;
    /* a sparse model trains in Weight Streaming: memoryx keeps its masks */
    bool want_ws = strcmp(spec->mode, "weight_streaming") == 0 || spec->sparsity.present;
    int64_t want = spec->train.micro_batch_size;
    memset(c, 0, sizeof(*c));
    c->need_ws = fit_replica_bytes(m, sh, th, ws, states);
    c->need_pipe = fit_replica_bytes(m, sh, th, pipe, states);
    if (want == JOBSPEC_AUTO && !want_ws && c->need_pipe > wafer) {
        int fit = fit_largest_micro(m, sh, th, pipe, states, wafer);
        if (fit >= 1 && (uint64_t)fit < share)
            c->micro = (uint64_t)fit;
    } else if (want > 0 && (uint64_t)want < share) {
        if (want_ws) {
            snprintf(err, errlen, "%s: train_input.micro_batch_size: micro-batches run in "
                     "Pipelined execution; this job asks for mode = \"weight_streaming\"",
                     spec->source);
            return -E2BIG;
        }
        uint64_t need = fit_replica_bytes_micro(m, sh, (int)want, th, pipe, states);
        if (need > wafer) {
            char n1[32], w1[32];
            units_format_size(need, n1, sizeof(n1));
            units_format_size(wafer, w1, sizeof(w1));
            int fit = fit_largest_micro(m, sh, th, pipe, states, wafer);
            if (fit >= 1)
                snprintf(err, errlen, "%s: train_input.micro_batch_size: micro-batches of %lld "
                         "need %s per replica, the smallest wafer has %s; micro-batches of %d "
                         "fit (or use \"auto\")", spec->source, (long long)want, n1, w1, fit);
            else
                snprintf(err, errlen, "%s: train_input.micro_batch_size: micro-batches of even "
                         "one sample do not fit a wafer of %s; use wse-nodes with more wafer "
                         "memory (--wafer-memory)", spec->source, w1);
            return -E2BIG;
        }
        c->micro = (uint64_t)want;
    }
    if (c->micro)
        c->need_pipe = fit_replica_bytes_micro(m, sh, (int)c->micro, th, pipe, states);
    c->mode = want_pipe || c->micro || (!want_ws && c->need_pipe <= wafer) ? pipe : ws;
    return 0;
}

void fit_keep_outputs(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                      uint64_t extra, fit_choice *c)
{
    const Appliance__ExecMode pipe = APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    c->keep_outputs = c->keep_costly = false;
    model keep = *spec->model; /* its layers and tensors shared, read only */
    unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
    int sh = (int)share, th = (int)(threads ? threads : 1);
    bool pipelined = c->mode == pipe;
    for (int heavy = 1; heavy >= 0; heavy--) {
        if (heavy && spec->model->act_bf16)
            continue;
        keep.keep_outputs = heavy;
        keep.lighten = false;
        uint64_t need = fit_replica_bytes_micro(&keep, sh,
                                                pipelined && c->micro ? (int)c->micro : sh, th,
                                                c->mode, states);
        if (need == UINT64_MAX || need + extra > wafer)
            continue;
        c->keep_outputs = heavy;
        c->keep_costly = true;
        if (pipelined)
            c->need_pipe = need;
        else
            c->need_ws = need;
        return;
    }
}

void fit_feed_one(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                  uint64_t extra, fit_choice *c)
{
    (void)threads;
    uint64_t *need = c->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED ? &c->need_pipe : &c->need_ws;
    /* one batch in flight holds one batch's bytes less (footprint.batches) */
    uint64_t one = footprint_batch_bytes(spec->model, (int)share);
    c->feed_one = false;
    if (*need == UINT64_MAX || *need + extra <= wafer || *need - one + extra > wafer)
        return;
    c->feed_one = true;
    *need -= one;
}

void fit_spill(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
               uint64_t extra, uint64_t disk, fit_choice *c)
{
    const Appliance__ExecMode pipe = APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    uint64_t *need = c->mode == pipe ? &c->need_pipe : &c->need_ws;
    c->spill = false;
    c->spilled = 0;
    if (*need == UINT64_MAX || *need + extra <= wafer || !spec->model->act_bf16 || !disk)
        return;
    model sm = *spec->model; /* its layers and tensors shared, read only */
    sm.keep_outputs = c->keep_outputs;
    sm.lighten = !c->keep_costly;
    sm.spill_packed = true;
    unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
    int sh = (int)share, mb = c->mode == pipe && c->micro ? (int)c->micro : sh;
    for (int one = 0; one <= 1; one++) { /* two batches in flight where they fit */
        sm.feed_one = one;
        footprint f;
        if (footprint_init_micro(&f, &sm, sh, mb, (int)(threads ? threads : 1)) < 0)
            return;
        uint64_t spilled = f.spilled, n = footprint_replica_bytes(&f, &sm, c->mode, states);
        footprint_free(&f);
        if (n + extra > wafer || spilled == 0 || spilled > disk)
            continue;
        c->spill = true;
        c->spilled = spilled;
        c->feed_one = one;
        *need = n;
        return;
    }
}

uint64_t fit_ws_parts(const model *m, uint64_t need_ws, uint64_t wafer, uint64_t chunk_elems,
                      uint64_t *part)
{
    *part = 0;
    if (need_ws <= wafer)
        return need_ws;
    uint64_t whole = footprint_wslots_bytes(m, 0, chunk_elems);
    uint64_t rest = need_ws - whole;
    if (rest >= wafer || !(*part = footprint_ws_part_fit(m, wafer - rest, chunk_elems)))
        return need_ws;
    return rest + footprint_wslots_bytes(m, *part, chunk_elems);
}

/* What one wse-node of a replica needs for its share of `share` samples of
 * spec's model with `extra` bytes beside the executor's, as the plan
 * decides it (fit_choose, one batch in flight where two do not fit,
 * Weight Streaming in parts); UINT64_MAX when it cannot plan. */
static uint64_t fit__need(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                          uint64_t chunk_elems, uint64_t extra)
{
    fit_choice c;
    char err[512];
    if (fit_choose(spec, share, threads, wafer, &c, err, sizeof(err)) < 0)
        return UINT64_MAX;
    fit_feed_one(spec, share, threads, wafer, extra, &c);
    if (c.mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED)
        return c.need_pipe + extra;
    uint64_t part;
    return fit_ws_parts(spec->model, c.need_ws + extra, wafer, chunk_elems, &part);
}

/* Whether that fits the wafer. */
static bool fit__fits(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                      uint64_t chunk_elems, uint64_t extra)
{
    return fit__need(spec, share, threads, wafer, chunk_elems, extra) <= wafer;
}

int fit_stripes_of(const jobspec *spec, int parts, fit_stripes *ps, char *err, size_t errlen)
{
    memset(ps, 0, sizeof(*ps));
    ps->parts = 1;
    if (parts <= 1)
        return 0;
    const toml_value *mt = jobspec_model_table(spec);
    if (!mt) {
        snprintf(err, errlen, "%s: no [model]", spec->source);
        return -EINVAL;
    }
    model *stripe;
    char why[512];
    /* the first stripe is the tallest: what a wse-node holds at most; the
     * last the shortest: where a window reaches furthest past its rows */
    int rc = spatial_compile(mt, spec->model, parts, 0, NULL, &stripe, &ps->sp, why, sizeof(why));
    if (rc == 0) {
        model *last;
        spatial_plan lsp;
        if ((rc = spatial_compile(mt, spec->model, parts, parts - 1, NULL, &last, &lsp, why,
                                  sizeof(why))) == 0) {
            model_free(last);
            spatial_plan_free(&lsp);
        } else {
            model_free(stripe);
            spatial_plan_free(&ps->sp);
        }
    }
    if (rc < 0) {
        if (strncmp(why, spec->source, strlen(spec->source)) == 0)
            snprintf(err, errlen, "%s", why);
        else
            snprintf(err, errlen, "%s: runconfig.spatial_partitions = %d: %s", spec->source,
                     parts, why);
        return rc;
    }
    ps->spec = *spec;
    ps->spec.model = stripe;
    ps->parts = parts;
    return 0;
}

void fit_stripes_free(fit_stripes *ps)
{
    if (ps->parts > 1 || ps->rows)
        model_free(ps->spec.model);
    spatial_plan_free(&ps->sp);
    memset(ps, 0, sizeof(*ps));
    ps->parts = 1;
}

/* Whole samples of `share` that do not fit as they are: rows as depth into
 * ps (parts 1) where that fits, or where `anyway` and it needs less than
 * the image model. Returns whether ps took it. */
static bool fit__rows(const jobspec *spec, uint64_t share, unsigned threads, uint64_t wafer,
                      uint64_t chunk_elems, bool anyway, fit_stripes *ps)
{
    const toml_value *mt = jobspec_model_table(spec);
    if (!mt || spec->model->input.ndim != 3 || spec->sparsity.present)
        return false;
    char why[512];
    model_options o = {.rows_as_depth = true};
    model *rows = model_recompile(mt, spec->model, &o, why, sizeof(why));
    if (!rows)
        return false;
    jobspec t = *spec;
    t.model = rows;
    uint64_t need = fit__need(&t, share, threads, wafer, chunk_elems, 0);
    if (need <= wafer ||
        (anyway && need < fit__need(spec, share, threads, wafer, chunk_elems, 0))) {
        fit_stripes_free(ps);
        ps->spec = t;
        ps->rows = true;
        return true;
    }
    model_free(rows);
    return false;
}

int fit_choose_stripes(const jobspec *spec, size_t nr, unsigned threads, uint64_t wafer,
                       uint64_t chunk_elems, fit_stripes *ps, char *err, size_t errlen)
{
    uint64_t B = (uint64_t)spec->train.batch_size;
    uint64_t whole = (B + nr - 1) / (nr ? nr : 1);
    if (spec->spatial_partitions != JOBSPEC_AUTO) {
        int rc = fit_stripes_of(spec, (int)jobspec_parts(spec), ps, err, errlen);
        if (rc == 0 && ps->parts == 1 &&
            !fit__fits(spec, whole, threads, wafer, chunk_elems, 0))
            fit__rows(spec, whole, threads, wafer, chunk_elems, true, ps);
        return rc;
    }
    /* Whole samples when every wse-node has one and it fits; a wse-node
     * holds B / nr samples' worth of pixels whatever the stripes, so they
     * help where the batch has fewer samples than there are wse-nodes. */
    fit_stripes_of(spec, 1, ps, err, errlen);
    if (B >= nr && (fit__fits(spec, whole, threads, wafer, chunk_elems, 0) ||
                    fit__rows(spec, whole, threads, wafer, chunk_elems, false, ps)))
        return 0;
    char why[512] = "";
    for (size_t k = 2; k <= nr && k <= FIT_MAX_STRIPES; k++) {
        size_t groups = nr / k;
        if (nr % k || B < groups)
            continue;
        fit_stripes t;
        if (fit_stripes_of(spec, (int)k, &t, why, sizeof(why)) < 0)
            continue;
        uint64_t share = (B + groups - 1) / groups;
        if (fit__fits(&t.spec, share, threads, wafer, chunk_elems,
                      spatial_extra_bytes(&t.sp, (int)share))) {
            *ps = t;
            return 0;
        }
        fit_stripes_free(&t);
    }
    if (B >= nr) { /* none fits: the plan of whole samples says why */
        fit__rows(spec, whole, threads, wafer, chunk_elems, true, ps);
        return 0;
    }
    snprintf(err, errlen, "%s: train_input.batch_size %llu gives the %zu wse-nodes of "
             "runconfig.num_csx less than a sample each, and no count of stripes per sample "
             "(spatial_partitions = \"auto\") that divides them fits%s%s; raise batch_size to %zu "
             "or lower num_csx", spec->source, (unsigned long long)B, nr, why[0] ? ": " : "", why,
             nr);
    return -E2BIG;
}
