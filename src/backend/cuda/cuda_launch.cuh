// The launch of a one-thread-per-element kernel on a stream, with the
// geometry of cuda_grid.cuh (nothing launched for n = 0), checked.
#ifndef LTC_BACKEND_CUDA_LAUNCH_CUH
#define LTC_BACKEND_CUDA_LAUNCH_CUH

#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"

// Returns from the calling launcher when n is 0.
#define LAUNCH(kernel, n, stream, ...)                                                       \
    do {                                                                                     \
        if ((n) == 0) return;                                                                \
        if (cuda_queue_point()) kernel<<<blocks_for(n), kThreads, 0, stream>>>(__VA_ARGS__); \
        CUDA_CHECK_LAUNCH();                                                                 \
    } while (0)

#endif
