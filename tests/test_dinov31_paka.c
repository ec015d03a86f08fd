// DINOv31's PaKA term through a whole method step (src/ssl_methods/
// dinov2_paka.c): with DINOv2's three losses weighted 0 the step's loss is
// PaKA's alone, and the gradients the step leaves in the student backbone
// and the student PaKA head must be its derivatives: central finite
// differences of the loss on the cpu backend (fp32; test_method_steps holds
// it to ref) at the entries with the
// largest gradients. This checks what the op tests cannot: the alignment's
// token rows in both models' token tables, its transpose into the student's
// token gradient, the heads and the weights of the pairs. The rows the heads
// get are checked against the alignment rebuilt here from the models'
// tokens and the views' layout (a wrong row would keep the finite
// differences right). Also: the loss
// lies in [0, 2] and is logged, paka_weight scales it, paka_start_step
// turns it off, and a batch without geometry is refused.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "method_fixture.h"
#include "nn/vit.h"
#include "ssl_methods/dinov2_paka.h"
#include "ssl_methods/method.h"
#include "ssl_methods/paka_roi.h"

enum { BATCH = 3, IMAGE = 56, PICKS = 4 };

typedef struct Run {
    Backend *backend;
    Method method;
    MethodFixtureBatch batch;
} Run;

static void run_open(Run *run, const char *weight, const char *start) {
    run->backend = method_fixture_backend("cpu", COMPUTE_F32);
    ViewSet views;
    assert_int_equal(view_set_dinov31(&views, IMAGE, IMAGE / 2, 1, 2, NULL), 0);
    const char *args[] = {"hidden_dim=32",        "bottleneck_dim=8",     "output_dim=24",
                          "dino_loss_weight=0",   "ibot_loss_weight=0",   "koleo_loss_weight=0",
                          weight,                 start};
    MethodSetup setup = {.backend = run->backend, .batch = BATCH, .dataset_size = 100,
                         .total_steps = 10, .seed = 5, .args = args, .arg_count = 8};
    ErrorMessage err = {{0}};
    if (backbone_spec_parse("vit_t14", IMAGE, &setup.backbone, &err) ||
        method_create(&run->method, METHOD_DINOV31, &setup, &views, &err))
        fail_msg("%s", err.text);
    method_fixture_batch(&run->method, BATCH, &run->batch);
    if (method_upload_views(&run->method, &run->batch.batch, &err)) fail_msg("%s", err.text);
}

static void run_close(Run *run) {
    method_fixture_batch_free(&run->batch);
    method_free(&run->method);
    backend_destroy(run->backend);
}

// One step's loss (its gradients left in the groups).
static double run_step(Run *run, long step) {
    ErrorMessage err = {{0}};
    for (int g = 0; g < run->method.group_count; g++)
        parameter_set_zero_grads(run->method.groups[g].params);
    if (run->method.ops->step(&run->method, step, BATCH, &err)) fail_msg("%s", err.text);
    return backend_read_scalar(run->backend, method_loss(&run->method));
}

static MethodGroup *group_named(Method *method, const char *name) {
    for (int g = 0; g < method->group_count; g++)
        if (strcmp(method->groups[g].name, name) == 0) return &method->groups[g];
    fail_msg("no group %s", name);
    return NULL;
}

// The PICKS entries of the group with the largest |gradient| against central
// differences of the loss (step 0 each time: the same masks and draws).
static void check_group(Run *run, const char *name, double eps) {
    ParameterSet *params = group_named(&run->method, name)->params;
    run_step(run, 0);
    float *grads = method_fixture_download(run->backend, params->grads, params->total);
    size_t pick[PICKS] = {0};
    for (int k = 0; k < PICKS; k++)
        for (size_t i = 0; i < params->total; i++) {
            int taken = 0;
            for (int j = 0; j < k; j++) taken |= pick[j] == i;
            if (!taken && fabsf(grads[i]) > fabsf(grads[pick[k]])) pick[k] = i;
        }
    for (int k = 0; k < PICKS; k++) {
        float value;
        Backend *backend = run->backend;
        backend->op.download(backend, &value, params->values + pick[k], sizeof value);
        double loss[2];
        for (int side = 0; side < 2; side++) {
            const float moved = value + (side ? -(float)eps : (float)eps);
            backend->op.upload(backend, params->values + pick[k], &moved, sizeof moved);
            parameter_set_written(params);
            loss[side] = run_step(run, 0);
        }
        backend->op.upload(backend, params->values + pick[k], &value, sizeof value);
        parameter_set_written(params);
        const double numeric = (loss[0] - loss[1]) / (2 * eps), analytic = grads[pick[k]];
        print_message("%s[%zu]: gradient %.6e, finite difference %.6e\n", name, pick[k],
                      analytic, numeric);
        assert_true(fabs(analytic) > 1e-4);  // a gradient there to check, not zeros
        assert_true(fabs(numeric - analytic) <= 2e-2 * fabs(analytic) + 1e-6);
    }
    free(grads);
}

static void test_gradients_are_derivatives(void **state) {
    (void)state;
    Run run;
    run_open(&run, "paka_weight=1", "paka_start_step=0");
    const double loss = run_step(&run, 0);
    print_message("PaKA loss %.6f\n", loss);
    assert_true(loss > 0.0 && loss < 2.0);
    const float logged = backend_read_scalar(run.backend, method_scalar(&run.method, 4));
    assert_float_equal(logged, loss, 1e-6);
    assert_string_equal(run.method.scalar_tags[4], "train_loss/paka_loss");
    check_group(&run, "student_paka_head", 1e-2);
    check_group(&run, "backbone", 1e-2);
    run_close(&run);
}

// paka_weight scales the loss; before paka_start_step it is 0 with no
// gradient anywhere, and the head's group is not stepped.
static void test_weight_and_start(void **state) {
    (void)state;
    Run one, two, later;
    run_open(&one, "paka_weight=1", "paka_start_step=0");
    run_open(&two, "paka_weight=2.5", "paka_start_step=0");
    run_open(&later, "paka_weight=1", "paka_start_step=3");
    const double a = run_step(&one, 0), b = run_step(&two, 0);
    assert_true(fabs(b - 2.5 * a) <= 1e-5 * b);
    assert_true(run_step(&later, 2) == 0.0);
    for (int g = 0; g < later.method.group_count; g++) {
        ParameterSet *params = later.method.groups[g].params;
        float *grads = method_fixture_download(later.backend, params->grads, params->total);
        for (size_t i = 0; i < params->total; i++)
            if (grads[i] != 0.0f) fail_msg("group %d gradient %zu = %g", g, i, grads[i]);
        free(grads);
    }
    const MethodGroup *head = group_named(&later.method, "student_paka_head");
    assert_false(method_group_active(head, 2));
    assert_true(method_group_active(head, 3));
    assert_true(run_step(&later, 3) > 0.0);
    ErrorMessage err = {{0}};
    later.batch.batch.geometry = NULL;
    assert_int_equal(method_upload_views(&later.method, &later.batch.batch, &err), -1);
    assert_non_null(strstr(err.text, "dinov31 needs where each view came from"));
    run_close(&one);
    run_close(&two);
    run_close(&later);
}

// The aligned rows the heads got: PaKA view k (the local views' 1 + k, a
// crop in global view k % 2) of image b against the student's slot-1 tokens
// of local view 1 + k and the teacher's slot-0 tokens of its clean render,
// global view 2 + k % 2, both at the patches after the class token.
static void test_aligned_rows(void **state) {
    (void)state;
    Run run;
    run_open(&run, "paka_weight=1", "paka_start_step=0");
    run_step(&run, 0);
    Method *method = &run.method;
    const Dinov2Paka *paka = dinov2_method_paka(method);
    assert_non_null(paka);
    const int dim = method->backbone.feature_dim, grid = IMAGE / 2 / 14, global = IMAGE / 14;
    const int local_tokens = 1 + grid * grid, global_tokens = 1 + global * global;
    const Vit *student = &method->backbone.model.vit;
    const Vit *teacher = &method->ops->teacher(method)->model.vit;
    const size_t rows = (size_t)2 * BATCH * grid * grid;
    float *s_tokens = method_fixture_download(run.backend, vit_tokens(student, 1),
                                              (size_t)3 * BATCH * local_tokens * dim);
    float *t_tokens = method_fixture_download(run.backend, vit_tokens(teacher, 0),
                                              (size_t)4 * BATCH * global_tokens * dim);
    float *s_aligned = method_fixture_download(run.backend, dinov2_paka_aligned(paka, 0),
                                               rows * dim);
    float *t_aligned = method_fixture_download(run.backend, dinov2_paka_aligned(paka, 1),
                                               rows * dim);
    const ViewGeometry *geometry = run.batch.geometry;
    int32_t index[PAKA_ROI_MAX_TAPS];
    float weight[PAKA_ROI_MAX_TAPS];
    double worst = 0.0;
    for (int k = 0; k < 2; k++)
        for (int b = 0; b < BATCH; b++) {
            const ViewGeometry *local = &geometry[(5 + k) * BATCH + b];
            const ViewGeometry *parent = &geometry[(k % 2) * BATCH + b];
            PakaBox region;
            const PakaBox s_crop = paka_crop_box(local), t_crop = paka_crop_box(parent);
            paka_shared_region(s_crop, t_crop, grid, grid, &region);
            const PakaBox boxes[2] = {paka_grid_box(s_crop, region, grid, grid),
                                      paka_grid_box(t_crop, region, global, global)};
            const int grids[2] = {grid, global}, flips[2] = {local->flip, parent->flip};
            const float *tokens[2] = {
                s_tokens + ((size_t)(1 + k) * BATCH + b) * local_tokens * dim + dim,
                t_tokens + ((size_t)(2 + k % 2) * BATCH + b) * global_tokens * dim + dim};
            const float *aligned[2] = {s_aligned, t_aligned};
            for (int side = 0; side < 2; side++)
                for (int cell = 0; cell < grid * grid; cell++) {
                    const int count = paka_roi_cell(boxes[side], grids[side], grids[side], grid,
                                                    grid, cell / grid, cell % grid, flips[side],
                                                    index, weight);
                    const float *got =
                        aligned[side] + ((size_t)(k * BATCH + b) * grid * grid + cell) * dim;
                    for (int c = 0; c < dim; c++) {
                        double value = 0.0;
                        for (int t = 0; t < count; t++)
                            value += (double)weight[t] * tokens[side][(size_t)index[t] * dim + c];
                        worst = fmax(worst, fabs(value - got[c]));
                    }
                }
        }
    print_message("aligned rows: largest difference %.2e\n", worst);
    assert_true(worst < 1e-5);
    free(s_tokens), free(t_tokens), free(s_aligned), free(t_aligned);
    run_close(&run);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_aligned_rows),
        cmocka_unit_test(test_gradients_are_derivatives),
        cmocka_unit_test(test_weight_and_start),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
