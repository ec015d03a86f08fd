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
// passed, i.e. once the device has run its copies. How a use finds its
// buffer depends on whether steps are marked (staging_step_begin):
// - Unmarked (no step marked on the backend yet: tests, a forward outside
//   training): a ring. When the buffer next in turn has not passed yet, the
//   ring grows by one buffer instead of making the host wait, so it settles
//   at as many buffers as uses are in flight; only at STAGING_MAX_BUFFERS
//   does staging_take wait.
// - Marked (the trainer marks every optimizer step): fixed sites, for a
//   step captured as a CUDA graph (docs/gpu.md "CUDA graphs"; a captured
//   copy keeps its source address and reads it when the graph runs). The
//   k-th use of a ring in a step is its site k and always gets buffer k, at
//   the same address every step; the host writes a step's inputs to the
//   same buffers in the same order. A site's buffer is rewritten once the
//   copy out of it of the step before has run: staging_take waits for
//   that site's fence when it has not passed (with the host one step
//   ahead, the device is then reaching the same place one step earlier,
//   so the device keeps a step queued). Not two buffers a site by step
//   parity: a graph captures one step's addresses, so its replays must
//   read the same ones. A site's first use makes its buffer, so a step is
//   run before one is captured (no allocation inside a capture), and the
//   host waits for the device before capturing (no wait inside a capture);
//   at replays the fences are recorded by the graph (fence_record is an
//   external event record node on the GPU) and the host fills the sites
//   through staging_take again, each waiting for the copy of the replay
//   before. Past STAGING_MAX_BUFFERS uses a step, sites share buffers
//   (counted in `shared`; not capturable).
// On CPU backends every fence has passed: one buffer a ring (unmarked) or
// a site, and the copies are memcpys.
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
    long step;       // the backend's step mark at the last staging_take (marked)
    int site;        // uses of this ring since that step began (marked)
    int shared;      // uses past the cap that shared a site's buffer (marked)
} Staging;

// One buffer of `bytes` to start with. 0, or -1 with err (out of memory).
int staging_init(Staging *staging, Backend *backend, size_t bytes, ErrorMessage *err);
// Waits for the fences, frees the buffers. Safe after a failed init and twice.
void staging_free(Staging *staging);

// Marks the start of a step on the backend: every ring made on it numbers
// its uses as sites from 0 again (at its next staging_take).
void staging_step_begin(Backend *backend);

// Host memory (the ring's `bytes`) that no pending copy reads: this use's
// inputs go there, then to staging_upload.
void *staging_take(Staging *staging);
// Queues the copy of bytes at host (inside the buffer of the last
// staging_take) into device memory on the compute stream and records that
// buffer's fence behind it. The host must not write the buffer after this
// (the next use takes another one).
void staging_upload(Staging *staging, void *device, const void *host, size_t bytes);

#endif
