// The state of one `train` run, shared by the loop (trainer.c) and its
// set-up and tear-down (train_setup.c). Internal to src/train.
#ifndef LTC_TRAIN_TRAIN_RUN_H
#define LTC_TRAIN_TRAIN_RUN_H

#include <limits.h>

#include "data/loader.h"
#include "data/scan.h"
#include "logging/metrics_jsonl.h"
#include "logging/progress.h"
#include "logging/run_log.h"
#include "logging/run_summary.h"
#include "logging/tb_writer.h"
#include "ssl_methods/method.h"
#include "train/train_state.h"
#include "train/trainer.h"

typedef struct TrainRun {
    const TrainConfig *config;
    Backend *backend;
    char accelerator_note[400];  // which backend --accelerator chose and why (train.log)
    const char *precision;       // the resolved --precision
    Dataset dataset;
    int dataset_ready;
    Method method;
    int method_ready;
    Optimizer *optimizers[METHOD_MAX_GROUPS];
    float *nonfinite;       // backend memory (METHOD_MAX_GROUPS): counts of the divergence check
    Loader *loader;
    int batch_size;         // per device
    int num_workers;
    int accumulate;
    long steps_per_epoch;   // optimizer steps
    long total_steps;
    long start_step;        // > 0 when resumed
    int complete;           // resumed from the checkpoint of the last step
    int knn_logged_at_start;  // resumed: the kNN value at start_step survived in the logs
    long warmup_steps;
    int log_every;
    double base_lr;         // after batch scaling
    double weight_decay;
    // "lr-SGD/backbone": Lightning's LearningRateMonitor naming, one per group
    char lr_tags[METHOD_MAX_GROUPS][METHOD_GROUP_NAME + 16];
    RunIdentity identity;
    char identity_method_args[1024], identity_transforms[1024];
    char model_name[BACKBONE_MAX_NAME];
    char checkpoint_path[PATH_MAX];
    char export_path[PATH_MAX];
    TbWriter *events;
    MetricsJsonl *metrics;
    RunLog *log;
    Progress *progress;
    // The line that ends a failed or interrupted run (the error, or how to
    // continue): printed after the end summary, so it is the last one seen.
    char final_message[2048];
    int knn_enabled;
    Dataset knn_dataset;
    int32_t *knn_labels;
    int knn_classes;
} TrainRun;

typedef struct StepTimes {
    float loss;             // mean over the micro-batches
    char diverged[128];     // what became NaN or infinite ("the loss", ...), or ""
    double lr;
    double batch_seconds;   // forward, backward, optimizer
    double data_seconds;    // waiting for batches
    int images;
} StepTimes;

// Everything before the first step. Returns 0 or the exit status (2 bad
// input, 1 failure) after printing the message. train_teardown is safe after
// a partial set-up.
int train_setup(TrainRun *run, const TrainConfig *config, int argc, char **argv);
void train_teardown(TrainRun *run);
// The end summary (console and train.log) and the final log lines.
void train_finish(TrainRun *run, RunTotals *totals, int status);
// A line on the console (through the progress display) and in train.log.
void train_message(TrainRun *run, const char *format, ...) __attribute__((format(printf, 2, 3)));
// Sets the run's final message (see TrainRun) and returns status.
int train_stop(TrainRun *run, int status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
// kNN top-1 of the backbone that is exported (DINO: the teacher) on the
// --knn-data folder, leave-one-out.
int train_knn_evaluate(TrainRun *run, double *top1, ErrorMessage *err);

#endif
