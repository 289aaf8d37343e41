/* bfloat16 conversions: rounding to nearest with ties to even, NaN and
 * infinities kept, widening exact, the in-place widening of a payload at
 * the upper half of its float buffer, and float32 sums. */
#include <check.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "bf16.h"

static float from_bits(uint32_t u)
{
    float f;
    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint16_t pack1(float f)
{
    uint16_t h;
    bf16_pack(&h, &f, 1);
    return h;
}

START_TEST(rounding)
{
    /* exactly representable: unchanged */
    ck_assert_uint_eq(pack1(1.0f), 0x3f80);
    ck_assert_uint_eq(pack1(-2.5f), 0xc020);
    ck_assert_uint_eq(pack1(0.0f), 0x0000);
    ck_assert_uint_eq(pack1(-0.0f), 0x8000);
    /* below half: down; above half: up */
    ck_assert_uint_eq(pack1(from_bits(0x3f807fffu)), 0x3f80);
    ck_assert_uint_eq(pack1(from_bits(0x3f808001u)), 0x3f81);
    /* ties to even: 0x3f80|8000 goes down to the even 0x3f80, 0x3f81|8000 up to 0x3f82 */
    ck_assert_uint_eq(pack1(from_bits(0x3f808000u)), 0x3f80);
    ck_assert_uint_eq(pack1(from_bits(0x3f818000u)), 0x3f82);
    /* a carry into the exponent */
    ck_assert_uint_eq(pack1(from_bits(0x3fffffffu)), 0x4000);
    /* subnormals round like the rest */
    ck_assert_uint_eq(pack1(from_bits(0x00018000u)), 0x0002);
    /* infinities stay; the largest finite floats round to infinity */
    ck_assert_uint_eq(pack1(INFINITY), 0x7f80);
    ck_assert_uint_eq(pack1(-INFINITY), 0xff80);
    ck_assert_uint_eq(pack1(from_bits(0x7f7fffffu)), 0x7f80);
    /* NaN stays NaN, even one whose payload is in the low bits only */
    uint16_t h = pack1(from_bits(0x7f800001u));
    ck_assert((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0);
    h = pack1(from_bits(0xffc00000u));
    ck_assert((h & 0x7f80) == 0x7f80 && (h & 0x7f) != 0 && (h & 0x8000));
}
END_TEST

START_TEST(round_trip)
{
    /* every bfloat16 that is not a NaN widens and packs back to itself */
    for (uint32_t v = 0; v < 0x10000; v++) {
        uint16_t in = (uint16_t)v, back;
        float f;
        bf16_unpack(&f, &in, 1);
        bf16_pack(&back, &f, 1);
        if ((v & 0x7f80) == 0x7f80 && (v & 0x7f))
            ck_assert(isnan(f) && (back & 0x7f80) == 0x7f80 && (back & 0x7f));
        else
            ck_assert_uint_eq(back, in);
    }
}
END_TEST

START_TEST(in_place)
{
    enum { N = 1001 };
    float want[N], buf[N];
    uint16_t packed[N];
    for (int i = 0; i < N; i++)
        want[i] = (float)(i - 500) * 0.37f;
    bf16_pack(packed, want, N);
    memcpy((uint8_t *)buf + 2 * N, packed, sizeof(packed)); /* a payload at the upper half */
    bf16_unpack(buf, (const uint16_t *)((uint8_t *)buf + 2 * N), N);
    for (int i = 0; i < N; i++) {
        float f;
        bf16_unpack(&f, &packed[i], 1);
        ck_assert_float_eq(buf[i], f);
        ck_assert(fabsf(buf[i] - want[i]) <= fabsf(want[i]) / 128.0f);
    }
}
END_TEST

START_TEST(sums)
{
    float acc[3] = {1.0f, -1.0f, 0.5f};
    uint16_t in[3];
    float add[3] = {0.5f, 2.0f, 1e-3f};
    bf16_pack(in, add, 3);
    bf16_add(acc, in, 3);
    ck_assert_float_eq(acc[0], 1.5f);
    ck_assert_float_eq(acc[1], 1.0f);
    float w;
    bf16_unpack(&w, &in[2], 1);
    ck_assert_float_eq(acc[2], 0.5f + w);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("bf16");
    TCase *t = tcase_create("convert");
    tcase_add_test(t, rounding);
    tcase_add_test(t, round_trip);
    tcase_add_test(t, in_place);
    tcase_add_test(t, sums);
    suite_add_tcase(s, t);
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed ? 1 : 0;
}
