// Launch helpers of the cuda backend's one-thread-per-element kernels: the
// grid-stride loop each kernel body runs in and the launch of such a kernel
// on a stream (nothing launched for n = 0).
#ifndef LTC_BACKEND_CUDA_LAUNCH_CUH
#define LTC_BACKEND_CUDA_LAUNCH_CUH

#include <stddef.h>

#include "backend/cuda/cuda_internal.h"

constexpr int kGridStrideThreads = 256;

// Enough blocks to fill the GPU without one thread per element for huge n.
inline unsigned int grid_stride_blocks(size_t n) {
    const size_t blocks = (n + kGridStrideThreads - 1) / kGridStrideThreads;
    return (unsigned int)(blocks < 65535 ? (blocks ? blocks : 1) : 65535);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)blockDim.x * gridDim.x)

// Returns from the calling launcher when n is 0.
#define LAUNCH(kernel, n, stream, ...)                                                   \
    do {                                                                                 \
        if ((n) == 0) return;                                                            \
        kernel<<<grid_stride_blocks(n), kGridStrideThreads, 0, stream>>>(__VA_ARGS__);   \
        CUDA_CHECK_LAUNCH();                                                             \
    } while (0)

#endif
