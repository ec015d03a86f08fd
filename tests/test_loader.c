// Tests of the data loader: batches identical whatever the worker count,
// corrupt files skipped, counted and substituted (batch shape kept), resume
// from a batch number, clean shutdown at any moment, fatal error when no
// image is readable.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/load_plan.h"
#include "data/loader.h"
#include "data/scan.h"
#include "image_fixtures.h"
#include "util/cpu.h"

enum { GOOD_IMAGES = 40, CORRUPT_FILES = 3, BATCH = 8, VIEW_SIZE = 32 };

typedef FixtureFolder Fixture;

static _Atomic int warnings_seen;

static void count_warning(void *context, const char *message) {
    (void)context;
    assert_non_null(strstr(message, "skipping '"));
    atomic_fetch_add(&warnings_seen, 1);
}

static int setup_folder(void **state) {
    Fixture *fixture = calloc(1, sizeof *fixture);
    fixture->root = fixture_tempdir();
    char path[4096];
    uint8_t *rgb = malloc(300 * 300 * 3);
    for (int i = 0; i < GOOD_IMAGES; i++) {
        const int width = 40 + (i * 37) % 260, height = 40 + (i * 53) % 200;
        fixture_pattern(rgb, width, height, (uint32_t)i);
        snprintf(path, sizeof path, "%s/class%d/img%03d.%s", fixture->root, i % 3, i,
                 i % 2 ? "png" : "jpg");
        assert_int_equal(i % 2 ? fixture_write_png(path, width, height, rgb)
                               : fixture_write_jpeg(path, width, height, rgb, 90),
                         0);
    }
    free(rgb);
    snprintf(path, sizeof path, "%s/bad/garbage.jpg", fixture->root);
    assert_int_equal(fixture_write_file(path, "this is not a jpeg", 18), 0);
    snprintf(path, sizeof path, "%s/bad/empty.png", fixture->root);
    assert_int_equal(fixture_write_file(path, "", 0), 0);
    snprintf(path, sizeof path, "%s/bad/truncated.jpg", fixture->root);
    uint8_t *jpeg = NULL;
    size_t jpeg_size = 0;
    uint8_t small[64 * 64 * 3];
    fixture_pattern(small, 64, 64, 99);
    assert_int_equal(fixture_encode_jpeg(64, 64, small, 90, &jpeg, &jpeg_size), 0);
    assert_int_equal(fixture_write_file(path, jpeg, jpeg_size / 3), 0);
    free(jpeg);
    snprintf(path, sizeof path, "%s/notes.txt", fixture->root);
    assert_int_equal(fixture_write_file(path, "hello", 5), 0);
    ErrorMessage err;
    if (dataset_scan(fixture->root, &fixture->dataset, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(fixture->dataset.count, GOOD_IMAGES + CORRUPT_FILES);
    *state = fixture;
    return 0;
}

static LoaderConfig base_config(const Fixture *fixture, int workers) {
    LoaderConfig config = {
        .dataset = &fixture->dataset,
        .batch_size = BATCH,
        .num_workers = workers,
        .seed = 1234,
        .world_size = 1,
        .shuffle = 1,
        .warn = count_warning,
    };
    view_set_simclr(&config.views, VIEW_SIZE);
    return config;
}

// Copies every batch of a run (pixels and indices) into one buffer.
static uint8_t *run_loader(const LoaderConfig *config, int batches, size_t *total_bytes,
                           LoaderStats *stats) {
    ErrorMessage err;
    Loader *loader = loader_create(config, &err);
    if (!loader) fail_msg("%s", err.text);
    uint8_t *all = NULL;
    size_t used = 0;
    for (int b = 0; b < batches; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("batch %d: %s", b, err.text);
        assert_int_equal(batch->index, config->start_batch + (uint64_t)b);
        assert_int_equal(batch->size, config->batch_size);
        const size_t pixels = batch_view_bytes(batch, batch->view_count);
        const size_t indices = (size_t)batch->size * sizeof *batch->sample_indices;
        all = realloc(all, used + pixels + indices);
        // Views are contiguous in the slot buffer.
        memcpy(all + used, batch->views[0], pixels);
        memcpy(all + used + pixels, batch->sample_indices, indices);
        used += pixels + indices;
        loader_release(loader, batch);
    }
    if (stats) *stats = loader_stats(loader);
    loader_destroy(loader);
    *total_bytes = used;
    return all;
}

// Two loaders give the same first `batches` batches, byte for byte.
static void assert_same_batches(const LoaderConfig *first, const LoaderConfig *second,
                                int batches) {
    size_t size_first = 0, size_second = 0;
    uint8_t *a = run_loader(first, batches, &size_first, NULL);
    uint8_t *b = run_loader(second, batches, &size_second, NULL);
    assert_int_equal(size_first, size_second);
    assert_memory_equal(a, b, size_first);
    free(a);
    free(b);
}

static void test_same_batches_with_1_and_7_workers(void **state) {
    const Fixture *fixture = *state;
    // 43 files, batch 8: 5 batches per epoch; 12 batches cross two epoch ends.
    LoaderConfig one = base_config(fixture, 1), seven = base_config(fixture, 7);
    assert_same_batches(&one, &seven, 12);
}

// Samples the loader has produced once `seconds` passed (or, with
// until_more_than > 0, as soon as more than that many are): what the
// workers decoded while the caller held its batch.
static uint64_t images_after(const Loader *loader, double seconds, uint64_t until_more_than) {
    const double end = time_now() + seconds;
    uint64_t images = loader_stats(loader).images;
    while (time_now() < end && !(until_more_than && images > until_more_than)) {
        sleep_seconds(0.01);
        images = loader_stats(loader).images;
    }
    return images;
}

// --num-workers 0 (loader_set_workers): the batches of one worker, and
// nothing decoded ahead of the batch asked for; the default ring (one
// worker) decodes ahead while the caller holds a batch.
static void test_no_workers_ahead(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig none = base_config(fixture, 7), one = base_config(fixture, 1);
    loader_set_workers(&none, 0);
    assert_int_equal(none.num_workers, 1);
    assert_same_batches(&none, &one, 6);
    ErrorMessage err;
    for (int ahead = 0; ahead < 2; ahead++) {
        Loader *loader = loader_create(ahead ? &one : &none, &err);
        assert_non_null(loader);
        for (uint64_t index = 0; index < 3; index++) {
            const Batch *batch = loader_next(loader, NULL, &err);
            assert_non_null(batch);
            const uint64_t held = (index + 1) * BATCH;
            if (ahead)
                assert_true(images_after(loader, 10.0, held) > held);
            else
                assert_int_equal(images_after(loader, 0.3, 0), held);
            loader_release(loader, batch);
        }
        loader_destroy(loader);
    }
}

static void test_dino_multi_crop_shapes_and_determinism(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig config = base_config(fixture, 3);
    view_set_dino(&config.views, 48, 24, 6);
    config.total_batches = 3;
    ErrorMessage err;
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    const Batch *batch = loader_next(loader, NULL, &err);
    assert_non_null(batch);
    assert_int_equal(batch->view_count, 8);
    assert_int_equal(batch->view_size[0], 48);
    assert_int_equal(batch->view_size[1], 48);
    for (int v = 2; v < 8; v++) assert_int_equal(batch->view_size[v], 24);
    // The two global views of one sample are different random crops.
    assert_memory_not_equal(batch->views[0], batch->views[1], 48 * 48 * 3);
    loader_release(loader, batch);
    for (int i = 0; i < 2; i++) {
        batch = loader_next(loader, NULL, &err);
        assert_non_null(batch);
        loader_release(loader, batch);
    }
    assert_null(loader_next(loader, NULL, &err));  // total_batches reached
    assert_string_equal(err.text, "");
    loader_destroy(loader);
}

// DINOv31's views through the decoder processes: each position's geometry
// (view after view) is its image's, the clean renders share their parent's
// crop and flip, the PaKA locals lie inside theirs; it matches load_plan's.
static void test_view_geometry(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig config = base_config(fixture, 2);
    assert_int_equal(view_set_dinov31(&config.views, 48, 16, 1, 2, NULL), 0);
    config.total_batches = 1;
    ErrorMessage err;
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    const Batch *batch = loader_next(loader, NULL, &err);
    assert_non_null(batch);
    assert_non_null(batch->geometry);
    const ViewSet *views = &config.views;
    for (int b = 0; b < batch->size; b++) {
        const ViewGeometry *first = &batch->geometry[b];
        char path[4096];
        snprintf(path, sizeof path, "%s", dataset_path(&fixture->dataset,
                                                       batch->sample_indices[b]));
        const int i = atoi(strrchr(path, '/') + 4);  // imgNNN: its size by setup_folder's rule
        assert_int_equal(first->image_width, 40 + (i * 37) % 260);
        assert_int_equal(first->image_height, 40 + (i * 53) % 200);
        for (int v = 0; v < views->count; v++) {
            const ViewGeometry *g = &batch->geometry[(size_t)v * batch->size + b];
            const PixelRect image = {0, 0, g->image_width, g->image_height};
            assert_true(pixel_rect_contains(image, g->crop) && g->crop.width > 0);
            const ViewGeometry *parent =
                &batch->geometry[(size_t)views->views[v].parent * batch->size + b];
            if (views->views[v].coupling == VIEW_COUPLING_SAME) {
                assert_memory_equal(&g->crop, &parent->crop, sizeof g->crop);
                assert_int_equal(g->flip, parent->flip);
            } else if (views->views[v].coupling == VIEW_COUPLING_INSIDE) {
                assert_true(pixel_rect_contains(parent->crop, g->crop));
            }
        }
    }
    loader_release(loader, batch);
    loader_destroy(loader);
}

static void test_corrupt_files_skipped_counted_substituted(void **state) {
    const Fixture *fixture = *state;
    atomic_store(&warnings_seen, 0);
    LoaderConfig config = base_config(fixture, 2);
    // Three epochs: every file is requested at least once (5 batches of 8 out
    // of 43 per epoch, different shuffles), each failure counted once.
    ErrorMessage err;
    Loader *loader = loader_create(&config, &err);
    assert_non_null(loader);
    int bad_seen_in_batches = 0;
    for (int b = 0; b < 15; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("%s", err.text);
        for (int i = 0; i < batch->size; i++) {
            const char *path = dataset_path(&fixture->dataset, batch->sample_indices[i]);
            bad_seen_in_batches += strncmp(path, "bad/", 4) == 0;
        }
        loader_release(loader, batch);
    }
    const LoaderStats stats = loader_stats(loader);
    loader_destroy(loader);
    assert_int_equal(bad_seen_in_batches, 0);
    assert_true(stats.skipped_files <= CORRUPT_FILES);
    assert_int_equal((int)stats.skipped_files, atomic_load(&warnings_seen));
    assert_true(stats.replacements >= stats.skipped_files);
    assert_true(stats.images >= 15 * BATCH);
}

static void test_every_corrupt_file_counted_once(void **state) {
    const Fixture *fixture = *state;
    atomic_store(&warnings_seen, 0);
    // No shuffle, batch = whole dataset minus remainder: every file requested.
    LoaderConfig config = base_config(fixture, 4);
    config.batch_size = GOOD_IMAGES + CORRUPT_FILES;
    config.shuffle = 0;
    config.total_batches = 3;  // no prefetch past the batches counted below
    size_t bytes = 0;
    LoaderStats stats;
    uint8_t *all = run_loader(&config, 3, &bytes, &stats);
    free(all);
    assert_int_equal(stats.skipped_files, CORRUPT_FILES);
    assert_int_equal(atomic_load(&warnings_seen), CORRUPT_FILES);
    assert_int_equal(stats.replacements, 3 * CORRUPT_FILES);
}

static void test_resume_from_batch_number(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig full = base_config(fixture, 2), resumed = base_config(fixture, 3);
    resumed.start_batch = 7;
    size_t full_size = 0, resumed_size = 0;
    uint8_t *a = run_loader(&full, 10, &full_size, NULL);
    uint8_t *b = run_loader(&resumed, 3, &resumed_size, NULL);
    assert_int_equal(resumed_size * 10, full_size * 3);
    assert_memory_equal(a + full_size / 10 * 7, b, resumed_size);
    free(a);
    free(b);
}

// The dataset indices and epoch of the first `count` batches.
static void batch_samples(const LoaderConfig *config, int count, uint32_t *indices,
                          uint32_t *epochs) {
    ErrorMessage err;
    Loader *loader = loader_create(config, &err);
    if (!loader) fail_msg("%s", err.text);
    for (int b = 0; b < count; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("batch %d: %s", b, err.text);
        memcpy(indices + (size_t)b * BATCH, batch->sample_indices, BATCH * sizeof *indices);
        epochs[b] = batch->epoch;
        loader_release(loader, batch);
    }
    loader_destroy(loader);
}

// epoch_batches (Lightning's limit_train_batches): each epoch is the first
// N batches of that epoch's order, and the next epoch starts after them.
static void test_limited_epochs(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig full = base_config(fixture, 2), limited = base_config(fixture, 2);
    limited.epoch_batches = 2;
    const int per_epoch = (GOOD_IMAGES + CORRUPT_FILES) / BATCH;  // 5
    uint32_t all[2 * 5 * BATCH], all_epochs[2 * 5], cut[4 * BATCH], cut_epochs[4];
    batch_samples(&full, 2 * per_epoch, all, all_epochs);
    batch_samples(&limited, 4, cut, cut_epochs);
    {
        ErrorMessage err;
        Loader *loader = loader_create(&limited, &err);
        assert_non_null(loader);
        assert_int_equal(loader_batches_per_epoch(loader), 2);
        loader_destroy(loader);
    }
    const int from[4] = {0, 1, per_epoch, per_epoch + 1};  // epoch 0's first two, epoch 1's
    for (int b = 0; b < 4; b++) {
        assert_int_equal(cut_epochs[b], all_epochs[from[b]]);
        assert_memory_equal(cut + b * BATCH, all + from[b] * BATCH, BATCH * sizeof *cut);
    }
    assert_int_equal(cut_epochs[2], 1);
    // More than the epoch has: the epoch as it is.
    limited.epoch_batches = 100;
    batch_samples(&limited, per_epoch + 1, all, all_epochs);
    assert_int_equal(all_epochs[per_epoch - 1], 0);
    assert_int_equal(all_epochs[per_epoch], 1);
}

static void test_destroy_while_workers_busy(void **state) {
    const Fixture *fixture = *state;
    for (int round = 0; round < 5; round++) {
        LoaderConfig config = base_config(fixture, 4);
        ErrorMessage err;
        Loader *loader = loader_create(&config, &err);
        assert_non_null(loader);
        if (round % 2) {
            const Batch *batch = loader_next(loader, NULL, &err);
            assert_non_null(batch);  // destroyed while holding a batch
        }
        loader_destroy(loader);  // must join every thread without hanging
    }
}

static void test_fatal_when_nothing_is_readable(void **state) {
    (void)state;
    char *root = fixture_tempdir();
    char path[4096];
    for (int i = 0; i < 6; i++) {
        snprintf(path, sizeof path, "%s/broken%d.png", root, i);
        assert_int_equal(fixture_write_file(path, "\x89PNG garbage", 12), 0);
    }
    Dataset dataset;
    ErrorMessage err;
    assert_int_equal(dataset_scan(root, &dataset, &err), 0);
    Fixture fixture = {.root = root, .dataset = dataset};
    LoaderConfig config = base_config(&fixture, 2);
    config.batch_size = 2;
    config.warn = NULL;
    Loader *loader = loader_create(&config, &err);
    assert_non_null(loader);
    assert_null(loader_next(loader, NULL, &err));
    assert_non_null(strstr(err.text, "no readable image"));
    loader_destroy(loader);
    dataset_free(&dataset);
    fixture_remove_tree(root);
    free(root);
}

// The first warning of a loader over dataset (one worker, every file read once).
static void first_warning(void *context, const char *message) {
    char *first = context;
    if (!first[0]) snprintf(first, 4300, "%s", message);
}

static void warning_of(const Dataset *dataset, char *first) {
    Fixture fixture = {.dataset = *dataset};
    LoaderConfig config = base_config(&fixture, 1);
    config.batch_size = (int)dataset->count;
    config.shuffle = 0;
    config.total_batches = 1;
    config.warn = first_warning;
    config.warn_context = first;
    first[0] = '\0';
    size_t bytes = 0;
    free(run_loader(&config, 1, &bytes, NULL));
}

// A skipped file's warning names it as it was opened: with several folders
// (root "") not "/folder/x", with a root given with a trailing '/' not
// "root//x".
static void test_warning_names_the_path_read(void **state) {
    const Fixture *fixture = *state;
    char bad[4200], good[4200], with_slash[4200], expected[4400];
    snprintf(bad, sizeof bad, "%s/bad", fixture->root);
    snprintf(good, sizeof good, "%s/class0", fixture->root);
    snprintf(with_slash, sizeof with_slash, "%s/", fixture->root);
    char *first = malloc(4300);
    const char *const roots[2] = {bad, good};
    Dataset dataset;
    ErrorMessage err;
    assert_int_equal(dataset_scan_many(roots, 2, &dataset, &err), 0);
    warning_of(&dataset, first);
    dataset_free(&dataset);
    snprintf(expected, sizeof expected, "skipping '%s/", bad);
    if (strncmp(first, expected, strlen(expected)) != 0)
        fail_msg("several folders: '%s' does not start with \"%s\"", first, expected);
    assert_int_equal(dataset_scan(with_slash, &dataset, &err), 0);
    warning_of(&dataset, first);
    dataset_free(&dataset);
    if (strncmp(first, expected, strlen(expected)) != 0 || strstr(first, "//"))
        fail_msg("root with '/': '%s' does not start with \"%s\"", first, expected);
    free(first);
}

static void test_rejects_bad_configuration(void **state) {
    const Fixture *fixture = *state;
    ErrorMessage err;
    LoaderConfig config = base_config(fixture, 0);
    assert_null(loader_create(&config, &err));
    config = base_config(fixture, 1);
    config.batch_size = 100;  // larger than the 43 files
    assert_null(loader_create(&config, &err));
    assert_non_null(strstr(err.text, "batch size"));
    config = base_config(fixture, 1);
    config.views.views[0].flip_p = 2.0f;
    assert_null(loader_create(&config, &err));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_batches_with_1_and_7_workers),
        cmocka_unit_test(test_no_workers_ahead),
        cmocka_unit_test(test_dino_multi_crop_shapes_and_determinism),
        cmocka_unit_test(test_view_geometry),
        cmocka_unit_test(test_corrupt_files_skipped_counted_substituted),
        cmocka_unit_test(test_every_corrupt_file_counted_once),
        cmocka_unit_test(test_resume_from_batch_number),
        cmocka_unit_test(test_limited_epochs),
        cmocka_unit_test(test_destroy_while_workers_busy),
        cmocka_unit_test(test_fatal_when_nothing_is_readable),
        cmocka_unit_test(test_rejects_bad_configuration),
        cmocka_unit_test(test_warning_names_the_path_read),
    };
    return cmocka_run_group_tests(tests, setup_folder, fixture_folder_teardown);
}
