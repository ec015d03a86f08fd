// The MLflow client (see mlflow_client.h): the queue the training thread
// fills, and the sender thread that opens the run, logs its parameters,
// sends the queued values in batches, uploads the artifacts and sets the
// final status, each step retried with back-off until the server takes it.
#include "logging/mlflow_client.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "logging/json_text.h"
#include "logging/mlflow_rest.h"
#include "util/file.h"

// An ErrorMessage's text: the reasons kept for the report.
#define REASON_BYTES sizeof(((ErrorMessage *)0)->text)

typedef struct QueuedValue {
    int64_t step, timestamp_ms;
    double value;
    int key;  // index into MlflowClient.keys
} QueuedValue;

// What the sender does, in this order.
typedef enum Stage {
    STAGE_OPEN,       // the experiment and the run (a new one, or the one to continue)
    STAGE_PARAMS,     // parameters (and a continued run's tags)
    STAGE_METRICS,    // the queued values, until the finish is asked and the queue is empty
    STAGE_ARTIFACTS,  // the files, one by one
    STAGE_STATUS,     // the final status and end time
    STAGE_DONE,
} Stage;

// Values not sent, with the range of their steps.
typedef struct Unsent {
    uint64_t count;
    int64_t first_step, last_step;
} Unsent;

struct MlflowClient {
    // Settings (owned copies).
    char *tracking_uri, *experiment_name, *run_name, *resume_run_id, *run_file;
    MlflowPair *tags, *params;
    int tag_count, param_count;

    pthread_mutex_t lock;  // guards everything below up to "sender only"
    pthread_cond_t wake;     // to the sender: values queued, finish asked, abandon
    pthread_cond_t changed;  // to the finisher: the sender moved on
    char *keys[MLFLOW_MAX_METRIC_KEYS];
    int key_count;
    QueuedValue *queue;  // ring
    size_t capacity, head, count;
    Unsent dropped;        // pushed out of the full queue (the oldest first)
    Unsent refused;        // in batches the server refused
    Unsent unnamed;        // beyond MLFLOW_MAX_METRIC_KEYS names
    char refused_why[REASON_BYTES];
    uint64_t sent_values;
    int params_sent, params_unsent;
    char params_why[REASON_BYTES];
    int run_open, gave_up, ever_reached, failing, resumed;
    char run_id[MLFLOW_ID_BYTES];
    char last_error[REASON_BYTES];  // the last failed attempt's reason
    char open_why[REASON_BYTES];    // why the run could not be opened (refused)
    int uploading;         // an artifact transfer is in progress (not cut by the deadline)
    int artifacts_sent;
    char artifacts_unsent[400], artifacts_why[REASON_BYTES];
    int status_set;
    char status_why[REASON_BYTES];
    int finish_asked, failures_after_finish, done;
    char status[16];
    MlflowArtifact *artifacts;
    int artifact_count;
    // Lines for the console not yet taken (mlflow_client_notice), oldest
    // first: a warning that the server went must not be replaced by the
    // line that it came back before the training thread has shown it.
    char notices[MLFLOW_NOTICES][600];
    int notice_first, notice_count;
    atomic_int abandon;  // set by the finisher: stop now (also read by libcurl's progress)

    // Sender only.
    pthread_t thread;
    int thread_started;
    MlflowRest *rest;
    MlflowRunInfo run;
    QueuedValue inflight[MLFLOW_BATCH_METRICS];
    size_t inflight_count;
    int param_next, tags_next;
    int artifact_next;
    JsonText body;
};

static int64_t wall_ms(void) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    return (int64_t)now.tv_sec * 1000 + now.tv_nsec / 1000000;
}

static void unsent_add(Unsent *unsent, int64_t step) {
    if (unsent->count == 0 || step < unsent->first_step) unsent->first_step = step;
    if (unsent->count == 0 || step > unsent->last_step) unsent->last_step = step;
    unsent->count++;
}

static void unsent_merge(Unsent *into, const Unsent *from) {
    if (!from->count) return;
    unsent_add(into, from->first_step);
    unsent_add(into, from->last_step);
    into->count += from->count - 2;
}

// ---- settings ---------------------------------------------------------------------------------

static char *copy(const char *text, int *failed) {
    if (!text) return NULL;
    char *copied = strdup(text);
    if (!copied) *failed = 1;
    return copied;
}

static MlflowPair *copy_pairs(const MlflowPair *pairs, int count, int *failed) {
    if (count <= 0) return NULL;
    MlflowPair *copied = calloc((size_t)count, sizeof *copied);
    if (!copied) return *failed = 1, NULL;
    for (int i = 0; i < count; i++) {
        copied[i].key = copy(pairs[i].key, failed);
        copied[i].value = copy(pairs[i].value ? pairs[i].value : "", failed);
    }
    return copied;
}

static void free_pairs(MlflowPair *pairs, int count) {
    for (int i = 0; pairs && i < count; i++) {
        free((char *)pairs[i].key);
        free((char *)pairs[i].value);
    }
    free(pairs);
}

// ---- the sender's bookkeeping ------------------------------------------------------------------

static void set_notice(MlflowClient *client, const char *format, ...)
    __attribute__((format(printf, 2, 3)));
static void set_notice(MlflowClient *client, const char *format, ...) {
    if (client->notice_count == MLFLOW_NOTICES) {  // full: the oldest goes
        client->notice_first = (client->notice_first + 1) % MLFLOW_NOTICES;
        client->notice_count--;
    }
    char *line =
        client->notices[(client->notice_first + client->notice_count++) % MLFLOW_NOTICES];
    va_list args;
    va_start(args, format);
    vsnprintf(line, sizeof client->notices[0], format, args);
    va_end(args);
}

// An attempt that got an answer (under the lock).
static void note_answer(MlflowClient *client) {
    if (client->failing && client->ever_reached)
        set_notice(client, "MLflow at %s answers again: the kept values are being sent",
                   client->tracking_uri);
    else if (client->failing)
        set_notice(client, "MLflow at %s answers now: the kept values are being sent",
                   client->tracking_uri);
    client->failing = 0;
    client->ever_reached = 1;
}

// An attempt to retry (under the lock).
static void note_failure(MlflowClient *client, const ErrorMessage *err) {
    snprintf(client->last_error, sizeof client->last_error, "%s", err->text);
    if (client->finish_asked) client->failures_after_finish++;
    if (client->failing) return;
    client->failing = 1;
    set_notice(client, "warning: MLflow at %s: %s; training goes on, its values are kept (up "
                       "to %zu) and sent when the server answers", client->tracking_uri,
               err->text, client->capacity);
}

static int abandoned(MlflowClient *client) { return atomic_load(&client->abandon); }

// Waits up to seconds, or until abandoned or the finish is asked (when it
// was not before): the back-off between attempts.
static void back_off(MlflowClient *client, double seconds) {
    struct timespec until;
    clock_gettime(CLOCK_REALTIME, &until);
    const double end = (double)until.tv_sec + until.tv_nsec * 1e-9 + seconds;
    until.tv_sec = (time_t)end;
    until.tv_nsec = (long)((end - (double)until.tv_sec) * 1e9);
    pthread_mutex_lock(&client->lock);
    const int finishing = client->finish_asked;
    while (!abandoned(client) && client->finish_asked == finishing &&
           pthread_cond_timedwait(&client->wake, &client->lock, &until) == 0) {
    }
    pthread_mutex_unlock(&client->lock);
}

// ---- the steps --------------------------------------------------------------------------------

// The tags as the JSON array of runs/create and log-batch: [{"key": ..., "value": ...}, ...].
static void append_pairs(JsonText *body, const MlflowPair *pairs, int first, int count,
                         size_t max_value_bytes) {
    json_text_raw(body, "[");
    for (int i = first; i < first + count; i++) {
        json_text_raw(body, i > first ? ", {\"key\": " : "{\"key\": ");
        json_text_string(body, pairs[i].key, 0);
        json_text_raw(body, ", \"value\": ");
        json_text_string(body, pairs[i].value, max_value_bytes);
        json_text_raw(body, "}");
    }
    json_text_raw(body, "]");
}

static void write_run_file(MlflowClient *client) {
    if (!client->run_file) return;
    char text[MLFLOW_ID_BYTES + MLFLOW_URI_BYTES + 32];
    const int length = snprintf(text, sizeof text, "run_id=%s\ntracking_uri=%s\n",
                                client->run.run_id, client->tracking_uri);
    const FileChunk chunk = {text, (size_t)length};
    ErrorMessage err = {{0}};
    if (length < (int)sizeof text && file_write_atomic(client->run_file, &chunk, 1, &err) == 0)
        return;
    pthread_mutex_lock(&client->lock);
    set_notice(client, "warning: MLflow: %s; a --resume of this run starts another MLflow run",
               err.text);
    pthread_mutex_unlock(&client->lock);
}

// The run to continue, when it is there and not deleted: RUNNING again.
static MlflowOutcome continue_run(MlflowClient *client, int *found, ErrorMessage *err) {
    *found = 0;
    MlflowOutcome outcome = mlflow_run_get(client->rest, client->resume_run_id, &client->run, err);
    if (outcome == MLFLOW_RETRY) return outcome;
    if (outcome == MLFLOW_OK && strcmp(client->run.lifecycle_stage, "deleted") != 0) {
        outcome = mlflow_run_update(client->rest, client->run.run_id, "RUNNING", 0, err);
        *found = outcome == MLFLOW_OK;
        return outcome;
    }
    pthread_mutex_lock(&client->lock);
    set_notice(client, "warning: MLflow: the run %s of the interrupted training is not on %s "
                       "(%s): a new run is made", client->resume_run_id, client->tracking_uri,
               outcome == MLFLOW_OK ? "deleted" : err->text);
    pthread_mutex_unlock(&client->lock);
    free(client->resume_run_id);
    client->resume_run_id = NULL;
    return MLFLOW_OK;
}

static MlflowOutcome open_run(MlflowClient *client, int *complete, ErrorMessage *err) {
    int resumed = 0;
    if (client->resume_run_id) {
        const MlflowOutcome outcome = continue_run(client, &resumed, err);
        if (outcome != MLFLOW_OK) return outcome;
    }
    if (!resumed) {
        char experiment_id[MLFLOW_ID_BYTES];
        const char *name = client->experiment_name && client->experiment_name[0]
                               ? client->experiment_name : "Default";
        MlflowOutcome outcome = mlflow_experiment_id(client->rest, name, experiment_id, err);
        if (outcome != MLFLOW_OK) return outcome;
        JsonText *body = &client->body;
        json_text_clear(body);
        append_pairs(body, client->tags, 0, client->tag_count, MLFLOW_TAG_VALUE_BYTES);
        if (json_text_failed(body)) return error_set(err, "out of memory"), MLFLOW_RETRY;
        outcome = mlflow_run_create(client->rest, experiment_id, client->run_name, wall_ms(),
                                    body->text, &client->run, err);
        if (outcome != MLFLOW_OK) return outcome;
    }
    pthread_mutex_lock(&client->lock);
    client->run_open = 1;
    client->resumed = resumed;
    snprintf(client->run_id, sizeof client->run_id, "%s", client->run.run_id);
    pthread_mutex_unlock(&client->lock);
    write_run_file(client);
    *complete = 1;
    return MLFLOW_OK;
}

// Starts the body of a runs/log-batch request: {"run_id": ..., "LIST": 
static JsonText *batch_begin(MlflowClient *client, const char *list) {
    JsonText *body = &client->body;
    json_text_clear(body);
    json_text_raw(body, "{");
    json_text_member_string(body, "run_id", client->run.run_id);
    json_text_raw(body, ", \"");
    json_text_raw(body, list);
    json_text_raw(body, "\": ");
    return body;
}

// Ends the body with close and sends it.
static MlflowOutcome batch_send(MlflowClient *client, const char *close, ErrorMessage *err) {
    JsonText *body = &client->body;
    json_text_raw(body, close);
    if (json_text_failed(body)) return error_set(err, "out of memory"), MLFLOW_RETRY;
    const char *response;
    return mlflow_rest_call(client->rest, "POST", "/api/2.0/mlflow/runs/log-batch", body->text,
                            &response, err);
}

// 1 when the continued run has the parameter already (MLflow's parameters
// cannot change; the continued run keeps its own).
static int has_param(const MlflowRunInfo *run, const char *key) {
    for (int i = 0; i < run->param_count; i++)
        if (strcmp(run->param_keys[i], key) == 0) return 1;
    return 0;
}

// One log-batch of parameters (up to MLFLOW_BATCH_PARAMS), then, for a
// continued run, of tags; complete when none are left.
static MlflowOutcome send_params(MlflowClient *client, int *complete, ErrorMessage *err) {
    MlflowPair chunk[MLFLOW_BATCH_PARAMS];
    int count = 0, next = client->param_next;
    while (next < client->param_count && count < MLFLOW_BATCH_PARAMS) {
        if (!has_param(&client->run, client->params[next].key))
            chunk[count++] = client->params[next];
        next++;
    }
    int tags = 0;
    if (count == 0 && client->resumed && client->tags_next < client->tag_count)
        tags = client->tag_count - client->tags_next < MLFLOW_BATCH_PARAMS
                   ? client->tag_count - client->tags_next : MLFLOW_BATCH_PARAMS;
    if (count == 0 && tags == 0) return *complete = 1, MLFLOW_OK;
    JsonText *body = batch_begin(client, tags ? "tags" : "params");
    if (tags)
        append_pairs(body, client->tags, client->tags_next, tags, MLFLOW_TAG_VALUE_BYTES);
    else
        append_pairs(body, chunk, 0, count, MLFLOW_PARAM_VALUE_BYTES);
    const MlflowOutcome outcome = batch_send(client, "}", err);
    if (outcome == MLFLOW_RETRY) return outcome;
    pthread_mutex_lock(&client->lock);
    if (outcome == MLFLOW_OK && !tags) client->params_sent += count;
    if (outcome == MLFLOW_REFUSED && !tags) client->params_unsent += count;
    if (outcome == MLFLOW_REFUSED && !client->params_why[0])
        snprintf(client->params_why, sizeof client->params_why, "%s", err->text);
    pthread_mutex_unlock(&client->lock);
    if (tags)
        client->tags_next += tags;
    else
        client->param_next = next;
    return MLFLOW_OK;  // a refused batch is noted and passed over
}

// Moves up to a batch of queued values into the in-flight batch (when it is
// empty); waits for values while none are queued and the finish is not
// asked. 0: a batch to send; 1: nothing left (finish asked); -1: abandoned.
static int take_batch(MlflowClient *client) {
    if (client->inflight_count) return 0;
    pthread_mutex_lock(&client->lock);
    while (client->count == 0 && !client->finish_asked && !abandoned(client))
        pthread_cond_wait(&client->wake, &client->lock);
    while (client->count && client->inflight_count < MLFLOW_BATCH_METRICS) {
        client->inflight[client->inflight_count++] = client->queue[client->head];
        client->head = (client->head + 1) % client->capacity;
        client->count--;
    }
    const int status = abandoned(client) ? -1 : client->inflight_count ? 0 : 1;
    pthread_mutex_unlock(&client->lock);
    return status;
}

static MlflowOutcome send_batch(MlflowClient *client, int *complete, ErrorMessage *err) {
    const int taken = take_batch(client);
    if (taken) return *complete = taken > 0, MLFLOW_OK;
    JsonText *body = batch_begin(client, "metrics");
    json_text_raw(body, "[");
    for (size_t i = 0; i < client->inflight_count; i++) {
        const QueuedValue *value = &client->inflight[i];
        json_text_raw(body, i ? ", {\"key\": " : "{\"key\": ");
        json_text_string(body, client->keys[value->key], 0);  // keys are never changed
        json_text_raw(body, ", \"value\": ");
        json_text_double(body, value->value);
        json_text_raw(body, ", \"timestamp\": ");
        json_text_int(body, value->timestamp_ms);
        json_text_raw(body, ", \"step\": ");
        json_text_int(body, value->step);
        json_text_raw(body, "}");
    }
    const MlflowOutcome outcome = batch_send(client, "]}", err);
    if (outcome == MLFLOW_RETRY) return outcome;
    pthread_mutex_lock(&client->lock);
    for (size_t i = 0; i < client->inflight_count; i++)
        if (outcome == MLFLOW_REFUSED) unsent_add(&client->refused, client->inflight[i].step);
    if (outcome == MLFLOW_OK) client->sent_values += client->inflight_count;
    if (outcome == MLFLOW_REFUSED && !client->refused_why[0])
        snprintf(client->refused_why, sizeof client->refused_why, "%s", err->text);
    pthread_mutex_unlock(&client->lock);
    client->inflight_count = 0;
    return MLFLOW_OK;
}

// Appends name to a "a, b" list.
static void list_add(char *list, size_t size, const char *name) {
    const size_t used = strlen(list);
    snprintf(list + used, size - used, "%s%s", used ? ", " : "", name);
}

static MlflowOutcome send_artifact(MlflowClient *client, int *complete, ErrorMessage *err) {
    if (client->artifact_next >= client->artifact_count) return *complete = 1, MLFLOW_OK;
    const MlflowArtifact *artifact = &client->artifacts[client->artifact_next];
    MlflowOutcome outcome = MLFLOW_OK;
    const int served = mlflow_artifacts_served(client->run.artifact_uri);
    const int exists = access(artifact->path, R_OK) == 0;
    if (exists && !served) {
        outcome = MLFLOW_REFUSED;
        error_set(err, "the server does not serve this run's artifacts (%s; `mlflow server "
                       "--serve-artifacts` does)", client->run.artifact_uri);
    } else if (exists) {
        pthread_mutex_lock(&client->lock);
        client->uploading = 1;
        pthread_mutex_unlock(&client->lock);
        outcome = mlflow_artifact_put(client->rest, client->run.artifact_uri, artifact->name,
                                      artifact->path, err);
        pthread_mutex_lock(&client->lock);
        client->uploading = 0;
        pthread_cond_broadcast(&client->changed);
        pthread_mutex_unlock(&client->lock);
    }
    if (outcome == MLFLOW_RETRY) return outcome;
    pthread_mutex_lock(&client->lock);
    if (exists && outcome == MLFLOW_OK) client->artifacts_sent++;
    if (outcome == MLFLOW_REFUSED) {
        list_add(client->artifacts_unsent, sizeof client->artifacts_unsent, artifact->name);
        if (!client->artifacts_why[0])
            snprintf(client->artifacts_why, sizeof client->artifacts_why, "%s", err->text);
    }
    pthread_mutex_unlock(&client->lock);
    client->artifact_next++;
    return MLFLOW_OK;
}

static MlflowOutcome send_status(MlflowClient *client, int *complete, ErrorMessage *err) {
    const MlflowOutcome outcome =
        mlflow_run_update(client->rest, client->run.run_id, client->status, wall_ms(), err);
    if (outcome == MLFLOW_RETRY) return outcome;
    pthread_mutex_lock(&client->lock);
    client->status_set = outcome == MLFLOW_OK;
    if (outcome == MLFLOW_REFUSED)
        snprintf(client->status_why, sizeof client->status_why, "%s", err->text);
    pthread_mutex_unlock(&client->lock);
    *complete = 1;
    return MLFLOW_OK;
}

static void *sender_main(void *argument) {
    MlflowClient *client = argument;
    Stage stage = STAGE_OPEN;
    double backoff = MLFLOW_BACKOFF_FIRST_SECONDS;
    int finishing = 0;
    while (stage != STAGE_DONE && !abandoned(client)) {
        ErrorMessage err = {{0}};
        int complete = 0;
        MlflowOutcome outcome;
        switch (stage) {
        case STAGE_OPEN: outcome = open_run(client, &complete, &err); break;
        case STAGE_PARAMS: outcome = send_params(client, &complete, &err); break;
        case STAGE_METRICS: outcome = send_batch(client, &complete, &err); break;
        case STAGE_ARTIFACTS: outcome = send_artifact(client, &complete, &err); break;
        default: outcome = send_status(client, &complete, &err); break;
        }
        if (abandoned(client)) break;
        pthread_mutex_lock(&client->lock);
        if (client->finish_asked && !finishing) {  // the end: retry at once, and often
            finishing = 1;
            backoff = MLFLOW_BACKOFF_FIRST_SECONDS;
        }
        if (outcome == MLFLOW_RETRY) {
            note_failure(client, &err);
        } else if (outcome == MLFLOW_REFUSED) {  // the run could not be opened
            client->gave_up = 1;
            snprintf(client->open_why, sizeof client->open_why, "%s", err.text);
            set_notice(client, "warning: MLflow at %s refused the run (%s): this run is not "
                               "logged to MLflow", client->tracking_uri, err.text);
            stage = STAGE_DONE;
        } else {
            note_answer(client);
            backoff = MLFLOW_BACKOFF_FIRST_SECONDS;
            if (complete) stage++;
        }
        pthread_cond_broadcast(&client->changed);
        pthread_mutex_unlock(&client->lock);
        if (outcome == MLFLOW_RETRY) {
            back_off(client, backoff);
            const double cap = finishing ? MLFLOW_FLUSH_BACKOFF_MAX_SECONDS
                                         : MLFLOW_BACKOFF_MAX_SECONDS;
            backoff = backoff * 2 < cap ? backoff * 2 : cap;
        }
    }
    pthread_mutex_lock(&client->lock);
    client->done = 1;
    pthread_cond_broadcast(&client->changed);
    pthread_mutex_unlock(&client->lock);
    return NULL;
}

// ---- the training thread's side ----------------------------------------------------------------

int mlflow_client_start(MlflowClient **client_out, const MlflowSettings *settings,
                        ErrorMessage *err) {
    *client_out = NULL;
    MlflowClient *client = calloc(1, sizeof *client);
    if (!client) return error_set(err, "out of memory for the MLflow client");
    int failed = 0;
    client->tracking_uri = copy(settings->tracking_uri, &failed);
    client->experiment_name = copy(settings->experiment_name, &failed);
    client->run_name = copy(settings->run_name, &failed);
    client->resume_run_id = copy(settings->resume_run_id, &failed);
    client->run_file = copy(settings->run_file, &failed);
    client->tags = copy_pairs(settings->tags, settings->tag_count, &failed);
    client->tag_count = settings->tag_count;
    client->params = copy_pairs(settings->params, settings->param_count, &failed);
    client->param_count = settings->param_count;
    client->capacity = settings->queue_values ? settings->queue_values : MLFLOW_QUEUE_VALUES;
    client->queue = malloc(client->capacity * sizeof *client->queue);
    pthread_mutex_init(&client->lock, NULL);
    pthread_cond_init(&client->wake, NULL);
    pthread_cond_init(&client->changed, NULL);
    atomic_init(&client->abandon, 0);
    if (failed || !client->queue) {
        mlflow_client_free(client);
        return error_set(err, "out of memory for the MLflow client");
    }
    if (mlflow_rest_open(&client->rest, client->tracking_uri, &client->abandon, err)) {
        mlflow_client_free(client);
        return -1;
    }
    if (pthread_create(&client->thread, NULL, sender_main, client) != 0) {
        mlflow_client_free(client);
        return error_set(err, "could not start the MLflow sender thread");
    }
    client->thread_started = 1;
    *client_out = client;
    return 0;
}

// The index of key in the client's names (added when new), or -1 when
// MLFLOW_MAX_METRIC_KEYS are taken (under the lock).
static int key_index(MlflowClient *client, const char *key) {
    for (int i = 0; i < client->key_count; i++)
        if (strcmp(client->keys[i], key) == 0) return i;
    if (client->key_count == MLFLOW_MAX_METRIC_KEYS) return -1;
    char *copied = strdup(key);
    if (!copied) return -1;
    client->keys[client->key_count] = copied;
    return client->key_count++;
}

void mlflow_client_log(MlflowClient *client, int64_t step, const char *const *keys,
                       const double *values, size_t count) {
    const int64_t now = wall_ms();
    pthread_mutex_lock(&client->lock);
    for (size_t i = 0; i < count; i++) {
        const int key = key_index(client, keys[i]);
        if (key < 0) {
            unsent_add(&client->unnamed, step);
            continue;
        }
        if (client->count == client->capacity) {  // full: the oldest value goes
            unsent_add(&client->dropped, client->queue[client->head].step);
            client->head = (client->head + 1) % client->capacity;
            client->count--;
        }
        client->queue[(client->head + client->count) % client->capacity] =
            (QueuedValue){.step = step, .timestamp_ms = now, .value = values[i], .key = key};
        client->count++;
    }
    pthread_cond_signal(&client->wake);
    pthread_mutex_unlock(&client->lock);
}

int mlflow_client_notice(MlflowClient *client, char *out, size_t size) {
    pthread_mutex_lock(&client->lock);
    const int pending = client->notice_count > 0;
    if (pending) {
        snprintf(out, size, "%s", client->notices[client->notice_first]);
        client->notice_first = (client->notice_first + 1) % MLFLOW_NOTICES;
        client->notice_count--;
    }
    pthread_mutex_unlock(&client->lock);
    return pending;
}

static void stop_sender(MlflowClient *client) {
    if (!client->thread_started) return;
    atomic_store(&client->abandon, 1);
    pthread_mutex_lock(&client->lock);
    pthread_cond_broadcast(&client->wake);
    pthread_mutex_unlock(&client->lock);
    pthread_join(client->thread, NULL);
    client->thread_started = 0;
}

// Waits for the sender to end, as mlflow_client_finish says (under the lock).
static void wait_for_sender(MlflowClient *client, double flush_seconds) {
    struct timespec now;
    clock_gettime(CLOCK_REALTIME, &now);
    const double deadline = (double)now.tv_sec + now.tv_nsec * 1e-9 + flush_seconds;
    while (!client->done) {
        clock_gettime(CLOCK_REALTIME, &now);
        const double time = (double)now.tv_sec + now.tv_nsec * 1e-9;
        if (!client->uploading && (time >= deadline || (!client->ever_reached &&
                                                         client->failures_after_finish > 0)))
            return;
        const double until = time + 1.0 < deadline || client->uploading ? time + 1.0 : deadline;
        const struct timespec wait = {(time_t)until, (long)((until - (double)(time_t)until) * 1e9)};
        pthread_cond_timedwait(&client->changed, &client->lock, &wait);
    }
}

// Appends to the report line (cut to its size).
static void report_add(char *report, size_t size, size_t *used, const char *format, ...)
    __attribute__((format(printf, 4, 5)));
static void report_add(char *report, size_t size, size_t *used, const char *format, ...) {
    if (*used + 1 >= size) return;
    va_list args;
    va_start(args, format);
    const int written = vsnprintf(report + *used, size - *used, format, args);
    va_end(args);
    if (written > 0) *used += (size_t)written < size - *used ? (size_t)written : size - *used - 1;
}

// The one line of mlflow_client_finish (after the sender stopped).
static void format_report(MlflowClient *client, char *report, size_t size) {
    Unsent values = client->dropped;
    unsent_merge(&values, &client->refused);
    unsent_merge(&values, &client->unnamed);
    for (size_t i = 0; i < client->count; i++)
        unsent_add(&values, client->queue[(client->head + i) % client->capacity].step);
    for (size_t i = 0; i < client->inflight_count; i++)
        unsent_add(&values, client->inflight[i].step);
    const char *failure = client->last_error[0] ? client->last_error : "no answer in time";
    size_t used = 0;
    report[0] = '\0';
    if (!client->run_open) {
        report_add(report, size, &used, "MLflow: nothing was logged to %s (%s): %llu metric "
                   "values (they are in metrics.jsonl), %d parameters and the artifacts",
                   client->tracking_uri, client->gave_up ? client->open_why : failure,
                   (unsigned long long)values.count, client->param_count);
        if (client->dropped.count)
            report_add(report, size, &used, "; %llu values of steps %lld..%lld were pushed out "
                       "of the full queue of %zu meanwhile",
                       (unsigned long long)client->dropped.count,
                       (long long)client->dropped.first_step, (long long)client->dropped.last_step,
                       client->capacity);
        return;
    }
    report_add(report, size, &used, "MLflow: run %s%s at %s: ", client->run_id,
               client->resumed ? " (continued)" : "", client->tracking_uri);
    if (client->status_set)
        report_add(report, size, &used, "%s", client->status);
    else
        report_add(report, size, &used, "status %s not set (%s)", client->status,
                   client->status_why[0] ? client->status_why : failure);
    report_add(report, size, &used, "; sent %llu metric values, %d parameters, %d artifacts",
               (unsigned long long)client->sent_values, client->params_sent,
               client->artifacts_sent);
    if (values.count) {
        report_add(report, size, &used, "; NOT SENT (they are in metrics.jsonl): %llu metric "
                   "values of steps %lld..%lld:", (unsigned long long)values.count,
                   (long long)values.first_step, (long long)values.last_step);
        if (client->dropped.count)
            report_add(report, size, &used, " %llu pushed out of the full queue of %zu;",
                       (unsigned long long)client->dropped.count, client->capacity);
        if (client->refused.count)
            report_add(report, size, &used, " %llu refused (%s);",
                       (unsigned long long)client->refused.count, client->refused_why);
        if (client->unnamed.count)
            report_add(report, size, &used, " %llu beyond %d metric names;",
                       (unsigned long long)client->unnamed.count, MLFLOW_MAX_METRIC_KEYS);
        if (client->count + client->inflight_count)
            report_add(report, size, &used, " %zu still queued (%s);",
                       client->count + client->inflight_count, failure);
        if (used < size && report[used - 1] == ';') report[--used] = '\0';
    }
    if (client->params_unsent)
        report_add(report, size, &used, "; %d parameters refused (%s)", client->params_unsent,
                   client->params_why);
    if (client->artifacts_unsent[0])
        report_add(report, size, &used, "; artifacts not uploaded: %s (%s)",
                   client->artifacts_unsent, client->artifacts_why);
}

void mlflow_client_finish(MlflowClient *client, const char *status,
                          const MlflowArtifact *artifacts, int artifact_count,
                          double flush_seconds, char *report, size_t size) {
    pthread_mutex_lock(&client->lock);
    snprintf(client->status, sizeof client->status, "%s", status);
    client->artifacts = calloc(artifact_count > 0 ? (size_t)artifact_count : 1,
                               sizeof *client->artifacts);
    int failed = 0;
    for (int i = 0; client->artifacts && i < artifact_count; i++) {
        client->artifacts[i].name = copy(artifacts[i].name, &failed);
        client->artifacts[i].path = copy(artifacts[i].path, &failed);
        client->artifact_count = i + 1;
    }
    client->finish_asked = 1;
    pthread_cond_broadcast(&client->wake);
    wait_for_sender(client, flush_seconds);
    pthread_mutex_unlock(&client->lock);
    stop_sender(client);
    format_report(client, report, size);
}

void mlflow_client_free(MlflowClient *client) {
    if (!client) return;
    stop_sender(client);
    mlflow_rest_close(client->rest);
    mlflow_run_info_free(&client->run);
    json_text_free(&client->body);
    for (int i = 0; i < client->key_count; i++) free(client->keys[i]);
    for (int i = 0; i < client->artifact_count; i++) {
        free((char *)client->artifacts[i].name);
        free((char *)client->artifacts[i].path);
    }
    free(client->artifacts);
    free(client->queue);
    free_pairs(client->tags, client->tag_count);
    free_pairs(client->params, client->param_count);
    free(client->tracking_uri);
    free(client->experiment_name);
    free(client->run_name);
    free(client->resume_run_id);
    free(client->run_file);
    pthread_mutex_destroy(&client->lock);
    pthread_cond_destroy(&client->wake);
    pthread_cond_destroy(&client->changed);
    free(client);
}
