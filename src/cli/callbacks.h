// --callbacks of `train`: LightlyTrain's `callbacks` in its spelling and
// meaning (Lightning's callbacks as LightlyTrain 0.18 sets them up;
// docs/training.md "Checkpoints, exports and early stopping"). Each entry
// is CALLBACK=null, CALLBACK or CALLBACK.KEY=VALUE; LightlyTrain's nested
// form callbacks.CALLBACK.KEY=VALUE gives the same entry:
//   model_checkpoint.every_n_epochs=N       last.ckpt (and the epoch file)
//                                           every N epochs (default 1)
//   model_checkpoint.every_n_train_steps=N  every N optimizer steps instead
//   model_checkpoint.save_top_k=K           the epoch=E-step=S.ckpt files kept:
//                                           1 the latest (default), -1 all, 0 none;
//                                           with a monitor the K best (K up to
//                                           CALLBACKS_TOP_K_MAX)
//   model_checkpoint.monitor=train_loss     the K with the lowest train_loss at
//                                           their save (null, the default: by recency)
//   model_checkpoint.mode=min|max           max: the K highest instead
//   model_checkpoint.save_last=true         (last.ckpt is always written)
//   model_checkpoint.verbose, save_weights_only=false,
//     save_on_train_epoch_end=true, auto_insert_metric_name=true,
//     enable_version_counter=false, dirpath=null, filename={epoch}-{step},
//     train_time_interval=null              LightlyTrain's other settings, taken at
//                                           what they do here (verbose prints
//                                           nothing more: train.log says which
//                                           epoch files are kept)
//   model_export.every_n_epochs=N           exported_models/ every N epochs
//                                           (default 1); model_export=null: at
//                                           the end only
//   early_stopping.monitor=train_loss       (the one metric monitored)
//   early_stopping.patience=N               stop after N epoch ends whose
//                                           train_loss is no lower than the best
//   early_stopping.check_finite=true        (a NaN or infinite loss always stops
//                                           the run: exit 1)
//   early_stopping=null                     no patience stop (the default:
//                                           LightlyTrain's patience is 10^12)
//   learning_rate_monitor=null              no lr-* scalars in the logs
//   device_stats_monitor                    Lightning's DeviceStatsMonitor (off by
//                                           default): CPU and device memory scalars
//                                           every --log-every steps
//                                           (logging/device_stats.h)
//   device_stats_monitor.cpu_stats=B        true: the CPU's too on the GPU; false: not
//                                           on the CPU; null (default): on the CPU only
// Every run also writes last.ckpt and the export at its last step and
// when stopped by a signal. Anything else (another key, a monitor other
// than train_loss, save_last=false, model_checkpoint=null, save_top_k above
// 1 without a monitor, as Lightning refuses it) is a usage error naming the
// entry and what is taken.
#ifndef LTC_CLI_CALLBACKS_H
#define LTC_CLI_CALLBACKS_H

#include "cli/options.h"
#include "util/error.h"

// The most epoch files save_top_k keeps by a monitor (their steps and
// scores live in the checkpoint); -1 keeps every one without a limit.
#define CALLBACKS_TOP_K_MAX 1000

typedef struct CallbackSettings {
    long checkpoint_every_epochs;  // model_checkpoint.every_n_epochs (1)
    long checkpoint_every_steps;   // model_checkpoint.every_n_train_steps (0: by epochs)
    int keep_epoch_checkpoints;    // model_checkpoint.save_top_k: K, -1 (all) or 0
    int monitor_loss;              // model_checkpoint.monitor=train_loss: the K best kept
    int monitor_max;               // model_checkpoint.mode=max (the highest losses)
    long export_every_epochs;      // model_export.every_n_epochs (1; 0: the end only)
    long early_stopping_patience;  // early_stopping.patience (0: off)
    int log_learning_rate;         // learning_rate_monitor (1; null: 0)
    int device_stats;              // device_stats_monitor given (0: off, the default)
    int device_cpu_stats;          // its cpu_stats: -1 null (the CPU's on the CPU only), 0, 1
} CallbackSettings;

// LightlyTrain's defaults: checkpoint and export every epoch, the latest
// epoch file kept, no patience stop, the learning rates logged.
CallbackSettings callbacks_default(void);

// The entries of --callbacks into settings (set to the defaults first).
// 0, or -1 with a one-line message naming the entry.
int callbacks_parse(const StringList *entries, CallbackSettings *settings, ErrorMessage *err);

#endif
