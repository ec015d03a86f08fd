// libFuzzer target: what the MLflow client reads of a tracking server's
// answers (logging/mlflow_answers.h), on arbitrary bytes: the run of a
// runs/get or runs/create answer, and any JSON value skipped whole. A
// server is not trusted: every answer must be refused or read in bounds.
#include <stdlib.h>
#include <string.h>

#include "logging/mlflow_answers.h"
#include "nn/json_scan.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    char *text = malloc(size + 1);  // answers are read as C strings
    if (!text) return 0;
    memcpy(text, data, size);
    text[size] = '\0';
    MlflowRunInfo info;
    memset(&info, 0, sizeof info);
    ErrorMessage err;
    if (mlflow_run_info_parse(text, &info, &err) == 0) {
        if (!info.run_id[0] || strlen(info.artifact_uri) >= sizeof info.artifact_uri) abort();
        for (int i = 0; i < info.param_count; i++)
            if (!info.param_keys[i]) abort();
    }
    mlflow_run_info_free(&info);
    JsonScanner scanner;
    json_scanner_init(&scanner, (const char *)data, size);
    if (json_skip_value(&scanner, &err) == 0 && scanner.pos > size) abort();
    free(text);
    return 0;
}
