/* The order of a job's weight stream (common/wire/plan_stream.c): what each
 * memoryx shard sends, merged by seq, is exactly what a cursor over every
 * shard expects (what swarmx checks); evaluation passes come first, steps
 * continue the numbering, Pipelined streams once with the optimizer state
 * of a resumed job, and a final evaluation has no training passes. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "optim.h"
#include "optim_plan.h"
#include "plan.h"
#include "plan_stream.h"

#define NT 3
#define MAXC 4096

/* Tensors of 5, 3 and 8 elements on shards 0, 1, 0; chunks of 2; forward
 * list 0 1 2, backward list 2 1 (tensor 0's layer needs no weights
 * backward). Tensor 1 is a buffer (not trainable). */
typedef struct fixture {
    Appliance__Plan p;
    Appliance__PlanTensor t[NT], *tp[NT];
    uint64_t dims[NT];
    Appliance__PlanShard sh[2], *shp[2];
    Appliance__PlanOptimizer opt;
    uint32_t fwd[3], bwd[2];
} fixture;

static fixture fx;

static void setup(void)
{
    memset(&fx, 0, sizeof(fx));
    Appliance__Plan *p = &fx.p;
    appliance__plan__init(p);
    p->chunk_elems = 2;
    p->max_steps = 10;
    static const uint64_t elems[NT] = {5, 3, 8};
    static const uint32_t shard[NT] = {0, 1, 0};
    for (int i = 0; i < NT; i++) {
        appliance__plan_tensor__init(&fx.t[i]);
        fx.t[i].id = (uint32_t)i;
        fx.dims[i] = elems[i];
        fx.t[i].dims = &fx.dims[i];
        fx.t[i].n_dims = 1;
        fx.t[i].shard = shard[i];
        fx.t[i].trainable = i != 1;
        fx.tp[i] = &fx.t[i];
    }
    p->tensors = fx.tp;
    p->n_tensors = NT;
    for (int i = 0; i < 2; i++) {
        appliance__plan_shard__init(&fx.sh[i]);
        fx.sh[i].index = (uint32_t)i;
        fx.shp[i] = &fx.sh[i];
    }
    p->shards = fx.shp;
    p->n_shards = 2;
    fx.fwd[0] = 0, fx.fwd[1] = 1, fx.fwd[2] = 2;
    fx.bwd[0] = 2, fx.bwd[1] = 1;
    p->fwd_stream = fx.fwd;
    p->n_fwd_stream = 3;
    p->bwd_stream = fx.bwd;
    p->n_bwd_stream = 2;
    appliance__plan_optimizer__init(&fx.opt);
    fx.opt.type = "adam";
    p->optimizer = &fx.opt;
    p->mode = APPLIANCE__EXEC_MODE__MODE_WEIGHT_STREAMING;
}

/* Every chunk of a step's stream through a cursor. Returns the count. */
static size_t drain(plan_stream *s, plan_chunk *out)
{
    size_t n = 0;
    plan_chunk c;
    while (plan_stream_next(s, &c)) {
        plan_chunk again;
        ck_assert(plan_stream_next(s, &again)); /* next without take: the same chunk */
        ck_assert_uint_eq(again.seq, c.seq);
        ck_assert_uint_lt(n, MAXC);
        out[n++] = c;
        plan_stream_take(s);
    }
    ck_assert(s->done);
    return n;
}

static int by_seq(const void *a, const void *b)
{
    const plan_chunk *x = a, *y = b;
    return x->seq < y->seq ? -1 : x->seq > y->seq;
}

/* The shards' streams merged by seq are the all-shard stream, chunk for
 * chunk; returns its length and leaves the next step's seq in *seq. */
static size_t step_agrees(uint64_t step, uint64_t *seq, plan_chunk *all)
{
    static plan_chunk merged[MAXC];
    plan_stream s;
    size_t n = 0;
    uint64_t end[2];
    for (uint32_t k = 0; k < 2; k++) {
        plan_stream_start(&s, &fx.p, k, 2, step, *seq);
        n += drain(&s, merged + n);
        end[k] = s.seq;
        for (size_t i = 0; i < n; i++)
            ck_assert_uint_eq(fx.t[merged[i].tensor].shard, merged[i].tensor == 1 ? 1 : 0);
    }
    plan_stream_start(&s, &fx.p, PLAN_STREAM_ALL_SHARDS, 2, step, *seq);
    size_t na = drain(&s, all);
    ck_assert_uint_eq(na, n);
    qsort(merged, n, sizeof(*merged), by_seq);
    for (size_t i = 0; i < n; i++) {
        ck_assert_uint_eq(merged[i].seq, *seq + i);
        ck_assert_uint_eq(all[i].seq, *seq + i);
        ck_assert_uint_eq(merged[i].tensor, all[i].tensor);
        ck_assert_uint_eq(merged[i].offset, all[i].offset);
        ck_assert_uint_eq(merged[i].count, all[i].count);
        ck_assert_int_eq(merged[i].pass, all[i].pass);
        ck_assert_uint_eq(merged[i].eval_pass, all[i].eval_pass);
        ck_assert_uint_eq(merged[i].state, all[i].state);
    }
    /* every shard ends where the next step's stream starts */
    ck_assert_uint_eq(end[0], s.seq);
    ck_assert_uint_eq(end[1], s.seq);
    *seq = s.seq;
    return n;
}

/* Chunks of a tensor list: 5 -> 3, 3 -> 2, 8 -> 4. */
#define FWD_CHUNKS (3 + 2 + 4)
#define BWD_CHUNKS (4 + 2)

START_TEST(shards_merge_into_the_stream)
{
    static plan_chunk all[MAXC];
    uint64_t seq = 0;
    ck_assert_uint_eq(step_agrees(0, &seq, all), FWD_CHUNKS + BWD_CHUNKS);
    /* forward list first, chunks in order, then backward */
    ck_assert_uint_eq(all[0].tensor, 0);
    ck_assert_uint_eq(all[2].offset, 4);
    ck_assert_uint_eq(all[2].count, 1);
    ck_assert_uint_eq(all[2].total, 5);
    ck_assert_int_eq(all[0].pass, APPLIANCE__PASS__PASS_FORWARD);
    ck_assert_uint_eq(all[FWD_CHUNKS].tensor, 2);
    ck_assert_int_eq(all[FWD_CHUNKS].pass, APPLIANCE__PASS__PASS_BACKWARD);
    ck_assert_uint_eq(all[FWD_CHUNKS + BWD_CHUNKS - 1].tensor, 1);
    /* the next step continues the numbering */
    ck_assert_uint_eq(step_agrees(1, &seq, all), FWD_CHUNKS + BWD_CHUNKS);
    ck_assert_uint_eq(all[0].seq, FWD_CHUNKS + BWD_CHUNKS);
    ck_assert_uint_eq(all[0].step, 1);
}
END_TEST

START_TEST(evaluation_passes_first)
{
    static plan_chunk all[MAXC];
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    fx.p.eval_input = &in;
    fx.p.eval_frequency = 4;
    fx.p.eval_batches = 2;
    fx.p.eval_batch = 1;
    uint64_t seq = 7;
    /* step 4 evaluates: one forward pass per eval batch, then training */
    ck_assert_uint_eq(step_agrees(4, &seq, all), 2 * FWD_CHUNKS + FWD_CHUNKS + BWD_CHUNKS);
    ck_assert_uint_eq(all[0].seq, 7);
    ck_assert_uint_eq(all[0].eval_pass, 1);
    ck_assert_uint_eq(all[FWD_CHUNKS].eval_pass, 2);
    ck_assert_int_eq(all[FWD_CHUNKS].pass, APPLIANCE__PASS__PASS_FORWARD);
    ck_assert_uint_eq(all[2 * FWD_CHUNKS].eval_pass, 0);
    /* step 10 = max_steps: the final evaluation, no training */
    plan_stream s;
    plan_stream_start(&s, &fx.p, PLAN_STREAM_ALL_SHARDS, 2, 10, 0);
    ck_assert(!s.training);
    ck_assert_uint_eq(step_agrees(10, &seq, all), 2 * FWD_CHUNKS);
    /* a step past the end without an evaluation streams nothing */
    fx.p.eval_input = NULL;
    plan_stream_start(&s, &fx.p, PLAN_STREAM_ALL_SHARDS, 2, 10, 0);
    ck_assert(s.done);
}
END_TEST

START_TEST(pipelined_once_with_resumed_state)
{
    static plan_chunk all[MAXC];
    fx.p.mode = APPLIANCE__EXEC_MODE__MODE_PIPELINED;
    fx.p.first_step = 3;
    fx.p.n_bwd_stream = 0;
    uint64_t seq = 0;
    /* a fresh job: the weights once */
    ck_assert_uint_eq(step_agrees(3, &seq, all), FWD_CHUNKS);
    ck_assert_int_eq(all[0].pass, APPLIANCE__PASS__PASS_RESIDENT);
    plan_stream s;
    plan_stream_start(&s, &fx.p, PLAN_STREAM_ALL_SHARDS, 2, 4, seq);
    ck_assert(s.done); /* nothing after the first step */
    /* resumed: each trainable tensor's two Adam states follow its weights */
    char *resume[1] = {"checkpoint_3-shard1-of-1.safetensors"};
    fx.p.resume_weights = resume;
    fx.p.n_resume_weights = 1;
    seq = 0;
    ck_assert_uint_eq(step_agrees(3, &seq, all), 3 * 3 + 2 + 3 * 4);
    ck_assert_uint_eq(all[0].state, 0);
    ck_assert_uint_eq(all[3].state, 1);
    ck_assert_uint_eq(all[3].tensor, 0);
    ck_assert_uint_eq(all[6].state, 2);
    ck_assert_uint_eq(all[9].tensor, 1); /* the buffer: weights only */
    ck_assert_uint_eq(all[9].state, 0);
    ck_assert_uint_eq(all[11].tensor, 2);
    fx.p.resume_weights = NULL;
    fx.p.n_resume_weights = 0;
}
END_TEST

/* A receiver's check: the whole stream in order passes, step after step;
 * a chunk out of its place is refused with both named. */
START_TEST(receivers_expect_the_stream)
{
    static plan_chunk all[MAXC];
    plan_stream r;
    memset(&r, 0, sizeof(r));
    char why[512];
    uint64_t seq = 0;
    for (uint64_t step = 0; step < 3; step++) {
        size_t n = step_agrees(step, &seq, all);
        for (size_t i = 0; i < n; i++) {
            Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
            w.step = all[i].step, w.seq = all[i].seq, w.tensor_id = all[i].tensor;
            w.offset = all[i].offset, w.count = all[i].count, w.total = all[i].total;
            w.state = all[i].state, w.eval_pass = all[i].eval_pass, w.pass = all[i].pass;
            ck_assert_msg(plan_stream_expect(&r, &fx.p, &w, why, sizeof(why)) == 0, "%s", why);
        }
    }
    /* step 3's first chunk arrives as tensor 2 instead of tensor 0 */
    Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
    w.step = 3, w.seq = seq, w.tensor_id = 2, w.count = 2, w.total = 8;
    ck_assert_int_eq(plan_stream_expect(&r, &fx.p, &w, why, sizeof(why)), -EPROTO);
    ck_assert_msg(strstr(why, "is not the stream's next: chunk 45 of step 3, tensor 0 [0, +2)") != NULL,
                  "%s", why);
}
END_TEST

/* The state count the stream numbers by is the optimizer library's. */
START_TEST(states_match_the_optimizer)
{
    struct {
        const char *type;
        double momentum;
    } cases[] = {{"sgd", 0}, {"SGD", 0.9}, {"adam", 0}, {"adamw", 0}};
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        fx.opt.type = (char *)cases[i].type;
        fx.opt.momentum = cases[i].momentum;
        fx.opt.learning_rate = 0.1;
        fx.opt.beta1 = 0.9;
        fx.opt.beta2 = 0.999;
        fx.opt.eps = 1e-8;
        fx.opt.schedule = "constant";
        optim_config cfg;
        ck_assert_int_eq(optim_from_plan(&fx.opt, &cfg), 0);
        optim_state st;
        ck_assert_int_eq(optim_state_init(&st, &cfg, 1), 0);
        ck_assert_uint_eq(plan_stream_states(&fx.p), optim_state_count(&st));
        optim_state_deinit(&st);
    }
}
END_TEST

/* Which steps a checkpoint follows (memoryx writes one, a Pipelined job's
 * first replica uploads its weights for it): every checkpoint_steps steps
 * done, and after the last step; with checkpoint_steps 0 only the last. */
START_TEST(checkpoints_follow_their_steps)
{
    fx.p.max_steps = 25;
    fx.p.checkpoint_steps = 10;
    for (uint64_t s = 0; s < 25; s++)
        ck_assert_msg(plan_checkpoint_after(&fx.p, s) == (s == 9 || s == 19 || s == 24),
                      "step %llu", (unsigned long long)s);
    fx.p.checkpoint_steps = 0;
    for (uint64_t s = 0; s < 25; s++)
        ck_assert(plan_checkpoint_after(&fx.p, s) == (s == 24));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("plan_stream");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, shards_merge_into_the_stream);
    tcase_add_test(tc, evaluation_passes_first);
    tcase_add_test(tc, pipelined_once_with_resumed_state);
    tcase_add_test(tc, states_match_the_optimizer);
    tcase_add_test(tc, receivers_expect_the_stream);
    tcase_add_test(tc, checkpoints_follow_their_steps);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
