// Reference DINOv3 ops (backend.h): the rotary position embedding on the
// fused qkv buffer and its transpose, and SwiGLU on a packed gate | value
// projection. Plain loops, every expression in double.
#include <math.h>

#include "backend/ref/ref_ops.h"

// ---- RoPE --------------------------------------------------------------------------

// Rotates the query and key pairs of every patch token by +angle
// (direction 1) or -angle (direction -1).
static void rope_rotate(int batch, int tokens, int heads, int head_dim, int prefix,
                        const float *sin, const float *cos, float *qkv, double direction) {
    const int half = head_dim / 2, width = heads * head_dim;
    for (int b = 0; b < batch; b++)
        for (int t = prefix; t < tokens; t++) {
            const float *sin_row = sin + (size_t)(t - prefix) * half;
            const float *cos_row = cos + (size_t)(t - prefix) * half;
            float *row = qkv + ((size_t)b * tokens + t) * 3 * width;
            for (int part = 0; part < 2; part++)  // q, k
                for (int h = 0; h < heads; h++) {
                    float *x = row + part * width + h * head_dim;
                    for (int i = 0; i < half; i++) {
                        const double s = direction * sin_row[i], c = cos_row[i];
                        const double first = x[i], second = x[i + half];
                        x[i] = (float)(first * c - second * s);
                        x[i + half] = (float)(second * c + first * s);
                    }
                }
        }
}

void ref_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                      int prefix, const float *sin, const float *cos, Act *qkv_act) {
    float *qkv = (float *)qkv_act;
    rope_rotate(batch, tokens, heads, head_dim, prefix, sin, cos, qkv, 1.0);
    ref_round_acts(backend, qkv_act, (size_t)batch * tokens * 3 * heads * head_dim);
}

// The forward is x' = R x with R an orthogonal rotation per pair, so
// dx = R^T dx' = rotation by -angle.
void ref_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *dqkv_act) {
    float *dqkv = (float *)dqkv_act;
    rope_rotate(batch, tokens, heads, head_dim, prefix, sin, cos, dqkv, -1.0);
    ref_round_acts(backend, dqkv_act, (size_t)batch * tokens * 3 * heads * head_dim);
}

// ---- SwiGLU ------------------------------------------------------------------------

static double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

void ref_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t r = 0; r < rows; r++) {
        const float *gate = x + r * 2 * hidden, *value = gate + hidden;
        for (int j = 0; j < hidden; j++)
            y[r * hidden + j] = (float)(gate[j] * sigmoid(gate[j]) * value[j]);
    }
    ref_round_acts(backend, y_act, rows * hidden);
}

void ref_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x_act,
                         const Act *dy_act, Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (size_t r = 0; r < rows; r++) {
        const float *gate = x + r * 2 * hidden, *value = gate + hidden;
        float *dgate = dx + r * 2 * hidden, *dvalue = dgate + hidden;
        for (int j = 0; j < hidden; j++) {
            const double a = gate[j], s = sigmoid(a), g = dy[r * hidden + j];
            dgate[j] = (float)(g * value[j] * s * (1.0 + a * (1.0 - s)));
            dvalue[j] = (float)(g * a * s);
        }
    }
    ref_round_acts(backend, dx_act, rows * 2 * hidden);
}
