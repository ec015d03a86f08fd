// LightlyTrain DINOv2's optimizer parameter groups: the name rules
// (src/ssl_methods/dinov2_param_groups.h), the groups --method dinov2
// builds (lr multipliers, weight decay switches, lr-0 freeze windows,
// the trained weight_g) and a few AdamW steps under them against PyTorch
// (tests/fixtures/dinov2_groups.safetensors, tools/make_dinov2_groups_fixtures.py:
// LightlyTrain's get_optimizer_with_decay and on_before_optimizer_step
// written out, lightly's schedulers, Lightning's norm clipping) on a tiny
// ViT and DINO head, on the ref and cpu backends.
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
#include "fixture_init.h"
#include "fixture_tensors.h"
#include "nn/optimizer.h"
#include "nn/schedule.h"
#include "nn/step_gate.h"
#include "ssl_methods/dinov2_param_groups.h"
#include "ssl_methods/method.h"

#define GROUPS_FIXTURE "tests/fixtures/dinov2_groups.safetensors"
#define FIXTURE_STEPS 6
#define FIXTURE_CLIP 3.0f
#define IMAGE 8  // the tiny ViT's 2 x 2 grid of 4 px patches
#define MAX_FLOATS 512

// ---- the name rules ---------------------------------------------------------------------

static void test_layer_and_decay_rules(void **state) {
    const int depth = 12;
    const struct {
        const char *name;
        int layer, decays;
    } cases[] = {
        {"cls_token", 0, 1},           {"reg_token", 0, 1},
        {"pos_embed", 0, 1},           {"mask_token", 0, 1},
        {"patch_embed.proj.weight", 0, 1}, {"patch_embed.proj.bias", 0, 0},
        {"blocks.0.norm1.weight", 1, 0}, {"blocks.0.attn.qkv.weight", 1, 1},
        {"blocks.3.ls1.gamma", 4, 0},  {"blocks.11.mlp.fc2.bias", 12, 0},
        {"blocks.11.mlp.fc2.weight", 12, 1}, {"norm.weight", 13, 0},
        {"norm.bias", 13, 0},          {"blocks.12.attn.proj.weight", 13, 1},
        {"layers.0.weight", 13, 1},    {"last_layer.weight_v", 13, 1},
        {"last_layer.weight_g", 13, 1},
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        if (dinov2_vit_layer(cases[i].name, depth) != cases[i].layer ||
            dinov2_weight_decays(cases[i].name) != cases[i].decays)
            fail_msg("%s: layer %d decays %d, expected %d and %d", cases[i].name,
                     dinov2_vit_layer(cases[i].name, depth), dinov2_weight_decays(cases[i].name),
                     cases[i].layer, cases[i].decays);
    }
    const Dinov2LrRules rules = {.depth = depth, .layerwise_decay = 0.9,
                                 .patch_embed_lr_multiplier = 0.2};
    assert_float_equal(dinov2_lr_scale("cls_token", 1, &rules), pow(0.9, 13), 1e-15);
    assert_float_equal(dinov2_lr_scale("patch_embed.proj.weight", 1, &rules),
                       0.2 * pow(0.9, 13), 1e-15);
    assert_float_equal(dinov2_lr_scale("blocks.11.attn.qkv.weight", 1, &rules), 0.9, 1e-15);
    assert_float_equal(dinov2_lr_scale("blocks.0.attn.qkv.weight", 1, &rules), pow(0.9, 12),
                       1e-15);
    assert_float_equal(dinov2_lr_scale("norm.weight", 1, &rules), 1.0, 0);
    // head parameters keep the lr, a head name like a backbone one included
    assert_float_equal(dinov2_lr_scale("patch_embed.proj.weight", 0, &rules), 1.0, 0);
    assert_float_equal(dinov2_lr_scale("layers.0.weight", 0, &rules), 1.0, 0);
}

// ---- the method's groups ----------------------------------------------------------------

// A ViT of the fixture's geometry: patch 4, width 8, 2 blocks, 2 registers,
// LayerScale, a 2 x 2 grid with the class token's position.
static BackboneSpec tiny_vit(void) {
    BackboneSpec spec = {.kind = BACKBONE_VIT};
    spec.vit = (VitConfig){.patch_size = 4, .embed_dim = 8, .depth = 2, .heads = 2,
                           .mlp_hidden = 32, .register_tokens = 2, .class_pos = 1,
                           .pos_grid = 2, .layer_scale = 1, .layer_scale_init = 1e-5f,
                           .norm_eps = 1e-6f, .pos_interpolation = VIT_POS_INTERP_OFFSET,
                           .pool = VIT_POOL_MEAN};
    vit_config_name(&spec.vit);
    return spec;
}

// --method dinov2 on the tiny ViT with a 12-6-10 head, two global views of
// 8 px and no local ones, plus the given method args.
static int make_method(Method *method, Backend *backend, const char *const *args, int count,
                       ErrorMessage *err) {
    const char *all[16] = {"hidden_dim=12", "bottleneck_dim=6", "output_dim=10"};
    int n = 3;
    for (int i = 0; i < count && n < 16; i++) all[n++] = args[i];
    ViewSet views;
    method_default_views(METHOD_DINOV2, IMAGE, &views);
    views.count = views.global_count;
    const MethodSetup setup = {.backend = backend, .backbone = tiny_vit(), .batch = 2,
                               .dataset_size = 10, .total_steps = FIXTURE_STEPS, .seed = 3,
                               .args = all, .arg_count = n};
    return method_create(method, METHOD_DINOV2, &setup, &views, err);
}

static const MethodGroup *find_group(const Method *method, const char *name) {
    for (int g = 0; g < method->group_count; g++)
        if (strcmp(method->groups[g].name, name) == 0) return &method->groups[g];
    fail_msg("no group %s", name);
    return NULL;
}

static void test_method_groups(void **state) {
    Method method;
    ErrorMessage err = {{0}};
    const char *args[] = {"student_freeze_backbone_steps=5", "layerwise_decay=0.5"};
    if (make_method(&method, fixture_ref, args, 2, &err)) fail_msg("%s", err.text);
    assert_int_equal(method.group_count, 4);
    const MethodGroup *backbone = find_group(&method, "backbone");
    const MethodGroup *mask = find_group(&method, "mask_token");
    const MethodGroup *head = find_group(&method, "projection_head");
    const MethodGroup *last = find_group(&method, "last_layer");
    for (int g = 0; g < 4; g++) {
        assert_true(method.groups[g].frozen_at_zero_lr);
        assert_non_null(method.groups[g].lr_scales);
        assert_non_null(method.groups[g].weight_decays);
    }
    assert_int_equal(backbone->frozen_steps, 5);
    assert_int_equal(mask->frozen_steps, 5);
    assert_int_equal(head->frozen_steps, 0);
    assert_int_equal(last->frozen_steps, 1250);  // LightlyTrain's default
    // lr 0 while frozen, but active: the gradients still reach AdamW
    assert_true(method_group_active(backbone, 0));
    assert_float_equal(method_group_lr_factor(backbone, 4), 0.0f, 0);
    assert_float_equal(method_group_lr_factor(backbone, 5), 1.0f, 0);
    // 0.5^(2 + 1 - layer), the patch embedding x 0.2 more; the mask token at layer 0
    const ParameterSet *params = backbone->params;
    for (int i = 0; i < params->count; i++) {
        const char *name = params->params[i].name;
        double expected = strncmp(name, "blocks.1.", 9) == 0   ? 0.5
                          : strncmp(name, "blocks.0.", 9) == 0 ? 0.25
                          : strncmp(name, "norm.", 5) == 0     ? 1.0
                                                               : 0.125;
        if (strncmp(name, "patch_embed.", 12) == 0) expected *= 0.2;
        if (fabs(backbone->lr_scales[i] - expected) > 1e-7 * expected)
            fail_msg("%s: lr x %g, expected %g", name, (double)backbone->lr_scales[i], expected);
        assert_int_equal(backbone->weight_decays[i], dinov2_weight_decays(name));
    }
    assert_float_equal(mask->lr_scales[0], 0.125f, 0);
    assert_int_equal(mask->weight_decays[0], 1);
    // the trained weight_g, in the last layer's group, decayed at the head's lr
    assert_int_equal(last->params->count, 2);
    assert_string_equal(last->params->params[1].name, "last_layer.weight_g");
    for (int i = 0; i < 2; i++) {
        assert_float_equal(last->lr_scales[i], 1.0f, 0);
        assert_int_equal(last->weight_decays[i], 1);
    }
    for (int i = 0; i < head->params->count; i++)
        assert_float_equal(head->lr_scales[i], 1.0f, 0);
    method_free(&method);

    // norm_last_layer=true: weight_g fixed at 1, not a parameter
    const char *norm_last[] = {"norm_last_layer=true"};
    if (make_method(&method, fixture_ref, norm_last, 1, &err)) fail_msg("%s", err.text);
    assert_int_equal(find_group(&method, "last_layer")->params->count, 1);
    method_free(&method);
}

static void expect_arg_error(const char *arg, const char *fragment) {
    Method method;
    ErrorMessage err = {{0}};
    assert_int_equal(make_method(&method, fixture_ref, &arg, 1, &err), -1);
    if (!strstr(err.text, fragment)) fail_msg("'%s': message '%s' lacks '%s'", arg, err.text,
                                              fragment);
}

static void test_bad_args(void **state) {
    expect_arg_error("layerwise_decay=-0.9", "layerwise_decay=-0.9: expected a number in [0, 1]");
    expect_arg_error("patch_embed_lr_multiplier=inf",
                     "patch_embed_lr_multiplier=inf: expected a number in [0, 100]");
    expect_arg_error("teacher_temp_start=0.09", "need teacher_temp_start <= teacher_temp_end");
    expect_arg_error("student_freeze_backbone_steps=-1", "student_freeze_backbone_steps");
    expect_arg_error("norm_last_layer=maybe", "norm_last_layer=maybe: expected true or false");
}

// ---- a few AdamW steps against PyTorch ----------------------------------------------------

// The fixture init of tools/make_dinov2_groups_fixtures.py's init_rule.
static void init_rule(const char *name, float *offset, float *scale) {
    const size_t length = strlen(name);
    const int weight = length >= 6 && strcmp(name + length - 6, "weight") == 0;
    if ((length >= 8 && strcmp(name + length - 8, "weight_g") == 0) ||
        (strstr(name, "norm") && weight)) {
        *offset = 1.0f;
        *scale = 0.25f;
    } else {
        *offset = 0.0f;
        *scale = 0.5f;
    }
}

static void fill_fixture(Backend *backend, float *device, const char *key, float offset,
                         float scale, size_t count) {
    float host[MAX_FLOATS];
    assert_true(count <= MAX_FLOATS);
    fixture_fill(key, offset, scale, host, count);
    backend->op.upload(backend, device, host, count * sizeof(float));
}

static double fixture_f64_at(const SafeTensors *file, const char *name, int index, int count) {
    double values[8];
    assert_true(count <= 8);
    memcpy(values, safetensors_data(file, fixture_find_tensor(file, name, SAFE_F64, count)),
           (size_t)count * sizeof(double));
    return values[index];
}

static int fixture_count_prefix(const SafeTensors *file, const char *prefix) {
    int count = 0;
    for (int t = 0; t < file->count; t++)
        count += strncmp(file->tensors[t].name, prefix, strlen(prefix)) == 0;
    return count;
}

static void check_case(const SafeTensors *file, Backend *backend, const char *case_name) {
    char key[256];
    snprintf(key, sizeof key, "%s/config", case_name);
    const double lr = fixture_f64_at(file, key, 0, 8), min_lr = fixture_f64_at(file, key, 3, 8);
    const long warmup = (long)fixture_f64_at(file, key, 1, 8);
    const long steps = (long)fixture_f64_at(file, key, 2, 8);
    const double wd = fixture_f64_at(file, key, 4, 8), wd_end = fixture_f64_at(file, key, 5, 8);
    assert_int_equal(steps, FIXTURE_STEPS);
    char args_text[4][64];
    snprintf(args_text[0], sizeof args_text[0], "layerwise_decay=%.17g", fixture_f64_at(file, key, 6, 8));
    snprintf(args_text[1], sizeof args_text[1], "patch_embed_lr_multiplier=%.17g",
             fixture_f64_at(file, key, 7, 8));
    snprintf(key, sizeof key, "%s/freeze", case_name);
    snprintf(args_text[2], sizeof args_text[2], "student_freeze_last_layer_steps=%ld",
             (long)fixture_f64_at(file, key, 0, 2));
    snprintf(args_text[3], sizeof args_text[3], "student_freeze_backbone_steps=%ld",
             (long)fixture_f64_at(file, key, 1, 2));
    const char *args[4] = {args_text[0], args_text[1], args_text[2], args_text[3]};
    Method method;
    ErrorMessage err = {{0}};
    if (make_method(&method, backend, args, 4, &err)) fail_msg("%s", err.text);

    // The groups: every parameter of ours is in the fixture with LightlyTrain's
    // multiplier and decay, and the fixture has no other.
    Optimizer *optimizers[METHOD_MAX_GROUPS] = {0};
    const OptimizerConfig config = optimizer_config_default(OPTIMIZER_ADAMW);
    int total = 0;
    for (int g = 0; g < method.group_count; g++) {
        const MethodGroup *group = &method.groups[g];
        for (int i = 0; i < group->params->count; i++, total++) {
            const Parameter *param = &group->params->params[i];
            snprintf(key, sizeof key, "%s/lr_scale/%s/%s", case_name, group->name, param->name);
            const double scale = fixture_read_f64(file, key);
            snprintf(key, sizeof key, "%s/weight_decay/%s/%s", case_name, group->name,
                     param->name);
            const double decay = fixture_read_f64(file, key);
            if (fabs(group->lr_scales[i] - scale) > 1e-7 * scale ||
                group->weight_decays[i] != (decay != 0.0))
                fail_msg("%s %s: lr x %.9g decays %d; LightlyTrain lr x %.9g weight decay %g",
                         group->name, param->name, (double)group->lr_scales[i],
                         group->weight_decays[i], scale, decay);
            float offset, init_scale;
            init_rule(param->name, &offset, &init_scale);
            snprintf(key, sizeof key, "dinov2_groups/%s/%s", group->name, param->name);
            fill_fixture(backend, param->value, key, offset, init_scale, param->count);
        }
        optimizers[g] = optimizer_create(backend, group->params, &config, &err);
        if (!optimizers[g] || method_group_configure(group, optimizers[g], &err))
            fail_msg("%s: %s", group->name, err.text);
    }
    snprintf(key, sizeof key, "%s/lr_scale/", case_name);
    assert_int_equal(fixture_count_prefix(file, key), total);

    // The trainer's step: gradients, the gate over the active groups (clip
    // at 3), then each active group at lr x its factor, weight decay by the
    // cosine schedule.
    float grad_scale[FIXTURE_STEPS];
    memcpy(grad_scale, safetensors_data(file, fixture_find_tensor(file, "grad_scale", SAFE_F32,
                                                                  FIXTURE_STEPS)),
           sizeof grad_scale);
    StepGate gate;
    assert_int_equal(step_gate_create(&gate, backend, method.group_count, &err), 0);
    double worst = 0.0;
    for (long step = 0; step < steps; step++) {
        for (int g = 0; g < method.group_count; g++) {
            const ParameterSet *set = method.groups[g].params;
            for (int i = 0; i < set->count; i++) {
                snprintf(key, sizeof key, "dinov2_groups/grad/%ld/%s/%s", step + 1,
                         method.groups[g].name, set->params[i].name);
                fill_fixture(backend, set->params[i].grad, key, 0.0f, grad_scale[step],
                             set->params[i].count);
            }
        }
        step_gate_open(&gate);
        for (int g = 0; g < method.group_count; g++)
            if (method_group_active(&method.groups[g], step))
                step_gate_measure(&gate, g, method.groups[g].params);
        step_gate_close(&gate, 1.0f, NULL, FIXTURE_CLIP);
        StepGateReading reading;
        step_gate_read(&gate, 1.0f, &reading);
        snprintf(key, sizeof key, "%s/clip/%ld", case_name, step + 1);
        const double norm = fixture_read_f64(file, key);
        if (fabs(reading.gradient_norm - norm) > 1e-5 * norm)
            fail_msg("step %ld: gradient norm %.7g, Lightning's %.7g", step,
                     (double)reading.gradient_norm, norm);
        const double lr_now =
            lr * schedule_cosine_warmup(step, warmup, steps, 1.0, min_lr / lr);
        const float decay_now = (float)schedule_cosine(step, steps, wd, wd_end);
        for (int g = 0; g < method.group_count; g++)
            if (method_group_active(&method.groups[g], step))
                optimizer_step(optimizers[g],
                               (float)lr_now * method_group_lr_factor(&method.groups[g], step),
                               decay_now, step_gate_values(&gate));
        for (int g = 0; g < method.group_count; g++) {
            const ParameterSet *set = method.groups[g].params;
            for (int i = 0; i < set->count; i++) {
                const Parameter *param = &set->params[i];
                snprintf(key, sizeof key, "%s/step/%ld/%s/%s", case_name, step + 1,
                         method.groups[g].name, param->name);
                const float *expected =
                    safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32,
                                                               (int64_t)param->count));
                float ours[MAX_FLOATS], torch_values[MAX_FLOATS];
                memcpy(torch_values, expected, param->count * sizeof(float));
                backend->op.download(backend, ours, param->value, param->count * sizeof(float));
                // fp32 against fp32 PyTorch, as tests/test_optimizer.c: a few
                // ulps per step (fused multiply-adds, the order of the norm's
                // sum), carried into later steps by the moments.
                for (size_t k = 0; k < param->count; k++) {
                    const double diff = fabs((double)ours[k] - torch_values[k]);
                    const double ratio = diff / (1e-6 + 1e-5 * fabs(torch_values[k]));
                    if (!(ratio <= 1.0))
                        fail_msg("%s %s: step %ld [%zu] %.9g, PyTorch %.9g", backend->name, key,
                                 step + 1, k, (double)ours[k], (double)torch_values[k]);
                    if (ratio > worst) worst = ratio;
                }
            }
        }
    }
    printf("  %s %-16s worst %.3f of the tolerance\n", backend->name, case_name, worst);
    step_gate_free(&gate);
    for (int g = 0; g < method.group_count; g++) optimizer_free(optimizers[g]);
    method_free(&method);
}

static void test_matches_lightlytrain(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(GROUPS_FIXTURE, &file, &err)) fail_msg("%s", err.text);
    const char *cases[] = {"defaults", "frozen_backbone"};
    for (int c = 0; c < 2; c++) {
        check_case(&file, fixture_ref, cases[c]);
        check_case(&file, fixture_cpu, cases[c]);
    }
    safetensors_free(&file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layer_and_decay_rules),
        cmocka_unit_test(test_method_groups),
        cmocka_unit_test(test_bad_args),
        cmocka_unit_test(test_matches_lightlytrain),
    };
    return cmocka_run_group_tests(tests, fixture_backends_create, fixture_backends_destroy);
}
