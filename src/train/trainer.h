// The `train` run: set-up from a resolved TrainConfig, the training loop
// (data -> method step -> optimizer -> EMA -> logging), checkpoints every
// epoch and on interrupt, exports, kNN evaluation and the end summary.
// Writes the LightlyTrain output layout under config->out:
//   checkpoints/last.ckpt, exported_models/exported_last.safetensors,
//   events.out.tfevents.*, metrics.jsonl, train.log.
// With several ranks (config->comm) every rank runs this with the same
// configuration; they agree on every exit status, and only rank 0 writes.
#ifndef LTC_TRAIN_TRAINER_H
#define LTC_TRAIN_TRAINER_H

#include <stdint.h>

#include "cli/callbacks.h"
#include "cli/loggers.h"
#include "cli/options.h"
#include "cli/run_limits.h"
#include "data/data_list.h"
#include "dist/comm.h"
#include "nn/optimizer.h"
#include "ssl_methods/method.h"

// --input-depth: auto (float pixels when the model takes other than 3
// channels, ChannelDrop is on or the first image has more than 8 bits),
// 8 (8-bit RGB), float.
enum { TRAIN_DEPTH_AUTO, TRAIN_DEPTH_8, TRAIN_DEPTH_FLOAT };

typedef struct TrainConfig {
    DataList data;            // --data and --data-list: folders and image files
    const char *out;
    const char *model;        // backbone_model_names: resnet18 ... vit_s16 ...
    MethodKind method;
    int epochs;               // -1: auto (method_default_epochs); 0: save the initial model
    int max_steps;            // 0: epochs decide
    int batch_size;           // global, over all devices
    int image_size;
    int local_image_size;     // DINO's local views
    int local_views;
    int num_workers;          // -1: auto; 0: none ahead (loader_set_workers)
    int devices, num_nodes;
    int optimizer_auto;       // 1: the method's default optimizer
    OptimizerKind optimizer;
    double lr;                // -1 (auto): the method's default; scaled by batch
    double weight_decay;      // -1 (auto): the method's default
    uint64_t seed;
    int resume, overwrite;
    const char *checkpoint;   // initial backbone weights or NULL
    int log_every;            // <= 0: min(50, steps per epoch)
    int accumulate_grad_batches;
    StringList method_args;
    StringList model_args;    // --model-arg KEY=VALUE (backbone_spec_apply_arg)
    StringList transforms;
    const char *knn_data;     // labelled folder (class per sub-folder) or NULL
    int knn_every;            // epochs
    int knn_k;
    const char *accelerator;  // "auto" (default: the GPU when one works), "cpu" or "gpu"
    int gpu;                  // the GPU to use (index among the visible ones)
    const char *precision;    // "auto", "32-true", "16-mixed", "bf16-mixed"
    const char *backend_name; // the CPU backend: "cpu" (default) or "ref"
    int threads;              // compute threads; <= 0: rank_cores
    uint64_t max_pixels;      // decoder limit (train and kNN data); 0: Pillow's default
    int ignore_exif_orientation;  // --exif-orientation false
    // --num-channels, --channel-drop, --normalize (docs/input-pipeline.md
    // "Depth and channels") and --input-depth: TRAIN_DEPTH_*.
    ChannelSettings channels;
    int input_depth;
    // Data parallel (docs/distributed.md): the ranks of the run, NULL for one
    // process. batch_size is split evenly over them; only rank 0 writes.
    Communicator *comm;
    int sync_batchnorm;       // BatchNorm statistics over all ranks (several ranks)
    int gradient_overlap;     // the gradient buckets start during backward (else after it)
    int rank_cores;           // CPU cores this rank may use; <= 0: all usable
    // --loggers (TensorBoard on or off, MLflow's settings; NULL: the
    // defaults) and, for MLflow's run, every option of the command line as
    // given or defaulted (name with underscores, value as text).
    const LoggerSettings *loggers;
    const CallbackSettings *callbacks;  // --callbacks; NULL: LightlyTrain's defaults
    const MlflowPair *options;
    int option_count;
    int activation_checkpointing;  // ViTs: blocks recomputed in the backward (BackboneSpec)
    int activation_checkpointing_every;  // those blocks: 0, N, 2N, ... (1: all)
    int embed_dim;  // LightlyTrain's embed_dim: an embedding head this wide (0: none;
                    // ssl_methods/embed_head.h)
    // Lightning's Trainer settings (LightlyTrain's trainer_args): --max-time
    // (seconds of training, counted on across --resume; < 0: none), the
    // minimums an early stop waits for (0: none; min_epochs resolved as
    // run_min_epochs), the batches an epoch runs, gradient clipping's norm
    // (< 0: the method's) and the console's progress line (0: none).
    double max_time_seconds;
    int min_epochs, min_steps;
    int fast_dev_run;  // Lightning's fast_dev_run: its batches (0: off), set into
                       // the limits and settings here by the command (train.log says so)
    BatchLimit limit_train_batches;
    double gradient_clip_val;
    int progress_bar;
} TrainConfig;

// SIGINT and SIGTERM ask the run to stop (after the step in progress, with
// a checkpoint): the command sets this first, before any work, so that a
// signal while it sets up is not a kill. train_run restores the defaults.
void train_catch_stop_signals(void);

// The checks of --out that need no data or model (its layout; --resume
// needs a checkpoint; a used folder needs --overwrite or --resume), as rank
// `rank` makes them: the command makes them before it downloads weights.
int train_out_check(const TrainConfig *config, int rank, ErrorMessage *err);

// Runs (or resumes) training. Returns the exit status: 0 done, 1 failure
// while running (message printed), 2 bad input, 130 / 143 interrupted by
// SIGINT / SIGTERM (checkpoint written; before the first step of the run:
// nothing trained, nothing more written). argc/argv go to train.log.
int train_run(const TrainConfig *config, int argc, char **argv);

#endif
