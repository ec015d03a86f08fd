// Helpers of the tests that run whole method steps (test_method_steps,
// test_cuda_precision, test_gradient_overlap): a backend in a dtype, a
// fixed random uint8 batch for a method's views, copies of backend memory
// and the relative L2 error.
#ifndef LTC_TESTS_METHOD_FIXTURE_H
#define LTC_TESTS_METHOD_FIXTURE_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "ssl_methods/method.h"

// A backend in dtype, or NULL (printing why) for a cuda backend where no
// GPU works: the caller then skips. Any other failure fails the test.
Backend *method_fixture_backend(const char *name, ComputeDtype dtype);

// n floats of backend memory in a new host buffer (free()).
float *method_fixture_download(Backend *backend, const void *device, size_t n);

// ||a - b|| / ||b|| (||a - b|| where b is all zeros).
double method_fixture_relative_error(const float *a, const float *b, size_t n);

// The error of a 16-bit GPU pass against the ref backend in the same dtype
// allowed, given ref's 16-bit error against its fp32 pass: three times that
// (both passes round to 16 bits, in other summation orders where cuDNN and
// cuBLAS pick other algorithms, so each lies about that far from fp32 and
// the GPU's by chance up to twice as far; a wrong kernel moves results by
// O(1)), at least `floor`. Measured on the CPU emulation of the cuda
// backend (test_method_steps, 42 px, batch 6): the GPU-side error reached
// 1.5 times ref's own (BYOL's projection head in fp16), below 1 elsewhere.
double method_fixture_allowed_error(double sixteen_bit_error, double floor);
// The floor for a scalar (a loss): 16 units of roundoff of dtype (fp16
// 2^-11, bf16 2^-8). One number can land near fp32 by chance in ref's pass
// and not in the GPU's (the emulation: SimCLR's bf16 loss at 32 px, ref
// 1.6e-3 from fp32, the emulated GPU 2.9e-2 from ref).
double method_fixture_scalar_floor(ComputeDtype dtype);

// A batch of `size` samples for the method's views, uint8 values drawn from
// seed 11 (view v from stream v): the same bytes on every run. Its geometry
// is what load_plan draws for a 200 x 160 image per sample (seed 11, key:
// the sample), so coupled views lie where the loader would put them. Free
// with method_fixture_batch_free.
typedef struct MethodFixtureBatch {
    Batch batch;
    uint8_t *pixels[AUGMENT_MAX_VIEWS];
    ViewGeometry *geometry;
} MethodFixtureBatch;

void method_fixture_batch(const Method *method, int size, MethodFixtureBatch *out);
void method_fixture_batch_free(MethodFixtureBatch *batch);

// The method arguments that keep a method small (heads of a few dozen
// units, a short queue; distillation's teacher_arg, "teacher=PATH"), into
// args (at least 4); returns their count.
int method_fixture_small_args(MethodKind kind, const char *teacher_arg, const char **args);

// A random ViT (seed 1, the ref backend) of spec, built for one input of
// `resolution` px, saved into a new temporary file: path (at least 64
// bytes) and arg ("teacher=PATH", at least 96 bytes) for the distillation
// methods. 0, or -1 with the reason on stderr.
int method_fixture_write_teacher(const BackboneSpec *spec, int resolution, char *path,
                                 char *arg);

#endif
