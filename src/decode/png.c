// PNG decoding with libpng from memory: every colour type and bit depth to
// 8-bit RGB (palette expanded, grey copied to 3 channels, 16-bit samples
// reduced to their high byte as Pillow does, alpha and tRNS dropped without
// compositing), Adam7 interlacing included. Only the region's rows are kept;
// a non-interlaced image is read no further than the region's last row
// unless the whole file is to be checked. The orientation comes from an eXIf
// chunk (decode_png_orientation). A native request (decode.h) keeps 16-bit
// samples, grey as grey and a real alpha channel (palettes expanded to RGB,
// tRNS dropped as above).
// libpng errors longjmp back here; its warnings are silenced.
#include "decode/decode_internal.h"

#include <stdio.h>
#include <string.h>

#include <png.h>

// The memory source handed to libpng plus what went wrong, if anything.
typedef struct PngSource {
    const uint8_t *data;
    size_t size;
    size_t offset;
    int ran_out;  // libpng asked for bytes past the end of the file
    char message[256];
} PngSource;

static void read_from_memory(png_structp png, png_bytep out, size_t length) {
    PngSource *source = png_get_io_ptr(png);
    if (length > source->size - source->offset) {
        source->ran_out = 1;
        png_error(png, "file ends early");
    }
    memcpy(out, source->data + source->offset, length);
    source->offset += length;
}

static void on_png_error(png_structp png, png_const_charp message) {
    PngSource *source = png_get_error_ptr(png);
    snprintf(source->message, sizeof source->message, "%s", message);
    png_longjmp(png, 1);
}

static void on_png_warning(png_structp png, png_const_charp message) {
    (void)png;
    (void)message;  // never print; ancillary-chunk problems do not affect pixels
}

static uint32_t read_be32(const uint8_t *p) {
    return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

// The size comes straight from the IHDR chunk that must follow the signature
// (bytes 16..23), without starting libpng.
int decode_png_probe(const uint8_t *data, size_t size, ImageInfo *info, ErrorMessage *err) {
    if (size < 24) return error_set(err, "truncated: PNG header cut at %zu bytes", size);
    if (memcmp(data + 12, "IHDR", 4) != 0 || read_be32(data + 8) != 13)
        return error_set(err, "corrupt data: PNG does not start with an IHDR chunk");
    uint32_t width = read_be32(data + 16), height = read_be32(data + 20);
    if (width == 0 || height == 0 || width > INT32_MAX || height > INT32_MAX)
        return error_set(err, "corrupt data: PNG declares %u x %u pixels", width, height);
    info->width = (int)width;
    info->height = (int)height;
    return 0;
}

// Chunks are walked by their length fields only (no CRC check: libpng checks
// them when the image is decoded); an eXIf chunk after IDAT is not looked
// for, as reading one would mean walking the whole image data.
int decode_png_orientation(const uint8_t *data, size_t size) {
    size_t offset = 8;  // past the signature
    while (size - offset >= 12) {
        const uint32_t length = read_be32(data + offset);
        const uint8_t *type = data + offset + 4;
        if (length > size - offset - 12) break;
        if (memcmp(type, "IDAT", 4) == 0 || memcmp(type, "IEND", 4) == 0) break;
        if (memcmp(type, "eXIf", 4) == 0) return exif_orientation(type + 4, length);
        offset += 12 + (size_t)length;
    }
    return 1;
}

static int report_failure(const PngSource *source, ErrorMessage *err) {
    if (source->ran_out) return error_set(err, "truncated: PNG data ends early");
    if (strstr(source->message, "memory"))
        return error_set(err, "out of memory in libpng: %s", source->message);
    return error_set(err, "corrupt data: libpng: %s", source->message);
}

// Sets libpng's transformations so that every row comes out as 8-bit RGB.
static void request_rgb8(png_structp png, png_infop info) {
    int colour_type = png_get_color_type(png, info);
    int bit_depth = png_get_bit_depth(png, info);
    if (colour_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (colour_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (bit_depth == 16) png_set_strip_16(png);
    // Palette expansion turns tRNS into an alpha channel; drop it with the rest.
    if ((colour_type & PNG_COLOR_MASK_ALPHA) || png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_strip_alpha(png);
    if (!(colour_type & PNG_COLOR_MASK_COLOR)) png_set_gray_to_rgb(png);
}

// A native request: palette expanded, grey below 8 bits expanded, 16-bit
// samples in host order, a real alpha channel kept, tRNS dropped.
static void request_native(png_structp png, png_infop info) {
    const int colour_type = png_get_color_type(png, info);
    const int bit_depth = png_get_bit_depth(png, info);
    if (colour_type == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
    if (colour_type == PNG_COLOR_TYPE_GRAY && bit_depth < 8) png_set_expand_gray_1_2_4_to_8(png);
    if (!(colour_type & PNG_COLOR_MASK_ALPHA) && png_get_valid(png, info, PNG_INFO_tRNS))
        png_set_strip_alpha(png);  // the alpha that palette expansion makes of tRNS
    if (bit_depth == 16) {
        const uint16_t one = 1;
        uint8_t first;
        memcpy(&first, &one, 1);
        if (first) png_set_swap(png);  // little-endian host
    }
}

// Ancillary chunks that cannot change the RGB result: skipped unparsed (no
// decompression of text or ICC profiles).
static void skip_metadata_chunks(png_structp png) {
    static const png_byte skipped[] = "iCCP\0iTXt\0tEXt\0zTXt\0eXIf\0sPLT";
    png_set_keep_unknown_chunks(png, PNG_HANDLE_CHUNK_NEVER, skipped, (int)(sizeof skipped / 5));
}

// Reads the rows after png_read_update_info: region rows go into `rows`
// (full width, stride bytes apart), the others into `spare`. whole_file:
// every row, not only those up to the region's end.
static void read_region_rows(png_structp png, int height, int passes, const PixelRect *region,
                             int whole_file, uint8_t *rows, size_t stride, uint8_t *spare) {
    const int region_end = region->y + region->height;
    for (int pass = 0; pass < passes; pass++) {
        // Each Adam7 pass visits every row; the last pass (or the only one)
        // completes rows in order, so it can stop at the region's end.
        const int last_row = pass == passes - 1 && !whole_file ? region_end : height;
        for (int y = 0; y < last_row; y++) {
            int inside = y >= region->y && y < region_end;
            png_read_row(png, inside ? rows + (size_t)(y - region->y) * stride : spare, NULL);
        }
    }
}

int decode_png_decode(Decoder *decoder, const uint8_t *data, size_t size,
                      const DecodeRequest *request, DecodedImage *out, ErrorMessage *err) {
    ImageInfo info;
    PixelRect region;
    if (decode_png_probe(data, size, &info, err) != 0 ||
        decode_check_size(decoder, "PNG image", info.width, info.height, err) != 0 ||
        decode_clamp_region(request, info.width, info.height, &region, err) != 0)
        return -1;
    const size_t stride = (size_t)info.width * 3;
    uint8_t *rows = decode_buffer_reserve(&decoder->pixels, stride * (size_t)region.height, err);
    uint8_t *spare = rows ? decode_buffer_reserve(&decoder->scratch, stride, err) : NULL;
    if (!spare) return -1;

    PngSource source = {.data = data, .size = size};
    png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &source, on_png_error,
                                             on_png_warning);
    png_infop png_header = png ? png_create_info_struct(png) : NULL;
    if (!png_header) {
        png_destroy_read_struct(&png, NULL, NULL);
        return error_set(err, "out of memory: cannot create a PNG reader");
    }
    if (setjmp(png_jmpbuf(png))) {
        png_destroy_read_struct(&png, &png_header, NULL);
        return report_failure(&source, err);
    }
    png_set_read_fn(png, &source, read_from_memory);
    png_set_user_limits(png, DECODE_MAX_SIDE, DECODE_MAX_SIDE);
    skip_metadata_chunks(png);
    png_read_info(png, png_header);
    if (decoder->native)
        request_native(png, png_header);
    else
        request_rgb8(png, png_header);
    const int passes = png_set_interlace_handling(png);
    png_read_update_info(png, png_header);
    const int channels = png_get_channels(png, png_header);
    const int bit_depth = png_get_bit_depth(png, png_header);
    const size_t pixel_bytes = (size_t)channels * (bit_depth == 16 ? 2 : 1);
    const size_t row_bytes = decoder->native ? (size_t)info.width * pixel_bytes : stride;
    if (png_get_rowbytes(png, png_header) != row_bytes || bit_depth < 8 ||
        (!decoder->native && channels != 3)) {
        int colour_type = png_get_color_type(png, png_header);
        png_destroy_read_struct(&png, &png_header, NULL);
        return error_set(err, "unsupported format: PNG colour type %d, bit depth %d",
                         colour_type, bit_depth);
    }
    if (row_bytes > stride) {  // native samples wider than RGB: room for them
        rows = decode_buffer_reserve(&decoder->pixels, row_bytes * (size_t)region.height, err);
        spare = rows ? decode_buffer_reserve(&decoder->scratch, row_bytes, err) : NULL;
        if (!spare) {
            png_destroy_read_struct(&png, &png_header, NULL);
            return -1;
        }
    }
    const int whole_file = request && request->whole_file;
    read_region_rows(png, info.height, passes, &region, whole_file, rows, row_bytes, spare);
    // The zlib stream's end (its check value) and the chunks after it; when
    // the file need not be checked, stop without: rows below the region and
    // trailing chunks are never needed.
    if (whole_file) png_read_end(png, NULL);
    png_destroy_read_struct(&png, &png_header, NULL);

    if (decoder->native)
        out->samples = (SampleImage){rows + (size_t)region.x * pixel_bytes,
                                     region.width,
                                     region.height,
                                     channels,
                                     row_bytes,
                                     bit_depth == 16 ? SAMPLE_U16 : SAMPLE_U8,
                                     channels <= 2 ? COLOUR_GREY : COLOUR_RGB,
                                     bit_depth};
    else
        out->image = (Image){rows + (size_t)region.x * 3, region.width, region.height, stride};
    out->covered = region;
    return 0;
}
