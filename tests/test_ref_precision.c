// The ref backend in a 16-bit compute dtype (backend_set_compute_dtype),
// the oracle of a mixed-precision GPU step: every value an op writes into
// an activation is rounded to fp16 or bf16 (round to nearest even, fp16
// overflow to infinity, subnormals kept), compute and statistics stay
// fp32/double; weights are read through their rounded copy
// (ParameterSet.compute). Checked: the rounding itself at its edge cases,
// that ops round their outputs once, that other backends refuse a 16-bit
// dtype, and a ResNet-18 forward and backward in fp16/bf16 next to fp32.
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "backend/backend.h"
#include "nn/resnet.h"
#include "util/half.h"

static Backend *ref_in(ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create("ref", 1, &err);
    assert_non_null(backend);
    assert_int_equal(backend_set_compute_dtype(backend, dtype, &err), 0);
    return backend;
}

// x (n) through float_to_act and back.
static void round_trip(Backend *backend, const float *x, float *y, size_t n) {
    Act *act = backend->op.alloc(backend, act_bytes(backend, n));
    backend->op.float_to_act(backend, n, x, act);
    backend->op.act_to_float(backend, n, act, y);
    backend->op.free(backend, act);
}

static void test_fp16_rounding(void **state) {
    Backend *backend = ref_in(COMPUTE_F16);
    const float in[] = {1.0f + 0x1p-11f,      // halfway, to the even 1
                        1.0f + 3 * 0x1p-11f,  // halfway, to the even 1 + 2^-9
                        65504.0f,             // the largest fp16
                        65519.0f,             // rounds down to it
                        65520.0f,             // halfway to 65536: overflows to infinity
                        -1e6f,                // -infinity
                        0x1p-24f,             // the smallest subnormal, kept
                        0x1p-25f,             // halfway between 0 and it: to 0
                        3 * 0x1p-25f,         // halfway: to the even 2^-23
                        -0.0f,
                        NAN};
    const float expected[] = {1.0f,    1.0f + 0x1p-9f, 65504.0f, 65504.0f, INFINITY, -INFINITY,
                              0x1p-24f, 0.0f,          0x1p-23f, -0.0f,    NAN};
    const size_t n = sizeof in / sizeof *in;
    float out[sizeof in / sizeof *in];
    round_trip(backend, in, out, n);
    for (size_t i = 0; i < n; i++) {
        if (isnan(expected[i])) {
            assert_true(isnan(out[i]));
            continue;
        }
        assert_memory_equal(&out[i], &expected[i], sizeof(float));  // -0 stays -0
    }
    backend_destroy(backend);
}

static void test_bf16_rounding(void **state) {
    Backend *backend = ref_in(COMPUTE_BF16);
    const float in[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, 3.0e38f, 0x1p-130f, 1e-45f};
    float out[5];
    round_trip(backend, in, out, 5);
    assert_true(out[0] == 1.0f);            // halfway, to the even 1
    assert_true(out[1] == 1.0f + 0x1p-6f);  // halfway, to the even
    assert_true(out[2] == bf16_to_float(float_to_bf16(3.0e38f)) && isfinite(out[2]));
    assert_true(out[3] == 0x1p-130f);       // bf16 keeps fp32's subnormal range
    assert_true(out[4] == bf16_to_float(float_to_bf16(1e-45f)));
    backend_destroy(backend);
}

// An op computes in fp32 and rounds what it writes once: GELU in fp16
// equals GELU in fp32 rounded, and a linear layer rounds after its bias
// (the epilogue), not before; its bias itself is rounded to the dtype
// first (PyTorch autocast's order, ref_linear.c).
static void test_ops_round_their_outputs(void **state) {
    Backend *f32 = ref_in(COMPUTE_F32), *f16 = ref_in(COMPUTE_F16);
    enum { ROWS = 3, IN = 5, OUT = 4, N = ROWS * OUT };
    float x[ROWS * IN], w[OUT * IN], bias[OUT], bias16[OUT];
    for (int i = 0; i < ROWS * IN; i++) x[i] = 1.0f + 0x1p-10f * (float)(i % 7);  // fp16 values
    for (int i = 0; i < OUT * IN; i++) w[i] = 0.125f * (float)((i * 5) % 9) - 0.5f;
    for (int o = 0; o < OUT; o++) bias[o] = 1000.0f + 0.3f * (float)o;  // not fp16 values
    round_trip(f16, bias, bias16, OUT);
    float y32[N], y32_fp32_bias[N], y16[N], rounded[N], rounded_fp32_bias[N];
    f32->op.linear_forward(f32, ROWS, IN, OUT, (const Act *)x, (const Act *)w, bias16,
                           (Act *)y32);
    f32->op.linear_forward(f32, ROWS, IN, OUT, (const Act *)x, (const Act *)w, bias,
                           (Act *)y32_fp32_bias);
    f16->op.linear_forward(f16, ROWS, IN, OUT, (const Act *)x, (const Act *)w, bias, (Act *)y16);
    round_trip(f16, y32, rounded, N);
    round_trip(f16, y32_fp32_bias, rounded_fp32_bias, N);
    assert_memory_equal(y16, rounded, sizeof y16);
    int differs = 0, bias_matters = 0;
    for (int i = 0; i < N; i++) {
        differs |= y16[i] != y32[i];
        bias_matters |= rounded[i] != rounded_fp32_bias[i];
    }
    assert_true(differs);  // the rounding happened
    assert_true(bias_matters);  // and the bias's rounding shows in the result

    float g32[N], g16[N];
    f32->op.gelu_forward(f32, N, (const Act *)y16, (Act *)g32);
    f16->op.gelu_forward(f16, N, (const Act *)y16, (Act *)g16);
    round_trip(f16, g32, rounded, N);
    assert_memory_equal(g16, rounded, sizeof g16);
    backend_destroy(f32);
    backend_destroy(f16);
}

static void test_other_backends_refuse(void **state) {
    ErrorMessage err = {{0}};
    Backend *cpu = backend_create("cpu", 1, &err);
    assert_non_null(cpu);
    assert_int_equal(backend_set_compute_dtype(cpu, COMPUTE_F16, &err), -1);
    assert_non_null(strstr(err.text, "cpu backend stores activations in fp32 only"));
    assert_int_equal(backend_set_compute_dtype(cpu, COMPUTE_F32, &err), 0);
    backend_destroy(cpu);
}

// ---- a ResNet-18 step in 16 bits next to fp32 -----------------------------------------------

enum { BATCH = 4, SIZE = 64, DIM = 512 };
// Relative L2 errors against fp32 measured on this network, seed and input
// (2026-11-23; the same on every machine: ref is plain loops in double):
// features fp16 4.3e-3, bf16 3.4e-2 (8x: bf16 has 3 fewer mantissa bits);
// parameter gradients fp16 0.15, bf16 0.44. The gradients of this
// freshly initialised network (batch norm in training mode over 16 rows per
// channel in layer4) are this sensitive to anything: in fp32, input noise
// of at most 6e-4 moved them by 1.0-2.2 relative per tensor, against
// 0.04-0.18 for fp16. So the features are the accuracy check; the gradient
// bounds only say the rounding stays far below that sensitivity. The
// bounds are twice the measured errors.
#define F16_FEATURES_BOUND 9e-3
#define BF16_FEATURES_BOUND 7e-2
#define F16_GRADS_BOUND 0.3
#define BF16_GRADS_BOUND 0.9

typedef struct Pass {
    float features[BATCH * DIM];
    float *grads;  // the parameter gradient arena
    size_t count;
} Pass;

// Forward (training) and backward of ResNet-18 from seed 7 on a fixed
// input, with d loss / d features = a fixed pattern.
static void resnet_pass(ComputeDtype dtype, Pass *pass) {
    Backend *backend = ref_in(dtype);
    ErrorMessage err = {{0}};
    Resnet model;
    const ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape input_shape = {BATCH, SIZE};
    assert_int_equal(resnet_create(&model, backend, &config, &input_shape, 1, 7, &err), 0);
    const size_t pixels = (size_t)BATCH * SIZE * SIZE * 3;
    float *image = malloc(pixels * sizeof *image);
    for (size_t i = 0; i < pixels; i++) image[i] = (float)((i * 37) % 101) / 50.0f - 1.0f;
    Act *input = backend->op.alloc(backend, act_bytes(backend, pixels));
    backend->op.float_to_act(backend, pixels, image, input);
    assert_int_equal(resnet_forward(&model, 0, BATCH, input, 1, &err), 0);
    backend->op.act_to_float(backend, BATCH * DIM, resnet_features(&model, 0), pass->features);
    float dfeatures[BATCH * DIM];
    for (int i = 0; i < BATCH * DIM; i++) dfeatures[i] = (float)((i * 13) % 17) / 16.0f - 0.5f;
    Act *dfeatures_act = backend->op.alloc(backend, act_bytes(backend, BATCH * DIM));
    backend->op.float_to_act(backend, BATCH * DIM, dfeatures, dfeatures_act);
    assert_int_equal(resnet_backward(&model, 0, dfeatures_act, &err), 0);
    pass->count = model.params.total;
    pass->grads = malloc(pass->count * sizeof(float));
    backend->op.download(backend, pass->grads, model.params.grads, pass->count * sizeof(float));
    backend->op.free(backend, input);
    backend->op.free(backend, dfeatures_act);
    free(image);
    resnet_free(&model);
    backend_destroy(backend);
}

// ||a - b|| / ||b||
static double relative_error(const float *a, const float *b, size_t n) {
    double difference = 0.0, norm = 0.0;
    for (size_t i = 0; i < n; i++) {
        difference += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        norm += (double)b[i] * b[i];
    }
    return sqrt(difference / norm);
}

// Rounding happens (errors above 0), bf16 errs more than fp16, and both
// stay within twice what was measured (see the bounds above).
static void test_resnet_in_16_bits(void **state) {
    static Pass f32, f16, bf16;
    resnet_pass(COMPUTE_F32, &f32);
    resnet_pass(COMPUTE_F16, &f16);
    resnet_pass(COMPUTE_BF16, &bf16);
    const double f16_features = relative_error(f16.features, f32.features, BATCH * DIM);
    const double bf16_features = relative_error(bf16.features, f32.features, BATCH * DIM);
    const double f16_grads = relative_error(f16.grads, f32.grads, f32.count);
    const double bf16_grads = relative_error(bf16.grads, f32.grads, f32.count);
    print_message("relative L2 error vs fp32: features fp16 %.2e bf16 %.2e, "
                  "parameter gradients fp16 %.2e bf16 %.2e\n",
                  f16_features, bf16_features, f16_grads, bf16_grads);
    assert_true(f16_features > 0 && f16_features < F16_FEATURES_BOUND);
    assert_true(bf16_features > f16_features && bf16_features < BF16_FEATURES_BOUND);
    assert_true(f16_grads > 0 && f16_grads < F16_GRADS_BOUND);
    assert_true(bf16_grads > f16_grads && bf16_grads < BF16_GRADS_BOUND);
    free(f32.grads);
    free(f16.grads);
    free(bf16.grads);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp16_rounding),
        cmocka_unit_test(test_bf16_rounding),
        cmocka_unit_test(test_ops_round_their_outputs),
        cmocka_unit_test(test_other_backends_refuse),
        cmocka_unit_test(test_resnet_in_16_bits),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
