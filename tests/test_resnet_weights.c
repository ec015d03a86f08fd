// ResNet weight files: a saved ResNet-18 is a torchvision state dict
// without fc (names, shapes, the I64 num_batches_tracked), loads back to
// the same parameters, buffers and features, loads from BF16; a missing,
// misshapen or unexpected key is named in the error, torchvision's fc is
// skipped. The PyTorch comparison and the model's structure: test_resnet.c.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "nn/resnet.h"
#include "nn/safetensors.h"
#include "resnet_test_values.h"
#include "util/half.h"

static void temp_path(char *path, size_t size, const char *what) {
    snprintf(path, size, "/tmp/ltc-test-resnet-%d-%s.safetensors", (int)getpid(), what);
}

// Copies `source` to path without tensor `drop`, with its F32 tensors as
// `dtype` (F32 or BF16), plus `extra` tensors.
static void rewrite(const SafeTensors *source, const char *path, const char *drop,
                    SafeDType dtype, const SafeTensorWrite *extra, int extra_count) {
    SafeTensorWrite *entries = calloc((size_t)source->count + extra_count, sizeof *entries);
    void **converted = calloc((size_t)source->count, sizeof *converted);
    int count = 0;
    for (int i = 0; i < source->count; i++) {
        const SafeTensor *t = &source->tensors[i];
        if (drop && strcmp(t->name, drop) == 0) continue;
        SafeTensorWrite *e = &entries[count++];
        e->name = t->name, e->dtype = t->dtype, e->rank = t->rank;
        memcpy(e->shape, t->shape, sizeof e->shape);
        e->data = safetensors_data(source, t);
        if (t->dtype == SAFE_F32 && dtype == SAFE_BF16) {
            const size_t n = (size_t)safe_tensor_elements(t);
            float *f = malloc(n * sizeof *f);
            memcpy(f, e->data, n * sizeof *f);
            converted[i] = malloc(n * sizeof(bfloat16));
            convert_f32_to_bf16(f, converted[i], n);
            free(f);
            e->dtype = SAFE_BF16;
            e->data = converted[i];
        }
    }
    for (int i = 0; i < extra_count; i++) entries[count++] = extra[i];
    ErrorMessage err = {{0}};
    if (safetensors_write(path, entries, count, NULL, 0, &err)) fail_msg("%s", err.text);
    for (int i = 0; i < source->count; i++) free(converted[i]);
    free(converted), free(entries);
}

typedef struct WeightsPair {
    Backend *backend;
    Resnet a, b;
    float *input;
    char path[128];
} WeightsPair;

// Model a (seed 1, one training forward so the running stats move), saved;
// model b (all zeros) to load into.
static int weights_pair_setup(void **state) {
    WeightsPair *pair = calloc(1, sizeof *pair);
    *state = pair;
    ErrorMessage err = {{0}};
    pair->backend = backend_create("ref", 1, &err);
    assert_non_null(pair->backend);
    const ResnetConfig config = resnet_config_default(18);
    const ResnetInputShape shape = {2, 16};
    if (resnet_create(&pair->a, pair->backend, &config, &shape, 1, 1, &err) ||
        resnet_declare(&pair->b, pair->backend, &config, &err) ||
        resnet_allocate(&pair->b, &shape, 1, &err))
        fail_msg("%s", err.text);
    pair->input = resnet_test_input(pair->backend, "input", 2, 16);
    if (resnet_forward(&pair->a, 0, 2, (const Act *)pair->input, 1, &err)) fail_msg("%s", err.text);
    pair->a.num_batches_tracked = 5;
    temp_path(pair->path, sizeof pair->path, "saved");
    if (resnet_save(&pair->a, pair->path, NULL, &err)) fail_msg("%s", err.text);
    return 0;
}

static int weights_pair_teardown(void **state) {
    WeightsPair *pair = *state;
    unlink(pair->path);
    pair->backend->op.free(pair->backend, pair->input);
    resnet_free(&pair->a);
    resnet_free(&pair->b);
    backend_destroy(pair->backend);
    free(pair);
    return 0;
}

static void test_save_load_round_trip(void **state) {
    WeightsPair *pair = *state;
    Backend *backend = pair->backend;
    ErrorMessage err = {{0}};

    // The file is a torchvision state dict without fc.
    SafeTensors file;
    if (safetensors_read(pair->path, &file, &err)) fail_msg("%s", err.text);
    assert_int_equal(file.count, 120);
    const SafeTensor *conv1 = safetensors_find(&file, "conv1.weight");
    assert_non_null(conv1);
    assert_int_equal(conv1->rank, 4);
    assert_true(conv1->shape[0] == 64 && conv1->shape[1] == 3 && conv1->shape[2] == 7);
    const SafeTensor *counter = safetensors_find(&file, "layer2.0.downsample.1.num_batches_tracked");
    assert_non_null(counter);
    assert_int_equal(counter->dtype, SAFE_I64);
    assert_int_equal(counter->rank, 0);

    if (resnet_load(&pair->b, pair->path, &err)) fail_msg("%s", err.text);
    float *pa = resnet_test_download(backend, pair->a.params.values, pair->a.params.total);
    float *pb = resnet_test_download(backend, pair->b.params.values, pair->b.params.total);
    assert_memory_equal(pa, pb, pair->a.params.total * sizeof *pa);
    float *ba = resnet_test_download(backend, pair->a.buffers.values, pair->a.buffers.total);
    float *bb = resnet_test_download(backend, pair->b.buffers.values, pair->b.buffers.total);
    assert_memory_equal(ba, bb, pair->a.buffers.total * sizeof *ba);
    assert_int_equal(pair->b.num_batches_tracked, 5);
    if (resnet_forward(&pair->a, 0, 2, (const Act *)pair->input, 0, &err) ||
        resnet_forward(&pair->b, 0, 2, (const Act *)pair->input, 0, &err))
        fail_msg("%s", err.text);
    float *fa = resnet_test_download(backend, (const float *)(resnet_features(&pair->a, 0)), 1024);
    float *fb = resnet_test_download(backend, (const float *)(resnet_features(&pair->b, 0)), 1024);
    assert_memory_equal(fa, fb, 1024 * sizeof *fa);

    // BF16 files load as the rounded values.
    char bf16_path[128];
    temp_path(bf16_path, sizeof bf16_path, "bf16");
    rewrite(&file, bf16_path, NULL, SAFE_BF16, NULL, 0);
    if (resnet_load(&pair->b, bf16_path, &err)) fail_msg("%s", err.text);
    unlink(bf16_path);
    free(pb);
    pb = resnet_test_download(backend, pair->b.params.values, pair->b.params.total);
    for (size_t i = 0; i < pair->a.params.total; i++)
        assert_true(pb[i] == bf16_to_float(float_to_bf16(pa[i])));

    safetensors_free(&file);
    free(pa), free(pb), free(ba), free(bb), free(fa), free(fb);
}

static void expect_load_error(WeightsPair *pair, const char *path, const char *part1,
                              const char *part2) {
    ErrorMessage err = {{0}};
    assert_int_equal(resnet_load(&pair->b, path, &err), -1);
    if (!strstr(err.text, part1) || !strstr(err.text, part2))
        fail_msg("message '%s' lacks '%s' / '%s'", err.text, part1, part2);
}

static void test_load_errors_name_the_key(void **state) {
    WeightsPair *pair = *state;
    ErrorMessage err = {{0}};
    SafeTensors file;
    if (safetensors_read(pair->path, &file, &err)) fail_msg("%s", err.text);
    char path[128];
    temp_path(path, sizeof path, "broken");

    rewrite(&file, path, "layer1.0.conv1.weight", SAFE_F32, NULL, 0);
    expect_load_error(pair, path, "1 missing", "layer1.0.conv1.weight");

    static float small[64 * 3 * 3 * 3];
    const SafeTensorWrite wrong = {"conv1.weight", SAFE_F32, 4, {64, 3, 3, 3}, small};
    rewrite(&file, path, "conv1.weight", SAFE_F32, &wrong, 1);
    expect_load_error(pair, path, "conv1.weight is (64, 3, 7, 7) in the model",
                      "(64, 3, 3, 3) in the file");

    const SafeTensorWrite extra = {"head.weight", SAFE_F32, 1, {16}, small};
    rewrite(&file, path, NULL, SAFE_F32, &extra, 1);
    expect_load_error(pair, path, "1 unexpected", "head.weight");

    // torchvision's classifier is skipped: a full state dict loads.
    static float fc_weight[10 * 512], fc_bias[10];
    const SafeTensorWrite fc[2] = {{"fc.weight", SAFE_F32, 2, {10, 512}, fc_weight},
                                   {"fc.bias", SAFE_F32, 1, {10}, fc_bias}};
    rewrite(&file, path, NULL, SAFE_F32, fc, 2);
    if (resnet_load(&pair->b, path, &err)) fail_msg("%s", err.text);

    unlink(path);
    safetensors_free(&file);
}

int main(void) {
    const struct CMUnitTest weights_tests[] = {  // share one saved model
        cmocka_unit_test(test_save_load_round_trip),
        cmocka_unit_test(test_load_errors_name_the_key),
    };
    return cmocka_run_group_tests_name("resnet weights", weights_tests, weights_pair_setup,
                                       weights_pair_teardown);
}
