// Image decoding: bytes of a JPEG, PNG or WebP file -> 8-bit RGB.
//
// The caller first probes the file for its size, chooses the region it needs
// (the union of its crops) and the smallest resolution that region must keep,
// then decodes. JPEG decodes only that region (jpeg_crop_scanline +
// jpeg_skip_scanlines) at the smallest DCT scale (1/8 .. 8/8) that keeps at
// least the requested resolution; PNG and WebP decode what their libraries
// allow (WebP crops, PNG decodes whole). Alpha is dropped, greyscale expanded
// to 3 channels, 16-bit samples reduced to 8 bits.
//
// A Decoder is one per worker thread and reused for every image: it owns the
// libjpeg decompressor and a pixel buffer that grows to the largest image
// seen. Errors never exit or crash: every function returns 0 or -1 with a
// message in err naming the reason (truncated, corrupt, unsupported, too
// large).
#ifndef LTC_DECODE_DECODE_H
#define LTC_DECODE_DECODE_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"
#include "util/image.h"

typedef enum ImageFormat {
    IMAGE_FORMAT_UNKNOWN = 0,
    IMAGE_FORMAT_JPEG,
    IMAGE_FORMAT_PNG,
    IMAGE_FORMAT_WEBP,
} ImageFormat;

// Pillow's decompression-bomb guard (Image.MAX_IMAGE_PIXELS).
#define DECODE_DEFAULT_MAX_PIXELS 89478485ull

typedef struct ImageInfo {
    ImageFormat format;
    int width;   // full image size, after EXIF-free decoding (no rotation)
    int height;
} ImageInfo;

// A rectangle in full-image pixel coordinates; x + width <= image width.
typedef struct PixelRect {
    int x, y, width, height;
} PixelRect;

typedef struct DecodeRequest {
    PixelRect region;  // what is needed; the whole image is {0,0,w,h}
    // Each side of the region must come out at least this many pixels
    // (scaled by the DCT scale); 0 means full resolution.
    int min_width;
    int min_height;
    // 1: read the whole compressed stream even where the region ends early
    // (JPEG and PNG rows below it, WebP outside its crop), so damage
    // anywhere in the file fails the decode with the reason a full decode
    // gives. The training loader asks for this the first time a run reads a
    // file, so that train and embed skip the same files for the same reason.
    int whole_file;
} DecodeRequest;

typedef struct DecodedImage {
    Image image;  // pixels owned by the Decoder, valid until its next call
    // The full-image rectangle the pixels cover (may be slightly larger than
    // the requested region: JPEG crops align to iMCU columns, and at the
    // right/bottom edge it may exceed the image by less than one scaled pixel
    // where the size is not a multiple of the DCT block). image.width /
    // covered.width is the scale actually used.
    PixelRect covered;
} DecodedImage;

typedef struct Decoder Decoder;

// max_pixels: images whose decoded pixel count (region at the chosen scale)
// would exceed this are refused; 0 means DECODE_DEFAULT_MAX_PIXELS.
Decoder *decoder_create(uint64_t max_pixels);
void decoder_destroy(Decoder *decoder);

// Format from the first bytes (magic numbers), not from the file name.
ImageFormat decode_sniff(const uint8_t *data, size_t size);
const char *image_format_name(ImageFormat format);

// Reads the header only: format and full size.
int decoder_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                  ErrorMessage *err);

// Decodes request->region (clamped to the image) to RGB. request may be NULL
// for the whole image at full resolution.
int decoder_decode(Decoder *decoder, const uint8_t *data, size_t size,
                   const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);

#endif
