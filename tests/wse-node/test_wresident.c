/* Pipelined resident weights (wse-node/wresident.c): where each chunk of a
 * tensor and of its optimizer state lands, what is refused, and when a
 * layer's weights are all in. */
#include <check.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "mlp.h"
#include "wresident.h"

/* tensors: 0 fc1.weight (8x4), 1 fc1.bias (8), 2 fc2.weight (3x8), 3 fc2.bias (3) */
START_TEST(weights_and_resumed_state)
{
    model *m = mlp_compile(MLP2);
    ck_assert_int_eq(m->ntensors, 4);
    optim_config cfg;
    optim_config_defaults(&cfg, OPTIM_ADAM);
    cfg.lr = 0.1f;
    float *w[4];
    optim_state st[4];
    wresident r;
    ck_assert_int_eq(wresident_init(&r, m), 0);
    for (int i = 0; i < 4; i++) {
        uint64_t n = m->tensors[i].elems;
        w[i] = calloc(n, sizeof(float));
        ck_assert_int_eq(optim_state_init(&st[i], &cfg, n), 0);
        /* fc1 comes from a resumed job with its two Adam states; fc2 without */
        wresident_bind_tensor(&r, (size_t)i, w[i], n, &st[i], i < 2 ? 2 : 0);
    }
    /* chunks land in the weights and in each state tensor */
    ck_assert_ptr_eq(wresident_dest(&r, 0, 0, 8, 16, 32), w[0] + 8);
    ck_assert_ptr_eq(wresident_dest(&r, 0, 1, 0, 32, 32), optim_state_tensor(&st[0], 0, NULL, NULL));
    ck_assert_ptr_eq(wresident_dest(&r, 0, 2, 4, 4, 32), optim_state_tensor(&st[0], 1, NULL, NULL) + 4);
    /* refused: a state fc2 does not stream, a state past Adam's two, a
     * wrong total, a range outside the tensor, an unknown tensor */
    ck_assert_ptr_null(wresident_dest(&r, 2, 1, 0, 24, 24));
    ck_assert_ptr_null(wresident_dest(&r, 0, 3, 0, 32, 32));
    ck_assert_ptr_null(wresident_dest(&r, 0, 0, 0, 32, 31));
    ck_assert_ptr_null(wresident_dest(&r, 0, 0, 30, 4, 32));
    ck_assert_ptr_null(wresident_dest(&r, 9, 0, 0, 1, 1));
    /* fc1 is ready once its weights and both states are in */
    ck_assert(!wresident_ready(&r, 0));
    wresident_received(&r, 0, 32);
    wresident_received(&r, 1, 8);
    ck_assert(!wresident_ready(&r, 0));
    wresident_received(&r, 0, 64);
    wresident_received(&r, 1, 16);
    ck_assert(wresident_ready(&r, 0));
    ck_assert(wresident_ready(&r, 1)); /* relu: no tensors */
    ck_assert(!wresident_ready(&r, 2));
    wresident_received(&r, 2, 24);
    ck_assert(!wresident_ready(&r, 2));
    wresident_received(&r, 3, 3);
    ck_assert(wresident_ready(&r, 2)); /* fc2: weights only */
    wresident_deinit(&r);
    for (int i = 0; i < 4; i++) {
        free(w[i]);
        optim_state_deinit(&st[i]);
    }
    model_free(m);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("wresident");
    TCase *tc = tcase_create("core");
    tcase_add_test(tc, weights_and_resumed_state);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed ? EXIT_FAILURE : EXIT_SUCCESS;
}
