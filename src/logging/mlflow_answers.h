// What the MLflow client reads of a tracking server's JSON answers
// (mlflow_rest.h): a string at a path of member names, and the run of a
// runs/create or runs/get answer. Answers are not trusted: they are read
// with the bounds-checked scanner (nn/json_scan.h), every string into a
// buffer of known size; tests/fuzz/fuzz_mlflow_answer.c feeds them
// arbitrary bytes.
#ifndef LTC_LOGGING_MLFLOW_ANSWERS_H
#define LTC_LOGGING_MLFLOW_ANSWERS_H

#include <stddef.h>

#include "util/error.h"

// Ids and names the client keeps (MLflow's run ids are 32 hex digits).
#define MLFLOW_ID_BYTES 128
#define MLFLOW_URI_BYTES 2048

// The string at path (member names, NULL-terminated) of the JSON object
// answer into out (size bytes); -1 with err when it is not there.
int mlflow_answer_string(const char *answer, const char *const *path, char *out, size_t size,
                         ErrorMessage *err);

typedef struct MlflowRunInfo {
    char run_id[MLFLOW_ID_BYTES];
    char experiment_id[MLFLOW_ID_BYTES];
    char status[32];           // RUNNING, FINISHED, FAILED, KILLED, SCHEDULED
    char lifecycle_stage[32];  // "active" or "deleted"
    char artifact_uri[MLFLOW_URI_BYTES];
    char **param_keys;         // the run's parameters' names (mlflow_run_info_free)
    int param_count;
} MlflowRunInfo;

// The "run" of a runs/create or runs/get answer (JSON text, not trusted)
// into info (free it with mlflow_run_info_free); -1 with err when the
// answer has no run_id or is not JSON.
int mlflow_run_info_parse(const char *response, MlflowRunInfo *info, ErrorMessage *err);
void mlflow_run_info_free(MlflowRunInfo *info);

#endif
