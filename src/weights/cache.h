// Where weights live on disk and how the network is reached, from the
// environment:
//   our cache      $LIGHTLY_TRAIN_CACHE_DIR, else $XDG_CACHE_HOME/lightly-train-c,
//                  else ~/.cache/lightly-train-c; files under models/hub/
//                  models--ORG--NAME/REVISION/FILE; a GitHub release's asset under
//                  models/github/releases--ORG--NAME/TAG/FILE
//   Hugging Face   $HF_HUB_CACHE, else $HF_HOME/hub, HF_HOME defaulting to
//                  $XDG_CACHE_HOME/huggingface or ~/.cache/huggingface: a file
//                  its libraries downloaded (models--ORG--NAME/snapshots/
//                  COMMIT/FILE, refs/REVISION holding the commit) is used as is
//   the hub        $HF_ENDPOINT (https://huggingface.co), $HF_HUB_OFFLINE (1, ON,
//                  YES, TRUE: no network, for GitHub too), the token $HF_TOKEN, else
//                  the file $HF_TOKEN_PATH, else $HF_HOME/token (sent to the hub only)
//   GitHub         $LIGHTLY_TRAIN_GITHUB_ENDPOINT (https://github.com): release
//                  assets at ENDPOINT/ORG/NAME/releases/download/TAG/FILE
//   torchvision    $LIGHTLY_TRAIN_TORCHVISION_ENDPOINT (https://download.pytorch.org):
//                  ENDPOINT/models/FILE, into our cache's models/torchvision/FILE;
//                  PyTorch's cache $TORCH_HOME/hub/checkpoints/FILE (TORCH_HOME
//                  defaulting to $XDG_CACHE_HOME/torch or ~/.cache/torch) is used as is
//   downloads      $LIGHTLY_TRAIN_DOWNLOAD_CHUNK_TIMEOUT_SEC (180: a transfer
//                  receiving less than ..._MIN_BYTES_PER_SEC (1000) for that
//                  long is retried), ..._RETRIES (5), ..._BACKOFF_SEC (1,
//                  doubled per retry, at most 60), ..._DEADLINE_SEC (21600:
//                  a file not complete by then fails, its part kept)
// The names are the Hugging Face libraries' and LightlyTrain's own.
#ifndef LTC_WEIGHTS_CACHE_H
#define LTC_WEIGHTS_CACHE_H

#include <stddef.h>

#include "util/error.h"
#include "weights/names.h"

// Our cache's root folder (LIGHTLY_TRAIN_CACHE_DIR ...); -1 when neither it,
// XDG_CACHE_HOME nor HOME is set.
int weights_cache_root(char *out, size_t size, ErrorMessage *err);

// Where our cache keeps ref's file.
int weights_cache_path(const WeightsRef *ref, char *out, size_t size, ErrorMessage *err);

// The Hugging Face cache's copy of ref's file: 1 and its path when present,
// else 0 (always for a GitHub release's asset).
int weights_hf_cached_path(const WeightsRef *ref, char *out, size_t size);

// PyTorch's cache's copy of a torchvision file: 1 and its path when
// present, else 0 (always for other sources).
int weights_torch_cached_path(const WeightsRef *ref, char *out, size_t size);

// torch.hub's check of a file it downloads: the hex digits between the last
// '-' and the next '.' of its name ("convnext_tiny-983f1562.pth": "983f1562")
// begin its SHA-256. 1 and them in out, 0 when the name has none.
int weights_hash_prefix(const char *filename, char *out, size_t size);

// The resolve URL of ref's file on the hub (or the HF_ENDPOINT mirror); a
// GitHub release asset's download URL; torchvision's file's URL.
int weights_url(const WeightsRef *ref, char *out, size_t size, ErrorMessage *err);

// 1 when HF_HUB_OFFLINE forbids the network.
int weights_offline(void);

// The hub token (HF_TOKEN, else the token file): 1 when one is found.
int weights_token(char *out, size_t size);

typedef struct DownloadSettings {
    double stall_seconds;     // below min_rate for this long: the attempt fails (and is retried)
    double min_rate;          // bytes per second
    int retries;              // attempts after the first that made no progress
    double backoff_seconds;   // wait before the first retry, doubled each time
    double deadline_seconds;  // for the whole file, retries and waits included
} DownloadSettings;

// The settings from the environment; -1 naming a variable with a bad value.
int weights_download_settings(DownloadSettings *settings, ErrorMessage *err);

#endif
