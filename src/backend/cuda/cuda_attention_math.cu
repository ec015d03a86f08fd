// Attention of the 16-bit dtypes on tensor cores, through cuBLAS ("math"
// attention, as PyTorch's SDPA fallback computes it), a chunk of images at
// a time, every (image, head) of the chunk in one batched GEMM per product.
// Forward:
//   S = scale q k^T        16-bit q and k, fp32 accumulation, S fp32
//   P = softmax(S), lse    one warp per row: P rounded to the dtype, lse =
//                          max + log(sum) (what the backward reads)
//   out = P v              out rounded once
// Backward (given lse and delta_i = dout_i . out_i):
//   S again, P = exp(S - lse) rounded to the dtype
//   dv = P^T dout, dP = dout v^T (fp32, over S)
//   dS = P (dP - delta) rounded to the dtype (over P)
//   dq = scale dS k, dk = scale dS^T q
// The fused kernels (cuda_attention.cu) keep the probabilities in fp32 and
// run on CUDA cores; here P and dS are rounded to 16 bits before their
// products (as FlashAttention's kernels round P), and every product runs on
// tensor cores. The chunk's S and P take (4 + 2) H T^2 bytes per image of
// the backend's workspace (shared with the convolutions): chunks are sized
// to at most kScoreBudget bytes. cuda_attention.cu takes
// this path for fp16 and bf16 unless LTC_CUDA_ATTENTION=fused.
#include <math.h>
#include <stdlib.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"

namespace {

constexpr size_t kScoreBudget = (size_t)256 << 20;
constexpr int kWarp = 32;

// The pointer arrays of the batched GEMMs, entry i = (b - first) * H + h
// of images first .. first + count - 1 (in that order in each array).
enum {
    PTR_Q, PTR_K, PTR_V,  // of (b, h) in qkv (B, T, 3, H, Dh)
    PTR_SCORES,           // S rows of entry i (fp32, T x T)
    PTR_PROBS,            // P rows of entry i (16-bit, T x T)
    PTR_ROWS,             // (b, h) in a (B, T, H, Dh) tensor: out, or dout
    PTR_DQ, PTR_DK, PTR_DV,  // of (b, h) in dqkv (backward)
    PTR_ARRAYS
};

template <typename T>
__global__ void attention_pointers_kernel(AttentionShape s, int first, int count, const T *qkv,
                                          float *scores, T *probs, const T *rows, T *dqkv,
                                          const void **pointers) {
    const int entries = count * s.heads;
    const int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= entries) return;
    const int b = first + i / s.heads, h = i % s.heads;
    const size_t token = (size_t)3 * s.heads * s.head_dim;  // one token's q, k, v
    const size_t image = (size_t)b * s.tokens * token;
    const size_t square = (size_t)s.tokens * s.tokens;
    for (int part = 0; part < 3; part++) {
        const size_t at = image + (size_t)(part * s.heads + h) * s.head_dim;
        pointers[(PTR_Q + part) * entries + i] = qkv + at;
        if (dqkv) pointers[(PTR_DQ + part) * entries + i] = dqkv + at;
    }
    pointers[PTR_SCORES * entries + i] = scores + i * square;
    pointers[PTR_PROBS * entries + i] = probs + i * square;
    pointers[PTR_ROWS * entries + i] =
        rows + (size_t)b * s.tokens * s.heads * s.head_dim + (size_t)h * s.head_dim;
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

// P = exp(S - lse of the row), rounded to T (the forward's probabilities).
template <typename T>
__global__ void attention_probs_kernel(size_t rows, int tokens, const float *scores,
                                       const float *lse, T *probs) {
    GRID_STRIDE(i, rows * tokens) probs[i] = act_store<T>(expf(scores[i] - lse[i / tokens]));
}

// dS = P (dP - delta of the row), rounded to T, over P.
template <typename T>
__global__ void attention_dscores_kernel(size_t rows, int tokens, const float *dprobs,
                                         const float *delta, T *probs) {
    GRID_STRIDE(i, rows * tokens) {
        probs[i] = act_store<T>(act_load(probs[i]) * (dprobs[i] - delta[i / tokens]));
    }
}

}  // namespace

// The chunk's regions in the backend's workspace (cuda_reserve_workspace):
// S (chunk, H, T, T) fp32 at 0, P in the 16-bit dtype, the pointer arrays.
struct AttentionMath {
    AttentionShape shape;
    int chunk;  // images per pass
    size_t probs_offset, pointers_offset;
};

static size_t align_256(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The workspace regions as pointers (the workspace may have moved since the
// plan was made: it grows when a later plan needs more).
typedef struct MathRegions {
    float *scores;
    void *probs;
    const void **pointers;
} MathRegions;

static MathRegions math_regions(const Backend *backend, const AttentionMath *math) {
    char *base = (char *)cuda_state(backend)->workspace;
    return {(float *)base, base + math->probs_offset,
            (const void **)(base + math->pointers_offset)};
}

extern "C" {

AttentionMath *cuda_attention_math_create(Backend *backend, const AttentionShape *shape,
                                          ErrorMessage *err) {
    const AttentionShape s = *shape;
    const size_t square = (size_t)s.tokens * s.tokens;
    const size_t per_image = (size_t)s.heads * square * (sizeof(float) + 2);
    size_t chunk = kScoreBudget / per_image;
    // LTC_TEST_ATTENTION_CHUNK=N (tests only): N images per pass, so that
    // small test shapes go through several chunks too.
    const char *test_chunk = getenv("LTC_TEST_ATTENTION_CHUNK");
    if (test_chunk && atoi(test_chunk) > 0) chunk = (size_t)atoi(test_chunk);
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
    math->probs_offset = align_256(entries * square * sizeof(float));
    math->pointers_offset = align_256(math->probs_offset + entries * square * 2);
    const size_t bytes = math->pointers_offset + PTR_ARRAYS * entries * sizeof(void *);
    if (cuda_reserve_workspace(cuda_state(backend), bytes, err)) {
        error_prefix(err, "cuda attention: %zu images of %d heads x %d tokens at a time", chunk,
                     s.heads, s.tokens);
        free(math);
        return NULL;
    }
    return math;
}

void cuda_attention_math_free(AttentionMath *math) { free(math); }

}  // extern "C"

// In cuBLAS's column-major view a row-major (rows, cols) matrix with row
// stride ld is a (cols, rows) matrix with leading dimension ld: q, k, v are
// (Dh, T) with ld 3 H Dh, out and dout (Dh, T) with ld H Dh, and S, dP, P
// and dS are stored transposed: (keys, queries) with ld T.

namespace {

// The chunk's pointer arrays (rows: out in the forward, dout in the
// backward; dqkv NULL in the forward).
template <typename T>
void set_pointers(cudaStream_t stream, const MathRegions &r, const AttentionMath *math, int first,
                  int count, const void *qkv, const void *rows, void *dqkv) {
    if (cuda_queue_point())
        attention_pointers_kernel<T>
            <<<blocks_for((size_t)count * math->shape.heads), kThreads, 0, stream>>>(
                math->shape, first, count, (const T *)qkv, r.scores, (T *)r.probs, (const T *)rows,
                (T *)dqkv, r.pointers);
    CUDA_CHECK_LAUNCH();
}

// One batched product of the chunk: C = alpha op(A) op(B) over arrays a, b, c.
void product(Backend *backend, const MathRegions &r, int entries, int transpose_a,
             int transpose_b, int m, int n, int k, float alpha, int a, int lda, int b, int ldb,
             int c, int c_fp32, int ldc) {
    const void *const *p = r.pointers;
    cuda_gemm_batched_16bit(backend, transpose_a, transpose_b, m, n, k, alpha, p + a * entries,
                            lda, p + b * entries, ldb, (void *const *)(p + c * entries), c_fp32,
                            ldc, entries);
}

// S^T (keys, queries) = scale k q^T, over the scores.
void scores_product(Backend *backend, const MathRegions &r, const AttentionShape &s, int entries,
                    float scale) {
    const int ld = 3 * s.heads * s.head_dim;
    product(backend, r, entries, 1, 0, s.tokens, s.tokens, s.head_dim, scale, PTR_K, ld, PTR_Q,
            ld, PTR_SCORES, 1, s.tokens);
}

// fn(first, count, entries) for each chunk of images in turn.
template <typename Fn>
void for_each_chunk(const AttentionMath *math, Fn &&fn) {
    const AttentionShape &s = math->shape;
    for (int first = 0; first < s.batch; first += math->chunk) {
        const int count = s.batch - first < math->chunk ? s.batch - first : math->chunk;
        fn(first, count, count * s.heads);
    }
}

}  // namespace

extern "C" {

void cuda_attention_math_forward(Backend *backend, AttentionMath *math, const Act *qkv,
                                 float scale, Act *out, float *lse) {
    const cudaStream_t stream = cuda_state(backend)->stream;
    const AttentionShape &s = math->shape;
    const int ld = 3 * s.heads * s.head_dim;
    const MathRegions r = math_regions(backend, math);
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        for_each_chunk(math, [&](int first, int count, int entries) {
            set_pointers<T>(stream, r, math, first, count, qkv, out, NULL);
            scores_product(backend, r, s, entries, scale);
            const int rows = entries * s.tokens;
            const int warps_per_block = kThreads / kWarp;
            if (cuda_queue_point())
                attention_softmax_kernel<T>
                    <<<(rows + warps_per_block - 1) / warps_per_block, kThreads, 0, stream>>>(
                        rows, s.tokens, r.scores, (T *)r.probs,
                        lse + (size_t)first * s.heads * s.tokens);
            CUDA_CHECK_LAUNCH();
            // out^T (Dh, queries) = v^T (Dh, keys) P^T (keys, queries)
            product(backend, r, entries, 0, 0, s.head_dim, s.tokens, s.tokens, 1.0f, PTR_V, ld,
                    PTR_PROBS, s.tokens, PTR_ROWS, 0, s.heads * s.head_dim);
        });
    });
}

void cuda_attention_math_backward(Backend *backend, AttentionMath *math, const Act *qkv,
                                  const Act *dout, const float *lse, const float *delta,
                                  float scale, Act *dqkv) {
    const cudaStream_t stream = cuda_state(backend)->stream;
    const AttentionShape &s = math->shape;
    const int ld = 3 * s.heads * s.head_dim, ld_rows = s.heads * s.head_dim;
    const MathRegions r = math_regions(backend, math);
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        for_each_chunk(math, [&](int first, int count, int entries) {
            const size_t rows = (size_t)entries * s.tokens;
            const size_t offset = (size_t)first * s.heads * s.tokens;
            set_pointers<T>(stream, r, math, first, count, qkv, dout, dqkv);
            scores_product(backend, r, s, entries, scale);
            if (cuda_queue_point())
                attention_probs_kernel<T><<<blocks_for(rows * s.tokens), kThreads, 0, stream>>>(
                    rows, s.tokens, r.scores, lse + offset, (T *)r.probs);
            CUDA_CHECK_LAUNCH();
            // dv^T (Dh, keys) = dout^T (Dh, queries) P (queries, keys)
            product(backend, r, entries, 0, 1, s.head_dim, s.tokens, s.tokens, 1.0f, PTR_ROWS,
                    ld_rows, PTR_PROBS, s.tokens, PTR_DV, 0, ld);
            // dP^T (keys, queries) = v (keys, Dh) dout^T (Dh, queries), over the scores
            product(backend, r, entries, 1, 0, s.tokens, s.tokens, s.head_dim, 1.0f, PTR_V, ld,
                    PTR_ROWS, ld_rows, PTR_SCORES, 1, s.tokens);
            if (cuda_queue_point())
                attention_dscores_kernel<T><<<blocks_for(rows * s.tokens), kThreads, 0, stream>>>(
                    rows, s.tokens, r.scores, delta + offset, (T *)r.probs);
            CUDA_CHECK_LAUNCH();
            // dq^T (Dh, queries) = scale k^T (Dh, keys) dS^T (keys, queries)
            product(backend, r, entries, 0, 0, s.head_dim, s.tokens, s.tokens, scale, PTR_K, ld,
                    PTR_PROBS, s.tokens, PTR_DQ, 0, ld);
            // dk^T (Dh, keys) = scale q^T (Dh, queries) dS (queries, keys)
            product(backend, r, entries, 0, 1, s.head_dim, s.tokens, s.tokens, scale, PTR_Q, ld,
                    PTR_PROBS, s.tokens, PTR_DK, 0, ld);
        });
    });
}

}  // extern "C"
