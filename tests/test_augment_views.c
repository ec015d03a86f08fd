// Tests of the view transforms (augment/augment.h): defaults, validation,
// the statistics of view_sample over many draws, determinism, and
// view_render (operation order, source/covered mapping, no allocation once
// warm).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "augment/blur.h"
#include "augment/color.h"
#include "augment/resize.h"
#include "augment/rotate.h"
#include "data/load_plan.h"
#include "fixture_tensors.h"

#define DRAWS 20000

static void test_simclr_defaults(void **state) {
    ViewSet set;
    view_set_simclr(&set, 224);
    assert_int_equal(set.count, 2);
    for (int v = 0; v < 2; v++) {
        const ViewTransform *t = &set.views[v];
        assert_int_equal(t->size, 224);
        assert_float_equal(t->scale_min, 0.08f, 0);
        assert_float_equal(t->scale_max, 1.0f, 0);
        assert_float_equal(t->ratio_min, 0.75f, 1e-7);
        assert_float_equal(t->ratio_max, 4.0f / 3.0f, 1e-7);
        assert_float_equal(t->flip_p, 0.5f, 0);
        assert_float_equal(t->jitter_p, 0.8f, 0);
        assert_float_equal(t->brightness, 0.8f, 0);
        assert_float_equal(t->contrast, 0.8f, 0);
        assert_float_equal(t->saturation, 0.8f, 0);
        assert_float_equal(t->hue, 0.2f, 0);
        assert_float_equal(t->grey_p, 0.2f, 0);
        assert_float_equal(t->blur_p, 0.5f, 0);
        assert_float_equal(t->blur_sigma_min, 0.1f, 0);
        assert_float_equal(t->blur_sigma_max, 2.0f, 0);
        assert_float_equal(t->solarize_p, 0.0f, 0);
        assert_int_equal(view_transform_validate(t, NULL), 0);
    }
}

static void test_dino_defaults(void **state) {
    ViewSet set;
    view_set_dino(&set, 224, 96, 6);
    assert_int_equal(set.count, 8);
    for (int v = 0; v < set.count; v++) {
        const ViewTransform *t = &set.views[v];
        const int global = v < 2;
        assert_int_equal(t->size, global ? 224 : 96);
        assert_float_equal(t->scale_min, global ? 0.14f : 0.05f, 0);
        assert_float_equal(t->scale_max, global ? 1.0f : 0.14f, 0);
        assert_float_equal(t->jitter_p, 0.8f, 0);
        assert_float_equal(t->brightness, 0.4f, 0);
        assert_float_equal(t->contrast, 0.4f, 0);
        assert_float_equal(t->saturation, 0.2f, 0);
        assert_float_equal(t->hue, 0.1f, 0);
        assert_float_equal(t->grey_p, 0.2f, 0);
        assert_float_equal(t->blur_p, v == 0 ? 1.0f : v == 1 ? 0.1f : 0.5f, 0);
        assert_float_equal(t->solarize_p, v == 1 ? 0.2f : 0.0f, 0);
        assert_float_equal(t->solarize_threshold, 0.5f, 0);
        assert_int_equal(view_transform_validate(t, NULL), 0);
    }
    view_set_dino(&set, 224, 96, 40);  // more local views than fit: clamped
    assert_int_equal(set.count, AUGMENT_MAX_VIEWS);
}

static void test_validate_rejects_bad_values(void **state) {
    struct {
        size_t offset;
        int is_int;
        float value;
        const char *field;
    } cases[] = {
        {offsetof(ViewTransform, size), 1, 0, "size"},
        {offsetof(ViewTransform, scale_min), 0, 0.0f, "scale_min"},
        {offsetof(ViewTransform, scale_max), 0, 1.5f, "scale_max"},
        {offsetof(ViewTransform, scale_max), 0, 0.01f, "scale_max"},
        {offsetof(ViewTransform, ratio_min), 0, 0.0f, "ratio_min"},
        {offsetof(ViewTransform, ratio_max), 0, 0.5f, "ratio_max"},
        {offsetof(ViewTransform, flip_p), 0, 1.5f, "flip_p"},
        {offsetof(ViewTransform, vflip_p), 0, -0.5f, "vflip_p"},
        {offsetof(ViewTransform, jitter_p), 0, -0.1f, "jitter_p"},
        {offsetof(ViewTransform, grey_p), 0, NAN, "grey_p"},
        {offsetof(ViewTransform, blur_p), 0, 2.0f, "blur_p"},
        {offsetof(ViewTransform, solarize_p), 0, -1.0f, "solarize_p"},
        {offsetof(ViewTransform, brightness), 0, -0.5f, "brightness"},
        {offsetof(ViewTransform, contrast), 0, 100.0f, "contrast"},
        {offsetof(ViewTransform, saturation), 0, -1.0f, "saturation"},
        {offsetof(ViewTransform, hue), 0, 0.6f, "hue"},
        {offsetof(ViewTransform, solarize_threshold), 0, 1.5f, "solarize_threshold"},
        {offsetof(ViewTransform, blur_sigma_min), 0, 0.0f, "blur_sigma_min"},
        {offsetof(ViewTransform, blur_sigma_max), 0, 0.05f, "blur_sigma_max"},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        ViewSet set;
        view_set_simclr(&set, 224);
        ViewTransform t = set.views[0];
        if (cases[c].is_int) {
            int value = (int)cases[c].value;
            memcpy((char *)&t + cases[c].offset, &value, sizeof value);
        } else {
            memcpy((char *)&t + cases[c].offset, &cases[c].value, sizeof(float));
        }
        ErrorMessage err = {{0}};
        assert_int_equal(view_transform_validate(&t, &err), -1);
        if (!strstr(err.text, cases[c].field)) fail_msg("message for %s: %s", cases[c].field, err.text);
    }
}

// |count - n p| within 5 binomial standard deviations (false alarm ~6e-7).
static void expect_rate(int count, int n, double p, const char *what) {
    const double sigma = sqrt(n * p * (1.0 - p));
    if (fabs(count - n * p) > 5.0 * sigma + 1e-9)
        fail_msg("%s: %d of %d, expected %.1f +- %.1f", what, count, n, n * p, 5 * sigma);
}

static void test_sample_statistics_simclr(void **state) {
    ViewSet set;
    view_set_simclr(&set, 224);
    const ViewTransform *t = &set.views[0];
    const int width = 640, height = 480;
    int flips = 0, jitters = 0, greys = 0, blurs = 0, solarizes = 0, first_op[4] = {0};
    double hue_sum = 0;
    int hue_count = 0;
    for (int i = 0; i < DRAWS; i++) {
        Rng rng = rng_make(1, 0, (uint64_t)i, RNG_STREAM_VIEW);
        ViewParams p;
        view_sample(t, width, height, &rng, &p);
        const PixelRect c = p.crop;
        assert_true(c.width >= 1 && c.height >= 1 && c.x >= 0 && c.y >= 0);
        assert_true(c.x + c.width <= width && c.y + c.height <= height);
        // w, h are the rounded sqrt(target * ratio), sqrt(target / ratio):
        // each within 0.5 of the real value, which bounds area and ratio.
        assert_true((c.width + 0.5) * (c.height + 0.5) >= 0.08 * width * height);
        assert_true((c.width + 0.5) / (c.height - 0.5) >= 0.75);
        assert_true((c.width - 0.5) / (c.height + 0.5) <= 4.0 / 3.0);
        flips += p.flip;
        jitters += p.jitter;
        greys += p.grey;
        blurs += p.blur_sigma > 0;
        solarizes += p.solarize;
        int seen = 0;
        for (int k = 0; k < 4; k++) seen |= 1 << p.order[k];
        assert_int_equal(seen, 15);  // a permutation
        first_op[p.order[0]]++;
        if (p.jitter) {
            assert_true(p.brightness_factor >= 0.2f && p.brightness_factor <= 1.8f);
            assert_true(p.contrast_factor >= 0.2f && p.contrast_factor <= 1.8f);
            assert_true(p.saturation_factor >= 0.2f && p.saturation_factor <= 1.8f);
            assert_true(p.hue_factor >= -0.2f && p.hue_factor <= 0.2f);
            hue_sum += p.hue_factor;
            hue_count++;
        } else {
            assert_true(p.brightness_factor == 1.0f && p.hue_factor == 0.0f);
        }
        if (p.blur_sigma > 0) assert_true(p.blur_sigma >= 0.1f && p.blur_sigma <= 2.0f);
    }
    expect_rate(flips, DRAWS, 0.5, "flip");
    expect_rate(jitters, DRAWS, 0.8, "jitter");
    expect_rate(greys, DRAWS, 0.2, "grey");
    expect_rate(blurs, DRAWS, 0.5, "blur");
    assert_int_equal(solarizes, 0);
    for (int k = 0; k < 4; k++) expect_rate(first_op[k], DRAWS, 0.25, "first jitter op");
    // Hue U[-0.2, 0.2]: sd 0.4 / sqrt(12); mean within 5 standard errors.
    assert_true(fabs(hue_sum / hue_count) < 5.0 * 0.4 / sqrt(12.0) / sqrt(hue_count));
}

// With scale (0.05, 0.14) on a square image no attempt is ever rejected, so
// the area fraction is U(0.05, 0.14) and log(w/h) is U(log 3/4, log 4/3).
static void test_sample_crop_means(void **state) {
    ViewSet set;
    view_set_dino(&set, 224, 96, 1);
    const ViewTransform *t = &set.views[2];
    const int side = 1000;
    double area_sum = 0, log_ratio_sum = 0;
    for (int i = 0; i < DRAWS; i++) {
        Rng rng = rng_make(2, 0, (uint64_t)i, RNG_STREAM_VIEW + 2);
        ViewParams p;
        view_sample(t, side, side, &rng, &p);
        area_sum += (double)p.crop.width * p.crop.height / ((double)side * side);
        log_ratio_sum += log((double)p.crop.width / p.crop.height);
    }
    const double area_sd = 0.09 / sqrt(12.0), ratio_sd = 2.0 * log(4.0 / 3.0) / sqrt(12.0);
    // 5 standard errors, plus rounding w and h to integers (about 0.5 / 200
    // relative per side for these crops, and it averages out): 0.001.
    assert_true(fabs(area_sum / DRAWS - 0.095) < 5.0 * area_sd / sqrt(DRAWS) + 0.001);
    assert_true(fabs(log_ratio_sum / DRAWS) < 5.0 * ratio_sd / sqrt(DRAWS) + 0.001);
}

// When no attempt fits: the central crop with the ratio clamped to the range.
static void test_sample_crop_fallback(void **state) {
    ViewSet set;
    view_set_simclr(&set, 224);
    ViewTransform t = set.views[0];
    t.scale_min = 0.9f;
    t.ratio_min = 3.0f;
    t.ratio_max = 4.0f;
    Rng rng = rng_make(3, 0, 0, RNG_STREAM_VIEW);
    ViewParams p;
    view_sample(&t, 300, 300, &rng, &p);
    assert_int_equal(p.crop.width, 300);
    assert_int_equal(p.crop.height, 100);  // round(300 / 3)
    assert_int_equal(p.crop.x, 0);
    assert_int_equal(p.crop.y, 100);
    t.ratio_min = 0.2f;
    t.ratio_max = 0.25f;
    view_sample(&t, 300, 300, &rng, &p);
    assert_int_equal(p.crop.width, 75);  // round(300 * 0.25)
    assert_int_equal(p.crop.height, 300);
    assert_int_equal(p.crop.x, 112);
    assert_int_equal(p.crop.y, 0);
}

static void test_sample_statistics_dino(void **state) {
    ViewSet set;
    view_set_dino(&set, 224, 96, 6);
    int blur[3] = {0}, solarize[3] = {0};
    for (int i = 0; i < DRAWS; i++)
        for (int v = 0; v < 3; v++) {
            Rng rng = rng_make(4, 1, (uint64_t)i, RNG_STREAM_VIEW + (uint32_t)v);
            ViewParams p;
            view_sample(&set.views[v], 500, 400, &rng, &p);
            blur[v] += p.blur_sigma > 0;
            solarize[v] += p.solarize;
        }
    assert_int_equal(blur[0], DRAWS);
    expect_rate(blur[1], DRAWS, 0.1, "global 2 blur");
    expect_rate(blur[2], DRAWS, 0.5, "local blur");
    assert_int_equal(solarize[0], 0);
    expect_rate(solarize[1], DRAWS, 0.2, "global 2 solarize");
    assert_int_equal(solarize[2], 0);
}

static Image make_image(int width, int height, uint64_t seed) {
    Image image = {.width = width, .height = height, .stride = (size_t)width * 3};
    image.pixels = malloc(image.stride * (size_t)height);
    Rng rng = rng_make(seed, 9, 0, 0);
    // Smooth gradients plus noise, so that colour ops and blur all matter.
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int c = 0; c < 3; c++)
                image.pixels[(size_t)y * image.stride + (size_t)x * 3 + (size_t)c] =
                    (uint8_t)((x * (c + 1) + y * (3 - c)) % 200 + (rng_u32(&rng) & 31));
    return image;
}

static void test_determinism(void **state) {
    ViewSet set;
    view_set_dino(&set, 64, 32, 2);
    Image image = make_image(120, 90, 1);
    const PixelRect whole = {0, 0, 120, 90};
    AugmentScratch *scratch = augment_scratch_create();
    ViewParams params[4];
    for (int v = 0; v < 4; v++) {
        Rng a = rng_make(42, 3, 17, RNG_STREAM_VIEW + (uint32_t)v), b = a;
        ViewParams pa, pb;
        view_sample(&set.views[v], 120, 90, &a, &pa);
        view_sample(&set.views[v], 120, 90, &b, &pb);
        assert_memory_equal(&pa, &pb, sizeof pa);
        params[v] = pa;
        const size_t bytes = (size_t)set.views[v].size * set.views[v].size * 3;
        uint8_t *out_a = malloc(bytes), *out_b = malloc(bytes);
        assert_int_equal(view_render(&set.views[v], &pa, &image, whole, out_a, scratch, NULL), 0);
        assert_int_equal(view_render(&set.views[v], &pb, &image, whole, out_b, scratch, NULL), 0);
        assert_memory_equal(out_a, out_b, bytes);
        free(out_a);
        free(out_b);
    }
    // Different view ids draw different parameters (same transform for 2, 3).
    assert_true(memcmp(&params[2].crop, &params[3].crop, sizeof(PixelRect)) != 0 ||
                params[2].hue_factor != params[3].hue_factor);
    assert_true(memcmp(&params[0].crop, &params[1].crop, sizeof(PixelRect)) != 0);
    augment_scratch_destroy(scratch);
    free(image.pixels);
}

// LightlyTrain's vertical_prob (vflip_p): drawn after every other draw, so
// the rest is what a view without it draws; the view is the row mirror of
// the unflipped one, in the 8-bit and the float renderer.
static void test_vertical_flip(void **state) {
    (void)state;
    enum { SIZE = 24 };
    ViewSet set;
    view_set_simclr(&set, SIZE);
    ViewTransform plain = set.views[0], flipped = plain;
    plain.blur_p = flipped.blur_p = 0.0f;  // the mirror of a blur is exact, its rows not
    flipped.vflip_p = 1.0f;
    assert_int_equal(view_transform_validate(&flipped, NULL), 0);
    Image image = make_image(90, 70, 5);
    AugmentScratch *scratch = augment_scratch_create();
    uint8_t up[SIZE * SIZE * 3], down[SIZE * SIZE * 3];
    for (uint32_t id = 0; id < 8; id++) {
        Rng a = rng_make(11, 0, id, RNG_STREAM_VIEW), b = a;
        ViewParams p, q;
        view_sample(&plain, 90, 70, &a, &p);
        view_sample(&flipped, 90, 70, &b, &q);
        assert_int_equal(p.vflip, 0);
        assert_int_equal(q.vflip, 1);
        q.vflip = 0;
        assert_memory_equal(&p, &q, sizeof p);
        q.vflip = 1;
        assert_int_equal(view_render(&plain, &p, &image, (PixelRect){0, 0, 90, 70}, up, scratch,
                                     NULL), 0);
        assert_int_equal(view_render(&flipped, &q, &image, (PixelRect){0, 0, 90, 70}, down,
                                     scratch, NULL), 0);
        for (int y = 0; y < SIZE; y++)
            assert_memory_equal(up + (size_t)y * SIZE * 3, down + (size_t)(SIZE - 1 - y) * SIZE * 3,
                                SIZE * 3);
    }
    float pixels[40 * 30 * 2], top[SIZE * SIZE * 2], bottom[SIZE * SIZE * 2];
    for (int i = 0; i < 40 * 30 * 2; i++) pixels[i] = (float)((i * 37) % 101) / 100.0f;
    ViewSet two;
    view_set_simclr(&two, SIZE);
    view_set_channels(&two, 2, 2, NULL);
    const FloatImage source = {pixels, 40, 30, 2, 40 * 2};
    ViewParams p = {.crop = {3, 2, 31, 25}, .flip = 1}, q = p;
    q.vflip = 1;
    assert_int_equal(view_render_float(&two.views[0], &p, &source, (PixelRect){0, 0, 40, 30}, top,
                                       scratch, NULL), 0);
    assert_int_equal(view_render_float(&two.views[0], &q, &source, (PixelRect){0, 0, 40, 30},
                                       bottom, scratch, NULL), 0);
    for (int y = 0; y < SIZE; y++)
        assert_memory_equal(top + (size_t)y * SIZE * 2, bottom + (size_t)(SIZE - 1 - y) * SIZE * 2,
                            SIZE * 2 * sizeof(float));
    augment_scratch_destroy(scratch);
    free(image.pixels);
}

// LightlyTrain's random_rotation: albumentations' Rotate (INTER_AREA,
// BORDER_REFLECT_101) through tests/fixtures/rotation.safetensors
// (tools/make_rotation_fixture.py, OpenCV 5.0): 8-bit views equal within a
// level (measured: equal), float views within 1e-5; the draw comes last and
// only with rotate_p > 0; view_render applies it after the resize.
static void test_rotation(void **state) {
    (void)state;
    enum { SIZE = 32 };
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read("tests/fixtures/rotation.safetensors", &file, &err))
        fail_msg("%s", err.text);
    const uint8_t *image = safetensors_data(
        &file, fixture_find_tensor(&file, "image_u8", SAFE_U8, SIZE * SIZE * 3));
    const float *image_float = safetensors_data(
        &file, fixture_find_tensor(&file, "image_f32", SAFE_F32, SIZE * SIZE * 2));
    const SafeTensor *angles_tensor = safetensors_find(&file, "angles");
    assert_non_null(angles_tensor);
    const int count = (int)safe_tensor_elements(angles_tensor);
    const float *angles = safetensors_data(&file, angles_tensor);
    uint8_t got[SIZE * SIZE * 3];
    float got_float[SIZE * SIZE * 2];
    for (int a = 0; a < count; a++) {
        char name[64];
        snprintf(name, sizeof name, "rotated_u8/%d", a);
        const uint8_t *want = safetensors_data(
            &file, fixture_find_tensor(&file, name, SAFE_U8, SIZE * SIZE * 3));
        rotate_view_u8(image, got, SIZE, angles[a]);
        for (int i = 0; i < SIZE * SIZE * 3; i++)
            if (abs(got[i] - want[i]) > 1)
                fail_msg("%g degrees, sample %d: %d, albumentations %d", (double)angles[a], i,
                         got[i], want[i]);
        snprintf(name, sizeof name, "rotated_f32/%d", a);
        const float *want_float = safetensors_data(
            &file, fixture_find_tensor(&file, name, SAFE_F32, SIZE * SIZE * 2));
        rotate_view_float(image_float, got_float, SIZE, 2, angles[a]);
        for (int i = 0; i < SIZE * SIZE * 2; i++)
            if (fabsf(got_float[i] - want_float[i]) > 1e-5f)
                fail_msg("%g degrees, float sample %d: %g, albumentations %g", (double)angles[a],
                         i, (double)got_float[i], (double)want_float[i]);
    }
    safetensors_free(&file);
    // The draw: last, so the rest is what the view draws without it.
    ViewSet set;
    view_set_simclr(&set, 16);
    ViewTransform plain = set.views[0], turned = plain;
    turned.rotate_p = 1.0f;
    turned.rotate_min = turned.rotate_max = 30.0f;
    assert_int_equal(view_transform_validate(&turned, NULL), 0);
    Rng first = rng_make(3, 0, 1, RNG_STREAM_VIEW), second = first;
    ViewParams p, q;
    view_sample(&plain, 80, 60, &first, &p);
    view_sample(&turned, 80, 60, &second, &q);
    assert_int_equal(q.rotate, 1);
    assert_float_equal(q.rotate_degrees, 30.0f, 0);
    q.rotate = 0;
    q.rotate_degrees = 0.0f;
    assert_memory_equal(&p, &q, sizeof p);
    turned.rotate_min = 40.0f;  // above rotate_max
    assert_int_equal(view_transform_validate(&turned, NULL), -1);
    // view_render: resize, then rotation, then the colour ops (off here).
    Image source = make_image(80, 60, 4);
    AugmentScratch *scratch = augment_scratch_create();
    const ViewParams straight = {.crop = {5, 4, 50, 40}}, rotated = {.crop = {5, 4, 50, 40},
                                                                      .rotate = 1,
                                                                      .rotate_degrees = 30.0f};
    uint8_t unrotated[16 * 16 * 3], view[16 * 16 * 3], want_view[16 * 16 * 3];
    assert_int_equal(view_render(&plain, &straight, &source, (PixelRect){0, 0, 80, 60},
                                 unrotated, scratch, NULL), 0);
    assert_int_equal(view_render(&plain, &rotated, &source, (PixelRect){0, 0, 80, 60}, view,
                                 scratch, NULL), 0);
    rotate_view_u8(unrotated, want_view, 16, 30.0);
    assert_memory_equal(view, want_view, sizeof view);
    augment_scratch_destroy(scratch);
    free(source.pixels);
}

// view_render equals the steps done one by one, in LightlyTrain's order.
static void test_render_order(void **state) {
    ViewSet set;
    view_set_dino(&set, 48, 32, 0);
    const ViewTransform *t = &set.views[1];
    Image image = make_image(100, 80, 2);
    ViewParams p = {.crop = {10, 5, 70, 60}, .flip = 1, .jitter = 1,
                    .order = {JITTER_HUE, JITTER_SATURATION, JITTER_BRIGHTNESS, JITTER_CONTRAST},
                    .brightness_factor = 1.3f, .contrast_factor = 0.7f, .saturation_factor = 1.2f,
                    .hue_factor = 0.05f, .grey = 0, .blur_sigma = 1.1f, .solarize = 1};
    AugmentScratch *scratch = augment_scratch_create();
    uint8_t got[48 * 48 * 3], want[48 * 48 * 3];
    ErrorMessage err;
    assert_int_equal(view_render(t, &p, &image, (PixelRect){0, 0, 100, 80}, got, scratch, &err), 0);
    ResampleTable columns = {0}, rows = {0};
    ResampleBuffer buffer = {0};
    assert_int_equal(resize_rgb(&image, 10, 5, 70, 60, 1, RESIZE_ANTIALIASED, 48, 48, want, 48 * 3, &columns, &rows, &buffer, NULL), 0);
    color_hue(want, 48 * 48, 0.05f);
    color_saturation(want, 48 * 48, 1.2f);
    color_brightness(want, 48 * 48, 1.3f);
    color_contrast(want, 48 * 48, 0.7f);
    assert_int_equal(blur_rgb(want, 48, 48, 48 * 3, 1.1f, &columns, &rows, &buffer, NULL), 0);
    color_solarize(want, 48 * 48, 0.5f);
    assert_memory_equal(got, want, sizeof got);
    // Greyscale comes after the jitter and before the blur.
    p.grey = 1;
    assert_int_equal(view_render(t, &p, &image, (PixelRect){0, 0, 100, 80}, got, scratch, &err), 0);
    for (int i = 0; i < 48 * 48; i++) assert_true(got[3 * i] == got[3 * i + 1] && got[3 * i] == got[3 * i + 2]);
    resample_table_free(&columns);
    resample_table_free(&rows);
    resample_buffer_free(&buffer);
    augment_scratch_destroy(scratch);
    free(image.pixels);
}

// The crop is in full-image pixels; the source covers `covered` at any scale.
static void test_render_covered_mapping(void **state) {
    ViewSet set;
    view_set_simclr(&set, 16);
    const ViewTransform *t = &set.views[0];
    AugmentScratch *scratch = augment_scratch_create();
    uint8_t from_full[16 * 16 * 3], from_part[16 * 16 * 3];
    // Same scale: a sub-rectangle source gives the same pixels as the whole.
    Image full = make_image(64, 48, 3);
    Image part = {.pixels = full.pixels + 5 * full.stride + 7 * 3, .width = 40, .height = 30, .stride = full.stride};
    const ViewParams p = {.crop = {12, 9, 30, 21}, .flip = 1};
    assert_int_equal(view_render(t, &p, &full, (PixelRect){0, 0, 64, 48}, from_full, scratch, NULL), 0);
    assert_int_equal(view_render(t, &p, &part, (PixelRect){7, 5, 40, 30}, from_part, scratch, NULL), 0);
    assert_memory_equal(from_full, from_part, sizeof from_full);
    // Half scale: a 24x24 source covering full-image (8, 8, 48x48); red
    // where full-image x < 32, blue right of it.
    Image half = {.width = 24, .height = 24, .stride = 72};
    half.pixels = calloc(72 * 24, 1);
    for (int y = 0; y < 24; y++)
        for (int x = 0; x < 24; x++) half.pixels[y * 72 + x * 3 + (8 + 2 * x < 32 ? 0 : 2)] = 250;
    const ViewParams left = {.crop = {20, 10, 10, 30}}, right = {.crop = {34, 40, 20, 16}};
    assert_int_equal(view_render(t, &left, &half, (PixelRect){8, 8, 48, 48}, from_part, scratch, NULL), 0);
    for (int i = 0; i < 16 * 16; i++) assert_true(from_part[3 * i] == 250 && from_part[3 * i + 2] == 0);
    assert_int_equal(view_render(t, &right, &half, (PixelRect){8, 8, 48, 48}, from_part, scratch, NULL), 0);
    for (int i = 0; i < 16 * 16; i++) assert_true(from_part[3 * i] == 0 && from_part[3 * i + 2] == 250);
    // A crop outside the decoded rectangle is an error naming both.
    ErrorMessage err = {{0}};
    const ViewParams outside = {.crop = {2, 10, 10, 10}};
    assert_int_equal(view_render(t, &outside, &half, (PixelRect){8, 8, 48, 48}, from_part, scratch, &err), -1);
    assert_non_null(strstr(err.text, "crop (2, 10, 10x10)"));
    free(half.pixels);
    free(full.pixels);
    augment_scratch_destroy(scratch);
}

// Once warm with the largest view, rendering never allocates again.
static void test_render_no_allocation_when_warm(void **state) {
    ViewSet set;
    view_set_simclr(&set, 224);
    const ViewTransform *t = &set.views[0];
    Image image = make_image(400, 300, 4);
    const PixelRect whole = {0, 0, 400, 300};
    AugmentScratch *scratch = augment_scratch_create();
    uint8_t *out = malloc(224 * 224 * 3);
    const ViewParams largest = {.crop = whole, .blur_sigma = 2.0f};
    assert_int_equal(view_render(t, &largest, &image, whole, out, scratch, NULL), 0);
    const int warm = augment_scratch_allocations(scratch);
    assert_true(warm > 0);
    for (int i = 0; i < 100; i++) {
        Rng rng = rng_make(5, 0, (uint64_t)i, RNG_STREAM_VIEW);
        ViewParams p;
        view_sample(t, 400, 300, &rng, &p);
        assert_int_equal(view_render(t, &p, &image, whole, out, scratch, NULL), 0);
    }
    assert_int_equal(augment_scratch_allocations(scratch), warm);
    free(out);
    free(image.pixels);
    augment_scratch_destroy(scratch);
}


// DINOv31's views (LightlyTrain's DINOv31Transform): the two globals, their
// clean renders for the teacher, DINOv2's locals, then the PaKA locals.
static void test_dinov31_views(void **state) {
    (void)state;
    ViewSet set;
    ErrorMessage err = {{0}};
    assert_int_equal(view_set_dinov31(&set, 224, 98, 8, 8, &err), 0);
    assert_int_equal(set.count, 20);
    assert_int_equal(set.global_count, 4);
    assert_int_equal(set.teacher_views, 2);
    assert_int_equal(view_set_validate(&set, &err), 0);
    for (int v = 0; v < set.count; v++) {
        const ViewTransform *t = &set.views[v];
        assert_int_equal(t->size, v < 4 ? 224 : 98);
        const ViewCoupling kind = v < 2 ? VIEW_COUPLING_NONE : v < 4 ? VIEW_COUPLING_SAME
                                  : v < 12 ? VIEW_COUPLING_NONE : VIEW_COUPLING_INSIDE;
        assert_int_equal(t->coupling, kind);
        if (kind == VIEW_COUPLING_SAME) {
            assert_int_equal(t->parent, v - 2);
            assert_true(t->jitter_p == 0 && t->grey_p == 0 && t->blur_p == 0 && t->solarize_p == 0);
        }
        if (kind == VIEW_COUPLING_INSIDE) {
            assert_int_equal(t->parent, (v - 12) % 2);
            assert_float_equal(t->scale_min, 0.05f, 0);
            assert_float_equal(t->scale_max, 0.40f, 0);
            assert_float_equal(t->blur_p, 0.5f, 0);  // DINOv2's local photometrics
            assert_float_equal(t->flip_p, 0.5f, 0);
        }
    }
    assert_int_equal(view_set_dinov31(&set, 224, 98, 8, 13, &err), -1);
    assert_non_null(strstr(err.text, "at most 24 views"));
    assert_int_equal(view_set_dinov31(&set, 224, 64, 2, 3, &err), 0);
    set.views[6].parent = 6;  // a coupled view must follow an earlier one
    assert_int_equal(view_set_validate(&set, &err), -1);
    assert_non_null(strstr(err.text, "view 6 follows view 6"));
}

// Planned views of many images: a clean render has its parent's crop and
// flip and no colour op; a PaKA local lies inside its parent, with areas
// uniform in [0.05, 0.4] of the parent's (mean 0.225) and aspect ratios
// uniform in [3/4, 4/3] (mean 1.042).
static void test_coupled_views_planned(void **state) {
    (void)state;
    ViewSet set;
    assert_int_equal(view_set_dinov31(&set, 224, 98, 2, 2, NULL), 0);
    const ImageInfo info = {.width = 640, .height = 480, .format = IMAGE_FORMAT_JPEG};
    double area = 0.0, aspect = 0.0;
    int samples = 0, flips = 0;
    for (uint64_t key = 0; key < 2000; key++) {
        LoadPlan plan;
        load_plan(&set, 7, 3, key, &info, 0, &plan);
        for (int g = 0; g < 2; g++) {
            const ViewParams *clean = &plan.params[2 + g], *parent = &plan.params[g];
            assert_memory_equal(&clean->crop, &parent->crop, sizeof clean->crop);
            assert_int_equal(clean->flip, parent->flip);
            assert_true(!clean->jitter && !clean->grey && !clean->solarize);
            assert_true(clean->blur_sigma == 0.0f);
        }
        for (int k = 0; k < 2; k++) {
            const ViewParams *local = &plan.params[6 + k], *parent = &plan.params[k];
            assert_true(pixel_rect_contains(parent->crop, local->crop));
            area += (double)local->crop.width * local->crop.height /
                    ((double)parent->crop.width * parent->crop.height);
            aspect += (double)local->crop.width / local->crop.height;
            flips += local->flip;
            samples++;
        }
    }
    area /= samples, aspect /= samples;
    assert_true(area > 0.215 && area < 0.235);
    assert_true(aspect > 1.02 && aspect < 1.07);
    assert_true(flips > samples * 0.45 && flips < samples * 0.55);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_simclr_defaults),
        cmocka_unit_test(test_dino_defaults),
        cmocka_unit_test(test_validate_rejects_bad_values),
        cmocka_unit_test(test_sample_statistics_simclr),
        cmocka_unit_test(test_sample_crop_means),
        cmocka_unit_test(test_sample_crop_fallback),
        cmocka_unit_test(test_sample_statistics_dino),
        cmocka_unit_test(test_determinism),
        cmocka_unit_test(test_vertical_flip),
        cmocka_unit_test(test_rotation),
        cmocka_unit_test(test_render_order),
        cmocka_unit_test(test_render_covered_mapping),
        cmocka_unit_test(test_render_no_allocation_when_warm),
        cmocka_unit_test(test_dinov31_views),
        cmocka_unit_test(test_coupled_views_planned),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
