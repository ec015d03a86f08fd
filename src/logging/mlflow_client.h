// The MLflow client of `train` (docs/mlflow.md): a run on an MLflow
// tracking server with the command's parameters and tags, every logged
// scalar as a metric, artifacts and the final status, sent over MLflow's
// REST API (mlflow_rest.h) by a thread of its own.
//
// The training thread only hands values over (mlflow_client_log: a copy
// into a bounded queue under a mutex, never a network wait), so a server
// that is down, slow or refuses never stops or slows training. The sender
// opens the run (the experiment made when missing, or the run to continue),
// logs the parameters and tags, then sends the queued values in batches of
// at most MLFLOW_BATCH_METRICS (runs/log-batch); a batch that fails is sent
// again after an exponential back-off (MLFLOW_BACKOFF_FIRST_SECONDS doubled
// up to MLFLOW_BACKOFF_MAX_SECONDS) until the server takes it, so a server
// restarted mid-run loses nothing the queue held (MLflow drops exact
// duplicates: a batch the server stored but whose answer was lost is not
// stored twice). When the queue is full the OLDEST queued value is
// dropped for each new one, and counted: the latest values, the ones a
// reader compares runs by, are the last to go. A request the server
// refuses (HTTP 4xx) is not sent again; a refused run ends the client.
//
// mlflow_client_finish ends the run: the queue is sent, then the artifacts
// (through the server's artifact proxy, where it serves the run's
// artifacts), then the status with the end time. It waits at most
// flush_seconds for that (an upload that progresses is not cut; a server
// never reached during the run gets one more attempt, not the wait), then
// abandons what is left and says in one line what was not sent.
#ifndef LTC_LOGGING_MLFLOW_CLIENT_H
#define LTC_LOGGING_MLFLOW_CLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "util/error.h"

#define MLFLOW_BATCH_METRICS 1000  // runs/log-batch: at most 1000 metrics per request
#define MLFLOW_BATCH_PARAMS 100    // ... and 100 params, 100 tags
#define MLFLOW_PARAM_VALUE_BYTES 6000  // longer values are cut (MLflow's limit: 6000)
#define MLFLOW_TAG_VALUE_BYTES 8000
#define MLFLOW_QUEUE_VALUES 100000  // default queue: values held while unsent
#define MLFLOW_MAX_METRIC_KEYS 256  // distinct metric names in a run
#define MLFLOW_BACKOFF_FIRST_SECONDS 0.5
#define MLFLOW_BACKOFF_MAX_SECONDS 16.0
#define MLFLOW_FLUSH_BACKOFF_MAX_SECONDS 1.0  // while finishing
#define MLFLOW_FLUSH_SECONDS 30.0   // default wait at the end

typedef struct MlflowPair {
    const char *key, *value;
} MlflowPair;

typedef struct MlflowSettings {
    const char *tracking_uri;     // http(s)://host:port[/prefix]
    const char *experiment_name;  // created when missing; NULL or "": "Default"
    const char *run_name;         // NULL: the server names the run
    const MlflowPair *tags;       // set on the run (again when it is continued)
    int tag_count;
    const MlflowPair *params;     // logged once; a continued run gets only those it lacks
    int param_count;
    const char *resume_run_id;    // continue this run (set RUNNING again); NULL: a new run
    // Where the run's id is written (atomically, "run_id=ID\ntracking_uri=URI\n")
    // once the run is open, for a later --resume; NULL: nowhere.
    const char *run_file;
    size_t queue_values;          // 0: MLFLOW_QUEUE_VALUES
} MlflowSettings;

typedef struct MlflowClient MlflowClient;

// Copies the settings and starts the sender; fails only for want of memory
// or a thread (the server is reached by the sender, later).
int mlflow_client_start(MlflowClient **client, const MlflowSettings *settings, ErrorMessage *err);

// Queues the values of keys at step, stamped with the wall clock now.
// Never waits for the network.
void mlflow_client_log(MlflowClient *client, int64_t step, const char *const *keys,
                       const double *values, size_t count);

// A line about the connection worth showing (the server cannot be reached,
// answers again, refused the run), once each time it changes: 1 with the
// oldest line not yet taken in out, else 0. Up to MLFLOW_NOTICES lines
// wait (then the oldest goes), so a warning and the line that ends it both
// show however late they are taken.
enum { MLFLOW_NOTICES = 8 };
int mlflow_client_notice(MlflowClient *client, char *out, size_t size);

typedef struct MlflowArtifact {
    const char *name;  // the artifact's name in the run
    const char *path;  // the file (skipped when it does not exist)
} MlflowArtifact;

// Ends the run with status (FINISHED, FAILED, KILLED) after the queue and
// the artifacts, as described above; stops the sender. report: one line
// naming the run and what was sent, or what was not and why.
void mlflow_client_finish(MlflowClient *client, const char *status,
                          const MlflowArtifact *artifacts, int artifact_count,
                          double flush_seconds, char *report, size_t size);

// Stops the sender if still running (what is queued is abandoned) and
// frees; client may be NULL.
void mlflow_client_free(MlflowClient *client);

#endif
