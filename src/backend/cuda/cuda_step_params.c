// The cuda backend's per-step parameter block (issue 32, docs/gpu.md "CUDA
// graphs"): the host scalars of a step that change from step to step (the
// optimizer updates' learning rate, weight decay and SGD's first-step flag,
// the EMA momentum, the softmax and Sinkhorn scales that carry DINO's and
// DINOv2's teacher temperature) reach their kernels through device memory,
// never as kernel arguments: a captured graph keeps a kernel's arguments as
// they were at capture, while it reads device memory, and the pinned host
// memory of a copy, when it runs.
//
// The block is page-locked host memory and device memory of the same
// layout, both at fixed addresses for the backend's life, in two halves. An
// op takes the next slots of the current half in call order (the same
// slots every step once cuda_step_params_begin marks the steps), writes its
// values there and queues the copy of just those slots on the compute
// stream ahead of its kernel, which reads them by pointer: the bits the
// kernel sees are those it was given. A half is written again only once the
// device has run the copies out of it (an event behind its last copy), so
// the host never waits for the step in flight.
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"

int cuda_step_params_init(CudaState *state) {
    CudaStepParams *block = &state->step_params;
    const size_t bytes = 2 * CUDA_STEP_PARAM_SLOTS * sizeof(float);
    cudaError_t status = cudaHostAlloc((void **)&block->host, bytes, cudaHostAllocPortable);
    if (status == cudaSuccess) status = cudaMalloc((void **)&block->device, bytes);
    for (int half = 0; half < 2 && status == cudaSuccess; half++)
        status = cudaEventCreateWithFlags(&block->copied[half], cudaEventDisableTiming);
    if (status == cudaSuccess) memset(block->host, 0, bytes);
    return status == cudaSuccess ? 0 : (int)status;
}

void cuda_step_params_free(CudaState *state) {
    CudaStepParams *block = &state->step_params;
    for (int half = 0; half < 2; half++)
        if (block->copied[half]) (void)cudaEventDestroy(block->copied[half]);
    if (block->device) (void)cudaFree(block->device);
    if (block->host) (void)cudaFreeHost(block->host);
    memset(block, 0, sizeof *block);
}

// The other half from its first slot, once the copies out of it have run
// (an event never recorded has passed).
static void next_half(CudaState *state) {
    CudaStepParams *block = &state->step_params;
    block->half ^= 1;
    block->used = 0;
    cuda_wait_event(state, block->copied[block->half]);
}

const float *cuda_step_params_put(CudaState *state, const float *values, int count) {
    CudaStepParams *block = &state->step_params;
    if (count < 1 || count > CUDA_STEP_PARAM_SLOTS)
        cuda_fatal("cuda backend", "cuda_step_params_put", "bad slot count", __FILE__, __LINE__,
                   state->device);
    if (block->used + count > CUDA_STEP_PARAM_SLOTS) next_half(state);
    const size_t at = (size_t)block->half * CUDA_STEP_PARAM_SLOTS + (size_t)block->used;
    block->used += count;
    memcpy(block->host + at, values, (size_t)count * sizeof(float));
    if (!cuda_queue_point()) return block->device + at;  // a replayed step: its graph copies
    CUDA_CHECK(cudaMemcpyAsync(block->device + at, block->host + at,
                               (size_t)count * sizeof(float), cudaMemcpyHostToDevice,
                               state->stream));
    // Inside a capture the host's writes are the replay's business (the
    // event would be a node of the graph, not a mark the host can wait on).
    enum cudaStreamCaptureStatus capture = cudaStreamCaptureStatusNone;
    CUDA_CHECK(cudaStreamIsCapturing(state->stream, &capture));
    if (capture == cudaStreamCaptureStatusNone)
        CUDA_CHECK(cudaEventRecord(block->copied[block->half], state->stream));
    return block->device + at;
}

void cuda_step_params_begin(Backend *backend) { next_half(cuda_state(backend)); }

float *cuda_step_params_host(Backend *backend, int *used) {
    CudaStepParams *block = &cuda_state(backend)->step_params;
    if (used) *used = block->used;
    return block->host + (size_t)block->half * CUDA_STEP_PARAM_SLOTS;
}
