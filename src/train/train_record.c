// The step record (see train_run.h): the floats a step writes on the
// device for the host to read one step later from a host slot (pinned
// memory on the GPU), so the loop never waits for the step it has just
// queued; what a record says (loss, stop, logged values, divergence); and
// the loss scaler it reports.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_run.h"

// LTC_TEST_LOSS_SCALER (tests only, docs/gpu.md): "default" or
// "SCALE:INTERVAL" turns the loss scaler on whatever the precision, so its
// path runs where 16-mixed is not available (the CPU; fp32 scaled by powers
// of two trains exactly as unscaled until a step overflows).
static int test_scaler_config(LossScalerConfig *config, int *on, ErrorMessage *err) {
    const char *text = getenv("LTC_TEST_LOSS_SCALER");
    *config = loss_scaler_config_default();
    *on = text && *text;
    if (!*on || strcmp(text, "default") == 0) return 0;
    char *end = NULL;
    const double scale = strtod(text, &end);
    if (end == text || *end != ':')
        return error_set(err, "LTC_TEST_LOSS_SCALER=%s: expected \"default\" or SCALE:INTERVAL",
                         text);
    const char *interval_text = end + 1;
    const long interval = strtol(interval_text, &end, 10);
    if (end == interval_text || *end != '\0' || interval < 1 || interval > 1000000000 ||
        !(scale > 0 && scale < 3e38))
        return error_set(err, "LTC_TEST_LOSS_SCALER=%s: expected \"default\" or SCALE:INTERVAL "
                              "(a positive scale, an interval of at least 1)", text);
    config->initial_scale = (float)scale;
    config->growth_interval = (int)interval;
    return 0;
}

int train_record_setup(TrainRun *run, ErrorMessage *err) {
    Backend *backend = run->backend;
    LossScalerConfig config;
    int test_on = 0;
    if (test_scaler_config(&config, &test_on, err)) return 2;
    run->record = backend->op.alloc(backend, RECORD_FLOATS * sizeof(float));
    if (!run->record) return error_set(err, "out of memory for the step record"), 1;
    backend->op.fill(backend, run->record, 0.0f, RECORD_FLOATS);
    for (int i = 0; i < 2; i++)
        if (!(run->slots[i] = backend->op.host_slot_create(backend, RECORD_FLOATS * sizeof(float),
                                                           err)) ||
            !(run->timers[i] = backend->op.timer_create(backend, err)))
            return 1;
    if (staging_init(&run->stop_staging, backend, sizeof(float), err)) return 1;
    run->scaler_on = test_on || strcmp(run->precision, "16-mixed") == 0;
    if (run->scaler_on && loss_scaler_init(&run->scaler, backend, &config, err)) return 1;
    return 0;
}

void train_record_free(TrainRun *run) {
    Backend *backend = run->backend;
    if (!backend) return;
    for (int i = 0; i < 2; i++) {
        if (run->slots[i]) backend->op.host_slot_free(backend, run->slots[i]);
        if (run->timers[i]) backend->op.timer_free(backend, run->timers[i]);
    }
    staging_free(&run->stop_staging);
    if (run->record) backend->op.free(backend, run->record);
    if (run->scaler_on) loss_scaler_free(&run->scaler);
}

// First group whose value in counts (one per group) is not 0, or -1.
static int first_group_with(const float *counts, int groups) {
    for (int g = 0; g < groups; g++)
        if (counts[g] != 0.0f) return g;
    return -1;
}

// What diverged at a step, in the loop's words (docs/training.md), or "".
// Without the scaler any NaN/inf ends the run; with it a skipped step is
// GradScaler's routine, and only one at a scale that has collapsed ends it.
static void divergence(const TrainRun *run, const float *record, StepTimes *times) {
    const Method *method = &run->method;
    StepGateReading gate;
    step_gate_interpret(record + RECORD_GATE, run->gate.groups, 1.0f, &gate);
    times->skipped = gate.skipped;
    const char *group = method->groups[gate.nonfinite_group >= 0 ? gate.nonfinite_group : 0].name;
    const int collapsed = run->scaler_on && times->loss_scale <= LOSS_SCALER_COLLAPSED;
    const int weights = first_group_with(record + RECORD_WEIGHTS, method->group_count);
    char *out = times->diverged;
    const size_t size = sizeof times->diverged;
    if (gate.skipped && (!run->scaler_on || collapsed)) {
        const char *collapse = collapsed ? " with the loss scale down to " : "";
        char scale[32] = "";
        if (collapsed) snprintf(scale, sizeof scale, "%g", (double)times->loss_scale);
        if (!isfinite(times->loss))
            snprintf(out, size, "the loss is %s%s%s", isnan(times->loss) ? "NaN" : "infinite",
                     collapse, scale);
        else
            snprintf(out, size, "the gradients of %s hold NaN or infinite values%s%s", group,
                     collapse, scale);
    } else if (weights >= 0) {
        snprintf(out, size, "the weights of %s hold NaN or infinite values after the update",
                 method->groups[weights].name);
    }
}

void train_record_read(TrainRun *run, StepTimes *times) {
    Backend *backend = run->backend;
    const float *record = backend->op.host_slot_wait(backend, run->slots[times->step & 1]);
    // The step's end mark is queued before its record: passed by now.
    const double device_seconds = backend->op.timer_seconds(backend, run->timers[times->step & 1]);
    if (device_seconds >= 0) times->batch_seconds = device_seconds;
    times->loss = record[RECORD_LOSS];
    times->stop = fmodf(record[RECORD_STOP], RECORD_TIME_UP) > 0.5f;
    times->time_up = record[RECORD_STOP] >= RECORD_TIME_UP;
    times->loss_scale = record[RECORD_SCALE];
    memcpy(times->scalars, record + RECORD_SCALARS, sizeof times->scalars);
    times->diverged[0] = '\0';
    divergence(run, record, times);
}
