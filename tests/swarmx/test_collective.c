/* swarmx's collective sums (swarmx/collective.c): the children in scope of a
 * sample group found down the plan's tree, a key complete only when every
 * child in scope has contributed, the sum in child order bit for bit
 * whatever the arrival order, refusals with their messages, the limit on
 * pending keys, and groups that interleave. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "collective.h"

/* Two stripes a sample, six replicas: groups 0 (replicas 0, 1), 1 (2, 3)
 * and 2 (4, 5). The root has replicas 0 and 1 and tree nodes 1 (replicas
 * 2, 3, 4) and 2 (replica 5) as children 0..3: group 0 is beneath children
 * 0 and 1, group 1 beneath child 2, group 2 beneath children 2 and 3. */
#define PARTS 2
#define REPLICAS 6
#define ROOT_KIDS 4
#define COUNT 5

static uint32_t root_replicas[] = {0, 1}, root_swarmx[] = {1, 2};
static uint32_t node1_replicas[] = {2, 3, 4}, node2_replicas[] = {5};
static Appliance__PlanSwarmNode sw[3];
static Appliance__PlanSwarmNode *swp[3] = {&sw[0], &sw[1], &sw[2]};
static Appliance__Plan plan;

static void make_plan(void)
{
    appliance__plan__init(&plan);
    for (int i = 0; i < 3; i++) {
        appliance__plan_swarm_node__init(&sw[i]);
        sw[i].index = (uint32_t)i;
        sw[i].parent = i == 0 ? -1 : 0;
    }
    sw[0].n_children_replicas = 2;
    sw[0].children_replicas = root_replicas;
    sw[0].n_children_swarmx = 2;
    sw[0].children_swarmx = root_swarmx;
    sw[1].n_children_replicas = 3;
    sw[1].children_replicas = node1_replicas;
    sw[2].n_children_replicas = 1;
    sw[2].children_replicas = node2_replicas;
    plan.n_swarm = 3;
    plan.swarm = swp;
    plan.n_replicas = REPLICAS;
    plan.spatial_partitions = PARTS;
}

static void root_table(swx_colls *t)
{
    char why[256];
    make_plan();
    ck_assert_int_eq(swx_colls_init(t, &plan, &sw[0], why, sizeof(why)), 0);
}

static swx_coll_key key_of(uint64_t step, uint32_t tag, uint32_t scope)
{
    swx_coll_key k = {.step = step, .tag = tag, .scope = scope, .eval = false};
    return k;
}

/* Child k's contribution: values whose sum depends on the order they are
 * added in (large ones that cancel, small ones that vanish beside them). */
static double value(size_t k, size_t e)
{
    static const double base[ROOT_KIDS] = {1e16, 1.0, -1e16, 0.75};
    return base[k] * (1.0 + 0.125 * (double)e) + (k == 1 ? 0.5 * (double)e : 0.0);
}

static swx_buf *part(size_t k, uint32_t count)
{
    swx_buf *b = swx_buf_new(count * (uint32_t)sizeof(double));
    ck_assert_ptr_nonnull(b);
    double *v = (double *)b->data;
    for (uint32_t e = 0; e < count; e++)
        v[e] = value(k, e);
    return b;
}

/* The sum of children kids[0..n) in that order, element e. */
static double sum_in(const size_t *kids, size_t n, size_t e)
{
    double s = value(kids[0], e);
    for (size_t i = 1; i < n; i++)
        s += value(kids[i], e);
    return s;
}

static void assert_sum(const swx_buf *sum, const size_t *kids, size_t n, uint32_t count)
{
    ck_assert_uint_eq(sum->len, count * sizeof(double));
    const double *s = (const double *)sum->data;
    for (uint32_t e = 0; e < count; e++) {
        double want = sum_in(kids, n, e);
        ck_assert_msg(memcmp(&s[e], &want, sizeof(double)) == 0, "element %u: %.17g != %.17g", e,
                      s[e], want);
    }
}

START_TEST(scope_from_plan)
{
    swx_colls t;
    root_table(&t);
    ck_assert_uint_eq(t.nkids, ROOT_KIDS);
    ck_assert_uint_eq(t.ngroups, REPLICAS / PARTS);
    bool want[ROOT_KIDS][3] = {{1, 0, 0}, {1, 0, 0}, {0, 1, 1}, {0, 0, 1}};
    for (size_t k = 0; k < ROOT_KIDS; k++) {
        for (uint32_t g = 0; g < 3; g++)
            ck_assert_msg(swx_colls_in_scope(&t, k, g) == want[k][g], "child %zu group %u", k, g);
        ck_assert(swx_colls_in_scope(&t, k, SWX_COLL_ALL));
        ck_assert(!swx_colls_in_scope(&t, k, 3)); /* a group the plan does not have */
    }
    ck_assert(!swx_colls_in_scope(&t, ROOT_KIDS, SWX_COLL_ALL));
    ck_assert_uint_eq(t.limit, SWX_COLL_PENDING_PER_GROUP * 3 + SWX_COLL_PENDING_EXTRA);
    swx_colls_free(&t);

    /* tree node 1: replicas 2, 3 (group 1) and 4 (group 2); two groups */
    char why[256];
    ck_assert_int_eq(swx_colls_init(&t, &plan, &sw[1], why, sizeof(why)), 0);
    ck_assert(swx_colls_in_scope(&t, 0, 1) && swx_colls_in_scope(&t, 1, 1));
    ck_assert(!swx_colls_in_scope(&t, 2, 1) && swx_colls_in_scope(&t, 2, 2));
    ck_assert(!swx_colls_in_scope(&t, 0, 0));
    ck_assert_uint_eq(t.limit, SWX_COLL_PENDING_PER_GROUP * 2 + SWX_COLL_PENDING_EXTRA);
    swx_colls_free(&t);
}
END_TEST

/* A plan whose tree has a cycle (node 1 under node 2 under node 1) is
 * walked once through, and a child the plan does not have is refused. */
START_TEST(bad_trees)
{
    make_plan();
    uint32_t one[] = {1}, two[] = {2}, nine[] = {9};
    sw[1].n_children_swarmx = 1;
    sw[1].children_swarmx = two;
    sw[2].n_children_swarmx = 1;
    sw[2].children_swarmx = one;
    swx_colls t;
    char why[256];
    ck_assert_int_eq(swx_colls_init(&t, &plan, &sw[0], why, sizeof(why)), 0);
    ck_assert(swx_colls_in_scope(&t, 2, 1) && swx_colls_in_scope(&t, 2, 2)); /* 2, 3, 4 and 5 */
    ck_assert(swx_colls_in_scope(&t, 3, 1) && swx_colls_in_scope(&t, 3, 2));
    swx_colls_free(&t);
    sw[2].children_replicas = nine;
    ck_assert_int_eq(swx_colls_init(&t, &plan, &sw[0], why, sizeof(why)), -EINVAL);
    ck_assert_str_eq(why, "tree node 2 has replica 9 of 6");
    ck_assert_ptr_null(t.beneath);
}
END_TEST

START_TEST(complete_after_every_child)
{
    swx_colls t;
    root_table(&t);
    char why[256];
    swx_buf *sum = NULL;
    swx_coll_key g2 = key_of(5, 17, 2);
    ck_assert_int_eq(swx_colls_add(&t, &g2, 3, part(3, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_ptr_null(sum);
    ck_assert_uint_eq(t.npending, 1);
    ck_assert_int_eq(swx_colls_add(&t, &g2, 2, part(2, COUNT), &sum, why, sizeof(why)), 1);
    ck_assert_uint_eq(t.npending, 0);
    size_t order[] = {2, 3};
    assert_sum(sum, order, 2, COUNT);
    swx_buf_unref(sum);
    /* the same key again is a new sum */
    sum = NULL;
    ck_assert_int_eq(swx_colls_add(&t, &g2, 2, part(2, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_ptr_null(sum);
    ck_assert_uint_eq(t.npending, 1);
    swx_colls_free(&t);
}
END_TEST

/* Every arrival order of four children gives child 0 + 1 + 2 + 3 bit for
 * bit, a total that another order would not give. */
START_TEST(sum_in_child_order)
{
    size_t child_order[ROOT_KIDS] = {0, 1, 2, 3}, reversed[ROOT_KIDS] = {3, 2, 1, 0};
    bool differs = false;
    for (uint32_t e = 0; e < COUNT; e++) {
        double a = sum_in(child_order, ROOT_KIDS, e), b = sum_in(reversed, ROOT_KIDS, e);
        differs |= memcmp(&a, &b, sizeof(double)) != 0;
    }
    ck_assert_msg(differs, "the test values sum the same in any order");

    swx_colls t;
    root_table(&t);
    char why[256];
    size_t perm[ROOT_KIDS] = {0, 1, 2, 3};
    int orders = 0;
    /* every permutation, in lexicographic order */
    for (;;) {
        swx_coll_key all = key_of(9, 3, SWX_COLL_ALL);
        swx_buf *sum = NULL;
        for (size_t i = 0; i < ROOT_KIDS; i++)
            ck_assert_int_eq(swx_colls_add(&t, &all, perm[i], part(perm[i], COUNT), &sum, why,
                                           sizeof(why)), i + 1 == ROOT_KIDS);
        assert_sum(sum, child_order, ROOT_KIDS, COUNT);
        swx_buf_unref(sum);
        orders++;
        size_t i = ROOT_KIDS - 1;
        while (i > 0 && perm[i - 1] > perm[i])
            i--;
        if (i == 0)
            break;
        size_t jx = ROOT_KIDS - 1;
        while (perm[jx] < perm[i - 1])
            jx--;
        size_t tmp = perm[i - 1];
        perm[i - 1] = perm[jx];
        perm[jx] = tmp;
        for (size_t a = i, b = ROOT_KIDS - 1; a < b; a++, b--) {
            tmp = perm[a];
            perm[a] = perm[b];
            perm[b] = tmp;
        }
    }
    ck_assert_int_eq(orders, 24);
    ck_assert_uint_eq(t.npending, 0);
    swx_colls_free(&t);
}
END_TEST

/* A group's sum waits for its children only; every wse-node's for all;
 * an evaluation's is a key of its own. */
START_TEST(scope_group_vs_all)
{
    swx_colls t;
    root_table(&t);
    char why[256];
    swx_buf *sum = NULL;
    swx_coll_key g1 = key_of(4, 8, 1), all = key_of(4, 8, SWX_COLL_ALL);
    swx_coll_key g1_eval = g1;
    g1_eval.eval = true;
    ck_assert_int_eq(swx_colls_add(&t, &all, 2, part(2, COUNT), &sum, why, sizeof(why)), 0);
    /* group 1 is beneath child 2 alone: its contribution is the sum, the
     * training step's and the evaluation's apart */
    size_t only2[] = {2};
    ck_assert_int_eq(swx_colls_add(&t, &g1_eval, 2, part(2, COUNT), &sum, why, sizeof(why)), 1);
    assert_sum(sum, only2, 1, COUNT);
    swx_buf_unref(sum);
    ck_assert_int_eq(swx_colls_add(&t, &g1, 2, part(2, COUNT), &sum, why, sizeof(why)), 1);
    assert_sum(sum, only2, 1, COUNT);
    swx_buf_unref(sum);
    ck_assert_uint_eq(t.npending, 1); /* all: child 2 in, three to come */
    sum = NULL;
    ck_assert_int_eq(swx_colls_add(&t, &all, 0, part(0, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_int_eq(swx_colls_add(&t, &all, 3, part(3, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_ptr_null(sum);
    ck_assert_int_eq(swx_colls_add(&t, &all, 1, part(1, COUNT), &sum, why, sizeof(why)), 1);
    size_t every[] = {0, 1, 2, 3};
    assert_sum(sum, every, 4, COUNT);
    swx_buf_unref(sum);
    ck_assert_uint_eq(t.npending, 0);
    swx_colls_free(&t);
}
END_TEST

START_TEST(refusals)
{
    swx_colls t;
    root_table(&t);
    char why[256];
    swx_buf *sum = NULL;
    swx_coll_key g0 = key_of(5, 17, 0);
    ck_assert_int_eq(swx_colls_add(&t, &g0, 2, part(2, COUNT), &sum, why, sizeof(why)), -EPROTO);
    ck_assert_str_eq(why, "child 2 has no replica in the scope of step 5 tag 17 of group 0");
    ck_assert_uint_eq(t.npending, 0); /* a refused child opens no key */
    g0.eval = true;
    ck_assert_int_eq(swx_colls_add(&t, &g0, 0, part(0, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_int_eq(swx_colls_add(&t, &g0, 0, part(0, COUNT), &sum, why, sizeof(why)), -EPROTO);
    ck_assert_str_eq(why, "child 0 contributed to eval at step 5 tag 17 of group 0 twice");
    ck_assert_int_eq(swx_colls_add(&t, &g0, 1, part(1, COUNT - 2), &sum, why, sizeof(why)), -EPROTO);
    ck_assert_str_eq(why, "child 1 sent 3 doubles to eval at step 5 tag 17 of group 0, the others 5");
    /* the refused ones changed nothing: child 1's right sum completes it */
    ck_assert_ptr_null(sum);
    ck_assert_int_eq(swx_colls_add(&t, &g0, 1, part(1, COUNT), &sum, why, sizeof(why)), 1);
    size_t order[] = {0, 1};
    assert_sum(sum, order, 2, COUNT);
    swx_buf_unref(sum);
    swx_colls_free(&t);
}
END_TEST

START_TEST(pending_limit)
{
    swx_colls t;
    root_table(&t);
    char why[256];
    swx_buf *sum = NULL;
    size_t limit = t.limit;
    ck_assert_uint_eq(limit, 20);
    for (uint32_t tag = 0; tag < limit; tag++) {
        swx_coll_key k = key_of(1, tag, 2);
        ck_assert_int_eq(swx_colls_add(&t, &k, 2, part(2, COUNT), &sum, why, sizeof(why)), 0);
    }
    ck_assert_uint_eq(t.npending, limit);
    swx_coll_key over = key_of(1, (uint32_t)limit, 2);
    ck_assert_int_eq(swx_colls_add(&t, &over, 2, part(2, COUNT), &sum, why, sizeof(why)), -ENOBUFS);
    ck_assert_str_eq(why, "20 collective sums pending (at most 20) when step 1 tag 20 of group 2 began");
    /* a pending key still takes its contributions, and its slot is free again */
    swx_coll_key first = key_of(1, 0, 2);
    ck_assert_int_eq(swx_colls_add(&t, &first, 3, part(3, COUNT), &sum, why, sizeof(why)), 1);
    swx_buf_unref(sum);
    ck_assert_int_eq(swx_colls_add(&t, &over, 2, part(2, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_uint_eq(t.npending, limit);
    swx_colls_free(&t); /* the pending contributions go with it */
    ck_assert_uint_eq(t.npending, 0);
}
END_TEST

/* Two groups at the same step and tag, their contributions interleaved:
 * each sum completes with its own children's. */
START_TEST(groups_interleaved)
{
    swx_colls t;
    root_table(&t);
    char why[256];
    swx_buf *sum = NULL;
    swx_coll_key g0 = key_of(7, 2, 0), g2 = key_of(7, 2, 2);
    ck_assert_int_eq(swx_colls_add(&t, &g0, 1, part(1, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_int_eq(swx_colls_add(&t, &g2, 3, part(3, COUNT), &sum, why, sizeof(why)), 0);
    ck_assert_uint_eq(t.npending, 2);
    ck_assert_int_eq(swx_colls_add(&t, &g2, 2, part(2, COUNT), &sum, why, sizeof(why)), 1);
    size_t order2[] = {2, 3};
    assert_sum(sum, order2, 2, COUNT);
    swx_buf_unref(sum);
    ck_assert_uint_eq(t.npending, 1);
    sum = NULL;
    ck_assert_int_eq(swx_colls_add(&t, &g0, 0, part(0, COUNT), &sum, why, sizeof(why)), 1);
    size_t order0[] = {0, 1};
    assert_sum(sum, order0, 2, COUNT);
    swx_buf_unref(sum);
    ck_assert_uint_eq(t.npending, 0);
    swx_colls_free(&t);
}
END_TEST

/* Freeing the table drops its references to pending contributions (a job
 * released mid-sum), and a refused contribution's too. */
START_TEST(free_releases)
{
    swx_colls t;
    root_table(&t);
    char why[256];
    swx_buf *sum = NULL;
    swx_buf *held = part(0, COUNT), *refused = part(2, COUNT);
    held->refs++;
    refused->refs++;
    swx_coll_key g0 = key_of(2, 1, 0);
    ck_assert_int_eq(swx_colls_add(&t, &g0, 0, held, &sum, why, sizeof(why)), 0);
    ck_assert_int_eq(swx_colls_add(&t, &g0, 2, refused, &sum, why, sizeof(why)), -EPROTO);
    ck_assert_int_eq(refused->refs, 1);
    ck_assert_int_eq(held->refs, 2);
    swx_colls_free(&t);
    ck_assert_int_eq(held->refs, 1);
    swx_buf_unref(held);
    swx_buf_unref(refused);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("swarmx-collective");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, scope_from_plan);
    tcase_add_test(tc, bad_trees);
    tcase_add_test(tc, complete_after_every_child);
    tcase_add_test(tc, sum_in_child_order);
    tcase_add_test(tc, scope_group_vs_all);
    tcase_add_test(tc, refusals);
    tcase_add_test(tc, pending_limit);
    tcase_add_test(tc, groups_interleaved);
    tcase_add_test(tc, free_releases);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
