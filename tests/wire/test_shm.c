/* The shared-memory ring (shm.h) within one process, mapped twice: the
 * receiver's mapping opened through /proc/self/fd as a peer opens the
 * sender's; payloads of odd sizes around the ring, the tail skipped when
 * one does not fit before the end; the room the receiver frees; the
 * sender's wait and the receiver's wake; and every reference that is not
 * the next payload refused with the reason. */
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "shm.h"

#define RING (64u << 10)

static void fill(uint8_t *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (uint8_t)(i * 131u + seed * 7u + 3u);
}

/* A sender's ring and the receiver's mapping of it. */
static void pair(shm_ring **tx, shm_ring **rx)
{
    char why[160];
    *tx = shm_ring_create(RING, why, sizeof(why));
    ck_assert_msg(*tx, "%s", why);
    *rx = shm_ring_open((uint32_t)getpid(), shm_ring_fd(*tx), shm_ring_map_len(*tx),
                        shm_ring_token(*tx), SHM_TOKEN_LEN, why, sizeof(why));
    ck_assert_msg(*rx, "%s", why);
    shm_ring_offered(*tx);
}

START_TEST(payloads_round_the_ring)
{
    shm_ring *tx, *rx;
    pair(&tx, &rx);
    ck_assert_uint_eq(shm_ring_size(tx), RING);
    ck_assert_uint_eq(shm_ring_size(rx), RING);
    static uint8_t src[RING], dst[RING];
    char why[160];
    uint64_t total = 0;
    int skips = 0;
    for (unsigned k = 0; k < 40; k++) {
        size_t len = 9000 + (k * 7919u) % 20000; /* odd sizes, several a turn */
        fill(src, len, k);
        uint64_t off, end;
        size_t before = shm_ring_used(tx);
        ck_assert(shm_ring_put(tx, src, len, &off, &end));
        skips += off == 0 && total > 0;
        ck_assert_uint_ge(shm_ring_used(tx), before + len);
        ck_assert_uint_eq(off, 0); /* the ring was empty: from its start */
        bool wake = true;
        memset(dst, 0, len);
        ck_assert_int_eq(shm_ring_take(rx, off, end, dst, len, &wake, why, sizeof(why)), 0);
        ck_assert(!wake);
        ck_assert_msg(memcmp(src, dst, len) == 0, "payload %u differs", k);
        ck_assert_uint_eq(shm_ring_used(tx), 0);
        total = end;
    }
    ck_assert_uint_gt(total, 5 * RING);
    ck_assert_int_gt(skips, 0);
    shm_ring_free(tx);
    shm_ring_free(rx);
}
END_TEST

/* Taking behind: each put after the last, the tail skipped where one does
 * not fit, and from the start again once the ring is empty, counting no
 * room for the tail it skipped then. */
START_TEST(skips_and_rewinds)
{
    shm_ring *tx, *rx;
    pair(&tx, &rx);
    static uint8_t src[RING], dst[RING];
    char why[160];
    uint64_t off[6], end[6];
    bool wake;
    ck_assert(shm_ring_put(tx, src, 25000, &off[0], &end[0]));
    ck_assert(shm_ring_put(tx, src, 25000, &off[1], &end[1]));
    ck_assert_uint_eq(off[0], 0);
    ck_assert_uint_eq(off[1], 25000);
    ck_assert_int_eq(shm_ring_take(rx, off[0], end[0], dst, 25000, &wake, why, sizeof(why)), 0);
    ck_assert(shm_ring_put(tx, src, 25000, &off[2], &end[2]));
    ck_assert_uint_eq(off[2], 0); /* 50000 + 25000 passes the end */
    ck_assert_uint_eq(shm_ring_used(tx), 25000 + (RING - 50000) + 25000);
    ck_assert_int_eq(shm_ring_take(rx, off[1], end[1], dst, 25000, &wake, why, sizeof(why)), 0);
    ck_assert_int_eq(shm_ring_take(rx, off[2], end[2], dst, 25000, &wake, why, sizeof(why)), 0);
    ck_assert_uint_eq(shm_ring_used(tx), 0);
    ck_assert(shm_ring_put(tx, src, 20000, &off[3], &end[3]));
    ck_assert_uint_eq(off[3], 0); /* empty: from the start */
    ck_assert_uint_eq(shm_ring_used(tx), 20000);
    ck_assert(shm_ring_put(tx, src, 30000, &off[4], &end[4]));
    ck_assert_uint_eq(off[4], 20000);
    ck_assert(!shm_ring_put(tx, src, 20000, &off[5], &end[5]));
    ck_assert_int_eq(shm_ring_take(rx, off[3], end[3], dst, 20000, &wake, why, sizeof(why)), 0);
    ck_assert_int_eq(shm_ring_take(rx, off[4], end[4], dst, 30000, &wake, why, sizeof(why)), 0);
    shm_ring_free(tx);
    shm_ring_free(rx);
}
END_TEST

/* The sender never overwrites what the receiver has not taken; it asks to
 * be woken, and the next take says so once. */
START_TEST(room_and_wake)
{
    shm_ring *tx, *rx;
    pair(&tx, &rx);
    static uint8_t src[RING], dst[RING];
    char why[160];
    uint64_t off[3], end[3];
    fill(src, 30000, 1);
    ck_assert(shm_ring_put(tx, src, 30000, &off[0], &end[0]));
    ck_assert(shm_ring_put(tx, src, 30000, &off[1], &end[1]));
    ck_assert(!shm_ring_put(tx, src, 30000, &off[2], &end[2])); /* 4 KiB left */
    ck_assert(!shm_ring_put(tx, src, RING + 1, &off[2], &end[2]));
    ck_assert_uint_eq(shm_ring_wait(tx), 60000);
    bool wake;
    ck_assert_int_eq(shm_ring_take(rx, off[0], end[0], dst, 30000, &wake, why, sizeof(why)), 0);
    ck_assert(wake);
    ck_assert_uint_eq(shm_ring_used(tx), 30000);
    /* now it fits, at the start: the tail is skipped */
    fill(src, 30000, 2);
    ck_assert(shm_ring_put(tx, src, 30000, &off[2], &end[2]));
    ck_assert_uint_eq(off[2], 0);
    ck_assert_int_eq(shm_ring_take(rx, off[1], end[1], dst, 30000, &wake, why, sizeof(why)), 0);
    ck_assert(!wake); /* woken once */
    ck_assert_int_eq(shm_ring_take(rx, off[2], end[2], dst, 30000, &wake, why, sizeof(why)), 0);
    ck_assert(memcmp(src, dst, 30000) == 0);
    shm_ring_free(tx);
    shm_ring_free(rx);
}
END_TEST

START_TEST(references_checked)
{
    shm_ring *tx, *rx;
    pair(&tx, &rx);
    static uint8_t src[RING], dst[RING];
    char why[160];
    bool wake;
    uint64_t off, end;
    ck_assert(shm_ring_put(tx, src, 1000, &off, &end));
    /* not where it lies, past the end of the ring, overlapping, empty */
    ck_assert_int_eq(shm_ring_take(rx, 8, end, dst, 1000, &wake, why, sizeof(why)), -EPROTO);
    ck_assert_msg(strstr(why, "not the next payload"), "%s", why);
    ck_assert_int_eq(shm_ring_take(rx, off, end + 8, dst, 1000, &wake, why, sizeof(why)), -EPROTO);
    ck_assert_int_eq(shm_ring_take(rx, RING - 10, RING + 990, dst, 1000, &wake, why, sizeof(why)),
                     -EPROTO);
    ck_assert_int_eq(shm_ring_take(rx, off, end, dst, 0, &wake, why, sizeof(why)), -EPROTO);
    ck_assert_int_eq(shm_ring_take(rx, off, end, dst, RING + 1, &wake, why, sizeof(why)), -EPROTO);
    ck_assert_int_eq(shm_ring_take(rx, off, end, dst, 1000, &wake, why, sizeof(why)), 0);
    /* the same payload twice */
    ck_assert_int_eq(shm_ring_take(rx, off, end, dst, 1000, &wake, why, sizeof(why)), -EPROTO);
    /* a turn of the ring skipped */
    ck_assert_int_eq(shm_ring_take(rx, 0, 2 * RING + 1000, dst, 1000, &wake, why, sizeof(why)),
                     -EPROTO);
    shm_ring_free(tx);
    shm_ring_free(rx);
}
END_TEST

START_TEST(offers_checked)
{
    char why[160];
    ck_assert_ptr_null(shm_ring_create(RING - 1, why, sizeof(why)));
    shm_ring *tx = shm_ring_create(RING, why, sizeof(why));
    ck_assert_ptr_nonnull(tx);
    uint8_t token[SHM_TOKEN_LEN];
    memcpy(token, shm_ring_token(tx), sizeof(token));
    token[5] ^= 1;
    ck_assert_ptr_null(shm_ring_open((uint32_t)getpid(), shm_ring_fd(tx), shm_ring_map_len(tx),
                                     token, SHM_TOKEN_LEN, why, sizeof(why)));
    ck_assert_msg(strstr(why, "another token"), "%s", why);
    ck_assert_ptr_null(shm_ring_open((uint32_t)getpid(), shm_ring_fd(tx), shm_ring_map_len(tx) * 2,
                                     shm_ring_token(tx), SHM_TOKEN_LEN, why, sizeof(why)));
    ck_assert_msg(strstr(why, "is not the"), "%s", why);
    ck_assert_ptr_null(shm_ring_open((uint32_t)getpid(), 9999, shm_ring_map_len(tx),
                                     shm_ring_token(tx), SHM_TOKEN_LEN, why, sizeof(why)));
    ck_assert_msg(strstr(why, "cannot open /proc/"), "%s", why);
    ck_assert_ptr_null(shm_ring_open((uint32_t)getpid(), shm_ring_fd(tx), 100, shm_ring_token(tx),
                                     SHM_TOKEN_LEN, why, sizeof(why)));
    ck_assert_ptr_null(shm_ring_open((uint32_t)getpid(), shm_ring_fd(tx), shm_ring_map_len(tx),
                                     shm_ring_token(tx), 8, why, sizeof(why)));
    shm_ring_free(tx);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("shm");
    TCase *t = tcase_create("ring");
    tcase_add_test(t, payloads_round_the_ring);
    tcase_add_test(t, room_and_wake);
    tcase_add_test(t, skips_and_rewinds);
    tcase_add_test(t, references_checked);
    tcase_add_test(t, offers_checked);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
