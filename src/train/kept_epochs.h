// The epoch files a monitored ModelCheckpoint keeps (--callbacks
// model_checkpoint.monitor=train_loss with save_top_k K): the K best by the
// loss at their save, as Lightning 2.6's ModelCheckpoint decides
// (check_monitor_top_k, _update_best_and_save): a new file is kept while
// fewer than K are, else only when strictly better than the worst kept
// (mode min: lower; max: higher), which it then replaces; of equally bad
// ones the earliest kept goes first; a NaN score is the worst there is.
// The list (steps and scores, in the order kept) lives in the checkpoint,
// so a resumed run goes on with it.
#ifndef LTC_TRAIN_KEPT_EPOCHS_H
#define LTC_TRAIN_KEPT_EPOCHS_H

#include "cli/callbacks.h"

typedef struct KeptEpochs {
    int count;
    long steps[CALLBACKS_TOP_K_MAX];  // the completed steps of each file
    float scores[CALLBACKS_TOP_K_MAX];
} KeptEpochs;

// Whether a new file scoring `score` is kept among at most k (k >= 1):
// 1 with *evict the index of the file it replaces (-1: there is room),
// 0 when it is not kept.
int kept_epochs_admit(const KeptEpochs *kept, int k, int mode_max, float score, int *evict);

// The index of the worst kept file (the first of equally bad ones); count >= 1.
int kept_epochs_worst(const KeptEpochs *kept, int mode_max);

// Removes entry i (the others keep their order).
void kept_epochs_remove(KeptEpochs *kept, int i);

// Appends a file (room must be left: count < CALLBACKS_TOP_K_MAX).
void kept_epochs_append(KeptEpochs *kept, long step, float score);

// The index of step's file, or -1.
int kept_epochs_find(const KeptEpochs *kept, long step);

#endif
