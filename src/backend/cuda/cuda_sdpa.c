// Fused 16-bit attention on tensor cores through cuDNN's SDPA graphs
// (cuDNN's graph API, cudnn_graph.h), forward and backward, on the packed
// qkv (B, T, 3, H, Dh) layout without a copy: Q, K and V are strided views
// of qkv (dims [b, h, s, d], strides [3 T H Dh, Dh, 3 H Dh, 1]), out and
// dout (B, T, H, Dh), lse (B, H, T), dqkv as qkv.
//
// The graphs are the composite ones cuDNN's frontend builds for its SDPA
// nodes without masks, bias or dropout (facts from cudnn-frontend's
// scaled_dot_product_flash_attention.h and softmax.h; cuDNN matches them
// to its fused flash-attention engines):
//   forward:  S = Q K^T (K as K^T by swapped strides), S *= scale,
//             M = max_j S, E = exp(S - M), Z = sum_j E,
//             stats = M + log Z (our lse), P = E / Z in the 16-bit type,
//             O = P V
//   backward: D = sum_d dO O (x 1, the frontend's dropout-scale factor),
//             written to a float (B, H, T) buffer the graph reads again;
//             S = scale Q K^T, P = exp(S - stats),
//             dV = P^T dO (P^T a reshape of P in the 16-bit type),
//             dP = dO V^T, dS = scale P (dP - D),
//             dK = dS^T Q (a 16-bit reshape), dQ = dS K (K through a reshape)
// dQ goes straight to its output (the frontend's "dP workspace" form,
// which it uses when deterministic results are asked for), not through
// an fp32 accumulator that cuDNN's Hopper kernels fill with atomics; and
// an engine whose notes say non-deterministic is taken only when no
// other one is offered or LTC_CUDNN_DETERMINISTIC=0.
//
// cuDNN's fused engines take fp16 / bf16 only, head dims that are
// multiples of 8 up to 128 (sm80, sm90), and cuDNN 9. What this file
// cannot build, or cuDNN offers no engine for, returns NULL with the
// reason: cuda_attention.cu then keeps its batched-GEMM path.
#include <cudnn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.h"
#include "backend/cuda/cudnn_graph.h"

// Unique ids of the graphs' tensors with data; virtual ones count from VIRTUAL.
enum {
    UID_Q = 1, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE, UID_DO, UID_DQ, UID_DK, UID_DV,
    UID_DELTA, UID_ONE, UID_VIRTUAL = 100
};

struct CudaSdpa {
    AttentionShape shape;
    DnnPlan *forward, *backward;  // either may be NULL (that direction falls back)
    float *delta;                  // device (B, H, T): the backward's sum_d dO O
};

// The 4-d layouts of one shape.
typedef struct Layout {
    int64_t q[4], kt[4], o[4], rows[4], scores[4], scores_t[4];  // strides
    int64_t qkv_dims[4], kt_dims[4], row_dims[4], score_dims[4];
    int type;  // the 16-bit cudnnDataType_t
} Layout;

static void set4(int64_t *to, int64_t a, int64_t b, int64_t c, int64_t d) {
    to[0] = a, to[1] = b, to[2] = c, to[3] = d;
}

static Layout layout_of(const AttentionShape *s, ComputeDtype dtype) {
    const int64_t B = s->batch, H = s->heads, T = s->tokens, D = s->head_dim;
    Layout l;
    set4(l.qkv_dims, B, H, T, D);
    set4(l.kt_dims, B, H, D, T);
    set4(l.row_dims, B, H, T, 1);
    set4(l.score_dims, B, H, T, T);
    set4(l.q, 3 * T * H * D, D, 3 * H * D, 1);     // Q, K, V, dQ, dK, dV in (B, T, 3, H, Dh)
    set4(l.kt, 3 * T * H * D, D, 1, 3 * H * D);    // K (V) seen as K^T (V^T)
    set4(l.o, T * H * D, D, H * D, 1);             // O, dO in (B, T, H, Dh)
    set4(l.rows, H * T, T, 1, 1);                  // stats, D in (B, H, T)
    set4(l.scores, H * T * T, T * T, T, 1);
    set4(l.scores_t, H * T * T, T * T, 1, T);      // the scores transposed (a reshape)
    l.type = dtype == COMPUTE_BF16 ? CUDNN_DATA_BFLOAT16 : CUDNN_DATA_HALF;
    return l;
}

typedef struct Builder {
    DnnGraph graph;
    int64_t next_virtual;
    const Layout *l;
} Builder;

static void *virtual_tensor(Builder *b, int type, const int64_t *dims, const int64_t *strides) {
    return dnn_graph_tensor(&b->graph, b->next_virtual++, type, 4, dims, strides, DNN_VIRTUAL);
}

static void *scores(Builder *b) {
    return virtual_tensor(b, CUDNN_DATA_FLOAT, b->l->score_dims, b->l->scores);
}

static void *row_values(Builder *b) {
    return virtual_tensor(b, CUDNN_DATA_FLOAT, b->l->row_dims, b->l->rows);
}

static void *scalar(Builder *b, int64_t uid) {
    const int64_t one[4] = {1, 1, 1, 1};
    return dnn_graph_tensor(&b->graph, uid, CUDNN_DATA_FLOAT, 4, one, one, DNN_BY_VALUE);
}

// S = scale Q K^T (virtual, fp32).
static void *scaled_scores(Builder *b, void *q, void *kt, void *scale) {
    void *raw = scores(b), *scaled = scores(b);
    dnn_graph_matmul(&b->graph, q, kt, raw);
    dnn_graph_pointwise(&b->graph, CUDNN_POINTWISE_MUL, raw, scale, scaled);
    return scaled;
}

static void build_forward(Builder *b) {
    const Layout *l = b->l;
    DnnGraph *g = &b->graph;
    void *q = dnn_graph_tensor(g, UID_Q, l->type, 4, l->qkv_dims, l->q, 0);
    void *kt = dnn_graph_tensor(g, UID_K, l->type, 4, l->kt_dims, l->kt, 0);
    void *v = dnn_graph_tensor(g, UID_V, l->type, 4, l->qkv_dims, l->q, 0);
    void *o = dnn_graph_tensor(g, UID_O, l->type, 4, l->qkv_dims, l->o, 0);
    void *stats = dnn_graph_tensor(g, UID_STATS, CUDNN_DATA_FLOAT, 4, l->row_dims, l->rows, 0);
    void *s = scaled_scores(b, q, kt, scalar(b, UID_SCALE));
    // the softmax as the frontend's composite softmax node, with stats
    void *max = row_values(b), *shifted = scores(b), *exps = scores(b);
    void *sum = row_values(b), *log_sum = row_values(b);
    void *p = virtual_tensor(b, l->type, l->score_dims, l->scores);
    dnn_graph_reduction(g, CUDNN_REDUCE_TENSOR_MAX, s, max);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_SUB, s, max, shifted);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_EXP, shifted, NULL, exps);
    dnn_graph_reduction(g, CUDNN_REDUCE_TENSOR_ADD, exps, sum);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_LOG, sum, NULL, log_sum);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_ADD, max, log_sum, stats);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_DIV, exps, sum, p);
    dnn_graph_matmul(g, p, v, o);
}

static void build_backward(Builder *b) {
    const Layout *l = b->l;
    DnnGraph *g = &b->graph;
    void *q = dnn_graph_tensor(g, UID_Q, l->type, 4, l->qkv_dims, l->q, 0);
    void *kt = dnn_graph_tensor(g, UID_K, l->type, 4, l->kt_dims, l->kt, 0);
    void *vt = dnn_graph_tensor(g, UID_V, l->type, 4, l->kt_dims, l->kt, 0);
    void *o = dnn_graph_tensor(g, UID_O, l->type, 4, l->qkv_dims, l->o, 0);
    void *d_o = dnn_graph_tensor(g, UID_DO, l->type, 4, l->qkv_dims, l->o, 0);
    void *stats = dnn_graph_tensor(g, UID_STATS, CUDNN_DATA_FLOAT, 4, l->row_dims, l->rows, 0);
    void *dq = dnn_graph_tensor(g, UID_DQ, l->type, 4, l->qkv_dims, l->q, 0);
    void *dk = dnn_graph_tensor(g, UID_DK, l->type, 4, l->qkv_dims, l->q, 0);
    void *dv = dnn_graph_tensor(g, UID_DV, l->type, 4, l->qkv_dims, l->q, 0);
    void *delta = dnn_graph_tensor(g, UID_DELTA, CUDNN_DATA_FLOAT, 4, l->row_dims, l->rows, 0);
    void *scale = scalar(b, UID_SCALE);
    // D = sum_d dO O
    void *products = virtual_tensor(b, CUDNN_DATA_FLOAT, l->qkv_dims, l->o);
    void *row_sums = row_values(b);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, d_o, o, products);
    dnn_graph_reduction(g, CUDNN_REDUCE_TENSOR_ADD, products, row_sums);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, row_sums, scalar(b, UID_ONE), delta);
    // P = exp(scale Q K^T - stats); dV = P^T dO
    void *s = scaled_scores(b, q, kt, scale);
    void *shifted = scores(b), *p = scores(b);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_SUB, s, stats, shifted);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_EXP, shifted, NULL, p);
    void *p_t = virtual_tensor(b, l->type, l->score_dims, l->scores_t);
    dnn_graph_reshape(g, p, p_t);
    dnn_graph_matmul(g, p_t, d_o, dv);
    // dS = scale P (dO V^T - D); dK = dS^T Q; dQ = dS K
    void *dp = scores(b), *centred = scores(b), *ds_unscaled = scores(b), *ds = scores(b);
    dnn_graph_matmul(g, d_o, vt, dp);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_SUB, dp, delta, centred);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, centred, p, ds_unscaled);
    dnn_graph_pointwise(g, CUDNN_POINTWISE_MUL, ds_unscaled, scale, ds);
    void *ds_t = virtual_tensor(b, l->type, l->score_dims, l->scores_t);
    dnn_graph_reshape(g, ds, ds_t);
    dnn_graph_matmul(g, ds_t, q, dk);
    void *k = virtual_tensor(b, l->type, l->qkv_dims, l->q);
    dnn_graph_reshape(g, kt, k);
    dnn_graph_matmul(g, ds, k, dq);
}

// What rules the fused path out before cuDNN is asked, or NULL.
static const char *unsupported(const Backend *backend, const AttentionShape *s) {
    const CudaState *state = cuda_state(backend);
    if (backend->compute_dtype == COMPUTE_F32) return "fp32 (cuDNN's fused attention is 16-bit)";
    if (s->head_dim % 8 != 0 || s->head_dim > 128)
        return "head dim not a multiple of 8 up to 128";
    if (state->compute_major < 8) return "GPU older than sm80";
    if (cudnnGetVersion() < 90000) return "cuDNN older than 9.0";
    return NULL;
}

static int deterministic_asked(void) {
    const char *value = getenv("LTC_CUDNN_DETERMINISTIC");
    return !(value && strcmp(value, "0") == 0);
}

static DnnPlan *plan_direction(Backend *backend, const AttentionShape *s, int backward,
                               ErrorMessage *err) {
    const Layout l = layout_of(s, backend->compute_dtype);
    Builder b = {.next_virtual = UID_VIRTUAL, .l = &l};
    dnn_graph_begin(&b.graph, cuda_state(backend)->cudnn);
    if (backward)
        build_backward(&b);
    else
        build_forward(&b);
    DnnPlan *plan = dnn_graph_plan(&b.graph, deterministic_asked(), err);
    if (!plan) return NULL;
    if (cuda_reserve_workspace(cuda_state(backend), (size_t)plan->workspace_bytes, err)) {
        dnn_plan_free(plan);
        return NULL;
    }
    return plan;
}

CudaSdpa *cuda_sdpa_create(Backend *backend, const AttentionShape *shape, char *reason,
                           size_t reason_size) {
    const char *ruled_out = unsupported(backend, shape);
    if (ruled_out) {
        snprintf(reason, reason_size, "%s", ruled_out);
        return NULL;
    }
    ErrorMessage err = {{0}};
    CudaSdpa *sdpa = calloc(1, sizeof *sdpa);
    const size_t rows = (size_t)shape->batch * shape->heads * shape->tokens;
    if (!sdpa || cudaMalloc((void **)&sdpa->delta, rows * sizeof(float)) != cudaSuccess) {
        (void)cudaGetLastError();
        free(sdpa);
        snprintf(reason, reason_size, "out of memory");
        return NULL;
    }
    sdpa->shape = *shape;
    sdpa->forward = plan_direction(backend, shape, 0, &err);
    if (!sdpa->forward) snprintf(reason, reason_size, "forward: %s", err.text);
    ErrorMessage backward_err = {{0}};
    sdpa->backward = plan_direction(backend, shape, 1, &backward_err);
    if (!sdpa->backward) {
        char forward_reason[sizeof err.text + 16] = "";
        if (!sdpa->forward) snprintf(forward_reason, sizeof forward_reason, "forward: %s; ", err.text);
        snprintf(reason, reason_size, "%sbackward: %s", forward_reason, backward_err.text);
    }
    if (!sdpa->forward && !sdpa->backward) {
        cuda_sdpa_free(sdpa);
        return NULL;
    }
    return sdpa;
}

void cuda_sdpa_free(CudaSdpa *sdpa) {
    if (!sdpa) return;
    dnn_plan_free(sdpa->forward);
    dnn_plan_free(sdpa->backward);
    if (sdpa->delta) CUDA_CHECK(cudaFree(sdpa->delta));
    free(sdpa);
}

int cuda_sdpa_has(const CudaSdpa *sdpa, int backward) {
    return sdpa && (backward ? sdpa->backward != NULL : sdpa->forward != NULL);
}

// Element offsets of K and V in qkv.
static size_t k_offset(const AttentionShape *s) { return (size_t)s->heads * s->head_dim; }

void cuda_sdpa_forward(Backend *backend, const CudaSdpa *sdpa, const Act *qkv, float scale,
                       Act *out, float *lse) {
    const AttentionShape *s = &sdpa->shape;
    const int64_t uids[] = {UID_Q, UID_K, UID_V, UID_O, UID_STATS, UID_SCALE};
    void *const pointers[] = {(void *)qkv, (void *)act_at_const(backend, qkv, k_offset(s)),
                              (void *)act_at_const(backend, qkv, 2 * k_offset(s)), out, lse,
                              &scale};
    dnn_plan_execute(sdpa->forward, 6, uids, pointers, cuda_state(backend)->workspace);
}

void cuda_sdpa_backward(Backend *backend, const CudaSdpa *sdpa, const Act *qkv, const Act *out,
                        const Act *dout, const float *lse, float scale, Act *dqkv) {
    const AttentionShape *s = &sdpa->shape;
    float one = 1.0f;
    const int64_t uids[] = {UID_Q,  UID_K,  UID_V,  UID_O,     UID_DO,    UID_STATS,
                            UID_DQ, UID_DK, UID_DV, UID_DELTA, UID_SCALE, UID_ONE};
    void *const pointers[] = {(void *)qkv,
                              (void *)act_at_const(backend, qkv, k_offset(s)),
                              (void *)act_at_const(backend, qkv, 2 * k_offset(s)),
                              (void *)out,
                              (void *)dout,
                              (void *)lse,
                              dqkv,
                              act_at(backend, dqkv, k_offset(s)),
                              act_at(backend, dqkv, 2 * k_offset(s)),
                              sdpa->delta,
                              &scale,
                              &one};
    dnn_plan_execute(sdpa->backward, 12, uids, pointers, cuda_state(backend)->workspace);
}
