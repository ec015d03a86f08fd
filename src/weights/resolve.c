// Names and hub references to files, with or without the network (see resolve.h).
#include "weights/resolve.h"

#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "util/output_path.h"
#include "weights/cache.h"
#include "weights/lock.h"
#include "weights/names.h"
#include "weights/record.h"

static int is_file(const char *path) {
    struct stat info;
    return stat(path, &info) == 0 && S_ISREG(info.st_mode);
}

// A reference rather than a file: nothing exists at text and it reads as one.
static int is_reference(const char *text) {
    struct stat info;
    return stat(text, &info) != 0 && weights_is_reference(text);
}

// A GitHub release asset's file of that name in the working directory, our
// cache's or the Hugging Face cache's copy: 1 found (out), 0 not (out:
// where ours would be), -1 error. Ours is checked against its download
// record: its size, its SHA-256 too when hash is 1 (*check, *why). The
// Hugging Face cache's is used as its libraries left it (*check: MATCHES).
static int find_cached(const WeightsRef *ref, int hash, char *out, size_t size,
                       WeightsCheck *check, char *why, size_t why_size, ErrorMessage *err) {
    *check = WEIGHTS_CHECK_MATCHES;
    // Ultralytics' YOLO("yolo11s.pt") takes ./yolo11s.pt before any download
    // (attempt_download_asset): so does its name here, as the user's file.
    if (ref->source == WEIGHTS_GITHUB_RELEASE && is_file(ref->filename)) {
        if (snprintf(out, size, "%s", ref->filename) >= (int)size)
            return error_set(err, "path too long: %s", ref->filename);
        return 1;
    }
    if (weights_cache_path(ref, out, size, err)) return -1;
    if (is_file(out))
        return weights_record_check(out, hash, check, why, why_size, err) ? -1 : 1;
    char hf_path[4096];
    if (weights_hf_cached_path(ref, hf_path, sizeof hf_path) ||
        weights_torch_cached_path(ref, hf_path, sizeof hf_path)) {
        if (snprintf(out, size, "%s", hf_path) >= (int)size)
            return error_set(err, "path too long: %s", hf_path);
        return 1;
    }
    return 0;
}

static int damaged_error(const char *text, const char *path, const char *why,
                         ErrorMessage *err) {
    return error_set(err, "%s: the cached file %s %s: delete it (with its .verified record) or run "
                          "'lightly-train-c weights fetch %s' again", text, path, why, text);
}

int weights_local_path(const char *text, char *out, size_t size, ErrorMessage *err) {
    if (!is_reference(text)) {
        if (snprintf(out, size, "%s", text) >= (int)size) return error_set(err, "path too long");
        return 0;
    }
    WeightsRef ref;
    WeightsCheck check;
    char why[300];
    if (weights_parse(text, &ref, err)) return -1;
    const int found = find_cached(&ref, 0, out, size, &check, why, sizeof why, err);
    if (found < 0) return -1;
    if (found) return check == WEIGHTS_CHECK_DAMAGED ? damaged_error(text, out, why, err) : 0;
    return error_set(err, "%s is not downloaded (not in %s nor %s cache): "
                          "lightly-train-c weights fetch %s", text, out,
                     ref.source == WEIGHTS_TORCHVISION ? "PyTorch's" : "the Hugging Face", text);
}

const char *weights_known_arch(const char *text) {
    if (!is_reference(text)) return NULL;
    const WeightsEntry *entry = weights_find(text);
    return entry ? entry->arch : NULL;
}

// Where weights_fetch reports its events (progress may be NULL).
typedef struct Reporter {
    WeightsProgress progress;
    void *user;
    const char *name, *url, *path;
} Reporter;

static void report(const Reporter *reporter, WeightsEventKind kind, const char *detail) {
    if (!reporter->progress) return;
    const WeightsEvent event = {.kind = kind, .name = reporter->name, .url = reporter->url,
                                .path = reporter->path, .total = -1, .detail = detail};
    reporter->progress(reporter->user, &event);
}

static void report_waiting(void *user) { report(user, WEIGHTS_WAITING, NULL); }

static int same_file(const char *path, const struct stat *before) {
    struct stat info;
    return stat(path, &info) == 0 && info.st_dev == before->st_dev &&
           info.st_ino == before->st_ino;
}

static int parent_folder(const char *path, ErrorMessage *err) {
    char folder[4096];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (!slash || slash == folder) return 0;
    *slash = '\0';
    return output_folder_create(folder, err);
}

int weights_fetch(const char *text, int repair, WeightsProgress progress, void *user, char *out,
                  size_t size, int *downloaded, ErrorMessage *err) {
    int ignored;
    if (!downloaded) downloaded = &ignored;
    *downloaded = 0;
    if (!is_reference(text)) return weights_local_path(text, out, size, err);
    WeightsRef ref;
    WeightsCheck check;
    char why[300], url[4096];
    if (weights_parse(text, &ref, err) || weights_url(&ref, url, sizeof url, err)) return -1;
    const int found = find_cached(&ref, repair, out, size, &check, why, sizeof why, err);
    if (found < 0) return -1;
    Reporter reporter = {progress, user, text, url, out};
    struct stat damaged = {0};
    if (found && check == WEIGHTS_CHECK_UNRECORDED) report(&reporter, WEIGHTS_UNVERIFIED, NULL);
    if (found && check != WEIGHTS_CHECK_DAMAGED) return 0;
    if (found && (!repair || stat(out, &damaged) != 0)) return damaged_error(text, out, why, err);
    if (weights_offline())
        return error_set(err, "%s %s and HF_HUB_OFFLINE forbids the network: "
                              "run 'lightly-train-c weights fetch %s' where there is network "
                              "into the same cache, or download %s by hand to %s",
                         text, found ? "is damaged in the cache" : "is not downloaded", text, url,
                         out);
    if (found) report(&reporter, WEIGHTS_DAMAGED, why);  // damaged since its download
    DownloadRequest request = {.name = text, .url = url, .path = out, .sha256 = ref.sha256,
                               .progress = progress, .user = user};
    char token[1024];  // the hub's: never sent to GitHub
    if (ref.source == WEIGHTS_HUGGING_FACE && weights_token(token, sizeof token))
        request.token = token;
    char hash_prefix[65];
    if (ref.source == WEIGHTS_TORCHVISION &&
        weights_hash_prefix(ref.filename, hash_prefix, sizeof hash_prefix))
        request.sha256_prefix = hash_prefix;
    if (ref.source == WEIGHTS_GITHUB_RELEASE)
        request.denied_hint = "GitHub refused the release asset (a rate limit, or a proxy): "
                              "try again later, or download the URL by hand into the working "
                              "directory";
    if (weights_download_settings(&request.settings, err) || parent_folder(out, err))
        return error_prefix(err, "%s", text);
    char lock_path[4200];
    snprintf(lock_path, sizeof lock_path, "%s.lock", out);
    WeightsLock lock;
    if (weights_lock_take(&lock, lock_path, report_waiting, &reporter, err))
        return error_prefix(err, "%s", text);
    int status = 0;
    // Another process may have brought (or repaired) it while this one waited.
    if (!is_file(out) || (found && same_file(out, &damaged))) {
        status = weights_download(&request, err);
        *downloaded = status == 0;
    }
    weights_lock_release(&lock);
    return status;
}
