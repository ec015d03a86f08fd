// The CUDA emulation's stream capture and graphs (tests/cuda_emu/
// emu_capture.cpp), the ground a captured training step stands on (issue
// 32, docs/gpu.md "CUDA graphs"): a captured sequence of copies, a memset
// and kernels replayed N times gives what running it N times gives; a
// kernel's by-value arguments are fixed at capture while the memory its
// pointers name is read at each replay (why the per-step scalars of the
// cuda backend live in device memory); a synchronisation, an allocation or
// a library call that cannot be recorded (cuDNN's algorithm search) inside
// a capture fails and invalidates it, as on a GPU (the recorded library
// calls: test_cuda_graph_layers); a stream forked into a capture through
// an event (the NCCL communicator's) joins its graph and must be joined
// back before the capture ends. Built against the emulation only (not a .cu for nvcc).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {  // cmocka.h declares C functions without saying so to C++
#include <cmocka.h>
}
#include <string.h>

#include <cudnn.h>

enum { N = 300 };

// acc = acc * factor + x + *offset: a by-value argument and one read
// through a pointer.
__global__ void accumulate(float *acc, const float *x, float factor, const float *offset, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) acc[i] = acc[i] * factor + x[i] + *offset;
}

struct Buffers {
    cudaStream_t stream;
    float *host_x;  // pinned: the source of the step's upload
    float *x, *acc, *offset, *scratch;
};

static Buffers make_buffers(void) {
    Buffers b;
    assert_int_equal(cudaStreamCreateWithFlags(&b.stream, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaHostAlloc((void **)&b.host_x, N * sizeof(float), 0), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&b.x, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&b.acc, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&b.offset, sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMalloc((void **)&b.scratch, N * sizeof(float)), cudaSuccess);
    for (int i = 0; i < N; i++) b.host_x[i] = 0.25f * (float)(i % 7) - 0.5f;
    const float offset = 0.125f;
    assert_int_equal(cudaMemcpy(b.offset, &offset, sizeof offset, cudaMemcpyHostToDevice),
                     cudaSuccess);
    // on the step's stream: a non-blocking stream does not wait for the legacy one
    assert_int_equal(cudaMemsetAsync(b.acc, 0, N * sizeof(float), b.stream), cudaSuccess);
    return b;
}

static void free_buffers(Buffers *b) {
    cudaFree(b->x), cudaFree(b->acc), cudaFree(b->offset), cudaFree(b->scratch);
    cudaFreeHost(b->host_x);
    cudaStreamDestroy(b->stream);
}

// One "step": upload x from pinned memory, a scratch memset and a copy
// through it, two kernels.
static void queue_step(Buffers *b, float factor) {
    const size_t bytes = N * sizeof(float);
    assert_int_equal(cudaMemcpyAsync(b->x, b->host_x, bytes, cudaMemcpyHostToDevice, b->stream),
                     cudaSuccess);
    assert_int_equal(cudaMemsetAsync(b->scratch, 0, bytes, b->stream), cudaSuccess);
    accumulate<<<(N + 127) / 128, 128, 0, b->stream>>>(b->scratch, b->x, 1.0f, b->offset, N);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    accumulate<<<(N + 127) / 128, 128, 0, b->stream>>>(b->acc, b->scratch, factor, b->offset, N);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
}

// The stream first: a blocking cudaMemcpy does not wait for a non-blocking
// stream (the emulation's streams run late, as a GPU's: emu_streams.cpp).
static void read_back(const Buffers *b, float *out) {
    assert_int_equal(cudaStreamSynchronize(b->stream), cudaSuccess);
    assert_int_equal(cudaMemcpy(out, b->acc, N * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
}

// Before the host writes a step's inputs again: the step before has read them.
static void inputs_free(const Buffers *b) {
    assert_int_equal(cudaStreamSynchronize(b->stream), cudaSuccess);
}

static cudaGraphExec_t capture_step(Buffers *b, float factor) {
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    assert_int_equal(cudaStreamBeginCapture(b->stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    queue_step(b, factor);
    assert_int_equal(cudaStreamEndCapture(b->stream, &graph), cudaSuccess);
    assert_non_null(graph);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    assert_int_equal(cudaGraphDestroy(graph), cudaSuccess);  // the instance keeps its nodes
    return exec;
}

static void test_a_replayed_graph_gives_what_running_it_gives(void **state) {
    (void)state;
    enum { STEPS = 3 };
    Buffers eager = make_buffers(), replayed = make_buffers();
    float expected[N], got[N];
    for (int step = 0; step < STEPS; step++) queue_step(&eager, 0.5f);
    read_back(&eager, expected);

    float before[N];
    read_back(&replayed, before);
    cudaGraphExec_t exec = capture_step(&replayed, 0.5f);
    read_back(&replayed, got);  // the capture itself ran nothing
    assert_memory_equal(got, before, sizeof got);
    for (int step = 0; step < STEPS; step++)
        assert_int_equal(cudaGraphLaunch(exec, replayed.stream), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(replayed.stream), cudaSuccess);
    read_back(&replayed, got);
    assert_memory_equal(got, expected, sizeof got);
    cudaGraphExecDestroy(exec);
    free_buffers(&eager), free_buffers(&replayed);
}

// The factor passed by value stays what it was at capture; the offset in
// device memory and the pinned upload source are read at every replay.
static void test_values_are_captured_and_memory_is_read_at_replay(void **state) {
    (void)state;
    Buffers eager = make_buffers(), replayed = make_buffers();
    float factor = 0.5f;
    cudaGraphExec_t exec = capture_step(&replayed, factor);
    factor = 3.0f;  // too late: the graph keeps 0.5
    const float offsets[2] = {0.125f, -2.0f};
    for (int step = 0; step < 2; step++) {
        // a new step's inputs: the device offset and the pinned upload source
        for (Buffers *b : {&eager, &replayed}) {
            inputs_free(b);
            assert_int_equal(cudaMemcpy(b->offset, &offsets[step], sizeof(float),
                                        cudaMemcpyHostToDevice),
                             cudaSuccess);
            for (int i = 0; i < N; i++) b->host_x[i] = (float)(step + 1) * 0.1f * (float)(i % 5);
        }
        queue_step(&eager, 0.5f);
        assert_int_equal(cudaGraphLaunch(exec, replayed.stream), cudaSuccess);
    }
    float expected[N], got[N], with_new_factor[N];
    read_back(&eager, expected);
    read_back(&replayed, got);
    assert_memory_equal(got, expected, sizeof got);
    // and the check can fail: the host's new factor would have given other values
    Buffers other = make_buffers();
    for (int step = 0; step < 2; step++) {
        inputs_free(&other);
        assert_int_equal(cudaMemcpy(other.offset, &offsets[step], sizeof(float),
                                    cudaMemcpyHostToDevice),
                         cudaSuccess);
        for (int i = 0; i < N; i++) other.host_x[i] = (float)(step + 1) * 0.1f * (float)(i % 5);
        queue_step(&other, factor);
    }
    read_back(&other, with_new_factor);
    assert_true(memcmp(with_new_factor, expected, sizeof expected) != 0);
    cudaGraphExecDestroy(exec);
    free_buffers(&eager), free_buffers(&replayed), free_buffers(&other);
}

// A refused call inside a capture: the call fails with
// cudaErrorStreamCaptureUnsupported (or the library's refusal), the
// stream's capture is invalidated, and its end hands over no graph.
static void expect_invalidated(cudaStream_t stream) {
    enum cudaStreamCaptureStatus status;
    assert_int_equal(cudaStreamIsCapturing(stream, &status), cudaSuccess);
    assert_int_equal(status, cudaStreamCaptureStatusInvalidated);
    cudaGraph_t graph = (cudaGraph_t)&graph;
    assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaErrorStreamCaptureInvalidated);
    assert_null(graph);
    assert_int_equal(cudaStreamIsCapturing(stream, &status), cudaSuccess);
    assert_int_equal(status, cudaStreamCaptureStatusNone);
    (void)cudaGetLastError();
}

static void test_syncs_allocations_and_libraries_inside_a_capture_fail(void **state) {
    (void)state;
    Buffers b = make_buffers();
    float host[N];
    void *more = NULL;
    cudnnHandle_t dnn = NULL;
    assert_int_equal(cudnnCreate(&dnn), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnSetStream(dnn, b.stream), CUDNN_STATUS_SUCCESS);
    cudaEvent_t before;  // recorded before the capture, passed
    assert_int_equal(cudaEventCreateWithFlags(&before, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(cudaEventRecord(before, b.stream), cudaSuccess);
    assert_int_equal(cudaEventSynchronize(before), cudaSuccess);
    for (int refused = 0; refused < 7; refused++) {
        enum cudaStreamCaptureStatus status;
        assert_int_equal(cudaStreamBeginCapture(b.stream, cudaStreamCaptureModeGlobal),
                         cudaSuccess);
        assert_int_equal(cudaStreamIsCapturing(b.stream, &status), cudaSuccess);
        assert_int_equal(status, cudaStreamCaptureStatusActive);
        queue_step(&b, 0.5f);
        switch (refused) {
        case 0:
            assert_int_equal(cudaStreamSynchronize(b.stream), cudaErrorStreamCaptureUnsupported);
            break;
        case 1:
            assert_int_equal(cudaDeviceSynchronize(), cudaErrorStreamCaptureUnsupported);
            break;
        case 2:
            assert_int_equal(cudaMemcpy(host, b.acc, sizeof host, cudaMemcpyDeviceToHost),
                             cudaErrorStreamCaptureUnsupported);
            break;
        case 3:
            assert_int_equal(cudaMalloc(&more, 64), cudaErrorStreamCaptureUnsupported);
            assert_null(more);
            break;
        case 4: assert_int_equal(cudaFree(b.x), cudaErrorStreamCaptureUnsupported); break;
        case 5: {  // not recordable (cuDNN times its candidates): refused with its name
            int returned = 0;
            cudnnConvolutionFwdAlgoPerf_t found[2];
            assert_int_equal(cudnnFindConvolutionForwardAlgorithm(dnn, NULL, NULL, NULL, NULL, 2,
                                                                  &returned, found),
                             CUDNN_STATUS_NOT_SUPPORTED);
            break;
        }
        case 6:  // even of an event recorded before the capture (an H200's refusal)
            assert_int_equal(cudaEventQuery(before), cudaErrorStreamCaptureUnsupported);
            break;
        }
        expect_invalidated(b.stream);
    }
    // outside a capture the same calls run
    assert_int_equal(cudaEventQuery(before), cudaSuccess);
    cudaEventDestroy(before);
    assert_int_equal(cudaStreamSynchronize(b.stream), cudaSuccess);
    assert_int_equal(cudaMalloc(&more, 64), cudaSuccess);
    assert_int_equal(cudaFree(more), cudaSuccess);
    cudnnDestroy(dnn);
    free_buffers(&b);
}

// A side stream forked from the capturing stream through an event, which
// the capturing stream joins again through another: the side stream's work
// is in the graph (nothing runs at capture; every launch runs it between
// the two halves of the step), as a queued NCCL collective is captured. A
// side stream never joined back makes the end of the capture fail.
static void fork_and_join(Buffers *b, cudaStream_t side, cudaEvent_t forked, cudaEvent_t joined,
                          int join) {
    queue_step(b, 0.5f);
    assert_int_equal(cudaEventRecord(forked, b->stream), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(side, forked, 0), cudaSuccess);
    accumulate<<<(N + 127) / 128, 128, 0, side>>>(b->acc, b->x, 2.0f, b->offset, N);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaEventRecord(joined, side), cudaSuccess);
    if (join) assert_int_equal(cudaStreamWaitEvent(b->stream, joined, 0), cudaSuccess);
    accumulate<<<(N + 127) / 128, 128, 0, b->stream>>>(b->acc, b->x, 0.25f, b->offset, N);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
}

static void test_streams_forked_into_a_capture_join_its_graph(void **state) {
    (void)state;
    enum { STEPS = 2 };
    cudaStream_t side;
    cudaEvent_t forked, joined;
    assert_int_equal(cudaStreamCreateWithFlags(&side, cudaStreamNonBlocking), cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&forked, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(cudaEventCreateWithFlags(&joined, cudaEventDisableTiming), cudaSuccess);
    Buffers eager = make_buffers(), replayed = make_buffers();
    float expected[N], got[N], before[N];
    for (int step = 0; step < STEPS; step++) fork_and_join(&eager, side, forked, joined, 1);
    read_back(&eager, expected);
    read_back(&replayed, before);

    assert_int_equal(cudaStreamBeginCapture(replayed.stream, cudaStreamCaptureModeThreadLocal),
                     cudaSuccess);
    fork_and_join(&replayed, side, forked, joined, 1);
    enum cudaStreamCaptureStatus status;
    assert_int_equal(cudaStreamIsCapturing(side, &status), cudaSuccess);
    assert_int_equal(status, cudaStreamCaptureStatusActive);  // joined the capture
    // the capture ends on its origin only
    cudaGraph_t graph = NULL;
    assert_int_equal(cudaStreamEndCapture(side, &graph), cudaErrorStreamCaptureUnmatched);
    (void)cudaGetLastError();
    assert_int_equal(cudaStreamEndCapture(replayed.stream, &graph), cudaSuccess);
    assert_int_equal(cudaStreamIsCapturing(side, &status), cudaSuccess);
    assert_int_equal(status, cudaStreamCaptureStatusNone);
    assert_int_equal(cudaStreamSynchronize(side), cudaSuccess);  // nothing of it ran
    read_back(&replayed, got);
    assert_memory_equal(got, before, sizeof got);
    cudaGraphExec_t exec = NULL;
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    cudaGraphDestroy(graph);
    for (int step = 0; step < STEPS; step++)
        assert_int_equal(cudaGraphLaunch(exec, replayed.stream), cudaSuccess);
    read_back(&replayed, got);
    assert_memory_equal(got, expected, sizeof got);
    cudaGraphExecDestroy(exec);

    // not joined back: no graph
    assert_int_equal(cudaStreamBeginCapture(replayed.stream, cudaStreamCaptureModeGlobal),
                     cudaSuccess);
    fork_and_join(&replayed, side, forked, joined, 0);
    graph = (cudaGraph_t)&graph;
    assert_int_equal(cudaStreamEndCapture(replayed.stream, &graph),
                     cudaErrorStreamCaptureUnjoined);
    assert_null(graph);
    (void)cudaGetLastError();
    assert_int_equal(cudaStreamIsCapturing(side, &status), cudaSuccess);
    assert_int_equal(status, cudaStreamCaptureStatusNone);
    cudaEventDestroy(forked), cudaEventDestroy(joined);
    cudaStreamDestroy(side);
    free_buffers(&eager), free_buffers(&replayed);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_replayed_graph_gives_what_running_it_gives),
        cmocka_unit_test(test_values_are_captured_and_memory_is_read_at_replay),
        cmocka_unit_test(test_syncs_allocations_and_libraries_inside_a_capture_fail),
        cmocka_unit_test(test_streams_forked_into_a_capture_join_its_graph),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
