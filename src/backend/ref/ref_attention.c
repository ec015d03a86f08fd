// Reference scaled dot-product attention: one query row at a time, scores,
// softmax and products in double. Backward recomputes each row's
// probabilities from the saved log-sum-exp (as the fast backends do) and
// takes the softmax correction D_i = sum_j p_ij dp_ij from them directly.
// The plan holds the double scratch (a row of scores, the key and value
// gradient accumulators of one head), so the ops allocate nothing.
#include <math.h>
#include <stdlib.h>

#include "backend/ref/ref_ops.h"

struct AttentionPlan {
    AttentionShape shape;
    double *scores;  // (T)
    double *dquery;  // (Dh)
    double *dkey;    // (T, Dh)
    double *dvalue;  // (T, Dh)
};

AttentionPlan *ref_attention_plan(Backend *backend, const AttentionShape *shape,
                                  ErrorMessage *err) {
    AttentionShape check;
    if (attention_shape_make(&check, shape->batch, shape->heads, shape->tokens, shape->head_dim,
                             err)) {
        error_prefix(err, "ref attention plan");
        return NULL;
    }
    AttentionPlan *plan = calloc(1, sizeof *plan);
    const size_t head = (size_t)shape->tokens * shape->head_dim;
    if (plan) {
        plan->shape = *shape;
        plan->scores = malloc((size_t)shape->tokens * sizeof *plan->scores);
        plan->dquery = malloc((size_t)shape->head_dim * sizeof *plan->dquery);
        plan->dkey = malloc(head * sizeof *plan->dkey);
        plan->dvalue = malloc(head * sizeof *plan->dvalue);
    }
    if (!plan || !plan->scores || !plan->dquery || !plan->dkey || !plan->dvalue) {
        ref_attention_plan_free(backend, plan);
        error_set(err, "ref attention plan: out of memory (%d tokens)", shape->tokens);
        return NULL;
    }
    return plan;
}

void ref_attention_plan_free(Backend *backend, AttentionPlan *plan) {
    if (!plan) return;
    free(plan->scores);
    free(plan->dquery);
    free(plan->dkey);
    free(plan->dvalue);
    free(plan);
}

// Where q (part 0), k (1) or v (2) of token t, head h of sample b starts in
// qkv (B, T, 3, H, Dh).
// Elements of q, k or v, and of out: B T H Dh.
static size_t attention_elements(const AttentionShape *s) {
    return (size_t)s->batch * s->tokens * s->heads * s->head_dim;
}

static size_t qkv_offset(const AttentionShape *s, int b, int t, int part, int h) {
    return ((((size_t)b * s->tokens + t) * 3 + part) * s->heads + h) * s->head_dim;
}

// Where head h of token t of sample b starts in out (B, T, H, Dh).
static size_t out_offset(const AttentionShape *s, int b, int t, int h) {
    return (((size_t)b * s->tokens + t) * s->heads + h) * s->head_dim;
}

static double dot(const float *a, const float *b, int n) {
    double total = 0.0;
    for (int d = 0; d < n; d++) total += (double)a[d] * b[d];
    return total;
}

// scores (T) = scale q_i . k_j for query i of head (b, h); returns log sum_j exp(scores).
static double score_row(const AttentionShape *s, const float *qkv, int b, int h, int i,
                        float scale, double *scores) {
    const float *q = qkv + qkv_offset(s, b, i, 0, h);
    for (int j = 0; j < s->tokens; j++)
        scores[j] = (double)scale * dot(q, qkv + qkv_offset(s, b, j, 1, h), s->head_dim);
    double max = scores[0];
    for (int j = 1; j < s->tokens; j++)
        if (scores[j] > max) max = scores[j];
    double total = 0.0;
    for (int j = 0; j < s->tokens; j++) total += exp(scores[j] - max);
    return max + log(total);
}

void ref_attention_forward(Backend *backend, const AttentionPlan *plan, const Act *qkv_act,
                           float scale, Act *out_act, float *lse) {
    const float *qkv = (const float *)qkv_act;
    float *out = (float *)out_act;
    const AttentionShape *s = &plan->shape;
    double *scores = plan->scores;
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++)
            for (int i = 0; i < s->tokens; i++) {
                const double log_sum = score_row(s, qkv, b, h, i, scale, scores);
                lse[((size_t)b * s->heads + h) * s->tokens + i] = (float)log_sum;
                float *o = out + out_offset(s, b, i, h);
                for (int d = 0; d < s->head_dim; d++) {
                    double total = 0.0;
                    for (int j = 0; j < s->tokens; j++)
                        total += exp(scores[j] - log_sum) * qkv[qkv_offset(s, b, j, 2, h) + d];
                    o[d] = (float)total;
                }
            }
    ref_round_acts(backend, out_act, attention_elements(&plan->shape));
}

// With p_ij = exp(scale q_i . k_j - lse_i), dp_ij = dout_i . v_j and
// ds_ij = p_ij (dp_ij - sum_k p_ik dp_ik):
// dq_i = scale sum_j ds_ij k_j, dk_j = scale sum_i ds_ij q_i, dv_j = sum_i p_ij dout_i.
void ref_attention_backward(Backend *backend, const AttentionPlan *plan, const Act *qkv_act,
                            const Act *out_act, const Act *dout_act, const float *lse, float scale,
                            Act *dqkv_act) {
    const float *qkv = (const float *)qkv_act;
    const float *out = (const float *)out_act;
    const float *dout = (const float *)dout_act;
    float *dqkv = (float *)dqkv_act;
    const AttentionShape *s = &plan->shape;
    const int dim = s->head_dim;
    double *p = plan->scores, *dq_row = plan->dquery;
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++) {
            for (size_t i = 0; i < (size_t)s->tokens * dim; i++)
                plan->dkey[i] = plan->dvalue[i] = 0.0;
            for (int i = 0; i < s->tokens; i++) {
                const float *q = qkv + qkv_offset(s, b, i, 0, h);
                const float *dout_i = dout + out_offset(s, b, i, h);
                const double log_sum = lse[((size_t)b * s->heads + h) * s->tokens + i];
                double correction = 0.0;
                for (int j = 0; j < s->tokens; j++) {
                    const double score =
                        (double)scale * dot(q, qkv + qkv_offset(s, b, j, 1, h), dim);
                    p[j] = exp(score - log_sum);
                    correction += p[j] * dot(dout_i, qkv + qkv_offset(s, b, j, 2, h), dim);
                }
                for (int d = 0; d < dim; d++) dq_row[d] = 0.0;
                for (int j = 0; j < s->tokens; j++) {
                    const float *k = qkv + qkv_offset(s, b, j, 1, h);
                    const double dp = dot(dout_i, qkv + qkv_offset(s, b, j, 2, h), dim);
                    const double ds = p[j] * (dp - correction);
                    for (int d = 0; d < dim; d++) {
                        dq_row[d] += (double)scale * ds * k[d];
                        plan->dkey[(size_t)j * dim + d] += (double)scale * ds * q[d];
                        plan->dvalue[(size_t)j * dim + d] += p[j] * dout_i[d];
                    }
                }
                float *dq = dqkv + qkv_offset(s, b, i, 0, h);
                for (int d = 0; d < dim; d++) dq[d] = (float)dq_row[d];
            }
            for (int j = 0; j < s->tokens; j++)
                for (int d = 0; d < dim; d++) {
                    const size_t at = (size_t)j * dim + d;
                    dqkv[qkv_offset(s, b, j, 1, h) + d] = (float)plan->dkey[at];
                    dqkv[qkv_offset(s, b, j, 2, h) + d] = (float)plan->dvalue[at];
                }
        }
    (void)out;  // the correction comes from the recomputed probabilities instead
    ref_round_acts(backend, dqkv_act, 3 * attention_elements(&plan->shape));
}
