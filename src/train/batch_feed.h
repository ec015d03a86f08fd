// Batches to the device (docs/gpu.md "Data to the device"). The loader's
// batch slots are host memory from the backend (page-locked on the GPU:
// batch_feed_loader_memory); each batch is copied into backend memory on a
// transfer's copy stream one batch ahead, so the copy of batch N + 1 runs
// while step N computes, and the step converts and normalises it there
// (method_normalize_views). On CPU backends the copy is a memcpy and the
// waits are nothing: the same path, the same bytes.
//
// Per batch, in this order, which keeps every buffer safe:
//   batch_feed_prefetch: the host waits until the previous batch's copy has
//     read its slot, then gives that slot back to the loader (its workers
//     may refill it) -> loader_next (the data wait) -> the copies of the
//     views into `device`, queued behind the previous batch's readers
//     (batch_feed_consumed), so they overlap the rest of the previous step.
//   batch_feed_take: the compute stream waits for the copy (no host wait);
//     the batch, its views in `device`.
//   batch_feed_consumed: after the ops that read `device` are queued.
#ifndef LTC_TRAIN_BATCH_FEED_H
#define LTC_TRAIN_BATCH_FEED_H

#include <stddef.h>

#include "backend/backend.h"
#include "data/loader.h"

typedef struct BatchFeed {
    Backend *backend;
    Loader *loader;
    Transfer *transfer;
    uint8_t *device;          // backend memory: every view of one batch
    size_t device_bytes;
    const Batch *pending;     // fetched and its copy queued, not taken yet
    double pending_wait;      // its loader wait (the data_time of the step that takes it)
    double pending_queue;     // the host's time to queue its copy
    const Batch *in_flight;   // the last fetched batch: its slot may still be read by its copy
    Batch on_device;          // the taken batch, views in `device`
} BatchFeed;

// Sets the loader's slot allocator to the backend's host memory (before
// loader_create).
void batch_feed_loader_memory(LoaderConfig *config, Backend *backend);

// Room for batches of `batch_size` samples of `views`. 0, or -1 with err.
int batch_feed_init(BatchFeed *feed, Backend *backend, Loader *loader, const ViewSet *views,
                    int batch_size, ErrorMessage *err);
// Waits for the copies, gives the last batch back to the loader and frees
// the feed's memory. Before loader_destroy. Safe after a failed init.
void batch_feed_free(BatchFeed *feed);

// Fetches the next batch and queues its copy, unless one is pending.
// Returns 0, 1 when the loader has no more batches, -1 with err when it
// failed (the same failure shows again at the next take).
int batch_feed_prefetch(BatchFeed *feed, ErrorMessage *err);
// The pending batch (fetched first when none is), its views in backend
// memory and the compute stream waiting for them. *host: the same batch in
// the loader's slot, valid until the next prefetch (e.g. for a picture of
// the augmentations); *wait_seconds: the time spent waiting for the
// loader, *queue_seconds: the host's time to queue the copy. NULL when the
// loader has no more batches (err->text empty) or failed (err).
const Batch *batch_feed_take(BatchFeed *feed, const Batch **host, double *wait_seconds,
                             double *queue_seconds, ErrorMessage *err);
// The ops that read the taken batch's views are queued: the next copy may
// overwrite them once those ran.
void batch_feed_consumed(BatchFeed *feed);

#endif
