// Small scalar rules that a backend evaluates where its data lives (on the
// GPU: inside a kernel, so the host never waits for a value), written once
// for the host backends (host_ops.c) and the CUDA kernels.
#ifndef LTC_BACKEND_SCALAR_RULES_H
#define LTC_BACKEND_SCALAR_RULES_H

#include <math.h>

#include "backend/backend.h"  // GATE_*

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

// A BatchNorm + ReLU prologue's coefficients of one channel (backend.h
// NormAffine): scale = gamma inv_std, then shift = beta - mean scale with
// the scale as rounded to the activation dtype; the caller rounds each.
// The ReLU passes where fmaf(x, scale, shift) > 0 (one rounding, on every
// backend).
static inline RULE_HOST_DEVICE float prologue_scale_rule(float gamma, float inv_std) {
    return (float)((double)gamma * inv_std);
}
static inline RULE_HOST_DEVICE float prologue_shift_rule(float beta, float mean,
                                                         float rounded_scale) {
    return (float)((double)beta - (double)mean * rounded_scale);
}

// BatchNorm's statistics of one channel from the sums of its rows (backend.h
// batchnorm_statistics_from_sums): mean = sum / rows, and the sum of squared
// deviations sum_sq - sum mean (in double; rounding can make it slightly
// negative where the variance is tiny next to the mean: 0 then).
static inline RULE_HOST_DEVICE void batchnorm_sums_rule(float sum, float sum_sq, size_t rows,
                                                        float *mean, float *squares) {
    const double m = (double)sum / (double)rows, d = (double)sum_sq - (double)sum * m;
    *mean = (float)m;
    *squares = (float)(d > 0.0 ? d : 0.0);
}

// LARS trust ratio (backend.h lars_direction) from the sums of squares of
// a weight and its raw gradient and the gate's multiplier: p / (g + p * wd
// + eps) * trust in float32, in lightly's order, g the norm of the gradient
// the update uses. Returns 0 (no adaptation) when either norm is not > 0.
static inline RULE_HOST_DEVICE int lars_ratio_rule(const float *sums, float multiplier,
                                                   float weight_decay, float trust, float eps,
                                                   float *ratio) {
    const float param_norm = sqrtf(sums[0]), grad_norm = sqrtf(sums[1]) * multiplier;
    if (!(param_norm > 0.0f && grad_norm > 0.0f)) return 0;
    *ratio = param_norm / (grad_norm + param_norm * weight_decay + eps);
    *ratio *= trust;
    return 1;
}

// Closes a step gate (backend.h step_gate; layout in backend.h GATE_*):
// the gradient norm is sqrt of the groups' squares summed in double, in
// group order, times scale (1/k x the loss scaler's 1/scale, the product
// in float32, exact for powers of two); clipping as
// torch.nn.utils.clip_grad_norm_ (coefficient in float32, applied when
// below 1). Anything non-finite (the found count, a NaN/inf sum of squares)
// skips the step.
static inline RULE_HOST_DEVICE void step_gate_rule(float *gate, int groups, float scale,
                                                   float max_norm) {
    double squares = 0.0;
    for (int g = 0; g < groups; g++) squares += (double)gate[GATE_SQUARES + g];
    const int skip = gate[GATE_FOUND] != 0.0f || !isfinite(squares);
    float multiplier = skip ? 0.0f : scale;
    if (!skip && max_norm > 0.0f) {
        const float norm = (float)sqrt(squares) * scale;
        const float coefficient = max_norm / (norm + 1e-6f);
        if (coefficient < 1.0f) multiplier = scale * coefficient;
    }
    gate[GATE_MULTIPLIER] = multiplier;
    gate[GATE_SKIP] = (float)skip;
    gate[GATE_UNIT] = 1.0f;
    gate[GATE_UNIT_SKIP] = (float)skip;
    gate[GATE_APPLIED] = (float)!skip;
}

// AdamW's bias corrections (backend.h adamw_update) for update t in double,
// as PyTorch computes them in Python floats: 1 - beta1^t and sqrt(1 -
// beta2^t). The second is handed back as the float it becomes where PyTorch
// divides the float32 tensor sqrt(v) by it (a Python float operand of a
// float32 op is rounded to float32 first: torch.optim.AdamW's single-tensor
// path on the CPU, _foreach_div_ on a GPU). (pow is the C library's on the
// host, CUDA's on the device: within 2 double ulps of each other, far below
// a float's.)
static inline RULE_HOST_DEVICE void adamw_corrections_rule(float step, double beta1,
                                                           double beta2, double *correction1,
                                                           float *correction2_sqrt) {
    *correction1 = 1.0 - pow(beta1, (double)step);
    *correction2_sqrt = (float)sqrt(1.0 - pow(beta2, (double)step));
}

// AdamW's moments for one element, in torch.optim.AdamW's order:
// exp_avg.lerp_(g, 1 - beta1) (lerp's small-weight form m + w (g - m), its
// other form past w = 0.5) and exp_avg_sq.mul_(beta2).addcmul_(g, g, value=1 -
// beta2), each Python-float factor rounded to float32 once (1 - 0.9 is
// 0.1f, where 1 - 0.9f would be 0.100000024). Without fused multiply-adds
// (PyTorch's vectorised lerp_ fuses one: tools/check_adamw_rounding.py).
typedef struct AdamwFactors {
    // lerp's two forms as from + coefficient (g - m): from m with w while
    // w < 0.5, else from g with w - 1 (the same as g - (g - m)(1 - w)); the
    // choice a select, not a branch, so that the CPU loop stays in vector
    // registers (C's floating-point branches are not if-converted).
    float lerp_coefficient, beta2, one_minus_beta2;
    int lerp_from_target;
} AdamwFactors;

static inline RULE_HOST_DEVICE AdamwFactors adamw_factors_rule(double beta1, double beta2) {
    AdamwFactors f;
    const float weight = (float)(1.0 - beta1);
    f.lerp_from_target = !(weight < 0.5f);
    f.lerp_coefficient = f.lerp_from_target ? -(1.0f - weight) : weight;
    f.beta2 = (float)beta2;
    f.one_minus_beta2 = (float)(1.0 - beta2);
    return f;
}

static inline RULE_HOST_DEVICE float adamw_first_moment_rule(AdamwFactors f, float m, float g) {
    const float from = f.lerp_from_target ? g : m;
    return from + f.lerp_coefficient * (g - m);
}

static inline RULE_HOST_DEVICE float adamw_second_moment_rule(AdamwFactors f, float v, float g) {
    return v * f.beta2 + (f.one_minus_beta2 * g) * g;
}

// backend.h scalar_combine: (alpha a + beta b) / divisor in double (both
// products exact), rounded to float once; b NULL leaves its term out.
static inline RULE_HOST_DEVICE float scalar_combine_rule(float alpha, float a, float beta,
                                                         const float *b, float divisor) {
    double sum = (double)alpha * (double)a;
    if (b) sum += (double)beta * (double)*b;
    return (float)(sum / (double)divisor);
}

#endif
