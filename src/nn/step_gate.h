// The gate of one optimizer step, kept in backend memory: whether the step
// is applied (nothing non-finite) and the multiplier its gradients get (1/k
// of accumulation, the loss scaler's 1/scale, the clipping coefficient).
// The trainer measures every group's gradients into it, closes it on the
// device and hands it to each optimizer_step; the host never waits for it:
// it reads a copy later (step_gate_interpret), or a test reads it at once
// (step_gate_read).
//
//   step_gate_open(gate);                         // found = 0, squares = 0
//   step_gate_measure(gate, g, groups[g].params); // each group updated
//   step_gate_close(gate, 1.0f / k, unscale, max_norm);  // multiplier, skip
//   optimizer_step(opt[g], lr, wd, step_gate_values(gate));
#ifndef LTC_NN_STEP_GATE_H
#define LTC_NN_STEP_GATE_H

#include "backend/backend.h"
#include "nn/parameters.h"
#include "util/error.h"

#define STEP_GATE_MAX_GROUPS 16

typedef struct StepGate {
    Backend *backend;
    int groups;
    float *values;  // backend memory: GATE_SQUARES + groups floats (backend.h GATE_*)
} StepGate;

// What the host learns from one read back of a closed gate.
typedef struct StepGateReading {
    int skipped;              // the updates did not change anything
    int nonfinite_group;      // first group whose gradients are NaN/inf, or -1
    float multiplier;         // what the gradients were multiplied by
    double gradient_norm;     // of the multiplied-by-scale gradients (before clipping)
} StepGateReading;

// groups <= STEP_GATE_MAX_GROUPS.
int step_gate_create(StepGate *gate, Backend *backend, int groups, ErrorMessage *err);
void step_gate_free(StepGate *gate);

// Starts a step: nothing found, every group's squares 0 (a group that is not
// measured, e.g. frozen, adds nothing).
void step_gate_open(StepGate *gate);
// The sum of squares of group's gradients. The gradient arena is zero
// between tensors, so one reduction over it covers the group.
void step_gate_measure(StepGate *gate, int group, const ParameterSet *params);
// Adds the NaN/inf count of x (n floats of backend memory, e.g. the loss):
// any makes the step skip.
void step_gate_count_nonfinite(StepGate *gate, size_t n, const float *x);
// Decides on the device (backend.h step_gate); unscale: one float of
// backend memory the multiplier also takes (the loss scaler's 1/scale), or
// NULL.
void step_gate_close(StepGate *gate, float scale, const float *unscale, float max_norm);
const float *step_gate_values(const StepGate *gate);
// Floats of backend memory step_gate_values holds (GATE_SQUARES + groups).
size_t step_gate_floats(const StepGate *gate);
// What a host copy of a closed gate's values (step_gate_floats of them)
// says; scale: the one its multiplier started from (1/k times 1/loss scale).
void step_gate_interpret(const float *values, int groups, float scale, StepGateReading *reading);
// One read back (waits for the step) and step_gate_interpret.
void step_gate_read(const StepGate *gate, float scale, StepGateReading *reading);

#endif
