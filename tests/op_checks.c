// The shared gradient checks of backward ops (see op_checks.h).
#include "op_checks.h"

#include <stdio.h>
#include <string.h>

#include "backend_fixture.h"

size_t op_gradient_failures(const char *label, GradcheckLoss loss, OpGradientFunction gradient,
                            void *problem, float *x, size_t n, GradcheckTolerance tolerance) {
    float *analytic = fixture_tensor(n);
    memset(analytic, 0, n * sizeof(float));
    gradient(problem, analytic);
    return gradcheck_compare(label, loss, problem, x, n, analytic, tolerance);
}

size_t op_overwrite_failures(OpGradientFunction gradient, void *problem, size_t n) {
    float *from_zero = fixture_tensor(n), *from_garbage = fixture_tensor(n);
    memset(from_zero, 0, n * sizeof(float));
    for (size_t i = 0; i < n; i++) from_garbage[i] = 7.0f;
    gradient(problem, from_zero);
    gradient(problem, from_garbage);
    size_t failures = 0;
    for (size_t i = 0; i < n; i++) failures += memcmp(&from_zero[i], &from_garbage[i], 4) != 0;
    if (failures)
        fprintf(stderr, "%zu of %zu gradient elements depend on the buffer\n", failures, n);
    return failures;
}

size_t op_accumulate_failures(OpGradientFunction gradient, void *problem, size_t n) {
    float *once = fixture_tensor(n), *twice = fixture_tensor(n);
    memset(once, 0, n * sizeof(float));
    memset(twice, 0, n * sizeof(float));
    gradient(problem, once);
    gradient(problem, twice);
    gradient(problem, twice);
    size_t failures = 0;
    for (size_t i = 0; i < n; i++) failures += !(twice[i] == 2.0f * once[i]);
    if (failures) fprintf(stderr, "%zu of %zu gradient elements do not accumulate\n", failures, n);
    return failures;
}
