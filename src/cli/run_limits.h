// --max-time, --limit-train-batches, --min-epochs and --min-steps of
// `train`: Lightning's Trainer max_time, limit_train_batches, min_epochs
// and min_steps (LightlyTrain passes its trainer_args to the Trainer),
// read as Lightning 2.6 reads them.
//   --max-time DD:HH:MM:SS   stop once this much training time has passed
//                            (Lightning's Timer: days any digits, the rest
//                            two each); or UNIT=N entries, Lightning's dict
//                            form (timedelta's weeks, days, hours, minutes,
//                            seconds, milliseconds, microseconds), which add
//                            up; none / null: no limit.
//   --limit-train-batches N  at most N batches an epoch (an integer), or
//                       F    that fraction of them (a number with a point
//                            or an exponent, 0 < F <= 1): Lightning's int
//                            and float.
//   --fast-dev-run N|true    N batches (true: 1) of one epoch, loggers and
//                            epoch files off: Lightning's fast_dev_run.
//   --min-epochs N, --min-steps N  a stop that early stopping or --max-time
//                            asks for waits until both are reached (0: no
//                            minimum; --min-epochs auto: 1 with --min-steps):
//                            Lightning's min_epochs and min_steps.
#ifndef LTC_CLI_RUN_LIMITS_H
#define LTC_CLI_RUN_LIMITS_H

#include <stddef.h>

#include "cli/options.h"
#include "util/error.h"

// The entries of --max-time (repeatable: one DD:HH:MM:SS, or UNIT=N
// entries) into *seconds; -1 when none was given (or none / null). 0, or
// -1 with a one-line message naming the entry.
int max_time_parse(const StringList *entries, double *seconds, ErrorMessage *err);

// "D:HH:MM:SS" (whole seconds, as Lightning's message prints a timedelta),
// for train.log.
void max_time_format(double seconds, char *out, size_t size);

typedef struct BatchLimit {
    double value;  // batches (an integer) or a fraction; < 0: no limit
    int fraction;  // 1: value is a fraction of the epoch's batches
} BatchLimit;

// --limit-train-batches' text into *limit. 0, or -1 with a message.
int batch_limit_parse(const char *text, BatchLimit *limit, ErrorMessage *err);

// The batches an epoch of `batches` runs under limit (Lightning's
// _parse_num_batches: min(N, batches), or floor(batches x F)); -1 with a
// message when that is no batch at all.
long batch_limit_apply(const BatchLimit *limit, long batches, ErrorMessage *err);

// --fast-dev-run's text into *batches: true 1, false 0, a whole number as
// it is (Lightning's bool or int). 0, or -1 with a message.
int fast_dev_run_parse(const char *text, long *batches, ErrorMessage *err);

// Lightning's min_epochs and min_steps (FitLoop._can_stop_early): whether
// a stop asked for by early stopping or the Timer may end the run after
// `completed` optimizer steps, in epochs of steps_per_epoch (an epoch
// counts once all its steps are done). 0 is no minimum. min_epochs is 1
// where only min_steps was given (Lightning's _parse_loop_limits), which
// the caller resolves (run_min_epochs).
int run_minimums_met(long min_epochs, long min_steps, long completed, long steps_per_epoch);

// min_epochs as Lightning resolves it: as given (>= 0), else (-1, auto) 1
// when min_steps is above 0, else 0.
long run_min_epochs(long min_epochs, long min_steps);

#endif
