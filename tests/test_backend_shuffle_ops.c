// ShuffleNetV2's channel shuffle (backend.h channel_shuffle, torchvision's
// channel_shuffle): every backend against a permutation written out by hand
// (2 rows of 6 channels in 2 and in 3 groups), then each fast backend
// against ref and against the (rows, groups, C / groups) -> (rows, C /
// groups, groups) transpose computed here on random rows (ShuffleNetV2's
// 116 channels in 2 groups, 24 in 3, odd row counts, past the cpu
// backend's threading threshold), the shuffle with C / groups groups
// undoing it bit for bit, and special values (signed zeros, infinities,
// subnormals, NaN payloads) and, in fp16 / bf16, unrounded inputs coming
// out as exactly their rounded values. Every comparison is of bits, and
// each expectation is checked to tell the permutation from its inverse (the
// likely mistake), so the tests can fail. Runs as a "cpu" and a "cuda"
// group and, with cuda storing fp16 / bf16, two more (tests/backend_mirror.h);
// the cuda groups run on the CPU emulation of CUDA in make test.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"
#include "gradcheck.h"

// y (rows, C) = the shuffle of x on backend b; host buffers (DA / HA for the fast one).
static void shuffle(Backend *b, size_t rows, int channels, int groups, const float *x, float *y) {
    if (b == ref) {
        ref->op.channel_shuffle(ref, rows, channels, groups, (const Act *)x, (Act *)y);
        return;
    }
    fast->op.channel_shuffle(fast, rows, channels, groups, DA(x), DA(y));
    HA(y);
}

// The elements of actual whose bits differ from expected's, the first few
// printed unless quiet. In fp16 / bf16 any NaN matches any NaN (the
// conversions to and from 16 bits need not keep a payload); in fp32 the
// payload too must stay.
static size_t count_bit_differences(const char *label, size_t n, const float *actual,
                                    const float *expected, int quiet) {
    size_t differences = 0;
    for (size_t i = 0; i < n; i++) {
        if (mirror_dtype != COMPUTE_F32 && isnan(expected[i]) && isnan(actual[i])) continue;
        if (memcmp(&actual[i], &expected[i], sizeof(float)) == 0) continue;
        if (!quiet && differences < 5)
            fprintf(stderr, "  %s: element %zu is %a, expected %a\n", label, i, actual[i],
                    expected[i]);
        differences++;
    }
    return differences;
}

static void expect_same_bits(const char *label, size_t n, const float *actual,
                             const float *expected) {
    assert_int_equal(count_bit_differences(label, n, actual, expected, 0), 0);
}

// out (rows, C) = x viewed as (rows, groups, C / groups), its last two axes
// swapped: torchvision's view / transpose / view, in its own loops.
static void transpose_groups(size_t rows, int channels, int groups, const float *x, float *out) {
    const int per_group = channels / groups;
    for (size_t r = 0; r < rows; r++) {
        const float *block = x + r * channels;
        float *out_row = out + r * channels;
        int o = 0;
        for (int k = 0; k < per_group; k++)
            for (int g = 0; g < groups; g++) out_row[o++] = block[g * per_group + k];
    }
}

// Whether the shuffle is its own inverse: one group, groups of one, or as
// many groups as channels in each (a square transpose). Otherwise its
// inverse (a mix-up of groups and C / groups) is another permutation.
static int shuffle_is_involution(int channels, int groups) {
    return groups == 1 || groups == channels || groups * groups == channels;
}

// ---- by hand ---------------------------------------------------------------------------

// x[r, c] = 10 r + c (exact in every dtype); y (2, 6) in 2 groups, then in
// 3: the same x, and the 2-group result shuffled in 3 groups is x again.
static void test_channel_shuffle_values(void **state) {
    NEED_FAST_BACKEND();
    const float values[12] = {0, 1, 2, 3, 4, 5, 10, 11, 12, 13, 14, 15};
    // groups 2, C / groups 3: y = x0 x3 x1 x4 x2 x5
    const float want_2[12] = {0, 3, 1, 4, 2, 5, 10, 13, 11, 14, 12, 15};
    // groups 3, C / groups 2: y = x0 x2 x4 x1 x3 x5
    const float want_3[12] = {0, 2, 4, 1, 3, 5, 10, 12, 14, 11, 13, 15};
    // the two are each other's inverse: a mix-up of groups and C / groups
    // gives the other one, which these checks tell apart
    assert_true(count_bit_differences("2 groups as 3", 12, want_3, want_2, 1) > 0);
    float *x = mirror_tensor(12);
    memcpy(x, values, sizeof values);
    Backend *const backends[2] = {ref, fast};
    for (int b = 0; b < 2; b++) {
        float *y2 = mirror_nan_tensor(12), *y3 = mirror_nan_tensor(12);
        float *back = mirror_nan_tensor(12);
        shuffle(backends[b], 2, 6, 2, x, y2);
        expect_same_bits("channel_shuffle 2 groups by hand", 12, y2, want_2);
        shuffle(backends[b], 2, 6, 3, x, y3);
        expect_same_bits("channel_shuffle 3 groups by hand", 12, y3, want_3);
        shuffle(backends[b], 2, 6, 3, y2, back);
        expect_same_bits("channel_shuffle 2 then 3 groups", 12, back, values);
        // one group, and as many groups as channels: y = x
        float *same = mirror_nan_tensor(12);
        shuffle(backends[b], 2, 6, 1, x, same);
        expect_same_bits("channel_shuffle 1 group", 12, same, values);
        same = mirror_nan_tensor(12);
        shuffle(backends[b], 2, 6, 6, x, same);
        expect_same_bits("channel_shuffle 6 groups of 1", 12, same, values);
    }
    // no rows: nothing written
    float *untouched = mirror_nan_tensor(6);
    shuffle(fast, 0, 6, 2, x, untouched);
    for (int c = 0; c < 6; c++) assert_true(isnan(untouched[c]));
}

// ---- random rows -----------------------------------------------------------------------

// rows, channels, groups: ShuffleNetV2 x1.0's first stage (116 channels in
// 2 groups) and 24 in 3, odd row counts, one row, 300 x 116 past the cpu
// backend's threading threshold (16384 elements), x2.0's 976 channels.
typedef struct ShuffleCase {
    size_t rows;
    int channels, groups;
} ShuffleCase;
static const ShuffleCase shuffle_cases[] = {{50, 116, 2}, {50, 24, 3},  {37, 116, 2},
                                            {1, 24, 3},   {49, 48, 4},  {300, 116, 2},
                                            {3, 976, 2},  {5, 9, 9},    {6, 16, 4}};
#define SHUFFLE_CASE_COUNT (sizeof shuffle_cases / sizeof shuffle_cases[0])

// Each fast backend against ref and both against the transpose, bit for bit.
static void test_channel_shuffle_matches_ref(void **state) {
    NEED_FAST_BACKEND();
    for (size_t s = 0; s < SHUFFLE_CASE_COUNT; s++) {
        const ShuffleCase c = shuffle_cases[s];
        const size_t n = c.rows * c.channels;
        char label[96];
        snprintf(label, sizeof label, "channel_shuffle %zu x %d, %d groups", c.rows, c.channels,
                 c.groups);
        const float *x = mirror_random_tensor(n, -3, 3, 10 + s);
        float *want = mirror_tensor(n), *inverse = mirror_tensor(n);
        transpose_groups(c.rows, c.channels, c.groups, x, want);
        // the inverse permutation fails the comparison (where it is another one)
        transpose_groups(c.rows, c.channels, c.channels / c.groups, x, inverse);
        if (!shuffle_is_involution(c.channels, c.groups))
            assert_true(count_bit_differences(label, n, inverse, want, 1) > 0);
        float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
        shuffle(ref, c.rows, c.channels, c.groups, x, y_ref);
        shuffle(fast, c.rows, c.channels, c.groups, x, y_fast);
        expect_same_bits(label, n, y_ref, want);
        expect_same_bits(label, n, y_fast, want);
    }
}

// The backward (C / groups groups) undoes the forward bit for bit; the
// forward applied twice does not (unless it is its own inverse).
static void test_channel_shuffle_round_trip(void **state) {
    NEED_FAST_BACKEND();
    for (size_t s = 0; s < SHUFFLE_CASE_COUNT; s++) {
        const ShuffleCase c = shuffle_cases[s];
        const int inverse_groups = c.channels / c.groups;
        const size_t n = c.rows * c.channels;
        const float *x = mirror_random_tensor(n, -3, 3, 40 + s);
        float *y = mirror_nan_tensor(n), *back = mirror_nan_tensor(n);
        float *twice = mirror_nan_tensor(n);
        shuffle(fast, c.rows, c.channels, c.groups, x, y);
        shuffle(fast, c.rows, c.channels, inverse_groups, y, back);
        char label[96];
        snprintf(label, sizeof label, "channel_shuffle %zu x %d, %d then %d groups", c.rows,
                 c.channels, c.groups, inverse_groups);
        expect_same_bits(label, n, back, x);
        shuffle(fast, c.rows, c.channels, c.groups, y, twice);
        if (!shuffle_is_involution(c.channels, c.groups))
            assert_true(count_bit_differences(label, n, twice, x, 1) > 0);
    }
}

// ---- exact values ----------------------------------------------------------------------

// Values a conversion or arithmetic would change: signed zeros, infinities,
// NaNs with payloads, fp32 / fp16 / bf16 subnormals, the largest floats and
// unrounded randoms. In fp32 they come out as they went in; in fp16 / bf16
// as DA stored them (rounded to nearest even once, mirror_round), the
// shuffle adding no rounding of its own.
static void test_channel_shuffle_exact_values(void **state) {
    NEED_FAST_BACKEND();
    const size_t rows = 7;
    const int channels = 24, groups = 3;
    const size_t n = rows * channels;
    float *x = mirror_tensor(n);
    gradcheck_fill_uniform(x, n, -100, 100, 70);  // not rounded to the dtype
    const uint32_t special_bits[] = {0x80000000u, 0x00000000u, 0x7f800000u, 0xff800000u,
                                     0x7fc12345u, 0xffc00001u, 0x00000001u, 0x80012345u,
                                     0x7f7fffffu, 0xff7fffffu, 0x33800000u, 0x00800000u,
                                     0x3f800001u, 0x477fe000u, 0x38800000u, 0xb3c00000u};
    const size_t specials = sizeof special_bits / sizeof special_bits[0];
    for (size_t i = 0; i < specials; i++)  // spread over rows and groups
        memcpy(&x[(i * 29) % n], &special_bits[i], sizeof(float));
    float *stored = mirror_tensor(n), *want = mirror_tensor(n);
    memcpy(stored, x, n * sizeof(float));
    mirror_round(stored, n);
    transpose_groups(rows, channels, groups, stored, want);
    float *y = mirror_nan_tensor(n);
    shuffle(fast, rows, channels, groups, x, y);
    expect_same_bits("channel_shuffle of special values", n, y, want);
    // the NaNs stay NaN in every dtype, the signed zeros keep their sign
    for (size_t i = 0; i < specials; i++) {
        const size_t at = (i * 29) % n, r = at / channels;
        const int c = (int)(at % channels), per_group = channels / groups;
        const float out = y[r * channels + (size_t)(c % per_group) * groups + c / per_group];
        if (isnan(x[at])) assert_true(isnan(out));
        if (x[at] == 0.0f) assert_true(out == 0.0f && signbit(out) == signbit(x[at]));
    }
    if (mirror_dtype == COMPUTE_F32) return;
    // in 16 bits the inputs were rounded: the output is not x itself
    float *unrounded = mirror_tensor(n);
    transpose_groups(rows, channels, groups, x, unrounded);
    assert_true(count_bit_differences("unrounded", n, y, unrounded, 1) > 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_channel_shuffle_values, mirror_free),
        cmocka_unit_test_teardown(test_channel_shuffle_matches_ref, mirror_free),
        cmocka_unit_test_teardown(test_channel_shuffle_round_trip, mirror_free),
        cmocka_unit_test_teardown(test_channel_shuffle_exact_values, mirror_free),
    };
    return mirror_run_groups_16bit(tests, sizeof tests / sizeof tests[0]);
}
