// TensorBoard projector files of `embed --format tensorboard`
// (src/embed/projector.h), checked without Python: the config's text, the
// tensor TSV read back, the metadata's names and folders (tabs in a name
// replaced, bytes that are not UTF-8 written as \xNN), and the sprite
// decoded: every image's thumbnail in its cell, aspect kept on white, a
// vanished file grey; the sprite layout for large datasets; the output
// folder's checks. tools/check_projector.py reads the
// same files with TensorBoard's own plugin.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "decode/decode.h"
#include "embed/projector.h"
#include "image_fixtures.h"
#include "util/file.h"
#include "util/output_path.h"

#define IMAGES 5
#define DIM 3

// Solid-colour images of several shapes and formats; the last one is
// deleted before the projector is written (its thumbnail stays grey).
static const struct {
    const char *name;
    int width, height;
    uint8_t rgb[3];
    int jpeg;
} IMAGE_SPECS[IMAGES] = {
    {"cats/a.png", 40, 20, {200, 30, 30}, 0},   // wide: 64 x 32 in its cell
    {"cats/b.jpg", 16, 48, {30, 200, 30}, 1},   // tall: 21 x 64
    {"dogs/x/c.png", 64, 64, {30, 30, 200}, 0},
    {"top\tlevel.png", 8, 8, {250, 250, 0}, 0},  // a tab in the name, no folder
    {"gone\xff.png", 8, 8, {0, 0, 0}, 0},  // not UTF-8: \xff in the metadata
};

static const float FEATURES[IMAGES][DIM] = {
    {0.5f, -1.25f, 3e-8f}, {123456.7f, 0, -0.1f}, {1, 2, 3}, {-7e30f, 1e-30f, 0.3333333f},
    {0, 0, 0},
};

static char *root, *out;

static int setup(void **state) {
    root = fixture_tempdir();
    char path[4096];
    for (int i = 0; i < IMAGES; i++) {
        const int w = IMAGE_SPECS[i].width, h = IMAGE_SPECS[i].height;
        uint8_t *rgb = malloc((size_t)w * h * 3);
        for (int p = 0; p < w * h; p++) memcpy(rgb + p * 3, IMAGE_SPECS[i].rgb, 3);
        snprintf(path, sizeof path, "%s/images/%s", root, IMAGE_SPECS[i].name);
        ErrorMessage err = {{0}};
        char *slash = strrchr(path, '/');
        *slash = '\0';
        if (output_folder_create(path, &err) != 0) fail_msg("%s", err.text);
        *slash = '/';
        assert_int_equal(IMAGE_SPECS[i].jpeg ? fixture_write_jpeg(path, w, h, rgb, 95)
                                             : fixture_write_png(path, w, h, rgb),
                         0);
        free(rgb);
    }
    snprintf(path, sizeof path, "%s/images/%s", root, IMAGE_SPECS[IMAGES - 1].name);
    unlink(path);
    out = malloc(4096);
    snprintf(out, 4096, "%s/projector/run", root);
    return 0;
}

static int teardown(void **state) {
    fixture_remove_tree(root);
    free(root);
    free(out);
    return 0;
}

static char *read_text(const char *name) {
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, name);
    ByteBuffer buffer = {0};
    ErrorMessage err = {{0}};
    if (file_read_all(path, &buffer, 1 << 24, &err) != 0) fail_msg("%s", err.text);
    char *text = malloc(buffer.size + 1);
    memcpy(text, buffer.data, buffer.size);
    text[buffer.size] = '\0';
    byte_buffer_free(&buffer);
    return text;
}

static void write_projector(ProjectorSummary *summary) {
    char images[4096];
    snprintf(images, sizeof images, "%s/images", root);
    const char *names[IMAGES];
    for (int i = 0; i < IMAGES; i++) names[i] = IMAGE_SPECS[i].name;
    const EmbeddingTable table = {&FEATURES[0][0], IMAGES, DIM, names};
    const ProjectorOptions options = {images, 0};
    ErrorMessage err = {{0}};
    if (projector_write(out, &table, &options, summary, &err) != 0) fail_msg("%s", err.text);
}

static void test_text_files(void **state) {
    (void)state;
    ProjectorSummary summary;
    write_projector(&summary);
    assert_int_equal(summary.cell, PROJECTOR_CELL);
    assert_int_equal(summary.columns, 3);
    assert_int_equal(summary.unreadable, 1);

    char *config = read_text(PROJECTOR_CONFIG);
    assert_string_equal(config,
                        "embeddings {\n"
                        "  tensor_name: \"embeddings\"\n"
                        "  tensor_path: \"tensors.tsv\"\n"
                        "  metadata_path: \"metadata.tsv\"\n"
                        "  sprite {\n"
                        "    image_path: \"sprite.png\"\n"
                        "    single_image_dim: 64\n"
                        "    single_image_dim: 64\n"
                        "  }\n"
                        "}\n");
    free(config);

    char *metadata = read_text(PROJECTOR_METADATA);
    assert_string_equal(metadata,
                        "filename\tfolder\n"
                        "cats/a.png\tcats\n"
                        "cats/b.jpg\tcats\n"
                        "dogs/x/c.png\tdogs/x\n"
                        "top level.png\t.\n"
                        "gone\\xff.png\t.\n");
    free(metadata);

    // N lines of D tab-separated floats, each the feature to %.7g.
    char *tensors = read_text(PROJECTOR_TENSORS), *cursor = tensors;
    for (int i = 0; i < IMAGES; i++) {
        for (int d = 0; d < DIM; d++) {
            char *end;
            const float value = strtof(cursor, &end);
            const float expected = FEATURES[i][d];
            if (end == cursor || fabsf(value - expected) > 5e-7f * fabsf(expected))
                fail_msg("row %d dim %d: %g, expected %g", i, d, (double)value, (double)expected);
            assert_int_equal(*end, d + 1 < DIM ? '\t' : '\n');
            cursor = end + 1;
        }
    }
    assert_int_equal(*cursor, '\0');
    free(tensors);
}

static const uint8_t *pixel(const DecodedImage *sprite, int x, int y) {
    return sprite->image.pixels + (size_t)y * sprite->image.stride + (size_t)x * 3;
}

static void assert_rgb(const uint8_t *got, const uint8_t *expected, int tolerance,
                       const char *what) {
    for (int c = 0; c < 3; c++)
        if (abs((int)got[c] - (int)expected[c]) > tolerance)
            fail_msg("%s: (%d, %d, %d), expected (%d, %d, %d)", what, got[0], got[1], got[2],
                     expected[0], expected[1], expected[2]);
}

// Cells of 64 px, 3 per row: each thumbnail centred, the rest white; the
// deleted file's cell grey.
static void test_sprite(void **state) {
    (void)state;
    ProjectorSummary summary;
    write_projector(&summary);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, PROJECTOR_SPRITE);
    ByteBuffer file = {0};
    ErrorMessage err = {{0}};
    if (file_read_all(path, &file, 1 << 24, &err) != 0) fail_msg("%s", err.text);
    Decoder *decoder = decoder_create(0);
    DecodedImage sprite;
    if (decoder_decode(decoder, file.data, file.size, NULL, &sprite, &err) != 0)
        fail_msg("%s", err.text);
    assert_int_equal(sprite.image.width, 3 * 64);
    assert_int_equal(sprite.image.height, 2 * 64);
    const uint8_t white[3] = {255, 255, 255}, grey[3] = {128, 128, 128};
    for (int i = 0; i < IMAGES; i++) {
        const int x0 = (i % 3) * 64, y0 = (i / 3) * 64;
        char what[64];
        snprintf(what, sizeof what, "image %d's cell centre", i);
        const int jpeg_tolerance = IMAGE_SPECS[i].jpeg ? 4 : 1;
        assert_rgb(pixel(&sprite, x0 + 32, y0 + 32), i == 4 ? grey : IMAGE_SPECS[i].rgb,
                   jpeg_tolerance, what);
    }
    // The wide image fills rows 16..47 of its cell; the tall one columns 21..41.
    assert_rgb(pixel(&sprite, 5, 5), white, 0, "above the wide thumbnail");
    assert_rgb(pixel(&sprite, 5, 17), IMAGE_SPECS[0].rgb, 1, "the wide thumbnail's edge");
    assert_rgb(pixel(&sprite, 64 + 5, 32), white, 0, "beside the tall thumbnail");
    assert_rgb(pixel(&sprite, 64 + 32, 1), IMAGE_SPECS[1].rgb, 4, "the tall thumbnail's top");
    // The empty sixth cell stays white.
    assert_rgb(pixel(&sprite, 2 * 64 + 32, 64 + 32), white, 0, "the empty cell");
    decoder_destroy(decoder);
    byte_buffer_free(&file);
}

static void test_sprite_layout(void **state) {
    (void)state;
    const struct { size_t count; int columns, cell; } cases[] = {
        {1, 1, 64},      {2, 2, 64},        {5, 3, 64},         {16384, 128, 64},
        {16385, 129, 63}, {100000, 317, 25}, {2048 * 2048, 2048, 4}, {2048 * 2048 + 1, 2049, 0},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        int columns, cell;
        projector_sprite_layout(cases[i].count, &columns, &cell);
        if (columns != cases[i].columns || cell != cases[i].cell)
            fail_msg("%zu images: %d columns of %d px, expected %d of %d", cases[i].count,
                     columns, cell, cases[i].columns, cases[i].cell);
    }
}

// A folder that holds a projector needs --overwrite; a file is no folder.
static void test_output_checks(void **state) {
    (void)state;
    ProjectorSummary summary;
    write_projector(&summary);
    ErrorMessage err = {{0}};
    assert_int_equal(projector_check_output(out, 0, &err), -1);
    assert_non_null(strstr(err.text, "already holds a projector"));
    assert_int_equal(projector_check_output(out, 1, &err), 0);
    char path[4096];
    snprintf(path, sizeof path, "%s/%s", out, PROJECTOR_CONFIG);
    assert_int_equal(projector_check_output(path, 1, &err), -1);
    assert_non_null(strstr(err.text, "not a folder"));
    snprintf(path, sizeof path, "%s/fresh/new", root);
    assert_int_equal(projector_check_output(path, 0, &err), 0);
}

static void test_logdir(void **state) {
    (void)state;
    const struct { const char *dir, *logdir; } cases[] = {
        {"proj", "proj"},
        {"out/run1/plugins/org_tensorflow_tensorboard_projector", "out/run1"},
        {"out/run1/plugins/org_tensorflow_tensorboard_projector/", "out/run1"},
        {"/abs/plugins/org_tensorflow_tensorboard_projector", "/abs"},
        {"plugins/org_tensorflow_tensorboard_projector", "."},
        {"/plugins/org_tensorflow_tensorboard_projector", "/"},
        {"x/myplugins/org_tensorflow_tensorboard_projector",
         "x/myplugins/org_tensorflow_tensorboard_projector"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        char logdir[256];
        projector_logdir(cases[i].dir, logdir, sizeof logdir);
        assert_string_equal(logdir, cases[i].logdir);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_text_files),
        cmocka_unit_test(test_sprite),
        cmocka_unit_test(test_sprite_layout),
        cmocka_unit_test(test_output_checks),
        cmocka_unit_test(test_logdir),
    };
    return cmocka_run_group_tests_name("projector", tests, setup, teardown);
}
