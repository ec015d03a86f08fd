// The cpu backend's depthwise convolution (backend.h; ConvNeXt's 7x7 and
// YOLO's 3x3 on NHWC activations, (K, K, C) weights). Forward and backward data run on
// oneDNN's grouped convolution (cpu_depthwise_dnnl.c); the weight gradient
// is ours, oneDNN's for NHWC activations being a generic kernel several
// times slower (tools/bench_convnext_ops.c). Threads split the output rows
// (n, oh) in contiguous ranges.
//   AVX2 (channels a multiple of 8, stride 1, K = 7): per output row and
//   channel block, the K input rows gathered with their zero padding into a
//   per-thread ring (no edge cases; one new row per output row), then per
//   kernel row 7 accumulators (one per tap column); each row's fp32 sums
//   added into the thread's double partial sums (plan->partials), which are
//   added up across threads at the end.
//   Otherwise (no AVX2, LTC_SIMD=scalar, other strides, kernels or channel
//   counts): plain loops vectorised over the channels, in double.
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

#define DW_LANES 8  // channels per AVX2 block
#define DW_WEIGHT_TAPS 7  // the kernel width of the AVX2 weight gradient (ConvNeXt's)

struct DepthwisePlan {
    DepthwiseShape shape;
    int threads;          // partial sums made for this many
    int avx2;             // the AVX2 weight gradient takes this shape
    DepthwiseDnnl *dnnl;  // forward and backward data
    double *partials;     // (threads, K K + 1, C): weight-gradient sums per thread, the
                          // bias's last
    float *padded;        // (threads, padded_floats): each thread's ring of padded rows (AVX2)
    size_t padded_floats;
};

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

// The padded rows of one output row and channel block: K input rows (zero
// outside the input) of `span` positions x 8 channels, position j holding
// input column j - padding.
static int padded_span(const DwPass *p) { return p->out_width + p->kernel - 1; }

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
        plan->shape = s;
        const DwPass pass = forward_pass(&s);
        plan->padded_floats = (size_t)(s.channels / DW_LANES + 1) * s.kernel *
                              padded_span(&pass) * DW_LANES;
        plan->partials = malloc((size_t)threads * (taps + 1) * s.channels *
                                sizeof *plan->partials);
        plan->padded = malloc((size_t)threads * plan->padded_floats * sizeof *plan->padded);
    }
    if (!plan || !plan->partials || !plan->padded) {
        cpu_depthwise_plan_free(backend, plan);
        error_set(err, "cpu depthwise plan: out of memory");
        return NULL;
    }
    plan->dnnl = cpu_depthwise_dnnl_make(backend, &s, err);
    if (!plan->dnnl) {
        cpu_depthwise_plan_free(backend, plan);
        return NULL;
    }
    plan->threads = threads;
    plan->avx2 = cpu_has_avx2() && s.channels % DW_LANES == 0 && s.stride == 1 &&
                 s.kernel == DW_WEIGHT_TAPS;
    return plan;
}

void cpu_depthwise_plan_free(Backend *backend, DepthwisePlan *plan) {
    if (!plan) return;
    cpu_depthwise_dnnl_free(plan->dnnl);
    free(plan->partials);
    free(plan->padded);
    free(plan);
}

const char *cpu_depthwise_plan_impl(const DepthwisePlan *plan, int direction) {
    if (direction < 2) return cpu_depthwise_dnnl_impl(plan->dnnl, direction);
    return plan->avx2 ? "ours:avx2" : "ours:generic";
}

void cpu_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x,
                           const Act *w, const float *bias, Act *y) {
    cpu_depthwise_dnnl_forward(backend, plan->dnnl, (const float *)x, (const float *)w, bias,
                               (float *)y);
}

void cpu_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy,
                                 const Act *w, Act *dx) {
    cpu_depthwise_dnnl_backward_data(backend, plan->dnnl, (const float *)dy, (const float *)w,
                                     (float *)dx);
}

// ---- backward weights ------------------------------------------------------------------------

// Input row ih (zeros outside the input) of channels c..c+7 at the slot's
// `span` positions, position j holding input column j - padding.
VECTOR_MATH_TARGET static void gather_row_avx2(const DwPass *p, const float *x, int ih, int c,
                                               float *slot) {
    const int span = padded_span(p);
    const size_t channels = (size_t)p->channels;
    int j = 0;
    if (ih >= 0 && ih < p->in_height) {
        const float *in = x + (size_t)ih * p->in_width * channels + c;
        for (; j < p->padding; j++)
            _mm256_storeu_ps(slot + (size_t)j * DW_LANES, _mm256_setzero_ps());
        for (int iw = 0; iw < p->in_width && j < span; iw++, j++)
            _mm256_storeu_ps(slot + (size_t)j * DW_LANES, _mm256_loadu_ps(in + iw * channels));
    }
    for (; j < span; j++) _mm256_storeu_ps(slot + (size_t)j * DW_LANES, _mm256_setzero_ps());
}

static int ring_slot(int ih, int kernel) { return ((ih % kernel) + kernel) % kernel; }

// The K padded input rows of output row oh for channel block c in `ring`
// (a thread's: per block, K slots, input row ih in slot ih mod K): all K
// gathered when `fresh`, else only the one row the previous output row did
// not need (the caller walks oh up by one). rows[kh] = the row at oh - padding + kh.
VECTOR_MATH_TARGET static void ring_rows_avx2(const DwPass *p, const float *x, int oh, int c,
                                              int fresh, float *ring, const float **rows) {
    const size_t slot_floats = (size_t)padded_span(p) * DW_LANES;
    float *block = ring + (size_t)(c / DW_LANES) * p->kernel * slot_floats;
    for (int kh = fresh ? 0 : p->kernel - 1; kh < p->kernel; kh++) {
        const int ih = oh - p->padding + kh;
        gather_row_avx2(p, x, ih, c, block + ring_slot(ih, p->kernel) * slot_floats);
    }
    for (int kh = 0; kh < p->kernel; kh++)
        rows[kh] = block + ring_slot(oh - p->padding + kh, p->kernel) * slot_floats;
}

// The first and last (exclusive) of `rows` rows for thread `index` of `team`:
// contiguous ranges, so that a thread's output rows follow each other.
static void thread_rows(int rows, int team, int index, int *first, int *last) {
    *first = (int)((long)rows * index / team);
    *last = (int)((long)rows * (index + 1) / team);
}

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

// weight_row_generic at stride 1, channels a multiple of 8, K = 7: per
// channel block the padded input rows (ring_rows_avx2, as the forward's),
// then per kernel row seven accumulators, one per tap column (named: an
// array of them would live in memory).
VECTOR_MATH_TARGET static void weight_row_avx2(const DepthwiseShape *s, const float *x,
                                               const float *dy, int oh, int fresh, float *ring,
                                               double *partial) {
    const DwPass pass = forward_pass(s);
    const int channels = s->channels, kernel = s->kernel;
    const float *rows[DW_WEIGHT_TAPS];
    for (int c = 0; c < channels; c += DW_LANES) {
        ring_rows_avx2(&pass, x, oh, c, fresh, ring, rows);
        __m256 bias_sum = _mm256_setzero_ps();
        for (int ow = 0; ow < s->out_width; ow++)
            bias_sum = _mm256_add_ps(bias_sum, _mm256_loadu_ps(dy + (size_t)ow * channels + c));
        add_to_doubles(bias_sum, partial + (size_t)kernel * kernel * channels + c);
        for (int kh = 0; kh < kernel; kh++) {
            const int ih = oh - s->padding + kh;
            if (ih < 0 || ih >= s->in_height) continue;  // a row of zeros adds nothing
            __m256 s0 = _mm256_setzero_ps(), s1 = s0, s2 = s0, s3 = s0, s4 = s0, s5 = s0, s6 = s0;
            for (int ow = 0; ow < s->out_width; ow++) {
                const __m256 g = _mm256_loadu_ps(dy + (size_t)ow * channels + c);
                const float *in = rows[kh] + (size_t)ow * DW_LANES;
                s0 = _mm256_fmadd_ps(_mm256_loadu_ps(in), g, s0);
                s1 = _mm256_fmadd_ps(_mm256_loadu_ps(in + DW_LANES), g, s1);
                s2 = _mm256_fmadd_ps(_mm256_loadu_ps(in + 2 * DW_LANES), g, s2);
                s3 = _mm256_fmadd_ps(_mm256_loadu_ps(in + 3 * DW_LANES), g, s3);
                s4 = _mm256_fmadd_ps(_mm256_loadu_ps(in + 4 * DW_LANES), g, s4);
                s5 = _mm256_fmadd_ps(_mm256_loadu_ps(in + 5 * DW_LANES), g, s5);
                s6 = _mm256_fmadd_ps(_mm256_loadu_ps(in + 6 * DW_LANES), g, s6);
            }
            double *sums = partial + (size_t)kh * kernel * channels + c;
            add_to_doubles(s0, sums);
            add_to_doubles(s1, sums + channels);
            add_to_doubles(s2, sums + 2 * channels);
            add_to_doubles(s3, sums + 3 * channels);
            add_to_doubles(s4, sums + 4 * channels);
            add_to_doubles(s5, sums + 5 * channels);
            add_to_doubles(s6, sums + 6 * channels);
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
    const int avx2 = plan->avx2 && s->kernel == DW_WEIGHT_TAPS;
    int team = cpu_team(backend, (size_t)rows * out_row * s->kernel);
    if (team > plan->threads) team = plan->threads;
    double *partials = plan->partials;
#pragma omp parallel num_threads(team)
    {
        const int index = cpu_thread_index();
        double *mine = partials + (size_t)index * sums;
        float *ring = plan->padded + (size_t)index * plan->padded_floats;
        memset(mine, 0, sums * sizeof *mine);
        int first, last;
        thread_rows(rows, cpu_thread_count(), index, &first, &last);
        for (int r = first; r < last; r++) {
            const float *x_sample = x + (size_t)(r / s->out_height) * in_sample;
            const float *dy_row = dy + (size_t)r * out_row;
            const int oh = r % s->out_height;
            if (avx2)
                weight_row_avx2(s, x_sample, dy_row, oh, r == first || oh == 0, ring, mine);
            else
                weight_row_generic(s, x_sample, dy_row, oh, mine);
        }
#pragma omp barrier
#pragma omp for schedule(static)
        for (size_t i = 0; i < sums; i++) {
            double total = 0.0;
            for (int t = 0; t < cpu_thread_count(); t++) total += partials[(size_t)t * sums + i];
            const size_t weights = sums - (size_t)s->channels;
            if (i < weights) dw[i] += (float)total;
            else if (dbias) dbias[i - weights] += (float)total;
        }
    }
}
