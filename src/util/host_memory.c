// Pinned or aligned host buffers (see host_memory.h).
#include "util/host_memory.h"

#include <stdlib.h>
#include <string.h>

#ifdef LTC_WITH_CUDA
#include <cuda_runtime_api.h>
#endif

int host_buffer_alloc(HostBuffer *buffer, size_t size, int want_pinned) {
    memset(buffer, 0, sizeof *buffer);
    if (size == 0) size = 1;
#ifdef LTC_WITH_CUDA
    if (want_pinned) {
        void *data = NULL;
        if (cudaHostAlloc(&data, size, cudaHostAllocPortable) == cudaSuccess) {
            buffer->data = data;
            buffer->size = size;
            buffer->pinned = 1;
            return 0;
        }
        (void)cudaGetLastError();  // no device: clear the error, use plain memory
    }
#else
    (void)want_pinned;
#endif
    const size_t rounded = (size + 63) & ~(size_t)63;
    buffer->data = aligned_alloc(64, rounded);
    if (!buffer->data) return -1;
    buffer->size = size;
    return 0;
}

void host_buffer_free(HostBuffer *buffer) {
    if (!buffer->data) return;
#ifdef LTC_WITH_CUDA
    if (buffer->pinned) {
        cudaFreeHost(buffer->data);
        memset(buffer, 0, sizeof *buffer);
        return;
    }
#endif
    free(buffer->data);
    memset(buffer, 0, sizeof *buffer);
}
