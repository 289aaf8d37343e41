/* safetensors: round trips, the exact bytes of a small file, refusal of
 * corrupt files, and the writer's all-or-nothing replacement. With
 * "--write-sample PATH" it writes the file st_numpy.py checks instead. */
#include <check.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "safetensors.h"

static char dir[256];

static void setup(void)
{
    const char *t = getenv("TMPDIR");
    snprintf(dir, sizeof(dir), "%s/st-test-XXXXXX", t && *t ? t : "/tmp");
    ck_assert_ptr_nonnull(mkdtemp(dir));
}

static void teardown(void)
{
    char cmd[300];
    chmod(dir, 0755);
    snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
    ck_assert_int_eq(system(cmd), 0);
}

static const char *in_dir(const char *name)
{
    static char buf[4][512];
    static int k;
    k = (k + 1) % 4;
    snprintf(buf[k], sizeof(buf[k]), "%s/%s", dir, name);
    return buf[k];
}

/* Reads a whole file into a new buffer (caller frees); *len gets its size. */
static unsigned char *slurp(const char *path, size_t *len)
{
    FILE *f = fopen(path, "rb");
    ck_assert_ptr_nonnull(f);
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    unsigned char *p = malloc((size_t)n + 1);
    ck_assert_uint_eq(fread(p, 1, (size_t)n, f), (size_t)n);
    fclose(f);
    *len = (size_t)n;
    return p;
}

/* Writes a file with the given header length field, header text and data. */
static void write_raw(const char *path, uint64_t hlen_field, const char *header,
                      const void *data, size_t dlen)
{
    FILE *f = fopen(path, "wb");
    ck_assert_ptr_nonnull(f);
    unsigned char len8[8];
    for (int i = 0; i < 8; i++)
        len8[i] = (unsigned char)(hlen_field >> (8 * i));
    fwrite(len8, 1, 8, f);
    fwrite(header, 1, strlen(header), f);
    if (dlen)
        fwrite(data, 1, dlen, f);
    ck_assert_int_eq(fclose(f), 0);
}

/* No "*.tmp-*" file in dir. */
static int temp_files_in(const char *d)
{
    DIR *dh = opendir(d);
    if (!dh)
        return 0;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(dh)))
        n += strstr(e->d_name, ".tmp-") != NULL;
    closedir(dh);
    return n;
}

/* The sample file: two F32 tensors, an I64 scalar and metadata. */
static int write_sample(const char *path, char *err, size_t errlen)
{
    static float w[6], b[3];
    static int64_t step = 42;
    for (int i = 0; i < 6; i++)
        w[i] = (float)i * 0.5f - 1.0f;
    for (int i = 0; i < 3; i++)
        b[i] = 1.0f / (float)(i + 3);
    st_writer *wr = st_writer_new();
    if (!wr)
        return -ENOMEM;
    int rc = st_writer_add_f32(wr, "layer1.weight", (int64_t[]){2, 3}, 2, w, 6);
    if (rc == 0)
        rc = st_writer_add_f32(wr, "layer1.bias", (int64_t[]){3}, 1, b, 3);
    if (rc == 0)
        rc = st_writer_add(wr, "step", ST_I64, NULL, 0, &step, 1);
    if (rc == 0)
        rc = st_writer_meta(wr, "format", "pt");
    if (rc == 0)
        rc = st_writer_meta(wr, "step", "42");
    if (rc == 0)
        rc = st_writer_write(wr, path, err, errlen);
    st_writer_free(wr);
    return rc;
}

START_TEST(round_trip)
{
    float a[12], c[5];
    for (int i = 0; i < 12; i++)
        a[i] = (float)i * 1.25f - 3.0f;
    for (int i = 0; i < 5; i++)
        c[i] = -(float)i / 7.0f;
    int32_t ids[4] = {1, -2, 3, 2147483647};
    st_writer *w = st_writer_new();
    ck_assert_ptr_nonnull(w);
    ck_assert_int_eq(st_writer_add_f32(w, "conv.w", (int64_t[]){2, 3, 1, 2}, 4, a, 12), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "empty", (int64_t[]){0, 4}, 2, NULL, 0), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "a \"quoted\"\nname/é", (int64_t[]){5}, 1, c, 5), 0);
    ck_assert_int_eq(st_writer_add(w, "ids", ST_I32, (int64_t[]){4}, 1, ids, 4), 0);
    /* Refusals: duplicate name, count not matching dims, reserved name. */
    ck_assert_int_eq(st_writer_add_f32(w, "conv.w", (int64_t[]){1}, 1, a, 1), -EINVAL);
    ck_assert_int_eq(st_writer_add_f32(w, "x", (int64_t[]){2, 2}, 2, a, 5), -EINVAL);
    ck_assert_int_eq(st_writer_add_f32(w, "__metadata__", (int64_t[]){1}, 1, a, 1), -EINVAL);
    ck_assert_int_eq(st_writer_meta(w, "step", "10"), 0);
    ck_assert_int_eq(st_writer_meta(w, "note", "tab\there \\ \x01 ünï"), 0);
    ck_assert_int_eq(st_writer_meta(w, "step", "11"), -EINVAL);
    char err[512] = "";
    ck_assert_int_eq(st_writer_write(w, in_dir("rt.safetensors"), err, sizeof(err)), 0);
    st_writer_free(w);

    st_file *f = st_open(in_dir("rt.safetensors"), err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_uint_eq(st_count(f), 4);
    ck_assert_str_eq(st_name(f, 0), "conv.w");
    ck_assert_str_eq(st_name(f, 1), "empty");
    ck_assert_str_eq(st_name(f, 2), "a \"quoted\"\nname/é");
    ck_assert_str_eq(st_name(f, 3), "ids");
    int nd;
    const int64_t *d = st_dims(f, 0, &nd);
    ck_assert_int_eq(nd, 4);
    ck_assert(d[0] == 2 && d[1] == 3 && d[2] == 1 && d[3] == 2);
    ck_assert_uint_eq(st_numel(f, 0), 12);
    ck_assert_mem_eq(st_data(f, 0), a, sizeof(a));
    ck_assert_uint_eq(st_numel(f, 1), 0);
    d = st_dims(f, 1, &nd);
    ck_assert(nd == 2 && d[0] == 0 && d[1] == 4);
    long k = st_find(f, "a \"quoted\"\nname/é");
    ck_assert_int_eq(k, 2);
    ck_assert_mem_eq(st_data(f, (size_t)k), c, sizeof(c));
    ck_assert_int_eq(st_type(f, 3), ST_I32);
    ck_assert_ptr_null(st_data(f, 3));
    size_t nb;
    ck_assert_mem_eq(st_data_raw(f, 3, &nb), ids, sizeof(ids));
    ck_assert_uint_eq(nb, sizeof(ids));
    ck_assert_int_eq(st_find(f, "missing"), -1);
    ck_assert_int_eq(st_find(f, "conv.w"), 0);
    ck_assert_str_eq(st_meta(f, "step"), "10");
    ck_assert_str_eq(st_meta(f, "note"), "tab\there \\ \x01 ünï");
    ck_assert_ptr_null(st_meta(f, "nope"));
    ck_assert_uint_eq(st_meta_count(f), 2);
    ck_assert_str_eq(st_meta_key(f, 0), "step");
    ck_assert_str_eq(st_meta_value(f, 1), "tab\there \\ \x01 ünï");
    st_close(f);
    ck_assert_int_eq(temp_files_in(dir), 0);
}
END_TEST

/* A file laid out in place (st_writer_header, then the data written at its
 * offsets, as memoryx's disk tier does) reads back like a written one; its
 * header can be rewritten with new metadata in the same room; the
 * header-only reader reads ranges from the file and refuses one cut short. */
START_TEST(header_in_place)
{
    float a[1000], b[3] = {1.5f, -2.0f, 0.25f};
    for (int i = 0; i < 1000; i++)
        a[i] = (float)i / 3.0f;
    st_writer *w = st_writer_new();
    ck_assert_int_eq(st_writer_add_f32(w, "a", (int64_t[]){10, 100}, 2, NULL, 1000), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "b", (int64_t[]){3}, 1, NULL, 3), 0);
    ck_assert_int_eq(st_writer_meta(w, "step", "18446744073709551615"), 0);
    uint8_t head[4096];
    size_t need;
    ck_assert_int_eq(st_writer_header(w, 8, head, &need), -ENOSPC);
    ck_assert_uint_gt(need, 8);
    ck_assert_int_eq(st_writer_header(w, 4095, head, &need), -ENOSPC); /* not a multiple of 8 */
    ck_assert_int_eq(st_writer_header(w, sizeof(head), head, &need), 0);
    char err[512] = "";
    ck_assert_int_eq(st_writer_write(w, in_dir("nodata.safetensors"), err, sizeof(err)), -EINVAL);
    st_writer_free(w);
    int fd = open(in_dir("place.safetensors"), O_RDWR | O_CREAT | O_TRUNC, 0644);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pwrite(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
    ck_assert_int_eq(pwrite(fd, a, sizeof(a), sizeof(head)), (ssize_t)sizeof(a));
    ck_assert_int_eq(pwrite(fd, b, sizeof(b), sizeof(head) + sizeof(a)), (ssize_t)sizeof(b));
    /* new metadata, same room */
    w = st_writer_new();
    ck_assert_int_eq(st_writer_add_f32(w, "a", (int64_t[]){10, 100}, 2, NULL, 1000), 0);
    ck_assert_int_eq(st_writer_add_f32(w, "b", (int64_t[]){3}, 1, NULL, 3), 0);
    ck_assert_int_eq(st_writer_meta(w, "step", "7"), 0);
    ck_assert_int_eq(st_writer_header(w, sizeof(head), head, &need), 0);
    st_writer_free(w);
    ck_assert_int_eq(pwrite(fd, head, sizeof(head), 0), (ssize_t)sizeof(head));
    close(fd);

    st_file *f = st_open(in_dir("place.safetensors"), err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_mem_eq(st_data(f, 0), a, sizeof(a));
    ck_assert_mem_eq(st_data(f, 1), b, sizeof(b));
    ck_assert_str_eq(st_meta(f, "step"), "7");
    st_close(f);

    f = st_open_header(in_dir("place.safetensors"), err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_int_ge(st_fd(f), 0);
    ck_assert_ptr_null(st_data(f, 0));
    ck_assert_uint_eq(st_file_offset(f, 0), sizeof(head));
    ck_assert_uint_eq(st_file_offset(f, 1), sizeof(head) + sizeof(a));
    float got[3];
    ck_assert_int_eq(st_read(f, 0, 4 * 997, got, sizeof(got)), 0);
    ck_assert_mem_eq(got, a + 997, sizeof(got));
    ck_assert_int_eq(st_read(f, 1, 0, got, sizeof(got)), 0);
    ck_assert_mem_eq(got, b, sizeof(b));
    ck_assert_int_eq(st_read(f, 1, 4, got, sizeof(got)), -EINVAL); /* past the tensor */
    ck_assert_str_eq(st_meta(f, "step"), "7");
    st_close(f);

    ck_assert_int_eq(truncate(in_dir("place.safetensors"), (off_t)(sizeof(head) + sizeof(a))), 0);
    f = st_open_header(in_dir("place.safetensors"), err, sizeof(err));
    ck_assert_ptr_null(f);
    ck_assert_msg(strstr(err, "place.safetensors") != NULL, "%s", err);
}
END_TEST

START_TEST(empty_file_round_trip)
{
    st_writer *w = st_writer_new();
    char err[512];
    ck_assert_int_eq(st_writer_write(w, in_dir("e.safetensors"), err, sizeof(err)), 0);
    st_writer_free(w);
    size_t len;
    unsigned char *p = slurp(in_dir("e.safetensors"), &len);
    ck_assert_uint_eq(len, 16);
    ck_assert_mem_eq(p, "\x08\0\0\0\0\0\0\0{}      ", 16);
    free(p);
    st_file *f = st_open(in_dir("e.safetensors"), err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_uint_eq(st_count(f), 0);
    ck_assert_ptr_null(st_meta(f, "x"));
    st_close(f);
}
END_TEST

START_TEST(exact_bytes)
{
    float v[2] = {1.0f, -2.0f};
    st_writer *w = st_writer_new();
    ck_assert_int_eq(st_writer_add_f32(w, "w", (int64_t[]){2}, 1, v, 2), 0);
    ck_assert_int_eq(st_writer_meta(w, "step", "3"), 0);
    char err[512];
    ck_assert_int_eq(st_writer_write(w, in_dir("tiny.safetensors"), err, sizeof(err)), 0);
    st_writer_free(w);

    static const char json[] =
        "{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
        "\"__metadata__\":{\"step\":\"3\"}}";
    /* 82 bytes of JSON padded with six spaces to 88. */
    ck_assert_uint_eq(strlen(json), 82);
    size_t len;
    unsigned char *p = slurp(in_dir("tiny.safetensors"), &len);
    ck_assert_uint_eq(len, 8 + 88 + 8);
    ck_assert_mem_eq(p, "\x58\0\0\0\0\0\0\0", 8);
    ck_assert_mem_eq(p + 8, json, 82);
    ck_assert_mem_eq(p + 90, "      ", 6);
    /* 1.0f and -2.0f, little-endian. */
    ck_assert_mem_eq(p + 96, "\x00\x00\x80\x3f\x00\x00\x00\xc0", 8);
    free(p);
}
END_TEST

/* st_open must refuse path with a message containing want (and the path). */
static void refuse(const char *path, const char *want)
{
    char err[512] = "";
    st_file *f = st_open(path, err, sizeof(err));
    ck_assert_msg(f == NULL, "%s was accepted; expected \"%s\"", path, want);
    ck_assert_msg(strstr(err, path) == err, "message does not start with the path: %s", err);
    ck_assert_msg(strstr(err, want) != NULL, "expected \"%s\" in: %s", want, err);
}

/* A file whose header is json (length field correct), with dlen data bytes. */
static void refuse_header(const char *json, size_t dlen, const char *want)
{
    static const unsigned char zeros[64];
    const char *path = in_dir("bad.safetensors");
    write_raw(path, strlen(json), json, zeros, dlen);
    refuse(path, want);
}

START_TEST(refuse_corrupt)
{
    char err[512];
    const char *good = in_dir("good.safetensors");
    ck_assert_int_eq(write_sample(good, err, sizeof(err)), 0);

    /* Truncated data. */
    size_t len;
    unsigned char *p = slurp(good, &len);
    const char *cut = in_dir("cut.safetensors");
    FILE *f = fopen(cut, "wb");
    fwrite(p, 1, len - 4, f);
    fclose(f);
    refuse(cut, "run past the end of the data section");
    /* Trailing bytes after the last tensor. */
    f = fopen(cut, "wb");
    fwrite(p, 1, len, f);
    fwrite("xxxx", 1, 4, f);
    fclose(f);
    refuse(cut, "data section has 48 bytes but the tensors cover 44");
    free(p);

    /* Header length beyond the file, and beyond the limit. */
    write_raw(in_dir("hl.safetensors"), 1000, "{}", NULL, 0);
    refuse(in_dir("hl.safetensors"), "header length 1000 runs past the end of the file (10 bytes)");
    write_raw(in_dir("hl.safetensors"), 200000000, "{}", NULL, 0);
    refuse(in_dir("hl.safetensors"), "header length 200000000 exceeds the 100000000-byte limit");
    write_raw(in_dir("short.safetensors"), 0, "", NULL, 0);
    FILE *s = fopen(in_dir("short.safetensors"), "wb");
    fwrite("abc", 1, 3, s);
    fclose(s);
    refuse(in_dir("short.safetensors"), "too short for the 8-byte header length");
    refuse(in_dir("does-not-exist"), "No such file or directory");

    /* Overlapping and gapped offsets. */
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                  "\"b\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                  12, "tensor \"b\" data_offsets [4, 12] overlap tensor \"a\" [0, 8]");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}", 8,
                  "gap of 4 bytes before tensor \"a\"");

    /* Bad JSON. */
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}", 8,
                  "bad JSON header: expected ',' or '}', found the end of the header");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},}", 8,
                  "bad JSON header at byte 54: expected a string");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2.0],\"data_offsets\":[0,8]}}", 8,
                  "expected an integer, found a fraction or exponent");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[-2],\"data_offsets\":[0,8]}}", 8,
                  "expected a non-negative integer");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[02],\"data_offsets\":[0,8]}}", 8,
                  "leading zero");
    refuse_header("{\"a\\q\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                  "unknown escape");
    refuse_header("{\"a\\ud800\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                  "unpaired surrogate");
    refuse_header("{\"a\n\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                  "control character in string");
    refuse_header("{\"\xff\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                  "invalid UTF-8");
    refuse_header("{} {}", 0, "trailing characters");
    refuse_header("[1]", 0, "expected '{' at the start of the header");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[99999999999999999999],"
                  "\"data_offsets\":[0,8]}}", 8, "integer too large");

    /* Well-formed JSON that does not describe a valid file. */
    refuse_header("{\"a\":{\"dtype\":\"F33\",\"shape\":[2],\"data_offsets\":[0,8]}}", 8,
                  "tensor \"a\": unknown dtype \"F33\"");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[0,8]}}", 8,
                  "tensor \"a\": 3 elements of F32 need 12 bytes, data_offsets [0, 8] hold 8");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[8,0]}}", 8,
                  "end before they begin");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0]}}", 8,
                  "data_offsets needs two entries, has 1");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2]}}", 8, "tensor \"a\": missing \"data_offsets\"");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8],\"x\":1}}", 8,
                  "tensor \"a\": unknown key \"x\"");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]}}",
                  8, "duplicate key \"dtype\"");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[0,4]},"
                  "\"a\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[4,8]}}",
                  8, "duplicate tensor name \"a\"");
    refuse_header("{\"__metadata__\":{\"k\":1}}", 0, "metadata \"k\": value is not a string");
    refuse_header("{\"__metadata__\":{\"k\":\"1\",\"k\":\"2\"}}", 0, "duplicate metadata key \"k\"");
    refuse_header("{\"__metadata__\":{},\"__metadata__\":{}}", 0, "duplicate \"__metadata__\"");
    refuse_header("{\"a\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1],"
                  "\"data_offsets\":[0,4]}}", 4, "shape has more than 16 entries");

    /* A file from elsewhere: spaces in the JSON, metadata first, unpadded. */
    float v[2] = {3.0f, 4.0f};
    const char *fine = "{ \"__metadata__\" : { \"k\" : \"\\u00e9\\ud83d\\ude00\" } ,\n"
                       "  \"v\" : { \"shape\" : [ 2 ], \"data_offsets\" : [ 0 , 8 ], \"dtype\" : \"F32\" } }";
    write_raw(in_dir("fine.safetensors"), strlen(fine), fine, v, sizeof(v));
    st_file *ok = st_open(in_dir("fine.safetensors"), err, sizeof(err));
    ck_assert_msg(ok != NULL, "%s", err);
    ck_assert_str_eq(st_meta(ok, "k"), "é\xf0\x9f\x98\x80");
    ck_assert_float_eq(st_data(ok, 0)[1], 4.0f);
    st_close(ok);
}
END_TEST

START_TEST(failed_write_keeps_old_file)
{
    char err[512] = "";
    const char *path = in_dir("ckpt.safetensors");
    ck_assert_int_eq(write_sample(path, err, sizeof(err)), 0);
    size_t old_len, len;
    unsigned char *old = slurp(path, &old_len);

    static float big[1 << 16];
    st_writer *w = st_writer_new();
    ck_assert_int_eq(st_writer_add_f32(w, "big", (int64_t[]){1 << 16}, 1, big, 1 << 16), 0);

    /* A write that fails half way: the file size limit stops it at 4 KiB. */
    struct rlimit saved, small = {.rlim_cur = 4096, .rlim_max = RLIM_INFINITY};
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &saved), 0);
    small.rlim_max = saved.rlim_max;
    signal(SIGXFSZ, SIG_IGN);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = st_writer_write(w, path, err, sizeof(err));
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &saved), 0);
    ck_assert_int_eq(rc, -EFBIG);
    ck_assert_msg(strstr(err, "writing") && strstr(err, path), "%s", err);
    ck_assert_int_eq(temp_files_in(dir), 0);
    unsigned char *now = slurp(path, &len);
    ck_assert_uint_eq(len, old_len);
    ck_assert_mem_eq(now, old, len);
    free(now);

    /* A directory that cannot take the temporary file. */
    if (geteuid() != 0) {
        ck_assert_int_eq(chmod(dir, 0555), 0);
        rc = st_writer_write(w, path, err, sizeof(err));
        ck_assert_int_eq(chmod(dir, 0755), 0);
        ck_assert_int_eq(rc, -EACCES);
        ck_assert_msg(strstr(err, "cannot create"), "%s", err);
        now = slurp(path, &len);
        ck_assert_uint_eq(len, old_len);
        ck_assert_mem_eq(now, old, len);
        free(now);
    }
    rc = st_writer_write(w, in_dir("no-such-dir/ckpt.safetensors"), err, sizeof(err));
    ck_assert_int_eq(rc, -ENOENT);
    ck_assert_msg(strstr(err, "cannot create"), "%s", err);
    ck_assert_int_eq(temp_files_in(dir), 0);

    /* And the same writer then succeeds, replacing the old file whole. */
    ck_assert_int_eq(st_writer_write(w, path, err, sizeof(err)), 0);
    st_file *f = st_open(path, err, sizeof(err));
    ck_assert_msg(f != NULL, "%s", err);
    ck_assert_uint_eq(st_count(f), 1);
    ck_assert_uint_eq(st_numel(f, 0), 1 << 16);
    st_close(f);
    ck_assert_int_eq(temp_files_in(dir), 0);
    st_writer_free(w);
    free(old);
}
END_TEST

int main(int argc, char **argv)
{
    if (argc == 3 && strcmp(argv[1], "--write-sample") == 0) {
        char err[512];
        if (write_sample(argv[2], err, sizeof(err)) < 0) {
            fprintf(stderr, "%s\n", err);
            return 1;
        }
        return 0;
    }
    Suite *s = suite_create("safetensors");
    TCase *tc = tcase_create("core");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, round_trip);
    tcase_add_test(tc, empty_file_round_trip);
    tcase_add_test(tc, header_in_place);
    tcase_add_test(tc, exact_bytes);
    tcase_add_test(tc, refuse_corrupt);
    tcase_add_test(tc, failed_write_keeps_old_file);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
