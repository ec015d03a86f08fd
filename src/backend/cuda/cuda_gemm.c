// Matrix products on cuBLAS: the row-major C = alpha op(A) op(B) + beta C of
// backend.h as the column-major product C^T = op(B)^T op(A)^T (a row-major
// matrix is its transpose in column-major order), fp32 with plain FMA math
// (CUBLAS_DEFAULT_MATH never uses TF32 for fp32).
//
// cuBLAS is opened with dlopen when a cuda backend is made, not linked:
// loading libcublas (and the libcublasLt it pulls in) costs about 0.27 s at
// every start of the program (measured: 2.73 s for 10 starts of an empty
// program linked with it, 0.03 s with libcudart alone), which every CPU run
// and every short command would pay.
#include <cublas_v2.h>
#include <dlfcn.h>
#include <stdio.h>

#include "backend/cuda/cuda_internal.h"

// The cuBLAS functions used, resolved once.
static struct {
    void *library;
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
} blas;

#define CUBLAS_CHECK(call)                                                                   \
    do {                                                                                     \
        cublasStatus_t cublas_status_ = (call);                                              \
        if (cublas_status_ != CUBLAS_STATUS_SUCCESS)                                         \
            cuda_fatal("cuBLAS", #call, blas.status_string(cublas_status_), __FILE__,        \
                       __LINE__, cuda_current_device());                                     \
    } while (0)

static int resolve(void **slot, const char *name, ErrorMessage *err) {
    *slot = dlsym(blas.library, name);
    return *slot ? 0 : error_set(err, "cuBLAS: %s lacks %s", "libcublas", name);
}

static int open_blas(ErrorMessage *err) {
    if (blas.library) return 0;
    char name[32];
    snprintf(name, sizeof name, "libcublas.so.%d", CUBLAS_VER_MAJOR);
    blas.library = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!blas.library) return error_set(err, "cannot load cuBLAS: %s", dlerror());
    if (resolve((void **)&blas.create, "cublasCreate_v2", err) ||
        resolve((void **)&blas.destroy, "cublasDestroy_v2", err) ||
        resolve((void **)&blas.set_stream, "cublasSetStream_v2", err) ||
        resolve((void **)&blas.set_math_mode, "cublasSetMathMode", err) ||
        resolve((void **)&blas.status_string, "cublasGetStatusString", err) ||
        resolve((void **)&blas.sgemm, "cublasSgemm_v2", err)) {
        dlclose(blas.library);
        blas.library = NULL;
        return -1;
    }
    return 0;
}

int cuda_blas_create(CudaState *state, ErrorMessage *err) {
    if (open_blas(err)) return -1;
    cublasHandle_t handle = NULL;
    cublasStatus_t status = blas.create(&handle);
    if (status == CUBLAS_STATUS_SUCCESS) status = blas.set_stream(handle, state->stream);
    if (status == CUBLAS_STATUS_SUCCESS) status = blas.set_math_mode(handle, CUBLAS_DEFAULT_MATH);
    if (status != CUBLAS_STATUS_SUCCESS) {
        if (handle) blas.destroy(handle);
        return error_set(err, "cuBLAS: %s", blas.status_string(status));
    }
    state->cublas = handle;
    return 0;
}

void cuda_blas_destroy(CudaState *state) {
    if (state->cublas) blas.destroy((cublasHandle_t)state->cublas);
    state->cublas = NULL;
}

void cuda_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
               float alpha, const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc) {
    if (m == 0 || n == 0) return;
    CudaState *state = cuda_state(backend);
    const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    CUBLAS_CHECK(blas.sgemm((cublasHandle_t)state->cublas, op_b, op_a, n, m, k, &alpha, b, ldb, a,
                            lda, &beta, c, ldc));
}
