// The cuda backend's library calls captured once as a CUDA graph and
// replayed (issue 32's groundwork, docs/gpu.md "CUDA graphs"): a linear
// layer's forward and backward (cuBLAS; in 16 bits with a bias, cuBLASLt's
// bias epilogue) and two convolutions' forward and backward (cuDNN's legacy
// API; one with 3 input channels, which 16 bits pad in the workspace; in 16
// bits the other's forward also through cuDNN's conv + genstats graph,
// conv2d_forward_stats), in fp32, fp16 and bf16. Three replays, with new
// inputs written into the same device buffers before each, give the same
// bits as three rounds queued op by op (the weight gradients accumulating
// alike). On the CUDA emulation (emu_tests.list) this needs the emulated
// cuBLAS, cuBLASLt and cuDNN to record their calls while a stream captures
// (emu_blas.h); on a GPU (gpu_tests.list) the real libraries to be
// capturable: no allocation (cuBLAS's workspace set, cuDNN's reserved at
// plan time) and no host wait inside. Skipped where no cuda backend can be
// made.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

#ifdef LTC_WITH_CUDA
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"

enum { ROUNDS = 3, ROWS = 6, IN = 16, OUT = 24 };

// A tensor of the step: device memory, in the activations' dtype (act) or
// fp32, and its size in elements.
typedef struct Tensor {
    void *device;
    size_t count;
    int act;
} Tensor;

// The step's tensors: inputs (rewritten before each round), outputs.
enum {
    LIN_X, LIN_W, LIN_BIAS, LIN_DY, CONV_X, CONV_W, CONV_DY, STEM_X, STEM_W, STEM_DY,  // inputs
    LIN_Y, LIN_DX, LIN_DW, LIN_DBIAS, CONV_Y, CONV_DX, CONV_DW, STATS_Y, STATS_SUMS, STEM_Y,
    STEM_DX, STEM_DW,  // outputs
    TENSORS,
    FIRST_OUTPUT = LIN_Y
};

typedef struct Step {
    Tensor t[TENSORS];
    ConvPlan *conv, *stem;
    ConvShape conv_shape, stem_shape;
    float *staging;  // device fp32, for inputs in the act dtype
    int fused;       // conv2d_forward_stats took its fused path
} Step;

static size_t tensor_bytes(Backend *b, const Tensor *t) {
    return t->act ? act_bytes(b, t->count) : t->count * sizeof(float);
}

static ConvPlan *make_plan(Backend *b, ConvShape *shape, int in_channels, int out_channels) {
    ErrorMessage err = {{0}};
    if (conv_shape_make(shape, 2, 6, 5, in_channels, out_channels, 3, 1, 1, &err))
        fail_msg("%s", err.text);
    ConvPlan *plan = b->op.conv2d_plan(b, shape, &err);
    if (!plan) fail_msg("%s", err.text);
    return plan;
}

static Step make_step(Backend *b) {
    Step s = {0};
    s.conv = make_plan(b, &s.conv_shape, 8, 16);
    s.stem = make_plan(b, &s.stem_shape, 3, 8);
    const ConvShape *c = &s.conv_shape, *st = &s.stem_shape;
    const size_t conv_in = (size_t)c->batch * c->in_height * c->in_width * c->in_channels;
    const size_t conv_out = (size_t)c->batch * c->out_height * c->out_width * c->out_channels;
    const size_t conv_w = (size_t)c->out_channels * c->kernel * c->kernel * c->in_channels;
    const size_t stem_in = (size_t)st->batch * st->in_height * st->in_width * st->in_channels;
    const size_t stem_out = (size_t)st->batch * st->out_height * st->out_width * st->out_channels;
    const size_t stem_w = (size_t)st->out_channels * st->kernel * st->kernel * st->in_channels;
    const struct {
        size_t count;
        int act;
    } spec[TENSORS] = {
        [LIN_X] = {ROWS * IN, 1},        [LIN_W] = {OUT * IN, 1},
        [LIN_BIAS] = {OUT, 0},           [LIN_DY] = {ROWS * OUT, 1},
        [CONV_X] = {conv_in, 1},         [CONV_W] = {conv_w, 1},
        [CONV_DY] = {conv_out, 1},       [STEM_X] = {stem_in, 1},
        [STEM_W] = {stem_w, 1},          [STEM_DY] = {stem_out, 1},
        [LIN_Y] = {ROWS * OUT, 1},       [LIN_DX] = {ROWS * IN, 1},
        [LIN_DW] = {OUT * IN, 0},        [LIN_DBIAS] = {OUT, 0},
        [CONV_Y] = {conv_out, 1},        [CONV_DX] = {conv_in, 1},
        [CONV_DW] = {conv_w, 0},         [STATS_Y] = {conv_out, 1},
        [STATS_SUMS] = {2 * 16, 0},      [STEM_Y] = {stem_out, 1},
        [STEM_DX] = {stem_in, 1},        [STEM_DW] = {stem_w, 0},
    };
    size_t largest = 0;
    for (int i = 0; i < TENSORS; i++) {
        s.t[i] = (Tensor){NULL, spec[i].count, spec[i].act};
        s.t[i].device = b->op.alloc(b, tensor_bytes(b, &s.t[i]));
        assert_non_null(s.t[i].device);
        if (spec[i].count > largest) largest = spec[i].count;
    }
    s.staging = b->op.alloc(b, largest * sizeof(float));
    assert_non_null(s.staging);
    return s;
}

static void free_step(Backend *b, Step *s) {
    for (int i = 0; i < TENSORS; i++) b->op.free(b, s->t[i].device);
    b->op.free(b, s->staging);
    b->op.conv2d_plan_free(b, s->conv);
    b->op.conv2d_plan_free(b, s->stem);
}

// Inputs of round `round` (values in [-1, 1], other each round); the
// outputs (the accumulated gradients among them) zeroed at round 0.
static void write_inputs(Backend *b, Step *s, int round) {
    size_t largest = 0;
    for (int i = 0; i < TENSORS; i++)
        if (s->t[i].count > largest) largest = s->t[i].count;
    float *host = malloc(largest * sizeof(float));
    assert_non_null(host);
    for (int i = 0; i < TENSORS; i++) {
        Tensor *t = &s->t[i];
        const int input = i < FIRST_OUTPUT;
        if (!input && round > 0) continue;
        for (size_t k = 0; k < t->count; k++)
            host[k] = input ? (float)((k * 7919 + (size_t)(i + 3) * 104729 * (round + 1)) % 2001) /
                                      1000.0f - 1.0f
                            : 0.0f;
        if (t->act) {
            b->op.upload(b, s->staging, host, t->count * sizeof(float));
            b->op.float_to_act(b, t->count, s->staging, t->device);
        } else {
            b->op.upload(b, t->device, host, t->count * sizeof(float));
        }
    }
    b->op.synchronize(b);
    free(host);
}

// The step's library calls, as the layers queue them.
static int queue_step(Backend *b, Step *s) {
#define T(i) (s->t[i].device)
    b->op.linear_forward(b, ROWS, IN, OUT, T(LIN_X), T(LIN_W), T(LIN_BIAS), T(LIN_Y));
    b->op.linear_backward_data(b, ROWS, IN, OUT, T(LIN_DY), T(LIN_W), T(LIN_DX));
    b->op.linear_backward_weights(b, ROWS, IN, OUT, T(LIN_X), T(LIN_DY), T(LIN_DW),
                                  T(LIN_DBIAS));
    b->op.conv2d_forward(b, s->conv, T(CONV_X), T(CONV_W), T(CONV_Y));
    const int fused = b->op.conv2d_forward_stats &&
                      b->op.conv2d_forward_stats(b, s->conv, T(CONV_X), NULL, T(CONV_W), T(STATS_Y),
                                                 T(STATS_SUMS));
    b->op.conv2d_backward_data(b, s->conv, T(CONV_DY), T(CONV_W), T(CONV_DX));
    b->op.conv2d_backward_weights(b, s->conv, T(CONV_X), T(CONV_DY), T(CONV_DW));
    b->op.conv2d_forward(b, s->stem, T(STEM_X), T(STEM_W), T(STEM_Y));
    b->op.conv2d_backward_data(b, s->stem, T(STEM_DY), T(STEM_W), T(STEM_DX));
    b->op.conv2d_backward_weights(b, s->stem, T(STEM_X), T(STEM_DY), T(STEM_DW));
#undef T
    return fused;
}

// The outputs' bytes, one after another.
static size_t outputs_bytes(Backend *b, const Step *s) {
    size_t bytes = 0;
    for (int i = FIRST_OUTPUT; i < TENSORS; i++) bytes += tensor_bytes(b, &s->t[i]);
    return bytes;
}

static void read_outputs(Backend *b, const Step *s, unsigned char *out) {
    for (int i = FIRST_OUTPUT; i < TENSORS; i++) {
        b->op.download(b, out, s->t[i].device, tensor_bytes(b, &s->t[i]));
        out += tensor_bytes(b, &s->t[i]);
    }
}

static int expect_fused(Backend *b) {
    const char *off = getenv("LTC_CUDA_CONV_FUSION"), *emu = getenv("LTC_EMU_CUDNN_GRAPH");
    return b->compute_dtype != COMPUTE_F32 && !(off && !strcmp(off, "off")) &&
           !(emu && !strcmp(emu, "no-engine"));
}

static void check_replay(ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    Backend *b = cuda_backend_create(0, &err);
    if (!b) {
        printf("skipped: no cuda backend (%s)\n", err.text);
        skip();
    }
    if (backend_set_compute_dtype(b, dtype, &err)) fail_msg("%s", err.text);
    Step s = make_step(b);
    const size_t bytes = outputs_bytes(b, &s);
    unsigned char *eager = malloc(ROUNDS * bytes), *replayed = malloc(bytes);
    assert_non_null(eager), assert_non_null(replayed);

    // Op by op first: plans and cuBLASLt's algorithm are made by then.
    for (int round = 0; round < ROUNDS; round++) {
        write_inputs(b, &s, round);
        s.fused = queue_step(b, &s);
        read_outputs(b, &s, eager + round * bytes);
    }
    assert_int_equal(s.fused, expect_fused(b));
    assert_memory_not_equal(eager, eager + bytes, bytes);  // the rounds differ

    write_inputs(b, &s, 0);  // zeroes the outputs, the accumulated gradients again
    cudaStream_t stream = (cudaStream_t)cuda_backend_stream(b);
    assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    const int fused = queue_step(b, &s);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    assert_int_equal(fused, s.fused);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    for (int round = 0; round < ROUNDS; round++) {
        if (round > 0) write_inputs(b, &s, round);
        assert_int_equal(cudaGraphLaunch(exec, stream), cudaSuccess);
        read_outputs(b, &s, replayed);
        assert_memory_equal(replayed, eager + round * bytes, bytes);
    }
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    free_step(b, &s);
    free(eager), free(replayed);
    b->destroy(b);
}

static void test_fp32_layers_replayed(void **state) {
    (void)state;
    check_replay(COMPUTE_F32);
}

static void test_fp16_layers_replayed(void **state) {
    (void)state;
    check_replay(COMPUTE_F16);
}

static void test_bf16_layers_replayed(void **state) {
    (void)state;
    check_replay(COMPUTE_BF16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fp32_layers_replayed),
        cmocka_unit_test(test_fp16_layers_replayed),
        cmocka_unit_test(test_bf16_layers_replayed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include "no_cuda_test.h"

int main(void) { return no_cuda_test_main(); }

#endif
