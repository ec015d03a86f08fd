// Tests of the reference backend's optimizer updates (SGD with momentum /
// Nesterov / weight decay, AdamW with bias correction, EMA) against the
// PyTorch formulas of backend.h and against numbers from torch.optim
// itself, the step gate (with a loss scaler's 1/scale), scalar_combine, host
// slots, and the uint8 input normalisation. Ref backend memory is host
// memory, so the small cases pass stack arrays directly.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backend/ref/ref_backend.h"
#include "backend/scalar_rules.h"
#include "backend_fixture.h"
#include "gradcheck.h"

enum { ELEMENTS = 5, STEPS = 3 };

// One parameter vector and three gradients shared by every optimizer test.
static const float initial_param[ELEMENTS] = {0.5f, -1.25f, 2.0f, 0.0f, -0.75f};
static const float gradients[STEPS][ELEMENTS] = {{0.1f, -0.2f, 0.3f, -0.4f, 0.05f},
                                                 {-0.3f, 0.25f, 0.1f, 0.2f, -0.15f},
                                                 {0.2f, 0.1f, -0.05f, 0.3f, 0.4f}};

// Parameters after each step from PyTorch 1.13 (Debian python3-torch):
//   p = nn.Parameter(initial); opt = torch.optim.SGD([p], lr=0.1, momentum=0.9,
//   weight_decay=1e-2[, nesterov=True]) or torch.optim.AdamW([p], lr=0.01,
//   betas=(0.9, 0.999), eps=1e-8, weight_decay=0.05); per step p.grad = g; opt.step()
static const float torch_sgd_momentum[STEPS][ELEMENTS] = {
    {0.489499986f, -1.22874999f, 1.96800005f, 0.0400000028f, -0.75424999f},
    {0.509560466f, -1.23339629f, 1.92723203f, 0.0559599996f, -0.742320716f},
    {0.50710535f, -1.24634457f, 1.89361358f, 0.0402680337f, -0.770842075f}};
static const float torch_sgd_nesterov[STEPS][ELEMENTS] = {
    {0.480049998f, -1.20962501f, 1.93920004f, 0.0759999976f, -0.758074999f},
    {0.527632892f, -1.23761427f, 1.89059556f, 0.0702555925f, -0.731577158f},
    {0.504887044f, -1.25804174f, 1.86350465f, 0.0260205418f, -0.796521366f}};
static const float torch_adamw[STEPS][ELEMENTS] = {
    {0.489749998f, -1.239375f, 1.98899996f, 0.00999999978f, -0.759624958f},
    {0.494447023f, -1.24038255f, 1.97929478f, 0.0126583697f, -0.754303277f},
    {0.494011909f, -1.24286878f, 1.97265315f, 0.0108003458f, -0.75846374f}};

// Against torch: the same fp32 formulas, but PyTorch's kernels order a few
// operations differently (lerp for Adam's first moment, fused addcdiv), so
// allow a few float ulps of the O(1) values: 1e-5 relative + 1e-6 absolute.
#define TORCH_RTOL 1e-5
#define TORCH_ATOL 1e-6
// Against the formulas evaluated in double here: a handful of fp32
// roundings per step on O(1) values.
#define FORMULA_RTOL 1e-5
#define FORMULA_ATOL 1e-6

// Multiplier 1, no skip: the plain update.
static const float open_gate[GATE_FOUND] = {[GATE_MULTIPLIER] = 1.0f, [GATE_UNIT] = 1.0f};

static void check_sgd(int nesterov, const float expected[STEPS][ELEMENTS]) {
    const float lr = 0.1f, momentum = 0.9f, weight_decay = 1e-2f;
    float *param = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    float *grad = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    float *buffer = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    memcpy(param, initial_param, sizeof initial_param);
    for (int i = 0; i < ELEMENTS; i++) buffer[i] = NAN;  // the first step must not read it
    double want[ELEMENTS], want_buffer[ELEMENTS];
    for (int i = 0; i < ELEMENTS; i++) want[i] = initial_param[i];
    for (int t = 0; t < STEPS; t++) {
        memcpy(grad, gradients[t], sizeof initial_param);
        fixture_backend->op.sgd_update(fixture_backend, ELEMENTS, param, grad, open_gate, buffer, lr, momentum, weight_decay,
                               nesterov, t == 0);
        float want_float[ELEMENTS];
        for (int i = 0; i < ELEMENTS; i++) {  // backend.h's formula, in double
            const double g = gradients[t][i] + (double)weight_decay * want[i];
            want_buffer[i] = t == 0 ? g : momentum * want_buffer[i] + g;
            want[i] -= lr * (nesterov ? g + momentum * want_buffer[i] : want_buffer[i]);
            want_float[i] = (float)want[i];
        }
        assert_int_equal(gradcheck_count_mismatches("sgd vs formula", ELEMENTS, param, want_float,
                                                    FORMULA_RTOL, FORMULA_ATOL),
                         0);
        assert_int_equal(gradcheck_count_mismatches("sgd vs torch", ELEMENTS, param, expected[t],
                                                    TORCH_RTOL, TORCH_ATOL),
                         0);
    }
    fixture_backend->op.free(fixture_backend, param);
    fixture_backend->op.free(fixture_backend, grad);
    fixture_backend->op.free(fixture_backend, buffer);
}

static void test_sgd_momentum_and_weight_decay(void **state) { check_sgd(0, torch_sgd_momentum); }

static void test_sgd_nesterov(void **state) { check_sgd(1, torch_sgd_nesterov); }

static void test_sgd_without_momentum(void **state) {
    // momentum 0: plain param -= lr * (grad + wd * param), every step.
    float param[2] = {1.0f, -2.0f}, buffer[2] = {0, 0};
    const float grad[2] = {0.5f, 0.25f};
    for (int t = 0; t < 2; t++)
        fixture_backend->op.sgd_update(fixture_backend, 2, param, grad, open_gate, buffer, 0.1f, 0.0f, 0.1f, 0, t == 0);
    // By hand: 1 -> 1 - 0.1 (0.5 + 0.1) = 0.94 -> 0.94 - 0.1 (0.5 + 0.094) = 0.8806;
    // -2 -> -2 - 0.1 (0.25 - 0.2) = -2.005 -> -2.005 - 0.1 (0.25 - 0.2005) = -2.00995.
    assert_float_equal(param[0], 0.8806f, 1e-6);  // a few float roundings of O(1) values
    assert_float_equal(param[1], -2.00995f, 1e-6);
}

static void test_adamw_bias_correction(void **state) {
    const float lr = 0.01f, eps = 1e-8f, weight_decay = 0.05f;
    const double beta1 = 0.9, beta2 = 0.999;  // Python floats, as torch.optim.AdamW's
    float *param = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    float *grad = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    float *m = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    float *v = fixture_backend->op.alloc(fixture_backend, sizeof initial_param);
    memcpy(param, initial_param, sizeof initial_param);
    fixture_backend->op.fill(fixture_backend, m, 0.0f, ELEMENTS);
    fixture_backend->op.fill(fixture_backend, v, 0.0f, ELEMENTS);
    double want[ELEMENTS], want_m[ELEMENTS] = {0}, want_v[ELEMENTS] = {0};
    for (int i = 0; i < ELEMENTS; i++) want[i] = initial_param[i];
    for (int t = 0; t < STEPS; t++) {
        const int step = t + 1;
        const float device_step = (float)step;  // the count lives in backend memory
        memcpy(grad, gradients[t], sizeof initial_param);
        fixture_backend->op.adamw_update(fixture_backend, ELEMENTS, param, grad, open_gate, m, v,
                                         lr, beta1, beta2, eps, weight_decay, &device_step);
        float want_float[ELEMENTS];
        for (int i = 0; i < ELEMENTS; i++) {  // backend.h's formula, in double
            const double g = gradients[t][i];
            want[i] *= 1.0 - (double)lr * weight_decay;
            want_m[i] = beta1 * want_m[i] + (1.0 - beta1) * g;
            want_v[i] = beta2 * want_v[i] + (1.0 - beta2) * g * g;
            const double m_hat = want_m[i] / (1.0 - pow(beta1, step));
            const double v_hat = want_v[i] / (1.0 - pow(beta2, step));
            want[i] -= lr * m_hat / (sqrt(v_hat) + eps);
            want_float[i] = (float)want[i];
        }
        assert_int_equal(gradcheck_count_mismatches("adamw vs formula", ELEMENTS, param,
                                                    want_float, FORMULA_RTOL, FORMULA_ATOL),
                         0);
        assert_int_equal(gradcheck_count_mismatches("adamw vs torch", ELEMENTS, param,
                                                    torch_adamw[t], TORCH_RTOL, TORCH_ATOL),
                         0);
    }
    fixture_backend->op.free(fixture_backend, param);
    fixture_backend->op.free(fixture_backend, grad);
    fixture_backend->op.free(fixture_backend, m);
    fixture_backend->op.free(fixture_backend, v);
}

// AdamW's moments in torch.optim.AdamW's (2.x) operations: the factors are
// the Python floats 1 - beta rounded to float32 once (0.1f and 0.001f, not
// 1 - 0.9f = 0.100000024), the first moment is lerp_'s m + w (g - m) (its
// g - (g - m)(1 - w) past w = 0.5), the second v beta2 + ((1 - beta2) g) g.
// Not the form before 2026-12-02 (beta1 m + (1 - beta1) g from float betas):
// the values below tell the two apart.
static void test_adamw_moments_in_pytorch_order(void **state) {
    const AdamwFactors f = adamw_factors_rule(0.9, 0.999);
    assert_true(f.lerp_coefficient == 0.1f && f.beta2 == 0.999f && f.one_minus_beta2 == 0.001f);
    assert_false(f.lerp_from_target);
    const float ms[] = {0.0f, 0.3f, -1.7f, 2.5e-3f, 123.0f};
    const float gs[] = {1.0f, -0.7f, 0.2f, 3e-2f, 1.1f};
    int differs_from_before = 0;
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++) {
        const float m = ms[i], g = gs[i];
        assert_true(adamw_first_moment_rule(f, m, g) == m + 0.1f * (g - m));
        assert_true(adamw_second_moment_rule(f, m * m, g) == m * m * 0.999f + (0.001f * g) * g);
        differs_from_before |= adamw_first_moment_rule(f, m, g) != 0.9f * m + (1.0f - 0.9f) * g;
    }
    assert_true(differs_from_before);
    // beta1 0.3: lerp's weight 0.7 takes its other form.
    const AdamwFactors large = adamw_factors_rule(0.3, 0.999);
    assert_true(large.lerp_from_target);
    const float w = (float)(1.0 - 0.3);
    for (size_t i = 0; i < sizeof ms / sizeof ms[0]; i++)
        assert_true(adamw_first_moment_rule(large, ms[i], gs[i]) ==
                    gs[i] - (gs[i] - ms[i]) * (1.0f - w));
}

static void test_adamw_first_step_is_lr_sized(void **state) {
    // With bias correction the first step moves each weight by lr * sign(g)
    // whatever |g| is (no decay here); without it the step would be ~3x lr.
    float param[3] = {1.0f, 1.0f, 1.0f}, m[3] = {0}, v[3] = {0};
    const float grad[3] = {1e-3f, -5.0f, 0.2f};
    const float first = 1.0f;
    fixture_backend->op.adamw_update(fixture_backend, 3, param, grad, open_gate, m, v, 0.01f,
                                     0.9f, 0.999f, 1e-8f, 0.0f, &first);
    // eps / sqrt(v_hat) perturbs the step by at most 1e-8 / 1e-3 relative.
    assert_float_equal(param[0], 0.99f, 1e-6);
    assert_float_equal(param[1], 1.01f, 1e-6);
    assert_float_equal(param[2], 0.99f, 1e-6);
}

// The gate's multiplier scales the gradient before anything else: an update
// with multiplier m equals the open-gate update of m * grad, bit for bit.
static void test_updates_scale_by_the_gate(void **state) {
    const float grad[ELEMENTS] = {0.1f, -0.2f, 0.3f, -0.4f, 0.05f};
    float scaled[ELEMENTS];
    const float half_gate[GATE_FOUND] = {[GATE_MULTIPLIER] = 0.375f, [GATE_UNIT] = 1.0f};
    for (int i = 0; i < ELEMENTS; i++) scaled[i] = 0.375f * grad[i];
    float p_gate[ELEMENTS], p_open[ELEMENTS], m_gate[ELEMENTS] = {0}, m_open[ELEMENTS] = {0};
    float v_gate[ELEMENTS] = {0}, v_open[ELEMENTS] = {0};
    memcpy(p_gate, initial_param, sizeof p_gate);
    memcpy(p_open, initial_param, sizeof p_open);
    for (int t = 0; t < 2; t++) {
        fixture_backend->op.sgd_update(fixture_backend, ELEMENTS, p_gate, grad, half_gate, m_gate,
                                       0.1f, 0.9f, 0.01f, 1, t == 0);
        fixture_backend->op.sgd_update(fixture_backend, ELEMENTS, p_open, scaled, open_gate,
                                       m_open, 0.1f, 0.9f, 0.01f, 1, t == 0);
    }
    assert_memory_equal(p_gate, p_open, sizeof p_gate);
    assert_memory_equal(m_gate, m_open, sizeof m_gate);
    for (int t = 1; t <= 2; t++) {
        const float step = (float)t;
        fixture_backend->op.adamw_update(fixture_backend, ELEMENTS, p_gate, grad, half_gate,
                                         m_gate, v_gate, 0.01f, 0.9f, 0.999f, 1e-8f, 0.05f, &step);
        fixture_backend->op.adamw_update(fixture_backend, ELEMENTS, p_open, scaled, open_gate,
                                         m_open, v_open, 0.01f, 0.9f, 0.999f, 1e-8f, 0.05f, &step);
    }
    assert_memory_equal(p_gate, p_open, sizeof p_gate);
    assert_memory_equal(v_gate, v_open, sizeof v_gate);
    // LARS: the ratio sees |m * grad| (from the raw sums and m).
    float sums[2] = {0, 0}, d_gate[ELEMENTS], d_open[ELEMENTS], sums_scaled[2] = {0, 0};
    for (int i = 0; i < ELEMENTS; i++) {
        sums[0] += initial_param[i] * initial_param[i];
        sums[1] += grad[i] * grad[i];
    }
    sums_scaled[0] = sums[0];
    sums_scaled[1] = sums[1] * 0.375f * 0.375f;
    fixture_backend->op.lars_direction(fixture_backend, ELEMENTS, initial_param, grad, half_gate,
                                       sums, 1e-4f, 0.001f, 1e-8f, d_gate);
    fixture_backend->op.lars_direction(fixture_backend, ELEMENTS, initial_param, scaled,
                                       open_gate, sums_scaled, 1e-4f, 0.001f, 1e-8f, d_open);
    for (int i = 0; i < ELEMENTS; i++) assert_float_equal(d_gate[i], d_open[i], 1e-6 * 1e-3);
}

// A gate that says skip leaves parameters and optimizer state untouched,
// even with NaN gradients.
static void test_skipped_updates_change_nothing(void **state) {
    const float nan_grad[ELEMENTS] = {NAN, 1.0f, INFINITY, 0.0f, 2.0f};
    const float skip_gate[GATE_FOUND] = {[GATE_SKIP] = 1.0f, [GATE_UNIT] = 1.0f,
                                         [GATE_UNIT_SKIP] = 1.0f};
    float param[ELEMENTS], m[ELEMENTS], v[ELEMENTS], out[ELEMENTS];
    memcpy(param, initial_param, sizeof param);
    for (int i = 0; i < ELEMENTS; i++) m[i] = 0.5f, v[i] = 0.25f, out[i] = 7.0f;
    fixture_backend->op.sgd_update(fixture_backend, ELEMENTS, param, nan_grad, skip_gate, m, 0.1f,
                                   0.9f, 0.01f, 0, 0);
    const float step = 3.0f;
    fixture_backend->op.adamw_update(fixture_backend, ELEMENTS, param, nan_grad, skip_gate, m, v,
                                     0.1f, 0.9f, 0.999f, 1e-8f, 0.01f, &step);
    const float sums[2] = {1.0f, NAN};
    fixture_backend->op.lars_direction(fixture_backend, ELEMENTS, param, nan_grad, skip_gate,
                                       sums, 0.01f, 0.001f, 1e-8f, out);
    fixture_backend->op.sgd_update(fixture_backend, ELEMENTS, param, out, skip_gate + GATE_UNIT,
                                   m, 0.1f, 0.9f, 0.0f, 0, 0);
    assert_memory_equal(param, initial_param, sizeof param);
    for (int i = 0; i < ELEMENTS; i++) {
        assert_true(m[i] == 0.5f && v[i] == 0.25f);
        assert_true(isfinite(param[i]));
    }
}

// step_gate: clip_grad_norm_'s coefficient over the groups' squares, times
// the scale; a NaN/inf square or a found count skips.
static void test_step_gate_rule(void **state) {
    float gate[GATE_SQUARES + 3] = {0};
    gate[GATE_SQUARES + 0] = 9.0f;  // 3^2
    gate[GATE_SQUARES + 2] = 16.0f; // 4^2: global norm 5 (group 1 frozen: 0)
    fixture_backend->op.step_gate(fixture_backend, gate, 3, 0.5f, NULL, 10.0f);
    assert_true(gate[GATE_MULTIPLIER] == 0.5f);  // norm 2.5 < 10: only the scale
    assert_true(gate[GATE_SKIP] == 0.0f && gate[GATE_UNIT] == 1.0f && gate[GATE_UNIT_SKIP] == 0.0f);
    fixture_backend->op.step_gate(fixture_backend, gate, 3, 0.5f, NULL, 1.0f);
    assert_true(gate[GATE_MULTIPLIER] == 0.5f * (1.0f / (2.5f + 1e-6f)));  // torch's float32 coefficient
    fixture_backend->op.step_gate(fixture_backend, gate, 3, 1.0f, NULL, 0.0f);
    assert_true(gate[GATE_MULTIPLIER] == 1.0f);  // no clipping
    gate[GATE_SQUARES + 1] = INFINITY;
    fixture_backend->op.step_gate(fixture_backend, gate, 3, 1.0f, NULL, 1.0f);
    assert_true(gate[GATE_SKIP] == 1.0f && gate[GATE_UNIT_SKIP] == 1.0f);
    assert_true(gate[GATE_MULTIPLIER] == 0.0f);
    gate[GATE_SQUARES + 1] = 0.0f;
    gate[GATE_FOUND] = 1.0f;  // e.g. a NaN loss
    fixture_backend->op.step_gate(fixture_backend, gate, 3, 1.0f, NULL, 0.0f);
    assert_true(gate[GATE_SKIP] == 1.0f);
    gate[GATE_FOUND] = 0.0f;
    gate[GATE_SQUARES + 0] = NAN;
    fixture_backend->op.step_gate(fixture_backend, gate, 3, 1.0f, NULL, 0.0f);
    assert_true(gate[GATE_SKIP] == 1.0f && gate[GATE_APPLIED] == 0.0f);
}

// A loss scaler's 1/scale joins the multiplier, and clipping sees the
// unscaled norm (clip_grad_norm_ after GradScaler.unscale_): gradients
// scaled by 1024 give the multiplier of the unscaled ones over 1024.
static void test_step_gate_unscales(void **state) {
    float gate[GATE_SQUARES + 2] = {0}, plain[GATE_SQUARES + 2] = {0};
    plain[GATE_SQUARES + 0] = 9.0f, plain[GATE_SQUARES + 1] = 16.0f;  // norm 5
    gate[GATE_SQUARES + 0] = 9.0f * 1024.0f * 1024.0f, gate[GATE_SQUARES + 1] = 16.0f * 1048576.0f;
    const float unscale = 1.0f / 1024.0f;
    for (int clip = 0; clip < 2; clip++) {
        const float max_norm = clip ? 1.0f : 0.0f;
        fixture_backend->op.step_gate(fixture_backend, plain, 2, 0.5f, NULL, max_norm);
        fixture_backend->op.step_gate(fixture_backend, gate, 2, 0.5f, &unscale, max_norm);
        assert_true(gate[GATE_MULTIPLIER] == plain[GATE_MULTIPLIER] / 1024.0f);  // exact
        assert_true(gate[GATE_SKIP] == 0.0f && gate[GATE_APPLIED] == 1.0f);
    }
    assert_true(plain[GATE_MULTIPLIER] == 0.5f * (1.0f / (2.5f + 1e-6f)));  // clipped
}

// scalar_combine: one float operation gives exactly what float arithmetic
// gives (double has over twice float's precision), the operation order of
// a longer expression is the caller's; NULL b leaves the term out (-0
// stays -0), y may alias an input, NaN propagates.
static void test_scalar_combine(void **state) {
    Backend *b = fixture_backend;
    const float x = 0.1f, z = 3.0f, huge = 3e38f;
    float y = 0.0f;
    const float sums[] = {7.0f, 0.3f, 1e-3f, 123456.7f};
    for (int i = 0; i < 4; i++) {
        for (int j = 0; j < 4; j++) {
            b->op.scalar_combine(b, 1.0f, &sums[i], 1.0f, &sums[j], 1.0f, &y);
            assert_true(y == sums[i] + sums[j]);
            b->op.scalar_combine(b, 1.0f, &sums[i], -1.0f, &sums[j], 1.0f, &y);
            assert_true(y == sums[i] - sums[j]);
        }
        b->op.scalar_combine(b, -1.0f, &sums[i], 0.0f, NULL, 37.0f, &y);
        assert_true(y == -sums[i] / 37.0f);
        b->op.scalar_combine(b, 0.7f, &sums[i], 0.0f, NULL, 1.0f, &y);
        assert_true(y == 0.7f * sums[i]);
    }
    // in double: (x / 3 and then + z) would round twice; one call rounds once
    b->op.scalar_combine(b, 1.0f, &x, 3.0f, &z, 1.0f, &y);
    assert_true(y == (float)((double)x + 3.0 * 3.0));
    const float negative_zero = -0.0f;
    b->op.scalar_combine(b, 1.0f, &negative_zero, 0.0f, NULL, 4.0f, &y);
    assert_true(y == 0.0f && signbit(y));
    y = 5.0f;
    b->op.scalar_combine(b, 1.0f, &y, 1.0f, &y, 1.0f, &y);  // y += y
    assert_true(y == 10.0f);
    b->op.scalar_combine(b, 1.0f, &huge, 1.0f, &huge, 1.0f, &y);
    assert_true(isinf(y));  // overflows float as the float sum would
    const float nan = NAN;
    b->op.scalar_combine(b, 1.0f, &x, 0.0f, &nan, 1.0f, &y);
    assert_true(isnan(y));  // 0 x NaN: the term is there
}

// Host slots of a host-memory backend: the copy is there at once; two
// slots keep two records apart.
static void test_host_slots(void **state) {
    Backend *b = fixture_backend;
    ErrorMessage err = {{0}};
    HostSlot *slots[2] = {b->op.host_slot_create(b, 3 * sizeof(float), &err),
                          b->op.host_slot_create(b, 3 * sizeof(float), &err)};
    assert_true(slots[0] && slots[1]);
    float record[3] = {1.0f, 2.0f, 3.0f};
    b->op.host_slot_fill(b, slots[0], record, sizeof record);
    record[1] = -2.0f;
    b->op.host_slot_fill(b, slots[1], record, sizeof record);
    const float *first = b->op.host_slot_wait(b, slots[0]);
    const float *second = b->op.host_slot_wait(b, slots[1]);
    assert_true(first[0] == 1.0f && first[1] == 2.0f && first[2] == 3.0f);
    assert_true(second[1] == -2.0f);
    b->op.host_slot_free(b, slots[0]);
    b->op.host_slot_free(b, slots[1]);
}

static void test_ema_update(void **state) {
    float target[3] = {1.0f, -2.0f, 0.5f};
    const float source[3] = {3.0f, 0.0f, 0.5f};
    fixture_backend->op.ema_update(fixture_backend, 3, target, source, 0.996f);
    // 0.996 t + 0.004 s, by hand; one or two float roundings of O(1) values.
    assert_float_equal(target[0], 1.008f, 1e-6);
    assert_float_equal(target[1], -1.992f, 1e-6);
    assert_float_equal(target[2], 0.5f, 1e-6);
}

static void test_normalize_u8(void **state) {
    const float mean[3] = {0.485f, 0.456f, 0.406f}, std[3] = {0.229f, 0.224f, 0.225f};
    const uint8_t pixels[4 * 3] = {0, 0, 0, 255, 255, 255, 128, 64, 32, 1, 200, 17};
    uint8_t *x = fixture_backend->op.alloc(fixture_backend, sizeof pixels);
    float *y = fixture_backend->op.alloc(fixture_backend, sizeof(float) * 12);
    fixture_backend->op.upload(fixture_backend, x, pixels, sizeof pixels);
    fixture_backend->op.normalize_u8(fixture_backend, 4, x, mean, std, (Act *)y);
    float want[12];
    for (int i = 0; i < 12; i++) want[i] = (float)((pixels[i] / 255.0 - mean[i % 3]) / std[i % 3]);
    // Three fp32 roundings of values up to ~2.6: 1e-6 relative.
    assert_int_equal(gradcheck_count_mismatches("normalize_u8", 12, y, want, 1e-6, 1e-6), 0);
    assert_float_equal(y[0], -0.485f / 0.229f, 1e-6);  // black, red channel: -2.1179
    fixture_backend->op.free(fixture_backend, x);
    fixture_backend->op.free(fixture_backend, y);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_momentum_and_weight_decay),
        cmocka_unit_test(test_sgd_nesterov),
        cmocka_unit_test(test_sgd_without_momentum),
        cmocka_unit_test(test_adamw_bias_correction),
        cmocka_unit_test(test_adamw_moments_in_pytorch_order),
        cmocka_unit_test(test_adamw_first_step_is_lr_sized),
        cmocka_unit_test(test_updates_scale_by_the_gate),
        cmocka_unit_test(test_skipped_updates_change_nothing),
        cmocka_unit_test(test_step_gate_rule),
        cmocka_unit_test(test_step_gate_unscales),
        cmocka_unit_test(test_scalar_combine),
        cmocka_unit_test(test_host_slots),
        cmocka_unit_test(test_ema_update),
        cmocka_unit_test(test_normalize_u8),
    };
    return cmocka_run_group_tests(tests, fixture_backend_create_ref, fixture_backend_destroy);
}
