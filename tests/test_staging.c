// The staging ring (src/backend/staging.h) for a step's small inputs, on a
// fake backend whose device runs late: the ref backend with upload_ordered
// and the fence ops replaced. An ordered copy lands in device memory at
// once (the ref ops queued after it read it at once), but the fake's
// device only *completes* it later, when the test lets the device progress
// or a fence_wait asks: then it checks that the host bytes the copy reads
// are still the ones queued, as a GPU reading them late would need. A
// fence has passed when the copies queued before its record completed.
// Checked: no staging buffer is rewritten while a copy from it is pending,
// at any device lag; the ring grows instead of waiting, and waits only at
// its cap; with steps marked, every step's k-th use gets the same buffer
// (its site's) and waits for the copy of the step before out of it when
// the device is that far behind; the ViT's drop-path and RoPE rescale
// inputs (its two rings), marked or not, keep the rule and give the same
// numbers as on the plain ref backend; the fake's check can fail. Then the
// ring on every real backend.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "backend/staging.h"
#include "backend_fixture.h"
#include "fake_host_memory.h"
#include "nn/activations.h"
#include "nn/vit.h"

enum { MAX_COPIES = 1 << 14, PIECE = 128 };

// ---- the fake backend -----------------------------------------------------------------

typedef struct OrderedCopy {
    const uint8_t *host;
    size_t bytes;
    uint64_t checksum;  // of the source when queued
} OrderedCopy;

struct Fence {
    long seq;  // copies queued before its last record
};

static struct {
    OrderedCopy copies[MAX_COPIES];
    long queued, completed;  // copies queued; completed by the device
    int sources_changed;     // copies whose source changed while pending
    int waits;               // fence_wait calls that had copies to complete
    int not_host_alloc;      // ordered copies from memory not from host_alloc
} fake;

// The device completes the copies queued before `upto`, reading their
// sources now.
static void device_run(long upto) {
    for (; fake.completed < upto && fake.completed < fake.queued; fake.completed++) {
        const OrderedCopy *copy = &fake.copies[fake.completed % MAX_COPIES];
        if (fake_checksum(copy->host, copy->bytes) != copy->checksum) fake.sources_changed++;
    }
}

static void fake_upload_ordered(Backend *backend, void *device, const void *host, size_t bytes) {
    assert_true(fake.queued - fake.completed < MAX_COPIES);
    if (bytes && !fake_from_host_alloc(host, bytes)) fake.not_host_alloc++;
    if (bytes) memcpy(device, host, bytes);
    fake.copies[fake.queued % MAX_COPIES] = (OrderedCopy){host, bytes, fake_checksum(host, bytes)};
    fake.queued++;
}

static Fence *fake_fence_create(Backend *backend, ErrorMessage *err) {
    return calloc(1, sizeof(Fence));
}

static void fake_fence_free(Backend *backend, Fence *fence) { free(fence); }

static void fake_fence_record(Backend *backend, Fence *fence) { fence->seq = fake.queued; }

static int fake_fence_passed(Backend *backend, Fence *fence) {
    return fence->seq <= fake.completed;
}

static void fake_fence_wait(Backend *backend, Fence *fence) {
    if (fence->seq > fake.completed) fake.waits++;
    device_run(fence->seq);
}

static Backend *fake_backend_create(void) {
    memset(&fake, 0, sizeof fake);
    Backend *backend = fake_ref_backend_create();
    backend->op.upload_ordered = fake_upload_ordered;
    backend->op.fence_create = fake_fence_create;
    backend->op.fence_free = fake_fence_free;
    backend->op.fence_record = fake_fence_record;
    backend->op.fence_passed = fake_fence_passed;
    backend->op.fence_wait = fake_fence_wait;
    return backend;
}

// Bytes of use `use`, piece `piece`.
static void fill_use(uint8_t *x, int use, int piece) {
    for (int i = 0; i < PIECE; i++) x[i] = (uint8_t)(use * 13 + piece * 101 + i * 7);
}

// `uses` uses of a ring, each two pieces into its own device region; after
// use u the device has completed the copies of all but the last lag(u)
// uses. Every region must hold its use's bytes. per_step > 0: a step is
// marked every per_step uses, and the k-th use of every step must get the
// same buffer (its site's).
static void run_uses(Backend *backend, Staging *staging, int uses, int (*lag)(int),
                     int per_step) {
    uint8_t *device = backend->op.alloc(backend, (size_t)uses * 2 * PIECE);
    long *queued_after = malloc((size_t)uses * sizeof *queued_after);
    assert_non_null(device);
    assert_non_null(queued_after);
    uint8_t *site_buffer[STAGING_MAX_BUFFERS] = {0};
    for (int u = 0; u < uses; u++) {
        if (per_step && u % per_step == 0) staging_step_begin(backend);
        uint8_t *host = staging_take(staging);
        if (per_step && u < per_step) site_buffer[u] = host;
        if (per_step) assert_ptr_equal(host, site_buffer[u % per_step]);
        for (int piece = 0; piece < 2; piece++) {
            fill_use(host + piece * PIECE, u, piece);
            staging_upload(staging, device + ((size_t)u * 2 + piece) * PIECE, host + piece * PIECE,
                           PIECE);
        }
        queued_after[u] = fake.queued;
        const int behind = lag(u);
        if (u - behind >= 0) device_run(queued_after[u - behind]);
    }
    device_run(fake.queued);
    uint8_t expected[PIECE];
    for (int u = 0; u < uses; u++)
        for (int piece = 0; piece < 2; piece++) {
            fill_use(expected, u, piece);
            assert_memory_equal(device + ((size_t)u * 2 + piece) * PIECE, expected, PIECE);
        }
    free(queued_after);
    backend->op.free(backend, device);
}

// ---- the ring on the fake -------------------------------------------------------------

static int varying_lag(int use) { return (use * 7) % 9 + 1; }  // 1..9 uses behind

static void test_ring_never_rewrites_a_pending_buffer(void **state) {
    Backend *backend = fake_backend_create();
    Staging staging;
    ErrorMessage err = {{0}};
    if (staging_init(&staging, backend, 2 * PIECE, &err)) fail_msg("%s", err.text);
    run_uses(backend, &staging, 300, varying_lag, 0);
    assert_int_equal(fake.sources_changed, 0);
    assert_int_equal(fake.not_host_alloc, 0);
    // Grown to the uses in flight (at most 9 behind, plus the one being
    // written) instead of waiting.
    assert_int_equal(staging.waits, 0);
    assert_int_equal(fake.waits, 0);
    assert_true(staging.count >= 2 && staging.count <= 10);
    staging_free(&staging);
    backend_destroy(backend);
}

static int stalled(int use) { return use + 1; }  // the device completes nothing

static void test_ring_waits_only_at_its_cap(void **state) {
    Backend *backend = fake_backend_create();
    Staging staging;
    ErrorMessage err = {{0}};
    if (staging_init(&staging, backend, 2 * PIECE, &err)) fail_msg("%s", err.text);
    const int uses = 3 * STAGING_MAX_BUFFERS;
    run_uses(backend, &staging, uses, stalled, 0);
    assert_int_equal(fake.sources_changed, 0);
    assert_int_equal(staging.count, STAGING_MAX_BUFFERS);
    assert_int_equal(staging.waits, uses - STAGING_MAX_BUFFERS);
    staging_free(&staging);
    backend_destroy(backend);
}

// Marked steps (what the trainer does): every step's k-th use gets site
// k's buffer (fixed addresses, as a captured step needs), never rewritten
// while the copy of the step before out of it is pending: the host waits
// for that copy instead, and only when the device is that far behind.
static int within_a_step(int use) { return use % 3; }       // 0..2 uses behind
static int over_a_step(int use) { return use % 3 + 3; }     // 3..5 uses behind

static void test_marked_steps_use_fixed_sites(void **state) {
    int (*lags[2])(int) = {within_a_step, over_a_step};
    for (int l = 0; l < 2; l++) {
        Backend *backend = fake_backend_create();
        Staging staging;
        ErrorMessage err = {{0}};
        if (staging_init(&staging, backend, 2 * PIECE, &err)) fail_msg("%s", err.text);
        run_uses(backend, &staging, 3 * 40, lags[l], 3);
        assert_int_equal(fake.sources_changed, 0);
        assert_int_equal(fake.not_host_alloc, 0);
        assert_int_equal(staging.count, 3);  // one buffer a site
        assert_int_equal(staging.shared, 0);
        if (l == 0) assert_int_equal(staging.waits, 0);  // the device within a step: no wait
        else assert_true(staging.waits > 0);
        staging_free(&staging);
        backend_destroy(backend);
    }
}

// The fake's check can fail: a buffer written again while its copy is
// pending (what a ring without its guard would do) is seen.
static void test_fake_sees_a_rewritten_buffer(void **state) {
    Backend *backend = fake_backend_create();
    Staging staging;
    ErrorMessage err = {{0}};
    if (staging_init(&staging, backend, PIECE, &err)) fail_msg("%s", err.text);
    uint8_t *device = backend->op.alloc(backend, PIECE);
    assert_non_null(device);
    uint8_t *host = staging_take(&staging);
    fill_use(host, 0, 0);
    staging_upload(&staging, device, host, PIECE);
    fill_use(host, 1, 0);  // too early: the copy has not completed
    device_run(fake.queued);
    assert_int_equal(fake.sources_changed, 1);
    backend->op.free(backend, device);
    staging_free(&staging);
    backend_destroy(backend);
}

// ---- the ViT's per-forward inputs on the fake -----------------------------------------

// Features and parameter gradients of `forwards` training forward and
// backward passes of a small ViT with drop path (and, for the DINOv3
// preset, RoPE rescaling), hashed; the fake's device `lag` forwards behind.
// marked: a step marked before each forward (the rings' fixed sites).
static uint64_t vit_training_hash(Backend *backend, const char *preset, int forwards, int lag,
                                  int fake_device, int marked) {
    enum { SIZE = 32, BATCH = 3 };
    ErrorMessage err = {{0}};
    VitConfig config;
    if (vit_config_preset(preset, SIZE, &config, &err)) fail_msg("%s", err.text);
    config.drop_path_rate = 0.4f;
    Vit model;
    memset(&model, 0, sizeof model);
    const VitInputShape shape = {BATCH, SIZE};
    if (vit_create(&model, backend, &config, &shape, 1, 7, &err)) fail_msg("%s", err.text);
    const size_t pixels = (size_t)BATCH * SIZE * SIZE, dim = (size_t)model.feature_dim;
    uint8_t *u8 = backend->op.alloc(backend, pixels * 3);
    Act *input = backend->op.alloc(backend, act_bytes(backend, pixels * 3));
    float *features = backend->op.alloc(backend, BATCH * dim * sizeof *features);
    assert_true(u8 && input && features);
    for (size_t i = 0; i < pixels * 3; i++) u8[i] = (uint8_t)(i * 37 + 11);  // ref: host memory
    const float mean[3] = {0.5f, 0.5f, 0.5f}, stdev[3] = {0.25f, 0.25f, 0.25f};
    backend->op.normalize_u8(backend, pixels, u8, mean, stdev, input);
    long *queued_after = malloc((size_t)forwards * sizeof *queued_after);
    assert_non_null(queued_after);
    uint64_t hash = 1469598103934665603ull;
    for (int f = 0; f < forwards; f++) {
        if (marked) staging_step_begin(backend);
        if (vit_forward(&model, 0, BATCH, input, 1, &err) ||
            vit_backward(&model, 0, vit_features(&model, 0), &err))
            fail_msg("%s", err.text);
        backend->op.act_to_float(backend, BATCH * dim, vit_features(&model, 0), features);
        hash ^= fake_checksum(features, BATCH * dim * sizeof *features);
        hash = hash * 1099511628211ull ^
               fake_checksum(model.params.grads, model.params.total * sizeof(float));
        if (fake_device) {
            queued_after[f] = fake.queued;
            if (f - lag >= 0) device_run(queued_after[f - lag]);
        }
    }
    if (fake_device && !marked) {
        assert_true(model.drop_staging.count > 1);  // in flight: grown
        assert_int_equal(model.drop_staging.waits, 0);
    }
    if (fake_device && marked) {  // one site a step; the host waited for the step before
        assert_int_equal(model.drop_staging.count, 1);
        assert_true(model.drop_staging.waits > 0);
    }
    free(queued_after);
    backend->op.free(backend, features);
    backend->op.free(backend, input);
    backend->op.free(backend, u8);
    vit_free(&model);
    return hash;
}

static void test_vit_inputs_keep_the_rule(void **state) {
    const char *presets[] = {"vit_t16", "dinov3/vitt16"};
    for (int p = 0; p < 2; p++) {
        ErrorMessage err = {{0}};
        Backend *ref = backend_create("ref", 1, &err);
        if (!ref) fail_msg("%s", err.text);
        const uint64_t expected = vit_training_hash(ref, presets[p], 4, 0, 0, 0);
        backend_destroy(ref);
        for (int marked = 0; marked < 2; marked++) {
            Backend *backend = fake_backend_create();
            const uint64_t got = vit_training_hash(backend, presets[p], 4, 2, 1, marked);
            device_run(fake.queued);
            assert_true(fake.queued > 0);
            assert_int_equal(fake.sources_changed, 0);
            assert_int_equal(fake.not_host_alloc, 0);
            assert_true(got == expected);
            backend_destroy(backend);
        }
    }
}

// ---- the ring on every backend --------------------------------------------------------

// Many uses, each into its own device region, read back: the bytes of each
// use, whatever the ring did. CPU backends: every fence has passed, one
// buffer.
static void test_ring_on_a_backend(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    enum { USES = 200 };
    Staging staging;
    ErrorMessage err = {{0}};
    if (staging_init(&staging, backend, 2 * PIECE, &err)) fail_msg("%s", err.text);
    uint8_t *device = backend->op.alloc(backend, (size_t)USES * 2 * PIECE);
    uint8_t *back = malloc((size_t)USES * 2 * PIECE);
    assert_non_null(device);
    assert_non_null(back);
    for (int u = 0; u < USES; u++) {
        uint8_t *host = staging_take(&staging);
        for (int piece = 0; piece < 2; piece++) {
            fill_use(host + piece * PIECE, u, piece);
            staging_upload(&staging, device + ((size_t)u * 2 + piece) * PIECE,
                           host + piece * PIECE, PIECE);
        }
    }
    backend->op.download(backend, back, device, (size_t)USES * 2 * PIECE);
    uint8_t expected[PIECE];
    for (int u = 0; u < USES; u++)
        for (int piece = 0; piece < 2; piece++) {
            fill_use(expected, u, piece);
            assert_memory_equal(back + ((size_t)u * 2 + piece) * PIECE, expected, PIECE);
        }
    if (strcmp(backend->name, "cuda") != 0) assert_int_equal(staging.count, 1);
    assert_true(staging.count <= STAGING_MAX_BUFFERS);
    staging_free(&staging);
    staging_free(&staging);  // twice: nothing
    free(back);
    backend->op.free(backend, device);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_never_rewrites_a_pending_buffer),
        cmocka_unit_test(test_ring_waits_only_at_its_cap),
        cmocka_unit_test(test_marked_steps_use_fixed_sites),
        cmocka_unit_test(test_fake_sees_a_rewritten_buffer),
        cmocka_unit_test(test_vit_inputs_keep_the_rule),
        ON_EVERY_BACKEND(test_ring_on_a_backend),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
