// --max-time and --limit-train-batches of `train`: Lightning's Trainer
// max_time and limit_train_batches (LightlyTrain passes its trainer_args
// to the Trainer), read as Lightning 2.6 reads them.
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

#endif
