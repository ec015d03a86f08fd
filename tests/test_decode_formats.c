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
        {"dicom_empty_transfer_syntax.dcm",
         "unsupported format: DICOM transfer syntax \"\" (not one DCMTK knows)"},
        {"heif_grid_of_itself.heic",
         "the 'dimg' references of item 2 (417 items) do not match their box's size (14 bytes)"},
        {"heif_reference_size_garbage.heic",
         "'dimg' references of item 2 (417 items) do not match their box's size (1178089313"},
        {"pgm16_taken_for_tga.tga", "unsupported format: unknown magic bytes"},
        {"heif_grid_canvas_bomb.heic",
         "image too large: HEIF grid (item 2) of 35212 x 50531 pixels exceeds limit"},
        {"heif_overlay_larger_than_ispe.heic",
         "image too large: HEIF overlay (item 1) of 58651 x 19328 pixels exceeds limit"},
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
// pixels; one whose own data declares 30000 x 30000 (4000 x 4000) is
// refused before libheif allocates its output (it was decoded: 2.1 GB and
// 12 s for a 1.6 kB file). The AVIF twins (made from rgb.avif's 24 x 16 tile) go through
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
    // Over the pixel limit: the canvas check (heif_canvas.c) reads the
    // grid's declaration before libheif does.
    expect_refused(decoder, "../heif_grid/output_larger_than_ispe.heic",
                   "image too large: HEIF grid (item 2) of 30000 x 30000 pixels exceeds limit");
    // Within it but larger than the header: libheif's own limit, set to the
    // header's longer side (heif.c), refuses the allocation.
    expect_refused(decoder, "../heif_grid/output_within_limit_larger_than_ispe.heic",
                   "corrupt data: HEIF: larger than its header says (64 x 64): ");
    expect_refused(decoder, "../heif_grid/output_within_limit_larger_than_ispe.heic",
                   "Image size 4000x4000 exceeds the maximum image size 65x65");
    expect_refused(decoder, "../heif_grid/grid_1x1.avif", "cannot be smaller than 64");
    expect_refused(decoder, "../heif_grid/output_larger_than_ispe.avif",
                   "Grid box dimensions are too large: [30000 x 30000]");
    free(expected.pixels);
    free(got.pixels);
    byte_buffer_free(&plain);
    byte_buffer_free(&grid);
    decoder_destroy(decoder);
}

// ---- HEIF item references (src/decode/heif_check.c) ------------------------------

static size_t put32(uint8_t *at, uint32_t value) {
    at[0] = (uint8_t)(value >> 24), at[1] = (uint8_t)(value >> 16);
    at[2] = (uint8_t)(value >> 8), at[3] = (uint8_t)value;
    return 4;
}

static size_t put16(uint8_t *at, uint32_t value) {
    at[0] = (uint8_t)(value >> 8), at[1] = (uint8_t)value;
    return 2;
}

typedef struct HeifReference {
    const char *type;
    uint16_t from, to;
} HeifReference;

// An 'ftyp' box and a 'meta' box holding only an 'iref' of these references
// (version 0, one item each): what the check reads, before libheif.
static size_t heif_with_references(uint8_t *out, const HeifReference *references, int count) {
    size_t at = put32(out, 20);
    memcpy(out + at, "ftypheic\0\0\0\0mif1", 16);
    at += 16;
    const uint32_t iref_size = 12 + 14 * (uint32_t)count;
    at += put32(out + at, 12 + iref_size);
    memcpy(out + at, "meta\0\0\0\0", 8);
    at += 8;
    at += put32(out + at, iref_size);
    memcpy(out + at, "iref\0\0\0\0", 8);
    at += 8;
    for (int i = 0; i < count; i++) {
        at += put32(out + at, 14);
        memcpy(out + at, references[i].type, 4);
        at += 4;
        at += put16(out + at, references[i].from);
        at += put16(out + at, 1);
        at += put16(out + at, references[i].to);
    }
    return at;
}

static void expect_heif_error(const uint8_t *file, size_t size, const char *words, int present) {
    Decoder *decoder = decoder_create(0);
    DecodedImage out;
    ErrorMessage err = {{0}};
    assert_int_not_equal(decoder_decode(decoder, file, size, NULL, &out, &err), 0);
    if ((strstr(err.text, words) != NULL) != present)
        fail_msg("'%s' %s '%s'", err.text, present ? "lacks" : "has", words);
    decoder_destroy(decoder);
}

// Item references that libheif 1.15 follows recursively without a check:
// the fuzzed grid of itself with its reference count repaired (so only the
// cycle is wrong), a cycle through an alpha plane ('auxl', from the alpha
// item to its master), and a chain of 33 derived images are refused; a
// chain of 32 passes the check (and libheif refuses the file, which has
// no other boxes, for its own reasons).
static void test_heif_references(void **state) {
    (void)state;
    ByteBuffer grid = {0};
    ErrorMessage err = {{0}};
    if (file_read_all("tests/fixtures/fuzz_findings/heif_grid_of_itself.heic", &grid, 1 << 20,
                      &err) != 0)
        fail_msg("%s", err.text);
    assert_int_equal(grid.data[0x1cf], 0x01);  // 417 references ...
    grid.data[0x1cf] = 0, grid.data[0x1d0] = 1;  // ... -> 1: item 2 itself
    expect_heif_error(grid.data, grid.size, "item 2 is derived from itself", 1);
    byte_buffer_free(&grid);

    uint8_t file[1024];
    const HeifReference alpha_cycle[] = {{"dimg", 1, 2}, {"auxl", 1, 2}};
    expect_heif_error(file, heif_with_references(file, alpha_cycle, 2), "is derived from itself",
                      1);
    HeifReference chain[33];
    for (int i = 0; i < 33; i++) chain[i] = (HeifReference){"dimg", (uint16_t)(100 - i),
                                                            (uint16_t)(99 - i)};
    expect_heif_error(file, heif_with_references(file, chain, 33), "more than 32 levels deep", 1);
    expect_heif_error(file, heif_with_references(file, chain + 1, 32), "HEIF:", 1);
    expect_heif_error(file, heif_with_references(file, chain + 1, 32), "levels deep", 0);
}

// A HEIF file of an 'ftyp' and a 'meta' box holding one 'grid' item whose
// descriptor (rows, columns, width, height; 32-bit sizes when `wide`) lies
// in 'idat': what the canvas check reads, before libheif.
static size_t heif_with_grid(uint8_t *out, uint32_t width, uint32_t height, int wide) {
    size_t at = put32(out, 20);
    memcpy(out + at, "ftypheic\0\0\0\0mif1", 16);
    at += 16;
    const uint32_t descriptor = wide ? 12 : 8, iinf = 14 + 21, iloc = 32, idat = 8 + descriptor;
    at += put32(out + at, 12 + iinf + iloc + idat);
    memcpy(out + at, "meta\0\0\0\0", 8);
    at += 8;
    at += put32(out + at, iinf);  // version 0, one entry: infe version 2, item 1, "grid"
    memcpy(out + at, "iinf\0\0\0\0\0\x01", 10);
    at += 10;
    at += put32(out + at, 21);
    memcpy(out + at, "infe\x02\0\0\0\0\x01\0\0grid", 16);
    at += 16;
    out[at++] = 0;
    at += put32(out + at, iloc);  // version 1, 32-bit offsets and lengths, item 1 in idat
    memcpy(out + at, "iloc\x01\0\0\0\x44\0\0\x01\0\x01\0\x01\0\0\0\x01", 20);
    at += 20;
    at += put32(out + at, 0);
    at += put32(out + at, descriptor);
    at += put32(out + at, idat);
    memcpy(out + at, "idat", 4);
    at += 4;
    out[at++] = 0, out[at++] = wide ? 1 : 0, out[at++] = 0, out[at++] = 0;  // 1 x 1 tiles
    at += wide ? put32(out + at, width) : put16(out + at, width);
    at += wide ? put32(out + at, height) : put16(out + at, height);
    return at;
}

// A grid whose canvas exceeds the pixel limit is refused before libheif
// allocates it (it trusts the grid's own size: heif_grid_canvas_bomb.heic
// is in test_fuzz_findings); one within the limit passes the check (libheif
// then refuses the file, which holds no image data, for its own reasons).
static void test_heif_canvases(void **state) {
    (void)state;
    uint8_t file[256];
    expect_heif_error(file, heif_with_grid(file, 20000, 20000, 0),
                      "image too large: HEIF grid (item 1) of 20000 x 20000 pixels exceeds limit "
                      "89478485 pixels", 1);
    expect_heif_error(file, heif_with_grid(file, 100000, 1000, 1),
                      "image too large: HEIF grid (item 1) of 100000 x 1000 pixels", 1);
    expect_heif_error(file, heif_with_grid(file, 9000, 9000, 1), "image too large", 0);
    expect_heif_error(file, heif_with_grid(file, 640, 480, 0), "image too large", 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fixtures),
        cmocka_unit_test(test_fuzz_findings),
        cmocka_unit_test(test_heif_grids),
        cmocka_unit_test(test_rle_tga_bomb),
        cmocka_unit_test(test_heif_references),
        cmocka_unit_test(test_heif_canvases),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
