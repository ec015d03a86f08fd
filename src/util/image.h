// An 8-bit RGB image view: rows of width*3 bytes, `stride` bytes apart.
#ifndef LTC_UTIL_IMAGE_H
#define LTC_UTIL_IMAGE_H

#include <stddef.h>
#include <stdint.h>

typedef struct Image {
    uint8_t *pixels;  // (height, stride) bytes, RGB interleaved
    int width;
    int height;
    size_t stride;  // bytes between row starts, >= width * 3
} Image;

#endif
