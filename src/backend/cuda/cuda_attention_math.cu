// The attention forward of the 16-bit dtypes on tensor cores, through
// cuBLAS ("math" attention, as PyTorch's SDPA fallback computes it), for a
// chunk of images at a time:
//   S (b, h) = scale q k^T    one batched GEMM over every (b, h) of the
//                             chunk: 16-bit q and k, fp32 accumulation, S fp32
//   P = softmax(S), lse       one warp per row: P rounded to the dtype, lse
//                             = max + log(sum) (what the backward reads)
//   out (b, h) = P v          a second batched GEMM, out rounded once
// The fused kernel (cuda_attention.cu) keeps the probabilities in fp32 and
// runs on CUDA cores; here P is rounded to 16 bits before P v (as
// FlashAttention's kernels do) and both products run on tensor cores.
// The chunk's S and P take (4 + 2) H T^2 bytes per image: chunks are sized
// to at most kScoreBudget bytes. The backward stays the fused kernel's (it
// recomputes the probabilities from lse). cuda_attention.cu picks this
// path for fp16 and bf16 unless LTC_CUDA_ATTENTION=fused.
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"

namespace {

constexpr size_t kScoreBudget = (size_t)256 << 20;
constexpr int kWarp = 32;

// The six pointer arrays of the two batched GEMMs for images first ..
// first + count - 1, entry i = (b - first) * H + h (cuBLAS's column-major
// view, see cuda_attention_math_forward):
//   scores:  A = k of (b, h), B = q of (b, h), C = S rows of i
//   values:  A = v of (b, h), B = P rows of i, C = out of (b, h)
template <typename T>
__global__ void attention_pointers_kernel(AttentionShape s, int first, int count, const T *qkv,
                                          float *scores, T *probs, T *out, const void **pointers) {
    const int entries = count * s.heads;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= entries) return;
    const int b = first + i / s.heads, h = i % s.heads;
    const size_t row = (size_t)3 * s.heads * s.head_dim;  // one token's q, k, v
    const T *image = qkv + (size_t)b * s.tokens * row;
    const size_t square = (size_t)s.tokens * s.tokens;
    pointers[0 * entries + i] = image + (size_t)(1 * s.heads + h) * s.head_dim;  // k
    pointers[1 * entries + i] = image + (size_t)h * s.head_dim;                  // q
    pointers[2 * entries + i] = scores + i * square;
    pointers[3 * entries + i] = image + (size_t)(2 * s.heads + h) * s.head_dim;  // v
    pointers[4 * entries + i] = probs + i * square;
    pointers[5 * entries + i] =
        out + (size_t)b * s.tokens * s.heads * s.head_dim + (size_t)h * s.head_dim;
}

// One warp per row of S (rows of tokens scores each): P = exp(S - max) /
// sum rounded to T, lse[row] = max + log(sum).
template <typename T>
__global__ void attention_softmax_kernel(int rows, int tokens, const float *scores, T *probs,
                                         float *lse) {
    const int row = blockIdx.x * (blockDim.x / kWarp) + threadIdx.x / kWarp;
    const int lane = threadIdx.x % kWarp;
    if (row >= rows) return;
    const float *s = scores + (size_t)row * tokens;
    float top = -INFINITY;
    for (int j = lane; j < tokens; j += kWarp) top = fmaxf(top, s[j]);
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        top = fmaxf(top, __shfl_xor_sync(0xffffffffu, top, offset));
    float sum = 0.0f;
    for (int j = lane; j < tokens; j += kWarp) sum += expf(s[j] - top);
    for (int offset = kWarp / 2; offset > 0; offset /= 2)
        sum += __shfl_xor_sync(0xffffffffu, sum, offset);
    const float inverse = 1.0f / sum;
    T *p = probs + (size_t)row * tokens;
    for (int j = lane; j < tokens; j += kWarp) p[j] = act_store<T>(expf(s[j] - top) * inverse);
    if (lane == 0) lse[row] = top + logf(sum);
}

}  // namespace

struct AttentionMath {
    AttentionShape shape;
    int chunk;          // images per pass
    float *scores;      // device (chunk, H, T, T) fp32
    void *probs;        // device (chunk, H, T, T) in the 16-bit dtype
    const void **pointers;  // device: 6 arrays of chunk * H pointers
};

extern "C" {

AttentionMath *cuda_attention_math_create(Backend *backend, const AttentionShape *shape,
                                          ErrorMessage *err) {
    const AttentionShape s = *shape;
    const size_t square = (size_t)s.tokens * s.tokens;
    const size_t per_image = (size_t)s.heads * square * (sizeof(float) + 2);
    size_t chunk = kScoreBudget / per_image;
    if (chunk < 1) chunk = 1;
    if (chunk > (size_t)s.batch) chunk = (size_t)s.batch;
    AttentionMath *math = (AttentionMath *)calloc(1, sizeof *math);
    if (!math) {
        error_set(err, "cuda attention: out of memory for a plan");
        return NULL;
    }
    math->shape = s;
    math->chunk = (int)chunk;
    const size_t entries = chunk * s.heads;
    CUDA_CHECK(cudaSetDevice(cuda_state(backend)->device));
    if (cudaMalloc((void **)&math->scores, entries * square * sizeof(float)) != cudaSuccess ||
        cudaMalloc(&math->probs, entries * square * 2) != cudaSuccess ||
        cudaMalloc((void **)&math->pointers, 6 * entries * sizeof(void *)) != cudaSuccess) {
        (void)cudaGetLastError();
        error_set(err, "cuda attention: out of GPU memory for %zu MB of scores (%zu images of "
                       "%d heads x %d tokens at a time)",
                  (entries * square * 6) >> 20, chunk, s.heads, s.tokens);
        cuda_attention_math_free(math);
        return NULL;
    }
    return math;
}

void cuda_attention_math_free(AttentionMath *math) {
    if (!math) return;
    if (math->scores) CUDA_CHECK(cudaFree(math->scores));
    if (math->probs) CUDA_CHECK(cudaFree(math->probs));
    if (math->pointers) CUDA_CHECK(cudaFree((void *)math->pointers));
    free(math);
}

// In cuBLAS's column-major view a row-major (rows, cols) matrix with row
// stride ld is a (cols, rows) matrix with leading dimension ld:
//   S^T (keys, queries) = K (keys, Dh) Q^T:  m = n = T, k = Dh, A = k^T
//     (Dh, T; ld 3 H Dh) transposed, B = q^T (Dh, T) as it is, C ld T,
//     alpha = scale;
//   out^T (Dh, queries) = V^T (Dh, keys) P^T (keys, queries): m = Dh,
//     n = k = T, A = v^T (ld 3 H Dh), B = P^T (ld T), C ld H Dh.
void cuda_attention_math_forward(Backend *backend, AttentionMath *math, const Act *qkv_act,
                                 float scale, Act *out_act, float *lse) {
    const cudaStream_t stream = cuda_state(backend)->stream;
    const AttentionShape &s = math->shape;
    const int token_stride = 3 * s.heads * s.head_dim;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        for (int first = 0; first < s.batch; first += math->chunk) {
            const int count = s.batch - first < math->chunk ? s.batch - first : math->chunk;
            const int entries = count * s.heads;
            attention_pointers_kernel<T><<<blocks_for((size_t)entries), kThreads, 0, stream>>>(
                s, first, count, (const T *)qkv_act, math->scores, (T *)math->probs, (T *)out_act,
                math->pointers);
            CUDA_CHECK_LAUNCH();
            const void *const *p = math->pointers;
            cuda_gemm_batched_16bit(backend, 1, 0, s.tokens, s.tokens, s.head_dim, scale, p,
                                    token_stride, p + entries, token_stride,
                                    (void *const *)(p + 2 * entries), 1, s.tokens, entries);
            const int rows = entries * s.tokens;
            const int warps_per_block = kThreads / kWarp;
            attention_softmax_kernel<T>
                <<<(rows + warps_per_block - 1) / warps_per_block, kThreads, 0, stream>>>(
                    rows, s.tokens, math->scores, (T *)math->probs,
                    lse + (size_t)first * s.heads * s.tokens);
            CUDA_CHECK_LAUNCH();
            cuda_gemm_batched_16bit(backend, 0, 0, s.head_dim, s.tokens, s.tokens, 1.0f,
                                    p + 3 * entries, token_stride, p + 4 * entries, s.tokens,
                                    (void *const *)(p + 5 * entries), 0, s.heads * s.head_dim,
                                    entries);
        }
    });
}

}  // extern "C"
