// Elementwise kernels of the cuda backend: fill, ReLU and GELU with their
// gradients, add / axpby / mul, the optimizer updates, the EMA update and the
// uint8 -> normalised input conversion. One grid-stride loop each;
// semantics (NaN propagation included) as the ref backend's. The kernels on
// activations are templates on their storage type (cuda_act.cuh); their
// float instances are also the fp32 twins of the losses.
#include <math.h>

#include "backend/scalar_rules.h"
#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cuda_launch.cuh"

namespace {

__global__ void fill_kernel(float *x, float value, size_t n) {
    GRID_STRIDE(i, n) x[i] = value;
}

template <typename T>
__global__ void relu_forward_kernel(size_t n, const T *x, T *y) {
    GRID_STRIDE(i, n) {
        const float v = act_load(x[i]);
        y[i] = act_store<T>(v <= 0.0f ? 0.0f : v);  // NaN stays NaN, as torch.relu
    }
}

template <typename T>
__global__ void relu_backward_kernel(size_t n, const T *y, const T *dy, T *dx) {
    GRID_STRIDE(i, n) dx[i] = act_load(y[i]) <= 0.0f ? act_store<T>(0.0f) : dy[i];
}

// Phi(x) = erfc(-x / sqrt 2) / 2, accurate where Phi is tiny.
__device__ float standard_normal_cdf(float x) { return 0.5f * erfcf(-x * 0.70710678118654752f); }

// GELU over n / V vectors of V values (the ViT MLP's hidden layer: 4x its
// width, the largest activation of a ViT step).
template <typename T, int V>
__global__ void gelu_forward_kernel(size_t vectors, const T *x, T *y) {
    GRID_STRIDE(i, vectors) {
        float values[V];
        act_load_vector<T, V>(x + i * V, values);
        for (int k = 0; k < V; k++) values[k] = values[k] * standard_normal_cdf(values[k]);
        act_store_vector<T, V>(y + i * V, values);
    }
}

template <typename T, int V>
__global__ void gelu_backward_kernel(size_t vectors, const T *x, const T *dy, T *dx) {
    const float inv_sqrt_2pi = 0.3989422804014327f;
    GRID_STRIDE(i, vectors) {
        float xv[V], dyv[V];
        act_load_vector<T, V>(x + i * V, xv);
        act_load_vector<T, V>(dy + i * V, dyv);
        for (int k = 0; k < V; k++) {
            const float v = xv[k];
            const float density = inv_sqrt_2pi * expf(-0.5f * v * v);
            dyv[k] = dyv[k] * (standard_normal_cdf(v) + v * density);
        }
        act_store_vector<T, V>(dx + i * V, dyv);
    }
}

__global__ void add_kernel(size_t n, const float *a, const float *b, float *y) {
    GRID_STRIDE(i, n) y[i] = a[i] + b[i];
}

// beta = 0: y is not read (it may hold NaN), as in BLAS. V values per
// thread and load (cuda_act.cuh): a ResNet's backward adds each block's
// shortcut gradient with it, some 17 GB a step at batch 512 in 16 bits.
template <typename T, int V>
__global__ void axpby_kernel(size_t vectors, float alpha, const T *x, float beta, T *y) {
    GRID_STRIDE(i, vectors) {
        float xv[V], yv[V], out[V];
        act_load_vector<T, V>(x + i * V, xv);
        if (beta != 0.0f) act_load_vector<T, V>(y + i * V, yv);
        for (int v = 0; v < V; v++) {
            const float ax = alpha * xv[v];
            out[v] = beta == 0.0f ? ax : ax + beta * yv[v];
        }
        act_store_vector<T, V>(y + i * V, out);
    }
}

// y (n) = x (n) in the other type: To = the storage type from float, or
// float from it (exact).
template <typename From, typename To>
__global__ void convert_kernel(size_t n, const From *x, To *y) {
    GRID_STRIDE(i, n) y[i] = act_store<To>(act_load(x[i]));
}

// y (rows, y_channels) = the first y_channels of x (rows, x_channels), zero
// in the channels past x_channels: the 3-channel input and its weights
// padded to 8 for cuDNN's 16-bit kernels, and the padded gradient cut back.
// A thread per channel of y, walking rows (ChannelGrid, one channel per
// thread): no 64-bit division per element (the stem's input, 8 padded
// channels of 224 x 224 x 512 pixels, is padded twice a step).
template <typename T>
__global__ void channels_copy_kernel(size_t rows, int x_channels, int y_channels, const T *x,
                                     T *y) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= y_channels) return;
    CHANNEL_ROWS(r, rows)
        y[r * y_channels + c] = c < x_channels ? x[r * x_channels + c] : act_store<T>(0.0f);
}

// y (rows, y_channels) += x (rows, x_channels) in fp32, the first
// y_channels of each row: a 16-bit weight gradient added into the fp32
// gradient arena. Threads as channels_copy_kernel's.
template <typename T>
__global__ void accumulate_kernel(size_t rows, int x_channels, int y_channels, const T *x,
                                  float *y) {
    const int c = blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= y_channels) return;
    CHANNEL_ROWS(r, rows) y[r * y_channels + c] += act_load(x[r * x_channels + c]);
}

__global__ void mul_kernel(size_t n, const float *a, const float *b, float *y) {
    GRID_STRIDE(i, n) y[i] = a[i] * b[i];
}

// The updates read the step gate (backend.h GATE_*) on the device: a
// skipped step returns before touching anything.
// One element of SGD's update (backend.h sgd_update), shared by the
// per-tensor and the multi-tensor kernels so both compute the same bits.
__device__ inline void sgd_element(size_t i, float *param, const float *grad,
                                   float *momentum_buffer, float multiplier, float lr,
                                   float momentum, float weight_decay, int nesterov,
                                   int first_step) {
    const float g = multiplier * grad[i] + weight_decay * param[i];
    const float buf = first_step ? g : momentum * momentum_buffer[i] + g;
    momentum_buffer[i] = buf;
    const float step = nesterov ? g + momentum * buf : buf;
    param[i] -= lr * step;
}

// The per-step scalars come through device memory (cuda_step_params.c):
// SGD's `step` = {lr, weight_decay, first_step}, AdamW's {lr, decay} (per
// tensor: decay = 1 - lr wd formed on the host) or {lr, weight_decay}
// (segments).
__global__ void sgd_update_kernel(size_t n, float *param, const float *grad, const float *gate,
                                  float *momentum_buffer, const float *step, float momentum,
                                  int nesterov) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER], lr = step[0], weight_decay = step[1];
    const int first_step = step[2] != 0.0f;
    GRID_STRIDE(i, n)
        sgd_element(i, param, grad, momentum_buffer, multiplier, lr, momentum, weight_decay,
                    nesterov, first_step);
}

// One element of AdamW's update given its step size (lr over the first bias
// correction) and the second's square root.
__device__ inline void adamw_element(size_t i, float *param, const float *grad, float *m,
                                     float *v, float multiplier, float step_size,
                                     AdamwFactors factors, float eps, float decay,
                                     float correction2_sqrt) {
    const float p = param[i] * decay;
    const float g = multiplier * grad[i];
    const float m_new = adamw_first_moment_rule(factors, m[i], g);
    const float v_new = adamw_second_moment_rule(factors, v[i], g);
    m[i] = m_new;
    v[i] = v_new;
    // The division in float, as ref and PyTorch's _foreach_div_ (scalar_rules.h).
    const float denominator = sqrtf(v_new) / correction2_sqrt + eps;
    param[i] = p - step_size * (m_new / denominator);
}

// The bias corrections from the device's count of applied updates (*step),
// as ref (scalar_rules.h); every thread derives them.
__global__ void adamw_update_kernel(size_t n, float *param, const float *grad, const float *gate,
                                    float *m, float *v, const float *scalars, double beta1,
                                    double beta2, float eps, const float *step) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER], lr = scalars[0], decay = scalars[1];
    double correction1;
    float correction2_sqrt;
    adamw_corrections_rule(*step, beta1, beta2, &correction1, &correction2_sqrt);
    const float step_size = (float)(lr / correction1);
    const AdamwFactors factors = adamw_factors_rule(beta1, beta2);
    GRID_STRIDE(i, n)
        adamw_element(i, param, grad, m, v, multiplier, step_size, factors, eps, decay,
                      correction2_sqrt);
}

// The multi-tensor updates: segment blockIdx.y, its elements over blockIdx.x
// (kSegmentBlocks blocks a segment, grid-stride beyond). A segment's lr and
// decay are formed as the per-tensor launchers form them on the host.
constexpr unsigned kSegmentBlocks = 64;

__global__ void sgd_update_segments_kernel(const UpdateSegment *segments, float *params,
                                           const float *grads, const float *gate,
                                           float *buffers, const float *step, float momentum,
                                           int nesterov) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const UpdateSegment s = segments[blockIdx.y];
    const float lr = step[0], weight_decay = step[1];
    const int first_step = step[2] != 0.0f;
    const float multiplier = gate[GATE_MULTIPLIER], segment_lr = lr * s.lr_scale;
    const float decay = s.decays ? weight_decay : 0.0f;
    GRID_STRIDE(i, s.count)
        sgd_element(s.offset + i, params, grads, buffers, multiplier, segment_lr, momentum, decay,
                    nesterov, first_step);
}

__global__ void adamw_update_segments_kernel(const UpdateSegment *segments, float *params,
                                             const float *grads, const float *gate, float *m,
                                             float *v, const float *scalars, double beta1,
                                             double beta2, float eps, const float *step) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const UpdateSegment s = segments[blockIdx.y];
    const float lr = scalars[0], weight_decay = scalars[1];
    const float multiplier = gate[GATE_MULTIPLIER], segment_lr = lr * s.lr_scale;
    const float decay = (float)(1.0 - (double)segment_lr * (s.decays ? weight_decay : 0.0f));
    double correction1;
    float correction2_sqrt;
    adamw_corrections_rule(*step, beta1, beta2, &correction1, &correction2_sqrt);
    const float step_size = (float)(segment_lr / correction1);
    const AdamwFactors factors = adamw_factors_rule(beta1, beta2);
    GRID_STRIDE(i, s.count)
        adamw_element(s.offset + i, params, grads, m, v, multiplier, step_size, factors, eps,
                      decay, correction2_sqrt);
}

__global__ void ema_update_kernel(size_t n, float *target, const float *source,
                                  const float *momentum_at) {
    const float momentum = *momentum_at;
    GRID_STRIDE(i, n) target[i] = momentum * target[i] + (1.0f - momentum) * source[i];
}

// LARS direction (backend.h lars_direction): every thread derives the ratio
// from the two sums, so the host never reads them.
__global__ void lars_direction_kernel(size_t n, const float *param, const float *grad,
                                      const float *gate, const float *sums,
                                      const float *weight_decay_at, float trust, float eps,
                                      float *out) {
    if (gate[GATE_SKIP] != 0.0f) return;
    const float multiplier = gate[GATE_MULTIPLIER], weight_decay = *weight_decay_at;
    float ratio = 0.0f;
    if (!lars_ratio_rule(sums, multiplier, weight_decay, trust, eps, &ratio)) {
        GRID_STRIDE(i, n) out[i] = multiplier * grad[i];
        return;
    }
    // As host_lars_direction: (m * grad) rounded, then + wd * param, then * ratio.
    GRID_STRIDE(i, n) out[i] = ratio * (weight_decay * param[i] + multiplier * grad[i]);
}

// One thread closes the step gate (scalar_rules.h step_gate_rule), the
// loss scaler's 1/scale read where it lives.
__global__ void step_gate_kernel(float *gate, int groups, float scale, const float *unscale,
                                 float max_norm) {
    step_gate_rule(gate, groups, unscale ? scale * *unscale : scale, max_norm);
}

// One thread: backend.h scalar_combine.
__global__ void scalar_combine_kernel(float alpha, const float *a, float beta, const float *b,
                                      float divisor, float *y) {
    *y = scalar_combine_rule(alpha, *a, beta, b, divisor);
}

// GradScaler's update, one thread (see backend.h amp_update).
__global__ void amp_update_kernel(float *state, const float *found, int growth_interval,
                                  float growth, float backoff) {
    amp_update_rule(state, *found, growth_interval, growth, backoff);
}

struct ChannelConstants {
    float mean[3], std[3];
};

// Same operation order as ref: (x / 255 - mean) / std.
template <typename T>
__global__ void normalize_u8_kernel(size_t values, const uint8_t *x, ChannelConstants k, T *y) {
    GRID_STRIDE(i, values) {
        const int c = (int)(i % 3);
        y[i] = act_store<T>(((float)x[i] / 255.0f - k.mean[c]) / k.std[c]);
    }
}

// Up to 64 channels' constants, passed by value (512 bytes of kernel parameters).
struct ManyChannelConstants {
    float mean[64], std[64];
};

// Same operation order as ref: (x - mean) / std.
template <typename T>
__global__ void normalize_f32_kernel(size_t values, int channels, const float *x,
                                     ManyChannelConstants k, T *y) {
    GRID_STRIDE(i, values) {
        const int c = (int)(i % (size_t)channels);
        y[i] = act_store<T>((x[i] - k.mean[c]) / k.std[c]);
    }
}

}  // namespace

extern "C" {

void cuda_fill_launch(cudaStream_t stream, float *x, float value, size_t n) {
    LAUNCH(fill_kernel, n, stream, x, value, n);
}

void cuda_relu_forward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *x,
                              void *y) {
    act_dispatch(dtype, [&](auto tag) {
        LAUNCH(relu_forward_kernel<ACT_T>, n, stream, n, (const ACT_T *)x, (ACT_T *)y);
    });
}

void cuda_relu_backward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *y,
                               const void *dy, void *dx) {
    act_dispatch(dtype, [&](auto tag) {
        LAUNCH(relu_backward_kernel<ACT_T>, n, stream, n, (const ACT_T *)y, (const ACT_T *)dy,
               (ACT_T *)dx);
    });
}

void cuda_gelu_forward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *x,
                              void *y) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        over_vectors<T>(n, {x, y}, [&](auto width, size_t vectors) {
            auto kernel = gelu_forward_kernel<T, decltype(width)::value>;
            LAUNCH(kernel, vectors, stream, vectors, (const T *)x, (T *)y);
        });
    });
}

void cuda_gelu_backward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *x,
                               const void *dy, void *dx) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        over_vectors<T>(n, {x, dy, dx}, [&](auto width, size_t vectors) {
            auto kernel = gelu_backward_kernel<T, decltype(width)::value>;
            LAUNCH(kernel, vectors, stream, vectors, (const T *)x, (const T *)dy, (T *)dx);
        });
    });
}

void cuda_add_launch(cudaStream_t stream, size_t n, const float *a, const float *b, float *y) {
    LAUNCH(add_kernel, n, stream, n, a, b, y);
}

void cuda_axpby_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, float alpha,
                       const void *x, float beta, void *y) {
    act_dispatch(dtype, [&](auto tag) {
        using T = ACT_T;
        over_vectors<T>(n, {x, y}, [&](auto width, size_t vectors) {
            auto kernel = axpby_kernel<T, decltype(width)::value>;
            LAUNCH(kernel, vectors, stream, vectors, alpha, (const T *)x, beta, (T *)y);
        });
    });
}

void cuda_act_convert_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, int to_act,
                             const void *x, void *y) {
    act_dispatch(dtype, [&](auto tag) {
        // (one template argument per macro argument: the kernels by name)
        auto to_storage = convert_kernel<float, ACT_T>;
        auto from_storage = convert_kernel<ACT_T, float>;
        if (to_act)
            LAUNCH(to_storage, n, stream, n, (const float *)x, (ACT_T *)y);
        else
            LAUNCH(from_storage, n, stream, n, (const ACT_T *)x, (float *)y);
    });
}

void cuda_channels_copy_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                               int x_channels, int y_channels, const void *x, void *y) {
    if (rows == 0 || y_channels == 0) return;
    const ChannelGrid grid = channel_grid(y_channels, 1);
    act_dispatch(dtype, [&](auto tag) {
        if (cuda_queue_point())
            channels_copy_kernel<ACT_T><<<channel_row_blocks(grid, rows), grid.block, 0, stream>>>(
                rows, x_channels, y_channels, (const ACT_T *)x, (ACT_T *)y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_act_accumulate_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                int x_channels, int y_channels, const void *x, float *y) {
    if (rows == 0 || y_channels == 0) return;
    const ChannelGrid grid = channel_grid(y_channels, 1);
    act_dispatch(dtype, [&](auto tag) {
        if (cuda_queue_point())
            accumulate_kernel<ACT_T><<<channel_row_blocks(grid, rows), grid.block, 0, stream>>>(
                rows, x_channels, y_channels, (const ACT_T *)x, y);
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_mul_launch(cudaStream_t stream, size_t n, const float *a, const float *b, float *y) {
    LAUNCH(mul_kernel, n, stream, n, a, b, y);
}

void cuda_sgd_update_launch(cudaStream_t stream, size_t n, float *param, const float *grad,
                            const float *gate, float *momentum_buffer, const float *step,
                            float momentum, int nesterov) {
    LAUNCH(sgd_update_kernel, n, stream, n, param, grad, gate, momentum_buffer, step, momentum,
           nesterov);
}

void cuda_adamw_update_launch(cudaStream_t stream, size_t n, float *param, const float *grad,
                              const float *gate, float *m, float *v, const float *scalars,
                              double beta1, double beta2, float eps, const float *step) {
    LAUNCH(adamw_update_kernel, n, stream, n, param, grad, gate, m, v, scalars, beta1, beta2, eps,
           step);
}

void cuda_sgd_update_segments_launch(cudaStream_t stream, int count,
                                     const UpdateSegment *segments, float *params,
                                     const float *grads, const float *gate, float *buffers,
                                     const float *step, float momentum, int nesterov) {
    if (count == 0) return;
    if (cuda_queue_point())
        sgd_update_segments_kernel<<<dim3(kSegmentBlocks, (unsigned)count), kThreads, 0, stream>>>(
            segments, params, grads, gate, buffers, step, momentum, nesterov);
    CUDA_CHECK_LAUNCH();
}

void cuda_adamw_update_segments_launch(cudaStream_t stream, int count,
                                       const UpdateSegment *segments, float *params,
                                       const float *grads, const float *gate, float *m, float *v,
                                       const float *scalars, double beta1, double beta2, float eps,
                                       const float *step) {
    if (count == 0) return;
    if (cuda_queue_point())
        adamw_update_segments_kernel<<<dim3(kSegmentBlocks, (unsigned)count), kThreads, 0,
                                       stream>>>(segments, params, grads, gate, m, v, scalars,
                                                 beta1, beta2, eps, step);
    CUDA_CHECK_LAUNCH();
}

void cuda_ema_update_launch(cudaStream_t stream, size_t n, float *target, const float *source,
                            const float *momentum) {
    LAUNCH(ema_update_kernel, n, stream, n, target, source, momentum);
}

void cuda_lars_direction_launch(cudaStream_t stream, size_t n, const float *param,
                                const float *grad, const float *gate, const float *sums,
                                const float *weight_decay, float trust, float eps, float *out) {
    LAUNCH(lars_direction_kernel, n, stream, n, param, grad, gate, sums, weight_decay, trust, eps,
           out);
}

void cuda_step_gate_launch(cudaStream_t stream, float *gate, int groups, float scale,
                           const float *unscale, float max_norm) {
    if (cuda_queue_point())
        step_gate_kernel<<<1, 1, 0, stream>>>(gate, groups, scale, unscale, max_norm);
    CUDA_CHECK_LAUNCH();
}

void cuda_scalar_combine_launch(cudaStream_t stream, float alpha, const float *a, float beta,
                                const float *b, float divisor, float *y) {
    if (cuda_queue_point())
        scalar_combine_kernel<<<1, 1, 0, stream>>>(alpha, a, beta, b, divisor, y);
    CUDA_CHECK_LAUNCH();
}

void cuda_amp_update_launch(cudaStream_t stream, float *state, const float *found,
                            int growth_interval, float growth, float backoff) {
    if (cuda_queue_point())
        amp_update_kernel<<<1, 1, 0, stream>>>(state, found, growth_interval, growth, backoff);
    CUDA_CHECK_LAUNCH();
}

void cuda_normalize_u8_launch(cudaStream_t stream, ComputeDtype dtype, size_t pixels,
                              const uint8_t *x, float mean0, float mean1, float mean2, float std0,
                              float std1, float std2, void *y) {
    const ChannelConstants k = {{mean0, mean1, mean2}, {std0, std1, std2}};
    const size_t values = pixels * 3;
    act_dispatch(dtype, [&](auto tag) {
        LAUNCH(normalize_u8_kernel<ACT_T>, values, stream, values, x, k, (ACT_T *)y);
    });
}

void cuda_normalize_f32_launch(cudaStream_t stream, ComputeDtype dtype, size_t pixels,
                               int channels, const float *x, const float *mean,
                               const float *std, void *y) {
    ManyChannelConstants k = {};
    for (int c = 0; c < channels && c < 64; c++) k.mean[c] = mean[c], k.std[c] = std[c];
    const size_t values = pixels * (size_t)channels;
    act_dispatch(dtype, [&](auto tag) {
        LAUNCH(normalize_f32_kernel<ACT_T>, values, stream, values, channels, x, k, (ACT_T *)y);
    });
}

}  // extern "C"
