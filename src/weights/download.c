// Downloads one file with libcurl into the cache: partial file, resume,
// retries, SHA-256 check, the download record, atomic rename (see download.h).
#include "weights/download.h"

#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <math.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <time.h>
#include <unistd.h>

#include "util/cpu.h"
#include "util/file.h"
#include "weights/record.h"

#define SHA256_HEX WEIGHTS_SHA256_HEX
#define MAX_BACKOFF_SECONDS 60.0
#define MAX_REDIRECTS 10L
#define PATH_BYTES 4352

// The partial file and what it is known to hold.
typedef struct Partial {
    char path[PATH_BYTES];    // "<final>.<host>.partial"
    char record[PATH_BYTES];  // "<partial>.etag": "SHA256 SIZE SHA256_FROM SIZE_FROM" of
                              // the file it is part of (an earlier version wrote the first two)
    FILE *file;               // opened for appending
    int64_t size;             // bytes in it
    char sha256[SHA256_HEX];  // the whole file's, as the server announced it ("": unknown)
    int64_t total;            // the whole file's size, -1: unknown
    char sha256_from[32];     // the header sha256 came from (WeightsRecord's sha256_from)
    char size_from[32];       // the header total came from
    EVP_MD_CTX *hash;         // over its bytes so far
} Partial;

// One request (with its redirects) and the headers of its responses.
typedef struct Attempt {
    const DownloadRequest *request;
    Partial *partial;
    long status;                   // of the latest response
    char linked_sha256[SHA256_HEX];  // X-Linked-Etag of the hub's response
    int64_t linked_size;           // X-Linked-Size, -1
    char etag_sha256[SHA256_HEX];  // a 64-hex ETag of the latest response
    int64_t content_length, range_start, range_total;  // of the latest response, -1
    int connected;    // a connection was made (else: no network, not retried)
    int started;      // the body's first bytes arrived and were matched to the partial file
    int restart;      // the response did not continue the partial file, now emptied: retry at once
    ErrorMessage failure;  // what stopped the transfer on this side (the disk, a wrong SHA-256)
    int64_t received;
    double start;
    double deadline;  // time_now() by which the whole file must be in (settings.deadline_seconds)
} Attempt;

static void emit(const Attempt *attempt, WeightsEventKind kind, double wait, const char *detail) {
    const DownloadRequest *request = attempt->request;
    if (!request->progress) return;
    const WeightsEvent event = {
        .kind = kind, .name = request->name, .url = request->url, .path = request->path,
        .done = attempt->partial->size, .total = attempt->partial->total,
        .resumed_from = attempt->partial->size - attempt->received,
        .seconds = time_now() - attempt->start, .wait = wait, .detail = detail};
    request->progress(request->user, &event);
}

// ---- the partial file ------------------------------------------------------------------

static int partial_hash_reset(Partial *partial) {
    return EVP_DigestInit_ex(partial->hash, EVP_sha256(), NULL) == 1 ? 0 : -1;
}

static void partial_forget(Partial *partial) {
    partial->sha256[0] = '\0';
    partial->total = -1;
    unlink(partial->record);
}

static int partial_truncate(Partial *partial, ErrorMessage *err) {
    fflush(partial->file);
    if (ftruncate(fileno(partial->file), 0) != 0)
        return error_set(err, "cannot empty %s: %s", partial->path, strerror(errno));
    partial->size = 0;
    partial_forget(partial);
    return partial_hash_reset(partial) ? error_set(err, "SHA-256 unavailable") : 0;
}

// Hashes the bytes already in the file (an earlier attempt's).
static int partial_hash_existing(Partial *partial, ErrorMessage *err) {
    int64_t hashed;
    if (weights_hash_file(partial->hash, partial->path, partial->size, &hashed, err)) return -1;
    if (hashed != partial->size) return error_set(err, "cannot read %s", partial->path);
    return 0;
}

static int partial_open(Partial *partial, const char *final_path, ErrorMessage *err) {
    char host[256] = "host";
    gethostname(host, sizeof host - 1);  // one partial file per host: see weights/lock.h on NFS
    host[sizeof host - 1] = '\0';
    for (char *c = host; *c; c++)
        if (*c == '/') *c = '_';
    if (snprintf(partial->path, sizeof partial->path, "%s.%s.partial", final_path, host) >=
            (int)sizeof partial->path ||
        snprintf(partial->record, sizeof partial->record, "%s.etag", partial->path) >=
            (int)sizeof partial->record)
        return error_set(err, "path too long: %s", final_path);
    partial->hash = EVP_MD_CTX_new();
    if (!partial->hash || partial_hash_reset(partial)) return error_set(err, "SHA-256 unavailable");
    partial->file = fopen(partial->path, "ab");
    if (!partial->file)
        return error_set(err, "cannot create %s: %s", partial->path, strerror(errno));
    fseeko(partial->file, 0, SEEK_END);
    partial->size = (int64_t)ftello(partial->file);
    partial->sha256[0] = '\0';
    partial->total = -1;
    // What the bytes are part of; without a record they cannot be trusted.
    FILE *record = fopen(partial->record, "r");
    long long total = -1;
    // A part begun by an earlier version names no sources: "unknown".
    char sha256[SHA256_HEX] = "", sha256_from[32] = "unknown", size_from[32] = "unknown";
    const int known = record && fscanf(record, "%64s %lld %31s %31s", sha256, &total,
                                       sha256_from, size_from) >= 2;
    if (record) fclose(record);
    if (!known || partial->size == 0) return partial_truncate(partial, err);
    snprintf(partial->sha256, sizeof partial->sha256, "%s", strcmp(sha256, "-") ? sha256 : "");
    partial->total = total;
    snprintf(partial->sha256_from, sizeof partial->sha256_from, "%s", sha256_from);
    snprintf(partial->size_from, sizeof partial->size_from, "%s", size_from);
    return partial_hash_existing(partial, err);
}

static int partial_write_record(Partial *partial, ErrorMessage *err) {
    char line[SHA256_HEX + 100];
    const int n = snprintf(line, sizeof line, "%s %lld %s %s\n",
                           partial->sha256[0] ? partial->sha256 : "-", (long long)partial->total,
                           partial->sha256_from, partial->size_from);
    const FileChunk chunk = {line, (size_t)n};
    return file_write_atomic(partial->record, &chunk, 1, err);
}

static void partial_close(Partial *partial) {
    if (partial->file) fclose(partial->file);
    partial->file = NULL;
    if (partial->hash) EVP_MD_CTX_free(partial->hash);
    partial->hash = NULL;
}

// ---- libcurl callbacks ---------------------------------------------------------------------

// A quoted, possibly weak ("W/") entity tag that is a SHA-256: 64 hex digits,
// copied in lower case; "" otherwise.
static void sha256_of_etag(const char *value, char *out) {
    out[0] = '\0';
    if (strncmp(value, "W/", 2) == 0) value += 2;
    if (*value == '"') value++;
    int i = 0;
    for (; i < 64 && isxdigit((unsigned char)value[i]); i++) out[i] = (char)tolower(value[i]);
    const char end = value[i];
    if (i == 64 && (end == '"' || end == '\0' || isspace((unsigned char)end))) out[64] = '\0';
    else out[0] = '\0';
}

static int header_is(const char *line, size_t length, const char *name, const char **value) {
    const size_t n = strlen(name);
    if (length <= n || strncasecmp(line, name, n) != 0 || line[n] != ':') return 0;
    *value = line + n + 1;
    while (**value == ' ' || **value == '\t') (*value)++;
    return 1;
}

static size_t on_header(char *buffer, size_t size, size_t count, void *user) {
    Attempt *attempt = user;
    const size_t length = size * count;
    char line[1024];
    const size_t kept = length < sizeof line - 1 ? length : sizeof line - 1;
    memcpy(line, buffer, kept);
    line[kept] = '\0';
    const char *value;
    long long start, end, total;
    if (strncmp(line, "HTTP/", 5) == 0) {  // a new response (a redirect's, or the last)
        const char *space = strchr(line, ' ');
        attempt->status = space ? strtol(space + 1, NULL, 10) : 0;
        attempt->etag_sha256[0] = '\0';
        attempt->content_length = attempt->range_start = attempt->range_total = -1;
    } else if (header_is(line, kept, "X-Linked-Etag", &value)) {
        sha256_of_etag(value, attempt->linked_sha256);
    } else if (header_is(line, kept, "X-Linked-Size", &value)) {
        attempt->linked_size = strtoll(value, NULL, 10);
    } else if (header_is(line, kept, "ETag", &value)) {
        sha256_of_etag(value, attempt->etag_sha256);
    } else if (header_is(line, kept, "Content-Length", &value)) {
        attempt->content_length = strtoll(value, NULL, 10);
    } else if (header_is(line, kept, "Content-Range", &value) &&
               sscanf(value, "bytes %lld-%lld/%lld", &start, &end, &total) == 3) {
        attempt->range_start = start;
        attempt->range_total = total;
    }
    return length;
}

static void disk_failure(Attempt *attempt, const char *what) {
    error_set(&attempt->failure, "%s: free space or fix the cache folder "
                                 "(LIGHTLY_TRAIN_CACHE_DIR)", what);
}

// At the body's first bytes: does this response continue the partial file?
// Returns 0 to go on, -1 to stop the transfer (restart or failure set).
static int match_partial(Attempt *attempt) {
    Partial *partial = attempt->partial;
    ErrorMessage err = {{0}};
    const char *sha256 = attempt->linked_sha256[0] ? attempt->linked_sha256 : attempt->etag_sha256;
    const char *documented = attempt->request->sha256;
    if (documented && sha256[0] && strcmp(sha256, documented) != 0)
        return error_set(&attempt->failure, "the server announces SHA-256 %.12s..., not the "
                                            "%.12s... documented for it (docs/weights.md); "
                                            "nothing was kept", sha256, documented);
    const char *sha256_from = attempt->linked_sha256[0] ? "X-Linked-Etag"
                              : sha256[0]                ? "ETag"
                                                         : "received";
    if (documented) sha256 = documented, sha256_from = "documented";
    int64_t total = attempt->linked_size;
    const char *size_from = total >= 0 ? "X-Linked-Size"
                            : attempt->status == 206 ? "Content-Range"
                                                     : "Content-Length";
    if (total < 0) total = attempt->status == 206 ? attempt->range_total : attempt->content_length;
    if (total < 0) size_from = "received";
    if (partial->size > 0) {
        const int continues = attempt->status == 206 && attempt->range_start == partial->size &&
                              strcmp(partial->sha256, sha256) == 0;
        if (!continues) {
            if (partial_truncate(partial, &err)) goto failed;
            // A 200 brings the whole file from its start: keep it. A 206 of
            // another range or another file: ask again from the start.
            if (attempt->status != 200) return attempt->restart = 1, -1;
        }
    }
    attempt->started = 1;
    if (partial->size == 0) {
        snprintf(partial->sha256, sizeof partial->sha256, "%s", sha256);
        partial->total = total;
        snprintf(partial->sha256_from, sizeof partial->sha256_from, "%s", sha256_from);
        snprintf(partial->size_from, sizeof partial->size_from, "%s", size_from);
        if (partial_write_record(partial, &err)) goto failed;
    }
    emit(attempt, WEIGHTS_START, 0, NULL);
    return 0;
failed:
    disk_failure(attempt, err.text);
    return -1;
}

static size_t on_body(char *data, size_t size, size_t count, void *user) {
    Attempt *attempt = user;
    Partial *partial = attempt->partial;
    const size_t length = size * count;
    if (!attempt->started && match_partial(attempt)) return 0;  // stops the transfer
    if (fwrite(data, 1, length, partial->file) != length) {
        char what[PATH_BYTES + 64];
        snprintf(what, sizeof what, "cannot write %s: %s", partial->path, strerror(errno));
        disk_failure(attempt, what);
        return 0;
    }
    EVP_DigestUpdate(partial->hash, data, length);
    partial->size += (int64_t)length;
    attempt->received += (int64_t)length;
    emit(attempt, WEIGHTS_PROGRESS, 0, NULL);
    return length;
}

// ---- certificates ----------------------------------------------------------------------

const char *weights_ca_bundle(void) {
    // The variables the curl and OpenSSL tools read (libcurl reads neither).
    const char *variables[] = {"CURL_CA_BUNDLE", "SSL_CERT_FILE"};
    for (size_t i = 0; i < sizeof variables / sizeof variables[0]; i++) {
        const char *value = getenv(variables[i]);
        if (value && *value) return value;
    }
    // libcurl's built-in path is the build machine's (Debian's); a copy
    // carried in a wheel also runs where the bundle lives elsewhere.
    static const char *const system_bundles[] = {
        "/etc/ssl/certs/ca-certificates.crt",                 // Debian, Ubuntu, Arch, Gentoo
        "/etc/pki/tls/certs/ca-bundle.crt",                   // Fedora, RHEL, CentOS
        "/etc/pki/ca-trust/extracted/pem/tls-ca-bundle.pem",  // RHEL 7 and later
        "/etc/ssl/ca-bundle.pem",                             // openSUSE, SLES
        "/etc/ssl/cert.pem",                                  // Alpine, macOS
    };
    for (size_t i = 0; i < sizeof system_bundles / sizeof system_bundles[0]; i++)
        if (access(system_bundles[i], R_OK) == 0) return system_bundles[i];
    return NULL;
}

// ---- one attempt -------------------------------------------------------------------------

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init_once(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

static CURLcode perform(Attempt *attempt, char *curl_error) {
    const DownloadRequest *request = attempt->request;
    CURL *curl = curl_easy_init();
    if (!curl) {
        snprintf(curl_error, CURL_ERROR_SIZE, "libcurl could not start");
        return CURLE_FAILED_INIT;
    }
    struct curl_slist *headers = NULL;
    char authorization[1200];
    if (request->token) {
        // A header, not CURLOPT_XOAUTH2_BEARER: libcurl drops custom
        // Authorization headers when a redirect leads to another host (the
        // hub's storage, whose signed URLs must not get the token).
        snprintf(authorization, sizeof authorization, "Authorization: Bearer %s", request->token);
        headers = curl_slist_append(headers, authorization);
    }
    char range[32];
    snprintf(range, sizeof range, "%lld-", (long long)attempt->partial->size);
    curl_easy_setopt(curl, CURLOPT_URL, request->url);
    curl_easy_setopt(curl, CURLOPT_HTTPHEADER, headers);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, "lightly-train-c/" LTC_VERSION);
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, MAX_REDIRECTS);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    const char *ca_bundle = weights_ca_bundle();
    if (ca_bundle) curl_easy_setopt(curl, CURLOPT_CAINFO, ca_bundle);
    if (attempt->partial->size > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range);
    // A stall: less than the minimum rate for the whole timeout; connecting
    // too. The attempt also ends at the download's deadline.
    const long stall = (long)ceil(request->settings.stall_seconds);
    const double left = attempt->deadline - time_now();
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, (long)ceil(request->settings.min_rate));
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, stall);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, stall);
    curl_easy_setopt(curl, CURLOPT_TIMEOUT_MS, left > 0.001 ? (long)ceil(left * 1000) : 1L);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, attempt);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, on_body);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, attempt);
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, curl_error);
    curl_error[0] = '\0';
    const CURLcode code = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    if (status) attempt->status = status;
    curl_off_t connect_time = 0;
    curl_easy_getinfo(curl, CURLINFO_CONNECT_TIME_T, &connect_time);
    attempt->connected = attempt->status != 0 || connect_time > 0;
    if (!curl_error[0]) snprintf(curl_error, CURL_ERROR_SIZE, "%s", curl_easy_strerror(code));
    curl_slist_free_all(headers);
    curl_easy_cleanup(curl);
    return code;
}

typedef enum Outcome { COMPLETE, RETRY_NOW, RETRY_LATER, FAILED, PAST_DEADLINE } Outcome;

// What an attempt's end means; *why gets the reason of a retry or failure.
static Outcome judge(Attempt *attempt, CURLcode code, const char *curl_error, char *why,
                     size_t size) {
    const long status = attempt->status;
    Partial *partial = attempt->partial;
    if (attempt->restart) return snprintf(why, size, "the server changed the file"), RETRY_NOW;
    if (attempt->failure.text[0]) return snprintf(why, size, "%s", attempt->failure.text), FAILED;
    switch (code) {
    case CURLE_OK:
        if (!attempt->started && match_partial(attempt)) {  // an empty file: no body callback
            snprintf(why, size, "%s", attempt->failure.text);
            return attempt->restart ? RETRY_NOW : FAILED;
        }
        if (partial->total >= 0 && partial->size != partial->total) {
            snprintf(why, size, "the transfer ended at %lld of %lld bytes",
                     (long long)partial->size, (long long)partial->total);
            return partial->size < partial->total ? RETRY_LATER : RETRY_NOW;
        }
        return COMPLETE;
    case CURLE_HTTP_RETURNED_ERROR:
        snprintf(why, size, "HTTP %ld", status);
        if (status == 416) return RETRY_NOW;  // the partial file is not a prefix: start over
        return status == 429 || status >= 500 ? RETRY_LATER : FAILED;
    case CURLE_COULDNT_RESOLVE_HOST:
    case CURLE_COULDNT_RESOLVE_PROXY:
    case CURLE_COULDNT_CONNECT:
        return snprintf(why, size, "%s", curl_error), FAILED;
    case CURLE_OPERATION_TIMEDOUT:
        if (time_now() >= attempt->deadline) return PAST_DEADLINE;
        if (!attempt->connected) return snprintf(why, size, "%s", curl_error), FAILED;
        snprintf(why, size,
                 "less than %g bytes/s for %g s (LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC, "
                 "LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC)",
                 ceil(attempt->request->settings.min_rate),
                 ceil(attempt->request->settings.stall_seconds));
        return RETRY_LATER;
    case CURLE_SEND_ERROR:
    case CURLE_RECV_ERROR:
    case CURLE_PARTIAL_FILE:
    case CURLE_GOT_NOTHING:
    case CURLE_HTTP2:
    case CURLE_HTTP2_STREAM:
    case CURLE_SSL_CONNECT_ERROR:
        return snprintf(why, size, "%s", curl_error), RETRY_LATER;
    default:
        return snprintf(why, size, "%s", curl_error), FAILED;
    }
}

// ---- the whole download ---------------------------------------------------------------------

// The failure message: the name, the URL, what happened, what to do.
static int fail(const DownloadRequest *request, const Attempt *attempt, CURLcode code,
                const char *why, ErrorMessage *err) {
    const char *name = request->name, *url = request->url;
    const long status = attempt->status;
    if (attempt->failure.text[0])
        return error_set(err, "%s: %s: %s", name, url, attempt->failure.text);
    if (code == CURLE_HTTP_RETURNED_ERROR && status == 404)
        return error_set(err, "%s: %s: not found (HTTP 404): no such repository, revision or "
                              "file; check the name (lightly-train-c weights lists the known "
                              "ones)", name, url);
    if (code == CURLE_HTTP_RETURNED_ERROR && (status == 401 || status == 403) &&
        request->denied_hint)
        return error_set(err, "%s: %s: access denied (HTTP %ld): %s", name, url, status,
                         request->denied_hint);
    if (code == CURLE_HTTP_RETURNED_ERROR && (status == 401 || status == 403))
        return error_set(err, "%s: %s: access denied (HTTP %ld): the repository is gated or "
                              "private: accept its licence on its page, then set HF_TOKEN (or "
                              "log in with the Hugging Face tools, which write $HF_HOME/token)",
                         name, url, status);
    if (!attempt->connected &&
        (code == CURLE_COULDNT_RESOLVE_HOST || code == CURLE_COULDNT_RESOLVE_PROXY ||
         code == CURLE_COULDNT_CONNECT || code == CURLE_OPERATION_TIMEDOUT))
        return error_set(err, "%s: %s: no network (%s): run 'lightly-train-c weights fetch %s' "
                              "where there is network, into the same cache, or download the "
                              "URL by hand to %s", name, url, why, name, request->path);
    return error_set(err, "%s: %s: %s (after %d retries): run the command again to continue "
                          "(the part received is kept)", name, url, why,
                     request->settings.retries);
}

// The deadline passed before the file was complete.
static int fail_deadline(const DownloadRequest *request, const Partial *partial,
                         ErrorMessage *err) {
    char total[40] = "";
    if (partial->total >= 0) snprintf(total, sizeof total, " of %lld", (long long)partial->total);
    return error_set(err, "%s: %s: not complete within %g s (LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC): "
                          "%lld%s bytes received; run the command again to continue (the part "
                          "received is kept)", request->name, request->url,
                     request->settings.deadline_seconds, (long long)partial->size, total);
}

// What the download verified, for every later use of the file (record.h).
static int write_download_record(const DownloadRequest *request, const Partial *partial,
                                 const char *sha256, ErrorMessage *err) {
    WeightsRecord record = {.size = partial->size};
    snprintf(record.sha256, sizeof record.sha256, "%s", sha256);
    snprintf(record.sha256_from, sizeof record.sha256_from, "%s",
             partial->sha256[0] ? partial->sha256_from : "received");
    snprintf(record.size_from, sizeof record.size_from, "%s",
             partial->total >= 0 ? partial->size_from : "received");
    snprintf(record.url, sizeof record.url, "%s", request->url);
    ErrorMessage write_err = {{0}};
    if (weights_record_write(request->path, &record, &write_err) == 0) return 0;
    return error_set(err, "%s: %s: free space or fix the cache folder (LIGHTLY_TRAIN_CACHE_DIR)",
                     request->name, write_err.text);
}

// The partial file complete: checks its hash, writes its record, renames it
// into place (over a damaged file being replaced).
static int finish(const DownloadRequest *request, Attempt *attempt, ErrorMessage *err) {
    Partial *partial = attempt->partial;
    char sha256[SHA256_HEX];
    weights_hash_hex(partial->hash, sha256);
    const char *prefix = request->sha256_prefix;
    const int announced_wrong = partial->sha256[0] && strcmp(sha256, partial->sha256) != 0;
    if (announced_wrong || (prefix && strncmp(sha256, prefix, strlen(prefix)) != 0)) {
        partial_close(partial);
        unlink(partial->path);
        unlink(partial->record);
        return error_set(err, "%s: %s: SHA-256 mismatch (received %.12s..., %s %.12s...): the "
                              "file was removed; run the command again to download it anew",
                         request->name, request->url, sha256,
                         announced_wrong ? "the server announced" : "the file name gives",
                         announced_wrong ? partial->sha256 : prefix);
    }
    if (fflush(partial->file) != 0 || fsync(fileno(partial->file)) != 0 ||
        fclose(partial->file) != 0) {
        partial->file = NULL;
        return error_set(err, "%s: cannot write %s: %s", request->name, partial->path,
                         strerror(errno));
    }
    partial->file = NULL;
    if (write_download_record(request, partial, sha256, err)) return -1;
    if (rename(partial->path, request->path) != 0)
        return error_set(err, "%s: cannot rename %s to %s: %s", request->name, partial->path,
                         request->path, strerror(errno));
    file_sync_parent_directory(request->path);
    unlink(partial->record);
    char detail[160];
    if (partial->sha256[0]) snprintf(detail, sizeof detail, "SHA-256 %s verified", sha256);
    else if (prefix) snprintf(detail, sizeof detail, "SHA-256 %s verified (its name's %s)",
                              sha256, prefix);
    else snprintf(detail, sizeof detail, "SHA-256 %s (the server published none to check)",
                  sha256);
    emit(attempt, WEIGHTS_DONE, 0, detail);
    return 0;
}

int weights_download(const DownloadRequest *request, ErrorMessage *err) {
    pthread_once(&curl_once, curl_init_once);
    Partial partial = {0};
    Attempt attempt = {.request = request, .partial = &partial, .linked_size = -1};
    if (partial_open(&partial, request->path, err)) {
        partial_close(&partial);
        return error_prefix(err, "%s", request->name);
    }
    int status = -1, failures = 0, restarts = 0;
    const double deadline = time_now() + request->settings.deadline_seconds;
    // An attempt counts as progress (its failure does not use up a retry)
    // when it brought what the minimum rate brings in one chunk timeout: a
    // server that sends a few bytes and stalls, on every connection, ends.
    const double progress_bytes = request->settings.min_rate * request->settings.stall_seconds;
    // Complete already (a run stopped before its rename): check it without the network.
    if (partial.total > 0 && partial.size == partial.total) {
        attempt.start = time_now();
        status = finish(request, &attempt, err);
        partial_close(&partial);
        return status;
    }
    for (;;) {
        char curl_error[CURL_ERROR_SIZE], why[600];
        attempt = (Attempt){.request = request, .partial = &partial, .linked_size = -1,
                            .start = time_now(), .deadline = deadline};
        const CURLcode code = perform(&attempt, curl_error);
        const Outcome outcome = judge(&attempt, code, curl_error, why, sizeof why);
        if (outcome == COMPLETE) {
            status = finish(request, &attempt, err);
            break;
        }
        if (outcome == PAST_DEADLINE || time_now() >= deadline) {
            status = fail_deadline(request, &partial, err);
            break;
        }
        // The partial file does not fit what the server sends: start it over
        // (twice at most, against a server that keeps changing its file).
        if (outcome == RETRY_NOW && restarts++ < 2 && partial_truncate(&partial, err) == 0)
            continue;
        if (outcome == RETRY_LATER) {
            if ((double)attempt.received >= progress_bytes) failures = 0;  // the count starts again
            if (failures < request->settings.retries) {
                const double wait = fmin(MAX_BACKOFF_SECONDS,
                                         request->settings.backoff_seconds * pow(2, failures));
                if (time_now() + wait >= deadline) {  // the wait alone would pass it
                    status = fail_deadline(request, &partial, err);
                    break;
                }
                failures++;
                emit(&attempt, WEIGHTS_RETRY, wait, why);
                sleep_seconds(wait);
                continue;
            }
        }
        status = fail(request, &attempt, code, why, err);
        break;
    }
    partial_close(&partial);
    if (status != 0 && partial.size == 0) {  // nothing worth keeping for a next run
        unlink(partial.path);
        unlink(partial.record);
    }
    return status;
}
