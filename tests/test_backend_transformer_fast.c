// The fast backends' transformer ops against the ref backend (the oracle)
// on random inputs of awkward shapes: odd token counts (197, 261: not
// multiples of the cuda kernels' 64-query and 32-key tiles), head dims
// that are not multiples of 8 or not powers of two (5, 24, 48, 80) on both
// sides of the cuda kernels' 64 / 128 templates, channel counts that are
// not multiples of 8, a single token, batch > 1, registers, and sizes on
// both sides of the threshold where the cpu backend goes multi-threaded.
// Every test runs for the cpu backend and again for the cuda backend,
// skipped (reported, not passed) where no GPU works (backend_mirror.h).
// Output buffers start as NaN so an element an op forgets fails;
// accumulated gradients (+=) start from the same non-zero values in both
// backends.
//
// The tolerances are one set for both fast backends: the cpu backend's
// fp32 arithmetic bounds them. The cuda kernels evaluate ref's double
// expressions for layer norm, the token sequence, the residual add and
// pooling (only the order of their sums differs), and fp32 with one
// rounding per fused multiply-add for attention; why each bound covers
// both is next to it. For cuda in fp16 and bf16 (against ref in the same
// dtype, inputs rounded to it) the activations' relative tolerances are
// widened by mirror_act_tol (two results within the fp32 bound may round
// to neighbouring 16-bit values); the absolute parts cover fp16's
// subnormal step (6e-8); fp32 outputs (statistics, lse, parameter
// gradients) keep their bounds; copies and single fp32 operations stay
// exact.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"

// A fast op's parameter gradients, computed again from the same start,
// must come out with the same bits: sums in a fixed order (no atomics).
static void expect_repeatable(const char *label, size_t n, const float *first,
                              const float *second) {
    mirror_expect_close(label, n, second, first, 0, 0);
}

// ---- layer norm ---------------------------------------------------------------------------

// Outputs are O(1): the cpu backend normalises in fp32 with double row
// sums, ref entirely in double, so they differ by a few fp32 ulps (1e-6
// relative, 1e-6 absolute near 0). dx sums C products per row and dgamma,
// dbeta sum over the rows: their errors grow like sqrt(terms) ulps. cuda
// computes ref's double expressions and differs from it by one rounding.
static void check_layernorm(size_t rows, int channels, uint64_t seed) {
    const size_t n = rows * channels;
    const float *x = mirror_random_tensor(n, -3, 3, seed);
    const float *gamma = mirror_random_tensor(channels, 0.5f, 1.5f, seed + 1);
    const float *beta = mirror_random_tensor(channels, -0.5f, 0.5f, seed + 2);
    const float *dy = mirror_random_tensor(n, -1, 1, seed + 3);
    float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
    float *mean_ref = mirror_nan_tensor(rows), *mean_fast = mirror_nan_tensor(rows);
    float *inv_ref = mirror_nan_tensor(rows), *inv_fast = mirror_nan_tensor(rows);
    ref->op.layernorm_forward(ref, rows, channels, (const Act *)x, gamma, beta, 1e-6f, (Act *)y_ref, mean_ref,
                              inv_ref);
    fast->op.layernorm_forward(fast, rows, channels, DA(x), D(gamma), D(beta), 1e-6f, DA(y_fast),
                               D(mean_fast), D(inv_fast));
    HA(y_fast), H(mean_fast), H(inv_fast);
    mirror_expect_close("layernorm y", n, y_fast, y_ref, mirror_act_tol(1e-5), 1e-5);
    mirror_expect_close("layernorm mean", rows, mean_fast, mean_ref, 1e-6, 1e-6);
    mirror_expect_close("layernorm inv_std", rows, inv_fast, inv_ref, 1e-6, 0);

    float *dx_ref = mirror_nan_tensor(n), *dx_fast = mirror_nan_tensor(n);
    float *dgamma_ref = mirror_random_tensor(channels, -1, 1, seed + 4);
    float *dgamma_fast = mirror_copy(dgamma_ref, channels);
    float *dgamma_again = mirror_copy(dgamma_ref, channels);
    float *dbeta_ref = mirror_random_tensor(channels, -1, 1, seed + 5);
    float *dbeta_fast = mirror_copy(dbeta_ref, channels);
    float *dbeta_again = mirror_copy(dbeta_ref, channels);
    // Both from the ref statistics, so only the backward differs.
    ref->op.layernorm_backward(ref, rows, channels, (const Act *)x, (const Act *)dy, gamma,
                               mean_ref, inv_ref, (Act *)dx_ref, 0, dgamma_ref, dbeta_ref);
    fast->op.layernorm_backward(fast, rows, channels, DA(x), DA(dy), D(gamma), D(mean_ref),
                                D(inv_ref), DA(dx_fast), 0, D(dgamma_fast), D(dbeta_fast));
    HA(dx_fast), H(dgamma_fast), H(dbeta_fast);
    mirror_expect_close("layernorm dx", n, dx_fast, dx_ref, mirror_act_tol(1e-5),
                        1e-6 * sqrt((double)channels));
    mirror_expect_close("layernorm dgamma", channels, dgamma_fast, dgamma_ref, 1e-5,
                        1e-6 * sqrt((double)rows));
    mirror_expect_close("layernorm dbeta", channels, dbeta_fast, dbeta_ref, 1e-5,
                        1e-6 * sqrt((double)rows));
    fast->op.layernorm_backward(fast, rows, channels, DA(x), DA(dy), D(gamma), D(mean_ref),
                                D(inv_ref), DA(dx_fast), 0, D(dgamma_again), D(dbeta_again));
    H(dgamma_again), H(dbeta_again);
    expect_repeatable("layernorm dgamma again", channels, dgamma_fast, dgamma_again);
    expect_repeatable("layernorm dbeta again", channels, dbeta_fast, dbeta_again);
    // Accumulating into a residual gradient: ref's sum in double, rounded once.
    float *sum_ref = mirror_random_tensor(n, -2, 2, seed + 6);
    float *sum_fast = mirror_copy(sum_ref, n);
    const float *residual = mirror_copy(sum_ref, n);
    ref->op.layernorm_backward(ref, rows, channels, (const Act *)x, (const Act *)dy, gamma,
                               mean_ref, inv_ref, (Act *)sum_ref, 1, dgamma_ref, dbeta_ref);
    fast->op.layernorm_backward(fast, rows, channels, DA(x), DA(dy), D(gamma), D(mean_ref),
                                D(inv_ref), DA(sum_fast), 1, D(dgamma_fast), D(dbeta_fast));
    HA(sum_fast);
    mirror_expect_close("layernorm dx accumulated", n, sum_fast, sum_ref, mirror_act_tol(1e-5),
                        1e-6 * sqrt((double)channels));
    double off = 0.0, largest = 0.0;  // not vacuous: the residual plus dx, not dx alone
    for (size_t i = 0; i < n; i++) {
        off = fmax(off, fabs(sum_ref[i] - residual[i] - dx_ref[i]));
        largest = fmax(largest, fabs(residual[i]));
    }
    assert_true(off < 0.05 && largest > 0.2);
    mirror_free(NULL);
}

static void test_layernorm(void **state) {
    NEED_FAST_BACKEND();
    check_layernorm(1, 5, 10);       // one row
    check_layernorm(13, 37, 20);     // odd sizes, single-threaded
    check_layernorm(197, 384, 30);   // ViT-S at 224 px, one image: threaded
    check_layernorm(50, 1030, 40);   // more channels than a reduction block
    check_layernorm(33, 1024, 45);   // 16 bytes per load, 4 loads per lane on cuda
    // more rows than one cuda grid has warps (65535 blocks of 8)
    if (!mirror_emulation_skips("layer norm of 524300 rows")) check_layernorm(524300, 8, 50);
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

// Scores scale q . k (|q|, |k| <= 2) are fp32 sums of Dh products (an fp32
// GEMM on the cpu, a chain of fused multiply-adds on cuda): each is off by
// ~eps scale 4 sqrt(Dh) (4x for margin), which shifts the probabilities by
// that much relatively; outputs are convex combinations of the values (|v|
// <= 2), so they move by at most 2 |v| that score error, plus the fp32
// normalisation and exp (cpu: a polynomial within 2 ulp; cuda: expf and
// one rescaling per 32-key tile, the sum itself divided out): ~1e-6. lse
// moves like a score. (Measured: a peaked softmax, scale 4, is 3e-6 off
// with oneDNN's SSE4.1 kernels.) Gradients: ds_ij = p_ij (dp_ij - D_i)
// cancels where one probability is near 1; in fp32 (both fast backends,
// and PyTorch) dp_ij and D_i carry ~eps max|dp| each, and dq, dk multiply
// by scale |q|, |k| (<= 2) and sum over up to T rows: atol = 4 eps scale 2
// max|dp| sqrt(T) on top of sqrt(T) ulps of O(1) sums. In 16 bits the cuda
// kernels take D_i = dout_i . out_i (FlashAttention's form) from out as
// stored, rounded to the dtype, where ref sums p_ij dp_ij exactly: D_i is
// off by up to u sum_d |dout_id out_id| (u = 2^-11 fp16, 2^-8 bf16), which
// the same cancellation carries: atol += u scale 2 max_i that sum sqrt(T).
// (The CUDA emulation found the 16-bit groups failing without this term.)
static double out_rounding_error(const AttentionShape *s, const float *out, const float *dout) {
    const double unit = mirror_dtype == COMPUTE_F16    ? 0x1p-11
                        : mirror_dtype == COMPUTE_BF16 ? 0x1p-8
                                                       : 0.0;
    const size_t rows = (size_t)s->batch * s->tokens * s->heads;
    double largest = 0.0;
    for (size_t r = 0; r < rows; r++) {
        double total = 0.0;
        for (int d = 0; d < s->head_dim; d++)
            total += fabs((double)dout[r * s->head_dim + d] * out[r * s->head_dim + d]);
        largest = fmax(largest, total);
    }
    return unit * largest;
}

// In 16 bits the cuda backend's attention (cuda_attention_math.cu) also
// rounds the probabilities P and the score gradients dS to the dtype before
// their products (ref keeps them exact): out_i moves by up to u sum_j p_ij
// |v_j| <= u max|v| = 2u; dv_j by u sum_i p_ij |dout_i| <= u c (c: the
// largest column sum of P, |dout| <= 1); dq and dk by scale u sum |ds| |k|
// or |q| <= 4 scale u max|dp| max(1, c) (|ds_ij| <= 2 p_ij max|dp|).
static double largest_probability_column_sum(const AttentionShape *s, const float *qkv,
                                             const float *lse, float scale) {
    const int width = s->heads * s->head_dim;
    double largest = 1.0;
    for (int b = 0; b < s->batch; b++)
        for (int h = 0; h < s->heads; h++)
            for (int j = 0; j < s->tokens; j++) {
                const float *k = qkv + ((size_t)b * s->tokens + j) * 3 * width + width +
                                 h * s->head_dim;
                double column = 0.0;
                for (int i = 0; i < s->tokens; i++) {
                    const float *q = qkv + ((size_t)b * s->tokens + i) * 3 * width +
                                     h * s->head_dim;
                    double dot = 0.0;
                    for (int d = 0; d < s->head_dim; d++) dot += (double)q[d] * k[d];
                    column += exp(scale * dot - lse[((size_t)b * s->heads + h) * s->tokens + i]);
                }
                largest = fmax(largest, column);
            }
    return largest;
}

static void check_attention(int batch, int heads, int tokens, int head_dim, float scale,
                            uint64_t seed) {
    AttentionShape shape;
    ErrorMessage err = {{0}};
    assert_int_equal(attention_shape_make(&shape, batch, heads, tokens, head_dim, NULL), 0);
    AttentionPlan *ref_plan = ref->op.attention_plan(ref, &shape, &err);
    if (!ref_plan) fail_msg("%s", err.text);
    AttentionPlan *fast_plan = fast->op.attention_plan(fast, &shape, &err);
    if (!fast_plan) fail_msg("%s", err.text);
    const size_t n_out = (size_t)batch * tokens * heads * head_dim, n_qkv = 3 * n_out;
    const size_t n_lse = (size_t)batch * heads * tokens;
    const float *qkv = mirror_random_tensor(n_qkv, -2, 2, seed);
    const float *dout = mirror_random_tensor(n_out, -1, 1, seed + 1);
    float *out_ref = mirror_nan_tensor(n_out), *out_fast = mirror_nan_tensor(n_out);
    float *lse_ref = mirror_nan_tensor(n_lse), *lse_fast = mirror_nan_tensor(n_lse);
    ref->op.attention_forward(ref, ref_plan, (const Act *)qkv, scale, (Act *)out_ref, lse_ref);
    fast->op.attention_forward(fast, fast_plan, DA(qkv), scale, DA(out_fast), D(lse_fast));
    HA(out_fast), H(lse_fast);
    const double score_error = 4 * 1.2e-7 * scale * 4 * sqrt((double)head_dim);
    const double unit = mirror_dtype == COMPUTE_F16    ? 0x1p-11
                        : mirror_dtype == COMPUTE_BF16 ? 0x1p-8
                                                       : 0.0;
    mirror_expect_close("attention out", n_out, out_fast, out_ref, mirror_act_tol(1e-5),
                        2e-6 + 4 * score_error + 2 * unit);
    mirror_expect_close("attention lse", n_lse, lse_fast, lse_ref, 1e-6, 2e-6 + score_error);

    float *dqkv_ref = mirror_nan_tensor(n_qkv), *dqkv_fast = mirror_nan_tensor(n_qkv);
    float *dqkv_again = mirror_nan_tensor(n_qkv);
    ref->op.attention_backward(ref, ref_plan, (const Act *)qkv, (const Act *)out_ref, (const Act *)dout, lse_ref, scale, (Act *)dqkv_ref);
    fast->op.attention_backward(fast, fast_plan, DA(qkv), DA(out_ref), DA(dout), D(lse_ref), scale,
                                DA(dqkv_fast));
    HA(dqkv_fast);
    const double largest_dp = max_value_product(&shape, qkv, dout);
    const double cancellation =
        4 * 1.2e-7 * scale * 2 * largest_dp * sqrt((double)tokens) +
        scale * 2 * out_rounding_error(&shape, out_ref, dout) * sqrt((double)tokens) +
        unit * largest_probability_column_sum(&shape, qkv, lse_ref, scale) *
            (1 + 4 * scale * largest_dp);
    mirror_expect_close("attention dqkv", n_qkv, dqkv_fast, dqkv_ref, mirror_act_tol(1e-4),
                        2e-6 * sqrt((double)tokens) + cancellation);
    fast->op.attention_backward(fast, fast_plan, DA(qkv), DA(out_ref), DA(dout), D(lse_ref), scale,
                                DA(dqkv_again));
    HA(dqkv_again);
    expect_repeatable("attention dqkv again", n_qkv, dqkv_fast, dqkv_again);
    ref->op.attention_plan_free(ref, ref_plan);
    fast->op.attention_plan_free(fast, fast_plan);
    mirror_free(NULL);
}

static void test_attention(void **state) {
    NEED_FAST_BACKEND();
    unsetenv("LTC_TEST_ATTENTION_CHUNK");  // a failed run of another group may have left it
    check_attention(1, 1, 1, 4, 0.5f, 100);       // one token: out = v, no gradient to q, k
    check_attention(2, 3, 7, 5, 0.447f, 110);     // odd sizes
    check_attention(3, 2, 37, 24, 0.204f, 120);   // a 6x6 grid + class token
    check_attention(1, 6, 50, 64, 0.125f, 130);   // ViT-S head dim, fewer pairs than threads?
    check_attention(2, 1, 20, 8, 4.0f, 140);      // peaked softmax
    check_attention(2, 2, 197, 64, 0.125f, 150);  // ViT-S/16 at 224 px: 3 tiles and 5 queries
    check_attention(2, 3, 70, 48, 0.144f, 160);   // not a power of two, under 64
    check_attention(1, 2, 261, 80, 0.112f, 170);  // over 64: the 128 kernels; 256 patches + 5
    check_attention(1, 1, 65, 128, 0.088f, 180);  // the largest cuda head dim, a tile + 1
    // cuda's 16-bit attention a chunk of one image at a time (cuda_attention_math.cu)
    setenv("LTC_TEST_ATTENTION_CHUNK", "1", 1);
    check_attention(3, 2, 37, 24, 0.204f, 190);
    unsetenv("LTC_TEST_ATTENTION_CHUNK");
}

// The cuda backend's attention paths (cuda_attention.cu,
// LTC_CUDA_ATTENTION): each against ref. In 16 bits cuDNN's SDPA graphs
// (cuda_sdpa.c; on the CUDA emulation its emulated cuDNN computes the same
// graphs on the CPU) and the batched-GEMM fallback, forced; fp32 has no
// cuDNN path (its fused engines are 16-bit) and a forced one is refused
// with the reason. On the emulation also a cuDNN with no engine for any
// graph (LTC_EMU_CUDNN_GRAPH=no-engine): the default falls back, says why
// in the backend's paths line, and a forced one is refused. An unknown
// value is refused.
static AttentionPlan *plan_with(const char *path, int head_dim, ErrorMessage *err) {
    setenv("LTC_CUDA_ATTENTION", path, 1);
    AttentionShape shape;
    assert_int_equal(attention_shape_make(&shape, 2, 2, 9, head_dim, NULL), 0);
    AttentionPlan *plan = fast->op.attention_plan(fast, &shape, err);
    unsetenv("LTC_CUDA_ATTENTION");
    return plan;
}

static void test_attention_paths(void **state) {
    NEED_FAST_BACKEND();
    if (strcmp(fast->name, "cuda") != 0) skip();  // the cpu backend has one path
    ErrorMessage err = {{0}};
    char paths[512];
    setenv("LTC_CUDA_ATTENTION", "math", 1);
    check_attention(2, 2, 37, 16, 0.25f, 300);
    setenv("LTC_CUDA_ATTENTION", "cudnn", 1);
    if (mirror_dtype == COMPUTE_F32) {
        unsetenv("LTC_CUDA_ATTENTION");
        assert_null(plan_with("cudnn", 16, &err));
        assert_non_null(strstr(err.text, "fp32"));
    } else {
        check_attention(2, 2, 37, 16, 0.25f, 310);   // a 6 x 6 grid + class token
        check_attention(1, 2, 65, 64, 0.125f, 320);  // ViT-S/B head dim, an odd token count
        check_attention(1, 1, 20, 128, 0.088f, 330); // the largest head dim cuDNN's engines take
        unsetenv("LTC_CUDA_ATTENTION");
        assert_null(plan_with("cudnn", 12, &err));   // not a multiple of 8
        assert_non_null(strstr(err.text, "head dim not a multiple of 8"));
        fast->op.describe_paths(fast, paths, sizeof paths);
        print_message("  %s\n", paths);
        assert_non_null(strstr(paths, "cuDNN SDPA graphs for"));
    }
    if (mirror_emulated() && mirror_dtype != COMPUTE_F32) {
        setenv("LTC_EMU_CUDNN_GRAPH", "no-engine", 1);
        AttentionPlan *plan = plan_with("auto", 16, &err);
        if (!plan) fail_msg("%s", err.text);
        fast->op.attention_plan_free(fast, plan);
        assert_null(plan_with("cudnn", 16, &err));
        assert_non_null(strstr(err.text, "no engine"));
        check_attention(2, 1, 20, 16, 0.25f, 340);  // the fallback, by itself
        unsetenv("LTC_EMU_CUDNN_GRAPH");
    }
    assert_null(plan_with("flash", 16, &err));
    assert_non_null(strstr(err.text, "expected auto, cudnn, math or fused"));
}

// The cuda kernels hold head dims up to 128; the plan says so for larger
// ones, which the CPU backends take.
static void test_attention_plan_head_dims(void **state) {
    NEED_FAST_BACKEND();
    AttentionShape shape;
    assert_int_equal(attention_shape_make(&shape, 1, 1, 3, 129, NULL), 0);
    ErrorMessage err = {{0}};
    AttentionPlan *plan = fast->op.attention_plan(fast, &shape, &err);
    if (strcmp(fast->name, "cuda") == 0) {
        assert_null(plan);
        assert_non_null(strstr(err.text, "head dim 129"));
    } else {
        if (!plan) fail_msg("%s", err.text);
        fast->op.attention_plan_free(fast, plan);
    }
}

// ---- NaN propagation ---------------------------------------------------------------------------

// The same elements are NaN as in ref (whose pattern is PyTorch's, checked
// in test_backend_transformer_grad.c), the others close.
static void expect_same_nans(const char *label, size_t n, const float *actual,
                             const float *expected, double tolerance) {
    size_t differ = 0;
    for (size_t i = 0; i < n; i++) {
        const int nan = isnan(expected[i]) != 0;
        if (nan != (isnan(actual[i]) != 0) ||
            (!nan && !(fabs(actual[i] - expected[i]) <= tolerance))) {
            if (differ < 5)
                fprintf(stderr, "%s: element %zu is %g, expected %g\n", label, i, actual[i],
                        expected[i]);
            differ++;
        }
    }
    assert_int_equal(differ, 0);
}

// A NaN in one layer-norm row; a NaN in q, k or v of one token and head.
static void test_nan_propagation(void **state) {
    NEED_FAST_BACKEND();
    float *x = mirror_random_tensor(3 * 4, -1, 1, 600);
    const float *gamma = mirror_random_tensor(4, 0.5f, 1.5f, 601);
    const float *beta = mirror_random_tensor(4, -0.5f, 0.5f, 602);
    float *stats = mirror_tensor(2 * 3);
    float *y_ref = mirror_nan_tensor(3 * 4), *y_fast = mirror_nan_tensor(3 * 4);
    x[1 * 4 + 2] = NAN;
    ref->op.layernorm_forward(ref, 3, 4, (const Act *)x, gamma, beta, 1e-6f, (Act *)y_ref, stats, stats + 3);
    fast->op.layernorm_forward(fast, 3, 4, DA(x), D(gamma), D(beta), 1e-6f, DA(y_fast), D(stats),
                               D(stats + 3));
    HA(y_fast);
    // absolute: values below 4, so in 16 bits up to 4 x mirror_act_tol's unit
    expect_same_nans("layernorm y", 3 * 4, y_fast, y_ref, 4 * mirror_act_tol(1e-5));

    AttentionShape shape;
    assert_int_equal(attention_shape_make(&shape, 2, 2, 40, 3, NULL), 0);
    ErrorMessage err = {{0}};
    AttentionPlan *ref_plan = ref->op.attention_plan(ref, &shape, &err);
    AttentionPlan *fast_plan = fast->op.attention_plan(fast, &shape, &err);
    if (!ref_plan || !fast_plan) fail_msg("%s", err.text);
    const size_t n_out = 2 * 40 * 2 * 3, n_lse = 2 * 2 * 40;
    for (int part = 0; part < 3; part++) {
        float *qkv = mirror_random_tensor(3 * n_out, -1.5f, 1.5f, 610 + part);
        // token 35 (in the second key tile), head 1 of sample 0, channel 1
        qkv[((size_t)35 * 3 + part) * 2 * 3 + 1 * 3 + 1] = NAN;
        float *out_ref = mirror_nan_tensor(n_out), *out_fast = mirror_nan_tensor(n_out);
        float *lse_ref = mirror_nan_tensor(n_lse), *lse_fast = mirror_nan_tensor(n_lse);
        ref->op.attention_forward(ref, ref_plan, (const Act *)qkv, 0.5f, (Act *)out_ref, lse_ref);
        fast->op.attention_forward(fast, fast_plan, DA(qkv), 0.5f, DA(out_fast), D(lse_fast));
        HA(out_fast), H(lse_fast);
        expect_same_nans("attention out", n_out, out_fast, out_ref, 2 * mirror_act_tol(1e-5));  // |out| < 1.5
        expect_same_nans("attention lse", n_lse, lse_fast, lse_ref, 1e-5);
    }
    ref->op.attention_plan_free(ref, ref_plan);
    fast->op.attention_plan_free(fast, fast_plan);
}

// ---- token sequence, residual add, pooling ----------------------------------------------------

// These only copy, add and scale: the backends agree to an ulp (the copies
// and sums of two floats exactly); the batch sums of the position
// gradients sum B terms (cuda: in double, in another order than ref).
// Without patch positions (DINOv3's RoPE models) the patches are copied
// and the (not given) position gradient stays as it was.
static void check_tokens(int batch, int registers, int patches, int channels, int with_cls_pos,
                         int with_patch_pos, uint64_t seed) {
    const size_t n_patches = (size_t)batch * patches * channels;
    const size_t n_tokens = (size_t)batch * (1 + registers + patches) * channels;
    const size_t n_registers = (size_t)registers * channels, n_pos = (size_t)patches * channels;
    const float *patch_embeddings = mirror_random_tensor(n_patches, -1, 1, seed);
    const float *cls = mirror_random_tensor(channels, -1, 1, seed + 1);
    const float *cls_pos = with_cls_pos ? mirror_random_tensor(channels, -1, 1, seed + 2) : NULL;
    const float *register_tokens =
        registers ? mirror_random_tensor(n_registers, -1, 1, seed + 3) : NULL;
    const float *patch_pos = with_patch_pos ? mirror_random_tensor(n_pos, -1, 1, seed + 4) : NULL;
    float *tokens_ref = mirror_nan_tensor(n_tokens), *tokens_fast = mirror_nan_tensor(n_tokens);
    ref->op.vit_tokens_forward(ref, batch, registers, patches, channels, (const Act *)patch_embeddings, cls,
                               cls_pos, register_tokens, patch_pos, (Act *)tokens_ref);
    fast->op.vit_tokens_forward(fast, batch, registers, patches, channels, DA(patch_embeddings),
                                D(cls), D(cls_pos), D(register_tokens), D(patch_pos),
                                DA(tokens_fast));
    HA(tokens_fast);
    mirror_expect_close("tokens", n_tokens, tokens_fast, tokens_ref, 0, 0);

    const float *dtokens = mirror_random_tensor(n_tokens, -1, 1, seed + 5);
    float *dpatches_ref = mirror_nan_tensor(n_patches);
    float *dpatches_fast = mirror_nan_tensor(n_patches);
    float *dcls_ref = mirror_random_tensor(channels, -1, 1, seed + 6);
    float *dcls_fast = mirror_copy(dcls_ref, channels);
    float *dcls_pos_ref = mirror_random_tensor(channels, -1, 1, seed + 7);
    float *dcls_pos_fast = mirror_copy(dcls_pos_ref, channels);
    // One float more than the registers take: it must stay as it was.
    float *dregisters_ref = mirror_random_tensor(n_registers + 1, -1, 1, seed + 8);
    float *dregisters_fast = mirror_copy(dregisters_ref, n_registers + 1);
    float *dpos_ref = mirror_random_tensor(n_pos, -1, 1, seed + 9);
    float *dpos_fast = mirror_copy(dpos_ref, n_pos);
    ref->op.vit_tokens_backward(ref, batch, registers, patches, channels, (const Act *)dtokens,
                                (Act *)dpatches_ref, dcls_ref, with_cls_pos ? dcls_pos_ref : NULL,
                                registers ? dregisters_ref : NULL,
                                with_patch_pos ? dpos_ref : NULL);
    // D() before the choice: H() below brings back the twins of the buffers
    // the op is not given too, so they must hold their host contents.
    float *dcls_pos_device = D(dcls_pos_fast), *dregisters_device = D(dregisters_fast);
    float *dpos_device = D(dpos_fast);
    fast->op.vit_tokens_backward(fast, batch, registers, patches, channels, DA(dtokens),
                                 DA(dpatches_fast), D(dcls_fast),
                                 with_cls_pos ? dcls_pos_device : NULL,
                                 registers ? dregisters_device : NULL,
                                 with_patch_pos ? dpos_device : NULL);
    HA(dpatches_fast), H(dcls_fast), H(dcls_pos_fast), H(dregisters_fast), H(dpos_fast);
    mirror_expect_close("tokens dpatches", n_patches, dpatches_fast, dpatches_ref, 0, 0);
    mirror_expect_close("tokens dcls", channels, dcls_fast, dcls_ref, 1e-6, 1e-6);
    mirror_expect_close("tokens dcls_pos", channels, dcls_pos_fast, dcls_pos_ref, 1e-6, 1e-6);
    mirror_expect_close("tokens dregisters", n_registers + 1, dregisters_fast, dregisters_ref,
                        1e-6, 1e-6);
    mirror_expect_close("tokens dpos", n_pos, dpos_fast, dpos_ref, 1e-6, 1e-6);
    mirror_free(NULL);
}

static void test_vit_tokens(void **state) {
    NEED_FAST_BACKEND();
    check_tokens(1, 0, 1, 3, 1, 1, 200);
    check_tokens(3, 4, 9, 70, 0, 1, 210);      // registers, channels past a 64-block
    check_tokens(5, 1, 33, 17, 1, 1, 215);     // a register and the class position, odd sizes
    check_tokens(4, 0, 196, 384, 1, 1, 220);   // ViT-S/16 at 224 px: threaded; P C > 65536
    check_tokens(3, 4, 9, 70, 0, 0, 230);      // DINOv3: registers, no learned positions
    check_tokens(4, 4, 196, 384, 0, 0, 240);   // DINOv3 ViT-S/16 at 224 px, threaded
}

// residual_layernorm_forward: y as residual_scale_add_forward writes it (y_fast,
// y_ref: the two backends' own), then the norm of it. On the fast backend
// the same bits as its own two ops (the cuda kernel rounds y once, as the
// residual kernel, and takes the norm's double expressions), in place and
// with the norm's output over branch too; against ref within the layer
// norm's tolerance.
static void check_residual_layernorm(int batch, size_t rows, int channels, const float *x,
                                     const float *branch, const float *gamma,
                                     const float *sample_scale, const float *y_fast,
                                     const float *y_ref, uint64_t seed) {
    const size_t n = (size_t)batch * rows * channels, all_rows = (size_t)batch * rows;
    const float *ln_gamma = mirror_random_tensor(channels, 0.5f, 1.5f, seed);
    const float *ln_beta = mirror_random_tensor(channels, -0.5f, 0.5f, seed + 1);
    float *y[3], *out[3], *mean[3], *inv_std[3];  // ref fused, fast fused, fast two ops
    for (int k = 0; k < 3; k++) {
        y[k] = mirror_nan_tensor(n), out[k] = mirror_nan_tensor(n);
        mean[k] = mirror_nan_tensor(all_rows), inv_std[k] = mirror_nan_tensor(all_rows);
    }
    ref->op.residual_layernorm_forward(ref, batch, rows, channels, (const Act *)x,
                                       (const Act *)branch, gamma, sample_scale, (Act *)y[0],
                                       ln_gamma, ln_beta, 1e-6f, (Act *)out[0], mean[0],
                                       inv_std[0]);
    fast->op.residual_layernorm_forward(fast, batch, rows, channels, DA(x), DA(branch), D(gamma),
                                        D(sample_scale), DA(y[1]), D(ln_gamma), D(ln_beta), 1e-6f,
                                        DA(out[1]), D(mean[1]), D(inv_std[1]));
    fast->op.layernorm_forward(fast, all_rows, channels, DA(y_fast), D(ln_gamma), D(ln_beta),
                               1e-6f, DA(out[2]), D(mean[2]), D(inv_std[2]));
    HA(y[1]), HA(out[1]), H(mean[1]), H(inv_std[1]), HA(out[2]), H(mean[2]), H(inv_std[2]);
    mirror_expect_close("residual layernorm y, ref", n, y[0], y_ref, 0, 0);
    mirror_expect_close("residual layernorm y", n, y[1], y_fast, 0, 0);
    mirror_expect_close("residual layernorm out, two ops", n, out[1], out[2], 0, 0);
    mirror_expect_close("residual layernorm mean, two ops", all_rows, mean[1], mean[2], 0, 0);
    mirror_expect_close("residual layernorm inv_std, two ops", all_rows, inv_std[1], inv_std[2],
                        0, 0);
    mirror_expect_close("residual layernorm out", n, out[1], out[0], mirror_act_tol(1e-4), 1e-4);
    float *in_place = mirror_copy(x, n);
    fast->op.residual_layernorm_forward(fast, batch, rows, channels, DA(in_place), DA(branch),
                                        D(gamma), D(sample_scale), DA(in_place), D(ln_gamma),
                                        D(ln_beta), 1e-6f, DA(out[2]), D(mean[2]), D(inv_std[2]));
    HA(in_place), HA(out[2]);
    mirror_expect_close("residual layernorm y in place", n, in_place, y_fast, 0, 0);
    mirror_expect_close("residual layernorm out in place", n, out[2], out[1], 0, 0);
    // norm_out over branch, as a frozen ViT's shared block buffer takes it
    float *shared = mirror_copy(branch, n);
    fast->op.residual_layernorm_forward(fast, batch, rows, channels, DA(x), DA(shared), D(gamma),
                                        D(sample_scale), DA(y[2]), D(ln_gamma), D(ln_beta), 1e-6f,
                                        DA(shared), D(mean[2]), D(inv_std[2]));
    HA(y[2]), HA(shared);
    mirror_expect_close("residual layernorm y, out over branch", n, y[2], y_fast, 0, 0);
    mirror_expect_close("residual layernorm out over branch", n, shared, out[1], 0, 0);
}

static void check_residual(int batch, size_t rows, int channels, int use_gamma, int use_scale,
                           uint64_t seed) {
    const size_t n = (size_t)batch * rows * channels;
    const float *x = mirror_random_tensor(n, -1, 1, seed);
    const float *branch = mirror_random_tensor(n, -1, 1, seed + 1);
    const float *gamma = use_gamma ? mirror_random_tensor(channels, -1, 1, seed + 2) : NULL;
    float *sample_scale = NULL;
    if (use_scale) {
        sample_scale = mirror_tensor(batch);
        for (int b = 0; b < batch; b++) sample_scale[b] = b % 2 ? 0.0f : 1.0f / 0.7f;
    }
    float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
    ref->op.residual_scale_add_forward(ref, batch, rows, channels, (const Act *)x, (const Act *)branch, gamma,
                                       sample_scale, (Act *)y_ref);
    fast->op.residual_scale_add_forward(fast, batch, rows, channels, DA(x), DA(branch), D(gamma),
                                        D(sample_scale), DA(y_fast));
    HA(y_fast);
    // cpu rounds gamma * scale, then the product and the sum: 2 ulps of O(1).
    mirror_expect_close("residual y", n, y_fast, y_ref, mirror_act_tol(1e-6), 1e-6);
    // In place (y = x), as the residual stream is updated.
    float *x_in_place = mirror_copy(x, n);
    fast->op.residual_scale_add_forward(fast, batch, rows, channels, DA(x_in_place), DA(branch),
                                        D(gamma), D(sample_scale), DA(x_in_place));
    HA(x_in_place);
    mirror_expect_close("residual y in place", n, x_in_place, y_fast, 0, 0);
    check_residual_layernorm(batch, rows, channels, x, branch, gamma, sample_scale, y_fast, y_ref,
                             seed + 5);

    const float *dy = mirror_random_tensor(n, -1, 1, seed + 3);
    float *dbranch_ref = mirror_nan_tensor(n), *dbranch_fast = mirror_nan_tensor(n);
    float *dgamma_ref = mirror_random_tensor(channels, -1, 1, seed + 4);
    float *dgamma_fast = mirror_copy(dgamma_ref, channels);
    ref->op.residual_scale_add_backward(ref, batch, rows, channels, (const Act *)branch, (const Act *)dy, gamma,
                                        sample_scale, (Act *)dbranch_ref, dgamma_ref);
    fast->op.residual_scale_add_backward(fast, batch, rows, channels, DA(branch), DA(dy), D(gamma),
                                         D(sample_scale), DA(dbranch_fast), D(dgamma_fast));
    HA(dbranch_fast), H(dgamma_fast);
    // Without gamma, dgamma stays as it was.
    mirror_expect_close("residual dbranch", n, dbranch_fast, dbranch_ref, mirror_act_tol(1e-6),
                        1e-7);
    mirror_expect_close("residual dgamma", channels, dgamma_fast, dgamma_ref, 1e-5,
                        1e-6 * sqrt((double)batch * rows));
    mirror_free(NULL);
}

static void test_residual_scale_add(void **state) {
    NEED_FAST_BACKEND();
    for (int variant = 0; variant < 4; variant++)
        check_residual(3, 5, 7, variant & 1, variant >> 1, 300 + 10 * variant);
    check_residual(8, 197, 384, 1, 1, 350);  // threaded
}

static void check_token_pool(int batch, int tokens, int channels, int first, int count,
                             uint64_t seed) {
    const size_t n_x = (size_t)batch * tokens * channels, n_y = (size_t)batch * channels;
    const float *x = mirror_random_tensor(n_x, -1, 1, seed);
    float *y_ref = mirror_nan_tensor(n_y), *y_fast = mirror_nan_tensor(n_y);
    ref->op.token_pool_forward(ref, batch, tokens, channels, first, count, (const Act *)x, (Act *)y_ref);
    fast->op.token_pool_forward(fast, batch, tokens, channels, first, count, DA(x), DA(y_fast));
    HA(y_fast);
    mirror_expect_close("token pool y", n_y, y_fast, y_ref, mirror_act_tol(1e-6), 1e-7);
    const float *dy = mirror_random_tensor(n_y, -1, 1, seed + 1);
    float *dx_ref = mirror_nan_tensor(n_x), *dx_fast = mirror_nan_tensor(n_x);
    ref->op.token_pool_backward(ref, batch, tokens, channels, first, count, (const Act *)dy, (Act *)dx_ref);
    fast->op.token_pool_backward(fast, batch, tokens, channels, first, count, DA(dy), DA(dx_fast));
    HA(dx_fast);
    mirror_expect_close("token pool dx", n_x, dx_fast, dx_ref, mirror_act_tol(1e-6), 1e-7);
    mirror_free(NULL);
}

static void test_token_pool(void **state) {
    NEED_FAST_BACKEND();
    check_token_pool(2, 5, 3, 0, 1, 400);        // class token
    check_token_pool(3, 21, 70, 5, 16, 410);     // mean of the patches after 4 registers
    check_token_pool(16, 197, 384, 1, 196, 420); // ViT-S/16 at 224 px, threaded
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_layernorm, mirror_free),
        cmocka_unit_test_teardown(test_attention, mirror_free),
        cmocka_unit_test_teardown(test_attention_paths, mirror_free),
        cmocka_unit_test(test_attention_plan_head_dims),
        cmocka_unit_test_teardown(test_nan_propagation, mirror_free),
        cmocka_unit_test_teardown(test_vit_tokens, mirror_free),
        cmocka_unit_test_teardown(test_residual_scale_add, mirror_free),
        cmocka_unit_test_teardown(test_token_pool, mirror_free),
    };
    return mirror_run_groups_16bit(tests, sizeof tests / sizeof tests[0]);
}
