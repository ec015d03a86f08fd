// Tests of the colour kernels (augment/color.h): each op against a plain
// per-pixel float formula written here, and AVX2 against scalar (bit-exact).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "augment/color.h"
#include "util/cpu.h"
#include "util/rng.h"

// Random pixels plus the special cases of the HSV formulas: greys (max ==
// min), black, white, pure and mixed primaries, ties between channels.
static uint8_t *test_pixels(size_t pixels, uint64_t seed) {
    static const uint8_t special[][3] = {{0, 0, 0},     {255, 255, 255}, {128, 128, 128}, {255, 0, 0},
                                         {0, 255, 0},   {0, 0, 255},     {255, 255, 0},   {0, 255, 255},
                                         {255, 0, 255}, {200, 200, 10},  {10, 200, 200},  {200, 10, 200},
                                         {1, 0, 0},     {254, 255, 255}, {90, 30, 30},    {30, 90, 90}};
    uint8_t *rgb = malloc(pixels * 3 + 1);
    assert_non_null(rgb);
    Rng rng = rng_make(seed, 2, 0, 0);
    for (size_t i = 0; i < pixels * 3; i++) rgb[i] = (uint8_t)rng_u32(&rng);
    for (size_t i = 0; i < 16 && i < pixels; i++) memcpy(rgb + 3 * (pixels - 1 - i), special[i], 3);
    return rgb;
}

static int round_clamp(double value) {
    const long rounded = lround(value);
    return rounded < 0 ? 0 : rounded > 255 ? 255 : (int)rounded;
}

// Fixed point (16.16) vs the exact float formula: at most one level apart,
// where the exact value lies within ~0.01 of a rounding boundary.
static void expect_near(const uint8_t *got, const double *want, size_t count, const char *what) {
    for (size_t i = 0; i < count; i++)
        if (abs(got[i] - round_clamp(want[i])) > 1) fail_msg("%s value %zu: %d vs %.4f", what, i, got[i], want[i]);
}

#define PIXELS 4099  // odd, not a multiple of 8

static void test_brightness_contrast_saturation(void **state) {
    const float factors[] = {0.0f, 0.37f, 1.0f, 1.8f, 3.5f};
    double *want = malloc(PIXELS * 3 * sizeof *want);
    for (int f = 0; f < 5; f++) {
        const double factor = factors[f];
        uint8_t *rgb = test_pixels(PIXELS, 1);
        for (size_t i = 0; i < PIXELS * 3; i++) want[i] = factor * rgb[i];
        color_brightness(rgb, PIXELS, factors[f]);
        expect_near(rgb, want, PIXELS * 3, "brightness");
        free(rgb);

        rgb = test_pixels(PIXELS, 2);
        double mean = 0;
        for (size_t i = 0; i < PIXELS; i++) mean += color_luma(rgb[3 * i], rgb[3 * i + 1], rgb[3 * i + 2]);
        mean /= PIXELS;
        for (size_t i = 0; i < PIXELS * 3; i++) want[i] = factor * rgb[i] + (1.0 - factor) * mean;
        color_contrast(rgb, PIXELS, factors[f]);
        expect_near(rgb, want, PIXELS * 3, "contrast");
        free(rgb);

        rgb = test_pixels(PIXELS, 3);
        for (size_t i = 0; i < PIXELS * 3; i++) {
            const uint8_t *p = rgb + i / 3 * 3;
            // grey(pixel) is Pillow's 'L' of the pixel (see test_greyscale_exact).
            const int grey = (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
            want[i] = factor * rgb[i] + (1.0 - factor) * grey;
        }
        color_saturation(rgb, PIXELS, factors[f]);
        expect_near(rgb, want, PIXELS * 3, "saturation");
        free(rgb);
    }
    free(want);
}

// torchvision's RGB -> HSV -> RGB hue shift written plainly in double.
static void reference_hue(const uint8_t *in, double shift, double out[3]) {
    const double r = in[0] / 255.0, g = in[1] / 255.0, b = in[2] / 255.0;
    const double maxc = fmax(r, fmax(g, b)), minc = fmin(r, fmin(g, b));
    const double chroma = maxc - minc;
    double h = 0.0;
    if (chroma > 0) {
        if (maxc == r) h = fmod((g - b) / chroma + 6.0, 6.0);
        else if (maxc == g) h = (b - r) / chroma + 2.0;
        else h = (r - g) / chroma + 4.0;
        h /= 6.0;
    }
    const double s = maxc > 0 ? chroma / maxc : 0.0, v = maxc;
    h = h + shift;
    h -= floor(h);
    const double h6 = h * 6.0;
    const int sector = (int)floor(h6) % 6;
    const double f = h6 - floor(h6);
    const double p = v * (1 - s), q = v * (1 - s * f), t = v * (1 - s * (1 - f));
    const double table[6][3] = {{v, t, p}, {q, v, p}, {p, v, t}, {p, q, v}, {t, p, v}, {v, p, q}};
    for (int c = 0; c < 3; c++) out[c] = table[sector][c] * 255.0;
}

static void test_hue_matches_reference(void **state) {
    const float shifts[] = {-0.5f, -0.2f, 0.0f, 0.1f, 0.37f, 0.5f};
    double *want = malloc(PIXELS * 3 * sizeof *want);
    for (int k = 0; k < 6; k++) {
        uint8_t *rgb = test_pixels(PIXELS, 4);
        for (size_t i = 0; i < PIXELS; i++) reference_hue(rgb + 3 * i, shifts[k], want + 3 * i);
        color_hue(rgb, PIXELS, shifts[k]);
        // float vs double HSV round trip: within one level (float error ~1e-5
        // of full scale can only flip values next to a rounding boundary).
        expect_near(rgb, want, PIXELS * 3, "hue");
        free(rgb);
    }
    free(want);
}

static void test_greyscale_exact(void **state) {
    uint8_t *rgb = test_pixels(PIXELS, 5);
    uint8_t *copy = malloc(PIXELS * 3);
    memcpy(copy, rgb, PIXELS * 3);
    color_greyscale(rgb, PIXELS);
    for (size_t i = 0; i < PIXELS; i++) {
        const uint8_t *p = copy + 3 * i;
        // Pillow's ImagingConvert RGB -> L, exactly.
        const int pillow = (p[0] * 19595 + p[1] * 38470 + p[2] * 7471 + 0x8000) >> 16;
        assert_int_equal(rgb[3 * i], pillow);
        assert_int_equal(rgb[3 * i + 1], pillow);
        assert_int_equal(rgb[3 * i + 2], pillow);
        // Its documented formula R*299/1000 + G*587/1000 + B*114/1000: the
        // 16-bit coefficients differ by < 2e-5 each, so at most 1 level.
        const int documented = (p[0] * 299 + p[1] * 587 + p[2] * 114 + 500) / 1000;
        assert_true(abs(pillow - documented) <= 1);
    }
    free(rgb);
    free(copy);
}

static void test_solarize_exact(void **state) {
    const float thresholds[] = {0.0f, 0.5f, 0.999f, 1.0f};
    for (int k = 0; k < 4; k++) {
        uint8_t *rgb = test_pixels(PIXELS, 6);
        uint8_t *copy = malloc(PIXELS * 3);
        memcpy(copy, rgb, PIXELS * 3);
        color_solarize(rgb, PIXELS, thresholds[k]);
        for (size_t i = 0; i < PIXELS * 3; i++) {
            const int inverted = copy[i] >= thresholds[k] * 255.0f;
            assert_int_equal(rgb[i], inverted ? 255 - copy[i] : copy[i]);
        }
        free(rgb);
        free(copy);
    }
    assert_int_equal(color_solarize_level(0.5f), 128);  // Pillow: 127.5 -> values >= 128
}

// Sizes around the 8-pixel / 32-byte steps and their tails.
static const size_t simd_sizes[] = {1, 7, 8, 9, 10, 11, 17, 223 * 17, 224 * 224};

static void test_color_avx2_matches_scalar(void **state) {
    if (!cpu_has_avx2()) {
        print_message("SKIPPED colour AVX2 vs scalar: this CPU has no AVX2 (or LTC_SIMD=scalar)\n");
        return;
    }
    for (size_t z = 0; z < sizeof simd_sizes / sizeof simd_sizes[0]; z++) {
        const size_t n = simd_sizes[z];
        uint8_t *a = test_pixels(n, 10 + z), *b = malloc(n * 3 + 1);
        for (int op = 0; op < 9; op++) {
            memcpy(b, a, n * 3);
            switch (op) {
                case 0: color_affine_scalar(a, n * 3, 117965, 0); color_affine_avx2(b, n * 3, 117965, 0); break;
                case 1: color_affine_scalar(a, n * 3, 20000, 5123456); color_affine_avx2(b, n * 3, 20000, 5123456); break;
                case 2: color_affine_scalar(a, n * 3, 90000, -3000000); color_affine_avx2(b, n * 3, 90000, -3000000); break;
                case 3: assert_true(color_luma_sum_scalar(a, n) == color_luma_sum_avx2(a, n)); break;
                case 4: color_saturation_scalar(a, n, 110000); color_saturation_avx2(b, n, 110000); break;
                case 5: color_saturation_scalar(a, n, 13000); color_saturation_avx2(b, n, 13000); break;
                case 6: color_hue_scalar(a, n, 0.137f); color_hue_avx2(b, n, 0.137f); break;
                case 7: color_hue_scalar(a, n, -0.5f); color_hue_avx2(b, n, -0.5f); break;
                default: color_greyscale_scalar(a, n); color_greyscale_avx2(b, n); break;
            }
            // Same integer / IEEE float operations in the same order: exact.
            assert_memory_equal(a, b, n * 3);
        }
        for (int level = 0; level <= 256; level += 64) {
            memcpy(b, a, n * 3);
            color_solarize_scalar(a, n * 3, level > 255 ? 255 : level);
            color_solarize_avx2(b, n * 3, level > 255 ? 255 : level);
            assert_memory_equal(a, b, n * 3);
        }
        free(a);
        free(b);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_brightness_contrast_saturation),
        cmocka_unit_test(test_hue_matches_reference),
        cmocka_unit_test(test_greyscale_exact),
        cmocka_unit_test(test_solarize_exact),
        cmocka_unit_test(test_color_avx2_matches_scalar),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
