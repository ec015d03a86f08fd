// embed_dataset: keep_last loader -> upload -> normalize -> eval forward ->
// features rows in scan order (see embedder.h).
#include "embed/embedder.h"

#include <string.h>

#include "augment/augment.h"

// ImageNet statistics, as LightlyTrain's embed transform normalises.
static const float embed_mean[3] = {0.485f, 0.456f, 0.406f};
static const float embed_std[3] = {0.229f, 0.224f, 0.225f};

typedef struct EmbedBuffers {
    uint8_t *pixels;  // (batch, R, R, 3) backend memory
    float *input;     // (batch, R, R, 3) backend memory
} EmbedBuffers;

static void embed_buffers_free(Backend *backend, EmbedBuffers *buffers) {
    if (buffers->pixels) backend->op.free(backend, buffers->pixels);
    if (buffers->input) backend->op.free(backend, buffers->input);
    *buffers = (EmbedBuffers){0};
}

static int embed_validate(const Backbone *model, int slot, const Dataset *dataset,
                          const EmbedConfig *config, const float *features, ErrorMessage *err) {
    if (!model || !dataset || !config || !features)
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
    if (config->num_workers < 1) return error_set(err, "embed: need at least one worker");
    return 0;
}

// One batch through the model; its rows are consecutive in scan order.
static int embed_batch(Backbone *model, int slot, const Batch *batch, const EmbedBuffers *buffers,
                       float *features, uint8_t *failed, ErrorMessage *err) {
    Backend *backend = model->backend;
    const size_t dim = (size_t)model->feature_dim;
    const size_t size = (size_t)batch->view_size[0];
    const size_t pixels = (size_t)batch->size * size * size;
    const size_t first = batch->sample_indices[0];
    for (int i = 1; i < batch->size; i++)
        if (batch->sample_indices[i] != first + (size_t)i)
            return error_set(err, "embed: loader delivered images out of order");
    backend->op.upload(backend, buffers->pixels, batch->views[0], pixels * 3);
    backend->op.normalize_u8(backend, pixels, buffers->pixels, embed_mean, embed_std,
                             buffers->input);
    if (backbone_forward(model, slot, batch->size, buffers->input, 0, err) != 0) return -1;
    float *rows = features + first * dim;
    backend->op.download(backend, rows, backbone_features(model, slot),
                         (size_t)batch->size * dim * sizeof *rows);
    for (int i = 0; i < batch->size; i++) {
        if (batch->failed[i]) memset(rows + (size_t)i * dim, 0, dim * sizeof *rows);
        if (failed) failed[first + (size_t)i] = batch->failed[i];
    }
    return 0;
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
    const size_t values = (size_t)config->batch_size * (size_t)config->image_size *
                          (size_t)config->image_size * 3;
    EmbedBuffers buffers = {
        .pixels = backend->op.alloc(backend, values),
        .input = backend->op.alloc(backend, values * sizeof(float)),
    };
    if (!buffers.pixels || !buffers.input) {
        embed_buffers_free(backend, &buffers);
        return error_set(err, "embed: out of memory for a batch of %d images", config->batch_size);
    }
    LoaderConfig loader_config = {
        .dataset = dataset,
        .batch_size = config->batch_size,
        .num_workers = config->num_workers,
        .world_size = 1,
        .keep_last = 1,
        .max_pixels = config->max_pixels,
        .warn = config->warn,
        .warn_context = config->warn_context,
    };
    view_set_resize(&loader_config.views, config->image_size);
    Loader *loader = loader_create(&loader_config, err);
    if (!loader) {
        embed_buffers_free(backend, &buffers);
        return error_prefix(err, "embed");
    }
    int status = 0;
    for (;;) {
        const Batch *batch = loader_next(loader, NULL, err);
        if (!batch) {
            if (err && err->text[0]) status = error_prefix(err, "embed");
            break;
        }
        status = embed_batch(model, slot, batch, &buffers, features, config->failed, err);
        loader_release(loader, batch);
        if (status != 0) break;
    }
    if (stats) *stats = loader_stats(loader);
    loader_destroy(loader);
    embed_buffers_free(backend, &buffers);
    return status;
}
