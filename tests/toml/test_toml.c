/* Unit tests of the TOML parser: values, key order, nesting, positions, and
 * the exact text of the errors a user sees. The toml-test suite covers
 * conformance; these pin down the parser's own promises. */
#include "toml.h"

#include <check.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static char err[512];

static toml_value *parse(const char *text)
{
    toml_value *root = toml_parse(text, strlen(text), "job.toml", err, sizeof(err));
    ck_assert_msg(root != NULL, "unexpected error: %s", err);
    return root;
}

/* Parses text, which must fail with exactly the message want. */
#define ck_parse_error(text, want)                                                  \
    do {                                                                            \
        toml_value *r_ = toml_parse((text), strlen(text), "job.toml", err, sizeof(err)); \
        ck_assert_msg(r_ == NULL, "parsed, but must fail with: %s", (want));        \
        ck_assert_str_eq(err, (want));                                              \
    } while (0)

START_TEST(test_scalars)
{
    toml_value *r = parse("i = -42\n"
                          "h = 0xdead_BEEF\n"
                          "o = 0o755\n"
                          "b = 0b1010\n"
                          "big = 9_223_372_036_854_775_807\n"
                          "small = -9223372036854775808\n"
                          "f = 6.626e-34\n"
                          "g = -1_000.5\n"
                          "pinf = +inf\n"
                          "ninf = -inf\n"
                          "n = nan\n"
                          "t = true\n"
                          "u = false\n");
    ck_assert_int_eq(toml_int(toml_table_get(r, "i")), -42);
    ck_assert_int_eq(toml_int(toml_table_get(r, "h")), 0xdeadbeef);
    ck_assert_int_eq(toml_int(toml_table_get(r, "o")), 0755);
    ck_assert_int_eq(toml_int(toml_table_get(r, "b")), 10);
    ck_assert(toml_int(toml_table_get(r, "big")) == INT64_MAX);
    ck_assert(toml_int(toml_table_get(r, "small")) == INT64_MIN);
    ck_assert(toml_float(toml_table_get(r, "f")) == 6.626e-34);
    ck_assert(toml_float(toml_table_get(r, "g")) == -1000.5);
    ck_assert(isinf(toml_float(toml_table_get(r, "pinf"))) && toml_float(toml_table_get(r, "pinf")) > 0);
    ck_assert(isinf(toml_float(toml_table_get(r, "ninf"))) && toml_float(toml_table_get(r, "ninf")) < 0);
    ck_assert(isnan(toml_float(toml_table_get(r, "n"))));
    ck_assert(toml_bool(toml_table_get(r, "t")));
    ck_assert(!toml_bool(toml_table_get(r, "u")));
    ck_assert_int_eq(toml_type_of(toml_table_get(r, "g")), TOML_FLOAT);
    ck_assert_str_eq(toml_type_name(toml_type_of(toml_table_get(r, "t"))), "boolean");
    ck_assert_ptr_null(toml_table_get(r, "absent"));
    toml_free(r);
}
END_TEST

START_TEST(test_strings)
{
    toml_value *r = parse("a = \"tab\\there \\\"q\\\" \\u00E9 \\U0001F600\"\n"
                          "b = 'C:\\path\\n'\n"
                          "c = \"\"\"\n"
                          "one\\\n"
                          "     two\r\n"
                          "three\"\"\"\"\"\n"
                          "d = '''\n"
                          "raw \\n ''line'''\n"
                          "nul = \"x\\u0000y\"\n");
    ck_assert_str_eq(toml_string(toml_table_get(r, "a")), "tab\there \"q\" \xC3\xA9 \xF0\x9F\x98\x80");
    ck_assert_str_eq(toml_string(toml_table_get(r, "b")), "C:\\path\\n");
    ck_assert_str_eq(toml_string(toml_table_get(r, "c")), "onetwo\nthree\"\"");
    ck_assert_str_eq(toml_string(toml_table_get(r, "d")), "raw \\n ''line");
    const toml_value *nul = toml_table_get(r, "nul");
    ck_assert_uint_eq(toml_string_len(nul), 3);
    ck_assert_int_eq(memcmp(toml_string(nul), "x\0y", 4), 0);
    toml_free(r);
}
END_TEST

START_TEST(test_key_order_and_nesting)
{
    toml_value *r = parse("zeta = 1\n"
                          "alpha = 2\n"
                          "mid.inner = 3\n"
                          "\"quoted key\" = 4\n"
                          "[model]\n"
                          "input_shape = [1, 28, [\"mixed\", 2.5]]\n"
                          "[[model.layers]]\n"
                          "name = \"fc1\"\n"
                          "[[model.layers]]\n"
                          "name = \"fc2\"\n"
                          "opt = { lr = 0.1, betas.b1 = 0.9 }\n"
                          "[model.layers.sub]\n"
                          "x = 1\n");
    ck_assert_uint_eq(toml_table_len(r), 5);
    const char *want[] = {"zeta", "alpha", "mid", "quoted key", "model"};
    for (size_t i = 0; i < 5; i++)
        ck_assert_str_eq(toml_table_key(r, i), want[i]);
    ck_assert_int_eq(toml_int(toml_table_get(toml_table_get(r, "mid"), "inner")), 3);

    const toml_value *model = toml_table_get(r, "model");
    const toml_value *shape = toml_table_get(model, "input_shape");
    ck_assert_uint_eq(toml_array_len(shape), 3);
    ck_assert_int_eq(toml_int(toml_array_at(shape, 1)), 28);
    const toml_value *mixed = toml_array_at(shape, 2);
    ck_assert_str_eq(toml_string(toml_array_at(mixed, 0)), "mixed");
    ck_assert(toml_float(toml_array_at(mixed, 1)) == 2.5);

    const toml_value *layers = toml_table_get(model, "layers");
    ck_assert_int_eq(toml_type_of(layers), TOML_ARRAY);
    ck_assert_uint_eq(toml_array_len(layers), 2);
    ck_assert_str_eq(toml_string(toml_table_get(toml_array_at(layers, 0), "name")), "fc1");
    const toml_value *l2 = toml_array_at(layers, 1);
    ck_assert_str_eq(toml_table_key(l2, 0), "name");
    ck_assert_str_eq(toml_table_key(l2, 1), "opt");
    ck_assert_str_eq(toml_table_key(l2, 2), "sub");
    const toml_value *opt = toml_table_get(l2, "opt");
    ck_assert(toml_float(toml_table_get(toml_table_get(opt, "betas"), "b1")) == 0.9);
    ck_assert_int_eq(toml_int(toml_table_get(toml_table_get(l2, "sub"), "x")), 1);
    toml_free(r);
}
END_TEST

START_TEST(test_positions)
{
    ck_parse_error("# comment\n"
                   "seed = 7\n"
                   "  [model]\n"
                   "\tlr =   0.5 # a tab is one column\n"
                   "name = \"\xC3\xA9t\xC3\xA9\"   ; = 1\n",
                   "job.toml:5:16: expected end of line after value, found ';'");

    toml_value *r = parse("# comment\n"
              "seed = 7\n"
              "  [model]\n"
              "\tlr =   0.5\n"
              "\"\xC3\xA9t\xC3\xA9\" = \"x\"\n"
              "[[model.layers]]\n");
    ck_assert_str_eq(toml_source_name(r), "job.toml");
    toml_pos p = toml_table_key_pos(r, 0);
    ck_assert_int_eq(p.line, 2);
    ck_assert_int_eq(p.col, 1);
    p = toml_pos_of(toml_table_get(r, "seed"));
    ck_assert_int_eq(p.line, 2);
    ck_assert_int_eq(p.col, 8);
    const toml_value *model = toml_table_get(r, "model");
    p = toml_pos_of(model); /* the header's '[' */
    ck_assert_int_eq(p.line, 3);
    ck_assert_int_eq(p.col, 3);
    p = toml_table_key_pos(r, 1); /* "model" inside the header */
    ck_assert_int_eq(p.line, 3);
    ck_assert_int_eq(p.col, 4);
    p = toml_table_key_pos(model, 0);
    ck_assert_int_eq(p.line, 4);
    ck_assert_int_eq(p.col, 2);
    p = toml_pos_of(toml_table_get(model, "lr"));
    ck_assert_int_eq(p.line, 4);
    ck_assert_int_eq(p.col, 9);
    p = toml_pos_of(toml_table_get(model, "\xC3\xA9t\xC3\xA9")); /* columns count characters */
    ck_assert_int_eq(p.line, 5);
    ck_assert_int_eq(p.col, 9);
    const toml_value *layers = toml_table_get(model, "layers");
    p = toml_pos_of(toml_array_at(layers, 0));
    ck_assert_int_eq(p.line, 6);
    ck_assert_int_eq(p.col, 1);
    ck_assert_str_eq(toml_source_name(toml_array_at(layers, 0)), "job.toml");
    toml_free(r);
}
END_TEST

START_TEST(test_big_table)
{
    enum { N = 20000 };
    size_t cap = (size_t)N * 24, len = 0;
    char *text = malloc(cap);
    ck_assert_ptr_nonnull(text);
    for (int i = 0; i < N; i++)
        len += (size_t)snprintf(text + len, cap - len, "k%d = %d\n", i, i);
    toml_value *r = toml_parse(text, len, "big.toml", err, sizeof(err));
    ck_assert_msg(r != NULL, "%s", err);
    ck_assert_uint_eq(toml_table_len(r), N);
    char key[32];
    for (int i = 0; i < N; i += 997) {
        snprintf(key, sizeof(key), "k%d", i);
        ck_assert_int_eq(toml_int(toml_table_get(r, key)), i);
        ck_assert_int_eq(toml_table_find(r, key), i);
    }
    ck_assert_str_eq(toml_table_key(r, N - 1), "k19999");
    ck_assert_ptr_null(toml_table_get(r, "k20000"));
    toml_free(r);

    /* ... and a duplicate far down is still found. */
    len += (size_t)snprintf(text + len, cap - len, "k123 = 0\n");
    ck_assert_ptr_null(toml_parse(text, len, "big.toml", err, sizeof(err)));
    ck_assert_str_eq(err, "big.toml:20001:1: duplicate key \"k123\" (first defined at 124:1)");
    free(text);
}
END_TEST

START_TEST(test_errors_keys)
{
    ck_parse_error("lr = 0.1\nseed = 1\nseed = 2\n",
                   "job.toml:3:1: duplicate key \"seed\" (first defined at 2:1)");
    ck_parse_error("[train]\n\n\n\n\n\n\n\n\n\n\nlr 0.1\n",
                   "job.toml:12:4: expected '=' after key \"lr\", found '0'");
    ck_parse_error("lr\n", "job.toml:1:3: expected '=' after key \"lr\", found end of line");
    ck_parse_error("a.b = 1\na.b = 2\n",
                   "job.toml:2:3: duplicate key \"a.b\" (first defined at 1:3)");
    ck_parse_error("a = 1\na.b = 2\n",
                   "job.toml:2:1: key \"a\" is an integer (defined at 1:1), not a table");
    ck_parse_error("x = 1\n= 2\n", "job.toml:2:1: expected a key or a [table], found '='");
    ck_parse_error("'a b' = 1\n'a b' = 2\n",
                   "job.toml:2:1: duplicate key 'a b' (first defined at 1:1)");
}
END_TEST

START_TEST(test_errors_tables)
{
    ck_parse_error("[a]\nx = 1\n[a]\n", "job.toml:3:1: table \"a\" already defined at 1:1");
    ck_parse_error("[a]\nb.c = 1\n[a.b]\n",
                   "job.toml:3:1: table \"a.b\" already defined by dotted keys at 2:1");
    ck_parse_error("[a.b.c]\nz = 9\n[a]\nb.c.t = 1\n",
                   "job.toml:4:3: cannot add keys to table \"b.c\" (defined at 1:1) with dotted keys");
    ck_parse_error("a = {x = 1}\n[a]\n",
                   "job.toml:2:1: key \"a\" already defined as an inline table at 1:1");
    ck_parse_error("a = {x = 1}\na.y = 2\n",
                   "job.toml:2:1: cannot extend inline table \"a\" (defined at 1:5)");
    ck_parse_error("a = [1]\n[[a]]\n",
                   "job.toml:2:1: cannot append to static array \"a\" (defined at 1:1)");
    ck_parse_error("[[a]]\n[a]\n",
                   "job.toml:2:1: key \"a\" already defined as an array of tables at 1:3");
    ck_parse_error("[a\n", "job.toml:1:3: expected ']' after table name \"a\", found end of line");
    ck_parse_error("t = {a = 1,}\n",
                   "job.toml:1:12: trailing comma not allowed in an inline table");
}
END_TEST

START_TEST(test_errors_values)
{
    ck_parse_error("name = \"abc\nx = 1\n", "job.toml:1:8: unterminated string");
    ck_parse_error("\"\xC3\xA9\" = 'abc\n", "job.toml:1:7: unterminated string");
    ck_parse_error("s = \"\"\"abc\n\ndef\n", "job.toml:1:5: unterminated multi-line string");
    ck_parse_error("s = \"a\\qb\"\n", "job.toml:1:7: invalid escape sequence \"\\q\"");
    ck_parse_error("s = \"\\uD800\"\n", "job.toml:1:6: \"\\uD800\" is not a Unicode scalar value");
    ck_parse_error("s = \"\\u12\"\n", "job.toml:1:6: \"\\u\" must be followed by 4 hexadecimal digits");
    ck_parse_error("s = \"a\tb\x01\"\n", "job.toml:1:9: control character U+0001 in string");
    ck_parse_error("n = 9223372036854775808\n",
                   "job.toml:1:5: integer 9223372036854775808 is out of range (64-bit signed)");
    ck_parse_error("n = 0xffff_ffff_ffff_ffff\n",
                   "job.toml:1:5: integer 0xffff_ffff_ffff_ffff is out of range (64-bit signed)");
    ck_parse_error("n = 1__0\n", "job.toml:1:5: invalid number \"1__0\": '_' must be between digits");
    ck_parse_error("n = 007\n", "job.toml:1:5: invalid number \"007\": leading zeros are not allowed");
    ck_parse_error("f = 1.\n", "job.toml:1:5: invalid float \"1.\": expected digits after '.'");
    ck_parse_error("f = 1e999\n", "job.toml:1:5: float 1e999 is out of range");
    ck_parse_error("b = yes\n", "job.toml:1:5: invalid value \"yes\" (strings must be quoted)");
    ck_parse_error("a = [1, 2\nb = 3\n",
                   "job.toml:2:1: expected ',' or ']' after an array element, found 'b'");
    ck_parse_error("a = [1,,2]\n", "job.toml:1:8: expected a value, found ','");
    ck_parse_error("a =\n", "job.toml:1:4: expected a value, found end of line");
    ck_parse_error("a = 1 2\n", "job.toml:1:7: expected end of line after value, found '2'");
}
END_TEST

START_TEST(test_errors_datetimes)
{
    ck_parse_error("seed = 1\nstart = 1979-05-27T07:32:00Z\n",
                   "job.toml:2:9: date-times are not supported (found an offset date-time)");
    ck_parse_error("d = 1979-05-27\n",
                   "job.toml:1:5: date-times are not supported (found a local date)");
    ck_parse_error("d = [07:32:00.5]\n",
                   "job.toml:1:6: date-times are not supported (found a local time)");
    ck_parse_error("d = 1979-05-27 07:32:00\n",
                   "job.toml:1:5: date-times are not supported (found a local date-time)");
    ck_parse_error("d = 2023-02-29\n", "job.toml:1:5: invalid date: 2023-02 has no day 29");
    ck_parse_error("d = 1979-05-27T25:00:00\n",
                   "job.toml:1:5: invalid time: 25:00:00 is out of range");
    ck_parse_error("d = 1979-05-27T07:32\n", "job.toml:1:5: invalid time: expected HH:MM:SS");
}
END_TEST

START_TEST(test_errors_text)
{
    const char bad[] = "a = \"\xC3\x28\"\n";
    ck_assert_ptr_null(toml_parse(bad, sizeof(bad) - 1, "job.toml", err, sizeof(err)));
    ck_assert_str_eq(err, "job.toml:1:6: invalid UTF-8 (byte 0xC3)");
    const char nul[] = "a = 1\n\0";
    ck_assert_ptr_null(toml_parse(nul, sizeof(nul) - 1, "job.toml", err, sizeof(err)));
    ck_assert_str_eq(err, "job.toml:2:1: expected a key or a [table], found control character U+0000");
    ck_parse_error("a = 1\rb = 2\n",
                   "job.toml:1:6: expected end of line after value, found a carriage return without a line feed");
    ck_parse_error("# ok\r\na = 1 # bad \x7f\n", "job.toml:2:13: control character U+007F in comment");

    char deep[600];
    size_t n = (size_t)snprintf(deep, sizeof(deep), "a = ");
    for (int i = 0; i < 260; i++)
        deep[n++] = '[';
    deep[n] = '\0';
    ck_parse_error(deep, "job.toml:1:261: nesting deeper than 256 levels");

    /* CRLF line ends and a BOM are fine. */
    toml_value *r = parse("\xEF\xBB\xBF" "a = 1\r\nb = \"x\"\r\n");
    ck_assert_int_eq(toml_pos_of(toml_table_get(r, "b")).line, 2);
    ck_assert_int_eq(toml_pos_of(toml_table_get(r, "a")).col, 5);
    toml_free(r);
}
END_TEST

START_TEST(test_parse_file)
{
    ck_assert_ptr_null(toml_parse_file("/nonexistent/job.toml", err, sizeof(err)));
    ck_assert_str_eq(err, "/nonexistent/job.toml: cannot open: No such file or directory");

    char path[] = "/tmp/test_toml_XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    FILE *f = fdopen(fd, "w");
    fputs("[run]\nsteps = 100\nsteps = 1\n", f);
    fclose(f);
    ck_assert_ptr_null(toml_parse_file(path, err, sizeof(err)));
    char want[128];
    snprintf(want, sizeof(want), "%s:3:1: duplicate key \"steps\" (first defined at 2:1)", path);
    ck_assert_str_eq(err, want);
    remove(path);

    /* A short error buffer is still terminated. */
    char small[12];
    ck_assert_ptr_null(toml_parse("x = ", 4, "job.toml", small, sizeof(small)));
    ck_assert_str_eq(small, "job.toml:1:");
}
END_TEST

START_TEST(test_errorf)
{
    char buf[64];
    int r = toml_errorf(buf, sizeof(buf), "job.toml", (toml_pos){3, 9}, "bad %s", "thing");
    ck_assert_int_lt(r, 0);
    ck_assert_str_eq(buf, "job.toml:3:9: bad thing");
}
END_TEST

static Suite *toml_suite(void)
{
    Suite *s = suite_create("toml");
    TCase *tc = tcase_create("parse");
    tcase_add_test(tc, test_scalars);
    tcase_add_test(tc, test_strings);
    tcase_add_test(tc, test_key_order_and_nesting);
    tcase_add_test(tc, test_positions);
    tcase_add_test(tc, test_big_table);
    suite_add_tcase(s, tc);
    tc = tcase_create("errors");
    tcase_add_test(tc, test_errors_keys);
    tcase_add_test(tc, test_errors_tables);
    tcase_add_test(tc, test_errors_values);
    tcase_add_test(tc, test_errors_datetimes);
    tcase_add_test(tc, test_errors_text);
    tcase_add_test(tc, test_parse_file);
    tcase_add_test(tc, test_errorf);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(toml_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
