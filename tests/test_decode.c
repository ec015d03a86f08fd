// Tests for src/decode: JPEG/PNG/WebP images made here with the codecs' own
// encoders (libjpeg, libpng, libwebp/libwebpmux), decoded whole and by region,
// with DCT scaling checked against a full decode + crop + box average, plus
// corrupt, truncated, oversized and unsupported inputs.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <zlib.h>

#include "codec_fixtures.h"
#include "decode/decode.h"

// A smooth RGB / grey / CMYK pattern: JPEG keeps it well, and it changes
// fast enough (a few levels per pixel) that a misplaced region shows.
static uint8_t *smooth_pattern(int width, int height, int channels, int seed) {
    uint8_t *pixels = malloc((size_t)width * height * channels);
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int c = 0; c < channels; c++) {
                double phase = x * (0.045 + 0.011 * c) + y * (0.031 - 0.007 * c) + seed + 2.0 * c;
                pixels[((size_t)y * width + x) * channels + c] =
                    (uint8_t)lround(128 + 100 * sin(phase) * cos(0.013 * (x - y) + c));
            }
    return pixels;
}

// ---- decoding and comparing -------------------------------------------------

static DecodedImage decode_ok(Decoder *decoder, Bytes file, const DecodeRequest *request) {
    ErrorMessage err = {{0}};
    DecodedImage out;
    if (decoder_decode(decoder, file.data, file.size, request, &out, &err) != 0)
        fail_msg("decode failed: %s", err.text);
    return out;
}

// Tightly packed copy of a decoded image (the Decoder's buffer is reused).
static uint8_t *copy_pixels(const Image *image) {
    uint8_t *copy = malloc((size_t)image->width * image->height * 3);
    for (int y = 0; y < image->height; y++)
        memcpy(copy + (size_t)y * image->width * 3, image->pixels + y * image->stride,
               (size_t)image->width * 3);
    return copy;
}

typedef struct Difference {
    double mean;
    int max;
} Difference;

// image against a packed RGB reference (channels 1 = grey, expanded; 3 = RGB).
static Difference compare(const Image *image, const uint8_t *reference, int channels) {
    Difference d = {0, 0};
    for (int y = 0; y < image->height; y++)
        for (int x = 0; x < image->width * 3; x++) {
            int ref = reference[((size_t)y * image->width * channels) + x / 3 * channels +
                                (channels == 3 ? x % 3 : 0)];
            int diff = abs(image->pixels[y * image->stride + x] - ref);
            d.mean += diff;
            if (diff > d.max) d.max = diff;
        }
    d.mean /= (double)image->width * image->height * 3;
    return d;
}

static void expect_close(Difference d, double mean_limit, int max_limit, const char *what) {
    if (d.mean > mean_limit || d.max > max_limit)
        fail_msg("%s: mean abs diff %.3f (limit %.2f), max %d (limit %d)", what, d.mean,
                 mean_limit, d.max, max_limit);
}

// Area-weighted mean of full-image pixels over [x0,x1) x [y0,y1) (fractions
// of pixels count by their overlap): the "box-average resize" reference.
static void box_average(const uint8_t *full, int width, int height, double x0, double x1,
                        double y0, double y1, double out[3]) {
    x1 = fmin(x1, width);  // a JPEG's last scaled pixel may stand for a partial block
    y1 = fmin(y1, height);
    double sum[3] = {0, 0, 0}, total = 0;
    for (int y = (int)y0; y < (int)ceil(y1); y++)
        for (int x = (int)x0; x < (int)ceil(x1); x++) {
            double w = (fmin(x + 1, x1) - fmax(x, x0)) * (fmin(y + 1, y1) - fmax(y, y0));
            for (int c = 0; c < 3; c++) sum[c] += w * full[((size_t)y * width + x) * 3 + c];
            total += w;
        }
    for (int c = 0; c < 3; c++) out[c] = sum[c] / total;
}

// The decoded region against the full decode cropped to `covered` and
// box-averaged to the decoded size, using covered's mapping.
static Difference compare_to_box_average(const DecodedImage *part, const uint8_t *full,
                                         int width, int height) {
    const PixelRect *c = &part->covered;
    const double sx = (double)c->width / part->image.width;
    const double sy = (double)c->height / part->image.height;
    Difference d = {0, 0};
    for (int y = 0; y < part->image.height; y++)
        for (int x = 0; x < part->image.width; x++) {
            double ref[3];
            box_average(full, width, height, c->x + x * sx, c->x + (x + 1) * sx, c->y + y * sy,
                        c->y + (y + 1) * sy, ref);
            for (int k = 0; k < 3; k++) {
                int diff = (int)lround(fabs(part->image.pixels[y * part->image.stride + x * 3 + k] -
                                            ref[k]));
                d.mean += diff;
                if (diff > d.max) d.max = diff;
            }
        }
    d.mean /= (double)part->image.width * part->image.height * 3;
    return d;
}

static int has_word(const ErrorMessage *err, const char *word) { return strstr(err->text, word) != NULL; }

static void test_sniff_and_names(void **state) {
    (void)state;
    const uint8_t jpeg[] = {0xFF, 0xD8, 0xFF, 0xE0};
    const uint8_t png[] = {0x89, 'P', 'N', 'G', 0x0D, 0x0A, 0x1A, 0x0A};
    assert_int_equal(decode_sniff(jpeg, 4), IMAGE_FORMAT_JPEG);
    assert_int_equal(decode_sniff(jpeg, 2), IMAGE_FORMAT_UNKNOWN);
    assert_int_equal(decode_sniff(png, 8), IMAGE_FORMAT_PNG);
    assert_int_equal(decode_sniff(png, 7), IMAGE_FORMAT_UNKNOWN);
    assert_int_equal(decode_sniff((const uint8_t *)"RIFF\x10\0\0\0WEBPVP8L", 16), IMAGE_FORMAT_WEBP);
    assert_int_equal(decode_sniff((const uint8_t *)"RIFF\x10\0\0\0AVI LIST", 16),
                     IMAGE_FORMAT_UNKNOWN);
    assert_int_equal(decode_sniff((const uint8_t *)"GIF89a", 6), IMAGE_FORMAT_GIF);
    assert_int_equal(decode_sniff((const uint8_t *)"II*\0\x08\0\0\0", 8), IMAGE_FORMAT_TIFF);
    assert_int_equal(decode_sniff((const uint8_t *)"P5 4 4 255\n", 11), IMAGE_FORMAT_PNM);
    assert_int_equal(decode_sniff((const uint8_t *)"P9 4 4 255\n", 11), IMAGE_FORMAT_UNKNOWN);
    assert_int_equal(decode_sniff((const uint8_t *)"\0\0\0\x18" "ftypheic\0\0\0\0", 16),
                     IMAGE_FORMAT_HEIF);
    assert_int_equal(decode_sniff((const uint8_t *)"\0\0\0\x18" "ftypmp42\0\0\0\0", 16),
                     IMAGE_FORMAT_UNKNOWN);
    assert_int_equal(decode_sniff((const uint8_t *)"\xFF\x0A\xFA", 3), IMAGE_FORMAT_JXL);
    assert_int_equal(decode_sniff(NULL, 0), IMAGE_FORMAT_UNKNOWN);
    assert_string_equal(image_format_name(IMAGE_FORMAT_JPEG), "JPEG");
    assert_string_equal(image_format_name(IMAGE_FORMAT_PNG), "PNG");
    assert_string_equal(image_format_name(IMAGE_FORMAT_WEBP), "WebP");
    assert_string_equal(image_format_name(IMAGE_FORMAT_DICOM), "DICOM");
    assert_string_equal(image_format_name(IMAGE_FORMAT_COUNT), "unknown");
}

static void test_jpeg_known_pixels(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 96, height = 64;
    uint8_t *rgb = smooth_pattern(width, height, 3, 1);
    const JpegSpec spec = {100, 1, 1, 0, JCS_RGB, JCS_YCbCr, 0};
    Bytes file = encode_jpeg(rgb, width, height, &spec);
    ImageInfo info;
    ErrorMessage err;
    assert_int_equal(decoder_probe(decoder, file.data, file.size, &info, &err), 0);
    assert_int_equal(info.format, IMAGE_FORMAT_JPEG);
    assert_int_equal(info.width, width);
    assert_int_equal(info.height, height);
    DecodedImage out = decode_ok(decoder, file, NULL);
    assert_int_equal(out.image.width, width);
    assert_int_equal(out.image.height, height);
    assert_memory_equal(&out.covered, &((PixelRect){0, 0, width, height}), sizeof(PixelRect));
    // Quality 100, 4:4:4: only DCT/colour-conversion rounding is left (a few levels).
    expect_close(compare(&out.image, rgb, 3), 1.0, 6, "JPEG q100 4:4:4");
    free(file.data);
    free(rgb);
    decoder_destroy(decoder);
}

// Baseline and progressive, every chroma subsampling, odd size.
static void test_jpeg_subsamplings(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 67, height = 45;
    uint8_t *rgb = smooth_pattern(width, height, 3, 2);
    const int factors[5][2] = {{1, 1}, {2, 1}, {2, 2}, {1, 2}, {4, 1}};  // 444 422 420 440 411
    for (int progressive = 0; progressive < 2; progressive++)
        for (int i = 0; i < 5; i++) {
            JpegSpec spec = {95, factors[i][0], factors[i][1], progressive, JCS_RGB, JCS_YCbCr, 0};
            Bytes file = encode_jpeg(rgb, width, height, &spec);
            DecodedImage out = decode_ok(decoder, file, NULL);
            assert_int_equal(out.image.width, width);
            assert_int_equal(out.image.height, height);
            char what[64];
            snprintf(what, sizeof what, "JPEG q95 %dx%d progressive=%d", factors[i][0],
                     factors[i][1], progressive);
            // q95 plus halved/quartered chroma resolution on a pattern whose
            // colour changes every few pixels: small mean, larger peaks.
            expect_close(compare(&out.image, rgb, 3), 4.0, 40, what);
            free(file.data);
        }
    free(rgb);
    decoder_destroy(decoder);
}

static void test_jpeg_greyscale(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 50, height = 33;
    uint8_t *grey = smooth_pattern(width, height, 1, 3);
    for (int progressive = 0; progressive < 2; progressive++) {
        JpegSpec spec = {100, 1, 1, progressive, JCS_GRAYSCALE, JCS_GRAYSCALE, 0};
        Bytes file = encode_jpeg(grey, width, height, &spec);
        DecodedImage out = decode_ok(decoder, file, NULL);
        // Grey q100: DCT rounding only.
        expect_close(compare(&out.image, grey, 1), 1.0, 4, "grey JPEG");
        for (int x = 0; x < width; x++)  // expanded to 3 equal channels
            assert_true(out.image.pixels[3 * x] == out.image.pixels[3 * x + 1] &&
                        out.image.pixels[3 * x] == out.image.pixels[3 * x + 2]);
        free(file.data);
    }
    free(grey);
    decoder_destroy(decoder);
}

// Stored CMYK samples are Adobe-inverted (as Pillow assumes for every CMYK
// JPEG): RGB = stored C,M,Y times stored K / 255.
static void test_jpeg_cmyk(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 40, height = 24;
    uint8_t *cmyk = smooth_pattern(width, height, 4, 4);
    uint8_t *expected = malloc((size_t)width * height * 3);
    for (int i = 0; i < width * height; i++)
        for (int c = 0; c < 3; c++)
            expected[i * 3 + c] = (uint8_t)lround(cmyk[i * 4 + c] * cmyk[i * 4 + 3] / 255.0);
    const JpegSpec specs[3] = {{100, 1, 1, 0, JCS_CMYK, JCS_CMYK, 1},
                               {100, 1, 1, 0, JCS_CMYK, JCS_CMYK, 0},
                               {100, 1, 1, 1, JCS_CMYK, JCS_YCCK, 1}};
    for (int i = 0; i < 3; i++) {
        Bytes file = encode_jpeg(cmyk, width, height, &specs[i]);
        DecodedImage out = decode_ok(decoder, file, NULL);
        // q100 rounding in C and K each (a few levels) multiply through.
        expect_close(compare(&out.image, expected, 3), 1.5, 8, "CMYK JPEG");
        free(file.data);
    }
    // Stored 255 everywhere is no ink at all: white.
    memset(cmyk, 255, (size_t)width * height * 4);
    Bytes white = encode_jpeg(cmyk, width, height, &specs[0]);
    DecodedImage out = decode_ok(decoder, white, NULL);
    for (int x = 0; x < width * 3; x++) assert_true(out.image.pixels[x] >= 254);
    free(white.data);
    free(expected);
    free(cmyk);
    decoder_destroy(decoder);
}

typedef struct RegionCase {
    PixelRect region;
    int min_width, min_height;
} RegionCase;

// Region + DCT-scaled decodes against the full decode, cropped to `covered`
// and box-averaged to the same size.
static void check_jpeg_regions(Decoder *decoder, Bytes file, int width, int height,
                               int horizontal_chroma, int vertical_chroma, const char *what) {
    DecodedImage whole = decode_ok(decoder, file, NULL);
    uint8_t *full = copy_pixels(&whole.image);
    const RegionCase cases[] = {
        {{0, 0, width, height}, width / 8, height / 8},                        // 1/8 whole
        {{width / 3, height / 3, width / 3, height / 3}, 40, 40},              // centre
        {{width - 50, height - 37, 50, 37}, 25, 18},                          // bottom-right, 1/2
        {{0, height / 2, 77, height - height / 2}, 30, 30},                   // left edge, odd
        {{13, 0, width - 13, 41}, (width - 13) * 3 / 8, 15},                  // top edge, 3/8
        {{5, 7, 100, 90}, 100 * 5 / 8, 90 * 5 / 8},                          // 5/8
        {{width / 2 + 3, 9, width / 4, height / 5}, 0, 0},                    // full resolution
        {{-20, -20, width + 40, height / 4}, width / 4, height / 32},         // clamped, 1/4
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DecodeRequest request = {cases[i].region, cases[i].min_width, cases[i].min_height, 0, 0};
        DecodedImage part = decode_ok(decoder, file, &request);
        const PixelRect *c = &part.covered, *r = &cases[i].region;
        int rx = r->x > 0 ? r->x : 0, ry = r->y > 0 ? r->y : 0;
        int rx1 = r->x + r->width < width ? r->x + r->width : width;
        int ry1 = r->y + r->height < height ? r->y + r->height : height;
        assert_true(c->x <= rx && c->y <= ry && c->x + c->width >= rx1 &&
                    c->y + c->height >= ry1);
        // Past the far edges by less than one scaled pixel (a partial block).
        int num = (int)lround(8.0 * part.image.width / c->width);
        const int past = (8 + num - 1) / num;
        assert_true(c->x + c->width <= width + past && c->y + c->height <= height + past);
        assert_true(part.image.width >= cases[i].min_width &&
                    part.image.height >= cases[i].min_height);
        char label[128];
        snprintf(label, sizeof label, "%s case %zu (%dx%d from %d,%d %dx%d)", what, i,
                 part.image.width, part.image.height, c->x, c->y, c->width, c->height);
        // DCT scaling is an 8x8-block transform, not a box filter: measured
        // means are below 1 level, peaks below 10; a block out of place is
        // off by tens. At 1/8, 4:2:2 and 4:4:0 chroma is decoded at 1/16
        // along one axis and replicated (libjpeg has no smooth upsampling at
        // that scale), which this fast-changing colour pattern shows as
        // ~9 levels on average.
        const int replicated = num == 1 && horizontal_chroma != vertical_chroma;
        expect_close(compare_to_box_average(&part, full, width, height), replicated ? 12.0 : 2.0,
                     replicated ? 45 : 12, label);
    }
    free(full);
}

static void test_jpeg_region_scaled(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const struct {
        int width, height;
        JpegSpec spec;
    } images[] = {
        {1001, 667, {95, 2, 2, 0, JCS_RGB, JCS_YCbCr, 0}},
        {517, 389, {95, 1, 1, 1, JCS_RGB, JCS_YCbCr, 0}},
        {403, 300, {95, 2, 1, 0, JCS_RGB, JCS_YCbCr, 0}},
        {333, 222, {95, 1, 1, 0, JCS_GRAYSCALE, JCS_GRAYSCALE, 0}},
    };
    for (size_t i = 0; i < sizeof images / sizeof images[0]; i++) {
        int channels = images[i].spec.input_space == JCS_GRAYSCALE ? 1 : 3;
        uint8_t *pixels = smooth_pattern(images[i].width, images[i].height, channels, (int)i);
        Bytes file = encode_jpeg(pixels, images[i].width, images[i].height, &images[i].spec);
        char what[64];
        snprintf(what, sizeof what, "%dx%d", images[i].width, images[i].height);
        check_jpeg_regions(decoder, file, images[i].width, images[i].height,
                           images[i].spec.h_samp, images[i].spec.v_samp, what);
        free(file.data);
        free(pixels);
    }
    decoder_destroy(decoder);
}

static int scale_keeps(int side, int min_side, int num) {
    return min_side > 0 && side * num >= min_side * 8;
}

// The chosen scale (image.width / covered.width) is the smallest num/8 that
// keeps both minimum sides.
static void test_jpeg_scale_choice(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 800, height = 608;
    uint8_t *rgb = smooth_pattern(width, height, 3, 5);
    Bytes file = encode_jpeg(rgb, width, height, &JPEG_RGB);
    const RegionCase cases[] = {
        {{0, 0, 800, 608}, 100, 76},  {{0, 0, 800, 608}, 101, 10}, {{160, 96, 320, 320}, 224, 224},
        {{160, 96, 320, 320}, 120, 40}, {{32, 32, 256, 128}, 33, 17}, {{48, 16, 400, 400}, 400, 1},
        {{64, 64, 160, 160}, 0, 20},  {{64, 64, 160, 160}, 500, 500}, {{0, 0, 800, 608}, 1, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        DecodeRequest request = {cases[i].region, cases[i].min_width, cases[i].min_height, 0, 0};
        DecodedImage out = decode_ok(decoder, file, &request);
        int num = (int)lround(8.0 * out.image.width / out.covered.width);
        // covered is rounded to whole pixels: within half a scaled pixel.
        assert_true(abs(out.covered.width * num - out.image.width * 8) <= 4);
        const PixelRect *r = &cases[i].region;
        int keeps = scale_keeps(r->width, cases[i].min_width, num) &&
                    scale_keeps(r->height, cases[i].min_height, num);
        int smaller_keeps = num > 1 && scale_keeps(r->width, cases[i].min_width, num - 1) &&
                            scale_keeps(r->height, cases[i].min_height, num - 1);
        if (!(num == 8 || keeps) || smaller_keeps)
            fail_msg("case %zu: scale %d/8 is not the smallest that keeps %dx%d", i, num,
                     cases[i].min_width, cases[i].min_height);
    }
    free(file.data);
    free(rgb);
    decoder_destroy(decoder);
}

// Deterministic sample values.
static unsigned hash3(int x, int y, int c) {
    uint32_t h = (uint32_t)x * 73856093u ^ (uint32_t)y * 19349663u ^ (uint32_t)c * 83492791u;
    h ^= h >> 13;
    return h * 0x5bd1e995u >> 8;
}

static uint8_t to_8bit(unsigned value, int depth) {
    return (uint8_t)(depth == 16 ? value >> 8 : value * 255 / ((1u << depth) - 1));
}

// Every colour type and bit depth, with tRNS, plain and Adam7: exact pixels,
// whole and by region.
static void test_png_formats(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 37, height = 23;
    const PngSpec specs[] = {
        {PNG_COLOR_TYPE_GRAY, 1, 0, 0},       {PNG_COLOR_TYPE_GRAY, 2, 0, 0},
        {PNG_COLOR_TYPE_GRAY, 4, 0, 0},       {PNG_COLOR_TYPE_GRAY, 8, 0, 1},
        {PNG_COLOR_TYPE_GRAY, 16, 0, 0},      {PNG_COLOR_TYPE_GRAY_ALPHA, 8, 0, 0},
        {PNG_COLOR_TYPE_GRAY_ALPHA, 16, 0, 0}, {PNG_COLOR_TYPE_RGB, 8, 0, 1},
        {PNG_COLOR_TYPE_RGB, 16, 0, 1},       {PNG_COLOR_TYPE_RGB_ALPHA, 8, 0, 0},
        {PNG_COLOR_TYPE_RGB_ALPHA, 16, 0, 0}, {PNG_COLOR_TYPE_PALETTE, 1, 0, 0},
        {PNG_COLOR_TYPE_PALETTE, 2, 0, 1},    {PNG_COLOR_TYPE_PALETTE, 4, 0, 0},
        {PNG_COLOR_TYPE_PALETTE, 8, 0, 1},
    };
    png_color palette[256];
    for (int i = 0; i < 256; i++)
        palette[i] = (png_color){(png_byte)hash3(i, 0, 0), (png_byte)hash3(i, 1, 0), (png_byte)i};
    uint16_t *values = malloc(sizeof(uint16_t) * width * height * 4);
    uint8_t *expected = malloc((size_t)width * height * 3);
    for (size_t s = 0; s < sizeof specs / sizeof specs[0]; s++)
        for (int interlace = 0; interlace < 2; interlace++) {
            PngSpec spec = specs[s];
            spec.interlace = interlace ? PNG_INTERLACE_ADAM7 : PNG_INTERLACE_NONE;
            const int channels = png_channels(spec.colour_type), depth = spec.bit_depth;
            const int is_palette = spec.colour_type == PNG_COLOR_TYPE_PALETTE;
            for (int y = 0; y < height; y++)
                for (int x = 0; x < width; x++) {
                    size_t i = (size_t)y * width + x;
                    for (int c = 0; c < channels; c++)
                        values[i * channels + c] = (uint16_t)(hash3(x, y, c) & ((1u << depth) - 1));
                    for (int c = 0; c < 3; c++) {
                        unsigned v = values[i * channels + (channels >= 3 ? c : 0)];
                        expected[i * 3 + c] = is_palette ? (&palette[v].red)[c] : to_8bit(v, depth);
                    }
                }
            Bytes file = encode_png(values, width, height, &spec, is_palette ? palette : NULL,
                                    is_palette ? 1 << depth : 0);
            char what[64];
            snprintf(what, sizeof what, "PNG type %d depth %d interlace %d tRNS %d",
                     spec.colour_type, depth, interlace, spec.transparency);
            DecodedImage out = decode_ok(decoder, file, NULL);
            assert_int_equal(out.image.width, width);
            expect_close(compare(&out.image, expected, 3), 0, 0, what);
            DecodeRequest request = {{5, 3, 20, 15}, 0, 0, 0, 0};
            out = decode_ok(decoder, file, &request);
            assert_memory_equal(&out.covered, &request.region, sizeof(PixelRect));
            for (int y = 0; y < 15; y++)  // exact crop of the expected image
                assert_memory_equal(out.image.pixels + y * out.image.stride,
                                    expected + ((size_t)(y + 3) * width + 5) * 3, 20 * 3);
            free(file.data);
        }
    free(values);
    free(expected);
    decoder_destroy(decoder);
}

// Lossless exact, lossy close, alpha dropped, crops with odd origins, and the
// first frame of an animation.
static void test_webp(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 45, height = 31;
    uint8_t *rgb = smooth_pattern(width, height, 3, 6);
    uint8_t *rgba = malloc((size_t)width * height * 4), *other = malloc((size_t)width * height * 4);
    for (int i = 0; i < width * height; i++) {
        memcpy(rgba + i * 4, rgb + i * 3, 3);
        rgba[i * 4 + 3] = (uint8_t)(i * 7);  // varied alpha, even 0
        memset(other + i * 4, 200, 4);
    }
    const DecodeRequest request = {{3, 5, 20, 11}, 0, 0, 0, 0};
    // libwebp crops from even offsets: still images cover 2,4 21x12;
    // animations are cut from the composed canvas exactly.
    const PixelRect even_covered = {2, 4, 21, 12};
    for (int kind = 0; kind < 5; kind++) {
        // 0 lossless RGB, 1 lossless RGBA, 2 animation, 3 lossy RGB, 4 lossy RGBA
        Bytes file = kind == 0   ? encode_webp_rgb(rgb, width, height, 1)
                     : kind == 1 ? encode_webp_rgba(rgba, width, height, 1)
                     : kind == 2 ? encode_webp_animation(rgba, other, width, height)
                     : kind == 3 ? encode_webp_rgb(rgb, width, height, 0)
                                 : encode_webp_rgba(rgba, width, height, 0);
        ImageInfo info;
        ErrorMessage err;
        assert_int_equal(decoder_probe(decoder, file.data, file.size, &info, &err), 0);
        assert_true(info.format == IMAGE_FORMAT_WEBP && info.width == width && info.height == height);
        DecodedImage out = decode_ok(decoder, file, NULL);
        char what[32];
        snprintf(what, sizeof what, "WebP kind %d", kind);
        // Lossy at quality 90 (4:2:0 chroma) on a smooth pattern.
        expect_close(compare(&out.image, rgb, 3), kind < 3 ? 0 : 3.0, kind < 3 ? 0 : 40, what);
        uint8_t *full = copy_pixels(&out.image);
        out = decode_ok(decoder, file, &request);
        const PixelRect covered = kind == 2 ? request.region : even_covered;
        assert_memory_equal(&out.covered, &covered, sizeof covered);
        uint8_t *crop = malloc((size_t)covered.width * covered.height * 3);
        for (int y = 0; y < covered.height; y++)
            memcpy(crop + (size_t)y * covered.width * 3,
                   full + ((size_t)(y + covered.y) * width + covered.x) * 3, (size_t)covered.width * 3);
        // libwebp upsamples chroma inside the crop only, so lossy crop edges
        // may differ slightly from the full decode.
        expect_close(compare(&out.image, crop, 3), kind < 3 ? 0 : 1.0, kind < 3 ? 0 : 12, what);
        free(crop);
        free(full);
        free(file.data);
    }
    free(rgb);
    free(rgba);
    free(other);
    decoder_destroy(decoder);
}

// decoder_decode (whole image) fails with `word` in the message; probe and a
// region decode must not crash whatever they answer.
static void expect_failure(Decoder *decoder, const uint8_t *data, size_t size, const char *word,
                           const char *what) {
    ErrorMessage err = {{0}};
    DecodedImage out;
    ImageInfo info;
    (void)decoder_probe(decoder, data, size, &info, &err);
    DecodeRequest request = {{3, 2, 30, 20}, 8, 8, 0, 0};
    (void)decoder_decode(decoder, data, size, &request, &out, &err);
    err.text[0] = '\0';
    int status = decoder_decode(decoder, data, size, NULL, &out, &err);
    if (status != -1 || !strstr(err.text, word))
        fail_msg("%s: expected -1 with '%s', got %d '%s'", what, word, status, err.text);
}

static size_t jpeg_scan_data_offset(Bytes file) {
    for (size_t i = 2; i + 3 < file.size; i++)
        if (file.data[i] == 0xFF && file.data[i + 1] == 0xDA)
            return i + 2 + ((size_t)file.data[i + 2] << 8 | file.data[i + 3]);
    fail_msg("no SOS marker");
    return 0;
}

// Patches the declared size to something huge: JPEG SOF0, PNG IHDR, WebP VP8L.
static void declare_huge_size(Bytes file, int format) {
    if (format == 0) {
        for (size_t i = 2; i + 9 < file.size; i++)
            if (file.data[i] == 0xFF && file.data[i + 1] == 0xC0) {
                uint8_t huge[4] = {30000 >> 8, 30000 & 255, 30000 >> 8, 30000 & 255};
                memcpy(file.data + i + 5, huge, 4);
                return;
            }
        fail_msg("no SOF0 marker");
    } else if (format == 1) {
        memcpy(file.data + 16, "\x00\x01\x86\xA0\x00\x01\x86\xA0", 8);  // 100000 x 100000
    } else {
        assert_memory_equal(file.data + 12, "VP8L", 4);
        file.data[21] = 0xFF;  // 14 bits width-1, 14 bits height-1 = 16383 each
        file.data[22] = 0xFF;
        file.data[23] = 0xFF;
        file.data[24] = (uint8_t)((file.data[24] & 0xF0) | 0x0F);
    }
}

static void test_corrupt_inputs(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(1u << 22);  // 4M pixels: the bombs exceed it
    const int width = 64, height = 48;
    uint8_t *rgb = smooth_pattern(width, height, 3, 7);
    Bytes files[3] = {encode_jpeg(rgb, width, height, &JPEG_RGB), encode_png_rgb(rgb, width, height),
                      encode_webp_rgb(rgb, width, height, 1)};
    const size_t header_end[3] = {jpeg_scan_data_offset(files[0]), 33, 25};
    uint8_t garbage[4096];
    for (size_t i = 0; i < sizeof garbage; i++) garbage[i] = (uint8_t)hash3((int)i, 1, 2);
    // A GIF header whose colour table is missing; a BMP file header without
    // its info header; a Photoshop file.
    static const char gif[] = "GIF89a\x10\x00\x10\x00\x80\x00\x00";
    static const char bmp[] = "BM\x46\x00\x00\x00\x00\x00\x00\x00\x36\x00\x00\x00";
    static const char psd[] = "8BPS\x00\x01\x00\x00\x00\x00\x00\x00\x00\x03";
    static const char text[] = "name,label\ncat.jpg,1\n";
    expect_failure(decoder, garbage, 0, "empty file", "empty");
    expect_failure(decoder, garbage, sizeof garbage, "unsupported format", "random bytes");
    expect_failure(decoder, (const uint8_t *)gif, sizeof gif - 1, "truncated: GIF", "GIF");
    expect_failure(decoder, (const uint8_t *)bmp, sizeof bmp - 1, "unsupported format: BMP", "BMP");
    expect_failure(decoder, (const uint8_t *)psd, sizeof psd - 1, "Photoshop", "PSD");
    expect_failure(decoder, (const uint8_t *)text, sizeof text - 1, "text", "text");
    for (int f = 0; f < 3; f++) {
        Bytes good = files[f];
        const size_t cuts[] = {2, 20, good.size / 3, good.size / 2, good.size * 4 / 5};
        char what[64];
        for (size_t c = 0; c < sizeof cuts / sizeof cuts[0]; c++) {
            snprintf(what, sizeof what, "format %d cut at %zu of %zu", f, cuts[c], good.size);
            expect_failure(decoder, good.data, cuts[c], "truncated", what);
        }
        Bytes bad = {malloc(good.size), good.size};
        memcpy(bad.data, good.data, good.size);
        for (size_t i = header_end[f]; i + 2 < bad.size; i++) bad.data[i] = garbage[i % sizeof garbage];
        snprintf(what, sizeof what, "format %d garbage after header", f);
        expect_failure(decoder, bad.data, bad.size, "corrupt data", what);
        memcpy(bad.data, good.data, good.size);
        declare_huge_size(bad, f);
        snprintf(what, sizeof what, "format %d huge size", f);
        expect_failure(decoder, bad.data, bad.size, "image too large", what);
        free(bad.data);
        DecodedImage out = decode_ok(decoder, good, NULL);  // still usable
        assert_int_equal(out.image.width, width);
    }
    for (int f = 0; f < 3; f++) free(files[f].data);
    free(rgb);
    decoder_destroy(decoder);
}

// PNG with the bytes at 90%..95% of its last IDAT chunk overwritten and
// that chunk's CRC fixed: only inflating that far finds the damage.
static void break_png_tail(Bytes file) {
    size_t last = 0;
    for (size_t at = 8; at + 12 <= file.size;) {
        const uint32_t length = (uint32_t)file.data[at] << 24 | (uint32_t)file.data[at + 1] << 16 |
                                (uint32_t)file.data[at + 2] << 8 | file.data[at + 3];
        if (memcmp(file.data + at + 4, "IDAT", 4) == 0) last = at;
        at += 12 + (size_t)length;
    }
    assert_true(last > 0);
    const uint32_t length = (uint32_t)file.data[last] << 24 | (uint32_t)file.data[last + 1] << 16 |
                            (uint32_t)file.data[last + 2] << 8 | file.data[last + 3];
    uint8_t *data = file.data + last + 8;
    for (uint32_t i = length * 9 / 10; i < length * 19 / 20; i++) data[i] = 0xff;
    const uint32_t crc = (uint32_t)crc32(crc32(0, file.data + last + 4, 4), data, length);
    for (int i = 0; i < 4; i++) data[length + i] = (uint8_t)(crc >> (24 - 8 * i));
}

// DecodeRequest.whole_file: a region decode of a file damaged below the
// region succeeds without it and fails with it, with the reason a full
// decode gives (train and embed skip the same files); on intact files it
// returns the same pixels as without (JPEG, PNG, WebP lossy and lossless).
static void test_whole_file_check(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 64, height = 96;
    uint8_t *rgb = smooth_pattern(width, height, 3, 11);
    Bytes files[4] = {encode_jpeg(rgb, width, height, &JPEG_RGB), encode_png_rgb(rgb, width, height),
                      encode_webp_rgb(rgb, width, height, 0), encode_webp_rgb(rgb, width, height, 1)};
    const DecodeRequest top = {{5, 3, 40, 20}, 20, 10, 0, 0};
    DecodeRequest checked = top;
    checked.whole_file = 1;
    for (int f = 0; f < 4; f++) {
        DecodedImage out = decode_ok(decoder, files[f], &top);
        uint8_t *plain = copy_pixels(&out.image);
        const PixelRect covered = out.covered;
        out = decode_ok(decoder, files[f], &checked);
        uint8_t *whole = copy_pixels(&out.image);
        assert_memory_equal(&out.covered, &covered, sizeof covered);
        if (memcmp(whole, plain, (size_t)out.image.width * out.image.height * 3) != 0)
            fail_msg("format %d: whole_file changed the pixels", f);
        free(plain), free(whole);
    }
    Bytes damaged[2] = {{files[0].data, files[0].size * 9 / 10}, files[1]};
    break_png_tail(damaged[1]);
    for (int f = 0; f < 2; f++) {
        ErrorMessage full = {{0}}, err = {{0}};
        DecodedImage out;
        assert_int_equal(decoder_decode(decoder, damaged[f].data, damaged[f].size, NULL, &out,
                                        &full), -1);
        decode_ok(decoder, damaged[f], &top);  // the crop alone does not see it
        assert_int_equal(decoder_decode(decoder, damaged[f].data, damaged[f].size, &checked,
                                        &out, &err), -1);
        assert_string_equal(err.text, full.text);
    }
    for (int f = 0; f < 4; f++) free(files[f].data);
    free(rgb);
    decoder_destroy(decoder);
}

// max_pixels counts what is decoded: a large baseline JPEG at 1/8 fits, the
// same image at full size or progressive (whole-image buffers) does not.
static void test_pixel_limit(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(100000);
    const int side = 2048;
    uint8_t *rgb = malloc((size_t)side * side * 3);
    memset(rgb, 90, (size_t)side * side * 3);
    JpegSpec spec = JPEG_RGB;
    Bytes baseline = encode_jpeg(rgb, side, side, &spec);
    spec.progressive = 1;
    Bytes progressive = encode_jpeg(rgb, side, side, &spec);
    Bytes png = encode_png_rgb(rgb, 400, 300);  // 120000 pixels
    const DecodeRequest eighth = {{0, 0, side, side}, side / 8, side / 8, 0, 0};
    DecodedImage out = decode_ok(decoder, baseline, &eighth);
    assert_int_equal(out.image.width, side / 8);
    ErrorMessage err;
    assert_int_equal(decoder_decode(decoder, baseline.data, baseline.size, NULL, &out, &err), -1);
    assert_true(has_word(&err, "image too large") && has_word(&err, "100000"));
    assert_int_equal(decoder_decode(decoder, progressive.data, progressive.size, &eighth, &out, &err),
                     -1);
    assert_true(has_word(&err, "image too large"));
    const DecodeRequest small = {{0, 0, 10, 10}, 0, 0, 0, 0};
    assert_int_equal(decoder_decode(decoder, png.data, png.size, &small, &out, &err), -1);
    assert_true(has_word(&err, "400 x 300"));
    free(baseline.data);
    free(progressive.data);
    free(png.data);
    free(rgb);
    decoder_destroy(decoder);
}

// One Decoder, many sizes and formats; the pixel buffer is reused once warm.
static void test_reuse(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const JpegSpec q100 = {100, 1, 1, 0, JCS_RGB, JCS_YCbCr, 0};
    uint8_t *largest = NULL;
    for (int i = 0; i < 30; i++) {
        int width = i == 0 ? 200 : 1 + (i * 37) % 180, height = i == 0 ? 150 : 1 + (i * 53) % 140;
        uint8_t *rgb = smooth_pattern(width, height, 3, i);
        Bytes file = i % 3 == 0   ? encode_jpeg(rgb, width, height, &q100)
                     : i % 3 == 1 ? encode_png_rgb(rgb, width, height)
                                  : encode_webp_rgb(rgb, width, height, 1);
        DecodedImage out = decode_ok(decoder, file, NULL);
        assert_true(out.image.width == width && out.image.height == height);
        // JPEG q100 4:4:4 as in test_jpeg_known_pixels; PNG, lossless WebP exact.
        expect_close(compare(&out.image, rgb, 3), i % 3 ? 0 : 1.0, i % 3 ? 0 : 6, "reuse");
        if (i == 0) largest = out.image.pixels;
        assert_ptr_equal(out.image.pixels, largest);  // no reallocation for smaller images
        free(file.data);
        free(rgb);
    }
    decoder_destroy(decoder);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sniff_and_names),   cmocka_unit_test(test_jpeg_known_pixels),
        cmocka_unit_test(test_jpeg_subsamplings), cmocka_unit_test(test_jpeg_greyscale),
        cmocka_unit_test(test_jpeg_cmyk),         cmocka_unit_test(test_jpeg_region_scaled),
        cmocka_unit_test(test_jpeg_scale_choice), cmocka_unit_test(test_png_formats),
        cmocka_unit_test(test_webp),              cmocka_unit_test(test_corrupt_inputs),
        cmocka_unit_test(test_whole_file_check),
        cmocka_unit_test(test_pixel_limit),       cmocka_unit_test(test_reuse),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
