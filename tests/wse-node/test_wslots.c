/* Weight Streaming slots: where each layer's weights land, when a slot may
 * be reused, and which gradients must have left before a slot is reused. */
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "mlp.h"
#include "wslots.h"

/* tensors: 0 fc1.weight (8x4), 1 fc1.bias, 2 fc2.weight (6x8), 3 fc2.bias, 4 fc3.weight (3x6), 5 fc3.bias */
static const uint32_t fwd[] = {0, 1, 2, 3, 4, 5};
static const uint32_t bwd[] = {4, 5, 2, 3};

/* Receives a whole tensor in one chunk; returns whether the next is blocked. */
static bool receive(wslots *w, uint32_t t, bool backward, const model *m)
{
    bool blocked;
    float *p = wslots_dest(w, t, backward, 0, m->tensors[t].elems, &blocked);
    ck_assert_msg(p != NULL, "tensor %u refused (blocked %d)", t, blocked);
    return wslots_received(w, m->tensors[t].elems);
}

/* A pass's first arrivals, fc1 and fc2: both slots in use, fc3 must wait. */
static void receive_fc1_fc2(wslots *w, const model *m)
{
    ck_assert(!receive(w, 0, false, m));
    ck_assert(!receive(w, 1, false, m));
    ck_assert(!receive(w, 2, false, m));
    ck_assert(receive(w, 3, false, m));
}

START_TEST(double_buffering)
{
    model *m = mlp_compile(MLP3);
    wslots w;
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd, 4, 0, 0, 0), 0);
    ck_assert_uint_eq(w.slot_elems, 6 * 8 + 6); /* fc2: the largest layer */
    ck_assert_int_eq(w.narrivals, 5);
    bool blocked;
    /* Out of order: fc2 before fc1. */
    ck_assert_ptr_null(wslots_dest(&w, 2, false, 0, 48, &blocked));
    ck_assert(!blocked);
    ck_assert(!receive(&w, 0, false, m));
    ck_assert(!wslots_ready(&w, 0, 0, false));
    ck_assert(!receive(&w, 1, false, m));
    ck_assert(wslots_ready(&w, 0, 0, false));
    ck_assert(!receive(&w, 2, false, m));
    ck_assert(receive(&w, 3, false, m)); /* fc3 would need fc1's slot */
    ck_assert_ptr_null(wslots_dest(&w, 4, false, 0, 18, &blocked));
    ck_assert(blocked);
    /* fc1 computes from slot 0; then its slot takes fc3. */
    float *wp[6] = {0}, *gp[6] = {0};
    wslots_bind(&w, 0, 0, false, wp, gp, NULL);
    ck_assert_ptr_eq(wp[0], w.slot[0]);
    ck_assert_ptr_eq(wp[1], w.slot[0] + 32);
    ck_assert(!wslots_streams(&w, 1, false)); /* relu has no weights */
    ck_assert(wslots_consume(&w, 0, 0, false));
    ck_assert_ptr_eq(wslots_dest(&w, 4, false, 6, 12, &blocked), NULL); /* not at offset 6 */
    ck_assert_ptr_eq(wslots_dest(&w, 4, false, 0, 6, &blocked), w.slot[0]);
    ck_assert(!wslots_received(&w, 6));
    ck_assert_ptr_eq(wslots_dest(&w, 4, false, 6, 12, &blocked), w.slot[0] + 6);
    ck_assert(!wslots_received(&w, 12));
    ck_assert(!wslots_ready(&w, 3, 0, false)); /* fc3.bias still missing */
    ck_assert_ptr_eq(wslots_dest(&w, 5, false, 0, 3, &blocked), w.slot[0] + 18);
    ck_assert(wslots_received(&w, 3)); /* backward fc3 needs fc2's slot */
    ck_assert(wslots_ready(&w, 3, 0, false));
    ck_assert(wslots_consume(&w, 2, 0, false)); /* fc2 computed: unblocks */
    ck_assert(!wslots_consume(&w, 3, 0, false));
    /* Backward: fc3 again, then fc2; fc1 needs no weights (its input is the model input). */
    ck_assert(!receive(&w, 4, true, m));
    ck_assert(!receive(&w, 5, true, m));
    ck_assert(!receive(&w, 2, true, m));
    ck_assert(receive(&w, 3, true, m)); /* the step's last arrival: hold the next pass */
    ck_assert(!wslots_streams(&w, 0, true));
    ck_assert(wslots_ready(&w, 0, 0, true));
    /* Gradient slots alternate: fc3 (seq 0), fc2 (seq 1), fc1 (seq 0 again). */
    ck_assert_int_eq(wslots_grad_blocker(&w, 3, 0), -1);
    wslots_bind(&w, 3, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(gp[4], w.gslot[0]);
    wslots_consume(&w, 3, 0, true);
    ck_assert_int_eq(wslots_grad_blocker(&w, 2, 0), -1);
    wslots_bind(&w, 2, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(gp[2], w.gslot[1]);
    wslots_consume(&w, 2, 0, true);
    ck_assert_int_eq(wslots_grad_blocker(&w, 0, 0), 3); /* fc3's gradients must have left */
    wslots_bind(&w, 0, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(gp[0], w.gslot[0]);
    /* Every arrival of the step is in; the next pass's chunks wait for it. */
    ck_assert_int_eq(w.recv, w.narrivals);
    ck_assert_ptr_null(wslots_dest(&w, 0, false, 0, 32, &blocked));
    ck_assert(blocked);
    /* An evaluation pass: the forward arrivals only. */
    wslots_new_pass(&w, true);
    receive_fc1_fc2(&w, m);
    wslots_consume(&w, 0, 0, false);
    ck_assert(!receive(&w, 4, false, m));
    ck_assert(receive(&w, 5, false, m)); /* the pass is complete: hold what follows */
    ck_assert_int_eq(w.recv, w.nfwd);
    wslots_new_pass(&w, false);
    ck_assert(!receive(&w, 0, false, m));
    wslots_deinit(&w);
    model_free(m);
}
END_TEST

/* Kept across the turn: fc3 and fc2 are the forward pass's last arrivals
 * and the first layers of the backward pass, which reads them from their
 * forward slots (bwd_kept 2: nothing streams again). Their forward
 * computations free nothing; their backward ones free both slots, once the
 * second is done; an evaluation pass frees them as it goes. With one kept
 * (fc3), fc2 streams again into the slot fc1 left while fc3's stays. */
START_TEST(kept_across_the_turn)
{
    model *m = mlp_compile(MLP3);
    wslots w;
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, NULL, 0, 2, 0, 0), 0);
    ck_assert_int_eq(w.narrivals, 3);
    ck_assert_int_eq(w.nkept, 2);
    receive_fc1_fc2(&w, m);
    ck_assert(wslots_consume(&w, 0, 0, false)); /* fc1 done: fc3 may land in its slot */
    ck_assert(!receive(&w, 4, false, m));
    ck_assert(receive(&w, 5, false, m)); /* fc3 in slot 0: every arrival of the step is in */
    ck_assert(!wslots_consume(&w, 2, 0, false)); /* fc2 forward: its slot stays */
    ck_assert(!wslots_consume(&w, 3, 0, false));
    ck_assert_int_eq(w.consumed, 1);
    /* Backward: fc3 and fc2 read their forward slots, without streaming. */
    ck_assert(!wslots_streams(&w, 3, true));
    ck_assert(wslots_ready(&w, 3, 0, true));
    ck_assert(wslots_ready(&w, 2, 0, true));
    float *wp[6] = {0}, *gp[6] = {0};
    wslots_bind(&w, 3, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(wp[4], w.slot[0]);
    ck_assert_ptr_eq(gp[4], w.gslot[0]);
    wslots_bind(&w, 2, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(wp[2], w.slot[1]);
    ck_assert(!wslots_consume(&w, 3, 0, true));
    ck_assert_int_eq(w.consumed, 1); /* fc2 still reads slot 1 */
    wslots_consume(&w, 2, 0, true);
    ck_assert_int_eq(w.consumed, 3);
    /* An evaluation pass frees the slots as its forward goes. */
    wslots_new_pass(&w, true);
    receive_fc1_fc2(&w, m);
    wslots_consume(&w, 0, 0, false);
    wslots_consume(&w, 2, 0, false);
    ck_assert_int_eq(w.consumed, 2);
    wslots_deinit(&w);

    /* One kept: fc3 stays in slot 0 while fc2 streams again into slot 1 */
    static const uint32_t bwd_fc2[] = {2, 3};
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd_fc2, 2, 1, 0, 0), 0);
    ck_assert_int_eq(w.narrivals, 4);
    receive_fc1_fc2(&w, m);
    wslots_consume(&w, 0, 0, false);
    ck_assert(!receive(&w, 4, false, m));
    ck_assert(receive(&w, 5, false, m)); /* fc3 in slot 0; fc2's backward copy waits for slot 1 */
    ck_assert(wslots_consume(&w, 2, 0, false)); /* fc2 forward frees slot 1 */
    bool blocked;
    ck_assert_ptr_eq(wslots_dest(&w, 2, true, 0, 48, &blocked), w.slot[1]);
    ck_assert(!wslots_received(&w, 48));
    ck_assert_ptr_eq(wslots_dest(&w, 3, true, 0, 6, &blocked), w.slot[1] + 48);
    ck_assert(wslots_received(&w, 6)); /* the step's last arrival */
    ck_assert(!wslots_consume(&w, 3, 0, false)); /* fc3 forward: kept */
    wslots_bind(&w, 3, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(wp[4], w.slot[0]);
    wslots_bind(&w, 2, 0, true, wp, gp, NULL);
    ck_assert_ptr_eq(wp[2], w.slot[1]);
    wslots_deinit(&w);

    /* Not the forward pass's last two arrivals, or streamed again: refused. */
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, NULL, 0, 3, 0, 0), -EINVAL);
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd, 4, 1, 0, 0), -EINVAL);
    model_free(m);
}
END_TEST

/* Parts: with part_elems 16 and chunks of 8 elements, fc2 (6x8 weight, 48
 * elements) goes in parts of 2 rows (16 elements: a multiple of its row of
 * 8 and of the chunk), its bias with the last; fc1 (8x4) in parts of 4
 * rows (16 elements, two steps of lcm(4, 8) = 8); fc3
 * (3x6, 18 elements) cannot split along chunks (lcm(6, 8) = 24 > 16) and
 * goes whole. */
START_TEST(parts)
{
    model *m = mlp_compile(MLP3);
    wslots w;
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd, 4, 0, 16, 8), 0);
    ck_assert_uint_eq(wslots_parts(&w, 0), 2);
    ck_assert_uint_eq(wslots_parts(&w, 2), 3);
    ck_assert_uint_eq(wslots_parts(&w, 3), 1);
    ck_assert_uint_eq(w.slot_elems, 16 + 8); /* fc1's last part: 4 rows of 4 and its bias */
    uint64_t r0, r1;
    wslots_part_rows(&w, 2, 2, &r0, &r1);
    ck_assert(r0 == 4 && r1 == 6);
    ck_assert_int_eq(w.narrivals, 2 + 3 + 1 + 1 + 3); /* forward fc1, fc2, fc3; backward fc3, fc2 */
    bool blocked;
    /* fc1's first part: 16 elements of its weight, in two chunks */
    ck_assert_ptr_eq(wslots_dest(&w, 0, false, 0, 8, &blocked), w.slot[0]);
    ck_assert(!wslots_received(&w, 8));
    ck_assert(!wslots_ready(&w, 0, 0, false));
    ck_assert_ptr_null(wslots_dest(&w, 0, false, 8, 16, &blocked)); /* crosses into the next part */
    ck_assert(!blocked);
    ck_assert_ptr_eq(wslots_dest(&w, 0, false, 8, 8, &blocked), w.slot[0] + 8);
    ck_assert(!wslots_received(&w, 8));
    ck_assert(wslots_ready(&w, 0, 0, false));
    ck_assert(!wslots_ready(&w, 0, 1, false));
    /* its second part lands in slot 1, the bias with it */
    ck_assert_ptr_eq(wslots_dest(&w, 0, false, 16, 16, &blocked), w.slot[1]);
    ck_assert(!wslots_received(&w, 16));
    ck_assert_ptr_eq(wslots_dest(&w, 1, false, 0, 8, &blocked), w.slot[1] + 16);
    ck_assert(wslots_received(&w, 8)); /* both slots in use */
    ck_assert(wslots_ready(&w, 0, 1, false));
    float *wp[6] = {0}, *gp[6] = {0};
    wslots_bind(&w, 0, 0, false, wp, gp, NULL);
    ck_assert_ptr_eq(wp[0], w.slot[0]);
    ck_assert_ptr_null(wp[1]); /* the bias comes with the last part */
    ck_assert_ptr_null(wslots_dest(&w, 2, false, 0, 8, &blocked));
    ck_assert(blocked);
    ck_assert(wslots_consume(&w, 0, 0, false));
    wslots_bind(&w, 0, 1, false, wp, gp, NULL);
    ck_assert_ptr_eq(wp[0], w.slot[1]);
    ck_assert_ptr_eq(wp[1], w.slot[1] + 16);
    /* fc2's first part into the freed slot 0 */
    ck_assert_ptr_eq(wslots_dest(&w, 2, false, 0, 8, &blocked), w.slot[0]);
    wslots_deinit(&w);
    model_free(m);
}
END_TEST

START_TEST(bad_schedules)
{
    model *m = mlp_compile(MLP3);
    wslots w;
    const uint32_t split[] = {0, 2, 1, 3, 4, 5}; /* fc1's tensors apart */
    ck_assert_int_eq(wslots_init(&w, m, split, 6, bwd, 4, 0, 0, 0), -EINVAL);
    const uint32_t twice[] = {0, 1, 0, 1};
    ck_assert_int_eq(wslots_init(&w, m, twice, 4, bwd, 4, 0, 0, 0), -EINVAL);
    const uint32_t beyond[] = {0, 1, 9};
    ck_assert_int_eq(wslots_init(&w, m, beyond, 3, NULL, 0, 0, 0, 0), -EINVAL);
    model_free(m);
}
END_TEST

/* Mixed precision: each weight slot has a bfloat16 twin; a chunk's place
 * maps to its twin's and back, and a whole layer's weight tensor is bound
 * to its twin (the GEMMs take it), its bias not. The slots' bytes count
 * the twins. */
START_TEST(bfloat16_twins)
{
    model *m = mlp_compile(MLP3);
    m->mixed_precision = true;
    wslots w;
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd, 4, 0, 0, 0), 0);
    ck_assert_ptr_nonnull(w.slot16[0]);
    ck_assert_ptr_nonnull(w.slot16[1]);
    ck_assert_uint_eq(w.bytes, (6 * 8 + 6) * (4 * sizeof(float) + 2 * sizeof(uint16_t)));
    ck_assert_uint_eq(w.slot16_elems, 6 * 8 + 6);
    for (int k = 0; k < 2; k++) {
        ck_assert_ptr_eq(wslots_dest16(&w, w.slot[k] + 5, 4), w.slot16[k] + 5);
        ck_assert_ptr_eq(wslots_dest32(&w, w.slot16[k] + 7), w.slot[k] + 7);
        ck_assert(wslots_in_twin(&w, w.slot16[k] + 7) && !wslots_in_twin(&w, w.slot[k] + 7));
    }
    receive_fc1_fc2(&w, m);
    float *wp[6] = {0}, *gp[6] = {0};
    uint16_t *w16p[6] = {0};
    wslots_bind(&w, 2, 0, false, wp, gp, w16p);
    ck_assert_ptr_eq(wp[2], w.slot[1]);
    ck_assert_ptr_eq(w16p[2], w.slot16[1]);
    ck_assert_ptr_null(w16p[3]);
    wslots_deinit(&w);
    /* in parts (fc1 in 2, fc2 in 3): the twins as large as the largest
     * layer that arrives whole (fc3: 3 x 6 and a bias of 3), a chunk of a
     * layer in parts beyond them has none, and a layer in parts is bound
     * to none */
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd, 4, 0, 16, 8), 0);
    ck_assert_uint_eq(w.slot16_elems, 3 * 6 + 3);
    ck_assert_uint_eq(w.bytes, (16 + 8) * 4 * sizeof(float) + (3 * 6 + 3) * 2 * sizeof(uint16_t));
    ck_assert_ptr_null(wslots_dest16(&w, w.slot[0] + 16, 8));
    bool blocked;
    ck_assert_ptr_eq(wslots_dest(&w, 0, false, 0, 8, &blocked), w.slot[0]);
    wslots_received(&w, 8);
    ck_assert_ptr_eq(wslots_dest(&w, 0, false, 8, 8, &blocked), w.slot[0] + 8);
    wslots_received(&w, 8);
    w16p[0] = (uint16_t *)1;
    wslots_bind(&w, 0, 0, false, wp, gp, w16p);
    ck_assert_ptr_null(w16p[0]);
    wslots_deinit(&w);
    /* float32: no twins */
    m->mixed_precision = false;
    ck_assert_int_eq(wslots_init(&w, m, fwd, 6, bwd, 4, 0, 0, 0), 0);
    ck_assert_ptr_null(w.slot16[0]);
    ck_assert_uint_eq(w.bytes, (6 * 8 + 6) * 4 * sizeof(float));
    w16p[2] = (uint16_t *)1;
    receive_fc1_fc2(&w, m);
    wslots_bind(&w, 2, 0, false, wp, gp, w16p);
    ck_assert_ptr_null(w16p[2]);
    wslots_deinit(&w);
    model_free(m);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("wslots");
    TCase *t = tcase_create("schedule");
    tcase_add_test(t, double_buffering);
    tcase_add_test(t, kept_across_the_turn);
    tcase_add_test(t, bad_schedules);
    tcase_add_test(t, parts);
    tcase_add_test(t, bfloat16_twins);
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
