// The multi-tensor optimizer updates (backend.h sgd_update_segments,
// adamw_update_segments; one launch a step on the GPU) against ref's
// per-tensor updates, segment by segment: the same bits (the kernels share
// the per-element code and form each segment's lr and decay as the host
// does), elements between segments untouched, a skipping gate leaving all
// as it was. Segments of awkward sizes (1 element, an odd count, one over a
// block's grid-stride span) with their own lr multipliers and decay flags.
// The optimizer's use of them (optimizer.c, every SGD and AdamW step) is
// checked against PyTorch by test_optimizer's fixtures.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"

enum { SEGMENTS = 5, ARENA = 1 + 37 + 300 + 70001 + 513 + 40 };

// Five segments with gaps of 8 elements between them (never updated).
static void make_segments(UpdateSegment *segments) {
    const uint64_t counts[SEGMENTS] = {1, 37, 300, 70001, 513};
    const float scales[SEGMENTS] = {1.0f, 0.3f, 0.0f, 1.7f, 0.9f};
    uint64_t offset = 0;
    for (int i = 0; i < SEGMENTS; i++) {
        segments[i] = (UpdateSegment){.offset = offset, .count = counts[i],
                                      .lr_scale = scales[i], .decays = i % 2};
        offset += counts[i] + 8;
    }
}

// ref's per-tensor updates of the segments (the optimizer's loop before).
static void reference(int adamw, const UpdateSegment *segments, float *params, const float *grads,
                      const float *gate, float *m, float *v, const float *step, float lr,
                      float weight_decay) {
    for (int i = 0; i < SEGMENTS; i++) {
        const UpdateSegment *s = &segments[i];
        const float segment_lr = lr * s->lr_scale, decay = s->decays ? weight_decay : 0.0f;
        if (adamw)
            ref->op.adamw_update(ref, s->count, params + s->offset, grads + s->offset, gate,
                                 m + s->offset, v + s->offset, segment_lr, 0.9f, 0.999f, 1e-8f,
                                 decay, step);
        else
            ref->op.sgd_update(ref, s->count, params + s->offset, grads + s->offset, gate,
                               m + s->offset, segment_lr, 0.9f, decay, 1, 0);
    }
}

static void check_update(int adamw, int skip) {
    UpdateSegment *segments = mirror_buffer(SEGMENTS * sizeof *segments);
    make_segments(segments);
    const float *grads = mirror_random_tensor(ARENA, -1, 1, 10);
    float *params_ref = mirror_random_tensor(ARENA, -1, 1, 11);
    float *params_fast = mirror_copy(params_ref, ARENA);
    float *m_ref = mirror_random_tensor(ARENA, -0.1f, 0.1f, 12), *m_fast = mirror_copy(m_ref, ARENA);
    float *v_ref = mirror_random_tensor(ARENA, 0.0f, 0.01f, 13), *v_fast = mirror_copy(v_ref, ARENA);
    float *gate = mirror_tensor(GATE_FOUND + 1);
    memset(gate, 0, (GATE_FOUND + 1) * sizeof *gate);
    gate[GATE_MULTIPLIER] = 0.5f, gate[GATE_UNIT] = 1.0f, gate[GATE_SKIP] = (float)skip;
    float *step = mirror_tensor(1);
    step[0] = 3.0f;
    const float lr = 0.05f, weight_decay = 0.04f;
    reference(adamw, segments, params_ref, grads, gate, m_ref, v_ref, step, lr, weight_decay);
    if (adamw)
        fast->op.adamw_update_segments(fast, SEGMENTS, D(segments), D(params_fast), D(grads),
                                       D(gate), D(m_fast), D(v_fast), lr, 0.9f, 0.999f, 1e-8f,
                                       weight_decay, D(step));
    else
        fast->op.sgd_update_segments(fast, SEGMENTS, D(segments), D(params_fast), D(grads),
                                     D(gate), D(m_fast), lr, 0.9f, weight_decay, 1, 0);
    H(params_fast), H(m_fast);
    mirror_expect_close("params", ARENA, params_fast, params_ref, 0, 0);
    mirror_expect_close("first state", ARENA, m_fast, m_ref, 0, 0);
    if (adamw) {
        H(v_fast);
        mirror_expect_close("second state", ARENA, v_fast, v_ref, 0, 0);
    }
    // the gaps and, with a skipping gate, everything: as they were
    const float *start = mirror_random_tensor(ARENA, -1, 1, 11);
    for (int i = 0; i < SEGMENTS; i++) {
        const UpdateSegment *s = &segments[i];
        const size_t gap = s->offset + s->count;
        for (size_t k = gap; k < gap + 8 && k < ARENA; k++)
            assert_true(params_fast[k] == start[k]);
        if (skip)
            for (size_t k = s->offset; k < gap; k++) assert_true(params_fast[k] == start[k]);
    }
}

static void test_sgd_segments(void **state) {
    NEED_FAST_BACKEND();
    check_update(0, 0);
    check_update(0, 1);
}

static void test_adamw_segments(void **state) {
    NEED_FAST_BACKEND();
    check_update(1, 0);
    check_update(1, 1);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_sgd_segments, mirror_free),
        cmocka_unit_test_teardown(test_adamw_segments, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]);
}
