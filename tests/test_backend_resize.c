// The distillation ops of backend.h (bilinear feature-map resize, mixup,
// strided 2-D copy). On the ref backend: the resize against PyTorch's
// F.interpolate(bilinear, align_corners=False) and its gradient
// (tests/fixtures/distillation.safetensors, tools/make_distillation_fixtures.py),
// the backward against central finite differences of the forward and the
// `=` contract, mixup and copy_2d against values worked out by hand. Then
// every op of the cpu and cuda backends against ref on awkward shapes
// (tests/backend_mirror.h); the cuda group is skipped (reported, not
// passed) where no GPU works.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend_fixture.h"
#include "backend_mirror.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "op_checks.h"
#include "backend/resize_taps.h"

#define FIXTURE "tests/fixtures/distillation.safetensors"

// ---- ref: against PyTorch --------------------------------------------------------------

static const float *fixture_f32(const SafeTensors *file, const char *name, int64_t n) {
    return safetensors_data(file, fixture_find_tensor(file, name, SAFE_F32, n));
}

static const double *fixture_f64(const SafeTensors *file, const char *name, int64_t n) {
    return safetensors_data(file, fixture_find_tensor(file, name, SAFE_F64, n));
}

// Each resize case: y and dx (the gradient of <dy, y>) within the scale of
// PyTorch's own float32 rounding (gradcheck_count_outside_truth).
static void test_resize_matches_pytorch(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE, &file, &err)) fail_msg("%s", err.text);
    int cases = 0;
    for (int t = 0; t < file.count; t++) {
        int b, h, w, c, oh, ow, used = 0;
        if (sscanf(file.tensors[t].name, "resize/b%d_%dx%d_c%d_to_%dx%d/x%n", &b, &h, &w, &c,
                   &oh, &ow, &used) != 6 || file.tensors[t].name[used] != '\0')
            continue;
        char prefix[96], name[128];
        snprintf(prefix, sizeof prefix, "resize/b%d_%dx%d_c%d_to_%dx%d", b, h, w, c, oh, ow);
        const size_t in = (size_t)b * h * w * c, out = (size_t)b * oh * ow * c;
        float *x = fixture_tensor(in), *dy = fixture_tensor(out);
        float *y = fixture_tensor(out), *dx = fixture_tensor(in);
        snprintf(name, sizeof name, "%s/x", prefix);
        memcpy(x, fixture_f32(&file, name, in), in * sizeof *x);
        snprintf(name, sizeof name, "%s/dy", prefix);
        memcpy(dy, fixture_f32(&file, name, out), out * sizeof *dy);
        fixture_backend->op.resize_bilinear_forward(fixture_backend, b, h, w, c, (const Act *)x, oh,
                                                    ow, (Act *)y);
        fixture_backend->op.resize_bilinear_backward(fixture_backend, b, h, w, c, (const Act *)dy,
                                                     oh, ow, (Act *)dx);
        const char *outputs[2] = {"y", "dx"};
        const float *ours[2] = {y, dx};
        const size_t sizes[2] = {out, in};
        for (int k = 0; k < 2; k++) {
            char err_name[160];
            snprintf(name, sizeof name, "%s/%s", prefix, outputs[k]);
            snprintf(err_name, sizeof err_name, "f32err/%s", name);
            assert_int_equal(gradcheck_count_outside_truth(name, sizes[k], ours[k],
                                                           fixture_f64(&file, name, sizes[k]),
                                                           fixture_read_f64(&file, err_name)),
                             0);
        }
        fixture_tensors_free(state);
        cases++;
    }
    safetensors_free(&file);
    assert_int_equal(cases, 7);
}

// ---- ref: the backward against finite differences ---------------------------------------

typedef struct ResizeProblem {
    int batch, in_h, in_w, channels, out_h, out_w;
    float *x, *y, *projection;  // x (B, H, W, C); y, projection (B, OH, OW, C)
} ResizeProblem;

static double resize_loss(void *problem, const float *x) {
    ResizeProblem *p = problem;
    fixture_backend->op.resize_bilinear_forward(fixture_backend, p->batch, p->in_h, p->in_w,
                                                p->channels, (const Act *)x, p->out_h, p->out_w,
                                                (Act *)p->y);
    return gradcheck_project((size_t)p->batch * p->out_h * p->out_w * p->channels, p->y,
                             p->projection);
}

static void resize_gradient(void *problem, float *dx) {
    ResizeProblem *p = problem;
    fixture_backend->op.resize_bilinear_backward(fixture_backend, p->batch, p->in_h, p->in_w,
                                                 p->channels, (const Act *)p->projection, p->out_h,
                                                 p->out_w, (Act *)dx);
}

// The resize is linear in x: central differences are exact up to the
// rounding of the loss (as tests/test_backend_transformer_grad.c's linear ops).
static void test_resize_backward_fd(void **state) {
    const int cases[][6] = {{2, 3, 4, 3, 7, 5}, {1, 7, 7, 2, 3, 3}, {1, 1, 1, 4, 2, 3},
                            {2, 5, 2, 1, 5, 2}};
    const GradcheckTolerance linear = {.step = 1e-2f, .rtol = 1e-2, .atol = 1e-3};
    for (size_t t = 0; t < sizeof cases / sizeof cases[0]; t++) {
        ResizeProblem p = {cases[t][0], cases[t][1], cases[t][2], cases[t][3], cases[t][4],
                           cases[t][5], NULL, NULL, NULL};
        const size_t in = (size_t)p.batch * p.in_h * p.in_w * p.channels;
        const size_t out = (size_t)p.batch * p.out_h * p.out_w * p.channels;
        p.x = fixture_random_tensor(in, -1, 1, 10 + t);
        p.projection = fixture_random_tensor(out, -1, 1, 20 + t);
        p.y = fixture_tensor(out);
        op_check_gradient("resize dx", resize_loss, resize_gradient, &p, p.x, in, linear);
        op_assert_overwrites(resize_gradient, &p, in);
    }
}

// The cuda backward gathers over resize_output_range: for every size pair up
// to 48 and every input index, each output with a non-zero weight on it must
// lie in the range (checked on the host, where the same code compiles).
static void test_gather_ranges_cover_every_tap(void **state) {
    for (int in = 1; in <= 48; in++)
        for (int out = 1; out <= 48; out++)
            for (int i = 0; i < in; i++) {
                int first, last;
                resize_output_range(i, in, out, &first, &last);
                for (int o = 0; o < out; o++)
                    if (resize_tap_weight(resize_tap(o, in, out), i) != 0.0f &&
                        (o < first || o > last))
                        fail_msg("%d -> %d: output %d reaches input %d outside [%d, %d]", in,
                                 out, o, i, first, last);
            }
}

// ---- ref: mixup and copy_2d by hand ---------------------------------------------------------

// Sample b holds the value b + 0.5 everywhere: y[b] = 0.25 (b + 0.5) + 0.75 (p[b] + 0.5).
static void test_mixup_values(void **state) {
    const int batch = 4;
    const size_t sample = 5;
    const int32_t permutation[4] = {2, 0, 3, 1};
    float *x = fixture_tensor(batch * sample), *y = fixture_tensor(batch * sample);
    int32_t *device_permutation = (int32_t *)fixture_tensor(batch);
    memcpy(device_permutation, permutation, sizeof permutation);
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < sample; i++) x[b * sample + i] = (float)b + 0.5f;
    fixture_backend->op.mixup(fixture_backend, batch, sample, (const Act *)x, device_permutation,
                              0.25f, (Act *)y);
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < sample; i++)
            assert_float_equal(y[b * sample + i],
                               0.25f * (b + 0.5f) + 0.75f * (permutation[b] + 0.5f), 1e-6f);
}

// A 3 x 4 block copied out of a 5-wide matrix into a 6-wide one: the
// columns past 4 of the target stay as they were.
static void test_copy_2d_values(void **state) {
    float *x = fixture_tensor(15), *y = fixture_tensor(18);
    for (int i = 0; i < 15; i++) x[i] = (float)i;
    for (int i = 0; i < 18; i++) y[i] = -1.0f;
    fixture_backend->op.copy_2d(fixture_backend, 3, 4, (const Act *)(x + 1), 5, (Act *)y, 6);
    for (int r = 0; r < 3; r++)
        for (int c = 0; c < 6; c++)
            assert_float_equal(y[r * 6 + c], c < 4 ? (float)(r * 5 + c + 1) : -1.0f, 0.0f);
}

// ---- cpu and cuda against ref (tests/backend_mirror.h) ------------------------------------

// (B, H, W, C, OH, OW): a ResNet-18 map to a ViT-B/14 grid at 224 px (7 x 7
// -> 16 x 16, threaded on cpu), down, identity, from 1 x 1, odd channels.
static const int fast_cases[][6] = {{3, 7, 7, 37, 16, 16}, {2, 16, 16, 5, 7, 7},
                                    {1, 4, 4, 3, 4, 4},    {2, 1, 1, 3, 5, 3},
                                    {1, 3, 5, 64, 8, 11}};

// The forward uses the same fp32 operations everywhere (resize_taps.h, no
// FMA contraction): identical. The cpu backward scatters in ref's order:
// identical; the cuda backward gathers, summing each input's (at most
// ~(2 / scale + 3)^2) terms in another grouping: 1e-6 relative + 1e-6.
static void test_resize_against_ref(void **state) {
    NEED_FAST_BACKEND();
    const int exact = strcmp(fast->name, "cpu") == 0;
    for (size_t t = 0; t < sizeof fast_cases / sizeof fast_cases[0]; t++) {
        const int *s = fast_cases[t];
        const size_t in = (size_t)s[0] * s[1] * s[2] * s[3];
        const size_t out = (size_t)s[0] * s[4] * s[5] * s[3];
        const float *x = mirror_random_tensor(in, -1, 1, 100 + t);
        const float *dy = mirror_random_tensor(out, -1, 1, 200 + t);
        float *y_ref = mirror_nan_tensor(out), *y_fast = mirror_nan_tensor(out);
        float *dx_ref = mirror_nan_tensor(in), *dx_fast = mirror_nan_tensor(in);
        ref->op.resize_bilinear_forward(ref, s[0], s[1], s[2], s[3], (const Act *)x, s[4], s[5], (Act *)y_ref);
        ref->op.resize_bilinear_backward(ref, s[0], s[1], s[2], s[3], (const Act *)dy, s[4], s[5], (Act *)dx_ref);
        fast->op.resize_bilinear_forward(fast, s[0], s[1], s[2], s[3], DA(x), s[4], s[5],
                                         DA(y_fast));
        fast->op.resize_bilinear_backward(fast, s[0], s[1], s[2], s[3], DA(dy), s[4], s[5],
                                          DA(dx_fast));
        HA(y_fast);
        HA(dx_fast);
        mirror_expect_close("resize forward", out, y_fast, y_ref, 0, 0);
        // (16 bits: the relative part widened by mirror_act_tol, one rounding each)
        mirror_expect_close("resize backward", in, dx_fast, dx_ref,
                            exact ? 0 : mirror_act_tol(1e-6), exact ? 0 : 1e-6);
        mirror_free(state);
    }
}

// Same fp32 expression in every backend: identical.
static void test_mixup_and_copy_against_ref(void **state) {
    NEED_FAST_BACKEND();
    const int batch = 7;
    const size_t sample = 3 * 17 * 17;  // threaded on cpu
    const int32_t order[7] = {3, 6, 0, 2, 1, 5, 4};
    int32_t *permutation = mirror_buffer(sizeof order);
    memcpy(permutation, order, sizeof order);
    const float *x = mirror_random_tensor(batch * sample, -1, 1, 300);
    float *y_ref = mirror_nan_tensor(batch * sample), *y_fast = mirror_nan_tensor(batch * sample);
    ref->op.mixup(ref, batch, sample, (const Act *)x, permutation, 0.3125f, (Act *)y_ref);
    fast->op.mixup(fast, batch, sample, DA(x), D(permutation), 0.3125f, DA(y_fast));
    HA(y_fast);
    mirror_expect_close("mixup", batch * sample, y_fast, y_ref, 0, 0);
    // copy_2d: the patch rows of (B, T, D) tokens into (B, P, D), as the ViT map does.
    const size_t tokens = 11, dim = 9, first = 2, patches = tokens - first;
    float *rows_ref = mirror_nan_tensor(batch * patches * dim);
    float *rows_fast = mirror_nan_tensor(batch * patches * dim);
    ref->op.copy_2d(ref, batch, patches * dim, (const Act *)(x + first * dim), tokens * dim, (Act *)rows_ref,
                    patches * dim);
    fast->op.copy_2d(fast, batch, patches * dim, DA(x + first * dim), tokens * dim, DA(rows_fast),
                     patches * dim);
    HA(rows_fast);
    mirror_expect_close("copy_2d", batch * patches * dim, rows_fast, rows_ref, 0, 0);
}

int main(void) {
    const struct CMUnitTest ref_tests[] = {
        cmocka_unit_test_teardown(test_resize_matches_pytorch, fixture_tensors_free),
        cmocka_unit_test_teardown(test_resize_backward_fd, fixture_tensors_free),
        cmocka_unit_test(test_gather_ranges_cover_every_tap),
        cmocka_unit_test_teardown(test_mixup_values, fixture_tensors_free),
        cmocka_unit_test_teardown(test_copy_2d_values, fixture_tensors_free),
    };
    const struct CMUnitTest fast_tests[] = {
        cmocka_unit_test_teardown(test_resize_against_ref, mirror_free),
        cmocka_unit_test_teardown(test_mixup_and_copy_against_ref, mirror_free),
    };
    const int failures = cmocka_run_group_tests_name("ref", ref_tests, fixture_backend_create_ref,
                                                     fixture_backend_destroy);
    return failures + mirror_run_groups_16bit(fast_tests, sizeof fast_tests / sizeof fast_tests[0]);
}
