/* The checks of incoming messages that need no daemon state. */
#include "msgcheck.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "auth.h"
#include "errmsg.h"
#include "frame.h"
#include "plan.h"
#include "sample.h"
#include "sstream.h"

/* protobuf-c gives "" for an absent string; a hand-built message may hold
 * NULL. */
static size_t msgcheck__len(const char *s)
{
    return s ? strlen(s) : 0;
}

int msgcheck_hello(const Appliance__Hello *h, char *err, size_t errlen)
{
    if (h->version != FRAME_VERSION)
        return errmsg(-EPROTONOSUPPORT, err, errlen, "protocol version %u, expected %u",
                              h->version, FRAME_VERSION);
    if (h->nonce.len != AUTH_NONCE_LEN || !h->nonce.data)
        return errmsg(-EPROTO, err, errlen, "hello nonce of %zu bytes, expected %d",
                              h->nonce.len, AUTH_NONCE_LEN);
    return 0;
}

int msgcheck_register(const Appliance__Register *r, Appliance__Role peer_role, char *err,
                      size_t errlen)
{
    bool daemon = r->role == APPLIANCE__ROLE__ROLE_MEMORYX || r->role == APPLIANCE__ROLE__ROLE_SWARMX ||
                  r->role == APPLIANCE__ROLE__ROLE_WORKER || r->role == APPLIANCE__ROLE__ROLE_WSE_NODE;
    if (!daemon || r->role != peer_role)
        return errmsg(-EINVAL, err, errlen, "bad registration: role %d (authenticated as %d)",
                              (int)r->role, (int)peer_role);
    size_t name = msgcheck__len(r->name);
    if (name == 0 || name >= 64)
        return errmsg(-EINVAL, err, errlen, "bad registration: a name of %zu bytes (1 to 63)",
                              name);
    if (msgcheck__len(r->advertised_addr) >= 128)
        return errmsg(-EINVAL, err, errlen, "bad registration: address of %zu bytes (at most 127)",
                              msgcheck__len(r->advertised_addr));
    if (msgcheck__len(r->host_id) >= 64 || msgcheck__len(r->host_name) >= 64)
        return errmsg(-EINVAL, err, errlen, "bad registration: a host id of %zu bytes and a host "
                      "name of %zu (at most 63 each)", msgcheck__len(r->host_id),
                      msgcheck__len(r->host_name));
    if (msgcheck__len(r->isa) >= 32 || r->conv_block > 64)
        return errmsg(-EINVAL, err, errlen, "bad registration: an instruction set's name of %zu "
                      "bytes (at most 31) or a block of %u channels (at most 64)",
                      msgcheck__len(r->isa), r->conv_block);
    return 0;
}

uint64_t msgcheck_tensor_elems(const Appliance__PlanTensor *t)
{
    uint64_t n = 1;
    for (size_t d = 0; d < t->n_dims; d++) {
        if (t->dims[d] != 0 && n > UINT64_MAX / t->dims[d])
            return UINT64_MAX;
        n *= t->dims[d];
    }
    return n;
}

/* Every id of a schedule names a tensor of the plan. */
static int msgcheck__ids(const uint32_t *ids, size_t n, const Appliance__Plan *p, const char *what,
                         char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (ids[i] >= p->n_tensors)
            return errmsg(-EINVAL, err, errlen, "plan: %s[%zu] names tensor %u of %zu", what,
                                  i, ids[i], p->n_tensors);
    return 0;
}

int msgcheck_plan(const Appliance__Plan *p, char *err, size_t errlen)
{
    if (!p)
        return errmsg(-EINVAL, err, errlen, "job start without a plan");
    size_t idlen = msgcheck__len(p->job_id);
    if (idlen == 0 || idlen >= MSGCHECK_JOB_ID_MAX)
        return errmsg(-EINVAL, err, errlen, "plan: a job id of %zu bytes (1 to %d)", idlen,
                              MSGCHECK_JOB_ID_MAX - 1);
    if (p->chunk_elems == 0 || p->chunk_elems > FRAME_DEFAULT_MAX_PAYLOAD / sizeof(float))
        return errmsg(-EINVAL, err, errlen, "plan: chunks of %llu elements (1 to %zu)",
                              (unsigned long long)p->chunk_elems,
                              (size_t)(FRAME_DEFAULT_MAX_PAYLOAD / sizeof(float)));
    if (p->micro_batch && p->mode != APPLIANCE__EXEC_MODE__MODE_PIPELINED)
        return errmsg(-EINVAL, err, errlen, "plan: micro-batches of %u samples outside Pipelined "
                      "execution", p->micro_batch);
    if (p->feed_credits > PLAN_FEED_CREDITS)
        return errmsg(-EINVAL, err, errlen, "plan: %u batches in flight to a wse-node (0 for %d, "
                      "or 1 to %d)", p->feed_credits, PLAN_FEED_CREDITS, PLAN_FEED_CREDITS);
    if (p->rows_as_depth && p->spatial_partitions > 1)
        return errmsg(-EINVAL, err, errlen, "plan: rows as depth with %u stripes a sample (only "
                      "with whole samples)", p->spatial_partitions);
    if (p->bwd_kept > 2 || (p->bwd_kept && p->mode != APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING))
        return errmsg(-EINVAL, err, errlen, "plan: %u layers kept across the turn of the pass (at "
                      "most 2, in Weight Streaming)", p->bwd_kept);
    if (p->n_shards == 0 || p->n_replicas == 0)
        return errmsg(-EINVAL, err, errlen, "plan: %zu shards, %zu replicas; each must be at "
                              "least 1", p->n_shards, p->n_replicas);
    if (p->n_swarm == 0 && (p->n_replicas != 1 || p->n_shards != 1))
        return errmsg(-EINVAL, err, errlen, "plan: no swarmx node between %zu replicas and %zu "
                              "shards (only one replica streams from one shard directly)",
                              p->n_replicas, p->n_shards);
    for (size_t i = 0; i < p->n_shards; i++)
        if (p->shards[i]->index != i)
            return errmsg(-EINVAL, err, errlen, "plan: shard %zu has index %u", i,
                                  p->shards[i]->index);
    for (size_t i = 0; i < p->n_tensors; i++) {
        const Appliance__PlanTensor *t = p->tensors[i];
        if (t->id != i)
            return errmsg(-EINVAL, err, errlen, "plan: tensor %zu has id %u", i, t->id);
        if (t->n_dims > MSGCHECK_MAX_DIMS || msgcheck_tensor_elems(t) > MSGCHECK_MAX_TENSOR_ELEMS)
            return errmsg(-EINVAL, err, errlen, "plan: tensor %zu has %zu dimensions of "
                                  "%llu elements in all", i, t->n_dims,
                                  (unsigned long long)msgcheck_tensor_elems(t));
        if (t->shard >= p->n_shards)
            return errmsg(-EINVAL, err, errlen, "plan: tensor %zu on shard %u of %zu", i,
                                  t->shard, p->n_shards);
        if (!(t->sparsity >= 0.0f && t->sparsity < 1.0f))
            return errmsg(-EINVAL, err, errlen, "plan: tensor %zu has sparsity %g (a level in "
                          "[0, 1))", i, (double)t->sparsity);
        if (t->sparsity > 0 && (!p->sparsity || !t->trainable ||
                                p->mode != APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING))
            return errmsg(-EINVAL, err, errlen, "plan: tensor %zu is sparse without a sparsity "
                          "section, in a buffer, or outside Weight Streaming", i);
    }
    int rc;
    if ((rc = msgcheck__ids(p->fwd_stream, p->n_fwd_stream, p, "fwd_stream", err, errlen)) < 0 ||
        (rc = msgcheck__ids(p->bwd_stream, p->n_bwd_stream, p, "bwd_stream", err, errlen)) < 0 ||
        (rc = msgcheck__ids(p->grad_order, p->n_grad_order, p, "grad_order", err, errlen)) < 0)
        return rc;
    for (size_t i = 0; i < p->n_swarm; i++) {
        const Appliance__PlanSwarmNode *s = p->swarm[i];
        if (s->index != i || s->parent < -1 || (s->parent >= 0 && (size_t)s->parent >= p->n_swarm) ||
            s->parent == (int32_t)i)
            return errmsg(-EINVAL, err, errlen, "plan: swarmx node %zu has index %u and "
                                  "parent %d of %zu", i, s->index, s->parent, p->n_swarm);
        for (size_t k = 0; k < s->n_children_swarmx; k++)
            if (s->children_swarmx[k] >= p->n_swarm)
                return errmsg(-EINVAL, err, errlen, "plan: swarmx node %zu has child node "
                                      "%u of %zu", i, s->children_swarmx[k], p->n_swarm);
        for (size_t k = 0; k < s->n_children_replicas; k++)
            if (s->children_replicas[k] >= p->n_replicas)
                return errmsg(-EINVAL, err, errlen, "plan: swarmx node %zu has child "
                                      "replica %u of %zu", i, s->children_replicas[k],
                                      p->n_replicas);
    }
    for (size_t i = 0; i < p->n_replicas; i++) {
        const Appliance__PlanReplica *r = p->replicas[i];
        bool direct = p->n_swarm == 0 && r->swarm_parent == -1;
        if (r->index != i || (!direct && (r->swarm_parent < 0 || (size_t)r->swarm_parent >= p->n_swarm)))
            return errmsg(-EINVAL, err, errlen, "plan: replica %zu has index %u and swarmx "
                                  "parent %d of %zu", i, r->index, r->swarm_parent, p->n_swarm);
    }
    for (size_t i = 0; i < p->n_workers; i++) {
        const Appliance__PlanWorker *w = p->workers[i];
        uint32_t slots = w->slots ? w->slots : 1;
        if (w->replica >= p->n_replicas || w->slot >= slots)
            return errmsg(-EINVAL, err, errlen, "plan: worker %zu feeds replica %u of %zu "
                                  "in slot %u of %u", i, w->replica, p->n_replicas, w->slot, slots);
    }
    if (p->eval_batches > 0 && p->eval_batch == 0)
        return errmsg(-EINVAL, err, errlen, "plan: %u eval batches of no samples",
                              p->eval_batches);
    uint32_t parts = msgcheck_parts(p);
    if (parts > MSGCHECK_MAX_PARTS || p->n_replicas % parts != 0)
        return errmsg(-EINVAL, err, errlen, "plan: %zu replicas in groups of %u stripes "
                      "(at most %d)", p->n_replicas, parts, MSGCHECK_MAX_PARTS);
    for (size_t i = 0; parts > 1 && i < p->n_replicas; i++) {
        const Appliance__PlanReplica *r = p->replicas[i], *g = p->replicas[i - i % parts];
        if (r->batch != g->batch || r->batch_offset != g->batch_offset)
            return errmsg(-EINVAL, err, errlen, "plan: replica %zu, stripe %zu of a group, has "
                          "samples [%u, +%u), its group [%u, +%u)", i, i % parts,
                          r->batch_offset, r->batch, g->batch_offset, g->batch);
    }
    return 0;
}

uint32_t msgcheck_parts(const Appliance__Plan *p)
{
    return p->spatial_partitions > 1 ? p->spatial_partitions : 1;
}

int msgcheck_halo(const Appliance__Halo *h, const Appliance__Plan *p, uint32_t len, char *err,
                  size_t errlen)
{
    uint64_t chunk = p->chunk_elems;
    if (msgcheck_parts(p) < 2)
        return errmsg(-EPROTO, err, errlen, "halo rows in a job without spatial partitions");
    if (h->total > MSGCHECK_MAX_TENSOR_ELEMS || h->offset > h->total ||
        h->count > h->total - h->offset || h->count > chunk || (h->count == 0 && h->total > 0) ||
        (uint64_t)len != h->count * sizeof(float))
        return errmsg(-EINVAL, err, errlen, "halo frame of %llu floats at %llu of %llu in %u "
                      "bytes (frames of at most %llu)", (unsigned long long)h->count,
                      (unsigned long long)h->offset, (unsigned long long)h->total, len,
                      (unsigned long long)chunk);
    return 0;
}

int msgcheck_collective(const Appliance__Collective *c, const Appliance__Plan *p, uint32_t len,
                        char *err, size_t errlen)
{
    uint32_t parts = msgcheck_parts(p);
    if (parts < 2 && !p->sync_batchnorm)
        return errmsg(-EPROTO, err, errlen, "a collective sum in a job without spatial "
                      "partitions or synchronised batch norm");
    if (!c->all && c->group >= p->n_replicas / parts)
        return errmsg(-EINVAL, err, errlen, "a collective sum of group %u: the plan has %zu",
                      c->group, p->n_replicas / parts);
    if (c->count == 0 || c->count > MSGCHECK_MAX_COLLECTIVE || (uint64_t)len != c->count * 8ull)
        return errmsg(-EINVAL, err, errlen, "a collective sum of %u doubles in %u bytes (1 to "
                      "%d)", c->count, len, MSGCHECK_MAX_COLLECTIVE);
    return 0;
}

/* A chunk of a plan tensor: in range, and len bytes of count floats. */
uint32_t msgcheck_wire_elem(const Appliance__Plan *p)
{
    return p->wire_bf16 ? 2 : sizeof(float);
}

static int msgcheck__chunk(const char *what, uint32_t tensor_id, uint64_t offset, uint64_t count,
                           uint64_t total, const Appliance__Plan *p, uint32_t len, char *err,
                           size_t errlen)
{
    if (tensor_id >= p->n_tensors)
        return errmsg(-EINVAL, err, errlen, "%s of tensor %u: the plan has %zu tensors", what,
                              tensor_id, p->n_tensors);
    uint64_t n = msgcheck_tensor_elems(p->tensors[tensor_id]);
    if (total != n || offset > n || count > n - offset)
        return errmsg(-EINVAL, err, errlen, "%s of tensor %u: elements [%llu, +%llu) of "
                              "%llu; the tensor has %llu", what, tensor_id,
                              (unsigned long long)offset, (unsigned long long)count,
                              (unsigned long long)total, (unsigned long long)n);
    /* count <= n <= MSGCHECK_MAX_TENSOR_ELEMS: the product cannot wrap. */
    if ((uint64_t)len != count * msgcheck_wire_elem(p))
        return errmsg(-EINVAL, err, errlen, "%s of tensor %u: %llu %s elements in %u bytes",
                      what, tensor_id, (unsigned long long)count,
                      p->wire_bf16 ? "bfloat16" : "float32", len);
    return 0;
}

/* A chunk's packing (sstream.h) against the plan: a sparse tensor's
 * (streamed packed: why_dense when not), len what it takes, less than
 * dense and not nothing. The range was checked. */
static int msgcheck__packing(const char *what, uint32_t tensor_id, uint64_t count, uint32_t packing,
                             uint64_t kept, bool why_dense, const Appliance__Plan *p, uint32_t len,
                             char *err, size_t errlen)
{
    if (why_dense)
        return errmsg(-EINVAL, err, errlen, "%s of tensor %u packed (%s), but the plan streams "
                      "it dense (sparse tensors' weights and gradients alone travel packed)",
                      what, tensor_id, sstream_name(packing));
    uint32_t elem = msgcheck_wire_elem(p);
    uint64_t want = sstream_bytes(packing, count, kept, elem);
    if (want == UINT64_MAX || want == 0 || packing == SSTREAM_DENSE || want >= count * elem ||
        (uint64_t)len != want)
        return errmsg(-EINVAL, err, errlen, "%s of tensor %u: %s packing of %llu kept of %llu "
                      "elements in %u bytes (%llu expected, under the %llu of dense)", what,
                      tensor_id, sstream_name(packing), (unsigned long long)kept,
                      (unsigned long long)count, len,
                      (unsigned long long)(want == UINT64_MAX ? 0 : want),
                      (unsigned long long)(count * elem));
    return 0;
}

/* Whether the plan streams tensor id (in range) dense: no sparsity, or
 * sparsity.compressed_streams = false. */
static bool msgcheck__streams_dense(const Appliance__Plan *p, uint32_t id)
{
    return !(p->tensors[id]->sparsity > 0) || !p->sparsity || p->sparsity->dense_streams;
}

int msgcheck_weight_chunk(const Appliance__WeightChunk *w, const Appliance__Plan *p, uint32_t len,
                          char *err, size_t errlen)
{
    if ((uint32_t)w->packing == SSTREAM_DENSE && w->kept == 0)
        return msgcheck__chunk("weight chunk", w->tensor_id, w->offset, w->count, w->total, p, len,
                               err, errlen);
    /* packed: the range as a dense chunk of it would be, then the packing */
    int rc = msgcheck__chunk("weight chunk", w->tensor_id, w->offset, w->count, w->total, p,
                             (uint32_t)(w->count * msgcheck_wire_elem(p)), err, errlen);
    if (rc < 0)
        return rc;
    bool dense = msgcheck__streams_dense(p, w->tensor_id) ||
                 (w->pass != APPLIANCE__PASS__PASS_FORWARD && w->pass != APPLIANCE__PASS__PASS_BACKWARD);
    return msgcheck__packing("weight chunk", w->tensor_id, w->count, (uint32_t)w->packing, w->kept,
                             dense, p, len, err, errlen);
}

/* A packed chunk's index, once its payload is in. */
static int msgcheck__payload(const char *what, uint32_t tensor_id, uint64_t offset, uint64_t count,
                             uint32_t packing, uint64_t kept, const Appliance__Plan *p,
                             const void *payload, uint32_t len, char *err, size_t errlen)
{
    if (packing == SSTREAM_DENSE)
        return 0;
    char why[200];
    if (sstream_check(packing, count, kept, msgcheck_wire_elem(p), payload, len, why,
                      sizeof(why)) < 0)
        return errmsg(-EINVAL, err, errlen, "%s of tensor %u [%llu, +%llu): %s", what, tensor_id,
                      (unsigned long long)offset, (unsigned long long)count, why);
    return 0;
}

int msgcheck_weight_payload(const Appliance__WeightChunk *w, const Appliance__Plan *p,
                            const void *payload, uint32_t len, char *err, size_t errlen)
{
    return msgcheck__payload("weight chunk", w->tensor_id, w->offset, w->count,
                             (uint32_t)w->packing, w->kept, p, payload, len, err, errlen);
}

bool msgcheck_grads_pack(const Appliance__Plan *p, uint32_t id)
{
    return id < p->n_tensors && !msgcheck__streams_dense(p, id) && p->sparsity->type &&
           strcmp(p->sparsity->type, "rigl") != 0;
}

int msgcheck_grad_chunk(const Appliance__GradChunk *g, const Appliance__Plan *p, uint32_t len,
                        char *err, size_t errlen)
{
    if ((uint32_t)g->packing == SSTREAM_DENSE && g->kept == 0)
        return msgcheck__chunk("gradient chunk", g->tensor_id, g->offset, g->count, g->total, p,
                               len, err, errlen);
    int rc = msgcheck__chunk("gradient chunk", g->tensor_id, g->offset, g->count, g->total, p,
                             (uint32_t)(g->count * msgcheck_wire_elem(p)), err, errlen);
    if (rc < 0)
        return rc;
    return msgcheck__packing("gradient chunk", g->tensor_id, g->count, (uint32_t)g->packing,
                             g->kept, !msgcheck_grads_pack(p, g->tensor_id), p, len, err, errlen);
}

int msgcheck_grad_payload(const Appliance__GradChunk *g, const Appliance__Plan *p,
                          const void *payload, uint32_t len, char *err, size_t errlen)
{
    return msgcheck__payload("gradient chunk", g->tensor_id, g->offset, g->count,
                             (uint32_t)g->packing, g->kept, p, payload, len, err, errlen);
}

int msgcheck_batch(const Appliance__Batch *b, const Appliance__Plan *p, uint32_t len, char *err,
                   size_t errlen)
{
    if (b->eval_batch > 0) {
        if (b->eval_batch > p->eval_batches || b->n > p->eval_batch)
            return errmsg(-EINVAL, err, errlen, "eval batch %u of %u samples: the plan has "
                                  "%u eval batches of at most %u", b->eval_batch, b->n,
                                  p->eval_batches, p->eval_batch);
    } else if (b->replica >= p->n_replicas || b->n != p->replicas[b->replica]->batch) {
        return errmsg(-EINVAL, err, errlen, "batch of %u samples for replica %u: the plan "
                              "has %zu replicas", b->n, b->replica, p->n_replicas);
    }
    const Appliance__PlanInput *in = b->eval_batch > 0 ? p->eval_input : p->train_input;
    bool unorm8 = in && in->input_unorm8, labels_u8 = in && in->labels_uint8;
    uint64_t bytes = sample_batch_bytes(b->n, b->sample_elems, b->label_elems, unorm8, labels_u8);
    if (bytes != b->total || (bytes == 0 && b->n > 0 && b->sample_elems > 0))
        return errmsg(-EINVAL, err, errlen, "batch of %u samples of %llu %s inputs and %u %s "
                      "labels in %llu bytes", b->n, (unsigned long long)b->sample_elems,
                      unorm8 ? "8-bit" : "float32", b->label_elems, labels_u8 ? "8-bit" : "int32",
                      (unsigned long long)b->total);
    uint64_t chunk = p->chunk_elems * sizeof(float);
    if (b->offset > b->total || len > b->total - b->offset || len > chunk ||
        (len == 0 && b->total > 0))
        return errmsg(-EINVAL, err, errlen, "batch frame of %u bytes at %llu of %llu (chunks of "
                      "%llu bytes)", len, (unsigned long long)b->offset,
                      (unsigned long long)b->total, (unsigned long long)chunk);
    return 0;
}

int msgcheck_credit(const Appliance__Credit *c, const Appliance__Plan *p, char *err, size_t errlen)
{
    if (c->eval_batch > 0 && c->eval_batch > p->eval_batches)
        return errmsg(-EINVAL, err, errlen, "no eval batch %u in this job", c->eval_batch);
    if (c->eval_batch == 0 && c->n > MSGCHECK_MAX_CREDITS)
        return errmsg(-EINVAL, err, errlen, "credit beyond the limit of %d batches",
                              MSGCHECK_MAX_CREDITS);
    return 0;
}

int msgcheck_stream_hello(const Appliance__StreamHello *h, Appliance__Role want,
                          const Appliance__Plan *p, char *err, size_t errlen)
{
    bool ok = want == APPLIANCE__ROLE__ROLE_UNKNOWN
                  ? h->role == APPLIANCE__ROLE__ROLE_SWARMX || h->role == APPLIANCE__ROLE__ROLE_WSE_NODE
                  : h->role == want;
    if (!ok)
        return errmsg(-EPROTO, err, errlen, "a stream from role %d is not taken here",
                              (int)h->role);
    if (msgcheck__len(h->job_id) == 0)
        return errmsg(-EINVAL, err, errlen, "stream hello without a job id");
    if (!p)
        return 0;
    size_t limit = h->role == APPLIANCE__ROLE__ROLE_SWARMX ? p->n_swarm : p->n_replicas;
    if (h->index >= limit)
        return errmsg(-EINVAL, err, errlen, "stream hello of %s %u: the plan has %zu",
                              h->role == APPLIANCE__ROLE__ROLE_SWARMX ? "swarmx node" : "replica",
                              h->index, limit);
    return 0;
}

int msgcheck_eval_report(const Appliance__EvalReport *r, const Appliance__Plan *p, char *err,
                         size_t errlen)
{
    if (r->replica >= p->n_replicas)
        return errmsg(-EINVAL, err, errlen, "evaluation report of replica %u: the plan has %zu",
                              r->replica, p->n_replicas);
    if (r->n_intersection != r->n_union_ || r->n_intersection > MSGCHECK_MAX_EVAL_CLASSES)
        return errmsg(-EINVAL, err, errlen, "malformed evaluation report: %zu intersections, "
                              "%zu unions (at most %d classes)", r->n_intersection, r->n_union_,
                              MSGCHECK_MAX_EVAL_CLASSES);
    return 0;
}
