// embed_dataset: keep_last loader (pinned slots) -> batch feed (the copy of
// batch N + 1 queued while batch N computes, train/batch_feed.h) ->
// normalize -> eval forward -> features rows in scan order (see
// embedder.h); with several ranks, one batch per rank and round, gathered
// to rank 0.
#include "embed/embedder.h"

#include <stdlib.h>
#include <string.h>

#include "augment/augment.h"
#include "train/batch_feed.h"

typedef struct EmbedBuffers {
    Act *input;       // (batch, R, R, C) backend memory
    const ViewSet *views;  // the loader's: channels, pixels and normalisation
    float *features;  // (batch, D) backend memory: the features in fp32
    uint8_t *failed;  // (batch) host: the queued batch's loader flags
} EmbedBuffers;

// What embed_queue kept of the batch it queued (its loader slot goes back
// when the next batch is fetched).
typedef struct EmbedQueued {
    int size;
    size_t first;  // its first image's index in scan order
} EmbedQueued;

int embed_config_input(const Backbone *model, const char *pixels, const char *normalize,
                       EmbedConfig *config, ErrorMessage *err) {
    const Parameter *first = backbone_input_layer(model);
    ChannelSettings settings = {.channels = first ? first->torch_shape[1] : 3};
    if (normalize && normalize[0] && channel_normalize_parse(normalize, &settings, err)) return -1;
    if (channel_settings_check(&settings, err)) return -1;
    config->channels = settings.channels;
    config->float_pixels = (pixels && strcmp(pixels, "float") == 0) || settings.channels != 3;
    config->normalize_count = settings.normalize_count;
    memcpy(config->mean, settings.mean, sizeof config->mean);
    memcpy(config->std, settings.std, sizeof config->std);
    return 0;
}

void embed_config_normalization(const EmbedConfig *config, float *mean, float *std) {
    ViewSet views = {0};
    view_set_resize(&views, config->image_size > 0 ? config->image_size : 1);
    view_set_pixels(&views, config->channels > 0 ? config->channels : 3, config->float_pixels,
                    config->normalize_count, config->mean, config->std);
    view_set_normalization(&views, mean, std);
}

static void embed_buffers_free(Backend *backend, EmbedBuffers *buffers) {
    if (buffers->input) backend->op.free(backend, buffers->input);
    if (buffers->features) backend->op.free(backend, buffers->features);
    free(buffers->failed);
    *buffers = (EmbedBuffers){0};
}

static int embed_validate(const Backbone *model, int slot, const Dataset *dataset,
                          const EmbedConfig *config, const float *features, ErrorMessage *err) {
    if (!model || !dataset || !config || (!features && comm_rank(config->comm) == 0))
        return error_set(err, "embed: missing argument");
    if (dataset->count == 0) return error_set(err, "embed: the dataset is empty");
    if (slot < 0 || slot >= model->slot_count)
        return error_set(err, "embed: the model has no input slot %d (%d slots)", slot,
                         model->slot_count);
    const BackboneInput max = model->slots[slot];
    if (config->image_size != max.resolution)
        return error_set(err, "embed: image size %d differs from the model slot's %d px",
                         config->image_size, max.resolution);
    if (config->batch_size < 1 || config->batch_size > max.batch)
        return error_set(err, "embed: batch size %d outside 1..%d (the model slot's batch)",
                         config->batch_size, max.batch);
    if (config->num_workers < 0) return error_set(err, "embed: negative worker count");
    return 0;
}

// The feed's next batch through the model, queued: its images, already on
// the device, normalised, the eval forward and the features in fp32; then
// the next batch is fetched and its copy queued, so it runs while this one
// computes. The batch's rows are consecutive in scan order. 0, 1 when the
// loader has no more batches, -1 with err (a loader failure prefixed
// "embed").
static int embed_queue(Backbone *model, int slot, BatchFeed *feed, const EmbedBuffers *buffers,
                       EmbedQueued *queued, ErrorMessage *err) {
    const Batch *batch = batch_feed_take(feed, NULL, NULL, NULL, err);
    if (!batch) return err->text[0] ? error_prefix(err, "embed") : 1;
    Backend *backend = model->backend;
    const size_t size = (size_t)batch->view_size[0];
    const size_t pixels = (size_t)batch->size * size * size;
    const size_t first = batch->sample_indices[0];
    for (int i = 1; i < batch->size; i++)
        if (batch->sample_indices[i] != first + (size_t)i)
            return error_set(err, "embed: loader delivered images out of order");
    *queued = (EmbedQueued){.size = batch->size, .first = first};
    memcpy(buffers->failed, batch->failed, (size_t)batch->size);
    // ImageNet statistics unless given, as LightlyTrain's embed transform normalises.
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
    view_set_normalization(buffers->views, mean, std);
    if (batch->float_pixels)
        backend->op.normalize_f32(backend, pixels, batch->channels, (const float *)batch->views[0],
                                  mean, std, buffers->input);
    else
        backend->op.normalize_u8(backend, pixels, batch->views[0], mean, std, buffers->input);
    batch_feed_consumed(feed);
    if (backbone_forward(model, slot, batch->size, buffers->input, 0, err) != 0) return -1;
    backend->op.act_to_float(backend, (size_t)batch->size * model->feature_dim,
                             backbone_features(model, slot), buffers->features);
    // A failure to fetch the next batch shows again when it is taken.
    ErrorMessage later = {{0}};
    batch_feed_prefetch(feed, &later);
    return 0;
}

// The queued batch's features into rows (size, D) host memory (the host
// waits for them here), a failed image's row zero; failed_rows (size) =
// the loader's flags unless NULL.
static void embed_rows(Backbone *model, const EmbedBuffers *buffers, const EmbedQueued *queued,
                       float *rows, uint8_t *failed_rows) {
    const size_t dim = (size_t)model->feature_dim;
    model->backend->op.download(model->backend, rows, buffers->features,
                                (size_t)queued->size * dim * sizeof *rows);
    for (int i = 0; i < queued->size; i++) {
        if (buffers->failed[i]) memset(rows + (size_t)i * dim, 0, dim * sizeof *rows);
        if (failed_rows) failed_rows[i] = buffers->failed[i];
    }
}

// One process: every batch straight into its rows.
static int embed_alone(Backbone *model, int slot, BatchFeed *feed, const EmbedBuffers *buffers,
                       const EmbedConfig *config, float *features, ErrorMessage *err) {
    const size_t dim = (size_t)model->feature_dim;
    for (;;) {
        EmbedQueued queued;
        const int status = embed_queue(model, slot, feed, buffers, &queued, err);
        if (status) return status < 0 ? -1 : 0;
        embed_rows(model, buffers, &queued, features + queued.first * dim,
                   config->failed ? config->failed + queued.first : NULL);
    }
}

// Several ranks, in rounds: each rank embeds its block of the round (the
// loader delivers exactly those) into a message of batch rows, batch failed
// flags and its status; an all-gather gives every rank all messages in rank
// order, which is scan order; rank 0 copies the rows out.
static int embed_ranks(Backbone *model, int slot, const Dataset *dataset, BatchFeed *feed,
                       const EmbedBuffers *buffers, const EmbedConfig *config, float *features,
                       uint64_t *failed_count, ErrorMessage *err) {
    Backend *backend = model->backend;
    Communicator *comm = config->comm;
    const int ranks = comm_world_size(comm), rank = comm_rank(comm);
    const size_t dim = (size_t)model->feature_dim, batch = (size_t)config->batch_size;
    const size_t message = batch * dim + batch + 1, round_images = batch * (size_t)ranks;
    const size_t rounds = (dataset->count + round_images - 1) / round_images;
    float *host = malloc((size_t)ranks * message * sizeof *host);
    uint8_t *flags = malloc(batch);
    float *device = backend->op.alloc(backend, ((size_t)ranks + 1) * message * sizeof *device);
    int status = host && flags && device ? 0 : error_set(err, "embed: out of memory");
    for (size_t round = 0; round < rounds && status == 0; round++) {
        float *mine = host + (size_t)rank * message;
        memset(mine, 0, message * sizeof *mine);
        const size_t first = (round * (size_t)ranks + (size_t)rank) * batch;
        if (first < dataset->count) {
            EmbedQueued queued;
            const int queue_status = embed_queue(model, slot, feed, buffers, &queued, err);
            if (queue_status == 0) {
                embed_rows(model, buffers, &queued, mine, flags);
                for (int i = 0; i < queued.size; i++) mine[batch * dim + (size_t)i] = flags[i];
            } else if (queue_status > 0) {
                error_set(err, "embed: the loader ended early");
            }
            mine[message - 1] = (float)(queue_status != 0);
        }
        // Every rank's message: rows, flags and status; a failure anywhere
        // ends every rank's embedding alike.
        float *send = device + (size_t)ranks * message;
        backend->op.upload(backend, send, mine, message * sizeof *mine);
        const int local_failure = mine[message - 1] != 0.0f;
        if (comm_all_gather(comm, send, device, message, err)) {
            status = -1;
            break;
        }
        backend->op.download(backend, host, device, (size_t)ranks * message * sizeof *host);
        for (int r = 0; r < ranks && status == 0; r++)
            if (host[(size_t)r * message + message - 1] != 0.0f)
                status = local_failure ? -1
                                       : error_set(err, "embed: rank %d failed (its message "
                                                        "says why)", r);
        for (int r = 0; r < ranks && status == 0 && features; r++) {
            const size_t block = (round * (size_t)ranks + (size_t)r) * batch;
            const size_t rows = block >= dataset->count ? 0
                                : dataset->count - block < batch ? dataset->count - block
                                                                 : batch;
            const float *source = host + (size_t)r * message;
            memcpy(features + block * dim, source, rows * dim * sizeof *features);
            for (size_t i = 0; i < rows; i++) {
                const uint8_t flag = source[batch * dim + i] != 0.0f;
                if (config->failed) config->failed[block + i] = flag;
                *failed_count += flag;
            }
        }
    }
    free(host);
    free(flags);
    if (device) backend->op.free(backend, device);
    return status;
}

int embed_dataset(Backbone *model, int slot, const Dataset *dataset, const EmbedConfig *config,
                  float *features, LoaderStats *stats, ErrorMessage *err) {
    if (embed_validate(model, slot, dataset, config, features, err) != 0) return -1;
    // Plans for the full batches (the slot may be larger, e.g. the training
    // model's during kNN evaluation) and the last partial one.
    const int remainder = (int)(dataset->count % (size_t)config->batch_size);
    if (backbone_prepare_batch(model, slot, config->batch_size, err) != 0 ||
        (remainder && backbone_prepare_batch(model, slot, remainder, err) != 0))
        return error_prefix(err, "embed");

    Backend *backend = model->backend;
    const int channels = config->channels > 0 ? config->channels : 3;
    const size_t values = (size_t)config->batch_size * (size_t)config->image_size *
                          (size_t)config->image_size * (size_t)channels;
    EmbedBuffers buffers = {
        .input = backend->op.alloc(backend, act_bytes(backend, values)),
        .features = backend->op.alloc(
            backend, (size_t)config->batch_size * model->feature_dim * sizeof(float)),
        .failed = malloc((size_t)config->batch_size),
    };
    if (!buffers.input || !buffers.features || !buffers.failed) {
        embed_buffers_free(backend, &buffers);
        return error_set(err, "embed: out of memory for a batch of %d images", config->batch_size);
    }
    LoaderConfig loader_config = {
        .dataset = dataset,
        .batch_size = config->batch_size,
        .rank = comm_rank(config->comm),
        .world_size = comm_world_size(config->comm),
        .keep_last = 1,
        .max_pixels = config->max_pixels,
        .ignore_exif_orientation = config->ignore_exif_orientation,
        .warn = config->warn,
        .warn_context = config->warn_context,
    };
    loader_set_workers(&loader_config, config->num_workers);
    view_set_resize(&loader_config.views, config->image_size);
    view_set_pixels(&loader_config.views, channels, config->float_pixels,
                    config->normalize_count, config->mean, config->std);
    buffers.views = &loader_config.views;
    batch_feed_loader_memory(&loader_config, backend);  // pinned slots on the GPU
    Loader *loader = loader_create(&loader_config, err);
    if (!loader) {
        embed_buffers_free(backend, &buffers);
        return error_prefix(err, "embed");
    }
    BatchFeed feed;
    uint64_t failed_rows = 0;
    int status = batch_feed_init(&feed, backend, loader, &loader_config.views,
                                 config->batch_size, err)
                     ? error_prefix(err, "embed")
                     : 0;
    if (status == 0)
        status = loader_config.world_size == 1
                     ? embed_alone(model, slot, &feed, &buffers, config, features, err)
                     : embed_ranks(model, slot, dataset, &feed, &buffers, config, features,
                                   &failed_rows, err);
    batch_feed_free(&feed);
    if (stats) {
        *stats = loader_stats(loader);
        if (loader_config.world_size > 1) stats->skipped_files = failed_rows;  // all ranks' (rank 0)
    }
    loader_destroy(loader);
    embed_buffers_free(backend, &buffers);
    return status;
}
