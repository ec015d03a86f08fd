// Reductions of the cuda backend: whole-vector sums (sum, sum of squares,
// dot, NaN/inf count) and column sums of (rows, C) matrices (bias gradient,
// column_sum, on fp32 or on activations), plus the bias add and the
// bias epilogue of the 16-bit linear layers. Two passes with double partials in the
// backend's scratch and a fixed combination order: deterministic, and
// accurate to fp32 rounding of the exact sum as ref's double loops are.
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

constexpr int kVectorBlocks = 512;  // partials of a whole-vector reduction

__device__ double element_value(int kind, const float *a, const float *b, size_t i) {
    const float x = a[i];
    switch (kind) {
    case 0: return x;
    case 1: return (double)x * x;
    case 2: return (double)x * b[i];
    default: return (__float_as_uint(x) & 0x7f800000u) == 0x7f800000u ? 1.0 : 0.0;
    }
}

__global__ void vector_partials_kernel(int kind, size_t n, const float *a, const float *b,
                                       double *partials) {
    double total = 0.0;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        total += element_value(kind, a, b, i);
    total = block_sum(total);
    if (threadIdx.x == 0) partials[blockIdx.x] = total;
}

// One block: the partials in order; kind 3 (the count) adds to *result.
__global__ void vector_finish_kernel(int kind, int count, const double *partials, float *result) {
    double total = 0.0;
    for (int i = threadIdx.x; i < count; i += blockDim.x) total += partials[i];
    total = block_sum(total);
    if (threadIdx.x == 0) *result = kind == 3 ? *result + (float)total : (float)total;
}

// A warp per column (whole warps return together).
__global__ void column_finish_kernel(int channels, int row_blocks, const double *partials,
                                     float *y, int accumulate) {
    const int c = (int)((blockIdx.x * (size_t)blockDim.x + threadIdx.x) / 32);
    if (c >= channels) return;
    const double total = combine_partials(partials, row_blocks, channels, c);
    if (threadIdx.x % 32 == 0) y[c] = accumulate ? y[c] + (float)total : (float)total;
}

// y (rows, C) = (product (rows, C, fp32), else y itself where product is
// NULL) + bias (C; NULL: none), rounded once. V channels per thread and
// load (ChannelGrid): the 16-bit linear layers write their fp32 product
// and this adds the bias, some 16 GB a step for a ViT-B teacher's forward
// at batch 128.
template <typename T, int V>
__global__ void bias_kernel(size_t rows, int channels, const float *product, const float *bias,
                            T *y) {
    const int column = blockIdx.x * blockDim.x + threadIdx.x;
    if (column >= channels / V) return;
    const int c0 = column * V;
    float b[V];
    for (int v = 0; v < V; v++) b[v] = bias ? bias[c0 + v] : 0.0f;
    CHANNEL_ROWS(r, rows) {
        const size_t i = r * channels + c0;
        float in[V], out[V];
        if (product) {
            const ActVector<float, V> packed = load_packed<float, V>(product + i);
            for (int v = 0; v < V; v++) in[v] = packed.value[v];
        } else {
            act_load_vector<T, V>(y + i, in);
        }
        for (int v = 0; v < V; v++) out[v] = bias ? in[v] + b[v] : in[v];  // -0 stays -0
        act_store_vector<T, V>(y + i, out);
    }
}

// bias_kernel over rows x channels, 4 channels per thread (16 bytes of the
// fp32 product) where channels and pointers allow.
template <typename T>
void bias_launch(cudaStream_t stream, size_t rows, int channels, const float *product,
                 const float *bias, T *y) {
    if (rows == 0 || channels == 0) return;
    const bool fits = act_vector_fits<float>((size_t)channels, 4, {product}) &&
                      act_vector_fits<T>((size_t)channels, 4, {y});
    auto launch = [&](auto width) {
        constexpr int V = decltype(width)::value;
        const ChannelGrid grid = channel_grid(channels, V);
        if (cuda_queue_point())
            bias_kernel<T, V><<<channel_row_blocks(grid, rows), grid.block, 0, stream>>>(
                rows, channels, product, bias, y);
        CUDA_CHECK_LAUNCH();
    };
    if (fits)
        launch(Width<4>{});
    else
        launch(Width<1>{});
}

}  // namespace

int cuda_row_blocks(size_t rows, int columns, unsigned column_blocks, size_t rows_per_block) {
    // About 2048 blocks of 256 threads in all (a large GPU holds some 1000
    // at once: 132 multiprocessors x 8), at least rows_per_block rows per
    // row block, and no more partials than the scratch holds. Not from the
    // device's properties: the sums' order, so their rounding, depends on
    // the shape only.
    size_t wanted = (2048 + column_blocks - 1) / column_blocks;
    const size_t by_rows = (rows + rows_per_block - 1) / rows_per_block;
    const size_t by_scratch = (size_t)CUDA_MAX_ROW_BLOCKS * CUDA_MAX_COLUMNS / (columns > 0 ? columns : 1);
    if (wanted > by_rows) wanted = by_rows;
    if (wanted > by_scratch) wanted = by_scratch;
    return (int)clamp_blocks(wanted);
}

void cuda_column_finish_launch(cudaStream_t stream, int width, int row_blocks,
                               const double *partials, float *y, int accumulate) {
    const unsigned blocks = (unsigned)(((size_t)width * 32 + kThreads - 1) / kThreads);
    if (cuda_queue_point())
        column_finish_kernel<<<blocks, kThreads, 0, stream>>>(width, row_blocks, partials, y,
                                                              accumulate);
    CUDA_CHECK_LAUNCH();
}

extern "C" {

void cuda_reduce_launch(cudaStream_t stream, double *scratch, int kind, size_t n, const float *a,
                        const float *b, float *result) {
    size_t wanted = (n + kThreads - 1) / kThreads;
    const int blocks = (int)(wanted < 1 ? 1 : wanted > kVectorBlocks ? kVectorBlocks : wanted);
    if (cuda_queue_point())
        vector_partials_kernel<<<blocks, kThreads, 0, stream>>>(kind, n, a, b, scratch);
    CUDA_CHECK_LAUNCH();
    if (cuda_queue_point())
        vector_finish_kernel<<<1, kThreads, 0, stream>>>(kind, blocks, scratch, result);
    CUDA_CHECK_LAUNCH();
}

void cuda_column_sum_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                            size_t rows, int channels, const void *x, float *y, int accumulate) {
    act_dispatch(dtype, [&](auto tag) {
        cuda_column_sums(stream, scratch, rows, channels,
                         StridedColumns<ACT_T>{(const ACT_T *)x, (size_t)channels}, y,
                         accumulate);
    });
}

void cuda_bias_add_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows, int channels,
                          const float *bias, void *y) {
    act_dispatch(dtype, [&](auto tag) {
        bias_launch<ACT_T>(stream, rows, channels, nullptr, bias, (ACT_T *)y);
    });
}

void cuda_bias_epilogue_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                               int channels, const float *product, const float *bias, void *y) {
    act_dispatch(dtype, [&](auto tag) {
        bias_launch<ACT_T>(stream, rows, channels, product, bias, (ACT_T *)y);
    });
}

}  // extern "C"
