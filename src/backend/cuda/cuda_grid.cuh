// Launch geometry shared by the cuda backend's one-thread-per-element
// kernels: 256-thread blocks, enough of them to fill the GPU (at most
// 65535, at least 1) and a grid-stride loop over the n elements.
#ifndef LTC_BACKEND_CUDA_GRID_CUH
#define LTC_BACKEND_CUDA_GRID_CUH

#include <stddef.h>

constexpr int kThreads = 256;

static inline unsigned int blocks_for(size_t n) {
    const size_t blocks = (n + kThreads - 1) / kThreads;
    return (unsigned int)(blocks < 1 ? 1 : blocks < 65535 ? blocks : 65535);
}

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)blockDim.x * gridDim.x)

#endif
