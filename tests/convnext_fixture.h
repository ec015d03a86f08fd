// Test helper (cmocka tests only; include after <cmocka.h>): the ConvNeXts
// of tests/fixtures/convnext.safetensors (tools/make_convnext_fixtures.py)
// in C: configurations, fixture-init weights by the script's rules and
// timm's names, and the comparison of features and maps with the file's
// float64 truth.
#ifndef LTC_TESTS_CONVNEXT_FIXTURE_H
#define LTC_TESTS_CONVNEXT_FIXTURE_H

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture_init.h"
#include "nn/convnext.h"
#include "nn/convnext_names.h"
#include "nn/weights.h"
#include "vit_parity.h"

#define CONVNEXT_FIXTURE_PATH "tests/fixtures/convnext.safetensors"
#define CONVNEXT_FIXTURE_PTH "tests/fixtures/convnext_dinov3.pth"
#define CONVNEXT_FIXTURE_BATCH 2
// The requirement: max |ours - truth| / max |truth| over the
// features and over the map.
#define CONVNEXT_RELATIVE_ERROR 1e-5

// The script's init_rule by parameter kind: weights (0, sqrt(3 / fan_in)),
// biases (0, 0.1), LayerNorm (1 or 0, 0.25), gamma (0.5, 0.25).
static inline int convnext_fixture_rule(const Parameter *param, float *offset, float *scale) {
    *offset = 0.0f;
    const int weight = strstr(param->name, ".weight") != NULL;
    switch (param->kind) {
    case PARAM_NORM: *offset = weight ? 1.0f : 0.0f, *scale = 0.25f; return 0;
    case PARAM_EMBEDDING: *offset = 0.5f, *scale = 0.25f; return 0;
    case PARAM_BIAS: *scale = 0.1f; return 0;
    case PARAM_WEIGHT: {
        double fan_in = 1.0;
        for (int d = 1; d < param->rank; d++) fan_in *= param->torch_shape[d];
        *scale = (float)sqrt(3.0 / fan_in);
        return 0;
    }
    default: return -1;
    }
}

// The fixture's small ConvNeXt (depths 1-1-2-1, widths 8-16-24-32) in a naming.
static inline ConvnextConfig convnext_fixture_small(ConvnextNaming naming) {
    ConvnextConfig c = {.depths = {1, 1, 2, 1}, .dims = {8, 16, 24, 32}, .naming = naming,
                        .kernel = 7, .norm_eps = 1e-6f, .layer_scale_init = 1e-6f};
    convnext_config_name(&c);
    return c;
}

// A model of config with slots at the given sizes (batch 2), frozen or not,
// its weights fixture init by timm's names (the script's): each parameter
// takes the value of the timm tensor of its role.
static inline void convnext_fixture_build(Convnext *model, Backend *backend,
                                          const ConvnextConfig *config, const int *sizes,
                                          int count, int frozen) {
    ErrorMessage err = {{0}};
    ConvnextInputShape shapes[4];
    for (int i = 0; i < count; i++) shapes[i] = (ConvnextInputShape){CONVNEXT_FIXTURE_BATCH,
                                                                     sizes[i]};
    if (convnext_declare(model, backend, config, &err)) fail_msg("%s", err.text);
    model->frozen = frozen;
    if (convnext_allocate(model, shapes, count, &err)) fail_msg("%s", err.text);
    size_t largest = 1;
    for (int i = 0; i < model->params.count; i++)
        if (model->params.params[i].count > largest) largest = model->params.params[i].count;
    float *torch = malloc(largest * sizeof *torch), *ours = malloc(largest * sizeof *ours);
    for (int i = 0; i < model->params.count; i++) {
        const Parameter *param = &model->params.params[i];
        char timm_name[PARAM_MAX_NAME];
        convnext_tensor_name(CONVNEXT_TIMM, &model->roles[i], timm_name, sizeof timm_name);
        float offset = 0.0f, scale = 0.0f;
        assert_int_equal(convnext_fixture_rule(param, &offset, &scale), 0);
        fixture_fill(timm_name, offset, scale, torch, param->count);
        weights_from_torch_layout(param, torch, ours);
        backend->op.upload(backend, param->value, ours, param->count * sizeof *ours);
    }
    free(torch);
    free(ours);
}

// Judges out (n floats, ours) against the fixture's float64 `name`: every
// element within 4 f32err (+ 1e-6 of the scale), and the relative error
// the issue asks for; returns that relative error.
static inline double convnext_fixture_check(const VitParity *p, const char *name,
                                            const float *ours, size_t n) {
    char key[200];
    snprintf(key, sizeof key, "f32err/%s", name);
    double *truth = vit_fixture_doubles(p->fixture, name, n);
    assert_int_equal(gradcheck_count_outside_truth(name, n, ours, truth,
                                                   fixture_read_f64(p->fixture, key)),
                     0);
    double error = 0.0, scale = 0.0;
    for (size_t i = 0; i < n; i++) {
        error = fmax(error, fabs(ours[i] - truth[i]));
        scale = fmax(scale, fabs(truth[i]));
    }
    free(truth);
    const double relative = error / scale;
    assert_true(relative <= CONVNEXT_RELATIVE_ERROR);
    return relative;
}

// An eval (or training) forward of slot on fixture input "input/convnext/<size>";
// the features and the map against "<prefix>/features" and "<prefix>/map".
// Returns the input (backend memory), freed by the caller.
static inline float *convnext_fixture_forward(const VitParity *p, Convnext *model, int slot,
                                              int size, int training, const char *prefix) {
    ErrorMessage err = {{0}};
    Backend *backend = p->backend;
    float *input = vit_fixture_input(backend, "convnext", size, CONVNEXT_FIXTURE_BATCH);
    if (convnext_forward(model, slot, CONVNEXT_FIXTURE_BATCH, (const Act *)input, training, &err))
        fail_msg("%s", err.text);
    int height, width;
    const Act *map = convnext_feature_map(model, slot, &height, &width);
    const size_t dim = (size_t)model->feature_dim;
    const size_t n_features = CONVNEXT_FIXTURE_BATCH * dim;
    const size_t n_map = n_features * height * width;
    float *ours = malloc(n_map * sizeof *ours);
    char name[128];
    backend->op.download(backend, ours, convnext_features(model, slot), n_features * sizeof *ours);
    snprintf(name, sizeof name, "%s/features", prefix);
    const double features = convnext_fixture_check(p, name, ours, n_features);
    backend->op.download(backend, ours, map, n_map * sizeof *ours);
    snprintf(name, sizeof name, "%s/map", prefix);
    const double map_error = convnext_fixture_check(p, name, ours, n_map);
    fprintf(stderr, "  %s on %s: relative error features %.2e, map %.2e\n", prefix,
            backend->name, features, map_error);
    free(ours);
    return input;
}

#endif
