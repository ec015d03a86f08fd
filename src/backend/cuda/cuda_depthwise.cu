// The cuda backend's depthwise convolution (backend.h; ConvNeXt's 7x7, YOLO's 3x3,
// NHWC activations, (K, K, C) weights) as kernels of our own rather than
// cuDNN's grouped convolution, so that its bias and 16-bit rounding follow
// ref's order exactly:
//   forward: a thread per channel and strip of STRIP outputs along a row,
//     the strip's input row read once per kernel row and reused by every
//     output it covers (stride 1 and 2, K <= 13; others one output per
//     thread); fp32 accumulation, bias rounded to the dtype, one rounding;
//   backward data: at stride 1 the same strip kernel run on dy with the
//     kernel turned by 180 degrees and padding K - 1 - padding (the
//     transposed convolution of stride 1 is that correlation); at other
//     strides a thread per input element, the taps that reach it;
//   backward weights: deterministic, no atomics: the backend's workspace
//     (shared by the ops, which run one after another on the stream; the
//     plan reserves its need) holds per-chunk partial sums, then one pass
//     adds the chunks in order. For
//     K <= 7 a chunk is a run of whole output rows and a thread (chunk,
//     channel) keeps its K K tap sums in registers, walking each row with
//     no division (K a template argument); larger K: a chunk of CHUNK
//     output pixels, one thread per (tap, channel) and chunk.
// The first versions (one thread per tap and 2048-pixel chunk, three 64-bit
// divisions a pixel; the backward data with two modulos a tap) were the
// likeliest cause of ConvNeXt-T training at 0.36x PyTorch on an H200 while
// its forward ran at 0.9x (docs/gpu-runs/2026-11-30-a7cdfb0-2.jsonl:31, :34);
// the row kernels have run only on the CPU emulation so far.
#include <stdlib.h>

#include "backend/cuda/cuda_act.cuh"
#include "backend/cuda/cuda_grid.cuh"
#include "backend/cuda/cuda_internal.h"

// The weight gradient's partials, (chunks, K K + 1, C) floats (per-chunk
// tap sums, then the bias row), lie at the start of the backend's workspace.
struct DepthwisePlan {
    DepthwiseShape shape;
    int chunks;  // of the output rows (K <= 7) or pixels, for the weight gradient
};

namespace {

constexpr int kStrip = 4;       // outputs per thread along a row (forward)
constexpr int kMaxSpan = 16;    // inputs one strip reads per row: (kStrip - 1) stride + K
constexpr int kChunk = 2048;    // output pixels per partial sum of the weight gradient (K > 7)
constexpr int kMaxChunks = 256;
constexpr int kMaxRowKernel = 7;          // the largest K of the row kernel
constexpr int kRowThreads = 1 << 17;      // (chunk, channel) threads the row kernel aims at

// Whether the strip kernel takes the shape: its inputs fit the register row.
bool strip_fits(const DepthwiseShape &s) {
    return (kStrip - 1) * s.stride + s.kernel <= kMaxSpan;
}

// y[n, oh, ow0 .. ow0 + kStrip - 1, c]: index = ((n OH + oh) strips + strip) C + c.
// kTurned: the kernel turned by 180 degrees (tap (kh, kw) reads w[K-1-kh, K-1-kw]).
template <typename T, bool kTurned>
__global__ void forward_strip_kernel(DepthwiseShape s, const T *x, const T *w,
                                     const float *bias, T *y) {
    const int strips = (s.out_width + kStrip - 1) / kStrip;
    const size_t n_threads = (size_t)s.batch * s.out_height * strips * s.channels;
    GRID_STRIDE(index, n_threads) {
        const int c = (int)(index % s.channels);
        const size_t rest = index / s.channels;
        const int strip = (int)(rest % strips);
        const int oh = (int)(rest / strips % s.out_height);
        const int n = (int)(rest / strips / s.out_height);
        const int ow0 = strip * kStrip, iw0 = ow0 * s.stride - s.padding;
        const int span = (kStrip - 1) * s.stride + s.kernel;
        float total[kStrip] = {0.0f, 0.0f, 0.0f, 0.0f};
        for (int kh = 0; kh < s.kernel; kh++) {
            const int ih = oh * s.stride - s.padding + kh;
            if (ih < 0 || ih >= s.in_height) continue;
            const T *row = x + (((size_t)n * s.in_height + ih) * s.in_width) * s.channels + c;
            float values[kMaxSpan];
            for (int j = 0; j < span; j++) {
                const int iw = iw0 + j;
                values[j] = iw >= 0 && iw < s.in_width ? act_load(row[(size_t)iw * s.channels])
                                                       : 0.0f;
            }
            const int tap_row = kTurned ? s.kernel - 1 - kh : kh;
            const T *taps = w + (size_t)tap_row * s.kernel * s.channels + c;
            for (int kw = 0; kw < s.kernel; kw++) {
                const int tap_column = kTurned ? s.kernel - 1 - kw : kw;
                const float tap = act_load(taps[(size_t)tap_column * s.channels]);
                for (int o = 0; o < kStrip; o++) total[o] += values[o * s.stride + kw] * tap;
            }
        }
        // 16 bits: the bias rounded to the dtype first, the sum rounded once (ref's order)
        const float b = bias ? act_load(act_store<T>(bias[c])) : 0.0f;
        for (int o = 0; o < kStrip && ow0 + o < s.out_width; o++)
            y[(((size_t)n * s.out_height + oh) * s.out_width + ow0 + o) * s.channels + c] =
                act_store<T>(total[o] + b);
    }
}

// One output per thread, any geometry.
template <typename T>
__global__ void forward_kernel(DepthwiseShape s, const T *x, const T *w, const float *bias,
                               T *y) {
    const size_t n_outputs = (size_t)s.batch * s.out_height * s.out_width * s.channels;
    GRID_STRIDE(index, n_outputs) {
        const int c = (int)(index % s.channels);
        const size_t pixel = index / s.channels;
        const int ow = (int)(pixel % s.out_width), oh = (int)(pixel / s.out_width % s.out_height);
        const int n = (int)(pixel / s.out_width / s.out_height);
        float total = 0.0f;
        for (int kh = 0; kh < s.kernel; kh++) {
            const int ih = oh * s.stride - s.padding + kh;
            if (ih < 0 || ih >= s.in_height) continue;
            for (int kw = 0; kw < s.kernel; kw++) {
                const int iw = ow * s.stride - s.padding + kw;
                if (iw < 0 || iw >= s.in_width) continue;
                total += act_load(x[(((size_t)n * s.in_height + ih) * s.in_width + iw) *
                                        s.channels + c]) *
                         act_load(w[((size_t)kh * s.kernel + kw) * s.channels + c]);
            }
        }
        const float b = bias ? act_load(act_store<T>(bias[c])) : 0.0f;
        y[index] = act_store<T>(total + b);
    }
}

// dx[n, ih, iw, c]: one input element per thread.
template <typename T>
__global__ void backward_data_kernel(DepthwiseShape s, const T *dy, const T *w, T *dx) {
    const size_t n_inputs = (size_t)s.batch * s.in_height * s.in_width * s.channels;
    GRID_STRIDE(index, n_inputs) {
        const int c = (int)(index % s.channels);
        const size_t pixel = index / s.channels;
        const int iw = (int)(pixel % s.in_width), ih = (int)(pixel / s.in_width % s.in_height);
        const int n = (int)(pixel / s.in_width / s.in_height);
        float total = 0.0f;
        for (int kh = 0; kh < s.kernel; kh++) {
            const int th = ih + s.padding - kh;  // = oh * stride
            if (th < 0 || th % s.stride != 0 || th / s.stride >= s.out_height) continue;
            for (int kw = 0; kw < s.kernel; kw++) {
                const int tw = iw + s.padding - kw;  // = ow * stride
                if (tw < 0 || tw % s.stride != 0 || tw / s.stride >= s.out_width) continue;
                total += act_load(dy[(((size_t)n * s.out_height + th / s.stride) * s.out_width +
                                      tw / s.stride) * s.channels + c]) *
                         act_load(w[((size_t)kh * s.kernel + kw) * s.channels + c]);
            }
        }
        dx[index] = act_store<T>(total);
    }
}

// partials[chunk][tap][c] for tap < K K: the sum over the chunk's output
// pixels of x at the tap's offset times dy; tap K K: the sum of dy (bias).
template <typename T>
__global__ void weight_partials_kernel(DepthwiseShape s, int chunks, const T *x, const T *dy,
                                       float *partials) {
    const int taps = s.kernel * s.kernel + 1;
    const size_t per_chunk = (size_t)taps * s.channels, n_sums = per_chunk * chunks;
    const size_t pixels = (size_t)s.batch * s.out_height * s.out_width;
    const size_t chunk_pixels = (pixels + chunks - 1) / chunks;
    GRID_STRIDE(index, n_sums) {
        const int c = (int)(index % s.channels);
        const int tap = (int)(index / s.channels % taps);
        const size_t chunk = index / per_chunk;
        const int kh = tap / s.kernel, kw = tap % s.kernel;
        const size_t first = chunk * chunk_pixels;
        const size_t last = first + chunk_pixels < pixels ? first + chunk_pixels : pixels;
        float total = 0.0f;
        for (size_t p = first; p < last; p++) {
            const float g = act_load(dy[p * s.channels + c]);
            if (tap == taps - 1) {
                total += g;
                continue;
            }
            const int ow = (int)(p % s.out_width), oh = (int)(p / s.out_width % s.out_height);
            const int n = (int)(p / s.out_width / s.out_height);
            const int ih = oh * s.stride - s.padding + kh, iw = ow * s.stride - s.padding + kw;
            if (ih < 0 || ih >= s.in_height || iw < 0 || iw >= s.in_width) continue;
            total += act_load(x[(((size_t)n * s.in_height + ih) * s.in_width + iw) * s.channels +
                                c]) * g;
        }
        partials[index] = total;
    }
}

// The same partials for K <= 7, a chunk being a run of whole output rows
// (n, oh): a thread per (chunk, channel) sums its K K taps and the bias in
// registers; each row of dy is read once per kernel row (from L1 after the
// first), x's rows as they pass.
template <typename T, int K>
__global__ void weight_rows_kernel(DepthwiseShape s, int chunks, const T *x, const T *dy,
                                   float *partials) {
    const int rows = s.batch * s.out_height, rows_per_chunk = (rows + chunks - 1) / chunks;
    const size_t n_threads = (size_t)chunks * s.channels;
    GRID_STRIDE(index, n_threads) {
        const int c = (int)(index % s.channels), chunk = (int)(index / s.channels);
        float taps[K * K], bias = 0.0f;
UNROLL_LOOP
        for (int t = 0; t < K * K; t++) taps[t] = 0.0f;
        const int first = chunk * rows_per_chunk;
        const int last = first + rows_per_chunk < rows ? first + rows_per_chunk : rows;
        for (int row = first; row < last; row++) {
            const int n = row / s.out_height, oh = row % s.out_height;
            const T *g_row = dy + (size_t)row * s.out_width * s.channels + c;
            for (int ow = 0; ow < s.out_width; ow++)
                bias += act_load(g_row[(size_t)ow * s.channels]);
UNROLL_LOOP
            for (int kh = 0; kh < K; kh++) {
                const int ih = oh * s.stride - s.padding + kh;
                if (ih < 0 || ih >= s.in_height) continue;
                const T *x_row = x + ((size_t)n * s.in_height + ih) * s.in_width * s.channels + c;
                for (int ow = 0; ow < s.out_width; ow++) {
                    const float g = act_load(g_row[(size_t)ow * s.channels]);
                    const int iw0 = ow * s.stride - s.padding;
UNROLL_LOOP
                    for (int kw = 0; kw < K; kw++) {
                        const int iw = iw0 + kw;
                        if (iw >= 0 && iw < s.in_width)
                            taps[kh * K + kw] += act_load(x_row[(size_t)iw * s.channels]) * g;
                    }
                }
            }
        }
        float *out = partials + (size_t)chunk * (K * K + 1) * s.channels + c;
UNROLL_LOOP
        for (int t = 0; t < K * K; t++) out[(size_t)t * s.channels] = taps[t];
        out[(size_t)K * K * s.channels] = bias;
    }
}

template <typename T, int K>
void launch_weight_rows(cudaStream_t stream, const DepthwisePlan *plan, const T *x, const T *dy,
                        float *partials) {
    const size_t n = (size_t)plan->chunks * plan->shape.channels;
    weight_rows_kernel<T, K><<<blocks_for(n), kThreads, 0, stream>>>(plan->shape, plan->chunks,
                                                                     x, dy, partials);
}

// dw (K K, C) += and dbias (C) += the chunks' sums, added in chunk order.
__global__ void weight_reduce_kernel(int taps, int channels, int chunks, const float *partials,
                                     float *dw, float *dbias) {
    const size_t n = (size_t)taps * channels;
    GRID_STRIDE(index, n) {
        float total = 0.0f;
        for (int chunk = 0; chunk < chunks; chunk++) total += partials[chunk * n + index];
        if (index < (size_t)(taps - 1) * channels) dw[index] += total;
        else if (dbias) dbias[index - (size_t)(taps - 1) * channels] += total;
    }
}

}  // namespace

extern "C" {

DepthwisePlan *cuda_depthwise_plan(Backend *backend, const DepthwiseShape *shape,
                                   ErrorMessage *err) {
    DepthwiseShape s;
    if (depthwise_shape_make(&s, shape->batch, shape->in_height, shape->in_width,
                             shape->channels, shape->kernel, shape->stride, shape->padding,
                             err)) {
        error_prefix(err, "cuda depthwise plan");
        return NULL;
    }
    CUDA_CHECK(cudaSetDevice(cuda_state(backend)->device));
    size_t chunks;
    if (s.kernel <= kMaxRowKernel) {  // runs of rows, enough of them to fill the GPU
        const size_t rows = (size_t)s.batch * s.out_height;
        chunks = ((size_t)kRowThreads + s.channels - 1) / s.channels;
        if (chunks > rows) chunks = rows;
    } else {
        const size_t pixels = (size_t)s.batch * s.out_height * s.out_width;
        chunks = (pixels + kChunk - 1) / kChunk;
        if (chunks > kMaxChunks) chunks = kMaxChunks;
    }
    const size_t floats = chunks * ((size_t)s.kernel * s.kernel + 1) * s.channels;
    if (cuda_reserve_workspace(cuda_state(backend), floats * sizeof(float), err)) {
        error_prefix(err, "cuda depthwise plan (%zu KB of partial sums)",
                     floats * sizeof(float) >> 10);
        return NULL;
    }
    DepthwisePlan *plan = (DepthwisePlan *)calloc(1, sizeof *plan);
    if (!plan) {
        error_set(err, "cuda depthwise plan: out of host memory");
        return NULL;
    }
    plan->shape = s;
    plan->chunks = (int)chunks;
    return plan;
}

void cuda_depthwise_plan_free(Backend *backend, DepthwisePlan *plan) { free(plan); }

void cuda_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x,
                            const Act *w, const float *bias, Act *y) {
    const DepthwiseShape s = plan->shape;
    const cudaStream_t stream = cuda_state(backend)->stream;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        if (strip_fits(s)) {
            const int strips = (s.out_width + kStrip - 1) / kStrip;
            const size_t n = (size_t)s.batch * s.out_height * strips * s.channels;
            if (cuda_queue_point())
                forward_strip_kernel<T, false><<<blocks_for(n), kThreads, 0, stream>>>(
                    s, (const T *)x, (const T *)w, bias, (T *)y);
        } else {
            const size_t n = (size_t)s.batch * s.out_height * s.out_width * s.channels;
            if (cuda_queue_point())
                forward_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                    s, (const T *)x, (const T *)w, bias, (T *)y);
        }
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy,
                                  const Act *w, Act *dx) {
    const DepthwiseShape s = plan->shape;
    const cudaStream_t stream = cuda_state(backend)->stream;
    // Stride 1: dx is dy correlated with the turned kernel, padding K - 1 - padding.
    DepthwiseShape turned = s;
    turned.in_height = s.out_height, turned.in_width = s.out_width;
    turned.out_height = s.in_height, turned.out_width = s.in_width;
    turned.padding = s.kernel - 1 - s.padding;
    const int as_forward = s.stride == 1 && strip_fits(turned);
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        if (as_forward) {
            const int strips = (turned.out_width + kStrip - 1) / kStrip;
            const size_t n = (size_t)turned.batch * turned.out_height * strips * turned.channels;
            if (cuda_queue_point())
                forward_strip_kernel<T, true><<<blocks_for(n), kThreads, 0, stream>>>(
                    turned, (const T *)dy, (const T *)w, (const float *)NULL, (T *)dx);
        } else {
            const size_t n = (size_t)s.batch * s.in_height * s.in_width * s.channels;
            if (cuda_queue_point())
                backward_data_kernel<T><<<blocks_for(n), kThreads, 0, stream>>>(
                    s, (const T *)dy, (const T *)w, (T *)dx);
        }
        CUDA_CHECK_LAUNCH();
    });
}

void cuda_depthwise_backward_weights(Backend *backend, const DepthwisePlan *plan, const Act *x,
                                     const Act *dy, float *dw, float *dbias) {
    const DepthwiseShape s = plan->shape;
    const cudaStream_t stream = cuda_state(backend)->stream;
    const int taps = s.kernel * s.kernel + 1;
    const size_t sums = (size_t)plan->chunks * taps * s.channels;
    float *partials = (float *)cuda_state(backend)->workspace;
    act_dispatch(backend->compute_dtype, [&](auto tag) {
        using T = ACT_T;
        const T *xt = (const T *)x, *dyt = (const T *)dy;
        if (cuda_queue_point()) {
            switch (s.kernel) {
            case 1: launch_weight_rows<T, 1>(stream, plan, xt, dyt, partials); break;
            case 2: launch_weight_rows<T, 2>(stream, plan, xt, dyt, partials); break;
            case 3: launch_weight_rows<T, 3>(stream, plan, xt, dyt, partials); break;
            case 4: launch_weight_rows<T, 4>(stream, plan, xt, dyt, partials); break;
            case 5: launch_weight_rows<T, 5>(stream, plan, xt, dyt, partials); break;
            case 6: launch_weight_rows<T, 6>(stream, plan, xt, dyt, partials); break;
            case 7: launch_weight_rows<T, 7>(stream, plan, xt, dyt, partials); break;
            default:
                weight_partials_kernel<T><<<blocks_for(sums), kThreads, 0, stream>>>(
                    s, plan->chunks, xt, dyt, partials);
            }
        }
        CUDA_CHECK_LAUNCH();
    });
    const size_t outputs = (size_t)taps * s.channels;
    if (cuda_queue_point())
        weight_reduce_kernel<<<blocks_for(outputs), kThreads, 0, stream>>>(
            taps, s.channels, plan->chunks, partials, dw, dbias);
    CUDA_CHECK_LAUNCH();
}

}  // extern "C"
