// The K best epoch files of a monitored ModelCheckpoint (kept_epochs.h).
#include "train/kept_epochs.h"

#include <math.h>
#include <string.h>

// A NaN as the worst score of the mode (Lightning: inf for min, -inf for max).
static float comparable(float score, int mode_max) {
    return isnan(score) ? (mode_max ? -INFINITY : INFINITY) : score;
}

// Python's max (mode min) or min (mode max) over the dict of kept files,
// which returns the first of equal ones.
int kept_epochs_worst(const KeptEpochs *kept, int mode_max) {
    int worst = 0;
    for (int i = 1; i < kept->count; i++) {
        const float a = comparable(kept->scores[i], mode_max);
        const float b = comparable(kept->scores[worst], mode_max);
        if (mode_max ? a < b : a > b) worst = i;
    }
    return worst;
}

int kept_epochs_admit(const KeptEpochs *kept, int k, int mode_max, float score, int *evict) {
    *evict = -1;
    if (kept->count < k) return 1;
    const int worst = kept_epochs_worst(kept, mode_max);
    const float current = comparable(score, mode_max);
    const float bar = comparable(kept->scores[worst], mode_max);
    if (!(mode_max ? current > bar : current < bar)) return 0;
    *evict = worst;
    return 1;
}

void kept_epochs_remove(KeptEpochs *kept, int i) {
    const size_t after = (size_t)(kept->count - i - 1);
    memmove(&kept->steps[i], &kept->steps[i + 1], after * sizeof kept->steps[0]);
    memmove(&kept->scores[i], &kept->scores[i + 1], after * sizeof kept->scores[0]);
    kept->count--;
}

void kept_epochs_append(KeptEpochs *kept, long step, float score) {
    kept->steps[kept->count] = step;
    kept->scores[kept->count] = score;
    kept->count++;
}

int kept_epochs_find(const KeptEpochs *kept, long step) {
    for (int i = 0; i < kept->count; i++)
        if (kept->steps[i] == step) return i;
    return -1;
}
