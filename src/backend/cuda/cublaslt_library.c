// The cuBLASLt functions the cuda backend calls, forwarded into the library
// opened at run time (see util/dynamic_library.h; cudnn_library.c does the
// same for cuDNN). The CUDA emulation (tests/cuda_emu) builds without this
// file: it defines these functions (emu_cublaslt.c). A cuBLASLt function
// called elsewhere but missing from the list below is an undefined
// reference when the program is linked: add it here.
#include "backend/cuda/cublaslt_library.h"

#include <cublasLt.h>
#include <dlfcn.h>

#include "util/dynamic_library.h"

#define STRINGIFY(x) #x
#define SONAME(major) "libcublasLt.so." STRINGIFY(major)

typedef cublasLtHandle_t Handle;
typedef cublasLtMatmulDesc_t Desc;
typedef cublasLtMatrixLayout_t Layout;
typedef cublasLtMatmulPreference_t Preference;

#define CUBLASLT_FUNCTIONS(X)                                                                  \
    X(cublasStatus_t, cublasLtCreate, (Handle * h), (h))                                       \
    X(cublasStatus_t, cublasLtDestroy, (Handle h), (h))                                        \
    X(const char *, cublasLtGetStatusString, (cublasStatus_t s), (s))                          \
    X(cublasStatus_t, cublasLtMatmulDescCreate,                                                \
      (Desc * d, cublasComputeType_t compute, cudaDataType_t scale), (d, compute, scale))      \
    X(cublasStatus_t, cublasLtMatmulDescDestroy, (Desc d), (d))                                \
    X(cublasStatus_t, cublasLtMatmulDescSetAttribute,                                          \
      (Desc d, cublasLtMatmulDescAttributes_t a, const void *buf, size_t size),                \
      (d, a, buf, size))                                                                       \
    X(cublasStatus_t, cublasLtMatrixLayoutCreate,                                              \
      (Layout * l, cudaDataType type, uint64_t rows, uint64_t cols, int64_t ld),               \
      (l, type, rows, cols, ld))                                                               \
    X(cublasStatus_t, cublasLtMatrixLayoutDestroy, (Layout l), (l))                            \
    X(cublasStatus_t, cublasLtMatmulPreferenceCreate, (Preference * p), (p))                   \
    X(cublasStatus_t, cublasLtMatmulPreferenceDestroy, (Preference p), (p))                    \
    X(cublasStatus_t, cublasLtMatmulPreferenceSetAttribute,                                    \
      (Preference p, cublasLtMatmulPreferenceAttributes_t a, const void *buf, size_t size),    \
      (p, a, buf, size))                                                                       \
    X(cublasStatus_t, cublasLtMatmulAlgoGetHeuristic,                                          \
      (Handle h, Desc d, Layout a, Layout b, Layout c, Layout dl, Preference p, int requested, \
       cublasLtMatmulHeuristicResult_t results[], int *returned),                             \
      (h, d, a, b, c, dl, p, requested, results, returned))                                    \
    X(cublasStatus_t, cublasLtMatmul,                                                          \
      (Handle h, Desc d, const void *alpha, const void *a, Layout al, const void *b,          \
       Layout bl, const void *beta, const void *c, Layout cl, void *dd, Layout dl,             \
       const cublasLtMatmulAlgo_t *algo, void *workspace, size_t workspace_bytes,              \
       cudaStream_t stream),                                                                   \
      (h, d, alpha, a, al, b, bl, beta, c, cl, dd, dl, algo, workspace, workspace_bytes,      \
       stream))

// cuBLASLt ships with cuBLAS and shares its major version (libcublas.so.13
// itself links libcublasLt.so.13).
const char *cublaslt_library_file(void) { return SONAME(CUBLAS_VER_MAJOR); }

DYNAMIC_LIBRARY(CUBLASLT_FUNCTIONS, cublaslt_library_open, "cuBLASLt", cublaslt_library_file(),
                RTLD_NOW | RTLD_LOCAL, CUDA_LIBRARIES_HINT)
