/* Pipelined resident weights: where chunks go, what arrived. */
#include "wresident.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

int wresident_init(wresident *r, const model *m)
{
    memset(r, 0, sizeof(*r));
    r->m = m;
    r->nt = (size_t)m->ntensors;
    r->t = calloc(r->nt ? r->nt : 1, sizeof(*r->t));
    return r->t ? 0 : -ENOMEM;
}

void wresident_deinit(wresident *r)
{
    free(r->t);
    memset(r, 0, sizeof(*r));
}

void wresident_bind_tensor(wresident *r, size_t i, float *w, uint64_t n, optim_state *st,
                           uint32_t states)
{
    r->t[i] = (wresident_tensor){.w = w, .st = st, .n = n, .states = st ? states : 0};
}

float *wresident_dest(wresident *r, uint32_t tensor, uint32_t state, uint64_t offset,
                      uint64_t count, uint64_t total)
{
    if (tensor >= r->nt)
        return NULL;
    wresident_tensor *t = &r->t[tensor];
    float *base = t->w;
    if (state > 0)
        base = state <= t->states ? optim_state_tensor(t->st, state - 1, NULL, NULL) : NULL;
    if (!base || total != t->n || offset > t->n || count > t->n - offset)
        return NULL;
    return base + offset;
}

void wresident_received(wresident *r, uint32_t tensor, uint64_t count)
{
    if (tensor < r->nt)
        r->t[tensor].have += count;
}

bool wresident_ready(const wresident *r, int layer)
{
    const model_layer *l = &r->m->layers[layer];
    for (int k = 0; k < l->ntensors; k++) {
        const wresident_tensor *t = &r->t[l->first_tensor + k];
        if (t->have < t->n * (1 + (uint64_t)t->states))
            return false;
    }
    return true;
}
