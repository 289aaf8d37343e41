/* Fuzz target: a job file through the coordinator's compiler: jobspec_parse
 * (common/jobspec.c, which compiles the model with common/model.c), then,
 * for a job file that is accepted, the plan on a cluster just large enough
 * (coordinator/planner.c). Every plan the planner makes must pass the
 * daemons' msgcheck_plan and match the model, and a Weight Streaming
 * schedule must be one the wse-node's weight slots accept. */
#include <string.h>

#include "fuzz.h"
#include "jobspec.h"
#include "model_plan.h"
#include "msgcheck.h"
#include "planner.h"
#include "footprint.h"
#include "wslots.h"

#define FUZZ_JOB_NAME "job.toml"
/* Above this a Weight Streaming model's slots are not allocated here. */
#define FUZZ_WSLOTS_MAX_BYTES (64u << 20)

/* The model keeps the promises of model.h. */
static void check_model(const model *m)
{
    FUZZ_ASSERT(m->nlayers >= 1);
    uint64_t params = 0, buffers = 0;
    for (int i = 0; i < m->ntensors; i++) {
        const model_tensor *t = &m->tensors[i];
        FUZZ_ASSERT(t->id == (uint32_t)i);
        FUZZ_ASSERT(t->layer >= 0 && t->layer < m->nlayers);
        uint64_t n = 1;
        for (int d = 0; d < t->ndim; d++) {
            FUZZ_ASSERT(t->dims[d] >= 1);
            n *= (uint64_t)t->dims[d];
        }
        FUZZ_ASSERT(n == t->elems);
        if (t->trainable)
            params += t->elems;
        else
            buffers += t->elems;
    }
    FUZZ_ASSERT(params == m->total_params);
    FUZZ_ASSERT(buffers == m->total_buffers);
    for (int l = 0; l < m->nlayers; l++) {
        const model_layer *ly = &m->layers[l];
        FUZZ_ASSERT(ly->ntensors >= 0 && ly->first_tensor >= 0);
        FUZZ_ASSERT(ly->first_tensor + ly->ntensors <= m->ntensors);
        for (int k = 0; k < ly->ntensors; k++)
            FUZZ_ASSERT(m->tensors[ly->first_tensor + k].layer == l);
        FUZZ_ASSERT(ly->ninputs >= 1 && ly->ninputs <= MODEL_MAX_INPUTS);
        for (int k = 0; k < ly->ninputs; k++)
            FUZZ_ASSERT(ly->inputs[k] >= -1 && ly->inputs[k] < l);
    }
}

/* Members enough for the job: one per wse-node, memoryx, swarmx and worker
 * slot it asks for. */
static void plan_job(const jobspec *spec)
{
    size_t nr = (size_t)spec->num_csx, ns = (size_t)spec->num_wgt_servers;
    size_t nx = planner_tree_nodes(spec);
    size_t nw = nr * (size_t)spec->num_workers_per_csx;
    size_t total = nr + ns + nx + nw;
    member *all = calloc(total, sizeof(*all));
    member **ptr = calloc(total, sizeof(*ptr));
    FUZZ_ASSERT(all && ptr);
    for (size_t i = 0; i < total; i++) {
        all[i].id = (uint32_t)i + 1;
        snprintf(all[i].addr, sizeof(all[i].addr), "127.0.0.1:%zu", 10000 + i);
        /* Small wafers for odd seeds: both execution modes and refusals. */
        all[i].wafer_memory = spec->seed & 1 ? (256ull << 20) : (40ull << 30);
        all[i].memory = 64ull << 30;
        ptr[i] = &all[i];
    }
    planner_members pm = {ptr, nr, ptr + nr, ns, ptr + nr + ns, nx, ptr + nr + ns + nx, nw};
    uint8_t *packed = NULL;
    size_t len = 0;
    char err[1024];
    int rc = planner_build(spec, "job-1", &pm, 256 * 1024, &packed, &len, err, sizeof(err));
    if (rc < 0) {
        FUZZ_ASSERT(err[0] != '\0');
        goto done;
    }
    Appliance__Plan *p = appliance__plan__unpack(NULL, len, packed);
    FUZZ_ASSERT(p != NULL);
    rc = msgcheck_plan(p, err, sizeof(err));
    if (rc == 0)
        rc = model_plan_check(p, spec->model, err, sizeof(err));
    if (rc < 0)
        fprintf(stderr, "the planner made a plan the daemons refuse: %s\n", err);
    FUZZ_ASSERT(rc == 0);
    if (p->mode == APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING &&
        footprint_wslots_bytes(spec->model, p->ws_part_elems, p->chunk_elems) <=
            FUZZ_WSLOTS_MAX_BYTES) {
        wslots ws;
        rc = wslots_init(&ws, spec->model, p->fwd_stream, p->n_fwd_stream, p->bwd_stream,
                         p->n_bwd_stream, p->bwd_kept, p->ws_part_elems, p->chunk_elems);
        FUZZ_ASSERT(rc == 0);
        wslots_deinit(&ws);
    }
    appliance__plan__free_unpacked(p, NULL);
done:
    free(packed);
    free(ptr);
    free(all);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    char err[1024];
    jobspec *spec = jobspec_parse((const char *)data, size, FUZZ_JOB_NAME, "/nonexistent", err,
                                  sizeof(err));
    if (!spec) {
        FUZZ_ASSERT(memchr(err, '\0', sizeof(err)) != NULL);
        FUZZ_ASSERT(strncmp(err, FUZZ_JOB_NAME ":", strlen(FUZZ_JOB_NAME) + 1) == 0);
        return 0;
    }
    FUZZ_ASSERT(spec->model != NULL);
    check_model(spec->model);
    /* every replica has a sample; "auto" stripes of a model that splits may
     * make one replica of every wse-node */
    int64_t parts = spec->spatial_partitions == JOBSPEC_AUTO && model_splits(spec->model)
                        ? spec->num_csx
                        : jobspec_parts(spec);
    FUZZ_ASSERT(spec->num_csx >= 1 && spec->train.batch_size >= spec->num_csx / parts);
    FUZZ_ASSERT(spec->job_priority[0] == 'p' && spec->job_priority[1] >= '1' &&
                spec->job_priority[1] <= '3');
    /* Files on this machine stay out of it: a checkpoint to resume, an
     * evaluation set read from disk. */
    if (!spec->checkpoint_path[0] && !(spec->eval.present && spec->eval.data_dir[0]))
        plan_job(spec);
    jobspec_free(spec);
    return 0;
}
