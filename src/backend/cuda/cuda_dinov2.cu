// The cuda backend's DINOv2 ops (backend.h): row scaling, row gather and
// scatter for the masked patch tokens, the Sinkhorn-Knopp steps and
// KoLeo's nearest-neighbour distances, and DINOv31's PaKA loss (cka_loss),
// with their Backend entry points (the op table in cuda_backend.c points
// here). Deterministic: every sum runs in a fixed order (one thread per
// column, or one block per row or image with block_sum), the scatter
// writes distinct rows, no atomics. Written and compiled without a GPU at
// hand: not yet run on one (make test-gpu). The ops on activations (mask
// tokens, gather, scatter) are templates on the storage type of the
// compute dtype (cuda_act.cuh).
#include <math.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_reduce.cuh"

namespace {

__global__ void scale_rows_kernel(size_t n, int channels, const float *x, const float *scale,
                                  float *y) {
    GRID_STRIDE(i, n) y[i] = x[i] * scale[i / channels];
}

template <typename T>
__global__ void gather_rows_kernel(size_t n, int channels, const int32_t *index, const T *x,
                                   T *y) {
    GRID_STRIDE(i, n) y[i] = x[(size_t)index[i / channels] * channels + i % channels];
}

// Distinct indices: each element of dx has at most one writer.
template <typename T>
__global__ void scatter_add_rows_kernel(size_t n, int channels, const int32_t *index,
                                        const T *dy, T *dx) {
    GRID_STRIDE(i, n) {
        T *target = dx + (size_t)index[i / channels] * channels + i % channels;
        *target = act_store<T>(act_load(*target) + act_load(dy[i]));
    }
}

// One thread per column, the rows in order (a warp reads one row's
// neighbouring columns: coalesced).
__global__ void column_max_kernel(size_t rows, int channels, const float *x, float *max) {
    const int k = blockIdx.x * blockDim.x + threadIdx.x;
    if (k >= channels) return;
    float m = -INFINITY;
    for (size_t r = 0; r < rows; r++) m = nan_max(m, x[r * channels + k]);
    max[k] = m;
}

// scale = 1 / the teacher temperature, per step: in device memory.
__global__ void sinkhorn_exp_kernel(size_t n, int channels, const float *x, const float *scale_at,
                                    const float *max, float *q) {
    const float scale = *scale_at;
    GRID_STRIDE(i, n) q[i] = (float)exp((double)scale * x[i] - (double)scale * max[i % channels]);
}

// One block per row: the column division, the row sum (block_sum, fixed
// order), the row division.
__global__ void sinkhorn_normalize_kernel(int channels, const float *column_sum, float *q) {
    float *row = q + (size_t)blockIdx.x * channels;
    double sum = 0.0;
    for (int k = threadIdx.x; k < channels; k += blockDim.x) {
        const float v = column_sum[k] > 0.0f ? (float)((double)row[k] / column_sum[k]) : 0.0f;
        row[k] = v;
        sum += v;
    }
    sum = block_sum(sum);
    for (int k = threadIdx.x; k < channels; k += blockDim.x)
        row[k] = sum > 0.0 ? (float)(row[k] / sum) : 0.0f;
}

// One block per row i: the dots with every other row in row order, the
// first maximum kept (by thread 0, then shared), then the distance.
__global__ void koleo_forward_kernel(int rows, int dim, const float *y, float eps,
                                     int32_t *neighbor, float *distance, float *log_distance) {
    __shared__ int best_shared;
    const int i = blockIdx.x;
    const float *yi = y + (size_t)i * dim;
    int best = i;
    double best_dot = -INFINITY;
    for (int j = 0; j < rows; j++) {
        if (j == i) continue;
        const float *yj = y + (size_t)j * dim;
        double dot = 0.0;
        for (int d = threadIdx.x; d < dim; d += blockDim.x) dot += (double)yi[d] * yj[d];
        dot = block_sum(dot);
        if (dot > best_dot) best_dot = dot, best = j;
    }
    if (threadIdx.x == 0) best_shared = best;
    __syncthreads();
    const float *yn = y + (size_t)best_shared * dim;
    double squares = 0.0;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        const double diff = (double)yi[d] - yn[d] + eps;
        squares += diff * diff;
    }
    const double length = sqrt(block_sum(squares));
    if (threadIdx.x == 0) {
        neighbor[i] = best_shared;
        distance[i] = (float)length;
        log_distance[i] = (float)log(length + eps);
    }
}

// One block per row k: its own term and those of the rows whose neighbour
// it is, in row order.
__global__ void koleo_backward_kernel(int rows, int dim, const float *y, const int32_t *neighbor,
                                      const float *distance, float eps, float dlog, float *dy) {
    const int k = blockIdx.x;
    float *dk = dy + (size_t)k * dim;
    for (int d = threadIdx.x; d < dim; d += blockDim.x) {
        float total = 0.0f;
        for (int i = 0; i < rows; i++) {
            const int own = i == k, theirs = neighbor[i] == k;
            const double length = distance[i];
            if ((!own && !theirs) || length == 0.0) continue;
            const float g = (float)((own - theirs) * (double)dlog / ((length + eps) * length));
            total += g * (y[(size_t)i * dim + d] - y[(size_t)neighbor[i] * dim + d] + eps);
        }
        dk[d] = total;
    }
}

// y = token on the masked rows, x elsewhere; one thread per element.
template <typename T>
__global__ void mask_tokens_forward_kernel(size_t n, int channels, const T *x, const float *mask,
                                           const float *token, T *y) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    const size_t row = i / channels;
    y[i] = mask[row] != 0.0f ? act_store<T>(token[i % channels]) : x[i];
}

// dtoken[c] += the sum over the masked rows of dy[., c], rows in order (one
// thread per column: deterministic, no atomics).
template <typename T>
__global__ void mask_tokens_token_grad_kernel(size_t rows, int channels, const float *mask,
                                              const T *dy, float *dtoken) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= channels) return;
    double total = 0.0;
    for (size_t r = 0; r < rows; r++)
        if (mask[r] != 0.0f) total += act_load(dy[r * channels + c]);
    dtoken[c] += (float)total;
}

// dx = dy with the masked rows 0 (dx may alias dy).
template <typename T>
__global__ void mask_tokens_backward_kernel(size_t n, int channels, const float *mask,
                                            const T *dy, T *dx) {
    const size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x;
    if (i >= n) return;
    dx[i] = mask[i / channels] != 0.0f ? act_store<T>(0.0f) : dy[i];
}

// ---- PaKA: centred kernel alignment ---------------------------------------------------
// One block per image (kTile x kTile threads). Its kernels K_s and K_t
// (tokens, tokens) go to the backend's reduction scratch (CUDA_SCRATCH_DOUBLES,
// 68 MB), a chunk of images at a time: about 3500 images of 49 tokens, 8
// of 1024. Each image's loss term goes to the scratch too; one block adds a
// chunk's terms in a fixed order (cka_sum_kernel) to the running total in
// the scratch's first double. The launches depend on the shape only (CUDA
// graphs), never on the weights.

constexpr int kTile = 16;
static_assert(kTile * kTile == kThreads, "one thread per entry of a kernel tile");

// K_s and K_t (tokens, tokens) of rows zs, zt (tokens, dim): tiles of
// kTile x kTile entries on and above the diagonal, each entry an fp32 dot
// product in d order written to (j, k) and (k, j), so both are exactly
// symmetric and their row means are their column means.
__device__ void cka_kernel_tiles(int tokens, int dim, const float *zs, const float *zt, float *ks,
                                 float *kt) {
    // rows j of z_s, rows k of z_s, rows j of z_t, rows k of z_t; kTile + 1
    // columns so that reading a column touches every bank once
    __shared__ float tiles[4][kTile][kTile + 1];
    const int ty = threadIdx.x / kTile, tx = threadIdx.x % kTile;
    const int count = (tokens + kTile - 1) / kTile;
    for (int tj = 0; tj < count; tj++)
        for (int tk = tj; tk < count; tk++) {
            const int row_j = tj * kTile + ty, row_k = tk * kTile + ty;
            float dot_s = 0.0f, dot_t = 0.0f;
            for (int d0 = 0; d0 < dim; d0 += kTile) {
                const int d = d0 + tx;
                const bool in_j = row_j < tokens && d < dim, in_k = row_k < tokens && d < dim;
                tiles[0][ty][tx] = in_j ? zs[(size_t)row_j * dim + d] : 0.0f;
                tiles[1][ty][tx] = in_k ? zs[(size_t)row_k * dim + d] : 0.0f;
                tiles[2][ty][tx] = in_j ? zt[(size_t)row_j * dim + d] : 0.0f;
                tiles[3][ty][tx] = in_k ? zt[(size_t)row_k * dim + d] : 0.0f;
                __syncthreads();
                for (int q = 0; q < kTile; q++) {
                    dot_s += tiles[0][ty][q] * tiles[1][tx][q];
                    dot_t += tiles[2][ty][q] * tiles[3][tx][q];
                }
                __syncthreads();
            }
            const int j = row_j, k = tk * kTile + tx;  // the entry (j, k) this thread summed
            if (j < tokens && k < tokens) {
                ks[(size_t)j * tokens + k] = ks[(size_t)k * tokens + j] = dot_s;
                kt[(size_t)j * tokens + k] = kt[(size_t)k * tokens + j] = dot_t;
            }
        }
}

// (H M H)_jk of a symmetric M (K, or G) from M_jk, M's row means and total
// mean, in lightly's fp32 order: less the row mean, less the column mean,
// plus the total mean.
__device__ __forceinline__ float cka_centred(float value, const float *mean, float total, int j,
                                             int k) {
    return value - mean[j] - mean[k] + total;
}

// Image first + blockIdx.x: its term image_weight (1 - cka) into
// terms[blockIdx.x], its gradient into dstudent; kernels: the chunk's K
// matrices, 2 tokens^2 floats an image. The passes after the kernels: a
// thread per row of K (row means; then the HSIC sums and the row sums of A
// and B), a thread per element of the gradient.
__global__ void cka_image_kernel(int first, int tokens, int dim, const float *student,
                                 const float *teacher, const float *image_weight, float *kernels,
                                 double *terms, float *dstudent) {
    // the row means of K_s and K_t, the row sums of A (then G's row means)
    // and of B
    __shared__ float rows[4][CKA_MAX_TOKENS];
    float *mean_s = rows[0], *mean_t = rows[1], *row_a = rows[2], *row_b = rows[3];
    const size_t image_size = (size_t)tokens * dim, square = (size_t)tokens * tokens;
    const size_t offset = (size_t)(first + blockIdx.x) * image_size;
    const float weight = image_weight[first + blockIdx.x];
    float *out = dstudent + offset;
    if (weight == 0.0f) {  // padding: rows not read (the whole block returns)
        for (size_t e = threadIdx.x; e < image_size; e += blockDim.x) out[e] = 0.0f;
        if (threadIdx.x == 0) terms[blockIdx.x] = 0.0;
        return;
    }
    const float *zs = student + offset, *zt = teacher + offset;
    float *ks = kernels + blockIdx.x * 2 * square, *kt = ks + square;
    cka_kernel_tiles(tokens, dim, zs, zt, ks, kt);
    __syncthreads();
    double total_s = 0.0, total_t = 0.0;
    for (int j = threadIdx.x; j < tokens; j += blockDim.x) {
        double sum_s = 0.0, sum_t = 0.0;
        for (int k = 0; k < tokens; k++) {
            sum_s += ks[(size_t)j * tokens + k];
            sum_t += kt[(size_t)j * tokens + k];
        }
        mean_s[j] = (float)(sum_s / tokens);
        mean_t[j] = (float)(sum_t / tokens);
        total_s += sum_s, total_t += sum_t;
    }
    // block_sum synchronises: what threads wrote to shared memory before it
    // is there for every thread after it
    const double count = (double)tokens * tokens;
    const float grand_s = (float)(block_sum(total_s) / count);
    const float grand_t = (float)(block_sum(total_t) / count);
    double st = 0.0, ss = 0.0, tt = 0.0;
    for (int j = threadIdx.x; j < tokens; j += blockDim.x) {
        double sum_a = 0.0, sum_b = 0.0;
        for (int k = 0; k < tokens; k++) {
            const double a = cka_centred(ks[(size_t)j * tokens + k], mean_s, grand_s, j, k);
            const double b = cka_centred(kt[(size_t)j * tokens + k], mean_t, grand_t, j, k);
            st += a * b, ss += a * a, tt += b * b;
            sum_a += a, sum_b += b;
        }
        row_a[j] = (float)sum_a, row_b[j] = (float)sum_b;
    }
    st = block_sum(st), ss = block_sum(ss), tt = block_sum(tt);
    const double na = sqrt(fmax(ss, CKA_EPS)), nb = sqrt(fmax(tt, CKA_EPS));
    if (threadIdx.x == 0) terms[blockIdx.x] = (double)weight * (1.0 - st / (na * nb));
    // dstudent = -2 weight G' Z_s, G' = H G H with G = c_b B - c_a A
    // (backend.h): re-centring G, as PyTorch's backward through the
    // centring does, takes out what is left of A's and B's row sums, which
    // Z_s's common mean would otherwise carry into every row
    const float c_b = (float)(1.0 / (na * nb));
    const float c_a = ss >= CKA_EPS ? (float)(st / (na * na * na * nb)) : 0.0f;
    const float scale = -2.0f * weight;
    float *g_mean = row_a;  // each thread rewrites its own rows
    double g_sum = 0.0;
    for (int j = threadIdx.x; j < tokens; j += blockDim.x) {
        g_mean[j] = (float)(((double)c_b * row_b[j] - (double)c_a * row_a[j]) / tokens);
        g_sum += g_mean[j];
    }
    const float g_total = (float)(block_sum(g_sum) / tokens);
    for (size_t e = threadIdx.x; e < image_size; e += blockDim.x) {
        const int j = (int)(e / dim), d = (int)(e % dim);
        const float *ks_row = ks + (size_t)j * tokens, *kt_row = kt + (size_t)j * tokens;
        float sum = 0.0f;
        for (int k = 0; k < tokens; k++) {
            const float g = c_b * cka_centred(kt_row[k], mean_t, grand_t, j, k) -
                            c_a * cka_centred(ks_row[k], mean_s, grand_s, j, k);
            sum += cka_centred(g, g_mean, g_total, j, k) * zs[(size_t)k * dim + d];
        }
        out[e] = sum * scale;
    }
}

// loss[0] = *running = (first chunk ? 0 : *running) + the sum of terms
// (count), one block in a fixed order.
__global__ void cka_sum_kernel(int count, const double *terms, int first_chunk, double *running,
                               float *loss) {
    double part = 0.0;
    for (int k = threadIdx.x; k < count; k += blockDim.x) part += terms[k];
    part = block_sum(part);
    if (threadIdx.x == 0) {
        const double value = (first_chunk ? 0.0 : *running) + part;
        *running = value;
        *loss = (float)value;
    }
}

cudaStream_t stream_of(Backend *backend) { return cuda_state(backend)->stream; }

}  // namespace

extern "C" {

void cuda_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x,
                              const float *mask, const float *token, Act *y) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            mask_tokens_forward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(
                n, channels, (const ACT_T *)x, mask, token, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                               const Act *dy, Act *dx, float *dtoken) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    cudaStream_t stream = stream_of(backend);
    const unsigned int column_blocks = (unsigned int)((channels + kThreads - 1) / kThreads);
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            mask_tokens_token_grad_kernel<ACT_T><<<column_blocks, kThreads, 0, stream>>>(
                rows, channels, mask, (const ACT_T *)dy, dtoken);
        CUDA_CHECK_LAUNCH();
        if (cuda_queue_point())
            mask_tokens_backward_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream>>>(
                n, channels, mask, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                     const float *scale, float *y) {
    const size_t n = rows * (size_t)channels;
    if (n == 0) return;
    if (cuda_queue_point())
        scale_rows_kernel<<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(n, channels, x, scale,
                                                                              y);
    CUDA_CHECK_LAUNCH();
}

void cuda_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                      const Act *x, Act *y) {
    const size_t n = (size_t)count * channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            gather_rows_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(
                n, channels, index, (const ACT_T *)x, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                           const Act *dy, Act *dx) {
    const size_t n = (size_t)count * channels;
    if (n == 0) return;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        if (cuda_queue_point())
            scatter_add_rows_kernel<ACT_T><<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(
                n, channels, index, (const ACT_T *)dy, (ACT_T *)dx);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max) {
    if (channels == 0) return;
    if (cuda_queue_point())
        column_max_kernel<<<(unsigned int)((channels + kThreads - 1) / kThreads), kThreads, 0,
                            stream_of(backend)>>>(rows, channels, x, max);
    CUDA_CHECK_LAUNCH();
}

void cuda_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                       const float *max, float *q) {
    const size_t n = (size_t)rows * channels;
    if (n == 0) return;
    const float *scale_at = cuda_step_params_put(cuda_state(backend), &scale, 1);
    if (cuda_queue_point())
        sinkhorn_exp_kernel<<<blocks_for(n), kThreads, 0, stream_of(backend)>>>(n, channels, x,
                                                                                scale_at, max, q);
    CUDA_CHECK_LAUNCH();
}

void cuda_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                             float *q) {
    if (rows == 0 || channels == 0) return;
    if (cuda_queue_point())
        sinkhorn_normalize_kernel<<<rows, kThreads, 0, stream_of(backend)>>>(channels, column_sum,
                                                                             q);
    CUDA_CHECK_LAUNCH();
}

void cuda_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                        int32_t *neighbor, float *distance, float *log_distance) {
    if (rows == 0) return;
    if (cuda_queue_point())
        koleo_forward_kernel<<<rows, kThreads, 0, stream_of(backend)>>>(rows, dim, y, eps, neighbor,
                                                                        distance, log_distance);
    CUDA_CHECK_LAUNCH();
}

void cuda_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                         const int32_t *neighbor, const float *distance, float eps, float dlog,
                         float *dy) {
    if (rows == 0) return;
    if (cuda_queue_point())
        koleo_backward_kernel<<<rows, kThreads, 0, stream_of(backend)>>>(rows, dim, y, neighbor,
                                                                         distance, eps, dlog, dy);
    CUDA_CHECK_LAUNCH();
}

void cuda_cka_loss(Backend *backend, int images, int tokens, int dim, const float *student,
                   const float *teacher, const float *image_weight, float *loss,
                   float *dstudent) {
    CudaState *state = cuda_state(backend);
    // Per image: its term (a double) and two kernels of tokens^2 floats.
    const size_t per_image = 1 + (size_t)tokens * tokens;
    const int room = (int)((CUDA_SCRATCH_DOUBLES - 1) / per_image);
    const int chunk = images < room ? images : room;
    double *running = state->scratch, *terms = state->scratch + 1;
    float *kernels = (float *)(terms + chunk);
    int first = 0;
    do {  // once with no images: loss = 0
        const int count = images - first < chunk ? images - first : chunk;
        if (count > 0 && cuda_queue_point())
            cka_image_kernel<<<count, kThreads, 0, state->stream>>>(
                first, tokens, dim, student, teacher, image_weight, kernels, terms, dstudent);
        CUDA_CHECK_LAUNCH();
        if (cuda_queue_point())
            cka_sum_kernel<<<1, kThreads, 0, state->stream>>>(count, terms, first == 0, running,
                                                              loss);
        CUDA_CHECK_LAUNCH();
        first += count;
    } while (first < images);
}

}  // extern "C"
