/* The lean memory plan: a simulation of one step's buffers, then offsets. */
#include "memplan.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#define MEMPLAN_ALIGN 64
#define MEMPLAN_LIGHTEN_GAIN 0.02   /* of the arena, for a costly output made again */
#define MEMPLAN_LIGHTEN_FLOPS 0.10  /* of a step's work, made again at most */
#define MEMPLAN_LIGHTEN_ROUNDS 8

static const model_shape *memplan__shape_of(const model *m, int layer)
{
    return layer < 0 ? &m->input : &m->layers[layer].out;
}

int memplan_resolve(const model *m, int layer)
{
    while (layer >= 0 && model_layer_is_view(&m->layers[layer]))
        layer = m->layers[layer].inputs[0];
    return layer;
}

uint64_t memplan_out_bytes(const model *m, int layer, int n)
{
    return (uint64_t)n * model_shape_elems(memplan__shape_of(m, layer)) * sizeof(float);
}

uint64_t memplan_packed_bytes(const model *m, int layer, int n)
{
    return (uint64_t)n * model_shape_elems(memplan__shape_of(m, layer)) * sizeof(uint16_t);
}

op_conv2d_params memplan_conv2d_params(const model_layer *l, int n)
{
    op_conv2d_params p = {
        .n = n, .c = (int)l->in.d[0], .h = (int)l->in.d[1], .w = (int)l->in.d[2],
        .k = (int)l->filters, .r = l->kernel[0], .s = l->kernel[1],
        .stride_h = l->stride[0], .stride_w = l->stride[1],
        .pad_h = l->padding[0], .pad_w = l->padding[1],
        .dil_h = l->dilation[0], .dil_w = l->dilation[1],
    };
    return p;
}

uint64_t memplan_aux_bytes(const model *m, const model_layer *l, int n)
{
    switch (l->type) {
    case LAYER_CONV2D: { /* mixed precision, the plan keeping outputs: its input as the
                          * forward pass rounded it, for the weight gradient */
        if (!m->mixed_precision || !m->keep_outputs)
            return 0;
        op_conv2d_params p = memplan_conv2d_params(l, n);
        return convplan_conv2d_bf16_kept_bytes(&p);
    }
    case LAYER_MAX_POOL2D:
    case LAYER_MAX_POOL3D: return (uint64_t)n * model_shape_elems(&l->out); /* a byte each */
    /* mean, 1/std, and the scale and shift that recompute the output */
    case LAYER_BATCH_NORM: return 4 * (uint64_t)l->in.d[0] * sizeof(float);
    case LAYER_GROUP_NORM:
        return 2 * (uint64_t)n * ((uint64_t)l->groups + (uint64_t)l->in.d[0]) * sizeof(float);
    default: return 0;
    }
}

uint64_t memplan_scratch_bytes(const model *m, int layer, int n)
{
    const model_layer *l = &m->layers[layer];
    if (model_layer_is_view(l)) /* flatten, a fused relu: its gradient is its input's */
        return 0;
    switch (l->type) {
    case LAYER_ADD:
    case LAYER_TYPE_COUNT:
        return 0;
    case LAYER_DENSE:
    case LAYER_CONV2D:
    case LAYER_CONV_TRANSPOSE2D:
    case LAYER_CONV3D:
    case LAYER_CONV_TRANSPOSE3D:
        if (memplan_resolve(m, l->inputs[0]) < 0)
            return 0; /* no gradient for the model input */
        break;
    default:
        break;
    }
    uint64_t sum = 0;
    for (int k = 0; k < l->ninputs; k++)
        sum += memplan_out_bytes(m, l->inputs[k], n);
    return sum;
}

uint64_t memplan_loss_bytes(const model *m, int n)
{
    const model_shape *o = memplan__shape_of(m, m->nlayers - 1);
    switch (m->loss) {
    case LOSS_BCE_WITH_LOGITS:
    case LOSS_DICE:
    case LOSS_BCE_DICE:
        return 2 * memplan_out_bytes(m, m->nlayers - 1, n);
    case LOSS_SSCE_DICE: /* per sample and class: sum p*t, sum p, sum t; the cross entropy's
                          * sum (OP_SSCE_DICE_SUMS, op_loss.h) */
        return (uint64_t)n * (3 * (uint64_t)o->d[0] + 1) * sizeof(double);
    default:
        return 0;
    }
}

/* Whether a layer's backward pass reads its input (inputs[0]) or its own
 * output. */
static bool memplan__reads_input(layer_type t)
{
    switch (t) {
    case LAYER_DENSE:
    case LAYER_CONV2D:
    case LAYER_CONV_TRANSPOSE2D:
    case LAYER_CONV3D:
    case LAYER_CONV_TRANSPOSE3D:
    case LAYER_BATCH_NORM:
    case LAYER_GROUP_NORM:
    case LAYER_RELU:
    case LAYER_LEAKY_RELU:
    case LAYER_GELU:
        return true;
    default:
        return false;
    }
}

static bool memplan__reads_output(const model_layer *l)
{
    /* a dense layer with its relu fused masks the gradient by its output */
    return l->type == LAYER_SIGMOID || l->type == LAYER_TANH ||
           (l->type == LAYER_DENSE && l->fused);
}

/* A convolution or a transposed one, 2-D or 3-D: a layer with weights whose
 * output the plan may make again. */
static bool memplan__conv(layer_type t)
{
    return t == LAYER_CONV2D || t == LAYER_CONV3D || t == LAYER_CONV_TRANSPOSE2D ||
           t == LAYER_CONV_TRANSPOSE3D;
}

bool memplan_cheap_conv(const model_layer *l)
{
    bool transpose = l->type == LAYER_CONV_TRANSPOSE2D || l->type == LAYER_CONV_TRANSPOSE3D;
    if (!memplan__conv(l->type))
        return false;
    int axes = l->type == LAYER_CONV3D || l->type == LAYER_CONV_TRANSPOSE3D ? 3 : 2;
    for (int a = 0; transpose && a < axes; a++) /* windows that overlap: a stripe's halo */
        if (l->kernel[a] > l->stride[a])
            return false;
    uint64_t out = model_shape_elems(&l->out);
    uint64_t flops = l->flops - (l->bias ? out : 0); /* 2 a multiply-add */
    return out && flops <= 2 * (uint64_t)MEMPLAN_CHEAP_MACS * out;
}

bool memplan_weights_again(const memplan *p, const model *m, int layer)
{
    return !p->kept[layer] && memplan__conv(m->layers[layer].type);
}

/* Layers whose output is kept: making it again would cost a GEMM (but the
 * cheap convolutions'). */
static bool memplan__costly(const model_layer *l)
{
    return (l->type == LAYER_DENSE || memplan__conv(l->type)) && !memplan_cheap_conv(l);
}

/* A buffer's life: placed at time t0, freed at t1 (inclusive). */
typedef struct memplan_buf {
    uint64_t bytes;
    uint64_t t0, t1;
    uint32_t event;
    uint64_t offset;
    int parent;         /* -1, or the buffer this one lies in (a slice of a concatenation) */
    uint64_t delta;     /* where in it */
    /* A slice with a life of its own (bytes its own): it stays where its
     * buffer put it after that buffer is freed, the room around it free */
    bool own;
} memplan_buf;

typedef struct memplan_sim {
    const model *m;
    memplan *p;
    int n;
    memplan_buf *bufs;
    uint32_t nbufs, capbufs;
    uint32_t capevents;
    uint64_t t;
    int *out, *dout, *aux, *pk; /* per layer: the live buffer, -1 */
    int scratch, loss;          /* the operation's temporaries, -1 */
    uint64_t *needs;            /* per layer: bitset over the operations */
    size_t words;               /* of one bitset */
    int *fwd_last;              /* per layer: its last reader in the forward pass */
    int *made;                  /* per layer: the backward operation that made its output again */
    int *need_last;             /* per layer: its last need in the backward pass, -1: none */
    bool keep_all;              /* the reference plan: nothing freed, nothing recomputed */
    /* While a concatenation of one sample makes an input in its slice: the
     * slice of a later input still to be made (spare_parent's bytes at
     * spare_delta, spare_bytes of them, -1: none), where an input of that
     * input made for it alone may be made meanwhile */
    int spare_parent;
    uint64_t spare_delta, spare_bytes;
    const bool *drop;           /* per layer or NULL: a costly output not kept, made again
                                 * (memplan__lighten); once made in the backward pass it stays
                                 * until its last need there */
    bool failed;
} memplan_sim;

static bool memplan__has(const memplan_sim *s, int layer, int op)
{
    return op >= 0 && op <= 2 * s->m->nlayers &&
           (s->needs[(size_t)layer * s->words + (size_t)op / 64] >> (op % 64)) & 1;
}

static void memplan__need(memplan_sim *s, int layer, int op)
{
    s->needs[(size_t)layer * s->words + (size_t)op / 64] |= 1ull << (op % 64);
}

/* Appends an event to the operation being built; returns its index. */
static uint32_t memplan__event(memplan_sim *s, enum memplan_kind kind, int layer, bool zero)
{
    memplan *p = s->p;
    if (p->nevents == s->capevents) {
        uint32_t cap = s->capevents ? 2 * s->capevents : 256;
        memplan_event *e = realloc(p->events, cap * sizeof(*e));
        if (!e) {
            s->failed = true;
            return 0;
        }
        p->events = e;
        s->capevents = cap;
    }
    memplan_event *e = &p->events[p->nevents];
    e->kind = (uint8_t)kind;
    e->zero = zero;
    e->direct = false;
    e->layer = layer;
    e->offset = 0;
    return p->nevents++;
}

/* Places a buffer of `bytes` for (kind, layer) now; returns its index. */
static int memplan__place(memplan_sim *s, enum memplan_kind kind, int layer, uint64_t bytes,
                          bool zero)
{
    uint32_t ev = memplan__event(s, kind, layer, zero);
    if (s->failed)
        return -1;
    if (s->nbufs == s->capbufs) {
        uint32_t cap = s->capbufs ? 2 * s->capbufs : 256;
        memplan_buf *b = realloc(s->bufs, cap * sizeof(*b));
        if (!b) {
            s->failed = true;
            return -1;
        }
        s->bufs = b;
        s->capbufs = cap;
    }
    memplan_buf *b = &s->bufs[s->nbufs];
    b->bytes = (bytes + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
    if (b->bytes == 0)
        b->bytes = MEMPLAN_ALIGN;
    b->t0 = s->t++;
    b->t1 = UINT64_MAX;
    b->event = ev;
    b->parent = -1;
    b->delta = 0;
    b->own = false;
    return (int)s->nbufs++;
}

/* A buffer for layer's output taken now, for a slice of it placed before
 * it (memplan__alias_own), but placed later (memplan__activate): no event,
 * no life of its own until then. */
static int memplan__reserve(memplan_sim *s, int layer, uint64_t bytes)
{
    int b = memplan__place(s, MEMPLAN_OUT, layer, bytes, false);
    if (b >= 0) {
        s->p->nevents--; /* its event comes with memplan__activate */
        s->bufs[b].event = UINT32_MAX;
        s->bufs[b].t0 = UINT64_MAX;
    }
    return b;
}

/* A reserved buffer placed now for layer's output: its event, and its
 * life from here. */
static void memplan__activate(memplan_sim *s, int b, int layer)
{
    uint32_t ev = memplan__event(s, MEMPLAN_OUT, layer, false);
    if (s->failed)
        return;
    s->bufs[b].event = ev;
    s->bufs[b].t0 = s->t++;
}

/* Places layer's output (or its gradient: kind) in buffer `parent`, `delta`
 * bytes in: it takes no room of its own (a concatenation's input made
 * where the concatenation holds it, or its gradient where the
 * concatenation's gradient holds it). The buffer lives as long as the
 * longest of those in it (memplan__hold). */
static int memplan__alias_as(memplan_sim *s, enum memplan_kind kind, int layer, int parent,
                             uint64_t delta)
{
    int b = memplan__place(s, kind, layer, 0, false);
    if (b >= 0) {
        s->bufs[b].bytes = 0;
        s->bufs[b].parent = parent;
        s->bufs[b].delta = delta;
    }
    return b;
}

/* The same with a life of its own: the buffer may be freed before it,
 * and the rest of its room taken by others, while the slice stays. Only
 * in a buffer that is no slice itself. */
static int memplan__alias_own(memplan_sim *s, enum memplan_kind kind, int layer, int parent,
                              uint64_t delta, uint64_t bytes)
{
    int b = memplan__alias_as(s, kind, layer, parent, delta);
    if (b >= 0) {
        s->bufs[b].bytes = (bytes + MEMPLAN_ALIGN - 1) / MEMPLAN_ALIGN * MEMPLAN_ALIGN;
        s->bufs[b].own = true;
    }
    return b;
}

static int memplan__alias(memplan_sim *s, int layer, int parent, uint64_t delta)
{
    return memplan__alias_as(s, MEMPLAN_OUT, layer, parent, delta);
}

/* Where input `layer` lies in concatenation c's output (bytes from its
 * start, for n samples of one), or UINT64_MAX when it is none of c's. */
static uint64_t memplan__slice(const memplan_sim *s, int c, int layer)
{
    const model_layer *l = &s->m->layers[c];
    uint64_t d = 0;
    for (int k = 0; k < l->ninputs; k++) {
        int src = memplan_resolve(s->m, l->inputs[k]);
        if (src == layer)
            return d;
        d += memplan_out_bytes(s->m, src, s->n);
    }
    return UINT64_MAX;
}

/* A buffer that holds others lives as long as they do. */
static void memplan__hold(memplan_sim *s)
{
    for (uint32_t b = s->nbufs; b-- > 0;) {
        int q = s->bufs[b].parent;
        if (q >= 0 && !s->bufs[b].own && s->bufs[b].t1 > s->bufs[q].t1)
            s->bufs[q].t1 = s->bufs[b].t1;
    }
}

static void memplan__free(memplan_sim *s, int *slot)
{
    if (*slot >= 0)
        s->bufs[*slot].t1 = s->t;
    *slot = -1;
}

/* Frees in the middle of an operation's events: what is placed next may
 * take the room. */
static void memplan__free_now(memplan_sim *s, int *slot)
{
    memplan__free(s, slot);
    s->t++;
}

/* Whether layer j's output, made again in backward operation op (or read
 * there), stays for a later one: the next one reads it, or it is a costly
 * output the plan does not keep and a later operation reads it. */
static bool memplan__stays(const memplan_sim *s, int j, int op)
{
    if (s->p->packed[j]) /* unpacked from its bfloat16 copy again where next read */
        return false;
    if (s->drop && s->drop[j])
        return s->need_last[j] > op;
    return memplan__has(s, j, op + 1);
}

/* Whether layer src's output is to be made again in operation op for one
 * reader alone: not live, not a bfloat16 copy, not read by the operation
 * itself, and not needed after it. */
static bool memplan__for_one(const memplan_sim *s, int src, int op, int r0, int r1)
{
    return src >= 0 && s->out[src] < 0 && src != r0 && src != r1 && !memplan__stays(s, src, op);
}

/* The output of layer j live now, recomputing it (and, first, whatever of
 * its inputs is not live) when the forward pass let it go; in buffer
 * `parent` (at delta) when that is not -1. A concatenation of one sample
 * makes the inputs it alone needs in its own slices of it: they are not
 * copied and take no room of their own. */
static void memplan__make(memplan_sim *s, int j, int op, int r0, int r1, int parent,
                          uint64_t delta)
{
    if (j < 0 || s->out[j] >= 0 || s->failed)
        return;
    s->made[j] = op;
    if (s->p->packed[j]) { /* from its bfloat16 copy */
        s->out[j] = parent >= 0 ? memplan__alias(s, j, parent, delta)
                                : memplan__place(s, MEMPLAN_OUT, j,
                                                 memplan_out_bytes(s->m, j, s->n), false);
        memplan__event(s, MEMPLAN_UNPACK, j, false);
        return;
    }
    const model_layer *l = &s->m->layers[j];
    if (l->type == LAYER_CONCAT && s->n == 1 && parent < 0) {
        s->out[j] = memplan__place(s, MEMPLAN_OUT, j, memplan_out_bytes(s->m, j, s->n), false);
        /* the last input's slice, when it is made there after the others:
         * room for what they are made from (memplan_sim.spare_parent) */
        int lastk = l->ninputs - 1, ls = memplan_resolve(s->m, l->inputs[lastk]);
        uint64_t ld = memplan__slice(s, j, ls);
        bool spare = ld != UINT64_MAX && ld % MEMPLAN_ALIGN == 0 &&
                     memplan__for_one(s, ls, op, r0, r1);
        uint64_t d = 0;
        for (int k = 0; k < l->ninputs; k++) {
            int src = memplan_resolve(s->m, l->inputs[k]);
            bool slice = memplan__for_one(s, src, op, r0, r1) && d % MEMPLAN_ALIGN == 0;
            s->spare_parent = spare && k < lastk && slice ? s->out[j] : -1;
            s->spare_delta = ld;
            s->spare_bytes = memplan_out_bytes(s->m, ls, s->n);
            memplan__make(s, src, op, r0, r1, slice ? s->out[j] : -1, d);
            s->spare_parent = -1;
            d += memplan_out_bytes(s->m, src, s->n);
        }
    } else if (l->type == LAYER_GROUP_NORM && memplan__for_one(s, memplan_resolve(s->m, l->inputs[0]),
                                                               op, r0, r1)) {
        /* made again from its input's scale and shift, element by
         * element: its input, made for it alone, is made where it goes */
        int src = memplan_resolve(s->m, l->inputs[0]);
        s->out[j] = parent >= 0 ? memplan__alias(s, j, parent, delta)
                                : memplan__place(s, MEMPLAN_OUT, j,
                                                 memplan_out_bytes(s->m, j, s->n), false);
        int home = parent >= 0 ? parent : s->out[j];
        memplan__make(s, src, op, r0, r1, home, parent >= 0 ? delta : 0);
    } else {
        int sp = s->spare_parent; /* a concatenation's later slice, for one input made here */
        s->spare_parent = -1;
        for (int k = 0; k < l->ninputs; k++) {
            int src = memplan_resolve(s->m, l->inputs[k]);
            bool room = sp >= 0 && memplan__for_one(s, src, op, r0, r1) &&
                        memplan_out_bytes(s->m, src, s->n) <= s->spare_bytes;
            memplan__make(s, src, op, r0, r1, room ? sp : -1, room ? s->spare_delta : 0);
            if (room)
                sp = -1;
        }
        s->out[j] = parent >= 0 ? memplan__alias(s, j, parent, delta)
                                : memplan__place(s, MEMPLAN_OUT, j,
                                                 memplan_out_bytes(s->m, j, s->n), false);
    }
    memplan__event(s, MEMPLAN_RECOMPUTE, j, false);
    s->p->recomputes++;
    /* its inputs made again for it alone go now */
    for (int k = 0; k < l->ninputs; k++) {
        int src = memplan_resolve(s->m, l->inputs[k]);
        if (src >= 0 && s->out[src] >= 0 && s->made[src] == op && src != r0 && src != r1 &&
            !memplan__stays(s, src, op))
            memplan__free_now(s, &s->out[src]);
    }
}

static void memplan__ensure(memplan_sim *s, int j, int op, int r0, int r1)
{
    memplan__make(s, j, op, r0, r1, -1, 0);
}

/* The concatenation of one sample that reads layer i's output as a skip
 * connection: the only concatenation reading it, later than the layer
 * after i, i's output not kept (for the backward pass: the lean plan
 * makes it again) and no view, the concatenation's output not placed
 * yet; -1 when there is none. */
static int memplan__skip_of(const memplan_sim *s, int i)
{
    const model *m = s->m;
    memplan *p = s->p;
    if (s->n != 1 || s->keep_all || p->kept[i] || p->packed[i] ||
        model_layer_is_view(&m->layers[i]))
        return -1;
    int found = -1;
    for (int c = i + 1; c < m->nlayers; c++) {
        const model_layer *l = &m->layers[c];
        for (int k = 0; k < l->ninputs; k++) {
            if (memplan_resolve(m, l->inputs[k]) != i || l->type != LAYER_CONCAT)
                continue;
            if (found >= 0) /* two concatenations, or twice in one */
                return -1;
            found = c;
        }
    }
    if (found <= i + 1 || s->out[found] >= 0 || model_layer_is_view(&m->layers[found]))
        return -1;
    return found;
}

/* The operations: forward, loss, backward, with their events. */
static void memplan__simulate(memplan_sim *s)
{
    const model *m = s->m;
    memplan *p = s->p;
    const int L = m->nlayers, n = s->n;
    const int last = memplan_resolve(m, L - 1);
    for (int op = 0; op <= 2 * L && !s->failed; op++) {
        p->ops[op].first = p->nevents;
        if (op < L) { /* forward of layer op */
            int i = op;
            const model_layer *l = &m->layers[i];
            /* the bfloat16 copy of the layer before, made now that that
             * layer's input may be gone */
            if (i > 0 && p->packed[i - 1]) {
                /* (in the spill file, not the arena: model.spill_packed) */
                s->pk[i - 1] = memplan__place(s, MEMPLAN_PACKED, i - 1,
                                              m->spill_packed ? 0
                                                              : memplan_packed_bytes(m, i - 1, n),
                                              false);
                memplan__event(s, MEMPLAN_PACK, i - 1, false);
            }
            /* the input of a concatenation of one sample that comes right
             * after it, read by nothing else and not kept: made in its
             * slice of the concatenation, placed now */
            int c = i + 1;
            uint64_t at = c < L && m->layers[c].type == LAYER_CONCAT && n == 1 && !s->keep_all &&
                                  !p->kept[i] && !p->packed[i] && s->fwd_last[i] == c &&
                                  !model_layer_is_view(l)
                              ? memplan__slice(s, c, i)
                              : UINT64_MAX;
            /* an output a later concatenation of one sample reads (a
             * skip connection), not kept: made in its slice of that
             * concatenation, with a life of its own; the concatenation's
             * buffer is placed when the concatenation's own life begins */
            int sc = memplan__skip_of(s, i);
            uint64_t sat = sc >= 0 ? memplan__slice(s, sc, i) : UINT64_MAX;
            if (at != UINT64_MAX && at % MEMPLAN_ALIGN == 0) {
                if (s->out[c] >= 0 && s->bufs[s->out[c]].event == UINT32_MAX)
                    memplan__activate(s, s->out[c], c);
                else
                    s->out[c] = memplan__place(s, MEMPLAN_OUT, c, memplan_out_bytes(m, c, n),
                                               false);
                s->out[i] = memplan__alias(s, i, s->out[c], at);
            } else if (sat != UINT64_MAX && sat % MEMPLAN_ALIGN == 0 && s->out[sc] < 0 &&
                       s->out[i] < 0) {
                s->out[sc] = memplan__reserve(s, sc, memplan_out_bytes(m, sc, n));
                if (s->out[sc] >= 0)
                    s->out[i] = memplan__alias_own(s, MEMPLAN_OUT, i, s->out[sc], sat,
                                                   memplan_out_bytes(m, i, n));
            } else if (s->out[i] >= 0 && s->bufs[s->out[i]].event == UINT32_MAX) {
                memplan__activate(s, s->out[i], i); /* reserved by a skip connection */
            } else if (!model_layer_is_view(l) && s->out[i] < 0) {
                s->out[i] = memplan__place(s, MEMPLAN_OUT, i, memplan_out_bytes(m, i, n), false);
            }
            if (!model_layer_is_view(l)) {
                uint64_t aux = memplan_aux_bytes(m, l, n);
                if (aux)
                    s->aux[i] = memplan__place(s, MEMPLAN_AUX, i, aux, false);
            }
            p->ops[op].count = p->nevents - p->ops[op].first;
            s->t++; /* it runs */
            /* what no later forward operation reads goes; an output to
             * be packed, after its packing */
            for (int j = 0; j <= i; j++)
                if (s->out[j] >= 0 &&
                    (p->packed[j] ? s->fwd_last[j] <= i && j < i : s->fwd_last[j] == i) &&
                    !(p->kept[j] && !p->packed[j] && s->need_last[j] >= 0))
                    memplan__free(s, &s->out[j]);
        } else if (op == L) { /* the loss */
            if (s->dout[last] < 0 && last >= 0)
                s->dout[last] = memplan__place(s, MEMPLAN_DOUT, last,
                                               memplan_out_bytes(m, last, n), false);
            uint64_t lb = memplan_loss_bytes(m, n);
            if (lb)
                s->loss = memplan__place(s, MEMPLAN_LOSS, -1, lb, false);
            p->ops[op].count = p->nevents - p->ops[op].first;
            s->t++;
            memplan__free(s, &s->loss);
            for (int j = 0; j < L; j++) {
                if (s->out[j] >= 0 && p->kept[j] && !p->packed[j] && s->need_last[j] <= op)
                    memplan__free(s, &s->out[j]);
                if (s->pk[j] >= 0 && s->need_last[j] <= op)
                    memplan__free(s, &s->pk[j]);
            }
        } else { /* backward of layer i */
            int i = 2 * L - op;
            const model_layer *l = &m->layers[i];
            if (model_layer_is_view(l)) { /* a view: nothing of its own */
                p->ops[op].count = 0;
                continue;
            }
            int r0 = memplan__reads_input(l->type) ? memplan_resolve(m, l->inputs[0]) : -2;
            int r1 = memplan__reads_output(l) ? i : -2;
            if (r0 >= 0)
                memplan__ensure(s, r0, op, r0, r1);
            if (r1 >= 0)
                memplan__ensure(s, r1, op, r0, r1);
            if (s->dout[i] < 0) /* nothing read its output: a zero gradient */
                s->dout[i] = memplan__place(s, MEMPLAN_DOUT, i, memplan_out_bytes(m, i, n), true);
            /* a 3-D convolution whose input goes with this operation: its
             * weight gradient first, then the input freed and its input's
             * gradient placed (memplan_op.mid), then that gradient */
            bool split = l->type == LAYER_CONV3D && !s->keep_all && r0 >= 0 && s->out[r0] >= 0 &&
                         !(p->kept[r0] && !p->packed[r0] ? s->need_last[r0] > op
                                                         : memplan__stays(s, r0, op));
            if (split) {
                p->ops[op].count = p->nevents - p->ops[op].first;
                s->t++;
                memplan__free_now(s, &s->out[r0]);
            }
            uint64_t sb = memplan_scratch_bytes(m, i, n);
            /* the input gradients written whole where they are new: every one
             * of them (an add copies its output's gradient where it would
             * add it to zeros) */
            bool direct = sb > 0 || l->type == LAYER_ADD;
            for (int k = 0; k < l->ninputs; k++) {
                int src = memplan_resolve(m, l->inputs[k]);
                if (src >= 0 && s->dout[src] >= 0)
                    direct = false;
            }
            for (int k = 0; k < l->ninputs; k++) {
                int src = memplan_resolve(m, l->inputs[k]);
                /* a concatenation's (one sample) input whose backward pass
                 * comes next: its gradient is its slice of the
                 * concatenation's; a norm's input whose gradient is new:
                 * its gradient made where the norm's output's is, element
                 * by element after the sums (op_groupnorm_backward,
                 * op_batchnorm_backward, in place) */
                uint64_t at = l->type == LAYER_CONCAT && n == 1 && direct && !s->keep_all &&
                                      src >= 0 && 2 * L - src == op + 1
                                  ? memplan__slice(s, i, src)
                              : (l->type == LAYER_GROUP_NORM || l->type == LAYER_BATCH_NORM) &&
                                        direct && !s->keep_all
                                  ? 0
                                  : UINT64_MAX;
                /* an input whose backward pass comes later: its gradient
                 * in its slice too, with a life of its own (the rest of
                 * the concatenation's gradient goes with this operation) */
                uint64_t own = l->type == LAYER_CONCAT && n == 1 && direct && !s->keep_all &&
                                       src >= 0 && at == UINT64_MAX && s->dout[i] >= 0 &&
                                       s->bufs[s->dout[i]].parent < 0
                                   ? memplan__slice(s, i, src)
                                   : UINT64_MAX;
                if (src >= 0 && s->dout[src] < 0) {
                    s->dout[src] = at != UINT64_MAX && at % MEMPLAN_ALIGN == 0
                                       ? memplan__alias_as(s, MEMPLAN_DOUT, src, s->dout[i], at)
                                   : own != UINT64_MAX && own % MEMPLAN_ALIGN == 0
                                       ? memplan__alias_own(s, MEMPLAN_DOUT, src, s->dout[i], own,
                                                            memplan_out_bytes(m, src, n))
                                       : memplan__place(s, MEMPLAN_DOUT, src,
                                                        memplan_out_bytes(m, src, n), !direct);
                    p->events[p->nevents - 1].direct = direct;
                }
            }
            if (sb && !direct)
                s->scratch = memplan__place(s, MEMPLAN_SCRATCH, i, sb, false);
            if (split)
                p->ops[op].mid = p->nevents - p->ops[op].first - p->ops[op].count;
            else
                p->ops[op].count = p->nevents - p->ops[op].first;
            s->t++;
            memplan__free(s, &s->scratch);
            if (s->keep_all)
                goto next;
            memplan__free(s, &s->dout[i]);
            memplan__free(s, &s->aux[i]);
            for (int j = 0; j < L; j++) {
                if (s->pk[j] >= 0 && s->need_last[j] <= op)
                    memplan__free(s, &s->pk[j]);
                if (s->out[j] < 0)
                    continue;
                bool keep = p->kept[j] && !p->packed[j] ? s->need_last[j] > op
                                                        : memplan__stays(s, j, op);
                if (!keep)
                    memplan__free(s, &s->out[j]);
            }
        }
    next:
        s->t++;
    }
    /* anything still alive ends with the step */
    for (uint32_t b = 0; b < s->nbufs; b++)
        if (s->bufs[b].t1 == UINT64_MAX)
            s->bufs[b].t1 = s->t;
}

/* When each output is read: in the forward pass (its last reader), and in
 * the backward pass (the operations that read it, directly or by
 * recomputing a cheap layer that reads it). */
static void memplan__needs(memplan_sim *s)
{
    const model *m = s->m;
    memplan *p = s->p;
    const int L = m->nlayers;
    const int last = memplan_resolve(m, L - 1);
    for (int j = 0; j < L; j++) {
        s->fwd_last[j] = j;
        p->kept[j] = (memplan__costly(&m->layers[j]) && !(s->drop && s->drop[j])) || j == last ||
                     ((s->keep_all || m->keep_outputs) && !model_layer_is_view(&m->layers[j]));
    }
    for (int c = 0; c < L; c++)
        for (int k = 0; k < m->layers[c].ninputs; k++) {
            int j = memplan_resolve(m, m->layers[c].inputs[k]);
            if (j >= 0 && !model_layer_is_view(&m->layers[c]) && c > s->fwd_last[j])
                s->fwd_last[j] = c;
        }
    for (int j = L - 1; j >= 0; j--) {
        const model_layer *lj = &m->layers[j];
        if (model_layer_is_view(lj))
            continue;
        if (j == last)
            memplan__need(s, j, L);
        if (memplan__reads_output(lj))
            memplan__need(s, j, 2 * L - j);
        for (int c = j + 1; c < L; c++) {
            const model_layer *lc = &m->layers[c];
            if (model_layer_is_view(lc))
                continue;
            for (int k = 0; k < lc->ninputs; k++) {
                if (memplan_resolve(m, lc->inputs[k]) != j)
                    continue;
                if (k == 0 && memplan__reads_input(lc->type))
                    memplan__need(s, j, 2 * L - c);
                if (!p->kept[c]) /* recomputing c reads j */
                    for (size_t w = 0; w < s->words; w++)
                        s->needs[(size_t)j * s->words + w] |= s->needs[(size_t)c * s->words + w];
            }
        }
        s->need_last[j] = s->keep_all ? 2 * L + 1 : -1;
        for (int op = 2 * L; op >= L && !s->keep_all; op--)
            if (memplan__has(s, j, op)) {
                s->need_last[j] = op;
                break;
            }
        p->packed[j] = m->act_bf16 && !s->keep_all && p->kept[j] && memplan__costly(lj) && j != last &&
                       s->need_last[j] > L;
    }
}

static int memplan__by_size(const void *a, const void *b)
{
    const memplan_buf *x = *(const memplan_buf *const *)a, *y = *(const memplan_buf *const *)b;
    if (x->bytes != y->bytes)
        return x->bytes < y->bytes ? 1 : -1;
    return x->t0 < y->t0 ? -1 : x->t0 > y->t0;
}

/* A room a buffer takes: `bytes` at `delta` from its offset, over [t0, t1]. */
typedef struct memplan_room {
    uint64_t delta, bytes, t0, t1;
} memplan_room;

/* Buffer b's rooms into r (at most cap): its own, then its slices with
 * lives of their own (own_head, own_next: lists of them by buffer).
 * Returns how many. */
static uint32_t memplan__rooms(const memplan_sim *s, uint32_t b, const int *own_head,
                               const int *own_next, memplan_room *r, uint32_t cap)
{
    const memplan_buf *x = &s->bufs[b];
    uint32_t n = 0;
    r[n++] = (memplan_room){0, x->bytes, x->t0, x->t1};
    for (int c = own_head[b]; c >= 0 && n < cap; c = own_next[c])
        r[n++] = (memplan_room){s->bufs[c].delta, s->bufs[c].bytes, s->bufs[c].t0, s->bufs[c].t1};
    return n;
}

typedef struct memplan_span {
    int64_t lo, hi; /* offsets in (lo, hi) are taken */
} memplan_span;

static int memplan__by_lo(const void *a, const void *b)
{
    const memplan_span *x = a, *y = b;
    return x->lo < y->lo ? -1 : x->lo > y->lo;
}

#define MEMPLAN_ROOMS (MODEL_MAX_INPUTS + 1) /* a buffer's own, its slices' of their own */

/* Offsets: the largest buffer first, each at the lowest offset where none
 * of its rooms meets a room of a buffer already placed that is alive at
 * the same time (a buffer's rooms: its own, and its slices' that live on
 * after it). */
static int memplan__assign(memplan_sim *s)
{
    uint32_t all = s->nbufs, nb = 0;
    size_t cap = all ? all : 1;
    uint32_t *order = malloc(cap * sizeof(*order));
    int *own_head = malloc(cap * sizeof(int)), *own_next = malloc(cap * sizeof(int));
    memplan_span *span = NULL;
    size_t nspan_cap = 0;
    if (!order || !own_head || !own_next) {
        free(order);
        free(own_head);
        free(own_next);
        return -ENOMEM;
    }
    for (uint32_t b = 0; b < all; b++)
        own_head[b] = own_next[b] = -1;
    for (uint32_t b = all; b-- > 0;)
        if (s->bufs[b].own) {
            int q = s->bufs[b].parent;
            own_next[b] = own_head[q];
            own_head[q] = (int)b;
        }
    for (uint32_t b = 0; b < all; b++)
        if (s->bufs[b].parent < 0)
            order[nb++] = b;
    memplan_buf *base = s->bufs;
    /* largest first (memplan__by_size over pointers) */
    memplan_buf **byp = malloc(cap * sizeof(*byp));
    if (!byp) {
        free(order);
        free(own_head);
        free(own_next);
        return -ENOMEM;
    }
    for (uint32_t i = 0; i < nb; i++)
        byp[i] = &base[order[i]];
    qsort(byp, nb, sizeof(*byp), memplan__by_size);
    for (uint32_t i = 0; i < nb; i++)
        order[i] = (uint32_t)(byp[i] - base);
    free(byp);
    uint64_t arena = 0;
    int rc = 0;
    for (uint32_t i = 0; i < nb; i++) {
        uint32_t b = order[i];
        memplan_room rb[MEMPLAN_ROOMS], rk[MEMPLAN_ROOMS];
        uint32_t nrb = memplan__rooms(s, b, own_head, own_next, rb, MEMPLAN_ROOMS);
        size_t nspan = 0;
        for (uint32_t k = 0; k < i; k++) {
            uint32_t q = order[k];
            uint32_t nrk = memplan__rooms(s, q, own_head, own_next, rk, MEMPLAN_ROOMS);
            for (uint32_t u = 0; u < nrb; u++)
                for (uint32_t v = 0; v < nrk; v++) {
                    if (!(rb[u].t0 <= rk[v].t1 && rk[v].t0 <= rb[u].t1))
                        continue;
                    if (nspan == nspan_cap) {
                        size_t nc = nspan_cap ? 2 * nspan_cap : 256;
                        memplan_span *ns = realloc(span, nc * sizeof(*ns));
                        if (!ns) {
                            rc = -ENOMEM;
                            goto out;
                        }
                        span = ns;
                        nspan_cap = nc;
                    }
                    int64_t at = (int64_t)(base[q].offset + rk[v].delta);
                    span[nspan++] = (memplan_span){
                        at - (int64_t)rb[u].delta - (int64_t)rb[u].bytes,
                        at + (int64_t)rk[v].bytes - (int64_t)rb[u].delta};
                }
        }
        /* the lowest offset in no span: sweep the spans by their starts */
        if (nspan > 1)
            qsort(span, nspan, sizeof(*span), memplan__by_lo);
        int64_t off = 0;
        for (size_t k = 0; k < nspan && span[k].lo < off; k++)
            if (span[k].hi > off)
                off = span[k].hi;
        base[b].offset = (uint64_t)off;
        s->p->events[base[b].event].offset = (uint64_t)off;
        for (uint32_t u = 0; u < nrb; u++)
            if ((uint64_t)off + rb[u].delta + rb[u].bytes > arena)
                arena = (uint64_t)off + rb[u].delta + rb[u].bytes;
    }
    s->p->arena = arena;
    for (uint32_t b = 0; b < all; b++) /* the slices: where their buffers lie */
        if (s->bufs[b].parent >= 0) {
            const memplan_buf *in = &s->bufs[s->bufs[b].parent];
            s->bufs[b].offset = in->offset + s->bufs[b].delta;
            s->p->events[s->bufs[b].event].offset = s->bufs[b].offset;
        }
    /* the most bytes alive at once, for the record (a slice with a life
     * of its own counts where its buffer is gone) */
    uint64_t peak = 0;
    for (uint32_t i = 0; i < all; i++) {
        uint64_t live = 0, t = s->bufs[i].t0;
        for (uint32_t k = 0; k < all; k++) {
            const memplan_buf *x = &s->bufs[k];
            if (x->t0 <= t && t <= x->t1 &&
                !(x->own && s->bufs[x->parent].t0 <= t && t <= s->bufs[x->parent].t1))
                live += x->bytes;
        }
        if (live > peak)
            peak = live;
    }
    s->p->peak_live = peak;
out:
    free(order);
    free(own_head);
    free(own_next);
    free(span);
    return rc;
}

int memplan_build(memplan *p, const model *m, int n)
{
    return memplan_build_as(p, m, n, false);
}

static int memplan__run(memplan *p, const model *m, int n, bool keep_all, const bool *drop)
{
    memset(p, 0, sizeof(*p));
    const int L = m->nlayers;
    p->nlayers = L;
    p->n = n;
    memplan_sim s = {.m = m, .p = p, .n = n, .scratch = -1, .loss = -1, .keep_all = keep_all,
                     .spare_parent = -1, .drop = drop};
    s.words = (size_t)(2 * L + 1 + 63) / 64;
    size_t nl = L ? (size_t)L : 1;
    p->ops = calloc(2 * nl + 1, sizeof(*p->ops));
    p->kept = calloc(nl, sizeof(*p->kept));
    p->packed = calloc(nl, sizeof(*p->packed));
    s.out = malloc(nl * sizeof(int));
    s.dout = malloc(nl * sizeof(int));
    s.aux = malloc(nl * sizeof(int));
    s.pk = malloc(nl * sizeof(int));
    s.fwd_last = malloc(nl * sizeof(int));
    s.need_last = malloc(nl * sizeof(int));
    s.made = malloc(nl * sizeof(int));
    s.needs = calloc(nl * s.words, sizeof(uint64_t));
    int rc = -ENOMEM;
    if (!p->ops || !p->kept || !p->packed || !s.out || !s.dout || !s.aux || !s.pk ||
        !s.fwd_last || !s.need_last || !s.made || !s.needs)
        goto done;
    for (int j = 0; j < L; j++)
        s.out[j] = s.dout[j] = s.aux[j] = s.pk[j] = s.made[j] = -1;
    memplan__needs(&s);
    memplan__simulate(&s);
    for (uint32_t b = 0; b < s.nbufs; b++) /* every reserved buffer placed */
        s.failed |= s.bufs[b].event == UINT32_MAX;
    memplan__hold(&s);
    if (!s.failed)
        rc = memplan__assign(&s);
done:
    free(s.bufs);
    free(s.out);
    free(s.dout);
    free(s.aux);
    free(s.pk);
    free(s.fwd_last);
    free(s.need_last);
    free(s.made);
    free(s.needs);
    if (rc < 0)
        memplan_free(p);
    return rc;
}

/* The multiply-adds (times 2) a step spends making outputs again. */
static double memplan__recompute_flops(const memplan *p, const model *m, int n)
{
    double f = 0;
    for (uint32_t k = 0; k < p->nevents; k++)
        if (p->events[k].kind == MEMPLAN_RECOMPUTE)
            f += (double)m->layers[p->events[k].layer].flops * n;
    return f;
}

/* Costly outputs the plan makes again rather than keeps, chosen one at a
 * time: each time the one whose absence lowers the arena most, while that
 * is at least MEMPLAN_LIGHTEN_GAIN of it and everything made again in a
 * step costs at most MEMPLAN_LIGHTEN_FLOPS of the step's own work (three
 * forward passes). Only convolutions whose output is at least 1/32 of the
 * arena are tried (a large image's or a volume's). p holds the best plan. */
static int memplan__lighten(memplan *p, const model *m, int n)
{
    const int L = m->nlayers;
    const int last = memplan_resolve(m, L - 1);
    double step = 0;
    for (int j = 0; j < L; j++)
        step += 3.0 * (double)m->layers[j].flops * n;
    bool *drop = calloc(L ? (size_t)L : 1, sizeof(bool));
    if (!drop)
        return -ENOMEM;
    for (int round = 0; round < MEMPLAN_LIGHTEN_ROUNDS; round++) {
        memplan best = {0};
        int pick = -1;
        for (int j = 0; j < L; j++) {
            if (!memplan__conv(m->layers[j].type) || !p->kept[j] || drop[j] || j == last ||
                32 * memplan_out_bytes(m, j, n) < p->arena)
                continue;
            drop[j] = true;
            memplan t;
            int rc = memplan__run(&t, m, n, false, drop);
            drop[j] = false;
            if (rc < 0) {
                memplan_free(&best);
                free(drop);
                return rc;
            }
            uint64_t bar = pick < 0 ? p->arena - (uint64_t)(p->arena * MEMPLAN_LIGHTEN_GAIN)
                                    : best.arena;
            if (t.arena < bar && memplan__recompute_flops(&t, m, n) <= MEMPLAN_LIGHTEN_FLOPS * step) {
                memplan_free(&best);
                best = t;
                pick = j;
            } else {
                memplan_free(&t);
            }
        }
        if (pick < 0)
            break;
        drop[pick] = true;
        memplan_free(p);
        *p = best;
    }
    free(drop);
    return 0;
}

int memplan_build_as(memplan *p, const model *m, int n, bool keep_all)
{
    int rc = memplan__run(p, m, n, keep_all, NULL);
    if (rc < 0 || keep_all || m->keep_outputs || !m->lighten)
        return rc;
    rc = memplan__lighten(p, m, n);
    if (rc < 0)
        memplan_free(p);
    return rc;
}

void memplan_free(memplan *p)
{
    free(p->ops);
    free(p->events);
    free(p->kept);
    free(p->packed);
    memset(p, 0, sizeof(*p));
}
