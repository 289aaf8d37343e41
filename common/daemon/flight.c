/* The flight recorder: a ring of the last stream and job events. */
#include "flight.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "log.h"

uint64_t flight_now_us(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

static const char *flight__name(uint16_t msg)
{
    const ProtobufCFieldDescriptor *fd =
        protobuf_c_message_descriptor_get_field(&appliance__envelope__descriptor, msg);
    return fd ? fd->name : "message";
}

/* ---- the trace file ---- */

#define FLIGHT_TRACE_COLUMNS "t_us dir msg peer step tensor offset count pass eval"

int flight_trace_open(flight *f, const char *path, const char *self, uint64_t max_bytes, char *err,
                      size_t errlen)
{
    FILE *fp = fopen(path, "ae");
    if (!fp) {
        int e = errno;
        snprintf(err, errlen, "cannot open the trace file %s: %s", path, strerror(e));
        return -e;
    }
    setvbuf(fp, NULL, _IOFBF, 1u << 20);
    int k = fprintf(fp, "# appliance trace of %s: " FLIGHT_TRACE_COLUMNS "\n", self);
    if (k < 0 || fflush(fp) != 0) {
        int e = errno ? errno : EIO;
        snprintf(err, errlen, "cannot write the trace file %s: %s", path, strerror(e));
        fclose(fp);
        return -e;
    }
    f->trace = fp;
    f->trace_bytes = (uint64_t)k;
    f->trace_max = max_bytes;
    return 0;
}

static void flight__trace_close(flight *f, const char *why)
{
    if (!f->trace)
        return;
    if (why)
        log_warn("trace: %s; tracing stops", why);
    fclose(f->trace);
    f->trace = NULL;
}

static void flight__trace(flight *f, const flight_event *e)
{
    static const char *passes[] = {"forward", "backward", "resident"};
    bool chunk = e->msg == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK;
    int k = fprintf(f->trace, "%" PRIu64 " %s %s %s %" PRIu64 " %d %" PRIu64 " %u %s %u\n", e->t_us,
                    e->out ? "out" : "in", flight__name(e->msg), e->peer, e->step,
                    e->tensor == UINT32_MAX ? -1 : (int)e->tensor, e->chunk, e->count,
                    chunk && e->pass < 3 ? passes[e->pass] : "-", e->eval);
    if (k < 0) {
        flight__trace_close(f, strerror(errno));
        return;
    }
    f->trace_bytes += (uint64_t)k;
    if (f->trace_bytes >= f->trace_max) {
        char why[96];
        snprintf(why, sizeof(why), "the trace file reached its limit of %" PRIu64 " bytes", f->trace_max);
        flight__trace_close(f, why);
    }
}

void flight_trace_flush(flight *f)
{
    if (f->trace && fflush(f->trace) != 0)
        flight__trace_close(f, strerror(errno));
}

/* A job starts: keep its tensor -> layer map for the dump. */
static void flight__job_start(flight *f, const Appliance__Plan *p)
{
    free(f->tensor_layer);
    f->tensor_layer = NULL;
    f->ntensors = 0;
    snprintf(f->job, sizeof(f->job), "%s", p->job_id ? p->job_id : "");
    f->max_gap_us = 0;
    uint32_t max = 0;
    for (size_t i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->id >= max)
            max = p->tensors[i]->id + 1;
    if (max == 0 || max > (1u << 20) || !(f->tensor_layer = malloc(max * sizeof(uint32_t))))
        return;
    memset(f->tensor_layer, 0xff, max * sizeof(uint32_t));
    f->ntensors = max;
    for (size_t i = 0; i < p->n_tensors; i++)
        f->tensor_layer[p->tensors[i]->id] = p->tensors[i]->layer;
}

void flight_note(flight *f, const Appliance__Envelope *env, const char *peer, bool out)
{
    flight_event e = {.msg = (uint16_t)env->msg_case, .out = out, .tensor = UINT32_MAX};
    switch (env->msg_case) {
    case APPLIANCE__ENVELOPE__MSG_HELLO:
    case APPLIANCE__ENVELOPE__MSG_AUTH_PROOF:
    case APPLIANCE__ENVELOPE__MSG_HEARTBEAT:
    case APPLIANCE__ENVELOPE__MSG_REGISTER_ACK:
    case APPLIANCE__ENVELOPE__MSG_CLUSTER_QUERY:
    case APPLIANCE__ENVELOPE__MSG_CLUSTER_INFO:
    case APPLIANCE__ENVELOPE__MSG_JOB_STATUS_QUERY:
    case APPLIANCE__ENVELOPE__MSG_JOB_STATUS:
    case APPLIANCE__ENVELOPE__MSG_JOB_LIST_QUERY:
    case APPLIANCE__ENVELOPE__MSG_JOB_LIST:
    case APPLIANCE__ENVELOPE__MSG_JOB_LOG_QUERY:
    case APPLIANCE__ENVELOPE__MSG_JOB_LOG_LINES:
        return; /* clients' questions: not the job's stream */
    case APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK: {
        const Appliance__WeightChunk *w = env->weight_chunk;
        e.step = w->step;
        e.tensor = w->tensor_id;
        e.chunk = w->offset;
        e.count = (uint32_t)w->count;
        e.pass = (uint8_t)w->pass;
        e.eval = w->eval_pass;
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK: {
        const Appliance__GradChunk *g = env->grad_chunk;
        e.step = g->step;
        e.tensor = g->tensor_id;
        e.chunk = g->offset;
        e.count = (uint32_t)g->count;
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_BATCH:
        e.step = env->batch->step;
        e.count = env->batch->n;
        e.chunk = env->batch->eval_batch;
        break;
    case APPLIANCE__ENVELOPE__MSG_CREDIT:
        e.count = env->credit->n;
        break;
    case APPLIANCE__ENVELOPE__MSG_STEP_REPORT:
        e.step = env->step_report->step;
        break;
    case APPLIANCE__ENVELOPE__MSG_STEP_COMMITTED:
        e.step = env->step_committed->step;
        break;
    case APPLIANCE__ENVELOPE__MSG_CHECKPOINT_WRITTEN:
        e.step = env->checkpoint_written->step;
        break;
    case APPLIANCE__ENVELOPE__MSG_EVAL_REPORT:
        e.step = env->eval_report->step;
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_START:
        if (env->job_start->plan)
            flight__job_start(f, env->job_start->plan);
        break;
    case APPLIANCE__ENVELOPE__MSG_JOB_END:
    case APPLIANCE__ENVELOPE__MSG_JOB_ABORT:
        f->job[0] = 0; /* ended: silence is expected now */
        break;
    default:
        break;
    }
    e.t_us = flight_now_us();
    if (f->job[0] && f->last_us && e.t_us - f->last_us > f->max_gap_us)
        f->max_gap_us = e.t_us - f->last_us;
    f->last_us = e.t_us;
    snprintf(e.peer, sizeof(e.peer), "%s", peer && peer[0] ? peer : "?");
    f->ev[f->n % FLIGHT_CAP] = e;
    f->n++;
    if (f->trace) {
        flight__trace(f, &e);
        if (e.msg == APPLIANCE__ENVELOPE__MSG_JOB_END || e.msg == APPLIANCE__ENVELOPE__MSG_JOB_ABORT)
            flight_trace_flush(f);
    }
}

bool flight_format(const flight *f, size_t i, char *out, size_t outlen)
{
    uint64_t kept = f->n < FLIGHT_CAP ? f->n : FLIGHT_CAP;
    if (i >= kept)
        return false;
    uint64_t first = f->n - kept;
    const flight_event *e = &f->ev[(first + i) % FLIGHT_CAP];
    double ago = (double)(flight_now_us() - e->t_us) / 1e6;
    int k = snprintf(out, outlen, "-%.3fs %s %s %s", ago, flight__name(e->msg),
                     e->out ? "to" : "from", e->peer);
    if (k < 0 || (size_t)k >= outlen)
        return true;
    size_t n = (size_t)k;
    switch (e->msg) {
    case APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK:
    case APPLIANCE__ENVELOPE__MSG_GRAD_CHUNK: {
        char layer[24] = "?";
        if (e->tensor < f->ntensors && f->tensor_layer[e->tensor] != UINT32_MAX)
            snprintf(layer, sizeof(layer), "%u", f->tensor_layer[e->tensor]);
        snprintf(out + n, outlen - n, " step %" PRIu64 " layer %s tensor %u chunk @%" PRIu64 " +%u",
                 e->step, layer, e->tensor, e->chunk, e->count);
        break;
    }
    case APPLIANCE__ENVELOPE__MSG_BATCH:
        snprintf(out + n, outlen - n, " step %" PRIu64 " samples %u%s", e->step, e->count,
                 e->chunk ? " (eval)" : "");
        break;
    case APPLIANCE__ENVELOPE__MSG_CREDIT:
        snprintf(out + n, outlen - n, " %u", e->count);
        break;
    case APPLIANCE__ENVELOPE__MSG_STEP_REPORT:
    case APPLIANCE__ENVELOPE__MSG_STEP_COMMITTED:
    case APPLIANCE__ENVELOPE__MSG_CHECKPOINT_WRITTEN:
    case APPLIANCE__ENVELOPE__MSG_EVAL_REPORT:
        snprintf(out + n, outlen - n, " step %" PRIu64, e->step);
        break;
    default:
        break;
    }
    return true;
}

void flight_dump(flight *f, const char *job_id, const char *why)
{
    uint64_t fresh = f->n - f->dumped_at;
    uint64_t kept = f->n < FLIGHT_CAP ? f->n : FLIGHT_CAP;
    if (fresh < kept)
        kept = fresh;
    log_warn("flight recorder, job %s (%s): the last %" PRIu64 " event(s), oldest first", job_id,
             why, kept);
    uint64_t all = f->n < FLIGHT_CAP ? f->n : FLIGHT_CAP;
    char line[256];
    for (uint64_t i = all - kept; i < all; i++)
        if (flight_format(f, (size_t)i, line, sizeof(line)))
            log_warn("flight: %s", line);
    log_warn("flight recorder, job %s: end", job_id);
    f->dumped_at = f->n;
}

bool flight_hung(flight *f, uint64_t silence_ms)
{
    if (!f->job[0] || f->n == f->dumped_at)
        return false;
    uint64_t limit = silence_ms * 1000u;
    if (2 * f->max_gap_us > limit)
        limit = 2 * f->max_gap_us;
    return flight_now_us() - f->last_us >= limit;
}

void flight_free(flight *f)
{
    free(f->tensor_layer);
    f->tensor_layer = NULL;
    f->ntensors = 0;
    flight__trace_close(f, NULL);
}
