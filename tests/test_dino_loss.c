// DINO's loss (src/ssl_methods/dino_loss.c): finite differences on the ref
// backend (w.r.t. the student outputs, with a non-zero center), lightly's
// DINOLoss via tests/fixtures/dino_loss.safetensors
// (tools/make_dino_fixtures.py) on ref and cpu over two steps with the center
// update between them, cpu against ref on an awkward size, a sanity check on
// the loss value and the argument checks. Both backends live in host memory,
// so fixture data is handed to ops directly.
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
#include "ssl_methods/dino_loss.h"

#define FIXTURE_PATH "tests/fixtures/dino_loss.safetensors"
#define MAX_VIEWS 8

typedef struct DinoShape {
    int batch, dim, global_views, total_views;
    float student_temp, center_momentum;
} DinoShape;

static DinoLoss *make_loss(Backend *backend, int max_batch, DinoShape shape) {
    ErrorMessage err = {{0}};
    DinoLoss *loss = dino_loss_create(backend, max_batch, shape.dim, shape.global_views,
                                      shape.total_views, shape.student_temp,
                                      shape.center_momentum, NULL, &err);
    if (!loss) fail_msg("dino_loss_create: %s", err.text);
    return loss;
}

static float *random_buffer(size_t n, float low, float high, uint64_t seed) {
    float *x = malloc(n * sizeof(float));
    assert_non_null(x);
    gradcheck_fill_uniform(x, n, low, high, seed);
    return x;
}

// views[v] = x + v * N * K for v < count: the per-view pointers into one stacked buffer
static void split_views(const float *x, int count, size_t view, const float **views) {
    for (int v = 0; v < count; v++) views[v] = x + v * view;
}

static float forward_stacked(DinoLoss *loss, DinoShape shape, const float *teacher,
                             const float *student, float teacher_temp) {
    const size_t view = (size_t)shape.batch * shape.dim;
    const float *teacher_views[MAX_VIEWS], *student_views[MAX_VIEWS];
    split_views(teacher, shape.global_views, view, teacher_views);
    split_views(student, shape.total_views, view, student_views);
    float value = NAN;  // backend memory: host memory on ref and cpu
    dino_loss_forward(loss, shape.batch, teacher_views, student_views, teacher_temp, &value);
    return value;
}

static float forward_value(DinoLoss *loss, int batch, const float *const *teacher,
                           const float *const *student, float teacher_temp) {
    float value = 0.0f;
    dino_loss_forward(loss, batch, teacher, student, teacher_temp, &value);
    return value;
}

static void backward_stacked(DinoLoss *loss, DinoShape shape, float dloss, float *dstudent) {
    const size_t view = (size_t)shape.batch * shape.dim;
    float *dviews[MAX_VIEWS];
    for (int v = 0; v < shape.total_views; v++) dviews[v] = dstudent + v * view;
    dino_loss_backward(loss, dloss, dviews);
}

// ---- finite differences ------------------------------------------------------------

typedef struct LossContext {
    DinoLoss *loss;
    DinoShape shape;
    const float *teacher;  // (G, N, K)
    float teacher_temp;
} LossContext;

// x (V, N, K) = the student outputs
static double loss_of(void *context, const float *x) {
    const LossContext *c = context;
    return forward_stacked(c->loss, c->shape, c->teacher, x, c->teacher_temp);
}

static void check_finite_differences(DinoShape shape, float teacher_temp, uint64_t seed) {
    const size_t view = (size_t)shape.batch * shape.dim;
    const size_t n = shape.total_views * view;
    float *student = random_buffer(n, -1.0f, 1.0f, seed);
    float *teacher = random_buffer(shape.global_views * view, -1.0f, 1.0f, seed + 100);
    float *earlier = random_buffer(shape.global_views * view, 0.0f, 2.0f, seed + 200);
    float *analytic = malloc(n * sizeof(float));
    assert_non_null(analytic);
    LossContext context = {make_loss(fixture_ref, shape.batch, shape), shape, teacher, teacher_temp};
    // One earlier step moves the center away from 0 (mean ~1 of `earlier`)
    forward_stacked(context.loss, shape, earlier, student, teacher_temp);
    dino_loss_update_center(context.loss);
    forward_stacked(context.loss, shape, teacher, student, teacher_temp);
    backward_stacked(context.loss, shape, 1.0f, analytic);
    // The loss (O(10)) is evaluated in float32, ~1e-6 absolute rounding, so
    // with h = 1e-3 the central difference carries ~1e-3 of noise; the h^2
    // truncation term grows like 1 / student_temp^3 (~2e-4 at 0.1). atol
    // 2e-3, rtol 1e-2 leave room for both while a wrong gradient (e.g. a
    // missing or extra pair) is off by O(0.1) of gradients of O(1).
    char label[96];
    snprintf(label, sizeof label, "dino N=%d K=%d G=%d V=%d st=%g", shape.batch, shape.dim,
             shape.global_views, shape.total_views, (double)shape.student_temp);
    const GradcheckTolerance tolerance = {1e-3f, 1e-2, 2e-3};
    assert_int_equal(gradcheck_compare(label, loss_of, &context, student, n, analytic, tolerance),
                     0);
    dino_loss_destroy(context.loss);
    free(analytic);
    free(earlier);
    free(teacher);
    free(student);
}

static void test_backward_matches_finite_differences(void **state) {
    check_finite_differences((DinoShape){3, 7, 2, 4, 0.1f, 0.9f}, 0.04f, 11);
    check_finite_differences((DinoShape){2, 5, 1, 3, 0.3f, 0.5f}, 0.07f, 12);
    check_finite_differences((DinoShape){1, 6, 2, 2, 0.2f, 0.9f}, 0.1f, 13);
}

// ---- against lightly's DINOLoss (PyTorch) --------------------------------------------

// Compares ours (n) with the F64 tensor `key` within its f32err/`key`.
static void check_against(const SafeTensors *file, const char *backend_name, const char *key,
                          size_t n, const float *ours) {
    char error_key[160], label[192];
    snprintf(error_key, sizeof error_key, "f32err/%s", key);
    snprintf(label, sizeof label, "%s %s", backend_name, key);
    const double *truth = safetensors_data(file, fixture_find_tensor(file, key, SAFE_F64, (int64_t)n));
    double *aligned = malloc(n * sizeof(double));  // the file gives no alignment promise per tensor
    assert_non_null(aligned);
    memcpy(aligned, truth, n * sizeof(double));
    assert_int_equal(gradcheck_count_outside_truth(label, n, ours, aligned, fixture_read_f64(file, error_key)), 0);
    free(aligned);
}

static const char *const fixture_cases[] = {
    "n1_k8_g2_v2", "n3_k17_g2_v4", "n8_k64_g2_v6", "n5_k33_g1_v3",
};

static void check_fixture_case(Backend *backend, const SafeTensors *file, const char *name) {
    char key[128];
    snprintf(key, sizeof key, "%s/config", name);
    float config[6];
    memcpy(config, safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32, 6)), sizeof config);
    const DinoShape shape = {(int)config[0], (int)config[1], (int)config[2], (int)config[3],
                             config[4], config[5]};
    assert_true(shape.total_views <= MAX_VIEWS);
    const size_t view = (size_t)shape.batch * shape.dim;
    float *teacher = backend->op.alloc(backend, shape.global_views * view * sizeof(float));
    float *student = backend->op.alloc(backend, shape.total_views * view * sizeof(float));
    float *grad = backend->op.alloc(backend, shape.total_views * view * sizeof(float));
    float *center = malloc(shape.dim * sizeof(float));
    assert_true(teacher && student && grad && center);
    // max_batch above the batch: the loss must not depend on the capacity
    DinoLoss *loss = make_loss(backend, shape.batch + 3, shape);
    for (int step = 1; step <= 2; step++) {
        for (int g = 0; g < shape.global_views; g++) {
            snprintf(key, sizeof key, "%s/%d/teacher%d", name, step, g);
            backend->op.upload(backend, teacher + g * view,
                               safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32,
                                                                  (int64_t)view)),
                               view * sizeof(float));
        }
        for (int v = 0; v < shape.total_views; v++) {
            snprintf(key, sizeof key, "%s/%d/student%d", name, step, v);
            backend->op.upload(backend, student + v * view,
                               safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32,
                                                                  (int64_t)view)),
                               view * sizeof(float));
        }
        snprintf(key, sizeof key, "%s/%d/teacher_temp", name, step);
        const float teacher_temp = fixture_read_f32(file, key);
        const float value = forward_stacked(loss, shape, teacher, student, teacher_temp);
        backward_stacked(loss, shape, 1.0f, grad);
        dino_loss_update_center(loss);
        backend->op.download(backend, center, dino_loss_center(loss), shape.dim * sizeof(float));

        snprintf(key, sizeof key, "%s/%d/loss", name, step);
        check_against(file, backend->name, key, 1, &value);
        for (int v = 0; v < shape.total_views; v++) {
            snprintf(key, sizeof key, "%s/%d/grad%d", name, step, v);
            check_against(file, backend->name, key, view, grad + v * view);
        }
        snprintf(key, sizeof key, "%s/%d/center", name, step);
        check_against(file, backend->name, key, shape.dim, center);
    }
    dino_loss_destroy(loss);
    backend->op.free(backend, teacher);
    backend->op.free(backend, student);
    backend->op.free(backend, grad);
    free(center);
}

static void test_matches_pytorch(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE_PATH, &file, &err) != 0) fail_msg("%s", err.text);
    for (size_t c = 0; c < sizeof fixture_cases / sizeof fixture_cases[0]; c++) {
        check_fixture_case(fixture_ref, &file, fixture_cases[c]);
        check_fixture_case(fixture_cpu, &file, fixture_cases[c]);
    }
    safetensors_free(&file);
}

// ---- cpu against ref -----------------------------------------------------------------

typedef struct StepResult {
    float value;
    float *grad;    // (V, N, K), malloc'ed
    float *center;  // (K) after the update, malloc'ed
} StepResult;

static StepResult run_step(DinoLoss *loss, DinoShape shape, const float *teacher,
                           const float *student, float teacher_temp, float dloss) {
    const size_t n = (size_t)shape.total_views * shape.batch * shape.dim;
    StepResult result = {0.0f, malloc(n * sizeof(float)), malloc(shape.dim * sizeof(float))};
    assert_true(result.grad && result.center);
    result.value = forward_stacked(loss, shape, teacher, student, teacher_temp);
    backward_stacked(loss, shape, dloss, result.grad);
    dino_loss_update_center(loss);
    memcpy(result.center, dino_loss_center(loss), shape.dim * sizeof(float));
    return result;
}

static void free_step(StepResult *result) {
    free(result->grad);
    free(result->center);
}

static void test_cpu_matches_ref(void **state) {
    // N = 13, K = 1001: neither a multiple of a SIMD width; multi-crop views
    const DinoShape shape = {13, 1001, 2, 6, 0.1f, 0.9f};
    const size_t view = (size_t)shape.batch * shape.dim;
    const size_t n = shape.total_views * view;
    float *student = random_buffer(n, -2.0f, 2.0f, 21);
    float *teacher = random_buffer(shape.global_views * view, -1.0f, 3.0f, 22);
    DinoLoss *on_ref = make_loss(fixture_ref, shape.batch, shape);
    DinoLoss *on_cpu = make_loss(fixture_cpu, shape.batch, shape);
    // Two steps: the second uses the center the first one updated
    for (int step = 0; step < 2; step++) {
        StepResult expected = run_step(on_ref, shape, teacher, student, 0.04f, 0.5f);
        StepResult actual = run_step(on_cpu, shape, teacher, student, 0.04f, 0.5f);
        // Same formula, different summation order in softmax / dot /
        // column_sum: a few float32 ulps of the loss and of each scale.
        assert_true(fabsf(actual.value - expected.value) <=
                    1e-5f + 1e-5f * fabsf(expected.value));
        float scale = 0.0f;
        for (size_t i = 0; i < n; i++) scale = fmaxf(scale, fabsf(expected.grad[i]));
        assert_int_equal(gradcheck_count_mismatches("cpu vs ref grad", n, actual.grad,
                                                    expected.grad, 1e-4, 1e-5 * scale),
                         0);
        assert_int_equal(gradcheck_count_mismatches("cpu vs ref center", shape.dim,
                                                    actual.center, expected.center, 1e-5, 1e-6),
                         0);
        free_step(&expected);
        free_step(&actual);
        for (size_t i = 0; i < shape.global_views * view; i++) teacher[i] *= 0.5f;
    }
    dino_loss_destroy(on_ref);
    dino_loss_destroy(on_cpu);
    free(teacher);
    free(student);
}

// ---- sanity ---------------------------------------------------------------------------

static void test_matching_student_gives_lower_loss(void **state) {
    // Student logits equal to the teacher's (temperatures equal, center 0):
    // every cross-entropy is near the teacher's entropy, far below that of
    // an unrelated student.
    const DinoShape shape = {16, 32, 2, 2, 0.1f, 0.9f};
    const size_t view = (size_t)shape.batch * shape.dim;
    float *teacher = random_buffer(2 * view, -1.0f, 1.0f, 41);
    float *student = random_buffer(2 * view, -1.0f, 1.0f, 42);
    DinoLoss *loss = make_loss(fixture_cpu, shape.batch, shape);
    const float random_loss = forward_stacked(loss, shape, teacher, student, 0.1f);
    // each student view matches the other global view, its only pair
    memcpy(student, teacher + view, view * sizeof(float));
    memcpy(student + view, teacher, view * sizeof(float));
    const float matching_loss = forward_stacked(loss, shape, teacher, student, 0.1f);
    assert_true(random_loss > 1.0f);
    assert_true(matching_loss < 0.8f * random_loss);
    // The center must stay at 0 until dino_loss_update_center is called
    float center[32];
    memcpy(center, dino_loss_center(loss), sizeof center);
    for (int k = 0; k < 32; k++) assert_true(center[k] == 0.0f);
    dino_loss_destroy(loss);
    free(student);
    free(teacher);
}

static void test_rejects_bad_arguments(void **state) {
    ErrorMessage err = {{0}};
    assert_null(dino_loss_create(fixture_ref, 0, 8, 2, 2, 0.1f, 0.9f, NULL, &err));
    assert_non_null(strstr(err.text, "positive"));
    assert_null(dino_loss_create(fixture_ref, 4, 8, 3, 2, 0.1f, 0.9f, NULL, &err));
    assert_non_null(strstr(err.text, "global"));
    assert_null(dino_loss_create(fixture_ref, 4, 8, 1, 1, 0.1f, 0.9f, NULL, &err));
    assert_non_null(strstr(err.text, "pair"));
    assert_null(dino_loss_create(fixture_ref, 4, 8, 2, 2, 0.0f, 0.9f, NULL, &err));
    assert_non_null(strstr(err.text, "temperature"));
    assert_null(dino_loss_create(fixture_ref, 4, 8, 2, 2, 0.1f, 1.5f, NULL, &err));
    assert_non_null(strstr(err.text, "momentum"));
    const DinoShape shape = {4, 8, 2, 2, 0.1f, 0.9f};
    DinoLoss *loss = make_loss(fixture_ref, 4, shape);
    float x[2 * 5 * 8] = {0};
    const float *views[2] = {x, x + 40};
    assert_true(isnan(forward_value(loss, 5, views, views, 0.04f)));  // above max_batch
    assert_true(isnan(forward_value(loss, 0, views, views, 0.04f)));
    assert_true(isnan(forward_value(loss, 4, views, views, 0.0f)));
    dino_loss_destroy(loss);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_backward_matches_finite_differences),
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_cpu_matches_ref),
        cmocka_unit_test(test_matching_student_gives_lower_loss),
        cmocka_unit_test(test_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, fixture_backends_create, fixture_backends_destroy);
}
