// The newer decoders against files written here by each format's own
// library (tests/format_encoders.c): TIFF in every depth, band count, layout
// and compression our reader takes (expected pixels computed here by the
// documented rules, independently of samples.c), HEIC and AVIF (libheif;
// AVIF with every irot/imir from libavif),
// JPEG XL (libjxl), GIF (giflib), and EXIF orientation in all 8 values
// (libexif blocks in PNG and JPEG), whole, by region and at reduced scale.
// Damaged variants must fail with a reason.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <tiffio.h>

#include "codec_fixtures.h"
#include "decode/decode.h"
#include "fixture_init.h"
#include "format_encoders.h"
#include "util/half.h"

// A smooth RGB pattern (lossy codecs keep it well) with a little texture.
static uint8_t *smooth_rgb(int width, int height, int seed) {
    uint8_t *rgb = malloc((size_t)width * height * 3);
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width; x++)
            for (int c = 0; c < 3; c++)
                rgb[((size_t)y * width + x) * 3 + c] = (uint8_t)lround(
                    127.5 + 110 * sin(x * (0.11 + 0.03 * c) + y * 0.07 * (c + 1) + seed));
    return rgb;
}

typedef struct Pixels {
    uint8_t *rgb;  // packed
    int width, height;
} Pixels;

static Pixels decode_whole(Decoder *decoder, Bytes file, const char *what) {
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, file.data, file.size, NULL, &out, &err) != 0)
        fail_msg("%s: %s", what, err.text);
    Pixels p = {malloc((size_t)out.image.width * out.image.height * 3), out.image.width,
                out.image.height};
    for (int y = 0; y < p.height; y++)
        memcpy(p.rgb + (size_t)y * p.width * 3, out.image.pixels + y * out.image.stride,
               (size_t)p.width * 3);
    return p;
}

// `image` (at `x0, y0` of the expectation) against packed RGB `expected`.
static void expect_pixels(const Image *image, const uint8_t *expected, int expected_width, int x0,
                          int y0, int max_limit, double mean_limit, const char *what) {
    double total = 0;
    int worst = 0;
    for (int y = 0; y < image->height; y++)
        for (int x = 0; x < image->width * 3; x++) {
            const int want = expected[((size_t)(y0 + y) * expected_width + x0) * 3 + x];
            const int diff = abs(image->pixels[(size_t)y * image->stride + x] - want);
            total += diff;
            if (diff > worst) worst = diff;
        }
    const double mean = total / ((double)image->width * image->height * 3);
    if (worst > max_limit || mean > mean_limit)
        fail_msg("%s: max diff %d (limit %d), mean %.3f (limit %.3f)", what, worst, max_limit, mean,
                 mean_limit);
}

static void expect_failure(Decoder *decoder, Bytes file, size_t size, const char *word,
                           const char *what) {
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, file.data, size, NULL, &out, &err) == 0)
        fail_msg("%s: decoded, should fail with '%s'", what, word);
    if (!strstr(err.text, word)) fail_msg("%s: '%s' lacks '%s'", what, err.text, word);
}

// Pillow's exif_transpose, written case by case: the oriented image's pixel
// (x, y) is the stored image's pixel (u, v).
static void stored_position(int orientation, int x, int y, int width, int height, int *u, int *v) {
    switch (orientation) {
    case 2: *u = width - 1 - x, *v = y; break;               // FLIP_LEFT_RIGHT
    case 3: *u = width - 1 - x, *v = height - 1 - y; break;  // ROTATE_180
    case 4: *u = x, *v = height - 1 - y; break;              // FLIP_TOP_BOTTOM
    case 5: *u = y, *v = x; break;                           // TRANSPOSE
    case 6: *u = y, *v = height - 1 - x; break;              // ROTATE_270
    case 7: *u = width - 1 - y, *v = height - 1 - x; break;  // TRANSVERSE
    case 8: *u = width - 1 - y, *v = x; break;               // ROTATE_90
    default: *u = x, *v = y; break;
    }
}

// The packed RGB stored image turned by `orientation`.
static Pixels oriented(const uint8_t *stored, int width, int height, int orientation) {
    const int swap = orientation >= 5;
    Pixels p = {malloc((size_t)width * height * 3), swap ? height : width, swap ? width : height};
    for (int y = 0; y < p.height; y++)
        for (int x = 0; x < p.width; x++) {
            int u, v;
            stored_position(orientation, x, y, width, height, &u, &v);
            memcpy(p.rgb + ((size_t)y * p.width + x) * 3, stored + ((size_t)v * width + u) * 3, 3);
        }
    return p;
}

// Under AddressSanitizer (make asan): libx265, the HEIC encoder libheif uses
// here, keeps a few global allocations to exit; leaks whose stack passes
// through it are not ours. A plain function, unused, in other builds.
const char *__lsan_default_suppressions(void);
const char *__lsan_default_suppressions(void) { return "leak:x265\n"; }

// ---- TIFF ----------------------------------------------------------------------------

typedef struct TiffCase {
    const char *name;
    TiffSpec spec;
    int max_diff;  // lossy (JPEG) or rounding at float precision
    double mean_diff;
    const char *error;  // non-NULL: decoding fails with this
} TiffCase;

#define STRIPS(bits, format, samples, photometric, planar, rows, compression) \
    { bits, format, samples, photometric, planar, 0, rows, compression, 0, 0, 0 }
#define TILES(bits, format, samples, photometric, planar, compression) \
    { bits, format, samples, photometric, planar, 16, 0, compression, 0, 0, 0 }

static const TiffCase TIFF_CASES[] = {
    {"1-bit grey", STRIPS(1, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISBLACK, 1, 7, COMPRESSION_NONE),
     0, 0, NULL},
    {"1-bit CCITT G4",
     STRIPS(1, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISWHITE, 1, 40, COMPRESSION_CCITTFAX4), 0, 0,
     NULL},
    {"2-bit grey LZW",
     STRIPS(2, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISBLACK, 1, 5, COMPRESSION_LZW), 0, 0, NULL},
    {"4-bit min-is-white Deflate",
     STRIPS(4, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISWHITE, 1, 8, COMPRESSION_ADOBE_DEFLATE), 0, 0,
     NULL},
    {"8-bit grey PackBits tiles",
     TILES(8, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISBLACK, 1, COMPRESSION_PACKBITS), 0, 0, NULL},
    {"16-bit grey ZSTD",
     STRIPS(16, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISBLACK, 1, 6, COMPRESSION_ZSTD), 0, 0, NULL},
    {"int8 grey", STRIPS(8, SAMPLEFORMAT_INT, 1, PHOTOMETRIC_MINISBLACK, 1, 29, COMPRESSION_NONE),
     0, 0, NULL},
    {"int16 grey LZMA tiles",
     TILES(16, SAMPLEFORMAT_INT, 1, PHOTOMETRIC_MINISBLACK, 1, COMPRESSION_LZMA), 0, 0, NULL},
    {"uint32 grey Deflate",
     STRIPS(32, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_MINISBLACK, 1, 10, COMPRESSION_ADOBE_DEFLATE), 1,
     0.02, NULL},
    {"int32 grey", STRIPS(32, SAMPLEFORMAT_INT, 1, PHOTOMETRIC_MINISBLACK, 1, 10, COMPRESSION_NONE),
     1, 0.02, NULL},
    {"float16 grey",
     STRIPS(16, SAMPLEFORMAT_IEEEFP, 1, PHOTOMETRIC_MINISBLACK, 1, 10, COMPRESSION_NONE), 1, 0.02,
     NULL},
    {"float32 grey Deflate tiles",
     TILES(32, SAMPLEFORMAT_IEEEFP, 1, PHOTOMETRIC_MINISBLACK, 1, COMPRESSION_ADOBE_DEFLATE), 1,
     0.02, NULL},
    {"float64 grey",
     STRIPS(64, SAMPLEFORMAT_IEEEFP, 1, PHOTOMETRIC_MINISBLACK, 1, 10, COMPRESSION_NONE), 1, 0.02,
     NULL},
    {"RGB JPEG (YCbCr)", STRIPS(8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 1, 16, COMPRESSION_JPEG),
     40, 2.5, NULL},
    {"RGB planar LZW tiles", TILES(8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 2, COMPRESSION_LZW), 0,
     0, NULL},
    {"RGB WebP lossless", STRIPS(8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 1, 29, COMPRESSION_WEBP),
     0, 0, NULL},
    {"RGB 16-bit planar ZSTD",
     STRIPS(16, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 2, 4, COMPRESSION_ZSTD), 0, 0, NULL},
    {"RGBA Deflate",
     {8, SAMPLEFORMAT_UINT, 4, PHOTOMETRIC_RGB, 1, 0, 9, COMPRESSION_ADOBE_DEFLATE, 1, 0, 0},
     0,
     0,
     NULL},
    {"grey+alpha 16-bit",
     {16, SAMPLEFORMAT_UINT, 2, PHOTOMETRIC_MINISBLACK, 1, 0, 9, COMPRESSION_NONE, 1, 0, 0},
     0,
     0,
     NULL},
    {"palette 4-bit", STRIPS(4, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_PALETTE, 1, 29, COMPRESSION_NONE),
     0, 0, NULL},
    {"palette 8-bit LZW",
     STRIPS(8, SAMPLEFORMAT_UINT, 1, PHOTOMETRIC_PALETTE, 1, 3, COMPRESSION_LZW), 0, 0, NULL},
    {"CMYK planar Deflate",
     STRIPS(8, SAMPLEFORMAT_UINT, 4, PHOTOMETRIC_SEPARATED, 2, 11, COMPRESSION_ADOBE_DEFLATE), 0, 0,
     NULL},
    {"RGB BigTIFF",
     {8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 1, 0, 5, COMPRESSION_NONE, 0, 0, 1},
     0,
     0,
     NULL},
    {"RGB orientation 7",
     {8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 1, 0, 6, COMPRESSION_LZW, 0, 7, 0},
     0,
     0,
     NULL},
    {"4 bands 16-bit",
     TILES(16, SAMPLEFORMAT_UINT, 4, PHOTOMETRIC_MINISBLACK, 2, COMPRESSION_ADOBE_DEFLATE), 0, 0,
     "4 bands"},
};

#define TIFF_WIDTH 37
#define TIFF_HEIGHT 29

// Input samples for a case (as encode_tiff takes them) and, by the rules of
// docs/input-pipeline.md, each sample reduced to 8 bits.
static void *tiff_samples(const TiffSpec *spec, uint8_t *reduced) {
    const size_t count = (size_t)TIFF_WIDTH * TIFF_HEIGHT * spec->samples;
    void *samples = calloc(count, spec->bits <= 8 ? 1 : (size_t)spec->bits / 8);
    const int signed_ints = spec->format == SAMPLEFORMAT_INT;
    for (size_t i = 0; i < count; i++) {
        // Noise, except for JPEG, which needs smooth input to stay close.
        const uint32_t h =
            spec->compression == COMPRESSION_JPEG
                ? (uint32_t)lround(127.5 + 100 * sin(0.2 * (double)(i / 3 % TIFF_WIDTH) +
                                                     0.13 * (double)(i / 3 / TIFF_WIDTH) + i % 3))
                : fixture_mix32((uint32_t)i * 2654435761u + (uint32_t)spec->bits);
        const double unit = (h >> 8) / 16777216.0;  // [0, 1)
        double value8;
        if (spec->format == SAMPLEFORMAT_IEEEFP) {
            const float f = (float)(unit * 1.4 - 0.2);  // some below 0, some above 1
            float stored = f;
            if (spec->bits == 16) {
                const uint16_t half = float_to_f16(f);
                ((uint16_t *)samples)[i] = half;
                stored = f16_to_float(half);
            } else if (spec->bits == 32) {
                ((float *)samples)[i] = f;
            } else {
                ((double *)samples)[i] = f;
            }
            value8 = stored <= 0 ? 0 : stored >= 1 ? 255 : stored * 255.0;
        } else {
            const uint64_t top = spec->bits == 64 ? UINT64_MAX : (((uint64_t)1 << spec->bits) - 1);
            const uint64_t stored = spec->bits == 32 ? h : h & top;  // as written
            const uint64_t offset = signed_ints ? (uint64_t)1 << (spec->bits - 1) : 0;
            const uint64_t value = (stored + offset) & top;  // two's complement + offset
            if (spec->bits == 16)
                ((uint16_t *)samples)[i] = (uint16_t)stored;
            else if (spec->bits == 32)
                ((uint32_t *)samples)[i] = (uint32_t)stored;
            else
                ((uint8_t *)samples)[i] = (uint8_t)stored;
            const double inverted =
                spec->photometric == PHOTOMETRIC_MINISWHITE ? (double)(top - value) : (double)value;
            value8 = spec->bits == 16  ? floor(inverted / 256.0)
                     : spec->bits == 8 ? inverted
                                       : inverted * 255.0 / (double)top;
        }
        reduced[i] = (uint8_t)lround(value8);
    }
    return samples;
}

// The RGB the decoder must give, from the 8-bit reduced samples.
static void tiff_expected_rgb(const TiffSpec *spec, const uint8_t *reduced, const void *samples,
                              const uint16_t *map, uint8_t *rgb) {
    for (size_t p = 0; p < (size_t)TIFF_WIDTH * TIFF_HEIGHT; p++) {
        const uint8_t *s = reduced + p * spec->samples;
        uint8_t *out = rgb + p * 3;
        if (spec->photometric == PHOTOMETRIC_PALETTE) {
            const size_t index = ((const uint8_t *)samples)[p];
            const size_t entries = (size_t)1 << spec->bits;
            for (int c = 0; c < 3; c++) out[c] = (uint8_t)(map[c * entries + index] >> 8);
        } else if (spec->photometric == PHOTOMETRIC_SEPARATED) {
            const int no_black = 255 - s[3];  // Pillow: nk - C * nk / 255, rounded
            for (int c = 0; c < 3; c++)
                out[c] = (uint8_t)(no_black - (s[c] * no_black + 127) / 255);
        } else if (spec->photometric == PHOTOMETRIC_RGB) {
            memcpy(out, s, 3);
        } else {
            out[0] = out[1] = out[2] = s[0];
        }
    }
}

static void check_tiff_case(Decoder *decoder, const TiffCase *test) {
    const TiffSpec *spec = &test->spec;
    uint8_t *reduced = malloc((size_t)TIFF_WIDTH * TIFF_HEIGHT * spec->samples);
    void *samples = tiff_samples(spec, reduced);
    uint16_t *map = NULL;
    if (spec->photometric == PHOTOMETRIC_PALETTE) {
        const size_t entries = (size_t)1 << spec->bits;
        map = malloc(3 * entries * sizeof *map);
        for (size_t i = 0; i < 3 * entries; i++) map[i] = (uint16_t)fixture_mix32((uint32_t)i + 99);
    }
    Bytes file = encode_tiff(spec, samples, TIFF_WIDTH, TIFF_HEIGHT, map);
    if (test->error) {
        expect_failure(decoder, file, file.size, test->error, test->name);
    } else {
        uint8_t *stored = malloc((size_t)TIFF_WIDTH * TIFF_HEIGHT * 3);
        tiff_expected_rgb(spec, reduced, samples, map, stored);
        Pixels expected =
            oriented(stored, TIFF_WIDTH, TIFF_HEIGHT, spec->orientation ? spec->orientation : 1);
        char what[96];
        Pixels whole = decode_whole(decoder, file, test->name);
        assert_int_equal(whole.width, expected.width);
        assert_int_equal(whole.height, expected.height);
        const Image whole_image = {whole.rgb, whole.width, whole.height, (size_t)whole.width * 3};
        snprintf(what, sizeof what, "%s, whole", test->name);
        expect_pixels(&whole_image, expected.rgb, expected.width, 0, 0, test->max_diff,
                      test->mean_diff, what);
        // A region, reading only the strips or tiles it touches.
        const DecodeRequest request = {.region = {5, 3, expected.width - 11,
                                                  expected.height - 7}};
        DecodedImage part;
        ErrorMessage err = {{0}};
        if (decoder_decode(decoder, file.data, file.size, &request, &part, &err) != 0)
            fail_msg("%s, region: %s", test->name, err.text);
        assert_memory_equal(&part.covered, &request.region, sizeof request.region);
        snprintf(what, sizeof what, "%s, region", test->name);
        expect_pixels(&part.image, expected.rgb, expected.width, 5, 3, test->max_diff,
                      test->mean_diff, what);
        // Cut short: a clean failure.
        snprintf(what, sizeof what, "%s, cut", test->name);
        expect_failure(decoder, file, file.size * 2 / 3, "", what);
        free(whole.rgb);
        free(expected.rgb);
        free(stored);
    }
    free(file.data);
    free(map);
    free(samples);
    free(reduced);
}

static void test_tiff_layouts(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    for (size_t i = 0; i < sizeof TIFF_CASES / sizeof TIFF_CASES[0]; i++)
        check_tiff_case(decoder, &TIFF_CASES[i]);
    decoder_destroy(decoder);
}

// The pixel limit is checked against the header's size before any strip is
// read; a strip whose compressed bytes are damaged fails with a reason.
static void test_tiff_limits_and_damage(void **state) {
    (void)state;
    const TiffSpec spec =
        STRIPS(8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 1, 29, COMPRESSION_ADOBE_DEFLATE);
    uint8_t *rgb = smooth_rgb(TIFF_WIDTH, TIFF_HEIGHT, 3);
    Bytes file = encode_tiff(&spec, rgb, TIFF_WIDTH, TIFF_HEIGHT, NULL);
    Decoder *small = decoder_create(TIFF_WIDTH * TIFF_HEIGHT - 1);
    expect_failure(small, file, file.size, "image too large", "TIFF over the pixel limit");
    decoder_destroy(small);
    // A tile much larger than its image, and many bands: what the decoder
    // would allocate counts, not the image's pixels alone.
    const TiffSpec big_tiles = TILES(8, SAMPLEFORMAT_UINT, 3, PHOTOMETRIC_RGB, 1, COMPRESSION_LZW);
    TiffSpec spec_64 = big_tiles;
    spec_64.tile = 64;
    Bytes tiled = encode_tiff(&spec_64, rgb, TIFF_WIDTH, TIFF_HEIGHT, NULL);
    small = decoder_create(2 * TIFF_WIDTH * TIFF_HEIGHT);  // the image fits, a 64 x 64 tile not
    expect_failure(small, tiled, tiled.size, "image too large: TIFF strip or tile", "huge tile");
    const TiffSpec bands =
        STRIPS(8, SAMPLEFORMAT_UINT, 5, PHOTOMETRIC_MINISBLACK, 1, 29, COMPRESSION_NONE);
    uint8_t *five = calloc((size_t)TIFF_WIDTH * TIFF_HEIGHT, 5);
    Bytes banded = encode_tiff(&bands, five, TIFF_WIDTH, TIFF_HEIGHT, NULL);
    decoder_destroy(small);
    small = decoder_create(TIFF_WIDTH * TIFF_HEIGHT + 10);  // pixels fit; 5 samples each do not
    expect_failure(small, banded, banded.size, "samples per pixel", "5 bands over the limit");
    // Bytes count too: 4 float32 bands (16 bytes a pixel) are over the
    // limit's 12 bytes a pixel (3 float channels), though 4 samples a pixel
    // are not; 3 float32 bands are within it.
    float *floats = calloc((size_t)TIFF_WIDTH * TIFF_HEIGHT, 4 * sizeof *floats);
    for (int samples = 3; samples <= 4; samples++) {
        const TiffSpec float_bands = STRIPS(32, SAMPLEFORMAT_IEEEFP, samples,
                                            PHOTOMETRIC_MINISBLACK, 1, 29, COMPRESSION_NONE);
        Bytes deep = encode_tiff(&float_bands, floats, TIFF_WIDTH, TIFF_HEIGHT, NULL);
        DecodedImage out;
        ErrorMessage err = {{0}};
        const DecodeRequest native = {{0, 0, TIFF_WIDTH, TIFF_HEIGHT}, 0, 0, 0, 1};
        const int status = decoder_decode(small, deep.data, deep.size, &native, &out, &err);
        if (samples == 3 && status != 0) fail_msg("3 float32 bands at the limit: %s", err.text);
        if (samples == 4 && (status == 0 || !strstr(err.text, "over the limit of")))
            fail_msg("4 float32 bands at the limit: %d '%s'", status, err.text);
        free(deep.data);
    }
    free(floats);
    decoder_destroy(small);
    // A band count the caller cannot read is refused by the probe, from the
    // header, before anything is decoded (a 64-band TIFF was decoded whole,
    // 590 MB, to be refused after).
    Decoder *reader = decoder_create(0);
    ImageInfo band_info;
    ErrorMessage reason = {{0}};
    assert_int_equal(decoder_probe(reader, banded.data, banded.size, &band_info, &reason), 0);
    assert_int_equal(band_info.channels, 5);  // checks nothing until told the channels
    decoder_set_channels(reader, 0);  // 8-bit RGB
    assert_int_equal(decoder_probe(reader, banded.data, banded.size, &band_info, &reason), -1);
    assert_non_null(strstr(reason.text, "5 bands without colour meaning cannot be read as RGB"));
    decoder_set_channels(reader, 3);
    assert_int_equal(decoder_probe(reader, banded.data, banded.size, &band_info, &reason), -1);
    assert_non_null(strstr(reason.text, "an image of 5 channel(s) (bands without colour meaning) "
                                        "cannot be read as 3 channel(s)"));
    decoder_set_channels(reader, 5);
    assert_int_equal(decoder_probe(reader, banded.data, banded.size, &band_info, &reason), 0);
    assert_int_equal(band_info.channels, 5);
    decoder_destroy(reader);
    // Read as 5 float channels (20 bytes a pixel), the whole image is over
    // the float path's limit of 12 bytes a pixel, whatever crop is read.
    Decoder *near_limit = decoder_create(TIFF_WIDTH * TIFF_HEIGHT + 10);
    decoder_set_channels(near_limit, 5);
    assert_int_equal(decoder_probe(near_limit, banded.data, banded.size, &band_info, &reason), -1);
    assert_non_null(strstr(reason.text, "read as 5 float channel(s)"));
    decoder_set_channels(near_limit, 3);
    assert_int_equal(decoder_probe(near_limit, file.data, file.size, &band_info, &reason), 0);
    decoder_destroy(near_limit);
    free(five);
    free(banded.data);
    free(tiled.data);
    Decoder *decoder = decoder_create(0);
    // A BMP header with a negative width, which stb_image's info call
    // reports as is (found by fuzz_decode): probe refuses it.
    static const uint8_t negative_bmp[] = {
        'B', 'M', 0x7E, 0, 0, 0, 0, 0, 0, 0, 0x3E, 0, 0, 0, 0x38, 0, 0, 0, 0xFC, 0xFF, 0xFF,
        0xFF, 0xFF, 0xFF, 0xFF, 0xFF, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0xFF, 0xFF, 0};
    ImageInfo info;
    ErrorMessage err = {{0}};
    assert_int_equal(decoder_probe(decoder, negative_bmp, sizeof negative_bmp, &info, &err), -1);
    assert_non_null(strstr(err.text, "corrupt data"));
    // The strip's deflate stream (after the 8-byte header) with bytes flipped.
    for (size_t i = 20; i < 60; i++) file.data[i] ^= 0x5A;
    expect_failure(decoder, file, file.size, "TIFF", "damaged deflate strip");
    expect_failure(decoder, file, 7, "truncated", "TIFF header cut");
    decoder_destroy(decoder);
    free(file.data);
    free(rgb);
}

// ---- HEIF, AVIF, JPEG XL, GIF ---------------------------------------------------------

static void check_lossy(Decoder *decoder, Bytes file, const uint8_t *rgb, int width, int height,
                        int orientation, const char *what) {
    Pixels expected = oriented(rgb, width, height, orientation);
    Pixels got = decode_whole(decoder, file, what);
    assert_int_equal(got.width, expected.width);
    assert_int_equal(got.height, expected.height);
    const Image image = {got.rgb, got.width, got.height, (size_t)got.width * 3};
    expect_pixels(&image, expected.rgb, expected.width, 0, 0, 48, 6.0, what);
    expect_failure(decoder, file, file.size / 2, "", what);  // cut in half
    free(got.rgb);
    free(expected.rgb);
}

static void test_heif_avif(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 32, height = 24;
    uint8_t *rgb = smooth_rgb(width, height, 1);
    Bytes heic = encode_heif(rgb, width, height, 0, 1);
    check_lossy(decoder, heic, rgb, width, height, 1, "HEIC");
    Bytes turned = encode_heif(rgb, width, height, 0, 6);  // irot: 90 degrees clockwise
    check_lossy(decoder, turned, rgb, width, height, 6, "HEIC with irot");
    decoder_set_exif_orientation(decoder, 0);  // HEIF's own orientation holds regardless
    check_lossy(decoder, turned, rgb, width, height, 6, "HEIC with irot, EXIF off");
    decoder_set_exif_orientation(decoder, 1);
    Bytes avif = encode_heif(rgb, width, height, 1, 1);
    check_lossy(decoder, avif, rgb, width, height, 1, "AVIF from libheif");
    for (int orientation = 2; orientation <= 8; orientation++) {
        Bytes transformed = encode_avif(rgb, width, height, orientation);
        check_lossy(decoder, transformed, rgb, width, height, orientation, "AVIF with irot/imir");
        free(transformed.data);
    }
    free(heic.data);
    free(turned.data);
    free(avif.data);
    free(rgb);
    decoder_destroy(decoder);
}

static void test_jxl(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 21, height = 13;
    uint8_t *rgb = smooth_rgb(width, height, 2);
    Bytes file = encode_jxl(rgb, width, height, 3, 8, 1);
    Pixels got = decode_whole(decoder, file, "JPEG XL");
    const Image image = {got.rgb, got.width, got.height, (size_t)got.width * 3};
    expect_pixels(&image, rgb, width, 0, 0, 0, 0, "lossless JPEG XL");
    free(got.rgb);
    expect_failure(decoder, file, file.size / 2, "truncated", "JPEG XL cut in half");
    free(file.data);
    // 16-bit grey, turned by the header's orientation: libjxl rounds to 8 bits.
    uint16_t *grey = malloc(sizeof *grey * width * height);
    uint8_t *grey_rgb = malloc((size_t)width * height * 3);
    for (int i = 0; i < width * height; i++) {
        grey[i] = (uint16_t)fixture_mix32((uint32_t)i);
        grey_rgb[3 * i] = grey_rgb[3 * i + 1] = grey_rgb[3 * i + 2] =
            (uint8_t)lround(grey[i] * 255.0 / 65535.0);
    }
    file = encode_jxl(grey, width, height, 1, 16, 5);
    Pixels expected = oriented(grey_rgb, width, height, 5);
    got = decode_whole(decoder, file, "16-bit JPEG XL");
    assert_int_equal(got.width, height);
    const Image turned = {got.rgb, got.width, got.height, (size_t)got.width * 3};
    expect_pixels(&turned, expected.rgb, expected.width, 0, 0, 1, 0.05,
                  "16-bit grey JPEG XL, transposed");
    free(got.rgb);
    free(expected.rgb);
    free(file.data);
    free(grey);
    free(grey_rgb);
    free(rgb);
    decoder_destroy(decoder);
}

// A first frame smaller than the screen, interlaced, with its own colour
// table and a transparent index: the canvas outside the frame shows the
// transparent index's colour (Pillow's first frame, converted to RGB).
static void test_gif(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int screen_width = 20, screen_height = 14, left = 4, top = 5, width = 9, height = 7;
    const uint8_t colours[4 * 3] = {10, 20, 30, 200, 100, 0, 7, 77, 177, 255, 255, 0};
    uint8_t indices[9 * 7];
    for (int i = 0; i < width * height; i++) indices[i] = (uint8_t)(fixture_mix32((uint32_t)i) % 4);
    for (int interlace = 0; interlace < 2; interlace++) {
        Bytes file = encode_gif(screen_width, screen_height, left, top, width, height, indices,
                                colours, 4, interlace, 2);
        uint8_t expected[20 * 14 * 3];
        for (int y = 0; y < screen_height; y++)
            for (int x = 0; x < screen_width; x++) {
                const int inside = x >= left && x < left + width && y >= top && y < top + height;
                const int index = inside ? indices[(y - top) * width + (x - left)] : 2;
                memcpy(expected + (y * screen_width + x) * 3, colours + index * 3, 3);
            }
        Pixels got = decode_whole(decoder, file, "GIF");
        assert_int_equal(got.width, screen_width);
        const Image image = {got.rgb, got.width, got.height, (size_t)got.width * 3};
        expect_pixels(&image, expected, screen_width, 0, 0, 0, 0,
                      interlace ? "interlaced GIF" : "GIF");
        free(got.rgb);
        expect_failure(decoder, file, file.size - 8, "truncated", "GIF without its last bytes");
        free(file.data);
    }
    // 35 bytes declaring a 9000 x 9000 frame (hostile testing: 93 MB were
    // allocated before the data ran out): refused from the bytes left,
    // before the canvas exists.
    static const uint8_t bomb[] = {'G', 'I', 'F', '8', '9', 'a', 0x28, 0x23, 0x28, 0x23, 0x80,
                                   0, 0, 0, 0, 0, 0xff, 0xff, 0xff, ',', 0, 0, 0, 0, 0x28,
                                   0x23, 0x28, 0x23, 0, 2, 2, 0x4c, 1, 0, ';'};
    const Bytes bomb_file = {(uint8_t *)bomb, sizeof bomb};
    expect_failure(decoder, bomb_file, bomb_file.size,
                   "truncated: GIF frame of 9000 x 9000 pixels needs at least 7415 bytes of LZW "
                   "data, the file has 5 left", "a 35-byte GIF of 9000 x 9000");
    decoder_destroy(decoder);
}

// ---- EXIF orientation -----------------------------------------------------------------

// PNG (eXIf) in all 8 orientations: probe, whole, region; off gives the
// stored layout.
static void test_exif_png_all_orientations(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 13, height = 7;
    uint8_t *rgb = smooth_rgb(width, height, 4);
    for (int orientation = 1; orientation <= 8; orientation++) {
        Bytes exif = exif_orientation_block(orientation, 1);
        Bytes file = encode_png_rgb_exif(rgb, width, height, exif);
        Pixels expected = oriented(rgb, width, height, orientation);
        char what[64];
        snprintf(what, sizeof what, "PNG orientation %d", orientation);
        ImageInfo info;
        ErrorMessage err = {{0}};
        assert_int_equal(decoder_probe(decoder, file.data, file.size, &info, &err), 0);
        assert_int_equal(info.width, expected.width);
        assert_int_equal(info.height, expected.height);
        assert_int_equal(info.orientation, orientation);
        Pixels got = decode_whole(decoder, file, what);
        const Image image = {got.rgb, got.width, got.height, (size_t)got.width * 3};
        expect_pixels(&image, expected.rgb, expected.width, 0, 0, 0, 0, what);
        free(got.rgb);
        const DecodeRequest request = {{1, 2, expected.width - 3, expected.height - 3}, 0, 0, 0, 0};
        DecodedImage part;
        assert_int_equal(decoder_decode(decoder, file.data, file.size, &request, &part, &err), 0);
        assert_memory_equal(&part.covered, &request.region, sizeof request.region);
        expect_pixels(&part.image, expected.rgb, expected.width, 1, 2, 0, 0, what);
        decoder_set_exif_orientation(decoder, 0);
        got = decode_whole(decoder, file, what);
        const Image plain = {got.rgb, got.width, got.height, (size_t)got.width * 3};
        assert_int_equal(got.width, width);
        expect_pixels(&plain, rgb, width, 0, 0, 0, 0, "EXIF orientation off");
        decoder_set_exif_orientation(decoder, 1);
        free(got.rgb);
        free(expected.rgb);
        free(file.data);
        free(exif.data);
    }
    free(rgb);
    decoder_destroy(decoder);
}

// JPEG (APP1) turned by 5..8 and decoded by region at a reduced DCT scale:
// the same pixels as the stored image's matching region decoded at that
// scale with orientation off, then turned here.
static void test_exif_jpeg_region_scaled(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    const int width = 96, height = 64;
    uint8_t *rgb = smooth_rgb(width, height, 5);
    for (int orientation = 2; orientation <= 8; orientation++) {
        Bytes exif = exif_orientation_block(orientation, 0);
        Bytes file = encode_jpeg_app1(rgb, width, height, &JPEG_RGB, exif);
        const int swap = orientation >= 5;
        const int oriented_width = swap ? height : width, oriented_height = swap ? width : height;
        // A region of the oriented image at a quarter of its resolution.
        const PixelRect region = {16, 8, oriented_width - 32, oriented_height - 24};
        const DecodeRequest request = {region, region.width / 4, region.height / 4, 0, 0};
        DecodedImage out;
        ErrorMessage err = {{0}};
        if (decoder_decode(decoder, file.data, file.size, &request, &out, &err) != 0)
            fail_msg("orientation %d: %s", orientation, err.text);
        Pixels turned = {malloc((size_t)out.image.width * out.image.height * 3), out.image.width,
                         out.image.height};
        for (int y = 0; y < turned.height; y++)
            memcpy(turned.rgb + (size_t)y * turned.width * 3,
                   out.image.pixels + y * out.image.stride, (size_t)turned.width * 3);
        const PixelRect covered = out.covered;
        // The stored rectangle under `covered`, found from its corners.
        int u0, v0, u1, v1;
        stored_position(orientation, covered.x, covered.y, width, height, &u0, &v0);
        stored_position(orientation, covered.x + covered.width - 1, covered.y + covered.height - 1,
                        width, height, &u1, &v1);
        const PixelRect stored_region = {u0 < u1 ? u0 : u1, v0 < v1 ? v0 : v1, abs(u1 - u0) + 1,
                                         abs(v1 - v0) + 1};
        decoder_set_exif_orientation(decoder, 0);
        const DecodeRequest stored_request = {stored_region,
                                              swap ? request.min_height : request.min_width,
                                              swap ? request.min_width : request.min_height, 0, 0};
        assert_int_equal(decoder_decode(decoder, file.data, file.size, &stored_request, &out, &err),
                         0);
        decoder_set_exif_orientation(decoder, 1);
        assert_memory_equal(&out.covered, &stored_region, sizeof stored_region);
        uint8_t *packed = malloc((size_t)out.image.width * out.image.height * 3);
        for (int y = 0; y < out.image.height; y++)
            memcpy(packed + (size_t)y * out.image.width * 3,
                   out.image.pixels + y * out.image.stride, (size_t)out.image.width * 3);
        Pixels expected = oriented(packed, out.image.width, out.image.height, orientation);
        assert_int_equal(expected.width, turned.width);
        assert_int_equal(expected.height, turned.height);
        assert_true(turned.width * 4 <= covered.width + 3);  // a reduced scale was used
        const Image image = {turned.rgb, turned.width, turned.height, (size_t)turned.width * 3};
        expect_pixels(&image, expected.rgb, expected.width, 0, 0, 0, 0, "oriented JPEG region");
        free(packed);
        free(expected.rgb);
        free(turned.rgb);
        free(file.data);
        free(exif.data);
    }
    free(rgb);
    decoder_destroy(decoder);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_tiff_layouts),
        cmocka_unit_test(test_tiff_limits_and_damage),
        cmocka_unit_test(test_heif_avif),
        cmocka_unit_test(test_jxl),
        cmocka_unit_test(test_gif),
        cmocka_unit_test(test_exif_png_all_orientations),
        cmocka_unit_test(test_exif_jpeg_region_scaled),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
