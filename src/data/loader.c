// Worker pool and batch ring (see loader.h).
//
// One mutex guards the hand-out position and the ring; workers take one
// sample position at a time and hand it to their decoder process without
// the lock, keeping up to DECODER_PROCESS_PIPELINE positions in flight (the
// child finds the next file queued when it is done with one), then mark
// each done as its answer comes. A batch slot is reopened only after the consumer released
// the batch that used it, so workers run at most `slot_count` batches ahead.
#include "data/loader.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "data/decoder_process.h"
#include "data/decoder_protocol.h"
#include "data/image_renderer.h"
#include "data/sampler.h"
#include "decode/decode.h"
#include "util/cpu.h"
// Substitutes tried for one position before the run is declared broken.
#define LOADER_MAX_ATTEMPTS 64
#define LOADER_DEFAULT_SLOTS 4

typedef struct BatchSlot {
    Batch batch;
    uint8_t *pixels;       // every view of every sample (LoaderConfig.host_alloc)
    uint32_t *requested;   // (batch_size) indices from the sampler
    uint32_t *used;        // (batch_size) indices actually decoded
    uint8_t *failed;       // (batch_size) keep_last: 1 where the file failed
    ViewGeometry *geometry;  // (views x batch_size) Batch.geometry
    int done;              // positions finished
} BatchSlot;

typedef struct Worker {
    Loader *loader;
    pthread_t thread;
    int thread_started;
    DecoderProcess *decoder;  // reads, decodes and augments in a child process
    _Atomic uint64_t read_ns, decode_ns, augment_ns, images;
    _Atomic uint64_t format_ns[IMAGE_FORMAT_COUNT], format_images[IMAGE_FORMAT_COUNT];
} Worker;

struct Loader {
    LoaderConfig config;
    Sampler sampler;
    int slot_count;
    BatchSlot *slots;
    int worker_count;
    Worker *workers;

    pthread_mutex_t mutex;
    pthread_cond_t slot_free;    // workers wait here for the ring to advance
    pthread_cond_t batch_ready;  // the consumer waits here
    uint64_t end_batch;          // UINT64_MAX when endless
    uint64_t task_batch;         // batch whose positions are being handed out
    int task_position;
    uint64_t next_consume;       // batch the consumer takes (or holds) next
    int stop;
    int failed;
    ErrorMessage failure;

    _Atomic uint64_t *bad_files;  // bitmap of files known to fail
    // Bitmap of files decoded once whole: the first read of a file in a run
    // checks all of it (DecodeRequest.whole_file), later reads only the crop.
    _Atomic uint64_t *checked_files;
    _Atomic uint64_t skipped_files;
    _Atomic uint64_t replacements;
    // Without the caller's allocator, the slots lie in one memory file that
    // the decoder processes map too (DecoderSlots): they render into it.
    DecoderSlots shared;
    uint8_t *shared_pixels;  // slot_count x shared.bytes
};

// Returns 1 when this call marked the file bad (first failure).
static int loader_mark_bad(Loader *loader, uint32_t index) {
    const uint64_t bit = (uint64_t)1 << (index % 64);
    const uint64_t before = atomic_fetch_or(&loader->bad_files[index / 64], bit);
    return (before & bit) == 0;
}

static int bitmap_get(_Atomic uint64_t *bitmap, uint32_t index) {
    return (atomic_load(&bitmap[index / 64]) >> (index % 64)) & 1;
}

static int loader_is_bad(const Loader *loader, uint32_t index) {
    return bitmap_get(loader->bad_files, index);
}

// One batch position a worker fills: the file it tries now (the sampler's,
// or a substitute for a bad one) and the draws of substitutes so far.
typedef struct WorkerTask {
    BatchSlot *slot;
    int position;
    uint32_t index;
    int attempt;
    int whole_file;
    Rng substitutes;
    double submitted;  // when its current file was handed to the decoder process
} WorkerTask;

// What became of a task: handed to the decoder process (again, for a
// substitute: behind the others), finished (filled, or flagged in
// keep_last mode), or the run cannot go on.
enum { TASK_FATAL = -1, TASK_FINISHED = 0, TASK_QUEUED = 1 };

// The positions a worker has in flight to its decoder process, in the
// order it answers them (a ring of DECODER_PROCESS_PIPELINE).
typedef struct WorkerQueue {
    WorkerTask tasks[DECODER_PROCESS_PIPELINE];
    int first, count;
    double last_answer;  // when the previous answer came (the child's clock for the next)
} WorkerQueue;

// Counts a file's first failure and warns about it once.
static void loader_report_bad(Loader *loader, uint32_t index, const ErrorMessage *reason) {
    const LoaderConfig *config = &loader->config;
    if (!loader_mark_bad(loader, index)) return;
    atomic_fetch_add(&loader->skipped_files, 1);
    if (config->warn) {
        char path[4200], line[sizeof reason->text + sizeof path + 16];
        // The path as it was opened (never "/folder/x" for several folders).
        if (dataset_full_path(config->dataset, index, path, sizeof path) != 0)
            snprintf(path, sizeof path, "%s", dataset_path(config->dataset, index));
        snprintf(line, sizeof line, "skipping '%s': %s", path, reason->text);
        config->warn(config->warn_context, line);
    }
}

// keep_last mode: a bad file leaves zero pixels and a flag.
static void task_flag(WorkerTask *task) {
    BatchSlot *slot = task->slot;
    slot->used[task->position] = task->index;
    slot->failed[task->position] = 1;
    for (int v = 0; v < slot->batch.view_count; v++) {
        const size_t bytes = (size_t)slot->batch.view_size[v] * (size_t)slot->batch.view_size[v] *
                             slot->batch.pixel_bytes;
        memset(slot->batch.views[v] + (size_t)task->position * bytes, 0, bytes);
        slot->geometry[(size_t)v * (size_t)slot->batch.size + task->position] =
            (ViewGeometry){{0, 0, 0, 0}, 0, 0, 0};
    }
}

static int task_submit(Worker *worker, WorkerTask *task, ErrorMessage *err);

// The task's file failed (reason): counted and named once, then the next
// substitute (keep_last: the position flagged). As task_submit.
static int task_failed(Worker *worker, WorkerTask *task, const ErrorMessage *reason,
                       ErrorMessage *err) {
    Loader *loader = worker->loader;
    loader_report_bad(loader, task->index, reason);
    if (loader->config.keep_last) {
        task_flag(task);
        return TASK_FINISHED;
    }
    task->attempt++;
    task->index = rng_below(&task->substitutes, (uint32_t)loader->config.dataset->count);
    return task_submit(worker, task, err);
}

// Hands the task's file to the worker's decoder process, after the
// substitutes for files known to be bad (deterministically: the draws of
// the task's own stream, one per attempt). TASK_FINISHED: without a file
// (keep_last: flagged); TASK_FATAL (err): no decoder process can run, or no
// substitute was readable.
static int task_submit(Worker *worker, WorkerTask *task, ErrorMessage *err) {
    Loader *loader = worker->loader;
    const LoaderConfig *config = &loader->config;
    const uint32_t dataset_size = (uint32_t)config->dataset->count;
    for (;;) {
        if (config->keep_last && loader_is_bad(loader, task->index)) {
            task_flag(task);
            return TASK_FINISHED;
        }
        if (task->attempt >= LOADER_MAX_ATTEMPTS) {
            error_set(err,
                             "no readable image found for a batch position after %d attempts "
                             "(%llu of %u files failed so far)",
                             LOADER_MAX_ATTEMPTS,
                             (unsigned long long)atomic_load(&loader->skipped_files),
                             dataset_size);
            return TASK_FATAL;
        }
        if (!loader_is_bad(loader, task->index)) break;
        task->attempt++;
        task->index = rng_below(&task->substitutes, dataset_size);
    }
    char path[4096];
    ErrorMessage reason = {{0}};
    int status = DECODER_PROCESS_BAD_FILE;
    error_set(&reason, "path too long");
    // The first read of a file in a run decodes all of it (DecodeRequest.whole_file).
    task->whole_file = !bitmap_get(loader->checked_files, task->index);
    // view_key keys the view randomness: the dataset index, offset for
    // substitutes so that a substitute differs from the same image elsewhere.
    const uint64_t view_key = config->keep_last
                                  ? task->index
                                  : task->index | ((uint64_t)task->attempt << 32);
    task->submitted = time_now();
    if (dataset_full_path(config->dataset, task->index, path, sizeof path) == 0)
        status = decoder_process_submit_render(
            worker->decoder, path, task->index, task->slot->batch.epoch, view_key,
            task->whole_file, (int)(task->slot - loader->slots), task->position, &reason);
    if (status == 0) return TASK_QUEUED;
    if (status == DECODER_PROCESS_BROKEN) {
        *err = reason;
        return TASK_FATAL;
    }
    return task_failed(worker, task, &reason, err);
}

// The decoder process's answer for the oldest task (the child answers in
// order), as task_submit's results: TASK_FINISHED when the position is
// filled (the views rendered outside the shared slots copied into it),
// TASK_QUEUED when a substitute went to the decoder process instead.
// since: when the child could start on it.
static int task_collect(Worker *worker, WorkerTask *task, double since, ErrorMessage *err) {
    Loader *loader = worker->loader;
    const LoaderConfig *config = &loader->config;
    BatchSlot *slot = task->slot;
    DecoderRendered rendered;
    ErrorMessage reason = {{0}};
    const int status = decoder_process_collect_render(worker->decoder, &rendered, &reason);
    if (status == DECODER_PROCESS_BROKEN) {
        *err = reason;
        return TASK_FATAL;
    }
    if (status != 0) return task_failed(worker, task, &reason, err);
    if (task->whole_file)
        atomic_fetch_or(&loader->checked_files[task->index / 64],
                        (uint64_t)1 << (task->index % 64));
    for (int v = 0; rendered.views && v < slot->batch.view_count; v++) {
        const size_t size = (size_t)slot->batch.view_size[v];
        const size_t bytes = size * size * slot->batch.pixel_bytes;
        memcpy(slot->batch.views[v] + (size_t)task->position * bytes,
               rendered.views + decoder_view_offset(&config->views, v), bytes);
    }
    for (int v = 0; v < slot->batch.view_count; v++)
        slot->geometry[(size_t)v * (size_t)slot->batch.size + task->position] = rendered.geometry[v];
    slot->used[task->position] = task->index;
    if (task->attempt > 0) atomic_fetch_add(&loader->replacements, 1);
    // Reading and augmenting as the child timed them; decoding is the rest
    // of the time this answer took, from the request or the previous answer
    // (whichever came later: the child works through its queue), including
    // the trip to the child and a copy out of its views buffer.
    const double took = time_now() - since;
    const double read = rendered.read_seconds, augment = rendered.render_seconds;
    const double decode = took > read + augment ? took - read - augment : 0.0;
    atomic_fetch_add(&worker->read_ns, (uint64_t)(read * 1e9));
    atomic_fetch_add(&worker->decode_ns, (uint64_t)(decode * 1e9));
    atomic_fetch_add(&worker->augment_ns, (uint64_t)(augment * 1e9));
    atomic_fetch_add(&worker->images, 1);
    atomic_fetch_add(&worker->format_ns[rendered.format], (uint64_t)(took * 1e9));
    atomic_fetch_add(&worker->format_images[rendered.format], 1);
    return TASK_FINISHED;
}

static void loader_open_slot(Loader *loader, BatchSlot *slot, uint64_t global_batch) {
    const size_t per_epoch = loader->sampler.batches_per_epoch;
    slot->batch.index = global_batch;
    slot->batch.epoch = (uint32_t)(global_batch / per_epoch);
    slot->batch.batch_in_epoch = global_batch % per_epoch;
    slot->done = 0;
    slot->batch.size = sampler_batch_size(&loader->sampler, slot->batch.batch_in_epoch);
    memset(slot->failed, 0, (size_t)loader->config.batch_size);
    sampler_batch(&loader->sampler, slot->batch.epoch, slot->batch.batch_in_epoch,
                  slot->requested);
}

static void loader_fail(Loader *loader, const ErrorMessage *err) {
    if (!loader->failed) {
        loader->failed = 1;
        loader->failure = *err;
    }
    loader->stop = 1;
    pthread_cond_broadcast(&loader->slot_free);
    pthread_cond_broadcast(&loader->batch_ready);
}

// A position finished: the batch is ready when it was the last. Under the mutex.
static void loader_position_done(Loader *loader, BatchSlot *slot) {
    if (++slot->done == slot->batch.size) pthread_cond_broadcast(&loader->batch_ready);
}

// Takes the next batch position (opening its slot) as a task. Under the
// mutex, with a free slot.
static WorkerTask loader_take_position(Loader *loader) {
    BatchSlot *slot = &loader->slots[loader->task_batch % (uint64_t)loader->slot_count];
    if (loader->task_position == 0) loader_open_slot(loader, slot, loader->task_batch);
    const int position = loader->task_position++;
    if (loader->task_position == slot->batch.size) {
        loader->task_batch++;
        loader->task_position = 0;
    }
    const uint32_t index = slot->requested[position];
    return (WorkerTask){.slot = slot, .position = position, .index = index,
                        .substitutes = rng_make(loader->config.seed, slot->batch.epoch, index,
                                                RNG_STREAM_REPLACE)};
}

// What a task's submit or answer (status) leaves: the task at the end of
// the queue (queued), its position done (finished), or the loader failed
// (-1). Under the mutex.
static int worker_settle(Loader *loader, WorkerQueue *queue, const WorkerTask *task, int status,
                         const ErrorMessage *err) {
    if (status == TASK_FATAL) {
        loader_fail(loader, err);
        return -1;
    }
    if (status == TASK_QUEUED)
        queue->tasks[(queue->first + queue->count++) % DECODER_PROCESS_PIPELINE] = *task;
    else
        loader_position_done(loader, task->slot);
    return 0;
}

// A worker keeps up to DECODER_PROCESS_PIPELINE positions in flight to its
// decoder process, so that the child finds the next file queued when it is
// done with one; it waits for the ring to advance only with none in flight.
static void *worker_main(void *arg) {
    Worker *worker = arg;
    Loader *loader = worker->loader;
    WorkerQueue queue = {.first = 0};
    ErrorMessage err = {{0}};
    pthread_mutex_lock(&loader->mutex);
    while (!loader->stop) {
        const int more = loader->task_batch < loader->end_batch;
        if (more && queue.count < DECODER_PROCESS_PIPELINE) {
            if (loader->task_batch - loader->next_consume < (uint64_t)loader->slot_count) {
                WorkerTask task = loader_take_position(loader);
                pthread_mutex_unlock(&loader->mutex);
                const int status = task_submit(worker, &task, &err);
                pthread_mutex_lock(&loader->mutex);
                if (worker_settle(loader, &queue, &task, status, &err) != 0) break;
                continue;
            }
            if (queue.count == 0) {
                pthread_cond_wait(&loader->slot_free, &loader->mutex);
                continue;
            }
        }
        if (queue.count == 0) break;  // all handed out and finished
        WorkerTask task = queue.tasks[queue.first];
        queue.first = (queue.first + 1) % DECODER_PROCESS_PIPELINE;
        queue.count--;
        pthread_mutex_unlock(&loader->mutex);
        const double since = task.submitted > queue.last_answer ? task.submitted
                                                                : queue.last_answer;
        const int status = task_collect(worker, &task, since, &err);
        queue.last_answer = time_now();
        pthread_mutex_lock(&loader->mutex);
        if (worker_settle(loader, &queue, &task, status, &err) != 0) break;
    }
    pthread_mutex_unlock(&loader->mutex);
    return NULL;
}

static int loader_validate(const LoaderConfig *config, ErrorMessage *err) {
    if (!config->dataset || config->dataset->count == 0)
        return error_set(err, "the loader needs a non-empty dataset");
    if (view_set_validate(&config->views, err) != 0) return -1;
    if (config->num_workers < 1) return error_set(err, "need at least one worker");
    if (config->prefetch_batches < 0) return error_set(err, "prefetch must be >= 0");
    if (config->keep_last && config->shuffle)
        return error_set(err, "keep_last needs shuffle off");
    return 0;
}

// The slots, in the caller's memory (config->host_alloc: the backend's
// page-locked memory, which cannot be shared), else in one memory file the
// decoder processes render into (Loader.shared), each slot page-aligned.
static int loader_slot_memory(Loader *loader, size_t slot_bytes, ErrorMessage *err) {
    const LoaderConfig *config = &loader->config;
    for (int s = 0; s < loader->slot_count && config->host_alloc; s++) {
        loader->slots[s].pixels = config->host_alloc(config->host_context, slot_bytes);
        if (!loader->slots[s].pixels)
            return error_set(err, "out of page-locked host memory for %d batch slots of %zu MB",
                             loader->slot_count, slot_bytes >> 20);
    }
    if (config->host_alloc) return 0;
    const size_t stride = (slot_bytes + 4095) & ~(size_t)4095, total = stride * loader->slot_count;
    loader->shared = (DecoderSlots){.fd = memfd_create("ltc-batches", MFD_CLOEXEC | MFD_ALLOW_SEALING),
                                    .count = loader->slot_count,
                                    .batch_size = config->batch_size,
                                    .bytes = stride};
    void *map = MAP_FAILED;
    if (loader->shared.fd >= 0 && ftruncate(loader->shared.fd, (off_t)total) == 0 &&
        fcntl(loader->shared.fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW) == 0)
        // Populated now, as the decoder processes' mappings are
        // (decoder_child.c): the pages are touched in the first batches anyway.
        map = mmap(NULL, total, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE,
                   loader->shared.fd, 0);
    if (map == MAP_FAILED)
        return error_set(err, "out of shared memory for %d batch slots of %zu MB: %s",
                         loader->slot_count, slot_bytes >> 20, strerror(errno));
    loader->shared_pixels = map;
    for (int s = 0; s < loader->slot_count; s++)
        loader->slots[s].pixels = loader->shared_pixels + (size_t)s * stride;
    return 0;
}

static void loader_free_slot_memory(Loader *loader) {
    const LoaderConfig *config = &loader->config;
    for (int s = 0; loader->slots && s < loader->slot_count && config->host_alloc; s++)
        if (loader->slots[s].pixels) config->host_free(config->host_context, loader->slots[s].pixels);
    if (loader->shared_pixels)
        munmap(loader->shared_pixels, loader->shared.bytes * (size_t)loader->slot_count);
    if (loader->shared.fd >= 0) close(loader->shared.fd);
}

static int loader_allocate_slots(Loader *loader, ErrorMessage *err) {
    const LoaderConfig *config = &loader->config;
    const size_t batch = (size_t)config->batch_size;
    const size_t pixel_bytes = view_set_pixel_bytes(&config->views);
    size_t sample_bytes = 0;
    for (int v = 0; v < config->views.count; v++) {
        const size_t size = (size_t)config->views.views[v].size;
        sample_bytes += size * size * pixel_bytes;
    }
    loader->slots = calloc((size_t)loader->slot_count, sizeof *loader->slots);
    if (!loader->slots) return error_set(err, "out of memory for the batch ring");
    if (loader_slot_memory(loader, batch * sample_bytes, err) != 0) return -1;
    for (int s = 0; s < loader->slot_count; s++) {
        BatchSlot *slot = &loader->slots[s];
        slot->requested = calloc(batch, sizeof *slot->requested);
        slot->used = calloc(batch, sizeof *slot->used);
        slot->failed = calloc(batch, sizeof *slot->failed);
        slot->geometry = calloc(batch * (size_t)config->views.count, sizeof *slot->geometry);
        if (!slot->requested || !slot->used || !slot->failed || !slot->geometry)
            return error_set(err, "out of memory");
        uint8_t *cursor = slot->pixels;
        slot->batch.size = config->batch_size;
        slot->batch.view_count = config->views.count;
        slot->batch.channels = view_set_channels_out(&config->views);
        slot->batch.float_pixels = config->views.float_pixels;
        slot->batch.pixel_bytes = pixel_bytes;
        slot->batch.sample_indices = slot->used;
        slot->batch.failed = slot->failed;
        slot->batch.geometry = slot->geometry;
        slot->batch.index = UINT64_MAX;  // never matches a real batch until opened
        for (int v = 0; v < config->views.count; v++) {
            const int size = config->views.views[v].size;
            slot->batch.view_size[v] = size;
            slot->batch.views[v] = cursor;
            cursor += batch * (size_t)size * (size_t)size * pixel_bytes;
        }
    }
    return 0;
}

static int loader_start_workers(Loader *loader, ErrorMessage *err) {
    loader->workers = calloc((size_t)loader->worker_count, sizeof *loader->workers);
    if (!loader->workers) return error_set(err, "out of memory for workers");
    for (int w = 0; w < loader->worker_count; w++) {
        Worker *worker = &loader->workers[w];
        worker->loader = loader;
        const ViewSet *views = &loader->config.views;
        const DecoderProcessConfig decoder = {
            .max_pixels = loader->config.max_pixels,
            .ignore_exif_orientation = loader->config.ignore_exif_orientation,
            // the probe refuses channels it cannot read
            .channels = views->float_pixels ? view_input_channels(&views->views[0]) : 0,
            .views = views,
            .seed = loader->config.seed,
            .slots = loader->shared_pixels ? &loader->shared : NULL,
            .timeout_seconds = loader->config.decode_timeout_seconds,
        };
        worker->decoder = decoder_process_create(&decoder, err);
        if (!worker->decoder) return -1;
    }
    for (int w = 0; w < loader->worker_count; w++) {
        Worker *worker = &loader->workers[w];
        if (pthread_create(&worker->thread, NULL, worker_main, worker) != 0)
            return error_set(err, "cannot start data worker %d of %d", w + 1,
                             loader->worker_count);
        worker->thread_started = 1;
    }
    return 0;
}

Loader *loader_create(const LoaderConfig *config, ErrorMessage *err) {
    if (loader_validate(config, err) != 0) return NULL;
    Loader *loader = calloc(1, sizeof *loader);
    if (!loader) {
        error_set(err, "out of memory");
        return NULL;
    }
    loader->config = *config;
    if (loader->config.world_size < 1) loader->config.world_size = 1;
    loader->worker_count = config->num_workers;
    loader->slot_count = config->prefetch_batches ? config->prefetch_batches : LOADER_DEFAULT_SLOTS;
    loader->shared.fd = -1;
    if (config->views.float_pixels && image_renderer_check_unit_range(&config->views, err) != 0) {
        free(loader);
        return NULL;
    }
    pthread_mutex_init(&loader->mutex, NULL);
    pthread_cond_init(&loader->slot_free, NULL);
    pthread_cond_init(&loader->batch_ready, NULL);
    loader->task_batch = config->start_batch;
    loader->next_consume = config->start_batch;
    loader->end_batch = config->total_batches ? config->start_batch + config->total_batches
                                              : UINT64_MAX;
    const size_t words = (config->dataset->count + 63) / 64;
    loader->bad_files = calloc(words, sizeof *loader->bad_files);
    loader->checked_files = calloc(words, sizeof *loader->checked_files);
    if (!loader->bad_files || !loader->checked_files) {
        error_set(err, "out of memory");
        loader_destroy(loader);
        return NULL;
    }
    const int sampler_status =
        config->keep_last
            ? sampler_init_keep_last(&loader->sampler, config->dataset->count, config->batch_size,
                                     loader->config.rank, loader->config.world_size, err)
            : sampler_init(&loader->sampler, config->dataset->count, config->batch_size,
                           loader->config.rank, loader->config.world_size, config->seed,
                           config->shuffle, err);
    if (sampler_status != 0) {
        loader_destroy(loader);
        return NULL;
    }
    if (!config->keep_last && config->epoch_batches &&
        config->epoch_batches < loader->sampler.batches_per_epoch)
        loader->sampler.batches_per_epoch = (size_t)config->epoch_batches;
    if (config->keep_last && config->total_batches == 0)  // one epoch
        loader->end_batch = config->start_batch + loader->sampler.batches_per_epoch;
    if (loader_allocate_slots(loader, err) != 0 || loader_start_workers(loader, err) != 0) {
        loader_destroy(loader);
        return NULL;
    }
    return loader;
}

void loader_destroy(Loader *loader) {
    if (!loader) return;
    pthread_mutex_lock(&loader->mutex);
    loader->stop = 1;
    pthread_cond_broadcast(&loader->slot_free);
    pthread_cond_broadcast(&loader->batch_ready);
    pthread_mutex_unlock(&loader->mutex);
    for (int w = 0; loader->workers && w < loader->worker_count; w++) {
        Worker *worker = &loader->workers[w];
        if (worker->thread_started) pthread_join(worker->thread, NULL);
        decoder_process_destroy(worker->decoder);
    }
    free(loader->workers);
    loader_free_slot_memory(loader);
    for (int s = 0; loader->slots && s < loader->slot_count; s++) {
        free(loader->slots[s].requested);
        free(loader->slots[s].used);
        free(loader->slots[s].failed);
        free(loader->slots[s].geometry);
    }
    free(loader->slots);
    sampler_free(&loader->sampler);
    free(loader->bad_files);
    free(loader->checked_files);
    pthread_cond_destroy(&loader->slot_free);
    pthread_cond_destroy(&loader->batch_ready);
    pthread_mutex_destroy(&loader->mutex);
    free(loader);
}

void loader_set_workers(LoaderConfig *config, int num_workers) {
    config->num_workers = num_workers > 0 ? num_workers : 1;
    config->prefetch_batches = num_workers > 0 ? 0 : 1;
}

size_t loader_batches_per_epoch(const Loader *loader) {
    return loader->sampler.batches_per_epoch;
}

const Batch *loader_next(Loader *loader, double *wait_seconds, ErrorMessage *err) {
    if (err) err->text[0] = '\0';
    const double start = time_now();
    pthread_mutex_lock(&loader->mutex);
    const uint64_t wanted = loader->next_consume;
    BatchSlot *slot = &loader->slots[wanted % (uint64_t)loader->slot_count];
    const Batch *result = NULL;
    if (wanted < loader->end_batch) {
        while (!loader->failed && !loader->stop &&
               !(slot->batch.index == wanted && slot->done == slot->batch.size))
            pthread_cond_wait(&loader->batch_ready, &loader->mutex);
        if (loader->failed) {
            if (err) *err = loader->failure;
        } else if (!loader->stop) {
            result = &slot->batch;
        }
    }
    pthread_mutex_unlock(&loader->mutex);
    if (wait_seconds) *wait_seconds = time_now() - start;
    return result;
}

void loader_release(Loader *loader, const Batch *batch) {
    pthread_mutex_lock(&loader->mutex);
    if (batch && batch->index == loader->next_consume) {
        loader->next_consume++;
        pthread_cond_broadcast(&loader->slot_free);
    }
    pthread_mutex_unlock(&loader->mutex);
}

size_t batch_view_bytes(const Batch *batch, int views) {
    size_t bytes = 0;
    for (int v = 0; v < views; v++)
        bytes += (size_t)batch->size * batch->view_size[v] * batch->view_size[v] *
                 batch->pixel_bytes;
    return bytes;
}

LoaderStats loader_stats(const Loader *loader) {
    LoaderStats stats = {0};
    for (int w = 0; w < loader->worker_count; w++) {
        Worker *worker = &loader->workers[w];
        stats.read_seconds += 1e-9 * (double)atomic_load(&worker->read_ns);
        stats.decode_seconds += 1e-9 * (double)atomic_load(&worker->decode_ns);
        stats.augment_seconds += 1e-9 * (double)atomic_load(&worker->augment_ns);
        stats.images += atomic_load(&worker->images);
        for (int f = 0; f < IMAGE_FORMAT_COUNT; f++) {
            stats.format_seconds[f] += 1e-9 * (double)atomic_load(&worker->format_ns[f]);
            stats.format_images[f] += atomic_load(&worker->format_images[f]);
        }
    }
    stats.skipped_files = atomic_load(&loader->skipped_files);
    stats.replacements = atomic_load(&loader->replacements);
    return stats;
}

int loader_first_image_is_deep(const Dataset *dataset, uint64_t max_pixels) {
    ErrorMessage err = {{0}};
    const DecoderProcessConfig config = {.max_pixels = max_pixels, .channels = DECODE_ANY_CHANNELS};
    DecoderProcess *decoder = decoder_process_create(&config, &err);
    int deep = 0;
    for (size_t i = 0; decoder && i < dataset->count && i < 8; i++) {
        char path[4096];
        const DecodeRequest whole = {.region = {0, 0, INT32_MAX, INT32_MAX}, .native = 1};
        DecoderResult result;
        if (dataset_full_path(dataset, (uint32_t)i, path, sizeof path)) continue;
        const int status = decoder_process_decode(decoder, path, &whole, &result, &err);
        if (status == DECODER_PROCESS_BROKEN) break;  // the loader will say why
        if (status != 0) continue;
        deep = result.decoded.samples.type != SAMPLE_U8;
        break;
    }
    decoder_process_destroy(decoder);
    return deep;
}
