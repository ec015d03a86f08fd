// Helpers of the tests that run whole method steps (see method_fixture.h).
#include "method_fixture.h"

#include <setjmp.h>
#include <stdarg.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "util/rng.h"

Backend *method_fixture_backend(const char *name, ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(name, 1, &err);
    if (!backend) {
        if (strcmp(name, "cuda") != 0) fail_msg("%s", err.text);
        fprintf(stderr, "  skipped: %s\n", err.text);
        return NULL;
    }
    if (backend_set_compute_dtype(backend, dtype, &err)) fail_msg("%s", err.text);
    return backend;
}

float *method_fixture_download(Backend *backend, const void *device, size_t n) {
    float *host = malloc(n * sizeof *host);
    assert_non_null(host);
    backend->op.download(backend, host, device, n * sizeof *host);
    return host;
}

double method_fixture_relative_error(const float *a, const float *b, size_t n) {
    double difference = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        difference += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return norm > 0 ? sqrt(difference / norm) : sqrt(difference);
}

double method_fixture_allowed_error(double sixteen_bit_error, double floor) {
    return fmax(3.0 * sixteen_bit_error, floor);
}

double method_fixture_scalar_floor(ComputeDtype dtype) {
    return 16.0 * (dtype == COMPUTE_BF16 ? 0x1p-8 : 0x1p-11);
}

void method_fixture_batch(const Method *method, int size, MethodFixtureBatch *out) {
    memset(out, 0, sizeof *out);
    out->batch.size = size;
    out->batch.view_count = method->views.count;
    for (int v = 0; v < method->views.count; v++) {
        const int side = method->views.views[v].size;
        const size_t bytes = (size_t)size * side * side * 3;
        out->pixels[v] = malloc(bytes);
        assert_non_null(out->pixels[v]);
        Rng rng = rng_make(11, 0, (uint64_t)v, 0);
        for (size_t i = 0; i < bytes; i++) out->pixels[v][i] = (uint8_t)rng_below(&rng, 256);
        out->batch.views[v] = out->pixels[v];
        out->batch.view_size[v] = side;
    }
}

void method_fixture_batch_free(MethodFixtureBatch *batch) {
    for (int v = 0; v < AUGMENT_MAX_VIEWS; v++) free(batch->pixels[v]);
    memset(batch, 0, sizeof *batch);
}
