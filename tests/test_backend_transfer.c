// The data-to-the-device ops of backend.h on every backend (ref, cpu, cuda;
// the cuda tests skip, reported, where no GPU works): host memory from
// host_alloc; an upload_async that runs beside a later op and lands before
// the op that waits for it; the reuse rules (the host buffer is written
// again only after transfer_host_wait, the destination overwritten by the
// next upload only after the op marked by transfer_consumed read it); the
// ordered upload of a step's small inputs (in stream order between the ops
// queued before and after it) and fences; the step timer (-1 on CPU
// backends, the device's time on the GPU).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "backend_fixture.h"

// Large enough that on a GPU the copy and the normalisation take a while
// (12 MB of pixels, 48 MB of floats), so a missing wait shows.
#define PIXELS ((size_t)1 << 22)

static const float mean[3] = {0.485f, 0.456f, 0.406f};
static const float stdev[3] = {0.229f, 0.224f, 0.225f};

// Pattern `seed` of uint8 pixel values.
static void fill_pattern(uint8_t *x, size_t bytes, unsigned seed) {
    for (size_t i = 0; i < bytes; i++) x[i] = (uint8_t)((i * 7 + seed * 31 + i / 4096) & 0xff);
}

// Fails unless y (downloaded) is normalize_u8 of x, in the op's fp32
// expression (ref's; the other backends match it exactly).
static void expect_normalized(Backend *backend, const float *y_device, const uint8_t *x,
                              const char *label) {
    float *y = malloc(PIXELS * 3 * sizeof *y);
    assert_non_null(y);
    backend->op.download(backend, y, y_device, PIXELS * 3 * sizeof *y);
    size_t wrong = 0;
    for (size_t i = 0; i < PIXELS * 3; i++) {
        const int c = (int)(i % 3);
        const float want = ((float)x[i] / 255.0f - mean[c]) / stdev[c];
        if (y[i] != want && wrong++ < 3)
            print_error("%s: element %zu is %g, want %g\n", label, i, (double)y[i], (double)want);
    }
    free(y);
    assert_int_equal(wrong, 0);
}

static void test_host_alloc(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    const size_t sizes[] = {0, 1, 100, 4096 * 3 + 5};
    for (size_t s = 0; s < sizeof sizes / sizeof sizes[0]; s++) {
        uint8_t *p = backend->op.host_alloc(backend, sizes[s]);
        assert_non_null(p);
        assert_int_equal((uintptr_t)p % 64, 0);
        memset(p, 0xab, sizes[s]);
        for (size_t i = 0; i < sizes[s]; i++) assert_int_equal(p[i], 0xab);
        backend->op.host_free(backend, p);
    }
    backend_destroy(backend);
}

// The trainer's order for two batches through one device buffer.
static void test_upload_beside_a_later_op_and_reuse(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    const size_t bytes = PIXELS * 3;
    ErrorMessage err = {{0}};
    uint8_t *host = backend->op.host_alloc(backend, bytes);
    uint8_t *first = malloc(bytes), *second = malloc(bytes), *other = malloc(bytes);
    uint8_t *device = backend->op.alloc(backend, bytes);
    uint8_t *device_other = backend->op.alloc(backend, bytes);
    float *y_other = backend->op.alloc(backend, bytes * sizeof(float));
    float *y_first = backend->op.alloc(backend, bytes * sizeof(float));
    float *y_second = backend->op.alloc(backend, bytes * sizeof(float));
    Transfer *transfer = backend->op.transfer_create(backend, &err);
    const void *buffers[] = {host, first, second, other, device, device_other, y_other, y_first,
                             y_second};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) assert_non_null(buffers[i]);
    if (!transfer) fail_msg("%s", err.text);
    fill_pattern(first, bytes, 1);
    fill_pattern(second, bytes, 2);
    fill_pattern(other, bytes, 3);
    backend->op.upload(backend, device_other, other, bytes);

    memcpy(host, first, bytes);
    backend->op.upload_async(backend, transfer, device, host, bytes);
    // Queued while the copy runs: needs nothing from it.
    backend->op.normalize_u8(backend, PIXELS, device_other, mean, stdev, (Act *)y_other);
    backend->op.transfer_device_wait(backend, transfer);
    backend->op.normalize_u8(backend, PIXELS, device, mean, stdev, (Act *)y_first);
    backend->op.transfer_consumed(backend, transfer);
    // The host buffer again, then the second copy into the same device
    // buffer: it must wait for y_first's normalisation.
    backend->op.transfer_host_wait(backend, transfer);
    memcpy(host, second, bytes);
    backend->op.upload_async(backend, transfer, device, host, bytes);
    backend->op.transfer_device_wait(backend, transfer);
    backend->op.normalize_u8(backend, PIXELS, device, mean, stdev, (Act *)y_second);
    backend->op.transfer_consumed(backend, transfer);
    backend->op.transfer_host_wait(backend, transfer);
    memset(host, 0, bytes);  // after the wait: changes nothing on the device

    expect_normalized(backend, y_other, other, "the op beside the copy");
    expect_normalized(backend, y_first, first, "the first upload");
    expect_normalized(backend, y_second, second, "the second upload into the same buffer");
    backend->op.transfer_free(backend, transfer);
    backend->op.free(backend, y_second);
    backend->op.free(backend, y_first);
    backend->op.free(backend, y_other);
    backend->op.free(backend, device_other);
    backend->op.free(backend, device);
    backend->op.host_free(backend, host);
    free(first), free(second), free(other);
    backend_destroy(backend);
}

// A transfer freed with its copy in flight waits for it (the host buffer
// is freed right after).
static void test_free_waits_for_the_copy(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    ErrorMessage err = {{0}};
    const size_t bytes = PIXELS * 3;
    uint8_t *host = backend->op.host_alloc(backend, bytes);
    uint8_t *device = backend->op.alloc(backend, bytes), *back = malloc(bytes);
    Transfer *transfer = backend->op.transfer_create(backend, &err);
    assert_non_null(host);
    assert_non_null(device);
    assert_non_null(back);
    if (!transfer) fail_msg("%s", err.text);
    fill_pattern(host, bytes, 4);
    backend->op.upload_async(backend, transfer, device, host, bytes);
    backend->op.transfer_free(backend, transfer);
    backend->op.download(backend, back, device, bytes);
    assert_memory_equal(back, host, bytes);
    backend->op.host_free(backend, host);
    backend->op.free(backend, device);
    free(back);
    backend_destroy(backend);
}

// Two ordered uploads into one device buffer, each read by the op queued
// after it: each op sees its own data (the second copy waits for the
// first reader, the first reader for the first copy). A fence recorded
// behind them has passed once fence_wait returns, and the host buffers may
// then be rewritten without changing anything on the device.
static void test_upload_ordered_and_fences(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    ErrorMessage err = {{0}};
    const size_t bytes = PIXELS * 3;
    uint8_t *host_first = backend->op.host_alloc(backend, bytes);
    uint8_t *host_second = backend->op.host_alloc(backend, bytes);
    uint8_t *first = malloc(bytes), *second = malloc(bytes);
    uint8_t *device = backend->op.alloc(backend, bytes);
    float *y_first = backend->op.alloc(backend, bytes * sizeof(float));
    float *y_second = backend->op.alloc(backend, bytes * sizeof(float));
    Fence *fence = backend->op.fence_create(backend, &err);
    if (!fence) fail_msg("%s", err.text);
    const void *buffers[] = {host_first, host_second, first, second, device, y_first, y_second};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) assert_non_null(buffers[i]);
    assert_true(backend->op.fence_passed(backend, fence));  // never recorded
    backend->op.fence_wait(backend, fence);                 // returns at once
    fill_pattern(first, bytes, 5);
    fill_pattern(second, bytes, 6);
    memcpy(host_first, first, bytes);
    memcpy(host_second, second, bytes);

    backend->op.upload_ordered(backend, device, host_first, bytes);
    backend->op.normalize_u8(backend, PIXELS, device, mean, stdev, (Act *)y_first);
    backend->op.upload_ordered(backend, device, host_second, bytes);
    backend->op.normalize_u8(backend, PIXELS, device, mean, stdev, (Act *)y_second);
    backend->op.upload_ordered(backend, device, host_first, 0);  // nothing to copy
    backend->op.fence_record(backend, fence);
    backend->op.fence_wait(backend, fence);
    assert_true(backend->op.fence_passed(backend, fence));
    memset(host_first, 0, bytes);  // after the fence: changes nothing on the device
    memset(host_second, 0, bytes);

    expect_normalized(backend, y_first, first, "the op after the first ordered upload");
    expect_normalized(backend, y_second, second, "the op after the second ordered upload");
    uint8_t *back = malloc(bytes);
    assert_non_null(back);
    backend->op.download(backend, back, device, bytes);
    assert_memory_equal(back, second, bytes);
    // Recorded again: the last mark counts; freed after a wait.
    backend->op.fence_record(backend, fence);
    backend->op.fence_wait(backend, fence);
    assert_true(backend->op.fence_passed(backend, fence));
    backend->op.fence_free(backend, fence);
    free(back), free(first), free(second);
    backend->op.free(backend, y_second);
    backend->op.free(backend, y_first);
    backend->op.free(backend, device);
    backend->op.host_free(backend, host_first);
    backend->op.host_free(backend, host_second);
    backend_destroy(backend);
}

static void test_timer(void **state) {
    Backend *backend = fixture_backend_of_prestate(state);
    ErrorMessage err = {{0}};
    DeviceTimer *timer = backend->op.timer_create(backend, &err);
    if (!timer) fail_msg("%s", err.text);
    const int on_device = strcmp(backend->name, "cuda") == 0;
    assert_true(backend->op.timer_seconds(backend, timer) == -1.0);  // no marks yet
    uint8_t *x = backend->op.alloc(backend, PIXELS * 3);
    float *y = backend->op.alloc(backend, PIXELS * 3 * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    backend->op.zero(backend, x, PIXELS * 3);
    for (int round = 0; round < 2; round++) {
        backend->op.timer_mark(backend, timer, 0);
        backend->op.normalize_u8(backend, PIXELS, x, mean, stdev, (Act *)y);
        backend->op.timer_mark(backend, timer, 1);
        backend->op.synchronize(backend);
        const double seconds = backend->op.timer_seconds(backend, timer);
        if (on_device)  // 48 MB written: more than nothing, less than a minute
            assert_true(seconds > 0.0 && seconds < 60.0);
        else
            assert_true(seconds == -1.0);  // the host's clock measures CPU backends
    }
    backend->op.free(backend, x);
    backend->op.free(backend, y);
    backend->op.timer_free(backend, timer);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        ON_EVERY_BACKEND(test_host_alloc),
        ON_EVERY_BACKEND(test_upload_beside_a_later_op_and_reuse),
        ON_EVERY_BACKEND(test_free_waits_for_the_copy),
        ON_EVERY_BACKEND(test_upload_ordered_and_fences),
        ON_EVERY_BACKEND(test_timer),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
