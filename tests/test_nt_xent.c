// SimCLR's NT-Xent loss (src/ssl_methods/nt_xent.c): finite differences on the
// ref backend, lightly's NTXentLoss via tests/fixtures/nt_xent.safetensors
// (tools/make_loss_fixtures.py) on ref and cpu, cpu against ref on an awkward
// size, batch sizes changing between steps, a sanity check on the loss value
// and the argument checks. Both backends live in host memory, so fixture
// data is handed to ops directly.
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
#include "ssl_methods/nt_xent.h"

#define FIXTURE_PATH "tests/fixtures/nt_xent.safetensors"

static NtXent *make_loss(Backend *backend, int max_batch, int dim, float temperature) {
    ErrorMessage err = {{0}};
    NtXent *loss = nt_xent_create(backend, max_batch, dim, temperature, NULL, &err);
    if (!loss) fail_msg("nt_xent_create: %s", err.text);
    return loss;
}

// The loss forward writes into backend memory, read here.
static float loss_value(NtXent *loss, int batch, const float *out0, const float *out1) {
    float value = NAN;  // the ref and cpu backends' memory is host memory
    nt_xent_forward(loss, batch, out0, out1, &value);
    return value;
}

static float *random_buffer(size_t n, uint64_t seed) {
    float *x = malloc(n * sizeof(float));
    assert_non_null(x);
    gradcheck_fill_uniform(x, n, -1.0f, 1.0f, seed);
    return x;
}

// ---- finite differences ------------------------------------------------------------

typedef struct LossContext {
    NtXent *loss;
    int batch, dim;
} LossContext;

// x (2N, D) = [out0; out1]
static double loss_of(void *context, const float *x) {
    const LossContext *c = context;
    return loss_value(c->loss, c->batch, x, x + (size_t)c->batch * c->dim);
}

static void check_finite_differences(int batch, int dim, float temperature, uint64_t seed) {
    const size_t n = 2 * (size_t)batch * dim;
    float *x = random_buffer(n, seed);
    float *analytic = malloc(n * sizeof(float));
    assert_non_null(analytic);
    LossContext context = {make_loss(fixture_ref, batch, dim, temperature), batch, dim};
    loss_value(context.loss, batch, x, x + n / 2);
    nt_xent_backward(context.loss, 1.0f, analytic, analytic + n / 2);
    // The loss is evaluated in float32 (relative rounding ~1e-7 of a loss of
    // O(1)), so with h = 1e-3 the central difference carries ~1e-4 of noise
    // plus an h^2 truncation term that grows like 1 / t^3: atol 1e-3, rtol
    // 1e-2 leaves room for both while a wrong gradient is off by O(0.1).
    char label[64];
    snprintf(label, sizeof label, "nt_xent N=%d D=%d t=%g", batch, dim, (double)temperature);
    const GradcheckTolerance tolerance = {1e-3f, 1e-2, 1e-3};
    assert_int_equal(gradcheck_compare(label, loss_of, &context, x, n, analytic, tolerance), 0);
    nt_xent_destroy(context.loss);
    free(analytic);
    free(x);
}

static void test_backward_matches_finite_differences(void **state) {
    check_finite_differences(3, 5, 0.5f, 11);
    check_finite_differences(4, 6, 0.1f, 12);
    check_finite_differences(2, 3, 1.0f, 13);
}

// ---- against lightly's NTXentLoss (PyTorch) --------------------------------------------

static const struct {
    const char *name;
    int batch, dim;
} fixture_cases[] = {
    {"n1_d8_t0.1", 1, 8}, {"n2_d5_t0.1", 2, 5}, {"n8_d16_t0.1", 8, 16},
    {"n6_d33_t0.5", 6, 33}, {"n24_d40_t0.07", 24, 40},
};

static void check_fixture_case(Backend *backend, const SafeTensors *file, int c) {
    const char *name = fixture_cases[c].name;
    const int batch = fixture_cases[c].batch, dim = fixture_cases[c].dim;
    const size_t n = (size_t)batch * dim;
    char key[128], label[160];
    snprintf(key, sizeof key, "%s/temperature", name);
    float temperature;
    memcpy(&temperature, safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32, 1)),
           sizeof temperature);
    // out0, out1 (N, D); grads; [0] and [1] per view
    float *out[2], *grad[2];
    double *truth[2];
    for (int v = 0; v < 2; v++) {
        out[v] = backend->op.alloc(backend, n * sizeof(float));
        grad[v] = backend->op.alloc(backend, n * sizeof(float));
        truth[v] = malloc(n * sizeof(double));
        assert_true(out[v] && grad[v] && truth[v]);
        snprintf(key, sizeof key, "%s/out%d", name, v);
        const SafeTensor *input = fixture_find_tensor(file, key, SAFE_F32, (int64_t)n);
        backend->op.upload(backend, out[v], safetensors_data(file, input), n * sizeof(float));
        snprintf(key, sizeof key, "%s/grad%d", name, v);
        memcpy(truth[v], safetensors_data(file, fixture_find_tensor(file, key, SAFE_F64, (int64_t)n)),
               n * sizeof(double));
    }
    // max_batch above the batch: the loss must not depend on the capacity
    NtXent *loss = make_loss(backend, batch + 3, dim, temperature);
    const float value = loss_value(loss, batch, out[0], out[1]);
    nt_xent_backward(loss, 1.0f, grad[0], grad[1]);

    snprintf(key, sizeof key, "%s/loss", name);
    const double loss_truth = fixture_read_f64(file, key);
    snprintf(key, sizeof key, "f32err/%s/loss", name);
    snprintf(label, sizeof label, "%s %s loss", backend->name, name);
    assert_int_equal(gradcheck_count_outside_truth(label, 1, &value, &loss_truth, fixture_read_f64(file, key)), 0);
    for (int v = 0; v < 2; v++) {
        snprintf(key, sizeof key, "f32err/%s/grad%d", name, v);
        snprintf(label, sizeof label, "%s %s grad%d", backend->name, name, v);
        assert_int_equal(gradcheck_count_outside_truth(label, n, grad[v], truth[v], fixture_read_f64(file, key)), 0);
        backend->op.free(backend, out[v]);
        backend->op.free(backend, grad[v]);
        free(truth[v]);
    }
    nt_xent_destroy(loss);
}

static void test_matches_pytorch(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE_PATH, &file, &err) != 0) fail_msg("%s", err.text);
    for (int c = 0; c < (int)(sizeof fixture_cases / sizeof fixture_cases[0]); c++) {
        check_fixture_case(fixture_ref, &file, c);
        check_fixture_case(fixture_cpu, &file, c);
    }
    safetensors_free(&file);
}

// ---- cpu against ref, changing batch sizes ------------------------------------------

typedef struct LossResult {
    float value;
    float *grad;  // (2N, D) [dout0; dout1], malloc'ed
} LossResult;

static LossResult run_loss(NtXent *loss, int batch, int dim, const float *x, float dloss) {
    const size_t n = 2 * (size_t)batch * dim;
    LossResult result = {0.0f, malloc(n * sizeof(float))};
    assert_non_null(result.grad);
    result.value = loss_value(loss, batch, x, x + n / 2);
    nt_xent_backward(loss, dloss, result.grad, result.grad + n / 2);
    return result;
}

static void test_cpu_matches_ref(void **state) {
    // 2N = 74 rows and D = 70: neither a multiple of a SIMD width
    const int batch = 37, dim = 70;
    const size_t n = 2 * (size_t)batch * dim;
    float *x = random_buffer(n, 21);
    NtXent *on_ref = make_loss(fixture_ref, batch, dim, 0.1f);
    NtXent *on_cpu = make_loss(fixture_cpu, batch, dim, 0.1f);
    LossResult expected = run_loss(on_ref, batch, dim, x, 0.5f);
    LossResult actual = run_loss(on_cpu, batch, dim, x, 0.5f);
    // Same formula, different summation order in gemm / softmax: a few
    // float32 ulps of the loss (~4) and of the gradient's scale.
    assert_true(fabsf(actual.value - expected.value) <= 1e-5f + 1e-5f * fabsf(expected.value));
    float scale = 0.0f;
    for (size_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(expected.grad[i]));
    assert_int_equal(gradcheck_count_mismatches("cpu vs ref grad", n, actual.grad, expected.grad,
                                                1e-4, 1e-5 * scale),
                     0);
    free(expected.grad);
    free(actual.grad);
    nt_xent_destroy(on_ref);
    nt_xent_destroy(on_cpu);
    free(x);
}

static void test_changing_batch_matches_fresh_object(void **state) {
    // One object used for batches 8, 3, 8 (e.g. a smaller last batch) gives
    // what a fresh object sized for each batch gives: the masks follow the
    // batch size. Bit-identical: the same ops on the same data.
    const int dim = 9, sizes[] = {8, 3, 8};
    NtXent *shared = make_loss(fixture_cpu, 8, dim, 0.2f);
    for (int s = 0; s < 3; s++) {
        const int batch = sizes[s];
        const size_t n = 2 * (size_t)batch * dim;
        float *x = random_buffer(n, 31 + s);
        NtXent *fresh = make_loss(fixture_cpu, batch, dim, 0.2f);
        LossResult expected = run_loss(fresh, batch, dim, x, 1.0f);
        LossResult actual = run_loss(shared, batch, dim, x, 1.0f);
        assert_true(actual.value == expected.value);
        assert_memory_equal(actual.grad, expected.grad, n * sizeof(float));
        free(expected.grad);
        free(actual.grad);
        nt_xent_destroy(fresh);
        free(x);
    }
    nt_xent_destroy(shared);
}

// ---- sanity -----------------------------------------------------------------------------

static void test_aligned_views_give_lower_loss(void **state) {
    const int batch = 16, dim = 32;
    const size_t half = (size_t)batch * dim;
    float *x = random_buffer(2 * half, 41);
    NtXent *loss = make_loss(fixture_cpu, batch, dim, 0.1f);
    const float random_loss = loss_value(loss, batch, x, x + half);
    // out1 = 3 out0: the same direction, so each positive has cosine 1
    for (size_t i = 0; i < half; i++) x[half + i] = 3.0f * x[i];
    const float aligned_loss = loss_value(loss, batch, x, x + half);
    // Random views: every logit is about equal, loss near log(2N - 1) = 3.4.
    assert_true(random_loss > 2.0f && random_loss < 5.0f);
    assert_true(aligned_loss < 0.5f * random_loss);
    nt_xent_destroy(loss);
    free(x);
}

static void test_rejects_bad_arguments(void **state) {
    ErrorMessage err = {{0}};
    assert_null(nt_xent_create(fixture_ref, 0, 8, 0.1f, NULL, &err));
    assert_non_null(strstr(err.text, "positive"));
    assert_null(nt_xent_create(fixture_ref, 4, 8, 0.0f, NULL, &err));
    assert_non_null(strstr(err.text, "temperature"));
    NtXent *loss = make_loss(fixture_ref, 4, 8, 0.1f);
    float x[2 * 5 * 8] = {0};
    assert_true(isnan(loss_value(loss, 5, x, x + 40)));  // above max_batch
    assert_true(isnan(loss_value(loss, 0, x, x + 40)));
    nt_xent_destroy(loss);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_changing_batch_matches_fresh_object),
        cmocka_unit_test(test_aligned_views_give_lower_loss),
        cmocka_unit_test(test_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, fixture_backends_create, fixture_backends_destroy);
}
