// Test helper (cmocka tests only; include after <cmocka.h>): typed lookups
// in a PyTorch fixture file that fail the test when a tensor is missing or
// has the wrong dtype or size.
#ifndef LTC_TESTS_FIXTURE_TENSORS_H
#define LTC_TESTS_FIXTURE_TENSORS_H

#include <string.h>

#include "nn/safetensors.h"

static inline const SafeTensor *fixture_find_tensor(const SafeTensors *file, const char *name,
                                                    SafeDType dtype, int64_t elements) {
    const SafeTensor *tensor = safetensors_find(file, name);
    if (!tensor) fail_msg("fixture has no tensor %s", name);
    assert_int_equal(tensor->dtype, dtype);
    assert_int_equal(safe_tensor_elements(tensor), elements);
    return tensor;
}

// A float64 scalar (a reference value or an f32err entry).
static inline double fixture_read_f64(const SafeTensors *file, const char *name) {
    double value;
    memcpy(&value, safetensors_data(file, fixture_find_tensor(file, name, SAFE_F64, 1)),
           sizeof value);
    return value;
}

static inline float fixture_read_f32(const SafeTensors *file, const char *name) {
    float value;
    memcpy(&value, safetensors_data(file, fixture_find_tensor(file, name, SAFE_F32, 1)),
           sizeof value);
    return value;
}

#endif
