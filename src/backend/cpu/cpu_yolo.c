// The cpu backend's ops of Ultralytics' YOLO models (backend.h): SiLU (AVX2
// with vector_exp_avx2 where it runs), split across threads in contiguous
// ranges; fp32 arithmetic where ref uses double
// (tests/test_backend_yolo_ops.c bounds the difference). C2PSA's position
// encoding runs on the depthwise ops (cpu_depthwise.c).
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
