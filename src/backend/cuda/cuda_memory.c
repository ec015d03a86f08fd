// The cuda backend's device memory: its alloc / free ops (backend.h),
// counted, and the workspace the plans share. The count (bytes live now
// and at most since the backend was made, with the workspace apart) goes to
// the paths line (cuda_paths.c), so that a GPU run can tell what the
// program allocated from what the process holds besides (CUDA's context,
// the libraries' kernels and handles): issue 32's memory targets compare
// processes. cudaFree takes no size, so each pointer's size is kept in an
// open-addressing table keyed by address (linear probing; a freed slot
// becomes a tombstone until the table is rebuilt).
#include <stdint.h>
#include <stdlib.h>

#include "backend/cuda/cuda_internal.h"

enum { TOMBSTONE = 1 };  // no device pointer is 1

static size_t slot_of(uintptr_t key, size_t capacity) {
    return (size_t)((key >> 8) * 0x9E3779B97F4A7C15ull) & (capacity - 1);
}

// Rebuilt at twice the entries (at least 64 slots), tombstones dropped.
// -1 when out of host memory (the table as it was).
static int rebuild(CudaAllocations *table) {
    size_t capacity = 64;
    while (capacity < 4 * (table->count + 1)) capacity *= 2;
    uintptr_t *keys = calloc(capacity, sizeof *keys);
    size_t *sizes = calloc(capacity, sizeof *sizes);
    if (!keys || !sizes) {
        free(keys), free(sizes);
        return -1;
    }
    for (size_t i = 0; i < table->capacity; i++) {
        if (table->keys[i] <= TOMBSTONE) continue;
        size_t at = slot_of(table->keys[i], capacity);
        while (keys[at]) at = (at + 1) & (capacity - 1);
        keys[at] = table->keys[i], sizes[at] = table->sizes[i];
    }
    free(table->keys), free(table->sizes);
    table->keys = keys, table->sizes = sizes;
    table->capacity = capacity, table->used = table->count;
    return 0;
}

static int remember(CudaAllocations *table, void *pointer, size_t bytes) {
    if (2 * (table->used + 1) > table->capacity && rebuild(table)) return -1;
    const uintptr_t key = (uintptr_t)pointer;
    size_t at = slot_of(key, table->capacity);
    while (table->keys[at] > TOMBSTONE) at = (at + 1) & (table->capacity - 1);
    if (!table->keys[at]) table->used++;
    table->keys[at] = key, table->sizes[at] = bytes;
    table->count++;
    table->live += bytes;
    if (table->live > table->peak) table->peak = table->live;
    return 0;
}

static void forget(CudaAllocations *table, void *pointer) {
    if (!table->capacity) return;
    const uintptr_t key = (uintptr_t)pointer;
    for (size_t at = slot_of(key, table->capacity), probes = 0;
         table->keys[at] && probes < table->capacity;
         at = (at + 1) & (table->capacity - 1), probes++) {
        if (table->keys[at] != key) continue;
        table->live -= table->sizes[at];
        table->keys[at] = TOMBSTONE;
        table->count--;
        return;
    }
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
    free(state->allocations.keys), free(state->allocations.sizes);
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
