// Saving and restoring a whole run (see train_state.h).
#include "train/train_state.h"

#include <errno.h>
#include <inttypes.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/checkpoint.h"

// The run.* metadata of an identity, as key/value text pairs.
#define RUN_IDENTITY_FIELDS 17
#define RUN_IDENTITY_VALUE 4096
static void run_identity_fields(const RunIdentity *identity,
                                char values[RUN_IDENTITY_FIELDS][RUN_IDENTITY_VALUE],
                                const char *keys[RUN_IDENTITY_FIELDS]) {
    static const char *const names[RUN_IDENTITY_FIELDS] = {
        "run.model", "run.method", "run.ranks", "run.batch_size", "run.image_size",
        "run.total_steps", "run.dataset_size", "run.seed", "run.accumulate_grad_batches",
        "run.optimizer", "run.lr", "run.weight_decay", "run.method_args", "run.transforms",
        "run.input", "run.embed_dim", "run.limit_train_batches"};
    const size_t size = RUN_IDENTITY_VALUE;
    snprintf(values[0], size, "%s", identity->model);
    snprintf(values[1], size, "%s", identity->method);
    snprintf(values[2], size, "%d", identity->ranks);
    snprintf(values[3], size, "%d", identity->batch_size);
    snprintf(values[4], size, "%d", identity->image_size);
    snprintf(values[5], size, "%ld", identity->total_steps);
    snprintf(values[6], size, "%ld", identity->dataset_size);
    snprintf(values[7], size, "%ld", identity->seed);
    snprintf(values[8], size, "%d", identity->accumulate);
    snprintf(values[9], size, "%s", identity->optimizer ? identity->optimizer : "");
    snprintf(values[10], size, "%.9g", identity->lr);
    snprintf(values[11], size, "%.9g", identity->weight_decay);
    snprintf(values[12], size, "%s", identity->method_args ? identity->method_args : "");
    snprintf(values[13], size, "%s", identity->transforms ? identity->transforms : "");
    snprintf(values[14], size, "%s", identity->input ? identity->input : "");
    snprintf(values[15], size, "%d", identity->embed_dim);
    snprintf(values[16], size, "%s", identity->batch_limit ? identity->batch_limit : "all");
    for (int i = 0; i < RUN_IDENTITY_FIELDS; i++) keys[i] = names[i];
}

static int save_group(CheckpointWriter *writer, Method *method, const MethodGroup *group,
                      Optimizer *optimizer, ErrorMessage *err) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s.", group->name);
    if (checkpoint_add_parameters(writer, prefix, group->params, group->buffers,
                                  group->num_batches_tracked ? *group->num_batches_tracked : 0,
                                  err))
        return -1;
    size_t floats = 0;
    const float *state = optimizer_state(optimizer, &floats);
    const size_t slabs = group->params->total ? floats / group->params->total : 0;
    for (size_t s = 0; s < slabs; s++) {
        snprintf(prefix, sizeof prefix, "optimizer.%s.%zu.", group->name, s);
        if (checkpoint_add_state_slab(writer, prefix, group->params, method->backend,
                                      state + s * group->params->total, err))
            return -1;
    }
    snprintf(prefix, sizeof prefix, "optimizer.%s.step_count", group->name);
    return checkpoint_add_i64(writer, prefix, optimizer_step_count(optimizer), err);
}

// The loss scaler's state (read back: a checkpoint waits for the device).
static int save_scaler(CheckpointWriter *writer, const LossScaler *scaler, ErrorMessage *err) {
    const LossScalerState state = loss_scaler_read(scaler);
    return checkpoint_add_host_floats(writer, "loss_scaler.scale", &state.scale, 1, err) ||
                   checkpoint_add_i64(writer, "loss_scaler.growth_tracker", state.good_steps,
                                      err)
               ? -1
               : 0;
}

// Continues the saved scale and growth tracker when the checkpoint has them.
static int load_scaler(const Checkpoint *checkpoint, LossScaler *scaler, ErrorMessage *err) {
    if (!checkpoint_has_prefix(checkpoint, "loss_scaler.")) return 0;
    float scale = 0;
    int64_t good_steps = 0;
    if (checkpoint_get_host_floats(checkpoint, "loss_scaler.scale", &scale, 1, err) ||
        checkpoint_get_i64(checkpoint, "loss_scaler.growth_tracker", &good_steps, err))
        return -1;
    if (good_steps < 0 || good_steps > INT32_MAX)
        return error_set(err, "loss_scaler.growth_tracker = %lld is out of range",
                         (long long)good_steps);
    return loss_scaler_restore(scaler, scale, (int)good_steps, err);
}

// The callbacks' state: early_stopping's progress once an epoch end was
// checked, the Timer's training time (whole milliseconds) when it has one.
static int save_callbacks(CheckpointWriter *writer, const CallbackState *state,
                          ErrorMessage *err) {
    if (!state) return 0;
    if (state->has_best &&
        (checkpoint_add_host_floats(writer, "early_stopping.best", &state->best, 1, err) ||
         checkpoint_add_i64(writer, "early_stopping.wait", state->wait, err)))
        return -1;
    if (state->kept.count > 0) {
        uint8_t steps[8 * CALLBACKS_TOP_K_MAX];
        for (int i = 0; i < state->kept.count; i++)
            for (int b = 0; b < 8; b++)
                steps[8 * i + b] = (uint8_t)((uint64_t)state->kept.steps[i] >> (8 * b));
        if (checkpoint_add_bytes(writer, "model_checkpoint.kept_steps", steps,
                                 8 * (size_t)state->kept.count, err) ||
            checkpoint_add_host_floats(writer, "model_checkpoint.kept_scores", state->kept.scores,
                                       (size_t)state->kept.count, err))
            return -1;
    }
    if (state->evicted_step > 0 &&
        checkpoint_add_i64(writer, "model_checkpoint.evicted_step", state->evicted_step, err))
        return -1;
    if (!state->timed) return 0;
    return checkpoint_add_i64(writer, "timer.train_milliseconds",
                              (int64_t)llround(state->train_seconds * 1000.0), err);
}

// The kept epoch files' list; each step in 1..completed_steps.
static int load_kept_epochs(const Checkpoint *checkpoint, long completed_steps, KeptEpochs *kept,
                            ErrorMessage *err) {
    const uint8_t *bytes = NULL;
    size_t size = 0;
    if (checkpoint_get_bytes(checkpoint, "model_checkpoint.kept_steps", &bytes, &size, err))
        return -1;
    if (size == 0 || size % 8 != 0 || size / 8 > CALLBACKS_TOP_K_MAX)
        return error_set(err, "model_checkpoint.kept_steps: %zu bytes, not 8 per kept file (at "
                              "most %d)", size, CALLBACKS_TOP_K_MAX);
    kept->count = (int)(size / 8);
    for (int i = 0; i < kept->count; i++) {
        uint64_t step = 0;
        for (int b = 0; b < 8; b++) step |= (uint64_t)bytes[8 * i + b] << (8 * b);
        if (step < 1 || step > (uint64_t)completed_steps)
            return error_set(err, "model_checkpoint.kept_steps: step %llu is not in 1..%ld",
                             (unsigned long long)step, completed_steps);
        kept->steps[i] = (long)step;
    }
    return checkpoint_get_host_floats(checkpoint, "model_checkpoint.kept_scores", kept->scores,
                                      (size_t)kept->count, err);
}

// The file the checkpoint's own epoch file replaces (0: none).
static int load_evicted_step(const Checkpoint *checkpoint, long completed_steps, long *step,
                             ErrorMessage *err) {
    int64_t value = 0;
    if (checkpoint_get_i64(checkpoint, "model_checkpoint.evicted_step", &value, err)) return -1;
    if (value < 1 || value > completed_steps)
        return error_set(err, "model_checkpoint.evicted_step = %lld is not in 1..%ld",
                         (long long)value, completed_steps);
    *step = (long)value;
    return 0;
}

static int load_callbacks(const Checkpoint *checkpoint, long completed_steps,
                          CallbackState *state, ErrorMessage *err) {
    *state = (CallbackState){0};
    if (checkpoint_has_prefix(checkpoint, "model_checkpoint.kept_") &&
        load_kept_epochs(checkpoint, completed_steps, &state->kept, err))
        return -1;
    if (checkpoint_has_prefix(checkpoint, "model_checkpoint.evicted_step") &&
        load_evicted_step(checkpoint, completed_steps, &state->evicted_step, err))
        return -1;
    if (checkpoint_has_prefix(checkpoint, "timer.")) {
        int64_t milliseconds = 0;
        if (checkpoint_get_i64(checkpoint, "timer.train_milliseconds", &milliseconds, err))
            return -1;
        if (milliseconds < 0 || milliseconds > (int64_t)1e17)
            return error_set(err, "timer.train_milliseconds = %lld is out of range",
                             (long long)milliseconds);
        state->train_seconds = (double)milliseconds / 1000.0;
    }
    if (!checkpoint_has_prefix(checkpoint, "early_stopping.")) return 0;
    int64_t wait = 0;
    if (checkpoint_get_host_floats(checkpoint, "early_stopping.best", &state->best, 1, err) ||
        checkpoint_get_i64(checkpoint, "early_stopping.wait", &wait, err))
        return -1;
    if (wait < 0 || wait > INT32_MAX)
        return error_set(err, "early_stopping.wait = %lld is out of range", (long long)wait);
    state->has_best = 1;
    state->wait = (long)wait;
    return 0;
}

int train_state_save(const char *path, Method *method, Optimizer *const *optimizers,
                     const LossScaler *scaler, const RunIdentity *identity,
                     long completed_steps, int epoch, const CallbackState *callbacks,
                     ErrorMessage *err) {
    CheckpointWriter *writer = checkpoint_writer_create();
    if (!writer) return error_set(err, "out of memory for the checkpoint");
    char values[RUN_IDENTITY_FIELDS][RUN_IDENTITY_VALUE];
    const char *keys[RUN_IDENTITY_FIELDS];
    run_identity_fields(identity, values, keys);
    char step_text[32], epoch_text[32];
    snprintf(step_text, sizeof step_text, "%ld", completed_steps);
    snprintf(epoch_text, sizeof epoch_text, "%d", epoch);
    int status = checkpoint_set_meta(writer, "format", "lightly-train-c checkpoint", err) ||
                 checkpoint_set_meta(writer, "model", identity->model, err) ||
                 checkpoint_set_meta(writer, "method", identity->method, err) ||
                 checkpoint_set_meta(writer, "export_part", method->export_part, err) ||
                 checkpoint_set_meta(writer, "step", step_text, err) ||
                 checkpoint_set_meta(writer, "epoch", epoch_text, err) ||
                 checkpoint_add_i64(writer, "train.completed_steps", completed_steps, err);
    for (int i = 0; i < RUN_IDENTITY_FIELDS && !status; i++)
        if (strcmp(values[i], "all") != 0 || strcmp(keys[i], "run.limit_train_batches") != 0)
            status = checkpoint_set_meta(writer, keys[i], values[i], err);  // (no limit: none)
    // The model's input, for embed (model_source.h reads them back).
    char channels[16], normalize[2 * AUGMENT_MAX_CHANNELS * 18];
    snprintf(channels, sizeof channels, "%d", view_set_channels_out(&method->views));
    channel_normalize_format(&method->views, normalize, sizeof normalize);
    if (!status)
        status = checkpoint_set_meta(writer, "channels", channels, err) ||
                 checkpoint_set_meta(writer, "pixels",
                                     method->views.float_pixels ? "float" : "uint8", err) ||
                 checkpoint_set_meta(writer, "normalize", normalize, err);
    for (int g = 0; g < method->group_count && !status; g++)
        status = save_group(writer, method, &method->groups[g], optimizers[g], err);
    if (!status && scaler) status = save_scaler(writer, scaler, err);
    if (!status) status = save_callbacks(writer, callbacks, err);
    if (!status && method->ops->save) status = method->ops->save(method, writer, err);
    if (!status) status = checkpoint_write(writer, path, err);
    checkpoint_writer_free(writer);
    return status ? -1 : 0;
}

// The optimizer steps a group took in the first `completed` steps: the
// steps it was active in (frozen steps at lr 0 count, others do not).
static int64_t group_active_steps(const MethodGroup *group, int64_t completed) {
    const int64_t frozen = group->frozen_at_zero_lr ? 0 : group->frozen_steps;
    return completed - (frozen < completed ? frozen : completed);
}

static int load_group(const Checkpoint *checkpoint, Method *method, MethodGroup *group,
                      Optimizer *optimizer, int64_t completed_steps, int scaled,
                      ErrorMessage *err) {
    char prefix[128];
    snprintf(prefix, sizeof prefix, "%s.", group->name);
    if (checkpoint_load_parameters(checkpoint, prefix, group->params, group->buffers,
                                   group->num_batches_tracked, err))
        return -1;
    size_t floats = 0;
    float *state = optimizer_state(optimizer, &floats);
    const size_t slabs = group->params->total ? floats / group->params->total : 0;
    for (size_t s = 0; s < slabs; s++) {
        snprintf(prefix, sizeof prefix, "optimizer.%s.%zu.", group->name, s);
        if (checkpoint_load_state_slab(checkpoint, prefix, group->params, method->backend,
                                       state + s * group->params->total, err))
            return -1;
    }
    int64_t steps = 0;
    snprintf(prefix, sizeof prefix, "optimizer.%s.step_count", group->name);
    if (checkpoint_get_i64(checkpoint, prefix, &steps, err)) return -1;
    // scaled: the saved run had the loss scaler, whose skipped steps do not count.
    const int64_t active = group_active_steps(group, completed_steps);
    if (scaled ? steps < 0 || steps > active : steps != active)
        return error_set(err, "%s = %lld, expected %s%lld (the steps the group was trained in, "
                              "of %lld completed)", prefix, (long long)steps,
                         scaled ? "0.." : "", (long long)active, (long long)completed_steps);
    optimizer_set_step_count(optimizer, (long)steps);
    return 0;
}

// A metadata field that must be a decimal integer in [low, high].
static int meta_integer(const Checkpoint *checkpoint, const char *key, long long low,
                        long long high, long long *value, ErrorMessage *err) {
    const char *text = checkpoint_meta(checkpoint, key);
    if (!text) return error_set(err, "metadata \"%s\" is missing", key);
    char *end = NULL;
    errno = 0;
    const long long parsed = strtoll(text, &end, 10);
    if (end == text || *end != '\0' || errno == ERANGE)
        return error_set(err, "metadata %s=\"%.40s\" is not an integer", key, text);
    if (parsed < low || parsed > high)
        return error_set(err, "metadata %s=%lld is outside %lld..%lld", key, parsed, low, high);
    *value = parsed;
    return 0;
}

// The counters of the checkpoint against the run it is resumed into.
static int check_counters(const Checkpoint *checkpoint, const RunIdentity *identity,
                          int64_t *completed_steps, ErrorMessage *err) {
    if (checkpoint_get_i64(checkpoint, "train.completed_steps", completed_steps, err)) return -1;
    if (*completed_steps < 0 || *completed_steps > identity->total_steps)
        return error_set(err, "train.completed_steps = %lld is outside 0..%ld (the run's steps)",
                         (long long)*completed_steps, identity->total_steps);
    long long step = 0, epoch = 0;
    if (meta_integer(checkpoint, "step", 0, identity->total_steps, &step, err) ||
        meta_integer(checkpoint, "epoch", 0, identity->total_steps, &epoch, err))
        return -1;
    if (step != *completed_steps)
        return error_set(err, "metadata step=%lld disagrees with train.completed_steps = %lld",
                         step, (long long)*completed_steps);
    const long per_epoch = identity->steps_per_epoch;
    if (per_epoch > 0 && epoch != step / per_epoch)
        return error_set(err, "metadata epoch=%lld disagrees with step %lld: expected %lld (%ld "
                              "steps per epoch)", epoch, step, step / per_epoch, per_epoch);
    return 0;
}

int train_state_load(const char *path, Method *method, Optimizer *const *optimizers,
                     LossScaler *scaler, const RunIdentity *identity, long *completed_steps,
                     CallbackState *callbacks, ErrorMessage *err) {
    Checkpoint checkpoint;
    if (checkpoint_read(path, &checkpoint, err)) return -1;
    char values[RUN_IDENTITY_FIELDS][RUN_IDENTITY_VALUE];
    const char *keys[RUN_IDENTITY_FIELDS];
    run_identity_fields(identity, values, keys);
    int status = 0;
    for (int i = 0; i < RUN_IDENTITY_FIELDS && !status; i++) {
        const char *saved = checkpoint_meta(&checkpoint, keys[i]);
        if (!saved && strcmp(keys[i], "run.input") == 0 && identity->input_is_default)
            continue;  // a checkpoint from before run.input: RGB, 8-bit, ImageNet's
        if (!saved && strcmp(keys[i], "run.embed_dim") == 0 && identity->embed_dim == 0)
            continue;  // from before run.embed_dim: no embedding head
        if (!saved && strcmp(keys[i], "run.limit_train_batches") == 0)
            saved = "all";  // a run without --limit-train-batches
        if (!saved || strcmp(saved, values[i]) != 0)
            status = error_set(err, "the interrupted run has %s=%s, this one %s (resume "
                                    "with the same settings, or start a new run)",
                               keys[i] + 4, saved ? saved : "(missing)", values[i]);
    }
    int64_t steps = 0;
    if (!status) status = check_counters(&checkpoint, identity, &steps, err);
    for (int g = 0; g < method->group_count && !status; g++)
        status = load_group(&checkpoint, method, &method->groups[g], optimizers[g], steps,
                            checkpoint_has_prefix(&checkpoint, "loss_scaler."), err);
    if (!status && scaler) status = load_scaler(&checkpoint, scaler, err);
    if (!status && callbacks) status = load_callbacks(&checkpoint, (long)steps, callbacks, err);
    if (!status && method->ops->load) status = method->ops->load(method, &checkpoint, err);
    checkpoint_free(&checkpoint);
    if (status) return error_prefix(err, "%s", path);
    *completed_steps = (long)steps;
    return 0;
}
