// MLflow's tracking REST API (version 2.0) over libcurl, one call at a time:
// what the MLflow client (mlflow_client.h) needs of a tracking server.
// Every call says whether it worked, is worth retrying (no connection, a
// stall, HTTP 408, 429, 5xx: a server down, slow or restarting), or was
// refused (any other 4xx: the request itself is wrong there; err carries
// MLflow's error_code and message). Calls block the calling thread (the
// client's sender, never the training thread) for at most
// MLFLOW_REST_TIMEOUT_SECONDS, and uploads until the transfer stalls for
// MLFLOW_REST_STALL_SECONDS; setting *abandon ends a call in progress at
// once (as a failure to retry). Proxies (http_proxy, https_proxy,
// no_proxy) as libcurl reads them; https with the system's CA bundle
// (weights_ca_bundle, as downloads).
#ifndef LTC_LOGGING_MLFLOW_REST_H
#define LTC_LOGGING_MLFLOW_REST_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "logging/mlflow_answers.h"
#include "util/error.h"

#define MLFLOW_REST_CONNECT_SECONDS 10
#define MLFLOW_REST_TIMEOUT_SECONDS 60
#define MLFLOW_REST_STALL_SECONDS 30

typedef enum MlflowOutcome {
    MLFLOW_OK = 0,
    MLFLOW_RETRY = 1,    // no answer, or a server-side failure: try again later
    MLFLOW_REFUSED = 2,  // the server refused the request: trying again changes nothing
} MlflowOutcome;

typedef struct MlflowRest MlflowRest;

// tracking_uri: "http://host:port[/prefix]" or https (a trailing '/' is
// dropped). abandon: read by every transfer in progress; may be NULL.
int mlflow_rest_open(MlflowRest **rest, const char *tracking_uri, const atomic_int *abandon,
                     ErrorMessage *err);
void mlflow_rest_close(MlflowRest *rest);

// method "GET" or "POST"; path from the root, e.g. "/api/2.0/mlflow/runs/get?run_id=X";
// body: JSON for a POST. On MLFLOW_OK the response is *response (NUL-terminated,
// owned by rest, valid until the next call).
MlflowOutcome mlflow_rest_call(MlflowRest *rest, const char *method, const char *path,
                               const char *body, const char **response, ErrorMessage *err);

// The experiment named name (created when missing) -> its id.
MlflowOutcome mlflow_experiment_id(MlflowRest *rest, const char *name,
                                   char id[MLFLOW_ID_BYTES], ErrorMessage *err);

// runs/create: a RUNNING run in the experiment, started at start_time_ms;
// body_tags: the JSON array of its tags ("[{...}, ...]").
MlflowOutcome mlflow_run_create(MlflowRest *rest, const char *experiment_id, const char *run_name,
                                int64_t start_time_ms, const char *body_tags, MlflowRunInfo *info,
                                ErrorMessage *err);
// runs/get.
MlflowOutcome mlflow_run_get(MlflowRest *rest, const char *run_id, MlflowRunInfo *info,
                             ErrorMessage *err);
// runs/update: status, and end_time_ms when > 0.
MlflowOutcome mlflow_run_update(MlflowRest *rest, const char *run_id, const char *status,
                                int64_t end_time_ms, ErrorMessage *err);

// 1 when the server serves artifact_uri itself (mlflow-artifacts:, the
// artifact proxy of `mlflow server --serve-artifacts`), so that
// mlflow_artifact_put can upload there.
int mlflow_artifacts_served(const char *artifact_uri);
// PUTs the file at path as artifact_uri/name through the artifact proxy.
MlflowOutcome mlflow_artifact_put(MlflowRest *rest, const char *artifact_uri, const char *name,
                                  const char *path, ErrorMessage *err);

#endif
