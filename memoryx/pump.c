/* memoryx's weight stream (pump.h). */
#include "pump.h"

#include <string.h>

#include "msg.h"
#include "msgcheck.h"
#include "mxjob.h"
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

/* Sends chunk ch of the stream, its bytes at data (done(arg) when they are
 * written). Returns conn_send's result. */
static int pump__send_chunk(mx_job *j, const plan_chunk *ch, const void *data, uint64_t bytes,
                            conn_done_fn done, void *arg)
{
    Appliance__WeightChunk wc = APPLIANCE__WEIGHT_CHUNK__INIT;
    wc.step = ch->step;
    wc.tensor_id = ch->tensor;
    wc.offset = ch->offset;
    wc.count = ch->count;
    wc.total = ch->total;
    wc.state = ch->state;
    wc.seq = ch->seq;
    wc.eval_pass = ch->eval_pass;
    wc.pass = ch->pass;
    ENVELOPE(env, weight_chunk, WEIGHT_CHUNK, &wc);
    return conn_send(j->down, &env, data, (uint32_t)bytes, done, arg);
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
        const void *data = t->w16 ? (const void *)(t->w16 + ch.offset) : (const void *)(src + ch.offset);
        int rc = pump__send_chunk(j, &ch, data, ch.count * elem, pump__chunk_sent, t);
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
