// The LARS and loss-scaling ops of the host-memory backends (see
// host_ops.h): the elementwise work goes through the backend's own ops
// (axpby, count_nonfinite), so the cpu backend keeps its threads.
#include "backend/host_ops.h"

#include "backend/scalar_rules.h"

void host_lars_direction(Backend *backend, size_t n, const float *param, const float *grad,
                         const float *gate, const float *sums, float weight_decay, float trust,
                         float eps, float *out) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER];
    float ratio = 0;
    backend->op.axpby(backend, n, multiplier, grad, 0.0f, out);
    if (!lars_ratio_rule(sums, multiplier, weight_decay, trust, eps, &ratio)) return;
    backend->op.axpby(backend, n, weight_decay, param, 1.0f, out);
    // In place (x = y): axpby is elementwise, so aliasing is safe.
    backend->op.axpby(backend, n, ratio, out, 0.0f, out);
}

void host_amp_unscale(Backend *backend, size_t n, float *grad, const float *state, float *found) {
    backend->op.count_nonfinite(backend, n, grad, found);
    // In place (x = y): axpby is elementwise, so aliasing is safe.
    backend->op.axpby(backend, n, state[2], grad, 0.0f, grad);
}

void host_amp_update(Backend *backend, float *state, const float *found, int growth_interval,
                     float growth, float backoff) {
    amp_update_rule(state, *found, growth_interval, growth, backoff);
}

void host_step_gate(Backend *backend, float *gate, int groups, float scale, float max_norm) {
    step_gate_rule(gate, groups, scale, max_norm);
}
