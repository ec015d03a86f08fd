// The cpu backend's DINOv3 ops (backend.h): the rotary position embedding
// on the fused qkv buffer and its transpose, and SwiGLU on a packed gate |
// value projection. Rows (tokens) split across threads, the channels of a
// row vectorised. fp32 arithmetic where ref uses double, so results differ
// from ref by an ulp or two (tests/test_backend_dinov3_ops.c bounds it).
#include <math.h>

#include "backend/cpu/cpu_internal.h"

// ---- RoPE --------------------------------------------------------------------------

// Rotates the query and key pairs of every patch token by +angle (sign 1)
// or -angle (sign -1); one (sample, patch) row per iteration.
static void rope_rotate(Backend *backend, int batch, int tokens, int heads, int head_dim,
                        int prefix, const float *sin, const float *cos, float *qkv, float sign) {
    const int half = head_dim / 2, width = heads * head_dim, patches = tokens - prefix;
    const size_t rows = (size_t)batch * patches;
    const int team = cpu_team(backend, rows * 2 * width);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const size_t b = r / patches, p = r % patches;
        const float *sin_row = sin + p * half, *cos_row = cos + p * half;
        float *row = qkv + (b * tokens + prefix + p) * 3 * width;
        for (int vector = 0; vector < 2 * heads; vector++) {  // q heads, then k heads
            float *first = row + (size_t)vector * head_dim, *second = first + half;
#pragma omp simd
            for (int i = 0; i < half; i++) {
                const float s = sign * sin_row[i], c = cos_row[i];
                const float x = first[i], y = second[i];
                first[i] = x * c - y * s;
                second[i] = y * c + x * s;
            }
        }
    }
}

void cpu_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                      int prefix, const float *sin, const float *cos, Act *qkv_act) {
    float *qkv = (float *)qkv_act;
    rope_rotate(backend, batch, tokens, heads, head_dim, prefix, sin, cos, qkv, 1.0f);
}

void cpu_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *dqkv_act) {
    float *dqkv = (float *)dqkv_act;
    rope_rotate(backend, batch, tokens, heads, head_dim, prefix, sin, cos, dqkv, -1.0f);
}

// ---- SwiGLU ------------------------------------------------------------------------

void cpu_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, rows * (size_t)hidden);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *gate = x + r * 2 * hidden, *value = gate + hidden;
        float *out = y + r * hidden;
        for (int j = 0; j < hidden; j++) {
            const float a = gate[j];
            out[j] = a / (1.0f + expf(-a)) * value[j];
        }
    }
}

void cpu_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x_act,
                         const Act *dy_act, Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int team = cpu_team(backend, rows * (size_t)hidden);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *gate = x + r * 2 * hidden, *value = gate + hidden, *g = dy + r * hidden;
        float *dgate = dx + r * 2 * hidden, *dvalue = dgate + hidden;
        for (int j = 0; j < hidden; j++) {
            const float a = gate[j], s = 1.0f / (1.0f + expf(-a));
            dgate[j] = g[j] * value[j] * (s * (1.0f + a * (1.0f - s)));
            dvalue[j] = g[j] * (a * s);
        }
    }
}
