// The CUDA emulation's cuDNN graph API (tests/cuda_emu/emu_cudnn_graph.c,
// emu_cudnn_exec.c) through the backend's helpers (src/backend/cuda/
// cudnn_graph.h): a small graph (a 16-bit product, a by-value scale, a
// reduction, a reshape) computed as the host computes it, and the mistakes
// cuDNN refuses refused: an attribute of the wrong type, a product of
// mismatched shapes, a virtual tensor nothing writes, an fp32 product (no
// fused engine), a variant pack with host memory or without a tensor. So a
// check of the emulation that stopped working fails here rather than
// letting a wrong graph pass on the emulation and fail on the first GPU.
// Emulation only: on a GPU these generic graphs may have no engine, and the
// backend's own graphs are checked by their ops' tests.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

#ifdef LTC_WITH_CUDA
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include "backend/cuda/cudnn_graph.h"
#include "util/half.h"

static cudnnHandle_t handle;

static int setup(void **state) {
    ErrorMessage err = {{0}};
    Backend *cuda = backend_create("cuda", 0, &err);
    const int emulated = cuda && strstr(cuda->device, "CUDA emulation") != NULL;
    if (cuda) backend_destroy(cuda);
    if (!emulated) return 0;  // the tests skip
    return cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS ? 0 : -1;
}

static int teardown(void **state) {
    if (handle) cudnnDestroy(handle);
    return 0;
}

#define NEED_EMULATION() \
    do {                 \
        if (!handle) skip(); \
    } while (0)

enum { UID_A = 1, UID_B, UID_C, UID_SCALE, UID_MAX, UID_CT, UID_VIRTUAL = 50 };
// A (1, 2, 3, 8) fp16, B (1, 2, 8, 5) fp16; C = scale A B (fp32, (1, 2, 3, 5)),
// row maxima of C (1, 2, 3, 1), and C transposed (1, 2, 5, 3) through a reshape.
static const int64_t kA[4] = {1, 2, 3, 8}, kAs[4] = {48, 24, 8, 1};
static const int64_t kBs[4] = {80, 40, 5, 1};  // B (1, 2, 8, 5); small_graph sets its rows
static const int64_t kC[4] = {1, 2, 3, 5}, kCs[4] = {30, 15, 5, 1};
static const int64_t kCt[4] = {1, 2, 5, 3}, kCts[4] = {30, 15, 1, 5};
static const int64_t kMax[4] = {1, 2, 3, 1}, kMaxs[4] = {6, 3, 1, 1};
static const int64_t kOne[4] = {1, 1, 1, 1};

// The graph, its inputs of `type`; `inner` overrides B's rows (a mismatch).
static DnnPlan *small_graph(int type, int64_t inner, ErrorMessage *err) {
    DnnGraph g;
    dnn_graph_begin(&g, handle);
    int64_t b_dims[4] = {1, 2, inner, 5};
    void *a = dnn_graph_tensor(&g, UID_A, type, 4, kA, kAs, 0);
    void *b = dnn_graph_tensor(&g, UID_B, type, 4, b_dims, kBs, 0);
    void *product = dnn_graph_tensor(&g, UID_VIRTUAL, CUDNN_DATA_FLOAT, 4, kC, kCs, DNN_VIRTUAL);
    void *scale = dnn_graph_tensor(&g, UID_SCALE, CUDNN_DATA_FLOAT, 4, kOne, kOne, DNN_BY_VALUE);
    void *c = dnn_graph_tensor(&g, UID_C, CUDNN_DATA_FLOAT, 4, kC, kCs, 0);
    void *max = dnn_graph_tensor(&g, UID_MAX, CUDNN_DATA_FLOAT, 4, kMax, kMaxs, 0);
    void *view = dnn_graph_tensor(&g, UID_VIRTUAL + 1, CUDNN_DATA_FLOAT, 4, kCt, kCts, DNN_VIRTUAL);
    void *ct = dnn_graph_tensor(&g, UID_CT, CUDNN_DATA_FLOAT, 4, kCt, kCts, 0);
    dnn_graph_matmul(&g, a, b, product);
    dnn_graph_pointwise(&g, CUDNN_POINTWISE_MUL, product, scale, c);
    dnn_graph_reduction(&g, CUDNN_REDUCE_TENSOR_MAX, c, max);
    dnn_graph_reshape(&g, c, view);
    dnn_graph_pointwise(&g, CUDNN_POINTWISE_IDENTITY, view, NULL, ct);
    return dnn_graph_plan(&g, 1, err);
}

static void *device_copy(const void *host, size_t bytes) {
    void *device = NULL;
    assert_int_equal(cudaMalloc(&device, bytes), cudaSuccess);
    if (host) assert_int_equal(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return device;
}

static void test_a_graph_computes_what_the_host_does(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    DnnPlan *plan = small_graph(CUDNN_DATA_HALF, 8, &err);
    if (!plan) fail_msg("%s", err.text);
    float16 a[48], b[80];
    for (int i = 0; i < 48; i++) a[i] = float_to_f16((float)((i * 7) % 11 - 5) / 4.0f);
    for (int i = 0; i < 80; i++) b[i] = float_to_f16((float)((i * 5) % 13 - 6) / 8.0f);
    void *da = device_copy(a, sizeof a), *db = device_copy(b, sizeof b);
    float *dc = device_copy(NULL, 30 * sizeof(float)), *dmax = device_copy(NULL, 6 * sizeof(float));
    float *dct = device_copy(NULL, 30 * sizeof(float));
    void *workspace = device_copy(NULL, (size_t)plan->workspace_bytes + 1);
    float scale = 0.5f;
    const int64_t uids[] = {UID_A, UID_B, UID_C, UID_SCALE, UID_MAX, UID_CT};
    void *const pointers[] = {da, db, dc, &scale, dmax, dct};
    dnn_plan_execute(plan, 6, uids, pointers, workspace);
    float c[30], max[6], ct[30];
    cudaMemcpy(c, dc, sizeof c, cudaMemcpyDeviceToHost);
    cudaMemcpy(max, dmax, sizeof max, cudaMemcpyDeviceToHost);
    cudaMemcpy(ct, dct, sizeof ct, cudaMemcpyDeviceToHost);
    for (int h = 0; h < 2; h++)
        for (int m = 0; m < 3; m++) {
            float row_max = -INFINITY;
            for (int n = 0; n < 5; n++) {
                float sum = 0.0f;
                for (int k = 0; k < 8; k++)
                    sum += f16_to_float(a[h * 24 + m * 8 + k]) * f16_to_float(b[h * 40 + k * 5 + n]);
                const float expected = sum * scale;
                assert_float_equal(c[h * 15 + m * 5 + n], expected, 0.0f);
                assert_float_equal(ct[h * 15 + n * 1 + m * 5], expected, 0.0f);  // C^T's strides
                row_max = fmaxf(row_max, expected);
            }
            assert_float_equal(max[h * 3 + m], row_max, 0.0f);
        }
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dmax), cudaFree(dct), cudaFree(workspace);
    dnn_plan_free(plan);
}

static void test_mistakes_are_refused(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    // an attribute of another type than the descriptor's
    DnnGraph g;
    dnn_graph_begin(&g, handle);
    void *t = dnn_graph_descriptor(&g, CUDNN_BACKEND_TENSOR_DESCRIPTOR, "tensor");
    const double uid = 1.0;
    dnn_graph_set(&g, t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_DOUBLE, 1, &uid, "the uid");
    assert_true(g.failed);
    assert_non_null(strstr(g.reason, "the uid"));
    dnn_graph_abandon(&g);
    // a product whose inner dimensions differ
    assert_null(small_graph(CUDNN_DATA_HALF, 7, &err));
    assert_non_null(strstr(err.text, "matmul operation"));
    // fp32 products: no fused engine
    assert_null(small_graph(CUDNN_DATA_FLOAT, 8, &err));
    assert_non_null(strstr(err.text, "no engine"));
    // a virtual tensor that nothing writes
    dnn_graph_begin(&g, handle);
    void *never = dnn_graph_tensor(&g, UID_VIRTUAL, CUDNN_DATA_FLOAT, 4, kC, kCs, DNN_VIRTUAL);
    void *c = dnn_graph_tensor(&g, UID_C, CUDNN_DATA_FLOAT, 4, kC, kCs, 0);
    dnn_graph_pointwise(&g, CUDNN_POINTWISE_EXP, never, NULL, c);
    assert_null(dnn_graph_plan(&g, 1, &err));
    assert_non_null(strstr(err.text, "operation graph"));
}

// Execution refuses a tensor in host memory and a tensor left out.
static void test_variant_packs_are_checked(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    DnnPlan *plan = small_graph(CUDNN_DATA_HALF, 8, &err);
    if (!plan) fail_msg("%s", err.text);
    void *da = device_copy(NULL, 48 * 2), *db = device_copy(NULL, 80 * 2);
    float *dc = device_copy(NULL, 30 * 4), *dmax = device_copy(NULL, 6 * 4);
    float host[30], scale = 1.0f;
    void *workspace = device_copy(NULL, (size_t)plan->workspace_bytes + 1);
    for (int bad = 0; bad < 2; bad++) {
        const int64_t uids[] = {UID_A, UID_B, UID_C, UID_SCALE, UID_MAX, UID_CT};
        void *const pointers[] = {da, db, dc, &scale, dmax, host};  // C^T in host memory
        cudnnBackendDescriptor_t pack = NULL;
        assert_int_equal(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), 0);
        const int64_t count = bad ? 5 : 6;  // bad 1: C^T left out
        assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS,
                                                  CUDNN_TYPE_INT64, count, uids), 0);
        assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS,
                                                  CUDNN_TYPE_VOID_PTR, count, pointers), 0);
        assert_int_equal(cudnnBackendSetAttribute(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE,
                                                  CUDNN_TYPE_VOID_PTR, 1, &workspace), 0);
        assert_int_equal(cudnnBackendFinalize(pack), 0);
        assert_int_equal(cudnnBackendExecute(handle, plan->plan, pack), CUDNN_STATUS_BAD_PARAM);
        cudnnBackendDestroyDescriptor(pack);
    }
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dmax), cudaFree(workspace);
    dnn_plan_free(plan);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_graph_computes_what_the_host_does),
        cmocka_unit_test(test_mistakes_are_refused),
        cmocka_unit_test(test_variant_packs_are_checked),
    };
    return cmocka_run_group_tests_name("cudnn graph (CUDA emulation)", tests, setup, teardown);
}
#else
static void test_no_cuda(void **state) { skip(); }

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda)};
    return cmocka_run_group_tests_name("cudnn graph (no CUDA in this build)", tests, NULL, NULL);
}
#endif
