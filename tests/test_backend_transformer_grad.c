// Gradient tests of the transformer ops (layer norm,
// attention, the ViT token sequence, the LayerScale / drop-path residual
// add, token pooling): each backward against central finite differences of
// its forward, with a random projection <p, y> of the output as the scalar
// loss, and the gradient contract of backend.h (activation gradients =,
// parameter gradients +=). Also: NaN inputs propagate as in PyTorch. Every
// test runs on the ref backend, then on the cpu backend (comparisons of the
// fast backends with ref are in test_backend_transformer_fast.c).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backend_fixture.h"
#include "gradcheck.h"
#include "op_checks.h"

// Ops linear in the perturbed input (token sequence, residual add,
// pooling): central differences are exact up to fp32 rounding of the loss.
static const GradcheckTolerance LINEAR_TOLERANCE = {.step = 1e-2f, .rtol = 1e-2, .atol = 1e-3};
// Smooth nonlinear ops (layer norm, attention): h = 1e-3 keeps the O(h^2)
// truncation error ~1e-6 while the fp32 rounding noise of the loss
// (~1e-7 * sqrt(outputs)) / 2h stays ~1e-4, under atol 1e-3.
static const GradcheckTolerance SMOOTH_TOLERANCE = {.step = 1e-3f, .rtol = 1e-2, .atol = 1e-3};

// ---- layer norm ---------------------------------------------------------------------------------

typedef struct LayerNormProblem {
    size_t rows;
    int channels;
    float *x, *gamma, *beta, *y, *projection;  // x, y, projection (rows, C); gamma, beta (C)
    float *mean, *inv_std;                     // (rows)
    float *scratch_dx, *scratch_dc;
} LayerNormProblem;

static void layernorm_problem_make(LayerNormProblem *p, size_t rows, int channels,
                                   uint64_t seed) {
    const size_t n = rows * channels;
    *p = (LayerNormProblem){.rows = rows, .channels = channels};
    p->x = fixture_random_tensor(n, -2, 2, seed);
    p->gamma = fixture_random_tensor(channels, 0.5f, 1.5f, seed + 1);
    p->beta = fixture_random_tensor(channels, -0.5f, 0.5f, seed + 2);
    p->projection = fixture_random_tensor(n, -1, 1, seed + 3);
    p->y = fixture_tensor(n);
    p->scratch_dx = fixture_tensor(n);
    p->mean = fixture_tensor(rows);
    p->inv_std = fixture_tensor(rows);
    p->scratch_dc = fixture_tensor(channels);
}

static double layernorm_loss(LayerNormProblem *p, const float *x, const float *gamma,
                             const float *beta) {
    fixture_backend->op.layernorm_forward(fixture_backend, p->rows, p->channels, (const Act *)x,
                                          gamma, beta, 1e-6f, (Act *)p->y, p->mean, p->inv_std);
    return gradcheck_project(p->rows * p->channels, p->y, p->projection);
}

static double layernorm_loss_x(void *problem, const float *x) {
    LayerNormProblem *p = problem;
    return layernorm_loss(p, x, p->gamma, p->beta);
}

static double layernorm_loss_gamma(void *problem, const float *gamma) {
    LayerNormProblem *p = problem;
    return layernorm_loss(p, p->x, gamma, p->beta);
}

static double layernorm_loss_beta(void *problem, const float *beta) {
    LayerNormProblem *p = problem;
    return layernorm_loss(p, p->x, p->gamma, beta);
}

// Forward at the current inputs (for the saved statistics), then backward.
static void layernorm_backward(LayerNormProblem *p, float *dx, float *dgamma, float *dbeta) {
    layernorm_loss(p, p->x, p->gamma, p->beta);
    fixture_backend->op.layernorm_backward(fixture_backend, p->rows, p->channels, (const Act *)p->x,
                                           (const Act *)p->projection, p->gamma, p->mean,
                                           p->inv_std, (Act *)dx, 0, dgamma, dbeta);
}

static void layernorm_gradient_x(void *problem, float *dx) {
    LayerNormProblem *p = problem;
    layernorm_backward(p, dx, p->scratch_dc, p->scratch_dc);
}

static void layernorm_gradient_gamma(void *problem, float *dgamma) {
    LayerNormProblem *p = problem;
    layernorm_backward(p, p->scratch_dx, dgamma, p->scratch_dc);
}

static void layernorm_gradient_beta(void *problem, float *dbeta) {
    LayerNormProblem *p = problem;
    layernorm_backward(p, p->scratch_dx, p->scratch_dc, dbeta);
}

static void test_layernorm_backward_fd(void **state) {
    const size_t rows[] = {6, 1, 3};
    const int channels[] = {7, 16, 2};  // 2 channels: xhat is +-1, the degenerate case
    for (int t = 0; t < 3; t++) {
        LayerNormProblem p;
        layernorm_problem_make(&p, rows[t], channels[t], 100 + 10 * t);
        const size_t n = rows[t] * channels[t];
        op_check_gradient("layernorm dx", layernorm_loss_x, layernorm_gradient_x, &p, p.x, n,
                          SMOOTH_TOLERANCE);
        op_check_gradient("layernorm dgamma", layernorm_loss_gamma, layernorm_gradient_gamma, &p,
                          p.gamma, channels[t], SMOOTH_TOLERANCE);
        op_check_gradient("layernorm dbeta", layernorm_loss_beta, layernorm_gradient_beta, &p,
                          p.beta, channels[t], SMOOTH_TOLERANCE);
        op_assert_overwrites(layernorm_gradient_x, &p, n);
        op_assert_accumulates(layernorm_gradient_gamma, &p, channels[t]);
        op_assert_accumulates(layernorm_gradient_beta, &p, channels[t]);
    }
}

// ---- attention ----------------------------------------------------------------------------------

typedef struct AttentionProblem {
    AttentionShape shape;
    AttentionPlan *plan;
    float scale;
    size_t n_qkv, n_out;
    float *qkv, *out, *lse, *projection;  // qkv (B, T, 3, H, Dh); out, projection (B, T, H, Dh)
} AttentionProblem;

static void attention_problem_make(AttentionProblem *p, int batch, int heads, int tokens,
                                   int head_dim, float scale, uint64_t seed) {
    assert_int_equal(attention_shape_make(&p->shape, batch, heads, tokens, head_dim, NULL), 0);
    p->scale = scale;
    p->n_out = (size_t)batch * tokens * heads * head_dim;
    p->n_qkv = 3 * p->n_out;
    p->qkv = fixture_random_tensor(p->n_qkv, -1.5f, 1.5f, seed);
    p->out = fixture_tensor(p->n_out);
    p->projection = fixture_random_tensor(p->n_out, -1, 1, seed + 1);
    p->lse = fixture_tensor((size_t)batch * heads * tokens);
    p->plan = fixture_backend->op.attention_plan(fixture_backend, &p->shape, NULL);
    assert_non_null(p->plan);
}

static double attention_loss(void *problem, const float *qkv) {
    AttentionProblem *p = problem;
    fixture_backend->op.attention_forward(fixture_backend, p->plan, (const Act *)qkv, p->scale,
                                          (Act *)p->out, p->lse);
    return gradcheck_project(p->n_out, p->out, p->projection);
}

static void attention_gradient(void *problem, float *dqkv) {
    AttentionProblem *p = problem;
    attention_loss(p, p->qkv);
    fixture_backend->op.attention_backward(fixture_backend, p->plan, (const Act *)p->qkv,
                                           (const Act *)p->out, (const Act *)p->projection, p->lse,
                                           p->scale, (Act *)dqkv);
}

// (B, H, T, Dh, scale): one token (softmax of one score: out = v), several
// heads and samples, a large scale (peaked probabilities).
static void test_attention_backward_fd(void **state) {
    const struct { int b, h, t, d; float scale; } cases[] = {
        {2, 2, 5, 3, 0.577f}, {1, 3, 4, 4, 0.5f}, {1, 1, 1, 2, 1.0f}, {1, 2, 6, 2, 3.0f},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        AttentionProblem p;
        attention_problem_make(&p, cases[c].b, cases[c].h, cases[c].t, cases[c].d,
                               cases[c].scale, 200 + 10 * c);
        op_check_gradient("attention dqkv", attention_loss, attention_gradient, &p, p.qkv,
                          p.n_qkv, SMOOTH_TOLERANCE);
        op_assert_overwrites(attention_gradient, &p, p.n_qkv);
        fixture_backend->op.attention_plan_free(fixture_backend, p.plan);
    }
}

// lse (B, H, T) = log sum_j exp(scale q_i . k_j), checked against a direct
// double computation; out rows are convex combinations of the values.
static void test_attention_lse(void **state) {
    AttentionProblem p;
    attention_problem_make(&p, 2, 2, 3, 2, 0.8f, 250);
    attention_loss(&p, p.qkv);
    const AttentionShape *s = &p.shape;
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++)
            for (int i = 0; i < s->tokens; i++) {
                const float *q = p.qkv + ((size_t)(b * s->tokens + i) * 3 * s->heads + h) * 2;
                double total = 0.0;
                for (int j = 0; j < s->tokens; j++) {
                    const float *k =
                        p.qkv + ((size_t)(b * s->tokens + j) * 3 * s->heads + s->heads + h) * 2;
                    total += exp(0.8 * ((double)q[0] * k[0] + (double)q[1] * k[1]));
                }
                const float lse = p.lse[(size_t)(b * s->heads + h) * s->tokens + i];
                assert_float_equal(lse, log(total), 1e-6);
            }
    fixture_backend->op.attention_plan_free(fixture_backend, p.plan);
}

// ---- ViT token sequence -------------------------------------------------------------------------

typedef struct TokensProblem {
    int batch, registers, patches, channels, with_cls_pos;
    size_t n_tokens, n_patches;
    // patches (B, P, D), cls, cls_pos (D), registers (R, D), pos (P, D), tokens (B, 1+R+P, D)
    float *patch_embeddings, *cls, *cls_pos, *register_tokens, *patch_pos;
    float *tokens, *projection;
    float *scratch_patches, *scratch_vector, *scratch_pos, *scratch_registers;
} TokensProblem;

static void tokens_problem_make(TokensProblem *p, int batch, int registers, int patches,
                                int channels, int with_cls_pos, uint64_t seed) {
    *p = (TokensProblem){.batch = batch, .registers = registers, .patches = patches,
                         .channels = channels, .with_cls_pos = with_cls_pos};
    p->n_patches = (size_t)batch * patches * channels;
    p->n_tokens = (size_t)batch * (1 + registers + patches) * channels;
    p->patch_embeddings = fixture_random_tensor(p->n_patches, -1, 1, seed);
    p->cls = fixture_random_tensor(channels, -1, 1, seed + 1);
    p->cls_pos = fixture_random_tensor(channels, -1, 1, seed + 2);
    p->register_tokens =
        registers ? fixture_random_tensor((size_t)registers * channels, -1, 1, seed + 3) : NULL;
    p->patch_pos = fixture_random_tensor((size_t)patches * channels, -1, 1, seed + 4);
    p->tokens = fixture_tensor(p->n_tokens);
    p->projection = fixture_random_tensor(p->n_tokens, -1, 1, seed + 5);
    p->scratch_patches = fixture_tensor(p->n_patches);
    p->scratch_vector = fixture_tensor(channels);
    p->scratch_pos = fixture_tensor((size_t)patches * channels);
    p->scratch_registers = fixture_tensor((size_t)(registers ? registers : 1) * channels);
}

static double tokens_loss(TokensProblem *p) {
    fixture_backend->op.vit_tokens_forward(fixture_backend, p->batch, p->registers, p->patches,
                                           p->channels, (const Act *)p->patch_embeddings, p->cls,
                                           p->with_cls_pos ? p->cls_pos : NULL, p->register_tokens,
                                           p->patch_pos, (Act *)p->tokens);
    return gradcheck_project(p->n_tokens, p->tokens, p->projection);
}

// One loss per input: the perturbed tensor is the one in the problem.
static double tokens_loss_any(void *problem, const float *unused) { return tokens_loss(problem); }

// Backward into the one requested gradient; the others go to scratch.
typedef enum { GRAD_PATCHES, GRAD_CLS, GRAD_CLS_POS, GRAD_REGISTERS, GRAD_POS } TokensGradient;

static void tokens_backward(TokensProblem *p, TokensGradient which, float *gradient) {
    float *dpatches = which == GRAD_PATCHES ? gradient : p->scratch_patches;
    float *dcls = which == GRAD_CLS ? gradient : p->scratch_vector;
    float *dcls_pos = which == GRAD_CLS_POS ? gradient : p->with_cls_pos ? p->scratch_vector : NULL;
    float *dregisters = which == GRAD_REGISTERS ? gradient : p->scratch_registers;
    float *dpos = which == GRAD_POS ? gradient : p->scratch_pos;
    fixture_backend->op.vit_tokens_backward(fixture_backend, p->batch, p->registers, p->patches,
                                            p->channels, (const Act *)p->projection,
                                            (Act *)dpatches, dcls, dcls_pos,
                                            p->registers ? dregisters : NULL, dpos);
}

static void tokens_gradient_patches(void *p, float *g) { tokens_backward(p, GRAD_PATCHES, g); }
static void tokens_gradient_cls(void *p, float *g) { tokens_backward(p, GRAD_CLS, g); }
static void tokens_gradient_cls_pos(void *p, float *g) { tokens_backward(p, GRAD_CLS_POS, g); }
static void tokens_gradient_registers(void *p, float *g) { tokens_backward(p, GRAD_REGISTERS, g); }
static void tokens_gradient_pos(void *p, float *g) { tokens_backward(p, GRAD_POS, g); }

static void test_vit_tokens_backward_fd(void **state) {
    // (B, R, P, D, cls position): DINOv2 without registers, with 4 (no
    // class-token position, as timm's reg models), a single patch.
    const int cases[][5] = {{2, 0, 6, 5, 1}, {3, 4, 4, 3, 0}, {1, 1, 1, 2, 1}};
    for (int t = 0; t < 3; t++) {
        const int *c = cases[t];
        TokensProblem p;
        tokens_problem_make(&p, c[0], c[1], c[2], c[3], c[4], 300 + 10 * t);
        const size_t n_pos = (size_t)p.patches * p.channels;
        op_check_gradient("tokens dpatches", tokens_loss_any, tokens_gradient_patches, &p,
                          p.patch_embeddings, p.n_patches, LINEAR_TOLERANCE);
        op_check_gradient("tokens dcls", tokens_loss_any, tokens_gradient_cls, &p, p.cls,
                          (size_t)p.channels, LINEAR_TOLERANCE);
        op_check_gradient("tokens dpos", tokens_loss_any, tokens_gradient_pos, &p, p.patch_pos,
                          n_pos, LINEAR_TOLERANCE);
        op_assert_overwrites(tokens_gradient_patches, &p, p.n_patches);
        op_assert_accumulates(tokens_gradient_cls, &p, (size_t)p.channels);
        op_assert_accumulates(tokens_gradient_pos, &p, n_pos);
        if (p.with_cls_pos) {
            op_check_gradient("tokens dcls_pos", tokens_loss_any, tokens_gradient_cls_pos, &p,
                              p.cls_pos, (size_t)p.channels, LINEAR_TOLERANCE);
            op_assert_accumulates(tokens_gradient_cls_pos, &p, (size_t)p.channels);
        }
        if (p.registers) {
            const size_t n_registers = (size_t)p.registers * p.channels;
            op_check_gradient("tokens dregisters", tokens_loss_any, tokens_gradient_registers,
                              &p, p.register_tokens, n_registers, LINEAR_TOLERANCE);
            op_assert_accumulates(tokens_gradient_registers, &p, n_registers);
        }
    }
}

// ---- residual add with LayerScale and drop path -------------------------------------------------

typedef struct ResidualProblem {
    int batch, channels, use_gamma, use_scale;
    size_t rows, n;  // rows per sample; n = B rows C
    float *x, *branch, *gamma, *sample_scale, *y, *projection, *scratch, *scratch_c;
} ResidualProblem;

static void residual_problem_make(ResidualProblem *p, int batch, size_t rows, int channels,
                                  int use_gamma, int use_scale, uint64_t seed) {
    *p = (ResidualProblem){.batch = batch, .channels = channels, .use_gamma = use_gamma,
                           .use_scale = use_scale, .rows = rows};
    p->n = (size_t)batch * rows * channels;
    p->x = fixture_random_tensor(p->n, -1, 1, seed);
    p->branch = fixture_random_tensor(p->n, -1, 1, seed + 1);
    p->gamma = fixture_random_tensor(channels, -0.5f, 1.5f, seed + 2);
    p->sample_scale = fixture_tensor(batch);
    // Drop path with keep probability 0.8: dropped samples 0, kept 1 / 0.8.
    for (int b = 0; b < batch; b++) p->sample_scale[b] = b % 3 == 1 ? 0.0f : 1.25f;
    p->y = fixture_tensor(p->n);
    p->projection = fixture_random_tensor(p->n, -1, 1, seed + 3);
    p->scratch = fixture_tensor(p->n);
    p->scratch_c = fixture_tensor(channels);
}

static double residual_loss(void *problem, const float *unused) {
    ResidualProblem *p = problem;
    fixture_backend->op.residual_scale_add_forward(
        fixture_backend, p->batch, p->rows, p->channels, (const Act *)p->x, (const Act *)p->branch,
        p->use_gamma ? p->gamma : NULL, p->use_scale ? p->sample_scale : NULL, (Act *)p->y);
    return gradcheck_project(p->n, p->y, p->projection);
}

static void residual_backward(ResidualProblem *p, float *dbranch, float *dgamma) {
    fixture_backend->op.residual_scale_add_backward(
        fixture_backend, p->batch, p->rows, p->channels, (const Act *)p->branch,
        (const Act *)p->projection, p->use_gamma ? p->gamma : NULL,
        p->use_scale ? p->sample_scale : NULL, (Act *)dbranch, dgamma);
}

static void residual_gradient_branch(void *problem, float *dbranch) {
    ResidualProblem *p = problem;
    residual_backward(p, dbranch, p->scratch_c);
}

static void residual_gradient_gamma(void *problem, float *dgamma) {
    ResidualProblem *p = problem;
    residual_backward(p, p->scratch, dgamma);
}

// The gradient of x is dy (the op does not write it): checked here.
static void residual_gradient_x(void *problem, float *dx) {
    ResidualProblem *p = problem;
    memcpy(dx, p->projection, p->n * sizeof(float));
}

static void test_residual_scale_add_backward_fd(void **state) {
    for (int variant = 0; variant < 4; variant++) {
        ResidualProblem p;
        residual_problem_make(&p, 4, 3, 5, variant & 1, variant >> 1, 400 + 10 * variant);
        op_check_gradient("residual dx", residual_loss, residual_gradient_x, &p, p.x, p.n,
                          LINEAR_TOLERANCE);
        op_check_gradient("residual dbranch", residual_loss, residual_gradient_branch, &p,
                          p.branch, p.n, LINEAR_TOLERANCE);
        op_assert_overwrites(residual_gradient_branch, &p, p.n);
        if (p.use_gamma) {
            op_check_gradient("residual dgamma", residual_loss, residual_gradient_gamma, &p,
                              p.gamma, (size_t)p.channels, LINEAR_TOLERANCE);
            op_assert_accumulates(residual_gradient_gamma, &p, (size_t)p.channels);
        }
    }
}

// y may alias x (the residual stream updated in place).
static void test_residual_scale_add_in_place(void **state) {
    ResidualProblem p;
    residual_problem_make(&p, 3, 2, 4, 1, 1, 450);
    residual_loss(&p, NULL);
    fixture_backend->op.residual_scale_add_forward(fixture_backend, p.batch, p.rows, p.channels,
                                                   (const Act *)p.x, (const Act *)p.branch, p.gamma,
                                                   p.sample_scale, (Act *)p.x);
    assert_memory_equal(p.x, p.y, p.n * sizeof(float));
}

// ---- token pooling ------------------------------------------------------------------------------

typedef struct PoolProblem {
    int batch, tokens, channels, first, count;
    float *x, *y, *projection;  // x (B, T, C); y, projection (B, C)
} PoolProblem;

static double pool_loss(void *problem, const float *x) {
    PoolProblem *p = problem;
    fixture_backend->op.token_pool_forward(fixture_backend, p->batch, p->tokens, p->channels,
                                           p->first, p->count, (const Act *)x, (Act *)p->y);
    return gradcheck_project((size_t)p->batch * p->channels, p->y, p->projection);
}

static void pool_gradient(void *problem, float *dx) {
    PoolProblem *p = problem;
    fixture_backend->op.token_pool_backward(fixture_backend, p->batch, p->tokens, p->channels,
                                            p->first, p->count, (const Act *)p->projection,
                                            (Act *)dx);
}

static void test_token_pool_backward_fd(void **state) {
    // The class token (first 0, count 1); the mean of the patch tokens after
    // a class token and 2 registers (first 3, count 4).
    const int cases[][5] = {{2, 5, 3, 0, 1}, {3, 7, 4, 3, 4}};
    for (int t = 0; t < 2; t++) {
        const int *c = cases[t];
        PoolProblem p = {.batch = c[0], .tokens = c[1], .channels = c[2], .first = c[3],
                         .count = c[4]};
        const size_t n = (size_t)p.batch * p.tokens * p.channels;
        p.x = fixture_random_tensor(n, -1, 1, 500 + 10 * t);
        p.y = fixture_tensor((size_t)p.batch * p.channels);
        p.projection = fixture_random_tensor((size_t)p.batch * p.channels, -1, 1, 501 + 10 * t);
        op_check_gradient("token pool dx", pool_loss, pool_gradient, &p, p.x, n,
                          LINEAR_TOLERANCE);
        op_assert_overwrites(pool_gradient, &p, n);
    }
}

// ---- NaN propagation ----------------------------------------------------------------------------

// PyTorch: a NaN in a layer-norm row makes that row's output NaN and leaves
// the others finite.
static void test_layernorm_nan(void **state) {
    LayerNormProblem p;
    layernorm_problem_make(&p, 3, 4, 600);
    p.x[1 * 4 + 2] = NAN;
    layernorm_loss(&p, p.x, p.gamma, p.beta);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 4; c++) assert_true(isnan(p.y[r * 4 + c]) == (r == 1));
}

// PyTorch's softmax(q k^T) v: a NaN in q_i poisons row i of its head; a NaN
// in k_j poisons every row of its head (column j of the scores); a NaN in
// v_j poisons that channel of every row of its head. Other heads stay finite.
static void test_attention_nan(void **state) {
    const AttentionShape shape = {.batch = 2, .heads = 2, .tokens = 4, .head_dim = 3};
    for (int part = 0; part < 3; part++) {
        AttentionProblem p;
        attention_problem_make(&p, shape.batch, shape.heads, shape.tokens, shape.head_dim, 0.5f,
                               700 + part);
        // token 2, head 1 of sample 0, channel 1 of q / k / v
        p.qkv[((size_t)2 * 3 + part) * 2 * 3 + 1 * 3 + 1] = NAN;
        attention_loss(&p, p.qkv);
        for (int b = 0; b < 2; b++)
            for (int t = 0; t < 4; t++)
                for (int h = 0; h < 2; h++)
                    for (int d = 0; d < 3; d++) {
                        const int head = b == 0 && h == 1;
                        const int expected = head && (part == 0   ? t == 2
                                                      : part == 1 ? 1
                                                                  : d == 1);
                        const float value = p.out[((size_t)(b * 4 + t) * 2 + h) * 3 + d];
                        assert_int_equal(isnan(value) != 0, expected);
                    }
        fixture_backend->op.attention_plan_free(fixture_backend, p.plan);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_layernorm_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_attention_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_attention_lse, fixture_tensors_free),
        cmocka_unit_test_teardown(test_vit_tokens_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_residual_scale_add_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_residual_scale_add_in_place, fixture_tensors_free),
        cmocka_unit_test_teardown(test_token_pool_backward_fd, fixture_tensors_free),
        cmocka_unit_test_teardown(test_layernorm_nan, fixture_tensors_free),
        cmocka_unit_test_teardown(test_attention_nan, fixture_tensors_free),
    };
    const int ref_failures =
        cmocka_run_group_tests_name("ref", tests, fixture_backend_create_ref,
                                    fixture_backend_destroy);
    return ref_failures + cmocka_run_group_tests_name("cpu", tests, fixture_backend_create_cpu,
                                                      fixture_backend_destroy);
}
