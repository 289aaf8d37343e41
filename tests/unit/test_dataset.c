/* The input workers' data: epochs are permutations of the data set, the
 * same for every run with the same seed, and samples do not depend on who
 * produces them. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "dataset.h"

static dataset *make(uint64_t n, bool shuffle, uint64_t seed)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    uint64_t shape[1] = {8};
    in.data_processor = "synthetic_classification";
    in.num_samples = n;
    in.num_classes = 3;
    in.noise = 0.5;
    in.shuffle = shuffle;
    in.seed = seed;
    in.n_sample_shape = 1;
    in.sample_shape = shape;
    dataset *d;
    char err[256];
    ck_assert_msg(dataset_open(&d, &in, err, sizeof(err)) == 0, "%s", err);
    return d;
}

START_TEST(epochs_are_permutations)
{
    const uint64_t sizes[] = {1, 2, 7, 64, 1000, 4099};
    for (size_t s = 0; s < sizeof(sizes) / sizeof(sizes[0]); s++) {
        uint64_t n = sizes[s];
        dataset *d = make(n, true, 42);
        unsigned char *seen = calloc(n, 1);
        /* Batch 5 over two epochs: every index once per epoch. */
        for (int epoch = 0; epoch < 2; epoch++) {
            memset(seen, 0, n);
            for (uint64_t g = epoch * n; g < (epoch + 1) * n; g++) {
                uint64_t idx = dataset_index(d, g / 5, 5, g % 5);
                ck_assert_uint_lt(idx, n);
                ck_assert_msg(!seen[idx], "n=%llu: index %llu twice in epoch %d",
                              (unsigned long long)n, (unsigned long long)idx, epoch);
                seen[idx] = 1;
            }
        }
        free(seen);
        dataset_close(d);
    }
}
END_TEST

START_TEST(order_follows_seed_and_epoch)
{
    dataset *a = make(1000, true, 1), *b = make(1000, true, 1), *c = make(1000, true, 2);
    int same_seed = 0, other_seed = 0, next_epoch = 0, identity = 0;
    for (uint64_t i = 0; i < 1000; i++) {
        uint64_t x = dataset_index(a, 0, 1000, i);
        same_seed += x == dataset_index(b, 0, 1000, i);
        other_seed += x == dataset_index(c, 0, 1000, i);
        next_epoch += x == dataset_index(a, 1, 1000, i);
        identity += x == i;
    }
    ck_assert_int_eq(same_seed, 1000);
    ck_assert_int_lt(other_seed, 20); /* about 1 expected by chance */
    ck_assert_int_lt(next_epoch, 20);
    ck_assert_int_lt(identity, 20);
    dataset *plain = make(10, false, 1);
    ck_assert_uint_eq(dataset_index(plain, 3, 4, 1), 3); /* (3 * 4 + 1) % 10 */
    dataset_close(a);
    dataset_close(b);
    dataset_close(c);
    dataset_close(plain);
}
END_TEST

START_TEST(samples_are_pure_functions)
{
    dataset *d = make(100, true, 9);
    float x1[8], x2[8];
    int32_t y1, y2;
    char err[128];
    ck_assert_uint_eq(dataset_size(d), 100);
    ck_assert_uint_eq(dataset_sample_elems(d), 8);
    ck_assert_uint_eq(dataset_label_elems(d), 1);
    ck_assert_int_eq(dataset_read(d, 0, 17, x1, &y1, err, sizeof(err)), 0);
    ck_assert_int_eq(dataset_read(d, 0, 18, x2, &y2, err, sizeof(err)), 0);
    ck_assert_int_eq(dataset_read(d, 3, 17, x2, &y2, err, sizeof(err)), 0);
    ck_assert_int_eq(memcmp(x1, x2, sizeof(x1)), 0);
    ck_assert_int_eq(y1, y2);
    ck_assert(y1 >= 0 && y1 < 3);
    ck_assert_int_lt(dataset_read(d, 0, 100, x2, &y2, err, sizeof(err)), 0);
    dataset_close(d);
}
END_TEST

START_TEST(unknown_processor_refused)
{
    Appliance__PlanInput in = APPLIANCE__PLAN_INPUT__INIT;
    in.data_processor = "imagenet";
    dataset *d;
    char err[128];
    ck_assert_int_lt(dataset_open(&d, &in, err, sizeof(err)), 0);
    ck_assert_ptr_null(d);
    ck_assert_str_eq(err, "data_processor \"imagenet\" is not available");
    dataset_close(NULL);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("dataset");
    TCase *t = tcase_create("synthetic");
    tcase_add_test(t, epochs_are_permutations);
    tcase_add_test(t, order_follows_seed_and_epoch);
    tcase_add_test(t, samples_are_pure_functions);
    tcase_add_test(t, unknown_processor_refused);
    suite_add_tcase(s, t);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
