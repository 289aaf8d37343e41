/* The worker's batch assembly (worker/batch.c): a stripe of rows cut out
 * of a batch of images with a label per pixel, in place, against a
 * reference that reads every byte at its place in the whole batch; rows
 * outside the images are refused and leave the batch untouched. */
#include <check.h>
#include <stdlib.h>
#include <string.h>

#include "batch.h"

/* The byte at (sample s, plane p, row y, column x, byte k) of a batch. */
static uint8_t input_byte(uint64_t s, uint64_t p, uint64_t y, uint64_t x, size_t k)
{
    return (uint8_t)(s * 131 + p * 31 + y * 7 + x * 3 + k * 101 + 1);
}

static uint8_t label_byte(uint64_t s, uint64_t y, uint64_t x, size_t k)
{
    return (uint8_t)(s * 17 + y * 5 + x * 11 + k * 59 + 200);
}

static uint8_t *whole_batch(const batch_layout *l, size_t *bytes)
{
    *bytes = l->n * l->c * l->h * l->w * l->input_size + l->n * l->h * l->w * l->label_size;
    uint8_t *b = malloc(*bytes), *q = b;
    ck_assert_ptr_nonnull(b);
    for (uint64_t s = 0; s < l->n; s++)
        for (uint64_t p = 0; p < l->c; p++)
            for (uint64_t y = 0; y < l->h; y++)
                for (uint64_t x = 0; x < l->w; x++)
                    for (size_t k = 0; k < l->input_size; k++)
                        *q++ = input_byte(s, p, y, x, k);
    for (uint64_t s = 0; s < l->n; s++)
        for (uint64_t y = 0; y < l->h; y++)
            for (uint64_t x = 0; x < l->w; x++)
                for (size_t k = 0; k < l->label_size; k++)
                    *q++ = label_byte(s, y, x, k);
    return b;
}

/* Every stripe of every split of the rows, for float32 and 8-bit inputs
 * and 1- and 4-byte labels. */
START_TEST(stripes_hold_their_rows)
{
    const size_t sizes[][2] = {{4, 4}, {1, 1}, {1, 4}};
    for (size_t z = 0; z < 3; z++)
        for (uint64_t parts = 1; parts <= 4; parts++) {
            batch_layout l = {.n = 3, .c = 2, .h = 11, .w = 5, .input_size = sizes[z][0],
                              .label_size = sizes[z][1]};
            for (uint64_t part = 0; part < parts; part++) {
                uint64_t r0 = l.h * part / parts, rows = l.h * (part + 1) / parts - r0;
                size_t bytes;
                uint8_t *b = whole_batch(&l, &bytes);
                size_t kept = batch_stripe(b, &l, r0, rows);
                ck_assert_uint_eq(kept, l.n * l.c * rows * l.w * l.input_size +
                                            l.n * rows * l.w * l.label_size);
                const uint8_t *q = b;
                for (uint64_t s = 0; s < l.n; s++)
                    for (uint64_t p = 0; p < l.c; p++)
                        for (uint64_t y = r0; y < r0 + rows; y++)
                            for (uint64_t x = 0; x < l.w; x++)
                                for (size_t k = 0; k < l.input_size; k++)
                                    ck_assert_uint_eq(*q++, input_byte(s, p, y, x, k));
                for (uint64_t s = 0; s < l.n; s++)
                    for (uint64_t y = r0; y < r0 + rows; y++)
                        for (uint64_t x = 0; x < l.w; x++)
                            for (size_t k = 0; k < l.label_size; k++)
                                ck_assert_uint_eq(*q++, label_byte(s, y, x, k));
                ck_assert_uint_eq((size_t)(q - b), kept);
                free(b);
            }
        }
}
END_TEST

START_TEST(rows_outside_refused)
{
    batch_layout l = {.n = 2, .c = 1, .h = 8, .w = 4, .input_size = 4, .label_size = 1};
    size_t bytes;
    uint8_t *b = whole_batch(&l, &bytes);
    uint8_t *copy = malloc(bytes);
    memcpy(copy, b, bytes);
    ck_assert_uint_eq(batch_stripe(b, &l, 6, 3), 0); /* past the last row */
    ck_assert_uint_eq(batch_stripe(b, &l, 0, 0), 0); /* no rows */
    ck_assert_mem_eq(b, copy, bytes);
    free(copy);
    free(b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("worker-batch");
    TCase *t = tcase_create("stripe");
    tcase_add_test(t, stripes_hold_their_rows);
    tcase_add_test(t, rows_outside_refused);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
