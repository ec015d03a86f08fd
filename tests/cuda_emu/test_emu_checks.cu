// The CUDA emulation's own checks (tests/cuda_emu): each check docs/gpu.md
// lists (a barrier some threads left, shuffles outside a whole warp, a
// misaligned vector access, a write past an allocation, launch limits,
// dynamic shared memory, copies and memsets outside device memory, NaN in
// unwritten memory) done once on purpose, by a small kernel or call: it
// must stop the run with the emulation's message, or fail with the error a
// GPU returns, and its correct twin must run. Without these, a
// check that stopped working would let `make test` pass kernels that fail
// on the first GPU. A kernel that stops the emulation ends the process
// (_exit(1), as a GPU's sticky error ends the context), so each bad kernel
// runs in a child process whose status and standard error are read here.
// The emulated cuBLASLt is checked here too: products in every layout it
// emulates against the host, and its refusals. Built against the emulation
// only (not a .cu for nvcc).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {  // cmocka.h declares C functions without saying so to C++
#include <cmocka.h>
}
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cublasLt.h>
#include <cublas_v2.h>
#include <dlfcn.h>

#include "backend/cuda/cuda_act.cuh"

enum { WARP = 32 };

// ---- the kernels: each bad one beside its correct twin -------------------------------

__global__ void write_indices(int *out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = (int)(blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void barrier_after_return(int *out, int returning) {
    if ((int)threadIdx.x < returning) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void warp_sum(int *out, unsigned mask) {
    int value = (int)threadIdx.x;
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        value += __shfl_down_sync(mask, value, offset);
    if (threadIdx.x % WARP == 0) out[threadIdx.x / WARP] = value;
}

__global__ void shuffle_in_half_a_warp(int *out) {
    int value = (int)threadIdx.x;
    if (threadIdx.x < WARP / 2) value = __shfl_xor_sync(0xffffffffu, value, 1);
    out[threadIdx.x] = value;
}

// Four floats from `from` into `to`, as one 16-byte vector each way.
__global__ void copy_vector(const float *from, float *to) {
    store_packed<float, 4>(to, load_packed<float, 4>(from));
}

__global__ void write_past_end(float *out, int n) { out[n + (int)threadIdx.x] = 1.0f; }

__global__ void use_dynamic_shared(int *out) {
    extern __shared__ int scratch[];
    scratch[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x];
}

__global__ void read_unwritten_shared(float *out) {
    extern __shared__ float unwritten[];
    out[threadIdx.x] = unwritten[threadIdx.x];
}

// ---- running a kernel that may stop the process ---------------------------------------

typedef void (*Scenario)(void);

// Runs scenario in a child; its exit status and the start of its stderr.
static int run_child(Scenario scenario, char *err, size_t size) {
    int pipe_ends[2];
    assert_int_equal(pipe(pipe_ends), 0);
    fflush(NULL);
    const pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dup2(pipe_ends[1], STDERR_FILENO);
        close(pipe_ends[0]);
        scenario();
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(pipe_ends[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < size && (n = read(pipe_ends[0], err + got, size - 1 - got)) > 0)
        got += (size_t)n;
    err[got] = '\0';
    close(pipe_ends[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_stop(Scenario scenario, const char *message) {
    char err[2048];
    const int status = run_child(scenario, err, sizeof err);
    if (status != 1 || !strstr(err, message) || !strstr(err, "test_emu_checks.cu"))
        fail_msg("expected exit 1 with \"%s\" and the launch site; got %d: %s", message, status,
                 err);
}

static void expect_clean(Scenario scenario) {
    char err[2048];
    const int status = run_child(scenario, err, sizeof err);
    if (status != 0) fail_msg("expected a clean run; got %d: %s", status, err);
}

static int *device_ints(int n) {
    void *pointer = NULL;
    assert_int_equal(cudaMalloc(&pointer, (size_t)n * sizeof(int)), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(pointer, 0, (size_t)n * sizeof(int), 0), cudaSuccess);
    return (int *)pointer;
}

// A float buffer of `n` values with `offset` floats before a 16-byte boundary.
static float *floats_at(int n, int offset) {
    void *pointer = NULL;
    assert_int_equal(cudaMalloc(&pointer, (size_t)(n + 8) * sizeof(float)), cudaSuccess);
    uintptr_t address = (uintptr_t)pointer;
    while (address % 16) address += sizeof(float);
    return (float *)address + offset;
}

// ---- the scenarios --------------------------------------------------------------------

static void barrier_all_reach(void) { barrier_after_return<<<1, 64>>>(device_ints(64), 0); }
static void barrier_some_returned(void) { barrier_after_return<<<1, 64>>>(device_ints(64), 5); }
static void shuffle_full_mask(void) { warp_sum<<<1, 64>>>(device_ints(2), 0xffffffffu); }
static void shuffle_partial_mask(void) { warp_sum<<<1, 64>>>(device_ints(2), 0x0000ffffu); }
static void shuffle_partial_warp(void) { warp_sum<<<1, 48>>>(device_ints(2), 0xffffffffu); }
static void shuffle_divergent(void) { shuffle_in_half_a_warp<<<1, 32>>>(device_ints(32)); }
static void vector_aligned(void) { copy_vector<<<1, 1>>>(floats_at(8, 0), floats_at(8, 0)); }
static void vector_load_misaligned(void) {
    copy_vector<<<1, 1>>>(floats_at(8, 1), floats_at(8, 0));
}
static void vector_store_misaligned(void) {
    copy_vector<<<1, 1>>>(floats_at(8, 0), floats_at(8, 2));
}
static void write_in_bounds(void) {
    float *out = NULL;
    assert_int_equal(cudaMalloc((void **)&out, 64 * sizeof(float)), cudaSuccess);
    write_past_end<<<1, 32>>>(out, 0);
}
static void write_out_of_bounds(void) {
    float *out = NULL;
    assert_int_equal(cudaMalloc((void **)&out, 64 * sizeof(float)), cudaSuccess);
    write_past_end<<<1, 32>>>(out, 64);
}

// ---- the tests ------------------------------------------------------------------------

static void test_a_correct_kernel_runs(void **state) {
    (void)state;
    enum { BLOCKS = 3, THREADS = 96 };
    int *out = device_ints(BLOCKS * THREADS);
    write_indices<<<BLOCKS, THREADS>>>(out);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    int host[BLOCKS * THREADS];
    assert_int_equal(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < BLOCKS * THREADS; i++) assert_int_equal(host[i], i);
    cudaFree(out);
}

static void test_a_barrier_some_threads_left_stops(void **state) {
    (void)state;
    expect_clean(barrier_all_reach);
    expect_stop(barrier_some_returned, "__syncthreads not reached by every thread");
}

static void test_shuffles_outside_a_whole_warp_stop(void **state) {
    (void)state;
    expect_clean(shuffle_full_mask);
    expect_stop(shuffle_partial_mask, "a warp shuffle with a partial mask");
    expect_stop(shuffle_partial_warp, "in a partial warp");
    expect_stop(shuffle_divergent, "not every lane of the warp reaches");
}

static void test_the_warp_sum_is_exchanged(void **state) {
    (void)state;
    int *out = device_ints(2);
    warp_sum<<<1, 64>>>(out, 0xffffffffu);
    int host[2];
    assert_int_equal(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(host[0], 31 * 32 / 2);            // lanes 0..31
    assert_int_equal(host[1], 32 * 32 + 31 * 32 / 2);  // lanes 32..63
    cudaFree(out);
}

static void test_a_misaligned_vector_access_stops(void **state) {
    (void)state;
    expect_clean(vector_aligned);
    expect_stop(vector_load_misaligned, "misaligned address: a 16-byte vector access");
    expect_stop(vector_store_misaligned, "misaligned address: a 16-byte vector access");
}

static void test_a_write_past_an_allocation_stops(void **state) {
    (void)state;
    expect_clean(write_in_bounds);
    expect_stop(write_out_of_bounds, "invalid memory access");
}

static void test_a_bad_launch_configuration_fails_the_launch(void **state) {
    (void)state;
    int *out = device_ints(1);
    (void)cudaGetLastError();
    write_indices<<<1, 2048>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    write_indices<<<dim3(1, 70000), 32>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    int host = -1;
    assert_int_equal(cudaMemcpy(&host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(host, 0);  // nothing ran
    cudaFree(out);
}

static void test_dynamic_shared_memory_needs_its_allowance(void **state) {
    (void)state;
    enum { THREADS = 64 };
    const size_t large = 64 * 1024;  // over the 48 KB a kernel may ask for without opting in
    int *out = device_ints(THREADS);
    (void)cudaGetLastError();
    use_dynamic_shared<<<1, THREADS, large>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaFuncSetAttribute(use_dynamic_shared,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)large),
                     cudaSuccess);
    use_dynamic_shared<<<1, THREADS, large>>>(out);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    int host[THREADS];
    assert_int_equal(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < THREADS; i++) assert_int_equal(host[i], THREADS - 1 - i);
    cudaFree(out);
}

static void test_copies_and_memsets_outside_device_memory_fail(void **state) {
    (void)state;
    enum { N = 64 };
    float host[N + 1] = {0};
    float *device = NULL;
    assert_int_equal(cudaMalloc((void **)&device, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemcpy(device, host, N * sizeof(float), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(device, host, (N + 1) * sizeof(float), cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);  // past the end
    assert_int_equal(cudaMemcpy(host, device, N * sizeof(float), cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);  // the kind says the host is the device
    assert_int_equal(cudaMemcpy(host, device, N * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemsetAsync(device, 0, N * sizeof(float), 0), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(device + 1, 0, N * sizeof(float), 0), cudaErrorInvalidValue);
    assert_int_equal(cudaMemsetAsync(host, 0, sizeof host, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaFree(device);
}

// Device memory nothing wrote and dynamic shared memory read before any
// write hold NaN bytes, so a result computed from them cannot pass as right.
static void test_unwritten_memory_reads_as_nan(void **state) {
    (void)state;
    enum { N = 32 };
    float *device = NULL;
    float host[N];
    assert_int_equal(cudaMalloc((void **)&device, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, device, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < N; i++) assert_true(isnan(host[i]));
    assert_int_equal(cudaMemsetAsync(device, 0, sizeof host, 0), cudaSuccess);
    read_unwritten_shared<<<1, N, N * sizeof(float)>>>(device);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, device, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < N; i++) assert_true(isnan(host[i]));
    cudaFree(device);
}

// ---- the emulated cuBLASLt (emu_cublaslt.c) --------------------------------------------
// What the backend's fused linear layer rests on: the emulated product must
// be the one cuBLASLt is told to compute (transposes, leading dimensions,
// orders, beta C, the bias along D's rows, D's type), and what it does not
// emulate or a GPU would fault on must fail, not compute something else.

// A matrix of `rows` x `cols` small integers (exact in fp16 and in any sum
// here), stored column- or row-major with leading dimension ld, on the
// device; its values, by (row, col), also on the host.
struct LtMatrix {
    cublasLtMatrixLayout_t layout;
    void *device;
    int rows, cols, ld, row_major;
    cudaDataType type;
    double value(int row, int col) const { return (double)((row * 7 + col * 3) % 5) - 2.0; }
    size_t index(int row, int col) const {
        return row_major ? (size_t)row * ld + col : (size_t)col * ld + row;
    }
};

static void lt_matrix(LtMatrix *m, cudaDataType type, int rows, int cols, int row_major) {
    m->rows = rows;
    m->cols = cols;
    m->row_major = row_major;
    m->ld = (row_major ? cols : rows) + 3;
    m->type = type;
    const size_t count = (size_t)m->ld * (row_major ? rows : cols);
    const size_t bytes = count * (type == CUDA_R_32F ? 4 : 2);
    assert_int_equal(cudaMalloc(&m->device, bytes), cudaSuccess);
    unsigned char *host = (unsigned char *)calloc(1, bytes);
    for (int i = 0; i < rows; i++)
        for (int j = 0; j < cols; j++) {
            const float v = (float)m->value(i, j);
            if (type == CUDA_R_32F)
                ((float *)host)[m->index(i, j)] = v;
            else
                ((__half *)host)[m->index(i, j)] = __float2half(v);
        }
    assert_int_equal(cudaMemcpy(m->device, host, bytes, cudaMemcpyHostToDevice), cudaSuccess);
    free(host);
    assert_int_equal(cublasLtMatrixLayoutCreate(&m->layout, type, rows, cols, m->ld),
                     CUBLAS_STATUS_SUCCESS);
    const int32_t order = row_major ? CUBLASLT_ORDER_ROW : CUBLASLT_ORDER_COL;
    assert_int_equal(cublasLtMatrixLayoutSetAttribute(m->layout, CUBLASLT_MATRIX_LAYOUT_ORDER,
                                                      &order, sizeof order),
                     CUBLAS_STATUS_SUCCESS);
}

static void lt_matrix_free(LtMatrix *m) {
    cublasLtMatrixLayoutDestroy(m->layout);
    cudaFree(m->device);
}

static void lt_set(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                   int32_t value) {
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc, attribute, &value, sizeof value),
                     CUBLAS_STATUS_SUCCESS);
}

// One product D (5, 4) = alpha op(A) op(B) + beta C [+ bias], k = 3, in
// these layouts; the status of the heuristic (or, when it found one, of
// the matmul) and, on success, every element against the host.
struct LtProduct {
    int transa, transb, row_major, bias;
    cudaDataType d_type;
    float beta;
    int32_t bias_type;          // -1: D's (not set)
    size_t workspace_given;     // bytes handed to cublasLtMatmul
    int misalign_a;             // A handed 2 bytes past where the heuristic saw it
    int host_b;                 // B in host memory
    uint32_t epilogue;          // 0: from `bias`
};

// A 16-bit product with A transposed and a bias, as the backend's linear layer.
static LtProduct lt_product(void) {
    LtProduct p;
    memset(&p, 0, sizeof p);
    p.transa = p.bias = 1;
    p.d_type = CUDA_R_16F;
    p.bias_type = -1;
    p.workspace_given = 1 << 20;
    return p;
}

static cublasStatus_t lt_run(const LtProduct &p) {
    enum { M = 5, N = 4, K = 3 };
    cublasLtHandle_t handle;
    assert_int_equal(cublasLtCreate(&handle), CUBLAS_STATUS_SUCCESS);
    LtMatrix a, b, c, d, bias;
    lt_matrix(&a, CUDA_R_16F, p.transa ? K : M, p.transa ? M : K, p.row_major);
    lt_matrix(&b, CUDA_R_16F, p.transb ? N : K, p.transb ? K : N, p.row_major);
    lt_matrix(&c, p.d_type, M, N, p.row_major);
    lt_matrix(&d, p.d_type, M, N, p.row_major);
    lt_matrix(&bias, p.d_type, M, 1, 0);
    void *workspace = NULL;
    assert_int_equal(cudaMalloc(&workspace, 1 << 20), cudaSuccess);
    cublasLtMatmulDesc_t desc;
    assert_int_equal(cublasLtMatmulDescCreate(&desc, CUBLAS_COMPUTE_32F, CUDA_R_32F),
                     CUBLAS_STATUS_SUCCESS);
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSA, p.transa ? CUBLAS_OP_T : CUBLAS_OP_N);
    lt_set(desc, CUBLASLT_MATMUL_DESC_TRANSB, p.transb ? CUBLAS_OP_T : CUBLAS_OP_N);
    const uint32_t epilogue = p.epilogue ? p.epilogue
                              : p.bias   ? (uint32_t)CUBLASLT_EPILOGUE_BIAS
                                         : (uint32_t)CUBLASLT_EPILOGUE_DEFAULT;
    lt_set(desc, CUBLASLT_MATMUL_DESC_EPILOGUE, (int32_t)epilogue);
    if (p.bias_type != -1) lt_set(desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, p.bias_type);
    assert_int_equal(cublasLtMatmulDescSetAttribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                    &bias.device, sizeof bias.device),
                     CUBLAS_STATUS_SUCCESS);
    cublasLtMatmulPreference_t preference;
    assert_int_equal(cublasLtMatmulPreferenceCreate(&preference), CUBLAS_STATUS_SUCCESS);
    const uint64_t most = 1 << 20;
    assert_int_equal(cublasLtMatmulPreferenceSetAttribute(
                         preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &most, sizeof most),
                     CUBLAS_STATUS_SUCCESS);
    // The emulation's cudaMalloc aligns to 8 bytes only (its allocations end
    // on a guard page): the heuristic is told what each pointer has.
    const void *pointers[4] = {a.device, b.device, c.device, d.device};
    for (int i = 0; i < 4; i++) {
        uint32_t alignment = 256;
        while ((uintptr_t)pointers[i] % alignment) alignment /= 2;
        const cublasLtMatmulPreferenceAttributes_t attribute =
            (cublasLtMatmulPreferenceAttributes_t)(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES + i);
        assert_int_equal(cublasLtMatmulPreferenceSetAttribute(preference, attribute, &alignment,
                                                              sizeof alignment),
                         CUBLAS_STATUS_SUCCESS);
    }
    cublasLtMatmulHeuristicResult_t result;
    int found = 0;
    cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle, desc, a.layout, b.layout, c.layout, d.layout, preference, 1, &result, &found);
    if (status == CUBLAS_STATUS_SUCCESS) {
        assert_int_equal(found, 1);
        assert_true(result.workspaceSize > 0 && result.workspaceSize <= most);
        const float alpha = 2.0f;
        float host_b[64] = {0};
        status = cublasLtMatmul(handle, desc, &alpha, (char *)a.device + (p.misalign_a ? 2 : 0),
                                a.layout, p.host_b ? (void *)host_b : b.device, b.layout, &p.beta,
                                c.device, c.layout, d.device, d.layout, &result.algo, workspace,
                                p.workspace_given, 0);
    }
    if (status == CUBLAS_STATUS_SUCCESS) {
        const size_t count = (size_t)d.ld * (p.row_major ? M : N);
        float out[64];
        __half out16[64];
        assert_true(count <= 64);
        if (p.d_type == CUDA_R_32F)
            assert_int_equal(cudaMemcpy(out, d.device, count * 4, cudaMemcpyDeviceToHost),
                             cudaSuccess);
        else
            assert_int_equal(cudaMemcpy(out16, d.device, count * 2, cudaMemcpyDeviceToHost),
                             cudaSuccess);
        for (int i = 0; i < M; i++)
            for (int j = 0; j < N; j++) {
                double sum = 0.0;
                for (int l = 0; l < K; l++)
                    sum += (p.transa ? a.value(l, i) : a.value(i, l)) *
                           (p.transb ? b.value(j, l) : b.value(l, j));
                double expected = 2.0 * sum + p.beta * c.value(i, j);
                if (p.bias) expected += bias.value(i, 0);
                const size_t at = d.index(i, j);
                const float got = p.d_type == CUDA_R_32F ? out[at] : __half2float(out16[at]);
                if (got != (float)expected)
                    fail_msg("D(%d, %d) = %g, expected %g (transa %d transb %d row-major %d)", i,
                             j, got, expected, p.transa, p.transb, p.row_major);
            }
    }
    cublasLtMatmulPreferenceDestroy(preference);
    cublasLtMatmulDescDestroy(desc);
    cudaFree(workspace);
    lt_matrix_free(&a);
    lt_matrix_free(&b);
    lt_matrix_free(&c);
    lt_matrix_free(&d);
    lt_matrix_free(&bias);
    cublasLtDestroy(handle);
    return status;
}

static void test_cublaslt_computes_what_it_is_told(void **state) {
    (void)state;
    for (int transa = 0; transa < 2; transa++)
        for (int transb = 0; transb < 2; transb++)
            for (int row_major = 0; row_major < 2; row_major++)
                for (int bias = 0; bias < 2; bias++) {
                    LtProduct p = lt_product();
                    p.transa = transa;
                    p.transb = transb;
                    p.row_major = row_major;
                    p.bias = bias;
                    assert_int_equal(lt_run(p), CUBLAS_STATUS_SUCCESS);
                }
    LtProduct fp32_d = lt_product();
    fp32_d.d_type = CUDA_R_32F;
    fp32_d.beta = 0.5f;  // C read
    assert_int_equal(lt_run(fp32_d), CUBLAS_STATUS_SUCCESS);
}

static void test_cublaslt_refuses_what_it_cannot_do(void **state) {
    (void)state;
    const LtProduct right = lt_product();
    assert_int_equal(lt_run(right), CUBLAS_STATUS_SUCCESS);
    LtProduct p = right;
    p.bias_type = CUDA_R_32F;  // an fp32 bias for a 16-bit D: not in cuBLASLt's table
    assert_int_equal(lt_run(p), CUBLAS_STATUS_NOT_SUPPORTED);
    p = right;
    p.epilogue = CUBLASLT_EPILOGUE_GELU_BIAS;
    assert_int_equal(lt_run(p), CUBLAS_STATUS_NOT_SUPPORTED);
    p = right;
    p.workspace_given = 1024;  // less than the heuristic's algorithm needs
    assert_int_equal(lt_run(p), CUBLAS_STATUS_INVALID_VALUE);
    p = right;
    p.misalign_a = 1;  // less aligned than the heuristic was told
    assert_int_equal(lt_run(p), CUBLAS_STATUS_INVALID_VALUE);
    p = right;
    p.host_b = 1;
    assert_int_equal(lt_run(p), CUBLAS_STATUS_INVALID_VALUE);
}

// ---- the emulated cuBLAS's handles (emu_cublas.c) -----------------------------------------

extern "C" void *emu_dlopen(const char *name, int flags);
extern "C" void *emu_dlsym(void *library, const char *symbol);

// A destroyed handle is free for the next create, as a real one's memory is
// (test_method_steps makes and ends a backend per case: its 17th once found
// none); 16 alive at once is the emulation's limit, and a 17th is refused.
static void test_cublas_handles_are_reused_after_destroy(void **state) {
    void *library = emu_dlopen("libcublas.so.13", RTLD_NOW);
    assert_non_null(library);
    typedef cublasStatus_t (*Create)(cublasHandle_t *);
    typedef cublasStatus_t (*Destroy)(cublasHandle_t);
    const Create create = (Create)emu_dlsym(library, "cublasCreate_v2");
    const Destroy destroy = (Destroy)emu_dlsym(library, "cublasDestroy_v2");
    assert_non_null(create);
    assert_non_null(destroy);
    for (int i = 0; i < 40; i++) {  // one at a time: never more than one alive
        cublasHandle_t handle = NULL;
        assert_int_equal(create(&handle), CUBLAS_STATUS_SUCCESS);
        assert_int_equal(destroy(handle), CUBLAS_STATUS_SUCCESS);
    }
    cublasHandle_t alive[17];
    for (int i = 0; i < 16; i++) assert_int_equal(create(&alive[i]), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(create(&alive[16]), CUBLAS_STATUS_ALLOC_FAILED);
    assert_int_equal(destroy(alive[3]), CUBLAS_STATUS_SUCCESS);
    assert_int_equal(destroy(alive[3]), CUBLAS_STATUS_NOT_INITIALIZED);  // twice
    assert_int_equal(create(&alive[16]), CUBLAS_STATUS_SUCCESS);
    assert_ptr_equal(alive[16], alive[3]);
    for (int i = 0; i < 17; i++)
        if (i != 3) assert_int_equal(destroy(alive[i]), CUBLAS_STATUS_SUCCESS);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_correct_kernel_runs),
        cmocka_unit_test(test_a_barrier_some_threads_left_stops),
        cmocka_unit_test(test_shuffles_outside_a_whole_warp_stop),
        cmocka_unit_test(test_the_warp_sum_is_exchanged),
        cmocka_unit_test(test_a_misaligned_vector_access_stops),
        cmocka_unit_test(test_a_write_past_an_allocation_stops),
        cmocka_unit_test(test_a_bad_launch_configuration_fails_the_launch),
        cmocka_unit_test(test_dynamic_shared_memory_needs_its_allowance),
        cmocka_unit_test(test_copies_and_memsets_outside_device_memory_fail),
        cmocka_unit_test(test_unwritten_memory_reads_as_nan),
        cmocka_unit_test(test_cublaslt_computes_what_it_is_told),
        cmocka_unit_test(test_cublaslt_refuses_what_it_cannot_do),
        cmocka_unit_test(test_cublas_handles_are_reused_after_destroy),
    };
    return cmocka_run_group_tests_name("cuda emulation checks", tests, NULL, NULL);
}
