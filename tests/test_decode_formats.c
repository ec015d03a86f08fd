// Pixel parity with the reference Python readers: every file under
// tests/fixtures/formats (written by tools/make_format_fixtures.py with
// Pillow, tifffile and pydicom) decoded here and compared with the 8-bit RGB
// those libraries read from it (manifest.txt says which PNG, with what
// tolerance, and which files must be refused with which words). Each file is
// also decoded by region, probed, and cut in half (which must fail cleanly).
// AVIF files must give Pillow's pixels exactly (MAX 0): both sides decode
// with libavif and convert with libyuv (src/decode/avif.c), whose SIMD code
// gives its C code's results on every CPU (libyuv's own tests require it);
// with libheif's conversion they were up to 82 levels off.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decode/decode.h"
#include "util/file.h"

#define FIXTURES "tests/fixtures/formats"

// Every fixture is checked even after one failed: the log lists them all.
static int failures;
#define soft_fail(...)            \
    do {                          \
        print_error(__VA_ARGS__); \
        print_error("\n");        \
        failures++;               \
        return;                   \
    } while (0)

typedef struct Fixture {
    char file[128], mode[16], expected[128];
    int max_diff;
    double mean_diff;
} Fixture;

static ByteBuffer read_fixture(const char *name) {
    char path[512];
    snprintf(path, sizeof path, "%s/%s", FIXTURES, name);
    ByteBuffer buffer = {0};
    ErrorMessage err = {{0}};
    if (file_read_all(path, &buffer, (size_t)1 << 24, &err) != 0) fail_msg("%s", err.text);
    return buffer;
}

// A packed RGB copy of a decoded image (the Decoder's buffer is reused).
typedef struct Rgb {
    uint8_t *pixels;
    int width, height;
} Rgb;

static Rgb copy_rgb(const Image *image) {
    Rgb rgb = {malloc((size_t)image->width * image->height * 3), image->width, image->height};
    for (int y = 0; y < image->height; y++)
        memcpy(rgb.pixels + (size_t)y * image->width * 3, image->pixels + y * image->stride,
               (size_t)image->width * 3);
    return rgb;
}

static Rgb decode_reference(Decoder *decoder, const char *name) {
    ByteBuffer png = read_fixture(name);
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, png.data, png.size, NULL, &out, &err) != 0)
        fail_msg("reference %s: %s", name, err.text);
    Rgb rgb = copy_rgb(&out.image);
    byte_buffer_free(&png);
    return rgb;
}

// `image` against the reference's rectangle at (x0, y0).
static void expect_match(const Fixture *f, const Image *image, const Rgb *reference, int x0, int y0,
                         const char *what) {
    double total = 0;
    int worst = 0;
    for (int y = 0; y < image->height; y++)
        for (int x = 0; x < image->width * 3; x++) {
            const int want = reference->pixels[((size_t)(y0 + y) * reference->width + x0) * 3 + x];
            const int diff = abs(image->pixels[(size_t)y * image->stride + x] - want);
            total += diff;
            if (diff > worst) worst = diff;
        }
    const double mean = total / ((double)image->width * image->height * 3);
    if (worst > f->max_diff || mean > f->mean_diff + 1e-9)
        soft_fail("%s (%s): max diff %d (limit %d), mean %.3f (limit %.3f)", f->file, what, worst,
                  f->max_diff, mean, f->mean_diff);
}

static void compare_decodes(Decoder *decoder, const Fixture *f, const ByteBuffer *file,
                            const Rgb reference) {
    ErrorMessage err = {{0}};
    ImageInfo info;
    if (decoder_probe(decoder, file->data, file->size, &info, &err) != 0)
        soft_fail("%s: probe: %s", f->file, err.text);
    if (info.width != reference.width || info.height != reference.height)
        soft_fail("%s: probe says %d x %d, reference is %d x %d", f->file, info.width, info.height,
                  reference.width, reference.height);
    DecodedImage out;
    if (decoder_decode(decoder, file->data, file->size, NULL, &out, &err) != 0)
        soft_fail("%s: %s", f->file, err.text);
    if (out.image.width != reference.width || out.image.height != reference.height)
        soft_fail("%s: decoded %d x %d", f->file, out.image.width, out.image.height);
    expect_match(f, &out.image, &reference, 0, 0, "whole");
    // A region, with the whole file checked: the same pixels as the whole.
    const DecodeRequest request = {{3, 2, reference.width - 7, reference.height - 5}, 0, 0, 1, 0};
    if (decoder_decode(decoder, file->data, file->size, &request, &out, &err) != 0)
        soft_fail("%s: region: %s", f->file, err.text);
    const PixelRect c = out.covered;
    if (c.x > 3 || c.y > 2 || c.x + c.width < reference.width - 4 ||
        c.y + c.height < reference.height - 3 || out.image.width != c.width ||
        out.image.height != c.height || c.x < 0 || c.y < 0)
        soft_fail("%s: region covered %d,%d %dx%d, decoded %dx%d", f->file, c.x, c.y, c.width,
                  c.height, out.image.width, out.image.height);
    // libjpeg-turbo's cropped decode upsamples chroma at the crop's left
    // edge without the column beyond it: a JPEG region differs from the
    // whole image in that column (tests/test_decode.c bounds this); the
    // orientation's mapping would be off by far more.
    Fixture region_limits = *f;
    if (info.format == IMAGE_FORMAT_JPEG) {
        region_limits.max_diff = 255;
        region_limits.mean_diff = f->mean_diff + 1.0;
    }
    expect_match(&region_limits, &out.image, &reference, c.x, c.y, "region");
}

static void check_reference(Decoder *decoder, const Fixture *f, const ByteBuffer *file) {
    Rgb reference = decode_reference(decoder, f->expected);
    decoder_set_exif_orientation(decoder, strcmp(f->mode, "noexif") != 0);
    compare_decodes(decoder, f, file, reference);
    decoder_set_exif_orientation(decoder, 1);
    free(reference.pixels);
}

static void check_error(Decoder *decoder, const Fixture *f, const ByteBuffer *file) {
    char words[128];
    snprintf(words, sizeof words, "%s", f->expected);
    for (char *p = words; *p; p++)
        if (*p == '_') *p = ' ';
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, file->data, file->size, NULL, &out, &err) == 0)
        soft_fail("%s: decoded, but should fail with '%s'", f->file, words);
    if (!strstr(err.text, words))
        soft_fail("%s: message '%s' lacks '%s'", f->file, err.text, words);
}

// The first half of a file: must fail with a message, never crash or return
// made-up pixels (RLE TGA too: its packets are walked before stb_image,
// which reads zeros past the end). Exception: a two-page TIFF, whose first
// page lies in its first half.
static void check_cut(Decoder *decoder, const Fixture *f, const ByteBuffer *file) {
    if (strcmp(f->file, "two_pages.tif") == 0) return;
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, file->data, file->size / 2, NULL, &out, &err) == 0)
        soft_fail("%s: its first half decoded", f->file);
    if (!err.text[0]) soft_fail("%s: cut file failed without a message", f->file);
}

static void test_fixtures(void **state) {
    (void)state;
    ByteBuffer manifest = read_fixture("manifest.txt");
    Decoder *decoder = decoder_create(0);
    int checked = 0;
    char *saveptr = NULL;
    char *text = malloc(manifest.size + 1);
    memcpy(text, manifest.data, manifest.size);
    text[manifest.size] = '\0';
    for (char *line = strtok_r(text, "\n", &saveptr); line; line = strtok_r(NULL, "\n", &saveptr)) {
        if (line[0] == '#') continue;
        Fixture f;
        if (sscanf(line, "%127s %15s %127s %d %lf", f.file, f.mode, f.expected, &f.max_diff,
                   &f.mean_diff) != 5)
            fail_msg("bad manifest line '%s'", line);
        ByteBuffer file = read_fixture(f.file);
        if (strcmp(f.mode, "error") == 0) {
            check_error(decoder, &f, &file);
        } else {
            check_reference(decoder, &f, &file);
            check_cut(decoder, &f, &file);
        }
        byte_buffer_free(&file);
        checked++;
    }
    assert_true(checked >= 70);  // the manifest was read whole
    assert_int_equal(failures, 0);
    free(text);
    byte_buffer_free(&manifest);
    decoder_destroy(decoder);
}

// A 58-byte RLE TGA declaring 9000 x 9000 pixels with 10 packets of data:
// refused as truncated (the next packet's header missing: 58 of 59 bytes)
// before anything the size of the image is allocated
// (it used to decode to 243 MB of black and train).
static void test_rle_tga_bomb(void **state) {
    (void)state;
    uint8_t file[58] = {0, 0, 10};         // no id, no colour map, RLE true-colour
    file[12] = 9000 & 0xff, file[13] = 9000 >> 8;  // width
    file[14] = 9000 & 0xff, file[15] = 9000 >> 8;  // height
    file[16] = 24;
    for (int i = 0; i < 10; i++) {  // runs of 128 pixels
        file[18 + 4 * i] = 0xff;
        file[19 + 4 * i] = 1, file[20 + 4 * i] = 2, file[21 + 4 * i] = 3;
    }
    Decoder *decoder = decoder_create(0);
    DecodedImage out;
    ErrorMessage err = {{0}};
    assert_int_not_equal(decoder_decode(decoder, file, sizeof file, NULL, &out, &err), 0);
    if (!strstr(err.text, "truncated: TGA data ends at 58 of 59 bytes"))
        fail_msg("%s", err.text);
    decoder_destroy(decoder);
}

// Inputs that crashed the decoders under fuzzing (tests/fixtures/fuzz_findings/README.md):
// refused with a message, never a crash.
static void test_fuzz_findings(void **state) {
    (void)state;
    static const struct {
        const char *file, *words;
    } findings[] = {
        {"jpeg_fill_bytes.bin", "unknown magic bytes"},
        {"dicom_rle_offset.dcm", "RLE: segment offset outside its fragment"},
        {"gif_frame_wider_than_its_data.gif",
         "truncated: GIF frame of 65512 x 16 pixels needs at least"},
        {"dicom_jpeg_tem_marker.dcm", "JPEG: a TEM marker (FF 01) before the frame header"},
        {"dicom_meta_unknown_vr.dcm", "truncated: DICOM element longer than the data"},
        // Its deflated transfer syntax lies past the meta group's length,
        // where DCMTK no longer reads the meta group: refused for that.
        {"dicom_deflated_stored_blocks.dcm",
         "corrupt data: DICOM meta information without a transfer syntax (0002,0010)"},
        {"dicom_oom_2.6GB.dcm",
         "corrupt data: DICOM meta information without a transfer syntax (0002,0010)"},
        {"dicom_implicit_sequence.dcm", "truncated: DICOM element longer than the data"},
        {"dicom_un_undefined.dcm", "truncated: DICOM element longer than the data"},
        {"dicom_vr_not_letters.dcm", "truncated: DICOM element longer than the data"},
        {"dicom_pixel_data_unknown_vr.dcm", "truncated: DICOM element longer than the data"},
        {"dicom_group_length_unknown_vr.dcm",
         "corrupt data: DICOM meta information that does not start with its group length"},
    };
    // A decoder that hangs (DCMTK on the TEM marker did) ends the test
    // binary with SIGALRM: a failure, not a stuck make test.
    alarm(60);
    Decoder *decoder = decoder_create(0);
    for (size_t i = 0; i < sizeof findings / sizeof findings[0]; i++) {
        char path[512];
        snprintf(path, sizeof path, "tests/fixtures/fuzz_findings/%s", findings[i].file);
        ByteBuffer file = {0};
        ErrorMessage err = {{0}};
        if (file_read_all(path, &file, (size_t)1 << 20, &err) != 0) fail_msg("%s", err.text);
        DecodedImage out;
        if (decoder_decode(decoder, file.data, file.size, NULL, &out, &err) == 0)
            fail_msg("%s decoded", findings[i].file);
        if (!strstr(err.text, findings[i].words))
            fail_msg("%s: '%s' lacks '%s'", findings[i].file, err.text, findings[i].words);
        byte_buffer_free(&file);
    }
    alarm(0);
    decoder_destroy(decoder);
}

// Grid images (tests/fixtures/heif_grid, tools/make_heif_grid_fixtures.py:
// rgb64.heic's coded image as the one tile of a 1x1 grid whose 'ispe' is
// the tile's, 64 x 64): a grid declaring 64 x 64 decodes to rgb64.heic's
// pixels; one whose own data declares 30000 x 30000 is refused before
// libheif allocates its output (it was decoded: 2.1 GB and 12 s for a 1.6 kB
// file). The AVIF twins (made from rgb.avif's 24 x 16 tile) go through
// libavif, which refuses a grid of tiles under 64 pixels (MIAF), as Pillow
// does, before it allocates anything.
static void expect_refused(Decoder *decoder, const char *fixture, const char *words) {
    ByteBuffer file = read_fixture(fixture);
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, file.data, file.size, NULL, &out, &err) == 0)
        fail_msg("%s decoded (%d x %d)", fixture, out.image.width, out.image.height);
    if (!strstr(err.text, words)) fail_msg("%s: '%s' lacks '%s'", fixture, err.text, words);
    byte_buffer_free(&file);
}

static void test_heif_grids(void **state) {
    (void)state;
    Decoder *decoder = decoder_create(0);
    ByteBuffer plain = read_fixture("../heif_grid/rgb64.heic");
    ByteBuffer grid = read_fixture("../heif_grid/grid_1x1.heic");
    DecodedImage out;
    ErrorMessage err = {{0}};
    if (decoder_decode(decoder, plain.data, plain.size, NULL, &out, &err) != 0)
        fail_msg("rgb64.heic: %s", err.text);
    Rgb expected = copy_rgb(&out.image);
    if (decoder_decode(decoder, grid.data, grid.size, NULL, &out, &err) != 0)
        fail_msg("grid_1x1.heic: %s", err.text);
    Rgb got = copy_rgb(&out.image);
    assert_int_equal(got.width, 64);
    assert_int_equal(got.width, expected.width);
    assert_int_equal(got.height, expected.height);
    assert_memory_equal(got.pixels, expected.pixels, (size_t)got.width * got.height * 3);
    expect_refused(decoder, "../heif_grid/output_larger_than_ispe.heic",
                   "corrupt data: HEIF: larger than its header says (64 x 64): ");
    expect_refused(decoder, "../heif_grid/output_larger_than_ispe.heic",
                   "Image size 30000x30000 exceeds the maximum image size 65x65");
    expect_refused(decoder, "../heif_grid/grid_1x1.avif", "cannot be smaller than 64");
    expect_refused(decoder, "../heif_grid/output_larger_than_ispe.avif",
                   "Grid box dimensions are too large: [30000 x 30000]");
    free(expected.pixels);
    free(got.pixels);
    byte_buffer_free(&plain);
    byte_buffer_free(&grid);
    decoder_destroy(decoder);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_fuzz_findings),
        cmocka_unit_test(test_heif_grids),
        cmocka_unit_test(test_rle_tga_bomb),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
