/* swarmx's chunk queues: buffers, the children's sum in child order, the
 * shards' merge by seq. */
#include "queue.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "sstream.h"

swx_buf *swx_buf_new(uint32_t len)
{
    swx_buf *b = malloc(sizeof(*b) + len);
    if (b) {
        b->refs = 1;
        b->len = len;
        b->next = NULL;
    }
    return b;
}

void swx_buf_unref(swx_buf *b)
{
    if (b && --b->refs == 0)
        free(b);
}

/* The gradient sum runs four floats at a time (a vector extension; the
 * plain loop was not vectorised at -O2); the sum of each element is the
 * same either way. */
typedef float swx_v4 __attribute__((vector_size(16)));

void swx_add(float *restrict dst, const float *restrict src, uint64_t count)
{
    uint64_t e = 0;
    for (; e + 4 <= count; e += 4) {
        swx_v4 a, b;
        memcpy(&a, dst + e, sizeof(a));
        memcpy(&b, src + e, sizeof(b));
        a += b;
        memcpy(dst + e, &a, sizeof(a));
    }
    for (; e < count; e++)
        dst[e] += src[e];
}

bool swx_child_push(swx_child *k, swx_buf *b)
{
    b->next = NULL;
    if (k->tail)
        k->tail->next = b;
    else
        k->head = b;
    k->tail = b;
    return ++k->queued == SWX_CHILD_QUEUE_MAX;
}

int swx_reduce_take(swx_child *kids, size_t nkids, swx_buf **sum, bool bf16,
                    void (*popped)(swx_child *k, void *arg), void *arg, char *why, size_t whylen)
{
    for (size_t i = 0; i < nkids; i++)
        if (!kids[i].head)
            return 0;
    const Appliance__GradChunk *h = &kids[0].head->hdr;
    /* packed (sstream.h): the same index from every child, the values
     * behind it summed (the mask is the same on every replica) */
    uint64_t index = sstream_index_bytes((uint32_t)h->packing, h->count, h->kept);
    uint64_t n = (uint32_t)h->packing == SSTREAM_DENSE ? h->count : h->kept;
    for (size_t i = 1; i < nkids; i++) {
        const Appliance__GradChunk *g = &kids[i].head->hdr;
        if (g->step != h->step || g->tensor_id != h->tensor_id || g->offset != h->offset ||
            g->count != h->count) {
            snprintf(why, whylen, "gradient streams diverge: child %zu sent tensor %u offset %llu, "
                     "child 0 tensor %u offset %llu", i, g->tensor_id,
                     (unsigned long long)g->offset, h->tensor_id, (unsigned long long)h->offset);
            return -EPROTO;
        }
        if (g->packing != h->packing || g->kept != h->kept ||
            memcmp(kids[i].head->data, kids[0].head->data, index) != 0) {
            snprintf(why, whylen, "gradient streams diverge: child %zu packed tensor %u [%llu, "
                     "+%llu) with another mask than child 0 (%s of %llu kept, child 0 %s of "
                     "%llu)", i, g->tensor_id, (unsigned long long)g->offset,
                     (unsigned long long)g->count, sstream_name((uint32_t)g->packing),
                     (unsigned long long)g->kept, sstream_name((uint32_t)h->packing),
                     (unsigned long long)h->kept);
            return -EPROTO;
        }
    }
    swx_buf *s = kids[0].head;
    float *acc = NULL; /* bfloat16: the float32 sum */
    if (bf16 && nkids > 1) {
        if (!(acc = malloc((n ? n : 1) * sizeof(float)))) {
            snprintf(why, whylen, "out of memory summing a gradient chunk of %llu elements",
                     (unsigned long long)n);
            return -ENOMEM;
        }
        bf16_unpack(acc, (const uint16_t *)(s->data + index), n);
    }
    for (size_t i = 0; i < nkids; i++) {
        swx_child *k = &kids[i];
        swx_buf *b = k->head;
        k->head = b->next;
        if (!k->head)
            k->tail = NULL;
        if (k->queued-- == SWX_CHILD_QUEUE_MAX && popped)
            popped(k, arg);
        if (i > 0) {
            if (acc)
                bf16_add(acc, (const uint16_t *)(b->data + index), n);
            else
                swx_add((float *)(s->data + index), (const float *)(b->data + index), n);
            swx_buf_unref(b);
        }
    }
    if (acc) {
        bf16_pack((uint16_t *)(s->data + index), acc, n);
        free(acc);
    }
    s->next = NULL;
    *sum = s;
    return 1;
}

bool swx_merge_push(swx_up *u, swx_buf *b)
{
    b->next = NULL;
    if (u->qtail)
        u->qtail->next = b;
    else
        u->qhead = b;
    u->qtail = b;
    return ++u->qlen >= SWX_MERGE_QUEUE;
}

swx_buf *swx_merge_take(swx_up *ups, size_t nup, uint64_t seq, size_t *from, bool *unpause)
{
    for (size_t i = 0; i < nup; i++) {
        swx_up *u = &ups[i];
        swx_buf *b = u->qhead;
        if (!b || b->whdr.seq != seq)
            continue;
        u->qhead = b->next;
        if (!u->qhead)
            u->qtail = NULL;
        b->next = NULL;
        *from = i;
        *unpause = u->qlen-- == SWX_MERGE_QUEUE;
        return b;
    }
    return NULL;
}
