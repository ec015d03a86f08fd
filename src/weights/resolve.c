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

static int is_file(const char *path) {
    struct stat info;
    return stat(path, &info) == 0 && S_ISREG(info.st_mode);
}

// A reference rather than a file: nothing exists at text and it reads as one.
static int is_reference(const char *text) {
    struct stat info;
    return stat(text, &info) != 0 && weights_is_reference(text);
}

// Our cache's or the Hugging Face cache's copy: 1 found (out), 0 not (out:
// where ours would be), -1 error.
static int find_cached(const WeightsRef *ref, char *out, size_t size, ErrorMessage *err) {
    if (weights_cache_path(ref, out, size, err)) return -1;
    if (is_file(out)) return 1;
    char hf_path[4096];
    if (weights_hf_cached_path(ref, hf_path, sizeof hf_path)) {
        if (snprintf(out, size, "%s", hf_path) >= (int)size)
            return error_set(err, "path too long: %s", hf_path);
        return 1;
    }
    return 0;
}

int weights_local_path(const char *text, char *out, size_t size, ErrorMessage *err) {
    if (!is_reference(text)) {
        if (snprintf(out, size, "%s", text) >= (int)size) return error_set(err, "path too long");
        return 0;
    }
    WeightsRef ref;
    if (weights_parse(text, &ref, err)) return -1;
    const int found = find_cached(&ref, out, size, err);
    if (found < 0) return -1;
    if (found) return 0;
    return error_set(err, "%s is not downloaded (not in %s nor the Hugging Face cache): "
                          "lightly-train-c weights fetch %s", text, out, text);
}

const char *weights_known_arch(const char *text) {
    if (!is_reference(text)) return NULL;
    const WeightsEntry *entry = weights_find(text);
    return entry ? entry->arch : NULL;
}

typedef struct Waiting {
    WeightsProgress progress;
    void *user;
    const char *name, *url, *path;
} Waiting;

static void report_waiting(void *user) {
    const Waiting *waiting = user;
    if (!waiting->progress) return;
    const WeightsEvent event = {.kind = WEIGHTS_WAITING, .name = waiting->name,
                                .url = waiting->url, .path = waiting->path, .total = -1};
    waiting->progress(waiting->user, &event);
}

static int parent_folder(const char *path, ErrorMessage *err) {
    char folder[4096];
    snprintf(folder, sizeof folder, "%s", path);
    char *slash = strrchr(folder, '/');
    if (!slash || slash == folder) return 0;
    *slash = '\0';
    return output_folder_create(folder, err);
}

int weights_fetch(const char *text, WeightsProgress progress, void *user, char *out,
                  size_t size, int *downloaded, ErrorMessage *err) {
    int ignored;
    if (!downloaded) downloaded = &ignored;
    *downloaded = 0;
    if (!is_reference(text)) return weights_local_path(text, out, size, err);
    WeightsRef ref;
    if (weights_parse(text, &ref, err)) return -1;
    const int found = find_cached(&ref, out, size, err);
    if (found) return found < 0 ? -1 : 0;
    char url[4096];
    if (weights_url(&ref, url, sizeof url, err)) return -1;
    if (weights_offline())
        return error_set(err, "%s is not downloaded and HF_HUB_OFFLINE forbids the network: "
                              "run 'lightly-train-c weights fetch %s' where there is network "
                              "into the same cache, or download %s by hand to %s",
                         text, text, url, out);
    DownloadRequest request = {.name = text, .url = url, .path = out, .sha256 = ref.sha256,
                               .progress = progress, .user = user};
    char token[1024];
    if (weights_token(token, sizeof token)) request.token = token;
    if (weights_download_settings(&request.settings, err) || parent_folder(out, err))
        return error_prefix(err, "%s", text);
    char lock_path[4200];
    snprintf(lock_path, sizeof lock_path, "%s.lock", out);
    Waiting waiting = {progress, user, text, url, out};
    WeightsLock lock;
    if (weights_lock_take(&lock, lock_path, report_waiting, &waiting, err))
        return error_prefix(err, "%s", text);
    int status = 0;
    if (!is_file(out)) {  // another process may have brought it while this one waited
        status = weights_download(&request, err);
        *downloaded = status == 0;
    }
    weights_lock_release(&lock);
    return status;
}
