// Test helper for comparing a fast backend (cpu, cuda) with the ref backend
// (the oracle), op by op. Buffers live in host memory (the ref backend's);
// the fast backend works on a device twin of each (the same memory for cpu):
// D(x) hands an op the twin with the host contents uploaded, H(y) brings an
// output back. Every test of such a file runs once per fast backend: one
// cmocka group each (mirror_run_groups), the cuda group skipped (reported,
// not passed) where no GPU works.
//
// Activations: DA(x) / HA(y) are D / H for an `Act` argument. In the fp32
// groups they are D and H. A file whose tests pass every activation through
// DA / HA also runs in two 16-bit groups (mirror_run_groups_16bit): cuda in
// fp16 and in bf16 against ref in the same dtype (ref rounds what its ops
// write, backend.h), where DA converts the host fp32 values to the dtype
// (rounded to nearest even, util/half.c) into an activation twin of 2 bytes
// per element and HA widens them back. There the random and copied test
// tensors are rounded to the dtype when made, so both backends read the
// same inputs; mirror_round rounds an expectation computed on the host.
#ifndef LTC_TESTS_BACKEND_MIRROR_H
#define LTC_TESTS_BACKEND_MIRROR_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

struct CMUnitTest;

// The group's backends: fast is NULL where the group's backend could not
// be made (NEED_FAST_BACKEND skips then).
extern Backend *fast, *ref;

// bytes of host memory with a device twin, freed by mirror_free (the
// per-test teardown); at most 64 per test.
void *mirror_buffer(size_t bytes);
float *mirror_tensor(size_t n);
// Filled uniformly in [low, high) from seed.
float *mirror_random_tensor(size_t n, float low, float high, uint64_t seed);
float *mirror_copy(const float *x, size_t n);
// All NaN: an output element an op forgets to write fails the comparison.
float *mirror_nan_tensor(size_t n);
int mirror_free(void **state);

// The device twin of host buffer p (or of the same place inside it), with
// the whole buffer's host contents uploaded first. NULL stays NULL.
void *D(const void *p);
// Brings the twin of the buffer holding p back into host memory.
void H(const void *p);
// The same for activations (see above); DA(NULL) is NULL.
Act *DA(const void *p);
void HA(const void *p);

// The group's activation dtype (both backends), COMPUTE_F32 in the fp32 groups.
extern ComputeDtype mirror_dtype;
// x (n) rounded to mirror_dtype in place (nothing in fp32): what ref's ops
// do to what they write, for expectations computed on the host.
void mirror_round(float *x, size_t n);
// out (rows, C) = fmaf(x, scale, shift) with a NormAffine's coefficients
// (backend.h) rounded to mirror_dtype: the input of a convolution
// prologue's ReLU, computed on the host.
void mirror_prologue_input(size_t rows, int channels, const float *x, const float *gamma,
                           const float *beta, const float *mean, const float *inv_std,
                           float *out);
// A tolerance of an fp32 comparison widened for the group's dtype: + 2
// units of roundoff (fp16 2^-10, bf16 2^-7), so that two results within the
// fp32 tolerance that round to neighbouring 16-bit values still match; the
// same in fp32.
double mirror_act_tol(double fp32_tol);

// Fails the test when any of the n values differs by more than
// atol + rtol |expected| (gradcheck_count_mismatches prints them).
void mirror_expect_close(const char *label, size_t n, const float *actual, const float *expected,
                         double rtol, double atol);

// 1 when the group's fast backend is the CUDA emulation on the CPU
// (tests/cuda_emu): cases too large for it say so on stderr and are left
// to the GPU run (mirror_emulation_skips).
int mirror_emulated(void);
int mirror_emulation_skips(const char *what);

// The test starts here: skipped, with the reason, where the group's
// backend could not be made.
void mirror_need_fast_backend(void);
#define NEED_FAST_BACKEND() mirror_need_fast_backend()

// (rows, C) matrices for batch norm and column sums: around the cpu
// backend's channel blocks (16 .. 64), its threading threshold, its
// batch-norm row chunks (32, uneven splits between threads), channel strips
// (256) and groups (1024); rows = 1 is batch norm 1d on one sample.
typedef struct NormCase {
    size_t rows;
    int channels;
} NormCase;
#define NORM_CASE_COUNT 8
extern const NormCase norm_cases[NORM_CASE_COUNT];

// Runs tests in a "cpu" group and a "cuda" group; returns the failures.
int mirror_run_groups(const struct CMUnitTest *tests, size_t count);
// The same, then "cuda-fp16" and "cuda-bf16" groups (tests that pass their
// activations through DA / HA).
int mirror_run_groups_16bit(const struct CMUnitTest *tests, size_t count);
// Only the "cuda-fp16" and "cuda-bf16" groups: for a file whose other tests
// (finite differences on ref) hold in fp32 only.
int mirror_run_16bit_groups(const struct CMUnitTest *tests, size_t count);

#endif
