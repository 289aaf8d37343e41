/* wse-node: weight chunks that come before their slot is free, held in
 * arrival order and landed once it frees, and the flow control of the link
 * up around them (wjob.h: the arrival of a chunk, links.c; a slot freed,
 * step.c); packed chunks of sparse tensors expanded as they land, their
 * index kept to pack the gradients going up the same way. Calls down
 * only: the slots, the stripes' state, wjob.c. */
#include "wjob.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "msgcheck.h"
#include "sstream.h"

/* Whether reading from swarmx goes on whatever the slots say: the
 * compute thread waits for a collective total (spatial partitions), which
 * comes down the same stream behind weight chunks that wait for a slot
 * the computation frees. Paused there, the two would wait for each other
 * (a Weight Streaming job in stripes stopped at its first norm). */
bool wn__must_read(wn_job *j)
{
    return j->stripes && wn_stripes_awaiting_total(j->stripes);
}

/* Stops reading from the link up until a slot frees, unless the compute
 * thread waits for a total that comes down it (wn__must_read). */
void wn__pause(wn_job *j)
{
    conn *up = conn_link_conn(&j->up);
    if (up && !j->up_paused && !wn__must_read(j)) {
        conn_pause(up);
        j->up_paused = true;
    }
}

/* Keeps a chunk that came before its slot was free (packed as it came). */
int wn__stage(wn_job *j, const Appliance__WeightChunk *w, const uint8_t *payload)
{
    size_t bytes = sstream_bytes((uint32_t)w->packing, w->count, w->kept, msgcheck_wire_elem(j->plan));
    wn_staged *st = malloc(sizeof(*st) + bytes);
    if (!st)
        return -ENOMEM;
    st->next = NULL;
    st->tensor = w->tensor_id;
    st->backward = w->pass == APPLIANCE__PASS__PASS_BACKWARD;
    st->step = w->step;
    st->offset = w->offset;
    st->count = w->count;
    st->packing = (uint32_t)w->packing;
    st->kept = w->kept;
    memcpy(st->data, payload, bytes);
    wn_of(j->n)->staged++;
    if (j->staged_tail)
        j->staged_tail->next = st;
    else
        j->staged = st;
    j->staged_tail = st;
    return 0;
}

/* Whether tensor t's weights are read in bfloat16 alone: the weight
 * matrix of a dense layer streamed whole, whose GEMMs take the slot's twin
 * (wslots_bind, exec's w16). */
static bool wn__twin_only(const wn_job *j, uint32_t t)
{
    if (!j->twin_only || t >= (uint32_t)j->m->ntensors)
        return false;
    int li = j->m->tensors[t].layer;
    const model_layer *l = &j->m->layers[li];
    return l->type == LAYER_DENSE && (int)t == l->first_tensor && j->ws.parts[li].count == 1;
}

/* count weights of tensor t's chunk, as the wire carries them (float32 or
 * bfloat16; packed: expanded, sstream.h, from a payload apart from dst),
 * into dst: copied; or kept in bfloat16 (wslots_dest16: the GEMMs take
 * them as they are) and widened into dst, unless nothing reads them there
 * (wn__twin_only). */
void wn__land(const wn_job *j, uint32_t t, float *dst, const void *payload, uint64_t count,
              uint32_t packing, uint64_t nkept, uint64_t offset)
{
    wn_tensor *wt = &j->t[t];
    if (wt->kept_only) { /* float32: its kept values to their place at the slot's front */
        sstream_mark(packing, count, nkept, payload, wt->kept_bits, offset);
        if (offset != wt->land_next) /* (chunks come in order: only a new pass starts over) */
            wt->land_k = sstream_count_bits(wt->kept_bits, 0, offset);
        uint64_t k = packing == SSTREAM_DENSE ? count : nkept;
        const uint8_t *vals = (const uint8_t *)payload + sstream_index_bytes(packing, count, nkept);
        memmove(dst - offset + wt->land_k, vals, k * sizeof(float));
        wt->land_k += k;
        wt->land_next = offset + count;
        return;
    }
    if (packing != SSTREAM_DENSE && !wt->kept_bits && msgcheck_grads_pack(j->plan, t) &&
        (wt->kept_bits = malloc((wt->n + 7) / 8)))
        memset(wt->kept_bits, 0xff, (wt->n + 7) / 8); /* (out of memory: its gradients go dense) */
    if (wt->kept_bits)
        sstream_mark(packing, count, nkept, payload, wt->kept_bits, offset);
    if (!j->plan->wire_bf16) {
        if (packing != SSTREAM_DENSE)
            sstream_expand(packing, count, nkept, sizeof(float), payload, dst);
        else if (payload != dst)
            memcpy(dst, payload, count * sizeof(float));
        return;
    }
    uint16_t *kept = wslots_dest16(&j->ws, dst, count);
    bool twin = kept != NULL;
    if (!kept) /* a layer in parts: widened in place, from the upper half */
        kept = (uint16_t *)((uint8_t *)dst + 2 * count);
    if (packing != SSTREAM_DENSE)
        sstream_expand(packing, count, nkept, 2, payload, kept);
    else if (payload != kept)
        memcpy(kept, payload, 2 * count);
    if (!twin || !wn__twin_only(j, t))
        bf16_unpack(dst, kept, count);
}

/* A slot freed: held chunks land in order; reading resumes once none is
 * held and the next arrival has a slot. */
void wn__unstage(wn_job *j)
{
    while (j->staged) {
        wn_staged *st = j->staged;
        bool blocked;
        if (st->step != j->step) /* the next step's, read while a total was awaited */
            return;
        float *dst = wslots_dest(&j->ws, st->tensor, st->backward, st->offset, st->count, &blocked);
        if (!dst) {
            if (!blocked)
                wn__abort(j->n, j, "held weight chunk of tensor %u out of schedule", st->tensor);
            return;
        }
        wn__land(j, st->tensor, dst, st->data, st->count, st->packing, st->kept, st->offset);
        bool next_blocked = wslots_received(&j->ws, st->count);
        j->staged = st->next;
        if (!j->staged)
            j->staged_tail = NULL;
        free(st);
        if (next_blocked)
            return;
    }
    wn__resume_up(j);
}

/* The gradient chunk [off, off + count) of t (its wire elements at src)
 * packed with the index of the weights t kept (kept_bits), g's packing and
 * kept set and *bytes its payload's; NULL to send it dense (a dense tensor,
 * nothing saved, out of memory). */
wn_packed_grad *wn__pack_grad(const wn_job *j, wn_tensor *t, uint64_t off, uint64_t count,
                              const void *src, Appliance__GradChunk *g, uint32_t *bytes)
{
    if (!t->kept_bits)
        return NULL;
    uint32_t elem = msgcheck_wire_elem(j->plan);
    uint64_t kept;
    uint32_t packing = sstream_choose_bits(t->kept_bits, off, count, elem, &kept);
    if (t->kept_only) { /* the gradient at the kept values alone, in order from send_base */
        if (off != t->send_next)
            t->send_k = sstream_count_bits(t->kept_bits, 0, off);
        /* (the values it holds: what choose counted, which a dense packing does not say) */
        uint64_t k = packing == SSTREAM_DENSE ? sstream_count_bits(t->kept_bits, off, count) : kept;
        uint64_t b = sstream_bytes(packing, count, kept, elem);
        wn_packed_grad *pk = malloc(sizeof(*pk) + (b ? b : 1));
        if (!pk)
            return NULL;
        pk->t = t;
        sstream_pack_kept(packing, t->kept_bits, off, t->send_base + (t->send_k - t->send_from),
                          count, kept, elem, pk->data);
        g->packing = (Appliance__Packing)packing;
        g->kept = kept;
        *bytes = (uint32_t)b;
        t->send_k += k;
        t->send_next = off + count;
        return pk;
    }
    wn_packed_grad *pg = NULL;
    if (packing != SSTREAM_DENSE) {
        uint64_t b = sstream_bytes(packing, count, kept, elem);
        if ((pg = malloc(sizeof(*pg) + b))) {
            pg->t = t;
            sstream_pack_bits(packing, t->kept_bits, off, src, count, kept, elem, pg->data);
            g->packing = (Appliance__Packing)packing;
            g->kept = kept;
            *bytes = (uint32_t)b;
        }
    }
    return pg;
}
