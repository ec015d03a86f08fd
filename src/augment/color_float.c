// Colour operations on float RGB (color_float.h).
#include "augment/color_float.h"

#include "augment/color.h"

static inline float unit(float x) { return x < 0.0f ? 0.0f : x > 1.0f ? 1.0f : x; }

static inline float grey(const float *rgb) {
    return 0.299f * rgb[0] + 0.587f * rgb[1] + 0.114f * rgb[2];
}

void color_float_brightness(float *rgb, size_t pixels, float factor) {
    for (size_t i = 0; i < pixels * 3; i++) rgb[i] = unit(factor * rgb[i]);
}

void color_float_contrast(float *rgb, size_t pixels, float factor) {
    if (pixels == 0) return;
    double sum = 0.0;
    for (size_t i = 0; i < pixels; i++) sum += grey(rgb + 3 * i);
    const float offset = (1.0f - factor) * (float)(sum / (double)pixels);
    for (size_t i = 0; i < pixels * 3; i++) rgb[i] = unit(factor * rgb[i] + offset);
}

void color_float_saturation(float *rgb, size_t pixels, float factor) {
    for (size_t i = 0; i < pixels; i++, rgb += 3) {
        const float offset = (1.0f - factor) * grey(rgb);
        for (int c = 0; c < 3; c++) rgb[c] = unit(factor * rgb[c] + offset);
    }
}

void color_float_hue(float *rgb, size_t pixels, float hue_factor) {
    for (size_t i = 0; i < pixels; i++, rgb += 3) {
        for (int c = 0; c < 3; c++) rgb[c] = unit(rgb[c]);
        color_hue_shift(rgb, hue_factor);
    }
}

void color_float_greyscale(float *rgb, size_t pixels) {
    for (size_t i = 0; i < pixels; i++, rgb += 3) rgb[0] = rgb[1] = rgb[2] = grey(rgb);
}

void color_float_solarize(float *rgb, size_t pixels, float threshold) {
    for (size_t i = 0; i < pixels * 3; i++)
        if (rgb[i] >= threshold) rgb[i] = 1.0f - rgb[i];
}
