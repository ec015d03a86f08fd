// The cpu backend's depthwise convolution (backend.h; ConvNeXt's 7x7 on
// NHWC activations, (K, K, C) weights). Written here rather than on
// oneDNN's grouped convolution: NHWC with the taps of a channel block in
// registers needs no weight or activation reorders, and the weight
// gradient reduces over threads without atomics. Threads split the output
// rows (n, oh).
//   AVX2 (channels a multiple of 8, stride 1): a row is walked in tiles of
//   TILE outputs x 8 channels held in registers; the taps' loads are folded
//   into the FMAs. Backward data is the same kernel on dy with the kernel
//   turned by 180 degrees (plan->flipped) and padding K - 1 - p. Backward
//   weights: per row, K accumulators (one per tap column) per channel block,
//   each row's fp32 sums added into the thread's double partial sums
//   (plan->partials), which are added up across threads at the end.
//   Otherwise (no AVX2, LTC_SIMD=scalar, other strides or channel counts):
//   plain loops vectorised over the channels.
// Sums of the forward and backward data run in fp32 (K K terms); the
// weight gradient's per-row sums in fp32, across rows in double.
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

#ifdef _OPENMP
#include <omp.h>
#endif

#define DW_LANES 8  // channels per AVX2 block
#define DW_TILE 8   // outputs per AVX2 tile along a row
#define DW_MAX_TAPS 7  // kernel widths the AVX2 weight gradient keeps in registers

struct DepthwisePlan {
    DepthwiseShape shape;
    int threads;        // partial sums made for this many
    int avx2;           // the AVX2 kernels take this shape
    float *flipped;     // (K, K, C): w turned by 180 degrees (backward data)
    double *partials;   // (threads, K K + 1, C): weight-gradient sums per thread, the
                        // bias's last
};

static int thread_index(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}

DepthwisePlan *cpu_depthwise_plan(Backend *backend, const DepthwiseShape *shape,
                                  ErrorMessage *err) {
    DepthwiseShape s;
    if (depthwise_shape_make(&s, shape->batch, shape->in_height, shape->in_width,
                             shape->channels, shape->kernel, shape->stride, shape->padding,
                             err)) {
        error_prefix(err, "cpu depthwise plan");
        return NULL;
    }
    DepthwisePlan *plan = calloc(1, sizeof *plan);
    const size_t taps = (size_t)s.kernel * s.kernel;
    const int threads = backend->threads > 0 ? backend->threads : 1;
    if (plan) {
        plan->flipped = malloc(taps * s.channels * sizeof *plan->flipped);
        plan->partials = malloc((size_t)threads * (taps + 1) * s.channels *
                                sizeof *plan->partials);
    }
    if (!plan || !plan->flipped || !plan->partials) {
        cpu_depthwise_plan_free(backend, plan);
        error_set(err, "cpu depthwise plan: out of memory");
        return NULL;
    }
    plan->shape = s;
    plan->threads = threads;
    plan->avx2 = cpu_has_avx2() && s.channels % DW_LANES == 0 && s.stride == 1;
    return plan;
}

void cpu_depthwise_plan_free(Backend *backend, DepthwisePlan *plan) {
    if (!plan) return;
    free(plan->flipped);
    free(plan->partials);
    free(plan);
}

// ---- forward (and backward data as a forward) --------------------------------------------

// The geometry of one direction: rows of `in` (H, W, C) per sample filtered
// into rows of `out` (OH, OW, C).
typedef struct DwPass {
    int batch, in_height, in_width, out_height, out_width, channels;
    int kernel, stride, padding;
} DwPass;

static DwPass forward_pass(const DepthwiseShape *s) {
    return (DwPass){s->batch, s->in_height, s->in_width, s->out_height, s->out_width,
                    s->channels, s->kernel, s->stride, s->padding};
}

// Backward data at stride 1: dy filtered by the turned kernel with padding K - 1 - p.
static DwPass data_pass(const DepthwiseShape *s) {
    return (DwPass){s->batch, s->out_height, s->out_width, s->in_height, s->in_width,
                    s->channels, s->kernel, 1, s->kernel - 1 - s->padding};
}

// One output row, any geometry: y (OW, C) of sample x (H, W, C).
static void row_generic(const DwPass *p, const float *x, const float *w, const float *bias,
                        int oh, float *y) {
    const int channels = p->channels;
    for (int ow = 0; ow < p->out_width; ow++) {
        float *out = y + (size_t)ow * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) out[c] = 0.0f;
        for (int kh = 0; kh < p->kernel; kh++) {
            const int ih = oh * p->stride - p->padding + kh;
            if (ih < 0 || ih >= p->in_height) continue;
            for (int kw = 0; kw < p->kernel; kw++) {
                const int iw = ow * p->stride - p->padding + kw;
                if (iw < 0 || iw >= p->in_width) continue;
                const float *in = x + ((size_t)ih * p->in_width + iw) * channels;
                const float *tap = w + ((size_t)kh * p->kernel + kw) * channels;
#pragma omp simd
                for (int c = 0; c < channels; c++) out[c] += in[c] * tap[c];
            }
        }
        if (bias) {
#pragma omp simd
            for (int c = 0; c < channels; c++) out[c] += bias[c];
        }
    }
}

// One output of 8 channels at (oh, ow), taps outside the input skipped.
VECTOR_MATH_TARGET static __m256 output_avx2(const DwPass *p, const float *x, const float *w,
                                             int oh, int ow, int c) {
    __m256 total = _mm256_setzero_ps();
    for (int kh = 0; kh < p->kernel; kh++) {
        const int ih = oh - p->padding + kh;
        if (ih < 0 || ih >= p->in_height) continue;
        for (int kw = 0; kw < p->kernel; kw++) {
            const int iw = ow - p->padding + kw;
            if (iw < 0 || iw >= p->in_width) continue;
            total = _mm256_fmadd_ps(
                _mm256_loadu_ps(x + ((size_t)ih * p->in_width + iw) * p->channels + c),
                _mm256_loadu_ps(w + ((size_t)kh * p->kernel + kw) * p->channels + c), total);
        }
    }
    return total;
}

// DW_TILE outputs from ow, all of whose taps lie inside the row (stride 1).
VECTOR_MATH_TARGET static void tile_avx2(const DwPass *p, const float *x, const float *w,
                                         int oh, int ow, int c, __m256 *total) {
    const size_t channels = (size_t)p->channels;
    for (int t = 0; t < DW_TILE; t++) total[t] = _mm256_setzero_ps();
    for (int kh = 0; kh < p->kernel; kh++) {
        const int ih = oh - p->padding + kh;
        if (ih < 0 || ih >= p->in_height) continue;
        const float *row = x + ((size_t)ih * p->in_width + ow - p->padding) * channels + c;
        const float *taps = w + (size_t)kh * p->kernel * channels + c;
        for (int kw = 0; kw < p->kernel; kw++) {
            const __m256 tap = _mm256_loadu_ps(taps + kw * channels);
            const float *in = row + kw * channels;
            for (int t = 0; t < DW_TILE; t++)
                total[t] = _mm256_fmadd_ps(_mm256_loadu_ps(in + t * channels), tap, total[t]);
        }
    }
}

// One output row at stride 1, channels a multiple of 8.
VECTOR_MATH_TARGET static void row_avx2(const DwPass *p, const float *x, const float *w,
                                        const float *bias, int oh, float *y) {
    const int channels = p->channels;
    // Outputs whose taps all lie inside the row: ow - p >= 0, ow - p + K - 1 < W.
    const int first_inner = p->padding, last_inner = p->in_width - p->kernel + p->padding;
    for (int ow = 0; ow < p->out_width;) {
        const int tiled = ow >= first_inner && ow + DW_TILE - 1 <= last_inner;
        for (int c = 0; c < channels; c += DW_LANES) {
            const __m256 b = bias ? _mm256_loadu_ps(bias + c) : _mm256_setzero_ps();
            if (tiled) {
                __m256 total[DW_TILE];
                tile_avx2(p, x, w, oh, ow, c, total);
                for (int t = 0; t < DW_TILE; t++)
                    _mm256_storeu_ps(y + (size_t)(ow + t) * channels + c,
                                     _mm256_add_ps(total[t], b));
            } else {
                _mm256_storeu_ps(y + (size_t)ow * channels + c,
                                 _mm256_add_ps(output_avx2(p, x, w, oh, ow, c), b));
            }
        }
        ow += tiled ? DW_TILE : 1;
    }
}

// y (N, OH, OW, C) for the pass; rows split across threads.
static void filter(Backend *backend, const DwPass *p, int avx2, const float *x, const float *w,
                   const float *bias, float *y) {
    const size_t in_sample = (size_t)p->in_height * p->in_width * p->channels;
    const size_t out_row = (size_t)p->out_width * p->channels;
    const int rows = p->batch * p->out_height;
    const int team = cpu_team(backend, (size_t)rows * out_row * p->kernel);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++) {
        const int n = r / p->out_height, oh = r % p->out_height;
        const float *x_sample = x + (size_t)n * in_sample;
        float *y_row = y + (size_t)r * out_row;
        if (avx2)
            row_avx2(p, x_sample, w, bias, oh, y_row);
        else
            row_generic(p, x_sample, w, bias, oh, y_row);
    }
}

void cpu_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x,
                           const Act *w, const float *bias, Act *y) {
    const DwPass pass = forward_pass(&plan->shape);
    filter(backend, &pass, plan->avx2, (const float *)x, (const float *)w, bias, (float *)y);
}

// One input row at any stride: dx (W, C) of sample dy (OH, OW, C), the
// taps that reach each input.
static void data_row_generic(const DepthwiseShape *s, const float *dy, const float *w, int ih,
                             float *dx) {
    const int channels = s->channels;
    for (int iw = 0; iw < s->in_width; iw++) {
        float *out = dx + (size_t)iw * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) out[c] = 0.0f;
        for (int kh = 0; kh < s->kernel; kh++) {
            const int th = ih + s->padding - kh;  // = oh * stride
            if (th < 0 || th % s->stride != 0 || th / s->stride >= s->out_height) continue;
            for (int kw = 0; kw < s->kernel; kw++) {
                const int tw = iw + s->padding - kw;  // = ow * stride
                if (tw < 0 || tw % s->stride != 0 || tw / s->stride >= s->out_width) continue;
                const float *g =
                    dy + ((size_t)(th / s->stride) * s->out_width + tw / s->stride) * channels;
                const float *tap = w + ((size_t)kh * s->kernel + kw) * channels;
#pragma omp simd
                for (int c = 0; c < channels; c++) out[c] += g[c] * tap[c];
            }
        }
    }
}

void cpu_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy_act,
                                 const Act *w_act, Act *dx_act) {
    const DepthwiseShape *s = &plan->shape;
    const float *dy = (const float *)dy_act, *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    if (s->stride == 1) {  // a forward of dy with the turned kernel
        const int taps = s->kernel * s->kernel;
        for (int t = 0; t < taps; t++)
            memcpy(plan->flipped + (size_t)(taps - 1 - t) * s->channels,
                   w + (size_t)t * s->channels, (size_t)s->channels * sizeof *w);
        const DwPass pass = data_pass(s);
        filter(backend, &pass, plan->avx2, dy, plan->flipped, NULL, dx);
        return;
    }
    const size_t out_sample = (size_t)s->out_height * s->out_width * s->channels;
    const size_t in_row = (size_t)s->in_width * s->channels;
    const int rows = s->batch * s->in_height;
    const int team = cpu_team(backend, (size_t)rows * in_row * s->kernel);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++)
        data_row_generic(s, dy + (size_t)(r / s->in_height) * out_sample, w, r % s->in_height,
                         dx + (size_t)r * in_row);
}

// ---- backward weights ------------------------------------------------------------------------

// The weight and bias gradient sums of output row (n, oh) added into
// partial (K K + 1, C); any geometry.
static void weight_row_generic(const DepthwiseShape *s, const float *x, const float *dy, int oh,
                               double *partial) {
    const int channels = s->channels;
    for (int ow = 0; ow < s->out_width; ow++) {
        const float *g = dy + (size_t)ow * channels;
        double *bias_sums = partial + (size_t)s->kernel * s->kernel * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) bias_sums[c] += g[c];
        for (int kh = 0; kh < s->kernel; kh++) {
            const int ih = oh * s->stride - s->padding + kh;
            if (ih < 0 || ih >= s->in_height) continue;
            for (int kw = 0; kw < s->kernel; kw++) {
                const int iw = ow * s->stride - s->padding + kw;
                if (iw < 0 || iw >= s->in_width) continue;
                const float *in = x + ((size_t)ih * s->in_width + iw) * channels;
                double *sums = partial + ((size_t)kh * s->kernel + kw) * channels;
#pragma omp simd
                for (int c = 0; c < channels; c++) sums[c] += (double)in[c] * g[c];
            }
        }
    }
}

// Adds 8 fp32 sums into 8 doubles.
VECTOR_MATH_TARGET static void add_to_doubles(__m256 sums, double *out) {
    const __m256d low = _mm256_cvtps_pd(_mm256_castps256_ps128(sums));
    const __m256d high = _mm256_cvtps_pd(_mm256_extractf128_ps(sums, 1));
    _mm256_storeu_pd(out, _mm256_add_pd(_mm256_loadu_pd(out), low));
    _mm256_storeu_pd(out + 4, _mm256_add_pd(_mm256_loadu_pd(out + 4), high));
}

// weight_row_generic at stride 1, channels a multiple of 8, K <= DW_MAX_TAPS:
// per channel block and kernel row, one accumulator per tap column.
VECTOR_MATH_TARGET static void weight_row_avx2(const DepthwiseShape *s, const float *x,
                                               const float *dy, int oh, double *partial) {
    const int channels = s->channels, kernel = s->kernel;
    const int first_inner = s->padding, last_inner = s->in_width - kernel + s->padding;
    for (int c = 0; c < channels; c += DW_LANES) {
        __m256 bias_sum = _mm256_setzero_ps();
        for (int ow = 0; ow < s->out_width; ow++)
            bias_sum = _mm256_add_ps(bias_sum, _mm256_loadu_ps(dy + (size_t)ow * channels + c));
        add_to_doubles(bias_sum, partial + (size_t)kernel * kernel * channels + c);
        for (int kh = 0; kh < kernel; kh++) {
            const int ih = oh - s->padding + kh;
            if (ih < 0 || ih >= s->in_height) continue;
            const float *row = x + (size_t)ih * s->in_width * channels + c;
            __m256 sums[DW_MAX_TAPS];
            for (int kw = 0; kw < kernel; kw++) sums[kw] = _mm256_setzero_ps();
            for (int ow = 0; ow < s->out_width; ow++) {
                const __m256 g = _mm256_loadu_ps(dy + (size_t)ow * channels + c);
                const float *in = row + (ptrdiff_t)(ow - s->padding) * channels;
                if (ow >= first_inner && ow <= last_inner) {
                    for (int kw = 0; kw < kernel; kw++)
                        sums[kw] = _mm256_fmadd_ps(_mm256_loadu_ps(in + kw * channels), g,
                                                   sums[kw]);
                    continue;
                }
                for (int kw = 0; kw < kernel; kw++) {
                    const int iw = ow - s->padding + kw;
                    if (iw < 0 || iw >= s->in_width) continue;
                    sums[kw] = _mm256_fmadd_ps(_mm256_loadu_ps(in + kw * channels), g, sums[kw]);
                }
            }
            for (int kw = 0; kw < kernel; kw++)
                add_to_doubles(sums[kw], partial + ((size_t)kh * kernel + kw) * channels + c);
        }
    }
}

void cpu_depthwise_backward_weights(Backend *backend, const DepthwisePlan *plan, const Act *x_act,
                                    const Act *dy_act, float *dw, float *dbias) {
    const DepthwiseShape *s = &plan->shape;
    const float *x = (const float *)x_act, *dy = (const float *)dy_act;
    const size_t in_sample = (size_t)s->in_height * s->in_width * s->channels;
    const size_t out_row = (size_t)s->out_width * s->channels;
    const size_t sums = ((size_t)s->kernel * s->kernel + 1) * s->channels;
    const int rows = s->batch * s->out_height;
    const int avx2 = plan->avx2 && s->kernel <= DW_MAX_TAPS;
    int team = cpu_team(backend, (size_t)rows * out_row * s->kernel);
    if (team > plan->threads) team = plan->threads;
    double *partials = plan->partials;
#pragma omp parallel num_threads(team)
    {
        double *mine = partials + (size_t)thread_index() * sums;
        memset(mine, 0, sums * sizeof *mine);
#pragma omp for schedule(static)
        for (int r = 0; r < rows; r++) {
            const float *x_sample = x + (size_t)(r / s->out_height) * in_sample;
            const float *dy_row = dy + (size_t)r * out_row;
            if (avx2)
                weight_row_avx2(s, x_sample, dy_row, r % s->out_height, mine);
            else
                weight_row_generic(s, x_sample, dy_row, r % s->out_height, mine);
        }
        // (the implicit barrier: every thread's sums are complete)
#pragma omp for schedule(static)
        for (size_t i = 0; i < sums; i++) {
            double total = 0.0;
            for (int t = 0; t < team; t++) total += partials[(size_t)t * sums + i];
            const size_t weights = sums - (size_t)s->channels;
            if (i < weights) dw[i] += (float)total;
            else if (dbias) dbias[i - weights] += (float)total;
        }
    }
}
