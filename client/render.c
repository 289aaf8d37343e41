/* Rendering for appliance-submit. */
#include "render.h"

#include <ctype.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <sys/ioctl.h>
#include <sys/time.h>

#include "jsonstr.h"
#include "msg.h"
#include "units.h"

void render_json_string(FILE *f, const char *s)
{
    size_t n;
    char *q = json_quote_alloc(s, &n);
    if (q)
        fwrite(q, 1, n, f);
    else
        fputs("\"\"", f);
    free(q);
}

/* A member's host as the coordinator's messages name it: its name, and
 * the first 8 digits of a boot id or machine id ("-" when unknown). */
static const char *render__host(const Appliance__Member *m, char *buf, size_t len)
{
    const char *id = m->host_id;
    if (!id[0]) {
        snprintf(buf, len, "-");
        return buf;
    }
    bool hex = strlen(id) >= 32;
    for (int i = 0; hex && i < 8; i++)
        hex = isxdigit((unsigned char)id[i]);
    int idlen = hex ? 8 : (int)strlen(id);
    if (!m->host_name[0] || strcmp(m->host_name, id) == 0)
        snprintf(buf, len, "%.*s", idlen, id);
    else
        snprintf(buf, len, "%s (%.*s)", m->host_name, idlen, id);
    return buf;
}

/* A wse-node alive or busy that registered its processor */
static bool render__live_wse(const Appliance__Member *m)
{
    return m->role == APPLIANCE__ROLE__ROLE_WSE_NODE && m->isa[0] &&
           (m->state == APPLIANCE__MEMBER_STATE__MEMBER_ALIVE ||
            m->state == APPLIANCE__MEMBER_STATE__MEMBER_BUSY);
}

void render_cluster(const Appliance__ClusterInfo *info, bool json)
{
    if (json) {
        printf("{\"members\": [");
        for (size_t i = 0; i < info->n_members; i++) {
            const Appliance__Member *m = info->members[i];
            printf("%s{\"id\": %u, \"role\": ", i ? ", " : "", m->member_id);
            render_json_string(stdout, msg_role_name(m->role));
            printf(", \"name\": ");
            render_json_string(stdout, m->name);
            printf(", \"state\": \"%s\", \"addr\": ", msg_member_state_name(m->state));
            render_json_string(stdout, m->advertised_addr);
            printf(", \"wafer_memory\": %llu, \"memory\": %llu, \"threads\": %u, "
                   "\"last_seen_ms_ago\": %llu, \"job\": ",
                   (unsigned long long)m->wafer_memory, (unsigned long long)m->memory, m->threads,
                   (unsigned long long)m->last_seen_ms_ago);
            render_json_string(stdout, m->job_id);
            printf(", \"host_id\": ");
            render_json_string(stdout, m->host_id);
            printf(", \"host_name\": ");
            render_json_string(stdout, m->host_name);
            printf(", \"host_memory\": %llu, \"isa\": ", (unsigned long long)m->host_memory);
            render_json_string(stdout, m->isa);
            printf(", \"conv_block\": %u, \"bf16\": %s, \"simulated\": %s}", m->conv_block,
                   m->bf16 ? "true" : "false", m->simulated ? "true" : "false");
        }
        printf("], \"warnings\": [");
        for (size_t i = 0; i < info->n_warnings; i++) {
            printf(i ? ", " : "");
            render_json_string(stdout, info->warnings[i]);
        }
        printf("]}\n");
        return;
    }
    printf("%-4s %-12s %-20s %-8s %-22s %-12s %-20s %s\n", "ID", "ROLE", "NAME", "STATE", "ADDRESS",
           "CAPACITY", "HOST", "JOB");
    for (size_t i = 0; i < info->n_members; i++) {
        const Appliance__Member *m = info->members[i];
        char cap[32] = "-";
        if (m->simulated) /* it fills no wafer: its compute is simulated */
            snprintf(cap, sizeof(cap), "simulated");
        else if (m->wafer_memory)
            units_format_size(m->wafer_memory, cap, sizeof(cap));
        else if (m->memory)
            units_format_size(m->memory, cap, sizeof(cap));
        char host[96];
        printf("%-4u %-12s %-20s %-8s %-22s %-12s %-20s %s\n", m->member_id, msg_role_name(m->role),
               m->name, msg_member_state_name(m->state), m->advertised_addr, cap,
               render__host(m, host, sizeof(host)), m->job_id[0] ? m->job_id : "-");
    }
    /* the live wse-nodes' processors, those alike on one line */
    bool said = false;
    for (size_t i = 0; i < info->n_members; i++) {
        const Appliance__Member *m = info->members[i];
        if (!render__live_wse(m))
            continue;
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++) {
            const Appliance__Member *o = info->members[k];
            seen = render__live_wse(o) && strcmp(o->isa, m->isa) == 0 &&
                   o->conv_block == m->conv_block && o->bf16 == m->bf16;
        }
        if (seen)
            continue;
        char how[128];
        printf("%s%s", said ? "" : "\n", render_processor(m->isa, m->conv_block, m->bf16, how,
                                                          sizeof(how)));
        printf(":");
        for (size_t k = i; k < info->n_members; k++) {
            const Appliance__Member *o = info->members[k];
            if (render__live_wse(o) && strcmp(o->isa, m->isa) == 0 &&
                o->conv_block == m->conv_block && o->bf16 == m->bf16)
                printf(" %s", o->name);
        }
        printf("\n");
        said = true;
    }
    for (size_t i = 0; i < info->n_warnings; i++)
        printf("%swarning: %s\n", i ? "" : "\n", info->warnings[i]);
}

const char *render_processor(const char *isa, uint32_t block, bool bf16, char *buf, size_t len)
{
    char blk[80] = "convolutions on the plain layouts";
    if (block)
        snprintf(blk, sizeof(blk), "blocked groups of %u channels (aBcd%ub)", block, block);
    snprintf(buf, len, "processor %s: %s, mixed precision in %s", isa[0] ? isa : "unknown", blk,
             bf16 ? "bfloat16" : "float32");
    return buf;
}

const char *render_duration(double secs, char *buf, size_t len)
{
    if (!(secs >= 0) || isinf(secs)) /* unknown (-1), or not a number at all */
        snprintf(buf, len, "-");
    else if (secs < 60)
        snprintf(buf, len, "%.1fs", secs);
    else if (secs < 3600)
        snprintf(buf, len, "%dm%02ds", (int)secs / 60, (int)secs % 60);
    else /* hours beyond an int: the ETA of max_steps = 1e12 */
        snprintf(buf, len, "%.0fh%02dm", floor(secs / 3600), (int)(fmod(secs, 3600) / 60));
    return buf;
}

/* A number for JSON, which has no NaN nor infinities: those are null. */
static const char *render__json_number(double x, const char *fmt, char *buf, size_t len)
{
    if (!isfinite(x))
        return "null";
    snprintf(buf, len, fmt, x);
    return buf;
}

void render_status_json(const Appliance__JobStatus *st)
{
    printf("{\"job_id\": ");
    render_json_string(stdout, st->job_id);
    printf(", \"state\": \"%s\", \"file\": ", msg_job_state_name(st->state));
    render_json_string(stdout, st->file_name);
    printf(", \"priority\": \"p%u\", \"queue_position\": %u, \"phase\": ", st->priority,
           st->queue_position);
    render_json_string(stdout, st->phase);
    char n[5][320]; /* %.3f of the largest double */
    printf(", \"steps\": %llu, \"max_steps\": %llu, \"final_loss\": %s, \"learning_rate\": %s, "
           "\"samples_per_sec\": %s, \"elapsed_sec\": %s, \"eta_sec\": %s, \"model_dir\": ",
           (unsigned long long)st->step, (unsigned long long)st->max_steps,
           render__json_number(st->loss, "%.9g", n[0], sizeof(n[0])),
           render__json_number(st->learning_rate, "%.9g", n[1], sizeof(n[1])),
           render__json_number(st->samples_per_sec, "%.3f", n[2], sizeof(n[2])),
           render__json_number(st->elapsed_sec, "%.3f", n[3], sizeof(n[3])),
           render__json_number(st->eta_sec, "%.3f", n[4], sizeof(n[4])));
    render_json_string(stdout, st->model_dir);
    printf(", \"message\": ");
    render_json_string(stdout, st->message);
    if (st->eval_accuracy >= 0 || st->eval_iou >= 0)
        printf(", \"eval_step\": %llu, \"eval_loss\": %s, \"eval_accuracy\": %s, "
               "\"eval_iou\": %s",
               (unsigned long long)st->eval_step,
               render__json_number(st->eval_loss, "%.9g", n[0], sizeof(n[0])),
               render__json_number(st->eval_accuracy, "%.9g", n[1], sizeof(n[1])),
               render__json_number(st->eval_iou, "%.9g", n[2], sizeof(n[2])));
    printf("}");
}

void render_final(const Appliance__JobStatus *st, bool json)
{
    if (json) {
        render_status_json(st);
        printf("\n");
        return;
    }
    if (st->state == APPLIANCE__JOB_STATE__JOB_DONE) {
        printf("%s done: %llu steps in %.1f s, final loss %.6f, %.1f samples/s\n", st->job_id,
               (unsigned long long)st->step, st->elapsed_sec, st->loss, st->samples_per_sec);
        if (st->eval_accuracy >= 0)
            printf("test accuracy %.2f%% (eval loss %.4f at step %llu)\n", 100 * st->eval_accuracy,
                   st->eval_loss, (unsigned long long)st->eval_step);
        if (st->eval_iou >= 0)
            printf("test IoU %.4f (eval loss %.4f at step %llu)\n", st->eval_iou, st->eval_loss,
                   (unsigned long long)st->eval_step);
        printf("checkpoints in %s\n", st->model_dir);
    }
    if (st->state != APPLIANCE__JOB_STATE__JOB_DONE)
        fprintf(stderr, "%s %s at step %llu: %s\n", st->job_id, msg_job_state_name(st->state),
                (unsigned long long)st->step, st->message);
}

const char *render_keep_outputs(bool keep, bool costly)
{
    if (keep)
        return "every layer's output is kept for the backward pass, none computed again (the "
               "wafer holds them)";
    return costly ? "the outputs of norms, activations, pooling, concatenations and cheap "
                    "convolutions are computed again in the backward pass (memory for larger "
                    "images)"
                  : "the outputs of norms, activations, pooling, concatenations and cheap "
                    "convolutions, and of the large convolutions whose absence saves the most, "
                    "are computed again in the backward pass (memory for larger images)";
}

const char *render_feed_credits(unsigned credits)
{
    return credits == 1 ? "one batch in flight from each worker rather than two (the replica fits "
                          "its wafer only so): the next batch comes after a step"
                        : "two batches in flight from each worker";
}

/* [sparsity]: each sparse tensor's density and the bytes its pruned
 * weights are (an element as the wire carries it), and the total. */
static void render__plan_sparsity(const Appliance__Plan *p)
{
    const Appliance__PlanSparsity *sp = p->sparsity;
    if (!sp)
        return;
    printf("\nsparsity %s, masks chosen by %s", sp->type, sp->init_method);
    if (sp->init_scale && strcmp(sp->init_scale, "fan_in") == 0)
        printf(", kept initial weights scaled to the dense fan-in variance");
    if (strcmp(sp->type, "static") != 0)
        printf(", changed every %lld steps from step %lld%s", (long long)sp->freq,
               (long long)sp->start, sp->stop > 0 ? "" : " on");
    if (strcmp(sp->type, "static") != 0 && sp->stop > 0)
        printf(" until step %lld", (long long)sp->stop);
    printf("%s\n", strcmp(sp->type, "gmp") == 0 ? " (the density below is the last level's)"
                                                  : "");
    int width = 24;
    for (size_t i = 0; i < p->n_tensors; i++)
        if (p->tensors[i]->sparsity > 0 && (int)strlen(p->tensors[i]->name) > width)
            width = (int)strlen(p->tensors[i]->name);
    printf("%-*s %8s %14s %14s %12s\n", width, "TENSOR", "DENSITY", "ELEMENTS", "KEPT", "SAVES");
    size_t elem = p->wire_bf16 ? 2 : 4;
    uint64_t all = 0, pruned_all = 0;
    for (size_t i = 0; i < p->n_tensors; i++) {
        const Appliance__PlanTensor *t = p->tensors[i];
        uint64_t n = 1;
        for (size_t d = 0; d < t->n_dims; d++)
            n *= t->dims[d];
        all += n;
        if (!(t->sparsity > 0))
            continue;
        /* (a level outside [0, 1) is refused before any daemon takes it) */
        double level = t->sparsity < 1.0f ? (double)t->sparsity : 0.999999;
        double p_elems = level * (double)n + 0.5;
        uint64_t pruned = p_elems < (double)n ? (uint64_t)p_elems : n;
        if (pruned >= n)
            pruned = n ? n - 1 : 0;
        pruned_all += pruned;
        char b[32];
        printf("%-*s %8.4f %14llu %14llu %12s\n", width, t->name, 1.0 - (double)t->sparsity,
               (unsigned long long)n, (unsigned long long)(n - pruned),
               units_format_size(pruned * elem, b, sizeof(b)));
    }
    char b1[32];
    printf("%llu of %llu parameters pruned (density %.4f): %s of weights that are zeros; "
           "weights and gradients still stream dense, memoryx masks them\n",
           (unsigned long long)pruned_all, (unsigned long long)all,
           all ? 1.0 - (double)pruned_all / (double)all : 1.0,
           units_format_size(pruned_all * elem, b1, sizeof(b1)));
}

void render_plan(const Appliance__Plan *p)
{
    static const char *const modes[] = {"auto", "pipelined", "weight_streaming"};
    printf("job %s: mode %s, %zu replica(s), global batch %u, %llu steps, %llu parameters\n",
           p->file_name, modes[p->mode < 3 ? p->mode : 0], p->n_replicas, p->global_batch,
           (unsigned long long)p->max_steps, (unsigned long long)p->total_params);
    if (p->micro_batch)
        printf("micro-batches of %u samples: each replica computes its share %u at a time and "
               "adds up their gradients\n", p->micro_batch, p->micro_batch);
    printf("%s\n", render_keep_outputs(p->keep_outputs, p->keep_costly));
    if (p->feed_credits == 1)
        printf("%s\n", render_feed_credits(1));
    if (p->host_share) {
        char s[32];
        printf("each replica planned within %s, its share of its host's memory: the wse-nodes of "
               "one host declare more than it has\n", units_format_size(p->host_share, s, sizeof(s)));
    }
    if (p->spatial_partitions > 1)
        printf("spatial partitions: each sample in %u stripes, one per wse-node: %zu replica(s) "
               "of %u stripes (replica i below computes stripe i %% %u)%s\n",
               p->spatial_partitions, p->n_replicas / p->spatial_partitions,
               p->spatial_partitions, p->spatial_partitions,
               p->sync_batchnorm ? "; batch norm synchronised over the replicas" : "");
    else if (p->sync_batchnorm)
        printf("batch norm synchronised over the replicas\n");
    int width = 24; /* the longest name (a Model Zoo U-Net's are module paths) */
    for (size_t i = 0; i < p->n_layers; i++)
        if ((int)strlen(p->layers[i]->name) > width)
            width = (int)strlen(p->layers[i]->name);
    printf("\n%-*s %-18s %-16s %12s %14s %14s\n", width, "LAYER", "TYPE", "OUTPUT", "PARAMS",
           "ACT B/SAMPLE", "FLOPS/SAMPLE");
    for (size_t i = 0; i < p->n_layers; i++) {
        const Appliance__PlanLayer *l = p->layers[i];
        char shape[64] = "";
        for (size_t d = 0; d < l->n_out_shape; d++)
            snprintf(shape + strlen(shape), sizeof(shape) - strlen(shape), "%s%llu", d ? "x" : "",
                     (unsigned long long)l->out_shape[d]);
        printf("%-*s %-18s %-16s %12llu %14llu %14llu\n", width, l->name, l->type, shape,
               (unsigned long long)l->params, (unsigned long long)l->act_bytes,
               (unsigned long long)l->flops);
    }
    render__plan_sparsity(p);
    printf("\n%-8s %-8s %-12s %-14s %-14s\n", "REPLICA", "MEMBER", "BATCH", "NEEDS", "WAFER");
    for (size_t i = 0; i < p->n_replicas; i++) {
        const Appliance__PlanReplica *r = p->replicas[i];
        char a[32], b[32];
        printf("%-8u %-8u %-12u %-14s %-14s\n", r->index, r->member_id, r->batch,
               units_format_size(r->memory_needed, a, sizeof(a)),
               units_format_size(r->wafer_memory, b, sizeof(b)));
    }
    /* the paths the replicas' processors take (each layer's: the
     * wse-node's log at the job's start) */
    for (size_t i = 0; i < p->n_replicas; i++) {
        const Appliance__PlanReplica *r = p->replicas[i];
        bool seen = false;
        for (size_t k = 0; k < i && !seen; k++)
            seen = strcmp(p->replicas[k]->isa, r->isa) == 0 &&
                   p->replicas[k]->conv_block == r->conv_block && p->replicas[k]->bf16 == r->bf16;
        if (seen || !r->isa[0])
            continue;
        char how[128];
        printf("%s%s (replica", i ? "" : "\n",
               render_processor(r->isa, r->conv_block, r->bf16, how, sizeof(how)));
        for (size_t k = i; k < p->n_replicas; k++)
            if (strcmp(p->replicas[k]->isa, r->isa) == 0 &&
                p->replicas[k]->conv_block == r->conv_block && p->replicas[k]->bf16 == r->bf16)
                printf(" %u", p->replicas[k]->index);
        printf("); each layer's path is in its wse-node's log as the job starts\n");
    }
}

/* The terminal's width in columns, 80 when it does not say. */
static int render__columns(void)
{
    struct winsize ws;
    if (ioctl(1, TIOCGWINSZ, &ws) == 0 && ws.ws_col >= 20)
        return ws.ws_col;
    return 80;
}

/* The live line: the phase first, then what fits the terminal's width
 * (a line longer than the terminal would wrap, and the carriage return
 * would then rewrite only its last row, leaving the rest behind). The job's
 * id is on the line above ("accepted as"). */
static void render__live(const Appliance__JobStatus *st, double pct)
{
    char line[512], eta[32], bar[16], rate[32];
    int cols = render__columns() - 1; /* the last column would wrap on some terminals */
    if (st->state == APPLIANCE__JOB_STATE__JOB_QUEUED) {
        snprintf(line, sizeof(line), "[queued] %s at position %u (priority p%u)", st->job_id,
                 st->queue_position, st->priority);
    } else {
        /* (a status past its last step, or garbled, fills the bar, no more) */
        int full = !(pct > 0.0) ? 0 : pct >= 100.0 ? 10 : (int)(pct / 10.0);
        bar[0] = '[';
        for (int i = 0; i < 10; i++)
            bar[1 + i] = i < full ? '#' : '.';
        bar[11] = ']';
        bar[12] = 0;
        snprintf(rate, sizeof(rate), st->samples_per_sec >= 100 ? "%.0f" : "%.1f",
                 st->samples_per_sec);
        char head[160], rest[256];
        snprintf(head, sizeof(head), "[%s] step %llu/%llu %3.0f%%", st->phase,
                 (unsigned long long)st->step, (unsigned long long)st->max_steps, pct);
        snprintf(rest, sizeof(rest), " loss %.4g %s samples/s ETA %s", st->loss, rate,
                 render_duration(st->eta_sec, eta, sizeof(eta)));
        if ((int)(strlen(head) + 1 + strlen(bar) + strlen(rest)) <= cols)
            snprintf(line, sizeof(line), "%s %s%s", head, bar, rest);
        else
            snprintf(line, sizeof(line), "%s%s", head, rest);
    }
    if ((int)strlen(line) > cols)
        line[cols] = 0;
    printf("\r\033[K%s", line);
}

void render_progress(const Appliance__JobStatus *st, bool tty)
{
    char el[32], eta[32], line[512];
    double pct = st->max_steps ? 100.0 * (double)st->step / (double)st->max_steps : 0;
    if (tty) {
        render__live(st, pct);
        fflush(stdout);
        return;
    }
    if (st->state == APPLIANCE__JOB_STATE__JOB_QUEUED)
        snprintf(line, sizeof(line), "%s queued at position %u (priority p%u)", st->job_id,
                 st->queue_position, st->priority);
    else
        snprintf(line, sizeof(line),
                 "%s [%s] step %llu/%llu (%.0f%%) loss %.6f lr %.3g %.1f samples/s elapsed %s ETA %s",
                 st->job_id, st->phase, (unsigned long long)st->step,
                 (unsigned long long)st->max_steps, pct, st->loss, st->learning_rate,
                 st->samples_per_sec, render_duration(st->elapsed_sec, el, sizeof(el)),
                 render_duration(st->eta_sec, eta, sizeof(eta)));
    struct timeval tv;
    gettimeofday(&tv, NULL);
    struct tm tm;
    gmtime_r(&tv.tv_sec, &tm);
    char ts[32];
    strftime(ts, sizeof(ts), "%Y-%m-%dT%H:%M:%SZ", &tm);
    printf("%s %s\n", ts, line);
    fflush(stdout);
}

void render_progress_done(bool tty)
{
    if (tty) {
        printf("\r\033[K");
        fflush(stdout);
    }
}

void render_list(const Appliance__JobList *l, bool json)
{
    if (json) {
        printf("{\"jobs\": [");
        for (size_t i = 0; i < l->n_jobs; i++) {
            printf(i ? ", " : "");
            render_status_json(l->jobs[i]);
        }
        printf("], \"omitted\": %llu}\n", (unsigned long long)l->omitted);
        return;
    }
    printf("%-10s %-10s %-4s %-6s %-14s %-12s %-10s %s\n", "JOB", "STATE", "PRIO", "QUEUE",
           "STEP", "LOSS", "SUBMITTED", "FILE");
    for (size_t i = 0; i < l->n_jobs; i++) {
        const Appliance__JobStatus *st = l->jobs[i];
        char step[40], pos[16] = "-", when[16] = "-";
        snprintf(step, sizeof(step), "%llu/%llu", (unsigned long long)st->step,
                 (unsigned long long)st->max_steps);
        if (st->queue_position)
            snprintf(pos, sizeof(pos), "%u", st->queue_position);
        if (st->submitted_at > 0 && st->submitted_at < 253402300800.0) { /* before year 10000 */
            time_t t = (time_t)st->submitted_at;
            struct tm tm;
            localtime_r(&t, &tm);
            strftime(when, sizeof(when), "%H:%M:%S", &tm);
        }
        printf("%-10s %-10s p%-3u %-6s %-14s %-12.6f %-10s %s\n", st->job_id,
               msg_job_state_name(st->state), st->priority, pos, step, st->loss, when, st->file_name);
    }
    if (l->omitted)
        printf("(%llu older jobs not listed; appliance-submit status JOB shows any of them)\n",
               (unsigned long long)l->omitted);
}
