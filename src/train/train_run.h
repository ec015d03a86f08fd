// The state of one `train` run, shared by the loop (trainer.c) and its
// set-up and tear-down (train_setup.c). Internal to src/train.
#ifndef LTC_TRAIN_TRAIN_RUN_H
#define LTC_TRAIN_TRAIN_RUN_H

#include <limits.h>

#include "backend/staging.h"
#include "data/loader.h"
#include "data/scan.h"
#include "logging/device_stats.h"
#include "logging/metrics_jsonl.h"
#include "logging/mlflow_client.h"
#include "logging/progress.h"
#include "logging/run_log.h"
#include "logging/run_summary.h"
#include "logging/tb_writer.h"
#include "nn/loss_scaler.h"
#include "nn/step_gate.h"
#include "ssl_methods/method.h"
#include "train/batch_feed.h"
#include "train/gradient_sync.h"
#include "train/train_state.h"
#include "train/trainer.h"

typedef struct TrainRun {
    const TrainConfig *config;
    Communicator *comm;     // config->comm (NULL: one process)
    int rank, world_size;
    float *agreed;          // (world_size + 2) backend memory for the ranks' agreements
    GradientSync gradient_sync;
    int gradient_overlap;   // the buckets start during backward (--gradient-overlap)
    Backend *backend;
    int step_graphs;             // steps as CUDA graphs (train_graphs_decide)
    char step_graphs_note[200];  // on or off and why (train.log)
    long graph_steps[3];         // step parts run as each STEP_GRAPH_* (train.log's end)
    char accelerator_note[400];  // which backend --accelerator chose and why (train.log)
    const char *precision;       // the resolved --precision
    Dataset dataset;
    int dataset_ready;
    Method method;
    int method_ready;
    Optimizer *optimizers[METHOD_MAX_GROUPS];
    StepGate gate;          // this step's multiplier and skip, on the device
    // The step record (RECORD_* below, backend memory), written on the device
    // during a step and copied into slots[step % 2]; the host reads a step's
    // copy after the next step is queued (train_record_read).
    float *record;
    HostSlot *slots[2];
    // The step's stop request, a staged input (staging.h, train_stage_stop):
    // it changes no work a step queues, so a step captured as a CUDA graph
    // serves with or without it, on every rank alike.
    Staging stop_staging;
    // Dynamic loss scaling (16-mixed; LTC_TEST_LOSS_SCALER in tests): the
    // scale seeds the backward, its 1/scale joins the gate's multiplier.
    int scaler_on;
    LossScaler scaler;
    int stop_seen;          // a stop was agreed in a step's record: stop after the next
    int time_up_seen;       // rank 0's --max-time ran out, said in a step's record
    int patience_out;       // early_stopping's patience ran out (kept: Lightning's should_stop)
    int stop_deferred_said; // a stop waits for --min-epochs / --min-steps: said once
    // Lightning's Timer: the training time of the checkpoint resumed from
    // (0 for a new run) and when this process's loop began (time_now()).
    double timer_offset, timer_start;
    Loader *loader;
    BatchFeed feed;         // the loader's batches to the device, one ahead
    int feed_ready;
    // Device time of a step (batch_time on the GPU): marks around step N in
    // timers[N % 2], read with its record.
    DeviceTimer *timers[2];
    int batch_size;         // per rank
    int num_workers;
    int accumulate;
    long steps_per_epoch;   // optimizer steps
    long epoch_batches;     // batches an epoch (all full ones, or --limit-train-batches)
    long epochs;            // --epochs, auto resolved (method_default_epochs)
    long total_steps;
    long start_step;        // > 0 when resumed
    int complete;           // resumed from the checkpoint of the last step
    int knn_logged_at_start;  // resumed: the kNN value at start_step survived in the logs
    // --callbacks: when checkpoints and exports are written, the epoch files
    // kept, the patience stop (its progress in the checkpoint), lr scalars.
    CallbackSettings callbacks;
    CallbackState callback_state;
    double saved_loss;  // the train_loss of the step a save is for (the monitor's score)
    DeviceStats device_stats;  // device_stats_monitor's (callbacks.device_stats)
    long warmup_steps;
    int log_every;
    double base_lr;         // after batch scaling
    double weight_decay;
    double weight_decay_end;  // cosine to it over the run (= weight_decay: constant)
    double lr_end_factor;     // the lr cosine ends at base_lr times it
    // "lr-SGD/backbone": Lightning's LearningRateMonitor naming, one per group
    char lr_tags[METHOD_MAX_GROUPS][METHOD_GROUP_NAME + 16];
    RunIdentity identity;
    char identity_method_args[1024], identity_transforms[1024];
    char identity_batch_limit[40];  // --limit-train-batches as the checkpoint keeps it
    char identity_input[4096];  // up to 64 channels of normalisation and ChannelDrop
    // A warning about the settings (the batch reduced to the dataset),
    // printed once every check passed: an error is then the only line.
    char settings_warning[256];
    char model_name[BACKBONE_MAX_NAME];
    int out_lock_held;      // rank 0 holds --out's lock (out_lock_fd; -1: no locks there)
    int out_lock_fd;
    int out_fresh;          // rank 0: --out was missing or empty as this run began (no --resume)
    int out_made;           // rank 0: this run created --out
    char checkpoint_path[PATH_MAX];
    char export_path[PATH_MAX];     // exported_last.safetensors
    char export_pt_path[PATH_MAX];  // exported_last.pt beside it (train_export_pt_path)
    TbWriter *events;       // NULL: --loggers tensorboard=null
    char events_dir[PATH_MAX];  // where they go: --out, or OUT/NAME/VERSION/SUB_DIR
                                // (--loggers tensorboard.name=...; train_out_create)
    MetricsJsonl *metrics;
    MlflowClient *mlflow;   // --loggers mlflow, rank 0 (train_mlflow.c)
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

// The layout of TrainRun.record (floats of backend memory).
enum {
    RECORD_LOSS,     // mean over the micro-batches, then over the ranks
    RECORD_STOP,     // ranks asked to stop (summed over the ranks with the loss):
                     // signals count 1 each, rank 0's time limit RECORD_TIME_UP
    RECORD_SCALE,    // the loss scale the step's backward used (scaler on)
    RECORD_SCALARS,  // the method's logged values (Method.record's)
    RECORD_WEIGHTS = RECORD_SCALARS + METHOD_MAX_SCALARS,  // per group: NaN/inf after the update
    RECORD_GATE = RECORD_WEIGHTS + METHOD_MAX_GROUPS,      // the closed step gate's values
    RECORD_FLOATS = RECORD_GATE + GATE_SQUARES + METHOD_MAX_GROUPS,
};

// A rank's stop request (train_stage_stop): a signal, the time limit.
enum { STOP_SIGNAL = 1, STOP_TIME_UP = 2 };
// The time limit's share of RECORD_STOP: above any count of signalling
// ranks, exact in a float sum.
#define RECORD_TIME_UP 4194304.0f

// One step: what the host measured when it queued it, then (after
// train_record_read) what its record says.
typedef struct StepTimes {
    long step;
    double lr;
    // forward, backward, optimizer: on the GPU the device's time from the
    // step's start mark to its end mark (train_record_read), on the CPU the
    // host's time to run them
    double batch_seconds;
    double data_seconds;    // waiting for the loader's batches
    double comm_wait_seconds;  // waiting for the gradient average after backward
    int images;
    // from the record
    float loss;             // mean over the micro-batches and the ranks
    int stop;               // a rank was asked to stop (SIGINT / SIGTERM)
    int time_up;            // rank 0's --max-time ran out
    float scalars[METHOD_MAX_SCALARS];  // the method's logged values
    float loss_scale;       // the scale the step used (scaler on)
    int skipped;            // the gate skipped the update (NaN/inf)
    char diverged[160];     // what became NaN or infinite ("the loss", ...), or ""
} StepTimes;

// Everything before the first step. Returns 0 or the exit status (2 bad
// input, 1 failure) after printing the message. train_teardown is safe after
// a partial set-up.
int train_setup(TrainRun *run, const TrainConfig *config, int argc, char **argv);
void train_teardown(TrainRun *run);
// Ends the loader (its workers warn into train.log) and the batch feed that
// reads its slots; before the logs close. Safe twice.
void train_loader_free(TrainRun *run);
// The end summary (console and train.log) and the final log lines.
void train_finish(TrainRun *run, RunTotals *totals, int status);
// A line on the console (through the progress display) and in train.log;
// rank 0 only (the others run the same steps and would repeat it).
void train_message(TrainRun *run, const char *format, ...) __attribute__((format(printf, 2, 3)));
// Sets the run's final message (see TrainRun) and returns status.
int train_stop(TrainRun *run, int status, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
// A failure seen by this rank alone: rank 0 prints it as train_message,
// other ranks to stderr with their rank.
void train_error(TrainRun *run, const char *format, ...) __attribute__((format(printf, 2, 3)));
// All ranks' statuses (0: fine) -> the exit status of the first rank that
// failed, the same on every rank (0 when none did). A rank other than 0
// prints its message only when rank 0 did not fail. A communication failure
// is fatal: the message is printed and every rank ends (comm_abort).
int train_agree(TrainRun *run, int status, const char *message);
// In the step record on the device: the step's loss -> its mean over the
// ranks, and the ranks' stop requests summed, the same on every rank (read
// back later with the record). 0, or 1 after a communication failure in a
// world of one (otherwise it ends every rank).
int train_agree_step(TrainRun *run);
// This rank's stop request into the record (a staged input), at the start
// of a step: its site's copy of the step before is then early in that step,
// ahead of its collectives, so the host rarely waits for it.
// stop_requested: STOP_* flags.
void train_stage_stop(TrainRun *run, int stop_requested);
// The record of times->step, queued into its slot, once the device has
// written it: the loss, stop, logged values, and what diverged (the
// messages of docs/training.md) into times. Waits for that step only (on
// GPU ranks within --dist-timeout: the NCCL communicator's watch).
void train_record_read(TrainRun *run, StepTimes *times);
// The record's scaler and host slots: set up after the backend, before the
// method (which takes the scale); freed by train_teardown.
int train_record_setup(TrainRun *run, ErrorMessage *err);
void train_record_free(TrainRun *run);
// CUDA graphs of the steps (train_graphs.c): step_graphs and its note from
// LTC_CUDA_GRAPHS and the run (-1 with err for a bad value); the kind
// (backend.h step_graph_begin) of a step's part: micro-batch `micro` of
// step `step`, of `images` images.
int train_graphs_decide(TrainRun *run, ErrorMessage *err);
uint64_t train_step_part_kind(const TrainRun *run, long step, int micro, int images);
// Fails (agreed: 1 on every rank) when some rank's weights differ from rank
// 0's after completed_steps.
int train_check_replicas(TrainRun *run, long completed_steps);
// Every rank was started with rank 0's data and settings (dist/rank_settings.h):
// 0, or 2 on every rank (the rank that differs says which setting).
int train_check_settings(TrainRun *run);
// MLflow (train_mlflow.c, rank 0): the client opened once the run is set
// up; the scalars of a log step; the run's end by the exit status, with
// its line in the end summary (safe to call twice, and without a client).
void train_mlflow_start(TrainRun *run, int argc, char **argv);
void train_mlflow_log(TrainRun *run, long step, const char *const *tags, const double *values,
                      size_t count);
void train_mlflow_end(TrainRun *run, int status);
// Early stops (train_stops.c). Lightning's Timer: the training time so far
// (the checkpoint's when resumed, plus this process's since its loop
// began), and whether it passed --max-time. Whether --min-epochs and
// --min-steps are reached after `completed` steps.
double train_time_elapsed(const TrainRun *run);
int train_time_is_up(const TrainRun *run);
int train_minimums_met(const TrainRun *run, long completed);
// After the record of step `completed` - 1 is read: the early stop due
// there (EARLY_STOP_*), or 0. Runs early_stopping's check at an epoch end
// (an agreement of the ranks, so every rank calls it at every step end it
// reads at once); a stop asked for before the minimums waits for them,
// said once in the log. _pending: whether one is due there, without the
// check (to read the step's record at once).
enum { EARLY_STOP_TIME = 1, EARLY_STOP_PATIENCE = 2 };
int train_early_stop(TrainRun *run, long completed, double loss);
int train_early_stop_pending(const TrainRun *run, long completed);
// What an early stop after `completed` steps writes besides train_save_due's:
// the epoch file where model_checkpoint's every_n_epochs has one at the end
// of that epoch (Lightning's epoch end runs after its stop, mid-epoch too).
int train_early_stop_saves(const TrainRun *run, long completed);
// The run's last line for an early stop (train_stop: status 0).
int train_early_stop_message(TrainRun *run, int reason, long completed);
// --max-time spent before the first step (Lightning's Timer at fit start),
// the minimums reached: a new run saves its initial model as --epochs 0
// does, a resumed one writes its export again from the checkpoint,
// untouched; returns 0 (1: the save failed). -1: the run trains.
int train_out_of_time(TrainRun *run);
// What a step's end writes: last.ckpt, the epoch=E-step=S.ckpt link to it,
// the export (train_save_due says which, from --callbacks).
enum { SAVE_CHECKPOINT = 1, SAVE_EPOCH_FILE = 2, SAVE_EXPORT = 4 };
int train_save_due(const TrainRun *run, long completed, int stop);
// After a barrier and the replica check, rank 0 writes the checkpoint and
// the export as `due` says (train_save); the status is agreed by all ranks.
int train_save_agreed(TrainRun *run, long completed_steps, int due);
// Writes last.ckpt and the exported backbone (one process's part of
// train_save_agreed); on failure the previous files stay.
int train_save(TrainRun *run, long completed_steps, int due, ErrorMessage *err);
// The output folder (train_out.c; rank 0 makes, locks and tidies it):
// "dir/name" into out, -1 when it does not fit in size bytes;
// train_out_prepare fills the checkpoint and export paths and runs
// train_out_check; train_out_lock takes --out's lock when the folder
// exists; train_out_create makes the layout once every check passed (the
// exit status: 2 when another run took the lock first); train_out_tidy
// removes temporaries of a killed run and, on --resume, the log records
// after the checkpoint.
int train_path_join(char *out, size_t size, const char *dir, const char *name);
// The .pt beside an export "X.safetensors": "X.pt" into out; -1 when it
// does not fit or export_path is not named so.
int train_export_pt_path(char *out, size_t size, const char *export_path);
int train_out_prepare(TrainRun *run, ErrorMessage *err);
int train_out_lock(TrainRun *run, ErrorMessage *err);
int train_out_create(TrainRun *run, ErrorMessage *err);
int train_out_tidy(TrainRun *run, ErrorMessage *err);
// A discarded run's event files, and the folders under --out made for them.
void train_out_discard_events(TrainRun *run);
// Before the checkpoint of an epoch file's step is written: 1 when its
// epoch file is to be kept. Without a monitor always; with one
// (model_checkpoint.monitor=train_loss) when `score`, the step's
// train_loss, is among the save_top_k best (train/kept_epochs.h): the list,
// which the checkpoint then holds, is updated, callback_state.evicted_step
// names the file it replaces (0: none) and train.log says what was decided.
int train_out_choose_epoch(TrainRun *run, long completed_steps, float score);
// After last.ckpt was written: checkpoints/epoch=E-step=S.ckpt (E from 0,
// S the steps done), as LightlyTrain's checkpoint callback keeps it
// (Lightning's ModelCheckpoint, save_top_k 1: the previous epoch's
// removed; with a monitor the evicted_step's). A hard link to last.ckpt's
// file: no copy (the next write of last.ckpt replaces the name, not the
// file). -1 with err when the link fails (last.ckpt, what --resume reads,
// is written either way).
int train_out_keep_epoch(TrainRun *run, long completed_steps, ErrorMessage *err);
// kNN top-1 of the backbone that is exported (DINO: the teacher) on the
// --knn-data folder, leave-one-out.
int train_knn_evaluate(TrainRun *run, double *top1, ErrorMessage *err);

#endif
