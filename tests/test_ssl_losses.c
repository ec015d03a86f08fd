// BYOL, VICReg and Barlow Twins losses (src/ssl_methods/byol_loss.c,
// vicreg_loss.c, barlow_twins_loss.c): finite differences on the ref backend,
// lightly / PyTorch references via tests/fixtures/{byol,vicreg,barlow_twins}
// _loss.safetensors (tools/make_loss_fixtures.py) on ref and cpu, cpu against
// ref on an awkward size, sanity checks on the values and the argument
// checks. The three losses are driven through one small adapter table.
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
#include "backend_fixture.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "nn/safetensors.h"
#include "ssl_methods/barlow_twins_loss.h"
#include "ssl_methods/byol_loss.h"
#include "ssl_methods/vicreg_loss.h"

// ---- one interface over the three losses ----------------------------------------------
// Inputs x (inputs, N, D) contiguous: BYOL p0, p1, z0, z1; the others out0,
// out1. Gradients (2, N, D) for the first two inputs. The losses write into
// backend memory; on the ref and cpu backends that is host memory, so a
// local float receives it.

static void *byol_make(Backend *b, int max_batch, int dim, ErrorMessage *err) {
    return byol_loss_create(b, max_batch, dim, err);
}
static float byol_run(void *loss, int batch, const float *x, size_t n) {
    float value = NAN;
    byol_loss_forward(loss, batch, x, x + n, x + 2 * n, x + 3 * n, &value);
    return value;
}
static void byol_grad(void *loss, float dloss, float *g0, float *g1) {
    byol_loss_backward(loss, dloss, g0, g1);
}
static void byol_free(void *loss) { byol_loss_destroy(loss); }

static void *vicreg_make(Backend *b, int max_batch, int dim, ErrorMessage *err) {
    return vicreg_loss_create(b, max_batch, dim, VICREG_LOSS_DEFAULT_LAMBDA, VICREG_LOSS_DEFAULT_MU,
                              VICREG_LOSS_DEFAULT_NU, VICREG_LOSS_DEFAULT_EPS, err);
}
static float vicreg_run(void *loss, int batch, const float *x, size_t n) {
    float value = NAN;
    vicreg_loss_forward(loss, batch, x, x + n, &value);
    return value;
}
static void vicreg_grad(void *loss, float dloss, float *g0, float *g1) {
    vicreg_loss_backward(loss, dloss, g0, g1);
}
static void vicreg_free(void *loss) { vicreg_loss_destroy(loss); }

static void *barlow_make(Backend *b, int max_batch, int dim, ErrorMessage *err) {
    return barlow_twins_loss_create(b, max_batch, dim, BARLOW_TWINS_LOSS_DEFAULT_LAMBDA, err);
}
static float barlow_run(void *loss, int batch, const float *x, size_t n) {
    float value = NAN;
    barlow_twins_loss_forward(loss, batch, x, x + n, &value);
    return value;
}
static void barlow_grad(void *loss, float dloss, float *g0, float *g1) {
    barlow_twins_loss_backward(loss, dloss, g0, g1);
}
static void barlow_free(void *loss) { barlow_twins_loss_destroy(loss); }

typedef struct LossKind {
    const char *name, *fixture;
    int inputs;
    const char *input_names[4], *grad_names[2];
    void *(*make)(Backend *backend, int max_batch, int dim, ErrorMessage *err);
    float (*forward)(void *loss, int batch, const float *x, size_t view_elements);
    void (*backward)(void *loss, float dloss, float *grad0, float *grad1);
    void (*destroy)(void *loss);
    GradcheckTolerance finite_differences;
} LossKind;

// Finite-difference tolerances, |analytic - numeric| <= atol + rtol |numeric|:
// BYOL's loss is O(1), so float32 rounding (~1e-7) over 2h = 2e-3 is ~1e-4
// of noise. VICReg's is O(100) (lambda = mu = 25), ~1e-5 of rounding: h =
// 1e-2 keeps the noise near 1e-3 and its gradients are O(1), so atol 1e-2.
// Barlow Twins' is O(1..10) behind a batch norm: h = 3e-3, atol 3e-3. A
// wrong term is off by O(0.1) or more relative.
static const LossKind kinds[] = {
    {"byol", "tests/fixtures/byol_loss.safetensors", 4, {"p0", "p1", "z0", "z1"},
     {"grad_p0", "grad_p1"}, byol_make, byol_run, byol_grad, byol_free, {1e-3f, 1e-2, 1e-3}},
    {"vicreg", "tests/fixtures/vicreg_loss.safetensors", 2, {"out0", "out1"},
     {"grad0", "grad1"}, vicreg_make, vicreg_run, vicreg_grad, vicreg_free, {1e-2f, 1e-2, 1e-2}},
    {"barlow_twins", "tests/fixtures/barlow_twins_loss.safetensors", 2, {"out0", "out1"},
     {"grad0", "grad1"}, barlow_make, barlow_run, barlow_grad, barlow_free, {3e-3f, 1e-2, 3e-3}},
};
#define KIND_COUNT ((int)(sizeof kinds / sizeof kinds[0]))

static void *make_loss(const LossKind *kind, Backend *backend, int max_batch, int dim) {
    ErrorMessage err = {{0}};
    void *loss = kind->make(backend, max_batch, dim, &err);
    if (!loss) fail_msg("%s create: %s", kind->name, err.text);
    return loss;
}

static float *random_buffer(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof(float));
    assert_non_null(x);
    gradcheck_fill_uniform(x, n, -1.0f, 1.0f, seed);
    return x;
}

// Random inputs whose feature j is scaled by 0.5 .. 2.5 (VICReg's hinge both
// active and not) and whose second view is the first plus noise.
static float *random_views(const LossKind *kind, int batch, int dim, uint64_t seed) {
    const size_t n = (size_t)batch * dim;
    float *x = random_buffer(kind->inputs * n, seed);
    for (int k = 0; k < kind->inputs; k++)
        for (size_t i = 0; i < n; i++)
            x[k * n + i] *= 0.5f + 2.0f * (float)(i % dim) / (float)dim;
    for (size_t i = 0; i < n; i++) x[n + i] = x[i] + 0.7f * x[n + i];
    return x;
}

// ---- finite differences ----------------------------------------------------------------

typedef struct LossContext {
    const LossKind *kind;
    void *loss;
    int batch, dim;
    float *inputs;  // (inputs, N, D): the first two are the ones perturbed
} LossContext;

static double loss_of(void *context, const float *x) {
    LossContext *c = context;
    const size_t n = (size_t)c->batch * c->dim;
    memcpy(c->inputs, x, 2 * n * sizeof(float));
    return c->kind->forward(c->loss, c->batch, c->inputs, n);
}

static void check_finite_differences(const LossKind *kind, int batch, int dim, uint64_t seed) {
    const size_t n = (size_t)batch * dim;
    float *inputs = random_views(kind, batch, dim, seed);
    float *x = malloc(2 * n * sizeof(float));
    float *analytic = malloc(2 * n * sizeof(float));
    assert_true(x && analytic);
    memcpy(x, inputs, 2 * n * sizeof(float));
    LossContext context = {kind, make_loss(kind, fixture_ref, batch, dim), batch, dim, inputs};
    kind->forward(context.loss, batch, inputs, n);
    kind->backward(context.loss, 1.0f, analytic, analytic + n);
    char label[64];
    snprintf(label, sizeof label, "%s N=%d D=%d", kind->name, batch, dim);
    assert_int_equal(
        gradcheck_compare(label, loss_of, &context, x, 2 * n, analytic, kind->finite_differences),
        0);
    kind->destroy(context.loss);
    free(analytic);
    free(x);
    free(inputs);
}

static void test_backward_matches_finite_differences(void **state) {
    for (int k = 0; k < KIND_COUNT; k++) {
        check_finite_differences(&kinds[k], 3, 5, 11);
        check_finite_differences(&kinds[k], 6, 4, 12);
        check_finite_differences(&kinds[k], 2, 3, 13);
    }
}

// ---- against lightly / PyTorch -------------------------------------------------------------

static const struct {
    const char *name;
    int batch, dim;
} fixture_cases[] = {{"n2_d5", 2, 5}, {"n7_d16", 7, 16}, {"n16_d33", 16, 33}, {"n24_d40", 24, 40}};

static void check_fixture_case(const LossKind *kind, Backend *backend, const SafeTensors *file,
                               int c) {
    const char *name = fixture_cases[c].name;
    const int batch = fixture_cases[c].batch, dim = fixture_cases[c].dim;
    const size_t n = (size_t)batch * dim;
    char key[128], label[160];
    float *x = backend->op.alloc(backend, kind->inputs * n * sizeof(float));
    float *grad = backend->op.alloc(backend, 2 * n * sizeof(float));
    double *truth = malloc(2 * n * sizeof(double));
    assert_true(x && grad && truth);
    for (int k = 0; k < kind->inputs; k++) {
        snprintf(key, sizeof key, "%s/%s", name, kind->input_names[k]);
        const SafeTensor *input = fixture_find_tensor(file, key, SAFE_F32, (int64_t)n);
        backend->op.upload(backend, x + k * n, safetensors_data(file, input), n * sizeof(float));
    }
    for (int v = 0; v < 2; v++) {
        snprintf(key, sizeof key, "%s/%s", name, kind->grad_names[v]);
        memcpy(truth + v * n,
               safetensors_data(file, fixture_find_tensor(file, key, SAFE_F64, (int64_t)n)),
               n * sizeof(double));
    }
    // max_batch above the batch: the loss must not depend on the capacity
    void *loss = make_loss(kind, backend, batch + 3, dim);
    const float value = kind->forward(loss, batch, x, n);
    kind->backward(loss, 1.0f, grad, grad + n);

    snprintf(key, sizeof key, "%s/loss", name);
    const double loss_truth = fixture_read_f64(file, key);
    snprintf(key, sizeof key, "f32err/%s/loss", name);
    snprintf(label, sizeof label, "%s %s %s loss", kind->name, backend->name, name);
    assert_int_equal(gradcheck_count_outside_truth(label, 1, &value, &loss_truth, fixture_read_f64(file, key)),
                     0);
    for (int v = 0; v < 2; v++) {
        snprintf(key, sizeof key, "f32err/%s/%s", name, kind->grad_names[v]);
        snprintf(label, sizeof label, "%s %s %s %s", kind->name, backend->name, name,
                 kind->grad_names[v]);
        assert_int_equal(gradcheck_count_outside_truth(label, n, grad + v * n, truth + v * n,
                                       fixture_read_f64(file, key)),
                         0);
    }
    kind->destroy(loss);
    backend->op.free(backend, x);
    backend->op.free(backend, grad);
    free(truth);
}

static void test_matches_pytorch(void **state) {
    for (int k = 0; k < KIND_COUNT; k++) {
        SafeTensors file;
        ErrorMessage err = {{0}};
        if (safetensors_read(kinds[k].fixture, &file, &err) != 0) fail_msg("%s", err.text);
        for (int c = 0; c < (int)(sizeof fixture_cases / sizeof fixture_cases[0]); c++) {
            check_fixture_case(&kinds[k], fixture_ref, &file, c);
            check_fixture_case(&kinds[k], fixture_cpu, &file, c);
        }
        safetensors_free(&file);
    }
}

// ---- cpu against ref -------------------------------------------------------------------

static float run_loss(const LossKind *kind, Backend *backend, int batch, int dim, const float *x,
                      float *grad) {
    void *loss = make_loss(kind, backend, batch, dim);
    const size_t n = (size_t)batch * dim;
    const float value = kind->forward(loss, batch, x, n);
    kind->backward(loss, 0.5f, grad, grad + n);
    kind->destroy(loss);
    return value;
}

static void test_cpu_matches_ref(void **state) {
    // N = 37 and D = 70: neither a multiple of a SIMD width
    const int batch = 37, dim = 70;
    const size_t n = (size_t)batch * dim;
    for (int k = 0; k < KIND_COUNT; k++) {
        const LossKind *kind = &kinds[k];
        float *x = random_views(kind, batch, dim, 21 + k);
        float *expected = malloc(2 * n * sizeof(float)), *actual = malloc(2 * n * sizeof(float));
        assert_true(expected && actual);
        const float expected_value = run_loss(kind, fixture_ref, batch, dim, x, expected);
        const float actual_value = run_loss(kind, fixture_cpu, batch, dim, x, actual);
        // Same formula, different summation order in gemm and the reductions:
        // a few float32 ulps of the loss, and of the gradient's scale.
        assert_true(fabsf(actual_value - expected_value) <= 1e-5f * (1.0f + fabsf(expected_value)));
        float scale = 0.0f;
        for (size_t i = 0; i < 2 * n; i++) scale = fmaxf(scale, fabsf(expected[i]));
        char label[64];
        snprintf(label, sizeof label, "%s cpu vs ref grad", kind->name);
        assert_int_equal(
            gradcheck_count_mismatches(label, 2 * n, actual, expected, 1e-4, 1e-5 * scale), 0);
        free(expected);
        free(actual);
        free(x);
    }
}

// ---- sanity -----------------------------------------------------------------------------

static void test_known_values(void **state) {
    const int batch = 8, dim = 16;
    const size_t n = (size_t)batch * dim;
    float *x = random_buffer(4 * n, 41);
    // BYOL: predictions 3 x the other view's targets: cosine 1, loss 0;
    // opposite directions: cosine -1, each term 4, loss 8.
    for (size_t i = 0; i < n; i++) {
        x[i] = 3.0f * x[3 * n + i];
        x[n + i] = 3.0f * x[2 * n + i];
    }
    void *byol = make_loss(&kinds[0], fixture_cpu, batch, dim);
    // 1e-5: float32 rounding of 1 - cos summed over the batch
    assert_true(fabsf(kinds[0].forward(byol, batch, x, n)) <= 1e-5f);
    for (size_t i = 0; i < 2 * n; i++) x[i] = -x[i];
    assert_true(fabsf(kinds[0].forward(byol, batch, x, n) - 8.0f) <= 1e-5f);
    kinds[0].destroy(byol);
    // Barlow Twins: identical views give c = the correlation matrix, so its
    // diagonal is var / (var + 1e-5) ~ 1 and the invariance term vanishes:
    // only lambda times the off-diagonal correlations remain (small).
    memcpy(x + n, x, n * sizeof(float));
    void *barlow = make_loss(&kinds[2], fixture_cpu, batch, dim);
    const float same = kinds[2].forward(barlow, batch, x, n);
    assert_true(same > 0.0f && same < BARLOW_TWINS_LOSS_DEFAULT_LAMBDA * dim * dim);
    kinds[2].destroy(barlow);
    // VICReg: features with std 10 (hinge inactive) and identical views:
    // only the covariance term is left, so halving every covariance
    // (scaling by 1/sqrt(2), std still above 1) quarters the loss.
    for (size_t i = 0; i < n; i++) x[i] = x[n + i] = 17.0f * x[2 * n + i];
    void *vicreg = make_loss(&kinds[1], fixture_cpu, batch, dim);
    const float full = kinds[1].forward(vicreg, batch, x, n);
    for (size_t i = 0; i < 2 * n; i++) x[i] *= (float)M_SQRT1_2;
    const float quarter = kinds[1].forward(vicreg, batch, x, n);
    assert_true(full > 0.0f && fabsf(quarter - 0.25f * full) <= 1e-4f * full);  // float32 rounding
    kinds[1].destroy(vicreg);
    free(x);
}

static void test_rejects_bad_arguments(void **state) {
    ErrorMessage err = {{0}};
    assert_null(byol_loss_create(fixture_ref, 0, 8, &err));
    assert_non_null(strstr(err.text, "positive"));
    assert_null(vicreg_loss_create(fixture_ref, 1, 8, 25.0f, 25.0f, 1.0f, 1e-4f, &err));
    assert_non_null(strstr(err.text, "at least 2"));
    assert_null(vicreg_loss_create(fixture_ref, 4, 8, 25.0f, 25.0f, 1.0f, 0.0f, &err));
    assert_non_null(strstr(err.text, "eps"));
    assert_null(barlow_twins_loss_create(fixture_ref, 1, 8, 5e-3f, &err));
    assert_non_null(strstr(err.text, "at least 2"));
    float x[4 * 5 * 8] = {0};
    for (int k = 0; k < KIND_COUNT; k++) {
        void *loss = make_loss(&kinds[k], fixture_ref, 4, 8);
        assert_true(isnan(kinds[k].forward(loss, 5, x, 40)));  // above max_batch
        assert_true(isnan(kinds[k].forward(loss, 0, x, 40)));
        kinds[k].destroy(loss);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_known_values),
        cmocka_unit_test(test_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, fixture_backends_create, fixture_backends_destroy);
}
