// One ConvNeXt training step against PyTorch (tests/fixtures/convnext.safetensors,
// tools/make_convnext_fixtures.py): torchvision's ConvNeXt-T at 64 px, its
// loss and every parameter's gradient (the final norm, outside
// LightlyTrain's features, gets none in torch and stays 0 here); then
// LightlyTrain's AdamW parameter groups (no weight decay on norms, biases
// and layer scales) on the small ConvNeXt in each naming: which parameters
// decay, and the parameters after one AdamW step from the same gradients,
// on the cpu and ref backends.
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
#include "convnext_fixture.h"
#include "nn/optimizer.h"

VIT_PARITY_TEST_STATE(CONVNEXT_FIXTURE_PATH)

#define STEP_SIZE 64
#define STEP_DIM 768

static void test_training_step(void **state) {
    ErrorMessage err = {{0}};
    ConvnextConfig config;
    if (convnext_config_preset("torchvision/convnext_tiny", &config, &err))
        fail_msg("%s", err.text);
    config.drop_path_rate = 0.0f;  // the fixture's stochastic_depth_prob (draws cannot match)
    Convnext model;
    const int size = STEP_SIZE;
    convnext_fixture_build(&model, backend, &config, &size, 1, 0);
    float *input = vit_fixture_input(backend, "convnext", STEP_SIZE, CONVNEXT_FIXTURE_BATCH);
    if (convnext_forward(&model, 0, CONVNEXT_FIXTURE_BATCH, (const Act *)input, 1, &err))
        fail_msg("%s", err.text);
    const size_t n = CONVNEXT_FIXTURE_BATCH * STEP_DIM;
    float weights[CONVNEXT_FIXTURE_BATCH * STEP_DIM], features[CONVNEXT_FIXTURE_BATCH * STEP_DIM];
    fixture_fill("loss/convnext/64", 0.0f, 1.0f, weights, n);
    backend->op.download(backend, features, convnext_features(&model, 0), sizeof features);
    const double loss = gradcheck_project(n, features, weights);
    const double truth = fixture_read_f64(&fixture, "step/loss");
    const double allowed =
        4.0 * fixture_read_f64(&fixture, "f32err/step/loss") + 1e-6 * fabs(truth);
    if (!(fabs(loss - truth) <= allowed))
        fail_msg("loss %.9g, truth %.9g (allowed %.3g)", loss, truth, allowed);
    float *dfeatures = backend->op.alloc(backend, sizeof weights);
    backend->op.upload(backend, dfeatures, weights, sizeof weights);
    parameter_set_zero_grads(&model.params);
    if (convnext_backward_map(&model, 0, (const Act *)dfeatures, NULL, &err))
        fail_msg("%s", err.text);
    for (int i = 0; i < model.params.count; i++) {
        const Parameter *param = &model.params.params[i];
        float *ours = malloc(param->count * sizeof *ours);
        float *torch = malloc(param->count * sizeof *torch);
        backend->op.download(backend, ours, param->grad, param->count * sizeof *ours);
        weights_to_torch_layout(param, ours, torch);
        if (model.roles[i].role == CONVNEXT_HEAD_NORM)
            for (size_t k = 0; k < param->count; k++) assert_true(torch[k] == 0.0f);
        else
            vit_parity_check_parameter(&parity, "step", param, torch);
        free(ours);
        free(torch);
    }
    backend->op.free(backend, dfeatures);
    backend->op.free(backend, input);
    convnext_free(&model);
}

// The small model in `naming` with its gradients set to fixture init
// "adamw/grad/<timm name>", one AdamW step (lr 1e-3, weight decay 0.04 by
// our parameter kinds), against torch's groups and result.
static void check_adamw(ConvnextNaming naming) {
    ErrorMessage err = {{0}};
    const ConvnextConfig config = convnext_fixture_small(naming);
    const int size = 32;
    Convnext model;
    convnext_fixture_build(&model, backend, &config, &size, 1, 0);
    const OptimizerConfig adamw = optimizer_config_default(OPTIMIZER_ADAMW);
    Optimizer *optimizer = optimizer_create(backend, &model.params, &adamw, &err);
    if (!optimizer) fail_msg("%s", err.text);
    for (int i = 0; i < model.params.count; i++) {
        const Parameter *param = &model.params.params[i];
        char timm_name[PARAM_MAX_NAME], key[200];
        convnext_tensor_name(CONVNEXT_TIMM, &model.roles[i], timm_name, sizeof timm_name);
        float *torch = malloc(param->count * sizeof *torch);
        float *ours = malloc(param->count * sizeof *ours);
        snprintf(key, sizeof key, "adamw/grad/%s", timm_name);
        fixture_fill(key, 0.0f, 1.0f, torch, param->count);
        weights_from_torch_layout(param, torch, ours);
        backend->op.upload(backend, param->grad, ours, param->count * sizeof *ours);
        snprintf(key, sizeof key, "adamw/decay/%s", timm_name);
        if (optimizer_weight_decays(optimizer, i) != (int)fixture_read_f32(&fixture, key))
            fail_msg("%s (%s): weight decay %d, LightlyTrain's %g", param->name, timm_name,
                     optimizer_weight_decays(optimizer, i), fixture_read_f32(&fixture, key));
        free(torch);
        free(ours);
    }
    optimizer_step(optimizer, 1e-3f, 0.04f, NULL);
    for (int i = 0; i < model.params.count; i++) {
        const Parameter *param = &model.params.params[i];
        char timm_name[PARAM_MAX_NAME], key[200];
        convnext_tensor_name(CONVNEXT_TIMM, &model.roles[i], timm_name, sizeof timm_name);
        snprintf(key, sizeof key, "adamw/after/%s", timm_name);
        const SafeTensor *after =
            fixture_find_tensor(&fixture, key, SAFE_F32, (int64_t)param->count);
        float *ours = malloc(param->count * sizeof *ours);
        float *torch = malloc(param->count * sizeof *torch);
        backend->op.download(backend, ours, param->value, param->count * sizeof *ours);
        weights_to_torch_layout(param, ours, torch);
        // As optim.safetensors: a few float32 ulps of O(1) values.
        assert_int_equal(gradcheck_count_mismatches(key, param->count, torch,
                                                    safetensors_data(&fixture, after), 1e-5, 1e-6),
                         0);
        free(ours);
        free(torch);
    }
    optimizer_free(optimizer);
    convnext_free(&model);
}

static void test_adamw_groups(void **state) {
    check_adamw(CONVNEXT_TORCHVISION);
    check_adamw(CONVNEXT_TIMM);
    check_adamw(CONVNEXT_DINOV3);
}

int main(void) {
    const struct CMUnitTest cpu_tests[] = {
        cmocka_unit_test(test_training_step),
        cmocka_unit_test(test_adamw_groups),
    };
    const struct CMUnitTest ref_tests[] = {
        cmocka_unit_test(test_adamw_groups),
    };
    return cmocka_run_group_tests_name("cpu", cpu_tests, setup_cpu, teardown) +
           cmocka_run_group_tests_name("ref", ref_tests, setup_ref, teardown);
}
