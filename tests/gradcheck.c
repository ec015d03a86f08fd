// Central finite-difference gradient checks for tests (see gradcheck.h).
#include "gradcheck.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "util/rng.h"

size_t gradcheck_compare(const char *label, GradcheckLoss loss, void *context, float *x, size_t n,
                         const float *analytic, GradcheckTolerance tolerance) {
    size_t failures = 0;
    double worst_ratio = 0.0;
    for (size_t i = 0; i < n; i++) {
        const float original = x[i];
        const float plus = original + tolerance.step, minus = original - tolerance.step;
        x[i] = plus;
        const double loss_plus = loss(context, x);
        x[i] = minus;
        const double loss_minus = loss(context, x);
        x[i] = original;
        // Divide by the step actually taken after rounding x +- h to float.
        const double numeric = (loss_plus - loss_minus) / ((double)plus - (double)minus);
        const double error = fabs((double)analytic[i] - numeric);
        const double allowed = tolerance.atol + tolerance.rtol * fabs(numeric);
        if (error / allowed > worst_ratio) worst_ratio = error / allowed;
        if (!(error <= allowed)) {
            if (failures < 5)
                fprintf(stderr,
                        "gradcheck %s: element %zu analytic %.7g numeric %.7g "
                        "(|diff| %.3g > %.3g)\n",
                        label, i, analytic[i], numeric, error, allowed);
            failures++;
        }
    }
    if (failures)
        fprintf(stderr, "gradcheck %s: %zu of %zu elements outside tolerance\n", label, failures,
                n);
    if (getenv("GRADCHECK_VERBOSE"))
        fprintf(stderr, "gradcheck %s: worst |diff| / allowed = %.3g over %zu elements\n", label,
                worst_ratio, n);
    return failures;
}

size_t gradcheck_count_mismatches(const char *label, size_t n, const float *actual,
                                  const float *expected, double rtol, double atol) {
    size_t failures = 0;
    for (size_t i = 0; i < n; i++) {
        const double error = fabs((double)actual[i] - (double)expected[i]);
        if (!(error <= atol + rtol * fabs((double)expected[i]))) {
            if (failures < 5)
                fprintf(stderr, "%s: element %zu is %.8g, expected %.8g\n", label, i, actual[i],
                        expected[i]);
            failures++;
        }
    }
    if (failures) fprintf(stderr, "%s: %zu of %zu elements differ\n", label, failures, n);
    return failures;
}

double gradcheck_project(size_t n, const float *y, const float *projection) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += (double)y[i] * projection[i];
    return total;
}

void gradcheck_fill_uniform(float *x, size_t n, float low, float high, uint64_t seed) {
    Rng rng = rng_make(seed, 0, 0, 0);
    for (size_t i = 0; i < n; i++) x[i] = rng_range(&rng, low, high);
}

void gradcheck_fill_distinct(float *x, size_t n, float offset, float spacing, uint64_t seed) {
    Rng rng = rng_make(seed, 1, 0, 0);
    for (size_t i = 0; i < n; i++) x[i] = offset + spacing * (float)i;
    for (size_t i = n; i > 1; i--) {  // Fisher-Yates
        const size_t j = rng_below(&rng, (uint32_t)i);
        const float t = x[i - 1];
        x[i - 1] = x[j];
        x[j] = t;
    }
}

size_t gradcheck_count_outside_truth(const char *label, size_t n, const float *ours,
                                     const double *truth, double f32err) {
    double scale = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(truth[i]));
    const double allowed = 4.0 * f32err + 1e-6 * scale;
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < n; i++) {
        const double diff = fabs((double)ours[i] - truth[i]);
        worst = fmax(worst, diff / allowed);
        if (!(diff <= allowed)) {
            if (bad < 4)
                fprintf(stderr, "%s[%zu]: ours %.9g truth %.9g (|diff| %.3g > %.3g)\n", label, i,
                        (double)ours[i], truth[i], diff, allowed);
            bad++;
        }
    }
    if (getenv("GRADCHECK_VERBOSE"))
        fprintf(stderr, "%s: worst |diff| / allowed = %.3g\n", label, worst);
    return bad;
}
