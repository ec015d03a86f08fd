// Rotation of a rendered view about its centre: LightlyTrain's
// random_rotation, albumentations' Rotate with cv2.INTER_AREA (which
// warpAffine takes as bilinear) and cv2.BORDER_REFLECT_101. The centre is
// ((size - 1) / 2, (size - 1) / 2); a positive angle turns the content
// counter-clockwise, as cv2.getRotationMatrix2D; each output pixel is the
// bilinear mix of the source at the inverse-rotated position, outside
// positions reflected without repeating the edge. As OpenCV 5.0's
// warpAffine under albumentations 2.0.8 (tests/fixtures/rotation.safetensors,
// tools/make_rotation_fixture.py): 8-bit views at the exact position (equal
// to it), float views at positions rounded to 1/32 pixel in its fixed point
// (within 2e-7). OpenCV 4 rounds 8-bit positions too: up to 3 levels apart.
#ifndef LTC_AUGMENT_ROTATE_H
#define LTC_AUGMENT_ROTATE_H

#include <stdint.h>

// dst and src: (size, size, 3) bytes, rows packed; not the same buffer.
void rotate_view_u8(const uint8_t *src, uint8_t *dst, int size, double degrees);
// dst and src: (size, size, channels) floats, rows packed; not the same buffer.
void rotate_view_float(const float *src, float *dst, int size, int channels, double degrees);

#endif
