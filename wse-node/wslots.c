/* Weight Streaming slots: two layers of weights, two of gradients. */
#include "wslots.h"
#include "pages.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "footprint.h"

/* Appends the arrivals of one stream list: whole layers, tensors in order,
 * each layer in its parts. */
static int wslots__arrivals(wslots *w, const uint32_t *list, size_t n, int *per_layer)
{
    const model *m = w->m;
    size_t i = 0;
    while (i < n) {
        if (list[i] >= (uint32_t)m->ntensors)
            return -EINVAL;
        int layer = m->tensors[list[i]].layer;
        const model_layer *l = &m->layers[layer];
        if (per_layer[layer] >= 0 || i + (size_t)l->ntensors > n)
            return -EINVAL;
        for (int k = 0; k < l->ntensors; k++)
            if (list[i + (size_t)k] != (uint32_t)(l->first_tensor + k))
                return -EINVAL;
        per_layer[layer] = w->narrivals;
        for (uint32_t p = 0; p < w->parts[layer].count; p++) {
            w->arr_layer[w->narrivals] = layer;
            w->arr_part[w->narrivals] = p;
            w->arr_elems[w->narrivals] =
                footprint_ws_part_elems(m, layer, &w->parts[layer], p, &w->arr_first[w->narrivals]);
            w->narrivals++;
        }
        i += (size_t)l->ntensors;
    }
    return 0;
}

int wslots_init(wslots *w, const model *m, const uint32_t *fwd, size_t nfwd, const uint32_t *bwd,
                size_t nbwd, uint32_t kept, uint64_t part_elems, uint64_t chunk_elems)
{
    memset(w, 0, sizeof(*w));
    w->m = m;
    size_t nl = (size_t)m->nlayers;
    w->parts = calloc(nl ? nl : 1, sizeof(*w->parts));
    if (!w->parts)
        return -ENOMEM;
    size_t total = 0;
    for (size_t l = 0; l < nl; l++) {
        w->parts[l] = footprint_ws_parts(m, (int)l, part_elems, chunk_elems);
        total += w->parts[l].count;
    }
    w->arr_layer = calloc(2 * total + 1, sizeof(int));
    w->arr_part = calloc(2 * total + 1, sizeof(uint32_t));
    w->arr_first = calloc(2 * total + 1, sizeof(uint64_t));
    w->arr_elems = calloc(2 * total + 1, sizeof(uint64_t));
    w->fwd_arr = malloc((nl ? nl : 1) * sizeof(int));
    w->bwd_arr = malloc((nl ? nl : 1) * sizeof(int));
    w->keep_arr = malloc((nl ? nl : 1) * sizeof(int));
    w->gseq = malloc((nl ? nl : 1) * sizeof(int));
    w->toff = calloc((size_t)m->ntensors + 1, sizeof(uint64_t));
    w->bytes = footprint_wslots_bytes(m, part_elems, chunk_elems);
    uint64_t whole;
    w->slot_elems = footprint_wslots_elems(m, part_elems, chunk_elems, &whole);
    w->slot16_elems = m->mixed_precision ? whole : 0;
    /* cache-line aligned: the kernels stream whole lines into the gradient
     * slots (gemm_small_k.c) */
    size_t slot_bytes = (w->slot_elems * sizeof(float) + 63) & ~(size_t)63;
    size_t slot16_bytes = (w->slot16_elems * sizeof(uint16_t) + 63) & ~(size_t)63;
    bool oom = false;
    for (int k = 0; k < 2; k++) {
        w->slot[k] = aligned_alloc(64, slot_bytes ? slot_bytes : 64);
        w->gslot[k] = aligned_alloc(64, slot_bytes ? slot_bytes : 64);
        if (w->slot16_elems)
            oom |= !(w->slot16[k] = aligned_alloc(64, slot16_bytes));
    }
    if (oom || !w->arr_layer || !w->arr_part || !w->arr_first || !w->arr_elems || !w->fwd_arr ||
        !w->bwd_arr || !w->keep_arr || !w->gseq || !w->toff || !w->slot[0] || !w->slot[1] || !w->gslot[0] ||
        !w->gslot[1]) {
        wslots_deinit(w);
        return -ENOMEM;
    }
    for (size_t l = 0; l < nl; l++)
        w->fwd_arr[l] = w->bwd_arr[l] = w->keep_arr[l] = w->gseq[l] = -1;
    int g = 0;
    for (int l = m->nlayers - 1; l >= 0; l--) {
        const model_layer *ml = &m->layers[l];
        uint64_t off = 0;
        bool trainable = false;
        for (int k = 0; k < ml->ntensors; k++) {
            w->toff[ml->first_tensor + k] = off;
            off += m->tensors[ml->first_tensor + k].elems;
            trainable |= m->tensors[ml->first_tensor + k].trainable;
        }
        if (trainable) {
            w->gseq[l] = g;
            g += (int)w->parts[l].count;
        }
    }
    if (wslots__arrivals(w, fwd, nfwd, w->fwd_arr) < 0) {
        wslots_deinit(w);
        return -EINVAL;
    }
    w->nfwd = w->narrivals;
    if (wslots__arrivals(w, bwd, nbwd, w->bwd_arr) < 0) {
        wslots_deinit(w);
        return -EINVAL;
    }
    /* the kept layers: the first with tensors from the last down, each
     * streamed in the forward pass's last two arrivals and not again */
    for (int l = m->nlayers - 1; l >= 0 && kept > 0; l--) {
        if (m->layers[l].ntensors == 0)
            continue;
        int a = w->fwd_arr[l];
        if (a < w->nfwd - 2 || w->bwd_arr[l] >= 0 || w->nkept + (int)w->parts[l].count > 2) {
            wslots_deinit(w);
            return -EINVAL;
        }
        w->keep_arr[l] = a;
        w->nkept += (int)w->parts[l].count;
        kept--;
    }
    if (kept > 0) {
        wslots_deinit(w);
        return -EINVAL;
    }
    w->glayer[0] = w->glayer[1] = -1;
    wslots_new_pass(w, false);
    return 0;
}

void wslots_deinit(wslots *w)
{
    free(w->parts);
    free(w->arr_layer);
    free(w->arr_part);
    free(w->arr_first);
    free(w->arr_elems);
    free(w->fwd_arr);
    free(w->bwd_arr);
    free(w->keep_arr);
    free(w->gseq);
    free(w->toff);
    for (int k = 0; k < 2; k++) {
        pages_free(w->slot[k]);
        pages_free(w->gslot[k]);
        pages_free(w->slot16[k]);
    }
    memset(w, 0, sizeof(*w));
}

uint32_t wslots_parts(const wslots *w, int layer)
{
    return w->parts[layer].count;
}

void wslots_part_rows(const wslots *w, int layer, uint32_t part, uint64_t *r0, uint64_t *r1)
{
    const footprint_parts *pt = &w->parts[layer];
    *r0 = (uint64_t)part * pt->rows;
    uint64_t units = (uint64_t)w->m->layers[layer].units;
    *r1 = pt->count <= 1 || *r0 + pt->rows > units ? units : *r0 + pt->rows;
}

void wslots_new_pass(wslots *w, bool eval)
{
    w->active = eval ? w->nfwd : w->narrivals;
    w->training = !eval;
    w->recv = 0;
    w->recv_have = 0;
    w->consumed = 0;
    w->kept_done = 0;
    /* the gradient slots keep their layers: their sends may be in flight */
}

float *wslots_dest(wslots *w, uint32_t tensor, bool backward, uint64_t offset, uint64_t count,
                   bool *blocked)
{
    *blocked = false;
    const model *m = w->m;
    if (w->recv >= w->active) { /* the next pass's: held until it starts */
        *blocked = true;
        return NULL;
    }
    if (tensor >= (uint32_t)m->ntensors)
        return NULL;
    int layer = m->tensors[tensor].layer;
    int base = backward ? w->bwd_arr[layer] : w->fwd_arr[layer];
    int a = w->recv;
    uint64_t at = w->toff[tensor] + offset; /* among the layer's elements */
    if (base < 0 || a < base || a >= base + (int)w->parts[layer].count ||
        offset > m->tensors[tensor].elems || count > m->tensors[tensor].elems - offset ||
        at != w->arr_first[a] + w->recv_have || w->recv_have + count > w->arr_elems[a])
        return NULL; /* not the next chunk of the schedule */
    if (a >= w->consumed + 2) {
        *blocked = true;
        return NULL;
    }
    return w->slot[a % 2] + w->recv_have;
}

bool wslots_received(wslots *w, uint64_t count)
{
    w->recv_have += count;
    if (w->recv_have == w->arr_elems[w->recv]) {
        w->recv++;
        w->recv_have = 0;
    }
    return w->recv >= w->active || w->recv >= w->consumed + 2;
}

bool wslots_streams(const wslots *w, int layer, bool backward)
{
    return (backward ? w->bwd_arr[layer] : w->fwd_arr[layer]) >= 0;
}

/* The arrival whose slot a layer's pass reads (the forward one for a kept
 * layer's backward pass), or -1. */
static int wslots__arrival(const wslots *w, int layer, bool backward)
{
    if (backward && w->keep_arr[layer] >= 0)
        return w->keep_arr[layer];
    return backward ? w->bwd_arr[layer] : w->fwd_arr[layer];
}

bool wslots_ready(const wslots *w, int layer, uint32_t part, bool backward)
{
    int a = wslots__arrival(w, layer, backward);
    return a < 0 || a + (int)part < w->recv;
}

uint16_t *wslots_dest16(const wslots *w, const float *dst, uint64_t count)
{
    int k = dst >= w->slot[1] && dst < w->slot[1] + w->slot_elems;
    size_t at = (size_t)(dst - w->slot[k]);
    if (!w->slot16[k] || at > w->slot16_elems || count > w->slot16_elems - at)
        return NULL;
    return w->slot16[k] + at;
}

bool wslots_in_twin(const wslots *w, const void *p)
{
    for (int k = 0; k < 2; k++)
        if (w->slot16[k] && (const uint16_t *)p >= w->slot16[k] &&
            (const uint16_t *)p < w->slot16[k] + w->slot16_elems)
            return true;
    return false;
}

float *wslots_dest32(const wslots *w, const uint16_t *dst16)
{
    int k = w->slot16[1] && dst16 >= w->slot16[1] && dst16 < w->slot16[1] + w->slot16_elems;
    return w->slot[k] + (dst16 - w->slot16[k]);
}

void wslots_bind(const wslots *w, int layer, uint32_t part, bool backward, float **wp, float **gp,
                 uint16_t **w16p)
{
    const model_layer *l = &w->m->layers[layer];
    int a = wslots__arrival(w, layer, backward);
    uint64_t first;
    footprint_ws_part_elems(w->m, layer, &w->parts[layer], part, &first);
    bool last = part + 1 == w->parts[layer].count;
    for (int k = 0; k < l->ntensors; k++) {
        int t = l->first_tensor + k;
        /* the weight split in rows: its part; the rest: with the last part */
        bool here = k == 0 || last;
        uint64_t off = k == 0 ? 0 : w->toff[t] - first;
        if (a >= 0)
            wp[t] = here ? w->slot[(a + (int)part) % 2] + off : NULL;
        if (w16p) /* a whole layer's weights: its first tensor, at the slot's start */
            w16p[t] = a >= 0 && k == 0 && w->parts[layer].count == 1 && w->slot16[0]
                          ? w->slot16[a % 2]
                          : NULL;
        if (backward && w->gseq[layer] >= 0 && w->m->tensors[t].trainable)
            gp[t] = here ? w->gslot[(w->gseq[layer] + (int)part) % 2] + off : NULL;
    }
}

int wslots_grad_blocker(const wslots *w, int layer, uint32_t part)
{
    if (w->gseq[layer] < 0)
        return -1;
    int other = w->glayer[(w->gseq[layer] + (int)part) % 2];
    return other == layer && part == 0 ? -1 : other;
}

bool wslots_consume(wslots *w, int layer, uint32_t part, bool backward)
{
    if (backward && w->gseq[layer] >= 0)
        w->glayer[(w->gseq[layer] + (int)part) % 2] = layer;
    int freed = 1;
    if (w->training && w->keep_arr[layer] >= 0) {
        if (!backward) /* its slot stays for the backward pass */
            return false;
        /* the kept slots free together, after the last of them */
        if (++w->kept_done < w->nkept)
            return false;
        freed = w->nkept;
    } else if (!wslots_streams(w, layer, backward)) {
        return false;
    }
    bool was_blocked = w->recv < w->active && w->recv >= w->consumed + 2;
    w->consumed += freed;
    return was_blocked && w->recv < w->consumed + 2;
}
