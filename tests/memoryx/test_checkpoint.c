/* memoryx's checkpoints (memoryx/checkpoint.c): a shard's tensors and
 * optimizer state written as safetensors and loaded back bit for bit, by
 * name, whatever the shard count; a checkpoint of the wrong optimizer or
 * without a tensor refused; a running job's checkpoint written in the
 * thread pool and reported (or failing the job); partial files of dead
 * writers removed. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "checkpoint.h"
#include "mxsparse.h"
#include "mxfix.h"
#include "safetensors.h"

static const fix_tensor one_shard[] = {
    {"fc1.weight", 40, 50, 0, "he_normal", true},
    {"fc1.bias", 40, 0, 0, "zeros", true},
    {"bn.running_mean", 50, 0, 0, "zeros", false},
};
/* the same tensors over two shards */
static const fix_tensor two_shards[] = {
    {"fc1.weight", 40, 50, 1, "he_normal", true},
    {"fc1.bias", 40, 0, 0, "zeros", true},
    {"bn.running_mean", 50, 0, 1, "zeros", false},
};

static char dir[256];

static fix_spec spec(const fix_tensor *ts, uint32_t shards, const char *optimizer)
{
    return (fix_spec){ts, 3, shards, optimizer, 0.9, 0, 64, 1, 10, false, dir};
}

/* The state s of plan tensor id, element e, as the writers hold it. */
static float state_value(uint32_t id, size_t s, uint64_t e)
{
    return fix_value(1000 + 10 * id + s, e);
}

/* Fills the job's optimizer state (weights are fix_value's) and its count. */
static void fill_state(mx_job *j, int64_t updates)
{
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        for (size_t s = 0; t->trainable && s < optim_state_count(&t->st); s++)
            for (uint64_t e = 0; e < t->n; e++)
                t->st.tensor[s][e] = state_value(t->id, s, e);
        if (t->trainable)
            optim_state_set_step(&t->st, updates);
    }
}

static char **strs(char paths[][512], size_t n)
{
    char **v = malloc(n * sizeof(*v));
    for (size_t i = 0; i < n; i++)
        v[i] = strdup(paths[i]);
    return v;
}

static char wpaths[2][512], opaths[2][512];

/* Writes the checkpoint of step 7 of plan `ts` over `shards` shards, a
 * job a shard, into wpaths and opaths. */
static void write_shards(const fix_tensor *ts, uint32_t shards)
{
    for (uint32_t k = 0; k < shards; k++) {
        fix_spec s = spec(ts, shards, "adam");
        mx_job *j = fix_job(fix_plan(&s), k, 0, NULL, 0);
        fill_state(j, 7);
        char err[512];
        int rc = ckpt_write(j, 7, wpaths[k], sizeof(wpaths[k]), err, sizeof(err));
        ck_assert_msg(rc == 0, "%s", err);
        char want[512];
        snprintf(want, sizeof(want), "%s/checkpoint_7-shard%u-of-%u.safetensors", dir, k + 1,
                 shards);
        ck_assert_str_eq(wpaths[k], want);
        snprintf(opaths[k], sizeof(opaths[k]), "%s/optimizer_7-shard%u-of-%u.safetensors", dir,
                 k + 1, shards);
        ck_assert_int_eq(access(opaths[k], R_OK), 0);
        fix_end();
    }
}

/* A job of plan `ts` (one shard, optimizer opt) resuming from wpaths and
 * opaths, its tensors zeros until loaded. */
static mx_job *resumer(const fix_tensor *ts, size_t nt, uint32_t files, const char *opt)
{
    fix_spec s = spec(ts, 1, opt);
    s.nt = nt;
    Appliance__Plan *p = fix_plan(&s);
    p->first_step = 7;
    p->n_resume_weights = p->n_resume_optimizer = files;
    p->resume_weights = strs(wpaths, files);
    p->resume_optimizer = strs(opaths, files);
    return fix_job(p, 0, FIX_NOFILL, NULL, 0);
}

static void setup(void)
{
    fix_init(2, true);
    fix_tmpdir(dir, sizeof(dir));
}

static void teardown(void)
{
    fix_rmdir(dir);
}

START_TEST(written_then_loaded_bit_for_bit)
{
    uint32_t shards = (uint32_t)_i + 1;
    write_shards(shards == 1 ? one_shard : two_shards, shards);
    /* what the files say of themselves */
    char err[512];
    st_file *f = st_open(wpaths[0], err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_str_eq(st_meta(f, "step"), "7");
    ck_assert_str_eq(st_meta(f, "job_id"), "job-7");
    ck_assert_str_eq(st_meta(f, "optimizer"), "adam");
    ck_assert_str_eq(st_meta(f, "optimizer_updates"), "7");
    long i = st_find(f, "fc1.bias");
    ck_assert_int_ge(i, 0);
    ck_assert_uint_eq(st_numel(f, (size_t)i), 40);
    st_close(f);
    /* loaded into one shard: every tensor by name from the shard files */
    mx_job *j = resumer(one_shard, 3, shards, "adam");
    for (size_t k = 0; k < j->nt; k++)
        ck_assert_float_eq(j->t[k].w[1], 0.0f);
    int rc = ckpt_load(j, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    for (size_t k = 0; k < j->nt; k++) {
        mx_tensor *t = &j->t[k];
        for (uint64_t e = 0; e < t->n; e++)
            ck_assert_msg(t->w[e] == fix_value(t->id, e), "%s[%llu]", t->name,
                          (unsigned long long)e);
        for (size_t s = 0; t->trainable && s < optim_state_count(&t->st); s++)
            for (uint64_t e = 0; e < t->n; e++)
                ck_assert(t->st.tensor[s][e] == state_value(t->id, s, e));
        if (t->trainable)
            ck_assert_int_eq(optim_state_step(&t->st), 7);
    }
    fix_end();
}
END_TEST

START_TEST(load_refuses_another_optimizer)
{
    write_shards(one_shard, 1);
    mx_job *j = resumer(one_shard, 3, 1, "sgd");
    char err[512];
    ck_assert_int_lt(ckpt_load(j, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "the checkpoint's optimizer is adam, the job asks for sgd"), "%s", err);
    fix_end();
}
END_TEST

START_TEST(load_refuses_a_missing_or_misshapen_tensor)
{
    write_shards(one_shard, 1);
    static const fix_tensor more[] = {
        {"fc1.weight", 40, 50, 0, "he_normal", true},
        {"fc2.weight", 10, 40, 0, "he_normal", true},
    };
    mx_job *j = resumer(more, 2, 1, "adam");
    char err[512];
    ck_assert_int_lt(ckpt_load(j, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "tensor \"fc2.weight\" is not in the checkpoint"), "%s", err);
    fix_end();
    static const fix_tensor other[] = {{"fc1.weight", 50, 50, 0, "he_normal", true}};
    j = resumer(other, 1, 1, "adam");
    ck_assert_int_lt(ckpt_load(j, err, sizeof(err)), 0);
    ck_assert_msg(strstr(err, "\"fc1.weight\" has 2000 elements"), "%s", err);
    fix_end();
}
END_TEST

/* j's fc1.weight (its first tensor) sparse at 90% (static), its mask
 * allocated; chosen from its weights unless choose is false. */
static void make_sparse(mx_job *j, bool choose)
{
    j->sparse.type = SPARSE_STATIC;
    j->sparse.seed = 3;
    j->t[0].level = 0.9f;
    char err[256];
    ck_assert_int_eq(mxsparse_alloc(j, err, sizeof(err)), 0);
    if (choose)
        ck_assert_int_eq(mxsparse_init(j, err, sizeof(err)), 0);
}

/* Rewrites the weights file wpaths[0] with its mask tensor given dims
 * (rows, cols) and element `poke` of the mask set to 1 (poke < 0: none). */
static void rewrite_mask(int64_t rows, int64_t cols, long poke)
{
    char err[512];
    st_file *f = st_open(wpaths[0], err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    st_writer *w = st_writer_new();
    static uint8_t mask[2000];
    for (size_t i = 0; i < st_count(f); i++) {
        int nd;
        const int64_t *dims = st_dims(f, i, &nd);
        size_t bytes;
        const void *data = st_data_raw(f, i, &bytes);
        if (strcmp(st_name(f, i), "fc1.weight.mask") == 0) {
            ck_assert_uint_eq(bytes, sizeof(mask));
            memcpy(mask, data, bytes);
            if (poke >= 0)
                mask[poke] = 1;
            int64_t d2[2] = {rows, cols};
            ck_assert_int_eq(st_writer_add(w, st_name(f, i), ST_U8, d2, 2, mask, sizeof(mask)), 0);
        } else {
            ck_assert_int_eq(st_writer_add(w, st_name(f, i), st_type(f, i), dims, nd, data,
                                           st_numel(f, i)), 0);
        }
    }
    for (size_t i = 0; i < st_meta_count(f); i++)
        ck_assert_int_eq(st_writer_meta(w, st_meta_key(f, i), st_meta_value(f, i)), 0);
    char tmp[600];
    snprintf(tmp, sizeof(tmp), "%s.new", wpaths[0]);
    ck_assert_msg(st_writer_write(w, tmp, err, sizeof(err)) == 0, "%s", err);
    st_writer_free(w);
    st_close(f);
    ck_assert_int_eq(rename(tmp, wpaths[0]), 0);
}

START_TEST(masks_written_then_loaded)
{
    /* a sparse shard's checkpoint: the mask beside its weights */
    fix_spec s = spec(one_shard, 1, "adam");
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    make_sparse(j, true);
    ck_assert_uint_eq(sparse_mask_count(j->t[0].mask, j->t[0].n), 200);
    static uint8_t want[2000];
    memcpy(want, j->t[0].mask, sizeof(want));
    for (uint64_t e = 0; e < j->t[0].n; e++)
        ck_assert(want[e] || j->t[0].w[e] == 0.0f);
    char err[512];
    ck_assert_msg(ckpt_write(j, 7, wpaths[0], sizeof(wpaths[0]), err, sizeof(err)) == 0, "%s", err);
    snprintf(opaths[0], sizeof(opaths[0]), "%s/optimizer_7-shard1-of-1.safetensors", dir);
    fix_end();
    st_file *f = st_open(wpaths[0], err, sizeof(err));
    long i = st_find(f, "fc1.weight.mask");
    ck_assert_int_ge(i, 0);
    ck_assert_int_eq(st_type(f, (size_t)i), ST_U8);
    ck_assert_int_lt(st_find(f, "fc1.bias.mask"), 0);
    st_close(f);
    /* resumed: the same mask, not chosen again */
    j = resumer(one_shard, 3, 1, "adam");
    make_sparse(j, false);
    ck_assert_msg(ckpt_load(j, err, sizeof(err)) == 0, "%s", err);
    ck_assert(j->t[0].mask_loaded);
    ck_assert_int_eq(mxsparse_init(j, err, sizeof(err)), 0);
    ck_assert(memcmp(j->t[0].mask, want, sizeof(want)) == 0);
    fix_end();
    /* a mask of another shape, naming the file */
    rewrite_mask(50, 40, -1);
    j = resumer(one_shard, 3, 1, "adam");
    make_sparse(j, false);
    ck_assert_int_lt(ckpt_load(j, err, sizeof(err)), 0);
    char expect[1024];
    snprintf(expect, sizeof(expect), "%s: mask \"fc1.weight.mask\" is not of its weights' shape "
             "in uint8 (2000 elements of type U8, the weights have 2000)", wpaths[0]);
    ck_assert_str_eq(err, expect);
    fix_end();
    /* one that keeps a weight more than the level: its density disagrees */
    rewrite_mask(40, 50, (long)(strchr((const char *)want, 0) - (const char *)want));
    j = resumer(one_shard, 3, 1, "adam");
    make_sparse(j, false);
    ck_assert_int_lt(ckpt_load(j, err, sizeof(err)), 0);
    snprintf(expect, sizeof(expect), "%s: mask \"fc1.weight.mask\" keeps 201 of 2000 elements "
             "(density 0.1005); the job's sparsity 0.9000 keeps 200", wpaths[0]);
    ck_assert_str_eq(err, expect);
    fix_end();
}
END_TEST

START_TEST(running_job_checkpoint_reported)
{
    fix_spec s = spec(one_shard, 1, "adam");
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    ckpt_start(j, 3, MX_CKPT_STEP);
    ck_assert_int_eq(j->ckpt_kind, MX_CKPT_STEP);
    ck_assert_uint_eq(j->pool_work, 1);
    ck_assert_int_eq(fix_checkpoints, 0);
    fix_run();
    ck_assert_int_eq(fix_checkpoints, 1);
    ck_assert_int_eq(fix_ckpt_kind, MX_CKPT_STEP);
    ck_assert_uint_eq(fix_ckpt_step, 3);
    ck_assert_uint_eq(fix_mx.checkpoints, 1);
    ck_assert_int_eq(j->ckpt_kind, MX_CKPT_NONE);
    ck_assert_uint_eq(j->pool_work, 0);
    char want[512];
    snprintf(want, sizeof(want), "%s/checkpoint_3-shard1-of-1.safetensors", dir);
    ck_assert_str_eq(j->ckpt_path, want);
    ck_assert_int_eq(access(want, R_OK), 0);
    /* after a step: the final one after the last (max_steps 10) */
    ckpt_after(j, 4);
    fix_run();
    ck_assert_int_eq(fix_ckpt_kind, MX_CKPT_STEP);
    ck_assert_uint_eq(fix_ckpt_step, 5);
    ckpt_after(j, 9);
    fix_run();
    ck_assert_int_eq(fix_ckpt_kind, MX_CKPT_FINAL);
    ck_assert_uint_eq(fix_ckpt_step, 10);
    ck_assert_int_eq(fix_checkpoints, 3);
    ck_assert_int_eq(fix_releases, 0);
    fix_end();
}
END_TEST

START_TEST(failed_checkpoint_fails_the_job)
{
    char file[512], sub[600];
    snprintf(file, sizeof(file), "%s/a-file", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    snprintf(sub, sizeof(sub), "%s/models", file); /* cannot be made */
    fix_spec s = spec(one_shard, 1, "adam");
    s.model_dir = sub;
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    ckpt_start(j, 10, MX_CKPT_FINAL);
    fix_run();
    ck_assert_int_eq(fix_checkpoints, 0);
    ck_assert_int_eq(fix_releases, 1);
    ck_assert_msg(strstr(fix_why, "final checkpoint of step 10 failed: cannot create model_dir"),
                  "%s", fix_why);
    ck_assert_ptr_null(fix_mx.job);
}
END_TEST

START_TEST(released_while_writing)
{
    fix_spec s = spec(one_shard, 1, "adam");
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    ckpt_start(j, 3, MX_CKPT_STEP);
    jobhost_end_job(&fix_mx.jobs, JOBHOST_RELEASED, "released");
    ck_assert(j->released); /* freed when the write is back */
    fix_run();
    ck_assert_int_eq(fix_checkpoints, 0);
    ck_assert_uint_eq(fix_mx.checkpoints, 0);
}
END_TEST

static void touch(const char *name)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
}

static bool exists(const char *name)
{
    char path[600];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    return access(path, F_OK) == 0;
}

START_TEST(partial_files_of_dead_writers_removed)
{
    pid_t dead = fork();
    ck_assert_int_ge(dead, 0);
    if (dead == 0)
        _exit(0);
    ck_assert_int_eq(waitpid(dead, NULL, 0), dead);
    char d1[128], d2[128], mine[128], live[128], other[128];
    snprintf(d1, sizeof(d1), "checkpoint_3-shard1-of-1.safetensors.tmp-%d", (int)dead);
    snprintf(d2, sizeof(d2), "optimizer_3-shard1-of-1.safetensors.tmp-%d", (int)dead);
    snprintf(mine, sizeof(mine), "checkpoint_3-shard1-of-1.safetensors.tmp-%d", (int)getpid());
    snprintf(live, sizeof(live), "checkpoint_3-shard1-of-1.safetensors.tmp-%d", (int)getppid());
    snprintf(other, sizeof(other), "checkpoint_3-shard2-of-2.safetensors.tmp-%d", (int)dead);
    const char *names[] = {d1, d2, mine, live, other};
    for (int i = 0; i < 5; i++)
        touch(names[i]);
    fix_spec s = spec(one_shard, 1, "adam");
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    ck_assert_int_eq(ckpt_clean_partial(j), 2);
    ck_assert(!exists(d1) && !exists(d2));
    ck_assert(exists(mine) && exists(live) && exists(other));
    fix_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memoryx-checkpoint");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_loop_test(tc, written_then_loaded_bit_for_bit, 0, 2);
    tcase_add_test(tc, load_refuses_another_optimizer);
    tcase_add_test(tc, load_refuses_a_missing_or_misshapen_tensor);
    tcase_add_test(tc, masks_written_then_loaded);
    tcase_add_test(tc, running_job_checkpoint_reported);
    tcase_add_test(tc, failed_checkpoint_fails_the_job);
    tcase_add_test(tc, released_while_writing);
    tcase_add_test(tc, partial_files_of_dead_writers_removed);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
