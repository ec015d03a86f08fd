// Encoders for test images, written with the codec libraries themselves
// (libjpeg, libpng, libwebp/libwebpmux) so tests know every pixel they decode.
#include "codec_fixtures.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <webp/encode.h>
#include <webp/mux.h>

// Encoder set-up failures are bugs in the test itself: stop loudly.
#define require(condition)                                                              \
    do {                                                                                \
        if (!(condition)) {                                                             \
            fprintf(stderr, "%s:%d: test fixture failed: %s\n", __FILE__, __LINE__, #condition); \
            abort();                                                                    \
        }                                                                               \
    } while (0)

const JpegSpec JPEG_RGB = {95, 2, 2, 0, JCS_RGB, JCS_YCbCr, 0};

Bytes encode_jpeg(const uint8_t *samples, int width, int height, const JpegSpec *spec) {
    return encode_jpeg_app1(samples, width, height, spec, (Bytes){NULL, 0});
}

Bytes encode_jpeg_app1(const uint8_t *samples, int width, int height, const JpegSpec *spec,
                       Bytes app1) {
    struct jpeg_compress_struct cinfo;
    struct jpeg_error_mgr error_manager;
    cinfo.err = jpeg_std_error(&error_manager);
    jpeg_create_compress(&cinfo);
    unsigned char *buffer = NULL;
    unsigned long size = 0;
    jpeg_mem_dest(&cinfo, &buffer, &size);
    cinfo.image_width = (JDIMENSION)width;
    cinfo.image_height = (JDIMENSION)height;
    cinfo.in_color_space = spec->input_space;
    cinfo.input_components = spec->input_space == JCS_GRAYSCALE ? 1
                             : spec->input_space == JCS_CMYK  ? 4
                                                              : 3;
    jpeg_set_defaults(&cinfo);
    jpeg_set_colorspace(&cinfo, spec->file_space);
    jpeg_set_quality(&cinfo, spec->quality, TRUE);
    for (int i = 0; i < cinfo.num_components; i++)
        cinfo.comp_info[i].h_samp_factor = cinfo.comp_info[i].v_samp_factor = 1;
    cinfo.comp_info[0].h_samp_factor = spec->h_samp;
    cinfo.comp_info[0].v_samp_factor = spec->v_samp;
    if (spec->progressive) jpeg_simple_progression(&cinfo);
    if (spec->input_space == JCS_CMYK) cinfo.write_Adobe_marker = spec->adobe_marker;
    jpeg_start_compress(&cinfo, TRUE);
    if (app1.data) jpeg_write_marker(&cinfo, JPEG_APP0 + 1, app1.data, (unsigned)app1.size);
    const size_t stride = (size_t)width * cinfo.input_components;
    while (cinfo.next_scanline < cinfo.image_height) {
        JSAMPROW row = (JSAMPROW)samples + cinfo.next_scanline * stride;
        jpeg_write_scanlines(&cinfo, &row, 1);
    }
    jpeg_finish_compress(&cinfo);
    jpeg_destroy_compress(&cinfo);
    return (Bytes){buffer, size};
}

static void png_append(png_structp png, png_bytep data, size_t length) {
    Bytes *out = png_get_io_ptr(png);
    out->data = realloc(out->data, out->size + length);
    memcpy(out->data + out->size, data, length);
    out->size += length;
}

static void png_no_flush(png_structp png) { (void)png; }

int png_channels(int colour_type) {
    switch (colour_type) {
    case PNG_COLOR_TYPE_GRAY_ALPHA: return 2;
    case PNG_COLOR_TYPE_RGB: return 3;
    case PNG_COLOR_TYPE_RGB_ALPHA: return 4;
    default: return 1;  // grey, palette index
    }
}

static Bytes encode_png_exif(const uint16_t *values, int width, int height, const PngSpec *spec,
                             const png_color *palette, int palette_size, Bytes exif);

// values: one sample per channel per pixel at the PNG's bit depth.
Bytes encode_png(const uint16_t *values, int width, int height, const PngSpec *spec,
                        const png_color *palette, int palette_size) {
    return encode_png_exif(values, width, height, spec, palette, palette_size, (Bytes){NULL, 0});
}

static Bytes encode_png_exif(const uint16_t *values, int width, int height, const PngSpec *spec,
                             const png_color *palette, int palette_size, Bytes exif) {
    Bytes out = {NULL, 0};
    png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
    png_infop info = png_create_info_struct(png);
    require(info != NULL);
    png_set_write_fn(png, &out, png_append, png_no_flush);
    png_set_IHDR(png, info, (png_uint_32)width, (png_uint_32)height, spec->bit_depth,
                 spec->colour_type, spec->interlace, PNG_COMPRESSION_TYPE_DEFAULT,
                 PNG_FILTER_TYPE_DEFAULT);
    if (palette) png_set_PLTE(png, info, palette, palette_size);
    png_byte alphas[4] = {0, 60, 120, 200};
    png_color_16 transparent = {0, 1, 2, 3, 1};
    if (spec->transparency) png_set_tRNS(png, info, alphas, 4, &transparent);
    if (exif.data) png_set_eXIf_1(png, info, (png_uint_32)exif.size, exif.data);
    png_write_info(png, info);
    const int channels = png_channels(spec->colour_type), depth = spec->bit_depth;
    const size_t row_bytes = ((size_t)width * channels * depth + 7) / 8;
    png_bytep image = calloc((size_t)height, row_bytes);
    png_bytepp rows = malloc(sizeof(png_bytep) * height);
    for (int y = 0; y < height; y++) {
        rows[y] = image + y * row_bytes;
        for (int i = 0; i < width * channels; i++) {
            unsigned v = values[(size_t)y * width * channels + i];
            if (depth == 16) {
                rows[y][2 * i] = (png_byte)(v >> 8);
                rows[y][2 * i + 1] = (png_byte)v;
            } else {  // depth 1..8: MSB-first packing
                rows[y][i * depth / 8] |= (png_byte)(v << (8 - depth - (i * depth) % 8));
            }
        }
    }
    png_write_image(png, rows);
    png_write_end(png, NULL);
    png_destroy_write_struct(&png, &info);
    free(rows);
    free(image);
    return out;
}

static Bytes copy_webp(const uint8_t *data, size_t size) {
    Bytes out = {malloc(size), size};
    memcpy(out.data, data, size);
    return out;
}

// Advanced-API encode of RGBA with `exact` on, so RGB under alpha is kept.
Bytes encode_webp_rgba(const uint8_t *rgba, int width, int height, int lossless) {
    WebPConfig config;
    WebPPicture picture;
    WebPMemoryWriter writer;
    require(WebPConfigInit(&config) && WebPPictureInit(&picture));
    config.lossless = lossless;
    config.exact = 1;
    config.quality = 90;
    picture.use_argb = 1;
    picture.width = width;
    picture.height = height;
    require(WebPPictureImportRGBA(&picture, rgba, width * 4));
    WebPMemoryWriterInit(&writer);
    picture.writer = WebPMemoryWrite;
    picture.custom_ptr = &writer;
    require(WebPEncode(&config, &picture));
    WebPPictureFree(&picture);
    Bytes out = copy_webp(writer.mem, writer.size);
    WebPMemoryWriterClear(&writer);
    return out;
}

Bytes encode_webp_rgb(const uint8_t *rgb, int width, int height, int lossless) {
    uint8_t *encoded = NULL;
    size_t size = lossless ? WebPEncodeLosslessRGB(rgb, width, height, width * 3, &encoded)
                           : WebPEncodeRGB(rgb, width, height, width * 3, 90, &encoded);
    require(size > 0);
    Bytes out = copy_webp(encoded, size);
    WebPFree(encoded);
    return out;
}

// Two lossless frames; the second differs so the file stays animated.
Bytes encode_webp_animation(const uint8_t *frame0_rgba, const uint8_t *frame1_rgba,
                                   int width, int height) {
    WebPAnimEncoderOptions options;
    WebPConfig config;
    require(WebPAnimEncoderOptionsInit(&options) && WebPConfigInit(&config));
    config.lossless = 1;
    config.exact = 1;
    WebPAnimEncoder *encoder = WebPAnimEncoderNew(width, height, &options);
    const uint8_t *frames[2] = {frame0_rgba, frame1_rgba};
    for (int i = 0; i < 2; i++) {
        WebPPicture picture;
        require(WebPPictureInit(&picture));
        picture.use_argb = 1;
        picture.width = width;
        picture.height = height;
        require(WebPPictureImportRGBA(&picture, frames[i], width * 4));
        require(WebPAnimEncoderAdd(encoder, &picture, i * 100, &config));
        WebPPictureFree(&picture);
    }
    WebPAnimEncoderAdd(encoder, NULL, 200, NULL);
    WebPData assembled;
    WebPDataInit(&assembled);
    require(WebPAnimEncoderAssemble(encoder, &assembled));
    Bytes out = copy_webp(assembled.bytes, assembled.size);
    WebPDataClear(&assembled);
    WebPAnimEncoderDelete(encoder);
    return out;
}

Bytes encode_png_rgb(const uint8_t *rgb, int width, int height) {
    return encode_png_rgb_exif(rgb, width, height, (Bytes){NULL, 0});
}

Bytes encode_png_rgb_exif(const uint8_t *rgb, int width, int height, Bytes exif) {
    uint16_t *values = malloc(sizeof(uint16_t) * width * height * 3);
    for (int i = 0; i < width * height * 3; i++) values[i] = rgb[i];
    const PngSpec spec = {PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_NONE, 0};
    Bytes file = encode_png_exif(values, width, height, &spec, NULL, 0, exif);
    free(values);
    return file;
}

