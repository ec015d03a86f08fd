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
// (weights_is_reference), else our cache's copy, else the Hugging Face
// cache's; an error says how to fetch one that is in neither.
int weights_local_path(const char *text, char *out, size_t size, ErrorMessage *err);

// weights_local_path, downloading into our cache what is in neither cache:
// one process at a time per file (the others wait on its lock, reported as
// a WEIGHTS_WAITING event, and then read it). HF_HUB_OFFLINE forbids the
// download. *downloaded (may be NULL) is 1 when this call transferred it.
int weights_fetch(const char *text, WeightsProgress progress, void *user, char *out,
                  size_t size, int *downloaded, ErrorMessage *err);

// The --model preset a known name holds ("vit_b14_reg4"), NULL for files
// and plain hub references.
const char *weights_known_arch(const char *text);

#endif
