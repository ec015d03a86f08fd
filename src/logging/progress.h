// Console progress of a training run: on a terminal one self-overwriting
// status line (redrawn at most PROGRESS_REDRAW_SECONDS apart); into a file or
// pipe (a log collector, `nohup`, a batch job) plain lines at a fixed interval
// and never a carriage return, so the output stays readable after the fact.
//
// Line content: epoch e/E, step s/S, percent, elapsed and ETA (h:mm:ss or
// m:ss), loss, images/s and data_wait = data_time / (batch_time + data_time),
// the share of time the loop waited for the loader (as on LightlyTrain's bar).
// Times are passed in (seconds from time_now()) so tests can drive the clock.
// Writes are best-effort: a failing console never stops a run.
#ifndef LTC_LOGGING_PROGRESS_H
#define LTC_LOGGING_PROGRESS_H

#include <stdio.h>

// A terminal line is redrawn at most this often (a few times a second is
// enough to look live without costing the loop anything measurable).
#define PROGRESS_REDRAW_SECONDS 0.25
// Width used when the terminal width cannot be asked (not a tty, no ioctl).
#define PROGRESS_DEFAULT_WIDTH 100

typedef struct Progress Progress;

// stream: where to print (stderr in the command), not closed by progress_free.
// is_terminal: 1 for the self-overwriting line, 0 for plain lines, one every
// plain_every_seconds (0 = one per update). total_steps: 0 when unknown (no
// percentage or ETA) unless steps_per_epoch > 0, in which case the total is
// taken as epochs * steps_per_epoch. Returns NULL when out of memory.
// The ETA rate is counted from the creation time and the step before the
// first update; progress_set_origin overrides both.
Progress *progress_create(FILE *stream, int is_terminal, long total_steps, long steps_per_epoch,
                          double plain_every_seconds);

// Optional: count elapsed time and the ETA rate from (steps_done, now), e.g.
// a resumed run that starts at step 4000 after its setup has finished.
void progress_set_origin(Progress *p, long steps_done, double now);

// After each optimizer step. epoch: 0-based (printed 1-based); step: steps
// done so far (1-based count); images_per_second: of recent steps; data_wait
// in [0, 1]; now: seconds from time_now().
void progress_update(Progress *p, int epoch, int epochs, long step, float loss,
                     double images_per_second, double data_wait, double now);

// A message on its own line; on a terminal the progress line is cleared first
// and redrawn below the message.
void progress_message(Progress *p, const char *text);

// Shows the last state if it was held back by the throttle and ends the line.
void progress_finish(Progress *p);

// p may be NULL.
void progress_free(Progress *p);

// Formats seconds as h:mm:ss (an hour or more) or m:ss, rounded to the
// nearest second; "?" for negative or non-finite values. Exposed for tests.
void progress_format_duration(double seconds, char *out, size_t size);

#endif
