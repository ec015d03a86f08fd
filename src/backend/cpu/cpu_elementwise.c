// The cpu backend's elementwise ops, full reductions, optimizer updates and
// input normalisation: flat loops over contiguous arrays that OpenMP splits
// across backend->threads (below CPU_PARALLEL_MIN elements they run on the
// calling thread) and vectorises (`simd`). Arithmetic is written in the ref
// backend's order so results match it bit for bit where no sum is involved.
#include <math.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "backend/scalar_rules.h"
#include "util/cpu.h"

// Parallel, vectorised loop over independent elements, on `team` threads
// (each function sets team = cpu_team(backend, elements)).
#define CPU_FOR_ELEMENTS \
    _Pragma("omp parallel for simd num_threads(team) schedule(simd:static)")
// The same, reducing into a double `total`.
#define CPU_FOR_SUM \
    _Pragma("omp parallel for simd num_threads(team) schedule(simd:static) reduction(+:total)")

void cpu_fill(Backend *backend, float *x, float value, size_t n) {
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) x[i] = value;
}

// y may alias x (in-place ReLU).
void cpu_relu_forward_f32(Backend *backend, size_t n, const float *x, float *y) {
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i];  // NaN stays NaN
}

void cpu_relu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    cpu_relu_forward_f32(backend, n, (const float *)x_act, (float *)y_act);
}

// dy is loaded unconditionally: a load under the condition (y > 0 ? dy[i] :
// 0) keeps GCC from vectorising, and the branch mispredicts on every
// random-looking mask.
void cpu_relu_backward_f32(Backend *backend, size_t n, const float *y, const float *dy, float *dx) {
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) {
        const float gradient = dy[i];
        dx[i] = y[i] <= 0.0f ? 0.0f : gradient;
    }
}

void cpu_relu_backward(Backend *backend, size_t n, const Act *y_act, const Act *dy_act,
                       Act *dx_act) {
    cpu_relu_backward_f32(backend, n, (const float *)y_act, (const float *)dy_act, (float *)dx_act);
}

// GELU in fp32 with Phi(x) = erfc(-x / sqrt 2) / 2 (as ref: no cancellation
// in 1 + erf where Phi is tiny): with AVX2, eight lanes at a time through
// vector_normal_cdf_avx2 (cpu_vector_math.h); else, and for a tail of under
// eight, libm's erfcf and expf. fp32 where ref uses double, so results differ
// from ref by a few ulps (the one exception to bit-identical elementwise ops
// here); the vector and libm paths differ from each other as much.
#define CPU_SQRT1_2 0.70710678118654752f
#define CPU_INV_SQRT_2PI 0.39894228040143268f
#define GELU_CHUNK 4096  // values a thread takes at a time

static float gelu_scalar(float x) { return x * (0.5f * erfcf(-x * CPU_SQRT1_2)); }

// dy dGELU/dx = dy (Phi(x) + x phi(x)).
static float gelu_gradient_scalar(float x, float dy) {
    const float cdf = 0.5f * erfcf(-x * CPU_SQRT1_2);
    const float density = CPU_INV_SQRT_2PI * expf(-0.5f * x * x);
    return dy * (cdf + x * density);
}

VECTOR_MATH_TARGET static void gelu_forward_avx2(size_t n, const float *x, float *y) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        _mm256_storeu_ps(y + i, _mm256_mul_ps(v, vector_normal_cdf_avx2(v, NULL)));
    }
    for (; i < n; i++) y[i] = gelu_scalar(x[i]);
}

VECTOR_MATH_TARGET static void gelu_backward_avx2(size_t n, const float *x, const float *dy,
                                                  float *dx) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 v = _mm256_loadu_ps(x + i);
        __m256 density;
        const __m256 cdf = vector_normal_cdf_avx2(v, &density);
        _mm256_storeu_ps(dx + i,
                         _mm256_mul_ps(_mm256_loadu_ps(dy + i), _mm256_fmadd_ps(v, density, cdf)));
    }
    for (; i < n; i++) dx[i] = gelu_gradient_scalar(x[i], dy[i]);
}

// The AVX2 GELU over n values, GELU_CHUNK per thread at a time: the
// forward into out when dy is NULL, else the backward (out = dx).
static void gelu_avx2_threads(Backend *backend, size_t n, const float *x, const float *dy,
                              float *out) {
    const int team = cpu_team(backend, n);
    const size_t chunks = (n + GELU_CHUNK - 1) / GELU_CHUNK;
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t c = 0; c < chunks; c++) {
        const size_t start = c * GELU_CHUNK;
        const size_t count = start + GELU_CHUNK < n ? GELU_CHUNK : n - start;
        if (dy)
            gelu_backward_avx2(count, x + start, dy + start, out + start);
        else
            gelu_forward_avx2(count, x + start, out + start);
    }
}

void cpu_gelu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    if (cpu_has_avx2()) {
        gelu_avx2_threads(backend, n, x, NULL, y);
        return;
    }
    const int team = cpu_team(backend, n);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t i = 0; i < n; i++) y[i] = gelu_scalar(x[i]);
}

void cpu_gelu_backward(Backend *backend, size_t n, const Act *x_act, const Act *dy_act,
                       Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    if (cpu_has_avx2()) {
        gelu_avx2_threads(backend, n, x, dy, dx);
        return;
    }
    const int team = cpu_team(backend, n);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t i = 0; i < n; i++) dx[i] = gelu_gradient_scalar(x[i], dy[i]);
}

void cpu_add(Backend *backend, size_t n, const float *a, const float *b, float *y) {
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

void cpu_axpby(Backend *backend, size_t n, float alpha, const float *x, float beta, float *y) {
    const int team = cpu_team(backend, n);
    if (beta == 0.0f) {  // y is not read: it may hold NaN or garbage
        CPU_FOR_ELEMENTS
        for (size_t i = 0; i < n; i++) y[i] = alpha * x[i];
        return;
    }
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) y[i] = alpha * x[i] + beta * y[i];
}

void cpu_mul(Backend *backend, size_t n, const float *a, const float *b, float *y) {
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

// dx (N, P, C) = dy (N, C) / P, one output row at a time.
void cpu_avgpool_backward(Backend *backend, int batch, int pixels, int channels, const Act *dy_act,
                          Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const size_t rows = (size_t)batch * pixels;
    const int team = cpu_team(backend, rows * channels);
    const float count = (float)pixels;
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *dy_row = dy + (r / pixels) * channels;
        float *dx_row = dx + r * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) dx_row[c] = dy_row[c] / count;
    }
}

void cpu_bias_add_f32(Backend *backend, size_t rows, int channels, const float *bias, float *y) {
    const int team = cpu_team(backend, rows * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        float *y_row = y + r * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) y_row[c] += bias[c];
    }
}

void cpu_bias_add(Backend *backend, size_t rows, int channels, const float *bias, Act *y_act) {
    cpu_bias_add_f32(backend, rows, channels, bias, (float *)y_act);
}

// ---- full reductions (double accumulators, like ref) -------------------------------------

void cpu_sum(Backend *backend, size_t n, const float *x, float *result) {
    const int team = cpu_team(backend, n);
    double total = 0.0;
    CPU_FOR_SUM
    for (size_t i = 0; i < n; i++) total += x[i];
    *result = (float)total;
}

void cpu_sum_squares(Backend *backend, size_t n, const float *x, float *result) {
    const int team = cpu_team(backend, n);
    double total = 0.0;
    CPU_FOR_SUM
    for (size_t i = 0; i < n; i++) total += (double)x[i] * x[i];
    *result = (float)total;
}

void cpu_count_nonfinite(Backend *backend, size_t n, const float *x, float *result) {
    const int team = cpu_team(backend, n);
    size_t bad = 0;
    // The exponent bits: all ones is NaN or infinity (no float compare, so
    // it vectorises as integer ops and holds under any FP flags).
    const uint32_t *bits = (const uint32_t *)(const void *)x;
#pragma omp parallel for simd num_threads(team) schedule(simd:static) reduction(+:bad)
    for (size_t i = 0; i < n; i++) bad += (bits[i] & 0x7f800000u) == 0x7f800000u;
    *result += (float)bad;
}

void cpu_dot(Backend *backend, size_t n, const float *a, const float *b, float *result) {
    const int team = cpu_team(backend, n);
    double total = 0.0;
    CPU_FOR_SUM
    for (size_t i = 0; i < n; i++) total += (double)a[i] * b[i];
    *result = (float)total;
}

// ---- optimizer updates (PyTorch semantics, see backend.h) -----------------------------------

void cpu_sgd_update(Backend *backend, size_t n, float *param, const float *grad,
                    const float *gate, float *momentum_buffer, float lr, float momentum,
                    float weight_decay, int nesterov, int first_step) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER];
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) {
        const float g = multiplier * grad[i] + weight_decay * param[i];
        const float buf = first_step ? g : momentum * momentum_buffer[i] + g;
        momentum_buffer[i] = buf;
        const float step = nesterov ? g + momentum * buf : buf;
        param[i] -= lr * step;
    }
}

// torch.optim.AdamW's operations in its order (scalar_rules.h): bias
// corrections in double, as PyTorch computes them in Python floats, the
// moments by lerp and multiply-add, the division by the second's root in float.
// This file is built with -fno-math-errno (Makefile): sqrtf's errno call
// kept this loop scalar, a fifth of a 16 px ResNet-18 step.
void cpu_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                      const float *gate, float *m, float *v, float lr, double beta1, double beta2,
                      float eps, float weight_decay, const float *step) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER];
    const int team = cpu_team(backend, n);
    double correction1;
    float correction2_sqrt;
    adamw_corrections_rule(*step, beta1, beta2, &correction1, &correction2_sqrt);
    const float step_size = (float)(lr / correction1);
    const float decay = (float)(1.0 - (double)lr * weight_decay);
    const AdamwFactors factors = adamw_factors_rule(beta1, beta2);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++) {
        const float p = param[i] * decay;
        const float g = multiplier * grad[i];
        const float m_new = adamw_first_moment_rule(factors, m[i], g);
        const float v_new = adamw_second_moment_rule(factors, v[i], g);
        m[i] = m_new;
        v[i] = v_new;
        const float denominator = sqrtf(v_new) / correction2_sqrt + eps;
        param[i] = p - step_size * (m_new / denominator);
    }
}

void cpu_ema_update(Backend *backend, size_t n, float *target, const float *source,
                    float momentum) {
    const int team = cpu_team(backend, n);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < n; i++)
        target[i] = momentum * target[i] + (1.0f - momentum) * source[i];
}

// ---- input --------------------------------------------------------------------------

// Same operation order as ref (x / 255, then - mean, then / std).
void cpu_normalize_u8(Backend *backend, size_t pixels, const uint8_t *x, const float mean[3],
                      const float std[3], Act *y_act) {
    float *y = (float *)y_act;
    const int team = cpu_team(backend, pixels * 3);
    const float m0 = mean[0], m1 = mean[1], m2 = mean[2];
    const float s0 = std[0], s1 = std[1], s2 = std[2];
    CPU_FOR_ELEMENTS
    for (size_t p = 0; p < pixels; p++) {
        y[p * 3 + 0] = ((float)x[p * 3 + 0] / 255.0f - m0) / s0;
        y[p * 3 + 1] = ((float)x[p * 3 + 1] / 255.0f - m1) / s1;
        y[p * 3 + 2] = ((float)x[p * 3 + 2] / 255.0f - m2) / s2;
    }
}

// Same operation order as ref ((x - mean) / std).
void cpu_normalize_f32(Backend *backend, size_t pixels, int channels, const float *x,
                       const float *mean, const float *std, Act *y_act) {
    float *y = (float *)y_act;
    const size_t values = pixels * (size_t)channels;
    const int team = cpu_team(backend, values);
    CPU_FOR_ELEMENTS
    for (size_t i = 0; i < values; i++) {
        const int c = (int)(i % (size_t)channels);
        y[i] = (x[i] - mean[c]) / std[c];
    }
}
