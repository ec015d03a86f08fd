// On --resume from a checkpoint taken after C completed steps, the logs of
// the interrupted run may go further than C (steps run after the checkpoint,
// then lost). These functions drop that tail, so the resumed run writes one
// value per step and per tag. Kept: everything logged for steps < C and, at
// step C, the kNN evaluation of the checkpointed state (tag "knn/top1",
// logged right after the checkpoint). A partial last record (a kill while
// writing it) goes too. Files are rewritten atomically; a missing file is
// not an error.
#ifndef LTC_LOGGING_LOG_TRUNCATE_H
#define LTC_LOGGING_LOG_TRUNCATE_H

#include <stdint.h>

#include "util/error.h"

typedef struct LogTruncation {
    long dropped;       // records removed (lines, events)
    int knn_at_step;    // a knn/top1 value at step C is (still) there
} LogTruncation;

// metrics.jsonl at path. *result is added to.
int metrics_jsonl_truncate(const char *path, int64_t checkpoint_step, LogTruncation *result,
                           ErrorMessage *err);
// Every events.out.tfevents.* file in dir. *result is added to.
int tb_events_truncate(const char *dir, int64_t checkpoint_step, LogTruncation *result,
                       ErrorMessage *err);

#endif
