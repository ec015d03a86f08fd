// Device helpers shared by the cuda backend's reduction kernels: block-wide
// sum and max in a fixed order (warp shuffles, then the warps' results in
// warp order), returned to every thread of the block. Blocks of at most 1024
// threads, a multiple of 32.
#ifndef LTC_BACKEND_CUDA_REDUCE_CUH
#define LTC_BACKEND_CUDA_REDUCE_CUH

#include <math.h>

struct SumOp {
    template <typename T>
    __device__ T operator()(T a, T b) const { return a + b; }
};

// NaN wins, so a NaN input is not lost (fmax would drop it).
struct NanMaxOp {
    template <typename T>
    __device__ T operator()(T a, T b) const { return (a != a || a > b) ? a : b; }
};

template <typename T>
__device__ T nan_max(T a, T b) {
    return NanMaxOp()(a, b);
}

// The block-wide reduction with op: warp shuffles, then the warps' results
// in warp order; every thread gets the result. Uses and resynchronises
// shared memory, so call it from all threads of the block.
template <typename T, typename Op>
__device__ T block_reduce(T value, Op op) {
    __shared__ T warps[32];
    __shared__ T total;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    for (int offset = 16; offset > 0; offset /= 2)
        value = op(value, __shfl_down_sync(0xffffffffu, value, offset));
    if (lane == 0) warps[warp] = value;
    __syncthreads();
    if (warp == 0) {
        const int count = (blockDim.x + 31) / 32;
        value = warps[lane < count ? lane : 0];
        for (int offset = 16; offset > 0; offset /= 2) {
            const T other = __shfl_down_sync(0xffffffffu, value, offset);
            if (lane + offset < count) value = op(value, other);
        }
        if (lane == 0) total = value;
    }
    __syncthreads();
    const T result = total;
    __syncthreads();  // the next call may overwrite `total`
    return result;
}

template <typename T>
__device__ T block_sum(T value) {
    return block_reduce(value, SumOp());
}

template <typename T>
__device__ T block_max(T value) {
    return block_reduce(value, NanMaxOp());
}

// Row blocks (grid.y) of a column reduction over `rows`: at most
// CUDA_MAX_ROW_BLOCKS, about 256 rows each.
int cuda_row_blocks(size_t rows);

#endif
