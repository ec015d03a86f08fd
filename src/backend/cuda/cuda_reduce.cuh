// Helpers shared by the cuda backend's reduction kernels: block-wide sum and
// max in a fixed order (warp shuffles, then the warps' results in warp
// order), returned to every thread of the block (blocks of at most 1024
// threads, a multiple of 32); and the deterministic two-pass column sums of
// a matrix given by a functor (bias and parameter gradients, batch sums).
#ifndef LTC_BACKEND_CUDA_REDUCE_CUH
#define LTC_BACKEND_CUDA_REDUCE_CUH

#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_internal.h"

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

// The sum of value over the calling warp, every lane getting the same bits
// (a butterfly: each step adds the same two values on both lanes of a
// pair, and addition is commutative). All 32 lanes must call it.
template <typename T>
__device__ T warp_sum(T value) {
    for (int offset = 16; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

template <typename T>
__device__ T block_sum(T value) {
    return block_reduce(value, SumOp());
}

template <typename T>
__device__ T block_max(T value) {
    return block_reduce(value, NanMaxOp());
}

// Row blocks (grid.y) of a column reduction over `rows` x `columns` whose
// grid has column_blocks blocks across a row: enough to fill the GPU, at
// least rows_per_block rows each, row blocks x columns at most
// CUDA_MAX_ROW_BLOCKS x CUDA_MAX_COLUMNS (the scratch's partials).
int cuda_row_blocks(size_t rows, int columns, unsigned column_blocks, size_t rows_per_block);

// ---- column sums of a matrix given by a functor ------------------------------------
// value(r, c) (double) is element (r, c) of a (rows, width) matrix: a plain
// read, or a product the caller forms on the fly (dy * xhat for a norm's
// gamma gradient). Two passes: column partials of each row block into the
// scratch, then the row blocks combined in order (cuda_column_finish_launch).

// Partials of columns [first, first + width): block (32 columns) x (8 row
// lanes), the lanes combined in order; grid.y row blocks; partials (row
// block, width).
template <typename Value>
__global__ void column_partials_kernel(size_t rows, int first, int width, Value value,
                                       double *partials) {
    const int c = blockIdx.x * 32 + threadIdx.x;
    double total = 0.0;
    if (c < width)
        for (size_t r = blockIdx.y * (size_t)blockDim.y + threadIdx.y; r < rows;
             r += (size_t)blockDim.y * gridDim.y)
            total += value(r, first + c);
    __shared__ double lanes[8][33];
    lanes[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && c < width) {
        for (int k = 1; k < (int)blockDim.y; k++) total += lanes[k][threadIdx.x];
        partials[(size_t)blockIdx.y * width + c] = total;
    }
}

// Column c's sum of the row blocks' partials (row_blocks, columns), by one
// whole warp: lane l adds row blocks l, l + 32, ... in order, then warp_sum;
// every lane gets it. A thread walking all row blocks alone would wait on
// each load in turn.
__device__ inline double combine_partials(const double *partials, int row_blocks, int columns,
                                          int c) {
    double total = 0.0;
    for (int b = threadIdx.x % 32; b < row_blocks; b += 32)
        total += partials[(size_t)b * columns + c];
    return warp_sum(total);
}

// y (width) = (accumulate 0) or += (accumulate 1) the sums of the row
// blocks' partials (row_blocks, width), a warp per column.
void cuda_column_finish_launch(cudaStream_t stream, int width, int row_blocks,
                               const double *partials, float *y, int accumulate);

// y (width) =, or += with accumulate, the column sums of value over rows.
// Wide matrices go in chunks of CUDA_MAX_COLUMNS columns (the scratch's room).
template <typename Value>
void cuda_column_sums(cudaStream_t stream, double *scratch, size_t rows, int width, Value value,
                      float *y, int accumulate) {
    for (int first = 0; first < width; first += CUDA_MAX_COLUMNS) {
        const int chunk = width - first < CUDA_MAX_COLUMNS ? width - first : CUDA_MAX_COLUMNS;
        // blocks of 32 columns x 8 row lanes, at least 32 rows per thread
        const int row_blocks = cuda_row_blocks(rows, chunk, (unsigned)((chunk + 31) / 32), 256);
        const dim3 grid((unsigned)((chunk + 31) / 32), (unsigned)row_blocks);
        if (cuda_queue_point())
            column_partials_kernel<Value>
                <<<grid, dim3(32, 8), 0, stream>>>(rows, first, chunk, value, scratch);
        CUDA_CHECK_LAUNCH();
        cuda_column_finish_launch(stream, chunk, row_blocks, scratch, y + first, accumulate);
    }
}

// Element (r, c) of a row-major matrix with row stride `stride` elements
// of type T (float, or an activation storage type).
template <typename T>
struct StridedColumns {
    const T *x;
    size_t stride;
    __device__ double operator()(size_t r, int c) const { return act_load(x[r * stride + c]); }
};

#endif
