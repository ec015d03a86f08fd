// Frozen ViTs (src/nn/vit.h: frozen, vit_keep_block_outputs): the eval and
// training forwards of a frozen model, which reuses one set of block tensors
// and keeps only the outputs it is asked for, give bit for bit the tokens,
// features and kept block outputs of a training model's same forward, for
// GELU and SwiGLU MLPs, registers, RoPE, at the native and a resampled
// size, before and after its arenas are laid out again; block outputs that
// are not kept are refused; the arena grows by exactly the kept outputs.
// Runs on the cpu and ref backends.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture_init.h"
#include "nn/vit.h"
#include "vit_fixture.h"

#define BATCH 2
#define DEPTH 5  // block outputs alternate between two buffers over more than one cycle

static Backend *backend;

static int setup(const char *name) {
    ErrorMessage err = {{0}};
    backend = backend_create(name, 2, &err);
    return backend ? 0 : -1;
}
static int setup_cpu(void **state) { return setup("cpu"); }
static int setup_ref(void **state) { return setup("ref"); }
static int teardown(void **state) {
    backend_destroy(backend);
    return 0;
}

// Slots: 32 px (grid 4, the native one of the position grid) and 24 px (grid 3).
static const int sizes[2] = {32, 24};

// A model of config with fixture-init weights (the same values for every
// model of the config), frozen or not, two slots.
static void build(Vit *model, const VitConfig *config, int frozen) {
    ErrorMessage err = {{0}};
    const VitInputShape shapes[2] = {{BATCH, sizes[0]}, {BATCH, sizes[1]}};
    if (vit_declare(model, backend, config, &err)) fail_msg("%s", err.text);
    model->frozen = frozen;
    if (vit_allocate(model, shapes, 2, &err) || vit_fixture_init_weights(&model->params, &err))
        fail_msg("%s", err.text);
}

// Host copy of n floats of backend memory.
static float *download(const float *values, size_t n) {
    float *host = malloc(n * sizeof *host);
    backend->op.download(backend, host, values, n * sizeof *host);
    return host;
}

static void assert_same(const char *what, const float *a, const float *b, size_t n) {
    float *x = download(a, n), *y = download(b, n);
    if (memcmp(x, y, n * sizeof *x) != 0) {
        size_t i = 0;
        while (x[i] == y[i]) i++;
        fail_msg("%s differs at %zu: %.9g, training model %.9g", what, i, x[i], y[i]);
    }
    free(x);
    free(y);
}

// Eval forwards, then training forwards (an EMA teacher's: RoPE rescaled
// per block, drawn from the same key), of both models on both slots: the
// tokens, features and the frozen model's kept block outputs bit for bit
// the training model's; a block before them refused.
static void compare_forwards(Vit *frozen, Vit *training, int kept) {
    ErrorMessage err = {{0}};
    const int dim = frozen->feature_dim;
    for (int pass = 0; pass < 4; pass++) {
        const int slot = pass % 2, train = pass / 2;
        if (train) {
            vit_set_draw_key(frozen, 11);
            vit_set_draw_key(training, 11);
        }
        const size_t n = (size_t)BATCH * sizes[slot] * sizes[slot] * 3;
        float *pixels = malloc(n * sizeof *pixels);
        fixture_fill("frozen/input", 0.0f, 1.0f, pixels, n);
        float *input = backend->op.alloc(backend, n * sizeof *input);
        backend->op.upload(backend, input, pixels, n * sizeof *pixels);
        if (vit_forward(training, slot, BATCH, (const Act *)input, train, &err) ||
            vit_forward(frozen, slot, BATCH, (const Act *)input, train, &err))
            fail_msg("%s", err.text);
        const size_t tokens = (size_t)BATCH * vit_slot_tokens(frozen, slot) * dim;
        assert_same("tokens", (const float *)(vit_tokens(frozen, slot)),
                    (const float *)(vit_tokens(training, slot)), tokens);
        assert_same("features", (const float *)(vit_features(frozen, slot)),
                    (const float *)(vit_features(training, slot)), (size_t)BATCH * dim);
        for (int b = DEPTH - kept; b < DEPTH; b++)
            assert_same("a kept block output", (const float *)frozen->slots[slot].blocks[b].out,
                        (const float *)training->slots[slot].blocks[b].out, tokens);
        float *out = backend->op.alloc(backend, tokens * sizeof *out);
        if (kept)
            assert_int_equal(vit_block_tokens(frozen, slot, DEPTH - kept, (Act *)out, &err), 0);
        if (kept < DEPTH) {
            assert_int_equal(vit_block_tokens(frozen, slot, DEPTH - kept - 1, (Act *)out, &err),
                             -1);
            assert_non_null(strstr(err.text, "is not kept"));
        }
        backend->op.free(backend, out);
        backend->op.free(backend, input);
        free(pixels);
    }
}

// Frozen with no kept outputs, then keeping `kept` (arenas laid out again:
// positions' resampling map and RoPE tables uploaded anew), against the
// training model.
static void check_config(VitConfig config, int kept) {
    ErrorMessage err = {{0}};
    config.depth = DEPTH;
    vit_config_name(&config);
    Vit frozen, training;
    build(&frozen, &config, 1);
    build(&training, &config, 0);
    frozen.seed = training.seed = 5;  // what the training forwards' draws are keyed by
    assert_null(frozen.params.grads);
    compare_forwards(&frozen, &training, 0);
    const size_t before = frozen.slots[0].arena_bytes;
    const size_t rows = (size_t)BATCH * frozen.slots[0].tokens;
    // one block output, rounded up to the arena's 64-byte slices
    const size_t output = (act_bytes(frozen.backend, rows * config.embed_dim) + 63) / 64 * 64;
    if (vit_keep_block_outputs(&frozen, kept, &err)) fail_msg("%s", err.text);
    // kept outputs of their own; two alternating ones while blocks remain before them
    const size_t alternating = DEPTH - kept >= 2 ? 2 : (size_t)(DEPTH - kept);
    assert_int_equal(frozen.slots[0].arena_bytes, before + (kept + alternating - 2) * output);
    compare_forwards(&frozen, &training, kept);
    // after a training forward, still nothing to run a backward from
    assert_int_equal(vit_backward(&frozen, 0, vit_features(&frozen, 0), &err), -1);
    assert_non_null(strstr(err.text, "keeps nothing for backward"));
    assert_int_equal(vit_keep_block_outputs(&frozen, DEPTH + 1, &err), -1);
    assert_int_equal(vit_keep_block_outputs(&training, 1, &err), -1);
    assert_non_null(strstr(err.text, "only a frozen model"));
    vit_free(&frozen);
    vit_free(&training);
}

// DINOv2's: GELU, class-token position, offset resampling at 24 px.
static void test_gelu(void **state) {
    check_config(vit_fixture_config(8, 16, 0, 4, VIT_POS_INTERP_OFFSET), 2);
}

// ViT-g's SwiGLU with registers, every block output kept.
static void test_swiglu_registers(void **state) {
    VitConfig config = vit_fixture_config(8, 16, 4, 4, VIT_POS_INTERP_ANTIALIAS);
    config.swiglu = 1;
    config.mlp_hidden = 24;
    check_config(config, DEPTH);
}

// DINOv3's RoPE (tables per slot, rebuilt with the arenas), the last block kept.
static void test_rope(void **state) {
    VitConfig config = vit_fixture_config(8, 16, 4, 0, VIT_POS_INTERP_OFFSET);
    config.class_pos = 0;
    config.rope = 1;
    config.rope_base = 100.0f;
    config.rope_rescale = 2.0f;
    config.norm_eps = 1e-5f;
    check_config(config, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gelu),
        cmocka_unit_test(test_swiglu_registers),
        cmocka_unit_test(test_rope),
    };
    int failures = cmocka_run_group_tests_name("vit frozen cpu", tests, setup_cpu, teardown);
    failures += cmocka_run_group_tests_name("vit frozen ref", tests, setup_ref, teardown);
    return failures;
}
