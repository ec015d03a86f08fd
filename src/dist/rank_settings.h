// Checking that the ranks of a run were started alike. Every rank runs the
// same collectives only when it has the same data, settings and weights as
// rank 0: a rank given another --data, --seed or --method-arg would run
// other collectives (MPI truncation errors, a damaged heap when rank 0
// gathers rows of another length) or, with the same counts, silently train
// or embed something else. `train` and `embed` compare, once before any
// work, a fingerprint of each setting against rank 0's and stop (exit 2)
// naming the first that differs (docs/distributed.md).
#ifndef LTC_DIST_RANK_SETTINGS_H
#define LTC_DIST_RANK_SETTINGS_H

#include <stddef.h>
#include <stdint.h>

#include "dist/comm.h"
#include "util/error.h"

#define RANK_SETTING_SHOWN 48  // what the message shows of a value

typedef struct RankSetting {
    const char *name;               // the option as the message names it: "--seed"
    uint64_t hash;                  // this rank's value (rank_hash_bytes)
    char shown[RANK_SETTING_SHOWN];  // this rank's value for the message, cut to fit
} RankSetting;

// FNV-1a, a 64-bit fingerprint: start with RANK_HASH_START and chain calls
// to hash several pieces. Written here (12 lines) rather than taken from a
// library: it only tells settings apart, nothing an attacker chooses.
#define RANK_HASH_START 14695981039346656037ull
uint64_t rank_hash_bytes(uint64_t hash, const void *bytes, size_t length);
// The same over `count` floats in the backend's memory (downloaded in pieces).
uint64_t rank_hash_values(Backend *backend, const float *values, size_t count, uint64_t hash);

// Sets setting->hash from text and shows it (cut to RANK_SETTING_SHOWN).
void rank_setting_text(RankSetting *setting, const char *name, const char *text);

// --data: the image list, its relative names in order, each with the
// position of its folder among the `root_count` --data folders `roots` (the
// paths of the folders may differ between nodes, the contents are not
// compared), shown as "16 images (list 3f2a9c1b)".
typedef struct Dataset Dataset;
void rank_setting_data(RankSetting *setting, const Dataset *dataset, const char *const *roots,
                       int root_count);

// Collective: every rank compares its settings (count, the same names in
// the same order on every rank) with rank 0's. Returns 0 when every rank
// matches, 1 on every rank when one does not (that rank's err names the
// first setting with both values; the others' err is ""), -1 when the
// communication failed (err; the ranks are out of step: comm_abort).
int rank_settings_check(Communicator *comm, Backend *backend, const RankSetting *settings,
                        int count, ErrorMessage *err);

#endif
