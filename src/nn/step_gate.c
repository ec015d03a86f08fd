// The step gate (see step_gate.h): a few floats of backend memory written by
// backend ops and read by the optimizer updates.
#include "nn/step_gate.h"

#include <math.h>

int step_gate_create(StepGate *gate, Backend *backend, int groups, ErrorMessage *err) {
    gate->backend = backend;
    gate->groups = groups;
    gate->values = NULL;
    if (groups < 1 || groups > STEP_GATE_MAX_GROUPS) {
        error_set(err, "a step gate holds 1 to %d groups, not %d", STEP_GATE_MAX_GROUPS, groups);
        return -1;
    }
    gate->values = backend->op.alloc(backend, (GATE_SQUARES + (size_t)groups) * sizeof(float));
    if (!gate->values) {
        error_set(err, "out of memory for the step gate");
        return -1;
    }
    step_gate_open(gate);
    return 0;
}

void step_gate_free(StepGate *gate) {
    if (gate->values) gate->backend->op.free(gate->backend, gate->values);
    gate->values = NULL;
}

void step_gate_open(StepGate *gate) {
    gate->backend->op.fill(gate->backend, gate->values, 0.0f, GATE_SQUARES + (size_t)gate->groups);
}

void step_gate_measure(StepGate *gate, int group, const ParameterSet *params) {
    gate->backend->op.sum_squares(gate->backend, params->total, params->grads,
                                  gate->values + GATE_SQUARES + group);
}

void step_gate_count_nonfinite(StepGate *gate, size_t n, const float *x) {
    gate->backend->op.count_nonfinite(gate->backend, n, x, gate->values + GATE_FOUND);
}

void step_gate_close(StepGate *gate, float scale, const float *unscale, float max_norm) {
    gate->backend->op.step_gate(gate->backend, gate->values, gate->groups, scale, unscale,
                                max_norm);
}

const float *step_gate_values(const StepGate *gate) {
    return gate->values;
}

size_t step_gate_floats(const StepGate *gate) {
    return GATE_SQUARES + (size_t)gate->groups;
}

void step_gate_interpret(const float *values, int groups, float scale, StepGateReading *reading) {
    double squares = 0;
    reading->nonfinite_group = -1;
    for (int g = 0; g < groups; g++) {
        squares += values[GATE_SQUARES + g];
        if (!isfinite(values[GATE_SQUARES + g]) && reading->nonfinite_group < 0)
            reading->nonfinite_group = g;
    }
    reading->skipped = values[GATE_SKIP] != 0.0f;
    reading->multiplier = values[GATE_MULTIPLIER];
    reading->gradient_norm = sqrt(squares) * scale;
}

void step_gate_read(const StepGate *gate, float scale, StepGateReading *reading) {
    float host[GATE_SQUARES + STEP_GATE_MAX_GROUPS];
    gate->backend->op.download(gate->backend, host, gate->values,
                               step_gate_floats(gate) * sizeof(float));
    step_gate_interpret(host, gate->groups, scale, reading);
}
