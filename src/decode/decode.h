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
// by the rules in samples.c. A native request (DecodeRequest.native) instead
// returns the samples as stored (8/16-bit or float; grey, RGB, CMYK or
// bands, with alpha and extra bands): the pipeline's deep path
// (docs/input-pipeline.md, "Depth and channels") converts them to float
// (samples_to_float).
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
// A Decoder is one per loader worker (in its decoder process,
// data/decoder_process.h) and reused for every image: it owns the libjpeg
// decompressor and pixel buffers that grow to the largest image seen.
// Errors are returned, not raised: every function returns 0 or -1 with a
// message in err naming the reason (truncated, corrupt, unsupported, too
// large). Where a library is known to crash, hang or exhaust memory on some
// input, that input is checked before the library sees it (heif_check.c,
// heif_canvas.c, stb.c's TGA test, dicom.c's length walk); for what is not
// known yet, the loader decodes in a child process.
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
// Sides above this are refused before anything is allocated, whatever the
// pixel limit (JPEG itself stops at 65500, WebP at 16383).
#define DECODE_MAX_SIDE 1000000

// ---- native samples --------------------------------------------------------------

typedef enum SampleType {
    SAMPLE_U8,
    SAMPLE_U16,
    SAMPLE_F32,
} SampleType;

// What the channels of a SampleImage mean. Channels past the colour ones
// (alpha, or extra bands of a colour image) are dropped on the way to RGB.
typedef enum ColourModel {
    COLOUR_GREY,   // channel 0
    COLOUR_RGB,    // channels 0..2
    COLOUR_CMYK,   // channels 0..3, ink amounts (0 = no ink), TIFF's InkSet CMYK
    COLOUR_BANDS,  // `channels` bands without a colour meaning (multispectral)
} ColourModel;

typedef struct ImageInfo {
    ImageFormat format;
    int width;  // full image size as the caller sees it: oriented
    int height;
    // The orientation applied by decode.c (1..8; 1 when absent, when EXIF
    // orientation is off, or where the format's library applies its own:
    // HEIF, JPEG XL).
    int orientation;
    // The stored channels and what they mean, where the header says so
    // before any pixel is decoded (TIFF, PAM); 0 where the probe does not
    // tell. decoder_probe refuses an image whose channels cannot become the
    // ones the caller reads (decoder_set_channels) from these alone.
    int channels;
    ColourModel colour;
    SampleType sample_type;  // the native samples' type, where channels > 0
} ImageInfo;

// A rectangle in full-image pixel coordinates; x + width <= image width.
typedef struct PixelRect {
    int x, y, width, height;
} PixelRect;

// Interleaved samples as a format stores them, before any conversion.
typedef struct SampleImage {
    const uint8_t *pixels;  // rows of width * channels samples
    int width, height, channels;
    size_t stride;  // bytes between row starts
    SampleType type;
    ColourModel colour;
    // U16 only: the significant low bits (9..16; 12 for 12-bit DICOM), so
    // that the top of the stored range maps to the top of 8 bits (or to 1.0).
    int bits;
} SampleImage;

size_t sample_type_bytes(SampleType type);

// The most channels samples_to_float writes (and the pipeline carries).
#define SAMPLES_MAX_CHANNELS 64

// The channels of an image as the deep path reads them with `channels`
// channels asked for (docs/input-pipeline.md, "Depth and channels"):
//   - as many stored channels as asked: all of them, as stored (alpha and
//     extra bands included, CMYK as ink amounts);
//   - else the image's colour (grey, RGB; CMYK converted to RGB as
//     samples_to_rgb8 does; alpha and extra bands dropped): grey repeated to
//     every channel, RGB as is for 3, RGB to grey for 1 by the ITU-R 601
//     luma weights of Pillow's convert("L") (0.299 R + 0.587 G + 0.114 B,
//     not rounded);
//   - anything else (RGB into 2 or 4 channels, 5 bands into 3, ...): an
//     "unsupported" error naming both counts.
// Values: 8-bit v / 255, 16-bit v / (2^bits - 1) (clamped to 1 where bits
// beyond `bits` are set), float as stored (NaN and infinities become 0).
// out: (height, width, channels) floats, rows out_stride floats apart.
int samples_to_float(const SampleImage *in, int channels, float *out, size_t out_stride,
                     ErrorMessage *err);

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
    // 1: DecodedImage.samples holds the region's samples as stored (the
    // formats that only give 8-bit RGB give that, JPEG grey stays grey) and
    // DecodedImage.image is empty; 0: 8-bit RGB in DecodedImage.image.
    int native;
} DecodeRequest;

typedef struct DecodedImage {
    Image image;  // pixels owned by the Decoder, valid until its next call
    SampleImage samples;  // native requests: the same, as stored
    // The full-image rectangle the pixels cover (may be slightly larger than
    // the requested region: JPEG crops align to iMCU columns, and at the
    // right/bottom edge it may exceed the image by less than one scaled pixel
    // where the size is not a multiple of the DCT block). image.width /
    // covered.width is the scale actually used.
    PixelRect covered;
} DecodedImage;

typedef struct Decoder Decoder;

// max_pixels: images whose decoded pixel count (region at the chosen scale)
// would exceed this are refused; 0 means DECODE_DEFAULT_MAX_PIXELS. Images of
// many or deep samples (TIFF, PAM) are bounded in bytes too: at most
// max_pixels x 12 bytes of samples (three float32 channels a pixel, what
// the float path holds of an RGB image at the limit) and 4 x max_pixels
// samples.
Decoder *decoder_create(uint64_t max_pixels);
void decoder_destroy(Decoder *decoder);

// 1 (the default): apply EXIF orientation tags; 0: ignore them.
void decoder_set_exif_orientation(Decoder *decoder, int apply);

// The channels the caller reads the images with: N for the float path
// (samples_to_float's rule), 0 for 8-bit RGB. decoder_probe refuses by it
// what the header already shows cannot be read so (a 64-band TIFF for 3
// channels), before anything is decoded. A new Decoder checks nothing
// (DECODE_ANY_CHANNELS: the caller looks at the native samples itself).
#define DECODE_ANY_CHANNELS (-1)
void decoder_set_channels(Decoder *decoder, int channels);

// The channel rule of samples_to_float (channels > 0) or samples_to_rgb8
// (channels 0) for an image of `stored` channels of colour model `colour`:
// 0, or -1 with the "unsupported" (or "corrupt") reason naming both counts.
int samples_channels_check(ColourModel colour, int stored, int channels, ErrorMessage *err);

// Where a Decoder keeps what it decodes: DECODER_BUFFERS buffers that only
// grow (a DecodedImage points into one of them), malloc'ed unless
// decoder_set_buffer_memory gives other memory: the loader's decoder
// process (data/decoder_process.h) puts them in memory its parent maps, so
// that decoded pixels reach the parent without a copy.
#define DECODER_BUFFERS 4
typedef struct DecoderBufferMemory {
    // Memory for buffer `which` (0 .. DECODER_BUFFERS - 1) of at least
    // `bytes`, its old contents not needed; *capacity receives its size.
    // NULL when there is none (the decode fails "out of memory").
    uint8_t *(*reserve)(void *context, int which, size_t bytes, size_t *capacity);
    void *context;  // owns the memory: decoder_destroy frees none of it
} DecoderBufferMemory;
// Before the first decode (buffers already allocated are freed).
void decoder_set_buffer_memory(Decoder *decoder, const DecoderBufferMemory *memory);
// The buffer holding `pointer` and the offset in it: 0, or -1 when it lies
// in none of them.
int decoder_buffer_find(const Decoder *decoder, const void *pointer, int *which, size_t *offset);

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
