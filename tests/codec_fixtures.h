// Encoders for test images (see codec_fixtures.c). Returned bytes are
// malloc'ed; free(bytes.data).
#ifndef LTC_TESTS_CODEC_FIXTURES_H
#define LTC_TESTS_CODEC_FIXTURES_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>  // before jpeglib.h, which uses FILE

#include <jpeglib.h>
#include <png.h>

typedef struct Bytes {
    uint8_t *data;
    size_t size;
} Bytes;

typedef struct JpegSpec {
    int quality;
    int h_samp, v_samp;  // luma sampling factors; chroma is 1x1 (1,1 = 4:4:4)
    int progressive;
    J_COLOR_SPACE input_space;  // JCS_RGB, JCS_GRAYSCALE or JCS_CMYK
    J_COLOR_SPACE file_space;   // JCS_YCbCr, JCS_GRAYSCALE, JCS_CMYK or JCS_YCCK
    int adobe_marker;
} JpegSpec;

// Quality 95, 4:2:0, baseline, RGB in, YCbCr in the file.
extern const JpegSpec JPEG_RGB;

typedef struct PngSpec {
    int colour_type, bit_depth, interlace;
    int transparency;  // write a tRNS chunk
} PngSpec;

// samples: packed rows of spec->input_space's channels.
Bytes encode_jpeg(const uint8_t *samples, int width, int height, const JpegSpec *spec);
// The same with an APP1 marker (an EXIF block) after SOI.
Bytes encode_jpeg_app1(const uint8_t *samples, int width, int height, const JpegSpec *spec,
                       Bytes app1);
int png_channels(int colour_type);
// values: one sample per channel per pixel at the PNG's bit depth.
Bytes encode_png(const uint16_t *values, int width, int height, const PngSpec *spec,
                 const png_color *palette, int palette_size);
// 8-bit RGB, not interlaced.
Bytes encode_png_rgb(const uint8_t *rgb, int width, int height);
// The same with an eXIf chunk (before IDAT) holding exif.
Bytes encode_png_rgb_exif(const uint8_t *rgb, int width, int height, Bytes exif);
Bytes encode_webp_rgba(const uint8_t *rgba, int width, int height, int lossless);
Bytes encode_webp_rgb(const uint8_t *rgb, int width, int height, int lossless);
// Two lossless frames; the second differs so the file stays animated.
Bytes encode_webp_animation(const uint8_t *frame0_rgba, const uint8_t *frame1_rgba, int width,
                            int height);

#endif
