// cuBLASLt, opened at run time (see util/dynamic_library.h) when a cuda
// backend is made, like cuBLAS and cuDNN: a CPU-only machine never loads it.
// The cuda backend runs the 16-bit linear layers with a bias on it
// (cuda_blas_lt.c).
#ifndef LTC_BACKEND_CUDA_CUBLASLT_LIBRARY_H
#define LTC_BACKEND_CUDA_CUBLASLT_LIBRARY_H

#include "util/error.h"

// Loads libcublasLt.so.<the cuBLAS major of the headers> once and resolves
// every function the backend calls; 0, or -1 with the reason (the library
// missing, or a symbol it lacks, named).
int cublaslt_library_open(ErrorMessage *err);

// The soname it loads, for --version.
const char *cublaslt_library_file(void);

#endif
