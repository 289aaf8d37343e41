/* Checkpoints of a memoryx shard: write, and load for a resumed job; a
 * running job's, in the thread pool. */
#include "checkpoint.h"

#include "sstream.h"

#include <dirent.h>
#include <errno.h>
#include <inttypes.h>
#include <signal.h>
#include <unistd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fsutil.h"
#include "log.h"
#include "msg.h"
#include "mxjob.h"
#include "mxsparse.h"
#include "safetensors.h"
#include "shardfile.h"
#include "sstream.h"
#include "tier.h"

int ckpt_write(const mx_job *j, uint64_t step, char *path, size_t pathlen, char *err, size_t errlen)
{
    const Appliance__Plan *p = j->plan;
    int rc = fsutil_mkdir_p(p->model_dir);
    if (rc < 0) {
        snprintf(err, errlen, "cannot create model_dir %s: %s", p->model_dir, strerror(-rc));
        return rc;
    }
    char opt_path[PATH_MAX];
    shardfile_paths(j, step, path, opt_path, pathlen < sizeof(opt_path) ? pathlen : sizeof(opt_path));
    st_writer *ow = st_writer_new(), *ww = st_writer_new();
    rc = ow && ww ? shardfile_layout(j, step, false, true, ww, ow) : -ENOMEM;
    if (rc < 0)
        snprintf(err, errlen, "cannot lay out the checkpoint of step %" PRIu64 ": %s", step,
                 strerror(-rc));
    if (rc == 0)
        rc = st_writer_write(ow, opt_path, err, errlen);
    if (rc == 0)
        rc = st_writer_write(ww, path, err, errlen);
    st_writer_free(ow);
    st_writer_free(ww);
    return rc;
}

/* Finds name in any of the files and puts its count floats at dst, or at
 * byte offset at of the tier's file `file`. */
static int ckpt__find(mx_job *j, st_file **files, size_t nfiles, const char *name, float *dst,
                      int file, uint64_t at, size_t count, char *err, size_t errlen)
{
    for (size_t f = 0; f < nfiles; f++) {
        long i = st_find(files[f], name);
        if (i < 0)
            continue;
        if (st_type(files[f], (size_t)i) != ST_F32 || st_numel(files[f], (size_t)i) != count) {
            snprintf(err, errlen, "checkpoint tensor \"%s\" has %zu elements of type %s, the model "
                     "needs %zu float32", name, st_numel(files[f], (size_t)i),
                     st_dtype_name(st_type(files[f], (size_t)i)), count);
            return -EINVAL;
        }
        int rc = tier_files(j) ? tier_copy_in(j->tier, file, at, st_fd(files[f]),
                                        st_file_offset(files[f], (size_t)i), count * sizeof(float))
                         : st_read(files[f], (size_t)i, 0, dst, count * sizeof(float));
        if (rc < 0)
            snprintf(err, errlen, "tensor \"%s\": reading it: %s", name, strerror(-rc));
        return rc;
    }
    snprintf(err, errlen, "tensor \"%s\" is not in the checkpoint", name);
    return -ENOENT;
}

/* t's mask "<name>.mask" from the weight files, when one has it: the
 * shape of its weights, uint8 (or bool), and agreeing with them
 * (mxsparse_check). */
static int ckpt__mask(mx_job *j, mx_tensor *t, st_file **files, char **paths, size_t nfiles,
                      char *err, size_t errlen)
{
    char name[160];
    snprintf(name, sizeof(name), "%s.mask", t->name);
    for (size_t f = 0; f < nfiles; f++) {
        long i = st_find(files[f], name);
        if (i < 0)
            continue;
        const Appliance__PlanTensor *pt = j->plan->tensors[t->id];
        int nd;
        const int64_t *dims = st_dims(files[f], (size_t)i, &nd);
        bool same = (size_t)nd == pt->n_dims;
        for (int d = 0; same && d < nd; d++)
            same = dims[d] >= 0 && (uint64_t)dims[d] == pt->dims[d];
        st_dtype ty = st_type(files[f], (size_t)i);
        if (!same || (ty != ST_U8 && ty != ST_BOOL)) {
            snprintf(err, errlen, "%s: mask \"%s\" is not of its weights' shape in uint8 (%zu "
                     "elements of type %s, the weights have %llu)", paths[f], name,
                     st_numel(files[f], (size_t)i), st_dtype_name(ty), (unsigned long long)t->n);
            return -EINVAL;
        }
        int rc = st_read(files[f], (size_t)i, 0, t->mask, t->n);
        if (rc < 0) {
            snprintf(err, errlen, "%s: mask \"%s\": reading it: %s", paths[f], name,
                     strerror(-rc));
            return rc;
        }
        t->mask_loaded = true;
        return mxsparse_check(j, t, paths[f], err, errlen);
    }
    return 0;
}

static int ckpt__open_all(char **paths, size_t n, st_file **files, char *err, size_t errlen)
{
    for (size_t i = 0; i < n; i++)
        if (!(files[i] = st_open_header(paths[i], err, errlen)))
            return -EINVAL;
    return 0;
}

int ckpt_load(mx_job *j, char *err, size_t errlen)
{
    const Appliance__Plan *p = j->plan;
    size_t nw = p->n_resume_weights, no = p->n_resume_optimizer;
    st_file **files = calloc(nw + no + 1, sizeof(*files));
    if (!files) {
        snprintf(err, errlen, "out of memory");
        return -ENOMEM;
    }
    int rc = ckpt__open_all(p->resume_weights, nw, files, err, errlen);
    if (rc == 0)
        rc = ckpt__open_all(p->resume_optimizer, no, files + nw, err, errlen);
    int64_t updates = -1;
    if (rc == 0 && no > 0) {
        const char *u = st_meta(files[nw], "optimizer_updates");
        const char *type = st_meta(files[nw], "optimizer");
        if (!u || !type) {
            snprintf(err, errlen, "%s: no optimizer_updates or optimizer in its metadata",
                     p->resume_optimizer[0]);
            rc = -EINVAL;
        } else if (strcmp(type, optim_type_name(j->cfg.type)) != 0) {
            snprintf(err, errlen, "the checkpoint's optimizer is %s, the job asks for %s: resume "
                     "with the optimizer the checkpoint was written with", type,
                     optim_type_name(j->cfg.type));
            rc = -EINVAL;
        } else {
            updates = strtoll(u, NULL, 10);
        }
    }
    for (size_t i = 0; i < j->nt && rc == 0; i++) {
        mx_tensor *t = &j->t[i];
        if (t->compact && !t->w && !(t->w = malloc((t->n ? t->n : 1) * sizeof(float)))) {
            snprintf(err, errlen, "out of memory for tensor %s (%llu elements)", t->name,
                     (unsigned long long)t->n);
            rc = -ENOMEM;
            break;
        }
        rc = ckpt__find(j, files, nw, t->name, t->w, TIER_WEIGHTS, t->w_at, t->n, err, errlen);
        if (rc == 0 && t->compact && !(t->mask = calloc(t->n ? t->n : 1, 1))) {
            snprintf(err, errlen, "out of memory for the mask of %s", t->name);
            rc = -ENOMEM;
        }
        if (rc == 0 && t->mask)
            rc = ckpt__mask(j, t, files, p->resume_weights, nw, err, errlen);
        /* a compact tensor: its kept weights, then its state read dense and cut to them */
        float *dense = NULL;
        if (rc == 0 && t->compact && (rc = mxsparse_compact(j, t, err, errlen)) == 0 &&
            !(dense = malloc((t->n ? t->n : 1) * sizeof(float)))) {
            snprintf(err, errlen, "out of memory reading the state of %s", t->name);
            rc = -ENOMEM;
        }
        for (size_t s = 0; rc == 0 && t->trainable && s < optim_state_count(&t->st); s++) {
            const char *sname;
            size_t count;
            float *data = optim_state_tensor(&t->st, s, &sname, &count);
            char name[160];
            snprintf(name, sizeof(name), "%s.%s", t->name, sname);
            rc = ckpt__find(j, files + nw, no, name, dense ? dense : data, TIER_OPTIMIZER,
                            t->s_at[s], dense ? t->n : count, err, errlen);
            if (rc == 0 && dense)
                sstream_take_kept(SSTREAM_DENSE, t->n, 0, sizeof(float), dense, t->bits, 0, data,
                                  NULL, 0);
        }
        free(dense);
        if (rc == 0 && t->trainable && updates >= 0)
            optim_state_set_step(&t->st, updates);
    }
    for (size_t i = 0; i < nw + no; i++)
        st_close(files[i]);
    free(files);
    return rc;
}

int ckpt_clean_partial(const mx_job *j)
{
    const Appliance__Plan *p = j->plan;
    DIR *d = opendir(p->model_dir);
    if (!d)
        return 0;
    char suffix[64];
    snprintf(suffix, sizeof(suffix), "-shard%u-of-%zu.safetensors.tmp-", j->shard + 1, p->n_shards);
    int removed = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        const char *tail = strstr(e->d_name, suffix);
        if (!tail || (strncmp(e->d_name, "checkpoint_", 11) != 0 && strncmp(e->d_name, "optimizer_", 10) != 0))
            continue;
        char *end;
        long pid = strtol(tail + strlen(suffix), &end, 10);
        if (*end || pid <= 0 || pid == (long)getpid() || kill((pid_t)pid, 0) == 0 || errno != ESRCH)
            continue;
        char path[PATH_MAX + 256];
        snprintf(path, sizeof(path), "%s/%s", p->model_dir, e->d_name);
        if (unlink(path) == 0) {
            log_warn("job %s: removed %s, a partial checkpoint file of an interrupted write (process %ld is gone)",
                     j->id, path, pid);
            removed++;
        }
    }
    closedir(d);
    return removed;
}

/* In the thread pool: the files of the checkpoint (the job's weights and
 * optimizer state do not change meanwhile: no update runs). */
static void ckpt__work(uv_work_t *req)
{
    mx_job *j = container_of(req, mx_job, ckpt_req);
    if (tier_files(j))
        j->ckpt_rc = tier_checkpoint(j, j->ckpt_step, j->ckpt_kind == MX_CKPT_FINAL, j->ckpt_path,
                                     sizeof(j->ckpt_path), j->ckpt_err, sizeof(j->ckpt_err));
    else
        j->ckpt_rc = ckpt_write(j, j->ckpt_step, j->ckpt_path, sizeof(j->ckpt_path), j->ckpt_err,
                                sizeof(j->ckpt_err));
}

/* Back on the loop: the checkpoint is reported, then what it was for. */
static void ckpt__done(uv_work_t *req, int status)
{
    mx_job *j = container_of(req, mx_job, ckpt_req);
    if (mxjob_pool_back(j))
        return;
    mx_ckpt_kind kind = j->ckpt_kind;
    uint64_t step = j->ckpt_step;
    j->ckpt_kind = MX_CKPT_NONE;
    if (status < 0 || j->ckpt_rc < 0) {
        const char *why = status < 0 ? uv_strerror(status) : j->ckpt_err;
        log_error("job %s: checkpoint of step %llu: %s", j->id, (unsigned long long)step, why);
        j->mx->checkpoint_failures++;
        mxjob_abort(j, "%s checkpoint of step %llu failed: %s",
                    kind == MX_CKPT_INITIAL ? "initial" : kind == MX_CKPT_FINAL ? "final" : "the",
                    (unsigned long long)step, why);
        return;
    }
    j->mx->checkpoints++;
    log_info("job %s: checkpoint of step %llu written to %s in %.1f s", j->id,
             (unsigned long long)step, j->ckpt_path, (double)(uv_hrtime() - j->work_start) * 1e-9);
    Appliance__CheckpointWritten cw = APPLIANCE__CHECKPOINT_WRITTEN__INIT;
    cw.job_id = j->id;
    cw.step = step;
    cw.shard = j->shard;
    cw.path = j->ckpt_path;
    ENVELOPE(env, checkpoint_written, CHECKPOINT_WRITTEN, &cw);
    node_send_coordinator(j->mx->n, &env);
    j->ops->checkpoint_written(j, kind, step);
}

void ckpt_start(mx_job *j, uint64_t step, mx_ckpt_kind kind)
{
    j->ckpt_kind = kind;
    j->ckpt_step = step;
    j->work_start = uv_hrtime();
    j->ckpt_path[0] = 0;
    int rc = uv_queue_work(j->mx->n->loop, &j->ckpt_req, ckpt__work, ckpt__done);
    if (rc < 0) {
        j->ckpt_kind = MX_CKPT_NONE;
        mxjob_abort(j, "checkpoint of step %llu cannot start: %s", (unsigned long long)step,
                    uv_strerror(rc));
        return;
    }
    j->pool_work++;
}

void ckpt_after(mx_job *j, uint64_t step)
{
    ckpt_start(j, step + 1, step + 1 >= j->plan->max_steps ? MX_CKPT_FINAL : MX_CKPT_STEP);
}
