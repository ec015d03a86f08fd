// --max-time, --limit-train-batches, --fast-dev-run and the minimums of
// --min-epochs and --min-steps (see run_limits.h).
#include "cli/run_limits.h"

#include <math.h>
#include <stdio.h>
#include <string.h>

#include "util/number.h"

// timedelta's keyword units in seconds.
static const struct {
    const char *name;
    double seconds;
} units[] = {
    {"weeks", 604800.0}, {"days", 86400.0},        {"hours", 3600.0},        {"minutes", 60.0},
    {"seconds", 1.0},    {"milliseconds", 1e-3}, {"microseconds", 1e-6},
};

// timedelta's own limit (999999999 days): beyond it Python raises.
static const double max_seconds = 999999999.0 * 86400.0;

static int is_none(const char *text) {
    return !strcmp(text, "none") || !strcmp(text, "None") || !strcmp(text, "null");
}

// DD:HH:MM:SS as Lightning's pattern (\d+):(\d\d):(\d\d):(\d\d) takes it:
// 1 and *seconds, or 0 when text is not of that form.
static int clock_form(const char *text, double *seconds) {
    size_t at = strspn(text, "0123456789");
    if (at == 0 || at > 9) return 0;  // (more than 9 digits of days: past timedelta's limit)
    double days = 0, rest[3];
    for (size_t i = 0; i < at; i++) days = days * 10 + (text[i] - '0');
    for (int part = 0; part < 3; part++) {
        const char *p = text + at;
        if (p[0] != ':' || !(p[1] >= '0' && p[1] <= '9') || !(p[2] >= '0' && p[2] <= '9'))
            return 0;
        rest[part] = (p[1] - '0') * 10 + (p[2] - '0');
        at += 3;
    }
    if (text[at] != '\0') return 0;
    *seconds = days * 86400.0 + rest[0] * 3600.0 + rest[1] * 60.0 + rest[2];
    return 1;
}

// UNIT=N: 1 and its seconds, 0 when text is not of that form, -1 (err set)
// when it is but N is no number of that unit.
static int unit_form(const char *text, double *seconds, ErrorMessage *err) {
    const char *equals = strchr(text, '=');
    if (!equals) return 0;
    for (size_t u = 0; u < sizeof units / sizeof units[0]; u++) {
        const size_t length = strlen(units[u].name);
        if ((size_t)(equals - text) != length || strncmp(text, units[u].name, length)) continue;
        double count = 0;
        if (number_parse_decimal(equals + 1, &count) || count < 0 ||
            count * units[u].seconds > max_seconds)
            return error_set(err, "--max-time %.200s: %s takes a number from 0 to %.0f",
                             text, units[u].name, max_seconds / units[u].seconds);
        *seconds = count * units[u].seconds;
        return 1;
    }
    return 0;
}

int max_time_parse(const StringList *entries, double *seconds, ErrorMessage *err) {
    *seconds = -1;
    int clocks = 0, unit_entries = 0;
    double total = 0;
    for (int i = 0; i < entries->count; i++) {
        const char *text = entries->items[i];
        double value = 0;
        int kind = 0;
        if (is_none(text)) {  // no limit, as Lightning's max_time=None
            clocks = unit_entries = 0;
            total = 0;
            continue;
        }
        if (clock_form(text, &value)) {
            clocks++;
            total = value;  // the last one given
            continue;
        }
        if ((kind = unit_form(text, &value, err)) < 0) return -1;
        if (kind == 0)
            return error_set(err, "--max-time %.200s: expected DD:HH:MM:SS (days, then two "
                                  "digits each of hours, minutes and seconds, as Lightning's "
                                  "max_time) or UNIT=N (weeks, days, hours, minutes, seconds, "
                                  "milliseconds, microseconds)", text);
        unit_entries++;
        total += value;
    }
    if (clocks && unit_entries)
        return error_set(err, "--max-time: give DD:HH:MM:SS or UNIT=N entries, not both");
    if (total > max_seconds)
        return error_set(err, "--max-time: more than %.0f days (Python's timedelta limit)",
                         max_seconds / 86400.0);
    if (clocks || unit_entries) *seconds = total;
    return 0;
}

void max_time_format(double seconds, char *out, size_t size) {
    const long long whole = (long long)seconds;
    snprintf(out, size, "%lld:%02lld:%02lld:%02lld", whole / 86400, whole / 3600 % 24,
             whole / 60 % 60, whole % 60);
}

int batch_limit_parse(const char *text, BatchLimit *limit, ErrorMessage *err) {
    double value = 0;
    *limit = (BatchLimit){.value = -1};
    if (is_none(text)) return 0;
    if (number_parse_decimal(text, &value) || value < 0)
        return error_set(err, "--limit-train-batches %.200s: expected a whole number of batches "
                              "or a fraction from 0.0 to 1.0", text);
    // Lightning tells them apart by type: 1 is one batch, 1.0 the whole
    // epoch; a float above 1 that is whole is a count.
    const int integer = strspn(text, "+0123456789") == strlen(text);
    if (integer || (value > 1 && value == floor(value))) {
        if (value > 2147483647.0)
            return error_set(err, "--limit-train-batches %.200s: too many batches", text);
        *limit = (BatchLimit){.value = value, .fraction = 0};
    } else if (value <= 1) {
        *limit = (BatchLimit){.value = value, .fraction = 1};
    } else {
        return error_set(err, "--limit-train-batches %.200s: a fraction is from 0.0 to 1.0, a "
                              "count a whole number (as Lightning's)", text);
    }
    if (limit->value == 0)
        return error_set(err, "--limit-train-batches %.200s: no batch would be trained (for the "
                              "initial model's checkpoint and export use --epochs 0)", text);
    return 0;
}

long batch_limit_apply(const BatchLimit *limit, long batches, ErrorMessage *err) {
    if (limit->value <= 0) return batches;  // (a zeroed BatchLimit too)
    if (!limit->fraction) return limit->value < (double)batches ? (long)limit->value : batches;
    const long limited = (long)floor((double)batches * limit->value);
    if (limited < 1)
        return error_set(err, "--limit-train-batches %g of %ld batches an epoch is less than "
                              "one batch: at least %.3g", limit->value, batches,
                         1.0 / (double)batches);
    return limited;
}

int fast_dev_run_parse(const char *text, long *batches, ErrorMessage *err) {
    int flag = 0;
    double value = 0;
    *batches = 0;
    if (strspn(text, "0123456789") != strlen(text) && number_parse_bool(text, &flag) == 0) {
        *batches = flag;
        return 0;
    }
    if (strspn(text, "+-0123456789") != strlen(text) || number_parse_decimal(text, &value) ||
        value < 0 || value > 2147483647.0)
        return error_set(err, "--fast-dev-run %.200s: expected true, false or a number of "
                              "batches from 0", text);
    *batches = (long)value;
    return 0;
}

int run_minimums_met(long min_epochs, long min_steps, long completed, long steps_per_epoch) {
    const long epochs = steps_per_epoch > 0 ? completed / steps_per_epoch : 0;
    return epochs >= min_epochs && completed >= min_steps;
}

long run_min_epochs(long min_epochs, long min_steps) {
    if (min_epochs >= 0) return min_epochs;
    return min_steps > 0 ? 1 : 0;
}
