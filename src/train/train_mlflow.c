// `train` on an MLflow tracking server (--loggers mlflow, docs/mlflow.md):
// rank 0 opens the MLflow client once the run is set up, with the command's
// options as given and as resolved as parameters; every scalar the run
// logs (TensorBoard's) goes to it too; the run's end sets its status
// (FINISHED, FAILED, or KILLED after SIGINT / SIGTERM) with train.log and,
// when finished, the exported backbone as artifacts, and says in the end
// summary what could not be sent. The run's id is kept in
// <out>/mlflow_run.txt so that --resume continues the same MLflow run.
#include <math.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "logging/mlflow_rest.h"
#include "train/train_run.h"

#define RUN_FILE_NAME "mlflow_run.txt"
#define RESOLVED_PARAMS 24

// The resolved settings, as "resolved.<name>" parameters.
typedef struct ResolvedParams {
    MlflowPair pairs[RESOLVED_PARAMS];
    char values[RESOLVED_PARAMS][sizeof ((TrainRun *)0)->identity_input];
    int count;
} ResolvedParams;

static void resolved_add(ResolvedParams *params, const char *key, const char *format, ...)
    __attribute__((format(printf, 3, 4)));
static void resolved_add(ResolvedParams *params, const char *key, const char *format, ...) {
    if (params->count == RESOLVED_PARAMS) return;
    char *value = params->values[params->count];
    va_list args;
    va_start(args, format);
    vsnprintf(value, sizeof params->values[0], format, args);
    va_end(args);
    params->pairs[params->count++] = (MlflowPair){key, value};
}

static void resolve_params(const TrainRun *run, ResolvedParams *params) {
    const Method *method = &run->method;
    const long epochs = (run->total_steps + run->steps_per_epoch - 1) / run->steps_per_epoch;
    resolved_add(params, "resolved.model", "%s", run->model_name);
    resolved_add(params, "resolved.method", "%s", run->identity.method);
    resolved_add(params, "resolved.optimizer", "%s", run->identity.optimizer);
    resolved_add(params, "resolved.lr", "%.9g", run->base_lr);
    resolved_add(params, "resolved.weight_decay", "%.9g", run->weight_decay);
    resolved_add(params, "resolved.batch_size", "%d", run->batch_size * run->world_size);
    resolved_add(params, "resolved.batch_size_per_rank", "%d", run->batch_size);
    resolved_add(params, "resolved.ranks", "%d", run->world_size);
    resolved_add(params, "resolved.accumulate_grad_batches", "%d", run->accumulate);
    resolved_add(params, "resolved.steps_per_epoch", "%ld", run->steps_per_epoch);
    resolved_add(params, "resolved.epochs", "%ld", epochs);
    resolved_add(params, "resolved.total_steps", "%ld", run->total_steps);
    resolved_add(params, "resolved.warmup_steps", "%ld", run->warmup_steps);
    resolved_add(params, "resolved.log_every", "%d", run->log_every);
    resolved_add(params, "resolved.num_workers", "%d", run->num_workers);
    resolved_add(params, "resolved.precision", "%s", run->precision);
    resolved_add(params, "resolved.backend", "%s", run->backend->name);
    resolved_add(params, "resolved.image_size", "%d", method->global_size);
    if (method->local_size > 0)
        resolved_add(params, "resolved.local_image_size", "%d", method->local_size);
    resolved_add(params, "resolved.views", "%d", method->views.count);
    resolved_add(params, "resolved.dataset_size", "%zu", run->dataset.count);
    resolved_add(params, "resolved.input", "%s", run->identity_input);
}

// The MLflow run the interrupted training logged to, from <out>/mlflow_run.txt
// when it was on this tracking server (run_id: "" otherwise).
static void previous_run(const TrainRun *run, const char *path, const char *uri, char *run_id,
                         size_t size) {
    run_id[0] = '\0';
    FILE *file = fopen(path, "r");
    if (!file) return;
    char line[MLFLOW_URI_BYTES + 32], id[MLFLOW_ID_BYTES] = "";
    char previous_uri[MLFLOW_URI_BYTES] = "";
    while (fgets(line, sizeof line, file)) {
        line[strcspn(line, "\n")] = '\0';
        if (strncmp(line, "run_id=", 7) == 0)
            snprintf(id, sizeof id, "%.*s", (int)sizeof id - 1, line + 7);
        if (strncmp(line, "tracking_uri=", 13) == 0)
            snprintf(previous_uri, sizeof previous_uri, "%.*s", (int)sizeof previous_uri - 1,
                     line + 13);
    }
    fclose(file);
    if (!id[0]) return;
    if (strcmp(previous_uri, uri) != 0) {
        train_message((TrainRun *)run, "MLflow: the interrupted training was logged to %s, not "
                                       "%s: this one gets a new MLflow run", previous_uri, uri);
        return;
    }
    snprintf(run_id, size, "%s", id);
}

// The command line, as it can be pasted into a shell (a tag of the run).
static char *command_text(int argc, char **argv) {
    char *text = NULL;
    size_t size = 0;
    FILE *out = open_memstream(&text, &size);
    if (!out) return NULL;
    fputs("lightly-train-c ", out);  // argv[0] is the sub-command
    shell_quote_args(out, argc, argv);
    fclose(out);
    return text;
}

void train_mlflow_start(TrainRun *run, int argc, char **argv) {
    const TrainConfig *config = run->config;
    const LoggerSettings *loggers = config->loggers;
    if (run->rank != 0) return;
    char run_file[PATH_MAX];
    snprintf(run_file, sizeof run_file, "%s/%s", config->out, RUN_FILE_NAME);
    if (!config->resume) unlink(run_file);  // another run's, never to be continued
    if (!loggers || !loggers->mlflow) return;
    char resume_id[MLFLOW_ID_BYTES] = "";
    if (config->resume)
        previous_run(run, run_file, loggers->tracking_uri, resume_id, sizeof resume_id);
    ResolvedParams resolved = {0};
    resolve_params(run, &resolved);
    MlflowPair params[OPTIONS_MAX_SPECS + RESOLVED_PARAMS];
    int param_count = 0;
    for (int i = 0; i < config->option_count; i++) params[param_count++] = config->options[i];
    for (int i = 0; i < resolved.count; i++) params[param_count++] = resolved.pairs[i];
    MlflowPair tags[LOGGERS_MAX_TAGS + 4];
    int tag_count = 0;
    const struct passwd *user = getpwuid(getuid());
    char *command = command_text(argc, argv);
    tags[tag_count++] = (MlflowPair){"mlflow.source.name", "lightly-train-c"};
    tags[tag_count++] = (MlflowPair){"mlflow.source.type", "LOCAL"};
    if (user) tags[tag_count++] = (MlflowPair){"mlflow.user", user->pw_name};
    if (command) tags[tag_count++] = (MlflowPair){"command", command};
    for (int i = 0; i < loggers->tag_count; i++) tags[tag_count++] = loggers->tags[i];
    const char *queue = getenv("LTC_MLFLOW_QUEUE_VALUES");  // tests: a small queue
    const MlflowSettings settings = {
        .tracking_uri = loggers->tracking_uri,
        .experiment_name = loggers->experiment_name,
        .run_name = loggers->run_name,
        .tags = tags,
        .tag_count = tag_count,
        .params = params,
        .param_count = param_count,
        .resume_run_id = resume_id[0] ? resume_id : NULL,
        .run_file = run_file,
        .queue_values = queue ? strtoul(queue, NULL, 10) : 0,
    };
    ErrorMessage err = {{0}};
    if (mlflow_client_start(&run->mlflow, &settings, &err))
        train_message(run, "warning: MLflow: %s: this run is not logged to MLflow", err.text);
    free(command);
    run_log_line(run->log, "MLflow: logging to %s, experiment %s%s%s", loggers->tracking_uri,
                 loggers->experiment_name ? loggers->experiment_name : "Default",
                 resume_id[0] ? ", continuing run " : "", resume_id);
}

// The lines the client has for the console and train.log, oldest first.
static void print_notice(TrainRun *run) {
    char notice[1024];
    while (run->mlflow && mlflow_client_notice(run->mlflow, notice, sizeof notice))
        train_message(run, "%s", notice);
}

void train_mlflow_log(TrainRun *run, long step, const char *const *tags, const double *values,
                      size_t count) {
    if (!run->mlflow) return;
    mlflow_client_log(run->mlflow, step, tags, values, count);
    print_notice(run);
}

void train_mlflow_end(TrainRun *run, int status) {
    if (!run->mlflow) return;
    const TrainConfig *config = run->config;
    char log_path[PATH_MAX];
    snprintf(log_path, sizeof log_path, "%s/train.log", config->out);
    // The backbone of a finished run; train.log always (a failed run's above all).
    const MlflowArtifact artifacts[] = {{"train.log", log_path},
                                        {"exported_last.safetensors", run->export_path}};
    const char *flush = getenv("LTC_MLFLOW_FLUSH_SECONDS");
    const double flush_seconds = flush && atof(flush) > 0 ? atof(flush) : MLFLOW_FLUSH_SECONDS;
    print_notice(run);
    char report[2048];
    mlflow_client_finish(run->mlflow, status == 0 ? "FINISHED"
                                      : status == 130 || status == 143 ? "KILLED" : "FAILED",
                         artifacts, status == 0 ? 2 : 1, flush_seconds, report, sizeof report);
    print_notice(run);
    mlflow_client_free(run->mlflow);
    run->mlflow = NULL;
    train_message(run, "%s", report);
}
