/* memoryx's disk tier (memoryx/tier.c, memoryx/tierio.c): a shard's files
 * laid out and bounded as tier_disk_bytes says; the optimizer's update
 * through the tier's pieces bit for bit optim's; checkpoints copied or
 * renamed out of the files and loaded back into them; the weight stream
 * read ahead in order within its window (from the files, or rounded from
 * memory); reduced gradients written to the gradients file and read back,
 * and updated from there. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "checkpoint.h"
#include "mxfix.h"
#include "optim_plan.h"
#include "safetensors.h"
#include "tier.h"
#include "tierio.h"
#include "update.h"

#define CHUNK 4096
#define WINDOW (64u << 10) /* read-ahead 32 KiB: two chunks; gradients 16 KiB */

static const fix_tensor tensors[] = {
    {"fc1.weight", 300, 400, 0, "he_normal", true},
    {"fc1.bias", 300, 0, 0, "zeros", true},
    {"bn.running_mean", 400, 0, 0, "zeros", false},
};

static char dir[256], models[300];

static fix_spec spec(double max_norm, bool bf16)
{
    return (fix_spec){tensors, 3, 1, "adam", 0, max_norm, CHUNK, 1, 10, bf16, models};
}

static mx_job *tier_job(double max_norm, bool bf16)
{
    fix_spec s = spec(max_norm, bf16);
    return fix_job(fix_plan(&s), 0, FIX_TIER, dir, WINDOW);
}

static void setup(void)
{
    fix_init(2, true);
    fix_tmpdir(dir, sizeof(dir));
    snprintf(models, sizeof(models), "%s/models", dir);
}

static void teardown(void)
{
    if (access(models, F_OK) == 0) /* (made by the tests that write checkpoints) */
        fix_rmdir(models);
    fix_rmdir(dir);
}

static float grad_value(const mx_tensor *t, uint64_t e)
{
    return fix_value(500 + t->id, e);
}

/* The reference of one tensor: copies to update whole, with optim. */
typedef struct ref {
    float *w, *g;
    optim_state st;
    size_t n;
    bool trainable;
} ref;

static ref refs[3];

static void ref_take(const mx_job *j, bool with_grads)
{
    for (size_t i = 0; i < j->nt; i++) {
        const mx_tensor *t = &j->t[i];
        ref *r = &refs[i];
        r->n = t->n;
        r->trainable = t->trainable;
        r->w = malloc(t->n * sizeof(float));
        r->g = malloc(t->n * sizeof(float));
        memcpy(r->w, t->w, t->n * sizeof(float));
        for (uint64_t e = 0; e < t->n; e++)
            r->g[e] = with_grads ? t->g[e] : grad_value(t, e);
        memset(&r->st, 0, sizeof(r->st));
        if (t->trainable)
            ck_assert_int_eq(optim_state_init(&r->st, &j->cfg, t->n), 0);
    }
}

static void ref_param(void *ctx, size_t i, optim_param *out)
{
    ref *r = &refs[i];
    *out = (optim_param){r->w, r->g, r->n, r->trainable, &r->st, NULL, NULL};
}

static void ref_check_free(const mx_job *j)
{
    for (size_t i = 0; i < j->nt; i++) {
        const mx_tensor *t = &j->t[i];
        ck_assert_msg(fix_same(t->w, refs[i].w, t->n), "%s: weights differ", t->name);
        for (size_t s = 0; t->trainable && s < optim_state_count(&t->st); s++)
            ck_assert_msg(fix_same(t->st.tensor[s], refs[i].st.tensor[s], t->n),
                          "%s: state %zu differs", t->name, s);
        if (t->trainable)
            ck_assert_int_eq(optim_state_step(&t->st), optim_state_step(&refs[i].st));
        free(refs[i].w);
        free(refs[i].g);
        optim_state_deinit(&refs[i].st);
    }
}

START_TEST(files_laid_out_within_bounds)
{
    mx_job *j = tier_job(0, false);
    mx_tier *tr = j->tier;
    ck_assert(tier_files(j));
    ck_assert_uint_eq(tr->len[0] + tr->len[1] + tr->len[2], tier_disk_bytes(j));
    ck_assert_uint_eq(j->t[0].nparts, 1); /* updated whole, through the window */
    uint64_t w_at = tr->head[TIER_WEIGHTS], s_at = tr->head[TIER_OPTIMIZER], g_at = 0;
    for (size_t i = 0; i < j->nt; i++) { /* in order, no gaps, no overlaps */
        mx_tensor *t = &j->t[i];
        ck_assert_uint_eq(t->w_at, w_at);
        ck_assert_ptr_eq(t->w, (float *)(tr->map[TIER_WEIGHTS] + w_at));
        w_at += t->n * sizeof(float);
        for (size_t s = 0; t->trainable && s < j->states; s++) {
            ck_assert_uint_eq(t->s_at[s], s_at);
            s_at += t->n * sizeof(float);
        }
        ck_assert_uint_eq(t->g_at, g_at);
        g_at += (t->n * sizeof(float) + 4095) / 4096 * 4096;
    }
    ck_assert_uint_eq(w_at, tr->len[TIER_WEIGHTS]);
    ck_assert_uint_eq(s_at, tr->len[TIER_OPTIMIZER]);
    ck_assert_uint_eq(g_at, tr->len[TIER_GRADIENTS]);
    ck_assert_uint_eq(tr->ra_limit, WINDOW / 2);
    ck_assert_uint_eq(tr->g_limit, WINDOW / 4);
    ck_assert_uint_eq(tr->piece, 1024);
    /* the weights file is a safetensors file of the shard already */
    char err[512], path[PATH_MAX];
    snprintf(path, sizeof(path), "%s", tr->path[TIER_WEIGHTS]);
    char want[600];
    snprintf(want, sizeof(want), "%s/tier-job-7-shard1-weights.safetensors", dir);
    ck_assert_str_eq(path, want);
    st_file *f = st_open(path, err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    long i = st_find(f, "fc1.bias");
    ck_assert_int_ge(i, 0);
    float v[300];
    ck_assert_int_eq(st_read(f, (size_t)i, 0, v, sizeof(v)), 0);
    ck_assert(fix_same(v, j->t[1].w, 300));
    st_close(f);
    fix_end();
    ck_assert_int_ne(access(path, F_OK), 0); /* removed with the job */
}
END_TEST

START_TEST(update_in_pieces_matches_optim)
{
    bool clip = _i == 1;
    mx_job *j = tier_job(clip ? 0.5 : 0, false);
    for (size_t i = 0; i < j->nt; i++)
        for (uint64_t e = 0; e < j->t[i].n; e++)
            j->t[i].g[e] = grad_value(&j->t[i], e);
    ref_take(j, true);
    if (clip) {
        tier_update_step(j);
    } else {
        for (size_t i = 0; i < j->nt; i++)
            tier_update(j, &j->t[i], 1.0f);
    }
    optim_apply_step(&j->cfg, j->nt, ref_param, NULL, (int64_t)j->step);
    ref_check_free(j);
    fix_end();
}
END_TEST

/* Fills the optimizer state of j's tensors (from `from`). */
static void fill_state(mx_job *j, uint64_t from, int64_t updates)
{
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        for (size_t s = 0; t->trainable && s < j->states; s++)
            for (uint64_t e = 0; e < t->n; e++)
                t->st.tensor[s][e] = fix_value(from + 10 * t->id + s, e);
        if (t->trainable)
            optim_state_set_step(&t->st, updates);
    }
}

/* Job b's tensors hold job a's bits. */
static void same_tensors(const mx_job *a, const mx_job *b)
{
    ck_assert_uint_eq(a->nt, b->nt);
    for (size_t i = 0; i < a->nt; i++) {
        const mx_tensor *x = &a->t[i], *y = &b->t[i];
        ck_assert_msg(fix_same(x->w, y->w, x->n), "%s: weights differ", x->name);
        for (size_t s = 0; x->trainable && s < a->states; s++)
            ck_assert_msg(fix_same(x->st.tensor[s], y->st.tensor[s], x->n), "%s: state differs",
                          x->name);
        if (x->trainable)
            ck_assert_int_eq(optim_state_step(&y->st), 4);
    }
}

/* A job of the same plan resuming from the checkpoint of step 4 at wpath
 * and opath, in memory, or in the tier's files in sdir. */
static mx_job *resumer(const char *wpath, const char *opath, const char *sdir)
{
    fix_spec s = spec(0, false);
    Appliance__Plan *p = fix_plan(&s);
    p->first_step = 4;
    p->n_resume_weights = p->n_resume_optimizer = 1;
    p->resume_weights = malloc(sizeof(char *));
    p->resume_optimizer = malloc(sizeof(char *));
    p->resume_weights[0] = strdup(wpath);
    p->resume_optimizer[0] = strdup(opath);
    mx_job *j = fix_job(p, 0, FIX_NOFILL | (sdir ? FIX_TIER : 0), sdir, WINDOW);
    char err[512];
    int rc = ckpt_load(j, err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    return j;
}

START_TEST(checkpoint_out_of_the_files_and_back)
{
    bool last = _i == 1; /* the last one is the files renamed into model_dir */
    mx_job *a = tier_job(0, false);
    fill_state(a, 2000, 4);
    char wpath[PATH_MAX], opath[PATH_MAX], err[512];
    int rc = tier_checkpoint(a, 4, last, wpath, sizeof(wpath), err, sizeof(err));
    ck_assert_msg(rc == 0, "%s", err);
    snprintf(opath, sizeof(opath), "%s/optimizer_4-shard1-of-1.safetensors", models);
    char want[PATH_MAX + 64];
    snprintf(want, sizeof(want), "%s/checkpoint_4-shard1-of-1.safetensors", models);
    ck_assert_str_eq(wpath, want);
    ck_assert_int_eq(a->tier->moved[TIER_WEIGHTS], last);
    ck_assert_int_eq(access(a->tier->path[TIER_WEIGHTS], F_OK) == 0, !last);
    st_file *f = st_open(wpath, err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_str_eq(st_meta(f, "step"), "4");
    ck_assert_str_eq(st_meta(f, "optimizer_updates"), "4");
    st_close(f);
    /* into memory, and into another tier's files (copied in the kernel) */
    mx_job *b = resumer(wpath, opath, NULL);
    same_tensors(a, b);
    mxjob_free(b);
    char dir2[256];
    fix_tmpdir(dir2, sizeof(dir2));
    mx_job *c = resumer(wpath, opath, dir2);
    same_tensors(a, c);
    mxjob_free(c);
    fix_rmdir(dir2);
    fix_mx.job = fix_mx.jobs.job = a;
    fix_mx.jobs.plan = a->plan;
    fix_end();
    ck_assert_int_eq(access(wpath, R_OK), 0); /* the checkpoint stays */
    ck_assert_int_eq(access(opath, R_OK), 0);
}
END_TEST

/* The stream's chunk ch as it must come out of the read-ahead. */
static void check_chunk(const mx_job *j, const mx_rbuf *b, const plan_chunk *ch)
{
    const mx_tensor *t = j->by_id[ch->tensor];
    ck_assert_uint_eq(b->ch.seq, ch->seq);
    ck_assert_uint_eq(b->bytes, ch->count * sizeof(float));
    if (!j->plan->wire_bf16) {
        ck_assert(fix_same(b->data, t->w + ch->offset, ch->count));
        return;
    }
    uint16_t h[CHUNK];
    bf16_pack(h, t->w + ch->offset, ch->count);
    ck_assert(memcmp(b->data, h, ch->count * sizeof(uint16_t)) == 0);
}

START_TEST(stream_read_ahead_in_order_within_window)
{
    /* 0: from the files; 1: from the files, rounded to bfloat16; 2: from
     * memory, rounded to bfloat16 (tier_ahead) */
    mx_job *j;
    if (_i < 2) {
        j = tier_job(0, _i == 1);
    } else {
        fix_spec s = spec(0, true);
        j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
        ck_assert_int_eq(tier_ahead(j, WINDOW / 2), 0);
    }
    mx_tier *tr = j->tier;
    plan_stream want;
    plan_stream_start(&tr->ra, j->plan, 0, (uint32_t)j->states, 0, 0);
    want = tr->ra;
    tierio_read_more(j);
    plan_chunk ch;
    uint64_t chunks = 0, bytes = 0;
    while (plan_stream_next(&want, &ch)) {
        fix_run();
        /* read ahead until the window is full, or the stream read to its
         * end, and no further */
        ck_assert(!tr->reading);
        ck_assert_uint_le(tr->ra_bytes, tr->ra_limit);
        plan_stream ra = tr->ra;
        plan_chunk next;
        ck_assert(!plan_stream_next(&ra, &next) ||
                  tr->ra_bytes + next.count * sizeof(float) > tr->ra_limit);
        uint64_t held = 0;
        for (mx_rbuf *b = tr->ready; b; b = b->next)
            held += b->bytes;
        ck_assert_uint_eq(held, tr->ra_bytes);
        ck_assert_ptr_null(tierio_ready(j, ch.seq + 1)); /* not the next */
        mx_rbuf *b = tierio_ready(j, ch.seq);
        ck_assert_ptr_nonnull(b);
        check_chunk(j, b, &ch);
        tierio_sending(tr, b, uv_now(fix_node.loop));
        tierio_sent(b, 0); /* written: its room comes back, the next read starts */
        chunks++;
        bytes += ch.count * sizeof(float);
        plan_stream_take(&want);
    }
    fix_run();
    /* forward: 30 chunks of the weight, the bias, the buffer; backward:
     * the bias, the weight */
    ck_assert_uint_eq(chunks, 30 + 1 + 1 + 1 + 30);
    ck_assert_int_eq(fix_chunk_reads, (int)chunks);
    ck_assert_uint_eq(tr->read_bytes, bytes);
    ck_assert_uint_eq(tr->ra_bytes, 0);
    ck_assert_ptr_null(tr->ready);
    ck_assert_uint_eq(fix_mx.chunk_hist.count, chunks);
    ck_assert_uint_eq(j->pool_work, 0);
    fix_end();
}
END_TEST

/* Queues every gradient chunk of j's tensors to the gradients file, as
 * the wire carries them. Returns the elements queued. */
static uint64_t write_grads(mx_job *j)
{
    uint64_t elems = 0;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        for (uint64_t off = 0; off < t->n; off += CHUNK) {
            uint64_t count = t->n - off < CHUNK ? t->n - off : CHUNK;
            float *f = malloc(count * sizeof(float));
            for (uint64_t e = 0; e < count; e++)
                f[e] = grad_value(t, off + e);
            if (j->plan->wire_bf16)
                bf16_pack_in_place(f, count); /* what the wire carries */
            tierio_grad_wire(j, t, off, count, f, f);
            elems += count;
        }
    }
    return elems;
}

START_TEST(gradients_written_and_read_back)
{
    bool bf16 = _i == 1;
    mx_job *j = tier_job(0, bf16);
    mx_tier *tr = j->tier;
    uint64_t elems = write_grads(j);
    ck_assert_uint_eq(tr->g_bytes, elems * sizeof(float)); /* in flight, counted */
    fix_run();
    ck_assert_uint_eq(tr->g_bytes, 0);
    ck_assert_uint_eq(j->pool_work, 0);
    ck_assert_uint_eq(fix_grad_elems, elems);
    ck_assert_int_eq(fix_grads_written, 30 + 1 + 1);
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        for (uint64_t e = 0; e < t->n; e++) {
            float v = grad_value(t, e);
            if (bf16) {
                uint16_t h;
                bf16_pack(&h, &v, 1);
                bf16_unpack(&v, &h, 1);
            }
            ck_assert_msg(t->g[e] == v, "%s[%llu]", t->name, (unsigned long long)e);
        }
    }
    fix_end();
}
END_TEST

/* grad_written as mx.c takes it: the gradient counts in for the update. */
static void grad_in(mx_job *j, mx_tensor *t, uint64_t offset, uint64_t count)
{
    update_grad_in(j, t, offset, count);
}

START_TEST(gradients_written_then_updated)
{
    mx_job *j = tier_job(0, false);
    mx_job_ops ops = fix_ops;
    ops.grad_written = grad_in;
    j->ops = &ops;
    update_start(j);
    ref_take(j, false);
    write_grads(j);
    fix_run();
    ck_assert_uint_eq(j->updated, j->nt);
    ck_assert_int_eq(fix_update_backs, (int)j->nt);
    optim_apply_step(&j->cfg, j->nt, ref_param, NULL, (int64_t)j->step);
    ref_check_free(j);
    fix_end();
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memoryx-tier");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, files_laid_out_within_bounds);
    tcase_add_loop_test(tc, update_in_pieces_matches_optim, 0, 2);
    tcase_add_loop_test(tc, checkpoint_out_of_the_files_and_back, 0, 2);
    tcase_add_loop_test(tc, stream_read_ahead_in_order_within_window, 0, 3);
    tcase_add_loop_test(tc, gradients_written_and_read_back, 0, 2);
    tcase_add_test(tc, gradients_written_then_updated);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
