// --loggers entries (see loggers.h): which loggers run and MLflow's settings.
#include "cli/loggers.h"

#include <stdlib.h>
#include <string.h>
#include <strings.h>

// The keys of LightlyTrain's MLflow logger this program takes.
static const char *const mlflow_keys = "experiment_name, run_name, tracking_uri, tags.KEY";

// LightlyTrain's None: the logger is off.
static int is_null(const char *value) {
    return strcmp(value, "null") == 0 || strcmp(value, "None") == 0 || strcmp(value, "none") == 0;
}

// A path that is the same once normalised: relative, no empty, "." or ".."
// part between its '/' (a folder under --out, an MLflow name).
static int relative_folder(const char *path) {
    if (!path[0] || path[0] == '/') return 0;
    for (const char *part = path; part;) {
        const char *slash = strchr(part, '/');
        const size_t length = slash ? (size_t)(slash - part) : strlen(part);
        if (length == 0 || (length == 1 && part[0] == '.') ||
            (length == 2 && part[0] == '.' && part[1] == '.'))
            return 0;
        part = slash ? slash + 1 : NULL;
    }
    return 1;
}

// MLflow's rule for parameter, metric and tag names (utils/validation.py):
// letters, digits, '_', '-', '.', ' ', ':', '/', and a name that is the same
// path once normalised (relative_folder).
static int mlflow_name_valid(const char *name) {
    if (strlen(name) >= LOGGERS_TAG_KEY_BYTES) return 0;
    for (const unsigned char *c = (const unsigned char *)name; *c; c++)
        if (!(*c >= 0x80 || (*c >= '0' && *c <= '9') || (*c >= 'a' && *c <= 'z') ||
              (*c >= 'A' && *c <= 'Z') || strchr("_-. :/", *c)))
            return 0;
    return relative_folder(name);
}

static int uri_is_http(const char *uri) {
    return strncasecmp(uri, "http://", 7) == 0 || strncasecmp(uri, "https://", 8) == 0;
}

static int check_tracking_uri(const char *uri, const char *where, ErrorMessage *err) {
    if (uri_is_http(uri) && uri[strcspn(uri, ":") + 3] != '\0') return 0;
    return error_set(err, "%s=%.200s: lightly-train-c logs to an MLflow tracking server over its "
                          "REST API: give the server's http:// or https:// address (start one "
                          "with `mlflow server`)", where, uri);
}

// One "mlflow.KEY=VALUE" (after "mlflow."): key and value.
static int mlflow_entry(LoggerSettings *settings, const char *entry, const char *key,
                        size_t key_length, const char *value, ErrorMessage *err) {
    if (!value || !value[0])
        return error_set(err, "--loggers %.200s: expected mlflow.KEY=VALUE with a value", entry);
    if (key_length == 15 && strncmp(key, "experiment_name", 15) == 0)
        settings->experiment_name = value;
    else if (key_length == 8 && strncmp(key, "run_name", 8) == 0)
        settings->run_name = value;
    else if (key_length == 12 && strncmp(key, "tracking_uri", 12) == 0) {
        if (check_tracking_uri(value, "--loggers mlflow.tracking_uri", err)) return -1;
        settings->tracking_uri = value;
    } else if (key_length > 5 && strncmp(key, "tags.", 5) == 0) {
        if (settings->tag_count == LOGGERS_MAX_TAGS)
            return error_set(err, "--loggers: more than %d MLflow tags", LOGGERS_MAX_TAGS);
        char *tag = settings->tag_keys[settings->tag_count];
        const size_t tag_length = key_length - 5;
        if (tag_length >= LOGGERS_TAG_KEY_BYTES)
            return error_set(err, "--loggers %.200s: a tag name has at most %d characters", entry,
                             LOGGERS_TAG_KEY_BYTES - 1);
        memcpy(tag, key + 5, tag_length);
        tag[tag_length] = '\0';
        if (!mlflow_name_valid(tag))
            return error_set(err, "--loggers %.200s: MLflow takes tag names of letters, digits, "
                                  "'_', '-', '.', ' ', ':' and '/' (no empty, '.' or '..' part)",
                             entry);
        settings->tags[settings->tag_count++] = (MlflowPair){tag, value};
    } else {
        return error_set(err, "--loggers %.200s: MLflow's settings here are %s", entry,
                         mlflow_keys);
    }
    settings->mlflow = 1;
    return 0;
}

// LightlyTrain's TensorBoardLoggerArgs (Lightning's TensorBoardLogger with
// save_dir --out): name, version and sub_dir are folders under --out,
// prefix the scalars' prefix; default_hp_metric is taken (no hyperparameters
// go to TensorBoard here), log_graph only false.
static int tensorboard_entry(LoggerSettings *settings, const char *entry, const char *key,
                             const char *value, ErrorMessage *err) {
    const size_t key_length = value ? (size_t)(value - 1 - key) : strlen(key);
    const char **folder = NULL;
    if (key_length == 4 && !strncmp(key, "name", 4)) folder = &settings->tensorboard_name;
    else if (key_length == 7 && !strncmp(key, "version", 7))
        folder = &settings->tensorboard_version;
    else if (key_length == 7 && !strncmp(key, "sub_dir", 7))
        folder = &settings->tensorboard_sub_dir;
    if (!value)
        return error_set(err, "--loggers %.200s: expected tensorboard.KEY=VALUE", entry);
    if (folder) {  // "" (LightlyTrain's default) and None: no folder
        if (value[0] && !is_null(value) && !relative_folder(value))
            return error_set(err, "--loggers %.200s: a folder under --out (no '..', not "
                                  "absolute)", entry);
        *folder = value[0] && !is_null(value) ? value : NULL;
    } else if (key_length == 6 && !strncmp(key, "prefix", 6)) {
        settings->tensorboard_prefix = value[0] ? value : NULL;
    } else if (key_length == 17 && !strncmp(key, "default_hp_metric", 17)) {
    } else if (key_length == 9 && !strncmp(key, "log_graph", 9)) {
        if (strcmp(value, "false") && strcmp(value, "False") && strcmp(value, "0"))
            return error_set(err, "--loggers %.200s: no model graph is written (log_graph "
                                  "false only)", entry);
    } else {
        return error_set(err, "--loggers %.200s: tensorboard's settings here are name, version, "
                              "sub_dir, prefix, default_hp_metric and log_graph", entry);
    }
    settings->tensorboard = 1;
    return 0;
}

// LightlyTrain's JSONLLoggerArgs: flush_logs_every_n_steps, how often
// Lightning writes its buffered lines. Taken when it is a count; the lines
// are written as they come (a killed run keeps every logged step).
static int jsonl_entry(const char *entry, const char *key, const char *value, ErrorMessage *err) {
    const size_t key_length = value ? (size_t)(value - 1 - key) : strlen(key);
    if (key_length != 24 || strncmp(key, "flush_logs_every_n_steps", 24) != 0)
        return error_set(err, "--loggers %.200s: jsonl's setting is flush_logs_every_n_steps",
                         entry);
    char *end = NULL;
    const long steps = value ? strtol(value, &end, 10) : 0;
    if (!value || end == value || *end || steps < 1)
        return error_set(err,
                         "--loggers %.200s: expected jsonl.flush_logs_every_n_steps=N, N >= 1",
                         entry);
    return 0;
}

int loggers_parse(const StringList *entries, LoggerSettings *settings, ErrorMessage *err) {
    memset(settings, 0, sizeof *settings);
    settings->tensorboard = 1;
    settings->jsonl = 1;
    int mlflow_off = 0;
    for (int i = 0; i < entries->count; i++) {
        const char *entry = entries->items[i];
        const size_t name_length = strcspn(entry, ".=");
        const char *after = entry + name_length;
        const char *value = strchr(entry, '=') ? strchr(entry, '=') + 1 : NULL;
        const int mlflow = name_length == 6 && strncmp(entry, "mlflow", 6) == 0;
        const int tensorboard = name_length == 11 && strncmp(entry, "tensorboard", 11) == 0;
        const int jsonl = name_length == 5 && strncmp(entry, "jsonl", 5) == 0;
        const char *name = mlflow ? "mlflow" : tensorboard ? "tensorboard" : "jsonl";
        if (!mlflow && !tensorboard && !jsonl)
            return error_set(err, "--loggers %.200s: the loggers are mlflow, tensorboard and "
                                  "jsonl%s", entry, strncmp(entry, "wandb", 5) == 0
                                  ? " (no Weights & Biases: log to MLflow or TensorBoard)" : "");
        if (*after == '.' && jsonl) {
            if (jsonl_entry(entry, after + 1, value, err)) return -1;
            settings->jsonl = 1;
        } else if (*after == '.' && mlflow) {
            const char *key = after + 1;
            const size_t key_length = value ? (size_t)(value - 1 - key) : strlen(key);
            if (mlflow_entry(settings, entry, key, key_length, value, err)) return -1;
        } else if (*after == '.') {
            if (tensorboard_entry(settings, entry, after + 1, value, err)) return -1;
        } else if (value && is_null(value)) {
            if (mlflow) mlflow_off = 1;
            if (tensorboard) settings->tensorboard = 0;
            if (jsonl) settings->jsonl = 0;
        } else if (!value || strcmp(value, "{}") == 0) {
            if (mlflow) settings->mlflow = 1;
            if (tensorboard) settings->tensorboard = 1;
            if (jsonl) settings->jsonl = 1;
        } else {
            return error_set(err, "--loggers %.200s: expected %s, %s=null or %s.KEY=VALUE", entry,
                             name, name, name);
        }
    }
    if (mlflow_off && settings->mlflow)
        return error_set(err, "--loggers: mlflow=null, and MLflow named or set too");
    return 0;
}

int loggers_resolve_tracking_uri(LoggerSettings *settings, ErrorMessage *err) {
    if (!settings->mlflow || settings->tracking_uri) return 0;
    const char *uri = getenv("MLFLOW_TRACKING_URI");
    if (!uri || !uri[0])
        return error_set(err, "--loggers mlflow: no tracking server: give "
                              "mlflow.tracking_uri=http://HOST:PORT or set MLFLOW_TRACKING_URI "
                              "(lightly-train-c logs to an MLflow server, not to a local mlruns "
                              "folder)");
    if (check_tracking_uri(uri, "MLFLOW_TRACKING_URI", err)) return -1;
    settings->tracking_uri = uri;
    return 0;
}
