/* swarmx's queues (swarmx/queue.c): the children's gradient chunks summed
 * in child order whatever order they arrive in, bit for bit the plain
 * sequential sum; streams that diverge refused; a paused child resumed
 * when its queue drains; several shards' weight chunks merged by seq. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "bf16.h"
#include "queue.h"
#include "sstream.h"

#define KIDS 3
#define CHUNKS 4
#define ELEMS 13 /* not a multiple of four: the vector loop and its tail */

static swx_buf *grad(uint32_t tensor, uint64_t offset, uint64_t count, float base)
{
    swx_buf *b = swx_buf_new((uint32_t)(count * sizeof(float)));
    ck_assert_ptr_nonnull(b);
    memset(&b->hdr, 0, sizeof(b->hdr));
    appliance__grad_chunk__init(&b->hdr);
    b->hdr.tensor_id = tensor;
    b->hdr.offset = offset;
    b->hdr.count = count;
    b->hdr.step = 3;
    float *v = (float *)b->data;
    for (uint64_t e = 0; e < count; e++) /* values whose sum depends on its order */
        v[e] = base * (1.0f + 1e-3f * (float)e) + 1e7f * (float)((e + (uint64_t)base) % 3 == 0);
    return b;
}

static int resumed[KIDS];

static void on_resume(swx_child *k, void *arg)
{
    swx_child *kids = arg;
    resumed[k - kids]++;
}

START_TEST(sum_in_child_order)
{
    swx_child kids[KIDS];
    memset(kids, 0, sizeof(kids));
    memset(resumed, 0, sizeof(resumed));
    char why[256];
    swx_buf *sum;
    /* child 2 sends everything first, then child 0, then child 1: nothing
     * can be summed until every child has its chunk */
    int order[KIDS] = {2, 0, 1};
    for (int o = 0; o < KIDS; o++) {
        int k = order[o];
        for (int c = 0; c < CHUNKS; c++)
            ck_assert(!swx_child_push(&kids[k], grad(7, (uint64_t)c * ELEMS, ELEMS,
                                                     (float)(k * 10 + c) + 0.1f)));
        if (o < KIDS - 1)
            ck_assert_int_eq(swx_reduce_take(kids, KIDS, &sum, false, on_resume, kids, why, sizeof(why)), 0);
    }
    for (int c = 0; c < CHUNKS; c++) {
        ck_assert_int_eq(swx_reduce_take(kids, KIDS, &sum, false, on_resume, kids, why, sizeof(why)), 1);
        ck_assert_uint_eq(sum->hdr.offset, (uint64_t)c * ELEMS);
        /* the reference: child 0 + child 1 + child 2, one float at a time */
        swx_buf *r[KIDS];
        for (int k = 0; k < KIDS; k++)
            r[k] = grad(7, (uint64_t)c * ELEMS, ELEMS, (float)(k * 10 + c) + 0.1f);
        const float *s = (const float *)sum->data;
        for (int e = 0; e < ELEMS; e++) {
            float want = ((const float *)r[0]->data)[e];
            for (int k = 1; k < KIDS; k++)
                want += ((const float *)r[k]->data)[e];
            ck_assert_msg(memcmp(&s[e], &want, sizeof(float)) == 0, "chunk %d element %d: %.9g != %.9g",
                          c, e, s[e], want);
        }
        for (int k = 0; k < KIDS; k++)
            swx_buf_unref(r[k]);
        swx_buf_unref(sum);
    }
    ck_assert_int_eq(swx_reduce_take(kids, KIDS, &sum, false, on_resume, kids, why, sizeof(why)), 0);
    for (int k = 0; k < KIDS; k++)
        ck_assert_ptr_null(kids[k].head);
}
END_TEST

/* Mixed precision: bfloat16 chunks widened, summed in float32 in child
 * order, rounded once. */
START_TEST(sum_bf16)
{
    swx_child kids[KIDS];
    memset(kids, 0, sizeof(kids));
    char why[256];
    float want[ELEMS] = {0};
    for (int k = 0; k < KIDS; k++) {
        float v[ELEMS];
        for (int e = 0; e < ELEMS; e++)
            v[e] = (float)(k + 1) * 0.3f + (float)e * 1e-2f - (k == 2 ? 1e3f : 0.0f);
        swx_buf *b = swx_buf_new(ELEMS * sizeof(uint16_t));
        ck_assert_ptr_nonnull(b);
        appliance__grad_chunk__init(&b->hdr);
        b->hdr.count = ELEMS;
        b->hdr.step = 3;
        bf16_pack((uint16_t *)b->data, v, ELEMS);
        float w[ELEMS];
        bf16_unpack(w, (const uint16_t *)b->data, ELEMS);
        for (int e = 0; e < ELEMS; e++)
            want[e] += w[e];
        swx_child_push(&kids[k], b);
    }
    swx_buf *sum;
    ck_assert_int_eq(swx_reduce_take(kids, KIDS, &sum, true, NULL, NULL, why, sizeof(why)), 1);
    uint16_t packed[ELEMS];
    bf16_pack(packed, want, ELEMS);
    ck_assert_mem_eq(sum->data, packed, sizeof(packed));
    swx_buf_unref(sum);
}
END_TEST

/* A packed chunk (sstream.h) of child k: 40 elements, 0, 9, 17 and 39 kept
 * (or 0, 9, 18, 39 with other_mask), their values k + 0.25 * i. */
static swx_buf *packed(int k, bool other_mask)
{
    uint8_t mask[40] = {0};
    float dense[40] = {0};
    int at[4] = {0, 9, other_mask ? 18 : 17, 39};
    for (int i = 0; i < 4; i++) {
        mask[at[i]] = 1;
        dense[at[i]] = (float)k + 0.25f * (float)i;
    }
    uint64_t kept;
    uint32_t pk = sstream_choose(mask, 40, 4, &kept);
    ck_assert_uint_eq(pk, SSTREAM_BITMASK); /* (8 bytes of bits, as 4 positions would take) */
    uint64_t bytes = sstream_bytes(pk, 40, kept, 4);
    swx_buf *b = swx_buf_new((uint32_t)bytes);
    ck_assert_ptr_nonnull(b);
    appliance__grad_chunk__init(&b->hdr);
    b->hdr.count = 40;
    b->hdr.total = 40;
    b->hdr.step = 3;
    b->hdr.packing = (Appliance__Packing)pk;
    b->hdr.kept = kept;
    sstream_pack(pk, mask, dense, 40, kept, 4, b->data);
    return b;
}

/* Packed gradients: the values behind the children's common index summed
 * in child order; another index is a diverging stream. */
START_TEST(sum_packed)
{
    swx_child kids[KIDS];
    memset(kids, 0, sizeof(kids));
    char why[256];
    for (int k = 0; k < KIDS; k++)
        swx_child_push(&kids[k], packed(k, false));
    swx_buf *sum;
    ck_assert_int_eq(swx_reduce_take(kids, KIDS, &sum, false, NULL, NULL, why, sizeof(why)), 1);
    float out[40];
    sstream_expand((uint32_t)sum->hdr.packing, 40, sum->hdr.kept, 4, sum->data, out);
    for (int e = 0; e < 40; e++) {
        int i = e == 0 ? 0 : e == 9 ? 1 : e == 17 ? 2 : e == 39 ? 3 : -1;
        float want = i < 0 ? 0.0f : (0.0f + 0.25f * (float)i) + (1.0f + 0.25f * (float)i) +
                                        (2.0f + 0.25f * (float)i);
        ck_assert_msg(out[e] == want, "element %d: %g, want %g", e, out[e], want);
    }
    swx_buf_unref(sum);
    swx_child_push(&kids[0], packed(0, false));
    swx_child_push(&kids[1], packed(1, true));
    swx_child_push(&kids[2], packed(2, false));
    ck_assert_int_eq(swx_reduce_take(kids, KIDS, &sum, false, NULL, NULL, why, sizeof(why)), -EPROTO);
    ck_assert_str_eq(why, "gradient streams diverge: child 1 packed tensor 0 [0, +40) with another "
                          "mask than child 0 (bitmask of 4 kept, child 0 bitmask of 4)");
    for (int k = 0; k < KIDS; k++)
        swx_buf_unref(kids[k].head);
}
END_TEST

START_TEST(diverging_streams)
{
    swx_child kids[2];
    memset(kids, 0, sizeof(kids));
    char why[256];
    swx_buf *sum;
    swx_child_push(&kids[0], grad(1, 0, 4, 1.0f));
    swx_child_push(&kids[1], grad(2, 0, 4, 1.0f));
    ck_assert_int_eq(swx_reduce_take(kids, 2, &sum, false, NULL, NULL, why, sizeof(why)), -EPROTO);
    ck_assert_str_eq(why, "gradient streams diverge: child 1 sent tensor 2 offset 0, child 0 tensor 1 "
                          "offset 0");
    for (int k = 0; k < 2; k++)
        swx_buf_unref(kids[k].head);
}
END_TEST

START_TEST(paused_child_resumed)
{
    swx_child kids[2];
    memset(kids, 0, sizeof(kids));
    memset(resumed, 0, sizeof(resumed));
    char why[256];
    swx_buf *sum;
    bool full = false;
    for (int c = 0; c < SWX_CHILD_QUEUE_MAX; c++)
        full = swx_child_push(&kids[0], grad(1, (uint64_t)c * 4, 4, 1.0f));
    ck_assert(full); /* the child is paused */
    swx_child_push(&kids[1], grad(1, 0, 4, 2.0f));
    ck_assert_int_eq(swx_reduce_take(kids, 2, &sum, false, on_resume, kids, why, sizeof(why)), 1);
    swx_buf_unref(sum);
    ck_assert_int_eq(resumed[0], 1);
    ck_assert_int_eq(resumed[1], 0);
    while (kids[0].head) {
        swx_buf *b = kids[0].head;
        kids[0].head = b->next;
        swx_buf_unref(b);
    }
}
END_TEST

START_TEST(merge_by_seq)
{
    swx_up ups[3];
    memset(ups, 0, sizeof(ups));
    /* shard k holds seqs k, k + 3, k + 6, ...; they arrive shard by shard */
    for (int k = 2; k >= 0; k--)
        for (uint64_t s = (uint64_t)k; s < 12; s += 3) {
            swx_buf *b = swx_buf_new(4);
            appliance__weight_chunk__init(&b->whdr);
            b->whdr.seq = s;
            swx_merge_push(&ups[k], b);
        }
    size_t from;
    bool unpause;
    for (uint64_t s = 0; s < 12; s++) {
        swx_buf *b = swx_merge_take(ups, 3, s, &from, &unpause);
        ck_assert_ptr_nonnull(b);
        ck_assert_uint_eq(b->whdr.seq, s);
        ck_assert_uint_eq(from, s % 3);
        ck_assert(!unpause);
        swx_buf_unref(b);
    }
    ck_assert_ptr_null(swx_merge_take(ups, 3, 12, &from, &unpause));
    /* a gap: seq 13 waits for seq 12 */
    swx_buf *b = swx_buf_new(4);
    appliance__weight_chunk__init(&b->whdr);
    b->whdr.seq = 13;
    swx_merge_push(&ups[1], b);
    ck_assert_ptr_null(swx_merge_take(ups, 3, 12, &from, &unpause));
    swx_buf_unref(swx_merge_take(ups, 3, 13, &from, &unpause));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("swarmx-queue");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, sum_in_child_order);
    tcase_add_test(tc, diverging_streams);
    tcase_add_test(tc, sum_bf16);
    tcase_add_test(tc, sum_packed);
    tcase_add_test(tc, paused_child_resumed);
    tcase_add_test(tc, merge_by_seq);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
