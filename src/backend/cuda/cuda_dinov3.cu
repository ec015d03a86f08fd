// The cuda backend's DINOv3 ops (backend.h): the rotary position embedding
// on the fused qkv buffer and its transpose, and SwiGLU on a packed gate |
// value projection, with their Backend entry points (the op table in
// cuda_backend.c points here). One thread per rotated pair or per hidden
// unit, each evaluating ref's double expression (so results equal ref's up
// to the libm of the device). Written and compiled without a GPU at hand:
// not yet run on one (make test-gpu). qkv, x, y, dy and dx are
// activations in the storage type T of the compute dtype (cuda_act.cuh).
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"

namespace {

// n = B P 2 H (Dh / 2) pairs: index = (((b P + p) 2 + part) H + h) (Dh / 2) + i.
template <typename T>
__global__ void rope_kernel(size_t n, int tokens, int heads, int head_dim, int prefix,
                            const float *sin, const float *cos, T *qkv, double direction) {
    const int half = head_dim / 2, width = heads * head_dim, patches = tokens - prefix;
    GRID_STRIDE(index, n) {
        const int i = (int)(index % half);
        const size_t vector = index / half;  // (b P + p) 2 H + part H + h
        const int h = (int)(vector % heads), part = (int)(vector / heads % 2);
        const size_t row = vector / heads / 2;  // b P + p
        const size_t b = row / patches, p = row % patches;
        T *x = qkv + (b * tokens + prefix + p) * 3 * width + part * width + h * head_dim;
        const double s = direction * sin[p * half + i], c = cos[p * half + i];
        const double first = act_load(x[i]), second = act_load(x[i + half]);
        x[i] = act_store<T>((float)(first * c - second * s));
        x[i + half] = act_store<T>((float)(second * c + first * s));
    }
}

__device__ double sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

template <typename T>
__global__ void swiglu_forward_kernel(size_t n, int hidden, const T *x, T *y) {
    GRID_STRIDE(index, n) {
        const size_t r = index / hidden;
        const int j = (int)(index % hidden);
        const T *gate = x + r * 2 * hidden;
        const double a = act_load(gate[j]);
        y[index] = act_store<T>((float)(a * sigmoid(a) * act_load(gate[hidden + j])));
    }
}

template <typename T>
__global__ void swiglu_backward_kernel(size_t n, int hidden, const T *x, const T *dy, T *dx) {
    GRID_STRIDE(index, n) {
        const size_t r = index / hidden;
        const int j = (int)(index % hidden);
        const T *gate = x + r * 2 * hidden;
        const double a = act_load(gate[j]), s = sigmoid(a), g = act_load(dy[index]);
        const double value = act_load(gate[hidden + j]);
        dx[r * 2 * hidden + j] = act_store<T>((float)(g * value * s * (1.0 + a * (1.0 - s))));
        dx[r * 2 * hidden + hidden + j] = act_store<T>((float)(g * a * s));
    }
}

void rope_launch(Backend *backend, int batch, int tokens, int heads, int head_dim, int prefix,
                 const float *sin, const float *cos, Act *qkv, double direction) {
    const size_t n = (size_t)batch * (tokens - prefix) * 2 * heads * (head_dim / 2);
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            rope_kernel<ACT_T><<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                n, tokens, heads, head_dim, prefix, sin, cos, (ACT_T *)qkv, direction);
        CUDA_CHECK_LAUNCH();
    });
}

}  // namespace

extern "C" {

void cuda_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *qkv) {
    rope_launch(backend, batch, tokens, heads, head_dim, prefix, sin, cos, qkv, 1.0);
}

void cuda_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                        int prefix, const float *sin, const float *cos, Act *dqkv) {
    rope_launch(backend, batch, tokens, heads, head_dim, prefix, sin, cos, dqkv, -1.0);
}

void cuda_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x, Act *y) {
    const size_t n = rows * (size_t)hidden;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            swiglu_forward_kernel<ACT_T>
                <<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                    n, hidden, (const ACT_T *)x, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x,
                          const Act *dy, Act *dx) {
    const size_t n = rows * (size_t)hidden;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            swiglu_backward_kernel<ACT_T>
                <<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                    n, hidden, (const ACT_T *)x, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

}  // extern "C"
