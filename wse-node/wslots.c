/* Weight Streaming slots: two layers of weights, two of gradients. */
#include "wslots.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "footprint.h"

static uint64_t wslots__layer_elems(const model *m, int layer)
{
    uint64_t sum = 0;
    const model_layer *l = &m->layers[layer];
    for (int k = 0; k < l->ntensors; k++)
        sum += m->tensors[l->first_tensor + k].elems;
    return sum;
}

static uint64_t wslots__max_layer(const model *m)
{
    uint64_t max = 1;
    for (int l = 0; l < m->nlayers; l++) {
        uint64_t e = wslots__layer_elems(m, l);
        if (e > max)
            max = e;
    }
    return max;
}

/* Appends the arrivals of one stream list: whole layers, tensors in order. */
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
        w->arr_layer[w->narrivals] = layer;
        w->arr_elems[w->narrivals] = wslots__layer_elems(m, layer);
        w->narrivals++;
        i += (size_t)l->ntensors;
    }
    return 0;
}

int wslots_init(wslots *w, const model *m, const uint32_t *fwd, size_t nfwd, const uint32_t *bwd,
                size_t nbwd)
{
    memset(w, 0, sizeof(*w));
    w->m = m;
    size_t nl = (size_t)m->nlayers;
    w->arr_layer = calloc(2 * nl, sizeof(int));
    w->arr_elems = calloc(2 * nl, sizeof(uint64_t));
    w->fwd_arr = malloc(nl * sizeof(int));
    w->bwd_arr = malloc(nl * sizeof(int));
    w->gseq = malloc(nl * sizeof(int));
    w->toff = calloc((size_t)m->ntensors + 1, sizeof(uint64_t));
    w->slot_elems = (size_t)wslots__max_layer(m);
    for (int k = 0; k < 2; k++) {
        w->slot[k] = malloc(w->slot_elems * sizeof(float));
        w->gslot[k] = malloc(w->slot_elems * sizeof(float));
    }
    if (!w->arr_layer || !w->arr_elems || !w->fwd_arr || !w->bwd_arr || !w->gseq || !w->toff ||
        !w->slot[0] || !w->slot[1] || !w->gslot[0] || !w->gslot[1]) {
        wslots_deinit(w);
        return -ENOMEM;
    }
    w->bytes = footprint_wslots_bytes(m);
    for (size_t l = 0; l < nl; l++)
        w->fwd_arr[l] = w->bwd_arr[l] = w->gseq[l] = -1;
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
        if (trainable)
            w->gseq[l] = g++;
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
    w->glayer[0] = w->glayer[1] = -1;
    wslots_new_pass(w, false);
    return 0;
}

void wslots_deinit(wslots *w)
{
    free(w->arr_layer);
    free(w->arr_elems);
    free(w->fwd_arr);
    free(w->bwd_arr);
    free(w->gseq);
    free(w->toff);
    for (int k = 0; k < 2; k++) {
        free(w->slot[k]);
        free(w->gslot[k]);
    }
    memset(w, 0, sizeof(*w));
}

void wslots_new_pass(wslots *w, bool eval)
{
    w->active = eval ? w->nfwd : w->narrivals;
    w->recv = 0;
    w->recv_have = 0;
    w->consumed = 0;
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
    int a = backward ? w->bwd_arr[layer] : w->fwd_arr[layer];
    if (a != w->recv || offset > m->tensors[tensor].elems || count > m->tensors[tensor].elems - offset ||
        w->toff[tensor] + offset != w->recv_have)
        return NULL; /* not the next chunk of the schedule */
    if (a >= w->consumed + 2) {
        *blocked = true;
        return NULL;
    }
    return w->slot[a % 2] + w->toff[tensor] + offset;
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

bool wslots_ready(const wslots *w, int layer, bool backward)
{
    int a = backward ? w->bwd_arr[layer] : w->fwd_arr[layer];
    return a < 0 || a < w->recv;
}

void wslots_bind(const wslots *w, int layer, bool backward, float **wp, float **gp)
{
    const model_layer *l = &w->m->layers[layer];
    int a = backward ? w->bwd_arr[layer] : w->fwd_arr[layer];
    for (int k = 0; k < l->ntensors; k++) {
        int t = l->first_tensor + k;
        if (a >= 0)
            wp[t] = w->slot[a % 2] + w->toff[t];
        if (backward && w->gseq[layer] >= 0 && w->m->tensors[t].trainable)
            gp[t] = w->gslot[w->gseq[layer] % 2] + w->toff[t];
    }
}

int wslots_grad_blocker(const wslots *w, int layer)
{
    if (w->gseq[layer] < 0)
        return -1;
    int other = w->glayer[w->gseq[layer] % 2];
    return other == layer ? -1 : other;
}

bool wslots_consume(wslots *w, int layer, bool backward)
{
    if (backward && w->gseq[layer] >= 0)
        w->glayer[w->gseq[layer] % 2] = layer;
    if (!wslots_streams(w, layer, backward))
        return false;
    bool was_blocked = w->recv < w->active && w->recv >= w->consumed + 2;
    w->consumed++;
    return was_blocked && w->recv < w->consumed + 2;
}
