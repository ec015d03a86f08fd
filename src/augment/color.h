// Colour operations on packed 8-bit RGB pixels, in place, as torchvision's
// ColorJitter, RandomGrayscale and RandomSolarize define them, with every op
// rounding and clamping to uint8:
//   brightness  x' = f x
//   contrast    x' = f x + (1 - f) mean(grey(image))
//   saturation  x' = f x + (1 - f) grey(pixel)
//   hue         RGB -> HSV (torchvision's formulas, float), h += f mod 1, -> RGB
//   greyscale   Pillow's 'L': (19595 R + 38470 G + 7471 B + 2^15) >> 16,
//               i.e. R*299/1000 + G*587/1000 + B*114/1000 rounded, to all 3
//   solarize    x' = 255 - x where x >= threshold * 255
// Brightness, contrast and saturation use 16.16 fixed point (the factor is
// rounded to a multiple of 2^-16), so results can differ from the float
// formula by one level where the exact value is within ~0.01 of a half.
//
// Each kernel has a scalar and an AVX2 version (color_avx2.c); they agree bit
// for bit, hue included (the same IEEE float operations in the same order,
// no FMA). The factor-taking entry points at the bottom dispatch at run time.
#ifndef LTC_AUGMENT_COLOR_H
#define LTC_AUGMENT_COLOR_H

#include <stddef.h>
#include <stdint.h>

#define COLOR_FIXED_BITS 16
#define COLOR_FIXED_ONE (1 << COLOR_FIXED_BITS)

// Pillow's luma of one pixel.
static inline int color_luma(int red, int green, int blue) {
    return (19595 * red + 38470 * green + 7471 * blue + (1 << 15)) >> 16;
}

// bytes[i] = clamp((bytes[i] * scale + offset + 2^15) >> 16, 0, 255).
void color_affine_scalar(uint8_t *bytes, size_t count, int32_t scale, int32_t offset);
void color_affine_avx2(uint8_t *bytes, size_t count, int32_t scale, int32_t offset);
// Sum of color_luma over the pixels.
uint64_t color_luma_sum_scalar(const uint8_t *rgb, size_t pixels);
uint64_t color_luma_sum_avx2(const uint8_t *rgb, size_t pixels);
// Each channel c = clamp((scale * c + (2^16 - scale) * luma + 2^15) >> 16).
void color_saturation_scalar(uint8_t *rgb, size_t pixels, int32_t scale);
void color_saturation_avx2(uint8_t *rgb, size_t pixels, int32_t scale);
// torchvision's _rgb2hsv / _hsv2rgb for one pixel of floats in [0, 1],
// operation for operation: hue += hue_factor (mod 1). In place.
void color_hue_shift(float rgb[3], float hue_factor);
void color_hue_scalar(uint8_t *rgb, size_t pixels, float hue_factor);
void color_hue_avx2(uint8_t *rgb, size_t pixels, float hue_factor);
void color_greyscale_scalar(uint8_t *rgb, size_t pixels);
void color_greyscale_avx2(uint8_t *rgb, size_t pixels);
// bytes >= threshold (0..255) become 255 - byte.
void color_solarize_scalar(uint8_t *bytes, size_t count, int threshold);
void color_solarize_avx2(uint8_t *bytes, size_t count, int threshold);

// Dispatching entry points; factors as torchvision's (1 = unchanged, hue 0).
// Factors for brightness/contrast/saturation must be in [0, 16].
void color_brightness(uint8_t *rgb, size_t pixels, float factor);
void color_contrast(uint8_t *rgb, size_t pixels, float factor);
void color_saturation(uint8_t *rgb, size_t pixels, float factor);
void color_hue(uint8_t *rgb, size_t pixels, float hue_factor);  // in [-0.5, 0.5]
void color_greyscale(uint8_t *rgb, size_t pixels);
void color_solarize(uint8_t *rgb, size_t pixels, float threshold);  // in [0, 1]
// The integer threshold color_solarize uses: ceil(threshold * 255).
int color_solarize_level(float threshold);

#endif
