// DINOv2's loss (src/ssl_methods/dinov2_loss.c) against PyTorch: the
// fixtures of tools/make_dinov2_fixtures.py (LightlyTrain's DINO + iBOT +
// KoLeo code written out, softmax and Sinkhorn-Knopp centring, no local
// views, two steps with the centers carried over) on the ref and cpu
// backends: every loss term, every student gradient and both centers
// within |ours - torch float64| <= 1e-5 + 1e-5 |torch|. Also the argument
// checks. Both backends keep host memory: fixture data goes to ops directly.
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
#include "ssl_methods/dinov2_loss.h"

#define FIXTURE_PATH "tests/fixtures/dinov2_loss.safetensors"
#define TOLERANCE 1e-5

static const char *const fixture_cases[] = {
    "b3_l2_k17_d8_p6_softmax", "b3_l2_k17_d8_p6_sk", "b4_l0_k9_d5_p4_softmax",
    "b2_l3_k33_d12_p9_sk",
};

static double worst_error;  // the largest |ours - truth| seen, for the report

// A copy of the F32 tensor `key` with n elements (NULL-safe for n = 0).
static float *read_f32(const SafeTensors *file, const char *key, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    memcpy(x, safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32, (int64_t)n)),
           n * sizeof(float));
    return x;
}

static void check_against(const SafeTensors *file, const char *label, const char *key, size_t n,
                          const float *ours) {
    const double *data = safetensors_data(file, fixture_find_tensor(file, key, SAFE_F64, (int64_t)n));
    float *truth = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(truth);
    for (size_t i = 0; i < n; i++) {
        double value;
        memcpy(&value, data + i, sizeof value);
        truth[i] = (float)value;
        const double error = fabs((double)ours[i] - value);
        if (error > worst_error) worst_error = error;
    }
    char text[256];
    snprintf(text, sizeof text, "%s %s", label, key);
    assert_int_equal(gradcheck_count_mismatches(text, n, ours, truth, TOLERANCE, TOLERANCE), 0);
    free(truth);
}

static void check_case(Backend *backend, const SafeTensors *file, const char *name) {
    char key[160];
    snprintf(key, sizeof key, "%s/config", name);
    float *config = read_f32(file, key, 11);
    const int batch = (int)config[0], local = (int)config[1], k = (int)config[2];
    const int dim = (int)config[3], patches = (int)config[4];
    const Dinov2LossConfig loss_config = {
        .max_batch = batch + 2,  // capacity above the batch must not matter
        .local_views = local,
        .max_masked = 2 * batch * patches,
        .out_dim = k,
        .feature_dim = dim,
        .student_temp = config[5],
        .center_momentum = config[6],
        .centering = config[7] != 0.0f ? DINOV2_CENTER_SINKHORN_KNOPP : DINOV2_CENTER_SOFTMAX,
        .dino_weight = config[8],
        .ibot_weight = config[9],
        .koleo_weight = config[10],
    };
    ErrorMessage err = {{0}};
    Dinov2Loss *loss = dinov2_loss_create(backend, &loss_config, NULL, &err);
    if (!loss) fail_msg("dinov2_loss_create: %s", err.text);
    const size_t cls_rows = (size_t)(2 + local) * batch, global_rows = 2 * (size_t)batch;
    for (int step = 1; step <= 2; step++) {
        snprintf(key, sizeof key, "%s/%d/masks", name, step);
        float *masks = read_f32(file, key, global_rows * patches);
        int masked = 0;
        for (size_t i = 0; i < global_rows * patches; i++) masked += masks[i] != 0.0f;
        char base[128];
        snprintf(base, sizeof base, "%s/%d", name, step);
#define INPUT(field, n) (snprintf(key, sizeof key, "%s/" #field, base), read_f32(file, key, (n)))
        float *teacher_cls = INPUT(teacher_cls, global_rows * k);
        float *student_cls = INPUT(student_cls, cls_rows * k);
        float *features = INPUT(student_features, global_rows * dim);
        float *teacher_patches = INPUT(teacher_patches, (size_t)masked * k);
        float *student_patches = INPUT(student_patches, (size_t)masked * k);
        float *weights = INPUT(patch_weights, (size_t)masked);
#undef INPUT
        snprintf(key, sizeof key, "%s/teacher_temp", base);
        const Dinov2LossInputs inputs = {
            .batch = batch, .masked = masked, .teacher_cls = teacher_cls,
            .student_cls = student_cls, .teacher_patches = teacher_patches,
            .student_patches = student_patches, .patch_weights = weights,
            .student_features = features, .teacher_temp = fixture_read_f32(file, key)};
        float terms[DINOV2_TERMS];  // backend memory: host memory on ref and cpu
        if (dinov2_loss_forward(loss, &inputs, terms, &err)) fail_msg("%s", err.text);
        float *grad_cls = malloc(cls_rows * k * sizeof(float));
        float *grad_patches = malloc(((size_t)masked * k + 1) * sizeof(float));
        float *grad_features = malloc(global_rows * dim * sizeof(float));
        assert_true(grad_cls && grad_patches && grad_features);
        dinov2_loss_backward(loss, grad_cls, grad_patches, grad_features);
        dinov2_loss_update_centers(loss);

        // dino_global, dino_local, ibot, koleo, total: the fixture's order
        _Static_assert(DINOV2_TERMS == 5, "the fixture's five terms");
        snprintf(key, sizeof key, "%s/terms", base);
        check_against(file, backend->name, key, DINOV2_TERMS, terms);
        snprintf(key, sizeof key, "%s/grad_cls", base);
        check_against(file, backend->name, key, cls_rows * k, grad_cls);
        snprintf(key, sizeof key, "%s/grad_patches", base);
        check_against(file, backend->name, key, (size_t)masked * k, grad_patches);
        snprintf(key, sizeof key, "%s/grad_features", base);
        check_against(file, backend->name, key, global_rows * dim, grad_features);
        if (loss_config.centering == DINOV2_CENTER_SOFTMAX) {
            snprintf(key, sizeof key, "%s/cls_center", base);
            check_against(file, backend->name, key, (size_t)k, dinov2_loss_cls_center(loss));
            snprintf(key, sizeof key, "%s/patch_center", base);
            check_against(file, backend->name, key, (size_t)k, dinov2_loss_patch_center(loss));
        }
        float *buffers[] = {masks, teacher_cls, student_cls, features, teacher_patches,
                            student_patches, weights, grad_cls, grad_patches, grad_features};
        for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
    }
    dinov2_loss_destroy(loss);
    free(config);
}

static void test_matches_pytorch(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE_PATH, &file, &err) != 0) fail_msg("%s", err.text);
    for (size_t c = 0; c < sizeof fixture_cases / sizeof fixture_cases[0]; c++) {
        worst_error = 0.0;
        check_case(fixture_ref, &file, fixture_cases[c]);
        fprintf(stderr, "  %s ref: max |ours - torch float64| %.3g\n", fixture_cases[c],
                worst_error);
        worst_error = 0.0;
        check_case(fixture_cpu, &file, fixture_cases[c]);
        fprintf(stderr, "  %s cpu: max |ours - torch float64| %.3g\n", fixture_cases[c],
                worst_error);
    }
    safetensors_free(&file);
}

static void test_rejects_bad_arguments(void **state) {
    ErrorMessage err = {{0}};
    Dinov2LossConfig config = {.max_batch = 4, .local_views = 2, .max_masked = 10, .out_dim = 8,
                               .feature_dim = 4, .student_temp = 0.1f, .center_momentum = 0.9f,
                               .dino_weight = 1, .ibot_weight = 1, .koleo_weight = 0.1f};
    Dinov2LossConfig bad = config;
    bad.max_batch = 1;  // KoLeo needs a neighbour
    assert_null(dinov2_loss_create(fixture_ref, &bad, NULL, &err));
    assert_non_null(strstr(err.text, "batch"));
    bad = config;
    bad.student_temp = 0.0f;
    assert_null(dinov2_loss_create(fixture_ref, &bad, NULL, &err));
    assert_non_null(strstr(err.text, "student_temp"));
    Dinov2Loss *loss = dinov2_loss_create(fixture_ref, &config, NULL, &err);
    assert_non_null(loss);
    Dinov2LossInputs inputs = {.batch = 4, .masked = 11, .teacher_temp = 0.04f};
    float terms[DINOV2_TERMS];
    assert_int_equal(dinov2_loss_forward(loss, &inputs, terms, &err), -1);  // too many masked
    assert_non_null(strstr(err.text, "masked"));
    inputs.masked = 0;
    inputs.teacher_temp = 0.0f;
    assert_int_equal(dinov2_loss_forward(loss, &inputs, terms, &err), -1);
    assert_non_null(strstr(err.text, "temperature"));
    dinov2_loss_destroy(loss);
    Dinov2Centering centering;
    assert_int_equal(dinov2_centering_parse("sinkhorn_knopp", &centering, &err), 0);
    assert_int_equal(centering, DINOV2_CENTER_SINKHORN_KNOPP);
    assert_int_equal(dinov2_centering_parse("sinkhorn", &centering, &err), -1);
    assert_non_null(strstr(err.text, "softmax or sinkhorn_knopp"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_rejects_bad_arguments),
    };
    return cmocka_run_group_tests(tests, fixture_backends_create, fixture_backends_destroy);
}
