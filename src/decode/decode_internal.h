// Private to src/decode: the Decoder object, its reusable buffers and the
// per-format entry points that decode.c dispatches to.
#ifndef LTC_DECODE_DECODE_INTERNAL_H
#define LTC_DECODE_DECODE_INTERNAL_H

#include "decode/decode.h"

// Sides above this are refused before anything is allocated, whatever the
// pixel limit (JPEG itself stops at 65500, WebP at 16383).
#define DECODE_MAX_SIDE 1000000

typedef struct JpegState JpegState;

// A malloc'ed byte buffer that only grows.
typedef struct DecodeBuffer {
    uint8_t *data;
    size_t capacity;
} DecodeBuffer;

struct Decoder {
    uint64_t max_pixels;
    DecodeBuffer pixels;   // the RGB output handed out in DecodedImage
    DecodeBuffer scratch;  // rows that are decoded but not returned
    JpegState *jpeg;       // libjpeg decompressor, created once
};

// Grows buffer to at least size bytes (contents not kept); NULL + message on
// failure.
uint8_t *decode_buffer_reserve(DecodeBuffer *buffer, size_t size, ErrorMessage *err);

// Refuses non-positive or absurd sides, and width * height over max_pixels.
// what names the pixels being counted ("image", "decoded region").
int decode_check_size(const Decoder *decoder, const char *what, int64_t width, int64_t height,
                      ErrorMessage *err);

// The requested region clamped to a width x height image (whole image when
// request is NULL); fails when nothing of it lies inside the image.
int decode_clamp_region(const DecodeRequest *request, int width, int height, PixelRect *region,
                        ErrorMessage *err);

// Per-format entry points. Data is known to carry the format's magic bytes.
JpegState *decode_jpeg_state_create(void);
void decode_jpeg_state_destroy(JpegState *state);
int decode_jpeg_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                     ErrorMessage *err);
int decode_jpeg_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);

int decode_png_probe(const uint8_t *data, size_t size, ImageInfo *info, ErrorMessage *err);
int decode_png_decode(Decoder *decoder, const uint8_t *data, size_t size,
                     const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);

int decode_webp_probe(const uint8_t *data, size_t size, ImageInfo *info, ErrorMessage *err);
int decode_webp_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);

#endif
