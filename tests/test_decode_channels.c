// The deep path's samples: native decodes (DecodeRequest.native) converted
// by samples_to_float to N channels, against the float32 values of
// tests/fixtures/channels (tools/make_channel_fixtures.py: 16-bit PNG, TIFF
// and PPM, float and multi-band TIFF, CMYK, a grey JPEG, a 12-bit DICOM,
// computed in numpy from what Pillow, tifffile and pydicom read), whole and
// by region; and every 8-bit fixture of tests/fixtures/formats read both
// ways, native within one level of the 8-bit decode.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "decode/decode.h"
#include "nn/safetensors.h"
#include "util/file.h"

#define CHANNELS "tests/fixtures/channels"
#define FORMATS "tests/fixtures/formats"

static ByteBuffer read_file(const char *folder, const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", folder, name);
    ByteBuffer buffer = {0};
    ErrorMessage err = {{0}};
    if (file_read_all(path, &buffer, (size_t)1 << 24, &err) != 0) fail_msg("%s", err.text);
    return buffer;
}

// A native decode of `region` (NULL: whole) converted to `channels` floats;
// -1 with err when either step fails. *values: malloc'ed (h, w, channels)
// of the rectangle *covered (JPEG widens a region to its blocks); the
// samples' format and type in decoded_format, decoded_type.
static PixelRect covered;
static ImageFormat decoded_format;
static SampleType decoded_type;
static int decode_float(Decoder *decoder, const ByteBuffer *file, const PixelRect *region,
                        int channels, float **values, int *width, int *height, ErrorMessage *err) {
    DecodeRequest request = {.native = 1};
    ImageInfo info;
    if (decoder_probe(decoder, file->data, file->size, &info, err) != 0) return -1;
    request.region = region ? *region : (PixelRect){0, 0, info.width, info.height};
    DecodedImage out;
    if (decoder_decode(decoder, file->data, file->size, &request, &out, err) != 0) return -1;
    assert_null(out.image.pixels);
    assert_non_null(out.samples.pixels);
    const SampleImage *s = &out.samples;
    covered = out.covered;
    decoded_format = info.format;
    decoded_type = s->type;
    *values = malloc((size_t)s->width * s->height * channels * sizeof **values);
    *width = s->width;
    *height = s->height;
    if (samples_to_float(s, channels, *values, (size_t)s->width * channels, err) != 0) {
        free(*values);
        *values = NULL;
        return -1;
    }
    return 0;
}

// Largest |ours - reference| over the rectangle of the (H, W, C) reference
// at (x0, y0) that ours (h, w, C) covers.
static double worst_difference(const float *ours, int width, int height, int channels,
                               const float *reference, int reference_width, int x0, int y0) {
    double worst = 0;
    for (int y = 0; y < height; y++)
        for (int x = 0; x < width * channels; x++) {
            const float want =
                reference[((size_t)(y0 + y) * reference_width + x0) * channels + (size_t)x];
            const double diff = fabs((double)ours[(size_t)y * width * channels + x] - want);
            if (diff > worst || isnan(diff)) worst = isnan(diff) ? INFINITY : diff;
        }
    return worst;
}

static const float *reference_tensor(const SafeTensors *references, const char *key, int *width,
                                     int *height, int *channels) {
    const SafeTensor *tensor = safetensors_find(references, key);
    if (!tensor || tensor->dtype != SAFE_F32 || tensor->rank != 3)
        fail_msg("reference %s missing or not F32 (H, W, C)", key);
    *height = (int)tensor->shape[0];
    *width = (int)tensor->shape[1];
    *channels = (int)tensor->shape[2];
    return safetensors_data(references, tensor);
}

static void check_reference(Decoder *decoder, const SafeTensors *references, const char *file_name,
                            int channels, const char *key, double max_diff) {
    int width, height, depth;
    const float *want = reference_tensor(references, key, &width, &height, &depth);
    assert_int_equal(depth, channels);
    ByteBuffer file = read_file(CHANNELS, file_name);
    ErrorMessage err = {{0}};
    float *ours;
    int got_width, got_height;
    if (decode_float(decoder, &file, NULL, channels, &ours, &got_width, &got_height, &err) != 0)
        fail_msg("%s with %d channels: %s", file_name, channels, err.text);
    assert_int_equal(got_width, width);
    assert_int_equal(got_height, height);
    const double whole = worst_difference(ours, width, height, channels, want, width, 0, 0);
    if (whole > max_diff)
        fail_msg("%s with %d channels: max difference %g (limit %g)", file_name, channels, whole,
                 max_diff);
    free(ours);
    // A region: the samples of its rectangle, nothing shifted.
    const PixelRect region = {3, 2, width - 7, height - 5};
    if (decode_float(decoder, &file, &region, channels, &ours, &got_width, &got_height, &err) != 0)
        fail_msg("%s region: %s", file_name, err.text);
    assert_int_equal(got_width, covered.width);
    assert_int_equal(got_height, covered.height);
    assert_true(covered.x <= region.x && covered.y <= region.y);
    assert_true(covered.x + covered.width >= region.x + region.width);
    const double part =
        worst_difference(ours, got_width, got_height, channels, want, width, covered.x, covered.y);
    if (part > max_diff) fail_msg("%s region: max difference %g", file_name, part);
    free(ours);
    byte_buffer_free(&file);
}

static void check_refused(Decoder *decoder, const char *file_name, int channels,
                          const char *words) {
    char expected[128];
    snprintf(expected, sizeof expected, "%s", words);
    for (char *c = expected; *c; c++)
        if (*c == '_') *c = ' ';
    ByteBuffer file = read_file(CHANNELS, file_name);
    ErrorMessage err = {{0}};
    float *ours = NULL;
    int width, height;
    if (decode_float(decoder, &file, NULL, channels, &ours, &width, &height, &err) == 0)
        fail_msg("%s with %d channels was read; expected an error with \"%s\"", file_name,
                 channels, expected);
    if (!strstr(err.text, expected))
        fail_msg("%s with %d channels: \"%s\" lacks \"%s\"", file_name, channels, err.text,
                 expected);
    byte_buffer_free(&file);
}

static void test_fixtures(void **state) {
    (void)state;
    SafeTensors references;
    ErrorMessage err = {{0}};
    if (safetensors_read(CHANNELS "/references.safetensors", &references, &err) != 0)
        fail_msg("%s", err.text);
    FILE *manifest = fopen(CHANNELS "/manifest.txt", "r");
    assert_non_null(manifest);
    Decoder *decoder = decoder_create(0);
    char line[512];
    int checked = 0;
    while (fgets(line, sizeof line, manifest)) {
        if (line[0] == '#') continue;
        char file[128], mode[16], expected[128];
        int channels;
        double max_diff = 0;
        if (sscanf(line, "%127s %d %15s %127s %lf", file, &channels, mode, expected, &max_diff) <
            4)
            continue;
        if (strcmp(mode, "ref") == 0)
            check_reference(decoder, &references, file, channels, expected, max_diff);
        else
            check_refused(decoder, file, channels, expected);
        checked++;
    }
    fclose(manifest);
    assert_true(checked >= 20);
    decoder_destroy(decoder);
    safetensors_free(&references);
}

// Pillow's convert("RGB") of the 16-bit grey PNG is white wherever the
// samples exceed 255; the deep path keeps those values apart.
static void test_grey16_not_clipped(void **state) {
    (void)state;
    SafeTensors references;
    ErrorMessage err = {{0}};
    assert_int_equal(safetensors_read(CHANNELS "/references.safetensors", &references, &err), 0);
    int width, height, channels;
    const float *pillow =
        reference_tensor(&references, "grey16.png@pillow_rgb", &width, &height, &channels);
    ByteBuffer file = read_file(CHANNELS, "grey16.png");
    Decoder *decoder = decoder_create(0);
    float *ours;
    int got_width, got_height;
    assert_int_equal(decode_float(decoder, &file, NULL, 1, &ours, &got_width, &got_height, &err),
                     0);
    // The first row starts with 256, 1000, 40000, 65535.
    const float first[4] = {256.0f / 65535, 1000.0f / 65535, 40000.0f / 65535, 1.0f};
    for (int x = 0; x < 4; x++) {
        assert_float_equal(pillow[(size_t)x * 3], 1.0f, 0);
        assert_float_equal(ours[x], first[x], 1e-7);
    }
    int clipped = 0;
    for (int i = 0; i < width * height; i++) clipped += pillow[(size_t)i * 3] == 1.0f;
    assert_true(clipped > width * height / 2);  // most of a 16-bit ramp
    free(ours);
    byte_buffer_free(&file);
    decoder_destroy(decoder);
    safetensors_free(&references);
}

// Every 8-bit format fixture (JPEG, PNG, WebP, GIF, BMP, TGA, AVIF, JPEG XL,
// DICOM, TIFF layouts, orientations) read natively as 3 channels: within
// one level of its 8-bit decode (16-bit samples: v / 65535 against v >> 8).
// Not the 10/12-bit AVIFs: their native samples are libavif's conversion
// at full depth (test_fixtures checks them against imagecodecs'), their
// 8-bit decode is Pillow's (libyuv on planes truncated to 8 bits): two
// references up to 8 levels apart inside the image and more in an odd last
// column, where libyuv and libavif upsample the unpaired chroma differently.
static void test_native_matches_rgb8(void **state) {
    (void)state;
    FILE *manifest = fopen(FORMATS "/manifest.txt", "r");
    assert_non_null(manifest);
    Decoder *decoder = decoder_create(0);
    char line[512], previous[128] = "";
    int compared = 0, deep_avif = 0;
    while (fgets(line, sizeof line, manifest)) {
        char name[128], mode[16];
        if (line[0] == '#' || sscanf(line, "%127s %15s", name, mode) != 2) continue;
        if (strcmp(mode, "ref") != 0 || strcmp(name, previous) == 0) continue;
        snprintf(previous, sizeof previous, "%s", name);
        ByteBuffer file = read_file(FORMATS, name);
        ErrorMessage err = {{0}};
        DecodedImage rgb;
        if (decoder_decode(decoder, file.data, file.size, NULL, &rgb, &err) != 0)
            fail_msg("%s: %s", name, err.text);
        const Image image = rgb.image;
        uint8_t *copy = malloc((size_t)image.height * image.stride);
        memcpy(copy, image.pixels, (size_t)image.height * image.stride);
        float *ours;
        int width, height;
        if (decode_float(decoder, &file, NULL, 3, &ours, &width, &height, &err) != 0)
            fail_msg("%s native: %s", name, err.text);
        if (decoded_format == IMAGE_FORMAT_HEIF && decoded_type == SAMPLE_U16) {
            free(ours);
            free(copy);
            byte_buffer_free(&file);
            deep_avif++;
            continue;
        }
        assert_int_equal(width, image.width);
        assert_int_equal(height, image.height);
        for (int y = 0; y < height; y++)
            for (int x = 0; x < width * 3; x++) {
                float v = ours[(size_t)y * width * 3 + x];
                v = v < 0 ? 0 : v > 1 ? 1 : v;
                const int want = copy[(size_t)y * image.stride + x];
                if (fabsf(v * 255.0f - (float)want) > 1.0f)
                    fail_msg("%s: native %g vs 8-bit %d at (%d, %d)", name, (double)(v * 255.0f),
                             want, x / 3, y);
            }
        free(ours);
        free(copy);
        byte_buffer_free(&file);
        compared++;
    }
    fclose(manifest);
    assert_true(compared >= 50);
    assert_int_equal(deep_avif, 4);  // d10_*, d12_* of the manifest
    decoder_destroy(decoder);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_grey16_not_clipped),
        cmocka_unit_test(test_native_matches_rgb8),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
