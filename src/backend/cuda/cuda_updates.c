// The cuda backend's optimizer-update ops (backend.h: sgd_update,
// adamw_update and their multi-tensor twins, ema_update, lars_direction,
// step_gate, scalar_combine, amp_update) and its input normalisation
// (normalize_u8, normalize_f32): each hands its launch to
// cuda_elementwise.cu on the backend's stream (see cuda_internal.h), the
// scalars that change from step to step through the per-step block
// (cuda_step_params.c).
#include "backend/cuda/cuda_internal.h"

// The scalars that change from step to step go to the kernels through the
// per-step block (cuda_step_params.c), the constants as arguments.
static const float *sgd_step(Backend *backend, float lr, float weight_decay, int first_step) {
    const float step[3] = {lr, weight_decay, first_step ? 1.0f : 0.0f};
    return cuda_step_params_put(cuda_state(backend), step, 3);
}

void cuda_sgd_update(Backend *backend, size_t n, float *param, const float *grad, const float *gate,
                     float *momentum_buffer, float lr, float momentum, float weight_decay,
                     int nesterov, int first_step) {
    cuda_sgd_update_launch(cuda_state(backend)->stream, n, param, grad, gate, momentum_buffer,
                           sgd_step(backend, lr, weight_decay, first_step), momentum, nesterov);
}

// The bias corrections are derived on the device from *step (the count of
// applied updates lives there).
void cuda_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                       const float *gate, float *m, float *v, float lr, double beta1, double beta2,
                       float eps, float weight_decay, const float *step) {
    const float scalars[2] = {lr, (float)(1.0 - (double)lr * weight_decay)};
    cuda_adamw_update_launch(cuda_state(backend)->stream, n, param, grad, gate, m, v,
                             cuda_step_params_put(cuda_state(backend), scalars, 2), beta1, beta2,
                             eps, step);
}

void cuda_sgd_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                              float *params, const float *grads, const float *gate, float *buffers,
                              float lr, float momentum, float weight_decay, int nesterov,
                              int first_step) {
    cuda_sgd_update_segments_launch(cuda_state(backend)->stream, count, segments, params, grads,
                                    gate, buffers, sgd_step(backend, lr, weight_decay, first_step),
                                    momentum, nesterov);
}

void cuda_adamw_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                                float *params, const float *grads, const float *gate, float *m,
                                float *v, float lr, double beta1, double beta2, float eps,
                                float weight_decay, const float *step) {
    const float scalars[2] = {lr, weight_decay};
    cuda_adamw_update_segments_launch(cuda_state(backend)->stream, count, segments, params,
                                      grads, gate, m, v,
                                      cuda_step_params_put(cuda_state(backend), scalars, 2),
                                      beta1, beta2, eps, step);
}

void cuda_ema_update(Backend *backend, size_t n, float *target, const float *source,
                     float momentum) {
    cuda_ema_update_launch(cuda_state(backend)->stream, n, target, source,
                           cuda_step_params_put(cuda_state(backend), &momentum, 1));
}

void cuda_lars_direction(Backend *backend, size_t n, const float *param, const float *grad,
                         const float *gate, const float *sums, float weight_decay, float trust,
                         float eps, float *out) {
    cuda_lars_direction_launch(cuda_state(backend)->stream, n, param, grad, gate, sums,
                               cuda_step_params_put(cuda_state(backend), &weight_decay, 1), trust,
                               eps, out);
}

void cuda_step_gate(Backend *backend, float *gate, int groups, float scale, const float *unscale,
                    float max_norm) {
    cuda_step_gate_launch(cuda_state(backend)->stream, gate, groups, scale, unscale, max_norm);
}

void cuda_scalar_combine(Backend *backend, float alpha, const float *a, float beta, const float *b,
                         float divisor, float *y) {
    cuda_scalar_combine_launch(cuda_state(backend)->stream, alpha, a, beta, b, divisor, y);
}

void cuda_amp_update(Backend *backend, float *state, const float *found, int growth_interval,
                     float growth, float backoff) {
    cuda_amp_update_launch(cuda_state(backend)->stream, state, found, growth_interval, growth,
                           backoff);
}

void cuda_normalize_u8(Backend *backend, size_t pixels, const uint8_t *x, const float mean[3],
                       const float std[3], Act *y) {
    cuda_normalize_u8_launch(cuda_state(backend)->stream, backend->compute_dtype, pixels, x,
                             mean[0], mean[1], mean[2], std[0], std[1], std[2], y);
}

void cuda_normalize_f32(Backend *backend, size_t pixels, int channels, const float *x,
                        const float *mean, const float *std, Act *y) {
    cuda_normalize_f32_launch(cuda_state(backend)->stream, backend->compute_dtype, pixels,
                              channels, x, mean, std, y);
}

