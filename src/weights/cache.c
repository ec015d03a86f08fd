// Cache folders, the Hugging Face cache, the hub's endpoint and token, and
// the download settings, all from the environment (see cache.h).
#include "weights/cache.h"

#include <ctype.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/stat.h>

#define DEFAULT_ENDPOINT "https://huggingface.co"
#define DEFAULT_GITHUB_ENDPOINT "https://github.com"
#define DEFAULT_TORCHVISION_ENDPOINT "https://download.pytorch.org"

static const char *env(const char *name) {
    const char *value = getenv(name);
    return value && *value ? value : NULL;
}

// "$XDG_CACHE_HOME/<leaf>", else "$HOME/.cache/<leaf>".
static int user_cache(const char *leaf, char *out, size_t size, ErrorMessage *err) {
    const char *xdg = env("XDG_CACHE_HOME"), *home = env("HOME");
    int n;
    if (xdg) n = snprintf(out, size, "%s/%s", xdg, leaf);
    else if (home) n = snprintf(out, size, "%s/.cache/%s", home, leaf);
    else return error_set(err, "no cache folder: set LIGHTLY_TRAIN_CACHE_DIR (HOME is not set)");
    return n < (int)size ? 0 : error_set(err, "cache path too long");
}

int weights_cache_root(char *out, size_t size, ErrorMessage *err) {
    const char *dir = env("LIGHTLY_TRAIN_CACHE_DIR");
    if (!dir) return user_cache("lightly-train-c", out, size, err);
    if (snprintf(out, size, "%s", dir) >= (int)size) return error_set(err, "cache path too long");
    return 0;
}

// "org/name" -> "<kind>--org--name" ("models--org--name": the hub cache's
// folder name).
static void repo_folder(const char *kind, const char *repo, char *out, size_t size) {
    const char *slash = strchr(repo, '/');
    snprintf(out, size, "%s--%.*s--%s", kind, (int)(slash - repo), repo, slash + 1);
}

int weights_cache_path(const WeightsRef *ref, char *out, size_t size, ErrorMessage *err) {
    char root[3072], folder[WEIGHTS_REPO_MAX + 16];
    if (weights_cache_root(root, sizeof root, err)) return -1;
    if (ref->source == WEIGHTS_TORCHVISION)
        return snprintf(out, size, "%s/models/torchvision/%s", root, ref->filename) < (int)size
                   ? 0
                   : error_set(err, "cache path too long under %s", root);
    const int github = ref->source == WEIGHTS_GITHUB_RELEASE;
    repo_folder(github ? "releases" : "models", ref->repo, folder, sizeof folder);
    if (snprintf(out, size, "%s/models/%s/%s/%s/%s", root, github ? "github" : "hub", folder,
                 ref->revision, ref->filename) >= (int)size)
        return error_set(err, "cache path too long under %s", root);
    return 0;
}

static int hf_hub_cache(char *out, size_t size) {
    const char *hub = env("HF_HUB_CACHE"), *home = env("HF_HOME");
    if (hub) return snprintf(out, size, "%s", hub) < (int)size ? 0 : -1;
    if (home) return snprintf(out, size, "%s/hub", home) < (int)size ? 0 : -1;
    return user_cache("huggingface/hub", out, size, NULL);
}

static int is_commit(const char *revision) {
    if (strlen(revision) != 40) return 0;
    for (const char *c = revision; *c; c++)
        if (!isxdigit((unsigned char)*c)) return 0;
    return 1;
}

int weights_hf_cached_path(const WeightsRef *ref, char *out, size_t size) {
    char hub[2048], folder[WEIGHTS_REPO_MAX + 16], commit[64] = "";
    if (ref->source != WEIGHTS_HUGGING_FACE || hf_hub_cache(hub, sizeof hub)) return 0;
    repo_folder("models", ref->repo, folder, sizeof folder);
    if (is_commit(ref->revision)) {
        memcpy(commit, ref->revision, 41);
    } else {  // refs/<revision> holds the commit the revision pointed to when downloaded
        char refs[4096];
        snprintf(refs, sizeof refs, "%s/%s/refs/%s", hub, folder, ref->revision);
        FILE *file = fopen(refs, "r");
        if (!file) return 0;
        const int read = fscanf(file, "%40s", commit) == 1;
        fclose(file);
        if (!read || !is_commit(commit)) return 0;
    }
    if (snprintf(out, size, "%s/%s/snapshots/%s/%s", hub, folder, commit, ref->filename) >=
        (int)size)
        return 0;
    struct stat info;  // follows the snapshot's symlink into blobs/
    return stat(out, &info) == 0 && S_ISREG(info.st_mode);
}

int weights_torch_cached_path(const WeightsRef *ref, char *out, size_t size) {
    const char *torch_home = env("TORCH_HOME");
    char home[2048];
    if (ref->source != WEIGHTS_TORCHVISION) return 0;
    if (torch_home) snprintf(home, sizeof home, "%s", torch_home);
    else if (user_cache("torch", home, sizeof home, NULL)) return 0;
    if (snprintf(out, size, "%s/hub/checkpoints/%s", home, ref->filename) >= (int)size) return 0;
    struct stat info;
    return stat(out, &info) == 0 && S_ISREG(info.st_mode);
}

int weights_hash_prefix(const char *filename, char *out, size_t size) {
    const char *dash = strrchr(filename, '-');
    if (!dash) return 0;
    size_t length = 0;
    while (isxdigit((unsigned char)dash[1 + length]) && !isupper((unsigned char)dash[1 + length]))
        length++;
    if (length == 0 || dash[1 + length] != '.' || length >= size) return 0;
    memcpy(out, dash + 1, length);
    out[length] = '\0';
    return 1;
}

int weights_url(const WeightsRef *ref, char *out, size_t size, ErrorMessage *err) {
    const int github = ref->source == WEIGHTS_GITHUB_RELEASE;
    const int torchvision = ref->source == WEIGHTS_TORCHVISION;
    const char *variable = github        ? "LIGHTLY_TRAIN_GITHUB_ENDPOINT"
                           : torchvision ? "LIGHTLY_TRAIN_TORCHVISION_ENDPOINT"
                                         : "HF_ENDPOINT";
    const char *endpoint = env(variable);
    if (!endpoint)
        endpoint = github        ? DEFAULT_GITHUB_ENDPOINT
                   : torchvision ? DEFAULT_TORCHVISION_ENDPOINT
                                 : DEFAULT_ENDPOINT;
    size_t length = strlen(endpoint);
    while (length > 0 && endpoint[length - 1] == '/') length--;
    // GitHub's release asset URL, as Ultralytics' attempt_download_asset
    // forms it; torchvision's weights URL, as its enums name it.
    int n;
    if (torchvision)
        n = snprintf(out, size, "%.*s/models/%s", (int)length, endpoint, ref->filename);
    else
        n = snprintf(out, size,
                     github ? "%.*s/%s/releases/download/%s/%s" : "%.*s/%s/resolve/%s/%s",
                     (int)length, endpoint, ref->repo, ref->revision, ref->filename);
    if (n >= (int)size) return error_set(err, "URL too long (%s %s)", variable, endpoint);
    return 0;
}

int weights_offline(void) {
    const char *value = env("HF_HUB_OFFLINE");
    if (!value) return 0;
    static const char *const truths[] = {"1", "ON", "YES", "TRUE"};
    for (size_t i = 0; i < sizeof truths / sizeof truths[0]; i++)
        if (strcasecmp(value, truths[i]) == 0) return 1;
    return 0;
}

// Copies text without surrounding white space (a token file ends in a newline).
static int trimmed(const char *text, char *out, size_t size) {
    while (isspace((unsigned char)*text)) text++;
    size_t length = strlen(text);
    while (length > 0 && isspace((unsigned char)text[length - 1])) length--;
    if (length == 0 || length >= size) return 0;
    memcpy(out, text, length);
    out[length] = '\0';
    return 1;
}

int weights_token(char *out, size_t size) {
    const char *token = env("HF_TOKEN");
    if (token) return trimmed(token, out, size);
    char path[4096], home[2048];
    const char *token_path = env("HF_TOKEN_PATH"), *hf_home = env("HF_HOME");
    if (!token_path && !hf_home && user_cache("huggingface", home, sizeof home, NULL) == 0)
        hf_home = home;
    if (token_path) {
        if (snprintf(path, sizeof path, "%s", token_path) >= (int)sizeof path) return 0;
    } else if (!hf_home || snprintf(path, sizeof path, "%s/token", hf_home) >= (int)sizeof path) {
        return 0;
    }
    FILE *file = fopen(path, "r");
    if (!file) return 0;
    char line[1024];
    const int found = fgets(line, sizeof line, file) && trimmed(line, out, size);
    fclose(file);
    return found;
}

// A number from the environment within [min, max]; fallback when unset.
static int env_number(const char *name, double fallback, double min, double max, double *value,
                      ErrorMessage *err) {
    const char *text = env(name);
    *value = fallback;
    if (!text) return 0;
    char *end = NULL;
    *value = strtod(text, &end);
    if (end == text || *end != '\0' || !(*value >= min && *value <= max))
        return error_set(err, "%s=%s: expected a number from %g to %g", name, text, min, max);
    return 0;
}

int weights_download_settings(DownloadSettings *settings, ErrorMessage *err) {
    double retries;
    if (env_number("LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC", 180, 1, 86400,
                   &settings->stall_seconds, err) ||
        env_number("LIGHTLY_TRAIN_DOWNLOAD_MIN_BYTES_PER_SEC", 1000, 1, 1e9, &settings->min_rate,
                   err) ||
        env_number("LIGHTLY_TRAIN_DOWNLOAD_RETRIES", 5, 0, 100, &retries, err) ||
        env_number("LIGHTLY_TRAIN_DOWNLOAD_BACKOFF_SEC", 1, 0, 3600, &settings->backoff_seconds,
                   err) ||
        env_number("LIGHTLY_TRAIN_DOWNLOAD_DEADLINE_SEC", 21600, 1, 1e7,
                   &settings->deadline_seconds, err))
        return -1;
    settings->retries = (int)retries;
    return 0;
}
