// Matrix products on cuBLAS: the row-major C = alpha op(A) op(B) + beta C of
// backend.h as the column-major product C^T = op(B)^T op(A)^T (a row-major
// matrix is its transpose in column-major order), fp32 with plain FMA math
// (CUBLAS_DEFAULT_MATH never uses TF32 for fp32).
//
// The linear layers (backend.h linear_*) run on the activations' dtype: in
// fp32 the same sgemm as before (bit for bit); in fp16 / bf16 cublasGemmEx
// with A and B in the 16-bit type, fp32 compute (CUBLAS_COMPUTE_32F, tensor
// cores), C in the 16-bit type for y and dx, and fp32 with beta = 1 for the
// weight gradient (the += into the parameter arena, never rounded to 16
// bits). A 16-bit layer with a bias follows PyTorch's autocast order, as
// the ref backend does (ref_linear.c): the fp32 bias rounded to the 16-bit
// dtype (a small kernel into the scratch), added to the fp32 product, the
// sum rounded once. By default that is one cublasLtMatmul with the bias
// epilogue (cuda_blas_lt.c), which takes a bias of the output's type only;
// the separate pass (the fp32 product into the scratch a row chunk at a
// time, then a kernel adding the rounded bias and rounding) runs where
// cuBLASLt has no algorithm for a shape, and for every layer with
// LTC_CUDA_LINEAR_BIAS=separate (to compare the two on a GPU).
//
// The batched products of the 16-bit attention forward
// (cuda_attention_math.cu) go through cublasGemmBatchedEx the same way.
//
// cuBLAS is opened with dlopen when a cuda backend is made, not linked:
// loading libcublas (and the libcublasLt it pulls in) costs about 0.27 s at
// every start of the program (measured: 2.73 s for 10 starts of an empty
// program linked with it, 0.03 s with libcudart alone), which every CPU run
// and every short command would pay. cuBLASLt likewise
// (cublaslt_library.c).
#include <cublas_v2.h>
#include <dlfcn.h>
#include <stdio.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"
#include "util/dynamic_library.h"

// The cuBLAS functions used, resolved once.
static struct {
    void *library;
    cublasStatus_t (*create)(cublasHandle_t *);
    cublasStatus_t (*destroy)(cublasHandle_t);
    cublasStatus_t (*set_stream)(cublasHandle_t, cudaStream_t);
    cublasStatus_t (*set_math_mode)(cublasHandle_t, cublasMath_t);
    cublasStatus_t (*set_workspace)(cublasHandle_t, void *, size_t);
    const char *(*status_string)(cublasStatus_t);
    cublasStatus_t (*get_property)(libraryPropertyType, int *);
    cublasStatus_t (*sgemm)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                            const float *, const float *, int, const float *, int, const float *,
                            float *, int);
    cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                              const void *, const void *, cudaDataType_t, int, const void *,
                              cudaDataType_t, int, const void *, void *, cudaDataType_t, int,
                              cublasComputeType_t, cublasGemmAlgo_t);
    cublasStatus_t (*gemm_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int,
                                      int, int, const void *, const void *const[],
                                      cudaDataType_t, int, const void *const[], cudaDataType_t,
                                      int, const void *, void *const[], cudaDataType_t, int, int,
                                      cublasComputeType_t, cublasGemmAlgo_t);
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

#define STRINGIFY(x) #x
#define BLAS_SONAME(major) "libcublas.so." STRINGIFY(major)

const char *cuda_blas_library_file(void) { return BLAS_SONAME(CUBLAS_VER_MAJOR); }

static int open_blas(ErrorMessage *err) {
    if (blas.library) return 0;
    blas.library = dlopen(cuda_blas_library_file(), RTLD_NOW | RTLD_LOCAL);
    if (!blas.library)
        return error_set(err, "cannot load cuBLAS: %s; %s", dlerror(), CUDA_LIBRARIES_HINT);
    if (resolve((void **)&blas.create, "cublasCreate_v2", err) ||
        resolve((void **)&blas.destroy, "cublasDestroy_v2", err) ||
        resolve((void **)&blas.set_stream, "cublasSetStream_v2", err) ||
        resolve((void **)&blas.set_math_mode, "cublasSetMathMode", err) ||
        resolve((void **)&blas.set_workspace, "cublasSetWorkspace_v2", err) ||
        resolve((void **)&blas.status_string, "cublasGetStatusString", err) ||
        resolve((void **)&blas.get_property, "cublasGetProperty", err) ||
        resolve((void **)&blas.sgemm, "cublasSgemm_v2", err) ||
        resolve((void **)&blas.gemm_ex, "cublasGemmEx", err) ||
        resolve((void **)&blas.gemm_batched_ex, "cublasGemmBatchedEx", err)) {
        dlclose(blas.library);
        blas.library = NULL;
        return -1;
    }
    return 0;
}

int cuda_blas_version(int found[3], int built[3], char *path, size_t size, ErrorMessage *err) {
    built[0] = CUBLAS_VER_MAJOR;
    built[1] = CUBLAS_VER_MINOR;
    built[2] = CUBLAS_VER_PATCH;
    path[0] = '\0';
    if (open_blas(err)) return -1;
    const libraryPropertyType parts[3] = {MAJOR_VERSION, MINOR_VERSION, PATCH_LEVEL};
    for (int i = 0; i < 3; i++)
        if (blas.get_property(parts[i], &found[i]) != CUBLAS_STATUS_SUCCESS) found[i] = -1;
    Dl_info info;
    if (dladdr((void *)blas.create, &info) && info.dli_fname)
        snprintf(path, size, "%s", info.dli_fname);
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
    if (cuda_blas_lt_create(state, err)) return -1;
    // cuBLAS's workspace is cuBLASLt's (both run on the compute stream, one
    // call after another): without one of ours, cuBLAS allocates its own at
    // its first products on a stream, which a CUDA graph capture refuses.
    size_t workspace_bytes = 0;
    void *workspace = cuda_blas_lt_workspace(state, &workspace_bytes);
    status = blas.set_workspace(handle, workspace, workspace_bytes);
    if (status != CUBLAS_STATUS_SUCCESS)
        return error_set(err, "cuBLAS workspace: %s", blas.status_string(status));
    return 0;
}

void cuda_blas_destroy(CudaState *state) {
    cuda_blas_lt_destroy(state);
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
    if (cuda_queue_point())
        CUBLAS_CHECK(blas.sgemm((cublasHandle_t)state->cublas, op_b, op_a, n, m, k, &alpha, b, ldb,
                                a, lda, &beta, c, ldc));
}

// ---- linear layers on activations ------------------------------------------------------

// The cuBLAS type of the activations' storage (16-bit dtypes only).
static cudaDataType_t act_blas_type(const Backend *backend) {
    return backend->compute_dtype == COMPUTE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
}

// Row-major C (M, N) = op(A) op(B) + beta C as cuda_gemm, A and B
// activations in the 16-bit dtype, C of c_type, fp32 compute.
static void gemm_16bit(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
                       const void *a, int lda, const void *b, int ldb, float beta, void *c,
                       cudaDataType_t c_type, int ldc) {
    if (m == 0 || n == 0) return;
    CudaState *state = cuda_state(backend);
    const cublasOperation_t op_a = transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cudaDataType_t type = act_blas_type(backend);
    const float one = 1.0f;
    if (cuda_queue_point())
        CUBLAS_CHECK(blas.gemm_ex((cublasHandle_t)state->cublas, op_b, op_a, n, m, k, &one, b, type,
                                  ldb, a, type, lda, &beta, c, c_type, ldc, CUBLAS_COMPUTE_32F,
                                  CUBLAS_GEMM_DEFAULT));
}

void cuda_gemm_batched_16bit(Backend *backend, int transpose_a, int transpose_b, int m, int n,
                             int k, float alpha, const void *const *a, int lda,
                             const void *const *b, int ldb, void *const *c, int c_fp32, int ldc,
                             int count) {
    if (m == 0 || n == 0 || count == 0) return;
    CudaState *state = cuda_state(backend);
    const cudaDataType_t type = act_blas_type(backend);
    const float zero = 0.0f;
    if (cuda_queue_point())
        CUBLAS_CHECK(blas.gemm_batched_ex(
            (cublasHandle_t)state->cublas, transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N,
            transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N, m, n, k, &alpha, a, type, lda, b, type, ldb,
            &zero, c, c_fp32 ? CUDA_R_32F : type, ldc, count, CUBLAS_COMPUTE_32F,
            CUBLAS_GEMM_DEFAULT));
}

// Bytes rounded up to whole 256-byte blocks: regions of the scratch stay
// aligned as cudaMalloc's are (cuBLASLt assumes 256 unless told less).
static size_t scratch_region(size_t bytes) { return (bytes + 255) / 256 * 256; }

void cuda_linear_bias_counts(const Backend *backend, long *fused, long *separate) {
    const CudaState *state = cuda_state(backend);
    *fused = state->linear_bias_fused_calls;
    *separate = state->linear_bias_separate_calls;
}

void cuda_linear_forward(Backend *backend, int rows, int in, int out, const Act *x,
                         const Act *w, const float *bias, Act *y) {
    CudaState *state = cuda_state(backend);
    if (backend->compute_dtype == COMPUTE_F32) {
        cuda_gemm(backend, 0, 1, rows, out, in, 1.0f, (const float *)x, in, (const float *)w, in,
                  0.0f, (float *)y, out);
        if (bias) cuda_bias_add_launch(state->stream, COMPUTE_F32, (size_t)rows, out, bias, y);
        return;
    }
    if (!bias) {
        gemm_16bit(backend, 0, 1, rows, out, in, x, in, w, in, 0.0f, y, act_blas_type(backend),
                   out);
        return;
    }
    if (rows == 0 || out == 0) return;
    // The scratch: the bias rounded to the dtype, [its fp32 widening, the
    // fp32 product of as many rows as the rest holds].
    const size_t bias16_bytes = scratch_region((size_t)out * backend->act_element_bytes);
    const size_t bias32_bytes = scratch_region((size_t)out * sizeof(float));
    const size_t scratch_bytes = CUDA_SCRATCH_DOUBLES * sizeof(double);
    char *bias16 = (char *)state->scratch;
    cuda_act_convert_launch(state->stream, backend->compute_dtype, (size_t)out, 1, bias, bias16);
    if (!state->linear_bias_separate && in > 0 &&
        cuda_blas_lt_linear(backend, rows, in, out, x, w, bias16, y) == 0) {
        state->linear_bias_fused_calls++;
        return;
    }
    state->linear_bias_separate_calls++;
    const size_t room = bias16_bytes + bias32_bytes < scratch_bytes
                            ? (scratch_bytes - bias16_bytes - bias32_bytes) / sizeof(float)
                            : 0;
    if ((size_t)out > room)
        cuda_fatal("cuBLAS", "linear_forward", "a layer wider than the scratch", __FILE__,
                   __LINE__, cuda_current_device());
    float *rounded_bias = (float *)(bias16 + bias16_bytes);
    cuda_act_convert_launch(state->stream, backend->compute_dtype, (size_t)out, 0, bias16,
                            rounded_bias);
    float *product = (float *)(bias16 + bias16_bytes + bias32_bytes);
    const int chunk = (int)(room / (size_t)out < (size_t)rows ? room / (size_t)out : (size_t)rows);
    for (int first = 0; first < rows; first += chunk) {
        const int count = rows - first < chunk ? rows - first : chunk;
        gemm_16bit(backend, 0, 1, count, out, in, act_at_const(backend, x, (size_t)first * in),
                   in, w, in, 0.0f, product, CUDA_R_32F, out);
        cuda_bias_epilogue_launch(state->stream, backend->compute_dtype, (size_t)count, out,
                                  product, rounded_bias, act_at(backend, y, (size_t)first * out));
    }
}

void cuda_linear_backward_data(Backend *backend, int rows, int in, int out, const Act *dy,
                               const Act *w, Act *dx) {
    if (backend->compute_dtype == COMPUTE_F32)
        cuda_gemm(backend, 0, 0, rows, in, out, 1.0f, (const float *)dy, out, (const float *)w,
                  in, 0.0f, (float *)dx, in);
    else
        gemm_16bit(backend, 0, 0, rows, in, out, dy, out, w, in, 0.0f, dx,
                   act_blas_type(backend), in);
}

void cuda_linear_backward_weights(Backend *backend, int rows, int in, int out, const Act *x,
                                  const Act *dy, float *dw, float *dbias) {
    if (backend->compute_dtype == COMPUTE_F32)
        cuda_gemm(backend, 1, 0, out, in, rows, 1.0f, (const float *)dy, out, (const float *)x,
                  in, 1.0f, dw, in);
    else
        gemm_16bit(backend, 1, 0, out, in, rows, dy, out, x, in, 1.0f, dw, CUDA_R_32F, in);
    if (dbias) {
        CudaState *state = cuda_state(backend);
        cuda_column_sum_launch(state->stream, backend->compute_dtype, state->scratch,
                               (size_t)rows, out, dy, dbias, 1);
    }
}
