// The 16-bit linear layers with a bias in one cuBLASLt call (cuda_gemm.c's
// cuda_linear_forward calls it): y = x w^T + bias as cublasLtMatmul with
// CUBLASLT_EPILOGUE_BIAS, CUBLAS_COMPUTE_32F (tensor cores, fp32 sums), an
// fp32 scale type, and x, w, y and the bias in the activations' 16-bit type:
// the fp32 product plus the bias widened, rounded once to y's type. The
// bias is the fp32 parameter rounded to 16 bits first (the caller does it),
// because cuBLASLt takes no other: cuBLAS's documentation (cublasLtMatmul,
// "Datatypes Supported", CUDA 13) lists for 16-bit A/B with
// CUBLAS_COMPUTE_32F only a bias of D's type. That is PyTorch's order under
// autocast too (nn.Linear runs ATen's gemm_and_bias, cuBLASLt's bias
// epilogue, with the bias cast to the 16-bit dtype), and the ref backend's
// (ref_linear.c).
//
// The row-major product is the column-major one cuda_gemm.c uses: y^T (out,
// rows) = op(w^T) x^T, with A = w read as the column-major (in, out) matrix
// and transposed, B = x as (in, rows), D = y as (out, rows); the bias runs
// along D's rows, one per output channel.
//
// A plan per shape (dtype, rows, in, out, and the pointers' alignments: the
// heuristic assumes 256 bytes unless told less, and reads the bias
// pointer's from its value) keeps the descriptors and the algorithm
// cublasLtMatmulAlgoGetHeuristic chose: cuBLAS's documentation ("Heuristics
// Cache") says the heuristic's host computation can take tens of
// microseconds and recommends querying once and reusing the result; the
// descriptors are small host objects, kept with it so a step makes none.
// A shape for which cuBLASLt has no algorithm, or whose cublasLtMatmul
// returns CUBLAS_STATUS_NOT_SUPPORTED, is remembered as such (one line on
// stderr) and runs cuda_gemm.c's separate pass (as does every layer under
// LTC_CUDA_LINEAR_BIAS=separate).
//
// Compiled with -Werror and run on the CUDA emulation (tests/cuda_emu/
// emu_cublaslt.c), not run on a GPU yet.
#include <cublasLt.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cublaslt_library.h"
#include "backend/cuda/cuda_internal.h"

// Per-shape plans kept; a further shape takes the place of the oldest.
#define LT_PLAN_SLOTS 32
// The workspace cuBLASLt may use: NVIDIA's recommendation for cuBLAS's
// workspace (cuBLAS documentation, cublasSetWorkspace), 32 MiB on Hopper
// and later, 4 MiB before.
#define LT_WORKSPACE_HOPPER ((size_t)32 << 20)
#define LT_WORKSPACE_OLDER ((size_t)4 << 20)

typedef struct LtPlan {
    int used;
    ComputeDtype dtype;
    int rows, in, out;
    uint32_t align_x, align_w, align_y, align_bias;
    int has_algorithm;  // 0: the separate pass runs this shape
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t w_layout, x_layout, y_layout;
    cublasLtMatmulAlgo_t algorithm;
} LtPlan;

struct CudaBlasLt {
    cublasLtHandle_t handle;
    void *workspace;  // device
    size_t workspace_bytes;
    LtPlan plans[LT_PLAN_SLOTS];
    int next_slot;  // where the next new shape goes
};

#define LT_CHECK(call)                                                                        \
    do {                                                                                      \
        cublasStatus_t lt_status_ = (call);                                                   \
        if (lt_status_ != CUBLAS_STATUS_SUCCESS)                                              \
            cuda_fatal("cuBLASLt", #call, cublasLtGetStatusString(lt_status_), __FILE__,      \
                       __LINE__, cuda_current_device());                                      \
    } while (0)

static void set_desc(cublasLtMatmulDesc_t desc, cublasLtMatmulDescAttributes_t attribute,
                     const void *value, size_t size) {
    LT_CHECK(cublasLtMatmulDescSetAttribute(desc, attribute, value, size));
}

// The largest power of two up to 256 that divides the address: what the
// heuristic is told to assume (it assumes 256 unless told less).
static uint32_t alignment_of(const void *pointer) {
    uint32_t alignment = 256;
    while (alignment > 1 && (uintptr_t)pointer % alignment != 0) alignment /= 2;
    return alignment;
}

static void plan_release(LtPlan *plan) {
    if (!plan->used) return;
    LT_CHECK(cublasLtMatrixLayoutDestroy(plan->y_layout));
    LT_CHECK(cublasLtMatrixLayoutDestroy(plan->x_layout));
    LT_CHECK(cublasLtMatrixLayoutDestroy(plan->w_layout));
    LT_CHECK(cublasLtMatmulDescDestroy(plan->desc));
    memset(plan, 0, sizeof *plan);
}

// The descriptors of y = x w^T + bias and cuBLASLt's first algorithm for
// them, if it has one.
static void plan_make(CudaBlasLt *lt, LtPlan *plan, ComputeDtype dtype, int rows, int in,
                      int out, const void *x, const void *w, const void *bias16, void *y) {
    const cudaDataType_t type = dtype == COMPUTE_BF16 ? CUDA_R_16BF : CUDA_R_16F;
    plan->used = 1;
    plan->dtype = dtype;
    plan->rows = rows;
    plan->in = in;
    plan->out = out;
    plan->align_x = alignment_of(x);
    plan->align_w = alignment_of(w);
    plan->align_y = alignment_of(y);
    plan->align_bias = alignment_of(bias16);
    LT_CHECK(cublasLtMatmulDescCreate(&plan->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const int32_t transpose = CUBLAS_OP_T, keep = CUBLAS_OP_N;
    const uint32_t epilogue = CUBLASLT_EPILOGUE_BIAS;
    const int32_t bias_type = (int32_t)type;
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSA, &transpose, sizeof transpose);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_TRANSB, &keep, sizeof keep);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof epilogue);
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, &bias_type, sizeof bias_type);
    // The heuristic reads the bias pointer's alignment from its value.
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias16, sizeof bias16);
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->w_layout, type, (uint64_t)in, (uint64_t)out, in));
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->x_layout, type, (uint64_t)in, (uint64_t)rows, in));
    LT_CHECK(cublasLtMatrixLayoutCreate(&plan->y_layout, type, (uint64_t)out, (uint64_t)rows,
                                        out));

    cublasLtMatmulPreference_t preference;
    LT_CHECK(cublasLtMatmulPreferenceCreate(&preference));
    const uint64_t workspace = lt->workspace_bytes;
    LT_CHECK(cublasLtMatmulPreferenceSetAttribute(
        preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace, sizeof workspace));
    const struct {
        cublasLtMatmulPreferenceAttributes_t attribute;
        uint32_t bytes;
    } alignments[] = {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, plan->align_w},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, plan->align_x},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, plan->align_y},
                      {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, plan->align_y}};
    for (size_t i = 0; i < sizeof alignments / sizeof alignments[0]; i++)
        LT_CHECK(cublasLtMatmulPreferenceSetAttribute(preference, alignments[i].attribute,
                                                      &alignments[i].bytes,
                                                      sizeof alignments[i].bytes));
    cublasLtMatmulHeuristicResult_t result;
    memset(&result, 0, sizeof result);
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        lt->handle, plan->desc, plan->w_layout, plan->x_layout, plan->y_layout, plan->y_layout,
        preference, 1, &result, &found);
    LT_CHECK(cublasLtMatmulPreferenceDestroy(preference));
    // NOT_SUPPORTED: "no heuristic function available for current configuration".
    if (status != CUBLAS_STATUS_NOT_SUPPORTED) LT_CHECK(status);
    plan->has_algorithm = status == CUBLAS_STATUS_SUCCESS && found > 0 &&
                          result.state == CUBLAS_STATUS_SUCCESS &&
                          result.workspaceSize <= lt->workspace_bytes;
    if (plan->has_algorithm) plan->algorithm = result.algo;
}

// Said once per plan, as cuda_conv.c says a non-deterministic algorithm:
// where the fused path does not run, the benchmark should know.
static void say_separate(const LtPlan *plan, const char *why) {
    fprintf(stderr, "lightly-train-c: cuBLASLt %s for linear %d x %d -> %d in %s: its bias "
                    "runs as a separate pass\n", why, plan->rows, plan->in, plan->out,
            compute_dtype_name(plan->dtype));
}

static LtPlan *plan_for(CudaBlasLt *lt, ComputeDtype dtype, int rows, int in, int out,
                        const void *x, const void *w, const void *bias16, void *y) {
    const uint32_t align_x = alignment_of(x), align_w = alignment_of(w), align_y = alignment_of(y);
    const uint32_t align_bias = alignment_of(bias16);
    for (int i = 0; i < LT_PLAN_SLOTS; i++) {
        LtPlan *plan = &lt->plans[i];
        if (plan->used && plan->dtype == dtype && plan->rows == rows && plan->in == in &&
            plan->out == out && plan->align_x == align_x && plan->align_w == align_w &&
            plan->align_y == align_y && plan->align_bias == align_bias)
            return plan;
    }
    LtPlan *plan = &lt->plans[lt->next_slot];
    lt->next_slot = (lt->next_slot + 1) % LT_PLAN_SLOTS;
    plan_release(plan);
    plan_make(lt, plan, dtype, rows, in, out, x, w, bias16, y);
    if (!plan->has_algorithm) say_separate(plan, "has no bias-epilogue algorithm");
    return plan;
}

int cuda_blas_lt_linear(Backend *backend, int rows, int in, int out, const Act *x,
                        const Act *w, const void *bias16, Act *y) {
    CudaState *state = cuda_state(backend);
    CudaBlasLt *lt = state->blas_lt;
    LtPlan *plan = plan_for(lt, backend->compute_dtype, rows, in, out, x, w, bias16, y);
    if (!plan->has_algorithm) return -1;
    set_desc(plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias16, sizeof bias16);
    const float one = 1.0f, zero = 0.0f;  // beta 0: C (y itself) is not read
    const cublasStatus_t status =
        !cuda_queue_point()
            ? CUBLAS_STATUS_SUCCESS
            : cublasLtMatmul(lt->handle, plan->desc, &one, w, plan->w_layout, x, plan->x_layout,
                             &zero, y, plan->y_layout, y, plan->y_layout, &plan->algorithm,
                             lt->workspace, lt->workspace_bytes, state->stream);
    if (status == CUBLAS_STATUS_NOT_SUPPORTED) {
        plan->has_algorithm = 0;
        say_separate(plan, "does not support its bias-epilogue algorithm");
        return -1;
    }
    LT_CHECK(status);
    return 0;
}

int cuda_blas_lt_create(CudaState *state, ErrorMessage *err) {
    const char *asked = getenv("LTC_CUDA_LINEAR_BIAS");
    if (asked && *asked && strcmp(asked, "fused") != 0 && strcmp(asked, "separate") != 0)
        return error_set(err, "LTC_CUDA_LINEAR_BIAS=%s: expected fused (the default) or "
                              "separate", asked);
    state->linear_bias_separate = asked && strcmp(asked, "separate") == 0;
    if (cublaslt_library_open(err)) return -1;
    CudaBlasLt *lt = calloc(1, sizeof *lt);
    if (!lt) return error_set(err, "cuBLASLt: out of host memory");
    const cublasStatus_t status = cublasLtCreate(&lt->handle);
    if (status != CUBLAS_STATUS_SUCCESS) {
        free(lt);
        return error_set(err, "cuBLASLt: %s", cublasLtGetStatusString(status));
    }
    state->blas_lt = lt;
    lt->workspace_bytes = state->compute_major >= 9 ? LT_WORKSPACE_HOPPER : LT_WORKSPACE_OLDER;
    if (cudaMalloc(&lt->workspace, lt->workspace_bytes) != cudaSuccess) {
        (void)cudaGetLastError();
        lt->workspace = NULL;
        return error_set(err, "out of GPU memory for cuBLASLt's %zu MiB workspace",
                         lt->workspace_bytes >> 20);
    }
    return 0;
}

void *cuda_blas_lt_workspace(const CudaState *state, size_t *bytes) {
    *bytes = state->blas_lt->workspace_bytes;
    return state->blas_lt->workspace;
}

void cuda_blas_lt_destroy(CudaState *state) {
    CudaBlasLt *lt = state->blas_lt;
    if (!lt) return;
    for (int i = 0; i < LT_PLAN_SLOTS; i++) plan_release(&lt->plans[i]);
    if (lt->workspace) (void)cudaFree(lt->workspace);
    (void)cublasLtDestroy(lt->handle);
    free(lt);
    state->blas_lt = NULL;
}
