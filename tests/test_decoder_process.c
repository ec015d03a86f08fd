// Tests of the decoder processes (data/decoder_process.h): the pixels are
// those of an in-process Decoder; a crash or a hang inside the decoder (the
// LTC_FAULT points decoder-crash and decoder-hang, which stand for the next
// unknown bug of a decoder library) fails that file alone, with a reason
// naming how the process ended, and the next file decodes in a new process;
// the loader skips such a file once, names it once and goes on (keep_last
// mode: its row flagged); a decoder process that cannot start at all stops
// the loader with the reason instead of blaming every file.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/decoder_process.h"
#include "data/decoder_protocol.h"
#include "data/image_renderer.h"
#include "data/load_plan.h"
#include "data/loader.h"
#include "data/sampler.h"
#include "image_fixtures.h"
#include "util/file.h"
#include "util/rng.h"

enum { IMAGES = 12, BATCH = 4, VIEW_SIZE = 32 };

static int setup_folder(void **state) {
    FixtureFolder *fixture = calloc(1, sizeof *fixture);
    fixture->root = fixture_tempdir();
    uint8_t *rgb = malloc(200 * 160 * 3);
    char path[4096];
    for (int i = 0; i < IMAGES; i++) {  // sizes grow: the memory files grow with them
        const int width = 40 + 13 * i, height = 30 + 11 * i;
        fixture_pattern(rgb, width, height, (uint32_t)i);
        snprintf(path, sizeof path, "%s/img%02d.%s", fixture->root, i, i % 3 ? "jpg" : "png");
        assert_int_equal(i % 3 ? fixture_write_jpeg(path, width, height, rgb, 90)
                               : fixture_write_png(path, width, height, rgb),
                         0);
    }
    free(rgb);
    ErrorMessage err;
    if (dataset_scan(fixture->root, &fixture->dataset, &err) != 0) fail_msg("%s", err.text);
    assert_int_equal(fixture->dataset.count, IMAGES);
    *state = fixture;
    return 0;
}

static void image_path(const FixtureFolder *fixture, int index, char *path, size_t size) {
    assert_int_equal(dataset_full_path(&fixture->dataset, (uint32_t)index, path, size), 0);
}

static DecoderProcess *start_process(double timeout) {
    const DecoderProcessConfig config = {.timeout_seconds = timeout};
    ErrorMessage err = {{0}};
    DecoderProcess *process = decoder_process_create(&config, &err);
    if (!process) fail_msg("%s", err.text);
    return process;
}

static void assert_same_rows(const uint8_t *a, size_t a_stride, const uint8_t *b,
                             size_t b_stride, int height, size_t row_bytes) {
    for (int y = 0; y < height; y++)
        assert_memory_equal(a + (size_t)y * a_stride, b + (size_t)y * b_stride, row_bytes);
}

// The same decode in process and in the decoder process: sizes, covered
// rectangle and every pixel (native: every sample).
static void check_same_decode(Decoder *decoder, DecoderProcess *process, const char *path,
                              const ByteBuffer *file, const DecodeRequest *request) {
    DecodedImage local;
    DecoderResult result;
    ErrorMessage err = {{0}};
    assert_int_equal(decoder_decode(decoder, file->data, file->size, request, &local, &err), 0);
    if (decoder_process_decode(process, path, request, &result, &err) != 0)
        fail_msg("%s: %s", path, err.text);
    const DecodedImage *isolated = &result.decoded;
    assert_memory_equal(&local.covered, &isolated->covered, sizeof local.covered);
    if (request && request->native) {
        const SampleImage *a = &local.samples, *b = &isolated->samples;
        assert_true(a->width == b->width && a->height == b->height && a->channels == b->channels &&
                    a->type == b->type && a->colour == b->colour && a->bits == b->bits);
        assert_same_rows(a->pixels, a->stride, b->pixels, b->stride, a->height,
                         (size_t)a->width * (size_t)a->channels * sample_type_bytes(a->type));
    } else {
        const Image *a = &local.image, *b = &isolated->image;
        assert_true(a->width == b->width && a->height == b->height);
        assert_same_rows(a->pixels, a->stride, b->pixels, b->stride, a->height,
                         (size_t)a->width * 3);
    }
}

// Every file of the folder (growing sizes: the memory files grow, the
// worker maps them again) and fixtures of other libraries and paths (EXIF
// orientation, a TIFF's own orientation, 16-bit samples, WebP, AVIF,
// DICOM), each whole, as a region at a reduced scale and natively, from one
// decoder process and from an in-process Decoder: the same.
static void test_same_pixels_as_in_process(void **state) {
    const FixtureFolder *fixture = *state;
    DecoderProcess *process = start_process(0);
    Decoder *decoder = decoder_create(0);
    ByteBuffer file = {0};
    ErrorMessage err = {{0}};
    static const char *const formats[] = {"orientation6.jpg", "rgb8_orientation6.tif",
                                          "rgb16_planar_strips.tif", "orientation5.webp",
                                          "rgb.avif", "mono2_12bit_rle.dcm"};
    const int count = IMAGES + (int)(sizeof formats / sizeof formats[0]);
    for (int i = 0; i < count; i++) {
        char path[4096];
        if (i < IMAGES)
            image_path(fixture, i, path, sizeof path);
        else
            snprintf(path, sizeof path, "tests/fixtures/formats/%s", formats[i - IMAGES]);
        if (file_read_all(path, &file, 1 << 24, &err) != 0) fail_msg("%s", err.text);
        ImageInfo info, isolated_info;
        assert_int_equal(decoder_probe(decoder, file.data, file.size, &info, &err), 0);
        assert_int_equal(decoder_process_probe(process, path, &isolated_info, &err), 0);
        assert_memory_equal(&info, &isolated_info, sizeof info);
        const DecodeRequest region = {.region = {info.width / 4, info.height / 3, info.width / 2,
                                                 info.height / 2},
                                      .min_width = info.width / 5, .min_height = info.height / 5};
        const DecodeRequest native = {.region = {0, 0, info.width, info.height}, .native = 1};
        check_same_decode(decoder, process, path, &file, NULL);
        check_same_decode(decoder, process, path, &file, &region);
        check_same_decode(decoder, process, path, &file, &native);
    }
    byte_buffer_free(&file);
    decoder_destroy(decoder);
    decoder_process_destroy(process);
}

// One image's views as the loader made them before decoder processes:
// read, probe, plan, decode and render in this process.
static void render_here(const char *path, const ViewSet *views, uint64_t seed, uint64_t key,
                        uint8_t *out) {
    ByteBuffer file = {0};
    ErrorMessage err = {{0}};
    Decoder *decoder = decoder_create(0);
    decoder_set_channels(decoder, views->float_pixels ? view_input_channels(&views->views[0]) : 0);
    ImageRenderer *renderer = image_renderer_create(views);
    ImageInfo info;
    LoadPlan plan;
    DecodedImage decoded;
    if (file_read_all(path, &file, 1 << 24, &err) != 0 ||
        decoder_probe(decoder, file.data, file.size, &info, &err) != 0)
        fail_msg("%s: %s", path, err.text);
    load_plan(views, seed, 0, key, &info, 1, &plan);
    uint8_t *targets[AUGMENT_MAX_VIEWS];
    for (int v = 0; v < views->count; v++) targets[v] = out + decoder_view_offset(views, v);
    if (decoder_decode(decoder, file.data, file.size, &plan.request, &decoded, &err) != 0 ||
        image_renderer_render(renderer, plan.params, &decoded,
                              decoded.samples.type == SAMPLE_F32, targets, &err) != 0)
        fail_msg("%s: %s", path, err.text);
    image_renderer_destroy(renderer);
    decoder_destroy(decoder);
    byte_buffer_free(&file);
}

static DecoderProcess *start_views_process(const ViewSet *views, const char *faults,
                                           double timeout) {
    setenv("LTC_FAULT", faults, 1);  // the child's environment is taken at creation
    const DecoderProcessConfig config = {.views = views, .seed = 7, .timeout_seconds = timeout};
    ErrorMessage err = {{0}};
    DecoderProcess *process = decoder_process_create(&config, &err);
    unsetenv("LTC_FAULT");
    if (!process) fail_msg("%s", err.text);
    return process;
}

// The views a decoder process renders are those of the same steps in this
// process, byte for byte: 8-bit SimCLR views of the folder's images, and
// float views (3 channels) of 16-bit and float TIFFs.
static void test_views_same_as_in_process(void **state) {
    const FixtureFolder *fixture = *state;
    ViewSet simclr, deep;
    view_set_simclr(&simclr, VIEW_SIZE);
    view_set_simclr(&deep, VIEW_SIZE);
    const ChannelSettings three = {.channels = 3};
    view_set_apply_channels(&deep, &three, 1);
    const ViewSet *sets[2] = {&simclr, &deep};
    for (int s = 0; s < 2; s++) {
        const ViewSet *views = sets[s];
        const size_t bytes = decoder_view_offset(views, views->count);
        uint8_t *here = malloc(bytes);
        DecoderProcess *process = start_views_process(views, "", 0);
        for (int i = 0; i < (s == 0 ? IMAGES : 2); i++) {
            char path[4096];
            if (s == 0)
                image_path(fixture, i, path, sizeof path);
            else
                snprintf(path, sizeof path, "tests/fixtures/formats/%s",
                         i ? "grey_float32.tif" : "rgb16_planar_strips.tif");
            DecoderRendered rendered;
            ErrorMessage err = {{0}};
            if (decoder_process_render(process, path, i, 0, (uint64_t)i, 1, 0, 0, &rendered,
                                       &err) != 0)
                fail_msg("%s: %s", path, err.text);
            render_here(path, views, 7, (uint64_t)i, here);
            assert_memory_equal(here, rendered.views, bytes);
        }
        decoder_process_destroy(process);
        free(here);
    }
}

// Files 2 (decoder-crash@2) and 5 (decoder-hang@5, a 1 s limit) fail with
// how their process ended: 1 for those (checked), 0 for the others.
static int check_faulted_file(int file, int status, const ErrorMessage *err) {
    if (file != 2 && file != 5) return 0;
    assert_int_equal(status, DECODER_PROCESS_BAD_FILE);
    // SIGSEGV; under AddressSanitizer its report, then exit status 1.
    if (file == 2 &&
        !strstr(err->text, "decoder crashed: its process died of SIGSEGV (signal 11)") &&
        !strstr(err->text, "decoder crashed: its process exited with status 1"))
        fail_msg("%s", err->text);
    if (file == 5 && !strstr(err->text, "decoder did not finish within 1 s"))
        fail_msg("%s", err->text);
    return 1;
}

// decoder-crash@2 and decoder-hang@5: those files fail with how their
// process ended (the hang killed after the 1 s limit); every other file
// decodes, in the process started after each.
static void test_crash_and_hang_fail_one_file(void **state) {
    const FixtureFolder *fixture = *state;
    ViewSet views;
    view_set_simclr(&views, VIEW_SIZE);
    DecoderProcess *process = start_views_process(&views, "decoder-crash@2,decoder-hang@5", 1.0);
    for (int i = 0; i < 7; i++) {
        char path[4096];
        image_path(fixture, i, path, sizeof path);
        DecoderRendered rendered;
        ErrorMessage err = {{0}};
        const int status = decoder_process_render(process, path, i, 0, (uint64_t)i, 1, 0, 0,
                                                  &rendered, &err);
        if (!check_faulted_file(i, status, &err)) {
            if (status != 0) fail_msg("file %d: %s", i, err.text);
            assert_non_null(rendered.views);
        }
    }
    decoder_process_destroy(process);
}

// The worker keeps the next request queued in the child
// (decoder_process_submit_render): files 0..8 with two in flight at a
// time, decoder-crash@2 and decoder-hang@5. The crashing and the hanging
// file fail with how their process ended, each while the next file's
// request waited behind it; that queued file goes to the new child and
// comes back with its own views (each in its own views buffer), as does
// every other file, byte for byte those of the same steps in this process.
static void test_crash_with_a_request_queued_behind_it(void **state) {
    const FixtureFolder *fixture = *state;
    ViewSet views;
    view_set_simclr(&views, VIEW_SIZE);
    const size_t bytes = decoder_view_offset(&views, views.count);
    uint8_t *here = malloc(bytes);
    DecoderProcess *process = start_views_process(&views, "decoder-crash@2,decoder-hang@5", 1.0);
    enum { FILES = 9 };
    int submitted = 0;
    for (int collected = 0; collected < FILES; collected++) {
        ErrorMessage err = {{0}};
        while (submitted < FILES && decoder_process_pending(process) < DECODER_PROCESS_PIPELINE) {
            char path[4096];
            image_path(fixture, submitted, path, sizeof path);
            if (decoder_process_submit_render(process, path, submitted, 0, (uint64_t)submitted,
                                              1, 0, 0, &err) != 0)
                fail_msg("file %d: %s", submitted, err.text);
            submitted++;
        }
        assert_int_equal(decoder_process_pending(process), submitted - collected);
        assert_true(submitted - collected >= (collected < FILES - 1 ? 2 : 1));
        DecoderRendered rendered;
        const int status = decoder_process_collect_render(process, &rendered, &err);
        char path[4096];
        image_path(fixture, collected, path, sizeof path);
        if (!check_faulted_file(collected, status, &err)) {
            if (status != 0) fail_msg("file %d: %s", collected, err.text);
            render_here(path, &views, 7, (uint64_t)collected, here);
            assert_memory_equal(here, rendered.views, bytes);
        }
    }
    assert_int_equal(decoder_process_pending(process), 0);
    decoder_process_destroy(process);
    free(here);
}

typedef struct Warnings {
    _Atomic int count;
    char first[4400];
} Warnings;

static void keep_warning(void *context, const char *message) {
    Warnings *warnings = context;
    if (atomic_fetch_add(&warnings->count, 1) == 0)
        snprintf(warnings->first, sizeof warnings->first, "%s", message);
}

static LoaderConfig loader_config(const FixtureFolder *fixture, Warnings *warnings) {
    LoaderConfig config = {
        .dataset = &fixture->dataset,
        .batch_size = BATCH,
        .num_workers = 2,
        .seed = 5,
        .world_size = 1,
        .warn = keep_warning,
        .warn_context = warnings,
    };
    view_set_simclr(&config.views, VIEW_SIZE);
    return config;
}

// A loader whose decoder processes see LTC_FAULT=faults (their environment
// is taken when the loader is created).
static Loader *loader_with_faults(const LoaderConfig *config, const char *faults) {
    setenv("LTC_FAULT", faults, 1);
    ErrorMessage err = {{0}};
    Loader *loader = loader_create(config, &err);
    unsetenv("LTC_FAULT");
    if (!loader) fail_msg("%s", err.text);
    return loader;
}

// The crashed file's warning: one, naming it and the crash.
static void check_crash_warning(const FixtureFolder *fixture, const Warnings *warnings) {
    char path[4096], expected[4200];
    image_path(fixture, 3, path, sizeof path);
    snprintf(expected, sizeof expected, "skipping '%s': decoder crashed: its process ", path);
    assert_int_equal(atomic_load(&warnings->count), 1);
    if (strncmp(warnings->first, expected, strlen(expected)) != 0)
        fail_msg("'%s' does not start with \"%s\"", warnings->first, expected);
}

// Training mode, 2 workers, 4 epochs: the file whose decoder crashes is
// skipped, named once and counted once; every batch is whole and never
// holds it; the other 11 files are all read.
static void test_loader_skips_a_crashing_file(void **state) {
    const FixtureFolder *fixture = *state;
    Warnings warnings = {0};
    LoaderConfig config = loader_config(fixture, &warnings);
    config.shuffle = 1;
    config.total_batches = 12;
    Loader *loader = loader_with_faults(&config, "decoder-crash@3");
    ErrorMessage err = {{0}};
    int seen[IMAGES] = {0};
    for (int b = 0; b < 12; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("batch %d: %s", b, err.text);
        assert_int_equal(batch->size, BATCH);
        for (int i = 0; i < batch->size; i++) seen[batch->sample_indices[i]]++;
        loader_release(loader, batch);
    }
    const LoaderStats stats = loader_stats(loader);
    loader_destroy(loader);
    assert_int_equal(seen[3], 0);
    for (int i = 0; i < IMAGES; i++)
        if (i != 3) assert_true(seen[i] > 0);
    assert_int_equal(stats.skipped_files, 1);
    check_crash_warning(fixture, &warnings);
}

// keep_last mode (embed): every file once in order; the crashed one's row
// flagged and zero, the others read.
static void test_loader_flags_a_crashing_file(void **state) {
    const FixtureFolder *fixture = *state;
    Warnings warnings = {0};
    LoaderConfig config = loader_config(fixture, &warnings);
    config.keep_last = 1;
    Loader *loader = loader_with_faults(&config, "decoder-crash@3");
    ErrorMessage err = {{0}};
    int rows = 0;
    const size_t row_bytes = (size_t)VIEW_SIZE * VIEW_SIZE * 3;
    static const uint8_t zeros[VIEW_SIZE * VIEW_SIZE * 3];
    for (const Batch *batch; (batch = loader_next(loader, NULL, &err)); rows += batch->size) {
        for (int i = 0; i < batch->size; i++) {
            const int index = (int)batch->sample_indices[i];
            assert_int_equal(index, rows + i);
            assert_int_equal(batch->failed[i], index == 3);
            const uint8_t *pixels = batch->views[0] + (size_t)i * row_bytes;
            if (index == 3) assert_memory_equal(pixels, zeros, row_bytes);
            else assert_memory_not_equal(pixels, zeros, row_bytes);
        }
        loader_release(loader, batch);
    }
    assert_string_equal(err.text, "");
    loader_destroy(loader);
    assert_int_equal(rows, IMAGES);
    check_crash_warning(fixture, &warnings);
}

// Every batch of a loader whose decoder processes see LTC_FAULT=faults:
// views, then requested and used indices.
static uint8_t *batches_with_faults(const LoaderConfig *config, const char *faults, int batches,
                                    size_t *bytes) {
    Loader *loader = loader_with_faults(config, faults);
    ErrorMessage err = {{0}};
    uint8_t *all = NULL;
    *bytes = 0;
    for (int b = 0; b < batches; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("%s", err.text);
        const size_t pixels = batch_view_bytes(batch, batch->view_count);
        const size_t indices = (size_t)batch->size * sizeof *batch->sample_indices;
        all = realloc(all, *bytes + pixels + indices);
        memcpy(all + *bytes, batch->views[0], pixels);
        memcpy(all + *bytes + pixels, batch->sample_indices, indices);
        *bytes += pixels + indices;
        loader_release(loader, batch);
    }
    loader_destroy(loader);
    return all;
}

// With requests queued behind the crashing files, the batches stay those
// of the rule: 1 worker (its next file always queued behind the crash) and
// 3 workers give the same pixels and indices, and every position whose file
// crashed holds the first draw of that position's substitute stream (seed,
// epoch, file) that is not itself a crashing file.
static void test_loader_substitutes_as_before_with_queued_requests(void **state) {
    const FixtureFolder *fixture = *state;
    Warnings warnings = {0};
    LoaderConfig config = loader_config(fixture, &warnings);
    config.shuffle = 1;
    config.total_batches = 9;
    config.num_workers = 1;
    size_t one_bytes, three_bytes;
    uint8_t *one = batches_with_faults(&config, "decoder-crash@3,decoder-crash@8", 9, &one_bytes);
    config.num_workers = 3;
    uint8_t *three =
        batches_with_faults(&config, "decoder-crash@3,decoder-crash@8", 9, &three_bytes);
    assert_int_equal(one_bytes, three_bytes);
    assert_memory_equal(one, three, one_bytes);
    ErrorMessage err = {{0}};
    Sampler sampler;
    assert_int_equal(sampler_init(&sampler, IMAGES, BATCH, 0, 1, config.seed, 1, &err), 0);
    const size_t pixels = (size_t)BATCH * decoder_view_offset(&config.views, config.views.count);
    int substituted = 0;
    for (int b = 0; b < 9; b++) {
        const uint32_t epoch = (uint32_t)(b / (int)sampler.batches_per_epoch);
        uint32_t requested[BATCH], used[BATCH];
        sampler_batch(&sampler, epoch, (size_t)b % sampler.batches_per_epoch, requested);
        memcpy(used, one + (size_t)b * (pixels + sizeof used) + pixels, sizeof used);
        for (int i = 0; i < BATCH; i++) {
            uint32_t expected = requested[i];
            Rng substitutes = rng_make(config.seed, epoch, requested[i], RNG_STREAM_REPLACE);
            while (expected == 3 || expected == 8) expected = rng_below(&substitutes, IMAGES);
            substituted += expected != requested[i];
            assert_int_equal(used[i], expected);
        }
    }
    sampler_free(&sampler);
    assert_true(substituted >= 4);  // each crashing file in every epoch's batches
    free(one);
    free(three);
}

static void *plain_alloc(void *context, size_t bytes) {
    (void)context;
    return malloc(bytes);
}

static void plain_free(void *context, void *pointer) {
    (void)context;
    free(pointer);
}

// The slots shared with the decoder processes (no allocator given) and the
// caller's own slots (host_alloc: the views copied out of each process's
// buffer) hold the same batches, DINO's 8 views of 2 sizes included.
static void test_shared_and_own_slots_agree(void **state) {
    const FixtureFolder *fixture = *state;
    LoaderConfig config = loader_config(fixture, NULL);
    config.warn = NULL;
    config.shuffle = 1;
    config.total_batches = 6;
    view_set_dino(&config.views, 48, 24, 6);
    size_t shared_bytes, own_bytes;
    uint8_t *shared = batches_with_faults(&config, "", 6, &shared_bytes);
    config.host_alloc = plain_alloc;
    config.host_free = plain_free;
    uint8_t *own = batches_with_faults(&config, "", 6, &own_bytes);
    assert_int_equal(shared_bytes, own_bytes);
    assert_memory_equal(shared, own, shared_bytes);
    free(shared);
    free(own);
}

// A decoder process that cannot start (decoder-start: it exits at once)
// stops the loader with that reason; no file is blamed for it.
static void test_loader_stops_when_no_process_starts(void **state) {
    const FixtureFolder *fixture = *state;
    Warnings warnings = {0};
    LoaderConfig config = loader_config(fixture, &warnings);
    Loader *loader = loader_with_faults(&config, "decoder-start");
    ErrorMessage err = {{0}};
    assert_null(loader_next(loader, NULL, &err));
    if (!strstr(err.text, "a decoder process (/proc/self/exe) did not start: it exited with "
                          "status 1"))
        fail_msg("%s", err.text);
    loader_destroy(loader);
    assert_int_equal(atomic_load(&warnings.count), 0);
}

// An embedding's resize_only view asks for the image at full resolution
// (LightlyTrain's embed resizes full-resolution pixels with no
// antialiasing: a DCT-scaled decode would give other pixels); a training
// view at the same size takes a reduced decode.
static void test_resize_only_decodes_full_resolution(void **state) {
    const ImageInfo info = {.width = 640, .height = 480};
    ViewSet views;
    LoadPlan plan;
    view_set_resize(&views, 224);
    load_plan(&views, 1, 0, 2, &info, 0, &plan);
    assert_int_equal(plan.request.min_width, 640);
    assert_int_equal(plan.request.min_height, 480);
    view_set_simclr(&views, 64);
    load_plan(&views, 1, 0, 2, &info, 0, &plan);
    assert_true(plan.request.min_width < plan.request.region.width);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_same_pixels_as_in_process),
        cmocka_unit_test(test_resize_only_decodes_full_resolution),
        cmocka_unit_test(test_views_same_as_in_process),
        cmocka_unit_test(test_crash_and_hang_fail_one_file),
        cmocka_unit_test(test_crash_with_a_request_queued_behind_it),
        cmocka_unit_test(test_loader_substitutes_as_before_with_queued_requests),
        cmocka_unit_test(test_loader_skips_a_crashing_file),
        cmocka_unit_test(test_loader_flags_a_crashing_file),
        cmocka_unit_test(test_loader_stops_when_no_process_starts),
        cmocka_unit_test(test_shared_and_own_slots_agree),
    };
    return cmocka_run_group_tests(tests, setup_folder, fixture_folder_teardown);
}
