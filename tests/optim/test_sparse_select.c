/* The masks' top-k selection (sparse.c's radix selection) against a plain
 * sort by score (larger first) and index (lower first among equal scores),
 * on weights with many ties, zeros of both signs and negative values, at
 * every count from none to all. */
#include <check.h>
#include <stdbool.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "sparse.h"

typedef struct cand {
    double score;
    uint64_t i;
} cand;

static int by_score(const void *a, const void *b)
{
    const cand *x = a, *y = b;
    if (x->score != y->score)
        return x->score > y->score ? -1 : 1;
    return x->i < y->i ? -1 : x->i > y->i;
}

/* mask[i] = 1 for the k best of scores (all candidates), 0 elsewhere */
static void reference_top(const double *score, uint64_t n, uint64_t k, uint8_t *mask)
{
    cand *c = malloc(n * sizeof(*c));
    for (uint64_t i = 0; i < n; i++)
        c[i] = (cand){score[i], i};
    qsort(c, n, sizeof(*c), by_score);
    memset(mask, 0, n);
    for (uint64_t r = 0; r < k && r < n; r++)
        mask[c[r].i] = 1;
    free(c);
}

/* Weights from a few values (ties), with +0, -0 and negatives */
static float *tied_weights(uint64_t n, int values)
{
    float *w = malloc(n * sizeof(float));
    for (uint64_t i = 0; i < n; i++) {
        int v = (int)(sparse_random(7, 0, i) * values) - values / 2;
        w[i] = v == 0 ? (i % 2 ? -0.0f : 0.0f) : 0.25f * (float)v;
    }
    return w;
}

/* Whether bits (sparse_mask_init_bits) keep exactly mask's elements. */
static bool bits_match(const uint8_t *bits, const uint8_t *mask, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if ((unsigned)(bits[i / 8] >> (i % 8) & 1) != (unsigned)(mask[i] != 0))
            return false;
    return true;
}

START_TEST(topk_init_matches_sort)
{
    const uint64_t n = 777;
    float *w = tied_weights(n, 9);
    double *s = malloc(n * sizeof(double));
    for (uint64_t i = 0; i < n; i++)
        s[i] = fabs((double)w[i]);
    uint8_t *got = malloc(n), *want = malloc(n), bits[(777 + 7) / 8];
    for (uint64_t keep = 1; keep <= n; keep += 1 + keep / 7) {
        memset(bits, 0, sizeof(bits));
        double level = 1.0 - (double)keep / (double)n;
        uint64_t k = sparse_keep_count(n, level);
        ck_assert_int_eq(sparse_mask_init(got, w, n, level, SPARSE_INIT_TOPK, 3), 0);
        reference_top(s, n, k, want);
        ck_assert_msg(memcmp(got, want, n) == 0, "keep %llu: the masks differ",
                      (unsigned long long)k);
        ck_assert_uint_eq(sparse_mask_count(got, n), k);
        ck_assert_int_eq(sparse_mask_init_bits(bits, w, n, level, SPARSE_INIT_TOPK, 3), 0);
        ck_assert(bits_match(bits, want, n));
    }
    free(s);
    free(w);
    free(got);
    free(want);
}
END_TEST

START_TEST(random_init_matches_sort)
{
    const uint64_t n = 100000;
    double *s = malloc(n * sizeof(double));
    for (uint64_t i = 0; i < n; i++)
        s[i] = sparse_random(11, 0, i);
    uint8_t *got = malloc(n), *want = malloc(n), *bits = malloc((n + 7) / 8);
    const double levels[] = {0.0, 0.5, 0.9, 0.99, 0.99999};
    for (size_t l = 0; l < sizeof(levels) / sizeof(levels[0]); l++) {
        uint64_t k = sparse_keep_count(n, levels[l]);
        ck_assert_int_eq(sparse_mask_init(got, NULL, n, levels[l], SPARSE_INIT_RANDOM, 11), 0);
        reference_top(s, n, k, want);
        ck_assert_msg(memcmp(got, want, n) == 0, "level %g: the masks differ", levels[l]);
        memset(bits, 0, (n + 7) / 8);
        ck_assert_int_eq(sparse_mask_init_bits(bits, NULL, n, levels[l], SPARSE_INIT_RANDOM, 11), 0);
        ck_assert_msg(bits_match(bits, want, n), "level %g: the bits differ", levels[l]);
    }
    free(s);
    free(got);
    free(want);
    free(bits);
}
END_TEST

/* GMP keeps the largest magnitudes among the kept, pruned ones (-1) after */
START_TEST(gmp_matches_sort)
{
    const uint64_t n = 1000;
    float *w = tied_weights(n, 7);
    uint8_t *mask = malloc(n), *want = malloc(n), *was = malloc(n);
    double *s = malloc(n * sizeof(double));
    for (uint64_t keep = 0; keep <= n; keep += 37) {
        for (uint64_t i = 0; i < n; i++)
            was[i] = sparse_random(5, 1, i) < 0.6;
        for (uint64_t i = 0; i < n; i++)
            s[i] = was[i] ? fabs((double)w[i]) : -1.0;
        memcpy(mask, was, n);
        ck_assert_int_eq(sparse_mask_gmp(mask, w, n, keep), 0);
        reference_top(s, n, keep, want);
        ck_assert_msg(memcmp(mask, want, n) == 0, "keep %llu: the masks differ",
                      (unsigned long long)keep);
    }
    free(w);
    free(mask);
    free(want);
    free(was);
    free(s);
}
END_TEST

/* SET: drop the smallest kept magnitudes, regrow as many at random among
 * the positions not kept (marked 2), their weights zero */
START_TEST(regrow_matches_sort)
{
    const uint64_t n = 2000;
    float *w = tied_weights(n, 5), *w0 = malloc(n * sizeof(float));
    memcpy(w0, w, n * sizeof(float));
    uint8_t *mask = malloc(n), *keep = malloc(n), *grow = malloc(n);
    double *s = malloc(n * sizeof(double));
    cand *c = malloc(n * sizeof(*c));
    for (uint64_t i = 0; i < n; i++)
        mask[i] = sparse_random(9, 2, i) < 0.3;
    uint64_t k = sparse_mask_count(mask, n);
    uint64_t drop = (uint64_t)nearbyint(0.3 * (double)k);
    /* the reference: the kept by magnitude, then the rest at random */
    uint64_t nk = 0;
    for (uint64_t i = 0; i < n; i++)
        if (mask[i])
            c[nk++] = (cand){fabs((double)w0[i]), i};
    qsort(c, nk, sizeof(*c), by_score);
    memset(keep, 0, n);
    for (uint64_t r = 0; r < k - drop; r++)
        keep[c[r].i] = 1;
    uint64_t nc = 0;
    for (uint64_t i = 0; i < n; i++)
        if (!keep[i])
            c[nc++] = (cand){sparse_random(42, 6, i), i};
    qsort(c, nc, sizeof(*c), by_score);
    memset(grow, 0, n);
    for (uint64_t r = 0; r < drop; r++)
        grow[c[r].i] = 1;
    ck_assert_int_eq(sparse_mask_regrow(mask, w, NULL, n, 0.3, 42, 6), 0);
    for (uint64_t i = 0; i < n; i++) {
        uint8_t want = keep[i] ? 1 : grow[i] ? 2 : 0;
        ck_assert_msg(mask[i] == want, "element %llu: %u, the sort says %u",
                      (unsigned long long)i, mask[i], want);
        ck_assert(keep[i] ? w[i] == w0[i] : w[i] == 0.0f);
    }
    ck_assert_uint_eq(sparse_mask_count(mask, n), k);
    free(w);
    free(w0);
    free(mask);
    free(keep);
    free(grow);
    free(s);
    free(c);
}
END_TEST

int main(void)
{
    Suite *su = suite_create("sparse-select");
    TCase *tc = tcase_create("select");
    tcase_add_test(tc, topk_init_matches_sort);
    tcase_add_test(tc, random_init_matches_sort);
    tcase_add_test(tc, gmp_matches_sort);
    tcase_add_test(tc, regrow_matches_sort);
    suite_add_tcase(su, tc);
    SRunner *r = srunner_create(su);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
