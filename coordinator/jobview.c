/* A job's history and memory plan for the web page. */
#include "jobview.h"

#include <stdlib.h>
#include <string.h>

#include "footprint.h"
#include "jsonbuf.h"
#include "msg.h"

void jobview_record_step(job *j, const job_point *pt)
{
    while (j->npoints && j->points[j->npoints - 1].step >= pt->step)
        j->npoints--; /* a resumed attempt steps again from its checkpoint */
    if (!j->point_stride)
        j->point_stride = 1;
    bool last = pt->step >= j->max_steps;
    if (pt->step % j->point_stride != 0 && !last)
        return;
    if (j->npoints && j->points[j->npoints - 1].step % j->point_stride != 0)
        j->npoints--; /* a last step kept off the stride gives way to the next point */
    if (j->npoints >= JOBVIEW_POINTS_MAX) {
        j->point_stride *= 2;
        size_t k = 0;
        for (size_t i = 0; i < j->npoints; i++)
            if (j->points[i].step % j->point_stride == 0)
                j->points[k++] = j->points[i];
        j->npoints = k;
        if (pt->step % j->point_stride != 0 && !last)
            return;
    }
    if (j->npoints == j->cappoints) {
        size_t cap = j->cappoints ? j->cappoints * 2 : 256;
        if (cap > JOBVIEW_POINTS_MAX)
            cap = JOBVIEW_POINTS_MAX;
        job_point *v = realloc(j->points, cap * sizeof(*v));
        if (!v)
            return;
        j->points = v;
        j->cappoints = cap;
    }
    j->points[j->npoints++] = *pt;
}

void jobview_record_eval(job *j, const job_eval_point *e)
{
    while (j->nevals && j->evals[j->nevals - 1].step >= e->step)
        j->nevals--;
    if (j->nevals >= JOBVIEW_EVALS_MAX)
        return;
    if (j->nevals == j->capevals) {
        size_t cap = j->capevals ? j->capevals * 2 : 16;
        job_eval_point *v = realloc(j->evals, cap * sizeof(*v));
        if (!v)
            return;
        j->evals = v;
        j->capevals = cap;
    }
    j->evals[j->nevals++] = *e;
}

static void jobview__buffer(jsonbuf *b, bool *first, const char *name, uint64_t bytes,
                            const char *holds)
{
    if (!bytes)
        return;
    jsonbuf_printf(b, "%s{\"name\":", *first ? "" : ",");
    jsonbuf_str(b, name);
    jsonbuf_printf(b, ",\"bytes\":%llu,\"holds\":", (unsigned long long)bytes);
    jsonbuf_str(b, holds);
    jsonbuf_printf(b, "}");
    *first = false;
}

/* The buffers of replica r, adding up to its memory_needed: the executor's
 * (footprint.h) and the weights' as the plan's mode holds them; what the
 * table does not name (a spatial stripe's halos) is "other". */
static void jobview__replica(jsonbuf *b, const jobspec *spec, const Appliance__Plan *p,
                             const Appliance__PlanReplica *r, unsigned threads)
{
    bool first = true;
    uint64_t sum = 0;
    model wm = *spec->model, *rows = NULL;
    char why[256];
    if (p->rows_as_depth && /* the model the wse-nodes compute (model_rows_as_depth) */
        (rows = model_recompile(jobspec_model_table(spec), spec->model,
                                &(model_options){.rows_as_depth = true}, why, sizeof(why))))
        wm = *rows;
    wm.spill_packed = p->spill_packed;
    wm.keep_outputs = p->keep_outputs;
    wm.lighten = !p->keep_costly;
    wm.feed_one = p->feed_credits == 1;
    bool pipelined = p->mode == APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    uint64_t micro = pipelined ? p->micro_batch : 0;
    footprint f;
    if (p->spatial_partitions <= 1 &&
        footprint_init_micro(&f, &wm, (int)r->batch, micro ? (int)micro : (int)r->batch,
                             (int)(threads ? threads : 1)) == 0) {
        char holds[256];
        snprintf(holds, sizeof(holds), "the step's activations (%llu B of kept outputs), their "
                 "gradients, saved state and temporaries, laid out by the memory plan for %d "
                 "sample(s) at once", (unsigned long long)f.kept, f.n);
        jobview__buffer(b, &first, "activation arena", f.arena, holds);
        jobview__buffer(b, &first, "convolution workspace", f.workspace,
                        "the largest convolution's workspace on the wse-node's threads");
        jobview__buffer(b, &first, "float inputs", f.input,
                        "float inputs made from 8-bit samples");
        jobview__buffer(b, &first, "micro-batch gradients", f.accum,
                        "one layer's weight gradients, added into the step's");
        jobview__buffer(b, &first, "spill staging", f.spill,
                        "the buffer through which the bfloat16 copies of kept outputs go to "
                        "their file and back");
        jobview__buffer(b, &first, "batches in flight", f.batches,
                        wm.feed_one ? "one batch of the replica's share as it arrives (and one "
                                      "of the evaluation's where the job evaluates)"
                                    : "two batches of the replica's share as they arrive (and "
                                      "two of the evaluation's where the job evaluates)");
        sum = f.exec + f.batches;
        unsigned states = footprint_optimizer_states(spec->optimizer_type, spec->momentum);
        if (pipelined) {
            char w[160];
            snprintf(w, sizeof(w), "the model's weights, their gradients, a copy for the update "
                     "and %u optimizer state(s), float32", states);
            jobview__buffer(b, &first, "weights and optimizer state",
                            (3 + (uint64_t)states) * f.weights, w);
            jobview__buffer(b, &first, "bfloat16 weights", f.rounded,
                            "dense layers' weights rounded for bfloat16 GEMMs");
            sum += (3 + (uint64_t)states) * f.weights + f.rounded;
        } else {
            uint64_t slots = p->ws_part_elems
                                 ? footprint_wslots_bytes(&wm, p->ws_part_elems, p->chunk_elems)
                                 : f.wslots;
            jobview__buffer(b, &first, "weight streaming slots", slots,
                            "two slots of the largest layer's (or part's) weights and two of its "
                            "gradients, as they stream in and out");
            jobview__buffer(b, &first, "model buffers", wm.total_buffers * sizeof(float),
                            "non-trainable state (norm statistics)");
            jobview__buffer(b, &first, "runtime", (1u << 20) + (64u << 10),
                            "the executor's fixed reserve");
            sum += slots + wm.total_buffers * sizeof(float) + (1u << 20) + (64u << 10);
        }
        footprint_free(&f);
    }
    if (r->memory_needed > sum)
        jobview__buffer(b, &first, "other", r->memory_needed - sum,
                        p->spatial_partitions > 1
                            ? "the stripe's buffers and halos (spatial partitions)"
                            : "what the table above does not name");
    model_free(rows);
}

char *jobview_plan_json(const jobspec *spec, const Appliance__Plan *p, members *ms)
{
    static const char *const modes[] = {"auto", "pipelined", "weight_streaming"};
    jsonbuf b = {0};
    jsonbuf_printf(&b, "{\"mode\":\"%s\",\"keep_outputs\":%s,\"keep_costly\":%s,"
                       "\"micro_batch\":%u,"
                       "\"spatial_partitions\":%u,\"global_batch\":%u,\"total_params\":%llu,"
                       "\"replicas\":[",
                   modes[p->mode < 3 ? p->mode : 0], p->keep_outputs ? "true" : "false",
                   p->keep_costly ? "true" : "false",
                   p->micro_batch, p->spatial_partitions, p->global_batch,
                   (unsigned long long)p->total_params);
    for (size_t i = 0; i < p->n_replicas; i++) {
        const Appliance__PlanReplica *r = p->replicas[i];
        member *mb = members_by_id(ms, r->member_id);
        jsonbuf_printf(&b, "%s{\"replica\":%u,\"member_id\":%u,\"member\":", i ? "," : "", r->index,
                       r->member_id);
        jsonbuf_str(&b, mb ? mb->name : "");
        jsonbuf_printf(&b, ",\"batch\":%u,\"wafer_bytes\":%llu,\"needed_bytes\":%llu,\"buffers\":[",
                       r->batch, (unsigned long long)r->wafer_memory,
                       (unsigned long long)r->memory_needed);
        jobview__replica(&b, spec, p, r, mb ? mb->threads : 1);
        jsonbuf_printf(&b, "]}");
    }
    jsonbuf_printf(&b, "]}");
    return jsonbuf_steal(&b, NULL);
}

void jobview_free(job *j)
{
    free(j->points);
    j->points = NULL;
    j->npoints = j->cappoints = 0;
    free(j->evals);
    j->evals = NULL;
    j->nevals = j->capevals = 0;
    free(j->plan_json);
    j->plan_json = NULL;
}
