/* Frame encoding and the incremental reader: every split point, every limit. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "frame.h"

typedef struct got {
    int frames;
    Appliance__Envelope__MsgCase last_case;
    uint64_t last_step;
    uint8_t payload[4096];
    uint32_t payload_len;
    uint8_t *direct;         /* when set, payload_dest returns it */
} got;

static void *dest(void *ctx, const Appliance__Envelope *env, uint32_t len, int *err)
{
    got *g = ctx;
    return g->direct;
}

static int on_frame(void *ctx, Appliance__Envelope *env, uint8_t *payload, uint32_t len)
{
    got *g = ctx;
    g->frames++;
    g->last_case = env->msg_case;
    if (env->msg_case == APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK)
        g->last_step = env->weight_chunk->step;
    g->payload_len = len;
    if (len && payload != g->direct)
        memcpy(g->payload, payload, len);
    return 0;
}

/* A weight chunk frame with a 1000-byte payload, into buf; returns its length. */
static size_t make_frame(uint8_t *buf, uint64_t step, uint32_t plen)
{
    Appliance__WeightChunk w = APPLIANCE__WEIGHT_CHUNK__INIT;
    w.step = step;
    w.tensor_id = 7;
    w.count = plen / 4;
    Appliance__Envelope env = APPLIANCE__ENVELOPE__INIT;
    env.msg_case = APPLIANCE__ENVELOPE__MSG_WEIGHT_CHUNK;
    env.weight_chunk = &w;
    size_t hlen;
    uint8_t *head = frame_encode(&env, plen, &hlen);
    memcpy(buf, head, hlen);
    free(head);
    for (uint32_t i = 0; i < plen; i++)
        buf[hlen + i] = (uint8_t)(i * 7 + step);
    return hlen + plen;
}

static const frame_limits lim = {.max_header = 1024, .max_payload = 2048};

START_TEST(split_at_every_byte)
{
    uint8_t buf[8192];
    size_t n1 = make_frame(buf, 3, 1000);
    size_t n2 = make_frame(buf + n1, 4, 0);
    size_t n = n1 + n2;
    for (size_t cut = 0; cut <= n; cut++) {
        got g = {0};
        frame_sink sink = {.payload_dest = dest, .on_frame = on_frame, .ctx = &g};
        frame_reader r;
        frame_reader_init(&r, &lim, &sink);
        ck_assert_int_eq(frame_reader_feed(&r, buf, cut), 0);
        ck_assert_int_eq(frame_reader_feed(&r, buf + cut, n - cut), 0);
        ck_assert_int_eq(g.frames, 2);
        ck_assert_uint_eq(g.last_step, 4);
        frame_reader_deinit(&r);
    }
    /* One byte at a time, payload checked. */
    got g = {0};
    frame_sink sink = {.payload_dest = dest, .on_frame = on_frame, .ctx = &g};
    frame_reader r;
    frame_reader_init(&r, &lim, &sink);
    for (size_t i = 0; i < n1; i++)
        ck_assert_int_eq(frame_reader_feed(&r, buf + i, 1), 0);
    ck_assert_int_eq(g.frames, 1);
    ck_assert_uint_eq(g.payload_len, 1000);
    ck_assert_int_eq(memcmp(g.payload, buf + n1 - 1000, 1000), 0);
    frame_reader_deinit(&r);
}
END_TEST

START_TEST(payload_goes_to_destination)
{
    uint8_t buf[4096];
    size_t n = make_frame(buf, 9, 1000);
    uint8_t target[1000];
    memset(target, 0, sizeof(target));
    got g = {.direct = target};
    frame_sink sink = {.payload_dest = dest, .on_frame = on_frame, .ctx = &g};
    frame_reader r;
    frame_reader_init(&r, &lim, &sink);
    size_t head = n - 1000;
    ck_assert_int_eq(frame_reader_feed(&r, buf, head + 10), 0);
    uint8_t *dst;
    size_t want;
    ck_assert(frame_reader_direct(&r, &dst, &want));
    ck_assert_ptr_eq(dst, target + 10);
    ck_assert_uint_eq(want, 990);
    memcpy(dst, buf + head + 10, 990); /* as a socket read would */
    ck_assert_int_eq(frame_reader_advance(&r, 990), 0);
    ck_assert_int_eq(g.frames, 1);
    ck_assert_int_eq(memcmp(target, buf + head, 1000), 0);
    ck_assert(!frame_reader_direct(&r, &dst, &want));
    frame_reader_deinit(&r);
}
END_TEST

static int feed_expect(const uint8_t *buf, size_t n, const char *text)
{
    got g = {0};
    frame_sink sink = {.payload_dest = dest, .on_frame = on_frame, .ctx = &g};
    frame_reader r;
    frame_reader_init(&r, &lim, &sink);
    int rc = frame_reader_feed(&r, buf, n);
    ck_assert_msg(strstr(r.error_text, text), "error \"%s\" lacks \"%s\"", r.error_text, text);
    /* A broken stream stays broken. */
    ck_assert_int_eq(frame_reader_feed(&r, buf, n), rc);
    ck_assert_int_eq(g.frames, 0);
    frame_reader_deinit(&r);
    return rc;
}

START_TEST(bad_magic)
{
    uint8_t buf[4096];
    size_t n = make_frame(buf, 1, 10);
    buf[0] ^= 0xff;
    ck_assert_int_eq(feed_expect(buf, n, "bad magic"), -EBADMSG);
}
END_TEST

START_TEST(wrong_version)
{
    uint8_t buf[4096];
    size_t n = make_frame(buf, 1, 10);
    buf[4] = 9;
    ck_assert_int_eq(feed_expect(buf, n, "protocol version 9, expected 1"), -EPROTONOSUPPORT);
}
END_TEST

/* A payload in shared memory: its 16-byte place, split anywhere, reaches
 * the sink's shm_take with the destination; refused where no ring was
 * agreed, and an unknown flag is a malformed prefix. */
static uint64_t shm_seen_off, shm_seen_end;
static uint16_t shm_seen_flags;

static int shm_take(void *ctx, uint64_t off, uint64_t end, uint8_t *dst, uint32_t len,
                    uint16_t flags, char *why, size_t whylen)
{
    (void)ctx, (void)why, (void)whylen;
    shm_seen_off = off;
    shm_seen_end = end;
    shm_seen_flags = flags;
    memset(dst, 0x5a, len);
    return 0;
}

START_TEST(shm_payload_place)
{
    uint8_t buf[4096];
    size_t n = make_frame(buf, 5, 1000) - 1000; /* prefix and header */
    buf[6] = FRAME_FLAG_SHM;
    for (int i = 0; i < 8; i++) {
        buf[n + (size_t)i] = (uint8_t)(UINT64_C(0x1234) >> (8 * i));
        buf[n + 8 + (size_t)i] = (uint8_t)(UINT64_C(0x10000) >> (8 * i));
    }
    n += FRAME_SHM_REF_LEN;
    for (size_t cut = 0; cut <= 2 * n + 1; cut++) {
        /* past n: the same with FRAME_FLAG_SHARED (another ring) */
        buf[6] = (uint8_t)(cut > n ? FRAME_FLAG_SHM | FRAME_FLAG_SHARED : FRAME_FLAG_SHM);
        got g = {0};
        frame_sink sink = {.payload_dest = dest, .on_frame = on_frame, .shm_take = shm_take,
                           .ctx = &g};
        frame_reader r;
        frame_reader_init(&r, &lim, &sink);
        r.shm_ok = true;
        shm_seen_off = shm_seen_end = 0;
        size_t at = cut > n ? cut - n - 1 : cut;
        ck_assert_int_eq(frame_reader_feed(&r, buf, at), 0);
        ck_assert_int_eq(frame_reader_feed(&r, buf + at, n - at), 0);
        ck_assert_int_eq(g.frames, 1);
        ck_assert_uint_eq(g.payload_len, 1000);
        ck_assert_uint_eq(g.payload[999], 0x5a);
        ck_assert_uint_eq(shm_seen_off, 0x1234);
        ck_assert_uint_eq(shm_seen_end, 0x10000);
        ck_assert_uint_eq(shm_seen_flags, buf[6]);
        frame_reader_deinit(&r);
    }
    buf[6] = FRAME_FLAG_SHM;
    ck_assert_int_eq(feed_expect(buf, n, "no ring was agreed"), -EPROTO);
    buf[6] = FRAME_FLAG_SHARED; /* a shared ring's payload, not said to be in shared memory */
    ck_assert_int_eq(feed_expect(buf, n, "malformed frame prefix (flags 0x0002)"), -EPROTO);
    buf[6] = 4;
    ck_assert_int_eq(feed_expect(buf, n, "malformed frame prefix (flags 0x0004)"), -EPROTO);
}
END_TEST

START_TEST(oversized_lengths)
{
    uint8_t buf[FRAME_PREFIX_LEN];
    frame_prefix_encode(buf, 2000, 0);
    ck_assert_int_eq(feed_expect(buf, sizeof(buf), "header 2000 bytes (limit 1024)"), -EMSGSIZE);
    frame_prefix_encode(buf, 10, 0xffffffffu);
    ck_assert_int_eq(feed_expect(buf, sizeof(buf), "payload 4294967295 bytes (limit 2048)"),
                     -EMSGSIZE);
    frame_prefix_encode(buf, 0, 0);
    ck_assert_int_eq(feed_expect(buf, sizeof(buf), "malformed"), -EPROTO);
}
END_TEST

START_TEST(garbage_header)
{
    uint8_t buf[64];
    frame_prefix_encode(buf, 8, 0);
    memset(buf + FRAME_PREFIX_LEN, 0xff, 8);
    ck_assert_int_eq(feed_expect(buf, FRAME_PREFIX_LEN + 8, "not a valid Envelope"), -EBADMSG);
    /* A valid protobuf with no known message: field 99, varint 1. */
    frame_prefix_encode(buf, 3, 0);
    buf[FRAME_PREFIX_LEN] = (99 << 3) & 0xff;
    buf[FRAME_PREFIX_LEN] = 0x98; /* tag 99, wire type 0: 0x98 0x06 */
    buf[FRAME_PREFIX_LEN + 1] = 0x06;
    buf[FRAME_PREFIX_LEN + 2] = 0x01;
    ck_assert_int_eq(feed_expect(buf, FRAME_PREFIX_LEN + 3, "unknown message type"), -ENOMSG);
}
END_TEST

/* protobuf-c reads an over-long key naming field 0 into an unknown field
 * and writes it back as a key it refuses: a daemon that kept such a plan
 * could not copy it. The reader refuses the header instead. */
START_TEST(field_zero_refused)
{
    /* Envelope { grad_chunk (23) { step: 1, <key 0x80 0x00: field 0, varint> 7 } } */
    static const uint8_t bad[] = {0xba, 0x01, 0x05, 0x08, 0x01, 0x80, 0x00, 0x07};
    static const uint8_t good[] = {0xba, 0x01, 0x05, 0x08, 0x01, 0xf8, 0x07, 0x07};
    ck_assert_ptr_null(frame_envelope_unpack(bad, sizeof(bad)));
    Appliance__Envelope *env = frame_envelope_unpack(good, sizeof(good)); /* field 127: kept */
    ck_assert_ptr_nonnull(env);
    ck_assert_uint_eq(env->grad_chunk->base.n_unknown_fields, 1);
    appliance__envelope__free_unpacked(env, NULL);
    uint8_t buf[64];
    frame_prefix_encode(buf, sizeof(bad), 0);
    memcpy(buf + FRAME_PREFIX_LEN, bad, sizeof(bad));
    ck_assert_int_eq(feed_expect(buf, FRAME_PREFIX_LEN + sizeof(bad), "not a valid Envelope"), -EBADMSG);
}
END_TEST

START_TEST(truncated_payload)
{
    uint8_t buf[4096];
    size_t n = make_frame(buf, 5, 1000);
    got g = {0};
    frame_sink sink = {.payload_dest = dest, .on_frame = on_frame, .ctx = &g};
    frame_reader r;
    frame_reader_init(&r, &lim, &sink);
    ck_assert_int_eq(frame_reader_feed(&r, buf, n - 1), 0);
    ck_assert_int_eq(g.frames, 0); /* nothing delivered until the last byte */
    ck_assert_int_eq(r.state, FRAME_READ_PAYLOAD);
    frame_reader_deinit(&r); /* frees the half-read frame: ASan checks */
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("frame");
    TCase *t = tcase_create("reader");
    tcase_add_test(t, split_at_every_byte);
    tcase_add_test(t, payload_goes_to_destination);
    tcase_add_test(t, shm_payload_place);
    tcase_add_test(t, bad_magic);
    tcase_add_test(t, wrong_version);
    tcase_add_test(t, oversized_lengths);
    tcase_add_test(t, garbage_header);
    tcase_add_test(t, field_zero_refused);
    tcase_add_test(t, truncated_payload);
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
