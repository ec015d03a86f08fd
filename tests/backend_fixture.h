// Test helper: the backend under test for a group of cmocka tests, and the
// tensors a test allocates on it, freed by the per-test teardown.
#ifndef LTC_TESTS_BACKEND_FIXTURE_H
#define LTC_TESTS_BACKEND_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

extern Backend *fixture_backend;

// Group setup / teardown for tests that compare backends: fixture_ref
// (the oracle) and fixture_cpu (all usable cores).
extern Backend *fixture_ref, *fixture_cpu;
int fixture_backends_create(void **state);
int fixture_backends_destroy(void **state);

// The backend named by a cmocka test's prestate ("ref", "cpu", "cuda"),
// for tests that run once per backend; the caller destroys it. A cuda
// backend this machine cannot make (no GPU) skips the test; any other
// failure fails it.
Backend *fixture_backend_of_prestate(void **state);
// The cmocka entries of `test` once per backend, its prestate the name.
#define ON_EVERY_BACKEND(test)                                                       \
    cmocka_unit_test_prestate(test, "ref"), cmocka_unit_test_prestate(test, "cpu"), \
        cmocka_unit_test_prestate(test, "cuda")

// Group setup / teardown: the ref backend as fixture_backend.
int fixture_backend_create_ref(void **state);
// Group setup: the cpu backend (2 threads, so parallel paths run) as fixture_backend.
int fixture_backend_create_cpu(void **state);
int fixture_backend_destroy(void **state);

// (n) floats of backend memory, freed by fixture_tensors_free; aborts when
// out of memory or past the per-test limit (a bug in the test).
float *fixture_tensor(size_t n);
// The same, filled uniformly in [low, high) from seed.
float *fixture_random_tensor(size_t n, float low, float high, uint64_t seed);
// Per-test teardown.
int fixture_tensors_free(void **state);

#endif
