// The GPU libraries a process loaded (see cuda_backend.h): their versions,
// the files they came from, and whether they are ones this build can use.
//
// Why a check of our own: on a GPU node the libraries come from wherever
// LD_LIBRARY_PATH points, typically the pip `nvidia-*` packages of a
// PyTorch, whose versions are not ours. The loader matches only the file
// names (libcudnn.so.9, libcublas.so.13), and a cuDNN 9
// built for CUDA 12 has the same name as one for CUDA 13; it would fail
// later, inside some convolution, with a message that names neither. Any
// cuDNN 9, cuBLAS and runtime of our CUDA major version will do: the calls
// we make exist in every minor version of those (a newer minor than the
// one we built with is NVIDIA's compatibility promise; an older one lacks
// nothing we call).
#include <stdio.h>
#include <string.h>

#include <cudnn.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_library.h"
#include "util/dynamic_library.h"

int cuda_libraries_read(CudaLibraries *found, ErrorMessage *err) {
    memset(found, 0, sizeof *found);
    found->built_runtime = CUDART_VERSION;
    found->built_cudnn = CUDNN_VERSION;
    // The driver's version needs no device; 0 where no driver is installed.
    if (cudaDriverGetVersion(&found->driver) != cudaSuccess) found->driver = 0;
    if (cudaRuntimeGetVersion(&found->runtime) != cudaSuccess) found->runtime = 0;
    (void)cudaGetLastError();
    // The runtime is linked in statically (the program's own file);
    // cuDNN is opened at run time (cudnn_library.h).
    dynamic_library_file_of((const void *)cudaRuntimeGetVersion, found->runtime_path,
                            sizeof found->runtime_path);
    if (cudnn_library_open(err)) return -1;
    found->cudnn = (int)cudnnGetVersion();
    found->cudnn_cuda = (int)cudnnGetCudartVersion();
    cudnn_library_path(found->cudnn_path, sizeof found->cudnn_path);
    return cuda_blas_version(found->cublas, found->built_cublas, found->cublas_path,
                             sizeof found->cublas_path, err);
}

// "13.0" from CUDA's encoding (1000 major + 10 minor).
static void cuda_version_text(int version, char *text, size_t size) {
    snprintf(text, size, "%d.%d", version / 1000, version % 1000 / 10);
}

// "9.19.0" from cuDNN 9's encoding (10000 major + 100 minor + patch).
static void cudnn_version_text(int version, char *text, size_t size) {
    snprintf(text, size, "%d.%d.%d", version / 10000, version % 10000 / 100, version % 100);
}

static const char *or_unknown(const char *path) { return path[0] ? path : "unknown file"; }

int cuda_libraries_check(const CudaLibraries *found, ErrorMessage *err) {
    char have[32], need[32], built[32];
    if (found->runtime / 1000 != found->built_runtime / 1000) {
        cuda_version_text(found->runtime, have, sizeof have);
        return error_set(err, "CUDA runtime %s loaded (%s): this build needs CUDA %d "
                              "(libcudart.so.%d)", have, or_unknown(found->runtime_path),
                         found->built_runtime / 1000, found->built_runtime / 1000);
    }
    if (found->cudnn / 10000 != found->built_cudnn / 10000) {
        cudnn_version_text(found->cudnn, have, sizeof have);
        cudnn_version_text(found->built_cudnn, built, sizeof built);
        return error_set(err, "cuDNN %s loaded (%s): this build needs cuDNN %d (built with %s)",
                         have, or_unknown(found->cudnn_path), found->built_cudnn / 10000, built);
    }
    if (found->cudnn_cuda / 1000 != found->built_runtime / 1000) {
        cudnn_version_text(found->cudnn, have, sizeof have);
        cuda_version_text(found->cudnn_cuda, need, sizeof need);
        return error_set(err, "cuDNN %s for CUDA %s loaded (%s): this build needs a cuDNN %d "
                              "for CUDA %d (pip: nvidia-cudnn-cu%d)",
                         have, need, or_unknown(found->cudnn_path), found->built_cudnn / 10000,
                         found->built_runtime / 1000, found->built_runtime / 1000);
    }
    if (found->cublas[0] != found->built_cublas[0])
        return error_set(err, "cuBLAS %d.%d.%d loaded (%s): this build needs cuBLAS %d",
                         found->cublas[0], found->cublas[1], found->cublas[2],
                         or_unknown(found->cublas_path), found->built_cublas[0]);
    return 0;
}

void cuda_libraries_describe(const CudaLibraries *found, char *text, size_t size) {
    char driver[16] = "", runtime[16], cudnn[16], cudnn_cuda[16];
    cuda_version_text(found->runtime, runtime, sizeof runtime);
    cudnn_version_text(found->cudnn, cudnn, sizeof cudnn);
    cuda_version_text(found->cudnn_cuda, cudnn_cuda, sizeof cudnn_cuda);
    if (found->driver)
        cuda_version_text(found->driver, driver, sizeof driver);
    snprintf(text, size,
             "%s%s; CUDA runtime %s (%s); cuDNN %s for CUDA %s (%s); cuBLAS %d.%d.%d (%s)",
             found->driver ? "NVIDIA driver for CUDA " : "no NVIDIA driver",
             found->driver ? driver : "", runtime, or_unknown(found->runtime_path), cudnn, cudnn_cuda,
             or_unknown(found->cudnn_path), found->cublas[0], found->cublas[1], found->cublas[2],
             or_unknown(found->cublas_path));
}
