// The run checkpoint (checkpoints/last.ckpt): everything needed to continue
// a run exactly. On top of what the method saves (train/checkpoint.h
// conventions): each group's parameters and buffers ("<group>."), its
// optimizer state slabs ("optimizer.<group>.<slab>.") and count of applied
// steps ("optimizer.<group>.step_count", the device's count: steps the loss
// scaler skipped do not count), the loss scaler's state when it is on
// ("loss_scaler.scale" F32, "loss_scaler.growth_tracker" I64; a checkpoint
// without them, e.g. of a 32-true run, starts the scaler afresh, as
// Lightning does), the number of completed optimizer steps, and the
// settings that must not change across a resume (metadata "run.*"; a
// mismatch is refused with the values).
// The data position needs no state: the sampler and the augmentations are
// pure functions of (seed, epoch, index), so the loader restarts at batch
// steps * accumulate.
#ifndef LTC_TRAIN_TRAIN_STATE_H
#define LTC_TRAIN_TRAIN_STATE_H

#include "nn/loss_scaler.h"
#include "nn/optimizer.h"
#include "ssl_methods/method.h"
#include "train/kept_epochs.h"
#include "util/error.h"

// Settings a resumed run must share with the interrupted one.
typedef struct RunIdentity {
    const char *model;   // "resnet18"
    const char *method;  // "simclr"
    int ranks;           // processes (devices x nodes); checked before batch_size,
                         // which is per rank and follows from it
    int batch_size;      // per device
    int image_size;
    long total_steps;
    long dataset_size;
    long seed;
    int accumulate;
    const char *optimizer;  // "SGD"
    double lr;              // after batch scaling
    double weight_decay;
    const char *method_args;  // the --method-arg entries, space-separated
    const char *transforms;   // the --transform entries, space-separated
    // The model's input: channels (images / model), pixels, normalisation
    // and ChannelDrop. Checkpoints from before it was saved had 3-channel
    // 8-bit RGB with ImageNet's normalisation: input_is_default says
    // whether this run's input is that one.
    const char *input;
    int input_is_default;
    // --embed-dim (0: no embedding head; checkpoints from before it was
    // saved had none).
    int embed_dim;
    // --limit-train-batches as given ("2", "0.5"; NULL or "all": none, and
    // then not saved).
    const char *batch_limit;
    // Not saved: follows from the settings above. The checkpoint's epoch
    // must be its step / steps_per_epoch (0: not checked).
    long steps_per_epoch;
} RunIdentity;

// The state of Lightning's callbacks that a resumed run counts on, kept in
// the checkpoint. early_stopping's progress (--callbacks
// early_stopping.patience): the lowest epoch-end train_loss so far and the
// epoch ends since it ("early_stopping.best" F32, "early_stopping.wait" I64;
// absent before the first epoch end). The Timer's training time so far
// (--max-time counts it on, as Lightning's Timer state does:
// "timer.train_milliseconds" I64, saved when `timed`, as Lightning has a
// Timer only with max_time; absent: 0). The epoch files a monitored
// model_checkpoint keeps (train/kept_epochs.h: "model_checkpoint.kept_steps",
// their steps as little-endian int64 bytes, and "model_checkpoint.kept_scores"
// F32; absent when none is kept), as Lightning keeps best_k_models, and
// the step of the file the checkpoint's own epoch file replaces
// ("model_checkpoint.evicted_step" I64, when there is one), so that a run
// killed before that file went is tidied when resumed.
typedef struct CallbackState {
    int has_best;  // an epoch end was checked
    float best;
    long wait;
    int timed;  // the run has --max-time: train_seconds is saved
    double train_seconds;
    KeptEpochs kept;
    long evicted_step;  // 0: none
} CallbackState;

// optimizers[g] belongs to method->groups[g]; scaler: NULL when off;
// callbacks: NULL when the run has none.
// completed_steps: optimizer steps done; epoch: the epoch the next step
// belongs to (for display).
int train_state_save(const char *path, Method *method, Optimizer *const *optimizers,
                     const LossScaler *scaler, const RunIdentity *identity,
                     long completed_steps, int epoch, const CallbackState *callbacks,
                     ErrorMessage *err);
// Restores a run saved by train_state_save into a freshly created method,
// optimizers and scaler (NULL: off; its state is then ignored). Fails (err
// says which setting) when identity differs, and when a counter differs
// from what the others make it: metadata step = train.completed_steps,
// epoch = step / steps_per_epoch, each group's optimizer step count = the
// steps it was active in (method_group_active; at most
// that when the checkpoint holds the scaler's state: GradScaler's skipped
// steps do not count).
int train_state_load(const char *path, Method *method, Optimizer *const *optimizers,
                     LossScaler *scaler, const RunIdentity *identity, long *completed_steps,
                     CallbackState *callbacks, ErrorMessage *err);

#endif
