// The training loop of `train` (see trainer.h): set-up, the step loop with
// schedules, logging, checkpoints, exports and the end summary. A step is
// queued without waiting for the device; what it did (loss, divergence,
// logged values) comes from its step record, read one step later
// (train_record.c). Set-up (data, method, optimizers, output files) is in
// train_setup.c.
#include "train/trainer.h"

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "backend/staging.h"
#include "logging/image_grid.h"
#include "nn/schedule.h"
#include "train/train_run.h"
#include "util/cpu.h"
#include "util/fault.h"
#include "util/output_path.h"
#include "weights/pt_writer.h"
#include "weights/ultralytics_export.h"

static volatile sig_atomic_t stop_signal;

static void on_stop_signal(int signal_number) { stop_signal = signal_number; }

void train_catch_stop_signals(void) {
    stop_signal = 0;
    struct sigaction action = {0};
    action.sa_handler = on_stop_signal;
    sigemptyset(&action.sa_mask);
    sigaction(SIGINT, &action, NULL);
    sigaction(SIGTERM, &action, NULL);
}

static const char *stop_signal_name(void) {
    return stop_signal == SIGINT    ? "SIGINT"
           : stop_signal == SIGTERM ? "SIGTERM"
                                    : "a signal to another rank";
}

// The shell's convention: 128 + the signal number (a rank whose stop came
// from another rank's signal: as SIGTERM).
static int stop_status(void) { return stop_signal == SIGINT ? 130 : 143; }

// Learning rate of step: LightlyTrain's linear warmup then cosine decay
// (lightly's CosineWarmupScheduler, end factor 0.001; DINOv2: min_lr / lr), per step.
static double learning_rate(const TrainRun *run, long step) {
    return run->base_lr * schedule_cosine_warmup(step, run->warmup_steps, run->total_steps, 1.0,
                                                 run->lr_end_factor);
}

// Float views as 8-bit RGB for the picture: [0, 1] to 0..255 (clamped), one
// channel as grey, else the first three (NULL when out of memory).
static uint8_t *picture_rgb(const Batch *batch, int view) {
    const size_t pixels = (size_t)batch->size * batch->view_size[view] * batch->view_size[view];
    const float *in = (const float *)batch->views[view];
    const int channels = batch->channels;
    uint8_t *rgb = malloc(pixels * 3);
    for (size_t p = 0; rgb && p < pixels; p++)
        for (int c = 0; c < 3; c++) {
            const float value = in[p * (size_t)channels + (channels < 3 ? 0 : c)];
            rgb[p * 3 + c] = (uint8_t)(value <= 0.0f ? 0 : value >= 1.0f ? 255
                                                                            : value * 255.0f + 0.5f);
        }
    return rgb;
}

static int log_augmentation_grid(TrainRun *run, const Batch *batch, ErrorMessage *err) {
    uint8_t *rgb = NULL, *converted[AUGMENT_MAX_VIEWS] = {NULL};
    int width = 0, height = 0, status = 0;
    const uint8_t *views[AUGMENT_MAX_VIEWS];
    for (int v = 0; v < batch->view_count; v++) {
        views[v] = batch->views[v];
        if (!batch->float_pixels) continue;
        views[v] = converted[v] = picture_rgb(batch, v);
        if (!converted[v]) status = error_set(err, "out of memory for the augmentation picture");
    }
    if (!status)
        status = image_grid_make(views, batch->view_size, batch->view_count, batch->size, 8, &rgb,
                                 &width, &height, err) ||
                 tb_add_image(run->events, "augmentations", 0, width, height, rgb, err);
    for (int v = 0; v < batch->view_count; v++) free(converted[v]);
    free(rgb);
    return status ? -1 : 0;
}

// The check after an update, into the record: NaN or infinite values in
// the parameters and buffers of every group updated at step, one count per
// group (read with the record).
static void count_nonfinite_weights(TrainRun *run, long step) {
    Method *method = &run->method;
    Backend *backend = run->backend;
    float *counts = run->record + RECORD_WEIGHTS;
    backend->op.fill(backend, counts, 0.0f, METHOD_MAX_GROUPS);
    for (int g = 0; g < method->group_count; g++) {
        const MethodGroup *group = &method->groups[g];
        if (!method_group_active(group, step)) continue;
        backend->op.count_nonfinite(backend, group->params->total, group->params->values,
                                    counts + g);
        if (group->buffers)
            backend->op.count_nonfinite(backend, group->buffers->total, group->buffers->values,
                                        counts + g);
    }
}

// Fault injection (util/fault.h): a NaN in the first gradient or weight of
// the first group, as a diverging step would leave.
static void poison_first(TrainRun *run, int weights) {
    const ParameterSet *params = run->method.groups[0].params;
    const float nan = NAN;
    run->backend->op.upload(run->backend, weights ? params->values : params->grads, &nan,
                            sizeof nan);
}

// The loss of the method's last micro-batch into the record: loss / k
// added to the step's (the float expression sum + loss / k, one operation
// per call; / 1 is nothing).
static void add_micro_batch_loss(TrainRun *run) {
    Backend *backend = run->backend;
    float *loss = method_loss(&run->method), *sum = run->record + RECORD_LOSS;
    if (run->accumulate > 1)
        backend->op.scalar_combine(backend, 1.0f, loss, 0.0f, NULL, (float)run->accumulate, loss);
    backend->op.scalar_combine(backend, 1.0f, sum, 1.0f, loss, 1.0f, sum);
}

// After the forward and backward passes: the gate (every updated group's
// gradients measured and the loss counted, then 1/k, the loss scaler's
// 1/scale and the clipping coefficient (torch's clip_grad_norm_ over all of
// them) or a skip decided on the device), the updates that read it, the
// method's after-update work and the weights check; all of it queued.
static void train_update(TrainRun *run, long step, StepTimes *times) {
    Method *method = &run->method;
    StepGate *gate = &run->gate;
    step_gate_open(gate);
    for (int g = 0; g < method->group_count; g++)
        if (method_group_active(&method->groups[g], step))
            step_gate_measure(gate, g, method->groups[g].params);
    step_gate_count_nonfinite(gate, 1, run->record + RECORD_LOSS);
    step_gate_close(gate, 1.0f / (float)run->accumulate,
                    run->scaler_on ? loss_scaler_unscale(&run->scaler) : NULL,
                    method->defaults.grad_clip);
    times->lr = learning_rate(run, step);
    for (int g = 0; g < method->group_count; g++)
        if (method_group_active(&method->groups[g], step))
            optimizer_step(run->optimizers[g],
                           (float)times->lr * method_group_lr_factor(&method->groups[g], step),
                           (float)schedule_cosine(step, run->total_steps, run->weight_decay,
                                                  run->weight_decay_end),
                           step_gate_values(gate));
    if (method->ops->after_update) method->ops->after_update(method, step);
    if (fault_fires("nan-weight", step)) poison_first(run, 1);
    count_nonfinite_weights(run, step);
}

// The record of the step, complete on the device (queued into its slot by
// train_record_queue).
static void train_record_step(TrainRun *run) {
    Backend *backend = run->backend;
    float *record = run->record;
    backend->op.copy(backend, record + RECORD_GATE, step_gate_values(&run->gate),
                     step_gate_floats(&run->gate) * sizeof(float));
    backend->op.copy(backend, record + RECORD_SCALARS, method_scalar(&run->method, 0),
                     METHOD_MAX_SCALARS * sizeof(float));
    if (run->scaler_on) {
        backend->op.copy(backend, record + RECORD_SCALE, loss_scaler_scale(&run->scaler),
                         sizeof(float));
        loss_scaler_update(&run->scaler, step_gate_values(&run->gate) + GATE_SKIP);
    }
}

static void train_record_queue(TrainRun *run, long step) {
    Backend *backend = run->backend;
    backend->op.timer_mark(backend, run->timers[step & 1], 1);
    backend->op.host_slot_fill(backend, run->slots[step & 1], run->record,
                               RECORD_FLOATS * sizeof(float));
}

// The device work of a step is a CUDA graph a micro-batch when the run
// allows it (train_graphs.c): from the micro-batch's batch on (once it is
// taken: the batch's copy stays outside) to its end, the last one's to the
// step's record. Its start, and its end, which launches it (launch 0: the
// step failed midway; 0, or -1 with err).
static void step_graph_start(TrainRun *run, long step, int micro, int images) {
    if (!run->step_graphs) return;
    const uint64_t kind = train_step_part_kind(run, step, micro, images);
    run->graph_steps[run->backend->op.step_graph_begin(run->backend, kind)]++;
}

static int step_graph_finish(TrainRun *run, int launch, ErrorMessage *err) {
    if (!run->step_graphs) return 0;
    return run->backend->op.step_graph_end(run->backend, launch, err);
}

// The gradient average after backward: the buckets still running
// (overlap) or all of them (--gradient-overlap false). The time it takes is
// the step's exposed communication (times->comm_wait_seconds): the host's
// time, or on a GPU the compute stream's wait measured on the device (one
// step late, see comm_wait_timer_seconds).
static int train_sync_gradients(TrainRun *run, long step, StepTimes *times, ErrorMessage *err) {
    Method *method = &run->method;
    const double start = time_now();
    comm_wait_timer_mark(run->comm, 0);
    const int status =
        run->gradient_overlap
            ? gradient_sync_finish(&run->gradient_sync, err)
            : gradient_sync_all_reduce(&run->gradient_sync, run->comm, method->groups, step, err);
    comm_wait_timer_mark(run->comm, 1);
    const double device = comm_wait_timer_seconds(run->comm);
    times->comm_wait_seconds = device >= 0 ? device : time_now() - start;
    return status;
}

// Queues one optimizer step over accumulate micro-batches; nothing waits
// for the device (train_record_read reads it later). Each micro-batch's
// copy to the device was queued before (train/batch_feed.h): the next one's
// is queued once this one's work is, so it runs beside it. Returns 0, or -1
// with err (a loader or backend failure), or 1 when the loader ran dry. A
// loss, gradient or updated weight that is NaN or infinite shows in the
// record (the gate skips the update when it can still be).
static int train_step(TrainRun *run, long step, StepTimes *times, ErrorMessage *err) {
    Method *method = &run->method;
    Backend *backend = run->backend;
    // The step's staged host inputs (drop path, RoPE, masks, mixup) go to
    // the same host buffers every step, as a captured step needs.
    staging_step_begin(backend);
    times->step = step;
    times->data_seconds = 0;
    double compute = 0;
    // Read once: the step stages the request it saw (train_stage_stop).
    // Rank 0's clock alone decides the time limit, as Lightning broadcasts
    // rank 0's Timer.
    const int stop_requested = (stop_signal != 0 ? STOP_SIGNAL : 0) |
                               (run->rank == 0 && train_time_is_up(run) ? STOP_TIME_UP : 0);
    for (int micro = 0; micro < run->accumulate; micro++) {
        // Queued beside the work before (the run's first step: now).
        const int fetched = batch_feed_prefetch(&run->feed, err);
        if (fetched) return fetched < 0 ? -1 : 1;
        const double start = time_now();
        // the device's step starts with waiting for the copy
        if (micro == 0) backend->op.timer_mark(backend, run->timers[step & 1], 0);
        double wait = 0, queue = 0;
        const Batch *host = NULL;
        const Batch *batch = batch_feed_take(&run->feed, &host, &wait, &queue, err);
        if (!batch) return -1;  // (prefetched above)
        times->data_seconds += wait;
        step_graph_start(run, step, micro, batch->size);
        if (micro == 0) {
            for (int g = 0; g < method->group_count; g++)
                parameter_set_zero_grads(method->groups[g].params);
            backend->op.fill(backend, run->record + RECORD_LOSS, 0.0f, 1);
            train_stage_stop(run, stop_requested);
        }
        // Before the backward (which adds to it): a bucket may be on the
        // wire as soon as backward is through.
        if (fault_fires("nan-gradient", step)) poison_first(run, 0);
        if (run->gradient_overlap && micro == run->accumulate - 1)
            gradient_sync_begin(&run->gradient_sync, run->comm, method->groups,
                                method->group_count, step);
        int status = method_normalize_views(method, batch, err);
        batch_feed_consumed(&run->feed);
        if (!status) status = method->ops->step(method, step, batch->size, err);
        if (!status) add_micro_batch_loss(run);
        compute += queue + time_now() - start;
        if (!status && step == 0 && micro == 0 && run->events)
            status = log_augmentation_grid(run, host, err);
        if (status) return step_graph_finish(run, 0, NULL), -1;
        times->images += batch->size;
        if (micro == run->accumulate - 1) break;  // its graph ends with the update
        if (step_graph_finish(run, 1, err)) return -1;
        // The next micro-batch's copy beside this one's work; a loader
        // failure shows again when the loop fetches it above.
        batch_feed_prefetch(&run->feed, err);
    }
    const double start = time_now();
    // Data parallel: every rank steps with the mean gradient and logs the
    // mean loss; a stop request on any rank stops all after the next step.
    // The gate then decides the same on every rank.
    if (train_sync_gradients(run, step, times, err) || train_agree_step(run))
        return step_graph_finish(run, 0, NULL), -1;
    train_update(run, step, times);
    train_record_step(run);
    if (step_graph_finish(run, 1, err)) return -1;
    train_record_queue(run, step);
    times->batch_seconds = compute + (time_now() - start);
    // The next step's first batch: its copy beside this step's work (its
    // loader wait is that step's data_time; a loader failure shows again
    // when that step fetches it). None after the last step.
    if (step + 1 < run->total_steps) batch_feed_prefetch(&run->feed, err);
    err->text[0] = '\0';
    return 0;
}

// A scalar's TensorBoard tag: with --loggers tensorboard.prefix=P, P-TAG
// (Lightning's join), into buffer; else tag.
static const char *train_events_tag(const TrainRun *run, const char *tag, char *buffer,
                                    size_t size) {
    const char *prefix = run->config->loggers ? run->config->loggers->tensorboard_prefix : NULL;
    if (!prefix) return tag;
    snprintf(buffer, size, "%s-%s", prefix, tag);
    return buffer;
}

static int train_log_step(TrainRun *run, long step, const StepTimes *times, double images_per_s,
                          ErrorMessage *err) {
    char tag[320];
    const char *tags[9 + METHOD_MAX_GROUPS + METHOD_MAX_SCALARS + DEVICE_STATS_MAX];
    double values[9 + METHOD_MAX_GROUPS + METHOD_MAX_SCALARS + DEVICE_STATS_MAX];
    size_t count = 0;
    tags[count] = "train_loss", values[count++] = times->loss;
    tags[count] = "profiling/batch_time", values[count++] = times->batch_seconds;
    tags[count] = "profiling/data_time", values[count++] = times->data_seconds;
    // Data parallel (an NCCL world of one too): the step's exposed communication.
    if (run->comm && strcmp(run->comm->name, "single") != 0)
        tags[count] = "profiling/comm_wait_time", values[count++] = times->comm_wait_seconds;
    for (int g = 0; run->callbacks.log_learning_rate && g < run->method.group_count; g++)
        tags[count] = run->lr_tags[g],  // a frozen group is not updated: 0
        values[count++] = step < run->method.groups[g].frozen_steps ? 0.0 : times->lr;
    tags[count] = "epoch", values[count++] = (double)(step / run->steps_per_epoch);
    tags[count] = "images_per_second", values[count++] = images_per_s;
    for (int s = 0; s < run->method.scalar_count; s++)
        tags[count] = run->method.scalar_tags[s], values[count++] = times->scalars[s];
    if (run->scaler_on) tags[count] = "loss_scale", values[count++] = times->loss_scale;
    if (run->callbacks.device_stats)
        count += (size_t)device_stats_sample(&run->device_stats, tags + count, values + count);
    for (size_t i = 0; run->events && i < count; i++)
        if (tb_add_scalar(run->events, train_events_tag(run, tags[i], tag, sizeof tag), step,
                          (float)values[i], err))
            return -1;
    if (run->events && tb_flush(run->events, err)) return -1;
    train_mlflow_log(run, step, tags, values, count);
    return run->metrics ? metrics_jsonl_write(run->metrics, step, tags, values, count, err) : 0;
}

// A StateDictWrite of the export: the safetensors at path, then the same
// tensors as torch.save's state dict beside it, from one download and
// layout conversion of the weights.
static int write_export_files(const char *path, const SafeTensorWrite *tensors, int count,
                              const SafeMetadata *metadata, int metadata_count,
                              ErrorMessage *err) {
    char pt_path[PATH_MAX];
    if (train_export_pt_path(pt_path, sizeof pt_path, path))
        return error_set(err, "%s: no .pt name beside it", path);
    if (safetensors_write(path, tensors, count, metadata, metadata_count, err)) return -1;
    return pt_state_dict_write(pt_path, tensors, count, metadata, metadata_count, err);
}

// The exported backbone (DINO: the teacher, see Method.export_part),
// written atomically as safetensors and, beside it, as exported_last.pt,
// LightlyTrain's file: the state dict as torch.save writes it (a YOLO:
// Ultralytics' checkpoint of the whole model, which ultralytics.YOLO(path)
// fine-tunes).
static int train_export(TrainRun *run, ErrorMessage *err) {
    Backbone *exported = &run->method.backbone;
    if (strcmp(run->method.export_part, "teacher_backbone") == 0 && run->method.ops->teacher)
        exported = run->method.ops->teacher(&run->method);
    if (exported->spec.kind != BACKBONE_YOLO)
        return backbone_save_as(exported, run->export_path, write_export_files, err);
    if (backbone_save(exported, run->export_path, err)) return -1;
    return export_ultralytics(&exported->model.yolo, run->export_pt_path, err);
}

// The folder a file of the run is written into still exists.
static int parent_exists(const char *path) {
    char folder[PATH_MAX];
    ErrorMessage ignored;
    struct stat info;
    return output_parent_folder(path, folder, sizeof folder, &ignored) == 0 &&
           stat(folder, &info) == 0 && S_ISDIR(info.st_mode);
}

// Whether --out was deleted (or replaced) under the run: its files go by
// path, so they would land in another run's folder. Also while a deletion
// is under way (--out still there, its checkpoints/ or exported_models/
// gone). -1 with err then.
static int out_replaced(const TrainRun *run, ErrorMessage *err) {
    if (!run->out_lock_held ||
        (output_folder_is_locked_one(run->config->out, run->out_lock_fd) &&
         parent_exists(run->checkpoint_path) && parent_exists(run->export_path)))
        return 0;
    return error_set(err, "could not write the checkpoint: --out %s was removed or replaced "
                          "while this run wrote into it (another run's files may be there now)",
                     run->config->out);
}

// What is written after `completed` steps (SAVE_*, train_run.h): at the
// last step and at a stop everything; else last.ckpt with its epoch file as
// model_checkpoint's every_n_epochs or every_n_train_steps say, the export
// as model_export's every_n_epochs says (--callbacks).
int train_save_due(const TrainRun *run, long completed, int stop) {
    const CallbackSettings *c = &run->callbacks;
    const int epoch_end = completed % run->steps_per_epoch == 0;
    const long epochs = completed / run->steps_per_epoch;
    int due = 0;
    if (completed == run->total_steps) due |= SAVE_CHECKPOINT | SAVE_EPOCH_FILE | SAVE_EXPORT;
    if (c->checkpoint_every_steps ? completed % c->checkpoint_every_steps == 0
                                  : epoch_end && epochs % c->checkpoint_every_epochs == 0)
        due |= SAVE_CHECKPOINT | SAVE_EPOCH_FILE;
    if (epoch_end && c->export_every_epochs && epochs % c->export_every_epochs == 0)
        due |= SAVE_EXPORT;
    if (stop) due |= SAVE_CHECKPOINT | SAVE_EXPORT;
    if (c->keep_epoch_checkpoints == 0) due &= ~SAVE_EPOCH_FILE;
    return due;
}

// Writes last.ckpt, then the exported backbone (as `due` says: SAVE_*); on
// failure the previous files stay (both writes are atomic) and err says
// which write failed. A kill between the two leaves an export older than
// the checkpoint: --resume brings it in line (train_complete). A write that
// fails because --out went away says so.
int train_save(TrainRun *run, long completed_steps, int due, ErrorMessage *err) {
    const int epoch = (int)(completed_steps / run->steps_per_epoch);
    if (out_replaced(run, err)) return -1;
    run->callback_state.timed = run->config->max_time_seconds >= 0;
    run->callback_state.train_seconds = train_time_elapsed(run);
    // (decided first: the checkpoint holds the kept files' list)
    const int kept = (due & SAVE_EPOCH_FILE) &&
                     train_out_choose_epoch(run, completed_steps, (float)run->saved_loss);
    if ((due & SAVE_CHECKPOINT) &&
        train_state_save(run->checkpoint_path, &run->method, run->optimizers,
                         run->scaler_on ? &run->scaler : NULL, &run->identity, completed_steps,
                         epoch, &run->callback_state, err))
        return out_replaced(run, err) ? -1 : error_prefix(err, "could not write the checkpoint");
    if (fault_fires("kill-before-export", completed_steps)) raise(SIGKILL);
    if ((due & SAVE_EXPORT) && train_export(run, err))
        return out_replaced(run, err) ? -1 : error_prefix(err, "could not write the export");
    ErrorMessage failed = {{0}};
    if (kept && train_out_keep_epoch(run, completed_steps, &failed))
        train_message(run, "warning: %s", failed.text);
    run_log_line(run->log, "step %ld: wrote %s%s%s", completed_steps,
                 due & SAVE_CHECKPOINT ? "the checkpoint" : "the export",
                 kept ? " with its epoch file" : "",
                 (due & SAVE_CHECKPOINT) && (due & SAVE_EXPORT) ? " and the export" : "");
    return 0;
}

// The epoch whose end `completed` steps are when a kNN evaluation is due
// there (every --knn-every epochs and at the end of the run), else 0.
static int knn_epoch_due(const TrainRun *run, long completed) {
    if (!run->knn_enabled || completed == 0) return 0;
    if (completed % run->steps_per_epoch != 0 && completed != run->total_steps) return 0;
    const int epoch = (int)((completed + run->steps_per_epoch - 1) / run->steps_per_epoch);
    return epoch % run->config->knn_every == 0 || completed == run->total_steps ? epoch : 0;
}

static void train_knn(TrainRun *run, long completed_steps, int epoch) {
    ErrorMessage err = {{0}};
    char prefixed[320];
    double top1 = 0;
    if (train_knn_evaluate(run, &top1, &err)) {
        train_message(run, "kNN evaluation failed: %s", err.text);
        return;
    }
    if (run->rank != 0) return;  // rank 0 voted and logs
    train_message(run, "epoch %d: kNN top-1 %.2f%% (k=%d, %zu labelled images)", epoch,
                  100.0 * top1, run->config->knn_k, run->knn_dataset.count);
    if (run->events &&
        (tb_add_scalar(run->events, train_events_tag(run, "knn/top1", prefixed, sizeof prefixed),
                       completed_steps, (float)top1, &err) ||
         tb_flush(run->events, &err)))
        train_message(run, "warning: %s", err.text);
    const char *tag = "knn/top1";
    const double value = top1;
    train_mlflow_log(run, completed_steps, &tag, &value, 1);
    if (run->metrics) metrics_jsonl_write(run->metrics, completed_steps, &tag, &value, 1, &err);
}

// A failure this rank alone saw. With several ranks it is printed now and
// ends them all (comm_abort does not return); alone, it becomes the run's
// final message. Returns 1.
static int train_fail_alone(TrainRun *run, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static int train_fail_alone(TrainRun *run, const char *format, ...) {
    va_list args;
    va_start(args, format);
    vsnprintf(run->final_message, sizeof run->final_message, format, args);
    va_end(args);
    if (run->world_size > 1) {
        train_error(run, "%s", run->final_message);
        comm_abort(run->comm, 1);
    }
    return 1;
}

// images/s over the steps since the last log line.
typedef struct Rate {
    double images, seconds;
} Rate;

// The host's part of a queued step, once its record is read: the totals,
// the divergence stop, the log line (every log_every steps and the last),
// the progress display; a stop request agreed in the record sets
// run->stop_seen. Returns 0, or the exit status to end the run with.
static int train_step_finish(TrainRun *run, StepTimes *times, RunTotals *totals, Rate *rate) {
    ErrorMessage err = {{0}};
    const long step = times->step;
    train_record_read(run, times);
    totals->steps++;
    totals->images += (uint64_t)times->images * (uint64_t)run->world_size;
    totals->batch_seconds += times->batch_seconds;
    totals->data_seconds += times->data_seconds;
    if (times->diverged[0]) {
        const int saved = access(run->checkpoint_path, F_OK) == 0;
        return train_stop(run, 1, "stopping: %s at step %ld (epoch %ld); %s%s. Try a lower --lr.",
                          times->diverged, step, step / run->steps_per_epoch + 1,
                          saved ? "the last good state, untouched, is in "
                                : "no checkpoint was written yet",
                          saved ? run->checkpoint_path : "");
    }
    if (times->skipped && run->rank == 0)
        run_log_line(run->log, "step %ld: NaN or infinite gradients at loss scale %g: update "
                               "skipped, scale halved", step, (double)times->loss_scale);
    rate->images += (double)times->images * run->world_size;  // all ranks
    rate->seconds += times->batch_seconds + times->data_seconds;
    const double images_per_s = rate->seconds > 0 ? rate->images / rate->seconds : 0;
    const long completed = step + 1;
    if (step % run->log_every == 0 || completed == run->total_steps) {
        if (run->rank == 0 && train_log_step(run, step, times, images_per_s, &err))
            return train_fail_alone(run, "error writing logs: %s", err.text);
        rate->images = rate->seconds = 0;
    }
    const double wait = times->data_seconds / (times->data_seconds + times->batch_seconds + 1e-12);
    const long epochs = (run->total_steps + run->steps_per_epoch - 1) / run->steps_per_epoch;
    if (run->progress)
        progress_update(run->progress, (int)(step / run->steps_per_epoch), (int)epochs,
                        completed, times->loss, images_per_s, wait, time_now());
    if (times->stop) run->stop_seen = 1;
    if (times->time_up) run->time_up_seen = 1;
    return 0;
}

// The step loop. The host runs one step ahead of what it reads: step N's
// record is read after step N + 1 is queued, so a GPU never idles while
// the host waits. A step after which the state itself is needed (a
// checkpoint at an epoch's end or for a stop, a kNN evaluation) is read at
// once instead. A divergence therefore shows one step late, after the next
// step ran (the gate skipped the bad update on the device; nothing after it
// is saved); a stop request of another rank takes effect after the step
// following the one that carried it, the same step on every rank.
static int train_loop(TrainRun *run, RunTotals *totals) {
    ErrorMessage err = {{0}};
    int status = 0;
    // The randomly initialised (or --checkpoint) backbone's kNN accuracy:
    // the baseline the following evaluations are compared with.
    if (run->knn_enabled && run->start_step == 0) train_knn(run, 0, 0);
    run->timer_start = time_now();  // Lightning's Timer starts here (on_train_start)
    // --epochs 0 (LightlyTrain: "No training epochs specified. Saving model
    // and exiting."): the initial model's checkpoint and export, no step.
    if (run->total_steps == 0) {
        if (train_save_agreed(run, 0, SAVE_CHECKPOINT | SAVE_EXPORT)) return 1;
        train_message(run, "--epochs 0: nothing trained; the initial model is saved");
        return 0;
    }
    // Lightning's Timer checks once before the first batch: a resumed run
    // whose training time is spent (or --max-time 0) trains nothing.
    if ((status = train_out_of_time(run)) >= 0) return status;
    // Resumed right after a checkpoint whose kNN evaluation was lost with
    // the interrupted run: evaluate the checkpointed state now.
    const int missed_epoch = run->knn_logged_at_start ? 0 : knn_epoch_due(run, run->start_step);
    if (missed_epoch) train_knn(run, run->start_step, missed_epoch);
    Rate rate = {0};
    StepTimes pending = {0};  // queued, its record not read yet
    int has_pending = 0;
    for (long step = run->start_step; step < run->total_steps; step++) {
        StepTimes times = {0};
        if (fault_fires("abort", step)) abort();
        const int queued = train_step(run, step, &times, &err);
        // The step before is read first: its divergence or log line comes
        // before this step's error.
        if (has_pending && (status = train_step_finish(run, &pending, totals, &rate)))
            return status;
        has_pending = 0;
        if (queued < 0) return train_fail_alone(run, "error at step %ld: %s", step, err.text);
        if (queued > 0) break;
        const long completed = step + 1;
        const int epoch_done = completed % run->steps_per_epoch == 0 || completed == run->total_steps;
        // One process reads its own signal and clock at once; ranks stop on
        // the request their records agreed on.
        const int stop_asked = run->stop_seen || (run->world_size == 1 && stop_signal != 0);
        if (!epoch_done && !stop_asked && !train_early_stop_pending(run, completed) &&
            !train_save_due(run, completed, 0)) {
            pending = times;
            has_pending = 1;
            continue;
        }
        if ((status = train_step_finish(run, &times, totals, &rate))) return status;
        const int stop = run->stop_seen || (run->world_size == 1 && stop_signal != 0);
        // (a signal wins: it asks for a stop to resume from)
        const int early = train_early_stop(run, completed, times.loss);
        int due = train_save_due(run, completed, stop || early);
        if (early && !stop) due |= train_early_stop_saves(run, completed);
        run->saved_loss = times.loss;
        if (due && train_save_agreed(run, completed, due)) return 1;
        // (an early stop ends the run: its last kNN evaluation is due too)
        const int knn_epoch =
            early && !stop && run->knn_enabled
                ? (int)((completed + run->steps_per_epoch - 1) / run->steps_per_epoch)
                : knn_epoch_due(run, completed);
        if (knn_epoch) train_knn(run, completed, knn_epoch);
        if (stop)
            return train_stop(run, stop_status(),
                              "interrupted (%s) after step %ld: checkpoint written to %s; "
                              "continue with the same command plus --resume (without "
                              "--overwrite)",
                              stop_signal_name(), completed, run->checkpoint_path);
        if (early) return train_early_stop_message(run, early, completed);
    }
    return 0;
}

// --resume of a run whose checkpoint is its last step: nothing to train,
// but the outputs a kill may have left behind it (the export, the final kNN
// evaluation) are brought in line with the checkpoint.
static int train_complete(TrainRun *run) {
    ErrorMessage err = {{0}};
    int status = 0;
    if (run->rank == 0 && train_export(run, &err)) {
        train_message(run, "error: could not write the export: %s", err.text);
        status = 1;
    }
    if ((status = train_agree(run, status, NULL))) return status;
    const int knn_epoch = run->knn_logged_at_start ? 0 : knn_epoch_due(run, run->start_step);
    if (knn_epoch) train_knn(run, run->start_step, knn_epoch);
    train_message(run, "the run in %s was already complete (step %ld of %ld): %s written again "
                       "from its checkpoint%s",
                  run->config->out, run->start_step, run->total_steps, run->export_path,
                  knn_epoch ? ", and its final kNN evaluation run" : "");
    return 0;
}

// A run stopped before step 1 in a folder it found missing or empty keeps
// nothing: what its set-up wrote there goes (under its lock, still held),
// so that the same command starts again without --overwrite.
static void discard_outputs(TrainRun *run) {
    ErrorMessage ignored = {{0}};
    train_loader_free(run);  // its workers warn into train.log, closed below
    if (run->events) tb_writer_close(run->events, &ignored);
    if (run->metrics) metrics_jsonl_close(run->metrics, &ignored);
    if (run->log) run_log_close(run->log);
    run->events = NULL;
    run->metrics = NULL;
    run->log = NULL;
    train_out_discard_events(run);  // in --out, or the folders under it it made
    static const char *const written[] = {"train.log", "metrics.jsonl", "events.out.tfevents.*",
                                          "checkpoints", "exported_models"};
    output_folder_remove_entries(run->config->out, written, sizeof written / sizeof written[0],
                                 run->out_made);
}

int train_run(const TrainConfig *config, int argc, char **argv) {
    TrainRun run;
    int status = train_setup(&run, config, argc, argv);
    if (!status) train_mlflow_start(&run, argc, argv);
    if (status || run.complete) {
        if (!status) status = train_complete(&run);
    } else if (run.world_size == 1 && stop_signal != 0) {
        // Stopped while setting up (the handlers are set before any work,
        // train_catch_stop_signals): one process stops before its first
        // step; ranks agree on it in the first step's record, as on any other.
        const char *next = run.start_step ? "the checkpoint is unchanged: continue with the "
                                            "same command plus --resume"
                           : run.out_fresh ? "nothing kept (what it wrote in --out is "
                                             "removed): start again with the same command"
                                           : "no checkpoint written: start again with the "
                                             "same command plus --overwrite";
        status = train_stop(&run, stop_status(), "interrupted (%s) before step %ld: nothing "
                                                 "trained; %s",
                            stop_signal_name(), run.start_step + 1, next);
        train_message(&run, "%s", run.final_message);
        if (run.start_step == 0 && run.out_fresh) discard_outputs(&run);
    } else {
        RunTotals totals = {0};
        const double start = time_now();
        if (run.progress) progress_set_origin(run.progress, run.start_step, start);
        status = train_loop(&run, &totals);
        if (run.progress) progress_finish(run.progress);
        totals.wall_seconds = time_now() - start;
        train_finish(&run, &totals, status);
    }
    train_mlflow_end(&run, status);  // when train_finish did not (nothing trained)
    signal(SIGINT, SIG_DFL);
    signal(SIGTERM, SIG_DFL);
    train_teardown(&run);
    return status;
}
