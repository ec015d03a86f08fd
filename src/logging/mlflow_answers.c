// MLflow's answers, read (see mlflow_answers.h).
#include "logging/mlflow_answers.h"

#include <stdlib.h>
#include <string.h>

#include "nn/json_scan.h"

// Reads the string members names[i] of the object at the cursor into
// outs[i] (sizes[i] bytes); skips the others. Missing ones stay as they are.
static int read_members(JsonScanner *scanner, const char *const *names, char **outs,
                        const size_t *sizes, int count, ErrorMessage *err) {
    if (json_expect(scanner, '{', err)) return -1;
    if (json_peek(scanner) == '}') return scanner->pos++, 0;
    for (;;) {
        char name[64];
        if (json_read_string(scanner, name, sizeof name, err) || json_expect(scanner, ':', err))
            return -1;
        int wanted = -1;
        for (int i = 0; i < count; i++)
            if (strcmp(name, names[i]) == 0) wanted = i;
        if (wanted >= 0 && json_peek(scanner) == '"') {
            if (json_read_string(scanner, outs[wanted], sizes[wanted], err)) return -1;
        } else if (json_skip_value(scanner, err)) {
            return -1;
        }
        const int more = json_next_item(scanner, '}', err);
        if (more <= 0) return more;
    }
}

// Moves the cursor down the members of path (NULL-terminated names).
static int descend(JsonScanner *scanner, const char *const *path, ErrorMessage *err) {
    for (; *path; path++) {
        const int found = json_find_member(scanner, *path, err);
        if (found <= 0) return found ? -1 : error_set(err, "no \"%s\" in the answer", *path);
    }
    return 0;
}

int mlflow_answer_string(const char *answer, const char *const *path, char *out, size_t size,
                         ErrorMessage *err) {
    JsonScanner scanner;
    json_scanner_init(&scanner, answer, strlen(answer));
    return descend(&scanner, path, err) || json_read_string(&scanner, out, size, err) ? -1 : 0;
}

int mlflow_run_info_parse(const char *response, MlflowRunInfo *info, ErrorMessage *err) {
    static const char *const info_path[] = {"run", "info", NULL};
    static const char *const names[] = {"run_id", "experiment_id", "status", "lifecycle_stage",
                                        "artifact_uri"};
    char *outs[] = {info->run_id, info->experiment_id, info->status, info->lifecycle_stage,
                    info->artifact_uri};
    const size_t sizes[] = {sizeof info->run_id, sizeof info->experiment_id, sizeof info->status,
                            sizeof info->lifecycle_stage, sizeof info->artifact_uri};
    JsonScanner scanner;
    json_scanner_init(&scanner, response, strlen(response));
    if (descend(&scanner, info_path, err) || read_members(&scanner, names, outs, sizes, 5, err))
        return -1;
    if (!info->run_id[0]) return error_set(err, "the answer has no run_id");
    // The parameters' names: {"run": {"data": {"params": [{"key": ..., "value": ...}]}}}
    static const char *const params_path[] = {"run", "data", "params", NULL};
    json_scanner_init(&scanner, response, strlen(response));
    ErrorMessage absent;
    if (descend(&scanner, params_path, &absent) || json_expect(&scanner, '[', &absent) ||
        json_peek(&scanner) == ']')
        return 0;  // none
    for (;;) {
        char key[256] = "";
        static const char *const key_name[] = {"key"};
        char *key_out[] = {key};
        const size_t key_size[] = {sizeof key};
        if (read_members(&scanner, key_name, key_out, key_size, 1, err)) return -1;
        char **grown = realloc(info->param_keys, (size_t)(info->param_count + 1) * sizeof *grown);
        if (!grown || !(grown[info->param_count] = strdup(key))) {
            if (grown) info->param_keys = grown;
            return error_set(err, "out of memory");
        }
        info->param_keys = grown;
        info->param_count++;
        const int more = json_next_item(&scanner, ']', err);
        if (more <= 0) return more;
    }
}

void mlflow_run_info_free(MlflowRunInfo *info) {
    for (int i = 0; i < info->param_count; i++) free(info->param_keys[i]);
    free(info->param_keys);
    info->param_keys = NULL;
    info->param_count = 0;
}

