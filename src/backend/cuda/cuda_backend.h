// The CUDA backend: every op of backend.h on an NVIDIA GPU, convolutions
// through cuDNN, matrix products through cuBLAS, the rest as kernels of our
// own (src/backend/cuda/*.cu). fp32 storage with fp32 arithmetic (TF32 off:
// cuDNN and cuBLAS are told to use plain FMA), so results match the ref
// backend within fp32 rounding; the mixed-precision storage of issue 9 comes
// on top of this. Built only when the CUDA toolkit, cuDNN and NCCL are found
// (Makefile); without a usable GPU, creation fails with the reason.
#ifndef LTC_BACKEND_CUDA_H
#define LTC_BACKEND_CUDA_H

#include <stddef.h>

#include "backend/backend.h"

// The number of usable CUDA devices; 0 with the reason in `reason` (no
// driver, a driver too old for this build's runtime, no device, ...).
int cuda_device_count(char *reason, size_t size);

// A backend on `device` (0-based). NULL with the reason when the device
// cannot be used.
Backend *cuda_backend_create(int device, ErrorMessage *err);

// The stream every op of a cuda backend runs on (a cudaStream_t), for the
// NCCL communicator's overlap (dist/comm_nccl.c).
void *cuda_backend_stream(const Backend *backend);

// The cuBLAS soname a backend opens when it is made (cuda_gemm.c).
const char *cuda_blas_library_file(void);

#endif
