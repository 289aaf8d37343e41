/* JSON string literals (common/base/jsonstr.c): every escape JSON needs, in
 * the forms promised, '<' never raw, UTF-8 untouched, and the bound of
 * JSON_QUOTED_MAX met by the worst input. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "jsonstr.h"

static void quoted_is(const char *in, const char *want)
{
    char out[256];
    size_t n = json_quote(out, in);
    ck_assert_uint_le(n, JSON_QUOTED_MAX(strlen(in)));
    out[n] = 0;
    ck_assert_str_eq(out, want);
}

START_TEST(escapes)
{
    quoted_is("", "\"\"");
    quoted_is("plain", "\"plain\"");
    quoted_is("a\"b\\c", "\"a\\\"b\\\\c\"");
    quoted_is("l1\nl2\r\t", "\"l1\\nl2\\r\\t\"");
    quoted_is("\x01\x1f\x7f", "\"\\u0001\\u001f\\u007f\"");
    quoted_is("</script>", "\"\\u003c/script>\"");
    quoted_is("caf\xc3\xa9 \xe2\x9c\x93", "\"caf\xc3\xa9 \xe2\x9c\x93\"");
}
END_TEST

START_TEST(worst_case_fits_the_bound)
{
    char in[64];
    memset(in, 0x01, sizeof(in) - 1);
    in[sizeof(in) - 1] = 0;
    size_t n;
    char *q = json_quote_alloc(in, &n);
    ck_assert_ptr_nonnull(q);
    ck_assert_uint_eq(n, JSON_QUOTED_MAX(strlen(in)));
    ck_assert_int_eq(memcmp(q, "\"\\u0001", 7), 0);
    ck_assert_int_eq(q[n - 1], '"');
    free(q);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("jsonstr");
    TCase *tc = tcase_create("jsonstr");
    tcase_add_test(tc, escapes);
    tcase_add_test(tc, worst_case_fits_the_bound);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
