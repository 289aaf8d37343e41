/* A recovering job's next attempt decided without a daemon
 * (recovery_decide, coordinator/recovery.c): it waits for its full
 * complement until that wait is over, then goes on with the replicas left
 * (whole groups of stripes, down to runconfig.min_num_csx; a lone replica
 * straight from its shard when no swarmx is left) and a SwarmX tree the
 * swarmx nodes left can hold; short of that it waits, and fails once the
 * time to give up has come. */
#include <check.h>
#include <stdio.h>
#include <string.h>

#include "job.h"
#include "planner.h"

/* A job of num_csx replicas in stripes of `parts`, min_num_csx of them at
 * least, over `shards` memoryx shards. */
static jobspec *spec_of(int num_csx, int min, int parts, int shards)
{
    char text[1024], err[512];
    snprintf(text, sizeof(text),
             "[runconfig]\nmax_steps = 3\nnum_csx = %d\nmin_num_csx = %d\n"
             "spatial_partitions = %d\nnum_wgt_servers = %d\n"
             "[train_input]\ndata_processor = \"synthetic_segmentation\"\nbatch_size = 32\n"
             "num_classes = 2\nnum_samples = 8\n"
             "[model]\ninput_shape = [1, 32, 32]\nloss = \"bce_dice\"\n"
             "[[model.layers]]\nname = \"c\"\ntype = \"conv2d\"\nfilters = 1\nkernel_size = 3\n"
             "padding = 1\n[optimizer]\nlearning_rate = 0.1\n",
             num_csx, min, parts, shards);
    jobspec *s = jobspec_parse(text, strlen(text), "job.toml", NULL, err, sizeof(err));
    ck_assert_msg(s != NULL, "%s", err);
    return s;
}

START_TEST(waits_then_goes_on_with_what_is_left)
{
    jobspec *s = spec_of(4, 2, 1, 1);
    jobspec a = *s;
    recovery_idle idle = {.wse_nodes = 3, .memoryx = 1, .swarmx = 1, .workers = 1};
    /* while the full complement may still come back: wait */
    ck_assert_int_eq(recovery_decide(&a, &idle, false, false), RECOVERY_WAIT);
    ck_assert_int_eq(a.num_csx, 4);
    /* then: the three left, under one swarmx node */
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_GO);
    ck_assert_int_eq(a.num_csx, 3);
    ck_assert_uint_le(planner_tree_nodes(&a), 1);
    /* fewer than min_num_csx: wait, and fail once it is time to give up */
    a = *s;
    idle.wse_nodes = 1;
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_WAIT);
    ck_assert_int_eq(recovery_decide(&a, &idle, true, true), RECOVERY_GIVE_UP);
    ck_assert_int_eq(a.num_csx, 4);
    /* every replica, but no memoryx shard or no worker: wait */
    idle = (recovery_idle){.wse_nodes = 4, .memoryx = 0, .swarmx = 1, .workers = 1};
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_WAIT);
    idle = (recovery_idle){.wse_nodes = 4, .memoryx = 1, .swarmx = 1, .workers = 0};
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_WAIT);
    jobspec_free(s);
}
END_TEST

START_TEST(a_tree_the_swarmx_left_hold)
{
    jobspec *s = spec_of(16, 1, 1, 1);
    jobspec a = *s;
    ck_assert_uint_gt(planner_tree_nodes(&a), 2); /* four leaves and a root at fan-out 4 */
    recovery_idle idle = {.wse_nodes = 16, .memoryx = 1, .swarmx = 2, .workers = 1};
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_GO);
    ck_assert_int_eq(a.num_csx, 16);
    ck_assert_uint_le(planner_tree_nodes(&a), 2);
    ck_assert_int_gt(a.swarmx_fanout, s->swarmx_fanout);
    jobspec_free(s);
}
END_TEST

START_TEST(stripes_go_in_whole_groups)
{
    jobspec *s = spec_of(4, 1, 2, 1); /* two replicas of two stripes */
    jobspec a = *s;
    recovery_idle idle = {.wse_nodes = 3, .memoryx = 1, .swarmx = 1, .workers = 1};
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_GO);
    ck_assert_int_eq(a.num_csx, 2); /* one whole group; the third wse-node stays idle */
    a = *s;
    idle.wse_nodes = 1; /* not even one group */
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_WAIT);
    jobspec_free(s);
}
END_TEST

START_TEST(a_lone_replica_without_swarmx)
{
    jobspec *s = spec_of(2, 1, 1, 1);
    jobspec a = *s;
    recovery_idle idle = {.wse_nodes = 2, .memoryx = 1, .swarmx = 0, .workers = 1};
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_GO);
    ck_assert_int_eq(a.num_csx, 1); /* straight from its one shard */
    ck_assert_uint_eq(planner_tree_nodes(&a), 0);
    jobspec_free(s);
    /* over two shards it needs a swarmx: it waits */
    s = spec_of(2, 1, 1, 2);
    a = *s;
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_WAIT);
    jobspec_free(s);
    /* min_num_csx 2 cannot go on alone */
    s = spec_of(2, 2, 1, 1);
    a = *s;
    ck_assert_int_eq(recovery_decide(&a, &idle, true, false), RECOVERY_WAIT);
    jobspec_free(s);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("recovery");
    TCase *t = tcase_create("decide");
    tcase_add_test(t, waits_then_goes_on_with_what_is_left);
    tcase_add_test(t, a_tree_the_swarmx_left_hold);
    tcase_add_test(t, stripes_go_in_whole_groups);
    tcase_add_test(t, a_lone_replica_without_swarmx);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
