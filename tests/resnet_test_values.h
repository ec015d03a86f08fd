// Test helper for the ResNet tests (cmocka tests only; include after
// <cmocka.h>): fixture-init values put in backend memory and backend
// floats read back to the host (test_resnet.c, test_resnet_weights.c).
#ifndef LTC_TESTS_RESNET_TEST_VALUES_H
#define LTC_TESTS_RESNET_TEST_VALUES_H

#include <stdlib.h>

#include "backend/backend.h"
#include "fixture_init.h"

// n floats of backend memory in a malloc'ed host copy (free it).
static inline float *resnet_test_download(Backend *backend, const float *device, size_t n) {
    float *host = malloc(n * sizeof *host + 1);
    assert_non_null(host);
    backend->op.download(backend, host, device, n * sizeof *host);
    return host;
}

// Backend memory holding `count` fixture-init values (offset 0, scale 1).
static inline float *resnet_test_values(Backend *backend, const char *name, size_t count) {
    float *host = malloc(count * sizeof *host);
    fixture_fill(name, 0.0f, 1.0f, host, count);
    float *device = backend->op.alloc(backend, count * sizeof *device);
    backend->op.upload(backend, device, host, count * sizeof *host);
    free(host);
    return device;
}

// An NHWC input (batch, size, size, 3).
static inline float *resnet_test_input(Backend *backend, const char *name, int batch, int size) {
    return resnet_test_values(backend, name, (size_t)batch * size * size * 3);
}

#endif
