// From what the user wrote (a file, a known name such as "dinov2/vitb14", a
// hub reference such as "timm/resnet50.tv2_in1k") to a file on disk:
// weights_local_path never touches the network (the loaders call it);
// weights_fetch downloads what is missing (the commands call it before any
// work, so a failure is bad input, exit 2, before training starts).
#ifndef LTC_WEIGHTS_RESOLVE_H
#define LTC_WEIGHTS_RESOLVE_H

#include <stddef.h>

#include "util/error.h"
#include "weights/download.h"

// The file text stands for: text itself when it is not weights by name
// (weights_is_reference), else (an Ultralytics name: ultralytics/yolo11s.pt)
// the file yolo11s.pt in the working directory, as Ultralytics takes it,
// else our cache's copy, else the Hugging Face cache's; an error says how to fetch one that is in neither, and how to
// repair our cache's copy when its size is not its download record's.
int weights_local_path(const char *text, char *out, size_t size, ErrorMessage *err);

// weights_local_path, downloading into our cache what is in neither cache:
// one process at a time per file (the others wait on its lock, reported as
// a WEIGHTS_WAITING event, and then read it). HF_HUB_OFFLINE forbids the
// download. *downloaded (may be NULL) is 1 when this call transferred it.
// A file in our cache is checked against its download record (record.h):
// its size, and with repair (`weights fetch`) its SHA-256 too, a damaged
// file then downloaded anew (a WEIGHTS_DAMAGED event); without repair a
// damaged file fails. One without a record is used as it is (a
// WEIGHTS_UNVERIFIED event).
int weights_fetch(const char *text, int repair, WeightsProgress progress, void *user, char *out,
                  size_t size, int *downloaded, ErrorMessage *err);

// The --model preset a known name holds ("vit_b14_reg4"), NULL for files
// and plain hub references.
const char *weights_known_arch(const char *text);

#endif
