// The CUDA emulation's cuDNN graph API (tests/cuda_emu/emu_cudnn_graph.c,
// emu_cudnn_heuristics.c, emu_cudnn_exec.c) through the backend's helpers
// (src/backend/cuda/cudnn_graph.h): a small graph (a 16-bit product, a
// by-value scale, a reduction, a reshape) computed as the host computes it,
// and the mistakes cuDNN refuses refused: an attribute of the wrong type, a
// product of mismatched shapes, a virtual tensor nothing writes, an fp32
// product (no fused engine), a variant pack with host memory or without a
// tensor. The convolution graphs with a scale-bias-relu prologue
// (cudnn-frontend's ConvBNfprop "SBRCS" and ConvBNwgrad samples) computed
// as the host computes them, a backward filter with a dy of the wrong size
// refused, and which of them get an engine (none for fp32, a lone backward
// filter, another prologue order, or under LTC_EMU_CUDNN_GRAPH=no-prologue,
// which keeps conv + genstats and attention); DgradDreluBNBwdWeight in
// test_cudnn_dgrad.c. So a check of the emulation that stopped working fails here rather than
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
#include "cudnn_graph_fixture.h"

enum { UID_A = 1, UID_B, UID_C, UID_SCALE, UID_MAX, UID_CT };
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

// Execution refuses a tensor in host memory, a tensor left out, and one
// whose address is off the 16 bytes its descriptor declares (8 bytes into
// its allocation: a GPU's cudaMalloc starts at 256).
static void test_variant_packs_are_checked(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    DnnPlan *plan = small_graph(CUDNN_DATA_HALF, 8, &err);
    if (!plan) fail_msg("%s", err.text);
    void *da = device_copy(NULL, 48 * 2), *db = device_copy(NULL, 80 * 2);
    float *dc = device_copy(NULL, 30 * 4), *dmax = device_copy(NULL, 6 * 4);
    float *dct = device_copy(NULL, 34 * 4);
    float host[30], scale = 1.0f;
    void *workspace = device_copy(NULL, (size_t)plan->workspace_bytes + 1);
    for (int bad = 0; bad < 3; bad++) {
        const int64_t uids[] = {UID_A, UID_B, UID_C, UID_SCALE, UID_MAX, UID_CT};
        // C^T in host memory (bad 0), left out (bad 1), misaligned (bad 2)
        void *const pointers[] = {da, db, dc, &scale, dmax, bad == 2 ? (void *)(dct + 2) : host};
        cudnnBackendDescriptor_t pack = NULL;
        assert_int_equal(cudnnBackendCreateDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack), 0);
        const int64_t count = bad == 1 ? 5 : 6;
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
    // the same tensor 16 bytes in: aligned, and the pack runs
    const int64_t uids[] = {UID_A, UID_B, UID_C, UID_SCALE, UID_MAX, UID_CT};
    void *const pointers[] = {da, db, dc, &scale, dmax, dct + 4};
    dnn_plan_execute(plan, 6, uids, pointers, workspace);
    assert_int_equal(cudaDeviceSynchronize(), cudaSuccess);
    cudaFree(da), cudaFree(db), cudaFree(dc), cudaFree(dmax), cudaFree(dct), cudaFree(workspace);
    dnn_plan_free(plan);
}

// ---- ConvBNfprop and ConvBNwgrad with their scale-bias-relu prologue -----------------------


static void check_fprop(int type, int64_t stride) {
    ErrorMessage err = {{0}};
    DnnPlan *plan = fprop_graph(type, SCALE_BIAS_RELU, stride, &err);
    if (!plan) fail_msg("%s", err.text);
    ConvInputs in;
    conv_inputs(type, &in);
    const int out = (int)conv_out_side(stride), y_count = CONV_N * CONV_K * out * out;
    void *dx0 = device_copy(in.x0, sizeof in.x0), *dscale = device_copy(in.scale, sizeof in.scale);
    void *dbias = device_copy(in.bias, sizeof in.bias), *dw = device_copy(in.w, sizeof in.w);
    void *dy = device_copy(NULL, (size_t)y_count * 2);
    void *dsum = device_copy(NULL, CONV_K * sizeof(float));
    void *dsqsum = device_copy(NULL, CONV_K * sizeof(float));
    void *workspace = device_copy(NULL, (size_t)plan->workspace_bytes + 1);
    const int64_t uids[] = {UID_X0, UID_SCALE_C, UID_BIAS_C, UID_W, UID_Y, UID_SUM, UID_SQSUM};
    void *const pointers[] = {dx0, dscale, dbias, dw, dy, dsum, dsqsum};
    dnn_plan_execute(plan, 7, uids, pointers, workspace);
    uint16_t y[CONV_Y_MAX];
    float sum[CONV_K], sqsum[CONV_K];
    cudaMemcpy(y, dy, (size_t)y_count * 2, cudaMemcpyDeviceToHost);
    cudaMemcpy(sum, dsum, sizeof sum, cudaMemcpyDeviceToHost);
    cudaMemcpy(sqsum, dsqsum, sizeof sqsum, cudaMemcpyDeviceToHost);
    for (int k = 0; k < CONV_K; k++) {
        double sum_ref = 0, sqsum_ref = 0, magnitude = 0;
        for (int n = 0; n < CONV_N; n++)
            for (int oh = 0; oh < out; oh++)
                for (int ow = 0; ow < out; ow++) {
                    float expected = 0.0f;
                    for (int c = 0; c < CONV_C; c++)
                        for (int r = 0; r < CONV_R; r++)
                            for (int s = 0; s < CONV_R; s++) {
                                const int ih = oh * (int)stride - CONV_PAD + r;
                                const int iw = ow * (int)stride - CONV_PAD + s;
                                if (ih < 0 || iw < 0 || ih >= CONV_SIDE || iw >= CONV_SIDE)
                                    continue;
                                expected += in.x[nhwc(n, c, ih, iw, CONV_C, CONV_SIDE)] *
                                            from_bits(type, in.w[nhwc(k, c, r, s, CONV_C, CONV_R)]);
                            }
                    const float got = from_bits(type, y[nhwc(n, k, oh, ow, CONV_K, out)]);
                    if (fabsf(got - expected) > stored_tolerance(type, expected))
                        fail_msg("y[%d, %d, %d, %d] = %g, the host's %g (type %d, stride %d)", n, k,
                                 oh, ow, got, expected, type, (int)stride);
                    sum_ref += expected, sqsum_ref += (double)expected * expected;
                    magnitude += fabsf(expected);
                }
        // the sums are of y as stored: each term within its rounding (x^2: twice)
        const double eps = type == CUDNN_DATA_HALF ? 0x1p-10 : 0x1p-7;
        if (fabs(sum[k] - sum_ref) > 1e-3 + eps * magnitude ||
            fabs(sqsum[k] - sqsum_ref) > 1e-3 + 2 * eps * sqsum_ref)
            fail_msg("channel %d: sums %g, %g, the host's %g, %g (type %d, stride %d)", k, sum[k],
                     sqsum[k], sum_ref, sqsum_ref, type, (int)stride);
    }
    cudaFree(dx0), cudaFree(dscale), cudaFree(dbias), cudaFree(dw), cudaFree(dy);
    cudaFree(dsum), cudaFree(dsqsum), cudaFree(workspace);
    dnn_plan_free(plan);
}

static void check_wgrad(int type, int64_t stride) {
    ErrorMessage err = {{0}};
    const int out = (int)conv_out_side(stride), y_count = CONV_N * CONV_K * out * out;
    DnnPlan *plan = wgrad_graph(type, SCALE_BIAS_RELU, stride, out, &err);
    if (!plan) fail_msg("%s", err.text);
    ConvInputs in;
    conv_inputs(type, &in);
    void *dx0 = device_copy(in.x0, sizeof in.x0), *dscale = device_copy(in.scale, sizeof in.scale);
    void *dbias = device_copy(in.bias, sizeof in.bias);
    void *ddy = device_copy(in.dy, (size_t)y_count * 2), *ddw = device_copy(NULL, sizeof in.w);
    void *workspace = device_copy(NULL, (size_t)plan->workspace_bytes + 1);
    const int64_t uids[] = {UID_X0, UID_SCALE_C, UID_BIAS_C, UID_DY, UID_DW};
    void *const pointers[] = {dx0, dscale, dbias, ddy, ddw};
    dnn_plan_execute(plan, 5, uids, pointers, workspace);
    uint16_t dw[CONV_W_COUNT];
    cudaMemcpy(dw, ddw, sizeof dw, cudaMemcpyDeviceToHost);
    for (int k = 0; k < CONV_K; k++)
        for (int c = 0; c < CONV_C; c++)
            for (int r = 0; r < CONV_R; r++)
                for (int s = 0; s < CONV_R; s++) {
                    float expected = 0.0f;
                    for (int n = 0; n < CONV_N; n++)
                        for (int oh = 0; oh < out; oh++)
                            for (int ow = 0; ow < out; ow++) {
                                const int ih = oh * (int)stride - CONV_PAD + r;
                                const int iw = ow * (int)stride - CONV_PAD + s;
                                if (ih < 0 || iw < 0 || ih >= CONV_SIDE || iw >= CONV_SIDE)
                                    continue;
                                expected += in.x[nhwc(n, c, ih, iw, CONV_C, CONV_SIDE)] *
                                            from_bits(type, in.dy[nhwc(n, k, oh, ow, CONV_K, out)]);
                            }
                    const float got = from_bits(type, dw[nhwc(k, c, r, s, CONV_C, CONV_R)]);
                    if (fabsf(got - expected) > stored_tolerance(type, expected))
                        fail_msg("dw[%d, %d, %d, %d] = %g, the host's %g (type %d, stride %d)", k,
                                 c, r, s, got, expected, type, (int)stride);
                }
    cudaFree(dx0), cudaFree(dscale), cudaFree(dbias), cudaFree(ddy), cudaFree(ddw);
    cudaFree(workspace);
    dnn_plan_free(plan);
}

// ConvBNfprop with its prologue: y = conv(relu(x0 scale + bias), w) and
// y's sums, in fp16 and bf16, stride 1 and 2, against the host.
static void test_conv_bn_fprop_with_prologue(void **state) {
    NEED_EMULATION();
    for (int stride = 1; stride <= 2; stride++) {
        check_fprop(CUDNN_DATA_HALF, stride);
        check_fprop(CUDNN_DATA_BFLOAT16, stride);
    }
}

// ConvBNwgrad: dw = wgrad(relu(x0 scale + bias), dy), as above.
static void test_conv_bn_wgrad_with_prologue(void **state) {
    NEED_EMULATION();
    for (int stride = 1; stride <= 2; stride++) {
        check_wgrad(CUDNN_DATA_HALF, stride);
        check_wgrad(CUDNN_DATA_BFLOAT16, stride);
    }
}

// A backward filter whose dy has another size than the convolution of x
// gives is refused when the operation is finalized.
static void test_wgrad_of_a_wrong_dy_is_refused(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    for (int64_t stride = 1; stride <= 2; stride++) {
        assert_null(wgrad_graph(CUDNN_DATA_HALF, SCALE_BIAS_RELU, stride,
                                conv_out_side(stride) + 1, &err));
        assert_non_null(strstr(err.text, "convolution filter gradient: CUDNN_STATUS_BAD_PARAM"));
    }
}


// Engines: the prologue graphs in 16 bits, not in fp32 (all of it, the
// prologue's inputs or the convolution's tensors), not with the bias first, not a backward filter
// alone; LTC_EMU_CUDNN_GRAPH=no-prologue takes theirs away and keeps conv +
// genstats' and attention's.
static void test_prologue_engines(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    const int half = CUDNN_DATA_HALF, side = (int)conv_out_side(1);
    assert_true(plans(fprop_graph(half, SCALE_BIAS_RELU, 1, &err)));
    assert_true(plans(wgrad_graph(half, SCALE_BIAS_RELU, 1, side, &err)));
    assert_true(plans(fprop_graph(half, NO_PROLOGUE, 1, &err)));
    assert_true(no_engine(fprop_graph(CUDNN_DATA_FLOAT, SCALE_BIAS_RELU, 1, &err), &err));
    assert_true(no_engine(wgrad_graph(CUDNN_DATA_FLOAT, SCALE_BIAS_RELU, 1, side, &err), &err));
    assert_true(no_engine(fprop_graph(half, BIAS_SCALE_RELU, 1, &err), &err));
    assert_true(no_engine(wgrad_graph(half, BIAS_SCALE_RELU, 1, side, &err), &err));
    assert_true(no_engine(wgrad_graph(half, NO_PROLOGUE, 1, side, &err), &err));
    for (Prologue fp32 = FP32_SCALE_BIAS; fp32 <= FP32_CONVOLUTION; fp32++) {
        assert_true(no_engine(fprop_graph(half, fp32, 1, &err), &err));
        assert_true(no_engine(wgrad_graph(half, fp32, 1, side, &err), &err));
    }

    char *saved = set_graph_switch("no-prologue");
    const int fprop = no_engine(fprop_graph(half, SCALE_BIAS_RELU, 1, &err), &err);
    const int wgrad = no_engine(wgrad_graph(half, SCALE_BIAS_RELU, 1, side, &err), &err);
    const int conv_stats = plans(fprop_graph(half, NO_PROLOGUE, 1, &err));
    const int attention = plans(small_graph(CUDNN_DATA_HALF, 8, &err));
    restore_graph_switch(saved);
    assert_true(fprop);
    assert_true(wgrad);
    assert_true(conv_stats);
    assert_true(attention);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_graph_computes_what_the_host_does),
        cmocka_unit_test(test_mistakes_are_refused),
        cmocka_unit_test(test_variant_packs_are_checked),
        cmocka_unit_test(test_conv_bn_fprop_with_prologue),
        cmocka_unit_test(test_conv_bn_wgrad_with_prologue),
        cmocka_unit_test(test_wgrad_of_a_wrong_dy_is_refused),
        cmocka_unit_test(test_prologue_engines),
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
