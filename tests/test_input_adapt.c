// Initial weights of another channel count (nn/input_adapt.h): timm's
// adapt_input_conv against tests/fixtures/adapt_input_conv.safetensors
// (tools/make_adapt_conv_fixture.py: a random (5, 3, 3, 2) weight and timm's
// result for 1, 2, 4, 5 and 8 channels), on values and inside a loaded file
// (the tensor replaced, F16 sources widened, other tensors untouched).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/input_adapt.h"
#include "nn/safetensors.h"
#include "util/half.h"

#define FIXTURE "tests/fixtures/adapt_input_conv.safetensors"
#define OUT 5
#define KERNEL_H 3
#define KERNEL_W 2
#define KERNEL (KERNEL_H * KERNEL_W)

static const int channel_counts[] = {1, 2, 4, 5, 8};

static void read_fixture(SafeTensors *file) {
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE, file, &err)) fail_msg("%s", err.text);
}

static const float *tensor_values(const SafeTensors *file, const char *name, int64_t channels) {
    const SafeTensor *tensor = safetensors_find(file, name);
    if (!tensor) fail_msg("%s: no tensor %s", FIXTURE, name);
    assert_int_equal(tensor->dtype, SAFE_F32);
    assert_int_equal(tensor->rank, 4);
    assert_true(tensor->shape[0] == OUT && tensor->shape[1] == channels &&
                tensor->shape[2] == KERNEL_H && tensor->shape[3] == KERNEL_W);
    return safetensors_data(file, tensor);
}

// |a - b| <= 1e-6 + 1e-6 |ref|: fp32, one sum of three or one product.
static void expect_close(const float *values, const float *reference, size_t count,
                         const char *what) {
    for (size_t i = 0; i < count; i++)
        if (!(fabsf(values[i] - reference[i]) <= 1e-6f + 1e-6f * fabsf(reference[i])))
            fail_msg("%s[%zu] = %.9g, timm %.9g", what, i, (double)values[i],
                     (double)reference[i]);
}

static void test_matches_timm(void **state) {
    (void)state;
    SafeTensors file;
    read_fixture(&file);
    const float *weight = tensor_values(&file, "weight", 3);
    for (size_t k = 0; k < sizeof channel_counts / sizeof *channel_counts; k++) {
        const int channels = channel_counts[k];
        char name[32];
        snprintf(name, sizeof name, "adapted_%d", channels);
        const float *reference = tensor_values(&file, name, channels);
        float adapted[OUT * 8 * KERNEL];
        input_adapt_conv(weight, OUT, KERNEL, channels, adapted);
        expect_close(adapted, reference, (size_t)OUT * channels * KERNEL, name);
    }
    safetensors_free(&file);
}

// In a file: the (5, 3, 3, 2) tensor becomes (5, 4, 3, 2) with timm's
// values; the references (other input counts) are not touched; a 3-channel
// model leaves the file as it was.
static void test_file(void **state) {
    (void)state;
    SafeTensors file;
    read_fixture(&file);
    float reference[OUT * 4 * KERNEL];
    memcpy(reference, tensor_values(&file, "adapted_4", 4), sizeof reference);
    int count = -1;
    ErrorMessage err = {{0}};
    assert_int_equal(input_adapt_file(&file, OUT, KERNEL_H, KERNEL_W, 3, &count, &err), 0);
    assert_int_equal(count, 0);
    assert_int_equal(input_adapt_file(&file, OUT, KERNEL_H, KERNEL_W, 4, &count, &err), 0);
    assert_int_equal(count, 1);  // only "weight" has 3 input channels
    expect_close(tensor_values(&file, "weight", 4), reference, sizeof reference / sizeof *reference,
                 "weight in the file");
    tensor_values(&file, "adapted_5", 5);  // still there, as it was
    safetensors_free(&file);
}

// An F16 first layer (timm's half-precision weights) is widened, then adapted.
static void test_file_f16(void **state) {
    (void)state;
    SafeTensors file;
    read_fixture(&file);
    const SafeTensor *tensor = safetensors_find(&file, "weight");
    float weight[OUT * 3 * KERNEL];
    memcpy(weight, safetensors_data(&file, tensor), sizeof weight);
    // Rewrite "weight" in place as F16 (the first half of its bytes).
    float16 *half = (float16 *)(file.data + tensor->offset);
    float widened[OUT * 3 * KERNEL];
    for (int i = 0; i < OUT * 3 * KERNEL; i++) {
        const float16 h = float_to_f16(weight[i]);
        widened[i] = f16_to_float(h);
        half[i] = h;
    }
    SafeTensor *entry = (SafeTensor *)tensor;
    entry->dtype = SAFE_F16;
    entry->size = sizeof half[0] * OUT * 3 * KERNEL;
    int count = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(input_adapt_file(&file, OUT, KERNEL_H, KERNEL_W, 1, &count, &err), 0);
    assert_int_equal(count, 1);
    float expected[OUT * KERNEL];
    input_adapt_conv(widened, OUT, KERNEL, 1, expected);
    expect_close(tensor_values(&file, "weight", 1), expected, OUT * KERNEL, "F16 weight");
    safetensors_free(&file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_timm),
        cmocka_unit_test(test_file),
        cmocka_unit_test(test_file_f16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
