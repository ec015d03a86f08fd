// What keeps the ranks of a data-parallel run in step (see train_run.h):
// agreeing on exit statuses, the step's global loss and stop request (in
// the step record, on the device), the check that every rank holds the
// same weights, and checkpoints written by rank 0 after a barrier. With one
// rank every function reduces to the local value (no communication).
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "dist/rank_settings.h"
#include "train/train_run.h"

// A collective failed: the ranks are out of step for good (see
// dist/comm.h). Says so and ends every rank; returns 1 in a world of one.
static int train_comm_failed(TrainRun *run, const ErrorMessage *err) {
    train_error(run, "error: %s", err->text);
    comm_abort(run->comm, 1);
    return 1;
}

int train_agree(TrainRun *run, int status, const char *message) {
    if (run->world_size == 1) return status;
    Backend *backend = run->backend;
    const size_t world = (size_t)run->world_size;
    float *statuses = malloc(world * sizeof *statuses);
    if (!statuses) {
        const ErrorMessage err = {"out of memory for the ranks' statuses"};
        return train_comm_failed(run, &err);
    }
    const float mine = (float)status;
    ErrorMessage err = {{0}};
    backend->op.upload(backend, run->agreed + world, &mine, sizeof mine);
    if (comm_all_gather(run->comm, run->agreed + world, run->agreed, 1, &err)) {
        free(statuses);
        return train_comm_failed(run, &err);
    }
    backend->op.download(backend, statuses, run->agreed, world * sizeof *statuses);
    int first = -1;
    for (size_t r = 0; r < world && first < 0; r++)
        if (statuses[r] != 0.0f) first = (int)r;
    const int agreed = first < 0 ? 0 : (int)statuses[first];
    // Rank 0 printed its own message; another rank speaks when rank 0 is fine.
    if (status && run->rank == first && run->rank != 0 && message)
        fprintf(stderr, "rank %d: %s\n", run->rank, message);
    free(statuses);
    return agreed;
}

void train_stage_stop(TrainRun *run, int stop_requested) {
    float *stop = staging_take(&run->stop_staging);
    *stop = (stop_requested & STOP_SIGNAL ? 1.0f : 0.0f) +
            (stop_requested & STOP_TIME_UP ? RECORD_TIME_UP : 0.0f);
    staging_upload(&run->stop_staging, run->record + RECORD_STOP, stop, sizeof *stop);
}

// Queued on the device (comm_all_reduce_queued): the host reads the sums
// with the record, a step later.
int train_agree_step(TrainRun *run) {
    Backend *backend = run->backend;
    float *record = run->record;
    if (run->world_size == 1) return 0;
    ErrorMessage err = {{0}};
    _Static_assert(RECORD_STOP == RECORD_LOSS + 1, "the loss and the stop are summed at once");
    if (comm_all_reduce_queued(run->comm, record + RECORD_LOSS, 2, COMM_SUM, &err))
        return train_comm_failed(run, &err);
    backend->op.scalar_combine(backend, 1.0f, record + RECORD_LOSS, 0.0f, NULL,
                               (float)run->world_size, record + RECORD_LOSS);
    return 0;
}

// Every group's parameters and the teacher backbone's: what must be the
// same on every rank (BatchNorm running statistics are not: without
// synchronised BatchNorm each rank keeps its own, and rank 0's are saved).
static uint64_t weights_hash(TrainRun *run) {
    uint64_t hash = RANK_HASH_START;
    Method *method = &run->method;
    for (int g = 0; g < method->group_count; g++)
        hash = rank_hash_values(run->backend, method->groups[g].params->values,
                                method->groups[g].params->total, hash);
    Backbone *teacher = method->ops->teacher ? method->ops->teacher(method) : NULL;
    if (teacher)
        hash = rank_hash_values(run->backend, teacher->params->values, teacher->params->total,
                                hash);
    return hash;
}

int train_check_replicas(TrainRun *run, long completed_steps) {
    if (run->world_size == 1) return 0;
    const uint64_t mine = weights_hash(run);
    uint64_t rank0 = mine;
    ErrorMessage err = {{0}};
    Backend *backend = run->backend;
    backend->op.upload(backend, run->agreed, &mine, sizeof mine);
    if (comm_broadcast(run->comm, run->agreed, sizeof mine, 0, &err))
        return train_comm_failed(run, &err);
    backend->op.download(backend, &rank0, run->agreed, sizeof rank0);
    char message[200];
    snprintf(message, sizeof message,
             "error: after step %ld the weights of rank %d differ from rank 0's: the ranks "
             "diverged", completed_steps, run->rank);
    return train_agree(run, mine != rank0 ? 1 : 0, message);
}

int train_save_agreed(TrainRun *run, long completed_steps, int due) {
    ErrorMessage err = {{0}};
    // Every rank has finished the step: the checkpoint is a state all reached.
    if (comm_barrier(run->comm, &err)) return train_comm_failed(run, &err);
    int status = train_check_replicas(run, completed_steps);
    if (status) return status;
    if (run->rank == 0 && train_save(run, completed_steps, due, &err))
        status = train_stop(run, 1, "error: %s", err.text);
    return train_agree(run, status, NULL);
}

static void number_setting(RankSetting *setting, const char *name, double value) {
    char text[64];
    snprintf(text, sizeof text, "%.17g", value);
    rank_setting_text(setting, name, text);
}

int train_check_settings(TrainRun *run) {
    if (run->world_size == 1) return 0;
    const TrainConfig *config = run->config;
    const RunIdentity *identity = &run->identity;
    RankSetting settings[32];
    int count = 0;
    rank_setting_data(&settings[count++], &run->dataset, (const char *const *)config->data.items,
                      config->data.count);
    rank_setting_text(&settings[count++], "--model", identity->model);
    rank_setting_text(&settings[count++], "--method", identity->method);
    rank_setting_text(&settings[count++], "--method-arg", identity->method_args);
    rank_setting_text(&settings[count++], "--transform", identity->transforms);
    rank_setting_text(&settings[count++], "the input (--num-channels, --normalize, ...)",
                      identity->input);
    rank_setting_text(&settings[count++], "--optim", identity->optimizer);
    rank_setting_text(&settings[count++], "--precision", run->precision);
    rank_setting_text(&settings[count++], "--backend",
                      config->backend_name ? config->backend_name : "");
    number_setting(&settings[count++], "--seed", (double)identity->seed);
    number_setting(&settings[count++], "the batch per rank (--batch-size)",
                   identity->batch_size);
    number_setting(&settings[count++], "--image-size", identity->image_size);
    number_setting(&settings[count++], "--local-image-size", config->local_image_size);
    number_setting(&settings[count++], "--local-views", config->local_views);
    number_setting(&settings[count++], "--accumulate-grad-batches", identity->accumulate);
    number_setting(&settings[count++], "the steps (--epochs, --max-steps)",
                   (double)identity->total_steps);
    number_setting(&settings[count++], "the lr (--lr)", identity->lr);
    number_setting(&settings[count++], "--weight-decay", identity->weight_decay);
    number_setting(&settings[count++], "the first step (--resume)", (double)run->start_step);
    rank_setting_text(&settings[count++], "--sync-batchnorm",
                      config->sync_batchnorm ? "true" : "false");
    // The order of the collectives (buckets during or after backward).
    rank_setting_text(&settings[count++], "--gradient-overlap",
                      config->gradient_overlap ? "true" : "false");
    number_setting(&settings[count++], "--max-pixels", (double)config->max_pixels);
    rank_setting_text(&settings[count++], "--exif-orientation",
                      config->ignore_exif_orientation ? "false" : "true");
    // kNN evaluation is collective: its data and schedule too.
    char knn[RANK_SETTING_SHOWN];
    snprintf(knn, sizeof knn, "%zu images, every %d, k %d",
             run->knn_enabled ? run->knn_dataset.count : 0, config->knn_every, config->knn_k);
    rank_setting_text(&settings[count++], "--knn-data", knn);
    if (run->knn_enabled) {
        RankSetting names;
        rank_setting_data(&names, &run->knn_dataset, NULL, 1);
        settings[count - 1].hash ^= names.hash;
    }
    ErrorMessage err = {{0}};
    const int status = rank_settings_check(run->comm, run->backend, settings, count, &err);
    if (status < 0) return train_comm_failed(run, &err);
    if (status == 0) return 0;
    if (err.text[0]) fprintf(stderr, "rank %d: lightly-train-c train: %s\n", run->rank, err.text);
    return 2;
}
