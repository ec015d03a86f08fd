// Data to the GPU (backend.h "data to the device"; docs/gpu.md): page-locked
// host memory for the loader's batch slots, host-to-device copies on a
// transfer's own stream ordered against the compute stream by events,
// ordered copies of a step's small inputs on the compute stream with
// fences, and the step timer (two timing events on the compute stream).
//
// A transfer's two events:
//   landed   recorded on the copy stream behind each copy; the compute
//            stream waits for it (transfer_device_wait), the host too
//            (transfer_host_wait: the copies have read their host memory).
//   consumed recorded on the compute stream (transfer_consumed) behind the
//            work that reads the copies' destinations; the copy stream waits
//            for it before the next copy, so a copy never overwrites device
//            memory a queued kernel still reads.
// Waiting on an event that was never recorded returns at once, so the first
// copy and the first wait need no special case.
//
// A step's small inputs (upload_ordered) are copied on the compute stream
// itself from pinned memory: stream order keeps their destinations safe,
// and a fence (an event on the compute stream) tells the host when their
// host memory may be written again (src/backend/staging.h).
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"
#include "util/cpu.h"

void cuda_backend_watch_waits(Backend *backend, CudaWaitWatch watch, void *arg) {
    CudaState *state = cuda_state(backend);
    state->wait_watch = watch;
    state->wait_watch_arg = arg;
}

// Polls `done` (cudaEventQuery or cudaStreamQuery on `handle`) until it
// says success, asking the watch between turns.
static void watched_wait(CudaState *state, cudaError_t (*done)(void *), void *handle,
                         const char *call) {
    const double start = time_now();
    for (;;) {
        const cudaError_t status = done(handle);
        if (status == cudaSuccess) return;
        if (status != cudaErrorNotReady)
            cuda_fatal("CUDA", call, cudaGetErrorString(status), __FILE__, __LINE__,
                       state->device);
        (void)cudaGetLastError();  // not ready is no error
        const double waited = time_now() - start;
        state->wait_watch(state->wait_watch_arg, waited);
        if (waited > 1e-3) sleep_seconds(waited / 10 < 1e-3 ? waited / 10 : 1e-3);
    }
}

static cudaError_t event_done(void *event) { return cudaEventQuery((cudaEvent_t)event); }

static cudaError_t stream_done(void *stream) { return cudaStreamQuery((cudaStream_t)stream); }

void cuda_wait_event(CudaState *state, cudaEvent_t event) {
    if (!state->wait_watch) {
        CUDA_CHECK(cudaEventSynchronize(event));
        return;
    }
    watched_wait(state, event_done, event, "cudaEventQuery");
}

void cuda_wait_stream(CudaState *state, cudaStream_t stream) {
    if (!state->wait_watch) {
        CUDA_CHECK(cudaStreamSynchronize(stream));
        return;
    }
    watched_wait(state, stream_done, stream, "cudaStreamQuery");
}

struct Transfer {
    cudaStream_t stream;  // the copy stream
    cudaEvent_t landed, consumed;
};

struct DeviceTimer {
    cudaEvent_t marks[2];  // start, end (timing events)
    int marked[2];         // recorded at least once
};

static void transfer_set_device(const Backend *backend) {
    CUDA_CHECK(cudaSetDevice(cuda_state(backend)->device));
}

// Portable: the memory is pinned for every device and context, whichever
// thread asks.
void *cuda_host_alloc(Backend *backend, size_t bytes) {
    transfer_set_device(backend);
    void *pointer = NULL;
    if (cudaHostAlloc(&pointer, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
        (void)cudaGetLastError();  // out of page-locked memory: the caller says what it wanted
        return NULL;
    }
    return pointer;
}

void cuda_host_free(Backend *backend, void *pointer) {
    if (!pointer) return;
    cuda_step_graphs_forget(cuda_state(backend));
    CUDA_CHECK(cudaFreeHost(pointer));
}

Transfer *cuda_transfer_create(Backend *backend, ErrorMessage *err) {
    transfer_set_device(backend);
    Transfer *transfer = calloc(1, sizeof *transfer);
    if (!transfer) {
        error_set(err, "out of host memory for a transfer");
        return NULL;
    }
    // Non-blocking: the copy stream does not wait for the legacy default stream.
    CUDA_CHECK(cudaStreamCreateWithFlags(&transfer->stream, cudaStreamNonBlocking));
    CUDA_CHECK(cudaEventCreateWithFlags(&transfer->landed, cudaEventDisableTiming));
    CUDA_CHECK(cudaEventCreateWithFlags(&transfer->consumed, cudaEventDisableTiming));
    return transfer;
}

void cuda_transfer_free(Backend *backend, Transfer *transfer) {
    if (!transfer) return;
    CUDA_CHECK(cudaStreamSynchronize(transfer->stream));
    CUDA_CHECK(cudaEventDestroy(transfer->landed));
    CUDA_CHECK(cudaEventDestroy(transfer->consumed));
    CUDA_CHECK(cudaStreamDestroy(transfer->stream));
    free(transfer);
}

void cuda_upload_async(Backend *backend, Transfer *transfer, void *device, const void *host,
                       size_t bytes) {
    if (!bytes || !cuda_queue_point()) return;
    CUDA_CHECK(cudaStreamWaitEvent(transfer->stream, transfer->consumed, 0));
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, transfer->stream));
    CUDA_CHECK(cudaEventRecord(transfer->landed, transfer->stream));
}

void cuda_transfer_device_wait(Backend *backend, Transfer *transfer) {
    if (cuda_queue_point())
        CUDA_CHECK(cudaStreamWaitEvent(cuda_state(backend)->stream, transfer->landed, 0));
}

// A record the host or another stream waits for, also when the stream is
// being captured: there cudaEventRecordExternal makes the record a node of
// the graph, so each replay records it again (a plain record would only
// order the capture). The driver refuses that flag outside a capture
// (cudaErrorIllegalState: first light of 2026-11-30,
// docs/gpu-runs/2026-11-30-2f31a0f-1.jsonl), so outside one it is a
// plain record.
void cuda_backend_record_for_waiters(void *event_pointer, void *stream_pointer) {
    cudaEvent_t event = event_pointer;
    cudaStream_t stream = stream_pointer;
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(stream, &status));
    if (status == cudaStreamCaptureStatusActive)
        CUDA_CHECK(cudaEventRecordWithFlags(event, stream, cudaEventRecordExternal));
    else
        CUDA_CHECK(cudaEventRecord(event, stream));
}

// As a fence (below): a captured step records it at each replay.
void cuda_transfer_consumed(Backend *backend, Transfer *transfer) {
    if (cuda_queue_point())
        cuda_backend_record_for_waiters(transfer->consumed, cuda_state(backend)->stream);
}

void cuda_transfer_host_wait(Backend *backend, Transfer *transfer) {
    cuda_wait_event(cuda_state(backend), transfer->landed);
}

// From pinned memory the copy is queued and the call returns at once
// (from pageable memory CUDA would wait: callers use host_alloc memory).
void cuda_upload_ordered(Backend *backend, void *device, const void *host, size_t bytes) {
    if (!bytes || !cuda_queue_point()) return;
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice,
                               cuda_state(backend)->stream));
}

struct Fence {
    cudaEvent_t event;  // recorded on the compute stream
};

Fence *cuda_fence_create(Backend *backend, ErrorMessage *err) {
    transfer_set_device(backend);
    Fence *fence = calloc(1, sizeof *fence);
    if (!fence) {
        error_set(err, "out of host memory for a fence");
        return NULL;
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&fence->event, cudaEventDisableTiming));
    return fence;
}

void cuda_fence_free(Backend *backend, Fence *fence) {
    if (!fence) return;
    CUDA_CHECK(cudaEventSynchronize(fence->event));
    CUDA_CHECK(cudaEventDestroy(fence->event));
    free(fence);
}

// Inside a stream capture each replay records the fence again and the host
// can wait for it (cuda_backend_record_for_waiters).
void cuda_fence_record(Backend *backend, Fence *fence) {
    if (cuda_queue_point())
        cuda_backend_record_for_waiters(fence->event, cuda_state(backend)->stream);
}

// cudaEventQuery: cudaSuccess once passed (or never recorded),
// cudaErrorNotReady before (not an error: cleared). While a step is
// captured every fence has passed: the host waited for the stream before
// the capture began, and a record inside it is a graph node that records
// nothing until a replay. Nor may the host ask then: the driver refuses
// cudaEventQuery during a capture and invalidates it (an H200's, first
// light run 5: docs/gpu-runs/2026-11-30-a7cdfb0-2.jsonl:10).
int cuda_fence_passed(Backend *backend, Fence *fence) {
    if (cuda_step_capturing) return 1;
    const cudaError_t passed = cudaEventQuery(fence->event);
    if (passed == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return 0;
    }
    CUDA_CHECK(passed);
    return 1;
}

void cuda_fence_wait(Backend *backend, Fence *fence) {
    if (cuda_step_capturing) return;  // passed (cuda_fence_passed)
    cuda_wait_event(cuda_state(backend), fence->event);
}

DeviceTimer *cuda_timer_create(Backend *backend, ErrorMessage *err) {
    transfer_set_device(backend);
    DeviceTimer *timer = calloc(1, sizeof *timer);
    if (!timer) {
        error_set(err, "out of host memory for a timer");
        return NULL;
    }
    CUDA_CHECK(cudaEventCreate(&timer->marks[0]));
    CUDA_CHECK(cudaEventCreate(&timer->marks[1]));
    return timer;
}

void cuda_timer_free(Backend *backend, DeviceTimer *timer) {
    if (!timer) return;
    CUDA_CHECK(cudaEventDestroy(timer->marks[0]));
    CUDA_CHECK(cudaEventDestroy(timer->marks[1]));
    free(timer);
}

void cuda_timer_mark(Backend *backend, DeviceTimer *timer, int end) {
    const int which = end ? 1 : 0;
    if (!cuda_queue_point()) return;
    CUDA_CHECK(cudaEventRecord(timer->marks[which], cuda_state(backend)->stream));
    timer->marked[which] = 1;
}

// cudaEventQuery: cudaSuccess once the device passed the end mark,
// cudaErrorNotReady before (not an error: cleared, -1).
double cuda_timer_seconds(Backend *backend, DeviceTimer *timer) {
    if (!timer->marked[0] || !timer->marked[1]) return -1.0;
    const cudaError_t passed = cudaEventQuery(timer->marks[1]);
    if (passed == cudaErrorNotReady) {
        (void)cudaGetLastError();
        return -1.0;
    }
    CUDA_CHECK(passed);
    float milliseconds = 0.0f;
    CUDA_CHECK(cudaEventElapsedTime(&milliseconds, timer->marks[0], timer->marks[1]));
    return milliseconds / 1e3;
}
