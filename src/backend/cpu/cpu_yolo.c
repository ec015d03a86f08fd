// The cpu backend's ops of Ultralytics' YOLO models (backend.h): SiLU (AVX2
// with vector_exp_avx2 where it runs) and the depthwise convolution of
// C2PSA's position encoding. Output rows split
// across threads, the channels of a pixel vectorised; fp32 arithmetic where
// ref uses double (tests/test_backend_yolo_ops.c bounds the difference).
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include <omp.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

// SiLU in eight-lane blocks (vector_exp_avx2: within 2 ulp of expf) where
// AVX2 runs, expf otherwise; each thread takes a contiguous range.
VECTOR_MATH_TARGET static void silu_forward_avx2(size_t begin, size_t end, const float *x,
                                                 float *y) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        const __m256 e = vector_exp_avx2(_mm256_sub_ps(zero, a));
        _mm256_storeu_ps(y + i, _mm256_div_ps(a, _mm256_add_ps(one, e)));
    }
    for (; i < end; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

VECTOR_MATH_TARGET static void silu_backward_avx2(size_t begin, size_t end, const float *x,
                                                  const float *dy, float *dx) {
    const __m256 one = _mm256_set1_ps(1.0f), zero = _mm256_setzero_ps();
    size_t i = begin;
    for (; i + 8 <= end; i += 8) {
        const __m256 a = _mm256_loadu_ps(x + i);
        const __m256 s = _mm256_div_ps(one, _mm256_add_ps(one, vector_exp_avx2(_mm256_sub_ps(zero, a))));
        // s (1 + a (1 - s))
        const __m256 slope = _mm256_mul_ps(s, _mm256_fmadd_ps(a, _mm256_sub_ps(one, s), one));
        _mm256_storeu_ps(dx + i, _mm256_mul_ps(_mm256_loadu_ps(dy + i), slope));
    }
    for (; i < end; i++) {
        const float a = x[i], s = 1.0f / (1.0f + expf(-a));
        dx[i] = dy[i] * (s * (1.0f + a * (1.0f - s)));
    }
}

void cpu_silu_row(const float *x, float *y, size_t n) {
    if (cpu_has_avx2()) {
        silu_forward_avx2(0, n, x, y);
        return;
    }
    for (size_t i = 0; i < n; i++) y[i] = x[i] / (1.0f + expf(-x[i]));
}

void cpu_silu_backward_row(const float *x, const float *dy, float *dx, size_t n) {
    if (cpu_has_avx2()) {
        silu_backward_avx2(0, n, x, dy, dx);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        const float a = x[i], s = 1.0f / (1.0f + expf(-a));
        dx[i] = dy[i] * (s * (1.0f + a * (1.0f - s)));
    }
}

// The [begin, end) share of thread t of team over n elements (multiples of 8).
static void share(size_t n, int team, int t, size_t *begin, size_t *end) {
    const size_t chunk = (n / (size_t)team + 7) & ~(size_t)7;
    *begin = chunk * (size_t)t < n ? chunk * (size_t)t : n;
    *end = *begin + chunk < n ? *begin + chunk : n;
}

void cpu_silu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, n);
#pragma omp parallel num_threads(team)
    {
        size_t begin, end;
        share(n, team, omp_get_thread_num(), &begin, &end);
        cpu_silu_row(x + begin, y + begin, end - begin);
    }
}

void cpu_silu_backward(Backend *backend, size_t n, const Act *x_act, const Act *dy_act,
                       Act *dx_act) {
    const float *x = (const float *)x_act, *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int team = cpu_team(backend, n);
#pragma omp parallel num_threads(team)
    {
        size_t begin, end;
        share(n, team, omp_get_thread_num(), &begin, &end);
        cpu_silu_backward_row(x + begin, dy + begin, dx + begin, end - begin);
    }
}

// One output row (n, oh): y[ow, c] = sum over the taps, the channels of a
// pixel in the inner (vectorised) loop.
void cpu_depthwise_conv2d_forward(Backend *backend, const ConvShape *s, const Act *x_act,
                                  const Act *w_act, Act *y_act) {
    const float *x = (const float *)x_act, *w = (const float *)w_act;
    float *y = (float *)y_act;
    const int C = s->in_channels, K = s->kernel;
    const size_t rows = (size_t)s->batch * s->out_height;
    const int team = cpu_team(backend, rows * s->out_width * C * K * K);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const int n = (int)(r / s->out_height), oh = (int)(r % s->out_height);
        for (int ow = 0; ow < s->out_width; ow++) {
            float *out = y + (r * s->out_width + ow) * C;
            memset(out, 0, (size_t)C * sizeof *out);
            for (int kh = 0; kh < K; kh++) {
                const int ih = oh * s->stride - s->padding + kh;
                if (ih < 0 || ih >= s->in_height) continue;
                for (int kw = 0; kw < K; kw++) {
                    const int iw = ow * s->stride - s->padding + kw;
                    if (iw < 0 || iw >= s->in_width) continue;
                    const float *in = x + (((size_t)n * s->in_height + ih) * s->in_width + iw) * C;
                    const float *tap = w + kh * K + kw;
#pragma omp simd
                    for (int c = 0; c < C; c++) out[c] += in[c] * tap[(size_t)c * K * K];
                }
            }
        }
    }
}

// One input row (n, ih): each dx gathers the outputs that read it.
void cpu_depthwise_conv2d_backward_data(Backend *backend, const ConvShape *s, const Act *dy_act,
                                        const Act *w_act, Act *dx_act) {
    const float *dy = (const float *)dy_act, *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    const int C = s->in_channels, K = s->kernel;
    const size_t rows = (size_t)s->batch * s->in_height;
    const int team = cpu_team(backend, rows * s->in_width * C * K * K);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const int n = (int)(r / s->in_height), ih = (int)(r % s->in_height);
        for (int iw = 0; iw < s->in_width; iw++) {
            float *out = dx + (r * s->in_width + iw) * C;
            memset(out, 0, (size_t)C * sizeof *out);
            for (int kh = 0; kh < K; kh++) {
                const int row = ih + s->padding - kh;
                if (row < 0 || row % s->stride || row / s->stride >= s->out_height) continue;
                const int oh = row / s->stride;
                for (int kw = 0; kw < K; kw++) {
                    const int col = iw + s->padding - kw;
                    if (col < 0 || col % s->stride || col / s->stride >= s->out_width) continue;
                    const int ow = col / s->stride;
                    const float *g =
                        dy + (((size_t)n * s->out_height + oh) * s->out_width + ow) * C;
                    const float *tap = w + kh * K + kw;
#pragma omp simd
                    for (int c = 0; c < C; c++) out[c] += g[c] * tap[(size_t)c * K * K];
                }
            }
        }
    }
}

// Per channel block: the sum over every output pixel of x under the tap times dy.
void cpu_depthwise_conv2d_backward_weights(Backend *backend, const ConvShape *s,
                                           const Act *x_act, const Act *dy_act, float *dw) {
    const float *x = (const float *)x_act, *dy = (const float *)dy_act;
    const int C = s->in_channels, K = s->kernel;
    enum { BLOCK = 16 };
    const int blocks = (C + BLOCK - 1) / BLOCK;
    const int team = cpu_team(backend, (size_t)s->batch * s->out_height * s->out_width * C * K * K);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int block = 0; block < blocks; block++) {
        const int c0 = block * BLOCK, width = C - c0 < BLOCK ? C - c0 : BLOCK;
        for (int kh = 0; kh < K; kh++)
            for (int kw = 0; kw < K; kw++) {
                float sum[BLOCK] = {0};
                for (int n = 0; n < s->batch; n++)
                    for (int oh = 0; oh < s->out_height; oh++) {
                        const int ih = oh * s->stride - s->padding + kh;
                        if (ih < 0 || ih >= s->in_height) continue;
                        for (int ow = 0; ow < s->out_width; ow++) {
                            const int iw = ow * s->stride - s->padding + kw;
                            if (iw < 0 || iw >= s->in_width) continue;
                            const float *in = x + (((size_t)n * s->in_height + ih) * s->in_width +
                                                   iw) * C + c0;
                            const float *g = dy + (((size_t)n * s->out_height + oh) * s->out_width +
                                                   ow) * C + c0;
                            for (int c = 0; c < width; c++) sum[c] += in[c] * g[c];
                        }
                    }
                for (int c = 0; c < width; c++) dw[((size_t)(c0 + c) * K + kh) * K + kw] += sum[c];
            }
    }
}
