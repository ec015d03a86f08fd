// Colour operations on interleaved float RGB (the deep path's views, values
// nominally in [0, 1]), in place, as torchvision's float tensor ops define
// them: every op clamps its result to [0, 1] (torchvision's _blend bound
// for floats), so values outside [0, 1] are clamped where one of these ops
// runs and kept everywhere else.
//   brightness  x' = f x
//   contrast    x' = f x + (1 - f) mean(grey(image))
//   saturation  x' = f x + (1 - f) grey(pixel)
//   hue         color_hue_shift (torchvision's HSV round trip), on [0, 1]
//   greyscale   0.299 R + 0.587 G + 0.114 B to all 3 (Pillow's convert("L")
//               weights, unrounded)
//   solarize    x' = 1 - x where x >= threshold
// grey() is the greyscale formula. Used only where the views have 3
// channels: these transforms are off otherwise (augment.h).
#ifndef LTC_AUGMENT_COLOR_FLOAT_H
#define LTC_AUGMENT_COLOR_FLOAT_H

#include <stddef.h>

void color_float_brightness(float *rgb, size_t pixels, float factor);
void color_float_contrast(float *rgb, size_t pixels, float factor);
void color_float_saturation(float *rgb, size_t pixels, float factor);
void color_float_hue(float *rgb, size_t pixels, float hue_factor);
void color_float_greyscale(float *rgb, size_t pixels);
void color_float_solarize(float *rgb, size_t pixels, float threshold);

#endif
