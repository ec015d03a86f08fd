// The cuda backend's device memory: its alloc / free ops (backend.h),
// counted, and the workspace the plans share. The count (bytes live now
// and at most since the backend was made, with the workspace apart) goes to
// the paths line (cuda_paths.c), so that a GPU run can tell what the
// program allocated from what the process holds besides (CUDA's context,
// the libraries' kernels and handles): issue 32's memory targets compare
// processes. cudaFree takes no size, so each pointer's size is kept in a
// search tree by address (POSIX tsearch; allocations happen when models
// and plans are made, not per step).
#include <search.h>
#include <stdint.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

typedef struct Allocation {
    uintptr_t address;
    size_t bytes;
} Allocation;

static int by_address(const void *a, const void *b) {
    const uintptr_t x = ((const Allocation *)a)->address, y = ((const Allocation *)b)->address;
    return (x > y) - (x < y);
}

// 0, or -1 when out of host memory (nothing counted).
static int remember(CudaAllocations *table, void *pointer, size_t bytes) {
    Allocation *entry = malloc(sizeof *entry);
    if (!entry) return -1;
    *entry = (Allocation){(uintptr_t)pointer, bytes};
    if (!tsearch(entry, &table->tree, by_address)) {
        free(entry);
        return -1;
    }
    table->live += bytes;
    if (table->live > table->peak) table->peak = table->live;
    return 0;
}

static void forget(CudaAllocations *table, void *pointer) {
    const Allocation key = {(uintptr_t)pointer, 0};
    Allocation **found = tfind(&key, &table->tree, by_address);
    if (!found) return;
    Allocation *entry = *found;
    table->live -= entry->bytes;
    tdelete(&key, &table->tree, by_address);
    free(entry);
}

void *cuda_alloc(Backend *backend, size_t bytes) {
    CudaState *state = cuda_state(backend);
    CUDA_CHECK(cudaSetDevice(state->device));
    void *pointer = NULL;
    if (cudaMalloc(&pointer, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        return NULL;
    }
    if (remember(&state->allocations, pointer, bytes)) {  // out of host memory
        CUDA_CHECK(cudaFree(pointer));
        return NULL;
    }
    return pointer;
}

void cuda_free(Backend *backend, void *pointer) {
    if (!pointer) return;
    CudaState *state = cuda_state(backend);
    cuda_step_graphs_forget(state);
    forget(&state->allocations, pointer);
    CUDA_CHECK(cudaFree(pointer));
}

void cuda_allocations_free(CudaState *state) {
    tdestroy(state->allocations.tree, free);
    state->allocations = (CudaAllocations){0};
}

// Grows the backend's workspace to at least `bytes` (outside the step loop:
// plans are made when a model is built; cudaFree waits for queued work).
int cuda_reserve_workspace(CudaState *state, size_t bytes, ErrorMessage *err) {
    if (bytes <= state->workspace_bytes) return 0;
    if (state->workspace) CUDA_CHECK(cudaFree(state->workspace));
    state->workspace = NULL;
    state->workspace_bytes = 0;
    if (cudaMalloc(&state->workspace, bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        return error_set(err, "out of GPU memory for a %zu MB workspace", bytes >> 20);
    }
    state->workspace_bytes = bytes;
    return 0;
}

void cuda_backend_memory(const Backend *backend, size_t *live, size_t *peak, size_t *workspace) {
    const CudaState *state = cuda_state(backend);
    *live = state->allocations.live;
    *peak = state->allocations.peak;
    *workspace = state->workspace_bytes;
}

void cuda_memory_counts(const Backend *backend, size_t *allocated, size_t *peak) {
    size_t live = 0, most = 0, workspace = 0;
    cuda_backend_memory(backend, &live, &most, &workspace);
    *allocated = live + workspace;
    *peak = most + workspace;
}
