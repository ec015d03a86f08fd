// Test helper (cmocka tests only; include after <cmocka.h>): judging a ViT
// (src/nn/vit.h) against a PyTorch reference stored in a fixture file
// (tests/fixtures/vit.safetensors, dinov3.safetensors): its normalised
// tokens, the gradients of sum(tokens * w), and finite differences through
// a whole model. Shared by tests/test_vit.c and tests/test_vit_dinov3.c.
#ifndef LTC_TESTS_VIT_PARITY_H
#define LTC_TESTS_VIT_PARITY_H

#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture_init.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "nn/vit.h"
#include "nn/weights.h"
#include "vit_fixture.h"

#define VIT_PARITY_BATCH 2
#define VIT_PARITY_GRAD_SAMPLES 256
#define VIT_PARITY_SAMPLE_STRIDE 2654435761ull

// Tolerances against the float64 truth, as tests/test_resnet.c: PyTorch's
// own float32 run lands f32err from it; a correct float32 implementation
// rounds differently but at that scale (4x for margin, its largest error
// can exceed PyTorch's by chance), plus a floor of 1e-6 of the tensor's
// scale where f32err is tiny. A ViT has no branch decisions (LayerNorm,
// softmax, GELU and SiLU are smooth), so there are no kinks to allow for.
// Measured (torch 1.13, tiny models): f32err of the tokens 2e-6 to 3e-6 of
// max |tokens| ~4, i.e. ~7e-7 relative.
#define VIT_PARITY_F32ERR_FACTOR 4.0
// The requirement, on the class token and on the patch tokens:
// max |ours - truth| / max |truth| over each.
#define VIT_PARITY_RELATIVE_ERROR 1e-5

typedef struct VitParity {
    SafeTensors *fixture;
    Backend *backend;
} VitParity;

// The fixture, backend and parity state of a test file (statics `fixture`,
// `backend`, `parity`) with its cmocka group setups for the cpu and ref
// backends (setup_cpu, setup_ref) and teardown, for the fixture file `path`.
#define VIT_PARITY_TEST_STATE(path)                                                     \
    static SafeTensors fixture;                                                         \
    static Backend *backend;                                                            \
    static VitParity parity;                                                            \
    static int setup(const char *backend_name) {                                        \
        const int status = vit_parity_open(&parity, &fixture, path, backend_name);      \
        backend = parity.backend;                                                       \
        return status;                                                                  \
    }                                                                                   \
    static int setup_cpu(void **state) { return setup("cpu"); }                         \
    static int setup_ref(void **state) { return setup("ref"); }                         \
    static int teardown(void **state) {                                                 \
        vit_parity_close(&parity);                                                      \
        return 0;                                                                       \
    }

// A cmocka group setup: reads the fixture file, makes the backend.
static inline int vit_parity_open(VitParity *p, SafeTensors *fixture, const char *path,
                                  const char *backend_name) {
    ErrorMessage err = {{0}};
    *p = (VitParity){.fixture = fixture};
    if (safetensors_read(path, fixture, &err)) return -1;
    p->backend = backend_create(backend_name, 2, &err);
    return p->backend ? 0 : -1;
}

static inline void vit_parity_close(VitParity *p) {
    backend_destroy(p->backend);
    safetensors_free(p->fixture);
}

// max |ours - truth| / max |truth| over the tokens [first, last) of every
// sample of (B, T, D).
static inline double vit_parity_relative(const float *ours, const double *truth, int tokens,
                                         int dim, int first, int last) {
    double error = 0.0, scale = 0.0;
    for (int b = 0; b < VIT_PARITY_BATCH; b++)
        for (int t = first; t < last; t++)
            for (int c = 0; c < dim; c++) {
                const size_t i = ((size_t)b * tokens + t) * dim + c;
                error = fmax(error, fabs(ours[i] - truth[i]));
                scale = fmax(scale, fabs(truth[i]));
            }
    return error / scale;
}

// Judges our tokens (B, T, D) of a model with `registers` registers against
// the fixture's `name`: per element within F32ERR_FACTOR f32err (+ 1e-6 of
// the scale), and the class token and the patch tokens each within the
// relative error the issue asks for.
static inline void vit_parity_check_tokens(const VitParity *p, const char *name,
                                           const float *ours, int tokens, int dim,
                                           int registers) {
    const size_t n = (size_t)VIT_PARITY_BATCH * tokens * dim;
    char key[200];
    snprintf(key, sizeof key, "f32err/%s", name);
    double *truth = vit_fixture_doubles(p->fixture, name, n);
    const double f32err = fixture_read_f64(p->fixture, key);
    assert_int_equal(gradcheck_count_outside_truth(name, n, ours, truth, f32err), 0);
    const double cls = vit_parity_relative(ours, truth, tokens, dim, 0, 1);
    const double patches = vit_parity_relative(ours, truth, tokens, dim, 1 + registers, tokens);
    free(truth);
    fprintf(stderr, "  %s on %s: relative error class token %.2e, patch tokens %.2e\n", name,
            p->backend->name, cls, patches);
    assert_true(cls <= VIT_PARITY_RELATIVE_ERROR);
    assert_true(patches <= VIT_PARITY_RELATIVE_ERROR);
}

// Runs slot `slot` (size px) on fixture input "input/<input_name>/<size>"
// (a training forward keeps what backward needs) and checks its tokens
// against `tokens_name`; returns the input (backend memory: the conv's
// weight gradient reads it in backward), freed by the caller.
static inline float *vit_parity_forward(const VitParity *p, Vit *model, const char *input_name,
                                        const char *tokens_name, int slot, int size,
                                        int training) {
    ErrorMessage err = {{0}};
    Backend *backend = p->backend;
    float *input = vit_fixture_input(backend, input_name, size, VIT_PARITY_BATCH);
    if (vit_forward(model, slot, VIT_PARITY_BATCH, (const Act *)input, training, &err))
        fail_msg("%s", err.text);
    const int tokens = vit_slot_tokens(model, slot);
    const size_t n = (size_t)VIT_PARITY_BATCH * tokens * model->feature_dim;
    float *ours = malloc(n * sizeof *ours);
    backend->op.download(backend, ours, vit_tokens(model, slot), n * sizeof *ours);
    vit_parity_check_tokens(p, tokens_name, ours, tokens, model->feature_dim,
                            model->config.register_tokens);
    free(ours);
    return input;
}

// One gradient entry: our gradient of P (torch layout) against
// "<prefix>/grad/P" in full, or its samples, sum and sum of squares.
static inline void vit_parity_check_parameter(const VitParity *p, const char *prefix,
                                              const Parameter *param, const float *ours) {
    const SafeTensors *fixture = p->fixture;
    char name[256], key[300];
    snprintf(name, sizeof name, "%s/grad/%s", prefix, param->name);
    if (safetensors_find(fixture, name)) {
        double *truth = vit_fixture_doubles(fixture, name, param->count);
        snprintf(key, sizeof key, "f32err/%s", name);
        assert_int_equal(gradcheck_count_outside_truth(name, param->count, ours, truth,
                                                       fixture_read_f64(fixture, key)),
                         0);
        free(truth);
        return;
    }
    snprintf(name, sizeof name, "%s/grad_sample/%s", prefix, param->name);
    double *truth = vit_fixture_doubles(fixture, name, VIT_PARITY_GRAD_SAMPLES);
    float sample[VIT_PARITY_GRAD_SAMPLES];
    double sum = 0.0, sumsq = 0.0, scale = 0.0;
    for (size_t i = 0; i < param->count; i++) {
        sum += ours[i];
        sumsq += (double)ours[i] * ours[i];
        scale += fabs(ours[i]);
    }
    for (uint64_t k = 0; k < VIT_PARITY_GRAD_SAMPLES; k++)
        sample[k] = ours[k * VIT_PARITY_SAMPLE_STRIDE % param->count];
    snprintf(key, sizeof key, "f32err/%s", name);
    assert_int_equal(gradcheck_count_outside_truth(name, VIT_PARITY_GRAD_SAMPLES, sample, truth,
                                                   fixture_read_f64(fixture, key)),
                     0);
    free(truth);
    // Sums: within 4x the bound on PyTorch's summed errors, plus 1e-6 of
    // their scale (sum |g| for the sum, sum g^2 for the sum of squares).
    const struct { const char *kind; double value, scale; } sums[] = {
        {"grad_sum", sum, scale}, {"grad_sumsq", sumsq, sumsq}};
    for (int s = 0; s < 2; s++) {
        snprintf(name, sizeof name, "%s/%s/%s", prefix, sums[s].kind, param->name);
        snprintf(key, sizeof key, "f32err/%s", name);
        const double truth_sum = fixture_read_f64(fixture, name);
        const double allowed =
            VIT_PARITY_F32ERR_FACTOR * fixture_read_f64(fixture, key) + 1e-6 * sums[s].scale;
        if (!(fabs(sums[s].value - truth_sum) <= allowed))
            fail_msg("%s: %.10g, truth %.10g (allowed %.3g)", name, sums[s].value, truth_sum,
                     allowed);
    }
}

// Backward of sum(tokens * w) on slot `slot` (w = fixture init `loss_name`
// (0, 1)), every parameter's gradient checked against "<prefix>/grad...".
static inline void vit_parity_check_backward(const VitParity *p, Vit *model, int slot,
                                             const char *loss_name, const char *prefix) {
    ErrorMessage err = {{0}};
    Backend *backend = p->backend;
    const size_t n = (size_t)VIT_PARITY_BATCH * vit_slot_tokens(model, slot) * model->feature_dim;
    float *weights = malloc(n * sizeof *weights);
    fixture_fill(loss_name, 0.0f, 1.0f, weights, n);
    float *dtokens = backend->op.alloc(backend, n * sizeof *dtokens);
    backend->op.upload(backend, dtokens, weights, n * sizeof *weights);
    parameter_set_zero_grads(&model->params);
    if (vit_backward_tokens(model, slot, (const Act *)dtokens, &err)) fail_msg("%s", err.text);
    for (int i = 0; i < model->params.count; i++) {
        const Parameter *param = &model->params.params[i];
        float *ours = malloc(param->count * sizeof *ours);
        float *torch = malloc(param->count * sizeof *torch);
        backend->op.download(backend, ours, param->grad, param->count * sizeof *ours);
        weights_to_torch_layout(param, ours, torch);
        vit_parity_check_parameter(p, prefix, param, torch);
        free(ours);
        free(torch);
    }
    free(weights);
    backend->op.free(backend, dtokens);
}

// Declares preset `name` at 224 px (parameters only, nothing allocated) and
// checks its parameter count; the caller frees the model.
static inline void vit_parity_declare_preset(Backend *backend, const char *name, size_t count,
                                             VitConfig *config, Vit *model) {
    ErrorMessage err = {{0}};
    if (vit_config_preset(name, 224, config, &err) || vit_declare(model, backend, config, &err))
        fail_msg("%s: %s", name, err.text);
    if (parameter_set_elements(&model->params) != count)
        fail_msg("%s: %zu parameters, expected %zu", name, parameter_set_elements(&model->params),
                 count);
}

// Writes the tensors of `fixture` under `prefix` (renamed without it) to
// path, except `drop`, with `rename_from` named `rename_to` (either may be
// NULL): a weight file with one thing wrong.
static inline void vit_parity_write_variant(const SafeTensors *fixture, const char *path,
                                            const char *prefix, const char *drop,
                                            const char *rename_from, const char *rename_to) {
    ErrorMessage err = {{0}};
    const size_t length = strlen(prefix);
    SafeTensorWrite *entries = calloc((size_t)fixture->count, sizeof *entries);
    char (*names)[SAFETENSORS_MAX_NAME] = calloc((size_t)fixture->count, sizeof *names);
    int count = 0;
    for (int t = 0; t < fixture->count; t++) {
        const SafeTensor *tensor = &fixture->tensors[t];
        if (strncmp(tensor->name, prefix, length) != 0) continue;
        const char *name = tensor->name + length;
        if (drop && strcmp(name, drop) == 0) continue;
        snprintf(names[count], sizeof names[count], "%s",
                 rename_from && strcmp(name, rename_from) == 0 ? rename_to : name);
        entries[count] = (SafeTensorWrite){.name = names[count], .dtype = tensor->dtype,
                                           .rank = tensor->rank,
                                           .data = safetensors_data(fixture, tensor)};
        memcpy(entries[count].shape, tensor->shape, sizeof tensor->shape);
        count++;
    }
    if (safetensors_write(path, entries, count, NULL, 0, &err)) fail_msg("%s", err.text);
    free(entries);
    free(names);
}

// ---- finite differences through a whole model ------------------------------------------

typedef struct VitWholeModel {
    Vit model;
    Backend *backend;
    float *input;       // backend (B, S, S, 3)
    float *projection;  // host (B, T, D)
    float *dtokens;     // backend
    size_t n_tokens;
} VitWholeModel;

// <projection, tokens> of a training forward with the random draws (drop
// path, RoPE rescale) of training forward 7: the same for every evaluation.
static inline double vit_whole_loss(void *context, const float *unused) {
    VitWholeModel *w = context;
    w->model.training_forwards = 7;
    ErrorMessage err = {{0}};
    if (vit_forward(&w->model, 0, VIT_PARITY_BATCH, (const Act *)w->input, 1, &err))
        fail_msg("%s", err.text);
    float *tokens = malloc(w->n_tokens * sizeof *tokens);
    w->backend->op.download(w->backend, tokens, vit_tokens(&w->model, 0),
                            w->n_tokens * sizeof *tokens);
    const double loss = gradcheck_project(w->n_tokens, tokens, w->projection);
    free(tokens);
    return loss;
}

// Backward of the loss at the current weights, then the analytic gradient
// of the first (up to) 40 elements of each named parameter against central
// differences. The loss sums a few hundred fp32 tokens (rounding noise
// ~1e-6 each, ~2e-5 in all); h = 1e-2 keeps that noise / 2h at 1e-3 and the
// O(h^2) truncation of these O(1)-curvature functions near 1e-4.
static inline void vit_whole_model_check(VitWholeModel *w, const char *input_name, int size,
                                         const char *const *names, int count) {
    ErrorMessage err = {{0}};
    Backend *backend = w->backend;
    w->input = vit_fixture_input(backend, input_name, size, VIT_PARITY_BATCH);
    w->n_tokens = (size_t)VIT_PARITY_BATCH * vit_slot_tokens(&w->model, 0) * w->model.feature_dim;
    w->projection = malloc(w->n_tokens * sizeof *w->projection);
    fixture_fill("fd/projection", 0.0f, 1.0f, w->projection, w->n_tokens);
    w->dtokens = backend->op.alloc(backend, w->n_tokens * sizeof(float));
    backend->op.upload(backend, w->dtokens, w->projection, w->n_tokens * sizeof(float));
    vit_whole_loss(w, NULL);
    parameter_set_zero_grads(&w->model.params);
    if (vit_backward_tokens(&w->model, 0, (const Act *)w->dtokens, &err)) fail_msg("%s", err.text);
    const GradcheckTolerance tolerance = {.step = 1e-2f, .rtol = 1e-2, .atol = 2e-3};
    for (int i = 0; i < count; i++) {
        const Parameter *param = parameter_find(&w->model.params, names[i]);
        assert_non_null(param);
        const size_t n = param->count < 40 ? param->count : 40;
        float analytic[40];
        backend->op.download(backend, analytic, param->grad, n * sizeof(float));
        // The loss reads the model, so x is the parameter itself (host memory on CPU backends).
        assert_int_equal(gradcheck_compare(names[i], vit_whole_loss, w, param->value, n, analytic,
                                           tolerance),
                         0);
    }
    free(w->projection);
    backend->op.free(backend, w->input);
    backend->op.free(backend, w->dtokens);
}

#endif
