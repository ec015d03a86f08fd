// Batches to the device: pinned loader slots, copies one batch ahead (see
// batch_feed.h).
#include "train/batch_feed.h"

#include <string.h>

#include "util/cpu.h"

static void *feed_host_alloc(void *context, size_t bytes) {
    Backend *backend = context;
    return backend->op.host_alloc(backend, bytes);
}

static void feed_host_free(void *context, void *pointer) {
    Backend *backend = context;
    backend->op.host_free(backend, pointer);
}

void batch_feed_loader_memory(LoaderConfig *config, Backend *backend) {
    config->host_alloc = feed_host_alloc;
    config->host_free = feed_host_free;
    config->host_context = backend;
}

int batch_feed_init(BatchFeed *feed, Backend *backend, Loader *loader, const ViewSet *views,
                    int batch_size, ErrorMessage *err) {
    memset(feed, 0, sizeof *feed);
    feed->backend = backend;
    feed->loader = loader;
    for (int v = 0; v < views->count; v++)
        feed->device_bytes += (size_t)batch_size * views->views[v].size * views->views[v].size *
                              view_set_pixel_bytes(views);
    feed->device = backend->op.alloc(backend, feed->device_bytes);
    if (!feed->device)
        return error_set(err, "out of device memory for a batch of %d images (%zu MB)",
                         batch_size, feed->device_bytes >> 20);
    feed->transfer = backend->op.transfer_create(backend, err);
    return feed->transfer ? 0 : -1;
}

// The in-flight batch's slot back to the loader, once its copy has read it.
static void feed_release(BatchFeed *feed) {
    if (!feed->in_flight) return;
    feed->backend->op.transfer_host_wait(feed->backend, feed->transfer);
    loader_release(feed->loader, feed->in_flight);
    feed->in_flight = NULL;
}

void batch_feed_free(BatchFeed *feed) {
    Backend *backend = feed->backend;
    if (!backend) return;
    if (feed->transfer) {
        feed_release(feed);
        backend->op.transfer_free(backend, feed->transfer);
    }
    if (feed->device) backend->op.free(backend, feed->device);
    memset(feed, 0, sizeof *feed);
}

int batch_feed_prefetch(BatchFeed *feed, ErrorMessage *err) {
    if (feed->pending) return 0;
    feed_release(feed);
    double wait = 0;
    const Batch *batch = loader_next(feed->loader, &wait, err);
    if (!batch) return err->text[0] ? -1 : 1;
    if (batch_view_bytes(batch, batch->view_count) > feed->device_bytes) {
        loader_release(feed->loader, batch);
        return error_set(err, "a batch of %d images does not fit the feed's %zu bytes",
                         batch->size, feed->device_bytes);
    }
    const double start = time_now();
    Backend *backend = feed->backend;
    for (int v = 0; v < batch->view_count; v++) {
        const size_t offset = batch_view_bytes(batch, v), end = batch_view_bytes(batch, v + 1);
        backend->op.upload_async(backend, feed->transfer, feed->device + offset, batch->views[v],
                                 end - offset);
    }
    feed->pending = feed->in_flight = batch;
    feed->pending_wait = wait;
    feed->pending_queue = time_now() - start;
    return 0;
}

const Batch *batch_feed_take(BatchFeed *feed, const Batch **host, double *wait_seconds,
                             double *queue_seconds, ErrorMessage *err) {
    if (err) err->text[0] = '\0';
    if (!feed->pending && batch_feed_prefetch(feed, err)) return NULL;
    const Batch *batch = feed->pending;
    feed->pending = NULL;
    feed->backend->op.transfer_device_wait(feed->backend, feed->transfer);
    feed->on_device = *batch;
    for (int v = 0; v < batch->view_count; v++)
        feed->on_device.views[v] = feed->device + batch_view_bytes(batch, v);
    if (host) *host = batch;
    if (wait_seconds) *wait_seconds = feed->pending_wait;
    if (queue_seconds) *queue_seconds = feed->pending_queue;
    return &feed->on_device;
}

void batch_feed_consumed(BatchFeed *feed) {
    feed->backend->op.transfer_consumed(feed->backend, feed->transfer);
}
