// Scaled dot-product attention on the CPU: threads split the (batch, head)
// pairs; each runs its head as three or five single-threaded oneDNN GEMMs
// (oneDNN runs a GEMM called inside a parallel region on the calling thread)
// around a row softmax, reading q, k, v and writing the gradients in place
// in the packed (B, T, 3, H, Dh) layout through leading dimensions. The
// (T, T) score and probability matrices live in per-thread scratch of the
// plan only while one head is computed: backward recomputes them from q, k
// and the saved log-sum-exp, as a fused GPU kernel does.
//
// exp: an AVX2 polynomial (cpu_vector_math.h, within 2 ulp of expf over the
// softmax's range) when the CPU has AVX2, libm's expf otherwise.
#include <immintrin.h>
#include <math.h>
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"
#include "backend/cpu/cpu_vector_math.h"
#include "util/cpu.h"

struct AttentionPlan {
    AttentionShape shape;
    int threads;      // scratch slots
    float *scratch;   // threads x 2 (T, T)
    int use_avx2;
};

AttentionPlan *cpu_attention_plan(Backend *backend, const AttentionShape *shape,
                                  ErrorMessage *err) {
    AttentionShape check;
    if (attention_shape_make(&check, shape->batch, shape->heads, shape->tokens, shape->head_dim,
                             err)) {
        error_prefix(err, "cpu attention plan");
        return NULL;
    }
    AttentionPlan *plan = calloc(1, sizeof *plan);
    const size_t square = (size_t)shape->tokens * shape->tokens;
    const size_t bytes = (size_t)backend->threads * 2 * square * sizeof(float);
    if (plan) {
        plan->shape = *shape;
        plan->threads = backend->threads;
        plan->use_avx2 = cpu_has_avx2();
        plan->scratch = aligned_alloc(64, (bytes + 63) / 64 * 64);
    }
    if (!plan || !plan->scratch) {
        free(plan);
        error_set(err, "cpu attention plan: out of memory for %zu MB of scratch (%d tokens, %d "
                       "threads)", bytes >> 20, shape->tokens, backend->threads);
        return NULL;
    }
    return plan;
}

void cpu_attention_plan_free(Backend *backend, AttentionPlan *plan) {
    if (!plan) return;
    free(plan->scratch);
    free(plan);
}

// ---- exp over a row -------------------------------------------------------------------

// y (n) = exp(x - shift); returns sum y in double.
VECTOR_MATH_TARGET static double exp_row_avx2(int n, const float *x, float shift, float *y) {
    const __m256 shift8 = _mm256_set1_ps(shift);
    __m256d sum_low = _mm256_setzero_pd(), sum_high = _mm256_setzero_pd();
    int i = 0;
    for (; i + 8 <= n; i += 8) {
        const __m256 e = vector_exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(x + i), shift8));
        _mm256_storeu_ps(y + i, e);
        sum_low = _mm256_add_pd(sum_low, _mm256_cvtps_pd(_mm256_castps256_ps128(e)));
        sum_high = _mm256_add_pd(sum_high, _mm256_cvtps_pd(_mm256_extractf128_ps(e, 1)));
    }
    double lanes[4];
    _mm256_storeu_pd(lanes, _mm256_add_pd(sum_low, sum_high));
    double total = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3]);
    for (; i < n; i++) {
        y[i] = expf(x[i] - shift);
        total += y[i];
    }
    return total;
}

static double exp_row(const AttentionPlan *plan, int n, const float *x, float shift, float *y) {
    if (plan->use_avx2) return exp_row_avx2(n, x, shift, y);
    double total = 0.0;
    for (int i = 0; i < n; i++) {
        y[i] = expf(x[i] - shift);
        total += y[i];
    }
    return total;
}

// ---- one head -------------------------------------------------------------------------

// Where head h of sample b starts in qkv (q; k and v follow at + H Dh, + 2 H Dh)
// and in out; the leading dimensions of the two layouts.
typedef struct HeadView {
    const float *q, *k, *v;
    size_t out_offset;  // into out / dout
    int qkv_ld, out_ld;
} HeadView;

static HeadView head_view(const AttentionShape *s, const float *qkv, int b, int h) {
    const int width = s->heads * s->head_dim;
    const float *q = qkv + (size_t)b * s->tokens * 3 * width + (size_t)h * s->head_dim;
    return (HeadView){.q = q, .k = q + width, .v = q + 2 * width,
                      .out_offset = (size_t)b * s->tokens * width + (size_t)h * s->head_dim,
                      .qkv_ld = 3 * width, .out_ld = width};
}

// row-major sgemm on the calling thread (inside the parallel region).
static void gemm(char transpose_a, char transpose_b, int m, int n, int k, float alpha,
                 const float *a, int lda, const float *b, int ldb, float *c, int ldc) {
    (void)dnnl_sgemm(transpose_a, transpose_b, m, n, k, alpha, a, lda, b, ldb, 0.0f, c, ldc);
}

// The largest of x (n), NaNs skipped (as fmaxf), written as a comparison so
// that it vectorises instead of calling libm's fmaxf per element.
static float row_max(int n, const float *x) {
    float max = -INFINITY;
#pragma omp simd reduction(max : max)
    for (int j = 0; j < n; j++) max = x[j] > max ? x[j] : max;
    return max;
}

// Forward of one head: scores, probabilities (in place), out = P V, lse.
static void head_forward(const AttentionPlan *plan, const HeadView *view, float scale,
                         float *scores, float *out, float *lse) {
    const int tokens = plan->shape.tokens, dim = plan->shape.head_dim;
    gemm('N', 'T', tokens, tokens, dim, scale, view->q, view->qkv_ld, view->k, view->qkv_ld,
         scores, tokens);
    for (int i = 0; i < tokens; i++) {
        float *row = scores + (size_t)i * tokens;
        const float max = row_max(tokens, row);
        const double total = exp_row(plan, tokens, row, max, row);
        const float inverse = (float)(1.0 / total);
#pragma omp simd
        for (int j = 0; j < tokens; j++) row[j] *= inverse;
        lse[i] = max + (float)log(total);
    }
    gemm('N', 'N', tokens, dim, tokens, 1.0f, scores, tokens, view->v, view->qkv_ld,
         out + view->out_offset, view->out_ld);
}

// Backward of one head (see backend.h): P recomputed from q, k and lse,
// dP = dout V^T, dS = P (dP - D) with D_i = dout_i . out_i, then
// dq = scale dS K, dk = scale dS^T Q, dv = P^T dout.
static void head_backward(const AttentionPlan *plan, const HeadView *view, const float *out,
                          const float *dout, const float *lse, float scale, float *dqkv_head,
                          float *probabilities, float *dscores) {
    const int tokens = plan->shape.tokens, dim = plan->shape.head_dim;
    const float *out_head = out + view->out_offset, *dout_head = dout + view->out_offset;
    gemm('N', 'T', tokens, tokens, dim, scale, view->q, view->qkv_ld, view->k, view->qkv_ld,
         probabilities, tokens);
    for (int i = 0; i < tokens; i++) {
        float *row = probabilities + (size_t)i * tokens;
        exp_row(plan, tokens, row, lse[i], row);
    }
    gemm('N', 'T', tokens, tokens, dim, 1.0f, dout_head, view->out_ld, view->v, view->qkv_ld,
         dscores, tokens);
    for (int i = 0; i < tokens; i++) {
        const float *o = out_head + (size_t)i * view->out_ld;
        const float *d_o = dout_head + (size_t)i * view->out_ld;
        double correction = 0.0;
        for (int d = 0; d < dim; d++) correction += (double)o[d] * d_o[d];
        const float delta = (float)correction;
        float *ds = dscores + (size_t)i * tokens;
        const float *p = probabilities + (size_t)i * tokens;
#pragma omp simd
        for (int j = 0; j < tokens; j++) ds[j] = p[j] * (ds[j] - delta);
    }
    const int width = view->qkv_ld / 3;
    float *dq = dqkv_head, *dk = dqkv_head + width, *dv = dqkv_head + 2 * width;
    gemm('N', 'N', tokens, dim, tokens, scale, dscores, tokens, view->k, view->qkv_ld, dq,
         view->qkv_ld);
    gemm('T', 'N', tokens, dim, tokens, scale, dscores, tokens, view->q, view->qkv_ld, dk,
         view->qkv_ld);
    gemm('T', 'N', tokens, dim, tokens, 1.0f, probabilities, tokens, dout_head, view->out_ld, dv,
         view->qkv_ld);
}

// ---- the ops ----------------------------------------------------------------------------

#ifdef _OPENMP
#include <omp.h>
#define THREAD_INDEX omp_get_thread_num()
#else
#define THREAD_INDEX 0
#endif

// The arguments of one op, shared by its head tasks.
typedef struct HeadArgs {
    const float *qkv, *out, *dout, *lse;
    float scale;
    float *result;  // out (forward) or dqkv (backward)
    float *lse_out;
} HeadArgs;

typedef void (*HeadTask)(const AttentionPlan *plan, const HeadArgs *args, int b, int h,
                         float *scratch);

// Runs task on every (b, h) pair, threads splitting the pairs (dynamic: the
// GEMMs' time varies with cache state); each thread gets its own 2 (T, T)
// scratch.
static void for_each_head(Backend *backend, const AttentionPlan *plan, HeadTask task,
                          const HeadArgs *args) {
    const AttentionShape *s = &plan->shape;
    const int pairs = s->batch * s->heads;
    const size_t square = (size_t)s->tokens * s->tokens;
    const int team = plan->threads < pairs ? plan->threads : pairs;
    cpu_set_threads(backend);
#pragma omp parallel for num_threads(team) schedule(dynamic, 1)
    for (int pair = 0; pair < pairs; pair++)
        task(plan, args, pair / s->heads, pair % s->heads,
             plan->scratch + (size_t)THREAD_INDEX * 2 * square);
}

static void forward_task(const AttentionPlan *plan, const HeadArgs *args, int b, int h,
                         float *scratch) {
    const AttentionShape *s = &plan->shape;
    const HeadView view = head_view(s, args->qkv, b, h);
    head_forward(plan, &view, args->scale, scratch, args->result,
                 args->lse_out + ((size_t)b * s->heads + h) * s->tokens);
}

static void backward_task(const AttentionPlan *plan, const HeadArgs *args, int b, int h,
                          float *scratch) {
    const AttentionShape *s = &plan->shape;
    const HeadView view = head_view(s, args->qkv, b, h);
    float *dq = args->result + (view.q - args->qkv);
    head_backward(plan, &view, args->out, args->dout,
                  args->lse + ((size_t)b * s->heads + h) * s->tokens, args->scale, dq, scratch,
                  scratch + (size_t)s->tokens * s->tokens);
}

void cpu_attention_forward(Backend *backend, const AttentionPlan *plan, const Act *qkv_act,
                           float scale, Act *out_act, float *lse) {
    const float *qkv = (const float *)qkv_act;
    float *out = (float *)out_act;
    const HeadArgs args = {.qkv = qkv, .scale = scale, .result = out, .lse_out = lse};
    for_each_head(backend, plan, forward_task, &args);
}

void cpu_attention_backward(Backend *backend, const AttentionPlan *plan, const Act *qkv_act,
                            const Act *out_act, const Act *dout_act, const float *lse, float scale,
                            Act *dqkv_act) {
    const float *qkv = (const float *)qkv_act;
    const float *out = (const float *)out_act;
    const float *dout = (const float *)dout_act;
    float *dqkv = (float *)dqkv_act;
    const HeadArgs args = {.qkv = qkv, .out = out, .dout = dout, .lse = lse, .scale = scale,
                           .result = dqkv};
    for_each_head(backend, plan, backward_task, &args);
}
