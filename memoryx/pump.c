/* memoryx's weight stream (pump.h). */
#include "pump.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "flight.h"
#include "msg.h"
#include "msgcheck.h"
#include "mxjob.h"
#include "mxsparse.h"
#include "sstream.h"
#include "tierio.h"
#include "update.h"

void pump_start(mx_job *j)
{
    plan_stream_start(&j->cur, j->plan, j->shard, (uint32_t)j->states, j->step, j->cur.seq);
    if (j->tier)
        j->tier->ra = j->cur; /* the read-ahead starts where the stream does */
}

bool pump_streaming(const mx_job *j)
{
    return j->cur.plan && !j->cur.done;
}

static void pump__chunk_sent(void *arg, int status)
{
    mx_tensor *t = arg;
    t->writes--;
    if (status == 0)
        metrics_hist_observe(&t->mx->chunk_hist, (double)(uv_now(t->loop) - t->sent_at) / 1000.0);
    if (t->writes == 0)
        update_writes_done(t->job);
}

/* A packed chunk's payload, freed once written. */
typedef struct pump_packed {
    mx_tensor *t;
    uint8_t data[];
} pump_packed;

static void pump__packed_sent(void *arg, int status)
{
    pump_packed *pk = arg;
    mx_tensor *t = pk->t;
    free(pk);
    pump__chunk_sent(t, status);
}

/* Sends chunk ch of the stream, its bytes at data (done(arg) when they are
 * written), packed as `packing` with `kept` elements (sstream.h; dense:
 * SSTREAM_DENSE, 0). Returns conn_send's result. */
static int pump__send_packed(mx_job *j, const plan_chunk *ch, const void *data, uint64_t bytes,
                             uint32_t packing, uint64_t kept, conn_done_fn done, void *arg)
{
    Appliance__WeightChunk wc = APPLIANCE__WEIGHT_CHUNK__INIT;
    wc.packing = (Appliance__Packing)packing;
    wc.kept = kept;
    wc.step = ch->step;
    wc.tensor_id = ch->tensor;
    wc.offset = ch->offset;
    wc.count = ch->count;
    wc.total = ch->total;
    wc.state = ch->state;
    wc.seq = ch->seq;
    wc.eval_pass = ch->eval_pass;
    wc.pass = ch->pass;
    wc.sent_us = flight_now_us();
    ENVELOPE(env, weight_chunk, WEIGHT_CHUNK, &wc);
    int rc = conn_send(j->down, &env, data, (uint32_t)bytes, done, arg);
    if (rc >= 0) {
        j->mx->stream_bytes += bytes;
        j->mx->stream_dense_bytes += ch->count * msgcheck_wire_elem(j->plan);
    }
    return rc;
}

static int pump__send_chunk(mx_job *j, const plan_chunk *ch, const void *data, uint64_t bytes,
                            conn_done_fn done, void *arg)
{
    return pump__send_packed(j, ch, data, bytes, SSTREAM_DENSE, 0, done, arg);
}

/* Whether chunk ch of t travels packed: a sparse tensor's weights, unless
 * the job asks for dense streams. */
static bool pump__packs(const mx_job *j, const mx_tensor *t, const plan_chunk *ch)
{
    if (t->compact) /* (its kept elements alone: packed, or expanded to dense) */
        return true;
    return t->mask && ch->state == 0 && j->plan->sparsity && !j->plan->sparsity->dense_streams &&
           (ch->pass == APPLIANCE__PASS__PASS_FORWARD || ch->pass == APPLIANCE__PASS__PASS_BACKWARD);
}

/* Sends chunk ch of sparse tensor t packed (or dense, when packing saves
 * nothing). Returns 1 when sent, 0 when the link is full, or a negative
 * errno. */
static int pump__send_sparse(mx_job *j, mx_tensor *t, const plan_chunk *ch, const void *data)
{
    uint32_t elem = msgcheck_wire_elem(j->plan);
    uint64_t kept;
    const uint8_t *mask = t->compact ? NULL : t->mask + ch->offset;
    uint32_t packing = mask ? sstream_choose(mask, ch->count, elem, &kept)
                            : sstream_choose_bits(t->bits, ch->offset, ch->count, elem, &kept);
    uint64_t bytes = sstream_bytes(packing, ch->count, kept, elem);
    if (!conn_can_send(j->down, bytes))
        return 0;
    pump_packed *pk = malloc(sizeof(*pk) + (bytes ? bytes : 1));
    if (!pk)
        return -ENOMEM;
    pk->t = t;
    if (mask)
        sstream_pack(packing, mask, data, ch->count, kept, elem, pk->data);
    else /* compact: its kept elements as they are stored */
        sstream_pack_kept(packing, t->bits, ch->offset, data, ch->count, kept, elem, pk->data);
    /* the loop's work, a turn's share at most (compact: a copy of what is sent) */
    conn_charge_send(j->down, mask ? ch->count * elem : bytes);
    int rc = pump__send_packed(j, ch, pk->data, bytes, packing, kept, pump__packed_sent, pk);
    if (rc < 0) {
        free(pk);
        return rc;
    }
    return 1;
}

/* Disk tier: sends the chunk at the cursor from its read-ahead buffer.
 * Returns 1 when sent, 0 when it is not read yet or the link is full, or
 * a negative errno. */
static int pump__tier_send(mx_job *j, const plan_chunk *ch)
{
    mx_rbuf *b = tierio_ready(j, ch->seq);
    if (!b)
        return 0;
    uint64_t wire = b->ch.count * msgcheck_wire_elem(j->plan);
    if (!conn_can_send(j->down, wire))
        return 0;
    /* (not in t->writes: the buffer is not t's, its update may go on) */
    int rc = pump__send_chunk(j, ch, b->data, wire, tierio_sent, b);
    if (rc < 0)
        return rc;
    tierio_sending(j->tier, b, uv_now(j->mx->n->loop));
    return 1;
}

bool pump_send(mx_job *j)
{
    plan_chunk ch;
    while (j->down && plan_stream_next(&j->cur, &ch)) {
        mx_tensor *t = j->by_id[ch.tensor];
        if (update_busy(t, ch.offset, ch.count))
            return false; /* its update is due or runs: resumed when it is back */
        if (j->tier) {
            int rc = pump__tier_send(j, &ch);
            if (rc < 0)
                mxjob_fault(j, "cannot stream %s to %s: %s", t->name, mxjob_down_name(j),
                            strerror(-rc));
            if (rc <= 0)
                return false;
            plan_stream_take(&j->cur);
            continue;
        }
        const float *src = ch.state == 0 ? t->w : optim_state_tensor(&t->st, ch.state - 1, NULL, NULL);
        uint32_t elem = msgcheck_wire_elem(j->plan);
        if (!conn_can_send(j->down, ch.count * elem))
            return false;
        /* bfloat16 on the wire: from the weights' twin (only weights stream
         * in Weight Streaming), or else through the read-ahead (tier_ahead) */
        uint64_t at = t->compact ? mxsparse_rank(t, ch.offset) : ch.offset;
        const void *data = t->w16 ? (const void *)(t->w16 + at) : (const void *)(src + at);
        int rc;
        if (pump__packs(j, t, &ch)) {
            rc = pump__send_sparse(j, t, &ch, data);
            if (rc == 0)
                return false;
        } else {
            rc = pump__send_chunk(j, &ch, data, ch.count * elem, pump__chunk_sent, t);
        }
        if (rc < 0) {
            mxjob_fault(j, "cannot stream %s to %s: %s", t->name, mxjob_down_name(j), strerror(-rc));
            return false;
        }
        t->writes++;
        t->sent_at = uv_now(j->mx->n->loop);
        plan_stream_take(&j->cur);
    }
    return true;
}
