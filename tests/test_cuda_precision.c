// The cuda backend storing activations in fp16 and bf16 (issue 9, step 3)
// against the ref backend in the same dtype, whole passes at a time: a
// ResNet-18 forward and backward from the same weights and the same batch
// (one training step of every method: test_method_steps.c). Op by
// op the 16-bit kernels are checked by the cuda-fp16 / cuda-bf16 groups of
// the backend tests (backend_mirror.h); here the question is whether they
// compose: whether a whole pass on the GPU stays as close to ref's as the
// 16-bit pass itself is to fp32.
//
// The measure is self-calibrating: ref is also run in fp32, and the error
// of cuda-16 against ref-16 must stay below three times the error of
// ref-16 against ref-32 (the size of the 16-bit rounding itself on this
// network and batch; kernels that round in other places, sum in other
// orders or pick other cuDNN algorithms move results by about that much, a
// wrong kernel by O(1); method_fixture_allowed_error), with a floor of
// 1e-3 where the 16-bit error happens to be tiny. Skipped (reported, not passed) where no GPU works; run by make
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

#include "method_fixture.h"
#include "nn/resnet.h"

// The error of cuda-16 against ref-16 allowed, given ref-16's against ref-32.

// The cuda backend takes every dtype and sizes activations by it.
static void test_cuda_dtypes(void **state) {
    const ComputeDtype dtypes[] = {COMPUTE_F32, COMPUTE_F16, COMPUTE_BF16};
    const size_t bytes[] = {4, 2, 2};
    for (int k = 0; k < 3; k++) {
        Backend *cuda = method_fixture_backend("cuda", dtypes[k]);
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
    Backend *backend = method_fixture_backend(name, dtype);
    if (!backend) return -1;
    ErrorMessage err = {{0}};
    Resnet model;
    const ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape input_shape = {BATCH, SIZE};
    if (resnet_create(&model, backend, &config, &input_shape, 1, 7, &err)) fail_msg("%s", err.text);
    pass->count = model.params.total;
    pass->params = method_fixture_download(backend, model.params.values, pass->count);
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
    pass->features = method_fixture_download(backend, features, BATCH * DIM);
    float dfeatures[BATCH * DIM];
    for (int i = 0; i < BATCH * DIM; i++) dfeatures[i] = (float)((i * 13) % 17) / 16.0f - 0.5f;
    backend->op.upload(backend, features, dfeatures, sizeof dfeatures);
    Act *dfeatures_act = backend->op.alloc(backend, act_bytes(backend, BATCH * DIM));
    backend->op.float_to_act(backend, BATCH * DIM, features, dfeatures_act);
    if (resnet_backward(&model, 0, dfeatures_act, &err)) fail_msg("%s", err.text);
    pass->grads = method_fixture_download(backend, model.params.grads, pass->count);
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
    const double features16 =
        method_fixture_relative_error(ref16.features, ref32.features, BATCH * DIM);
    const double grads16 = method_fixture_relative_error(ref16.grads, ref32.grads, ref16.count);
    const double features =
        method_fixture_relative_error(cuda16.features, ref16.features, BATCH * DIM);
    const double grads = method_fixture_relative_error(cuda16.grads, ref16.grads, ref16.count);
    print_message("resnet18 %s: cuda vs ref relative L2 error: features %.2e (allowed %.2e), "
                  "parameter gradients %.2e (allowed %.2e)\n",
                  compute_dtype_name(dtype), features, method_fixture_allowed_error(features16, 1e-3),
                  grads, method_fixture_allowed_error(grads16, 1e-3));
    assert_true(features < method_fixture_allowed_error(features16, 1e-3));
    assert_true(grads < method_fixture_allowed_error(grads16, 1e-3));
    resnet_pass_free(&cuda16), resnet_pass_free(&ref16), resnet_pass_free(&ref32);
}

static void test_resnet18_fp16(void **state) { check_resnet(COMPUTE_F16); }
static void test_resnet18_bf16(void **state) { check_resnet(COMPUTE_BF16); }

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cuda_dtypes),
        cmocka_unit_test(test_resnet18_fp16),
        cmocka_unit_test(test_resnet18_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
