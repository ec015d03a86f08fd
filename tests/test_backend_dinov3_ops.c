// The DINOv3 ops of backend.h (rope_forward / rope_backward on the fused
// qkv buffer, swiglu_forward / swiglu_backward): each fast backend against
// the ref backend on awkward shapes (a single token, head dims whose half
// is odd, no prefix and 1 + 4 prefix tokens, sizes on both sides of the cpu
// backend's threading threshold), what RoPE must leave alone (values, the
// class and register tokens) left bit for bit, then the ref backend's
// gradients against central finite differences of its forward. Runs as a
// "cpu" and a "cuda" group (tests/backend_mirror.h); the cuda group skips
// where no GPU works.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"
#include "gradcheck.h"

// Central differences with h = 1e-3: RoPE is linear (exact up to fp32
// rounding of the loss), SwiGLU smooth (O(h^2) truncation ~1e-6).
static const GradcheckTolerance FD_TOLERANCE = {.step = 1e-3f, .rtol = 1e-2, .atol = 1e-3};

// ---- RoPE ------------------------------------------------------------------------------------

typedef struct RopeShape {
    int batch, tokens, heads, head_dim, prefix;
} RopeShape;

static size_t rope_qkv_floats(const RopeShape *s) {
    return (size_t)s->batch * s->tokens * 3 * s->heads * s->head_dim;
}

// Angles as DINOv3's tables hold them: any value, here uniform in +-2 pi.
static void rope_tables(const RopeShape *s, uint64_t seed, const float **sin_out,
                        const float **cos_out) {
    const size_t n = (size_t)(s->tokens - s->prefix) * (s->head_dim / 2);
    const float *angle = mirror_random_tensor(n ? n : 1, -6.3f, 6.3f, seed);
    float *sin_table = mirror_tensor(n ? n : 1), *cos_table = mirror_tensor(n ? n : 1);
    for (size_t i = 0; i < n; i++) {
        sin_table[i] = (float)sin(angle[i]);
        cos_table[i] = (float)cos(angle[i]);
    }
    *sin_out = sin_table;
    *cos_out = cos_table;
}

// 1 for the floats RoPE rotates: q and k of the tokens from the prefix on.
static int rope_rotates(const RopeShape *s, size_t index) {
    const size_t width = (size_t)s->heads * s->head_dim;
    const size_t token = index / (3 * width) % s->tokens, part = index % (3 * width) / width;
    return token >= (size_t)s->prefix && part < 2;
}

// The untouched floats must keep their bits; the rotated ones agree with
// ref to fp32 rounding (each output is two products and a sum of |.| <= 2).
static void expect_rope_result(const char *label, const RopeShape *s, const float *input,
                               const float *fast_out, const float *ref_out) {
    const size_t n = rope_qkv_floats(s);
    size_t changed = 0;
    for (size_t i = 0; i < n; i++)
        if (!rope_rotates(s, i) && memcmp(&fast_out[i], &input[i], sizeof(float)) != 0) changed++;
    if (changed) fail_msg("%s: %zu values or prefix floats changed", label, changed);
    // (16 bits: one rounding of the same double expression each, mirror_act_tol)
    mirror_expect_close(label, n, fast_out, ref_out, mirror_act_tol(1e-6), 1e-6);
}

static void check_rope(RopeShape s, uint64_t seed) {
    const size_t n = rope_qkv_floats(&s);
    const float *sin_table, *cos_table;
    rope_tables(&s, seed, &sin_table, &cos_table);
    const float *input = mirror_random_tensor(n, -1, 1, seed + 1);
    float *ref_out = mirror_copy(input, n), *fast_out = mirror_copy(input, n);
    ref->op.rope_forward(ref, s.batch, s.tokens, s.heads, s.head_dim, s.prefix, sin_table,
                         cos_table, (Act *)ref_out);
    fast->op.rope_forward(fast, s.batch, s.tokens, s.heads, s.head_dim, s.prefix, D(sin_table),
                          D(cos_table), DA(fast_out));
    HA(fast_out);
    expect_rope_result("rope forward", &s, input, fast_out, ref_out);

    const float *gradient = mirror_random_tensor(n, -1, 1, seed + 2);
    float *ref_back = mirror_copy(gradient, n), *fast_back = mirror_copy(gradient, n);
    ref->op.rope_backward(ref, s.batch, s.tokens, s.heads, s.head_dim, s.prefix, sin_table,
                          cos_table, (Act *)ref_back);
    fast->op.rope_backward(fast, s.batch, s.tokens, s.heads, s.head_dim, s.prefix,
                           D(sin_table), D(cos_table), DA(fast_back));
    HA(fast_back);
    expect_rope_result("rope backward", &s, gradient, fast_back, ref_back);
    // backward undoes forward (a rotation's transpose is its inverse)
    fast->op.rope_backward(fast, s.batch, s.tokens, s.heads, s.head_dim, s.prefix,
                           D(sin_table), D(cos_table), DA(fast_out));
    HA(fast_out);
    // 16 bits: two roundings of pair values up to sqrt(2): twice mirror_act_tol, also absolute
    mirror_expect_close("rope backward(forward(x))", n, fast_out, input,
                        2 * mirror_act_tol(1e-6), 2 * mirror_act_tol(1e-6));
}

static void test_rope(void **state) {
    NEED_FAST_BACKEND();
    check_rope((RopeShape){1, 1, 1, 2, 0}, 10);         // one token, one pair, no prefix
    check_rope((RopeShape){2, 14, 3, 8, 5}, 20);        // class + 4 registers, 3 x 3 patches
    check_rope((RopeShape){3, 7, 2, 6, 1}, 30);         // Dh / 2 odd
    check_rope((RopeShape){2, 201, 6, 64, 5}, 40);      // DINOv3 ViT-S/16 at 224 px: threaded
    check_rope((RopeShape){1, 5, 4, 16, 5}, 50);        // only prefix tokens: nothing rotates
}

typedef struct RopeProblem {
    RopeShape shape;
    const float *sin, *cos, *projection;
    float *work;
} RopeProblem;

static double rope_loss(void *context, const float *qkv) {
    RopeProblem *p = context;
    const RopeShape *s = &p->shape;
    const size_t n = rope_qkv_floats(s);
    memcpy(p->work, qkv, n * sizeof(float));
    ref->op.rope_forward(ref, s->batch, s->tokens, s->heads, s->head_dim, s->prefix, p->sin, p->cos,
                         (Act *)p->work);
    return gradcheck_project(n, p->work, p->projection);
}

// rope_backward applied to the projection is d <p, rope(x)> / dx.
static void test_rope_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const RopeShape shapes[] = {{2, 6, 2, 4, 2}, {1, 5, 1, 6, 0}};
    for (int t = 0; t < 2; t++) {
        RopeProblem p = {.shape = shapes[t]};
        const size_t n = rope_qkv_floats(&p.shape);
        rope_tables(&p.shape, 60 + t, &p.sin, &p.cos);
        p.projection = mirror_random_tensor(n, -1, 1, 70 + t);
        p.work = mirror_tensor(n);
        float *x = mirror_random_tensor(n, -1, 1, 80 + t);
        float *dx = mirror_copy(p.projection, n);
        ref->op.rope_backward(ref, p.shape.batch, p.shape.tokens, p.shape.heads, p.shape.head_dim,
                              p.shape.prefix, p.sin, p.cos, (Act *)dx);
        assert_int_equal(gradcheck_compare("rope dx", rope_loss, &p, x, n, dx, FD_TOLERANCE), 0);
    }
}

// ---- SwiGLU ----------------------------------------------------------------------------------

// fp32 exp and products (cpu) against double (ref): a few ulps of O(|x|)
// values; gates out to +-12 reach the saturated ends of the sigmoid.
static void check_swiglu(size_t rows, int hidden, uint64_t seed) {
    const size_t n_x = rows * 2 * hidden, n_y = rows * hidden;
    const float *x = mirror_random_tensor(n_x, -12, 12, seed);
    float *y_ref = mirror_nan_tensor(n_y), *y_fast = mirror_nan_tensor(n_y);
    ref->op.swiglu_forward(ref, rows, hidden, (const Act *)x, (Act *)y_ref);
    fast->op.swiglu_forward(fast, rows, hidden, DA(x), DA(y_fast));
    HA(y_fast);
    mirror_expect_close("swiglu y", n_y, y_fast, y_ref, mirror_act_tol(1e-5), 1e-6);
    const float *dy = mirror_random_tensor(n_y, -1, 1, seed + 1);
    float *dx_ref = mirror_nan_tensor(n_x), *dx_fast = mirror_nan_tensor(n_x);
    ref->op.swiglu_backward(ref, rows, hidden, (const Act *)x, (const Act *)dy, (Act *)dx_ref);
    fast->op.swiglu_backward(fast, rows, hidden, DA(x), DA(dy), DA(dx_fast));
    HA(dx_fast);
    mirror_expect_close("swiglu dx", n_x, dx_fast, dx_ref, mirror_act_tol(1e-5), 1e-6);
}

static void test_swiglu(void **state) {
    NEED_FAST_BACKEND();
    check_swiglu(1, 1, 100);
    check_swiglu(7, 13, 110);
    check_swiglu(197, 96, 120);  // past the threading threshold
}

// silu(x) x' at the special points: 0 gate gives 0, NaN stays NaN.
static void test_swiglu_special_values(void **state) {
    NEED_FAST_BACKEND();
    float *x = mirror_tensor(6), *y = mirror_nan_tensor(3);
    const float values[6] = {0.0f, NAN, 3.0f, 5.0f, 2.0f, NAN};  // gates, then values
    memcpy(x, values, sizeof values);
    fast->op.swiglu_forward(fast, 1, 3, DA(x), DA(y));
    HA(y);
    assert_true(y[0] == 0.0f);
    assert_true(isnan(y[1]));
    assert_true(isnan(y[2]));
}

typedef struct SwigluProblem {
    size_t rows;
    int hidden;
    float *y;
    const float *projection;
} SwigluProblem;

static double swiglu_loss(void *context, const float *x) {
    SwigluProblem *p = context;
    ref->op.swiglu_forward(ref, p->rows, p->hidden, (const Act *)x, (Act *)p->y);
    return gradcheck_project(p->rows * p->hidden, p->y, p->projection);
}

static void test_swiglu_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const size_t rows = 3;
    const int hidden = 5;
    SwigluProblem p = {.rows = rows, .hidden = hidden, .y = mirror_tensor(rows * hidden),
                       .projection = mirror_random_tensor(rows * hidden, -1, 1, 130)};
    float *x = mirror_random_tensor(rows * 2 * hidden, -4, 4, 131);
    float *dx = mirror_nan_tensor(rows * 2 * hidden);
    ref->op.swiglu_backward(ref, rows, hidden, (const Act *)x, (const Act *)p.projection,
                            (Act *)dx);
    assert_int_equal(
        gradcheck_compare("swiglu dx", swiglu_loss, &p, x, rows * 2 * hidden, dx, FD_TOLERANCE),
        0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_rope, mirror_free),
        cmocka_unit_test_teardown(test_rope_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_swiglu, mirror_free),
        cmocka_unit_test_teardown(test_swiglu_special_values, mirror_free),
        cmocka_unit_test_teardown(test_swiglu_backward_fd, mirror_free),
    };
    // The ops again with cuda storing fp16 / bf16 against ref in the same
    // dtype (the finite differences hold in fp32 only).
    const struct CMUnitTest act_tests[] = {
        cmocka_unit_test_teardown(test_rope, mirror_free),
        cmocka_unit_test_teardown(test_swiglu, mirror_free),
        cmocka_unit_test_teardown(test_swiglu_special_values, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]) +
           mirror_run_16bit_groups(act_tests, sizeof act_tests / sizeof act_tests[0]);
}
