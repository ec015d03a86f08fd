// The cuda backend's DINOv3 ops (backend.h): the rotary position embedding
// on the fused qkv buffer and its transpose, and SwiGLU on a packed gate |
// value projection, with their Backend entry points (the op table in
// cuda_backend.c points here). One thread per rotated pair or per hidden
// unit, each evaluating ref's double expression (so results equal ref's up
// to the libm of the device). Written and compiled without a GPU at hand:
// not yet run on one (make test-gpu).
#include <math.h>

#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"

namespace {

// n = B P 2 H (Dh / 2) pairs: index = (((b P + p) 2 + part) H + h) (Dh / 2) + i.
__global__ void rope_kernel(size_t n, int tokens, int heads, int head_dim, int prefix,
                            const float *sin, const float *cos, float *qkv, double direction) {
    const int half = head_dim / 2, width = heads * head_dim, patches = tokens - prefix;
    GRID_STRIDE(index, n) {
        const int i = (int)(index % half);
        const size_t vector = index / half;  // (b P + p) 2 H + part H + h
        const int h = (int)(vector % heads), part = (int)(vector / heads % 2);
        const size_t row = vector / heads / 2;  // b P + p
        const size_t b = row / patches, p = row % patches;
        float *x = qkv + (b * tokens + prefix + p) * 3 * width + part * width + h * head_dim;
        const double s = direction * sin[p * half + i], c = cos[p * half + i];
        const double first = x[i], second = x[i + half];
        x[i] = (float)(first * c - second * s);
        x[i + half] = (float)(second * c + first * s);
    }
}

__device__ double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

__global__ void swiglu_forward_kernel(size_t n, int hidden, const float *x, float *y) {
    GRID_STRIDE(index, n) {
        const size_t r = index / hidden;
        const int j = (int)(index % hidden);
        const float *gate = x + r * 2 * hidden;
        y[index] = (float)(gate[j] * sigmoid(gate[j]) * gate[hidden + j]);
    }
}

__global__ void swiglu_backward_kernel(size_t n, int hidden, const float *x, const float *dy,
                                       float *dx) {
    GRID_STRIDE(index, n) {
        const size_t r = index / hidden;
        const int j = (int)(index % hidden);
        const float *gate = x + r * 2 * hidden;
        const double a = gate[j], s = sigmoid(a), g = dy[index];
        dx[r * 2 * hidden + j] = (float)(g * gate[hidden + j] * s * (1.0 + a * (1.0 - s)));
        dx[r * 2 * hidden + hidden + j] = (float)(g * a * s);
    }
}

void rope_launch(Backend *backend, int batch, int tokens, int heads, int head_dim, int prefix,
                 const float *sin, const float *cos, float *qkv, double direction) {
    const size_t n = (size_t)batch * (tokens - prefix) * 2 * heads * (head_dim / 2);
    if (n == 0) return;
    rope_kernel<<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
        n, tokens, heads, head_dim, prefix, sin, cos, qkv, direction);
    CUDA_CHECK_LAUNCH();
}

}  // namespace

extern "C" {

void cuda_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *qkv_act) {
    float *qkv = (float *)qkv_act;
    rope_launch(backend, batch, tokens, heads, head_dim, prefix, sin, cos, qkv, 1.0);
}

void cuda_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                        int prefix, const float *sin, const float *cos, Act *dqkv_act) {
    float *dqkv = (float *)dqkv_act;
    rope_launch(backend, batch, tokens, heads, head_dim, prefix, sin, cos, dqkv, -1.0);
}

void cuda_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const size_t n = rows * (size_t)hidden;
    if (n == 0) return;
    swiglu_forward_kernel<<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
        n, hidden, x, y);
    CUDA_CHECK_LAUNCH();
}

void cuda_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x_act,
                          const Act *dy_act, Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const size_t n = rows * (size_t)hidden;
    if (n == 0) return;
    swiglu_backward_kernel<<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
        n, hidden, x, dy, dx);
    CUDA_CHECK_LAUNCH();
}

}  // extern "C"
