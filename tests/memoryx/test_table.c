/* memoryx's table of its shard (memoryx/mx.c's job start and load, driven
 * through its jobhost, no daemon): a shard holds the plan's tensors it
 * owns; their initial weights are a function of the seed, the tensor and
 * the element only, so any sharding makes the same; a shard larger than
 * memoryx's memory goes to the disk tier (or is refused without one) with
 * the same weights; bfloat16 on the wire keeps the weights' twin and the
 * gradients in bfloat16 where memory has room; a resumed job loads the
 * checkpoint whatever shard count wrote it. */
#include <check.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "bf16.h"
#include "checkpoint.h"
#include "footprint.h"
#include "init.h"
#include "mxfix.h"
#include "tier.h"

#define GIB (1ull << 30)

static const fix_tensor one_shard[] = {
    {"conv.weight", 64, 300, 0, "he_normal", true},
    {"conv.bias", 64, 0, 0, "zeros", true},
    {"fc.weight", 10, 640, 0, "xavier_uniform", true},
    {"bn.running_var", 64, 0, 0, "ones", false},
};
static const fix_tensor two_shards[] = {
    {"conv.weight", 64, 300, 0, "he_normal", true},
    {"conv.bias", 64, 0, 1, "zeros", true},
    {"fc.weight", 10, 640, 1, "xavier_uniform", true},
    {"bn.running_var", 64, 0, 0, "ones", false},
};

static char dir[256];

static fix_spec spec(const fix_tensor *ts, uint32_t shards, uint64_t seed, bool bf16)
{
    return (fix_spec){ts, 4, shards, "adam", 0, 0, 1000, seed, 10, bf16, dir};
}

/* Starts plan p on member `member` as a JobStart would, and runs its load.
 * Returns the job, or NULL with why. */
static mx_job *start(Appliance__Plan *p, uint32_t member, char *why, size_t whylen)
{
    jobhost *h = &fix_mx.jobs;
    fix_node.member_id = member;
    snprintf(h->id, sizeof(h->id), "%s", p->job_id);
    h->plan = p;
    why[0] = '\0';
    mx_job *j = h->ops->start(h, p, why, whylen);
    if (!j) {
        appliance__plan__free_unpacked(p, NULL);
        h->plan = NULL;
        h->id[0] = '\0';
        return NULL;
    }
    h->job = j;
    ck_assert_ptr_eq(fix_mx.job, j);
    ck_assert_int_eq(j->state, MX_LOADING);
    fix_run();
    ck_assert_ptr_eq(fix_mx.job, j); /* not failed */
    ck_assert_int_eq(j->state, MX_STARTED);
    return j;
}

static mx_job *start_ok(const fix_spec *s, uint32_t member)
{
    char why[512];
    mx_job *j = start(fix_plan(s), member, why, sizeof(why));
    ck_assert_msg(j != NULL, "%s", why);
    return j;
}

/* The weights of plan tensor id in j. */
static const float *weights(const mx_job *j, uint32_t id)
{
    ck_assert_uint_lt(id, j->nids);
    ck_assert_ptr_nonnull(j->by_id[id]);
    return j->by_id[id]->w;
}

static float *saved[4];
static uint64_t sizes[4];

/* Keeps the weights of every tensor of a one-shard job. */
static void save_all(const mx_job *j)
{
    for (uint32_t id = 0; id < 4; id++) {
        sizes[id] = j->by_id[id]->n;
        saved[id] = malloc(sizes[id] * sizeof(float));
        memcpy(saved[id], weights(j, id), sizes[id] * sizeof(float));
    }
}

static void setup(void)
{
    fix_init(2, false); /* mx.c's own start and release */
    fix_mx.opt.memory = GIB;
    fix_tmpdir(dir, sizeof(dir));
}

static void teardown(void)
{
    for (int i = 0; i < 4; i++) {
        free(saved[i]);
        saved[i] = NULL;
    }
    fix_rmdir(dir);
}

START_TEST(shard_holds_its_tensors)
{
    fix_spec s = spec(two_shards, 2, 1, false);
    mx_job *j = start_ok(&s, 2); /* member 2: shard 1 */
    ck_assert_uint_eq(j->shard, 1);
    ck_assert_uint_eq(j->nt, 2);
    ck_assert_ptr_null(j->by_id[0]);
    ck_assert_ptr_null(j->by_id[3]);
    ck_assert_ptr_eq(j->by_id[1], &j->t[0]);
    ck_assert_ptr_eq(j->by_id[2], &j->t[1]);
    ck_assert_str_eq(j->t[1].name, "fc.weight");
    ck_assert_uint_eq(j->t[0].n, 64);
    ck_assert_uint_eq(j->t[1].n, 6400);
    ck_assert_uint_eq(j->states, 2);
    uint64_t bytes = 0;
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        ck_assert(t->trainable);
        ck_assert(t->w && t->g && !t->g16 && !t->w16);
        ck_assert_uint_eq(optim_state_count(&t->st), 2);
        ck_assert_uint_eq(t->nparts, 1);
        bytes += footprint_shard_tensor_bytes(t->n, t->trainable, 2, true);
    }
    ck_assert_uint_eq(j->load_bytes, bytes);
    ck_assert_ptr_null(j->tier);
    fix_end();
    ck_assert_ptr_null(fix_mx.job);
}
END_TEST

START_TEST(weights_do_not_depend_on_sharding)
{
    fix_spec s = spec(one_shard, 1, 1, false);
    mx_job *j = start_ok(&s, 1);
    save_all(j);
    fix_end();
    for (uint64_t e = 0; e < sizes[1]; e++)
        ck_assert(saved[1][e] == 0.0f); /* zeros */
    for (uint64_t e = 0; e < sizes[3]; e++)
        ck_assert(saved[3][e] == 1.0f); /* ones */
    double sq = 0; /* he_normal: variance 2 / fan_in */
    for (uint64_t e = 0; e < sizes[0]; e++)
        sq += (double)saved[0][e] * saved[0][e];
    ck_assert_double_eq_tol(sq / (double)sizes[0], 2.0 / 300, 2.0 / 300 * 0.1);
    for (uint64_t e = 0; e < sizes[2]; e++) /* xavier_uniform: within sqrt(6 / 650) */
        ck_assert(saved[2][e] > -0.0961f && saved[2][e] < 0.0961f);
    for (uint32_t member = 1; member <= 2; member++) {
        s = spec(two_shards, 2, 1, false);
        j = start_ok(&s, member);
        for (uint32_t id = 0; id < 4; id++)
            if (two_shards[id].shard == member - 1)
                ck_assert_msg(fix_same(weights(j, id), saved[id], sizes[id]), "%s differs",
                              two_shards[id].name);
        fix_end();
    }
    s = spec(one_shard, 1, 2, false); /* another seed, other weights */
    j = start_ok(&s, 1);
    ck_assert(!fix_same(weights(j, 0), saved[0], sizes[0]));
    ck_assert(fix_same(weights(j, 3), saved[3], sizes[3]));
    fix_end();
}
END_TEST

/* A tensor whose plan names an initializer starts as it says (the same
 * values init.c gives for the seed and the tensor's stream); a name the
 * planner never writes is refused at the start. */
START_TEST(initializers_named_by_the_job)
{
    fix_spec s = spec(one_shard, 1, 1, false);
    Appliance__Plan *p = fix_plan(&s);
    Appliance__PlanInit *pi = malloc(sizeof(*pi));
    appliance__plan_init__init(pi);
    pi->name = strdup("truncated_normal");
    pi->std = 0.05;
    pi->a = -0.02;
    pi->b = 0.1;
    p->tensors[2]->initializer = pi; /* fc.weight */
    model_init in;
    ck_assert_int_eq(model_init_from_plan(p->tensors[2], &in), 0);
    char why[512];
    mx_job *j = start(p, 1, why, sizeof(why));
    ck_assert_msg(j != NULL, "%s", why);
    uint64_t n = j->by_id[2]->n;
    float *want = malloc(n * sizeof(float));
    model_init_fill(&in, 640, 10, 1, 0x1000 + 2, 0, n, want);
    ck_assert(fix_same(weights(j, 2), want, n));
    for (uint64_t e = 0; e < n; e++)
        ck_assert(want[e] >= -0.02f && want[e] <= 0.1f);
    free(want);
    fix_end();

    p = fix_plan(&s);
    pi = malloc(sizeof(*pi));
    appliance__plan_init__init(pi);
    pi->name = strdup("glorot_uniform"); /* the job's spelling: the plan has xavier_uniform */
    p->tensors[2]->initializer = pi;
    ck_assert_ptr_null(start(p, 1, why, sizeof(why)));
    ck_assert_msg(strstr(why, "plan tensor fc.weight: unknown initializer \"glorot_uniform\""),
                  "%s", why);
}
END_TEST

START_TEST(larger_than_memory_goes_to_the_disk_tier)
{
    fix_spec s = spec(one_shard, 1, 1, false);
    mx_job *j = start_ok(&s, 1);
    save_all(j);
    fix_end();
    /* 83 KB of weights, 4 times that with gradients and state */
    fix_mx.opt.memory = 64 << 10;
    snprintf(fix_mx.opt.state_dir, sizeof(fix_mx.opt.state_dir), "%s", dir);
    s = spec(one_shard, 1, 1, false);
    j = start_ok(&s, 1);
    ck_assert_uint_eq(j->tier_window, 64 << 10);
    ck_assert(tier_files(j));
    ck_assert_uint_eq(j->tier->piece, 1024); /* made a piece at a time */
    for (uint32_t id = 0; id < 4; id++)
        ck_assert_msg(fix_same(weights(j, id), saved[id], sizes[id]), "%s differs",
                      one_shard[id].name);
    fix_end();
    /* without a disk tier: refused with the numbers */
    char why[512];
    fix_mx.opt.no_disk_tier = true;
    s = spec(one_shard, 1, 1, false);
    ck_assert_ptr_null(start(fix_plan(&s), 1, why, sizeof(why)));
    ck_assert_msg(strstr(why, "shard 0 needs") && strstr(why, "no disk tier"), "%s", why);
    ck_assert_ptr_null(fix_mx.job);
}
END_TEST

START_TEST(bf16_wire_twins_where_memory_has_room)
{
    fix_spec s = spec(one_shard, 1, 1, true);
    mx_job *j = start_ok(&s, 1);
    ck_assert(j->twins && j->grad16);
    for (size_t i = 0; i < j->nt; i++) {
        mx_tensor *t = &j->t[i];
        ck_assert_ptr_nonnull(t->w16);
        uint16_t *h = malloc(t->n * sizeof(uint16_t));
        bf16_pack(h, t->w, t->n);
        ck_assert(memcmp(h, t->w16, t->n * sizeof(uint16_t)) == 0);
        free(h);
        ck_assert(t->trainable ? t->g16 && !t->g : t->g && !t->g16);
    }
    ck_assert_ptr_null(j->tier);
    uint64_t with_twins = j->load_bytes;
    fix_end();
    /* room for the shard but not for the twins: the stream is rounded
     * through the read-ahead instead */
    fix_mx.opt.memory = with_twins - 1;
    s = spec(one_shard, 1, 1, true);
    j = start_ok(&s, 1);
    ck_assert(!j->twins && j->grad16);
    ck_assert_ptr_null(j->t[0].w16);
    ck_assert(j->tier && !tier_files(j));
    fix_end();
}
END_TEST

START_TEST(resumed_from_another_shard_count)
{
    fix_spec s = spec(one_shard, 1, 1, false);
    mx_job *j = start_ok(&s, 1);
    save_all(j);
    for (size_t i = 0; i < j->nt; i++) /* an optimizer state to come back */
        if (j->t[i].trainable) {
            j->t[i].st.tensor[1][3] = 0.25f;
            optim_state_set_step(&j->t[i].st, 3);
        }
    char wpath[PATH_MAX], err[512];
    ck_assert_int_eq(ckpt_write(j, 3, wpath, sizeof(wpath), err, sizeof(err)), 0);
    fix_end();
    char opath[PATH_MAX];
    snprintf(opath, sizeof(opath), "%s/optimizer_3-shard1-of-1.safetensors", dir);
    for (uint32_t member = 1; member <= 2; member++) {
        s = spec(two_shards, 2, 99, false); /* (a seed the load overrides) */
        Appliance__Plan *p = fix_plan(&s);
        p->first_step = 3;
        p->n_resume_weights = p->n_resume_optimizer = 1;
        p->resume_weights = malloc(sizeof(char *));
        p->resume_optimizer = malloc(sizeof(char *));
        p->resume_weights[0] = strdup(wpath);
        p->resume_optimizer[0] = strdup(opath);
        char why[512];
        j = start(p, member, why, sizeof(why));
        ck_assert_msg(j != NULL, "%s", why);
        ck_assert_uint_eq(j->step, 3);
        for (size_t i = 0; i < j->nt; i++) {
            mx_tensor *t = &j->t[i];
            ck_assert_msg(fix_same(t->w, saved[t->id], t->n), "%s differs", t->name);
            if (t->trainable) {
                ck_assert(t->st.tensor[1][3] == 0.25f);
                ck_assert_int_eq(optim_state_step(&t->st), 3);
            }
        }
        fix_end();
    }
}
END_TEST

int main(void)
{
    Suite *s = suite_create("memoryx-table");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, shard_holds_its_tensors);
    tcase_add_test(tc, weights_do_not_depend_on_sharding);
    tcase_add_test(tc, initializers_named_by_the_job);
    tcase_add_test(tc, larger_than_memory_goes_to_the_disk_tier);
    tcase_add_test(tc, bf16_wire_twins_where_memory_has_room);
    tcase_add_test(tc, resumed_from_another_shard_count);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
