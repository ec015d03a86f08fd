// Tests of the augmentation kernels: separable resampling (resize and blur)
// and the colour ops, each scalar against AVX2 (bit-exact) and against a
// slow, obviously-right double-precision version written here.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/blur.h"
#include "augment/color.h"
#include "augment/resize.h"
#include "util/cpu.h"
#include "util/rng.h"

// An RGB image whose buffer ends exactly at the end of its last row, so
// that any read past it is caught by the address sanitizer.
typedef struct TestImage {
    Image image;
    size_t bytes;
} TestImage;

static TestImage random_image(int width, int height, size_t padding, uint64_t seed) {
    TestImage t = {.image = {.width = width, .height = height}};
    t.image.stride = (size_t)width * 3 + padding;
    t.bytes = (size_t)(height - 1) * t.image.stride + (size_t)width * 3;
    t.image.pixels = malloc(t.bytes);
    assert_non_null(t.image.pixels);
    Rng rng = rng_make(seed, 0, 0, 0);
    for (size_t i = 0; i < t.bytes; i++) t.image.pixels[i] = (uint8_t)rng_u32(&rng);
    return t;
}

static int has_avx2_or_say_skip(const char *what) {
    if (cpu_has_avx2()) return 1;
    print_message("SKIPPED %s: this CPU has no AVX2 (or LTC_SIMD=scalar)\n", what);
    return 0;
}

typedef struct ResizeCase {
    int source_width, source_height;
    double x, y, width, height;  // source rectangle
    int out_width, out_height, flip;
} ResizeCase;

static const ResizeCase resize_cases[] = {
    {1, 1, 0, 0, 1, 1, 1, 1, 0},
    {1, 1, 0, 0, 1, 1, 5, 3, 1},
    {3, 5, 0, 0, 3, 5, 2, 2, 0},
    {3, 5, 0.5, 1.25, 2.25, 3.5, 7, 9, 1},
    {17, 223, 0, 0, 17, 223, 224, 224, 0},        // grow x, shrink y
    {224, 224, 0, 0, 224, 224, 224, 224, 1},      // same size
    {224, 224, 10, 20, 200, 150, 96, 96, 0},       // shrink
    {500, 375, 13.3, 7.7, 400.25, 301.9, 224, 224, 1},  // fractional rectangle
    {640, 480, 100.5, 3.0, 60.0, 40.0, 224, 224, 0},    // fractional, grow
    {1000, 40, 0, 0, 1000, 40, 7, 3, 1},             // many taps
    {300, 200, 10.5, 3.25, 250.0, 180.5, 57, 57, 1},  // 57 = 4k + 1 outputs: last-group stores
    {640, 480, 3.3, 1.7, 300.0, 470.0, 45, 61, 0},    // 7-8 taps in x (unrolled variant)
};
#define RESIZE_CASES (sizeof resize_cases / sizeof resize_cases[0])

// Scalar and AVX2 passes on the same tables give identical values, for the
// passes of both orders (horizontal first and vertical first).
static void test_resize_avx2_matches_scalar(void **state) {
    if (!has_avx2_or_say_skip("resize AVX2 vs scalar")) return;
    ResampleTable columns = {0}, rows = {0};
    for (size_t c = 0; c < RESIZE_CASES; c++) {
        const ResizeCase *k = &resize_cases[c];
        TestImage source = random_image(k->source_width, k->source_height, c % 3 * 5, 100 + c);
        assert_int_equal(resize_table(&columns, k->x, k->width, k->source_width, k->out_width, k->flip, RESIZE_ANTIALIASED), 0);
        assert_int_equal(resize_table(&rows, k->y, k->height, k->source_height, k->out_height, 0, RESIZE_ANTIALIASED), 0);
        int first, end, first_column, end_column;
        resample_table_span(&rows, &first, &end);
        resample_table_span(&columns, &first_column, &end_column);
        const int row_count = end - first;
        const size_t values = (size_t)k->out_width * 3, out_bytes = (size_t)k->out_height * values;
        uint8_t *scalar_out = malloc(out_bytes), *simd_out = malloc(out_bytes);
        // Horizontal first.
        uint16_t *scalar_mid = malloc((size_t)row_count * values * 2);
        uint16_t *simd_mid = malloc((size_t)row_count * values * 2);
        const uint8_t *src = source.image.pixels + (size_t)first * source.image.stride;
        const uint8_t *src_end = source.image.pixels + source.bytes;
        resample_horizontal_scalar(src, source.image.stride, src_end, row_count, &columns, scalar_mid, values);
        resample_horizontal_avx2(src, source.image.stride, src_end, row_count, &columns, simd_mid, values);
        assert_memory_equal(scalar_mid, simd_mid, (size_t)row_count * values * 2);
        resample_vertical_scalar(scalar_mid, values, (int)values, &rows, first, scalar_out, values);
        resample_vertical_avx2(scalar_mid, values, (int)values, &rows, first, simd_out, values);
        assert_memory_equal(scalar_out, simd_out, out_bytes);
        free(scalar_mid);
        free(simd_mid);
        // Vertical first; the intermediate buffer ends exactly at its last row.
        const size_t span = (size_t)(end_column - first_column) * 3, mid_count = (size_t)k->out_height * span;
        scalar_mid = malloc(mid_count * 2);
        simd_mid = malloc(mid_count * 2);
        const uint8_t *left = source.image.pixels + (size_t)first_column * 3;
        resample_vertical_widen_scalar(left, source.image.stride, (int)span, &rows, 0, scalar_mid, span);
        resample_vertical_widen_avx2(left, source.image.stride, (int)span, &rows, 0, simd_mid, span);
        assert_memory_equal(scalar_mid, simd_mid, mid_count * 2);
        resample_horizontal_narrow_scalar(scalar_mid, span, scalar_mid + mid_count, k->out_height, &columns,
                                          first_column, scalar_out, values);
        resample_horizontal_narrow_avx2(scalar_mid, span, scalar_mid + mid_count, k->out_height, &columns,
                                        first_column, simd_out, values);
        assert_memory_equal(scalar_out, simd_out, out_bytes);
        free(scalar_mid); free(simd_mid); free(scalar_out); free(simd_out);
        free(source.image.pixels);
    }
    resample_table_free(&columns);
    resample_table_free(&rows);
}

// Reference weight of source pixel j for output i, straight from the
// definitions: the area of overlap (shrink) or a tent around the sampling
// point clamped to the rectangle's pixels (grow).
static double reference_weight(double start, double length, int source_size, int out_size, int i, int j) {
    const double scale = length / out_size;
    if (scale > 1.0) {
        const double low = start + i * scale, high = start + (i + 1) * scale;
        const double overlap = fmin(high, j + 1.0) - fmax(low, (double)j);
        return overlap > 0 ? overlap / scale : 0.0;
    }
    const int low = (int)floor(start) < 0 ? 0 : (int)floor(start);
    int high = (int)ceil(start + length) - 1;
    if (high > source_size - 1) high = source_size - 1;
    double centre = start + (i + 0.5) * scale - 0.5;
    if (centre < low) centre = low;
    if (centre > high) centre = high;
    if (j < low || j > high) return 0.0;
    const double tent = 1.0 - fabs(centre - j);
    return tent > 0 ? tent : 0.0;
}

// The exact resize in double: dense weight matrices per axis, normalised,
// applied separably without intermediate rounding. out: (oh, ow, 3).
static void reference_resize(const Image *image, const ResizeCase *k, double *out) {
    const int ow = k->out_width, oh = k->out_height, w = image->width, h = image->height;
    double *wx = calloc((size_t)ow * w, sizeof *wx), *wy = calloc((size_t)oh * h, sizeof *wy);
    double *mid = calloc((size_t)h * ow * 3, sizeof *mid);
    for (int i = 0; i < ow; i++) {
        double total = 0;
        const int from = k->flip ? ow - 1 - i : i;
        for (int x = 0; x < w; x++) total += wx[(size_t)i * w + x] = reference_weight(k->x, k->width, w, ow, from, x);
        for (int x = 0; x < w; x++) wx[(size_t)i * w + x] /= total;
    }
    for (int i = 0; i < oh; i++) {
        double total = 0;
        for (int y = 0; y < h; y++) total += wy[(size_t)i * h + y] = reference_weight(k->y, k->height, h, oh, i, y);
        for (int y = 0; y < h; y++) wy[(size_t)i * h + y] /= total;
    }
    for (int y = 0; y < h; y++)
        for (int i = 0; i < ow; i++)
            for (int x = 0; x < w; x++)
                for (int c = 0; c < 3; c++)
                    mid[((size_t)y * ow + i) * 3 + c] += wx[(size_t)i * w + x] * image->pixels[(size_t)y * image->stride + (size_t)x * 3 + c];
    for (size_t i = 0; i < (size_t)oh * ow * 3; i++) out[i] = 0;
    for (int j = 0; j < oh; j++)
        for (int y = 0; y < h; y++)
            for (size_t v = 0; v < (size_t)ow * 3; v++) out[(size_t)j * ow * 3 + v] += wy[(size_t)j * h + y] * mid[(size_t)y * ow * 3 + v];
    free(wx);
    free(wy);
    free(mid);
}

// Fixed point (14-bit weights, 7 extra bits between the passes) stays
// within one level of the exact double result: final rounding < 0.5, the
// intermediate rounding < 2^-8 and weight quantisation < 2^-14 per tap.
// order: RESAMPLE_ORDER_AUTO goes through resize_rgb; the others force the
// pass order on the run-time kernels.
static void check_resize_against_reference(const ResizeCase *cases, size_t count, uint64_t seed,
                                           ResampleOrder order) {
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    for (size_t c = 0; c < count; c++) {
        const ResizeCase *k = &cases[c];
        TestImage source = random_image(k->source_width, k->source_height, 1, seed + c);
        const size_t values = (size_t)k->out_width * 3, bytes = values * (size_t)k->out_height;
        uint8_t *out = malloc(bytes);
        double *want = malloc(bytes * sizeof *want);
        ErrorMessage err;
        if (order == RESAMPLE_ORDER_AUTO) {
            assert_int_equal(resize_rgb(&source.image, k->x, k->y, k->width, k->height, k->flip, RESIZE_ANTIALIASED, k->out_width,
                                        k->out_height, out, values, &columns, &rows, &buffer, &err), 0);
        } else {
            assert_int_equal(resize_table(&columns, k->x, k->width, k->source_width, k->out_width, k->flip, RESIZE_ANTIALIASED), 0);
            assert_int_equal(resize_table(&rows, k->y, k->height, k->source_height, k->out_height, 0, RESIZE_ANTIALIASED), 0);
            assert_int_equal(resample_separable_with(source.image.pixels, source.image.stride, source.image.pixels + source.bytes,
                                                     &columns, &rows, &buffer, out, values, order, cpu_has_avx2()), 0);
        }
        reference_resize(&source.image, k, want);
        for (size_t i = 0; i < bytes; i++)
            if (fabs(out[i] - want[i]) > 1.0) fail_msg("case %zu value %zu: %d vs reference %.3f", c, i, out[i], want[i]);
        free(out);
        free(want);
        free(source.image.pixels);
    }
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
}

static void test_resize_matches_reference(void **state) {
    check_resize_against_reference(resize_cases, RESIZE_CASES, 200, RESAMPLE_ORDER_AUTO);
    // A real shrink with a fractional rectangle, and a grow.
    const ResizeCase more[] = {{61, 47, 3.4, 2.2, 50.3, 41.7, 19, 13, 1}, {9, 7, 1.5, 0.25, 6.5, 5.5, 23, 17, 0}};
    check_resize_against_reference(more, 2, 300, RESAMPLE_ORDER_AUTO);
}

// Either pass order (the rounding of the intermediate differs) stays within
// the same one level of the exact result.
static void test_resize_both_orders_match_reference(void **state) {
    check_resize_against_reference(resize_cases, RESIZE_CASES, 400, RESAMPLE_HORIZONTAL_FIRST);
    check_resize_against_reference(resize_cases, RESIZE_CASES, 500, RESAMPLE_VERTICAL_FIRST);
}

// A 2x downscale is the mean of 2x2 blocks, rounded half up, exactly.
static void test_resize_halving_is_block_mean(void **state) {
    TestImage source = random_image(8, 6, 0, 7);
    uint8_t out[4 * 3 * 3];
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    assert_int_equal(resize_rgb(&source.image, 0, 0, 8, 6, 0, RESIZE_ANTIALIASED, 4, 3, out, 12, &columns, &rows, &buffer, NULL), 0);
    const Image *im = &source.image;
    for (int y = 0; y < 3; y++)
        for (int x = 0; x < 4; x++)
            for (int c = 0; c < 3; c++) {
                int sum = 0;
                for (int dy = 0; dy < 2; dy++)
                    for (int dx = 0; dx < 2; dx++) sum += im->pixels[(size_t)(2 * y + dy) * im->stride + (size_t)(2 * x + dx) * 3 + (size_t)c];
                assert_int_equal(out[y * 12 + x * 3 + c], (sum + 2) / 4);
            }
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    free(source.image.pixels);
}

static void test_resize_constant_stays_constant(void **state) {
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    for (size_t c = 0; c < RESIZE_CASES; c++) {
        const ResizeCase *k = &resize_cases[c];
        TestImage source = random_image(k->source_width, k->source_height, 0, 1);
        const uint8_t value = (uint8_t)(37 * c + 11);
        memset(source.image.pixels, value, source.bytes);
        const size_t bytes = (size_t)k->out_width * k->out_height * 3;
        uint8_t *out = malloc(bytes);
        assert_int_equal(resize_rgb(&source.image, k->x, k->y, k->width, k->height, k->flip, RESIZE_ANTIALIASED, k->out_width,
                                    k->out_height, out, (size_t)k->out_width * 3, &columns, &rows, &buffer, NULL), 0);
        for (size_t i = 0; i < bytes; i++) assert_int_equal(out[i], value);
        free(out);
        free(source.image.pixels);
    }
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
}

// Flipping in the resize equals resizing and then mirroring each row.
static void test_resize_flip_is_mirror(void **state) {
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    TestImage source = random_image(300, 200, 4, 5);
    const int size = 57;
    uint8_t plain[57 * 57 * 3], flipped[57 * 57 * 3];
    assert_int_equal(resize_rgb(&source.image, 10.5, 3.25, 250.0, 180.5, 0, RESIZE_ANTIALIASED, size, size, plain, size * 3, &columns, &rows, &buffer, NULL), 0);
    assert_int_equal(resize_rgb(&source.image, 10.5, 3.25, 250.0, 180.5, 1, RESIZE_ANTIALIASED, size, size, flipped, size * 3, &columns, &rows, &buffer, NULL), 0);
    for (int y = 0; y < size; y++)
        for (int x = 0; x < size; x++)
            assert_memory_equal(&flipped[(y * size + x) * 3], &plain[(y * size + size - 1 - x) * 3], 3);
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    free(source.image.pixels);
}

static void test_resize_rejects_outside_rectangle(void **state) {
    TestImage source = random_image(10, 10, 0, 5);
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    uint8_t out[12];
    ErrorMessage err = {{0}};
    assert_int_equal(resize_rgb(&source.image, 5, 0, 6, 10, 0, RESIZE_ANTIALIASED, 2, 2, out, 6, &columns, &rows, &buffer, &err), -1);
    assert_non_null(strstr(err.text, "not inside"));
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    free(source.image.pixels);
}

// ---- blur ----------------------------------------------------------------

static const float blur_sigmas[] = {0.1f, 0.7f, 2.0f, 5.0f};
static const int blur_sizes[][2] = {{1, 1}, {3, 5}, {17, 23}, {224, 224}};

static void test_blur_avx2_matches_scalar(void **state) {
    if (!has_avx2_or_say_skip("blur AVX2 vs scalar")) return;
    ResampleTable columns = {0}, rows = {0};
    for (int s = 0; s < 4; s++)
        for (int z = 0; z < 4; z++) {
            const int width = blur_sizes[z][0], height = blur_sizes[z][1];
            TestImage image = random_image(width, height, 0, 40 + z);
            assert_int_equal(blur_table(&columns, width, blur_sigmas[s]), 0);
            assert_int_equal(blur_table(&rows, height, blur_sigmas[s]), 0);
            const size_t values = (size_t)width * 3, count = values * (size_t)height;
            uint16_t *mid_scalar = malloc(count * 2), *mid_simd = malloc(count * 2);
            const uint8_t *end = image.image.pixels + image.bytes;
            resample_horizontal_scalar(image.image.pixels, values, end, height, &columns, mid_scalar, values);
            resample_horizontal_avx2(image.image.pixels, values, end, height, &columns, mid_simd, values);
            assert_memory_equal(mid_scalar, mid_simd, count * 2);
            uint8_t *out_scalar = malloc(count), *out_simd = malloc(count);
            resample_vertical_scalar(mid_scalar, values, (int)values, &rows, 0, out_scalar, values);
            resample_vertical_avx2(mid_scalar, values, (int)values, &rows, 0, out_simd, values);
            assert_memory_equal(out_scalar, out_simd, count);
            free(mid_scalar); free(mid_simd); free(out_scalar); free(out_simd);
            free(image.image.pixels);
        }
    resample_table_free(&columns);
    resample_table_free(&rows);
}

static void test_blur_radius(void **state) {
    assert_int_equal(blur_radius(0.1f), 1);
    assert_int_equal(blur_radius(0.34f), 2);
    assert_int_equal(blur_radius(2.0f), 6);
    ResampleTable table = {0};
    assert_int_equal(blur_table(&table, 100, 2.0f), 0);
    assert_int_equal(table.taps[50], 13);  // interior: 2 * 6 + 1
    assert_int_equal(table.start[50], 44);
    assert_int_equal(table.start[0], 0);   // clamped edge: taps 0..6
    assert_int_equal(table.taps[0], 7);
    assert_int_equal(blur_table(&table, 10, 0.0f), -1);
    resample_table_free(&table);
}

static void test_blur_constant_and_mean(void **state) {
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    for (int s = 0; s < 4; s++)
        for (int z = 0; z < 4; z++) {
            const int width = blur_sizes[z][0], height = blur_sizes[z][1];
            TestImage image = random_image(width, height, 0, 1);
            memset(image.image.pixels, 200 - 13 * z, image.bytes);
            assert_int_equal(blur_rgb(image.image.pixels, width, height, image.image.stride, blur_sigmas[s], &columns, &rows, &buffer, NULL), 0);
            for (size_t i = 0; i < image.bytes; i++) assert_int_equal(image.image.pixels[i], 200 - 13 * z);
            free(image.image.pixels);
        }
    TestImage noise = random_image(224, 224, 0, 9);
    double before = 0, after = 0;
    for (size_t i = 0; i < noise.bytes; i++) before += noise.image.pixels[i];
    assert_int_equal(blur_rgb(noise.image.pixels, 224, 224, noise.image.stride, 2.0f, &columns, &rows, &buffer, NULL), 0);
    for (size_t i = 0; i < noise.bytes; i++) after += noise.image.pixels[i];
    // Interior weights sum to 1; only the clamped border (6 of 224 px per
    // side) reweights pixels, and rounding is unbiased: 0.25 levels is ample.
    assert_true(fabs(before - after) / (double)noise.bytes < 0.25);
    free(noise.image.pixels);
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
}

// Against a double Gaussian with replicated (clamped) edges: within 1 level.
static void test_blur_matches_reference(void **state) {
    const int width = 17, height = 23;
    const float sigma = 1.3f;
    TestImage image = random_image(width, height, 0, 77);
    uint8_t *original = malloc(image.bytes);
    memcpy(original, image.image.pixels, image.bytes);
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    assert_int_equal(blur_rgb(image.image.pixels, width, height, image.image.stride, sigma, &columns, &rows, &buffer, NULL), 0);
    const int radius = (int)ceil(3 * sigma);
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int c = 0; c < 3; c++) {
                double sum = 0, total = 0;
                for (int dy = -radius; dy <= radius; dy++)
                    for (int dx = -radius; dx <= radius; dx++) {
                        const int sy = y + dy < 0 ? 0 : y + dy >= height ? height - 1 : y + dy;
                        const int sx = x + dx < 0 ? 0 : x + dx >= width ? width - 1 : x + dx;
                        const double w = exp(-(dx * dx + dy * dy) / (2.0 * sigma * sigma));
                        sum += w * original[(size_t)sy * width * 3 + (size_t)sx * 3 + (size_t)c];
                        total += w;
                    }
                const int got = image.image.pixels[(size_t)y * width * 3 + (size_t)x * 3 + (size_t)c];
                if (abs(got - (int)lround(sum / total)) > 1) fail_msg("blur (%d,%d,%d): %d vs %f", x, y, c, got, sum / total);
            }
    free(original);
    free(image.image.pixels);
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
}

// OpenCV's INTER_LINEAR at one axis position (what albumentations' Resize,
// and so LightlyTrain's embed, call): source coordinate (i + 0.5) * scale -
// 0.5, its two neighbours, both clamped to the image.
static void linear_taps(int i, double scale, int size, int *a, int *b, double *fraction) {
    const double at = (i + 0.5) * scale - 0.5;
    const int left = (int)floor(at);
    *fraction = at - left;
    *a = left < 0 ? 0 : left > size - 1 ? size - 1 : left;
    *b = left + 1 < 0 ? 0 : left + 1 > size - 1 ? size - 1 : left + 1;
}

// RESIZE_BILINEAR reads two pixels a side at every scale, shrinking by 4.2x
// too (no antialiasing), within one level of the exact interpolation; the
// training views' filter averages there instead.
static void test_resize_bilinear_is_opencv_linear(void **state) {
    enum { W = 97, H = 41, OW = 23, OH = 57 };  // shrink x 4.2x, grow y
    TestImage source = random_image(W, H, 5, 11);
    uint8_t out[OH * OW * 3], averaged[OH * OW * 3];
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    assert_int_equal(resize_rgb(&source.image, 0, 0, W, H, 0, RESIZE_BILINEAR, OW, OH, out,
                                OW * 3, &columns, &rows, &buffer, NULL), 0);
    assert_int_equal(columns.max_taps, 2);
    assert_int_equal(resize_rgb(&source.image, 0, 0, W, H, 0, RESIZE_ANTIALIASED, OW, OH, averaged,
                                OW * 3, &columns, &rows, &buffer, NULL), 0);
    const Image *im = &source.image;
    int far = 0;
    for (int y = 0; y < OH; y++) {
        int y0, y1, x0, x1;
        double fy, fx;
        linear_taps(y, (double)H / OH, H, &y0, &y1, &fy);
        for (int x = 0; x < OW; x++) {
            linear_taps(x, (double)W / OW, W, &x0, &x1, &fx);
            for (int c = 0; c < 3; c++) {
                const uint8_t *p = im->pixels + c;
                const double top = (1 - fx) * p[(size_t)y0 * im->stride + (size_t)x0 * 3] +
                                   fx * p[(size_t)y0 * im->stride + (size_t)x1 * 3];
                const double bottom = (1 - fx) * p[(size_t)y1 * im->stride + (size_t)x0 * 3] +
                                      fx * p[(size_t)y1 * im->stride + (size_t)x1 * 3];
                const double exact = (1 - fy) * top + fy * bottom;
                const uint8_t got = out[(y * OW + x) * 3 + c];
                if (fabs(got - exact) > 1.0)
                    fail_msg("(%d, %d, %d): %d, OpenCV's linear %.3f", x, y, c, got, exact);
                far += abs(got - averaged[(y * OW + x) * 3 + c]) > 8;
            }
        }
    }
    assert_true(far > OH * OW / 4);  // random pixels: averaging 4 of them is another image
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    free(source.image.pixels);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_resize_avx2_matches_scalar),
        cmocka_unit_test(test_resize_matches_reference),
        cmocka_unit_test(test_resize_both_orders_match_reference),
        cmocka_unit_test(test_resize_halving_is_block_mean),
        cmocka_unit_test(test_resize_constant_stays_constant),
        cmocka_unit_test(test_resize_flip_is_mirror),
        cmocka_unit_test(test_resize_rejects_outside_rectangle),
        cmocka_unit_test(test_resize_bilinear_is_opencv_linear),
        cmocka_unit_test(test_blur_avx2_matches_scalar),
        cmocka_unit_test(test_blur_radius),
        cmocka_unit_test(test_blur_constant_and_mean),
        cmocka_unit_test(test_blur_matches_reference),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
