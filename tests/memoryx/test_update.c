/* memoryx's optimizer update (memoryx/update.c): a step's reduced
 * gradients, coming in chunks in any order, update each tensor in parts in
 * the thread pool, and the weights and optimizer state come out bit for bit
 * as optim_apply_step makes them from the whole gradients, with float32 or
 * bfloat16 on the wire, with clipping (one piece of work a step), with a
 * bound on the updates at once; a gradient received twice fails the job. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "mxfix.h"
#include "optim_plan.h"
#include "update.h"

#define CHUNK 1000

/* A big tensor of several parts (UPDATE_PART_MIN rounded up to whole
 * chunks: 66 chunks), a small one, and a buffer. */
static const fix_tensor tensors[] = {
    {"fc1.weight", 400, 500, 0, "he_normal", true},
    {"fc1.bias", 300, 0, 0, "zeros", true},
    {"bn.running_mean", 500, 0, 0, "zeros", false},
};

static fix_spec spec(const char *optimizer, double max_norm, bool bf16)
{
    return (fix_spec){tensors, 3, 1, optimizer, 0.9, max_norm, CHUNK, 1, 10, bf16, NULL};
}

/* What a tensor of the reference holds. */
typedef struct ref {
    float *w, *g;
    uint16_t *w16, *g16;
    optim_state st;
    size_t n;
    bool trainable;
} ref;

static ref refs[3];

/* The reference: copies of the job's tensors, to be stepped whole. */
static void ref_take(const mx_job *j)
{
    for (size_t i = 0; i < j->nt; i++) {
        const mx_tensor *t = &j->t[i];
        ref *r = &refs[i];
        r->n = t->n;
        r->trainable = t->trainable;
        r->w = malloc(t->n * sizeof(float));
        r->g = calloc(t->n, sizeof(float));
        memcpy(r->w, t->w, t->n * sizeof(float));
        r->w16 = t->w16 ? malloc(t->n * sizeof(uint16_t)) : NULL;
        if (r->w16)
            memcpy(r->w16, t->w16, t->n * sizeof(uint16_t));
        r->g16 = t->g16 ? calloc(t->n, sizeof(uint16_t)) : NULL;
        memset(&r->st, 0, sizeof(r->st));
        if (t->trainable) {
            ck_assert_int_eq(optim_state_init(&r->st, &j->cfg, t->n), 0);
            for (size_t s = 0; s < optim_state_count(&t->st); s++)
                memcpy(r->st.tensor[s], t->st.tensor[s], t->n * sizeof(float));
            optim_state_set_step(&r->st, optim_state_step(&t->st));
        }
    }
}

static void ref_free(size_t nt)
{
    for (size_t i = 0; i < nt; i++) {
        free(refs[i].w);
        free(refs[i].g);
        free(refs[i].w16);
        free(refs[i].g16);
        optim_state_deinit(&refs[i].st);
    }
}

static void ref_param(void *ctx, size_t i, optim_param *out)
{
    ref *r = &refs[i];
    *out = (optim_param){r->w, r->g, r->n, r->trainable, &r->st, r->w16, r->g16};
}

/* The gradient of step `step`, element e of tensor i, as the wire brings it
 * (a buffer's "gradient" is its replicas' average, assigned). */
static float grad_value(size_t i, uint64_t step, uint64_t e)
{
    return fix_value(100 + 10 * step + i, e);
}

/* Sends every gradient chunk of the step into the job, last chunk of each
 * tensor first, chunks in reverse (the order a backward pass has), landing
 * as the wire carries them: float32, or bfloat16 in a reader's buffer or
 * in place. Also sets the reference's gradients (rounded as the wire
 * rounds them). Returns how many tensors update_grad_in said were complete. */
static int send_grads(mx_job *j, bool in_place)
{
    int complete = 0;
    bool bf16 = j->plan->wire_bf16;
    for (size_t i = j->nt; i-- > 0;) {
        mx_tensor *t = &j->t[i];
        uint64_t nchunks = (t->n + CHUNK - 1) / CHUNK;
        for (uint64_t c = nchunks; c-- > 0;) {
            uint64_t off = c * CHUNK, count = t->n - off < CHUNK ? t->n - off : CHUNK;
            float f[CHUNK];
            uint16_t h[CHUNK];
            for (uint64_t e = 0; e < count; e++)
                f[e] = grad_value(i, j->step, off + e);
            if (bf16) {
                bf16_pack(h, f, count);
                bf16_unpack(refs[i].g + off, h, count);
                if (refs[i].g16)
                    memcpy(refs[i].g16 + off, h, count * sizeof(uint16_t));
            } else {
                memcpy(refs[i].g + off, f, count * sizeof(float));
            }
            const void *payload = bf16 ? (const void *)h : (const void *)f;
            if (in_place) { /* the reader put the payload where update_grad_dest said */
                void *dest = update_grad_dest(j, t, off, count);
                memcpy(dest, payload, count * (bf16 ? 2 : 4));
                payload = dest;
            }
            ck_assert_int_eq(update_grad_land(j, t, off, count, payload, 0, 0, NULL, 0), 0);
            bool done = update_grad_in(j, t, off, count);
            ck_assert_int_eq(done, c == 0 && j->cfg.max_gradient_norm == 0);
            complete += done;
        }
    }
    return complete;
}

/* The job's tensors have the reference's bits. */
static void check_same(const mx_job *j)
{
    for (size_t i = 0; i < j->nt; i++) {
        const mx_tensor *t = &j->t[i];
        ck_assert_msg(fix_same(t->w, refs[i].w, t->n), "%s: weights differ", t->name);
        if (t->w16)
            ck_assert_msg(memcmp(t->w16, refs[i].w16, t->n * 2) == 0, "%s: bfloat16 twin differs",
                          t->name);
        for (size_t s = 0; t->trainable && s < optim_state_count(&t->st); s++)
            ck_assert_msg(fix_same(t->st.tensor[s], refs[i].st.tensor[s], t->n),
                          "%s: state %zu differs", t->name, s);
        if (t->trainable)
            ck_assert_int_eq(optim_state_step(&t->st), optim_state_step(&refs[i].st));
        for (uint32_t k = 0; k < t->nparts; k++)
            ck_assert(!t->parts[k].busy);
    }
}

/* Two steps of job j against the reference. */
static void run_steps(mx_job *j, bool in_place)
{
    for (int s = 0; s < 2; s++) {
        update_start(j);
        fix_reset_news();
        ref_take(j);
        int complete = send_grads(j, in_place);
        ck_assert_int_eq(complete, j->cfg.max_gradient_norm > 0 ? 0 : (int)j->nt);
        fix_run();
        ck_assert_int_eq(j->updated, j->nt);
        ck_assert_int_eq(j->grads_in, j->nt);
        ck_assert_int_eq(j->pool_work, 0);
        ck_assert_int_gt(fix_update_backs, 0);
        optim_apply_step(&j->cfg, j->nt, ref_param, NULL, (int64_t)j->step);
        check_same(j);
        ck_assert_int_eq(optim_state_step(&j->t[0].st), s + 1);
        ref_free(j->nt);
        j->step++;
    }
}

START_TEST(parts_match_the_whole_step)
{
    fix_init(2, true);
    fix_spec s = spec(_i == 0 ? "adam" : "sgd", 0, false);
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    ck_assert_uint_eq(j->t[0].nparts, 4); /* 200000 elements in parts of 66000 */
    ck_assert_uint_eq(j->t[0].part_elems, 66 * CHUNK);
    ck_assert_uint_eq(j->t[1].nparts, 1);
    run_steps(j, false);
    fix_end();
    ck_assert_int_eq(fix_releases, 1);
}
END_TEST

START_TEST(bf16_gradients_match)
{
    /* 0: a float32 gradient widened from the reader's buffer; 1: in place
     * (from its upper half); 2: kept in bfloat16 (g16), with the weights'
     * twin rounded as they are updated */
    fix_init(2, true);
    fix_spec s = spec("adamw", 0, true);
    mx_job *j = fix_job(fix_plan(&s), 0, _i == 2 ? FIX_G16 | FIX_TWINS : 0, NULL, 0);
    ck_assert(_i == 2 ? j->t[0].g16 && !j->t[0].g : !j->t[0].g16 && j->t[0].g);
    run_steps(j, _i == 1);
    fix_end();
}
END_TEST

START_TEST(clipping_is_one_piece)
{
    fix_init(2, true);
    fix_spec s = spec("adam", 0.5, false); /* the gradients' norm is ~260 */
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    for (size_t i = 0; i < j->nt; i++)
        ck_assert_uint_eq(j->t[i].nparts, 1);
    run_steps(j, false);
    fix_end();
}
END_TEST

START_TEST(updates_at_most_threads)
{
    fix_init(1, true);
    fix_spec s = spec("adam", 0, false);
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    update_start(j);
    mx_tensor *t = &j->t[0];
    /* the whole of the big tensor's gradient, the first part last */
    float f[CHUNK];
    for (uint64_t c = t->n / CHUNK; c-- > 0;) {
        for (int e = 0; e < CHUNK; e++)
            f[e] = grad_value(0, 0, c * CHUNK + e);
        ck_assert_int_eq(update_grad_land(j, t, c * CHUNK, CHUNK, f, 0, 0, NULL, 0), 0);
        bool done = update_grad_in(j, t, c * CHUNK, CHUNK);
        ck_assert_int_eq(done, c == 0);
    }
    /* every part is due and its weights must not be read; one updates */
    ck_assert_uint_eq(j->updating, 1);
    ck_assert_uint_eq(j->ready_len - j->ready_head, t->nparts - 1);
    ck_assert(update_busy(t, 0, 1));
    ck_assert(update_busy(t, t->n - 1, 1));
    ck_assert(!update_busy(&j->t[1], 0, j->t[1].n));
    fix_run();
    ck_assert_uint_eq(j->updating, 0);
    ck_assert(!update_busy(t, 0, t->n));
    ck_assert_int_eq(j->updated, 1);
    ck_assert_int_eq(fix_update_backs, (int)t->nparts);
    fix_end();
}
END_TEST

START_TEST(part_becomes_due_when_complete)
{
    fix_init(1, true);
    fix_spec s = spec("adam", 0, false);
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    update_start(j);
    mx_tensor *t = &j->t[0];
    float f[CHUNK] = {0};
    /* the second part but one chunk: nothing is due */
    uint64_t lo = t->part_elems, hi = 2 * t->part_elems;
    for (uint64_t at = lo + CHUNK; at < hi; at += CHUNK) {
        ck_assert_int_eq(update_grad_land(j, t, at, CHUNK, f, 0, 0, NULL, 0), 0);
        ck_assert(!update_grad_in(j, t, at, CHUNK));
    }
    ck_assert(!update_busy(t, lo, hi - lo));
    ck_assert_uint_eq(j->ready_len, 0);
    ck_assert_int_eq(update_grad_land(j, t, lo, CHUNK, f, 0, 0, NULL, 0), 0);
    ck_assert(!update_grad_in(j, t, lo, CHUNK));
    ck_assert(update_busy(t, lo, 1));
    ck_assert(!update_busy(t, 0, lo));
    ck_assert(!update_busy(t, hi, t->n - hi));
    fix_run();
    ck_assert(!update_busy(t, lo, 1));
    ck_assert_int_eq(j->updated, 0); /* the tensor is not: its other parts are not in */
    fix_end();
}
END_TEST

START_TEST(turned_step_commits_with_its_last_update)
{
    fix_init(2, true);
    fix_spec s = spec("adam", 0, false);
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    update_start(j);
    ref_take(j);
    send_grads(j, false);
    /* the next step's stream started before these updates came back */
    j->turned = true;
    j->turn_step = j->step;
    j->turn_left = j->nt;
    j->step++;
    fix_run();
    ck_assert(!j->turned);
    ck_assert_uint_eq(j->turn_left, 0);
    ck_assert_uint_eq(fix_mx.steps, 1); /* committed */
    ck_assert_int_eq(j->updated, 0);    /* the new step's count */
    optim_apply_step(&j->cfg, j->nt, ref_param, NULL, (int64_t)j->turn_step);
    check_same(j);
    ref_free(j->nt);
    fix_end();
}
END_TEST

/* A ring send copies its payload at once and writes its header later; a
 * gradient of those weights can be read first. Its update waits for the
 * write (with clipping, the step's), then runs as it would have. */
START_TEST(update_waits_for_weights_being_written)
{
    fix_init(2, true);
    fix_spec s = spec("adam", _i ? 0.5 : 0, false);
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    update_start(j);
    ref_take(j);
    j->t[1].writes = 1;
    send_grads(j, false);
    fix_run();
    /* fc1.bias waits, and fc1.weight behind it in the queue (the write is
     * done within a turn of the loop); the buffer came first */
    ck_assert_int_eq(j->updated, _i ? 0 : 1);
    ck_assert(update_busy(&j->t[1], 0, 1));
    j->t[1].writes = 0;
    update_writes_done(j);
    fix_run();
    ck_assert_int_eq(j->updated, j->nt);
    optim_apply_step(&j->cfg, j->nt, ref_param, NULL, (int64_t)j->step);
    check_same(j);
    ref_free(j->nt);
    fix_end();
}
END_TEST

START_TEST(gradient_twice_fails)
{
    fix_init(1, true);
    fix_spec s = spec("adam", 0, false);
    mx_job *j = fix_job(fix_plan(&s), 0, 0, NULL, 0);
    update_start(j);
    mx_tensor *t = &j->t[1];
    float f[CHUNK] = {0};
    ck_assert_int_eq(update_grad_land(j, t, 0, 200, f, 0, 0, NULL, 0), 0);
    ck_assert(!update_grad_in(j, t, 0, 200));
    ck_assert(!update_grad_in(j, t, 0, 200));
    ck_assert_int_eq(fix_releases, 1);
    ck_assert_msg(strstr(fix_why, "fc1.bias: gradient received twice in step 0"), "%s", fix_why);
    ck_assert_ptr_null(fix_mx.job);
    fix_run(); /* the job is freed */
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memoryx-update");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_loop_test(tc, parts_match_the_whole_step, 0, 2);
    tcase_add_loop_test(tc, bf16_gradients_match, 0, 3);
    tcase_add_test(tc, clipping_is_one_piece);
    tcase_add_test(tc, updates_at_most_threads);
    tcase_add_test(tc, part_becomes_due_when_complete);
    tcase_add_test(tc, turned_step_commits_with_its_last_update);
    tcase_add_loop_test(tc, update_waits_for_weights_being_written, 0, 2);
    tcase_add_test(tc, gradient_twice_fails);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
