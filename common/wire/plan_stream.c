/* The order of a job's weight stream: one cursor for memoryx and swarmx. */
#include "plan_stream.h"

#include <errno.h>
#include <stdio.h>
#include <strings.h>

#include "plan.h"

uint32_t plan_stream_states(const Appliance__Plan *p)
{
    const Appliance__PlanOptimizer *o = p->optimizer;
    if (!o)
        return 0;
    if (o->type && strcasecmp(o->type, "sgd") == 0)
        return o->momentum > 0 ? 1 : 0;
    return 2;
}

uint64_t plan_stream_tensor_elems(const Appliance__Plan *p, uint32_t id)
{
    const Appliance__PlanTensor *t = p->tensors[id];
    uint64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++)
        n *= t->dims[d];
    return n;
}

static bool plan_stream__pipelined(const Appliance__Plan *p)
{
    return p->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
}

void plan_stream_start(plan_stream *s, const Appliance__Plan *p, uint32_t shard, uint32_t states,
                       uint64_t step, uint64_t seq)
{
    bool pipelined = plan_stream__pipelined(p);
    *s = (plan_stream){.plan = p, .shard = shard, .states = states, .step = step, .seq = seq};
    /* Pipelined: the weights go out once, at the first step; the replicas
     * apply the same updates to their resident copies. */
    s->done = pipelined && step != p->first_step;
    s->training = !s->done && step < p->max_steps;
    /* Weight Streaming evaluates with the weights streamed once more per
     * eval batch, before the step's training passes. */
    s->eval_pass = !pipelined && plan_eval_at(p, step) ? 1 : 0;
    if (!s->training && s->eval_pass == 0)
        s->done = true;
}

/* State tensors that go with tensor id: a resumed Pipelined job gives the
 * replicas the optimizer state, as they apply the updates themselves. */
static uint32_t plan_stream__states_of(const plan_stream *s, uint32_t id)
{
    const Appliance__Plan *p = s->plan;
    return plan_stream__pipelined(p) && p->n_resume_weights > 0 && p->tensors[id]->trainable
               ? s->states
               : 0;
}

static size_t plan_stream__len(const plan_stream *s, const uint32_t **list)
{
    const Appliance__Plan *p = s->plan;
    *list = s->list == 0 ? p->fwd_stream : p->bwd_stream;
    return s->list == 0 ? p->n_fwd_stream : p->n_bwd_stream;
}

/* Past the end of the current list: the next pass, or done. */
static void plan_stream__next_list(plan_stream *s)
{
    const Appliance__Plan *p = s->plan;
    s->pos = 0;
    s->off = 0;
    s->sidx = 0;
    if (s->eval_pass > 0) {
        /* one forward pass per eval batch; then the step's training */
        if (s->eval_pass++ < p->eval_batches)
            return;
        s->eval_pass = 0;
        if (!s->training)
            s->done = true;
        return;
    }
    if (s->list == 0) {
        s->list = 1;
        return;
    }
    s->done = true;
}

bool plan_stream_next(plan_stream *s, plan_chunk *c)
{
    const Appliance__Plan *p = s->plan;
    const uint64_t chunk = p->chunk_elems;
    while (!s->done) {
        const uint32_t *list;
        size_t n = plan_stream__len(s, &list);
        if (s->pos >= n) {
            plan_stream__next_list(s);
            continue;
        }
        uint32_t id = list[s->pos];
        uint64_t elems = plan_stream_tensor_elems(p, id);
        uint32_t nstates = plan_stream__states_of(s, id);
        if (s->shard != PLAN_STREAM_ALL_SHARDS && p->tensors[id]->shard != s->shard) {
            /* another shard's tensor: count its chunks in the stream */
            s->seq += (elems + chunk - 1) / chunk * (1 + nstates);
            s->pos++;
            s->off = 0;
            s->sidx = 0;
            continue;
        }
        uint64_t count = elems - s->off < chunk ? elems - s->off : chunk;
        *c = (plan_chunk){
            .step = s->step, .tensor = id, .offset = s->off, .count = count, .total = elems,
            .state = s->sidx, .seq = s->seq, .eval_pass = s->eval_pass,
            .pass = plan_stream__pipelined(p) ? APPLIANCE__PASS__PASS_RESIDENT
                    : s->list == 0            ? APPLIANCE__PASS__PASS_FORWARD
                                              : APPLIANCE__PASS__PASS_BACKWARD,
        };
        return true;
    }
    return false;
}

int plan_stream_expect(plan_stream *s, const Appliance__Plan *p, const Appliance__WeightChunk *w,
                       char *why, size_t whylen)
{
    plan_chunk c;
    bool have = s->plan && plan_stream_next(s, &c);
    if (!have) { /* the previous step's stream is over: this chunk opens the next */
        plan_stream_start(s, p, PLAN_STREAM_ALL_SHARDS, plan_stream_states(p), w->step, s->seq);
        have = plan_stream_next(s, &c);
    }
    if (!have) {
        snprintf(why, whylen, "weight chunk %llu: step %llu streams no weights",
                 (unsigned long long)w->seq, (unsigned long long)w->step);
        return -EPROTO;
    }
    if (w->step != c.step || w->seq != c.seq || w->tensor_id != c.tensor || w->offset != c.offset ||
        w->count != c.count || w->state != c.state || w->eval_pass != c.eval_pass ||
        w->pass != c.pass) {
        snprintf(why, whylen, "weight chunk %llu (step %llu, tensor %u [%llu, +%llu), state %u, "
                 "eval pass %u) is not the stream's next: chunk %llu of step %llu, tensor %u "
                 "[%llu, +%llu), state %u, eval pass %u",
                 (unsigned long long)w->seq, (unsigned long long)w->step, w->tensor_id,
                 (unsigned long long)w->offset, (unsigned long long)w->count, w->state,
                 w->eval_pass, (unsigned long long)c.seq, (unsigned long long)c.step, c.tensor,
                 (unsigned long long)c.offset, (unsigned long long)c.count, c.state, c.eval_pass);
        return -EPROTO;
    }
    plan_stream_take(s);
    return 0;
}

void plan_stream_take(plan_stream *s)
{
    plan_chunk c;
    if (!plan_stream_next(s, &c))
        return;
    s->seq++;
    s->off += c.count;
    if (s->off < c.total)
        return;
    s->off = 0;
    if (s->sidx < plan_stream__states_of(s, c.tensor)) {
        s->sidx++;
    } else {
        s->sidx = 0;
        s->pos++;
    }
}
