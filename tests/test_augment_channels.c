// The deep path's views (docs/input-pipeline.md "Depth and channels"):
// view_render_float keeps 16-bit levels and float values (no 8-bit
// quantisation, no clamp where no colour op runs) and matches the 8-bit
// renderer on 8-bit images within a level; LightlyTrain's ChannelDrop draws
// channels by weight and keeps the others in order; the colour ops are off
// for images of other than 3 channels; --normalize / --channel-drop parse
// and their combinations are checked; the loader's float batches carry the
// channels, and an image whose channels cannot become N is skipped with
// the reason.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <tiffio.h>

#include "augment/augment.h"
#include "data/loader.h"
#include "format_encoders.h"
#include "image_fixtures.h"
#include "util/file.h"

// A view of the whole image at its own size: the resize is the identity.
static ViewParams whole(int width, int height) {
    ViewParams params = {.crop = {0, 0, width, height}};
    for (int c = 0; c < AUGMENT_MAX_CHANNELS; c++) params.channel_map[c] = (uint8_t)c;
    return params;
}

static void test_float_keeps_precision(void **state) {
    (void)state;
    enum { SIZE = 16, CHANNELS = 2 };
    float pixels[SIZE * SIZE * CHANNELS];
    // Channel 0: consecutive 16-bit levels (8 bits would merge them by 256s);
    // channel 1: float values outside [0, 1], as a float TIFF may hold.
    for (int i = 0; i < SIZE * SIZE; i++) {
        pixels[i * CHANNELS] = (float)(30000 + i) / 65535.0f;
        pixels[i * CHANNELS + 1] = -2.0f + 0.03125f * (float)i;
    }
    ViewSet set = {.count = 1, .global_count = 1};
    view_set_resize(&set, SIZE);
    view_set_channels(&set, CHANNELS, CHANNELS, NULL);
    const FloatImage source = {pixels, SIZE, SIZE, CHANNELS, SIZE * CHANNELS};
    const ViewParams params = whole(SIZE, SIZE);
    float out[SIZE * SIZE * CHANNELS];
    AugmentScratch *scratch = augment_scratch_create();
    ErrorMessage err = {{0}};
    assert_int_equal(view_render_float(&set.views[0], &params, &source,
                                       (PixelRect){0, 0, SIZE, SIZE}, out, scratch, &err),
                     0);
    for (int i = 0; i < SIZE * SIZE * CHANNELS; i++)
        if (fabsf(out[i] - pixels[i]) > 1e-6f)
            fail_msg("value %d: %.9g, the source %.9g", i, (double)out[i], (double)pixels[i]);
    for (int i = 1; i < SIZE * SIZE; i++)  // one 16-bit level apart, still
        assert_true(out[i * CHANNELS] - out[(i - 1) * CHANNELS] > 0.5f / 65535.0f);
    augment_scratch_destroy(scratch);
}

// 8-bit RGB through both renderers with crop, flip and blur: within a level.
static void test_float_matches_8bit(void **state) {
    (void)state;
    enum { WIDTH = 97, HEIGHT = 71, SIZE = 32 };
    uint8_t *rgb = malloc(WIDTH * HEIGHT * 3);
    float *floats = malloc(WIDTH * HEIGHT * 3 * sizeof *floats);
    fixture_pattern(rgb, WIDTH, HEIGHT, 7);
    for (int i = 0; i < WIDTH * HEIGHT * 3; i++) floats[i] = rgb[i] / 255.0f;
    ViewSet set;
    view_set_simclr(&set, SIZE);
    ViewTransform *t = &set.views[0];
    t->jitter_p = t->grey_p = 0.0f;  // the colour ops round in 8 bits after each op
    t->blur_p = 1.0f;
    const Image image = {rgb, WIDTH, HEIGHT, WIDTH * 3};
    const FloatImage source = {floats, WIDTH, HEIGHT, 3, WIDTH * 3};
    AugmentScratch *scratch = augment_scratch_create();
    uint8_t eight[SIZE * SIZE * 3];
    float deep[SIZE * SIZE * 3];
    ErrorMessage err = {{0}};
    for (uint64_t key = 0; key < 8; key++) {
        Rng rng = rng_make(1, 0, key, 0);
        ViewParams params;
        view_sample(t, WIDTH, HEIGHT, &rng, &params);
        const PixelRect all = {0, 0, WIDTH, HEIGHT};
        assert_int_equal(view_render(t, &params, &image, all, eight, scratch, &err), 0);
        assert_int_equal(view_render_float(t, &params, &source, all, deep, scratch, &err), 0);
        for (int i = 0; i < SIZE * SIZE * 3; i++)
            if (fabsf(deep[i] * 255.0f - eight[i]) > 1.0f)
                fail_msg("view %d value %d: float %.3f, 8-bit %d", (int)key, i,
                         (double)(deep[i] * 255.0f), eight[i]);
    }
    augment_scratch_destroy(scratch);
    free(rgb);
    free(floats);
}

// weights (1, 3, 0, 0), keep 3 of 4: channel 0 dropped a quarter of the
// time, channel 1 three quarters, 2 and 3 never; kept ones in order; the
// render reads them through the map.
static void test_channel_drop(void **state) {
    (void)state;
    ViewSet set;
    view_set_simclr(&set, 8);
    const float weights[4] = {1.0f, 3.0f, 0.0f, 0.0f};
    view_set_channels(&set, 4, 3, weights);
    ErrorMessage err = {{0}};
    assert_int_equal(view_transform_validate(&set.views[0], &err), 0);
    enum { DRAWS = 4000 };
    int dropped[4] = {0};
    for (uint64_t key = 0; key < DRAWS; key++) {
        Rng rng = rng_make(3, 0, key, 0);
        ViewParams params;
        view_sample(&set.views[0], 40, 40, &rng, &params);
        int seen[4] = {0};
        for (int k = 0; k < 3; k++) {
            if (k) assert_true(params.channel_map[k] > params.channel_map[k - 1]);
            seen[params.channel_map[k]] = 1;
        }
        for (int c = 0; c < 4; c++) dropped[c] += !seen[c];
    }
    assert_int_equal(dropped[2] + dropped[3], 0);
    assert_int_equal(dropped[0] + dropped[1], DRAWS);
    assert_true(abs(dropped[0] - DRAWS / 4) < DRAWS / 20);

    float pixels[4 * 4 * 4], out[8 * 8 * 3];
    for (int i = 0; i < 16; i++)
        for (int c = 0; c < 4; c++) pixels[i * 4 + c] = 0.1f * (float)(c + 1);
    const FloatImage source = {pixels, 4, 4, 4, 16};
    ViewParams params = whole(4, 4);
    params.channel_map[0] = 0, params.channel_map[1] = 2, params.channel_map[2] = 3;
    ViewTransform plain = set.views[0];
    plain.blur_p = 0.0f;
    AugmentScratch *scratch = augment_scratch_create();
    assert_int_equal(view_render_float(&plain, &params, &source, (PixelRect){0, 0, 4, 4}, out,
                                       scratch, &err),
                     0);
    for (int i = 0; i < 64; i++) {
        assert_true(fabsf(out[i * 3 + 0] - 0.1f) < 1e-6f);
        assert_true(fabsf(out[i * 3 + 1] - 0.3f) < 1e-6f);
        assert_true(fabsf(out[i * 3 + 2] - 0.4f) < 1e-6f);
    }
    augment_scratch_destroy(scratch);
    // LightlyTrain's check: at most KEEP weights of 0.
    const float zeros[4] = {0.0f, 0.0f, 0.0f, 1.0f};
    view_set_channels(&set, 4, 2, zeros);
    assert_int_equal(view_transform_validate(&set.views[0], &err), -1);
    assert_non_null(strstr(err.text, "drop weight 0"));
}

static void test_colour_ops_off(void **state) {
    (void)state;
    ViewSet set;
    view_set_dino(&set, 32, 16, 2);
    view_set_channels(&set, 4, 4, NULL);
    for (int v = 0; v < set.count; v++) {
        assert_true(set.views[v].jitter_p == 0.0f && set.views[v].grey_p == 0.0f &&
                    set.views[v].solarize_p == 0.0f);
        assert_true(set.views[v].blur_p > 0.0f);  // not a colour op
    }
    set.float_pixels = 1;
    set.normalize_count = 4;
    for (int c = 0; c < 4; c++) set.mean[c] = 0.5f, set.std[c] = 0.25f;
    ErrorMessage err = {{0}};
    assert_int_equal(view_set_validate(&set, &err), 0);
    assert_int_equal(view_set_pixel_bytes(&set), 16);
    set.views[1].solarize_p = 0.2f;
    assert_int_equal(view_set_validate(&set, &err), -1);
    assert_non_null(strstr(err.text, "solarize"));
    set.views[1].solarize_p = 0.0f;
    set.float_pixels = 0;  // 8-bit views are RGB
    assert_int_equal(view_set_validate(&set, &err), -1);
    // RGB images keep them (the 8-bit path's defaults)
    view_set_dino(&set, 32, 16, 2);
    view_set_channels(&set, 3, 3, NULL);
    assert_true(set.views[0].jitter_p > 0.0f && set.views[1].solarize_p > 0.0f);
}

static void test_settings(void **state) {
    (void)state;
    ChannelSettings s = {.channels = 4};
    ErrorMessage err = {{0}};
    assert_int_equal(channel_normalize_parse("0.1,0.2,0.3,0.4:1,2,3,4", &s, &err), 0);
    assert_int_equal(s.normalize_count, 4);
    assert_true(s.mean[3] == 0.4f && s.std[1] == 2.0f);
    assert_int_equal(channel_settings_check(&s, &err), 0);
    const char *bad[] = {"0.1,0.2", "0.1,0.2:1", "a,b:1,2", "0.1,0.2:1,0", "0.1,:1,2", ":", NULL};
    for (int i = 0; bad[i]; i++) {
        ChannelSettings t = {.channels = 2};
        if (channel_normalize_parse(bad[i], &t, &err) == 0) fail_msg("accepted %s", bad[i]);
        assert_non_null(strstr(err.text, "--normalize"));
    }
    ChannelSettings missing = {.channels = 4};  // ImageNet's are for RGB only
    assert_int_equal(channel_settings_check(&missing, &err), -1);
    assert_non_null(strstr(err.text, "--normalize"));
    ChannelSettings drop = {.channels = 4};
    assert_int_equal(channel_drop_parse("3:1,1,1,0", &drop, &err), 0);
    assert_int_equal(channel_normalize_parse("0.5,0.5,0.5:0.2,0.2,0.2", &drop, &err), 0);
    assert_int_equal(channel_settings_check(&drop, &err), 0);
    assert_int_equal(channel_settings_model_channels(&drop), 3);
    drop.normalize_count = 4;  // the model takes 3
    assert_int_equal(channel_settings_check(&drop, &err), -1);
    const char *bad_drops[] = {"3:1,1,1", "4:1,1,1,1", "1:0,0,1,1", "x:1", "2.5:1,1,1,1", NULL};
    for (int i = 0; bad_drops[i]; i++) {
        ChannelSettings t = {.channels = 4, .normalize_count = 4};
        if (channel_drop_parse(bad_drops[i], &t, &err) == 0) {
            t.normalize_count = t.keep;
            if (channel_settings_check(&t, &err) == 0) fail_msg("accepted %s", bad_drops[i]);
        }
        assert_non_null(strstr(err.text, "--channel-drop"));
    }
    // A bad ChannelDrop is named as such whatever --normalize holds (the
    // model's channel count that --normalize must match follows from it).
    const char *bad_keeps[] = {"5:1,1,1,1", "3:1,1", "3:-1,1,1,1", NULL};
    for (int i = 0; bad_keeps[i]; i++) {
        for (int count = 3; count <= 5; count++) {
            ChannelSettings t = {.channels = 4, .normalize_count = count};
            assert_int_equal(channel_drop_parse(bad_keeps[i], &t, &err), 0);
            assert_int_equal(channel_settings_check(&t, &err), -1);
            if (!strstr(err.text, "--channel-drop"))
                fail_msg("%s with %d normalised channels: %s", bad_keeps[i], count, err.text);
        }
    }
    // The checkpoint's text reads back as the same values.
    ViewSet set;
    view_set_simclr(&set, 16);
    ChannelSettings four = {.channels = 4};
    assert_int_equal(channel_normalize_parse("0.123456789,2,-3,4e-3:1,2,3,0.7", &four, &err), 0);
    view_set_apply_channels(&set, &four, 1);
    char text[512];
    channel_normalize_format(&set, text, sizeof text);
    ChannelSettings back = {.channels = 4};
    assert_int_equal(channel_normalize_parse(text, &back, &err), 0);
    assert_memory_equal(back.mean, four.mean, 4 * sizeof(float));
    assert_memory_equal(back.std, four.std, 4 * sizeof(float));
    // ... in the shortest decimals that do (train.log, the resume check).
    assert_string_equal(text, "0.12345679,2,-3,0.004:1,2,3,0.7");
    view_set_simclr(&set, 16);  // ImageNet's
    channel_normalize_format(&set, text, sizeof text);
    assert_string_equal(text, "0.485,0.456,0.406:0.229,0.224,0.225");
}

static _Atomic int mismatch_warnings;

static void count_mismatch(void *context, const char *message) {
    (void)context;
    if (strstr(message, "rgb8.png") && strstr(message, "cannot be read as 4"))
        atomic_fetch_add(&mismatch_warnings, 1);
}

static void copy_fixture(const char *root, const char *name, const char *as) {
    char path[4096];
    snprintf(path, sizeof path, "tests/fixtures/channels/%s", name);
    ByteBuffer file = {0};
    ErrorMessage err = {{0}};
    if (file_read_all(path, &file, (size_t)1 << 20, &err)) fail_msg("%s", err.text);
    snprintf(path, sizeof path, "%s/%s", root, as);
    assert_int_equal(fixture_write_file(path, file.data, file.size), 0);
    byte_buffer_free(&file);
}

// A loader of the folder's images as 8 x 8 float views of 4 channels,
// normalised by mean 0 and std 1 (the values as read), keep_last on.
static Loader *four_channel_loader(const char *root, Dataset *dataset, int batch_size,
                                   int workers) {
    ErrorMessage err = {{0}};
    if (dataset_scan(root, dataset, &err)) fail_msg("%s", err.text);
    LoaderConfig config = {.dataset = dataset, .batch_size = batch_size, .num_workers = workers,
                           .world_size = 1, .keep_last = 1, .warn = count_mismatch};
    view_set_resize(&config.views, 8);
    ChannelSettings settings = {.channels = 4, .normalize_count = 4,
                                .mean = {0, 0, 0, 0}, .std = {1, 1, 1, 1}};
    view_set_apply_channels(&config.views, &settings, 1);
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    return loader;
}

// Float batches of 4-band 16-bit TIFFs: 16 bytes a pixel, values that are
// not 8-bit levels; the RGB PNG among them is skipped with the reason
// (keep_last: flagged, its pixels zero).
static void test_loader_float(void **state) {
    (void)state;
    char *root = fixture_tempdir();
    copy_fixture(root, "bands4_u16.tif", "a.tif");
    copy_fixture(root, "rgb8.png", "rgb8.png");
    copy_fixture(root, "bands4_u16.tif", "z.tif");
    Dataset dataset;
    Loader *loader = four_channel_loader(root, &dataset, 3, 2);
    ErrorMessage err = {{0}};
    const Batch *batch = loader_next(loader, NULL, &err);
    assert_non_null(batch);
    assert_int_equal(batch->float_pixels, 1);
    assert_int_equal(batch->channels, 4);
    assert_int_equal(batch->pixel_bytes, 16);
    assert_int_equal(batch_view_bytes(batch, 1), 3 * 8 * 8 * 16);
    // scan order: a.tif, rgb8.png, z.tif
    assert_int_equal(batch->failed[0], 0);
    assert_int_equal(batch->failed[1], 1);
    assert_int_equal(batch->failed[2], 0);
    const float *values = (const float *)batch->views[0];
    int off_level = 0;
    for (int i = 0; i < 8 * 8 * 4; i++) {
        const float level = values[i] * 255.0f;
        off_level += fabsf(level - roundf(level)) > 0.01f;
        assert_true(values[i] == ((const float *)batch->views[0])[2 * 8 * 8 * 4 + i]);
    }
    assert_true(off_level > 8 * 8 * 4 / 2);  // 16-bit values, not 8-bit levels
    loader_release(loader, batch);
    loader_destroy(loader);
    assert_int_equal(atomic_load(&mismatch_warnings), 1);
    dataset_free(&dataset);
    fixture_remove_tree(root);
    free(root);
}

// A 32-bit BMP with an alpha mask read with --num-channels 4: its four
// channels, alpha the fourth (it was read as RGB and skipped as "3
// channel(s) cannot be read as 4"); the 4-band TIFF beside it as before.
static void test_loader_rgba_bmp(void **state) {
    (void)state;
    char *root = fixture_tempdir();
    copy_fixture(root, "rgba32_v5.bmp", "a.bmp");
    copy_fixture(root, "bands4_u16.tif", "b.tif");
    Dataset dataset;
    Loader *loader = four_channel_loader(root, &dataset, 2, 1);
    ErrorMessage err = {{0}};
    const Batch *batch = loader_next(loader, NULL, &err);
    assert_non_null(batch);
    assert_int_equal(batch->channels, 4);
    assert_int_equal(batch->failed[0], 0);  // scan order: a.bmp, b.tif
    assert_int_equal(batch->failed[1], 0);
    const float *values = (const float *)batch->views[0];
    float lowest = 1, highest = 0;
    for (int i = 3; i < 8 * 8 * 4; i += 4) {
        assert_true(values[i] >= 0 && values[i] <= 1);
        lowest = fminf(lowest, values[i]);
        highest = fmaxf(highest, values[i]);
    }
    assert_true(highest - lowest > 0.5f);  // the fixture's alpha ramps over its range
    loader_release(loader, batch);
    loader_destroy(loader);
    dataset_free(&dataset);
    fixture_remove_tree(root);
    free(root);
}

static _Atomic int range_warnings;
static char range_warning[1024];

static void count_out_of_range(void *context, const char *message) {
    (void)context;
    if (strstr(message, "out of range")) {
        snprintf(range_warning, sizeof range_warning, "%s", message);
        atomic_fetch_add(&range_warnings, 1);
    }
}

// Float TIFFs read with --normalize 0.5:0.25; b.tif holds GeoTIFF's usual
// no-data value -3.4028235e38 in a 5 x 5 corner, c.tif 1e30 in one sample
// (hostile testing: a NaN loss at step 0, NaN weights after the update).
// Both are skipped with the value and the remedy named, whatever the crops;
// the others are read, and every value of the batch stays finite once
// normalised.
static void test_loader_skips_samples_out_of_range(void **state) {
    (void)state;
    enum { SIDE = 40 };
    char *root = fixture_tempdir();
    float *values = malloc(SIDE * SIDE * sizeof *values);
    const char *names[] = {"a.tif", "b.tif", "c.tif", "d.tif"};
    for (int f = 0; f < 4; f++) {
        for (int i = 0; i < SIDE * SIDE; i++) values[i] = (float)((i * 7 + f) % 97) / 96.0f;
        if (f == 1)
            for (int y = SIDE - 5; y < SIDE; y++)
                for (int x = SIDE - 5; x < SIDE; x++) values[y * SIDE + x] = -3.4028235e38f;
        if (f == 2) values[SIDE * SIDE - 1] = 1e30f;
        const TiffSpec spec = {32, SAMPLEFORMAT_IEEEFP, 1, PHOTOMETRIC_MINISBLACK, 1, 0, 8,
                               COMPRESSION_NONE, 0, 0, 0};
        Bytes file = encode_tiff(&spec, values, SIDE, SIDE, NULL);
        char path[4096];
        snprintf(path, sizeof path, "%s/%s", root, names[f]);
        assert_int_equal(fixture_write_file(path, file.data, file.size), 0);
        free(file.data);
    }
    free(values);
    Dataset dataset;
    ErrorMessage err = {{0}};
    if (dataset_scan(root, &dataset, &err)) fail_msg("%s", err.text);
    LoaderConfig config = {.dataset = &dataset, .batch_size = 4, .num_workers = 2,
                           .world_size = 1, .keep_last = 1, .warn = count_out_of_range};
    // Crops of a small part of the image: the corner is outside most of them,
    // and the first read must still find it.
    view_set_simclr(&config.views, 8);
    for (int v = 0; v < config.views.count; v++) {
        config.views.views[v].scale_min = 0.05f;
        config.views.views[v].scale_max = 0.1f;
    }
    ChannelSettings settings = {.channels = 1, .normalize_count = 1, .mean = {0.5f},
                                .std = {0.25f}};
    view_set_apply_channels(&config.views, &settings, 1);
    atomic_store(&range_warnings, 0);
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    const Batch *batch = loader_next(loader, NULL, &err);
    assert_non_null(batch);
    const int expected_failed[4] = {0, 1, 1, 0};  // scan order a, b, c, d
    for (int i = 0; i < 4; i++) assert_int_equal(batch->failed[i], expected_failed[i]);
    for (int v = 0; v < batch->view_count; v++) {
        const float *view = (const float *)batch->views[v];
        for (int i = 0; i < 4 * 8 * 8; i++)
            assert_true(fabsf((view[i] - 0.5f) / 0.25f) <= (float)VIEW_NORMALIZED_LIMIT);
    }
    loader_release(loader, batch);
    loader_destroy(loader);
    assert_int_equal(atomic_load(&range_warnings), 2);
    if (!strstr(range_warning, "out of range: sample ") ||
        !strstr(range_warning, "give --normalize MEAN:STD matching the data"))
        fail_msg("the reason does not name the value and the remedy: %s", range_warning);
    // A std so small that [0, 1], where 8- and 16-bit samples lie, would
    // leave the range is refused at start-up rather than image by image.
    settings.std[0] = 1e-6f;
    view_set_apply_channels(&config.views, &settings, 1);
    assert_null(loader_create(&config, &err));
    if (!strstr(err.text, "--normalize: samples of 8- and 16-bit images lie in [0, 1]"))
        fail_msg("the start-up refusal does not name the normalisation: %s", err.text);
    dataset_free(&dataset);
    fixture_remove_tree(root);
    free(root);
}

// The sample range per image channel: mean +- 65504 std of the model
// channel it becomes; with ChannelDrop (4 channels, 2 kept) channel 0 can
// only become model channel 0, channel 3 only 1, channels 1 and 2 either.
static void test_sample_range(void **state) {
    (void)state;
    ViewSet views;
    view_set_resize(&views, 8);
    ChannelSettings settings = {.channels = 4, .keep = 2, .drop_count = 4,
                                .drop_weights = {1, 1, 1, 1}, .normalize_count = 2,
                                .mean = {0.0f, 10.0f}, .std = {1.0f, 2.0f}};
    view_set_apply_channels(&views, &settings, 1);
    float low[4], high[4];
    view_set_sample_range(&views, low, high);
    const float limit = (float)VIEW_NORMALIZED_LIMIT;
    assert_float_equal(low[0], -limit, 0.01);
    assert_float_equal(high[0], limit, 0.01);
    for (int c = 1; c <= 2; c++) {  // the intersection of both ranges
        assert_float_equal(low[c], -limit, 0.01);
        assert_float_equal(high[c], limit, 0.01);
    }
    assert_float_equal(low[3], 10.0f - 2 * limit, 0.01);
    assert_float_equal(high[3], 10.0f + 2 * limit, 0.01);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_float_keeps_precision),
        cmocka_unit_test(test_float_matches_8bit),
        cmocka_unit_test(test_channel_drop),
        cmocka_unit_test(test_colour_ops_off),
        cmocka_unit_test(test_settings),
        cmocka_unit_test(test_loader_float),
        cmocka_unit_test(test_loader_rgba_bmp),
        cmocka_unit_test(test_loader_skips_samples_out_of_range),
        cmocka_unit_test(test_sample_range),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
