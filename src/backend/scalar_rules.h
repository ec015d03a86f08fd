// Small scalar rules that a backend evaluates where its data lives (on the
// GPU: inside a kernel, so the host never waits for a value), written once
// for the host backends (host_ops.c) and the CUDA kernels.
#ifndef LTC_BACKEND_SCALAR_RULES_H
#define LTC_BACKEND_SCALAR_RULES_H

#include <math.h>

#ifdef __CUDACC__
#define RULE_HOST_DEVICE __host__ __device__
#else
#define RULE_HOST_DEVICE
#endif

// GradScaler's scale update (backend.h amp_update). state: scale, good
// steps, 1/scale; found: the step's NaN/inf count.
static inline RULE_HOST_DEVICE void amp_update_rule(float *state, float found,
                                                    int growth_interval, float growth,
                                                    float backoff) {
    if (found > 0.0f) {
        state[0] *= backoff;
        state[1] = 0.0f;
    } else if (state[1] + 1.0f >= (float)growth_interval) {
        const float grown = state[0] * growth;
        if (isfinite(grown)) state[0] = grown;
        state[1] = 0.0f;
    } else {
        state[1] += 1.0f;
    }
    state[2] = (float)(1.0 / (double)state[0]);  // as PyTorch: the reciprocal in double
}

// LARS trust ratio (backend.h lars_direction) from the sums of squares of
// a weight and its gradient: p / (g + p * wd + eps) * trust in float32, in
// lightly's order. Returns 0 (no adaptation) when either norm is not > 0.
static inline RULE_HOST_DEVICE int lars_ratio_rule(const float *sums, float weight_decay,
                                                   float trust, float eps, float *ratio) {
    const float param_norm = sqrtf(sums[0]), grad_norm = sqrtf(sums[1]);
    if (!(param_norm > 0.0f && grad_norm > 0.0f)) return 0;
    *ratio = param_norm / (grad_norm + param_norm * weight_decay + eps);
    *ratio *= trust;
    return 1;
}

#endif
