/* Every byte a replica holds, from the model, its batch share and threads. */
#include "footprint.h"

#include "sparse.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "convplan.h"
#include "sample.h"

static uint64_t footprint__hw(const model_shape *s)
{
    if (s->ndim == 4) /* a volume: depth x height x width */
        return (uint64_t)s->d[1] * (uint64_t)s->d[2] * (uint64_t)s->d[3];
    return s->ndim == 3 ? (uint64_t)s->d[1] * (uint64_t)s->d[2] : 1;
}

uint32_t footprint_label_elems(const model *m)
{
    const model_shape *o = &m->layers[m->nlayers - 1].out;
    switch (m->loss) {
    case LOSS_SOFTMAX_CROSS_ENTROPY: return 1;
    case LOSS_PIXEL_SOFTMAX_CROSS_ENTROPY:
    case LOSS_SSCE_DICE:
    case LOSS_MULTILABEL_BCE: return (uint32_t)footprint__hw(o);
    default:
        /* one target per logit, or a class per pixel for several channels */
        return (o->ndim == 3 || o->ndim == 4) && o->d[0] > 1 ? (uint32_t)footprint__hw(o)
                                           : (uint32_t)model_shape_elems(o);
    }
}

bool footprint_keeps_rounded(const model *m, int layer, int n)
{
    const model_layer *l = &m->layers[layer];
    return m->mixed_precision && l->type == LAYER_DENSE && l->ntensors &&
           convplan_dense_bf16_workspace(n, (int)l->in.d[0], (int)l->units) > 0;
}

op_conv_transpose2d_params footprint_convt_params(const model_layer *l, int n)
{
    op_conv2d_params c = memplan_conv2d_params(l, n);
    op_conv_transpose2d_params p = {
        .n = c.n, .c = c.c, .h = c.h, .w = c.w, .k = c.k, .r = c.r, .s = c.s,
        .stride_h = c.stride_h, .stride_w = c.stride_w, .pad_h = c.pad_h, .pad_w = c.pad_w,
        .dil_h = c.dil_h, .dil_w = c.dil_w,
        .out_pad_h = l->output_padding[0], .out_pad_w = l->output_padding[1],
    };
    return p;
}

static uint64_t footprint__r16(uint64_t x)
{
    return (x + 15) / 16 * 16;
}

static uint64_t footprint__r64(uint64_t x)
{
    return (x + 63) / 64 * 64;
}

uint64_t footprint_vol_workspace(const model_layer *l, int n, int threads, bool bf16)
{
    bool t = l->type == LAYER_CONV_TRANSPOSE3D;
    if (l->type != LAYER_CONV3D && !t)
        return 0;
    /* vol2col (wse-node/kernels/vol2col.c's plan_of): the volume the
     * windows lie on and their grid; a transposed convolution's windows
     * lie on its output, one per input voxel, its GEMM side the input's
     * channels */
    const model_shape *v = t ? &l->out : &l->in, *g = t ? &l->in : &l->out;
    uint64_t c = (uint64_t)v->d[0], k = (uint64_t)g->d[0];
    uint64_t krs = (uint64_t)l->kernel[0] * (uint64_t)l->kernel[1] * (uint64_t)l->kernel[2];
    uint64_t crs = c * krs, rows = (uint64_t)g->d[1] * (uint64_t)g->d[2], ow = (uint64_t)g->d[3];
    bool direct = krs == 1 && l->stride[0] <= 1 && l->stride[1] <= 1 && l->stride[2] <= 1 &&
                  !l->padding[0] && !l->padding[1] && !l->padding[2];
    uint64_t row = crs * ow * sizeof(float);
    uint64_t band = row ? ((uint64_t)1 << 20) / row : 1;
    band = band < 1 ? 1 : band > rows ? rows : band;
    uint64_t col = direct ? 0 : crs * band * ow;
    uint64_t per = footprint__r16(footprint__r16(col) + footprint__r16(k * crs) + k);
    uint64_t vol2col = (uint64_t)(threads > 0 ? threads : 1) * per * sizeof(float);
    /* oneDNN (conv3d_dnnl.c): the operands in its layouts, channels in
     * blocks of 16, with its scratchpad. The scratchpad's size is
     * oneDNN's to say; taken here as a weight gradient's partial sums per
     * thread, the most its direct kernels ask for. An estimate from
     * above: the executor holds at least what the kernels ask
     * (exec.c). A layer whose operands exceed CONVPLAN_C3D_BAND_BYTES
     * runs in depth bands (c3d_band.c): its operands are a band's, beside
     * a band's weight gradient (the bands' are summed). */
    uint64_t e = bf16 ? sizeof(uint16_t) : sizeof(float);
    uint64_t ci = ((uint64_t)l->in.d[0] + 15) / 16 * 16, co = ((uint64_t)l->out.d[0] + 15) / 16 * 16;
    uint64_t nn = (uint64_t)(n > 0 ? n : 1);
    uint64_t hw_in = (uint64_t)l->in.d[2] * (uint64_t)l->in.d[3];
    uint64_t hw_out = (uint64_t)l->out.d[2] * (uint64_t)l->out.d[3];
    int d_in = (int)l->in.d[1], d_out = (int)l->out.d[1], gd = t ? d_in : d_out;
    int st = l->stride[0] > 0 ? l->stride[0] : 1;
    int reach = (l->dilation[0] > 0 ? l->dilation[0] : 1) * (l->kernel[0] - 1) + 1;
    uint64_t xe = nn * (uint64_t)l->in.d[0] * hw_in, ye = nn * (uint64_t)l->out.d[0] * hw_out;
    int p = convplan_c3d_band_planes(gd, t ? xe : ye, t ? ye : xe, st, reach,
                                     CONVPLAN_C3D_BAND_BYTES);
    uint64_t temps = 0;
    if (p < gd) { /* a band's planes: the grid's p, the volume's those they reach */
        int vp = (p - 1) * st + reach;
        d_in = t ? p : (vp < d_in ? vp : d_in);
        d_out = t ? (vp < d_out ? vp : d_out) : p;
        temps = footprint__r64((uint64_t)l->in.d[0] * (uint64_t)l->out.d[0] * krs * sizeof(float)) +
                64;
    }
    uint64_t vin = (uint64_t)d_in * hw_in, vout = (uint64_t)d_out * hw_out;
    uint64_t x = footprint__r64(nn * ci * vin * e), y = footprint__r64(nn * co * vout * e);
    uint64_t w = footprint__r64(ci * co * krs * e), dw = footprint__r64(ci * co * krs * sizeof(float));
    uint64_t dx = footprint__r64(nn * ci * vin * sizeof(float));
    uint64_t scratch = (uint64_t)(threads > 0 ? threads : 1) * dw;
    uint64_t fwd = x + w + y + scratch + footprint__r64(co * sizeof(float));
    uint64_t wgrad = x + dw + scratch, dgrad = w + (bf16 ? dx : x) + scratch;
    uint64_t bwd = y + (wgrad > dgrad ? wgrad : dgrad) + y;
    uint64_t dnnl = (fwd > bwd ? fwd : bwd) + 64 + temps;
    return vol2col > dnnl ? vol2col : dnnl;
}

uint64_t footprint_workspace_bytes(const model_layer *l, int n, int threads)
{
    if (l->type == LAYER_CONV3D || l->type == LAYER_CONV_TRANSPOSE3D)
        return footprint_vol_workspace(l, n, threads, false);
    if (l->type == LAYER_CONV2D) {
        op_conv2d_params p = memplan_conv2d_params(l, n);
        return convplan_conv2d_f32_workspace(&p, threads);
    }
    if (l->type == LAYER_CONV_TRANSPOSE2D) {
        op_conv_transpose2d_params p = footprint_convt_params(l, n);
        return convplan_convt_workspace(&p, threads);
    }
    return 0;
}

static uint64_t footprint__layer_elems(const model *m, int layer)
{
    uint64_t sum = 0;
    const model_layer *l = &m->layers[layer];
    for (int k = 0; k < l->ntensors; k++)
        sum += m->tensors[l->first_tensor + k].elems;
    return sum;
}

static uint64_t footprint__gcd(uint64_t a, uint64_t b)
{
    while (b) {
        uint64_t t = a % b;
        a = b;
        b = t;
    }
    return a;
}

footprint_parts footprint_ws_parts(const model *m, int layer, uint64_t part_elems,
                                   uint64_t chunk_elems)
{
    const model_layer *l = &m->layers[layer];
    footprint_parts whole = {(uint64_t)(l->type == LAYER_DENSE ? l->units : 0), 1, 0};
    if (!part_elems || !chunk_elems || l->type != LAYER_DENSE || l->units < 2)
        return whole;
    uint64_t in = (uint64_t)l->in.d[0], units = (uint64_t)l->units;
    if (!in || units * in <= part_elems)
        return whole;
    uint64_t step = in / footprint__gcd(in, chunk_elems) * chunk_elems; /* lcm */
    uint64_t k = part_elems / step;
    if (!k)
        return whole;
    uint64_t rows = k * step / in;
    if (rows >= units)
        return whole;
    return (footprint_parts){rows, (uint32_t)((units + rows - 1) / rows), in};
}

uint64_t footprint_ws_part_elems(const model *m, int layer, const footprint_parts *pt,
                                 uint32_t part, uint64_t *first)
{
    uint64_t all = footprint__layer_elems(m, layer);
    if (pt->count <= 1) {
        *first = 0;
        return all;
    }
    uint64_t r0 = (uint64_t)part * pt->rows;
    *first = r0 * pt->row_elems;
    if (part + 1 == pt->count) /* the last rows and the rest of the layer */
        return all - *first;
    return pt->rows * pt->row_elems;
}

uint64_t footprint_wslots_elems(const model *m, uint64_t part_elems, uint64_t chunk_elems,
                                uint64_t *whole)
{
    uint64_t max = 1, max_whole = 0;
    for (int l = 0; l < m->nlayers; l++) {
        footprint_parts pt = footprint_ws_parts(m, l, part_elems, chunk_elems);
        uint64_t first;
        for (uint32_t p = 0; p < pt.count; p += pt.count > 1 ? pt.count - 1 : 1) {
            uint64_t e = footprint_ws_part_elems(m, l, &pt, p, &first);
            if (e > max)
                max = e;
            if (pt.count == 1 && e > max_whole)
                max_whole = e;
        }
    }
    if (whole)
        *whole = max_whole;
    return max;
}

uint64_t footprint_wslots_bytes(const model *m, uint64_t part_elems, uint64_t chunk_elems)
{
    /* two slots of weights and two of gradients; in mixed precision two
     * twins of the weight slots in bfloat16, for the layers that arrive
     * whole (the GEMMs of a layer in parts run in float32) */
    uint64_t whole, max = footprint_wslots_elems(m, part_elems, chunk_elems, &whole);
    return 4 * max * sizeof(float) + (m->mixed_precision ? 2 * whole * sizeof(uint16_t) : 0);
}

uint64_t footprint_ws_part_fit(const model *m, uint64_t slot_bytes, uint64_t chunk_elems)
{
    if (footprint_wslots_bytes(m, 0, chunk_elems) <= slot_bytes)
        return 0;
    uint64_t part = slot_bytes / (4 * sizeof(float));
    /* the bias of a last part comes on top of its rows: shrink until all fit */
    while (part > 0 && footprint_wslots_bytes(m, part, chunk_elems) > slot_bytes)
        part -= part / 16 + 1;
    return part > 0 ? part : 0;
}

unsigned footprint_optimizer_states(const char *optimizer_type, double momentum)
{
    if (strcmp(optimizer_type, "sgd") != 0)
        return 2;
    return momentum > 0 ? 1 : 0;
}

uint64_t footprint_shard_tensor_bytes(uint64_t elems, bool trainable, unsigned optimizer_states,
                                      bool gradient)
{
    return elems * sizeof(float) * (1 + gradient + (trainable ? optimizer_states : 0));
}

uint64_t footprint_compact_index_bytes(uint64_t elems)
{
    return (elems + 7) / 8 + ((elems + FOOTPRINT_RANK_BLOCK - 1) / FOOTPRINT_RANK_BLOCK + 1) * 8;
}

uint64_t footprint_shard_sparse_bytes(uint64_t elems, double level, bool compact, bool trainable,
                                      unsigned optimizer_states, bool gradient)
{
    if (!(level > 0))
        return footprint_shard_tensor_bytes(elems, trainable, optimizer_states, gradient);
    if (!compact) /* memoryx's mask: a byte an element (mxsparse.c) */
        return footprint_shard_tensor_bytes(elems, trainable, optimizer_states, gradient) + elems;
    return footprint_shard_tensor_bytes(sparse_keep_count(elems, level), trainable,
                                        optimizer_states, gradient) +
           footprint_compact_index_bytes(elems);
}

uint64_t footprint_shard_bytes_of(const model *m, size_t i, unsigned optimizer_states,
                                  bool gradient, const footprint_sparse *sp)
{
    const model_tensor *t = &m->tensors[i];
    return footprint_shard_sparse_bytes(t->elems, sp && sp->level ? sp->level[i] : 0.0,
                                        sp && sp->compact, t->trainable, optimizer_states,
                                        gradient);
}

uint64_t footprint_shards(const model *m, unsigned optimizer_states, bool gradient,
                          const footprint_sparse *sp, size_t nshards, uint32_t *owner,
                          uint64_t *need)
{
    size_t nt = (size_t)m->ntensors;
    uint64_t *load = calloc(nshards ? nshards : 1, sizeof(uint64_t));
    uint64_t *held = calloc(nshards ? nshards : 1, sizeof(uint64_t));
    size_t *order = malloc((nt ? nt : 1) * sizeof(size_t));
    uint64_t most = UINT64_MAX;
    if (!load || !held || !order || !nshards)
        goto out;
    for (size_t i = 0; i < nt; i++)
        order[i] = i;
    for (size_t i = 1; i < nt; i++) /* insertion sort by size, ids break ties */
        for (size_t k = i; k > 0 && m->tensors[order[k]].elems > m->tensors[order[k - 1]].elems; k--) {
            size_t tmp = order[k];
            order[k] = order[k - 1];
            order[k - 1] = tmp;
        }
    for (size_t i = 0; i < nt; i++) {
        const model_tensor *t = &m->tensors[order[i]];
        size_t best = 0;
        for (size_t s = 1; s < nshards; s++)
            if (load[s] < load[best])
                best = s;
        owner[order[i]] = (uint32_t)best;
        load[best] += t->elems * sizeof(float);
        held[best] += footprint_shard_bytes_of(m, order[i], optimizer_states, gradient, sp);
    }
    most = 0;
    for (size_t s = 0; s < nshards; s++) {
        if (need)
            need[s] = held[s];
        if (held[s] > most)
            most = held[s];
    }
out:
    free(load);
    free(held);
    free(order);
    return most;
}

size_t footprint_shards_needed(const model *m, unsigned optimizer_states, bool gradient,
                               const footprint_sparse *sp, uint64_t have)
{
    uint32_t *owner = malloc(((size_t)m->ntensors ? (size_t)m->ntensors : 1) * sizeof(uint32_t));
    size_t found = 0;
    for (size_t k = 1; owner && k <= 1024 && !found; k++) {
        uint64_t most = footprint_shards(m, optimizer_states, gradient, sp, k, owner, NULL);
        if (most == UINT64_MAX)
            break;
        if (most <= have)
            found = k;
    }
    free(owner);
    return found;
}

int footprint_init(footprint *f, const model *m, int n, int threads)
{
    return footprint_init_micro(f, m, n, n, threads);
}

uint64_t footprint_again_bytes(const model *m, const memplan *p)
{
    uint64_t e = 0;
    for (int l = 0; l < m->nlayers; l++) {
        const model_layer *ly = &m->layers[l];
        if (!memplan_weights_again(p, m, l))
            continue;
        for (int k = 0; k < ly->ntensors; k++)
            e += (m->tensors[ly->first_tensor + k].elems + 15) / 16 * 16;
    }
    return e * sizeof(float);
}

uint64_t footprint_accum_bytes(const model *m)
{
    uint64_t max = 0;
    for (int l = 0; l < m->nlayers; l++) {
        uint64_t e = 0;
        const model_layer *ly = &m->layers[l];
        for (int k = 0; k < ly->ntensors; k++)
            if (m->tensors[ly->first_tensor + k].trainable)
                e += m->tensors[ly->first_tensor + k].elems;
        if (e > max)
            max = e;
    }
    return max * sizeof(float);
}

int footprint_init_micro(footprint *f, const model *m, int share, int micro, int threads)
{
    int n = micro < 1 || micro > share ? share : micro;
    memset(f, 0, sizeof(*f));
    f->layers = calloc(m->nlayers ? (size_t)m->nlayers : 1, sizeof(*f->layers));
    if (!f->layers || memplan_build(&f->plan, m, n) < 0) {
        free(f->layers);
        f->layers = NULL;
        return -ENOMEM;
    }
    f->n = n;
    f->share = share;
    f->threads = threads > 0 ? threads : 1;
    f->nlayers = m->nlayers;
    uint64_t ws = 0, scratch = 0;
    for (int i = 0; i < m->nlayers; i++) {
        const model_layer *l = &m->layers[i];
        footprint_layer *fl = &f->layers[i];
        uint64_t out = memplan_out_bytes(m, i, n);
        fl->act = model_layer_is_view(l) ? 0 : out;
        fl->kept = f->plan.kept[i];
        fl->packed = f->plan.packed[i];
        fl->dact = model_layer_is_view(l) ? 0 : out;
        fl->aux = memplan_aux_bytes(m, l, n);
        if (l->type == LAYER_DENSE && m->mixed_precision) { /* the GEMMs' bfloat16 operands */
            fl->workspace = convplan_dense_bf16_workspace(n, (int)l->in.d[0], (int)l->units);
        } else if ((l->type == LAYER_CONV3D || l->type == LAYER_CONV_TRANSPOSE3D) &&
                   m->mixed_precision) { /* bfloat16 or float32 */
            uint64_t b = footprint_vol_workspace(l, n, f->threads, true);
            uint64_t s = footprint_vol_workspace(l, n, f->threads, false);
            fl->workspace = b > s ? b : s;
        } else if (l->type == LAYER_CONV2D && m->mixed_precision) { /* oneDNN's bfloat16 operands */
            op_conv2d_params p = memplan_conv2d_params(l, n);
            fl->workspace = convplan_conv2d_bf16_workspace(&p, f->threads);
        } else {
            fl->workspace = footprint_workspace_bytes(l, n, f->threads);
        }
        fl->scratch = memplan_scratch_bytes(m, i, n);
        f->act += fl->act;
        if (fl->kept)
            f->kept += fl->packed ? fl->act / 2 : fl->act;
        f->dact += fl->dact;
        f->aux += fl->aux;
        if (fl->workspace > ws)
            ws = fl->workspace;
        if (fl->scratch > scratch)
            scratch = fl->scratch;
    }
    f->workspace = (ws + 63) / 64 * 64;
    f->scratch = scratch;
    f->loss = memplan_loss_bytes(m, n);
    f->arena = f->plan.arena;
    uint64_t in_elems = (uint64_t)model_shape_elems(&m->input);
    if (m->input_unorm8)
        f->input = (uint64_t)n * in_elems * sizeof(float);
    if (n < share)
        f->accum = footprint_accum_bytes(m);
    f->again = footprint_again_bytes(m, &f->plan);
    for (int i = 0; m->spill_packed && i < m->nlayers; i++)
        if (f->plan.packed[i])
            f->spilled += FOOTPRINT_SPILL_ROUND(memplan_packed_bytes(m, i, n));
    f->spill = f->spilled ? FOOTPRINT_SPILL_STAGE : 0;
    f->exec = f->arena + f->workspace + f->input + f->accum + f->again + f->spill;
    f->eager = f->act + f->dact + f->aux + f->scratch + f->loss + f->workspace + f->input;
    f->label_elems = footprint_label_elems(m);
    f->batches = (m->feed_one ? 1 : 2) * footprint_batch_bytes(m, share);
    f->weights = (m->total_params + m->total_buffers) * sizeof(float);
    for (int i = 0; i < m->nlayers; i++)
        if (footprint_keeps_rounded(m, i, n))
            f->rounded += m->tensors[m->layers[i].first_tensor].elems * sizeof(uint16_t);
    f->wslots = footprint_wslots_bytes(m, 0, 0);
    return 0;
}

void footprint_free(footprint *f)
{
    free(f->layers);
    memplan_free(&f->plan);
    memset(f, 0, sizeof(*f));
}

uint64_t footprint_batch_bytes(const model *m, int share)
{
    uint64_t in = (uint64_t)model_shape_elems(&m->input), labels = footprint_label_elems(m);
    /* the evaluation's: at most the share (the planner's eval_batch) */
    uint64_t eval = m->eval_batch < (uint64_t)share ? m->eval_batch : (uint64_t)share;
    return sample_batch_bytes((uint64_t)share, in, labels, m->input_unorm8, m->labels_u8) +
           sample_batch_bytes(eval, in, labels, m->input_unorm8, m->labels_u8);
}

uint64_t footprint_replica_bytes(const footprint *f, const model *m, Appliance__ExecMode mode,
                                 unsigned optimizer_states)
{
    uint64_t base = f->exec + f->batches;
    if (mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED)
        return base + (3 + (uint64_t)optimizer_states) * f->weights + f->rounded;
    return base + f->wslots + m->total_buffers * sizeof(float) + (1u << 20) + (64u << 10);
}
