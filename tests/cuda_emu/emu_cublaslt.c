// The cuBLASLt of the CUDA emulation: the functions cuda_blas_lt.c calls,
// defined here with cublasLt.h's own prototypes (the compiler checks them)
// in place of cublaslt_library.c's forwarders (left out of this build, as
// cudnn_library.c is), plus cublasLtMatrixLayoutSetAttribute for the
// emulation's own checks of row-major layouts (test_emu_checks.cu).
//
// What it computes: D = alpha op(A) op(B) + beta C, plus the bias along D's
// rows with CUBLASLT_EPILOGUE_BIAS; A and B both CUDA_R_16F or both
// CUDA_R_16BF, C and D of one type (A's, or CUDA_R_32F), the bias of D's
// type (cuBLAS's documentation, cublasLtMatmul "Datatypes Supported"),
// CUBLAS_COMPUTE_32F with an fp32 scale type and alpha, beta on the host;
// each layout column- or row-major with its leading dimension, one matrix
// per layout. Sums in fp32 in k order, then alpha times the sum, beta C when
// beta is not 0 (C is not read otherwise), the bias widened to fp32, and
// one rounding to nearest even into D's type. Anything else is refused, never
// computed some other way: CUBLAS_STATUS_NOT_SUPPORTED for what it does not
// implement, CUBLAS_STATUS_INVALID_VALUE (with a message) for what cuBLASLt
// would refuse or a GPU would fault on.
//
// The heuristic offers one algorithm, which records the problem it was
// found for, the pointer alignments it may assume (the preference's,
// 256 bytes unless told less, and the bias pointer's own) and the workspace
// it needs (1 MiB, or the preference's maximum if less). cublasLtMatmul
// refuses an algorithm of another problem, a smaller workspace, pointers
// less aligned than the heuristic assumed, and matrices, bias or workspace
// outside device memory. On a capturing stream a product is recorded
// (emu_blas.h) with its descriptors' contents, alpha and beta as at the
// call; its pointers are checked and its memory read when the graph runs.
//
// LTC_EMU_CUBLASLT makes it a cuBLASLt that cannot run a shape, so tests
// reach the backend's fallback: "no-algorithm" (the heuristic finds none),
// "not-supported" (cublasLtMatmul returns CUBLAS_STATUS_NOT_SUPPORTED).
#include <cublasLt.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cublaslt_library.h"
#include "tests/cuda_emu/emu_blas.h"
#include "tests/cuda_emu/emu_log.h"

// The emulation is its own cuBLASLt: nothing to open.
int cublaslt_library_open(ErrorMessage *err) { return 0; }
const char *cublaslt_library_file(void) { return "cuBLASLt (CPU emulation)"; }

enum { ALIVE = 0x4c74456d, WORKSPACE_NEED = 1 << 20 };

struct cublasLtContext {
    uint32_t alive;
};

typedef struct EmuDesc {
    uint32_t alive;
    cublasComputeType_t compute;
    cudaDataType_t scale;
    int32_t transa, transb, transc;
    uint32_t epilogue;
    const void *bias;
    int32_t bias_type;  // -1: D's type
} EmuDesc;

typedef struct EmuLayout {
    uint32_t alive;
    cudaDataType type;
    uint64_t rows, cols;
    int64_t ld;
    int32_t order, batch_count;
} EmuLayout;

typedef struct EmuPreference {
    uint32_t alive;
    uint64_t max_workspace;
    uint32_t alignment[4];  // A, B, C, D
} EmuPreference;

// The problem a call describes: what an algorithm is found for.
typedef struct EmuProblem {
    uint32_t m, n, k;
    int8_t a_type, c_type;
    int8_t transa, transb, bias;
} EmuProblem;

// What the heuristic's algorithm records, inside cublasLtMatmulAlgo_t.
typedef struct EmuAlgorithm {
    uint32_t alive;
    EmuProblem problem;
    uint32_t alignment[4];  // A, B, C, D
    uint32_t bias_alignment;
    uint64_t workspace;
} EmuAlgorithm;
_Static_assert(sizeof(EmuAlgorithm) <= sizeof(cublasLtMatmulAlgo_t),
               "the algorithm's record fits cublasLtMatmulAlgo_t");

static cublasStatus_t refuse(cublasStatus_t status, const char *call, const char *why) {
    fprintf(stderr, "cuda emulation: %s: %s\n", call, why);
    return status;
}

static const char *emulation_mode(void) {
    const char *mode = getenv("LTC_EMU_CUBLASLT");
    return mode ? mode : "";
}

// The largest power of two up to 256 dividing the address.
static uint32_t alignment_of(const void *pointer) {
    uint32_t alignment = 256;
    while (alignment > 1 && (uintptr_t)pointer % alignment != 0) alignment /= 2;
    return alignment;
}

// ---- handle, status, descriptors ----------------------------------------------------------

cublasStatus_t cublasLtCreate(cublasLtHandle_t *handle) {
    *handle = calloc(1, sizeof **handle);
    if (!*handle) return CUBLAS_STATUS_ALLOC_FAILED;
    (*handle)->alive = ALIVE;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtDestroy(cublasLtHandle_t handle) {
    if (!handle || handle->alive != ALIVE) return CUBLAS_STATUS_NOT_INITIALIZED;
    handle->alive = 0;
    free(handle);
    return CUBLAS_STATUS_SUCCESS;
}

const char *cublasLtGetStatusString(cublasStatus_t status) {
    switch (status) {
    case CUBLAS_STATUS_SUCCESS: return "CUBLAS_STATUS_SUCCESS";
    case CUBLAS_STATUS_NOT_INITIALIZED: return "CUBLAS_STATUS_NOT_INITIALIZED (cuda emulation)";
    case CUBLAS_STATUS_ALLOC_FAILED: return "CUBLAS_STATUS_ALLOC_FAILED (cuda emulation)";
    case CUBLAS_STATUS_INVALID_VALUE: return "CUBLAS_STATUS_INVALID_VALUE (cuda emulation)";
    case CUBLAS_STATUS_NOT_SUPPORTED: return "CUBLAS_STATUS_NOT_SUPPORTED (cuda emulation)";
    default: return "cuBLASLt error (cuda emulation)";
    }
}

#define NEW_OBJECT(type, out)                                   \
    do {                                                        \
        type *object_ = calloc(1, sizeof *object_);             \
        if (!object_) return CUBLAS_STATUS_ALLOC_FAILED;        \
        object_->alive = ALIVE;                                 \
        *(out) = (void *)object_;                               \
    } while (0)
#define FREE_OBJECT(type, object)                                           \
    do {                                                                    \
        type *object_ = (type *)(void *)(object);                           \
        if (!object_ || object_->alive != ALIVE) return CUBLAS_STATUS_INVALID_VALUE; \
        object_->alive = 0;                                                 \
        free(object_);                                                      \
        return CUBLAS_STATUS_SUCCESS;                                       \
    } while (0)

static EmuDesc *desc_of(cublasLtMatmulDesc_t desc) {
    EmuDesc *d = (EmuDesc *)(void *)desc;
    return d && d->alive == ALIVE ? d : NULL;
}
static EmuLayout *layout_of(cublasLtMatrixLayout_t layout) {
    EmuLayout *l = (EmuLayout *)(void *)layout;
    return l && l->alive == ALIVE ? l : NULL;
}
static EmuPreference *preference_of(cublasLtMatmulPreference_t preference) {
    EmuPreference *p = (EmuPreference *)(void *)preference;
    return p && p->alive == ALIVE ? p : NULL;
}

cublasStatus_t cublasLtMatmulDescCreate(cublasLtMatmulDesc_t *desc, cublasComputeType_t compute,
                                        cudaDataType_t scale) {
    NEW_OBJECT(EmuDesc, desc);
    EmuDesc *d = desc_of(*desc);
    d->compute = compute;
    d->scale = scale;
    d->transa = d->transb = d->transc = CUBLAS_OP_N;
    d->epilogue = CUBLASLT_EPILOGUE_DEFAULT;
    d->bias_type = -1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulDescDestroy(cublasLtMatmulDesc_t desc) { FREE_OBJECT(EmuDesc, desc); }

// Where an attribute is kept in an emulated object, and its size.
typedef struct Field {
    int attribute;
    size_t offset, size;
} Field;

#define FIELD(attribute, type, member) \
    {(int)(attribute), offsetof(type, member), sizeof(((type *)0)->member)}

static const Field desc_fields[] = {
    FIELD(CUBLASLT_MATMUL_DESC_TRANSA, EmuDesc, transa),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSB, EmuDesc, transb),
    FIELD(CUBLASLT_MATMUL_DESC_TRANSC, EmuDesc, transc),
    FIELD(CUBLASLT_MATMUL_DESC_EPILOGUE, EmuDesc, epilogue),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_POINTER, EmuDesc, bias),
    FIELD(CUBLASLT_MATMUL_DESC_BIAS_DATA_TYPE, EmuDesc, bias_type),
};
static const Field layout_fields[] = {
    FIELD(CUBLASLT_MATRIX_LAYOUT_ORDER, EmuLayout, order),
    FIELD(CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, EmuLayout, batch_count),
};
static const Field preference_fields[] = {
    FIELD(CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, EmuPreference, max_workspace),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, EmuPreference, alignment[0]),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, EmuPreference, alignment[1]),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, EmuPreference, alignment[2]),
    FIELD(CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, EmuPreference, alignment[3]),
};
#define COUNT(fields) (sizeof fields / sizeof fields[0])

// The attribute into its field of `object` (NULL: not a live object), as
// cuBLASLt checks it: the caller's size must be the attribute's.
static cublasStatus_t set_attribute(const char *call, void *object, const Field *fields,
                                    size_t count, int attribute, const void *value,
                                    size_t size) {
    if (!object) return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a live object");
    for (size_t i = 0; i < count; i++) {
        if (fields[i].attribute != attribute) continue;
        if (!value || size != fields[i].size)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "an attribute of the wrong size");
        memcpy((char *)object + fields[i].offset, value, size);
        return CUBLAS_STATUS_SUCCESS;
    }
    return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "an attribute not emulated");
}

cublasStatus_t cublasLtMatmulDescSetAttribute(cublasLtMatmulDesc_t desc,
                                              cublasLtMatmulDescAttributes_t attribute,
                                              const void *value, size_t size) {
    return set_attribute("cublasLtMatmulDescSetAttribute", desc_of(desc), desc_fields,
                         COUNT(desc_fields), (int)attribute, value, size);
}

cublasStatus_t cublasLtMatrixLayoutCreate(cublasLtMatrixLayout_t *layout, cudaDataType type,
                                          uint64_t rows, uint64_t cols, int64_t ld) {
    NEW_OBJECT(EmuLayout, layout);
    EmuLayout *l = layout_of(*layout);
    l->type = type;
    l->rows = rows;
    l->cols = cols;
    l->ld = ld;
    l->order = CUBLASLT_ORDER_COL;
    l->batch_count = 1;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatrixLayoutDestroy(cublasLtMatrixLayout_t layout) {
    FREE_OBJECT(EmuLayout, layout);
}

cublasStatus_t cublasLtMatrixLayoutSetAttribute(cublasLtMatrixLayout_t layout,
                                                cublasLtMatrixLayoutAttribute_t attribute,
                                                const void *value, size_t size) {
    return set_attribute("cublasLtMatrixLayoutSetAttribute", layout_of(layout), layout_fields,
                         COUNT(layout_fields), (int)attribute, value, size);
}

cublasStatus_t cublasLtMatmulPreferenceCreate(cublasLtMatmulPreference_t *preference) {
    NEW_OBJECT(EmuPreference, preference);
    EmuPreference *p = preference_of(*preference);
    for (int i = 0; i < 4; i++) p->alignment[i] = 256;
    return CUBLAS_STATUS_SUCCESS;
}

cublasStatus_t cublasLtMatmulPreferenceDestroy(cublasLtMatmulPreference_t preference) {
    FREE_OBJECT(EmuPreference, preference);
}

cublasStatus_t cublasLtMatmulPreferenceSetAttribute(cublasLtMatmulPreference_t preference,
                                                    cublasLtMatmulPreferenceAttributes_t attribute,
                                                    const void *value, size_t size) {
    return set_attribute("cublasLtMatmulPreferenceSetAttribute", preference_of(preference),
                         preference_fields, COUNT(preference_fields), (int)attribute, value,
                         size);
}

// ---- the problem ---------------------------------------------------------------------------

static int is_16bit(cudaDataType type) { return type == CUDA_R_16F || type == CUDA_R_16BF; }

// Element (row, col) of a matrix of this layout.
static size_t element(const EmuLayout *l, uint64_t row, uint64_t col) {
    return l->order == CUBLASLT_ORDER_ROW ? (size_t)(row * (uint64_t)l->ld + col)
                                          : (size_t)(col * (uint64_t)l->ld + row);
}

// The distances between neighbouring rows and between neighbouring columns
// of op(X), X laid out as l: op(X)[r, c] is element(l, r, c), or
// element(l, c, r) when transposed.
static void op_strides(const EmuLayout *l, cublasOperation_t op, size_t *row, size_t *col) {
    const size_t rows_apart = l->order == CUBLASLT_ORDER_ROW ? (size_t)l->ld : 1;
    const size_t cols_apart = l->order == CUBLASLT_ORDER_ROW ? 1 : (size_t)l->ld;
    *row = op == CUBLAS_OP_N ? rows_apart : cols_apart;
    *col = op == CUBLAS_OP_N ? cols_apart : rows_apart;
}

// Bytes the matrix spans in memory (0 when empty).
static size_t layout_bytes(const EmuLayout *l) {
    if (l->order == CUBLASLT_ORDER_ROW)
        return emu_blas_matrix_bytes(l->type, l->cols, l->rows, (size_t)l->ld);
    return emu_blas_matrix_bytes(l->type, l->rows, l->cols, (size_t)l->ld);
}

// The problem of desc and the four layouts, or why there is none.
static cublasStatus_t problem_of(const char *call, const EmuDesc *d, const EmuLayout *a,
                                 const EmuLayout *b, const EmuLayout *c, const EmuLayout *dl,
                                 EmuProblem *problem) {
    if (!d || !a || !b || !c || !dl)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a descriptor or layout not live");
    if (d->compute != CUBLAS_COMPUTE_32F || d->scale != CUDA_R_32F)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "compute or scale type not emulated");
    if ((d->transa != CUBLAS_OP_N && d->transa != CUBLAS_OP_T) ||
        (d->transb != CUBLAS_OP_N && d->transb != CUBLAS_OP_T) || d->transc != CUBLAS_OP_N)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "a transpose not emulated");
    if (d->epilogue != CUBLASLT_EPILOGUE_DEFAULT && d->epilogue != CUBLASLT_EPILOGUE_BIAS)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "an epilogue not emulated");
    if (!is_16bit(a->type) || b->type != a->type || c->type != dl->type ||
        (dl->type != a->type && dl->type != CUDA_R_32F))
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "data types not emulated");
    const int bias = d->epilogue == CUBLASLT_EPILOGUE_BIAS;
    if (bias && d->bias_type != -1 && d->bias_type != (int32_t)dl->type)
        return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "a bias not of D's type");
    const EmuLayout *layouts[4] = {a, b, c, dl};
    for (int i = 0; i < 4; i++) {
        const EmuLayout *l = layouts[i];
        if (l->batch_count != 1)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "batches not emulated");
        if (l->order != CUBLASLT_ORDER_COL && l->order != CUBLASLT_ORDER_ROW)
            return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "a layout order not emulated");
        const uint64_t line = l->order == CUBLASLT_ORDER_COL ? l->rows : l->cols;
        if (l->ld < 1 || (uint64_t)l->ld < line || l->rows > INT32_MAX || l->cols > INT32_MAX)
            return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "a leading dimension too small");
    }
    const uint64_t m = dl->rows, n = dl->cols;
    const uint64_t k = d->transa == CUBLAS_OP_N ? a->cols : a->rows;
    const uint64_t a_m = d->transa == CUBLAS_OP_N ? a->rows : a->cols;
    const uint64_t b_k = d->transb == CUBLAS_OP_N ? b->rows : b->cols;
    const uint64_t b_n = d->transb == CUBLAS_OP_N ? b->cols : b->rows;
    if (a_m != m || b_k != k || b_n != n || c->rows != m || c->cols != n)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "op(A) op(B), C and D do not fit");
    problem->m = (uint32_t)m;
    problem->n = (uint32_t)n;
    problem->k = (uint32_t)k;
    problem->a_type = (int8_t)a->type;
    problem->c_type = (int8_t)dl->type;
    problem->transa = (int8_t)d->transa;
    problem->transb = (int8_t)d->transb;
    problem->bias = (int8_t)bias;
    return CUBLAS_STATUS_SUCCESS;
}

// ---- heuristic and product ----------------------------------------------------------------

cublasStatus_t cublasLtMatmulAlgoGetHeuristic(
    cublasLtHandle_t handle, cublasLtMatmulDesc_t desc, cublasLtMatrixLayout_t a,
    cublasLtMatrixLayout_t b, cublasLtMatrixLayout_t c, cublasLtMatrixLayout_t d,
    cublasLtMatmulPreference_t preference, int requested, cublasLtMatmulHeuristicResult_t results[],
    int *returned) {
    const char *call = "cublasLtMatmulAlgoGetHeuristic";
    const EmuPreference *p = preference_of(preference);
    if (!handle || handle->alive != ALIVE) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (requested <= 0 || !p || !results || !returned)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "no room for results or no preference");
    const EmuDesc *dd = desc_of(desc);
    EmuAlgorithm algorithm;
    memset(&algorithm, 0, sizeof algorithm);
    const cublasStatus_t status =
        problem_of(call, dd, layout_of(a), layout_of(b), layout_of(c), layout_of(d),
                   &algorithm.problem);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    *returned = 0;
    if (strcmp(emulation_mode(), "no-algorithm") == 0) return CUBLAS_STATUS_SUCCESS;
    algorithm.alive = ALIVE;
    memcpy(algorithm.alignment, p->alignment, sizeof algorithm.alignment);
    algorithm.bias_alignment = algorithm.problem.bias ? alignment_of(dd->bias) : 1;
    algorithm.workspace = p->max_workspace < WORKSPACE_NEED ? p->max_workspace : WORKSPACE_NEED;
    memset(&results[0], 0, sizeof results[0]);
    memcpy(&results[0].algo, &algorithm, sizeof algorithm);
    results[0].workspaceSize = (size_t)algorithm.workspace;
    results[0].state = CUBLAS_STATUS_SUCCESS;
    results[0].wavesCount = 1.0f;
    *returned = 1;
    return CUBLAS_STATUS_SUCCESS;
}

// Checks a pointer against the alignment its algorithm assumed.
static int aligned(const char *call, const char *what, const void *p, uint32_t alignment) {
    if ((uintptr_t)p % alignment == 0) return 1;
    fprintf(stderr, "cuda emulation: %s: %s at %p is less aligned than the %u bytes the "
                    "heuristic was told\n", call, what, p, alignment);
    return 0;
}

static int same_layout(const EmuLayout *x, const EmuLayout *y) {
    return x->type == y->type && x->rows == y->rows && x->cols == y->cols && x->ld == y->ld &&
           x->order == y->order;
}

// A product as cublasLtMatmul was handed it: the descriptors' contents,
// alpha and beta taken at the call (emu_blas.h records it so on a
// capturing stream), the pointers kept.
typedef struct MatmulCall {
    EmuDesc desc;
    EmuLayout a_layout, b_layout, c_layout, d_layout;
    EmuProblem problem;
    EmuAlgorithm algorithm;
    float alpha, beta;
    const void *a, *b, *c;
    void *d, *workspace;
    size_t workspace_bytes;
} MatmulCall;

static int run_matmul(const void *arguments);

cublasStatus_t cublasLtMatmul(cublasLtHandle_t handle, cublasLtMatmulDesc_t desc,
                              const void *alpha, const void *a, cublasLtMatrixLayout_t a_desc,
                              const void *b, cublasLtMatrixLayout_t b_desc, const void *beta,
                              const void *c, cublasLtMatrixLayout_t c_desc, void *d,
                              cublasLtMatrixLayout_t d_desc, const cublasLtMatmulAlgo_t *algo,
                              void *workspace, size_t workspace_bytes, cudaStream_t stream) {
    const char *call = "cublasLtMatmul";
    ltc_emu_log("cublas", call, 0);
    if (!handle || handle->alive != ALIVE) return CUBLAS_STATUS_NOT_INITIALIZED;
    if (!ltc_emu_stream_valid(stream))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "not a live stream");
    ltc_emu_stream_computes(stream);
    const EmuDesc *dd = desc_of(desc);
    const EmuLayout *al = layout_of(a_desc), *bl = layout_of(b_desc), *cl = layout_of(c_desc),
                    *dl = layout_of(d_desc);
    EmuProblem problem;
    memset(&problem, 0, sizeof problem);
    cublasStatus_t status = problem_of(call, dd, al, bl, cl, dl, &problem);
    if (status != CUBLAS_STATUS_SUCCESS) return status;
    if (!algo) return refuse(CUBLAS_STATUS_NOT_SUPPORTED, call, "no algorithm (not emulated)");
    EmuAlgorithm algorithm;
    memcpy(&algorithm, algo, sizeof algorithm);
    if (algorithm.alive != ALIVE || memcmp(&algorithm.problem, &problem, sizeof problem) != 0)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                      "an algorithm the heuristic did not give for this problem");
    if (strcmp(emulation_mode(), "not-supported") == 0) return CUBLAS_STATUS_NOT_SUPPORTED;
    const MatmulCall m = {*dd, *al, *bl, *cl, *dl, problem, algorithm, *(const float *)alpha,
                          *(const float *)beta, a, b, c, d, workspace, workspace_bytes};
    if (ltc_emu_capture_call(stream, call, run_matmul, &m, sizeof m))
        return CUBLAS_STATUS_SUCCESS;
    return (cublasStatus_t)run_matmul(&m);
}

// The product of a checked call: its pointers, then the loops.
static int run_matmul(const void *arguments) {
    const char *call = "cublasLtMatmul";
    const MatmulCall *m = arguments;
    const EmuDesc *dd = &m->desc;
    const EmuLayout *al = &m->a_layout, *bl = &m->b_layout, *cl = &m->c_layout,
                    *dl = &m->d_layout;
    const EmuProblem problem = m->problem;
    const EmuAlgorithm algorithm = m->algorithm;
    const void *a = m->a, *b = m->b, *c = m->c;
    void *d = m->d, *workspace = m->workspace;
    const size_t workspace_bytes = m->workspace_bytes;
    if (workspace_bytes < algorithm.workspace)
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call,
                      "a workspace smaller than the algorithm's");
    const float alpha_value = m->alpha, beta_value = m->beta;
    const size_t bias_bytes = problem.bias ? problem.m * emu_blas_type_bytes(dl->type) : 0;
    if (!emu_blas_on_device(call, "the workspace", workspace, workspace_bytes) ||
        !emu_blas_on_device(call, "A", a, layout_bytes(al)) ||
        !emu_blas_on_device(call, "B", b, layout_bytes(bl)) ||
        (beta_value != 0.0f && !emu_blas_on_device(call, "C", c, layout_bytes(cl))) ||
        !emu_blas_on_device(call, "D", d, layout_bytes(dl)) ||
        (problem.bias && (!dd->bias || !emu_blas_on_device(call, "the bias", dd->bias,
                                                           bias_bytes))))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (!aligned(call, "A", a, algorithm.alignment[0]) ||
        !aligned(call, "B", b, algorithm.alignment[1]) ||
        !aligned(call, "C", c, algorithm.alignment[2]) ||
        !aligned(call, "D", d, algorithm.alignment[3]) ||
        (problem.bias && !aligned(call, "the bias", dd->bias, algorithm.bias_alignment)))
        return CUBLAS_STATUS_INVALID_VALUE;
    if (c == d && !same_layout(cl, dl))
        return refuse(CUBLAS_STATUS_INVALID_VALUE, call, "C is D in place but laid out apart");
    size_t a_row, a_col, b_row, b_col;
    op_strides(al, problem.transa, &a_row, &a_col);
    op_strides(bl, problem.transb, &b_row, &b_col);
    float *sums = emu_blas_sums(problem.m, problem.n, problem.k, a, al->type, a_row, a_col, b,
                                bl->type, b_row, b_col);
    if (!sums) return CUBLAS_STATUS_ALLOC_FAILED;
    for (uint64_t j = 0; j < problem.n; j++)
        for (uint64_t i = 0; i < problem.m; i++) {
            float value = alpha_value * sums[j * problem.m + i];
            if (beta_value != 0.0f)
                value += beta_value * emu_blas_load(c, cl->type, element(cl, i, j));
            if (problem.bias) value += emu_blas_load(dd->bias, dl->type, (size_t)i);
            emu_blas_store(d, dl->type, element(dl, i, j), value);
        }
    free(sums);
    return CUBLAS_STATUS_SUCCESS;
}
