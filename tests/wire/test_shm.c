/* The shared-memory ring (shm.h) within one process, mapped twice: the
 * receiver's mapping opened through /proc/self/fd as a peer opens the
 * sender's; payloads of odd sizes around the ring, the tail skipped when
 * one does not fit before the end; the room the receiver frees; the
 * sender's wait and the receiver's wake; and every reference that is not
 * the next payload refused with the reason. A shared ring: readers
 * attached at different times, each taking every payload put after it
 * was attached, the room the slowest leaves, and a slot given back. */
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

/* A reader of slot `slot` of the shared ring tx. */
static shm_ring *reader(shm_ring *tx, int slot)
{
    char why[160];
    shm_ring *rx = shm_ring_open_slot((uint32_t)getpid(), shm_ring_fd(tx), shm_ring_map_len(tx),
                                      shm_ring_token(tx), SHM_TOKEN_LEN, slot, why, sizeof(why));
    ck_assert_msg(rx, "%s", why);
    return rx;
}

START_TEST(shared_ring_readers)
{
    char why[160];
    static uint8_t src[RING], dst[RING];
    uint64_t off[8], end[8];
    bool wake;
    shm_ring *one = shm_ring_create(RING, why, sizeof(why)); /* a connection's: no slots */
    ck_assert_int_eq(shm_ring_reserve(one), -1);
    shm_ring_free(one);
    shm_ring *tx = shm_ring_create_shared(RING, why, sizeof(why));
    ck_assert_msg(tx, "%s", why);
    /* no reader yet: a put counts no room held */
    ck_assert(!shm_ring_has_readers(tx));
    fill(src, 20000, 0);
    ck_assert(shm_ring_put(tx, src, 20000, &off[0], &end[0]));
    ck_assert_uint_eq(shm_ring_used(tx), 0);
    int a = shm_ring_reserve(tx), b = shm_ring_reserve(tx);
    ck_assert_int_eq(a, 0);
    ck_assert_int_eq(b, 1);
    shm_ring *ra = reader(tx, a), *rb = reader(tx, b);
    /* a reads from the next put on; b is offered but not attached yet */
    shm_ring_attach(tx, a);
    ck_assert(shm_ring_has_readers(tx));
    fill(src, 20000, 1);
    ck_assert(shm_ring_put(tx, src, 20000, &off[1], &end[1]));
    ck_assert_uint_eq(shm_ring_used(tx), 20000);
    shm_ring_attach(tx, b);
    fill(src + 20000, 20000, 2);
    ck_assert(shm_ring_put(tx, src + 20000, 20000, &off[2], &end[2]));
    ck_assert_uint_eq(shm_ring_used(tx), 40000);
    /* b's first payload is the one put after it was attached; the one
     * before is not its to take */
    ck_assert_int_eq(shm_ring_take(rb, off[1], end[1], dst, 20000, &wake, why, sizeof(why)),
                     -EPROTO);
    ck_assert_int_eq(shm_ring_take(rb, off[2], end[2], dst, 20000, &wake, why, sizeof(why)), 0);
    ck_assert(!wake);
    ck_assert(memcmp(dst, src + 20000, 20000) == 0);
    /* a is the slowest: the room is what it leaves */
    ck_assert_uint_eq(shm_ring_used(tx), 40000);
    ck_assert(!shm_ring_put(tx, src, 30000, &off[3], &end[3]));
    ck_assert_int_eq(shm_ring_take(ra, off[1], end[1], dst, 20000, &wake, why, sizeof(why)), 0);
    ck_assert(memcmp(dst, src, 20000) == 0);
    ck_assert_uint_eq(shm_ring_used(tx), 20000);
    ck_assert_int_eq(shm_ring_take(ra, off[2], end[2], dst, 20000, &wake, why, sizeof(why)), 0);
    ck_assert_uint_eq(shm_ring_used(tx), 0);
    /* both take every payload, around the ring */
    for (unsigned k = 0; k < 12; k++) {
        size_t len = 15000 + k * 1111u;
        fill(src, len, 10 + k);
        ck_assert(shm_ring_put(tx, src, len, &off[4], &end[4]));
        shm_ring *r[2] = {ra, rb};
        for (int i = 0; i < 2; i++) {
            memset(dst, 0, len);
            ck_assert_int_eq(shm_ring_take(r[i], off[4], end[4], dst, len, &wake, why,
                                           sizeof(why)), 0);
            ck_assert_msg(memcmp(dst, src, len) == 0, "payload %u, reader %d", k, i);
        }
    }
    ck_assert_uint_gt(end[4], 2 * RING);
    /* a gone: its slot counts no more, and is the next one reserved */
    fill(src, 30000, 30);
    ck_assert(shm_ring_put(tx, src, 30000, &off[5], &end[5]));
    shm_ring_release(tx, a);
    ck_assert_int_eq(shm_ring_take(rb, off[5], end[5], dst, 30000, &wake, why, sizeof(why)), 0);
    ck_assert_uint_eq(shm_ring_used(tx), 0);
    ck_assert_int_eq(shm_ring_reserve(tx), a);
    /* every slot held: none left */
    int held = 2; /* a and b */
    while (shm_ring_reserve(tx) >= 0)
        held++;
    ck_assert_int_eq(held, SHM_READERS);
    ck_assert_ptr_null(shm_ring_open_slot((uint32_t)getpid(), shm_ring_fd(tx),
                                          shm_ring_map_len(tx), shm_ring_token(tx), SHM_TOKEN_LEN,
                                          SHM_READERS, why, sizeof(why)));
    ck_assert_msg(strstr(why, "reader slot"), "%s", why);
    /* references keep it mapped */
    shm_ring *again = shm_ring_ref(tx);
    shm_ring_free(tx);
    ck_assert_uint_eq(shm_ring_size(again), RING);
    shm_ring_free(again);
    shm_ring_free(ra);
    shm_ring_free(rb);
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
    tcase_add_test(t, shared_ring_readers);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
