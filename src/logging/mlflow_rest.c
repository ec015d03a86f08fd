// MLflow's tracking REST API over libcurl (see mlflow_rest.h). Endpoints
// and fields as MLflow's REST API reference and its server (3.x) define
// them: experiments/get-by-name, experiments/create, runs/create, runs/get,
// runs/update, runs/log-batch (built by the client), and the artifact
// proxy's PUT /api/2.0/mlflow-artifacts/artifacts/<path>.
#include "logging/mlflow_rest.h"

#include <curl/curl.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "logging/json_text.h"
#include "weights/download.h"

struct MlflowRest {
    CURL *curl;  // one handle: its connection is kept alive between calls
    char base[MLFLOW_URI_BYTES];  // the tracking URI without a trailing '/'
    const atomic_int *abandon;
    char *response;
    size_t response_length, response_capacity;
    int response_too_long;
};

// Responses the client reads are small (a run with its parameters: tens of
// kilobytes); a larger one is not an MLflow answer to these calls.
#define RESPONSE_MAX_BYTES (16u << 20)

static size_t on_body(char *data, size_t size, size_t count, void *user) {
    MlflowRest *rest = user;
    const size_t length = size * count;
    if (rest->response_length + length + 1 > RESPONSE_MAX_BYTES) {
        rest->response_too_long = 1;
        return 0;  // ends the transfer
    }
    if (rest->response_length + length + 1 > rest->response_capacity) {
        size_t capacity = rest->response_capacity ? rest->response_capacity : 4096;
        while (capacity < rest->response_length + length + 1) capacity *= 2;
        char *grown = realloc(rest->response, capacity);
        if (!grown) return 0;
        rest->response = grown;
        rest->response_capacity = capacity;
    }
    memcpy(rest->response + rest->response_length, data, length);
    rest->response_length += length;
    rest->response[rest->response_length] = '\0';
    return length;
}

static int on_progress(void *user, curl_off_t download_total, curl_off_t downloaded,
                       curl_off_t upload_total, curl_off_t uploaded) {
    (void)download_total, (void)downloaded, (void)upload_total, (void)uploaded;
    const MlflowRest *rest = user;
    return rest->abandon && atomic_load(rest->abandon);  // non-zero aborts
}

int mlflow_rest_open(MlflowRest **rest_out, const char *tracking_uri, const atomic_int *abandon,
                     ErrorMessage *err) {
    *rest_out = NULL;
    MlflowRest *rest = calloc(1, sizeof *rest);
    if (!rest) return error_set(err, "out of memory for the MLflow client");
    size_t length = strlen(tracking_uri);
    while (length > 0 && tracking_uri[length - 1] == '/') length--;
    if (length >= sizeof rest->base) {
        free(rest);
        return error_set(err, "the MLflow tracking URI is longer than %zu bytes",
                         sizeof rest->base - 1);
    }
    memcpy(rest->base, tracking_uri, length);
    rest->abandon = abandon;
    // Thread-safe since libcurl 7.84 (Debian 12 ships 7.88); counted, so
    // the weights download's own init is no conflict.
    curl_global_init(CURL_GLOBAL_DEFAULT);
    rest->curl = curl_easy_init();
    if (!rest->curl) {
        free(rest);
        return error_set(err, "libcurl could not start");
    }
    *rest_out = rest;
    return 0;
}

void mlflow_rest_close(MlflowRest *rest) {
    if (!rest) return;
    curl_easy_cleanup(rest->curl);
    curl_global_cleanup();
    free(rest->response);
    free(rest);
}

// The error_code and message of an MLflow error body into err, after what.
static void refusal_message(const MlflowRest *rest, const char *what, long status,
                            ErrorMessage *err) {
    static const char *const code_path[] = {"error_code", NULL};
    static const char *const message_path[] = {"message", NULL};
    char code[64] = "", message[400] = "";
    ErrorMessage ignored;
    if (rest->response && mlflow_answer_string(rest->response, code_path, code, sizeof code,
                                               &ignored) == 0)
        mlflow_answer_string(rest->response, message_path, message, sizeof message, &ignored);
    if (code[0])
        error_set(err, "%s: HTTP %ld %s: %s", what, status, code, message);
    else
        error_set(err, "%s: HTTP %ld%s", what, status,
                  status == 404 ? " (is this an MLflow tracking server?)" : "");
}

// Runs the prepared transfer of `what`; classifies how it ended.
static MlflowOutcome perform(MlflowRest *rest, const char *url, const char *what,
                             ErrorMessage *err) {
    CURL *curl = rest->curl;
    char curl_error[CURL_ERROR_SIZE] = "";
    rest->response_length = 0;
    rest->response_too_long = 0;
    if (rest->response) rest->response[0] = '\0';
    const char *ca_bundle = weights_ca_bundle();
    curl_easy_setopt(curl, CURLOPT_URL, url);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "lightly-train-c/" LTC_VERSION);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    if (ca_bundle) curl_easy_setopt(curl, CURLOPT_CAINFO, ca_bundle);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, (long)MLFLOW_REST_CONNECT_SECONDS);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, (long)MLFLOW_REST_STALL_SECONDS);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, rest);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, rest);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
    const CURLcode code = curl_easy_perform(curl);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, NULL);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (code == CURLE_ABORTED_BY_CALLBACK)
        return error_set(err, "%s: abandoned at the end of the flush", what), MLFLOW_RETRY;
    if (code != CURLE_OK && !rest->response_too_long)
        return error_set(err, "%s: %s", what,
                         curl_error[0] ? curl_error : curl_easy_strerror(code)), MLFLOW_RETRY;
    if (status >= 200 && status < 300 && !rest->response_too_long) return MLFLOW_OK;
    if (rest->response_too_long)
        return error_set(err, "%s: the answer is larger than %u MB", what,
                         RESPONSE_MAX_BYTES >> 20), MLFLOW_REFUSED;
    refusal_message(rest, what, status, err);
    return status == 408 || status == 429 || status >= 500 ? MLFLOW_RETRY : MLFLOW_REFUSED;
}

MlflowOutcome mlflow_rest_call(MlflowRest *rest, const char *method, const char *path,
                               const char *body, const char **response, ErrorMessage *err) {
    char url[MLFLOW_URI_BYTES + 1024];
    if (snprintf(url, sizeof url, "%s%s", rest->base, path) >= (int)sizeof url)
        return error_set(err, "MLflow request %.80s...: URL too long", path), MLFLOW_REFUSED;
    CURL *curl = rest->curl;
    curl_easy_reset(curl);
    struct curl_slist *headers = curl_slist_append(NULL, "Content-Type: application/json");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT, (long)MLFLOW_REST_TIMEOUT_SECONDS);
    if (strcmp(method, "POST") == 0) {
        curl_easy_setopt(curl, CURLOPT_POSTFIELDS, body ? body : "{}");
        curl_easy_setopt(curl, CURLOPT_POSTFIELDSIZE_LARGE, (curl_off_t)strlen(body ? body : "{}"));
    }
    char what[160];
    snprintf(what, sizeof what, "%s %.*s", method, (int)strcspn(path, "?"), path);
    const MlflowOutcome outcome = perform(rest, url, what, err);
    curl_slist_free_all(headers);
    *response = rest->response ? rest->response : "";
    return outcome;
}

// ---- the calls ------------------------------------------------------------------------------

// The answer's string at path, or a refusal of what.
static MlflowOutcome answer_string(const char *response, const char *const *path, char *out,
                                   size_t size, const char *what, ErrorMessage *err) {
    if (mlflow_answer_string(response, path, out, size, err))
        return error_prefix(err, "%s: unexpected answer", what), MLFLOW_REFUSED;
    return MLFLOW_OK;
}

MlflowOutcome mlflow_experiment_id(MlflowRest *rest, const char *name,
                                   char id[MLFLOW_ID_BYTES], ErrorMessage *err) {
    const char *response;
    char *escaped = curl_easy_escape(rest->curl, name, 0);
    if (!escaped) return error_set(err, "out of memory"), MLFLOW_RETRY;
    char path[1024];
    const int cut = snprintf(path, sizeof path, "/api/2.0/mlflow/experiments/get-by-name?"
                                                "experiment_name=%s", escaped) >= (int)sizeof path;
    curl_free(escaped);
    if (cut) return error_set(err, "experiment name too long"), MLFLOW_REFUSED;
    static const char *const experiment_id[] = {"experiment", "experiment_id", NULL};
    MlflowOutcome outcome = mlflow_rest_call(rest, "GET", path, NULL, &response, err);
    if (outcome == MLFLOW_OK)
        return answer_string(response, experiment_id, id, MLFLOW_ID_BYTES, "experiment", err);
    if (outcome == MLFLOW_RETRY || !strstr(err->text, "RESOURCE_DOES_NOT_EXIST")) return outcome;
    JsonText body = {0};
    json_text_raw(&body, "{");
    json_text_member_string(&body, "name", name);
    json_text_raw(&body, "}");
    if (json_text_failed(&body)) return json_text_free(&body), error_set(err, "out of memory"),
                                        MLFLOW_RETRY;
    outcome = mlflow_rest_call(rest, "POST", "/api/2.0/mlflow/experiments/create", body.text,
                               &response, err);
    json_text_free(&body);
    static const char *const created_id[] = {"experiment_id", NULL};
    if (outcome == MLFLOW_OK)
        return answer_string(response, created_id, id, MLFLOW_ID_BYTES, "experiment", err);
    // Made by another run since the look-up: take that one.
    if (outcome == MLFLOW_REFUSED && strstr(err->text, "RESOURCE_ALREADY_EXISTS") &&
        mlflow_rest_call(rest, "GET", path, NULL, &response, err) == MLFLOW_OK)
        return answer_string(response, experiment_id, id, MLFLOW_ID_BYTES, "experiment", err);
    return outcome;
}

MlflowOutcome mlflow_run_create(MlflowRest *rest, const char *experiment_id, const char *run_name,
                                int64_t start_time_ms, const char *body_tags, MlflowRunInfo *info,
                                ErrorMessage *err) {
    JsonText body = {0};
    json_text_raw(&body, "{");
    json_text_member_string(&body, "experiment_id", experiment_id);
    if (run_name) json_text_member_string(&body, "run_name", run_name);
    json_text_raw(&body, ", \"start_time\": ");
    json_text_int(&body, start_time_ms);
    json_text_raw(&body, ", \"tags\": ");
    json_text_raw(&body, body_tags);
    json_text_raw(&body, "}");
    const char *response;
    MlflowOutcome outcome =
        json_text_failed(&body)
            ? (error_set(err, "out of memory"), MLFLOW_RETRY)
            : mlflow_rest_call(rest, "POST", "/api/2.0/mlflow/runs/create", body.text, &response,
                               err);
    json_text_free(&body);
    mlflow_run_info_free(info);
    memset(info, 0, sizeof *info);
    return outcome != MLFLOW_OK ? outcome
           : mlflow_run_info_parse(response, info, err) == 0
               ? MLFLOW_OK
               : (error_prefix(err, "runs/create: unexpected answer"), MLFLOW_REFUSED);
}

MlflowOutcome mlflow_run_get(MlflowRest *rest, const char *run_id, MlflowRunInfo *info,
                             ErrorMessage *err) {
    char path[256];
    snprintf(path, sizeof path, "/api/2.0/mlflow/runs/get?run_id=%.*s", MLFLOW_ID_BYTES, run_id);
    const char *response;
    const MlflowOutcome outcome = mlflow_rest_call(rest, "GET", path, NULL, &response, err);
    mlflow_run_info_free(info);
    memset(info, 0, sizeof *info);
    return outcome != MLFLOW_OK ? outcome
           : mlflow_run_info_parse(response, info, err) == 0
               ? MLFLOW_OK
               : (error_prefix(err, "runs/get: unexpected answer"), MLFLOW_REFUSED);
}

MlflowOutcome mlflow_run_update(MlflowRest *rest, const char *run_id, const char *status,
                                int64_t end_time_ms, ErrorMessage *err) {
    JsonText body = {0};
    json_text_raw(&body, "{");
    json_text_member_string(&body, "run_id", run_id);
    json_text_member_string(&body, "status", status);
    if (end_time_ms > 0) {
        json_text_raw(&body, ", \"end_time\": ");
        json_text_int(&body, end_time_ms);
    }
    json_text_raw(&body, "}");
    const char *response;
    const MlflowOutcome outcome =
        json_text_failed(&body)
            ? (error_set(err, "out of memory"), MLFLOW_RETRY)
            : mlflow_rest_call(rest, "POST", "/api/2.0/mlflow/runs/update", body.text, &response,
                               err);
    json_text_free(&body);
    return outcome;
}

// ---- artifacts ------------------------------------------------------------------------------

#define ARTIFACTS_SCHEME "mlflow-artifacts:"

int mlflow_artifacts_served(const char *artifact_uri) {
    return strncmp(artifact_uri, ARTIFACTS_SCHEME, strlen(ARTIFACTS_SCHEME)) == 0;
}

MlflowOutcome mlflow_artifact_put(MlflowRest *rest, const char *artifact_uri, const char *name,
                                  const char *path, ErrorMessage *err) {
    // mlflow-artifacts:/<path> is served by the tracking server itself;
    // mlflow-artifacts://host:port/<path> by that host (same scheme).
    const char *rest_of_uri = artifact_uri + strlen(ARTIFACTS_SCHEME);
    char root[MLFLOW_URI_BYTES];
    snprintf(root, sizeof root, "%s", rest->base);
    if (strncmp(rest_of_uri, "//", 2) == 0) {
        const char *host = rest_of_uri + 2, *slash = strchr(host, '/');
        const int https = strncmp(rest->base, "https:", 6) == 0;
        snprintf(root, sizeof root, "%s://%.*s", https ? "https" : "http",
                 (int)(slash ? (size_t)(slash - host) : strlen(host)), host);
        rest_of_uri = slash ? slash : "";
    }
    while (*rest_of_uri == '/') rest_of_uri++;
    char url[3 * MLFLOW_URI_BYTES];
    if (snprintf(url, sizeof url, "%s/api/2.0/mlflow-artifacts/artifacts/%s/%s", root, rest_of_uri,
                 name) >= (int)sizeof url)
        return error_set(err, "artifact %s: URL too long", name), MLFLOW_REFUSED;
    FILE *file = fopen(path, "rb");
    struct stat info;
    if (!file || fstat(fileno(file), &info) != 0) {
        error_set(err, "artifact %s: cannot read %s: %s", name, path, strerror(errno));
        if (file) fclose(file);
        return MLFLOW_REFUSED;
    }
    CURL *curl = rest->curl;
    curl_easy_reset(curl);
    // No "Expect: 100-continue" wait before the body.
    struct curl_slist *headers = curl_slist_append(NULL, "Expect:");
    headers = curl_slist_append(headers, "Content-Type: application/octet-stream");
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_UPLOAD, 1L);
    curl_easy_setopt(curl, CURLOPT_READDATA, file);
    curl_easy_setopt(curl, CURLOPT_INFILESIZE_LARGE, (curl_off_t)info.st_size);
    char what[200];
    snprintf(what, sizeof what, "artifact %s", name);
    const MlflowOutcome outcome = perform(rest, url, what, err);
    curl_slist_free_all(headers);
    fclose(file);
    return outcome;
}
