// Test helper for comparing a fast backend (cpu or cuda) with the ref
// backend (the oracle) op by op, one cmocka group per fast backend: setup
// create_cpu / create_cuda, teardown destroy_backends, and
// FAST_BACKEND_GROUPS(tests) to run both. A group whose backend cannot be
// made (cuda without a GPU) reports its tests as skipped, not passed.
//
// Buffers live in host memory (the ref backend's); the fast backend works on
// a device twin of each (the same memory for cpu): D(x) hands an op the twin
// with the host contents uploaded, H(y) brings an output back. Buffers are
// freed by free_buffers (a per-test teardown; 64 at a time at most).
//
// Header only, with static state: each test binary that includes it has its
// own backends and buffer table.
#ifndef LTC_TESTS_BACKEND_MIRROR_H
#define LTC_TESTS_BACKEND_MIRROR_H

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "gradcheck.h"

static Backend *fast, *ref;
static int fast_shares_memory;  // cpu: the twins are the host buffers themselves
static char fast_missing[600];  // why the backend of this group is not there

// Every buffer a test allocates, with its twin; freed by the per-test teardown.
typedef struct Mirror {
    char *host, *device;
    size_t bytes;
} Mirror;
static Mirror mirrors[64];
static int mirror_count;

static void *buffer(size_t bytes) {
    assert_true(mirror_count < 64);
    Mirror *m = &mirrors[mirror_count];
    m->host = ref->op.alloc(ref, bytes);
    assert_non_null(m->host);
    m->device = fast_shares_memory ? m->host : fast->op.alloc(fast, bytes);
    assert_non_null(m->device);
    m->bytes = bytes;
    mirror_count++;
    return m->host;
}

// The mirror holding host address p (which may point inside a buffer).
static const Mirror *mirror_of(const void *p) {
    for (int i = 0; i < mirror_count; i++)
        if ((const char *)p >= mirrors[i].host && (const char *)p < mirrors[i].host + mirrors[i].bytes)
            return &mirrors[i];
    fail_msg("pointer %p is not a test buffer", p);
    return NULL;
}

// The device twin of host buffer p (or of the same place inside it), with
// the whole buffer's host contents uploaded first. NULL stays NULL.
static void *D(const void *p) {
    if (!p || fast_shares_memory) return (void *)p;
    const Mirror *m = mirror_of(p);
    fast->op.upload(fast, m->device, m->host, m->bytes);
    return m->device + ((const char *)p - m->host);
}

// Brings the twin of the buffer holding p back into host memory.
static void H(const void *p) {
    if (fast_shares_memory) return;
    const Mirror *m = mirror_of(p);
    fast->op.download(fast, m->host, m->device, m->bytes);
}

static float *tensor(size_t n) { return buffer(n * sizeof(float)); }

static float *random_tensor(size_t n, float low, float high, uint64_t seed) {
    float *p = tensor(n);
    gradcheck_fill_uniform(p, n, low, high, seed);
    return p;
}

static float *copy_of(const float *x, size_t n) {
    float *p = tensor(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

// Output buffers start as NaN, so an element an op forgets to write fails.
static float *nan_tensor(size_t n) {
    float *p = tensor(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static int free_buffers(void **state) {
    for (int i = 0; i < mirror_count; i++) {
        if (!fast_shares_memory) fast->op.free(fast, mirrors[i].device);
        ref->op.free(ref, mirrors[i].host);
    }
    mirror_count = 0;
    return 0;
}

static void expect_close(const char *label, size_t n, const float *actual, const float *expected,
                         double rtol, double atol) {
    assert_int_equal(gradcheck_count_mismatches(label, n, actual, expected, rtol, atol), 0);
}

// Each test starts here: skipped (with the reason) where the group's backend
// could not be made.
#define NEED_FAST_BACKEND()                                                  \
    do {                                                                     \
        if (!fast) {                                                         \
            fprintf(stderr, "  skipped: %s\n", fast_missing);               \
            skip();                                                          \
        }                                                                    \
    } while (0)

static int create_backends(const char *name, int threads) {
    ErrorMessage err = {{0}};
    ref = backend_create("ref", 1, &err);
    if (!ref) return -1;
    fast = backend_create(name, threads, &err);
    fast_shares_memory = fast && strcmp(fast->name, "cpu") == 0;
    snprintf(fast_missing, sizeof fast_missing, "%s backend: %s", name, err.text);
    return 0;
}

static int create_cpu(void **state) { return create_backends("cpu", 2); }
static int create_cuda(void **state) { return create_backends("cuda", 0); }

static int destroy_backends(void **state) {
    if (fast) backend_destroy(fast);
    backend_destroy(ref);
    fast = ref = NULL;
    return 0;
}

// The failures of tests run as group "cpu", then as group "cuda".
#define FAST_BACKEND_GROUPS(tests)                                                     \
    (cmocka_run_group_tests_name("cpu", tests, create_cpu, destroy_backends) +         \
     cmocka_run_group_tests_name("cuda", tests, create_cuda, destroy_backends))

#endif
