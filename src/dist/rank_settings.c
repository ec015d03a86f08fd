// Checking that the ranks of a run were started alike (see rank_settings.h).
#include "dist/rank_settings.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "data/scan.h"

uint64_t rank_hash_bytes(uint64_t hash, const void *bytes, size_t length) {
    const unsigned char *at = bytes;
    for (size_t i = 0; i < length; i++) hash = (hash ^ at[i]) * 1099511628211ull;
    return hash;
}

uint64_t rank_hash_values(Backend *backend, const float *values, size_t count, uint64_t hash) {
    enum { PIECE = 1 << 16 };
    float *host = malloc(PIECE * sizeof *host);
    if (!host) return 0;
    for (size_t done = 0; done < count; done += PIECE) {
        const size_t piece = count - done < PIECE ? count - done : PIECE;
        backend->op.download(backend, host, values + done, piece * sizeof *host);
        hash = rank_hash_bytes(hash, host, piece * sizeof *host);
    }
    free(host);
    return hash;
}

void rank_setting_text(RankSetting *setting, const char *name, const char *text) {
    setting->name = name;
    setting->hash = rank_hash_bytes(RANK_HASH_START, text, strlen(text));
    const size_t length = strlen(text);
    if (length < sizeof setting->shown) {
        memcpy(setting->shown, text, length + 1);
    } else {  // cut, marked with "..."
        memcpy(setting->shown, text, sizeof setting->shown - 4);
        memcpy(setting->shown + sizeof setting->shown - 4, "...", 4);
    }
}

// The length of "root/" that starts name (the root as given, one '/' after
// it; data/scan.h's dataset_scan_many), or of the whole name when it is the
// root (an image file given as --data), 0 when it is neither.
static size_t root_prefix(const char *name, const char *root) {
    size_t length = strlen(root);
    if (length > 0 && root[length - 1] == '/') length--;  // as dataset_scan_many
    if (strncmp(name, root, length) != 0) return 0;
    return name[length] == '/' ? length + 1 : name[length] == '\0' ? length : 0;
}

void rank_setting_data(RankSetting *setting, const Dataset *dataset, const char *const *roots,
                       int root_count) {
    uint64_t hash = RANK_HASH_START;
    int folder = 0;  // several folders: the names are "root/relative", folder by folder
    for (size_t i = 0; i < dataset->count; i++) {
        const char *name = dataset_path(dataset, i);
        if (root_count > 1) {
            size_t skip = root_prefix(name, roots[folder]);
            while (!skip && folder + 1 < root_count) skip = root_prefix(name, roots[++folder]);
            name += skip;
            hash = rank_hash_bytes(hash, &folder, sizeof folder);
        }
        hash = rank_hash_bytes(hash, name, strlen(name) + 1);  // with its NUL: "ab","c" != "a","bc"
    }
    char shown[RANK_SETTING_SHOWN];
    snprintf(shown, sizeof shown, "%zu images (list %08x)", dataset->count, (unsigned)hash);
    rank_setting_text(setting, "--data", shown);
    setting->hash = rank_hash_bytes(hash, &dataset->count, sizeof dataset->count);
}

// What goes from rank 0 to the others per setting.
typedef struct SettingRecord {
    uint64_t hash;
    char shown[RANK_SETTING_SHOWN];
} SettingRecord;

int rank_settings_check(Communicator *comm, Backend *backend, const RankSetting *settings,
                        int count, ErrorMessage *err) {
    err->text[0] = '\0';
    if (comm_world_size(comm) == 1 || count <= 0) return 0;
    const size_t bytes = (size_t)count * sizeof(SettingRecord);
    SettingRecord *mine = calloc((size_t)count, sizeof *mine);
    SettingRecord *rank0 = calloc((size_t)count, sizeof *rank0);
    void *shared = backend->op.alloc(backend, bytes < sizeof(float) ? sizeof(float) : bytes);
    if (!mine || !rank0 || !shared) {
        free(mine);
        free(rank0);
        if (shared) backend->op.free(backend, shared);
        return error_set(err, "out of memory for the ranks' settings");
    }
    for (int i = 0; i < count; i++) {
        mine[i].hash = settings[i].hash;
        memcpy(mine[i].shown, settings[i].shown, sizeof mine[i].shown);
        mine[i].shown[sizeof mine[i].shown - 1] = '\0';
    }
    backend->op.upload(backend, shared, mine, bytes);
    int status = comm_broadcast(comm, shared, bytes, 0, err);
    int differs = -1;  // the first setting that differs from rank 0's
    if (!status) {
        backend->op.download(backend, rank0, shared, bytes);
        for (int i = 0; i < count && differs < 0; i++)
            if (rank0[i].hash != mine[i].hash) differs = i;
    }
    // Every rank learns whether any differs (the sum of the flags).
    float flag = differs >= 0 ? 1.0f : 0.0f;
    if (!status) {
        backend->op.upload(backend, shared, &flag, sizeof flag);
        status = comm_all_reduce(comm, shared, 1, COMM_SUM, err);
        if (!status) backend->op.download(backend, &flag, shared, sizeof flag);
    }
    if (!status && differs >= 0) {
        rank0[differs].shown[sizeof rank0[differs].shown - 1] = '\0';
        error_set(err,
                  "this rank was started with %s %s, rank 0 with %s: start every rank with the "
                  "same data, settings and weights",
                  settings[differs].name, mine[differs].shown, rank0[differs].shown);
    }
    free(mine);
    free(rank0);
    backend->op.free(backend, shared);
    if (status) return -1;
    return flag > 0.0f ? 1 : 0;
}
