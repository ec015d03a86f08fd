// What the emulated cuBLAS (emu_cublas.c) and cuBLASLt (emu_cublaslt.c)
// share: values of the three element types they take, widened to float and
// rounded back to nearest even (util/half.c), and the emulated runtime's
// view of device memory and streams (emu_cuda_api.cpp), so that a library
// call handed a host pointer, or a matrix running past its allocation,
// fails as on a GPU instead of computing on it.
#ifndef LTC_TESTS_CUDA_EMU_BLAS_H
#define LTC_TESTS_CUDA_EMU_BLAS_H

#include <cuda_runtime_api.h>
#include <library_types.h>
#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

// CUDA_R_16F, CUDA_R_16BF or CUDA_R_32F: 1; any other type 0.
int emu_blas_known_type(cudaDataType_t type);
size_t emu_blas_type_bytes(cudaDataType_t type);
// Element i of p, of a known type, as float; and v stored there, rounded once.
float emu_blas_load(const void *p, cudaDataType_t type, size_t i);
void emu_blas_store(void *p, cudaDataType_t type, size_t i, float v);

// The fp32 sums of a product op(A) (m, k) times op(B) (k, n), each one the
// k products added in k order from 0, as cuBLAS's emulation has always
// summed: sum (i, j) at [j * m + i] of a malloc'd array (the caller frees
// it; NULL when out of memory). op(A)[i, l] is a[i * a_row + l * a_col],
// op(B)[l, j] is b[l * b_row + j * b_col].
float *emu_blas_sums(size_t m, size_t n, size_t k, const void *a, cudaDataType_t a_type,
                     size_t a_row, size_t a_col, const void *b, cudaDataType_t b_type,
                     size_t b_row, size_t b_col);

// Bytes a column-major (rows, cols) matrix with leading dimension ld spans
// (0 when empty).
size_t emu_blas_matrix_bytes(cudaDataType_t type, size_t rows, size_t cols, size_t ld);
// 1 when [p, p + bytes) is device memory; else 0 with a message on stderr
// naming the call and what (`what`) it was handed.
int emu_blas_on_device(const char *call, const char *what, const void *p, size_t bytes);

// 1 when [p, p + bytes) lies inside one allocation of emulated device memory.
int ltc_emu_device_range(const void *p, size_t bytes);
// p's offset from the start of its allocation, or -1 outside device memory:
// an address's alignment as a GPU's would be (cudaMalloc aligns to 256
// bytes; the emulation's allocations end on a guard page instead).
long long ltc_emu_device_offset(const void *p);
// 1 for the default stream and streams created and not yet destroyed.
int ltc_emu_stream_valid(cudaStream_t stream);
// A library call queued on `stream` (emu_capture.cpp). Keeps a copy of the
// `bytes` at `arguments` (the call's scalars, descriptors and pointers,
// fixed at the call) and returns 1: while `stream` captures, every launch
// of the graph runs `run` on that copy; otherwise the stream's queue runs
// it once (emu_streams.cpp); 0 from `run`: it worked; LTC_EMU_NOT_READY:
// not yet (it waits for another process: an emulated NCCL peer), to be run
// again later on the same copy (where it keeps its progress); anything else
// fails the graph launch or sets the error cudaGetLastError returns, with a
// message naming `call`. Returns 0 where the call runs now (the legacy
// default stream; LTC_EMU_STREAMS=immediate): the caller runs it, until
// done.
enum { LTC_EMU_NOT_READY = 2 };
int ltc_emu_capture_call(cudaStream_t stream, const char *call,
                         int (*run)(const void *arguments), const void *arguments, size_t bytes);
// Runs every stream's queue (emu_streams.cpp): before a descriptor that
// queued calls may still read is destroyed.
void ltc_emu_streams_flush(void);
// `stream` is handed to a library (cudnnSetStream, cublasSetStream, a
// cublasLtMatmul): a compute stream (LTC_EMU_STREAMS=compute-at-once).
void ltc_emu_stream_computes(cudaStream_t stream);
// 1 when `stream` captures (emu_capture.cpp) and the library call `call`
// cannot be recorded into graphs: it refuses, invalidating the capture
// with a message naming the call; 0 otherwise (the call runs now).
int ltc_emu_refuse_capture(const char *call, cudaStream_t stream);

#ifdef __cplusplus
}
#endif

#endif
