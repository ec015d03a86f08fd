// Host buffers for batches: page-locked (pinned) through CUDA when the build
// has CUDA and a device is present, so host-to-device copies can run
// asynchronously; plain 64-byte aligned memory otherwise.
#ifndef LTC_UTIL_HOST_MEMORY_H
#define LTC_UTIL_HOST_MEMORY_H

#include <stddef.h>

typedef struct HostBuffer {
    void *data;
    size_t size;
    int pinned;  // 1 when page-locked by CUDA
} HostBuffer;

// want_pinned: try CUDA pinned memory first (falls back to aligned memory and
// says so in buffer->pinned). Returns -1 when out of memory.
int host_buffer_alloc(HostBuffer *buffer, size_t size, int want_pinned);
void host_buffer_free(HostBuffer *buffer);

#endif
