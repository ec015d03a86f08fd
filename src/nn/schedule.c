// Cosine schedules with linear warmup (see schedule.h).
#include "nn/schedule.h"

#include <math.h>

double schedule_cosine(long step, long total_steps, double start, double end) {
    if (total_steps <= 1 || step >= total_steps - 1) return end;
    if (step <= 0) step = 0;
    const double cosine = cos(M_PI * (double)step / (double)(total_steps - 1));
    return end - (end - start) * (cosine + 1.0) / 2.0;
}

double schedule_cosine_warmup(long step, long warmup_steps, long total_steps, double start,
                              double end) {
    if (step < 0) step = 0;
    if (step < warmup_steps) return start * (double)(step + 1) / (double)warmup_steps;
    return schedule_cosine(step - (warmup_steps > 0 ? warmup_steps : 0),
                           total_steps - (warmup_steps > 0 ? warmup_steps : 0), start, end);
}
