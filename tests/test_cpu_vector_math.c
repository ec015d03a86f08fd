// The cpu backend's eight-lane libm functions (src/backend/cpu/cpu_vector_math.h)
// against double-precision libm over their whole useful range: Phi(x), the
// exact GELU's gate, and the normal density within a few float roundings of
// the true values at the float argument the code forms (z = -x / sqrt 2 is
// rounded once to float; that rounding is the input's, not the function's);
// exp within 2 ulp; NaN kept; infinities and the far tails where they go.
// Skipped on a CPU without AVX2 (the scalar path there is libm itself).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>

#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

VECTOR_MATH_TARGET static void normal_cdf_lanes(const float x[8], float cdf[8], float density[8]) {
    __m256 d;
    _mm256_storeu_ps(cdf, vector_normal_cdf_avx2(_mm256_loadu_ps(x), &d));
    _mm256_storeu_ps(density, d);
}

VECTOR_MATH_TARGET static void exp_lanes(const float x[8], float y[8]) {
    _mm256_storeu_ps(y, vector_exp_avx2(_mm256_loadu_ps(x)));
}

#define NEED_AVX2()                                         \
    do {                                                    \
        if (!cpu_has_avx2()) {                              \
            print_message("no AVX2 (or LTC_SIMD=scalar)\n"); \
            skip();                                         \
        }                                                   \
    } while (0)

// Phi and the density at x as the vector code sees it: z rounded to float.
static void truth(float x, double *cdf, double *density) {
    const float z = x * -0.70710678118654752f;
    *cdf = 0.5 * erfc((double)z);
    *density = 0.39894228040143268 * exp(-(double)z * (double)z);
}

// Relative error, measured where the true value is a normal float; below,
// the absolute error (the far tails, where x Phi(x) is zero to a float).
static double error_of(double got, double want) {
    return want > 1e-30 ? fabs(got - want) / want : fabs(got - want);
}

// The bound of both, in float roundings (2^-24 relative): 8, plus 2.5 a^2
// (a^2 = x^2 / 2) where exp's argument -a^2 + G, rounded once to a float,
// is large (measured: up to 2 a^2): at x = -4.24 (Phi = 1e-5) that is 30
// roundings, 1.8e-6, where x Phi(x) is 4e-5 and its absolute error 8e-11.
static double roundings_allowed(float x) { return 8.0 + 1.25 * (double)x * x; }

static void test_normal_cdf_and_density_within_a_few_roundings(void **state) {
    (void)state;
    NEED_AVX2();
    double worst_cdf = 0, worst_density = 0;  // in units of the bound
    float worst_at = 0;
    for (int i = 0; i < 1200000; i += 8) {
        float x[8], cdf[8], density[8];
        for (int lane = 0; lane < 8; lane++) x[lane] = -15.0f + (float)(i + lane) * 2.5e-5f;
        normal_cdf_lanes(x, cdf, density);
        for (int lane = 0; lane < 8; lane++) {
            double want_cdf, want_density;
            truth(x[lane], &want_cdf, &want_density);
            const double bound = roundings_allowed(x[lane]) * 0x1p-24;
            const double e = error_of(cdf[lane], want_cdf) / bound;
            if (e > worst_cdf) worst_cdf = e, worst_at = x[lane];
            const double d = error_of(density[lane], want_density) / bound;
            if (d > worst_density) worst_density = d;
        }
    }
    print_message("Phi: worst error %.3g of the bound (at x = %g); density: %.3g of it\n",
                  worst_cdf, (double)worst_at, worst_density);
    assert_true(worst_cdf <= 1.0);
    assert_true(worst_density <= 1.0);
}

static void test_normal_cdf_special_values(void **state) {
    (void)state;
    NEED_AVX2();
    const float x[8] = {NAN, INFINITY, -INFINITY, 0.0f, -0.0f, 40.0f, -40.0f, 1.06066017f};
    float cdf[8], density[8];
    normal_cdf_lanes(x, cdf, density);
    assert_true(isnan(cdf[0]) && isnan(density[0]));
    assert_true(cdf[1] == 1.0f && density[1] < 1e-37f);
    assert_true(cdf[2] >= 0.0f && cdf[2] < 1e-37f && density[2] < 1e-37f);
    assert_true(cdf[3] == 0.5f && cdf[4] == 0.5f);
    assert_true(fabsf(density[3] - 0.398942280f) <= 0x1p-24f);
    assert_true(cdf[5] == 1.0f && cdf[6] < 1e-37f);
    // x = 1.5 / sqrt 2 puts |z| at the 0.75 where the two fits meet.
    double want_cdf, want_density;
    truth(x[7], &want_cdf, &want_density);
    assert_true(error_of(cdf[7], want_cdf) <= 4 * 0x1p-24);
}

static void test_exp_within_two_ulp(void **state) {
    (void)state;
    NEED_AVX2();
    double worst = 0;
    for (int i = 0; i < 400000; i += 8) {
        float x[8], y[8];
        for (int lane = 0; lane < 8; lane++) x[lane] = -87.0f + (float)(i + lane) * 4.35e-4f;
        exp_lanes(x, y);
        for (int lane = 0; lane < 8; lane++) {
            const double want = exp((double)x[lane]);
            const double e = fabs(y[lane] - want) / want;
            if (e > worst) worst = e;
        }
    }
    print_message("exp: worst relative error %.3g\n", worst);
    assert_true(worst <= 2 * 0x1p-23);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_normal_cdf_and_density_within_a_few_roundings),
        cmocka_unit_test(test_normal_cdf_special_values),
        cmocka_unit_test(test_exp_within_two_ulp),
    };
    return cmocka_run_group_tests_name("cpu vector math", tests, NULL, NULL);
}
