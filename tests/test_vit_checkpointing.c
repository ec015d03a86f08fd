// Activation checkpointing of ViTs (vit.h: activation_checkpointing,
// train --activation-checkpointing): one training step of each method that
// trains a ViT, with it off and on, from the same weights and batch, gives
// the same loss, the same gradients of every group and the same weights
// after an optimizer update, bit for bit, and the student's activation
// arena shrinks. Methods: SimCLR on a DINOv3 ViT (RoPE rescaled per block,
// drop path 0.3 on the last blocks: the recompute must read the forward's
// draws, not draw again), DINO (global and local slots, resampled
// positions, a frozen EMA teacher, which ignores the option), DINOv2 (iBOT
// masks, local views) and distillation v3 (a ViT student, a ViT teacher).
// Backends: cpu (fp32), ref (fp32 and bf16), cuda in fp32, fp16 and bf16
// (on a GPU, or on the CPU emulation: tests/cuda_emu; skipped, reported,
// where neither is there). Every op of the three backends is deterministic,
// so equality is exact. Tiny models (width 32, 3 blocks, patch 8, 32 px)
// keep the emulation's cases to seconds.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "method_fixture.h"
#include "nn/backbone.h"
#include "nn/optimizer.h"
#include "ssl_methods/method.h"

enum { BATCH = 4, IMAGE = 32 };

static char teacher_path[64];
static char teacher_arg[96];

// A small ViT of the preset's kind: width 32, 2 heads, 3 blocks, patch 8.
static void tiny_vit(const char *preset, BackboneSpec *spec) {
    ErrorMessage err = {{0}};
    if (backbone_spec_parse(preset, IMAGE, spec, &err)) fail_msg("%s", err.text);
    VitConfig *c = &spec->vit;
    c->embed_dim = 32, c->heads = 2, c->depth = 3, c->mlp_hidden = 64, c->patch_size = 8;
    if (!c->rope) c->pos_grid = IMAGE / c->patch_size;
    vit_config_name(c);
}

typedef struct StepResult {
    float loss;
    int group_count;
    size_t count[METHOD_MAX_GROUPS];
    float *grads[METHOD_MAX_GROUPS];
    float *updated[METHOD_MAX_GROUPS];
    size_t arena_bytes;  // the student's first slot
} StepResult;

// One step (seed 3, step 0) then one optimizer update of every group.
static int step(const char *backend_name, ComputeDtype dtype, MethodKind kind, int checkpointing,
                StepResult *result) {
    Backend *backend = method_fixture_backend(backend_name, dtype);
    if (!backend) return -1;
    ViewSet views;
    method_default_views(kind, IMAGE, &views);
    if (kind == METHOD_DINO || kind == METHOD_DINOV2) view_set_multi_crop(&views, IMAGE / 2, 2);
    const char *args[4];
    MethodSetup setup = {.backend = backend, .batch = BATCH, .dataset_size = 100,
                         .total_steps = 10, .seed = 3, .args = args,
                         .arg_count = method_fixture_small_args(kind, teacher_arg, args)};
    tiny_vit(kind == METHOD_SIMCLR ? "dinov3/vitt16" : "vit_t16", &setup.backbone);
    if (kind == METHOD_SIMCLR) setup.backbone.vit.drop_path_rate = 0.3f;
    setup.backbone.activation_checkpointing = checkpointing;
    ErrorMessage err = {{0}};
    Method method;
    if (method_create(&method, kind, &setup, &views, &err)) fail_msg("%s", err.text);
    assert_int_equal(method.backbone.model.vit.activation_checkpointing, checkpointing);
    result->arena_bytes = method.backbone.model.vit.slots[0].arena_bytes;
    Optimizer *optimizers[METHOD_MAX_GROUPS];
    const OptimizerConfig config = optimizer_config_default(method.defaults.optimizer);
    result->group_count = method.group_count;
    for (int g = 0; g < method.group_count; g++) {
        parameter_set_zero_grads(method.groups[g].params);
        optimizers[g] = optimizer_create(backend, method.groups[g].params, &config, &err);
        if (!optimizers[g]) fail_msg("%s", err.text);
    }
    MethodFixtureBatch batch;
    method_fixture_batch(&method, BATCH, &batch);
    batch.batch.index = 5;  // keys the drop-path and RoPE draws
    if (method_upload_views(&method, &batch.batch, &err) ||
        method.ops->step(&method, 0, BATCH, &err))
        fail_msg("%s", err.text);
    result->loss = backend_read_scalar(backend, method_loss(&method));
    for (int g = 0; g < method.group_count; g++) {
        ParameterSet *params = method.groups[g].params;
        result->count[g] = params->total;
        result->grads[g] = method_fixture_download(backend, params->grads, params->total);
        optimizer_step(optimizers[g], 0.05f, 0.01f, NULL);
        result->updated[g] = method_fixture_download(backend, params->values, params->total);
        optimizer_free(optimizers[g]);
    }
    method_fixture_batch_free(&batch);
    method_free(&method);
    backend_destroy(backend);
    return 0;
}

static void result_free(StepResult *result) {
    for (int g = 0; g < result->group_count; g++) free(result->grads[g]), free(result->updated[g]);
}

static void assert_identical(const char *what, int group, const float *on, const float *off,
                             size_t n) {
    if (memcmp(on, off, n * sizeof *on) == 0) return;
    size_t i = 0;
    while (!memcmp(&on[i], &off[i], sizeof *on)) i++;
    fail_msg("group %d %s differ at %zu of %zu: %.9g with checkpointing, %.9g without", group,
             what, i, n, (double)on[i], (double)off[i]);
}

typedef struct Case {
    MethodKind kind;
    const char *backend;
    ComputeDtype dtype;
} Case;

// The step with checkpointing `every` (1: every block; 2: blocks 0 and 2
// of the 3, LightlyTrain's every_n_blocks, block 1 keeping its tensors and
// the last one not the last recomputed) equals the step without it.
static void expect_same_step(const Case *c, const StepResult *off, int every,
                             size_t *arena_bytes) {
    StepResult on;
    step(c->backend, c->dtype, c->kind, every, &on);
    print_message("%s %s %s, every %d: loss %.7g, student arena %zu -> %zu bytes\n",
                  method_kind_name(c->kind), c->backend, compute_dtype_name(c->dtype), every,
                  off->loss, off->arena_bytes, on.arena_bytes);
    assert_true(on.arena_bytes < off->arena_bytes);
    assert_memory_equal(&on.loss, &off->loss, sizeof on.loss);
    assert_int_equal(on.group_count, off->group_count);
    for (int g = 0; g < off->group_count; g++) {
        assert_int_equal(on.count[g], off->count[g]);
        assert_identical("gradients", g, on.grads[g], off->grads[g], off->count[g]);
        assert_identical("updated weights", g, on.updated[g], off->updated[g], off->count[g]);
    }
    *arena_bytes = on.arena_bytes;
    result_free(&on);
}

static void test_same_step(void **state) {
    const Case *c = *state;
    const int cuda = strcmp(c->backend, "cuda") == 0;
    // run_tests.sh's pass on the emulation runs the cuda cases only
    if (!cuda && getenv("LTC_TEST_CUDA_ONLY")) skip();
    StepResult off;
    if (step(c->backend, c->dtype, c->kind, 0, &off)) skip();
    size_t every_block = 0, every_other = 0;
    expect_same_step(c, &off, 1, &every_block);
    expect_same_step(c, &off, 2, &every_other);
    assert_true(every_block < every_other);  // block 1 keeps its own tensors
    result_free(&off);
}

// The random teacher of distillation (seed 1; width 64, 2 blocks, patch 8), written once.
static int write_teacher(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    BackboneSpec spec;
    if (backbone_spec_parse("vit_t16", IMAGE, &spec, &err)) return -1;
    spec.vit.embed_dim = 64, spec.vit.heads = 1, spec.vit.depth = 2, spec.vit.mlp_hidden = 128;
    spec.vit.patch_size = 8, spec.vit.pos_grid = IMAGE / 8;
    return method_fixture_write_teacher(&spec, IMAGE, teacher_path, teacher_arg);
}

static int remove_teacher(void **state) {
    (void)state;
    unlink(teacher_path);
    return 0;
}

#define CASE(label, kind, backend, dtype) \
    { label, test_same_step, NULL, NULL, &(Case){kind, backend, dtype} }
#define METHOD_CASES(name, kind)                                                  \
    CASE("test_" name "_cpu", kind, "cpu", COMPUTE_F32),                          \
        CASE("test_" name "_ref", kind, "ref", COMPUTE_F32),                      \
        CASE("test_" name "_ref_bf16", kind, "ref", COMPUTE_BF16),                \
        CASE("test_" name "_cuda", kind, "cuda", COMPUTE_F32),                    \
        CASE("test_" name "_cuda_fp16", kind, "cuda", COMPUTE_F16),               \
        CASE("test_" name "_cuda_bf16", kind, "cuda", COMPUTE_BF16)

int main(void) {
    const struct CMUnitTest tests[] = {
        METHOD_CASES("simclr_rope_drop_path", METHOD_SIMCLR),
        METHOD_CASES("dino", METHOD_DINO),
        METHOD_CASES("dinov2", METHOD_DINOV2),
        METHOD_CASES("distillation", METHOD_DISTILLATION),
    };
    return cmocka_run_group_tests_name("test_vit_checkpointing", tests, write_teacher,
                                       remove_teacher);
}
