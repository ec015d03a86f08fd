// Encoders for the newer formats' tests, each through the format's own
// library (libtiff, libheif, libjxl, giflib, libexif), writing to
// memory. Returned bytes are malloc'ed; free(bytes.data). Set-up failures
// abort: they are bugs in the test.
#ifndef LTC_TESTS_FORMAT_ENCODERS_H
#define LTC_TESTS_FORMAT_ENCODERS_H

#include <stdint.h>

#include "codec_fixtures.h"

typedef struct TiffSpec {
    int bits;         // per sample
    int format;       // SAMPLEFORMAT_UINT / _INT / _IEEEFP
    int samples;      // per pixel
    int photometric;  // PHOTOMETRIC_*
    int planar;       // PLANARCONFIG_CONTIG / _SEPARATE
    int tile;         // 0: strips of `rows_per_strip` rows; else tile side (multiple of 16)
    int rows_per_strip;
    int compression;  // COMPRESSION_*
    int extra_alpha;  // 1: the last sample is unassociated alpha
    int orientation;  // 0: no tag
    int bigtiff;
} TiffSpec;

// samples: interleaved, (height, width, samples) of the spec's type
// (uint8/16/32, int8/16/32, float16 as uint16 bits, float, double);
// colour_map: 3 x 2^bits entries for PHOTOMETRIC_PALETTE, else NULL.
Bytes encode_tiff(const TiffSpec *spec, const void *samples, int width, int height,
                  const uint16_t *colour_map);

// 8-bit RGB through libheif: HEVC (x265) or AV1 (libaom) at high quality;
// orientation 1..8 is written as irot/imir (libheif's heif_orientation uses
// the EXIF values).
Bytes encode_heif(const uint8_t *rgb, int width, int height, int avif, int orientation);

// 8-bit RGB as a 4:4:4 AVIF through libavif (libaom) at quality 95, with
// orientation 1..8 written as irot/imir. (libheif 1.15 writes the rotated
// size into ispe, which libavif, like Pillow's, does not read as rotated.)
Bytes encode_avif(const uint8_t *rgb, int width, int height, int orientation);

// Lossless JPEG XL through libjxl: channels 1 or 3, 8 or 16 bits (samples
// uint8 or uint16), orientation 1..8 in the header.
Bytes encode_jxl(const void *samples, int width, int height, int channels, int bits,
                 int orientation);

// A GIF through giflib: a screen of screen_width x screen_height with a
// global colour table of 2 entries, one frame of frame_width x frame_height
// at (left, top) with its own table of `colours` (3 bytes each, 2^n
// entries) and indices `pixels`, interlaced or not, transparent index
// `transparent` (-1: none) in a graphic control extension.
Bytes encode_gif(int screen_width, int screen_height, int left, int top, int frame_width,
                 int frame_height, const uint8_t *pixels, const uint8_t *colours, int colour_count,
                 int interlace, int transparent);

// An EXIF block with IFD0's orientation tag, through libexif: "Exif\0\0"
// followed by the TIFF structure (JPEG APP1 payload, WebP EXIF chunk);
// bare: the TIFF structure alone (PNG eXIf).
Bytes exif_orientation_block(int orientation, int bare);

#endif
