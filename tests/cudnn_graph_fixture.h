// Helpers of the tests of the CUDA emulation's cuDNN graph API
// (test_cudnn_graph.c, test_cudnn_dgrad.c): the cuDNN handle (only on the
// emulation: the tests skip elsewhere), NHWC tensors, small convolution
// graphs with or without a scale-bias-relu prologue, 16-bit conversions,
// the host's inputs and tolerances, and the engine checks. Static inline:
// each test includes what it uses. Include after cmocka.h, in builds with
// CUDA (LTC_WITH_CUDA).
#ifndef LTC_TESTS_CUDNN_GRAPH_FIXTURE_H
#define LTC_TESTS_CUDNN_GRAPH_FIXTURE_H

#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cudnn_graph.h"
#include "util/half.h"

enum { UID_VIRTUAL = 50 };  // the first uid of a test's virtual tensors

static cudnnHandle_t handle;

static inline int setup(void **state) {
    ErrorMessage err = {{0}};
    Backend *cuda = backend_create("cuda", 0, &err);
    const int emulated = cuda && strstr(cuda->device, "CUDA emulation") != NULL;
    if (cuda) backend_destroy(cuda);
    if (!emulated) return 0;  // the tests skip
    return cudnnCreate(&handle) == CUDNN_STATUS_SUCCESS ? 0 : -1;
}

static inline int teardown(void **state) {
    if (handle) cudnnDestroy(handle);
    return 0;
}

#define NEED_EMULATION() \
    do {                 \
        if (!handle) skip(); \
    } while (0)

static inline void *device_copy(const void *host, size_t bytes) {
    void *device = NULL;
    assert_int_equal(cudaMalloc(&device, bytes), cudaSuccess);
    if (host) assert_int_equal(cudaMemcpy(device, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    return device;
}

// x0 (2, 8, 5, 5) over NHWC memory, a per-channel scale and bias (1, 8, 1,
// 1); w and dw (16, 8, 3, 3) over KRSC; y and dy (2, 16, OUT, OUT) over
// NHWC; padding 1, stride 1 or 2.
enum { CONV_N = 2, CONV_C = 8, CONV_SIDE = 5, CONV_K = 16, CONV_R = 3, CONV_PAD = 1 };
enum { CONV_X_COUNT = CONV_N * CONV_SIDE * CONV_SIDE * CONV_C };
enum { CONV_W_COUNT = CONV_K * CONV_R * CONV_R * CONV_C };
enum { CONV_Y_MAX = CONV_N * CONV_SIDE * CONV_SIDE * CONV_K };  // stride 1
enum { UID_X0 = 20, UID_SCALE_C, UID_BIAS_C, UID_W, UID_Y, UID_SUM, UID_SQSUM, UID_DY, UID_DW };

// What feeds the convolution's x: x0 itself, relu(x0 scale + bias) as
// cuDNN's samples build it, or that with what no engine fuses: relu((x0 +
// bias) scale), scale and bias in fp32 (x0 16-bit), all three in fp32 (the
// convolution's own tensors 16-bit), the convolution's own tensors in fp32
// (x0, scale and bias 16-bit).
typedef enum {
    NO_PROLOGUE,
    SCALE_BIAS_RELU,
    BIAS_SCALE_RELU,
    FP32_SCALE_BIAS,
    FP32_PROLOGUE_INPUTS,
    FP32_CONVOLUTION,
} Prologue;

static inline int64_t conv_out_side(int64_t stride) {
    return (CONV_SIDE + 2 * CONV_PAD - CONV_R) / stride + 1;
}

// A (n, c, h, w) tensor over NHWC memory (KRSC for a filter).
static inline void *nhwc_tensor(DnnGraph *g, int64_t uid, int type, int64_t n, int64_t c,
                                int64_t h, int64_t w, unsigned flags) {
    const int64_t dims[4] = {n, c, h, w}, strides[4] = {h * w * c, 1, w * c, c};
    return dnn_graph_tensor(g, uid, type, 4, dims, strides, flags);
}

// The convolution's x: x0 (with data) or the prologue's fp32 virtual output.
static inline void *conv_input(DnnGraph *g, int type, Prologue prologue) {
    const int x0_type = prologue == FP32_PROLOGUE_INPUTS ? CUDNN_DATA_FLOAT : type;
    const int parameter_type =
        prologue == FP32_SCALE_BIAS || prologue == FP32_PROLOGUE_INPUTS ? CUDNN_DATA_FLOAT : type;
    void *x0 = nhwc_tensor(g, UID_X0, x0_type, CONV_N, CONV_C, CONV_SIDE, CONV_SIDE, 0);
    if (prologue == NO_PROLOGUE) return x0;
    void *scale = nhwc_tensor(g, UID_SCALE_C, parameter_type, 1, CONV_C, 1, 1, 0);
    void *bias = nhwc_tensor(g, UID_BIAS_C, parameter_type, 1, CONV_C, 1, 1, 0);
    void *steps[3];
    for (int i = 0; i < 3; i++)
        steps[i] = nhwc_tensor(g, UID_VIRTUAL + i, CUDNN_DATA_FLOAT, CONV_N, CONV_C, CONV_SIDE,
                               CONV_SIDE, DNN_VIRTUAL);
    const int scale_first = prologue != BIAS_SCALE_RELU;
    dnn_graph_pointwise(g, scale_first ? CUDNN_POINTWISE_MUL : CUDNN_POINTWISE_ADD, x0,
                        scale_first ? scale : bias, steps[0]);
    dnn_graph_pointwise(g, scale_first ? CUDNN_POINTWISE_ADD : CUDNN_POINTWISE_MUL, steps[0],
                        scale_first ? bias : scale, steps[1]);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_RELU_FWD, steps[1], NULL, steps[2]);
    return steps[2];
}

// ConvBNfprop: y = conv(x, w) and y's per-channel sum and sum of squares.
static inline DnnPlan *fprop_graph(int type, Prologue prologue, int64_t stride, ErrorMessage *err) {
    DnnGraph g;
    dnn_graph_begin(&g, handle);
    const int64_t out = conv_out_side(stride), sum_dims[4] = {1, CONV_K, 1, 1};
    const int64_t sum_strides[4] = {CONV_K, 1, CONV_K, CONV_K};
    const int conv_type = prologue == FP32_CONVOLUTION ? CUDNN_DATA_FLOAT : type;
    void *tensors[3] = {
        conv_input(&g, type, prologue),
        nhwc_tensor(&g, UID_W, conv_type, CONV_K, CONV_C, CONV_R, CONV_R, 0),
        nhwc_tensor(&g, UID_Y, conv_type, CONV_N, CONV_K, out, out, 0),
    };
    dnn_graph_conv_forward(&g, dnn_graph_convolution(&g, stride, CONV_PAD), tensors[0],
                           tensors[1], tensors[2]);
    void *sums[2] = {
        dnn_graph_tensor(&g, UID_SUM, CUDNN_DATA_FLOAT, 4, sum_dims, sum_strides, 0),
        dnn_graph_tensor(&g, UID_SQSUM, CUDNN_DATA_FLOAT, 4, sum_dims, sum_strides, 0),
    };
    dnn_graph_genstats(&g, tensors[2], sums[0], sums[1]);
    return dnn_graph_plan(&g, 1, err);
}

// ConvBNwgrad: dw = the filter gradient of the convolution of x with dy,
// dy (N, K, dy_side, dy_side) (conv_out_side(stride) unless a mistake).
static inline DnnPlan *wgrad_graph(int type, Prologue prologue, int64_t stride,
                                   int64_t dy_side, ErrorMessage *err) {
    DnnGraph g;
    dnn_graph_begin(&g, handle);
    const int conv_type = prologue == FP32_CONVOLUTION ? CUDNN_DATA_FLOAT : type;
    void *tensors[3] = {
        conv_input(&g, type, prologue),
        nhwc_tensor(&g, UID_DY, conv_type, CONV_N, CONV_K, dy_side, dy_side, 0),
        nhwc_tensor(&g, UID_DW, conv_type, CONV_K, CONV_C, CONV_R, CONV_R, 0),
    };
    dnn_graph_conv_filter_gradient(&g, dnn_graph_convolution(&g, stride, CONV_PAD), tensors[0],
                                   tensors[1], tensors[2]);
    return dnn_graph_plan(&g, 1, err);
}

static inline uint16_t to_bits(int type, float v) {
    return type == CUDNN_DATA_HALF ? float_to_f16(v) : float_to_bf16(v);
}

static inline float from_bits(int type, uint16_t bits) {
    return type == CUDNN_DATA_HALF ? f16_to_float(bits) : bf16_to_float(bits);
}

// The host's inputs (exact in fp16 and bf16), 16-bit as the graphs read
// them, and the prologue's output relu(x0 scale + bias) in fp32 (NHWC).
typedef struct ConvInputs {
    uint16_t x0[CONV_X_COUNT], scale[CONV_C], bias[CONV_C], w[CONV_W_COUNT], dy[CONV_Y_MAX];
    float x[CONV_X_COUNT];
} ConvInputs;

static inline void conv_inputs(int type, ConvInputs *in) {
    for (int i = 0; i < CONV_X_COUNT; i++) in->x0[i] = to_bits(type, (float)((i * 7) % 17 - 8) / 4);
    for (int c = 0; c < CONV_C; c++) {
        in->scale[c] = to_bits(type, 0.5f + (float)c / 8);
        in->bias[c] = to_bits(type, (float)(c % 5 - 2) / 4);
    }
    for (int i = 0; i < CONV_W_COUNT; i++) in->w[i] = to_bits(type, (float)((i * 5) % 13 - 6) / 8);
    for (int i = 0; i < CONV_Y_MAX; i++) in->dy[i] = to_bits(type, (float)((i * 3) % 11 - 5) / 8);
    for (int i = 0; i < CONV_X_COUNT; i++) {
        const int c = i % CONV_C;  // NHWC
        const float v = from_bits(type, in->x0[i]) * from_bits(type, in->scale[c]) +
                        from_bits(type, in->bias[c]);
        in->x[i] = v > 0.0f ? v : 0.0f;
    }
}

// Offsets in NHWC memory (KRSC for a filter: n = k, c, h = r, w = s).
static inline int nhwc(int n, int c, int h, int w, int channels, int side) {
    return ((n * side + h) * side + w) * channels + c;
}

// One 16-bit rounding of the stored result: half an ulp is |v| 2^-11
// (fp16) or 2^-8 (bf16); twice that, and a floor for fp32 summation-order
// differences near 0.
static inline float stored_tolerance(int type, float expected) {
    return 1e-3f + fabsf(expected) * (type == CUDNN_DATA_HALF ? 0x1p-10f : 0x1p-7f);
}

static inline int plans(DnnPlan *plan) {
    if (plan) dnn_plan_free(plan);
    return plan != NULL;
}

// No plan, because the heuristics offer no engine (not a failure before).
static inline int no_engine(DnnPlan *plan, const ErrorMessage *err) {
    return !plans(plan) && strstr(err->text, "no engine") != NULL;
}

// Sets LTC_EMU_CUDNN_GRAPH; returns its previous value (a copy, or NULL
// when unset) for restore_graph_switch.
static inline char *set_graph_switch(const char *value) {
    const char *previous = getenv("LTC_EMU_CUDNN_GRAPH");
    char *saved = previous ? strdup(previous) : NULL;
    setenv("LTC_EMU_CUDNN_GRAPH", value, 1);
    return saved;
}

static inline void restore_graph_switch(char *saved) {
    if (saved) setenv("LTC_EMU_CUDNN_GRAPH", saved, 1);
    else unsetenv("LTC_EMU_CUDNN_GRAPH");
    free(saved);
}

#endif
