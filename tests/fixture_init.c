// Fixture init (tests/fixtures/README.md) in C.
#include "fixture_init.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "nn/weights.h"

uint32_t fixture_mix32(uint32_t x) {
    x ^= x >> 16;
    x *= 0x7feb352du;
    x ^= x >> 15;
    x *= 0x846ca68bu;
    x ^= x >> 16;
    return x;
}

uint32_t fixture_fnv1a32(const char *name) {
    uint32_t hash = 2166136261u;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        hash ^= *c;
        hash *= 16777619u;
    }
    return hash;
}

float fixture_u(const char *name, uint32_t index) {
    const uint32_t bits = fixture_mix32(fixture_fnv1a32(name) ^ fixture_mix32(index)) >> 8;
    return (float)bits * 0x1p-23f - 1.0f;  // both steps exact in float32
}

void fixture_fill(const char *name, float offset, float scale, float *out, size_t n) {
    const uint32_t hash = fixture_fnv1a32(name);
    for (size_t i = 0; i < n; i++) {
        const uint32_t bits = fixture_mix32(hash ^ fixture_mix32((uint32_t)i)) >> 8;
        const float u = (float)bits * 0x1p-23f - 1.0f;
        const float scaled = scale * u;  // float32 product, then float32 sum (no contraction)
        out[i] = offset + scaled;
    }
}

static int ends_with(const char *name, const char *suffix) {
    const size_t length = strlen(name), suffix_length = strlen(suffix);
    return length >= suffix_length && strcmp(name + length - suffix_length, suffix) == 0;
}

int fixture_rule(const Parameter *param, float *offset, float *scale) {
    if (param->rank == 4) {  // conv weight, torch (O, I, KH, KW)
        const double fan_out =
            (double)param->torch_shape[0] * param->torch_shape[2] * param->torch_shape[3];
        *offset = 0.0f;
        *scale = (float)sqrt(6.0 / fan_out);
        return 0;
    }
    static const struct {
        const char *suffix;
        float offset, scale;
    } bn_rules[] = {
        {".running_mean", 0.0f, 0.1f},
        {".running_var", 1.0f, 0.25f},
        {".weight", 1.0f, 0.25f},
        {".bias", 0.0f, 0.25f},
    };
    for (size_t r = 0; r < sizeof bn_rules / sizeof *bn_rules; r++) {
        const int is_buffer = r < 2;
        if (!ends_with(param->name, bn_rules[r].suffix)) continue;
        if (is_buffer ? param->kind != PARAM_BUFFER : param->kind != PARAM_NORM) continue;
        *offset = bn_rules[r].offset;
        *scale = bn_rules[r].scale;
        return 0;
    }
    return -1;
}

int fixture_init_table(ParameterSet *set, ErrorMessage *err) {
    return fixture_init_table_by(set, fixture_rule, err);
}

int fixture_init_table_by(ParameterSet *set, FixtureRule rule, ErrorMessage *err) {
    for (int i = 0; i < set->count; i++) {
        const Parameter *param = &set->params[i];
        float offset, scale;
        if (rule(param, &offset, &scale))
            return error_set(err, "fixture init: no rule for '%s'", param->name);
        float *torch = malloc(param->count * sizeof *torch);
        float *ours = malloc(param->count * sizeof *ours);
        if (!torch || !ours) {
            free(torch);
            free(ours);
            return error_set(err, "fixture init: out of memory for '%s'", param->name);
        }
        fixture_fill(param->name, offset, scale, torch, param->count);
        weights_from_torch_layout(param, torch, ours);
        set->backend->op.upload(set->backend, param->value, ours, param->count * sizeof *ours);
        free(torch);
        free(ours);
    }
    return 0;
}
