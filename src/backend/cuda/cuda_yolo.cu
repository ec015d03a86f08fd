// The cuda backend's ops of Ultralytics' YOLO models (backend.h): SiLU
// (C2PSA's position encoding runs on cuda_depthwise.cu), with its Backend
// entry points (the op table in cuda_backend.c points here). One thread per
// output element, each evaluating ref's double expression in ref's order.
// Written and compiled without a GPU at hand: run on the CPU emulation of
// CUDA (tests/cuda_emu) and not yet on a GPU. x, y, dy and dx are
// activations in the storage type T of the compute dtype (cuda_act.cuh).
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"

namespace {

__device__ double silu_sigmoid(double a) { return 1.0 / (1.0 + exp(-a)); }

template <typename T>
__global__ void silu_forward_kernel(size_t n, const T *x, T *y) {
    GRID_STRIDE(i, n) {
        const double a = act_load(x[i]);
        y[i] = act_store<T>((float)(a * silu_sigmoid(a)));
    }
}

template <typename T>
__global__ void silu_backward_kernel(size_t n, const T *x, const T *dy, T *dx) {
    GRID_STRIDE(i, n) {
        const double a = act_load(x[i]), s = silu_sigmoid(a);
        dx[i] = act_store<T>((float)(act_load(dy[i]) * s * (1.0 + a * (1.0 - s))));
    }
}

}  // namespace

extern "C" {

void cuda_silu_forward(Backend *backend, size_t n, const Act *x, Act *y) {
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            silu_forward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                n, (const ACT_T *)x, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_silu_backward(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx) {
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            silu_backward_kernel<ACT_T>
                <<<blocks_for(n), kThreads, 0, cuda_state(backend)->stream>>>(
                    n, (const ACT_T *)x, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

}  // extern "C"
