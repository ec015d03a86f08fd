// The data loader: a persistent pool of worker threads that read, decode and
// augment images into a ring of batch slots ahead of the training loop.
//
// Work is handed out one sample at a time in batch order, so a slow image
// never holds up a whole batch's worth of work on one thread. Batches come
// out in order; each holds every view of every sample as uint8 RGB NHWC, or
// (ViewSet.float_pixels: the deep path) float NHWC of the views' channels. Slot
// buffers are allocated once (through the caller's allocator when it gives
// one: pinned memory for the GPU); nothing is allocated per batch.
//
// A file that cannot be read or decoded is skipped: one warning names it and
// the reason, it is counted once, and its place in the batch is filled by
// another image chosen deterministically from (seed, epoch, index), so
// batches keep their shape and contents do not depend on worker count.
// Each worker reads, decodes and augments in its own child process
// (data/decoder_process.h), which renders straight into the slots (one
// shared memory file, unless host_alloc gives the memory): a decoder
// library that crashes (or hangs) on a file makes that file a bad file
// like any other, and the run goes on.
//
// keep_last mode (embedding, evaluation) is different: every image exactly
// once, in scan order, no substitutes. A file that fails leaves its position
// zero-filled and flagged in Batch.failed, so callers can drop it.
#ifndef LTC_DATA_LOADER_H
#define LTC_DATA_LOADER_H

#include <stddef.h>
#include <stdint.h>

#include "augment/augment.h"
#include "data/scan.h"
#include "util/error.h"

typedef void (*LoaderWarnFn)(void *context, const char *message);

typedef struct LoaderConfig {
    const Dataset *dataset;
    ViewSet views;
    int batch_size;        // per rank
    int num_workers;       // >= 1 (loader_set_workers: from a --num-workers value)
    int prefetch_batches;  // ring slots; 0 -> 4
    uint64_t seed;
    int rank;
    int world_size;
    int shuffle;
    // 1: every image exactly once per epoch in scan order (over all ranks, in
    // rounds of one batch per rank: data/sampler.h); the last batch may be
    // smaller (Batch.size tells); bad files are flagged in Batch.failed
    // instead of substituted. Needs shuffle 0; total_batches 0 then means
    // one epoch.
    int keep_last;
    uint64_t start_batch;    // global batch to start from (resume)
    uint64_t total_batches;  // stop after this many batches in all; 0 = no end
    // Batches an epoch when fewer than the sampler's full ones (the first
    // of each epoch's order: Lightning's limit_train_batches); 0 = all.
    uint64_t epoch_batches;
    uint64_t max_pixels;     // decoder limit; 0 = default (Pillow's)
    // 1: EXIF orientation tags are not applied (--exif-orientation false;
    // decode/decode.h says which orientations hold regardless).
    int ignore_exif_orientation;
    // Batch slot memory: host_alloc(host_context, bytes) and host_free
    // (e.g. the backend's page-locked memory, so a slot can be copied to the
    // GPU while the next step runs: train/batch_feed.h; the decoder
    // processes' views are then copied in); NULL: one memory file shared
    // with the decoder processes, which render into it.
    void *(*host_alloc)(void *context, size_t bytes);
    void (*host_free)(void *context, void *pointer);
    void *host_context;
    // One file's decoding time limit in the worker's decoder process (data/decoder_process.h);
    // 0: its default. A file over it is skipped.
    double decode_timeout_seconds;
    LoaderWarnFn warn;       // called from worker threads, one line each; may be NULL
    void *warn_context;
} LoaderConfig;

typedef struct Batch {
    uint64_t index;           // global batch number (epoch * batches_per_epoch + batch_in_epoch)
    uint32_t epoch;
    uint64_t batch_in_epoch;
    int size;                 // batch_size, or fewer for the last batch in keep_last mode
    int view_count;
    int view_size[AUGMENT_MAX_VIEWS];
    int channels;             // of every view: 3 unless float_pixels
    int float_pixels;         // 0: uint8 samples, 1: float (ViewSet.float_pixels)
    size_t pixel_bytes;       // channels x (1 or 4)
    uint8_t *views[AUGMENT_MAX_VIEWS];  // each (size, view_size, view_size, channels) samples
    const uint32_t *sample_indices;     // (size) dataset index used at each position
    const uint8_t *failed;  // (size) 1 where the file could not be loaded (keep_last only;
                            // its pixels are zero), else 0
    // (view_count x batch size, view after view) where each view came from
    // in its image, or NULL (a batch made by hand); a failed position's is 0.
    const ViewGeometry *geometry;
} Batch;

// Bytes of the batch's first `views` views (views = view_count: all of
// them); in a slot the views lie one after another, so this is also where
// view `views` starts.
size_t batch_view_bytes(const Batch *batch, int views);

// Time the workers spent, summed over workers, and counts.
typedef struct LoaderStats {
    double read_seconds;
    double decode_seconds;
    double augment_seconds;
    uint64_t images;          // samples produced
    uint64_t skipped_files;   // distinct files that failed
    uint64_t replacements;    // batch positions filled by a substitute
    // Per format (ImageFormat): samples produced and the worker time they
    // took (read + decode + augment).
    uint64_t format_images[IMAGE_FORMAT_COUNT];
    double format_seconds[IMAGE_FORMAT_COUNT];
} LoaderStats;

typedef struct Loader Loader;

// num_workers and prefetch_batches for a --num-workers value: N >= 1
// workers with the default ring; 0, PyTorch's DataLoader that loads each
// batch in the main process when it is asked for: one worker and a ring of
// one batch, so the next batch is decoded only once the last one was given
// back and a step waits for all of its loading (on the GPU, while the step
// before computes, as PyTorch's does). Files still decode in the worker's
// child process: a decoder that crashes on one skips it.
void loader_set_workers(LoaderConfig *config, int num_workers);

Loader *loader_create(const LoaderConfig *config, ErrorMessage *err);
// Stops and joins every worker, frees everything. Safe at any moment.
void loader_destroy(Loader *loader);

size_t loader_batches_per_epoch(const Loader *loader);

// Blocks until the next batch is complete. The batch stays valid until
// loader_release(), which reopens its slot to the workers (so a copy that
// reads the slot must be complete before it); one batch is out at a time.
// Returns NULL when the loader hit a fatal error (message in err) or
// total_batches were delivered (err->text empty). wait_seconds, when not
// NULL, receives the time spent waiting: the data_time of this step.
const Batch *loader_next(Loader *loader, double *wait_seconds, ErrorMessage *err);
void loader_release(Loader *loader, const Batch *batch);

LoaderStats loader_stats(const Loader *loader);

// --input-depth auto: 1 when the first readable of the dataset's first 8
// images (scan order) stores more than 8 bits per sample (16-bit or float),
// else 0 (also when none of them can be read: the loader skips those).
int loader_first_image_is_deep(const Dataset *dataset, uint64_t max_pixels);

#endif
