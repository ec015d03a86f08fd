// The batch feed (train/batch_feed.h) on a fake backend whose copies
// complete late: the ref backend with the data-to-the-device ops replaced
// by ones that only note a copy when it is queued and perform it when a
// wait asks for it, after a pause in which the loader's workers may run.
// The fake checks that the bytes a copy reads have not changed since it
// was queued (a loader slot refilled while its copy is pending would show)
// and that no copy is queued into device memory that was landed but not
// yet marked consumed. The feed must deliver the loader's batches, in
// order and byte for byte, with views in device memory; the loader's
// slots must come from the backend's host memory.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "data/loader.h"
#include "fake_host_memory.h"
#include "data/scan.h"
#include "image_fixtures.h"
#include "train/batch_feed.h"
#include "util/cpu.h"

enum { IMAGES = 24, BATCH = 4, VIEW_SIZE = 24, BATCHES = 10, MAX_COPIES = 8 };
// The pause before a late copy reads its source: time for the workers to
// refill a slot given back too early.
#define LATE_SECONDS 0.02

// ---- the fake backend -----------------------------------------------------------------

typedef struct PendingCopy {
    uint8_t *device;
    const uint8_t *host;
    size_t bytes;
    uint64_t checksum;  // of the source when queued
    int landed;
} PendingCopy;

struct Transfer {
    PendingCopy copies[MAX_COPIES];
    int count;
    int landed_unconsumed;  // a copy landed and no consumed mark since
};

static struct {
    int sources_changed;       // copies whose source changed while pending
    int overwrites_unconsumed; // copies queued over data not marked consumed
    int copies;
} fake;

static Transfer *fake_transfer_create(Backend *backend, ErrorMessage *err) {
    return calloc(1, sizeof(Transfer));
}

// Performs the pending copies late: after the pause, from the source as it
// is then (which must still be what was queued).
static void land(Transfer *transfer) {
    for (int i = 0; i < transfer->count; i++) {
        PendingCopy *copy = &transfer->copies[i];
        if (copy->landed) continue;
        sleep_seconds(LATE_SECONDS);
        if (fake_checksum(copy->host, copy->bytes) != copy->checksum) fake.sources_changed++;
        memcpy(copy->device, copy->host, copy->bytes);
        copy->landed = 1;
        transfer->landed_unconsumed = 1;
    }
}

static void fake_transfer_host_wait(Backend *backend, Transfer *transfer) {
    land(transfer);
    // Landed copies may still be reading from the host's view: the source
    // must hold until this wait returns.
    sleep_seconds(LATE_SECONDS);
    for (int i = 0; i < transfer->count; i++)
        if (fake_checksum(transfer->copies[i].host, transfer->copies[i].bytes) !=
            transfer->copies[i].checksum)
            fake.sources_changed++;
    transfer->count = 0;
}

static void fake_transfer_free(Backend *backend, Transfer *transfer) {
    fake_transfer_host_wait(backend, transfer);
    free(transfer);
}

static void fake_upload_async(Backend *backend, Transfer *transfer, void *device,
                              const void *host, size_t bytes) {
    assert_true(fake_from_host_alloc(host, bytes));
    assert_true(transfer->count < MAX_COPIES);
    if (transfer->landed_unconsumed) fake.overwrites_unconsumed++;
    transfer->copies[transfer->count++] =
        (PendingCopy){device, host, bytes, fake_checksum(host, bytes), 0};
    fake.copies++;
}

static void fake_transfer_device_wait(Backend *backend, Transfer *transfer) { land(transfer); }

static void fake_transfer_consumed(Backend *backend, Transfer *transfer) {
    transfer->landed_unconsumed = 0;
}

static Backend *fake_backend_create(void) {
    memset(&fake, 0, sizeof fake);
    Backend *backend = fake_ref_backend_create();
    backend->op.transfer_create = fake_transfer_create;
    backend->op.transfer_free = fake_transfer_free;
    backend->op.upload_async = fake_upload_async;
    backend->op.transfer_device_wait = fake_transfer_device_wait;
    backend->op.transfer_consumed = fake_transfer_consumed;
    backend->op.transfer_host_wait = fake_transfer_host_wait;
    return backend;
}

// ---- the image folder and the loader ----------------------------------------------------

typedef FixtureFolder Fixture;

static int setup_folder(void **state) {
    Fixture *fixture = calloc(1, sizeof *fixture);
    fixture->root = fixture_tempdir();
    char path[4096];
    uint8_t rgb[64 * 48 * 3];
    for (int i = 0; i < IMAGES; i++) {
        const int width = 32 + (i * 7) % 32, height = 32 + (i * 5) % 16;
        fixture_pattern(rgb, width, height, (uint32_t)i);
        snprintf(path, sizeof path, "%s/img%03d.png", fixture->root, i);
        assert_int_equal(fixture_write_png(path, width, height, rgb), 0);
    }
    ErrorMessage err;
    if (dataset_scan(fixture->root, &fixture->dataset, &err) != 0) fail_msg("%s", err.text);
    *state = fixture;
    return 0;
}

// Two slots and three workers: a slot given back is refilled at once.
static LoaderConfig loader_config(const Fixture *fixture) {
    LoaderConfig config = {
        .dataset = &fixture->dataset,
        .batch_size = BATCH,
        .num_workers = 3,
        .prefetch_batches = 2,
        .seed = 7,
        .world_size = 1,
        .shuffle = 1,
        .total_batches = BATCHES,
    };
    view_set_simclr(&config.views, VIEW_SIZE);
    return config;
}

// Every batch's pixels straight from a loader (views are contiguous in a slot).
static uint8_t *expected_batches(const LoaderConfig *config, size_t *bytes_per_batch) {
    ErrorMessage err = {{0}};
    Loader *loader = loader_create(config, &err);
    if (!loader) fail_msg("%s", err.text);
    uint8_t *all = NULL;
    for (int b = 0; b < BATCHES; b++) {
        const Batch *batch = loader_next(loader, NULL, &err);
        if (!batch) fail_msg("%s", err.text);
        *bytes_per_batch = batch_view_bytes(batch, batch->view_count);
        if (!all) all = malloc(*bytes_per_batch * BATCHES);
        memcpy(all + (size_t)b * *bytes_per_batch, batch->views[0], *bytes_per_batch);
        loader_release(loader, batch);
    }
    loader_destroy(loader);
    return all;
}

// ---- tests ---------------------------------------------------------------------------------

// The trainer's order: prefetch, take, the ops on the views, consumed,
// the next prefetch (the copy beside the step), ...
static void test_feed_delivers_batches_and_keeps_slots(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig config = loader_config(fixture);
    size_t bytes = 0;
    uint8_t *expected = expected_batches(&config, &bytes);

    Backend *backend = fake_backend_create();
    batch_feed_loader_memory(&config, backend);
    ErrorMessage err = {{0}};
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    assert_int_equal(fake_host_allocs(), 2);  // one per slot
    BatchFeed feed;
    if (batch_feed_init(&feed, backend, loader, &config.views, BATCH, &err))
        fail_msg("%s", err.text);
    assert_int_equal(batch_feed_prefetch(&feed, &err), 0);
    for (int b = 0; b < BATCHES; b++) {
        const Batch *host = NULL;
        double wait = -1, queue = -1;
        const Batch *batch = batch_feed_take(&feed, &host, &wait, &queue, &err);
        if (!batch) fail_msg("batch %d: %s", b, err.text);
        assert_int_equal(batch->index, (uint64_t)b);
        assert_true(wait >= 0 && queue >= 0);
        assert_ptr_equal(batch->views[0], feed.device);  // in device memory
        assert_int_equal(host->index, batch->index);
        assert_true(fake_from_host_alloc(host->views[0], bytes));
        assert_memory_equal(batch->views[0], expected + (size_t)b * bytes, bytes);
        batch_feed_consumed(&feed);
        const int next = batch_feed_prefetch(&feed, &err);
        assert_int_equal(next, b + 1 < BATCHES ? 0 : 1);
    }
    assert_null(batch_feed_take(&feed, NULL, NULL, NULL, &err));
    assert_string_equal(err.text, "");
    batch_feed_free(&feed);
    loader_destroy(loader);
    assert_int_equal(fake.copies, BATCHES * 2);  // two views each
    assert_int_equal(fake.sources_changed, 0);
    assert_int_equal(fake.overwrites_unconsumed, 0);
    assert_int_equal(fake_host_frees(), fake_host_allocs());
    backend_destroy(backend);
    free(expected);
}

// The fake's check can fail: a slot given back to the loader before its
// copy's host wait is refilled (the loader is driven until it has been)
// and the wait sees the change.
static void test_fake_sees_a_slot_given_back_early(void **state) {
    const Fixture *fixture = *state;
    LoaderConfig config = loader_config(fixture);
    Backend *backend = fake_backend_create();
    batch_feed_loader_memory(&config, backend);
    ErrorMessage err = {{0}};
    Loader *loader = loader_create(&config, &err);
    if (!loader) fail_msg("%s", err.text);
    Transfer *transfer = backend->op.transfer_create(backend, &err);
    uint8_t *device = malloc(BATCH * VIEW_SIZE * VIEW_SIZE * 3);
    const Batch *first = loader_next(loader, NULL, &err);
    assert_non_null(first);
    uint8_t *slot = first->views[0];
    backend->op.upload_async(backend, transfer, device, slot, BATCH * VIEW_SIZE * VIEW_SIZE * 3);
    loader_release(loader, first);  // too early
    const Batch *second = loader_next(loader, NULL, &err);
    loader_release(loader, second);
    const Batch *third = loader_next(loader, NULL, &err);  // refilled the first's slot
    assert_non_null(third);
    assert_ptr_equal(third->views[0], slot);
    backend->op.transfer_host_wait(backend, transfer);
    assert_true(fake.sources_changed > 0);
    loader_release(loader, third);
    backend->op.transfer_free(backend, transfer);
    free(device);
    loader_destroy(loader);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_feed_delivers_batches_and_keeps_slots),
        cmocka_unit_test(test_fake_sees_a_slot_given_back_early),
    };
    return cmocka_run_group_tests(tests, setup_folder, fixture_folder_teardown);
}
