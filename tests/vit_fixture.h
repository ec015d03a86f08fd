// Test helper (cmocka tests only; include after <cmocka.h>): the tiny ViTs
// of tests/fixtures/vit.safetensors (tools/make_vit_fixtures.py) in C:
// their configuration, fixture-init weights and inputs by the script's
// rules, and float64 reads of the file.
#ifndef LTC_TESTS_VIT_FIXTURE_H
#define LTC_TESTS_VIT_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture_init.h"
#include "fixture_tensors.h"
#include "nn/vit.h"
#include "nn/weights.h"

#define VIT_FIXTURE_PATH "tests/fixtures/vit.safetensors"

// The fixture's geometry: depth 2, 2 heads, MLP 4 D, LayerScale, eps 1e-6;
// the class token has a position only without registers (timm).
static inline VitConfig vit_fixture_config(int patch, int dim, int registers, int grid,
                                           VitPosInterpolation interpolation) {
    VitConfig config = {
        .patch_size = patch, .embed_dim = dim, .depth = 2, .heads = 2, .mlp_hidden = 4 * dim,
        .register_tokens = registers, .class_pos = registers == 0, .pos_grid = grid,
        .layer_scale = 1, .layer_scale_init = 1e-5f, .norm_eps = 1e-6f,
        .pos_interpolation = interpolation, .pool = VIT_POOL_MEAN,
    };
    vit_config_name(&config);
    return config;
}

// make_vit_fixtures.py's init_rule: (offset, scale) by the parameter's name.
static inline int vit_fixture_rule(const Parameter *param, float *offset, float *scale) {
    const char *dot = strrchr(param->name, '.');
    const char *leaf = dot ? dot + 1 : param->name;
    *offset = 0.0f;
    if (!strcmp(leaf, "cls_token") || !strcmp(leaf, "reg_token")) *scale = 1.0f;
    else if (!strcmp(leaf, "pos_embed")) *scale = 0.5f;
    else if (!strcmp(leaf, "gamma")) *offset = 0.5f, *scale = 0.25f;
    else if (strstr(param->name, "norm") && !strcmp(leaf, "weight"))
        *offset = 1.0f, *scale = 0.25f;
    else if (strstr(param->name, "norm") && !strcmp(leaf, "bias")) *scale = 0.25f;
    else if (!strcmp(leaf, "weight")) {
        double fan_in = 1.0;
        for (int d = 1; d < param->rank; d++) fan_in *= param->torch_shape[d];
        *scale = (float)sqrt(3.0 / fan_in);
    } else *scale = 0.1f;  // biases
    return 0;
}

// Every parameter of a timm-named table by fixture init, uploaded.
static inline int vit_fixture_init_weights(ParameterSet *params, ErrorMessage *err) {
    return fixture_init_table_by(params, vit_fixture_rule, err);
}

// Fixture init "input/<model>/<size>" (batch, 3, S, S) as NHWC backend memory.
static inline float *vit_fixture_input(Backend *backend, const char *model, int size, int batch) {
    char name[64];
    snprintf(name, sizeof name, "input/%s/%d", model, size);
    const size_t pixels = (size_t)size * size, n = (size_t)batch * 3 * pixels;
    float *nchw = malloc(n * sizeof *nchw), *nhwc = malloc(n * sizeof *nhwc);
    fixture_fill(name, 0.0f, 1.0f, nchw, n);
    for (int b = 0; b < batch; b++)
        for (int c = 0; c < 3; c++)
            for (size_t p = 0; p < pixels; p++)
                nhwc[((size_t)b * pixels + p) * 3 + c] = nchw[((size_t)b * 3 + c) * pixels + p];
    float *input = backend->op.alloc(backend, n * sizeof *input);
    backend->op.upload(backend, input, nhwc, n * sizeof *input);
    free(nchw);
    free(nhwc);
    return input;
}

// A copy of F64 tensor `name` with n elements.
static inline double *vit_fixture_doubles(const SafeTensors *file, const char *name, size_t n) {
    const SafeTensor *tensor = fixture_find_tensor(file, name, SAFE_F64, (int64_t)n);
    double *copy = malloc(n * sizeof *copy + 1);
    memcpy(copy, safetensors_data(file, tensor), n * sizeof *copy);
    return copy;
}

#endif
