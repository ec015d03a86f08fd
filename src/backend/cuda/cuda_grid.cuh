// Launch geometry shared by the cuda backend's kernels: 256-thread blocks;
// for one thread per element, enough of them to fill the GPU (at most
// 65535, at least 1) and a grid-stride loop over the n elements; for
// (rows, channels) matrices, ChannelGrid below.
#ifndef LTC_BACKEND_CUDA_GRID_CUH
#define LTC_BACKEND_CUDA_GRID_CUH

#include <stddef.h>

constexpr int kThreads = 256;

// A block count between 1 and 65535 (a grid's y limit, and plenty in x).
static inline size_t clamp_blocks(size_t wanted) {
    return wanted < 1 ? 1 : wanted < 65535 ? wanted : 65535;
}

static inline unsigned int blocks_for(size_t n) {
    return (unsigned int)clamp_blocks((n + kThreads - 1) / kThreads);
}

// Unrolls the loop after it under nvcc (a constant bound: a register array
// indexed by it stays in registers); nothing for the CPU emulation's g++.
#ifdef __CUDACC__
#define UNROLL_LOOP _Pragma("unroll")
#else
#define UNROLL_LOOP
#endif

#define GRID_STRIDE(i, n) \
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < (n); i += (size_t)blockDim.x * gridDim.x)

// ---- (rows, channels) matrices, V channels per thread ---------------------------------
// For kernels that need per-channel values on every element (batch norm,
// bias adds): each thread takes V consecutive channels of a row (V values
// in one load, cuda_act.cuh) and walks rows keeping its channels' values
// in registers (no `i % channels` per element). A block is X vector
// columns x Y row lanes, 256 threads: X the smallest power of two covering
// a row's vectors, at most 32 (64 channels of fp16, V = 8, take 8 x 32;
// 256 channels 32 x 8). A kernel's thread takes vector column
// blockIdx.x * blockDim.x + threadIdx.x (none past channels / V) and the
// rows of CHANNEL_ROWS.
struct ChannelGrid {
    int vectors;             // vector columns of a row: channels / V
    dim3 block;              // X x Y
    unsigned column_blocks;  // blocks across a row
};

static inline ChannelGrid channel_grid(int channels, int width) {
    ChannelGrid grid;
    grid.vectors = channels / width;
    unsigned x = 1;
    while ((int)x < grid.vectors && x < 32) x *= 2;
    grid.block = dim3(x, kThreads / x);
    grid.column_blocks = (unsigned)((grid.vectors + (int)x - 1) / (int)x);
    return grid;
}

// The grid of an elementwise pass over rows: at least 8 rows per thread.
static inline dim3 channel_row_blocks(const ChannelGrid &grid, size_t rows) {
    const size_t per_block = (size_t)grid.block.y * 8;
    return dim3(grid.column_blocks, (unsigned)clamp_blocks((rows + per_block - 1) / per_block));
}

// The rows of the calling thread in a grid of row blocks.
#define CHANNEL_ROWS(r, rows)                                                    \
    for (size_t r = blockIdx.y * (size_t)blockDim.y + threadIdx.y; r < (rows); \
         r += (size_t)blockDim.y * gridDim.y)

#endif
