// Test helper: "fixture init" of tests/fixtures/README.md in C, the
// deterministic values both PyTorch (tools/make_fixtures.py) and the C tests
// compute instead of storing full weights.
#ifndef LTC_TESTS_FIXTURE_INIT_H
#define LTC_TESTS_FIXTURE_INIT_H

#include <stddef.h>
#include <stdint.h>

#include "nn/parameters.h"
#include "util/error.h"

uint32_t fixture_mix32(uint32_t x);
uint32_t fixture_fnv1a32(const char *name);
// u(name, i) in [-1, 1), exact.
float fixture_u(const char *name, uint32_t index);
// out[i] = float32(offset + float32(scale * u(name, i))) for i < n (offset and
// scale already rounded to float32), in PyTorch's flat layout.
void fixture_fill(const char *name, float offset, float scale, float *out, size_t n);
// The README's (offset, scale) for a ResNet table entry (conv weight, BN
// weight/bias/running_mean/running_var); -1 for anything else.
int fixture_rule(const Parameter *param, float *offset, float *scale);
// Sets every entry of a table (params or buffers) by fixture init: values in
// the torch layout, converted to ours, uploaded.
int fixture_init_table(ParameterSet *set, ErrorMessage *err);
// The same with another model's rules: rule(param, &offset, &scale) is 0, or
// -1 when it has none for param.
typedef int (*FixtureRule)(const Parameter *param, float *offset, float *scale);
int fixture_init_table_by(ParameterSet *set, FixtureRule rule, ErrorMessage *err);

#endif
