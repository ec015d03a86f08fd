// Test helper: the checks every backward op gets (tests/test_backend_ref_grad.c,
// tests/test_backend_transformer_grad.c): the analytic gradient against
// central finite differences of the forward, and the gradient contract of
// backend.h (activation gradients overwrite, parameter gradients accumulate).
// Tensors come from fixture_tensor (backend_fixture.h). The functions return
// what failed (0: all good), so this file links without cmocka (the e2e
// helpers link every tests/ helper); the OP_* macros turn them into cmocka
// assertions in a test file.
#ifndef LTC_TESTS_OP_CHECKS_H
#define LTC_TESTS_OP_CHECKS_H

#include <stddef.h>

#include "gradcheck.h"

// Computes the analytic gradient of one problem into gradient (n), with the
// op's own = or += semantics.
typedef void (*OpGradientFunction)(void *problem, float *gradient);

// Gradient from a zeroed buffer against central differences of loss over x
// (n): the number of elements outside tolerance.
size_t op_gradient_failures(const char *label, GradcheckLoss loss, OpGradientFunction gradient,
                            void *problem, float *x, size_t n, GradcheckTolerance tolerance);
// An activation gradient (=) must not depend on what the buffer held: the
// number of elements that do.
size_t op_overwrite_failures(OpGradientFunction gradient, void *problem, size_t n);
// A parameter gradient (+=): two calls give exactly twice one call (t + t is
// exact in float): the number of elements that do not.
size_t op_accumulate_failures(OpGradientFunction gradient, void *problem, size_t n);

#define op_check_gradient(...) assert_int_equal(op_gradient_failures(__VA_ARGS__), 0)
#define op_assert_overwrites(...) assert_int_equal(op_overwrite_failures(__VA_ARGS__), 0)
#define op_assert_accumulates(...) assert_int_equal(op_accumulate_failures(__VA_ARGS__), 0)

#endif
