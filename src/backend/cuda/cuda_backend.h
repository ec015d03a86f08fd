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

// The GPU libraries this process loaded (cuda_libraries.c): the CUDA
// encodings (13000 = 13.0; cuDNN 91900 = 9.19.0), the files the dynamic
// loader took them from ("" when unknown), and what this build was made with.
typedef struct CudaLibraries {
    int driver;      // the CUDA version the driver supports; 0: no driver
    int runtime;     // libcudart
    int cudnn;       // cudnnGetVersion
    int cudnn_cuda;  // the CUDA runtime that cuDNN was built for
    int cublas[3];   // major, minor, patch
    int built_runtime, built_cudnn, built_cublas[3];
    char runtime_path[256], cudnn_path[256], cublas_path[256];
} CudaLibraries;

// Reads the versions (no GPU needed). -1 with a message when cuDNN or
// cuBLAS (both opened with dlopen) cannot be loaded.
int cuda_libraries_read(CudaLibraries *found, ErrorMessage *err);
// 0 when this build can use them: the runtime, cuDNN and cuBLAS of the
// major versions it was built with, and a cuDNN built for that CUDA major
// version; else -1 and one line naming what was loaded, from where, and
// what is needed.
int cuda_libraries_check(const CudaLibraries *found, ErrorMessage *err);
// One line for logs: "NVIDIA driver for CUDA 13.0; CUDA runtime 13.0 (path); cuDNN
// 9.19.0 for CUDA 13.0 (path); cuBLAS 13.1.0 (path)".
void cuda_libraries_describe(const CudaLibraries *found, char *text, size_t size);

// A backend on `device` (0-based). NULL with the reason when the device
// cannot be used (among them GPU libraries that cuda_libraries_check refuses).
Backend *cuda_backend_create(int device, ErrorMessage *err);

// The stream every op of a cuda backend runs on (a cudaStream_t), for the
// NCCL communicator's overlap (dist/comm_nccl.c).
void *cuda_backend_stream(const Backend *backend);

// For the NCCL communicator's work on the device (dist/comm_nccl.c) inside
// a training step captured as a CUDA graph: the backend's queue point
// (cuda_internal.h), which counts the operation and says whether to queue
// it (0 while a replayed step's host side runs: its graph holds the
// operation); and whether a step is being captured now.
int cuda_backend_queue_point(void);
int cuda_backend_capturing(void);
// Records event (a cudaEvent_t) on stream for the host or another stream to
// wait for: inside a stream capture as the graph's own node, recorded at
// every replay (cudaEventRecordExternal); outside one a plain record (the
// driver refuses that flag there).
void cuda_backend_record_for_waiters(void *event, void *stream);

// Bounds the host's waits for this backend's device (dist/comm_nccl.c: a
// dead peer holds a queued collective, and so everything queued behind it,
// for ever): while a wait lasts, watch(arg, seconds waited) is called about
// every millisecond; it returns while the wait may go on and ends the
// process otherwise. NULL: plain waits.
typedef void (*CudaWaitWatch)(void *arg, double seconds);
void cuda_backend_watch_waits(Backend *backend, CudaWaitWatch watch, void *arg);

// The per-step parameter block (cuda_step_params.c), for a step captured
// as a CUDA graph: begin marks the start of a step (its ops take the
// block's slots from the first of a half again, in the same order each
// step; waits until the device has run the copies out of that half);
// host gives the half being filled, `*used` its slots taken so far, which
// the host rewrites before each replay of a graph that captured them.
void cuda_step_params_begin(Backend *backend);
float *cuda_step_params_host(Backend *backend, int *used);

// The training step as CUDA graphs (cuda_step_graph.c; the backend's
// step_graph_begin / step_graph_end ops): steps replayed so far.
int cuda_step_graph_begin(Backend *backend, uint64_t key);
int cuda_step_graph_end(Backend *backend, int launch, ErrorMessage *err);
long cuda_step_graph_replays(const Backend *backend);
// Device memory the backend's alloc op holds now (live) and held at most
// (peak) since the backend was made, and its shared workspace, in bytes
// (cuda_memory.c; the paths line says them in MiB).
void cuda_backend_memory(const Backend *backend, size_t *live, size_t *peak, size_t *workspace);
// The memory_counts op (backend.h): live + workspace, peak + workspace.
void cuda_memory_counts(const Backend *backend, size_t *allocated, size_t *peak);

// The cuBLAS soname a backend opens when it is made (cuda_gemm.c).
const char *cuda_blas_library_file(void);

// How many 16-bit linear layers with a bias (linear_forward calls) this
// backend ran in one cublasLtMatmul with the bias epilogue (fused) and with
// the separate bias pass (LTC_CUDA_LINEAR_BIAS=separate, or shapes cuBLASLt
// has no algorithm for): which path ran, for tests and benchmarks.
void cuda_linear_bias_counts(const Backend *backend, long *fused, long *separate);

#endif
