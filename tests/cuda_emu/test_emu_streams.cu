// The CUDA emulation's streams that run late (tests/cuda_emu/emu_streams.cpp),
// what lets `make test` see a missing wait between the cuda backend's copy
// stream and compute stream, or host memory written again under a queued
// copy, without a GPU: work on a stream the program made runs when the host
// needs it (a synchronisation, an event's query, a copy to pageable memory,
// a free) and waits run the waited-for stream first; the legacy default
// stream waits for blocking streams only; a graph's event records count as
// the graph's; LTC_EMU_STREAMS=compute-at-once runs the work of a stream
// handed to cuDNN or cuBLAS when it is queued, =others-at-once that of the
// other streams, =immediate everything. And the order of a launch's
// blocks: LTC_EMU_BLOCK_ORDER=reverse runs the last first, so a kernel in
// which one block reads what another writes changes. The emulation's device
// memory is host memory, so these tests look at it directly to see what
// has run. Built against the emulation only (not a .cu for nvcc).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {  // cmocka.h declares C functions without saying so to C++
#include <cmocka.h>
}
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cudnn.h>

enum { BYTES = 256 };
// What cudaMalloc fills fresh device memory with (NaN bytes).
static const unsigned char kFresh = 0xff;

__global__ void fill_bytes(unsigned char *p, unsigned char value, int n) {
    const int i = (int)(blockIdx.x * blockDim.x + threadIdx.x);
    if (i < n) p[i] = value;
}

// Block b copies block b - 1's value plus one: right only where blocks run
// in order, which a GPU does not promise.
__global__ void chain_from_previous_block(int *values) {
    if (threadIdx.x == 0) values[blockIdx.x] = blockIdx.x == 0 ? 1 : values[blockIdx.x - 1] + 1;
}

// Each block writes its own value: any order gives the same.
__global__ void own_value(int *values) {
    if (threadIdx.x == 0) values[blockIdx.x] = (int)blockIdx.x + 1;
}

// The emulation's operation log (LTC_EMU_LAUNCH_LOG, set by main).
static char operation_log[] = "/tmp/ltc-emu-streams-log-XXXXXX";

static int log_has(const char *line) {
    FILE *f = fopen(operation_log, "r");
    assert_non_null(f);
    char text[256];
    int found = 0;
    while (!found && fgets(text, sizeof text, f)) found = strcmp(text, line) == 0;
    fclose(f);
    return found;
}

static unsigned char *device_bytes(void) {
    unsigned char *p = NULL;
    assert_int_equal(cudaMalloc((void **)&p, BYTES), cudaSuccess);
    return p;
}

static cudaStream_t stream_with(unsigned flags) {
    cudaStream_t stream = NULL;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, flags), cudaSuccess);
    return stream;
}

// Every byte of the emulated device memory at p (host memory here) is `value`.
static void expect_bytes(const unsigned char *p, unsigned char value) {
    for (int i = 0; i < BYTES; i++) assert_int_equal(p[i], value);
}

static void test_queued_work_runs_when_the_host_needs_it(void **state) {
    (void)state;
    cudaStream_t stream = stream_with(cudaStreamNonBlocking);
    unsigned char *first = device_bytes(), *second = device_bytes();
    cudaEvent_t between;
    assert_int_equal(cudaEventCreateWithFlags(&between, cudaEventDisableTiming), cudaSuccess);
    fill_bytes<<<2, 128, 0, stream>>>(first, 1, BYTES);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaEventRecord(between, stream), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(second, 2, BYTES, stream), cudaSuccess);
    expect_bytes(first, kFresh);  // queued, not run
    // Not ready while its record waits; the query lets the device go on, up to the record.
    assert_int_equal(cudaEventQuery(between), cudaErrorNotReady);
    expect_bytes(first, 1);
    expect_bytes(second, kFresh);
    assert_int_equal(cudaEventQuery(between), cudaSuccess);
    assert_int_equal(cudaStreamQuery(stream), cudaErrorNotReady);
    expect_bytes(second, 2);
    assert_int_equal(cudaStreamQuery(stream), cudaSuccess);
    // A synchronisation runs everything queued.
    assert_int_equal(cudaMemsetAsync(first, 3, BYTES, stream), cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
    expect_bytes(first, 3);
    cudaEventDestroy(between);
    cudaFree(first), cudaFree(second);
    cudaStreamDestroy(stream);
}

// A copy on one stream of what another writes: right with the wait, stale
// without it (as a GPU may give it), which the tests comparing results see.
static void test_a_wait_runs_the_other_stream_first(void **state) {
    (void)state;
    cudaStream_t producer = stream_with(cudaStreamNonBlocking);
    cudaStream_t consumer = stream_with(cudaStreamNonBlocking);
    unsigned char *source = device_bytes(), *copy = device_bytes();
    cudaEvent_t written;
    assert_int_equal(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);

    assert_int_equal(cudaMemsetAsync(source, 7, BYTES, producer), cudaSuccess);
    assert_int_equal(cudaEventRecord(written, producer), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(consumer, written, 0), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(copy, source, BYTES, cudaMemcpyDeviceToDevice, consumer),
                     cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(consumer), cudaSuccess);
    expect_bytes(copy, 7);

    // The same without the wait: the consumer's copy runs first.
    assert_int_equal(cudaMemsetAsync(source, 9, BYTES, producer), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(copy, source, BYTES, cudaMemcpyDeviceToDevice, consumer),
                     cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(consumer), cudaSuccess);
    expect_bytes(copy, 7);
    assert_int_equal(cudaStreamSynchronize(producer), cudaSuccess);
    expect_bytes(source, 9);

    // A later record of the event does not move a wait made before it.
    assert_int_equal(cudaMemsetAsync(source, 4, BYTES, producer), cudaSuccess);
    assert_int_equal(cudaEventRecord(written, producer), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(consumer, written, 0), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(source, 5, BYTES, producer), cudaSuccess);
    assert_int_equal(cudaEventRecord(written, producer), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(copy, source, BYTES, cudaMemcpyDeviceToDevice, consumer),
                     cudaSuccess);
    assert_int_equal(cudaStreamSynchronize(consumer), cudaSuccess);
    expect_bytes(copy, 4);
    cudaEventDestroy(written);
    cudaFree(source), cudaFree(copy);
    cudaStreamDestroy(producer), cudaStreamDestroy(consumer);
}

// Page-locked memory is read and written when the copy runs; pageable
// memory as CUDA treats it: staged at the call (to the device), or the
// call returns with the copy done (to the host).
static void test_host_memory_of_a_copy(void **state) {
    (void)state;
    cudaStream_t stream = stream_with(cudaStreamNonBlocking);
    unsigned char *device = device_bytes(), *pinned = NULL, pageable[BYTES];
    assert_int_equal(cudaHostAlloc((void **)&pinned, BYTES, 0), cudaSuccess);

    memset(pinned, 1, BYTES);
    assert_int_equal(cudaMemcpyAsync(device, pinned, BYTES, cudaMemcpyHostToDevice, stream),
                     cudaSuccess);
    memset(pinned, 2, BYTES);  // too early: the copy has not run
    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
    expect_bytes(device, 2);

    memset(pageable, 3, BYTES);
    assert_int_equal(cudaMemcpyAsync(device, pageable, BYTES, cudaMemcpyHostToDevice, stream),
                     cudaSuccess);
    memset(pageable, 4, BYTES);  // the call staged the bytes
    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
    expect_bytes(device, 3);

    assert_int_equal(cudaMemsetAsync(device, 5, BYTES, stream), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(pageable, device, BYTES, cudaMemcpyDeviceToHost, stream),
                     cudaSuccess);
    for (int i = 0; i < BYTES; i++) assert_int_equal(pageable[i], 5);  // done when it returns
    // and the operation log counts it as a wait of the host (tools/launch_census.sh)
    assert_true(log_has("host-wait cudaMemcpyAsync to pageable memory\n"));

    assert_int_equal(cudaMemsetAsync(device, 6, BYTES, stream), cudaSuccess);
    assert_int_equal(cudaMemcpyAsync(pinned, device, BYTES, cudaMemcpyDeviceToHost, stream),
                     cudaSuccess);
    for (int i = 0; i < BYTES; i++) assert_int_equal(pinned[i], 2);  // not yet
    assert_int_equal(cudaStreamSynchronize(stream), cudaSuccess);
    for (int i = 0; i < BYTES; i++) assert_int_equal(pinned[i], 6);
    cudaFreeHost(pinned);
    cudaFree(device);
    cudaStreamDestroy(stream);
}

// A blocking cudaMemcpy (the legacy default stream) waits for blocking
// streams, not for streams made with cudaStreamNonBlocking; a free waits
// for everything.
static void test_the_legacy_stream_and_frees(void **state) {
    (void)state;
    cudaStream_t blocking = stream_with(cudaStreamDefault);
    cudaStream_t non_blocking = stream_with(cudaStreamNonBlocking);
    unsigned char *a = device_bytes(), *b = device_bytes(), *spare = device_bytes();
    unsigned char host[BYTES];
    assert_int_equal(cudaMemsetAsync(a, 1, BYTES, blocking), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(b, 1, BYTES, non_blocking), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, a, BYTES, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < BYTES; i++) assert_int_equal(host[i], 1);
    assert_int_equal(cudaMemcpy(host, b, BYTES, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < BYTES; i++) assert_int_equal(host[i], kFresh);
    assert_int_equal(cudaFree(spare), cudaSuccess);
    expect_bytes(b, 1);
    cudaFree(a), cudaFree(b);
    cudaStreamDestroy(blocking), cudaStreamDestroy(non_blocking);
}

// An event recorded inside a captured graph is recorded by each launch of
// it: a wait for the event runs the graph's launch.
static void test_a_graph_records_its_events(void **state) {
    (void)state;
    cudaStream_t stream = stream_with(cudaStreamNonBlocking);
    unsigned char *p = device_bytes();
    cudaEvent_t done;
    assert_int_equal(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(p, 3, BYTES, stream), cudaSuccess);
    assert_int_equal(cudaEventRecordWithFlags(done, stream, cudaEventRecordExternal),
                     cudaSuccess);
    assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    assert_int_equal(cudaGraphLaunch(exec, stream), cudaSuccess);
    expect_bytes(p, kFresh);
    assert_int_equal(cudaEventSynchronize(done), cudaSuccess);
    expect_bytes(p, 3);
    cudaGraphExecDestroy(exec), cudaGraphDestroy(graph);
    cudaEventDestroy(done);
    cudaFree(p);
    cudaStreamDestroy(stream);
}

// The other schedules: the compute stream's work at once (a kernel never
// waits for a copy it was not told to wait for), the other streams' work at
// once, and everything at once.
static void test_compute_at_once_and_immediate(void **state) {
    (void)state;
    assert_int_equal(setenv("LTC_EMU_STREAMS", "compute-at-once", 1), 0);
    cudaStream_t copies = stream_with(cudaStreamNonBlocking);
    cudaStream_t compute = stream_with(cudaStreamNonBlocking);
    unsigned char *batch = device_bytes(), *read = device_bytes();
    // Queued before the stream is handed to cuDNN: it waits, then runs
    // first when the stream becomes a compute stream.
    assert_int_equal(cudaMemsetAsync(read, 1, BYTES, compute), cudaSuccess);
    expect_bytes(read, kFresh);
    cudnnHandle_t dnn = NULL;
    assert_int_equal(cudnnCreate(&dnn), CUDNN_STATUS_SUCCESS);
    assert_int_equal(cudnnSetStream(dnn, compute), CUDNN_STATUS_SUCCESS);
    expect_bytes(read, 1);
    cudaEvent_t landed;
    assert_int_equal(cudaEventCreateWithFlags(&landed, cudaEventDisableTiming), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(batch, 8, BYTES, copies), cudaSuccess);
    expect_bytes(batch, kFresh);
    assert_int_equal(cudaMemcpyAsync(read, batch, BYTES, cudaMemcpyDeviceToDevice, compute),
                     cudaSuccess);
    expect_bytes(read, kFresh);  // ran at once, before the copy it did not wait for
    assert_int_equal(cudaEventRecord(landed, copies), cudaSuccess);
    assert_int_equal(cudaStreamWaitEvent(compute, landed, 0), cudaSuccess);  // runs `copies`
    expect_bytes(batch, 8);
    assert_int_equal(cudaMemcpyAsync(read, batch, BYTES, cudaMemcpyDeviceToDevice, compute),
                     cudaSuccess);
    expect_bytes(read, 8);
    cudaEventDestroy(landed);

    // others-at-once: the copy runs when queued, the compute stream's work waits.
    assert_int_equal(setenv("LTC_EMU_STREAMS", "others-at-once", 1), 0);
    assert_int_equal(cudaMemsetAsync(read, 2, BYTES, compute), cudaSuccess);
    expect_bytes(read, 8);
    assert_int_equal(cudaMemsetAsync(batch, 3, BYTES, copies), cudaSuccess);
    expect_bytes(batch, 3);
    assert_int_equal(cudaStreamSynchronize(compute), cudaSuccess);
    expect_bytes(read, 2);
    cudnnDestroy(dnn);
    cudaStreamDestroy(compute), cudaStreamDestroy(copies);

    assert_int_equal(setenv("LTC_EMU_STREAMS", "immediate", 1), 0);
    cudaStream_t stream = stream_with(cudaStreamNonBlocking);
    assert_int_equal(cudaMemsetAsync(batch, 9, BYTES, stream), cudaSuccess);
    expect_bytes(batch, 9);
    cudaStreamDestroy(stream);
    assert_int_equal(unsetenv("LTC_EMU_STREAMS"), 0);
    cudaFree(batch), cudaFree(read);
}

// Runs `kernel` over 8 blocks in the given block order; the values, back.
static void run_blocks(void (*kernel)(int *), const char *order, int *out) {
    assert_int_equal(setenv("LTC_EMU_BLOCK_ORDER", order, 1), 0);
    int *values = NULL;
    assert_int_equal(cudaMalloc((void **)&values, 8 * sizeof(int)), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(values, 0, 8 * sizeof(int), 0), cudaSuccess);
    kernel<<<8, 32>>>(values);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpy(out, values, 8 * sizeof(int), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    cudaFree(values);
    assert_int_equal(unsetenv("LTC_EMU_BLOCK_ORDER"), 0);
}

static void test_blocks_in_reverse_order(void **state) {
    (void)state;
    int forward[8], reverse[8];
    run_blocks(own_value, "forward", forward);
    run_blocks(own_value, "reverse", reverse);
    assert_memory_equal(forward, reverse, sizeof forward);
    run_blocks(chain_from_previous_block, "forward", forward);
    run_blocks(chain_from_previous_block, "reverse", reverse);
    assert_int_equal(forward[7], 8);
    assert_int_equal(reverse[7], 1);  // block 7 ran first and read the memset's 0
}

int main(void) {
    // What is tested is each schedule as chosen here, not one from outside.
    unsetenv("LTC_EMU_STREAMS");
    unsetenv("LTC_EMU_BLOCK_ORDER");
    const int log_fd = mkstemp(operation_log);  // before the first operation opens the log
    if (log_fd < 0) return 1;
    close(log_fd);
    setenv("LTC_EMU_LAUNCH_LOG", operation_log, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_queued_work_runs_when_the_host_needs_it),
        cmocka_unit_test(test_a_wait_runs_the_other_stream_first),
        cmocka_unit_test(test_host_memory_of_a_copy),
        cmocka_unit_test(test_the_legacy_stream_and_frees),
        cmocka_unit_test(test_a_graph_records_its_events),
        cmocka_unit_test(test_compute_at_once_and_immediate),
        cmocka_unit_test(test_blocks_in_reverse_order),
    };
    const int failed = cmocka_run_group_tests(tests, NULL, NULL);
    unlink(operation_log);
    return failed;
}
