/* Option tables: the command line and configuration files parsed against a
 * frame's table and a role's, bounds and messages, the command line over
 * the file, and the daemon frame's tables through node_parse_args; the
 * host's memory the frame reads (a cgroup's limit) and a share of it. */
#include <check.h>
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "host.h"
#include "log.h"
#include "node.h"
#include "options.h"

typedef struct frame_opts {
    char name[16];
    bool insecure;
    int level;
} frame_opts;

typedef struct role_opts {
    uint64_t memory;
    uint32_t threads;
    uint64_t steps;
} role_opts;

static const options_key frame_keys[] = {
    {"name", "NAME", OPTIONS_STRING, offsetof(frame_opts, name), sizeof(((frame_opts *)0)->name), 0,
     0, "a name"},
    {"insecure", NULL, OPTIONS_FLAG, offsetof(frame_opts, insecure), 0, 0, 0, "no secret"},
    {"log-level", "LEVEL", OPTIONS_LOG_LEVEL, offsetof(frame_opts, level), 0, 0, 0, "level"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static const options_key role_keys[] = {
    {"memory", "SIZE", OPTIONS_SIZE, offsetof(role_opts, memory), 0, 0, 0, "memory\nsecond line"},
    {"threads", "N", OPTIONS_U32, offsetof(role_opts, threads), 0, 1, 64, "threads"},
    {"max-steps", "N", OPTIONS_U64, offsetof(role_opts, steps), 0, 0, 0, "steps"},
    {NULL, NULL, 0, 0, 0, 0, 0, NULL},
};

static frame_opts fo;
static role_opts ro;
static options_table tables[2];

static void setup(void)
{
    memset(&fo, 0, sizeof(fo));
    memset(&ro, 0, sizeof(ro));
    tables[0] = (options_table){"Options", frame_keys, &fo};
    tables[1] = (options_table){"Role", role_keys, &ro};
}

static void no_usage(FILE *f, void *arg)
{
    (void)f;
    (void)arg;
}

/* Runs options_apply with stderr captured into err. */
static int apply_capture(const char *name, const char *val, char *err, size_t errlen)
{
    size_t ti;
    const options_key *k = options_find(tables, 2, name, &ti);
    ck_assert_ptr_nonnull(k);
    fflush(stderr);
    FILE *tmp = tmpfile();
    int saved = dup(2);
    dup2(fileno(tmp), 2);
    int rc = options_apply(&tables[ti], k, val, name);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    size_t n = fread(err, 1, errlen - 1, tmp);
    err[n] = '\0';
    fclose(tmp);
    return rc;
}

START_TEST(test_argv_fills_both_tables)
{
    char *argv[] = {"x", "--name", "alpha", "--memory", "2G", "--threads=8", "--insecure",
                    "--log-level", "debug", "--max-steps", "123456789012", "rest", NULL};
    options_given g;
    int first = options_parse_argv(tables, 2, 12, argv, "x", no_usage, NULL, &g);
    ck_assert_int_eq(first, 11);
    ck_assert_str_eq(fo.name, "alpha");
    ck_assert(fo.insecure);
    ck_assert_int_eq(fo.level, LOG_DEBUG);
    ck_assert_uint_eq(ro.memory, UINT64_C(2) << 30);
    ck_assert_uint_eq(ro.threads, 8);
    ck_assert_uint_eq(ro.steps, UINT64_C(123456789012));
    ck_assert(options_was_given(&g, tables, 1, &role_keys[1]));
    ck_assert(options_was_given(&g, tables, 0, &frame_keys[2]));
    ck_assert(options_was_given(&g, tables, 1, &role_keys[0]));
}
END_TEST

START_TEST(test_bounds_and_messages)
{
    char err[256];
    ck_assert_int_eq(apply_capture("threads", "0", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "threads: \"0\": expected from 1 to 64\n");
    ck_assert_int_eq(apply_capture("threads", "65", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(apply_capture("threads", "-3", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "threads: \"-3\": expected a positive integer\n");
    ck_assert_int_eq(apply_capture("threads", "4x", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(apply_capture("threads", "64", err, sizeof(err)), 0);
    ck_assert_uint_eq(ro.threads, 64);
    ck_assert_int_eq(apply_capture("memory", "lots", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "memory: size \"lots\": expected bytes with an optional K, M, G or T suffix\n");
    ck_assert_int_eq(apply_capture("memory", "0", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "memory: \"0\": expected a positive size\n");
    ck_assert_int_eq(apply_capture("name", "0123456789abcdef", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "name is too long (at most 15 characters)\n");
    ck_assert_int_eq(apply_capture("insecure", "yes", err, sizeof(err)), -EINVAL);
    ck_assert_str_eq(err, "insecure: \"yes\": expected true or false\n");
    ck_assert_int_eq(apply_capture("log-level", "loud", err, sizeof(err)), -EINVAL);
    ck_assert_int_eq(apply_capture("max-steps", "18446744073709551616", err, sizeof(err)), -EINVAL);
}
END_TEST

static void write_file(const char *path, const char *text)
{
    FILE *f = fopen(path, "w");
    ck_assert_ptr_nonnull(f);
    fputs(text, f);
    fclose(f);
}

START_TEST(test_file_and_command_line)
{
    char path[] = "/tmp/options-test-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    write_file(path, "name = \"fromfile\"\nthreads = 3\nmemory = \"1M\"\ninsecure = true\n");
    char *argv[] = {"x", "--threads", "5", NULL};
    options_given g;
    options_parse_argv(tables, 2, 3, argv, "x", no_usage, NULL, &g);
    ck_assert_int_eq(options_load_file(tables, 2, path, "x", &g), 0);
    ck_assert_uint_eq(ro.threads, 5); /* the command line wins */
    ck_assert_str_eq(fo.name, "fromfile");
    ck_assert_uint_eq(ro.memory, 1u << 20);
    ck_assert(fo.insecure);
    write_file(path, "threads = 2\nwafer_memroy = \"1G\"\n");
    ck_assert_int_eq(options_load_file(tables, 2, path, "x", &g), -1);
    write_file(path, "memory = [1]\n");
    ck_assert_int_eq(options_load_file(tables, 2, path, "x", &g), -1);
    unlink(path);
}
END_TEST

/* The daemon frame: a role's own keys reach the role's struct, and a file
 * key no table has is refused with its position and the component. */
START_TEST(test_node_parse_args_role_table)
{
    static const options_key keys[] = {
        {"threads", "N", OPTIONS_U32, offsetof(role_opts, threads), 0, 1, 100, "threads"},
        {NULL, NULL, 0, 0, 0, 0, 0, NULL},
    };
    node_role role;
    memset(&role, 0, sizeof(role));
    role.role = APPLIANCE__ROLE__ROLE_WORKER;
    role.component = "worker";
    role.options = (options_table){NULL, keys, &ro};
    node_options o;
    char *argv[] = {"worker", "--threads", "7", "--insecure", "--coordinator", "127.0.0.1:9",
                    "--max-frame-payload", "2M", NULL};
    node_parse_args(&o, &role, 8, argv);
    ck_assert_uint_eq(ro.threads, 7);
    ck_assert(o.insecure);
    ck_assert_str_eq(o.coordinator, "127.0.0.1:9");
    ck_assert_uint_eq(o.max_frame_payload, 2u << 20);
    ck_assert_str_eq(o.listen, "127.0.0.1:0");
}
END_TEST

/* The host's memory as a cgroup bounds it: the lowest memory.max from the
 * process's cgroup up to the root ("max": none), and a share of it. */
START_TEST(test_host_cgroup_limit_and_share)
{
    char root[] = "/tmp/test-host-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(root));
    char path[256];
    snprintf(path, sizeof(path), "%s/a", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    snprintf(path, sizeof(path), "%s/a/b", root);
    ck_assert_int_eq(mkdir(path, 0700), 0);
    const char *files[][2] = {{"memory.max", "4294967296\n"}, {"a/memory.max", "max\n"},
                              {"a/b/memory.max", "1073741824\n"}};
    for (size_t i = 0; i < 3; i++) {
        snprintf(path, sizeof(path), "%s/%s", root, files[i][0]);
        FILE *f = fopen(path, "w");
        ck_assert_ptr_nonnull(f);
        fputs(files[i][1], f);
        fclose(f);
    }
    ck_assert_uint_eq(host_cgroup_limit(root, "0::/a/b\n"), 1ull << 30);
    ck_assert_uint_eq(host_cgroup_limit(root, "12:memory:/x\n0::/a\n"), 4ull << 30);
    ck_assert_uint_eq(host_cgroup_limit(root, "0::/\n"), 4ull << 30);
    ck_assert_uint_eq(host_cgroup_limit(root, "0::/c/d\n"), 4ull << 30); /* no such cgroup: its parents */
    ck_assert_uint_eq(host_cgroup_limit(root, "12:memory:/x\n"), UINT64_MAX); /* cgroup v1 only */
    for (size_t i = 3; i-- > 0;) {
        snprintf(path, sizeof(path), "%s/%s", root, files[i][0]);
        unlink(path);
    }
    snprintf(path, sizeof(path), "%s/a/b", root);
    rmdir(path);
    snprintf(path, sizeof(path), "%s/a", root);
    rmdir(path);
    rmdir(root);
    ck_assert_uint_gt(host_memory(), 0);
    char id[64];
    ck_assert_int_eq(host_identity(id, sizeof(id)), 0);
    ck_assert_uint_gt(strlen(id), 0);

    double share;
    ck_assert_int_eq(host_share_parse("0.375", &share), 0);
    ck_assert(share == 0.375);
    ck_assert_int_eq(host_share_parse("0.75/2", &share), 0);
    ck_assert(share == 0.375);
    ck_assert_int_eq(host_share_parse("1", &share), 0);
    ck_assert(share == 1);
    const char *bad[] = {"", "0", "1.5", "-0.5", "0.75/", "0.75/0", "0.75/x", "0.75/2x", "nan", "x"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
        ck_assert_msg(host_share_parse(bad[i], &share) == -EINVAL, "\"%s\" was taken", bad[i]);
}
END_TEST

static Suite *options_suite(void)
{
    Suite *s = suite_create("options");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, NULL);
    tcase_add_test(tc, test_argv_fills_both_tables);
    tcase_add_test(tc, test_bounds_and_messages);
    tcase_add_test(tc, test_file_and_command_line);
    tcase_add_test(tc, test_node_parse_args_role_table);
    tcase_add_test(tc, test_host_cgroup_limit_and_share);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    SRunner *sr = srunner_create(options_suite());
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
