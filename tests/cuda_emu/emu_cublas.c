// The cuBLAS of the CUDA emulation: the ten functions cuda_gemm.c
// resolves (its dlopen and dlsym reach these through emu_dlopen.h), with
// the column-major GEMM of cuBLAS computed by plain loops, fp32 sums in k
// order; 16-bit inputs widened, a 16-bit C rounded to nearest even once.
// On a capturing stream a product is recorded (emu_blas.h), not run.
// Every matrix (and a batched call's pointer arrays) must lie in emulated
// device memory, as on a GPU: a host pointer or a matrix running past its
// allocation fails the call with a message. The GPU's cuBLAS sums in
// another order, so the linear layers' tolerances are checked here, not its
// exact bits. Also the element helpers emu_cublaslt.c shares (emu_blas.h).
#include <cublas_v2.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tests/cuda_emu/emu_blas.h"
#include "tests/cuda_emu/emu_dlopen.h"
#include "tests/cuda_emu/emu_log.h"
#include "util/half.h"

struct cublasContext {
    cudaStream_t stream;
    int in_use;
    void *workspace;  // cublasSetWorkspace's (device)
    size_t workspace_bytes;
};

// 16 handles alive at once; a destroyed one is free again, as a real
// handle's memory is (test_method_steps makes and ends a backend per case:
// with the slots never freed, its 17th case found no handle).
static struct cublasContext contexts[16];

static cublasStatus_t emu_create(cublasHandle_t *handle) {
    for (size_t i = 0; i < sizeof contexts / sizeof contexts[0]; i++)
        if (!contexts[i].in_use) {
            contexts[i] = (struct cublasContext){.in_use = 1};
            *handle = &contexts[i];
            return CUBLAS_STATUS_SUCCESS;
        }
    return CUBLAS_STATUS_ALLOC_FAILED;
}

static cublasStatus_t emu_destroy(cublasHandle_t handle) {
    if (!handle || !handle->in_use) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->in_use = 0;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t emu_set_stream(cublasHandle_t handle, cudaStream_t stream) {
    handle->stream = stream;
    ltc_emu_stream_computes(stream);
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t emu_set_math_mode(cublasHandle_t handle, cublasMath_t mode) {
    return CUBLAS_STATUS_SUCCESS;
}

static const char *emu_status_string(cublasStatus_t status) {
    return status == CUBLAS_STATUS_SUCCESS ? "CUBLAS_STATUS_SUCCESS"
                                           : "cuBLAS error (cuda emulation)";
}

int emu_blas_known_type(cudaDataType_t type) {
    return type == CUDA_R_16F || type == CUDA_R_16BF || type == CUDA_R_32F;
}

size_t emu_blas_type_bytes(cudaDataType_t type) { return type == CUDA_R_32F ? 4 : 2; }

float emu_blas_load(const void *p, cudaDataType_t type, size_t i) {
    switch (type) {
    case CUDA_R_16F: return f16_to_float(((const float16 *)p)[i]);
    case CUDA_R_16BF: return bf16_to_float(((const bfloat16 *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

void emu_blas_store(void *p, cudaDataType_t type, size_t i, float v) {
    switch (type) {
    case CUDA_R_16F: ((float16 *)p)[i] = float_to_f16(v); break;
    case CUDA_R_16BF: ((bfloat16 *)p)[i] = float_to_bf16(v); break;
    default: ((float *)p)[i] = v; break;
    }
}

// X[row * row_stride + col * col_stride] for (rows, cols), widened to
// float, column-major and dense into out.
static void widen(const void *x, cudaDataType_t type, size_t rows, size_t cols,
                  size_t row_stride, size_t col_stride, float *out) {
    for (size_t col = 0; col < cols; col++)
        for (size_t row = 0; row < rows; row++)
            out[col * rows + row] = emu_blas_load(x, type, row * row_stride + col * col_stride);
}

float *emu_blas_sums(size_t m, size_t n, size_t k, const void *a, cudaDataType_t a_type,
                     size_t a_row, size_t a_col, const void *b, cudaDataType_t b_type,
                     size_t b_row, size_t b_col) {
    // (one byte more: an empty product is no allocation failure)
    float *values = malloc((m * n + m * k + k * n) * sizeof *values + 1);
    if (!values) return NULL;
    float *wide_a = values + m * n, *wide_b = wide_a + m * k;
    widen(a, a_type, m, k, a_row, a_col, wide_a);
    widen(b, b_type, k, n, b_row, b_col, wide_b);
    // Each sum adds its k products in k order; eight rows of a column are
    // summed side by side (the compiler's vectors run across rows, never
    // within one sum, so each sum is the plain loop's), the rest one by one.
    for (size_t j = 0; j < n; j++) {
        const float *b_column = wide_b + j * k;
        float *column = values + j * m;
        size_t i = 0;
        for (; i + 8 <= m; i += 8) {
            float eight[8] = {0};
            for (size_t l = 0; l < k; l++) {
                const float *a_rows = wide_a + l * m + i;
                for (int v = 0; v < 8; v++) eight[v] += a_rows[v] * b_column[l];
            }
            memcpy(column + i, eight, sizeof eight);
        }
        for (; i < m; i++) {
            float sum = 0.0f;
            for (size_t l = 0; l < k; l++) sum += wide_a[l * m + i] * b_column[l];
            column[i] = sum;
        }
    }
    return values;
}

int emu_blas_on_device(const char *call, const char *what, const void *p, size_t bytes) {
    if (bytes == 0 || ltc_emu_device_range(p, bytes)) return 1;
    fprintf(stderr, "cuda emulation: %s: %s (%zu bytes at %p) is not device memory (or runs "
                    "past its allocation)\n", call, what, bytes, p);
    return 0;
}

size_t emu_blas_matrix_bytes(cudaDataType_t type, size_t rows, size_t cols, size_t ld) {
    return rows == 0 || cols == 0 ? 0 : ((cols - 1) * ld + rows) * emu_blas_type_bytes(type);
}

// C (m, n) = alpha op(A) op(B) + beta C, column-major; C is not read when
// beta is 0 (as cuBLAS).
static cublasStatus_t gemm(const char *call, cublasOperation_t transa, cublasOperation_t transb,
                           int m, int n, int k, float alpha, const void *a,
                           cudaDataType_t a_type, int lda, const void *b, cudaDataType_t b_type,
                           int ldb, float beta, void *c, cudaDataType_t c_type, int ldc) {
    if (m < 0 || n < 0 || k < 0 || !emu_blas_known_type(a_type) ||
        !emu_blas_known_type(b_type) || !emu_blas_known_type(c_type))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (lda < (transa == CUBLAS_OP_N ? m : k) || ldb < (transb == CUBLAS_OP_N ? k : n) ||
        ldc < m || lda < 1 || ldb < 1 || ldc < 1)
        return CUBLAS_STATUS_INVALID_VALUE;
    // A is (a_rows, m + k - a_rows) as stored, B (b_rows, k + n - b_rows).
    const int a_rows = transa == CUBLAS_OP_N ? m : k, b_rows = transb == CUBLAS_OP_N ? k : n;
    if (!emu_blas_on_device(call, "A", a,
                            emu_blas_matrix_bytes(a_type, a_rows, m + k - a_rows, lda)) ||
        !emu_blas_on_device(call, "B", b,
                            emu_blas_matrix_bytes(b_type, b_rows, k + n - b_rows, ldb)) ||
        !emu_blas_on_device(call, "C", c, emu_blas_matrix_bytes(c_type, m, n, ldc)))
        return CUBLAS_STATUS_INVALID_VALUE;
    // op(A) (m, k) and op(B) (k, n) widened once, then the sums
    const size_t a_row = transa == CUBLAS_OP_N ? 1 : (size_t)lda;
    const size_t a_col = transa == CUBLAS_OP_N ? (size_t)lda : 1;
    const size_t b_row = transb == CUBLAS_OP_N ? 1 : (size_t)ldb;
    const size_t b_col = transb == CUBLAS_OP_N ? (size_t)ldb : 1;
    float *sums = emu_blas_sums(m, n, k, a, a_type, a_row, a_col, b, b_type, b_row, b_col);
    if (!sums) return CUBLAS_STATUS_ALLOC_FAILED;
    for (int j = 0; j < n; j++)
        for (int i = 0; i < m; i++) {
            const float sum = sums[(size_t)j * m + i];
            const size_t ci = i + (size_t)j * ldc;
            const float v =
                beta == 0.0f ? alpha * sum : alpha * sum + beta * emu_blas_load(c, c_type, ci);
            emu_blas_store(c, c_type, ci, v);
        }
    free(sums);
    return CUBLAS_STATUS_SUCCESS;
}

// A product's arguments as the call gave them: alpha and beta are host
// pointers (the default pointer mode), so their values are taken at the
// call, and a captured product keeps those (emu_blas.h).
typedef struct GemmCall {
    const char *call;
    cublasOperation_t transa, transb;
    int m, n, k;
    float alpha, beta;
    const void *a, *b;
    void *c;
    cudaDataType_t a_type, b_type, c_type;
    int lda, ldb, ldc;
    // batched: `count` products over arrays of pointers in device memory
    // (read when the product runs); a, b and c point at the arrays
    int count, batched;
} GemmCall;

static int run_gemm_call(const void *arguments) {
    const GemmCall *g = arguments;
    if (!g->batched)
        return gemm(g->call, g->transa, g->transb, g->m, g->n, g->k, g->alpha, g->a, g->a_type,
                    g->lda, g->b, g->b_type, g->ldb, g->beta, g->c, g->c_type, g->ldc);
    const size_t array_bytes = (size_t)g->count * sizeof(void *);
    if (!emu_blas_on_device(g->call, "the pointers to A", g->a, array_bytes) ||
        !emu_blas_on_device(g->call, "the pointers to B", g->b, array_bytes) ||
        !emu_blas_on_device(g->call, "the pointers to C", g->c, array_bytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    const void *const *a = g->a, *const *b = g->b;
    void *const *c = g->c;
    for (int i = 0; i < g->count; i++) {
        const cublasStatus_t status =
            gemm(g->call, g->transa, g->transb, g->m, g->n, g->k, g->alpha, a[i], g->a_type,
                 g->lda, b[i], g->b_type, g->ldb, g->beta, c[i], g->c_type, g->ldc);
        if (status != CUBLAS_STATUS_SUCCESS) return status;
    }
    return CUBLAS_STATUS_SUCCESS;
}

// Runs the product now, or records it while the handle's stream captures.
static cublasStatus_t submit(cublasHandle_t handle, const GemmCall *g) {
    ltc_emu_log("cublas", g->call, 0);
    if (ltc_emu_capture_call(handle->stream, g->call, run_gemm_call, g, sizeof *g))
        return CUBLAS_STATUS_SUCCESS;
    return (cublasStatus_t)run_gemm_call(g);
}

static cublasStatus_t emu_sgemm(cublasHandle_t handle, cublasOperation_t transa,
                                cublasOperation_t transb, int m, int n, int k, const float *alpha,
                                const float *a, int lda, const float *b, int ldb,
                                const float *beta, float *c, int ldc) {
    const GemmCall g = {"cublasSgemm", transa, transb, m, n, k, *alpha, *beta, a, b, c,
                        CUDA_R_32F, CUDA_R_32F, CUDA_R_32F, lda, ldb, ldc, 0, 0};
    return submit(handle, &g);
}

static cublasStatus_t emu_gemm_ex(cublasHandle_t handle, cublasOperation_t transa,
                                  cublasOperation_t transb, int m, int n, int k,
                                  const void *alpha, const void *a, cudaDataType_t a_type, int lda,
                                  const void *b, cudaDataType_t b_type, int ldb, const void *beta,
                                  void *c, cudaDataType_t c_type, int ldc,
                                  cublasComputeType_t compute, cublasGemmAlgo_t algo) {
    if (compute != CUBLAS_COMPUTE_32F) return CUBLAS_STATUS_NOT_SUPPORTED;
    const GemmCall g = {"cublasGemmEx", transa, transb, m, n, k, *(const float *)alpha,
                        *(const float *)beta, a, b, c, a_type, b_type, c_type, lda, ldb, ldc,
                        0, 0};
    return submit(handle, &g);
}

// count products over pointer arrays in (emulated) device memory.
static cublasStatus_t emu_gemm_batched_ex(cublasHandle_t handle, cublasOperation_t transa,
                                          cublasOperation_t transb, int m, int n, int k,
                                          const void *alpha, const void *const a[],
                                          cudaDataType_t a_type, int lda, const void *const b[],
                                          cudaDataType_t b_type, int ldb, const void *beta,
                                          void *const c[], cudaDataType_t c_type, int ldc,
                                          int count, cublasComputeType_t compute,
                                          cublasGemmAlgo_t algo) {
    if (compute != CUBLAS_COMPUTE_32F || count < 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    const GemmCall g = {"cublasGemmBatchedEx", transa, transb, m, n, k, *(const float *)alpha,
                        *(const float *)beta, a, b, (void *)c, a_type, b_type, c_type, lda, ldb,
                        ldc, count, 1};
    return submit(handle, &g);
}

// The workspace cuBLAS may use instead of allocating its own (which a
// capture would refuse): device memory, kept on the handle.
static cublasStatus_t emu_set_workspace(cublasHandle_t handle, void *workspace, size_t bytes) {
    if (!handle || !handle->in_use) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!emu_blas_on_device("cublasSetWorkspace", "the workspace", workspace, bytes))
        return CUBLAS_STATUS_INVALID_VALUE;
    handle->workspace = workspace;
    handle->workspace_bytes = bytes;
    return CUBLAS_STATUS_SUCCESS;
}

static cublasStatus_t emu_get_property(libraryPropertyType type, int *value) {
    *value = type == MAJOR_VERSION ? CUBLAS_VER_MAJOR
             : type == MINOR_VERSION ? CUBLAS_VER_MINOR
                                     : CUBLAS_VER_PATCH;
    return CUBLAS_STATUS_SUCCESS;
}

static const struct {
    const char *name;
    void *function;
} exported[] = {
    {"cublasCreate_v2", (void *)emu_create},
    {"cublasDestroy_v2", (void *)emu_destroy},
    {"cublasSetStream_v2", (void *)emu_set_stream},
    {"cublasSetMathMode", (void *)emu_set_math_mode},
    {"cublasSetWorkspace_v2", (void *)emu_set_workspace},
    {"cublasGetStatusString", (void *)emu_status_string},
    {"cublasSgemm_v2", (void *)emu_sgemm},
    {"cublasGemmEx", (void *)emu_gemm_ex},
    {"cublasGemmBatchedEx", (void *)emu_gemm_batched_ex},
    {"cublasGetProperty", (void *)emu_get_property},
};

static int emulated_blas;  // its address is the library handle

#undef dlopen
#undef dlsym
#undef dlclose

void *emu_dlopen(const char *name, int flags) {
    if (strncmp(name, "libcublas.so", 12) == 0) return &emulated_blas;
    return dlopen(name, flags);
}

void *emu_dlsym(void *library, const char *symbol) {
    if (library != &emulated_blas) return dlsym(library, symbol);
    for (size_t i = 0; i < sizeof exported / sizeof exported[0]; i++)
        if (strcmp(exported[i].name, symbol) == 0) return exported[i].function;
    return NULL;
}

int emu_dlclose(void *library) { return library == &emulated_blas ? 0 : dlclose(library); }
