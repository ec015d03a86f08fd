// Fused scaled-dot-product attention on the GPU (backend.h) on the packed
// qkv (B, T, 3, H, Dh) layout; qkv, out, dout and dqkv in the storage type
// of the compute dtype (cuda_act.cuh), loaded into fp32 tiles (all the
// arithmetic is fp32) and rounded once when stored; lse fp32. No (T, T) matrix is stored:
// - forward: a block takes 64 queries of one (b, h) and streams the keys
//   and values through shared memory 32 at a time, keeping each query's
//   running maximum, sum and output ("online softmax", as FlashAttention);
//   it writes out and lse = max + log(sum).
// - backward: D_i = dout_i . out_i first (one thread per row), then two
//   launches of one tile kernel that recompute the probabilities p_ij =
//   exp(scale q_i.k_j - lse_i) tile by tile: one per 64 queries sums dq_i =
//   scale sum_j ds_ij k_j, one per 64 keys sums dk_j = scale sum_i ds_ij q_i
//   and dv_j = sum_i p_ij dout_i, with ds_ij = p_ij (dout_i . v_j - D_i).
//   Every gradient row is summed by one thread in a fixed order: no
//   atomics, the same bits every run.
// The kernels are templates on the largest head dim they hold (64, 128);
// the plan picks one, refuses larger head dims, and raises the kernels'
// shared-memory limit (tiles of up to 113 KiB). In fp16 and bf16 forward
// and backward run on tensor cores instead: through cuDNN's SDPA graphs
// (cuda_sdpa.c) where cuDNN offers them for the shape, else (and for a
// direction it does not offer) as batched GEMMs on cuBLAS
// (cuda_attention_math.cu: the scores of a chunk of images stored);
// LTC_CUDA_ATTENTION chooses (attention_path_asked). delta is this file's
// on every path but cuDNN's.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"

struct AttentionPlan {
    AttentionShape shape;
    int max_dim;   // 64 or 128: the kernel instance for this head dim
    float *delta;  // device (B, H, T): D_i of the backward
    AttentionMath *math;  // 16 bits on tensor cores, or NULL: the fused kernels
    CudaSdpa *sdpa;       // 16 bits through cuDNN's SDPA graphs (cuda_sdpa.c), or NULL
};

namespace {

constexpr int kMaxHeadDim = 128;

// A block's 256 threads form a 16 x 16 grid: thread (ty, tx) holds rows
// ty * 4 .. ty * 4 + 3 of a tile of kRows rows (queries; keys in the dk/dv
// kernel), and of its kCols columns (keys; queries) those at tx and tx + 16,
// and of the head dim those at tx, tx + 16, ...
static_assert(kThreads == 256, "the attention tiles assume 16 x 16 threads (cuda_grid.cuh)");
constexpr int kRows = 64, kCols = 32;
constexpr int kRowsPerThread = kRows / 16, kColsPerThread = kCols / 16;
// Shared tiles are padded by one float per row, so the 16 threads reading
// column entries of different rows hit different banks.
constexpr int kScoreLd = kCols + 1;

// Where one (b, h)'s vectors lie: q, k, v of token t at qkv + q/k/v + t *
// qkv_stride (dqkv alike), its out / dout row at out + t * out_stride, its
// lse / D row at lse.
struct Head {
    size_t q, k, v, qkv_stride, out, out_stride, lse;
};

__device__ Head head_of(const AttentionShape &s, int pair) {
    const int b = pair / s.heads, h = pair % s.heads;
    const size_t width = (size_t)s.heads * s.head_dim;
    const size_t q = (size_t)b * s.tokens * 3 * width + (size_t)h * s.head_dim;
    return Head{q, q + width, q + 2 * width, 3 * width,
                (size_t)b * s.tokens * width + (size_t)h * s.head_dim, width,
                ((size_t)b * s.heads + h) * s.tokens};
}

// One kind of a head's vectors (q, k, v, dout): token t's at base + t * stride.
template <typename T>
struct Vectors {
    const T *base;
    size_t stride;
};

// tile (count rows of kDim + 1 floats) = the vectors of tokens first ..
// first + count - 1, zero past the last token and past head_dim: padding
// adds nothing to a dot product.
template <int kDim, typename T>
__device__ void load_rows(float *tile, int count, Vectors<T> src, int first,
                          const AttentionShape &s) {
    for (int i = threadIdx.x; i < count * kDim; i += kThreads) {
        const int r = i / kDim, d = i % kDim, t = first + r;
        tile[r * (kDim + 1) + d] =
            t < s.tokens && d < s.head_dim ? act_load(src.base[(size_t)t * src.stride + d]) : 0.0f;
    }
}

// The next kCols tokens' vectors into two tiles, once every thread is done
// with the last ones.
template <int kDim, typename T>
__device__ void load_next(float *tile, Vectors<T> src, float *tile2, Vectors<T> src2, int first,
                          const AttentionShape &s) {
    __syncthreads();
    load_rows<kDim>(tile, kCols, src, first, s);
    load_rows<kDim>(tile2, kCols, src2, first, s);
    __syncthreads();
}

// acc[r][c] = a_row . b_col over head_dim for this thread's rows of a
// (kRows rows) and columns of b (kCols rows). fmaf on purpose: the build
// turns FMA contraction off, and one rounding per term is also closer.
template <int kDim>
__device__ void tile_scores(const float *a, const float *b, int head_dim,
                            float acc[kRowsPerThread][kColsPerThread]) {
    const int tx = threadIdx.x % 16, row0 = threadIdx.x / 16 * kRowsPerThread;
    for (int r = 0; r < kRowsPerThread; r++)
        for (int c = 0; c < kColsPerThread; c++) acc[r][c] = 0.0f;
    for (int d = 0; d < head_dim; d++) {
        float a_values[kRowsPerThread], b_values[kColsPerThread];
        for (int r = 0; r < kRowsPerThread; r++) a_values[r] = a[(row0 + r) * (kDim + 1) + d];
        for (int c = 0; c < kColsPerThread; c++) b_values[c] = b[(tx + 16 * c) * (kDim + 1) + d];
        for (int r = 0; r < kRowsPerThread; r++)
            for (int c = 0; c < kColsPerThread; c++)
                acc[r][c] = fmaf(a_values[r], b_values[c], acc[r][c]);
    }
}

// acc[r][k] += sum over the kCols columns j of weights[row][j] b[j][tx + 16 k]
// for this thread's rows: weights (kRows, kScoreLd) are probabilities or
// score gradients, b (kCols rows) values, keys, queries or output gradients.
template <int kDim>
__device__ void tile_accumulate(const float *weights, const float *b,
                                float acc[kRowsPerThread][kDim / 16]) {
    const int tx = threadIdx.x % 16, row0 = threadIdx.x / 16 * kRowsPerThread;
    for (int j = 0; j < kCols; j++) {
        float w[kRowsPerThread];
        for (int r = 0; r < kRowsPerThread; r++) w[r] = weights[(row0 + r) * kScoreLd + j];
        for (int k = 0; k < kDim / 16; k++) {
            const float value = b[j * (kDim + 1) + tx + 16 * k];
            for (int r = 0; r < kRowsPerThread; r++) acc[r][k] = fmaf(w[r], value, acc[r][k]);
        }
    }
}

// Rows first + row0 + r of dst (token t at dst + t * stride) = acc[r]
// times factor[r], the columns below head_dim of the tokens that exist.
template <int kDim, typename T>
__device__ void store_rows(const float acc[kRowsPerThread][kDim / 16],
                           const float factor[kRowsPerThread], T *dst, size_t stride,
                           int first, int tokens, int head_dim) {
    const int tx = threadIdx.x % 16, row0 = threadIdx.x / 16 * kRowsPerThread;
    for (int r = 0; r < kRowsPerThread; r++) {
        const int t = first + row0 + r;
        if (t >= tokens) continue;
        for (int k = 0; k < kDim / 16; k++)
            if (tx + 16 * k < head_dim)
                dst[(size_t)t * stride + tx + 16 * k] = act_store<T>(acc[r][k] * factor[r]);
    }
}

// Bytes of each kernel's shared tiles: rows of kDim + 1 floats (q, k, v,
// dout) and (kRows, kScoreLd) score tiles (p, ds); dq and dkv are the
// backward kernel on query tiles and on key tiles.
template <int kDim>
struct SharedBytes {
    static constexpr size_t row = (kDim + 1) * sizeof(float);
    static constexpr size_t scores = kRows * kScoreLd * sizeof(float);
    static constexpr size_t forward = (kRows + 2 * kCols) * row + scores;
    static constexpr size_t dq = (2 * kRows + 2 * kCols) * row + scores;
    static constexpr size_t dkv = (2 * kRows + 2 * kCols) * row + 2 * scores;  // the largest
};

// Over the 16 threads that share a row (a half warp; xor offsets below 16
// stay inside it). Every lane ends with the same bits.
__device__ float row_max(float value) {
    for (int offset = 8; offset > 0; offset /= 2)
        value = fmaxf(value, __shfl_xor_sync(0xffffffffu, value, offset));
    return value;
}

__device__ float row_sum(float value) {
    for (int offset = 8; offset > 0; offset /= 2)
        value += __shfl_xor_sync(0xffffffffu, value, offset);
    return value;
}

// ---- forward -----------------------------------------------------------------------

// grid (B H, query tiles). A NaN score is passed over by the maximum but
// makes its row's sum, and so its output and lse, NaN.
template <int kDim, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_forward_kernel(AttentionShape s, const T *qkv, float scale, T *out, float *lse) {
    extern __shared__ float shared[];
    float *q_tile = shared;                          // (kRows, kDim + 1)
    float *k_tile = q_tile + kRows * (kDim + 1);     // (kCols, kDim + 1)
    float *v_tile = k_tile + kCols * (kDim + 1);     // (kCols, kDim + 1)
    float *p_tile = v_tile + kCols * (kDim + 1);     // (kRows, kScoreLd)
    const int tx = threadIdx.x % 16, row0 = threadIdx.x / 16 * kRowsPerThread;
    const Head head = head_of(s, blockIdx.x);
    const int first = blockIdx.y * kRows;
    load_rows<kDim>(q_tile, kRows, Vectors<T>{qkv + head.q, head.qkv_stride}, first, s);
    float max[kRowsPerThread], sum[kRowsPerThread], acc[kRowsPerThread][kDim / 16];
    for (int r = 0; r < kRowsPerThread; r++) {
        max[r] = -INFINITY;
        sum[r] = 0.0f;
        for (int k = 0; k < kDim / 16; k++) acc[r][k] = 0.0f;
    }
    for (int key0 = 0; key0 < s.tokens; key0 += kCols) {
        load_next<kDim>(k_tile, Vectors<T>{qkv + head.k, head.qkv_stride}, v_tile,
                        Vectors<T>{qkv + head.v, head.qkv_stride}, key0, s);
        float score[kRowsPerThread][kColsPerThread];
        tile_scores<kDim>(q_tile, k_tile, s.head_dim, score);
        for (int r = 0; r < kRowsPerThread; r++) {
            float tile_max = -INFINITY;
            for (int c = 0; c < kColsPerThread; c++) {
                const bool key = key0 + tx + 16 * c < s.tokens;
                score[r][c] = key ? scale * score[r][c] : -INFINITY;
                tile_max = fmaxf(tile_max, score[r][c]);
            }
            // The first tile has a key in every row's first column, so
            // new_max is finite there and rescale = exp(-inf) = 0.
            const float new_max = fmaxf(max[r], row_max(tile_max));
            const float rescale = expf(max[r] - new_max);
            float tile_sum = 0.0f;
            for (int c = 0; c < kColsPerThread; c++) {
                const float p = expf(score[r][c] - new_max);
                p_tile[(row0 + r) * kScoreLd + tx + 16 * c] = p;
                tile_sum += p;
            }
            sum[r] = sum[r] * rescale + row_sum(tile_sum);
            max[r] = new_max;
            for (int k = 0; k < kDim / 16; k++) acc[r][k] *= rescale;
        }
        __syncthreads();
        tile_accumulate<kDim>(p_tile, v_tile, acc);
    }
    float inverse[kRowsPerThread];
    for (int r = 0; r < kRowsPerThread; r++) inverse[r] = 1.0f / sum[r];
    store_rows<kDim>(acc, inverse, out + head.out, head.out_stride, first, s.tokens, s.head_dim);
    for (int r = 0; r < kRowsPerThread; r++) {
        const int t = first + row0 + r;
        if (tx == 0 && t < s.tokens) lse[head.lse + t] = max[r] + logf(sum[r]);
    }
}

// ---- backward ----------------------------------------------------------------------

// delta (B, H, T) = dout_i . out_i in double, one (b, t, h) row per iteration.
template <typename T>
__global__ void attention_delta_kernel(AttentionShape s, const T *out, const T *dout,
                                       float *delta) {
    const size_t n = (size_t)s.batch * s.tokens * s.heads;
    GRID_STRIDE(i, n) {
        const T *o = out + i * s.head_dim, *d_o = dout + i * s.head_dim;
        double total = 0.0;
        for (int d = 0; d < s.head_dim; d++) total += (double)act_load(o[d]) * act_load(d_o[d]);
        const size_t h = i % s.heads, t = i / s.heads % s.tokens, b = i / s.heads / s.tokens;
        delta[(b * s.heads + h) * s.tokens + t] = (float)total;
    }
}

// The backward's tile kernel, grid (B H, tiles of 64 tokens): with
// kQueries the tile's tokens are queries and it sums dq_i = scale sum_j
// ds_ij k_j over every key; otherwise they are keys and it sums dk_j =
// scale sum_i ds_ij q_i and dv_j = sum_i p_ij dout_i over every query. The
// other tokens stream through in 32s. Either way the rows of the score
// tiles are the tile's tokens: q_i . k_j and dout_i . v_j, transposed for
// key tiles.
template <int kDim, bool kQueries, typename T>
__global__ void __launch_bounds__(kThreads)
    attention_backward_kernel(AttentionShape s, const T *qkv, const T *dout, const float *lse,
                              const float *delta, float scale, T *dqkv) {
    extern __shared__ float shared[];
    float *rows = shared;                            // (kRows, kDim + 1): q or k
    float *rows2 = rows + kRows * (kDim + 1);        // (kRows, kDim + 1): dout or v
    float *columns = rows2 + kRows * (kDim + 1);     // (kCols, kDim + 1): k or q
    float *columns2 = columns + kCols * (kDim + 1);  // (kCols, kDim + 1): v or dout
    float *ds_tile = columns2 + kCols * (kDim + 1);  // (kRows, kScoreLd)
    float *p_tile = ds_tile + kRows * kScoreLd;      // (kRows, kScoreLd), key tiles only
    const int tx = threadIdx.x % 16, row0 = threadIdx.x / 16 * kRowsPerThread;
    const Head head = head_of(s, blockIdx.x);
    const Vectors<T> q{qkv + head.q, head.qkv_stride}, k{qkv + head.k, head.qkv_stride};
    const Vectors<T> v{qkv + head.v, head.qkv_stride}, d_out{dout + head.out, head.out_stride};
    const int first = blockIdx.y * kRows;
    load_rows<kDim>(rows, kRows, kQueries ? q : k, first, s);
    load_rows<kDim>(rows2, kRows, kQueries ? d_out : v, first, s);
    // grad: dq or dk of this thread's rows; dv: key tiles only.
    float grad[kRowsPerThread][kDim / 16], dv[kRowsPerThread][kDim / 16];
    for (int r = 0; r < kRowsPerThread; r++)
        for (int c = 0; c < kDim / 16; c++) grad[r][c] = dv[r][c] = 0.0f;
    for (int other0 = 0; other0 < s.tokens; other0 += kCols) {
        load_next<kDim>(columns, kQueries ? k : q, columns2, kQueries ? v : d_out, other0, s);
        float score[kRowsPerThread][kColsPerThread], dp[kRowsPerThread][kColsPerThread];
        tile_scores<kDim>(rows, columns, s.head_dim, score);
        tile_scores<kDim>(rows2, columns2, s.head_dim, dp);
        for (int r = 0; r < kRowsPerThread; r++)
            for (int c = 0; c < kColsPerThread; c++) {
                const int row = first + row0 + r, column = other0 + tx + 16 * c;
                const size_t query = head.lse + (kQueries ? row : column);
                // Tokens past the end (zero vectors in the tiles) weigh nothing.
                const bool both = row < s.tokens && column < s.tokens;
                const float p = both ? expf(scale * score[r][c] - lse[query]) : 0.0f;
                const int at = (row0 + r) * kScoreLd + tx + 16 * c;
                ds_tile[at] = both ? p * (dp[r][c] - delta[query]) : 0.0f;
                if (!kQueries) p_tile[at] = p;
            }
        __syncthreads();
        tile_accumulate<kDim>(ds_tile, columns, grad);
        if (!kQueries) tile_accumulate<kDim>(p_tile, columns2, dv);
    }
    float grad_factor[kRowsPerThread], dv_factor[kRowsPerThread];
    for (int r = 0; r < kRowsPerThread; r++) {
        grad_factor[r] = scale;
        dv_factor[r] = 1.0f;
    }
    store_rows<kDim>(grad, grad_factor, dqkv + (kQueries ? head.q : head.k), head.qkv_stride,
                     first, s.tokens, s.head_dim);
    if (!kQueries)
        store_rows<kDim>(dv, dv_factor, dqkv + head.v, head.qkv_stride, first, s.tokens,
                         s.head_dim);
}

// ---- launches ----------------------------------------------------------------------

dim3 tile_grid(const AttentionShape &s) {
    return dim3((unsigned)(s.batch * s.heads), (unsigned)((s.tokens + kRows - 1) / kRows));
}

// Lets the instance for kDim use its tiles' shared memory (over the 48 KB
// default); -1 with a message when the GPU has less per block.
template <int kDim, typename T>
void allow_shared_memory_for() {
    const cudaFuncAttribute attribute = cudaFuncAttributeMaxDynamicSharedMemorySize;
    CUDA_CHECK(cudaFuncSetAttribute(attention_forward_kernel<kDim, T>, attribute,
                                    (int)SharedBytes<kDim>::forward));
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel<kDim, true, T>, attribute,
                                    (int)SharedBytes<kDim>::dq));
    CUDA_CHECK(cudaFuncSetAttribute(attention_backward_kernel<kDim, false, T>, attribute,
                                    (int)SharedBytes<kDim>::dkv));
}

template <int kDim>
int allow_shared_memory(int device, ComputeDtype dtype, ErrorMessage *err) {
    int limit = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&limit, cudaDevAttrMaxSharedMemoryPerBlockOptin, device));
    const size_t need = SharedBytes<kDim>::dkv;
    if ((size_t)limit < need)
        return error_set(err, "head dim up to %d needs %zu KB of shared memory per block, GPU %d "
                              "allows %d KB", kDim, need >> 10, device, limit >> 10);
    act_dispatch(dtype, [&](auto tag) { allow_shared_memory_for<kDim, ACT_T>(); });
    return 0;
}

template <int kDim, typename T>
void forward(cudaStream_t stream, const AttentionShape &s, const T *qkv, float scale, T *out,
             float *lse) {
    if (cuda_queue_point())
        attention_forward_kernel<kDim, T>
            <<<tile_grid(s), kThreads, SharedBytes<kDim>::forward, stream>>>(s, qkv, scale, out,
                                                                             lse);
    CUDA_CHECK_LAUNCH();
}

template <int kDim, typename T>
void backward(cudaStream_t stream, const AttentionShape &s, const T *qkv, const T *dout,
              const float *lse, const float *delta, float scale, T *dqkv) {
    if (cuda_queue_point())
        attention_backward_kernel<kDim, true, T>
            <<<tile_grid(s), kThreads, SharedBytes<kDim>::dq, stream>>>(s, qkv, dout, lse, delta,
                                                                        scale, dqkv);
    CUDA_CHECK_LAUNCH();
    if (cuda_queue_point())
        attention_backward_kernel<kDim, false, T>
            <<<tile_grid(s), kThreads, SharedBytes<kDim>::dkv, stream>>>(s, qkv, dout, lse, delta,
                                                                         scale, dqkv);
    CUDA_CHECK_LAUNCH();
}

// LTC_CUDA_ATTENTION=fused: 16 bits on the fused kernels too (the math
// attention of cuda_attention_math.cu otherwise), to compare the two on a
// GPU; "math" or unset: the default.
// LTC_CUDA_ATTENTION, read when a plan is made: which path 16-bit attention
// takes. auto (unset): cuDNN's SDPA graphs where cuDNN offers them for the
// shape, else the batched GEMMs on cuBLAS ("math"); math: always the
// batched GEMMs (the fallback, for same-run comparisons); cudnn: the SDPA
// graphs or a plan error (tests, benchmarks); fused: the fp32-tile kernels
// of this file. fp32 always runs this file's kernels.
enum AttentionPath { PATH_AUTO, PATH_MATH, PATH_CUDNN, PATH_FUSED };

int attention_path_asked(AttentionPath *path, ErrorMessage *err) {
    const char *asked = getenv("LTC_CUDA_ATTENTION");
    *path = PATH_AUTO;
    if (!asked || !*asked || strcmp(asked, "auto") == 0) return 0;
    if (strcmp(asked, "math") == 0) *path = PATH_MATH;
    else if (strcmp(asked, "cudnn") == 0) *path = PATH_CUDNN;
    else if (strcmp(asked, "fused") == 0) *path = PATH_FUSED;
    else
        return error_set(err, "LTC_CUDA_ATTENTION=%s: expected auto, cudnn, math or fused",
                         asked);
    return 0;
}

// The cuDNN SDPA plans of a 16-bit plan, or NULL (the fallback), counted
// and explained in the backend's state for train.log.
int choose_sdpa(Backend *backend, AttentionPlan *plan, AttentionPath path, ErrorMessage *err) {
    CudaState *state = cuda_state(backend);
    state->attention_plans++;
    if (path == PATH_MATH || path == PATH_FUSED) return 0;
    char reason[200];
    plan->sdpa = cuda_sdpa_create(backend, &plan->shape, reason, sizeof reason);
    const int forward = cuda_sdpa_has(plan->sdpa, 0), backward = cuda_sdpa_has(plan->sdpa, 1);
    state->attention_sdpa_forward += forward;
    state->attention_sdpa_backward += backward;
    if ((!forward || !backward) && !state->attention_fallback_reason[0])
        snprintf(state->attention_fallback_reason, sizeof state->attention_fallback_reason,
                 "batch %d, %d heads, %d tokens, head dim %d: %s", plan->shape.batch,
                 plan->shape.heads, plan->shape.tokens, plan->shape.head_dim, reason);
    if (path == PATH_CUDNN && (!forward || !backward))
        return error_set(err, "LTC_CUDA_ATTENTION=cudnn, but cuDNN's SDPA graphs are not "
                              "there for it: %s", reason);
    return 0;
}

}  // namespace

extern "C" {

AttentionPlan *cuda_attention_plan(Backend *backend, const AttentionShape *shape,
                                   ErrorMessage *err) {
    const CudaState *state = cuda_state(backend);
    AttentionShape s;
    if (attention_shape_make(&s, shape->batch, shape->heads, shape->tokens, shape->head_dim,
                             err)) {
        error_prefix(err, "cuda attention plan");
        return NULL;
    }
    if (s.head_dim > kMaxHeadDim) {
        error_set(err, "cuda attention plan: head dim %d is over %d, the largest the fused "
                       "attention kernels hold", s.head_dim, kMaxHeadDim);
        return NULL;
    }
    CUDA_CHECK(cudaSetDevice(state->device));
    const int max_dim = s.head_dim <= 64 ? 64 : 128;
    if (max_dim == 64 ? allow_shared_memory<64>(state->device, backend->compute_dtype, err)
                      : allow_shared_memory<128>(state->device, backend->compute_dtype, err)) {
        error_prefix(err, "cuda attention plan");
        return NULL;
    }
    AttentionPlan *plan = (AttentionPlan *)calloc(1, sizeof *plan);
    const size_t rows = (size_t)s.batch * s.heads * s.tokens;
    if (!plan || cudaMalloc((void **)&plan->delta, rows * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        free(plan);
        error_set(err, "cuda attention plan: out of memory for %zu KB of row sums (batch %d, %d "
                       "heads, %d tokens)", rows * sizeof(float) >> 10, s.batch, s.heads,
                  s.tokens);
        return NULL;
    }
    plan->shape = s;
    plan->max_dim = max_dim;
    AttentionPath path;
    if (attention_path_asked(&path, err) ||
        ((backend->compute_dtype != COMPUTE_F32 || path == PATH_CUDNN) &&
         choose_sdpa(backend, plan, path, err))) {
        cuda_attention_plan_free(backend, plan);
        error_prefix(err, "cuda attention plan");
        return NULL;
    }
    const int sdpa_both = cuda_sdpa_has(plan->sdpa, 0) && cuda_sdpa_has(plan->sdpa, 1);
    if (backend->compute_dtype != COMPUTE_F32 && path != PATH_FUSED && !sdpa_both) {
        plan->math = cuda_attention_math_create(backend, &s, err);
        if (!plan->math) {
            cuda_attention_plan_free(backend, plan);
            error_prefix(err, "cuda attention plan");
            return NULL;
        }
    }
    return plan;
}

void cuda_attention_plan_free(Backend *backend, AttentionPlan *plan) {
    if (!plan) return;
    cuda_attention_math_free(plan->math);
    cuda_sdpa_free(plan->sdpa);
    if (plan->delta) CUDA_CHECK(cudaFree(plan->delta));
    free(plan);
}

void cuda_attention_forward(Backend *backend, const AttentionPlan *plan, const Act *qkv_act,
                            float scale, Act *out_act, float *lse) {
    if (cuda_sdpa_has(plan->sdpa, 0)) {
        cuda_sdpa_forward(backend, plan->sdpa, qkv_act, scale, out_act, lse);
        return;
    }
    if (plan->math) {
        cuda_attention_math_forward(backend, plan->math, qkv_act, scale, out_act, lse);
        return;
    }
    const cudaStream_t stream = cuda_state(backend)->stream;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        const T *qkv = (const T *)qkv_act;
        T *out = (T *)out_act;
        if (plan->max_dim == 64)
            forward<64>(stream, plan->shape, qkv, scale, out, lse);
        else
            forward<128>(stream, plan->shape, qkv, scale, out, lse);
    });
}

void cuda_attention_backward(Backend *backend, const AttentionPlan *plan, const Act *qkv_act,
                             const Act *out_act, const Act *dout_act, const float *lse, float scale,
                             Act *dqkv_act) {
    if (cuda_sdpa_has(plan->sdpa, 1)) {
        cuda_sdpa_backward(backend, plan->sdpa, qkv_act, out_act, dout_act, lse, scale,
                           dqkv_act);
        return;
    }
    const cudaStream_t stream = cuda_state(backend)->stream;
    const AttentionShape &s = plan->shape;
    const size_t rows = (size_t)s.batch * s.tokens * s.heads;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        const T *qkv = (const T *)qkv_act, *out = (const T *)out_act;
        const T *dout = (const T *)dout_act;
        T *dqkv = (T *)dqkv_act;
        if (cuda_queue_point())
            attention_delta_kernel<T>
                <<<blocks_for(rows), kThreads, 0, stream>>>(s, out, dout, plan->delta);
        CUDA_CHECK_LAUNCH();
        if (plan->math)
            cuda_attention_math_backward(backend, plan->math, qkv_act, dout_act, lse, plan->delta,
                                         scale, dqkv_act);
        else if (plan->max_dim == 64)
            backward<64>(stream, s, qkv, dout, lse, plan->delta, scale, dqkv);
        else
            backward<128>(stream, s, qkv, dout, lse, plan->delta, scale, dqkv);
    });
}

}  // extern "C"
