// --loggers of `train`: LightlyTrain's `loggers` in its spelling and
// meaning (docs/mlflow.md). Each entry is LOGGER, LOGGER=null or
// LOGGER.KEY=VALUE; LightlyTrain's nested form loggers.LOGGER.KEY=VALUE
// gives the same entry (the option is dotted, cli/options.h):
//   mlflow                               log to MLflow too (off unless named)
//   mlflow.experiment_name=NAME          the experiment (made when missing;
//                                        default MLflow's "Default")
//   mlflow.run_name=NAME                 the run's name (default: the server's)
//   mlflow.tracking_uri=http://HOST:PORT the tracking server (default: the
//                                        MLFLOW_TRACKING_URI variable, as MLflow)
//   mlflow.tags.KEY=VALUE                a tag of the run (repeatable)
//   mlflow=null                          no MLflow (the default)
//   tensorboard=null                     no TensorBoard event files (on by default)
//   tensorboard.name=N, .version=V, .sub_dir=S   the event files in OUT/N/V/S (Lightning's
//                                        TensorBoardLogger(save_dir=OUT, ...) folders)
//   tensorboard.prefix=P                 scalars named P-TAG (Lightning's "-")
//   tensorboard.default_hp_metric=B      taken (no hyperparameters are logged to TensorBoard)
//   tensorboard.log_graph=false          taken (no model graph: true is refused)
//   jsonl=null                           no metrics.jsonl (on by default)
//   jsonl.flush_logs_every_n_steps=N     taken (N >= 1): each line is written and
//                                        flushed as its step is logged
// A KEY sets its logger on. Anything else, or a value MLflow would refuse
// (a tracking URI that is not http(s), a tag name MLflow does not take),
// is a usage error naming the entry.
#ifndef LTC_CLI_LOGGERS_H
#define LTC_CLI_LOGGERS_H

#include "cli/options.h"
#include "logging/mlflow_client.h"
#include "util/error.h"

#define LOGGERS_MAX_TAGS OPTIONS_MAX_REPEATS
#define LOGGERS_TAG_KEY_BYTES 251  // MLflow: names of at most 250 characters

typedef struct LoggerSettings {
    int tensorboard;  // 1 unless tensorboard=null
    int jsonl;        // 1 unless jsonl=null: metrics.jsonl
    // TensorBoard's folder parts under --out and its scalars' prefix (into argv; NULL: none).
    const char *tensorboard_name, *tensorboard_version, *tensorboard_sub_dir,
        *tensorboard_prefix;
    int mlflow;       // 1 when named
    // Pointers into argv (or the environment), NULL when not given.
    const char *experiment_name, *run_name, *tracking_uri;
    MlflowPair tags[LOGGERS_MAX_TAGS];  // keys in tag_keys, values into argv
    char tag_keys[LOGGERS_MAX_TAGS][LOGGERS_TAG_KEY_BYTES];
    int tag_count;
} LoggerSettings;

// The entries of --loggers into settings (set to the defaults first).
// 0, or -1 with a one-line message naming the entry.
int loggers_parse(const StringList *entries, LoggerSettings *settings, ErrorMessage *err);

// MLflow's tracking URI: the one given, else MLFLOW_TRACKING_URI; an error
// when MLflow is on and there is none, or it is not http(s). The rank
// that talks to the server (0) checks it: the variable is its own.
int loggers_resolve_tracking_uri(LoggerSettings *settings, ErrorMessage *err);

#endif
