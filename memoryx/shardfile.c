/* The files of a memoryx shard: names and safetensors layout (shardfile.h). */
#include "shardfile.h"

#include <inttypes.h>
#include <stdio.h>

#include "mxsparse.h"

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

/* Elements [first, first + count) of compact tensor ctx in their dense
 * form: its weights (tag 0), its mask as bytes (1) or state tag - 2. */
static void shardfile__fill(void *ctx, uint64_t tag, size_t first, size_t count, void *out)
{
    mx_tensor *t = ctx;
    if (tag == 1) {
        uint8_t *o = out;
        for (size_t i = 0; i < count; i++)
            o[i] = t->bits[(first + i) / 8] >> ((first + i) % 8) & 1;
        return;
    }
    const float *vals = tag == 0 ? t->w : optim_state_tensor(&t->st, (size_t)tag - 2, NULL, NULL);
    mxsparse_expand(t, vals, sizeof(float), first, count, out);
}

/* Tensor `name` of t's shape: a compact tensor's tag (shardfile__fill) made
 * as it is written, else data (count elements). */
static int shardfile__add_of(st_writer *w, const char *name, const Appliance__PlanTensor *pt,
                             const mx_tensor *t, st_dtype dtype, uint64_t tag, const void *data,
                             size_t count, bool with_data)
{
    int64_t dims[ST_MAX_DIMS];
    int nd = (int)(pt->n_dims < ST_MAX_DIMS ? pt->n_dims : ST_MAX_DIMS);
    for (int d = 0; d < nd; d++)
        dims[d] = (int64_t)pt->dims[d];
    if (t->compact)
        return with_data ? st_writer_add_fill(w, name, dtype, dims, nd, t->n, shardfile__fill,
                                              (void *)t, tag)
                         : st_writer_add(w, name, dtype, dims, nd, NULL, t->n);
    return st_writer_add(w, name, dtype, dims, nd, with_data ? data : NULL, count);
}

int shardfile_layout(const mx_job *j, uint64_t step, bool widest, bool with_data,
                     st_writer *ww, st_writer *ow)
{
    const Appliance__Plan *p = j->plan;
    int rc = 0;
    for (size_t i = 0; i < j->nt && rc == 0; i++) {
        const mx_tensor *t = &j->t[i];
        const Appliance__PlanTensor *pt = p->tensors[t->id];
        if (t->compact) { /* written dense, its mask as bytes (a file PyTorch opens) */
            char name[160];
            snprintf(name, sizeof(name), "%s.mask", t->name);
            rc = shardfile__add_of(ww, t->name, pt, t, ST_F32, 0, NULL, 0, with_data);
            if (rc == 0)
                rc = shardfile__add_of(ww, name, pt, t, ST_U8, 1, NULL, 0, with_data);
            for (size_t s = 0; t->trainable && s < optim_state_count(&t->st) && rc == 0; s++) {
                const char *sname;
                optim_state_tensor((optim_state *)&t->st, s, &sname, NULL);
                snprintf(name, sizeof(name), "%s.%s", t->name, sname);
                rc = shardfile__add_of(ow, name, pt, t, ST_F32, 2 + s, NULL, 0, with_data);
            }
            continue;
        }
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
