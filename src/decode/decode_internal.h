// Private to src/decode: the Decoder object, its reusable buffers, the
// per-format entry points that decode.c dispatches to, the native-sample
// image that the newer decoders fill (samples.c turns it into 8-bit RGB) and
// the orientation helpers (orientation.c, exif.c).
#ifndef LTC_DECODE_DECODE_INTERNAL_H
#define LTC_DECODE_DECODE_INTERNAL_H

#include "decode/decode.h"

// Bytes of samples a pixel may take at the pixel limit (decode_check_samples):
// three float32 channels, the float path's RGB image.
#define DECODE_BYTES_PER_PIXEL 12

typedef struct JpegState JpegState;

// A byte buffer that only grows: malloc'ed, or the caller's memory
// (decoder_set_buffer_memory).
typedef struct DecodeBuffer {
    uint8_t *data;
    size_t capacity;
    int which;                          // its number among the Decoder's buffers
    const DecoderBufferMemory *memory;  // NULL: malloc
} DecodeBuffer;

struct Decoder {
    uint64_t max_pixels;
    int apply_exif_orientation;  // decoder_set_exif_orientation
    int channels;                // decoder_set_channels: 0 for 8-bit RGB, or DECODE_ANY_CHANNELS
    int native;                  // DecodeRequest.native of the decode in progress
    // Decoded pixels are handed out from any of these (DECODER_BUFFERS):
    DecodeBuffer pixels;         // the RGB output handed out in DecodedImage
    DecodeBuffer scratch;        // rows that are decoded but not returned
    DecodeBuffer samples;        // native samples before the conversion to RGB (samples.c)
    DecodeBuffer oriented;       // the output after the orientation is applied
    DecoderBufferMemory buffer_memory;  // decoder_set_buffer_memory; reserve NULL: malloc
    JpegState *jpeg;             // libjpeg decompressor, created once
};

// Grows buffer to at least size bytes (contents not kept); NULL + message on
// failure.
uint8_t *decode_buffer_reserve(DecodeBuffer *buffer, size_t size, ErrorMessage *err);

// Refuses non-positive or absurd sides, and width * height over max_pixels.
// what names the pixels being counted ("image", "decoded region").
int decode_check_size(const Decoder *decoder, const char *what, int64_t width, int64_t height,
                      ErrorMessage *err);

// decode_check_size, and samples per pixel: an image may hold at most
// 4 x max_pixels samples (RGBA's worth) and max_pixels x 12 bytes of them
// (three float32 channels a pixel, the float path's RGB image at the
// limit), so that many bands or deep samples (or a tile much larger than
// its image) cannot make a small file allocate gigabytes.
int decode_check_samples(const Decoder *decoder, const char *what, int64_t width, int64_t height,
                         int64_t samples, size_t sample_bytes, ErrorMessage *err);

// The requested region clamped to a width x height image (whole image when
// request is NULL); fails when nothing of it lies inside the image.
int decode_clamp_region(const DecodeRequest *request, int width, int height, PixelRect *region,
                        ErrorMessage *err);

// ---- native samples (samples.c) -------------------------------------------------


// 8-bit RGB from native samples, by the documented rules (samples.c): U8 as
// is, U16 keeps its top 8 significant bits, F32 maps [0, 1] to 0..255
// (rounded, clamped); grey is repeated, CMYK converted as Pillow's
// convert("RGB"), extra channels dropped. COLOUR_BANDS with other than 1 or
// 3 bands cannot become RGB: an "unsupported" error naming the band count.
int samples_to_rgb8(const SampleImage *in, uint8_t *out, size_t out_stride, ErrorMessage *err);

// What a decoder that keeps native samples hands out, covering `covered`:
// samples_to_rgb8 into the Decoder's pixel buffer, or for a native request
// the samples themselves (copied into the pixel buffer unless they already
// lie in one of the Decoder's buffers: a library's own memory is released
// after the call).
int decode_finish(Decoder *decoder, const SampleImage *samples, PixelRect covered,
                  DecodedImage *out, ErrorMessage *err);

// ---- orientation (orientation.c, exif.c) ----------------------------------------

// The EXIF orientation (1..8) in an EXIF block: "Exif\0\0" + TIFF header, a
// bare TIFF header ("II*\0" / "MM\0*"), or a whole JPEG file (its APPn
// markers are searched). 1 when there is none or it is out of range.
int exif_orientation(const uint8_t *data, size_t size);

// Width and height after orientation o.
void orientation_size(int orientation, int width, int height, int *out_width, int *out_height);
// A rectangle of the oriented image -> the stored image's (width x height
// stored) rectangle, and back.
PixelRect orientation_to_stored(int orientation, PixelRect oriented, int stored_width,
                                int stored_height);
PixelRect orientation_from_stored(int orientation, PixelRect stored, int stored_width,
                                  int stored_height);
// The stored-layout RGB pixels of `in` rearranged for orientation o into
// `buffer`; `in` becomes the oriented image.
int orientation_apply(int orientation, Image *in, DecodeBuffer *buffer, ErrorMessage *err);
// The same for native samples (any pixel size).
int orientation_apply_samples(int orientation, SampleImage *in, DecodeBuffer *buffer,
                              ErrorMessage *err);

// ---- per-format entry points --------------------------------------------------
// Each probe fills width, height (as stored) and orientation (1 where the
// format has none); each decode takes its region in stored coordinates. Data
// is known to carry the format's magic bytes.

JpegState *decode_jpeg_state_create(void);
void decode_jpeg_state_destroy(JpegState *state);
int decode_jpeg_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                      ErrorMessage *err);
int decode_jpeg_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);

int decode_png_probe(const uint8_t *data, size_t size, ImageInfo *info, ErrorMessage *err);
int decode_png_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);
// The orientation in an eXIf chunk before the image data, 1 without one.
int decode_png_orientation(const uint8_t *data, size_t size);

int decode_webp_probe(const uint8_t *data, size_t size, ImageInfo *info, ErrorMessage *err);
int decode_webp_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);
// The orientation in an EXIF chunk, 1 without one.
int decode_webp_orientation(const uint8_t *data, size_t size);

// The formats added with the format table share one signature (function
// types, so that one declaration names several decoders).
typedef int FormatProbe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                        ErrorMessage *err);
typedef int FormatDecode(Decoder *decoder, const uint8_t *data, size_t size,
                         const DecodeRequest *request, DecodedImage *out, ErrorMessage *err);

// TIFF (libtiff), GIF (giflib), BMP and TGA (stb_image), PNM (ours), HEIF
// (libheif), JPEG XL (libjxl), DICOM (DCMTK).
FormatProbe decode_tiff_probe, decode_gif_probe, decode_stb_probe, decode_pnm_probe,
    decode_heif_probe, decode_jxl_probe, decode_dicom_probe;
FormatDecode decode_tiff_decode, decode_gif_decode, decode_stb_decode, decode_pnm_decode,
    decode_heif_decode, decode_jxl_decode, decode_dicom_decode;
// TGA has no magic number: its header checked field by field (stb.c).
int decode_stb_is_tga(const uint8_t *data, size_t size);
// What libheif 1.15 does not check, before it reads the file: item
// references that form a cycle or nest too deep (heif_check.c), grid and
// overlay canvases over max_pixels (heif_canvas.c). 0, or -1 with the reason.
int decode_heif_check(const uint8_t *data, size_t size, uint64_t max_pixels, ErrorMessage *err);

#endif
