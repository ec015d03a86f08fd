// Tests of the counter-based RNG: Philox known answers, ranges, independence
// of streams, and basic uniformity.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>

#include "util/rng.h"

static void test_philox_known_answers(void **state) {
    (void)state;
    // Random123's published Philox4x32-10 test vectors.
    const uint32_t counters[3][4] = {{0, 0, 0, 0},
                                     {~0u, ~0u, ~0u, ~0u},
                                     {0x243f6a88, 0x85a308d3, 0x13198a2e, 0x03707344}};
    const uint32_t keys[3][2] = {{0, 0}, {~0u, ~0u}, {0xa4093822, 0x299f31d0}};
    const uint32_t expected[3][4] = {{0x6627e8d5, 0xe169c58d, 0xbc57ac4c, 0x9b00dbd8},
                                     {0x408f276d, 0x41c83b0e, 0xa20bc7c6, 0x6d5451fd},
                                     {0xd16cfe09, 0x94fdcceb, 0x5001e420, 0x24126ea1}};
    for (int i = 0; i < 3; i++) {
        uint32_t out[4];
        philox4x32_10(counters[i], keys[i], out);
        for (int j = 0; j < 4; j++) assert_int_equal(out[j], expected[i][j]);
    }
}

static void test_same_key_same_numbers(void **state) {
    (void)state;
    Rng a = rng_make(7, 3, 123456789012ull, RNG_STREAM_VIEW + 1);
    Rng b = rng_make(7, 3, 123456789012ull, RNG_STREAM_VIEW + 1);
    for (int i = 0; i < 1000; i++) assert_int_equal(rng_u32(&a), rng_u32(&b));
}

static void test_keys_give_different_streams(void **state) {
    (void)state;
    // Changing any part of the key changes the first draws.
    const Rng base = rng_make(1, 2, 3, 4);
    const Rng variants[] = {rng_make(2, 2, 3, 4), rng_make(1, 3, 3, 4), rng_make(1, 2, 4, 4),
                            rng_make(1, 2, 3, 5), rng_make(1, 2, 3 + (1ull << 32), 4),
                            rng_make(1ull << 32 | 1, 2, 3, 4)};
    for (size_t v = 0; v < sizeof variants / sizeof variants[0]; v++) {
        Rng a = base, b = variants[v];
        int same = 0;
        for (int i = 0; i < 8; i++) same += rng_u32(&a) == rng_u32(&b);
        assert_true(same < 2);
    }
}

static void test_uniform_and_range(void **state) {
    (void)state;
    Rng rng = rng_make(0, 0, 0, 0);
    const int n = 200000;
    double sum = 0;
    for (int i = 0; i < n; i++) {
        const float u = rng_uniform(&rng);
        assert_true(u >= 0.0f && u < 1.0f);
        sum += u;
        const float r = rng_range(&rng, -2.0f, 3.0f);
        assert_true(r >= -2.0f && r < 3.0f);
    }
    // Mean of U(0,1) has standard deviation sqrt(1/12/n) = 0.00065; allow 6 sigma.
    assert_true(fabs(sum / n - 0.5) < 0.004);
}

static void test_below_is_in_range_and_unbiased(void **state) {
    (void)state;
    Rng rng = rng_make(42, 0, 0, 0);
    enum { buckets = 7, draws = 70000 };
    int counts[buckets] = {0};
    for (int i = 0; i < draws; i++) {
        const uint32_t x = rng_below(&rng, buckets);
        assert_true(x < buckets);
        counts[x]++;
    }
    // Each bucket: binomial(70000, 1/7), sd = 92.6; allow 6 sigma.
    for (int b = 0; b < buckets; b++) assert_true(abs(counts[b] - draws / buckets) < 556);
    assert_int_equal(rng_below(&rng, 1), 0);
}

static void test_bernoulli_rate(void **state) {
    (void)state;
    Rng rng = rng_make(5, 1, 2, 3);
    int hits = 0;
    for (int i = 0; i < 100000; i++) hits += rng_bernoulli(&rng, 0.2f);
    // sd = sqrt(100000 * 0.2 * 0.8) = 126.5; allow 6 sigma.
    assert_true(abs(hits - 20000) < 760);
    assert_false(rng_bernoulli(&rng, 0.0f));
    assert_true(rng_bernoulli(&rng, 1.0f));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_philox_known_answers),
        cmocka_unit_test(test_same_key_same_numbers),
        cmocka_unit_test(test_keys_give_different_streams),
        cmocka_unit_test(test_uniform_and_range),
        cmocka_unit_test(test_below_is_in_range_and_unbiased),
        cmocka_unit_test(test_bernoulli_rate),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
