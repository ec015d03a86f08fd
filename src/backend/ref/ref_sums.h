// Up to REF_SUMS double sums carried side by side by the ref backend's
// matrix product and convolutions: each output keeps its own sum over the
// same terms in the same order as one output at a time would, so the
// results are those of the one-at-a-time loops bit for bit (a product of
// two floats is exact in double), but one pass over the shared operand
// feeds eight outputs whose other operands lie next to each other, which
// the compiler keeps in registers (named fields: as an array it kept them
// in memory). test_method_steps' dinov31, simclr and distillation cpu
// cases: 20.0 s -> 11.4-12.0 s (2-core AMD EPYC VM, one at a time).
#ifndef LTC_BACKEND_REF_SUMS_H
#define LTC_BACKEND_REF_SUMS_H

#include <stddef.h>

enum { REF_SUMS = 8 };

typedef struct RefSums {
    double s0, s1, s2, s3, s4, s5, s6, s7;
} RefSums;

// sums[j] += a * b[j * step] for j < width (1 <= width <= REF_SUMS; a
// constant REF_SUMS folds every test away).
static inline void ref_sums_add(RefSums *sums, double a, const float *b, size_t step,
                                int width) {
    sums->s0 += a * b[0];
    if (width > 1) sums->s1 += a * b[step];
    if (width > 2) sums->s2 += a * b[2 * step];
    if (width > 3) sums->s3 += a * b[3 * step];
    if (width > 4) sums->s4 += a * b[4 * step];
    if (width > 5) sums->s5 += a * b[5 * step];
    if (width > 6) sums->s6 += a * b[6 * step];
    if (width > 7) sums->s7 += a * b[7 * step];
}

// The width of the block that starts `left` outputs before the end.
static inline int ref_sums_width(int left) { return left < REF_SUMS ? left : REF_SUMS; }

// out[j] = sums[j] for j < REF_SUMS.
static inline void ref_sums_get(const RefSums *sums, double out[REF_SUMS]) {
    out[0] = sums->s0, out[1] = sums->s1, out[2] = sums->s2, out[3] = sums->s3;
    out[4] = sums->s4, out[5] = sums->s5, out[6] = sums->s6, out[7] = sums->s7;
}

#endif
