// cuDNN's DgradDreluBNBwdWeight on the CUDA emulation's cuDNN graph API
// (tests/cuda_emu/emu_cudnn_heuristics.c, emu_cudnn_exec.c) through the
// backend's helpers (src/backend/cuda/cudnn_graph.h), as
// cuda_conv_fusion.c builds it from cuDNN's documentation: a backward data
// into a virtual float, RELU_BWD where the norm's output ((x0 - mean)
// inv_std) scale + bias > 0 (ADD with alpha2 -1, MUL, MUL, ADD on the
// norm's own mean, inv_std and scale) into dz, BN_BWD_WEIGHTS of x0 and dz.
// Computed as the host computes it (fp16 and bf16, 3x3 stride 1 and 1x1
// stride 2, built in either order), its mistakes refused at finalize, and
// its engine (none in fp32, with a virtual dz, the norm of another x, the
// chain on tensors of its own (the form an H200 took and got wrong) or with
// SUB for the mean, a lone backward data or BN_BWD_WEIGHTS, or under
// LTC_EMU_CUDNN_GRAPH=no-dgrad, which keeps the prologues', or
// no-prologue). Emulation only, as test_cudnn_graph.c.
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

// The data gradient's convolution (w (K, C, kernel, kernel) over KRSC).
typedef struct DgradShape { int kernel, stride, pad; } DgradShape;
static const DgradShape kDgradShapes[2] = {{3, 1, 1}, {1, 2, 0}};

static int dgrad_out_side(const DgradShape *shape) {
    return (CONV_SIDE + 2 * shape->pad - shape->kernel) / shape->stride + 1;
}

// The norm's tensors (1, C, 1, 1) fp32 in this uid order: mean, inv_std,
// gamma read; dscale, dbias, eq_dy_scale, eq_x_scale, eq_bias written;
// then the mask's chain's mean, inv_std and scale (read only where the
// chain has tensors of its own, DGRAD_CHAIN_OF_ITS_OWN) and bias.
enum { UID_DZ = 30, UID_MEAN, UID_OTHER_X = UID_MEAN + 12, UID_DGRAD = UID_VIRTUAL + 3 };
enum { NORM_READS = 3, NORM_WRITES = 5, CHAIN = 4, CHAIN_FIRST = NORM_READS + NORM_WRITES };
enum { NORM_CHANNEL_TENSORS = CHAIN_FIRST + CHAIN };

// The norm's mean, inv_std and scale (its reads), the mean with
// mean_channels channels (CONV_C unless a mistake).
static void norm_reads(DnnGraph *g, int64_t mean_channels, void *reads[NORM_READS]) {
    for (int i = 0; i < NORM_READS; i++)
        reads[i] = nhwc_tensor(g, UID_MEAN + i, CUDNN_DATA_FLOAT, 1,
                               i == 0 ? mean_channels : CONV_C, 1, 1, 0);
}

// BN_BWD_WEIGHTS of x and dz (N, C, SIDE, SIDE) with the given reads.
static void norm_weights_gradient(DnnGraph *g, void *x, void *dz, void *const *reads) {
    void *channel[NORM_READS + NORM_WRITES];
    for (int i = 0; i < NORM_READS + NORM_WRITES; i++)
        channel[i] = i < NORM_READS ? reads[i]
                                    : nhwc_tensor(g, UID_MEAN + i, CUDNN_DATA_FLOAT, 1, CONV_C,
                                                  1, 1, 0);
    const DnnNormWeightsGradient norm = {
        .x = x, .dy = dz, .mean = channel[0], .inv_std = channel[1], .scale = channel[2],
        .dscale = channel[3], .dbias = channel[4], .eq_dy_scale = channel[5],
        .eq_x_scale = channel[6], .eq_bias = channel[7]};
    dnn_graph_bn_backward_weights(g, &norm);
}

// How dgrad_graph builds the pattern: in the order cudnn-frontend's sample
// lists it (backward data, the norm's output, RELU_BWD, BN_BWD_WEIGHTS),
// with the norm's output first (the backend's order), or with what no
// engine fuses: every 16-bit tensor in fp32, dz virtual, the norm's x
// another tensor than the chain's x0, the chain's mean, inv_std and scale
// tensors of its own, SUB for the mean instead of ADD with alpha2 -1.
typedef enum {
    DGRAD_AS_LISTED,
    DGRAD_AFFINE_FIRST,
    DGRAD_FP32,
    DGRAD_VIRTUAL_DZ,
    DGRAD_NORM_OF_OTHER_X,
    DGRAD_CHAIN_OF_ITS_OWN,
    DGRAD_SUB
} DgradVariant;

// ((x0 - mean) inv_std) scale + bias per channel (ADD with alpha2 -1, MUL,
// MUL, ADD: the first three on the norm's reads unless the variant says
// otherwise, the bias the chain's) into virtual floats: the norm's output
// as cuDNN's documentation gives it; x0 into *x0.
static void *norm_output(DnnGraph *g, int type, void **x0, void *const *reads,
                         DgradVariant variant) {
    *x0 = nhwc_tensor(g, UID_X0, type, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE, 0);
    const int modes[CHAIN] = {CUDNN_POINTWISE_ADD, CUDNN_POINTWISE_MUL, CUDNN_POINTWISE_MUL,
                              CUDNN_POINTWISE_ADD};
    void *stage = *x0;
    for (int i = 0; i < CHAIN; i++) {
        void *next = nhwc_tensor(g, UID_DGRAD + 1 + i, CUDNN_DATA_FLOAT, CONV_N, CONV_C,
                                 CONV_SIDE, CONV_SIDE, DNN_VIRTUAL);
        void *operand = i < NORM_READS && variant != DGRAD_CHAIN_OF_ITS_OWN
                            ? reads[i]
                            : nhwc_tensor(g, UID_MEAN + CHAIN_FIRST + i, CUDNN_DATA_FLOAT, 1,
                                          CONV_C, 1, 1, 0);
        if (i > 0) dnn_graph_pointwise(g, modes[i], stage, operand, next);
        else if (variant == DGRAD_SUB)
            dnn_graph_pointwise(g, CUDNN_POINTWISE_SUB, stage, operand, next);
        else dnn_graph_pointwise_scaled(g, CUDNN_POINTWISE_ADD, stage, 1.0f, operand, -1.0f, next);
        stage = next;
    }
    return stage;
}

// DgradDreluBNBwdWeight: d = the data gradient of dy (N, K, OUT, OUT)
// with w (virtual float), dz (N, C, SIDE, SIDE) = d where the norm's
// output > 0 (written), and the norm's weight gradient of x0 and dz.
static DnnPlan *dgrad_graph(int type, const DgradShape *shape, DgradVariant variant,
                            ErrorMessage *err) {
    DnnGraph g;
    dnn_graph_begin(&g, handle);
    const int t = variant == DGRAD_FP32 ? CUDNN_DATA_FLOAT : type, out = dgrad_out_side(shape);
    void *dy = nhwc_tensor(&g, UID_DY, t, CONV_N, CONV_K, out, out, 0);
    void *w = nhwc_tensor(&g, UID_W, t, CONV_K, CONV_C, shape->kernel, shape->kernel, 0);
    void *d = nhwc_tensor(&g, UID_DGRAD, CUDNN_DATA_FLOAT, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE,
                          DNN_VIRTUAL);
    void *conv = dnn_graph_convolution(&g, shape->stride, shape->pad);
    void *x0 = NULL, *biased = NULL, *reads[NORM_READS];
    norm_reads(&g, CONV_C, reads);
    if (variant == DGRAD_AFFINE_FIRST) biased = norm_output(&g, t, &x0, reads, variant);
    dnn_graph_conv_data_gradient(&g, conv, dy, w, d);
    if (!biased) biased = norm_output(&g, t, &x0, reads, variant);
    void *dz = nhwc_tensor(&g, UID_DZ, t, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE,
                           variant == DGRAD_VIRTUAL_DZ ? DNN_VIRTUAL : 0);
    dnn_graph_relu_backward(&g, biased, d, dz);
    void *norm_x = variant == DGRAD_NORM_OF_OTHER_X
                       ? nhwc_tensor(&g, UID_OTHER_X, t, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE, 0)
                       : x0;
    norm_weights_gradient(&g, norm_x, dz, reads);
    return dnn_graph_plan(&g, 1, err);
}

// A lone backward data (3x3, stride 1, padding 1) into dz, or a lone
// BN_BWD_WEIGHTS of x0 and dz with a mean of mean_channels channels; dz
// (N, C, side, side) fp16 with data.
typedef enum { LONE_DGRAD, LONE_NORM } LoneOperation;
static DnnPlan *lone_graph(LoneOperation op, int64_t side, int64_t mean_channels,
                           ErrorMessage *err) {
    DnnGraph g;
    dnn_graph_begin(&g, handle);
    const int half = CUDNN_DATA_HALF;
    void *dz = nhwc_tensor(&g, UID_DZ, half, CONV_N, CONV_C, side, side, 0);
    if (op == LONE_NORM) {
        void *x0 = nhwc_tensor(&g, UID_X0, half, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE, 0);
        void *reads[NORM_READS];
        norm_reads(&g, mean_channels, reads);
        norm_weights_gradient(&g, x0, dz, reads);
    } else {
        void *dy = nhwc_tensor(&g, UID_DY, half, CONV_N, CONV_K, CONV_SIDE, CONV_SIDE, 0);
        void *w = nhwc_tensor(&g, UID_W, half, CONV_K, CONV_C, 3, 3, 0);
        dnn_graph_conv_data_gradient(&g, dnn_graph_convolution(&g, 1, 1), dy, w, dz);
    }
    return dnn_graph_plan(&g, 1, err);
}

// The data gradient at dx[n, c, h, x] (NHWC) of conv_inputs' dy and w, in
// double.
static double host_data_gradient(int type, const DgradShape *shape, const ConvInputs *in, int n,
                                 int c, int h, int x) {
    const int out = dgrad_out_side(shape), stride = shape->stride;
    double sum = 0;
    for (int r = 0; r < shape->kernel; r++)
        for (int s = 0; s < shape->kernel; s++) {
            const int oh = h + shape->pad - r, ow = x + shape->pad - s;
            if (oh < 0 || ow < 0 || oh % stride || ow % stride || oh / stride >= out ||
                ow / stride >= out)
                continue;
            for (int k = 0; k < CONV_K; k++)
                sum += (double)from_bits(type, in->dy[nhwc(n, k, oh / stride, ow / stride, CONV_K,
                                                            out)]) *
                       from_bits(type, in->w[nhwc(k, c, r, s, CONV_C, shape->kernel)]);
        }
    return sum;
}

// The five outputs per channel against their formulas in double from dz
// as stored, with the mean, inv_std and gamma of channel[0..2].
static void check_norm_outputs(int type, const ConvInputs *in, const uint16_t *dz,
                               float channel[NORM_CHANNEL_TENSORS][CONV_C], const char *what) {
    static const char *const kWritten[NORM_WRITES] = {"dscale", "dbias", "eq_dy_scale",
                                                      "eq_x_scale", "eq_bias"};
    const double count = CONV_N * CONV_SIDE * CONV_SIDE;
    for (int c = 0; c < CONV_C; c++) {
        const double mean = channel[0][c], inv_std = channel[1][c], gamma = channel[2][c];
        double dscale = 0, dbias = 0;
        for (int i = c; i < CONV_X_COUNT; i += CONV_C) {  // NHWC: channel c's elements in order
            const double g = from_bits(type, dz[i]);
            dscale += g * ((from_bits(type, in->x0[i]) - mean) * inv_std);
            dbias += g;
        }
        const double expected[NORM_WRITES] = {
            dscale, dbias, gamma * inv_std, -gamma * inv_std * inv_std * dscale / count,
            gamma * inv_std * (inv_std * dscale * mean - dbias) / count};
        for (int i = 0; i < NORM_WRITES; i++) {
            // one fp32 rounding, and a floor for double's rounding near 0
            const double got = channel[NORM_READS + i][c];
            if (fabs(got - expected[i]) > 0x1p-23 * fabs(expected[i]) + 1e-9)
                fail_msg("channel %d: %s %.9g, the host's %.9g (%s)", c, kWritten[i], got,
                         expected[i], what);
        }
    }
}

// Runs the pattern on conv_inputs' x0, w and dy with a mean, inv_std (not
// 1) and gamma per channel, the mask's bias conv_inputs' bias, against the
// host: dz against the data gradient masked where the chain's output > 0
// (in float, one rounding each, as the graph's operations), then
// check_norm_outputs.
static void check_dgrad(int type, const DgradShape *shape, DgradVariant variant) {
    ErrorMessage err = {{0}};
    DnnPlan *plan = dgrad_graph(type, shape, variant, &err);
    if (!plan) fail_msg("%s", err.text);
    ConvInputs in;
    conv_inputs(type, &in);
    float channel[NORM_CHANNEL_TENSORS][CONV_C];  // uid order, the last five written
    for (int c = 0; c < CONV_C; c++) {
        channel[0][c] = (float)(c % 3 - 1) / 4;
        channel[1][c] = 1.5f + (float)c / 16;
        channel[2][c] = 0.75f + (float)c / 32;
        for (int i = 0; i < NORM_READS; i++)  // the chain reads the norm's (the host too)
            channel[CHAIN_FIRST + i][c] = channel[i][c];
        channel[CHAIN_FIRST + 3][c] = from_bits(type, in.bias[c]);
    }
    enum { BOUND = 4 };  // x0, w, dy, dz, then the per-channel tensors
    const void *host[BOUND] = {in.x0, in.w, in.dy, NULL};
    const size_t bytes[BOUND] = {sizeof in.x0, sizeof in.w, sizeof in.dy, sizeof in.x0};
    int64_t uids[BOUND + NORM_CHANNEL_TENSORS] = {UID_X0, UID_W, UID_DY, UID_DZ};
    void *pointers[BOUND + NORM_CHANNEL_TENSORS];
    for (int i = 0; i < BOUND; i++) pointers[i] = device_copy(host[i], bytes[i]);
    float *dchannel = device_copy(channel, sizeof channel);
    for (int i = 0; i < NORM_CHANNEL_TENSORS; i++)
        uids[BOUND + i] = UID_MEAN + i, pointers[BOUND + i] = dchannel + i * CONV_C;
    void *workspace = device_copy(NULL, (size_t)plan->workspace_bytes + 1);
    dnn_plan_execute(plan, BOUND + NORM_CHANNEL_TENSORS, uids, pointers, workspace);
    uint16_t dz[CONV_X_COUNT];
    cudaMemcpy(dz, pointers[3], sizeof dz, cudaMemcpyDeviceToHost);
    cudaMemcpy(channel, dchannel, sizeof channel, cudaMemcpyDeviceToHost);
    char what[64];
    snprintf(what, sizeof what, "type %d, %dx%d stride %d, order %d", type, shape->kernel,
             shape->kernel, shape->stride, (int)variant);
    for (int n = 0; n < CONV_N; n++)
        for (int h = 0; h < CONV_SIDE; h++)
            for (int x = 0; x < CONV_SIDE; x++)
                for (int c = 0; c < CONV_C; c++) {
                    const int i = nhwc(n, c, h, x, CONV_C, CONV_SIDE);
                    // the chain in float, one rounding an operation
                    const float centered = from_bits(type, in.x0[i]) - channel[CHAIN_FIRST][c];
                    const float normalized = centered * channel[CHAIN_FIRST + 1][c];
                    const float scaled = normalized * channel[CHAIN_FIRST + 2][c];
                    const float output = scaled + channel[CHAIN_FIRST + 3][c];
                    const float expected =
                        output > 0.0f ? (float)host_data_gradient(type, shape, &in, n, c, h, x)
                                      : 0.0f;
                    const float got = from_bits(type, dz[i]);
                    if (fabsf(got - expected) > stored_tolerance(type, expected))
                        fail_msg("dz[%d, %d, %d, %d] = %g, the host's %g (%s)", n, c, h, x, got,
                                 expected, what);
                }
    check_norm_outputs(type, &in, dz, channel, what);
    for (int i = 0; i < BOUND; i++) cudaFree(pointers[i]);
    cudaFree(dchannel), cudaFree(workspace);
    dnn_plan_free(plan);
}

// DgradDreluBNBwdWeight in fp16 and bf16, 3x3 stride 1 and 1x1 stride 2,
// built in either order, against the host.
static void test_dgrad_drelu_bn_bwd_weight(void **state) {
    NEED_EMULATION();
    for (int s = 0; s < 2; s++)
        for (DgradVariant order = DGRAD_AS_LISTED; order <= DGRAD_AFFINE_FIRST; order++) {
            check_dgrad(CUDNN_DATA_HALF, &kDgradShapes[s], order);
            check_dgrad(CUDNN_DATA_BFLOAT16, &kDgradShapes[s], order);
        }
}

// Refused when finalized: a backward data whose dx has another size than
// the convolution of dy gives; a BN_BWD_WEIGHTS whose dy has other
// dimensions than x, whose mean has other channels, or without eq_bias.
static void test_dgrad_and_norm_mistakes_are_refused(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    assert_null(lone_graph(LONE_DGRAD, CONV_SIDE + 1, CONV_C, &err));
    assert_non_null(strstr(err.text, "convolution data gradient: CUDNN_STATUS_BAD_PARAM"));
    assert_null(lone_graph(LONE_NORM, CONV_SIDE - 1, CONV_C, &err));
    assert_non_null(strstr(err.text, "BatchNorm weight gradient: CUDNN_STATUS_BAD_PARAM"));
    assert_null(lone_graph(LONE_NORM, CONV_SIDE, 2 * CONV_C, &err));
    assert_non_null(strstr(err.text, "BatchNorm weight gradient: CUDNN_STATUS_BAD_PARAM"));

    DnnGraph g;
    dnn_graph_begin(&g, handle);
    void *x = nhwc_tensor(&g, UID_X0, CUDNN_DATA_HALF, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE, 0);
    void *per_channel = nhwc_tensor(&g, UID_MEAN, CUDNN_DATA_FLOAT, 1, CONV_C, 1, 1, 0);
    void *op = dnn_graph_descriptor(&g, CUDNN_BACKEND_OPERATION_BN_BWD_WEIGHTS_DESCRIPTOR, "norm");
    const cudnnDataType_t precision = CUDNN_DATA_FLOAT;
    dnn_graph_set(&g, op, CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MATH_PREC, CUDNN_TYPE_DATA_TYPE, 1,
                  &precision, "precision");
    // every tensor attribute but EQ_BIAS, the last of those cudnn_graph.h
    // numbers from MEAN_DESC on
    for (int name = CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_MEAN_DESC;
         name < CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_EQ_BIAS; name++)
    {
        const int x_or_dy = name == CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_X_DESC ||
                            name == CUDNN_ATTR_OPERATION_BN_BWD_WEIGHTS_DY_DESC;
        dnn_graph_set(&g, op, name, CUDNN_TYPE_BACKEND_DESCRIPTOR, 1, x_or_dy ? &x : &per_channel,
                      "a tensor");
    }
    assert_false(g.failed);
    dnn_graph_finalize(&g, op, "the norm without eq_bias");
    assert_true(g.failed);
    assert_non_null(strstr(g.reason, "the norm without eq_bias"));
    dnn_graph_abandon(&g);
}

// Engines: the pattern in fp16 and bf16, in either order; none in fp32,
// with a virtual dz, with the norm's x another tensor than x0, with the
// chain on tensors of its own or SUB for the mean, for a lone backward data
// or BN_BWD_WEIGHTS; none under LTC_EMU_CUDNN_GRAPH=no-dgrad (which keeps
// the prologue graphs') or no-prologue.
static void test_dgrad_engines(void **state) {
    NEED_EMULATION();
    ErrorMessage err = {{0}};
    const int half = CUDNN_DATA_HALF, side = (int)conv_out_side(1);
    const DgradShape *shape = &kDgradShapes[0];
    assert_true(plans(dgrad_graph(half, shape, DGRAD_AS_LISTED, &err)));
    assert_true(plans(dgrad_graph(CUDNN_DATA_BFLOAT16, shape, DGRAD_AFFINE_FIRST, &err)));
    for (DgradVariant v = DGRAD_FP32; v <= DGRAD_SUB; v++) {
        err.text[0] = '\0';
        if (!no_engine(dgrad_graph(half, shape, v, &err), &err))
            fail_msg("variant %d: %s", (int)v, err.text[0] ? err.text : "an engine");
    }
    assert_true(no_engine(lone_graph(LONE_DGRAD, CONV_SIDE, CONV_C, &err), &err));
    assert_true(no_engine(lone_graph(LONE_NORM, CONV_SIDE, CONV_C, &err), &err));

    char *saved = set_graph_switch("no-dgrad");
    const int no_dgrad = no_engine(dgrad_graph(half, shape, DGRAD_AS_LISTED, &err), &err);
    const int fprop = plans(fprop_graph(half, SCALE_BIAS_RELU, 1, &err));
    const int wgrad = plans(wgrad_graph(half, SCALE_BIAS_RELU, 1, side, &err));
    restore_graph_switch(saved);
    saved = set_graph_switch("no-prologue");
    const int no_prologue = no_engine(dgrad_graph(half, shape, DGRAD_AS_LISTED, &err), &err);
    restore_graph_switch(saved);
    assert_true(no_dgrad);
    assert_true(fprop);
    assert_true(wgrad);
    assert_true(no_prologue);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dgrad_drelu_bn_bwd_weight),
        cmocka_unit_test(test_dgrad_and_norm_mistakes_are_refused),
        cmocka_unit_test(test_dgrad_engines),
    };
    return cmocka_run_group_tests_name("cudnn DgradDreluBNBwdWeight (CUDA emulation)", tests, setup,
                                       teardown);
}
#else
static void test_no_cuda(void **state) { skip(); }

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_no_cuda)};
    return cmocka_run_group_tests_name("cudnn DgradDreluBNBwdWeight (no CUDA in this build)",
                                       tests, NULL, NULL);
}
#endif
