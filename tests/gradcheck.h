// Test helper: central finite-difference checks of analytic gradients.
// A test writes its loss as a scalar function of one float vector (usually a
// random projection <p, forward(x)> accumulated in double), computes the
// analytic gradient with the backward op, and asks gradcheck_compare whether
// they agree within |analytic - numeric| <= atol + rtol * |numeric|.
#ifndef LTC_TESTS_GRADCHECK_H
#define LTC_TESTS_GRADCHECK_H

#include <stddef.h>
#include <stdint.h>

// The scalar loss at x (n); x is the vector being perturbed in place.
typedef double (*GradcheckLoss)(void *context, const float *x);

typedef struct GradcheckTolerance {
    float step;   // h of (f(x + h) - f(x - h)) / 2h
    double rtol;  // relative to |numeric|
    double atol;
} GradcheckTolerance;

// Checks analytic (n) = d loss / d x (n) element by element, perturbing x[i]
// and restoring it afterwards. Prints up to a few mismatches (naming label)
// to stderr and returns how many elements failed (0 = all agree). With
// GRADCHECK_VERBOSE set in the environment it also prints the largest
// |diff| / allowed seen, to see how much margin a tolerance leaves.
size_t gradcheck_compare(const char *label, GradcheckLoss loss, void *context, float *x, size_t n,
                         const float *analytic, GradcheckTolerance tolerance);

// Counts elements with |actual - expected| > atol + rtol * |expected| (NaN
// counts), printing the first few with label: for forward checks.
size_t gradcheck_count_mismatches(const char *label, size_t n, const float *actual,
                                  const float *expected, double rtol, double atol);

// <projection, y> over n elements, accumulated in double: the usual loss.
double gradcheck_project(size_t n, const float *y, const float *projection);

// Deterministic uniform fill in [low, high) from a seed.
void gradcheck_fill_uniform(float *x, size_t n, float low, float high, uint64_t seed);

// Fills x (n) with distinct values: a seeded random permutation of
// offset + spacing * {0 .. n-1} (no ties for max pooling).
void gradcheck_fill_distinct(float *x, size_t n, float offset, float spacing, uint64_t seed);

// Counts elements of ours (n) outside |ours - truth| <= 4 f32err + 1e-6
// max|truth|, where truth is a float64 reference (a PyTorch fixture) and
// f32err how far PyTorch's own float32 run lands from it: a correct float32
// implementation rounds differently but at the same scale (4x for margin, as
// tests/test_resnet.c); the relative floor covers an f32err of 0 or tiny.
// Prints the first few violations under label (and the worst ratio when
// GRADCHECK_VERBOSE is set).
size_t gradcheck_count_outside_truth(const char *label, size_t n, const float *ours,
                                     const double *truth, double f32err);

#endif
