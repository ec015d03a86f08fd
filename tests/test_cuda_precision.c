// The cuda backend storing activations in fp16 and bf16 (issue 9, step 3)
// against the ref backend in the same dtype, whole passes at a time: a
// ResNet-18 forward and backward, and one training step of SimCLR and of
// DINO (local views too), from the same weights and the same batch. Op by
// op the 16-bit kernels are checked by the cuda-fp16 / cuda-bf16 groups of
// the backend tests (backend_mirror.h); here the question is whether they
// compose: whether a whole pass on the GPU stays as close to ref's as the
// 16-bit pass itself is to fp32.
//
// The measure is self-calibrating: ref is also run in fp32, and the error
// of cuda-16 against ref-16 must stay below twice the error of ref-16
// against ref-32 (the size of the 16-bit rounding itself on this network
// and batch; kernels that round in other places, sum in other orders or
// pick other cuDNN algorithms move results by about that much, a wrong
// kernel by O(1)), with a floor of 1e-3 where the 16-bit error happens to
// be tiny. Skipped (reported, not passed) where no GPU works; run by make
// test-gpu.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/resnet.h"
#include "ssl_methods/method.h"
#include "util/rng.h"

// The error of cuda-16 against ref-16 allowed, given ref-16's against ref-32.
static double allowed_error(double sixteen_bit_error) {
    return fmax(2.0 * sixteen_bit_error, 1e-3);
}

// ||a - b|| / ||b||
static double relative_error(const float *a, const float *b, size_t n) {
    double difference = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        difference += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return norm > 0 ? sqrt(difference / norm) : sqrt(difference);
}

// A backend in dtype; NULL (the test is then skipped) for a cuda backend
// where no GPU works.
static Backend *backend_in(const char *name, ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(name, 1, &err);
    if (!backend) {
        if (strcmp(name, "ref") == 0) fail_msg("%s", err.text);
        fprintf(stderr, "  skipped: %s\n", err.text);
        return NULL;
    }
    if (backend_set_compute_dtype(backend, dtype, &err)) fail_msg("%s", err.text);
    return backend;
}

static float *download(Backend *backend, const void *device, size_t n) {
    float *host = malloc(n * sizeof *host);
    assert_non_null(host);
    backend->op.download(backend, host, device, n * sizeof *host);
    return host;
}

// The cuda backend takes every dtype and sizes activations by it.
static void test_cuda_dtypes(void **state) {
    const ComputeDtype dtypes[] = {COMPUTE_F32, COMPUTE_F16, COMPUTE_BF16};
    const size_t bytes[] = {4, 2, 2};
    for (int k = 0; k < 3; k++) {
        Backend *cuda = backend_in("cuda", dtypes[k]);
        if (!cuda) skip();
        assert_int_equal(cuda->compute_dtype, dtypes[k]);
        assert_int_equal(cuda->act_element_bytes, bytes[k]);
        assert_int_equal(act_bytes(cuda, 10), 10 * bytes[k]);
        backend_destroy(cuda);
    }
}

// ---- ResNet-18 forward and backward ----------------------------------------------------------

enum { BATCH = 4, SIZE = 64, DIM = 512 };

typedef struct ResnetPass {
    float *params;    // the initial fp32 weights
    float *features;  // (BATCH, DIM)
    float *grads;     // the parameter gradient arena
    size_t count;
} ResnetPass;

// Forward (training) and backward of ResNet-18 from seed 7 (weights drawn
// on the host: the same on every backend) on a fixed input, with d loss /
// d features a fixed pattern. 0, or -1 where the backend is not there.
static int resnet_pass(const char *name, ComputeDtype dtype, ResnetPass *pass) {
    Backend *backend = backend_in(name, dtype);
    if (!backend) return -1;
    ErrorMessage err = {{0}};
    Resnet model;
    const ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape input_shape = {BATCH, SIZE};
    if (resnet_create(&model, backend, &config, &input_shape, 1, 7, &err)) fail_msg("%s", err.text);
    pass->count = model.params.total;
    pass->params = download(backend, model.params.values, pass->count);
    const size_t pixels = (size_t)BATCH * SIZE * SIZE * 3;
    float *image = malloc(pixels * sizeof *image);
    assert_non_null(image);
    for (size_t i = 0; i < pixels; i++) image[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    float *image_device = backend->op.alloc(backend, pixels * sizeof(float));
    Act *input = backend->op.alloc(backend, act_bytes(backend, pixels));
    backend->op.upload(backend, image_device, image, pixels * sizeof(float));
    backend->op.float_to_act(backend, pixels, image_device, input);
    if (resnet_forward(&model, 0, BATCH, input, 1, &err)) fail_msg("%s", err.text);
    float *features = backend->op.alloc(backend, BATCH * DIM * sizeof(float));
    backend->op.act_to_float(backend, BATCH * DIM, resnet_features(&model, 0), features);
    pass->features = download(backend, features, BATCH * DIM);
    float dfeatures[BATCH * DIM];
    for (int i = 0; i < BATCH * DIM; i++) dfeatures[i] = (float)((i * 13) % 17) / 16.0f - 0.5f;
    backend->op.upload(backend, features, dfeatures, sizeof dfeatures);
    Act *dfeatures_act = backend->op.alloc(backend, act_bytes(backend, BATCH * DIM));
    backend->op.float_to_act(backend, BATCH * DIM, features, dfeatures_act);
    if (resnet_backward(&model, 0, dfeatures_act, &err)) fail_msg("%s", err.text);
    pass->grads = download(backend, model.params.grads, pass->count);
    backend->op.free(backend, image_device);
    backend->op.free(backend, input);
    backend->op.free(backend, features);
    backend->op.free(backend, dfeatures_act);
    free(image);
    resnet_free(&model);
    backend_destroy(backend);
    return 0;
}

static void resnet_pass_free(ResnetPass *pass) {
    free(pass->params), free(pass->features), free(pass->grads);
}

static void check_resnet(ComputeDtype dtype) {
    ResnetPass cuda16, ref16, ref32;
    if (resnet_pass("cuda", dtype, &cuda16)) skip();
    resnet_pass("ref", dtype, &ref16);
    resnet_pass("ref", COMPUTE_F32, &ref32);
    assert_int_equal(cuda16.count, ref16.count);
    assert_memory_equal(cuda16.params, ref16.params, ref16.count * sizeof(float));  // same weights
    const double features16 = relative_error(ref16.features, ref32.features, BATCH * DIM);
    const double grads16 = relative_error(ref16.grads, ref32.grads, ref16.count);
    const double features = relative_error(cuda16.features, ref16.features, BATCH * DIM);
    const double grads = relative_error(cuda16.grads, ref16.grads, ref16.count);
    print_message("resnet18 %s: cuda vs ref relative L2 error: features %.2e (allowed %.2e), "
                  "parameter gradients %.2e (allowed %.2e)\n",
                  compute_dtype_name(dtype), features, allowed_error(features16), grads,
                  allowed_error(grads16));
    assert_true(features < allowed_error(features16));
    assert_true(grads < allowed_error(grads16));
    resnet_pass_free(&cuda16), resnet_pass_free(&ref16), resnet_pass_free(&ref32);
}

static void test_resnet18_fp16(void **state) { check_resnet(COMPUTE_F16); }
static void test_resnet18_bf16(void **state) { check_resnet(COMPUTE_BF16); }

// ---- one training step of a method -------------------------------------------------------------

enum { METHOD_BATCH = 6, IMAGE = 32, LOCAL_IMAGE = 16 };

typedef struct StepPass {
    float loss;
    int group_count;
    size_t count[METHOD_MAX_GROUPS];
    float *params[METHOD_MAX_GROUPS];  // the initial weights
    float *grads[METHOD_MAX_GROUPS];
} StepPass;

// One step (step 0, loss scale 1) of the method on a ResNet-18 with small
// heads, seed 3, a fixed uint8 batch; 0, or -1 where the backend is not there.
static int step_pass(const char *name, ComputeDtype dtype, MethodKind kind, StepPass *pass) {
    Backend *backend = backend_in(name, dtype);
    if (!backend) return -1;
    ViewSet views;
    if (kind == METHOD_DINO)
        view_set_dino(&views, IMAGE, LOCAL_IMAGE, 2);
    else
        method_default_views(kind, IMAGE, &views);
    static const char *small[] = {"hidden_dim=32", "output_dim=16"};
    static const char *dino[] = {"hidden_dim=32", "bottleneck_dim=8", "output_dim=24",
                                 "warmup_teacher_temp_steps=0"};
    MethodSetup setup = {
        .backend = backend, .backbone = {.kind = BACKBONE_RESNET, .resnet_depth = 18},
        .batch = METHOD_BATCH, .dataset_size = 100, .total_steps = 10, .seed = 3,
        .args = kind == METHOD_DINO ? dino : small, .arg_count = kind == METHOD_DINO ? 4 : 2,
    };
    Method method;
    ErrorMessage err = {{0}};
    if (method_create(&method, kind, &setup, &views, &err)) fail_msg("%s", err.text);
    pass->group_count = method.group_count;
    for (int g = 0; g < method.group_count; g++) {
        ParameterSet *params = method.groups[g].params;
        pass->count[g] = params->total;
        pass->params[g] = download(backend, params->values, params->total);
        parameter_set_zero_grads(params);
    }
    Batch batch = {.size = METHOD_BATCH, .view_count = method.views.count};
    uint8_t *pixels[AUGMENT_MAX_VIEWS] = {0};
    for (int v = 0; v < method.views.count; v++) {
        const int size = method.views.views[v].size;
        const size_t bytes = (size_t)METHOD_BATCH * size * size * 3;
        pixels[v] = malloc(bytes);
        assert_non_null(pixels[v]);
        Rng rng = rng_make(11, 0, (uint64_t)v, 0);
        for (size_t i = 0; i < bytes; i++) pixels[v][i] = (uint8_t)rng_below(&rng, 256);
        batch.views[v] = pixels[v];
        batch.view_size[v] = size;
    }
    if (method_upload_views(&method, &batch, &err) ||
        method.ops->step(&method, 0, METHOD_BATCH, &err))
        fail_msg("%s", err.text);
    pass->loss = backend_read_scalar(backend, method_loss(&method));
    for (int g = 0; g < method.group_count; g++) {
        ParameterSet *params = method.groups[g].params;
        pass->grads[g] = download(backend, params->grads, params->total);
    }
    for (int v = 0; v < AUGMENT_MAX_VIEWS; v++) free(pixels[v]);
    method_free(&method);
    backend_destroy(backend);
    return 0;
}

static void step_pass_free(StepPass *pass) {
    for (int g = 0; g < pass->group_count; g++) free(pass->params[g]), free(pass->grads[g]);
}

static void check_step(MethodKind kind, ComputeDtype dtype) {
    StepPass cuda16, ref16, ref32;
    if (step_pass("cuda", dtype, kind, &cuda16)) skip();
    step_pass("ref", dtype, kind, &ref16);
    step_pass("ref", COMPUTE_F32, kind, &ref32);
    assert_int_equal(cuda16.group_count, ref16.group_count);
    const double loss16 = fabs((double)ref16.loss - ref32.loss) / fabs((double)ref32.loss);
    const double loss = fabs((double)cuda16.loss - ref16.loss) / fabs((double)ref16.loss);
    print_message("%s %s: loss cuda %.6f ref %.6f fp32 %.6f (relative error %.2e, allowed "
                  "%.2e)\n",
                  method_kind_name(kind), compute_dtype_name(dtype), cuda16.loss, ref16.loss,
                  ref32.loss, loss, allowed_error(loss16));
    assert_true(loss < allowed_error(loss16));
    for (int g = 0; g < ref16.group_count; g++) {
        assert_int_equal(cuda16.count[g], ref16.count[g]);
        assert_memory_equal(cuda16.params[g], ref16.params[g], ref16.count[g] * sizeof(float));
        const double grads16 = relative_error(ref16.grads[g], ref32.grads[g], ref16.count[g]);
        const double grads = relative_error(cuda16.grads[g], ref16.grads[g], ref16.count[g]);
        print_message("  group %d gradients: relative L2 error %.2e (allowed %.2e)\n", g, grads,
                      allowed_error(grads16));
        assert_true(grads < allowed_error(grads16));
    }
    step_pass_free(&cuda16), step_pass_free(&ref16), step_pass_free(&ref32);
}

static void test_simclr_step_fp16(void **state) { check_step(METHOD_SIMCLR, COMPUTE_F16); }
static void test_simclr_step_bf16(void **state) { check_step(METHOD_SIMCLR, COMPUTE_BF16); }
static void test_dino_step_fp16(void **state) { check_step(METHOD_DINO, COMPUTE_F16); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_dtypes),
        cmocka_unit_test(test_resnet18_fp16),
        cmocka_unit_test(test_resnet18_bf16),
        cmocka_unit_test(test_simclr_step_fp16),
        cmocka_unit_test(test_simclr_step_bf16),
        cmocka_unit_test(test_dino_step_fp16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
