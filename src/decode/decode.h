// Image decoding: bytes of an image file -> 8-bit RGB. Formats, each through
// its own library (docs/input-pipeline.md has the table): JPEG (libjpeg-turbo),
// PNG (libpng), WebP (libwebp), TIFF (libtiff), GIF (giflib), BMP and TGA
// (stb_image), PPM/PGM/PBM/PAM (ours, pnm.c says why), HEIF/HEIC/AVIF
// (libheif), JPEG XL (libjxl) and DICOM (GDCM). The format comes from the
// bytes, never from the file name.
//
// The caller first probes the file for its size, chooses the region it needs
// (the union of its crops) and the smallest resolution that region must keep,
// then decodes. JPEG decodes only that region (jpeg_crop_scanline +
// jpeg_skip_scanlines) at the smallest DCT scale (1/8 .. 8/8) that keeps at
// least the requested resolution; the others decode what their libraries
// allow (TIFF the strips or tiles the region touches, PNG and PNM the rows
// down to its end, WebP and DICOM the region, the rest whole). Alpha is
// dropped, greyscale expanded to 3 channels, deeper samples reduced to 8 bits
// by the rules in samples.c.
//
// Orientation: by default the EXIF orientation tag of JPEG (APP1), PNG
// (eXIf) and WebP (EXIF chunk) is applied as Pillow's ImageOps.exif_transpose
// does. Orientation that is part of the format itself is always applied, as
// every reader of those formats does: TIFF's Orientation tag (Pillow applies
// it on load), HEIF's irot/imir/clap (libheif), JPEG XL's header (libjxl).
// Sizes, regions and pixels are all in the oriented image: the caller never
// sees the stored layout. decoder_set_exif_orientation(decoder, 0) ignores
// the EXIF tags, which gives what Pillow's Image.open and torchvision's
// decode_image (and so LightlyTrain) give.
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
    IMAGE_FORMAT_TIFF,
    IMAGE_FORMAT_GIF,
    IMAGE_FORMAT_BMP,
    IMAGE_FORMAT_PNM,
    IMAGE_FORMAT_TGA,
    IMAGE_FORMAT_HEIF,  // HEIC, AVIF and other HEIF brands
    IMAGE_FORMAT_JXL,
    IMAGE_FORMAT_DICOM,
    IMAGE_FORMAT_COUNT,
} ImageFormat;

// Pillow's decompression-bomb guard (Image.MAX_IMAGE_PIXELS).
#define DECODE_DEFAULT_MAX_PIXELS 89478485ull

typedef struct ImageInfo {
    ImageFormat format;
    int width;  // full image size as the caller sees it: oriented
    int height;
    // The orientation applied by decode.c (1..8; 1 when absent, when EXIF
    // orientation is off, or where the format's library applies its own:
    // HEIF, JPEG XL).
    int orientation;
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

// 1 (the default): apply EXIF orientation tags; 0: ignore them.
void decoder_set_exif_orientation(Decoder *decoder, int apply);

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
