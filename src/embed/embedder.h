// The embedder: pooled backbone features for every image of a dataset, as
// LightlyTrain's embed computes them (plain resize of the whole image to
// image_size x image_size, no crop/flip/colour, ImageNet normalisation,
// BatchNorm in eval mode with its running statistics). Used by the `embed`
// command and by the training loop's kNN evaluation.
//
// Rows are in scan order and do not depend on the worker count: the loader
// runs in keep_last mode (every image once, in order, no substitutes).
#ifndef LTC_EMBED_EMBEDDER_H
#define LTC_EMBED_EMBEDDER_H

#include <stddef.h>
#include <stdint.h>

#include "augment/augment.h"
#include "data/loader.h"
#include "data/scan.h"
#include "dist/comm.h"
#include "nn/backbone.h"
#include "util/error.h"

#define EMBED_DEFAULT_IMAGE_SIZE 224
#define EMBED_DEFAULT_BATCH_SIZE 128

typedef struct EmbedConfig {
    int image_size;       // the model slot's resolution
    int batch_size;       // <= the slot's batch
    int num_workers;      // >= 0 (loader_set_workers)
    uint64_t max_pixels;  // decoder limit; 0 = default
    int ignore_exif_orientation;  // LoaderConfig's
    LoaderWarnFn warn;    // one line per skipped file, from worker threads; may be NULL
    void *warn_context;
    // Optional output, (dataset->count) or NULL: set to 1 for each file that
    // could not be read or decoded (its features row is all zeros), else 0.
    uint8_t *failed;
    // Data parallel (NULL: one process): every rank embeds its share (rounds
    // of one batch per rank, data/sampler.h) and rank 0 receives every row,
    // in scan order; features and failed are only written on rank 0 (the
    // other ranks may pass NULL). All ranks call embed_dataset together and
    // agree on its status.
    Communicator *comm;
    // The model's input (docs/input-pipeline.md "Depth and channels"): its
    // channels (0: 3), 8-bit RGB or float pixels, and normalize_count
    // means and stds (0: ImageNet's). train's --num-channels, --input-depth
    // and --normalize, stored in the checkpoint.
    int channels;
    int float_pixels;
    int normalize_count;
    float mean[AUGMENT_MAX_CHANNELS], std[AUGMENT_MAX_CHANNELS];
} EmbedConfig;

// The model's input (docs/input-pipeline.md "Depth and channels") into
// config: its first layer's channels; float pixels where train recorded
// them (pixels "float", ModelSourceInfo.pixels) or for other than 3
// channels; the normalisation of normalize ("MEAN,...:STD,...": --normalize,
// else what train recorded; NULL or "": ImageNet's, 3 channels only).
int embed_config_input(const Backbone *model, const char *pixels, const char *normalize,
                       EmbedConfig *config, ErrorMessage *err);
// The per-channel mean and std (config->channels each) embed_dataset
// normalises with: config's, or ImageNet's.
void embed_config_normalization(const EmbedConfig *config, float *mean, float *std);

// features (dataset->count, model->feature_dim) host memory: row i = pooled
// features of image i (scan order) in eval mode (rank 0's, see comm above).
// The model needs a slot `slot` of resolution image_size and batch >=
// batch_size; plans for the last partial batch are made here
// (backbone_prepare_batch) before the loop.
// stats (may be NULL) receives the loader's counts: skipped_files = files
// whose rows are zero (see EmbedConfig.failed). Fails on a configuration
// that does not fit the model, or a fatal loader/backend error.
int embed_dataset(Backbone *model, int slot, const Dataset *dataset, const EmbedConfig *config,
                  float *features, LoaderStats *stats, ErrorMessage *err);

#endif
