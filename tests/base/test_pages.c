/* Large buffers given back in pieces (common/base/pages.c): the pages
 * wholly inside a buffer are given back (they read zero, and the process's
 * resident size drops by them), the bytes of its partial first and last
 * pages keep their values, and pages_free frees small, large and NULL
 * buffers alike. */
#include <check.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "pages.h"

/* The process's resident bytes (/proc/self/statm). */
static size_t resident(void)
{
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    unsigned long size = 0, rss = 0;
    ck_assert_int_eq(fscanf(f, "%lu %lu", &size, &rss), 2);
    fclose(f);
    return rss * (size_t)sysconf(_SC_PAGESIZE);
}

START_TEST(interior_pages_given_back)
{
    const size_t page = (size_t)sysconf(_SC_PAGESIZE), bytes = 3 * PAGES_PIECE + 12345;
    uint8_t *buf = malloc(bytes + 2 * page);
    ck_assert_ptr_nonnull(buf);
    uint8_t *p = buf + 100; /* not on a page boundary */
    memset(buf, 0xab, bytes + 2 * page);
    size_t before = resident();
    pages_release(p, bytes);
    size_t after = resident();
    /* about the three pieces went (the process touches a few pages meanwhile) */
    ck_assert_uint_ge(before - after, 3 * (size_t)PAGES_PIECE - (1u << 20));
    uintptr_t first = ((uintptr_t)p + page - 1) & ~(uintptr_t)(page - 1);
    uintptr_t end = ((uintptr_t)p + bytes) & ~(uintptr_t)(page - 1);
    for (uint8_t *q = p; q < p + bytes; q += 997) {
        bool inside = (uintptr_t)q >= first && (uintptr_t)q < end;
        ck_assert_uint_eq(*q, inside ? 0 : 0xab);
    }
    ck_assert_uint_eq(p[-1], 0xab);
    ck_assert_uint_eq(p[bytes], 0xab);
    ck_assert_uint_eq(*(uint8_t *)(first - 1), 0xab);
    ck_assert_uint_eq(*(uint8_t *)end, 0xab);
    free(buf);
}
END_TEST

START_TEST(free_any_size)
{
    pages_free(NULL);
    pages_free(malloc(100));
    uint8_t *big = malloc(2 * (size_t)PAGES_PIECE + 7);
    ck_assert_ptr_nonnull(big);
    memset(big, 1, 2 * (size_t)PAGES_PIECE + 7);
    pages_free(big);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("pages");
    TCase *t = tcase_create("pages");
    tcase_add_test(t, interior_pages_given_back);
    tcase_add_test(t, free_any_size);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
