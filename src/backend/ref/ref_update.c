// Reference optimizer updates with PyTorch's semantics (torch.optim.SGD with
// dampening 0, torch.optim.AdamW) and the EMA teacher update; fp32 state,
// element by element.
#include <math.h>

#include "backend/ref/ref_ops.h"
#include "backend/scalar_rules.h"

void ref_sgd_update(Backend *backend, size_t n, float *param, const float *grad,
                    const float *gate, float *momentum_buffer, float lr, float momentum,
                    float weight_decay, int nesterov, int first_step) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER];
    for (size_t i = 0; i < n; i++) {
        const float g = multiplier * grad[i] + weight_decay * param[i];
        const float buf = first_step ? g : momentum * momentum_buffer[i] + g;
        momentum_buffer[i] = buf;
        const float step = nesterov ? g + momentum * buf : buf;
        param[i] -= lr * step;
    }
}

// Written in PyTorch's order: decoupled decay first, then the moments
// (lerp_ and mul_ + addcmul_: scalar_rules.h), then
// param -= (lr / bc1) * m / (sqrt(v) / sqrt(bc2) + eps) with bc = 1 - beta^t
// (bias corrections in double, as PyTorch computes them in Python floats,
// for t = *step, sqrt(bc2) then rounded to float for the float division:
// scalar_rules.h adamw_corrections_rule).
void ref_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                      const float *gate, float *m, float *v, float lr, double beta1, double beta2,
                      float eps, float weight_decay, const float *step) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER];
    double correction1;
    float correction2_sqrt;
    adamw_corrections_rule(*step, beta1, beta2, &correction1, &correction2_sqrt);
    const float step_size = (float)(lr / correction1);
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const AdamwFactors factors = adamw_factors_rule(beta1, beta2);
    for (size_t i = 0; i < n; i++) {
        param[i] *= decay;
        const float g = multiplier * grad[i];
        m[i] = adamw_first_moment_rule(factors, m[i], g);
        v[i] = adamw_second_moment_rule(factors, v[i], g);
        const float denominator = sqrtf(v[i]) / correction2_sqrt + eps;
        param[i] -= step_size * (m[i] / denominator);
    }
}

void ref_ema_update(Backend *backend, size_t n, float *target, const float *source,
                    float momentum) {
    for (size_t i = 0; i < n; i++)
        target[i] = momentum * target[i] + (1.0f - momentum) * source[i];
}
