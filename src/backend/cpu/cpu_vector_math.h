// Eight-lane AVX2 + FMA versions of the libm functions the cpu backend's
// hot loops need, for callers compiled with the same target (functions
// declared __attribute__((target("avx2,fma"))), chosen at run time with
// cpu_has_avx2()). Written here rather than taken from a library: the only
// vector libm at hand (glibc's libmvec) has no erfc, and these two are
// small.
//   vector_exp_avx2: Cephes' expf (range reduction by ln 2, degree-5
//     polynomial), within 2 ulp of expf; inputs clamped to +-88.376.
//   vector_normal_cdf_avx2: Phi(x) = erfc(-x / sqrt 2) / 2 (the exact
//     GELU's gate) and the normal density, from our own fits of erf and
//     erfc (tools/fit_normal_cdf.py: the coefficients, their errors and
//     the float evaluation's error against mpmath): within 8 + 1.25 x^2 float
//     roundings of the true values (tests/test_cpu_vector_math.c; the x^2
//     part is exp's argument rounded once, in the left tail where Phi is
//     small).
#ifndef LTC_BACKEND_CPU_VECTOR_MATH_H
#define LTC_BACKEND_CPU_VECTOR_MATH_H

#include <immintrin.h>

#define VECTOR_MATH_TARGET __attribute__((target("avx2,fma")))

VECTOR_MATH_TARGET static inline __m256 vector_exp_avx2(__m256 v) {
    const __m256 high = _mm256_set1_ps(88.3762626647949f), low = _mm256_set1_ps(-88.3762626647949f);
    const __m256 log2e = _mm256_set1_ps(1.44269504088896341f), half = _mm256_set1_ps(0.5f);
    const __m256 ln2_high = _mm256_set1_ps(0.693359375f), ln2_low = _mm256_set1_ps(-2.12194440e-4f);
    // min/max with the constant first keep a NaN (they return the second operand).
    v = _mm256_max_ps(low, _mm256_min_ps(high, v));
    const __m256 n_float = _mm256_floor_ps(_mm256_fmadd_ps(v, log2e, half));
    v = _mm256_fnmadd_ps(n_float, ln2_high, v);
    v = _mm256_fnmadd_ps(n_float, ln2_low, v);
    __m256 p = _mm256_set1_ps(1.9875691500e-4f);
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(1.3981999507e-3f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(8.3334519073e-3f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(4.1665795894e-2f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(1.6666665459e-1f));
    p = _mm256_fmadd_ps(p, v, _mm256_set1_ps(5.0000001201e-1f));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(v, v), _mm256_add_ps(v, _mm256_set1_ps(1.0f)));
    const __m256i exponent = _mm256_slli_epi32(
        _mm256_add_epi32(_mm256_cvttps_epi32(n_float), _mm256_set1_epi32(127)), 23);
    return _mm256_mul_ps(p, _mm256_castsi256_ps(exponent));
}

// Phi(x) with z = -x / sqrt 2, a = |z|, Phi = erfc(z) / 2:
//   a < 0.75:  erfc(z) = 1 - z P(z^2), P a degree-5 fit of erf(z) / z;
//   a >= 0.75: erfc(a) = t exp(G(t) - a^2), t = 1 / (1 + a / 2), G a
//              degree-8 fit of log(erfc(a)) + a^2 - log t on [0.75, 10]
//              (a clamped to 10: erfc(10) ~ 2e-45); erfc(-a) = 2 - erfc(a).
// a^2 is split into its float product and that product's rounding error
// (one FMA), so exp's argument is exact to a float's precision.
// *density (when not NULL): exp(-x^2 / 2) / sqrt(2 pi). NaN stays NaN.
VECTOR_MATH_TARGET static inline __m256 vector_normal_cdf_avx2(__m256 x, __m256 *density) {
    const __m256 z = _mm256_mul_ps(x, _mm256_set1_ps(-0.70710678118654752f));
    const __m256 sign_bit = _mm256_set1_ps(-0.0f);
    const __m256 a = _mm256_min_ps(_mm256_set1_ps(10.0f), _mm256_andnot_ps(sign_bit, z));
    const __m256 square = _mm256_mul_ps(a, a);
    const __m256 square_error = _mm256_fmsub_ps(a, a, square);

    const __m256 s = _mm256_mul_ps(z, z);
    __m256 erf_over_z = _mm256_set1_ps(-6.749739404767752e-4f);
    erf_over_z = _mm256_fmadd_ps(erf_over_z, s, _mm256_set1_ps(5.114380735903978e-3f));
    erf_over_z = _mm256_fmadd_ps(erf_over_z, s, _mm256_set1_ps(-2.6834644377231598e-2f));
    erf_over_z = _mm256_fmadd_ps(erf_over_z, s, _mm256_set1_ps(1.1283376812934875e-1f));
    erf_over_z = _mm256_fmadd_ps(erf_over_z, s, _mm256_set1_ps(-3.761261999607086e-1f));
    erf_over_z = _mm256_fmadd_ps(erf_over_z, s, _mm256_set1_ps(1.1283791065216064f));
    const __m256 erfc_near = _mm256_fnmadd_ps(z, erf_over_z, _mm256_set1_ps(1.0f));

    const __m256 t = _mm256_div_ps(_mm256_set1_ps(1.0f),
                                   _mm256_fmadd_ps(a, _mm256_set1_ps(0.5f), _mm256_set1_ps(1.0f)));
    __m256 g = _mm256_set1_ps(-1.727866232395172e-1f);
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(4.191502630710602e-1f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(-1.30585715174675e-1f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(-3.175365626811981e-1f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(4.7232165932655334e-2f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(3.616509586572647e-2f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(3.8415470719337463e-1f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(9.990614652633667e-1f));
    g = _mm256_fmadd_ps(g, t, _mm256_set1_ps(-1.265472412109375f));
    const __m256 erfc_a =
        _mm256_mul_ps(t, vector_exp_avx2(_mm256_sub_ps(_mm256_sub_ps(g, square), square_error)));
    const __m256 z_negative = _mm256_cmp_ps(z, _mm256_setzero_ps(), _CMP_LT_OQ);
    const __m256 erfc_far =
        _mm256_blendv_ps(erfc_a, _mm256_sub_ps(_mm256_set1_ps(2.0f), erfc_a), z_negative);
    const __m256 near = _mm256_cmp_ps(a, _mm256_set1_ps(0.75f), _CMP_LT_OQ);
    const __m256 erfc_z = _mm256_blendv_ps(erfc_far, erfc_near, near);

    if (density)
        *density = _mm256_mul_ps(_mm256_set1_ps(0.39894228040143268f),
                                 vector_exp_avx2(_mm256_sub_ps(_mm256_sub_ps(_mm256_setzero_ps(),
                                                                             square),
                                                               square_error)));
    return _mm256_mul_ps(_mm256_set1_ps(0.5f), erfc_z);
}

#endif
