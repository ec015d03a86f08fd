// Learning-rate, weight-decay and momentum schedules as pure functions of the
// optimizer step (0-based), so a resumed run gets the same values from the
// step count alone.
#ifndef LTC_NN_SCHEDULE_H
#define LTC_NN_SCHEDULE_H

// Cosine from start (step 0) to end (step total_steps - 1), as lightly's
// cosine_schedule: v(s) = end - (end - start) * (cos(pi * s / (total - 1)) + 1) / 2.
// total_steps <= 1 gives end; steps past the last one stay at end (lightly
// would let the cosine swing back up). Used for DINO's weight decay and the
// EMA teacher momentum.
double schedule_cosine(long step, long total_steps, double start, double end);

// LightlyTrain's CosineWarmupScheduler factor (multiply the base value by
// it): linear warmup start * (s + 1) / warmup_steps for s < warmup_steps,
// then schedule_cosine(s - warmup_steps, total_steps - warmup_steps, start,
// end). warmup_steps <= 0: no warmup.
double schedule_cosine_warmup(long step, long warmup_steps, long total_steps, double start,
                              double end);

#endif
