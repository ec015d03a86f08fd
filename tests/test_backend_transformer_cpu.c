// The cpu backend's transformer ops against the ref backend (the oracle) on
// random inputs of awkward shapes: odd token counts, head dims and channel
// counts that are not multiples of 8, a single token, and sizes on both
// sides of the threshold where the cpu backend goes multi-threaded. Output
// buffers start as NaN so an element an op forgets fails; accumulated
// gradients (+=) start from the same non-zero values in both backends.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backend_fixture.h"
#include "gradcheck.h"

// Both backends keep host memory: tensors from fixture_backend (the cpu
// backend here) serve both.
static float *nan_tensor(size_t n) {
    float *p = fixture_tensor(n);
    for (size_t i = 0; i < n; i++) p[i] = NAN;
    return p;
}

static float *copy_of(const float *x, size_t n) {
    float *p = fixture_tensor(n);
    memcpy(p, x, n * sizeof(float));
    return p;
}

static void expect_close(const char *label, size_t n, const float *actual, const float *expected,
                         double rtol, double atol) {
    assert_int_equal(gradcheck_count_mismatches(label, n, actual, expected, rtol, atol), 0);
}

static int setup(void **state) {
    if (fixture_backends_create(state)) return -1;
    fixture_backend = fixture_cpu;
    return 0;
}

static int teardown(void **state) {
    fixture_backend = NULL;
    return fixture_backends_destroy(state);
}

// ---- layer norm ---------------------------------------------------------------------------

// Outputs are O(1): the cpu backend normalises in fp32 with double row
// sums, ref entirely in double, so they differ by a few fp32 ulps (1e-6
// relative, 1e-6 absolute near 0). dx sums C products per row and dgamma,
// dbeta sum over the rows: their errors grow like sqrt(terms) ulps.
static void check_layernorm(size_t rows, int channels, uint64_t seed) {
    const size_t n = rows * channels;
    const float *x = fixture_random_tensor(n, -3, 3, seed);
    const float *gamma = fixture_random_tensor(channels, 0.5f, 1.5f, seed + 1);
    const float *beta = fixture_random_tensor(channels, -0.5f, 0.5f, seed + 2);
    const float *dy = fixture_random_tensor(n, -1, 1, seed + 3);
    float *y_ref = nan_tensor(n), *y_cpu = nan_tensor(n);
    float *mean_ref = nan_tensor(rows), *mean_cpu = nan_tensor(rows);
    float *inv_ref = nan_tensor(rows), *inv_cpu = nan_tensor(rows);
    fixture_ref->op.layernorm_forward(fixture_ref, rows, channels, x, gamma, beta, 1e-6f, y_ref,
                                      mean_ref, inv_ref);
    fixture_cpu->op.layernorm_forward(fixture_cpu, rows, channels, x, gamma, beta, 1e-6f, y_cpu,
                                      mean_cpu, inv_cpu);
    expect_close("layernorm y", n, y_cpu, y_ref, 1e-5, 1e-5);
    expect_close("layernorm mean", rows, mean_cpu, mean_ref, 1e-6, 1e-6);
    expect_close("layernorm inv_std", rows, inv_cpu, inv_ref, 1e-6, 0);

    float *dx_ref = nan_tensor(n), *dx_cpu = nan_tensor(n);
    float *dgamma_ref = fixture_random_tensor(channels, -1, 1, seed + 4);
    float *dgamma_cpu = copy_of(dgamma_ref, channels);
    float *dbeta_ref = fixture_random_tensor(channels, -1, 1, seed + 5);
    float *dbeta_cpu = copy_of(dbeta_ref, channels);
    // Both from the ref statistics, so only the backward differs.
    fixture_ref->op.layernorm_backward(fixture_ref, rows, channels, x, dy, gamma, mean_ref,
                                       inv_ref, dx_ref, dgamma_ref, dbeta_ref);
    fixture_cpu->op.layernorm_backward(fixture_cpu, rows, channels, x, dy, gamma, mean_ref,
                                       inv_ref, dx_cpu, dgamma_cpu, dbeta_cpu);
    expect_close("layernorm dx", n, dx_cpu, dx_ref, 1e-5, 1e-6 * sqrt((double)channels));
    expect_close("layernorm dgamma", channels, dgamma_cpu, dgamma_ref, 1e-5,
                 1e-6 * sqrt((double)rows));
    expect_close("layernorm dbeta", channels, dbeta_cpu, dbeta_ref, 1e-5,
                 1e-6 * sqrt((double)rows));
}

static void test_layernorm(void **state) {
    check_layernorm(1, 5, 10);       // one row
    check_layernorm(13, 37, 20);     // odd sizes, single-threaded
    check_layernorm(197, 384, 30);   // ViT-S at 224 px, one image: threaded
    check_layernorm(50, 1030, 40);   // more channels than a reduction block
}

// ---- attention ------------------------------------------------------------------------------

// max |dout_i . v_j| over every head: the scale of the softmax gradient's
// terms dp_ij.
static double max_value_product(const AttentionShape *s, const float *qkv, const float *dout) {
    const int width = s->heads * s->head_dim;
    double largest = 0.0;
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++)
            for (int i = 0; i < s->tokens; i++)
                for (int j = 0; j < s->tokens; j++) {
                    const float *d = dout + ((size_t)b * s->tokens + i) * width + h * s->head_dim;
                    const float *v = qkv + ((size_t)b * s->tokens + j) * 3 * width + 2 * width +
                                     h * s->head_dim;
                    double total = 0.0;
                    for (int k = 0; k < s->head_dim; k++) total += (double)d[k] * v[k];
                    largest = fmax(largest, fabs(total));
                }
    return largest;
}

// Scores scale q . k (|q|, |k| <= 2) come from an fp32 GEMM: each is off by
// ~eps scale 4 sqrt(Dh) (4x for margin), which shifts the probabilities by
// that much relatively; outputs are convex combinations of the values (|v|
// <= 2), so they move by at most 2 |v| that score error, plus the fp32
// normalisation and the exp polynomial (2 ulp): ~1e-6. lse moves like a
// score. (Measured: a peaked softmax, scale 4, is 3e-6 off with oneDNN's
// SSE4.1 kernels.) Gradients: ds_ij = p_ij (dp_ij - D_i) cancels where one
// probability is near 1; in fp32 (the cpu path, and PyTorch's) dp_ij and
// D_i carry ~eps max|dp| each, and dq, dk multiply by scale |q|, |k| (<= 2)
// and sum over up to T rows: atol = 4 eps scale 2 max|dp| sqrt(T) on top of
// sqrt(T) ulps of O(1) sums.
static void check_attention(int batch, int heads, int tokens, int head_dim, float scale,
                            uint64_t seed) {
    AttentionShape shape;
    assert_int_equal(attention_shape_make(&shape, batch, heads, tokens, head_dim, NULL), 0);
    AttentionPlan *ref_plan = fixture_ref->op.attention_plan(fixture_ref, &shape, NULL);
    AttentionPlan *cpu_plan = fixture_cpu->op.attention_plan(fixture_cpu, &shape, NULL);
    assert_non_null(ref_plan);
    assert_non_null(cpu_plan);
    const size_t n_out = (size_t)batch * tokens * heads * head_dim, n_qkv = 3 * n_out;
    const size_t n_lse = (size_t)batch * heads * tokens;
    const float *qkv = fixture_random_tensor(n_qkv, -2, 2, seed);
    const float *dout = fixture_random_tensor(n_out, -1, 1, seed + 1);
    float *out_ref = nan_tensor(n_out), *out_cpu = nan_tensor(n_out);
    float *lse_ref = nan_tensor(n_lse), *lse_cpu = nan_tensor(n_lse);
    fixture_ref->op.attention_forward(fixture_ref, ref_plan, qkv, scale, out_ref, lse_ref);
    fixture_cpu->op.attention_forward(fixture_cpu, cpu_plan, qkv, scale, out_cpu, lse_cpu);
    const double score_error = 4 * 1.2e-7 * scale * 4 * sqrt((double)head_dim);
    expect_close("attention out", n_out, out_cpu, out_ref, 1e-5, 2e-6 + 4 * score_error);
    expect_close("attention lse", n_lse, lse_cpu, lse_ref, 1e-6, 2e-6 + score_error);

    float *dqkv_ref = nan_tensor(n_qkv), *dqkv_cpu = nan_tensor(n_qkv);
    fixture_ref->op.attention_backward(fixture_ref, ref_plan, qkv, out_ref, dout, lse_ref, scale,
                                       dqkv_ref);
    fixture_cpu->op.attention_backward(fixture_cpu, cpu_plan, qkv, out_ref, dout, lse_ref, scale,
                                       dqkv_cpu);
    const double cancellation =
        4 * 1.2e-7 * scale * 2 * max_value_product(&shape, qkv, dout) * sqrt((double)tokens);
    expect_close("attention dqkv", n_qkv, dqkv_cpu, dqkv_ref, 1e-4,
                 2e-6 * sqrt((double)tokens) + cancellation);
    fixture_ref->op.attention_plan_free(fixture_ref, ref_plan);
    fixture_cpu->op.attention_plan_free(fixture_cpu, cpu_plan);
}

static void test_attention(void **state) {
    check_attention(1, 1, 1, 4, 0.5f, 100);      // one token: out = v, no gradient to q, k
    check_attention(2, 3, 7, 5, 0.447f, 110);    // odd sizes
    check_attention(3, 2, 37, 24, 0.204f, 120);  // a 6x6 grid + class token
    check_attention(1, 6, 50, 64, 0.125f, 130);  // ViT-S head dim, fewer pairs than threads?
    check_attention(2, 1, 20, 8, 4.0f, 140);     // peaked softmax
}

// ---- token sequence, residual add, pooling ----------------------------------------------------

// These only copy, add and scale: the two backends agree to an ulp; the
// batch sums of the position gradients sum B terms.
static void check_tokens(int batch, int registers, int patches, int channels, int with_cls_pos,
                         uint64_t seed) {
    const size_t n_patches = (size_t)batch * patches * channels;
    const size_t n_tokens = (size_t)batch * (1 + registers + patches) * channels;
    const size_t n_registers = (size_t)registers * channels, n_pos = (size_t)patches * channels;
    const float *patch_embeddings = fixture_random_tensor(n_patches, -1, 1, seed);
    const float *cls = fixture_random_tensor(channels, -1, 1, seed + 1);
    const float *cls_pos = with_cls_pos ? fixture_random_tensor(channels, -1, 1, seed + 2) : NULL;
    const float *register_tokens =
        registers ? fixture_random_tensor(n_registers, -1, 1, seed + 3) : NULL;
    const float *patch_pos = fixture_random_tensor(n_pos, -1, 1, seed + 4);
    float *tokens_ref = nan_tensor(n_tokens), *tokens_cpu = nan_tensor(n_tokens);
    fixture_ref->op.vit_tokens_forward(fixture_ref, batch, registers, patches, channels,
                                       patch_embeddings, cls, cls_pos, register_tokens,
                                       patch_pos, tokens_ref);
    fixture_cpu->op.vit_tokens_forward(fixture_cpu, batch, registers, patches, channels,
                                       patch_embeddings, cls, cls_pos, register_tokens,
                                       patch_pos, tokens_cpu);
    expect_close("tokens", n_tokens, tokens_cpu, tokens_ref, 0, 0);

    const float *dtokens = fixture_random_tensor(n_tokens, -1, 1, seed + 5);
    float *dpatches_ref = nan_tensor(n_patches), *dpatches_cpu = nan_tensor(n_patches);
    float *dcls_ref = fixture_random_tensor(channels, -1, 1, seed + 6);
    float *dcls_cpu = copy_of(dcls_ref, channels);
    float *dcls_pos_ref = fixture_random_tensor(channels, -1, 1, seed + 7);
    float *dcls_pos_cpu = copy_of(dcls_pos_ref, channels);
    float *dregisters_ref = fixture_random_tensor(n_registers + 1, -1, 1, seed + 8);
    float *dregisters_cpu = copy_of(dregisters_ref, n_registers + 1);
    float *dpos_ref = fixture_random_tensor(n_pos, -1, 1, seed + 9);
    float *dpos_cpu = copy_of(dpos_ref, n_pos);
    fixture_ref->op.vit_tokens_backward(fixture_ref, batch, registers, patches, channels,
                                        dtokens, dpatches_ref, dcls_ref,
                                        with_cls_pos ? dcls_pos_ref : NULL,
                                        registers ? dregisters_ref : NULL, dpos_ref);
    fixture_cpu->op.vit_tokens_backward(fixture_cpu, batch, registers, patches, channels,
                                        dtokens, dpatches_cpu, dcls_cpu,
                                        with_cls_pos ? dcls_pos_cpu : NULL,
                                        registers ? dregisters_cpu : NULL, dpos_cpu);
    expect_close("tokens dpatches", n_patches, dpatches_cpu, dpatches_ref, 0, 0);
    expect_close("tokens dcls", channels, dcls_cpu, dcls_ref, 1e-6, 1e-6);
    expect_close("tokens dcls_pos", channels, dcls_pos_cpu, dcls_pos_ref, 1e-6, 1e-6);
    expect_close("tokens dregisters", n_registers + 1, dregisters_cpu, dregisters_ref, 1e-6,
                 1e-6);
    expect_close("tokens dpos", n_pos, dpos_cpu, dpos_ref, 1e-6, 1e-6);
}

static void test_vit_tokens(void **state) {
    check_tokens(1, 0, 1, 3, 1, 200);
    check_tokens(3, 4, 9, 70, 0, 210);      // registers, channels past a 64-block
    check_tokens(4, 0, 196, 384, 1, 220);   // ViT-S/16 at 224 px: threaded
}

static void check_residual(int batch, size_t rows, int channels, int use_gamma, int use_scale,
                           uint64_t seed) {
    const size_t n = (size_t)batch * rows * channels;
    const float *x = fixture_random_tensor(n, -1, 1, seed);
    const float *branch = fixture_random_tensor(n, -1, 1, seed + 1);
    const float *gamma = use_gamma ? fixture_random_tensor(channels, -1, 1, seed + 2) : NULL;
    float *sample_scale = NULL;
    if (use_scale) {
        sample_scale = fixture_tensor(batch);
        for (int b = 0; b < batch; b++) sample_scale[b] = b % 2 ? 0.0f : 1.0f / 0.7f;
    }
    float *y_ref = nan_tensor(n), *y_cpu = nan_tensor(n);
    fixture_ref->op.residual_scale_add_forward(fixture_ref, batch, rows, channels, x, branch,
                                               gamma, sample_scale, y_ref);
    fixture_cpu->op.residual_scale_add_forward(fixture_cpu, batch, rows, channels, x, branch,
                                               gamma, sample_scale, y_cpu);
    // cpu rounds gamma * scale, then the product and the sum: 2 ulps of O(1).
    expect_close("residual y", n, y_cpu, y_ref, 1e-6, 1e-6);

    const float *dy = fixture_random_tensor(n, -1, 1, seed + 3);
    float *dbranch_ref = nan_tensor(n), *dbranch_cpu = nan_tensor(n);
    float *dgamma_ref = fixture_random_tensor(channels, -1, 1, seed + 4);
    float *dgamma_cpu = copy_of(dgamma_ref, channels);
    fixture_ref->op.residual_scale_add_backward(fixture_ref, batch, rows, channels, branch, dy,
                                                gamma, sample_scale, dbranch_ref, dgamma_ref);
    fixture_cpu->op.residual_scale_add_backward(fixture_cpu, batch, rows, channels, branch, dy,
                                                gamma, sample_scale, dbranch_cpu, dgamma_cpu);
    expect_close("residual dbranch", n, dbranch_cpu, dbranch_ref, 1e-6, 1e-7);
    expect_close("residual dgamma", channels, dgamma_cpu, dgamma_ref, 1e-5,
                 1e-6 * sqrt((double)batch * rows));
}

static void test_residual_scale_add(void **state) {
    for (int variant = 0; variant < 4; variant++)
        check_residual(3, 5, 7, variant & 1, variant >> 1, 300 + 10 * variant);
    check_residual(8, 197, 384, 1, 1, 350);  // threaded
}

static void check_token_pool(int batch, int tokens, int channels, int first, int count,
                             uint64_t seed) {
    const size_t n_x = (size_t)batch * tokens * channels, n_y = (size_t)batch * channels;
    const float *x = fixture_random_tensor(n_x, -1, 1, seed);
    float *y_ref = nan_tensor(n_y), *y_cpu = nan_tensor(n_y);
    fixture_ref->op.token_pool_forward(fixture_ref, batch, tokens, channels, first, count, x,
                                       y_ref);
    fixture_cpu->op.token_pool_forward(fixture_cpu, batch, tokens, channels, first, count, x,
                                       y_cpu);
    expect_close("token pool y", n_y, y_cpu, y_ref, 1e-6, 1e-7);
    const float *dy = fixture_random_tensor(n_y, -1, 1, seed + 1);
    float *dx_ref = nan_tensor(n_x), *dx_cpu = nan_tensor(n_x);
    fixture_ref->op.token_pool_backward(fixture_ref, batch, tokens, channels, first, count, dy,
                                        dx_ref);
    fixture_cpu->op.token_pool_backward(fixture_cpu, batch, tokens, channels, first, count, dy,
                                        dx_cpu);
    expect_close("token pool dx", n_x, dx_cpu, dx_ref, 1e-6, 1e-7);
}

static void test_token_pool(void **state) {
    check_token_pool(2, 5, 3, 0, 1, 400);        // class token
    check_token_pool(3, 21, 70, 5, 16, 410);     // mean of the patches after 4 registers
    check_token_pool(16, 197, 384, 1, 196, 420); // ViT-S/16 at 224 px, threaded
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_layernorm, fixture_tensors_free),
        cmocka_unit_test_teardown(test_attention, fixture_tensors_free),
        cmocka_unit_test_teardown(test_vit_tokens, fixture_tensors_free),
        cmocka_unit_test_teardown(test_residual_scale_add, fixture_tensors_free),
        cmocka_unit_test_teardown(test_token_pool, fixture_tensors_free),
    };
    return cmocka_run_group_tests(tests, setup, teardown);
}
