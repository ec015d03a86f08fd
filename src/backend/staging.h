// Staging for the small inputs a step computes on the host and sends to the
// device (drop-path scales, DINOv2's masks, distillation's mixup
// permutation, RoPE tables): docs/gpu.md "Data to the device". A staging
// ring holds host_alloc buffers (page-locked on the GPU), each with a
// fence. A use takes the next buffer (staging_take), writes its inputs
// there and queues their copies (staging_upload: upload_ordered on the
// compute stream, then the buffer's fence recorded behind them), so the
// host never waits for the copy and the device reads the inputs in stream
// order.
//
// The reuse rule: a buffer is written again only once its fence has
// passed, i.e. once the device has run its copies. When the buffer next in
// turn has not passed yet, the ring grows by one buffer instead of making
// the host wait, so it settles at as many buffers as uses are in flight (a
// step's uses times the steps queued ahead); only at STAGING_MAX_BUFFERS
// does staging_take wait. On CPU backends every fence has passed: one
// buffer, and the copies are memcpys.
#ifndef LTC_BACKEND_STAGING_H
#define LTC_BACKEND_STAGING_H

#include <stddef.h>

#include "backend/backend.h"

enum { STAGING_MAX_BUFFERS = 32 };

typedef struct Staging {
    Backend *backend;
    size_t bytes;    // per buffer
    int count;       // buffers made
    int next;        // the buffer next in turn (the oldest use)
    int current;     // the buffer of the last staging_take; -1 before
    void *host[STAGING_MAX_BUFFERS];
    Fence *fence[STAGING_MAX_BUFFERS];
    int waits;       // staging_take calls that waited for a fence
} Staging;

// One buffer of `bytes` to start with. 0, or -1 with err (out of memory).
int staging_init(Staging *staging, Backend *backend, size_t bytes, ErrorMessage *err);
// Waits for the fences, frees the buffers. Safe after a failed init and twice.
void staging_free(Staging *staging);

// Host memory (the ring's `bytes`) that no pending copy reads: this use's
// inputs go there, then to staging_upload.
void *staging_take(Staging *staging);
// Queues the copy of bytes at host (inside the buffer of the last
// staging_take) into device memory on the compute stream and records that
// buffer's fence behind it. The host must not write the buffer after this
// (the next use takes another one).
void staging_upload(Staging *staging, void *device, const void *host, size_t bytes);

#endif
