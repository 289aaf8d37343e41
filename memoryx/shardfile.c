/* The files of a memoryx shard: names and safetensors layout (shardfile.h). */
#include "shardfile.h"

#include <inttypes.h>
#include <stdio.h>

static int shardfile__add(st_writer *w, const char *name, const Appliance__PlanTensor *pt,
                          const float *data, size_t count)
{
    int64_t dims[ST_MAX_DIMS];
    int nd = (int)(pt->n_dims < ST_MAX_DIMS ? pt->n_dims : ST_MAX_DIMS);
    for (int d = 0; d < nd; d++)
        dims[d] = (int64_t)pt->dims[d];
    return st_writer_add_f32(w, name, dims, nd, data, count);
}

static int shardfile__meta(st_writer *w, const mx_job *j, uint64_t step, bool widest)
{
    char stepbuf[32], updates[32];
    snprintf(stepbuf, sizeof(stepbuf), "%" PRIu64, widest ? UINT64_MAX : step);
    int64_t n = widest ? INT64_MIN : 0;
    for (size_t i = 0; i < j->nt && !widest; i++)
        if (j->t[i].trainable)
            n = optim_state_step(&j->t[i].st);
    snprintf(updates, sizeof(updates), "%" PRId64, n);
    int rc = st_writer_meta(w, "job_id", j->id);
    if (rc == 0)
        rc = st_writer_meta(w, "step", stepbuf);
    if (rc == 0)
        rc = st_writer_meta(w, "optimizer", optim_type_name(j->cfg.type));
    if (rc == 0)
        rc = st_writer_meta(w, "optimizer_updates", updates);
    return rc;
}

int shardfile_layout(const mx_job *j, uint64_t step, bool widest, bool with_data,
                     st_writer *ww, st_writer *ow)
{
    const Appliance__Plan *p = j->plan;
    int rc = 0;
    for (size_t i = 0; i < j->nt && rc == 0; i++) {
        const mx_tensor *t = &j->t[i];
        const Appliance__PlanTensor *pt = p->tensors[t->id];
        rc = shardfile__add(ww, t->name, pt, with_data ? t->w : NULL, t->n);
        if (rc == 0 && t->mask) { /* beside its weights: "<name>.mask", uint8, its shape */
            int64_t dims[ST_MAX_DIMS];
            int nd = (int)(pt->n_dims < ST_MAX_DIMS ? pt->n_dims : ST_MAX_DIMS);
            for (int d = 0; d < nd; d++)
                dims[d] = (int64_t)pt->dims[d];
            char name[160];
            snprintf(name, sizeof(name), "%s.mask", t->name);
            rc = st_writer_add(ww, name, ST_U8, dims, nd, with_data ? t->mask : NULL, t->n);
        }
        for (size_t s = 0; t->trainable && s < optim_state_count(&t->st) && rc == 0; s++) {
            const char *sname;
            size_t count;
            float *data = optim_state_tensor((optim_state *)&t->st, s, &sname, &count);
            char name[160];
            snprintf(name, sizeof(name), "%s.%s", t->name, sname);
            rc = shardfile__add(ow, name, pt, with_data ? data : NULL, count);
        }
    }
    if (rc == 0)
        rc = shardfile__meta(ow, j, step, widest);
    if (rc == 0)
        rc = shardfile__meta(ww, j, step, widest);
    return rc;
}

void shardfile_paths(const mx_job *j, uint64_t step, char *wpath, char *opath, size_t len)
{
    const Appliance__Plan *p = j->plan;
    snprintf(opath, len, "%s/optimizer_%" PRIu64 "-shard%u-of-%zu.safetensors", p->model_dir, step,
             j->shard + 1, p->n_shards);
    snprintf(wpath, len, "%s/checkpoint_%" PRIu64 "-shard%u-of-%zu.safetensors", p->model_dir,
             step, j->shard + 1, p->n_shards);
}
