// The backend under test and per-test tensors (see backend_fixture.h).
#include "backend_fixture.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/ref/ref_backend.h"
#include "gradcheck.h"

#define FIXTURE_MAX_TENSORS 128

Backend *fixture_backend;
static void *allocations[FIXTURE_MAX_TENSORS];
static int allocation_count;

Backend *fixture_backend_of_prestate(void **state) {
    const char *name = *state;
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(name, 2, &err);
    if (!backend) {
        if (strcmp(name, "cuda") != 0) fail_msg("%s", err.text);
        fprintf(stderr, "  skipped: %s\n", err.text);
        skip();
    }
    return backend;
}

int fixture_backend_create_ref(void **state) {
    (void)state;
    ErrorMessage err;
    fixture_backend = ref_backend_create(&err);
    return fixture_backend ? 0 : -1;
}

int fixture_backend_create_cpu(void **state) {
    (void)state;
    ErrorMessage err;
    fixture_backend = backend_create("cpu", 2, &err);
    return fixture_backend ? 0 : -1;
}

int fixture_backend_destroy(void **state) {
    (void)state;
    backend_destroy(fixture_backend);
    fixture_backend = NULL;
    return 0;
}

Backend *fixture_ref, *fixture_cpu;

int fixture_backends_create(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    fixture_ref = backend_create("ref", 1, &err);
    fixture_cpu = backend_create("cpu", 0, &err);
    return fixture_ref && fixture_cpu ? 0 : -1;
}

int fixture_backends_destroy(void **state) {
    (void)state;
    backend_destroy(fixture_ref);
    backend_destroy(fixture_cpu);
    fixture_ref = fixture_cpu = NULL;
    return 0;
}

float *fixture_tensor(size_t n) {
    float *p = allocation_count < FIXTURE_MAX_TENSORS
                   ? fixture_backend->op.alloc(fixture_backend, n * sizeof(float))
                   : NULL;
    if (!p) {
        fprintf(stderr, "fixture_tensor: no room for tensor %d of %zu floats\n",
                allocation_count + 1, n);
        abort();
    }
    allocations[allocation_count++] = p;
    return p;
}

float *fixture_random_tensor(size_t n, float low, float high, uint64_t seed) {
    float *p = fixture_tensor(n);
    gradcheck_fill_uniform(p, n, low, high, seed);
    return p;
}

int fixture_tensors_free(void **state) {
    (void)state;
    for (int i = 0; i < allocation_count; i++)
        fixture_backend->op.free(fixture_backend, allocations[i]);
    allocation_count = 0;
    return 0;
}
