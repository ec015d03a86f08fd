// Colour operations: scalar kernels and run-time dispatch (see color.h; the
// AVX2 kernels are in color_avx2.c).
#include "augment/color.h"

#include <math.h>

#include "util/cpu.h"

static inline uint8_t clamp_u8(int32_t value) {
    return (uint8_t)(value < 0 ? 0 : value > 255 ? 255 : value);
}

void color_affine_scalar(uint8_t *bytes, size_t count, int32_t scale, int32_t offset) {
    const int32_t bias = offset + (1 << (COLOR_FIXED_BITS - 1));
    for (size_t i = 0; i < count; i++) bytes[i] = clamp_u8((bytes[i] * scale + bias) >> COLOR_FIXED_BITS);
}

uint64_t color_luma_sum_scalar(const uint8_t *rgb, size_t pixels) {
    uint64_t sum = 0;
    for (size_t i = 0; i < pixels; i++, rgb += 3) sum += (uint64_t)color_luma(rgb[0], rgb[1], rgb[2]);
    return sum;
}

void color_saturation_scalar(uint8_t *rgb, size_t pixels, int32_t scale) {
    const int32_t half = 1 << (COLOR_FIXED_BITS - 1);
    for (size_t i = 0; i < pixels; i++, rgb += 3) {
        const int32_t grey = (COLOR_FIXED_ONE - scale) * color_luma(rgb[0], rgb[1], rgb[2]) + half;
        for (int c = 0; c < 3; c++) rgb[c] = clamp_u8((scale * rgb[c] + grey) >> COLOR_FIXED_BITS);
    }
}

static inline float clamp_unit(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

void color_hue_shift(float rgb[3], float hue_factor) {
    const float r = rgb[0], g = rgb[1], b = rgb[2];
    float maxc = r > g ? r : g;
    maxc = maxc > b ? maxc : b;
    float minc = r < g ? r : g;
    minc = minc < b ? minc : b;
    const int equal = maxc == minc;
    const float chroma = maxc - minc;
    const float s = chroma / (equal ? 1.0f : maxc);
    const float divisor = equal ? 1.0f : chroma;
    const float rc = (maxc - r) / divisor, gc = (maxc - g) / divisor, bc = (maxc - b) / divisor;
    float h;
    if (maxc == r)
        h = bc - gc;
    else if (maxc == g)
        h = (2.0f + rc) - bc;
    else
        h = (4.0f + gc) - rc;
    h = h / 6.0f + 1.0f;
    h = h - floorf(h);
    h = h + hue_factor;
    h = h - floorf(h);
    const float v = maxc;
    const float h6 = h * 6.0f;
    float sector = floorf(h6);
    const float f = h6 - sector;
    if (sector == 6.0f) sector = 0.0f;
    const float p = clamp_unit(v * (1.0f - s));
    const float q = clamp_unit(v * (1.0f - s * f));
    const float t = clamp_unit(v * (1.0f - s * (1.0f - f)));
    switch ((int)sector) {
        case 0: rgb[0] = v; rgb[1] = t; rgb[2] = p; break;
        case 1: rgb[0] = q; rgb[1] = v; rgb[2] = p; break;
        case 2: rgb[0] = p; rgb[1] = v; rgb[2] = t; break;
        case 3: rgb[0] = p; rgb[1] = q; rgb[2] = v; break;
        case 4: rgb[0] = t; rgb[1] = p; rgb[2] = v; break;
        default: rgb[0] = v; rgb[1] = p; rgb[2] = q; break;
    }
}

// One 8-bit pixel through color_hue_shift (color_avx2.c mirrors this order
// exactly).
static void hue_shift_pixel(uint8_t *pixel, float hue_factor) {
    float rgb[3] = {pixel[0] / 255.0f, pixel[1] / 255.0f, pixel[2] / 255.0f};
    color_hue_shift(rgb, hue_factor);
    for (int c = 0; c < 3; c++) pixel[c] = (uint8_t)(int)(rgb[c] * 255.0f + 0.5f);
}

void color_hue_scalar(uint8_t *rgb, size_t pixels, float hue_factor) {
    for (size_t i = 0; i < pixels; i++) hue_shift_pixel(rgb + 3 * i, hue_factor);
}

void color_greyscale_scalar(uint8_t *rgb, size_t pixels) {
    for (size_t i = 0; i < pixels; i++, rgb += 3) rgb[0] = rgb[1] = rgb[2] = (uint8_t)color_luma(rgb[0], rgb[1], rgb[2]);
}

void color_solarize_scalar(uint8_t *bytes, size_t count, int threshold) {
    for (size_t i = 0; i < count; i++)
        if (bytes[i] >= threshold) bytes[i] = (uint8_t)(255 - bytes[i]);
}

static int32_t to_fixed(double factor) { return (int32_t)lround(factor * COLOR_FIXED_ONE); }

static void affine(uint8_t *bytes, size_t count, int32_t scale, int32_t offset) {
    if (cpu_has_avx2())
        color_affine_avx2(bytes, count, scale, offset);
    else
        color_affine_scalar(bytes, count, scale, offset);
}

void color_brightness(uint8_t *rgb, size_t pixels, float factor) {
    affine(rgb, pixels * 3, to_fixed(factor), 0);
}

void color_contrast(uint8_t *rgb, size_t pixels, float factor) {
    if (pixels == 0) return;
    const uint64_t sum = cpu_has_avx2() ? color_luma_sum_avx2(rgb, pixels)
                                        : color_luma_sum_scalar(rgb, pixels);
    const double mean = (double)sum / (double)pixels;
    affine(rgb, pixels * 3, to_fixed(factor), to_fixed((1.0 - (double)factor) * mean));
}

void color_saturation(uint8_t *rgb, size_t pixels, float factor) {
    if (cpu_has_avx2())
        color_saturation_avx2(rgb, pixels, to_fixed(factor));
    else
        color_saturation_scalar(rgb, pixels, to_fixed(factor));
}

void color_hue(uint8_t *rgb, size_t pixels, float hue_factor) {
    if (cpu_has_avx2())
        color_hue_avx2(rgb, pixels, hue_factor);
    else
        color_hue_scalar(rgb, pixels, hue_factor);
}

void color_greyscale(uint8_t *rgb, size_t pixels) {
    if (cpu_has_avx2())
        color_greyscale_avx2(rgb, pixels);
    else
        color_greyscale_scalar(rgb, pixels);
}

int color_solarize_level(float threshold) { return (int)ceilf(threshold * 255.0f); }

void color_solarize(uint8_t *rgb, size_t pixels, float threshold) {
    const int level = color_solarize_level(threshold);
    if (level > 255) return;
    if (cpu_has_avx2())
        color_solarize_avx2(rgb, pixels * 3, level < 0 ? 0 : level);
    else
        color_solarize_scalar(rgb, pixels * 3, level < 0 ? 0 : level);
}
