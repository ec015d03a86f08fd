// TIFF and BigTIFF through libtiff, from memory: the first page (IFD) only.
//
// Most files take the sample path: the strips or tiles that the region
// touches are decoded (TIFFReadEncodedStrip/Tile, so every compression this
// libtiff has: none, LZW, Deflate, PackBits, JPEG, ZSTD, WebP, LZMA, LERC,
// CCITT for bilevel) and their samples copied into a native image (samples.c
// turns it into RGB): grey (MinIsBlack, MinIsWhite inverted), RGB, palette
// (16-bit colour map entries), CMYK (InkSet CMYK), or bands (MinIsBlack with
// more than one sample and no ExtraSamples saying alpha), interleaved or
// planar, 1/2/4-bit (scaled to 8 bits, as Pillow does), 8/16-bit unsigned,
// 8/16-bit signed (offset to unsigned: LightlyTrain's (v - min) / (max - min)),
// 32-bit integers (scaled to [0, 1] by the same rule) and 16/32/64-bit floats
// (kept as floats). JPEG-compressed YCbCr is converted to RGB by libtiff
// (JPEGCOLORMODE_RGB).
//
// Other photometric interpretations (YCbCr without JPEG, CIE L*a*b*, LogLuv,
// old-style JPEG) and odd bit depths go through libtiff's TIFFRGBAImage
// interface, which gives 8-bit RGBA for the region (premultiplying
// unassociated alpha, which is then dropped).
//
// The Orientation tag (274) is the orientation (decode.c applies it, always,
// as Pillow does when it loads a TIFF). Any error libtiff reports fails the
// file with its message (libtiff itself goes on after some), as does its
// warning that tag values could not be read; other warnings are ignored.
#include "decode/decode_internal.h"

#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include <tiffio.h>

#include "util/half.h"

// Most samples per pixel read (hyperspectral files have hundreds of bands;
// beyond this they are refused rather than allocating per-pixel arrays).
#define TIFF_MAX_SAMPLES 64
// libtiff's own per-allocation cap for hostile headers.
#define TIFF_MAX_ALLOCATION ((tmsize_t)1 << 30)

typedef struct TiffSource {
    const uint8_t *data;
    size_t size;
    uint64_t offset;
    char message[256];  // libtiff's first error
} TiffSource;

static tmsize_t read_proc(thandle_t handle, void *out, tmsize_t size) {
    TiffSource *source = (TiffSource *)handle;
    if (size <= 0 || source->offset >= source->size) return 0;
    uint64_t n = (uint64_t)size;
    if (n > source->size - source->offset) n = source->size - source->offset;
    memcpy(out, source->data + source->offset, (size_t)n);
    source->offset += n;
    return (tmsize_t)n;
}

static tmsize_t write_proc(thandle_t handle, void *in, tmsize_t size) {
    (void)handle, (void)in, (void)size;
    return 0;
}

static toff_t seek_proc(thandle_t handle, toff_t offset, int whence) {
    TiffSource *source = (TiffSource *)handle;
    uint64_t base = whence == SEEK_CUR ? source->offset : whence == SEEK_END ? source->size : 0;
    if (offset > UINT64_MAX - base) return (toff_t)-1;
    source->offset = base + offset;
    return source->offset;
}

static int close_proc(thandle_t handle) {
    (void)handle;
    return 0;
}

static toff_t size_proc(thandle_t handle) { return ((TiffSource *)handle)->size; }

// The memory is "mapped": libtiff reads uncompressed strips in place.
static int map_proc(thandle_t handle, void **base, toff_t *size) {
    TiffSource *source = (TiffSource *)handle;
    *base = (void *)source->data;
    *size = source->size;
    return 1;
}

static void unmap_proc(thandle_t handle, void *base, toff_t size) {
    (void)handle, (void)base, (void)size;
}

static int on_error(TIFF *tif, void *user_data, const char *module, const char *format,
                    va_list args) {
    (void)tif, (void)module;
    TiffSource *source = user_data;
    if (!source->message[0]) vsnprintf(source->message, sizeof source->message, format, args);
    return 1;  // handled: libtiff prints nothing
}

// Warnings are ignored, except libtiff's "IO error ... tag ignored": a tag
// whose values lie past the end of the file (a cut file) is dropped with a
// warning, and without its colour map a palette image would pass for grey.
static int on_warning(TIFF *tif, void *user_data, const char *module, const char *format,
                      va_list args) {
    (void)tif, (void)module;
    TiffSource *source = user_data;
    char text[200];
    vsnprintf(text, sizeof text, format, args);
    if (strstr(text, "IO error") && !source->message[0])
        snprintf(source->message, sizeof source->message, "Read error: %s", text);
    return 1;
}

static int report_failure(const TiffSource *source, const char *what, ErrorMessage *err) {
    const char *detail = source->message[0] ? source->message : what;
    if (strstr(detail, "Read error") || strstr(detail, "Cannot read") ||
        strstr(detail, "end of file") || strstr(detail, "Premature") || strstr(detail, "past end"))
        return error_set(err, "truncated: TIFF: %s", detail);
    if (strstr(detail, "Not enough") || strstr(detail, "memory") || strstr(detail, "alloc"))
        return error_set(err, "out of memory in libtiff: %s", detail);
    return error_set(err, "corrupt data: TIFF: %s", detail);
}

static TIFF *open_tiff(TiffSource *source, ErrorMessage *err) {
    TIFFOpenOptions *options = TIFFOpenOptionsAlloc();
    if (!options) {
        error_set(err, "out of memory: cannot create a TIFF reader");
        return NULL;
    }
    TIFFOpenOptionsSetMaxSingleMemAlloc(options, TIFF_MAX_ALLOCATION);
    TIFFOpenOptionsSetErrorHandlerExtR(options, on_error, source);
    TIFFOpenOptionsSetWarningHandlerExtR(options, on_warning, source);
    TIFF *tif = TIFFClientOpenExt("memory", "r", (thandle_t)source, read_proc, write_proc,
                                  seek_proc, close_proc, size_proc, map_proc, unmap_proc, options);
    TIFFOpenOptionsFree(options);
    // libtiff goes on after some errors (a tag it cannot read is dropped,
    // a cut colour map among them): any error fails the file.
    if (tif && source->message[0]) {
        TIFFClose(tif);
        tif = NULL;
    }
    if (!tif) report_failure(source, "cannot open", err);
    return tif;
}

// What the first IFD says about the pixels.
typedef struct TiffLayout {
    uint32_t width, height;
    uint16_t samples, bits, format, photometric, planar, compression, orientation;
    int tiled;
    uint32_t block_width, block_height;  // tile, or strip (width x rows per strip)
    int sample_path;                     // 0: TIFFRGBAImage
    ColourModel colour;
    SampleType type;
    const uint16_t *map[3];  // palette colour map
} TiffLayout;

static int wanted_bits(const TiffLayout *l) {
    switch (l->format) {
    case SAMPLEFORMAT_UINT:
        return l->bits == 1 || l->bits == 2 || l->bits == 4 || l->bits == 8 || l->bits == 16 ||
               l->bits == 32;
    case SAMPLEFORMAT_INT: return l->bits == 8 || l->bits == 16 || l->bits == 32;
    case SAMPLEFORMAT_IEEEFP: return l->bits == 16 || l->bits == 32 || l->bits == 64;
    default: return 0;
    }
}

// Chooses the path and the native image's colour model and type.
static void classify(TIFF *tif, TiffLayout *l) {
    uint16_t extra_count = 0, *extra_types = NULL, inkset = INKSET_CMYK;
    TIFFGetFieldDefaulted(tif, TIFFTAG_EXTRASAMPLES, &extra_count, &extra_types);
    TIFFGetFieldDefaulted(tif, TIFFTAG_INKSET, &inkset);
    l->sample_path = wanted_bits(l) && l->samples <= TIFF_MAX_SAMPLES;
    switch (l->photometric) {
    case PHOTOMETRIC_MINISBLACK:
    case PHOTOMETRIC_MINISWHITE:
        l->colour =
            l->samples == 1 || (l->samples == 2 && extra_count == 1) ? COLOUR_GREY : COLOUR_BANDS;
        break;
    case PHOTOMETRIC_RGB:
        l->colour = COLOUR_RGB;
        l->sample_path &= l->samples >= 3;
        break;
    case PHOTOMETRIC_SEPARATED:
        l->colour = COLOUR_CMYK;
        l->sample_path &= inkset == INKSET_CMYK && l->samples >= 4;
        break;
    case PHOTOMETRIC_PALETTE:
        l->colour = COLOUR_RGB;
        l->sample_path &= l->samples == 1 && l->format == SAMPLEFORMAT_UINT && l->bits <= 16 &&
                          TIFFGetField(tif, TIFFTAG_COLORMAP, &l->map[0], &l->map[1], &l->map[2]);
        break;
    case PHOTOMETRIC_YCBCR:
        // libjpeg converts JPEG-compressed YCbCr; other YCbCr is subsampled
        // in ways TIFFRGBAImage undoes.
        l->colour = COLOUR_RGB;
        l->sample_path &= l->compression == COMPRESSION_JPEG && l->bits == 8;
        if (l->sample_path) TIFFSetField(tif, TIFFTAG_JPEGCOLORMODE, JPEGCOLORMODE_RGB);
        break;
    default: l->sample_path = 0; break;
    }
    if (l->format == SAMPLEFORMAT_IEEEFP || l->bits == 32)
        l->type = SAMPLE_F32;
    else
        l->type = l->bits == 16 || l->photometric == PHOTOMETRIC_PALETTE ? SAMPLE_U16 : SAMPLE_U8;
}

static int read_layout(TIFF *tif, TiffLayout *l) {
    memset(l, 0, sizeof *l);
    TIFFGetField(tif, TIFFTAG_IMAGEWIDTH, &l->width);
    TIFFGetField(tif, TIFFTAG_IMAGELENGTH, &l->height);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLESPERPIXEL, &l->samples);
    TIFFGetFieldDefaulted(tif, TIFFTAG_BITSPERSAMPLE, &l->bits);
    TIFFGetFieldDefaulted(tif, TIFFTAG_SAMPLEFORMAT, &l->format);
    TIFFGetFieldDefaulted(tif, TIFFTAG_PLANARCONFIG, &l->planar);
    TIFFGetFieldDefaulted(tif, TIFFTAG_COMPRESSION, &l->compression);
    TIFFGetFieldDefaulted(tif, TIFFTAG_ORIENTATION, &l->orientation);
    if (!TIFFGetField(tif, TIFFTAG_PHOTOMETRIC, &l->photometric))
        l->photometric = l->samples >= 3 ? PHOTOMETRIC_RGB : PHOTOMETRIC_MINISBLACK;
    l->tiled = TIFFIsTiled(tif);
    if (l->tiled) {
        TIFFGetField(tif, TIFFTAG_TILEWIDTH, &l->block_width);
        TIFFGetField(tif, TIFFTAG_TILELENGTH, &l->block_height);
    } else {
        uint32_t rows_per_strip = 0;
        TIFFGetFieldDefaulted(tif, TIFFTAG_ROWSPERSTRIP, &rows_per_strip);
        l->block_width = l->width;
        l->block_height = rows_per_strip < l->height ? rows_per_strip : l->height;
    }
    if (l->orientation < 1 || l->orientation > 8) l->orientation = 1;
    if (l->samples == 0 || l->block_width == 0 || l->block_height == 0) return -1;
    classify(tif, l);
    return 0;
}

int decode_tiff_probe(Decoder *decoder, const uint8_t *data, size_t size, ImageInfo *info,
                      ErrorMessage *err) {
    (void)decoder;
    TiffSource source = {data, size, 0, ""};
    TIFF *tif = open_tiff(&source, err);
    if (!tif) return -1;
    TiffLayout layout;
    const int status = read_layout(tif, &layout);
    TIFFClose(tif);
    if (status != 0) return error_set(err, "corrupt data: TIFF has no samples, tile or strip size");
    info->width = (int)layout.width;
    info->height = (int)layout.height;
    info->orientation = layout.orientation;
    if (layout.sample_path) {  // the channels read_samples gives (palette: RGB)
        info->channels = layout.photometric == PHOTOMETRIC_PALETTE ? 3 : layout.samples;
        info->colour = layout.colour;
        info->sample_type = layout.type;
    }
    return 0;
}

// Sample i of a block row (native byte order, as libtiff delivers it).
static inline double raw_sample(const TiffLayout *l, const uint8_t *row, size_t i) {
    switch (l->bits) {
    case 1: return (row[i / 8] >> (7 - i % 8)) & 1;
    case 2: return (row[i / 4] >> (6 - 2 * (i % 4))) & 3;
    case 4: return (row[i / 2] >> (4 - 4 * (i % 2))) & 15;
    case 8: return l->format == SAMPLEFORMAT_INT ? (double)(int8_t)row[i] : row[i];
    case 16: {
        uint16_t v;
        memcpy(&v, row + 2 * i, 2);
        if (l->format == SAMPLEFORMAT_IEEEFP) return f16_to_float(v);
        return l->format == SAMPLEFORMAT_INT ? (double)(int16_t)v : v;
    }
    case 32: {
        uint32_t v;
        memcpy(&v, row + 4 * i, 4);
        if (l->format == SAMPLEFORMAT_IEEEFP) {
            float f;
            memcpy(&f, &v, 4);
            return f;
        }
        return l->format == SAMPLEFORMAT_INT ? (double)(int32_t)v : v;
    }
    default: {
        double d;
        memcpy(&d, row + 8 * i, 8);
        return d;
    }
    }
}

// One sample into the native image: integers offset/scaled to the native
// type's range (see the header), MinIsWhite inverted.
static inline void store_sample(const TiffLayout *l, double v, uint8_t *out, size_t i) {
    const int integer = l->format != SAMPLEFORMAT_IEEEFP;
    if (integer && l->format == SAMPLEFORMAT_INT) v += ldexp(1.0, l->bits - 1);
    const double top = integer ? ldexp(1.0, l->bits) - 1.0 : 1.0;
    if (l->photometric == PHOTOMETRIC_MINISWHITE) v = top - v;
    switch (l->type) {
    case SAMPLE_U8: out[i] = (uint8_t)(l->bits < 8 ? lround(v * 255.0 / top) : (long)v); break;
    case SAMPLE_U16: {
        const uint16_t s = (uint16_t)v;
        memcpy(out + 2 * i, &s, 2);
        break;
    }
    case SAMPLE_F32: {
        const float f = (float)(integer ? v / top : v);
        memcpy(out + 4 * i, &f, 4);
        break;
    }
    }
}

// Columns [x0, x1) of one block row (block coordinates) into the native row
// at `out` (pixel x0 first). plane < 0: interleaved samples, else one plane.
static void copy_block_row(const TiffLayout *l, const uint8_t *row, int x0, int x1, int plane,
                           uint8_t *out) {
    const int channels = l->photometric == PHOTOMETRIC_PALETTE ? 3 : l->samples;
    const size_t sample_bytes = sample_type_bytes(l->type);
    if (plane < 0 && l->bits == 8 && l->type == SAMPLE_U8 && l->format == SAMPLEFORMAT_UINT &&
        l->photometric != PHOTOMETRIC_MINISWHITE) {  // the common case: a copy
        memcpy(out, row + (size_t)x0 * l->samples, (size_t)(x1 - x0) * l->samples);
        return;
    }
    for (int x = x0; x < x1; x++) {
        uint8_t *pixel = out + (size_t)(x - x0) * channels * sample_bytes;
        if (l->photometric == PHOTOMETRIC_PALETTE) {
            const size_t index = (size_t)raw_sample(l, row, (size_t)x);
            for (int c = 0; c < 3; c++) memcpy(pixel + 2 * c, &l->map[c][index], 2);
        } else if (plane < 0) {
            for (int c = 0; c < l->samples; c++)
                store_sample(l, raw_sample(l, row, (size_t)x * l->samples + c), pixel, (size_t)c);
        } else {
            store_sample(l, raw_sample(l, row, (size_t)x), pixel, (size_t)plane);
        }
    }
}

typedef struct BlockReader {
    TIFF *tif;
    TiffSource *source;
    const TiffLayout *layout;
    uint8_t *block;
    tmsize_t block_size;
} BlockReader;

// Decodes block (bx, by) of `plane` (0 when interleaved) into reader->block.
static int read_block(BlockReader *r, uint32_t bx, uint32_t by, uint16_t plane, ErrorMessage *err) {
    const TiffLayout *l = r->layout;
    const uint32_t x = bx * l->block_width, y = by * l->block_height;
    const uint32_t index =
        l->tiled ? TIFFComputeTile(r->tif, x, y, 0, plane) : TIFFComputeStrip(r->tif, y, plane);
    const tmsize_t got = l->tiled ? TIFFReadEncodedTile(r->tif, index, r->block, r->block_size)
                                  : TIFFReadEncodedStrip(r->tif, index, r->block, r->block_size);
    if (got < 0) return report_failure(r->source, "cannot decode a strip or tile", err);
    return 0;
}

static int read_samples(Decoder *decoder, BlockReader *r, const PixelRect *region, int whole_file,
                        SampleImage *image, ErrorMessage *err) {
    const TiffLayout *l = r->layout;
    const int planes = l->planar == PLANARCONFIG_SEPARATE && l->samples > 1 ? l->samples : 1;
    const int channels = l->photometric == PHOTOMETRIC_PALETTE ? 3 : l->samples;
    const size_t pixel_bytes = (size_t)channels * sample_type_bytes(l->type);
    const size_t stride = (size_t)region->width * pixel_bytes;
    uint8_t *samples =
        decode_buffer_reserve(&decoder->samples, stride * (size_t)region->height, err);
    if (!samples) return -1;
    r->block_size = l->tiled ? TIFFTileSize(r->tif) : TIFFStripSize(r->tif);
    if (r->block_size <= 0) return report_failure(r->source, "bad strip or tile size", err);
    r->block = decode_buffer_reserve(&decoder->scratch, (size_t)r->block_size, err);
    if (!r->block) return -1;
    const uint64_t samples_per_row = (uint64_t)l->block_width * (planes > 1 ? 1 : l->samples);
    const size_t row_bytes = (size_t)((samples_per_row * l->bits + 7) / 8);
    // Blocks the region touches, or all of them when checking the file.
    const uint32_t bx0 = whole_file ? 0 : (uint32_t)region->x / l->block_width;
    const uint32_t by0 = whole_file ? 0 : (uint32_t)region->y / l->block_height;
    const uint32_t bx1 = whole_file ? (l->width - 1) / l->block_width
                                    : (uint32_t)(region->x + region->width - 1) / l->block_width;
    const uint32_t by1 = whole_file ? (l->height - 1) / l->block_height
                                    : (uint32_t)(region->y + region->height - 1) / l->block_height;
    for (uint32_t by = by0; by <= by1; by++)
        for (uint32_t bx = bx0; bx <= bx1; bx++)
            for (int plane = 0; plane < planes; plane++) {
                if (read_block(r, bx, by, (uint16_t)plane, err) != 0) return -1;
                // The part of this block inside the region, in image pixels.
                const int64_t left = (int64_t)bx * l->block_width,
                              top = (int64_t)by * l->block_height;
                const int64_t x0 = left > region->x ? left : region->x;
                const int64_t x1 = left + l->block_width < region->x + region->width
                                       ? left + l->block_width
                                       : region->x + region->width;
                const int64_t y0 = top > region->y ? top : region->y;
                const int64_t y1 = top + l->block_height < region->y + region->height
                                       ? top + l->block_height
                                       : region->y + region->height;
                for (int64_t y = y0; y < y1 && x0 < x1; y++) {
                    const size_t in_block = (size_t)(y - top) * row_bytes;
                    if (in_block + row_bytes > (size_t)r->block_size) break;
                    uint8_t *out = samples + (size_t)(y - region->y) * stride +
                                   (size_t)(x0 - region->x) * pixel_bytes;
                    copy_block_row(l, r->block + in_block, (int)(x0 - left), (int)(x1 - left),
                                   planes > 1 ? plane : -1, out);
                }
            }
    *image = (SampleImage){samples, region->width, region->height, channels,
                           stride,  l->type,       l->colour,      16};
    return 0;
}

// The fallback: libtiff's RGBA rendering of the region.
static int read_rgba(Decoder *decoder, TIFF *tif, TiffSource *source, const PixelRect *region,
                     SampleImage *image, ErrorMessage *err) {
    char message[1024];
    if (!TIFFRGBAImageOK(tif, message))
        return error_set(err, "unsupported format: TIFF: %s", message);
    TIFFRGBAImage rgba;
    if (!TIFFRGBAImageBegin(&rgba, tif, 1, message))
        return error_set(err, "unsupported format: TIFF: %s", message);
    rgba.req_orientation = rgba.orientation;  // as stored: decode.c orients
    rgba.row_offset = region->y;
    rgba.col_offset = region->x;
    const size_t stride = (size_t)region->width * 4;
    uint8_t *pixels =
        decode_buffer_reserve(&decoder->samples, stride * (size_t)region->height, err);
    int ok = pixels != NULL;
    if (ok)
        ok = TIFFRGBAImageGet(&rgba, (uint32_t *)(void *)pixels, (uint32_t)region->width,
                              (uint32_t)region->height);
    const int has_alpha = rgba.alpha != 0;
    TIFFRGBAImageEnd(&rgba);
    if (!pixels) return -1;
    if (!ok) return report_failure(source, "cannot decode the image", err);
    // ABGR words with R in the low byte: R, G, B, A bytes on little-endian;
    // without alpha in the file (libtiff then sets A to 255) only R, G, B,
    // packed, so that a native request sees the channels the file has.
    const int channels = has_alpha ? 4 : 3;
    uint8_t *next = pixels;
    for (size_t i = 0; i < stride * (size_t)region->height; i += 4, next += channels) {
        uint32_t word;
        memcpy(&word, pixels + i, 4);
        const uint8_t bytes[4] = {(uint8_t)TIFFGetR(word), (uint8_t)TIFFGetG(word),
                                  (uint8_t)TIFFGetB(word), (uint8_t)TIFFGetA(word)};
        memcpy(next, bytes, (size_t)channels);
    }
    *image = (SampleImage){pixels,         region->width, region->height, channels,
                           (size_t)region->width * (size_t)channels, SAMPLE_U8, COLOUR_RGB, 16};
    return 0;
}

int decode_tiff_decode(Decoder *decoder, const uint8_t *data, size_t size,
                       const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    TiffSource source = {data, size, 0, ""};
    TIFF *tif = open_tiff(&source, err);
    if (!tif) return -1;
    TiffLayout layout;
    PixelRect region;
    SampleImage image;
    int status = read_layout(tif, &layout);
    if (status != 0) error_set(err, "corrupt data: TIFF has no samples, tile or strip size");
    // The two limits count a sample's bytes differently on purpose: the
    // image is held in its native type (an F64 sample as the 4-byte float
    // it becomes), a strip or tile as libtiff decodes it (F64: 8 bytes).
    if (status == 0)
        status = decode_check_samples(decoder, "TIFF image", layout.width, layout.height,
                                      layout.samples, sample_type_bytes(layout.type), err);
    if (status == 0)  // a strip or tile is decoded whole: it must fit the limits too
        status = decode_check_samples(decoder, "TIFF strip or tile", layout.block_width,
                                      layout.block_height, layout.samples,
                                      (size_t)(layout.bits + 7) / 8, err);
    if (status == 0)
        status = decode_clamp_region(request, (int)layout.width, (int)layout.height, &region, err);
    if (status == 0 && layout.sample_path) {
        BlockReader reader = {tif, &source, &layout, NULL, 0};
        status =
            read_samples(decoder, &reader, &region, request && request->whole_file, &image, err);
    } else if (status == 0) {
        status = read_rgba(decoder, tif, &source, &region, &image, err);
    }
    TIFFClose(tif);
    if (status != 0) return -1;
    return decode_finish(decoder, &image, region, out, err);
}
