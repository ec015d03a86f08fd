// DINOv2's student masking: the iBOT mask generator (ssl_methods/
// dinov2_masks.c: how many crops and patches, the index and weight lists,
// determinism by (seed, step)) and the ViT's mask-token substitution
// (vit_set_patch_mask): unmasked samples are untouched, a fully masked
// sample no longer sees its image, and the mask token's gradient matches
// finite differences through the whole model.
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
#include "gradcheck.h"
#include "nn/vit.h"
#include "ssl_methods/dinov2_masks.h"
#include "vit_fixture.h"

// ---- the mask generator -----------------------------------------------------------------

static void test_masks_follow_lightlytrain(void **state) {
    const Dinov2MaskConfig config = {.grid = 14, .ratio_min = 0.1f, .ratio_max = 0.5f,
                                     .probability = 0.5f};
    const int crops = 16, patches = 14 * 14;
    // the masked crops' ranges end at 0.1 + 0.4 (i + 1) / 8: int(196 x 0.15, 0.2, ... 0.5)
    const int capacity = dinov2_masks_capacity(&config, crops, 1);
    assert_int_equal(capacity, 29 + 39 + 49 + 58 + 68 + 78 + 88 + 98);
    int most = 0;
    float *mask = malloc((size_t)crops * patches * sizeof(float));
    float *weight = malloc((size_t)crops * patches * sizeof(float));
    int32_t *index = malloc((size_t)crops * patches * sizeof(int32_t));
    float *again = malloc((size_t)crops * patches * sizeof(float));
    assert_true(mask && weight && index && again);
    for (long step = 0; step < 20; step++) {
        const int masked = dinov2_masks_make(&config, crops, 7, step, mask, index, weight);
        assert_true(masked > 0 && masked <= capacity);
        if (masked > most) most = masked;
        int masked_crops = 0, listed = 0;
        for (int c = 0; c < crops; c++) {
            int count = 0;
            for (int p = 0; p < patches; p++) count += mask[c * patches + p] != 0.0f;
            if (count == 0) continue;
            masked_crops++;
            // int(P * uniform(0.1, 0.5)) at most, never more than half the crop
            assert_true(count <= patches / 2);
            for (int m = 0; m < masked; m++)
                if (index[m] / patches == c) {
                    assert_true(fabsf(weight[m] - 1.0f / (float)count) < 1e-7f);
                    assert_true(mask[index[m]] == 1.0f);
                    listed++;
                }
        }
        assert_int_equal(listed, masked);
        assert_int_equal(masked_crops, 8);  // int(16 * 0.5)
        for (int m = 1; m < masked; m++) assert_true(index[m] > index[m - 1]);
        dinov2_masks_make(&config, crops, 7, step, again, index, weight);
        assert_memory_equal(again, mask, (size_t)crops * patches * sizeof(float));
    }
    fprintf(stderr, "  most masked of 20 steps: %d, the bound %d\n", most, capacity);
    dinov2_masks_make(&config, crops, 7, 100, mask, index, weight);
    dinov2_masks_make(&config, crops, 7, 101, again, index, weight);
    assert_true(memcmp(again, mask, (size_t)crops * patches * sizeof(float)) != 0);
    free(mask), free(weight), free(index), free(again);
}

// Several ranks mask the global batch as one process: rank r's crop (v, i)
// is global crop v W B + i W + r (view-major crops, strided image shards);
// the ranks' masks together are one process's, each rank's index and
// weights are those of its own crops, and every rank knows the total.
static void test_ranks_mask_the_global_batch(void **state) {
    const Dinov2MaskConfig config = {.grid = 6, .ratio_min = 0.1f, .ratio_max = 0.5f,
                                     .probability = 0.5f};
    enum { VIEWS = 2, BATCH_PER_RANK = 3, PATCHES = 36, MOST = 3 * VIEWS * BATCH_PER_RANK };
    static float whole[MOST * PATCHES], global[MOST * PATCHES], mask[MOST * PATCHES];
    static float weight[MOST * PATCHES], again[MOST * PATCHES];
    static int32_t index[MOST * PATCHES];
    for (int world = 1; world <= 3; world++) {
        const int crops = VIEWS * BATCH_PER_RANK;
        const int capacity = dinov2_masks_capacity(&config, crops, world);
        int masked_crops_seen = 0;
        for (long step = 0; step < 10; step++) {
            const int whole_masked = dinov2_masks_make(&config, world * crops, 5, step, whole,
                                                       index, weight);
            int sum = 0;
            for (int r = 0; r < world; r++) {
                int total = -1;
                const int masked = dinov2_masks_make_rank(&config, VIEWS, BATCH_PER_RANK, world,
                                                          r, 5, step, global, mask, index,
                                                          weight, &total);
                assert_int_equal(total, whole_masked);
                assert_true(masked <= capacity);
                sum += masked;
                for (int v = 0; v < VIEWS; v++)
                    for (int i = 0; i < BATCH_PER_RANK; i++) {
                        const int local = v * BATCH_PER_RANK + i;
                        const int crop = v * world * BATCH_PER_RANK + i * world + r;
                        assert_memory_equal(mask + local * PATCHES, whole + crop * PATCHES,
                                            PATCHES * sizeof(float));
                        int count = 0;
                        for (int p = 0; p < PATCHES; p++) count += mask[local * PATCHES + p] != 0;
                        masked_crops_seen += count > 0;
                    }
                // the index and weights are what one process makes of these crops
                memcpy(again, mask, (size_t)crops * PATCHES * sizeof(float));
                int32_t own_index[MOST * PATCHES];
                float own_weight[MOST * PATCHES];
                int listed = 0;
                for (int c = 0; c < crops; c++) {
                    int count = 0;
                    for (int p = 0; p < PATCHES; p++) count += again[c * PATCHES + p] != 0;
                    for (int p = 0; p < PATCHES; p++)
                        if (again[c * PATCHES + p] != 0)
                            own_index[listed] = c * PATCHES + p,
                            own_weight[listed++] = 1.0f / (float)count;
                }
                assert_int_equal(listed, masked);
                assert_memory_equal(index, own_index, (size_t)masked * sizeof(int32_t));
                assert_memory_equal(weight, own_weight, (size_t)masked * sizeof(float));
            }
            assert_int_equal(sum, whole_masked);
        }
        assert_int_equal(masked_crops_seen, 10 * (int)(world * crops * 0.5f));
    }
}

static void test_no_masks_at_probability_zero(void **state) {
    const Dinov2MaskConfig config = {.grid = 4, .ratio_min = 0.1f, .ratio_max = 0.5f,
                                     .probability = 0.0f};
    float mask[8 * 16], weight[8 * 16];
    int32_t index[8 * 16];
    assert_int_equal(dinov2_masks_make(&config, 8, 1, 0, mask, index, weight), 0);
    for (int i = 0; i < 8 * 16; i++) assert_true(mask[i] == 0.0f);
}

// ---- the ViT's mask token ---------------------------------------------------------------

#define BATCH 2
#define SIZE 16  // 4 x 4 patches of 4 px

typedef struct MaskedVit {
    Backend *backend;
    Vit model;
    float *input, *mask, *token, *token_grad, *projection;
    size_t n_tokens;
} MaskedVit;

static void masked_vit_make(MaskedVit *w) {
    ErrorMessage err = {{0}};
    w->backend = backend_create("cpu", 2, &err);
    assert_non_null(w->backend);
    const VitConfig config = vit_fixture_config(4, 8, 0, 4, VIT_POS_INTERP_OFFSET);
    const VitInputShape shape = {BATCH, SIZE};
    if (vit_create(&w->model, w->backend, &config, &shape, 1, 3, &err)) fail_msg("%s", err.text);
    w->input = vit_fixture_input(w->backend, "masking", SIZE, BATCH);
    const int patches = 16, dim = 8;
    w->mask = calloc(BATCH * patches, sizeof(float));
    w->token = malloc(dim * sizeof(float));
    w->token_grad = calloc(dim, sizeof(float));
    w->n_tokens = (size_t)BATCH * vit_slot_tokens(&w->model, 0) * dim;
    w->projection = malloc(w->n_tokens * sizeof(float));
    assert_true(w->mask && w->token && w->token_grad && w->projection);
    for (int p = 0; p < patches; p++) w->mask[p] = 1.0f;  // sample 0 all masked, sample 1 none
    gradcheck_fill_uniform(w->token, dim, -1, 1, 5);
    gradcheck_fill_uniform(w->projection, w->n_tokens, -1, 1, 6);
}

static void masked_vit_free(MaskedVit *w) {
    vit_free(&w->model);
    w->backend->op.free(w->backend, w->input);
    free(w->mask), free(w->token), free(w->token_grad), free(w->projection);
    backend_destroy(w->backend);
}

static double masked_loss(void *context, const float *token) {
    MaskedVit *w = context;
    ErrorMessage err = {{0}};
    vit_set_patch_mask(&w->model, 0, w->mask, token, w->token_grad);
    if (vit_forward(&w->model, 0, BATCH, (const Act *)w->input, 1, &err)) fail_msg("%s", err.text);
    return gradcheck_project(w->n_tokens, (const float *)(vit_tokens(&w->model, 0)), w->projection);
}

static void test_mask_token_replaces_patches(void **state) {
    MaskedVit w;
    masked_vit_make(&w);
    ErrorMessage err = {{0}};
    const size_t per_sample = w.n_tokens / BATCH;
    float *plain = malloc(w.n_tokens * sizeof(float));
    assert_non_null(plain);
    assert_int_equal(vit_forward(&w.model, 0, BATCH, (const Act *)w.input, 1, &err), 0);
    memcpy(plain, vit_tokens(&w.model, 0), w.n_tokens * sizeof(float));
    masked_loss(&w, w.token);
    const float *masked = (const float *)(vit_tokens(&w.model, 0));
    // sample 1 has no mask: bit for bit the same; sample 0 changed
    assert_memory_equal(masked + per_sample, plain + per_sample, per_sample * sizeof(float));
    assert_true(memcmp(masked, plain, per_sample * sizeof(float)) != 0);
    // sample 0 is all mask: another image gives the same tokens
    float *other = vit_fixture_input(w.backend, "masking-other", SIZE, BATCH);
    assert_int_equal(vit_forward(&w.model, 0, BATCH, (const Act *)other, 1, &err), 0);
    assert_memory_equal(vit_tokens(&w.model, 0), masked, per_sample * sizeof(float));
    vit_set_patch_mask(&w.model, 0, NULL, NULL, NULL);  // off again
    assert_int_equal(vit_forward(&w.model, 0, BATCH, (const Act *)w.input, 1, &err), 0);
    assert_memory_equal(vit_tokens(&w.model, 0), plain, w.n_tokens * sizeof(float));
    w.backend->op.free(w.backend, other);
    free(plain);
    masked_vit_free(&w);
}

static void test_mask_token_gradient(void **state) {
    MaskedVit w;
    masked_vit_make(&w);
    ErrorMessage err = {{0}};
    masked_loss(&w, w.token);
    parameter_set_zero_grads(&w.model.params);
    memset(w.token_grad, 0, 8 * sizeof(float));
    if (vit_backward_tokens(&w.model, 0, (const Act *)w.projection, &err)) fail_msg("%s", err.text);
    float analytic[8];
    memcpy(analytic, w.token_grad, sizeof analytic);
    const GradcheckTolerance tolerance = {.step = 1e-2f, .rtol = 1e-2, .atol = 2e-3};
    assert_int_equal(gradcheck_compare("mask token", masked_loss, &w, w.token, 8, analytic,
                                       tolerance),
                     0);
    // the patch embedding gets no gradient through masked patches: with
    // every patch masked its weight gradient is 0
    for (int i = 0; i < 2 * 16; i++) w.mask[i] = 1.0f;
    masked_loss(&w, w.token);
    parameter_set_zero_grads(&w.model.params);
    if (vit_backward_tokens(&w.model, 0, (const Act *)w.projection, &err)) fail_msg("%s", err.text);
    const Parameter *patch = parameter_find(&w.model.params, "patch_embed.proj.weight");
    assert_non_null(patch);
    for (size_t i = 0; i < patch->count; i++) assert_true(patch->grad[i] == 0.0f);
    masked_vit_free(&w);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_masks_follow_lightlytrain),
        cmocka_unit_test(test_ranks_mask_the_global_batch),
        cmocka_unit_test(test_no_masks_at_probability_zero),
        cmocka_unit_test(test_mask_token_replaces_patches),
        cmocka_unit_test(test_mask_token_gradient),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
