/* The coordinator's users file: keys inline or in files beside it, names
 * and keys checked, and files that others may read refused. */
#include <check.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "users.h"

static char dir[] = "/tmp/test-users-XXXXXX";

static const char *write_file(const char *name, const char *text, mode_t mode)
{
    static char path[256];
    snprintf(path, sizeof(path), "%s/%s", dir, name);
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
    chmod(path, mode);
    return path;
}

/* Loads text as a users file; returns the users or NULL with err filled. */
static users *load(const char *text, mode_t mode, char *err, size_t errlen)
{
    return users_load(write_file("users.toml", text, mode), err, errlen);
}

static void setup(void)
{
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
    strcpy(dir, "/tmp/test-users-XXXXXX");
}

START_TEST(keys_inline_and_in_files)
{
    char err[512];
    write_file("alice.key", "0123456789abcdef0123\n", 0600);
    users *u = load("[users.alice]\nkey_file = \"alice.key\"\n"
                    "[users.bob-2]\nkey = \"fedcba9876543210fedcba\"\n", 0600, err, sizeof(err));
    ck_assert_msg(u != NULL, "%s", err);
    ck_assert_uint_eq(users_count(u), 2);
    const auth_secret *a = users_key(u, "alice");
    ck_assert_ptr_nonnull(a);
    ck_assert_uint_eq(a->len, 20); /* the trailing newline is not part of the key */
    ck_assert_int_eq(memcmp(a->key, "0123456789abcdef0123", 20), 0);
    const auth_secret *b = users_key(u, "bob-2");
    ck_assert_uint_eq(b->len, 22);
    ck_assert_ptr_null(users_key(u, "carol"));
    users_free(u);
}
END_TEST

START_TEST(mistakes)
{
    static const struct {
        const char *text;
        const char *expect;
    } cases[] = {
        {"", "no users"},
        {"[users]\n", "no users"},
        {"name = \"x\"\n", "unknown key \"name\""},
        {"[users.alice]\nkey = \"short\"\n", "users.alice.key: a key has 16 to 4096 bytes"},
        {"[users.alice]\n", "users.alice: give exactly one of key and key_file"},
        {"[users.alice]\nkey = \"0123456789abcdef\"\nkey_file = \"k\"\n", "give exactly one"},
        {"[users.alice]\nkey = \"0123456789abcdef\"\nrole = \"admin\"\n", "unknown key \"role\""},
        {"[users.\"al ice\"]\nkey = \"0123456789abcdef\"\n", "user name \"al ice\""},
        {"[users.alice]\nkey = 12\n", "users.alice.key: expected a string"},
        {"[users.alice]\nkey_file = \"missing.key\"\n", "missing.key: No such file or directory"},
    };
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        char err[512] = "";
        users *u = load(cases[i].text, 0600, err, sizeof(err));
        ck_assert_msg(u == NULL, "case %zu loaded", i);
        ck_assert_msg(strstr(err, cases[i].expect) != NULL, "case %zu: %s", i, err);
    }
}
END_TEST

START_TEST(loose_permissions)
{
    char err[512];
    ck_assert_ptr_null(load("[users.alice]\nkey = \"0123456789abcdef\"\n", 0644, err, sizeof(err)));
    ck_assert_msg(strstr(err, "has mode 0644: it holds keys and must be readable by its owner only"),
                  "%s", err);
    write_file("alice.key", "0123456789abcdef0123\n", 0604);
    ck_assert_ptr_null(load("[users.alice]\nkey_file = \"alice.key\"\n", 0600, err, sizeof(err)));
    ck_assert_msg(strstr(err, "alice.key has mode 0604"), "%s", err);
    /* The key's bytes never appear in a message. */
    ck_assert_ptr_null(load("[users.alice]\nkey = \"s3cr3t-but-short\"\nx = 1\n", 0600, err, sizeof(err)));
    ck_assert_ptr_null(strstr(err, "s3cr3t"));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("users");
    TCase *t = tcase_create("file");
    tcase_add_checked_fixture(t, setup, teardown);
    tcase_add_test(t, keys_inline_and_in_files);
    tcase_add_test(t, mistakes);
    tcase_add_test(t, loose_permissions);
    suite_add_tcase(s, t);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? 1 : 0;
}
