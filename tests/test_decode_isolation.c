// Tests that a reused Decoder decodes every image as if it were the only
// one (issue 22): the same file gives the same pixels, or fails with the
// same message, alone and after any of several different predecessors.
// The JPEG cases are files without their own tables: without DQT (must fail,
// whatever tables an earlier file left) and without DHT (a baseline file
// then gets libjpeg's standard tables, the ones it was written with).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec_fixtures.h"
#include "decode/decode.h"
#include "image_fixtures.h"

#define WIDTH 72
#define HEIGHT 56
#define PREDECESSORS 9

// What one decode gave: the pixels (packed) or the error message.
typedef struct Outcome {
    int status;
    char message[sizeof(ErrorMessage)];
    uint8_t *pixels;
    int width, height;
} Outcome;

static Outcome decode_outcome(Decoder *decoder, Bytes file, const DecodeRequest *request) {
    Outcome outcome = {0};
    ErrorMessage err = {{0}};
    DecodedImage out;
    outcome.status = decoder_decode(decoder, file.data, file.size, request, &out, &err);
    snprintf(outcome.message, sizeof outcome.message, "%s", err.text);
    if (outcome.status == 0) {
        outcome.width = out.image.width;
        outcome.height = out.image.height;
        outcome.pixels = malloc((size_t)out.image.width * out.image.height * 3);
        for (int y = 0; y < out.image.height; y++)
            memcpy(outcome.pixels + (size_t)y * out.image.width * 3,
                   out.image.pixels + (size_t)y * out.image.stride, (size_t)out.image.width * 3);
    }
    return outcome;
}

static void expect_same(const Outcome *alone, const Outcome *after, const char *what) {
    if (alone->status != after->status || strcmp(alone->message, after->message) != 0)
        fail_msg("%s: alone: %d '%s'; after it: %d '%s'", what, alone->status, alone->message,
                 after->status, after->message);
    if (alone->status != 0) return;
    if (alone->width != after->width || alone->height != after->height ||
        memcmp(alone->pixels, after->pixels, (size_t)alone->width * alone->height * 3) != 0)
        fail_msg("%s: other pixels than when decoded alone", what);
}

// Files of every kind, with tables and settings unlike the files under test:
// other quantization (quality 20, 4:4:4), optimized Huffman tables
// (progressive), greyscale, PNG, WebP, and a JPEG that fails half-way.
typedef struct Predecessors {
    Bytes files[PREDECESSORS];
    const char *names[PREDECESSORS];
} Predecessors;

static Predecessors make_predecessors(const uint8_t *rgb, const uint8_t *grey) {
    Predecessors p;
    const JpegSpec low = {20, 1, 1, 0, JCS_RGB, JCS_YCbCr, 0};
    const JpegSpec progressive = {60, 2, 1, 1, JCS_RGB, JCS_YCbCr, 0};
    const JpegSpec greyscale = {75, 1, 1, 0, JCS_GRAYSCALE, JCS_GRAYSCALE, 0};
    p.files[0] = encode_jpeg(rgb, WIDTH, HEIGHT, &JPEG_RGB), p.names[0] = "baseline q95";
    p.files[1] = encode_jpeg(rgb, WIDTH, HEIGHT, &low), p.names[1] = "baseline q20 4:4:4";
    p.files[2] = encode_jpeg(rgb, WIDTH, HEIGHT, &progressive), p.names[2] = "progressive";
    p.files[3] = encode_jpeg(grey, WIDTH, HEIGHT, &greyscale), p.names[3] = "greyscale";
    p.files[4] = encode_png_rgb(rgb, WIDTH, HEIGHT), p.names[4] = "PNG";
    p.files[5] = encode_webp_rgb(rgb, WIDTH, HEIGHT, 0), p.names[5] = "WebP lossy";
    p.files[6] = encode_webp_rgb(rgb, WIDTH, HEIGHT, 1), p.names[6] = "WebP lossless";
    p.files[7] = encode_jpeg(rgb, WIDTH, HEIGHT, &progressive), p.names[7] = "cut progressive";
    p.files[7].size = p.files[7].size * 2 / 3;
    p.files[8] = encode_jpeg(rgb, WIDTH, HEIGHT, &low), p.names[8] = "cut baseline";
    p.files[8].size = p.files[8].size / 2;
    return p;
}

static void free_predecessors(Predecessors *p) {
    for (int i = 0; i < PREDECESSORS; i++) free(p->files[i].data);
}

// file decoded (whole, and as the training loader asks: a checked region)
// by a fresh Decoder, then again after each predecessor (decoded, or only
// probed) with one reused Decoder: every outcome must be the alone one.
// Returns the alone outcome of the whole decode (caller frees its pixels).
static Outcome check_isolated(Bytes file, const Predecessors *p, const char *what) {
    const DecodeRequest region = {{8, 8, 40, 32}, 20, 16, 1, 0};
    const DecodeRequest *requests[2] = {NULL, &region};
    Outcome alone[2];
    for (int r = 0; r < 2; r++) {
        Decoder *fresh = decoder_create(0);
        alone[r] = decode_outcome(fresh, file, requests[r]);
        decoder_destroy(fresh);
    }
    Decoder *reused = decoder_create(0);
    for (int i = 0; i < PREDECESSORS; i++)
        for (int probe_only = 0; probe_only < 2; probe_only++)
            for (int r = 0; r < 2; r++) {
                ErrorMessage ignored;
                ImageInfo info;
                DecodedImage out;
                decoder_probe(reused, p->files[i].data, p->files[i].size, &info, &ignored);
                if (!probe_only)
                    decoder_decode(reused, p->files[i].data, p->files[i].size, NULL, &out,
                                   &ignored);
                char label[160];
                snprintf(label, sizeof label, "%s (%s) after a %s %s", what,
                         r ? "region" : "whole", p->names[i], probe_only ? "probe" : "decode");
                Outcome after = decode_outcome(reused, file, requests[r]);
                expect_same(&alone[r], &after, label);
                free(after.pixels);
            }
    decoder_destroy(reused);
    free(alone[1].pixels);
    return alone[0];
}

typedef struct Images {
    uint8_t rgb[WIDTH * HEIGHT * 3];
    uint8_t grey[WIDTH * HEIGHT];
    Predecessors predecessors;
} Images;

static int images_setup(void **state) {
    Images *images = malloc(sizeof *images);
    fixture_pattern(images->rgb, WIDTH, HEIGHT, 5);
    for (int i = 0; i < WIDTH * HEIGHT; i++) images->grey[i] = images->rgb[3 * i + 1];
    images->predecessors = make_predecessors(images->rgb, images->grey);
    *state = images;
    return 0;
}

static int images_teardown(void **state) {
    Images *images = *state;
    free_predecessors(&images->predecessors);
    free(images);
    return 0;
}

// No DQT: skipped with libjpeg's reason every time (before issue 22 it
// decoded with the tables of whatever JPEG came before).
static void test_jpeg_without_quantization_tables(void **state) {
    Images *images = *state;
    const JpegSpec spec = {85, 2, 2, 0, JCS_RGB, JCS_YCbCr, 0};
    Bytes file = encode_jpeg(images->rgb, WIDTH, HEIGHT, &spec);
    const size_t full = file.size;
    file.size = fixture_jpeg_drop_segments(file.data, file.size, 0xDB);
    assert_true(file.size < full);
    Outcome alone = check_isolated(file, &images->predecessors, "JPEG without DQT");
    assert_int_equal(alone.status, -1);
    assert_string_equal(alone.message, "corrupt data: Quantization table 0x00 was not defined");
    free(file.data);
}

// No DHT in a baseline file written with the standard tables: the same
// pixels as the complete file, whatever Huffman tables came before.
static void test_jpeg_without_huffman_tables(void **state) {
    Images *images = *state;
    Bytes complete = encode_jpeg(images->rgb, WIDTH, HEIGHT, &JPEG_RGB);
    Bytes file = {malloc(complete.size), complete.size};
    memcpy(file.data, complete.data, complete.size);
    file.size = fixture_jpeg_drop_segments(file.data, file.size, 0xC4);
    assert_true(file.size < complete.size);
    Outcome alone = check_isolated(file, &images->predecessors, "JPEG without DHT");
    assert_int_equal(alone.status, 0);
    Decoder *decoder = decoder_create(0);
    Outcome reference = decode_outcome(decoder, complete, NULL);
    decoder_destroy(decoder);
    expect_same(&reference, &alone, "JPEG without DHT against the complete file");
    free(alone.pixels), free(reference.pixels);
    free(file.data), free(complete.data);
}

// PNG (interlaced palette with tRNS, 16-bit RGBA) and WebP (lossy with
// alpha, animated) keep nothing across files either.
static void test_png_and_webp_isolated(void **state) {
    Images *images = *state;
    uint8_t rgba[WIDTH * HEIGHT * 4], second[WIDTH * HEIGHT * 4];
    uint16_t palette_index[WIDTH * HEIGHT], rgba16[WIDTH * HEIGHT * 4];
    png_color palette[16];
    for (int i = 0; i < 16; i++) palette[i] = (png_color){(png_byte)(i * 16), (png_byte)(255 - i * 9), (png_byte)(i * 5)};
    for (int i = 0; i < WIDTH * HEIGHT; i++) {
        for (int c = 0; c < 3; c++) rgba[4 * i + c] = images->rgb[3 * i + c];
        rgba[4 * i + 3] = (uint8_t)(i * 7);
        for (int c = 0; c < 4; c++) second[4 * i + c] = (uint8_t)(255 - rgba[4 * i + c]);
        palette_index[i] = (uint16_t)(images->rgb[3 * i] % 16);
        for (int c = 0; c < 4; c++) rgba16[4 * i + c] = (uint16_t)(rgba[4 * i + c] * 257 + i % 3);
    }
    const PngSpec palette_spec = {PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_ADAM7, 1};
    const PngSpec rgba16_spec = {PNG_COLOR_TYPE_RGB_ALPHA, 16, PNG_INTERLACE_NONE, 0};
    Bytes files[4] = {
        encode_png(palette_index, WIDTH, HEIGHT, &palette_spec, palette, 16),
        encode_png(rgba16, WIDTH, HEIGHT, &rgba16_spec, NULL, 0),
        encode_webp_rgba(rgba, WIDTH, HEIGHT, 0),
        encode_webp_animation(rgba, second, WIDTH, HEIGHT),
    };
    const char *names[4] = {"PNG palette Adam7", "PNG RGBA 16-bit", "WebP lossy alpha",
                            "WebP animation"};
    for (int f = 0; f < 4; f++) {
        Outcome alone = check_isolated(files[f], &images->predecessors, names[f]);
        if (alone.status != 0) fail_msg("%s: %s", names[f], alone.message);
        free(alone.pixels);
        free(files[f].data);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_jpeg_without_quantization_tables),
        cmocka_unit_test(test_jpeg_without_huffman_tables),
        cmocka_unit_test(test_png_and_webp_isolated),
    };
    return cmocka_run_group_tests(tests, images_setup, images_teardown);
}
