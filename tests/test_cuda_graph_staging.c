// A step's staged host inputs (src/backend/staging.h) in a step captured
// once as a CUDA graph and replayed through the backend's step_graph_begin /
// step_graph_end (issue 32, docs/gpu.md "CUDA graphs"): a step stages a
// DINOv2-style token mask and a mixup permutation through one ring (two
// sites) and drop-path-style row scales through another, and runs the ops
// that read them (mask_tokens_forward, mixup, scale_rows). The first step of
// each half of the parameter block runs op by op (it makes the sites), the
// second is captured (no fence queried or waited for inside the capture: the
// driver refuses a query then), the rest replay with the host filling each
// step's inputs through staging_take (the copies are the graph's). Every
// step's outputs equal those of the same steps queued op by op bit for bit:
// the captured copies read the sites' fixed buffers, which hold the step's
// inputs. With a rotating ring (no fixed sites) the replays read other
// addresses (on the emulation, where every fence has passed, both sites of a
// ring share one buffer). Runs on the CUDA emulation (emu_tests.list) and on
// a GPU; skipped where no cuda backend can be made.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"

#ifdef LTC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/staging.h"

enum { BATCH = 4, TOKENS = 6, CHANNELS = 8, STEPS = 8, ROWS = BATCH * TOKENS, KIND = 3 };
enum { SAMPLE = TOKENS * CHANNELS, ELEMENTS = BATCH * SAMPLE };

// The device side of one run: inputs staged into, outputs (per step
// downloaded into `out`).
typedef struct Run {
    Staging tokens, rows;  // mask + permutation (two sites); row scales (one)
    float *mask, *scale;   // (ROWS) each
    int32_t *permutation;  // (BATCH)
    Act *masked, *mixed;   // (BATCH, TOKENS, CHANNELS)
    float *scaled;         // (ROWS, CHANNELS)
    float *mixed_float;    // mixed as floats, to download
    float out[STEPS][2][ELEMENTS];
} Run;

typedef struct Inputs {
    Act *x;
    float *rows_in, *token;  // (ROWS, CHANNELS); (CHANNELS)
} Inputs;

static void *device(Backend *b, size_t bytes) {
    void *memory = b->op.alloc(b, bytes);
    assert_non_null(memory);
    return memory;
}

static void run_init(Backend *b, Run *run) {
    memset(run, 0, sizeof *run);
    ErrorMessage err = {{0}};
    if (staging_init(&run->tokens, b, ROWS * sizeof(float), &err) ||
        staging_init(&run->rows, b, ROWS * sizeof(float), &err))
        fail_msg("%s", err.text);
    run->mask = device(b, ROWS * sizeof(float));
    run->scale = device(b, ROWS * sizeof(float));
    run->permutation = device(b, BATCH * sizeof(int32_t));
    run->masked = device(b, act_bytes(b, ELEMENTS));
    run->mixed = device(b, act_bytes(b, ELEMENTS));
    run->scaled = device(b, ELEMENTS * sizeof(float));
    run->mixed_float = device(b, ELEMENTS * sizeof(float));
}

static void run_free(Backend *b, Run *run) {
    staging_free(&run->tokens);
    staging_free(&run->rows);
    b->op.free(b, run->mask), b->op.free(b, run->scale), b->op.free(b, run->permutation);
    b->op.free(b, run->masked), b->op.free(b, run->mixed), b->op.free(b, run->scaled);
    b->op.free(b, run->mixed_float);
}

// Step `step`'s host inputs into the three sites (taken in step order) and
// their copies queued (a replayed step's queue points skip the copies: the
// graph holds them).
static void stage_inputs(Run *run, int step) {
    float *mask = staging_take(&run->tokens);
    for (int r = 0; r < ROWS; r++) mask[r] = (float)((r * 5 + step * 3) % 4 == 0);
    staging_upload(&run->tokens, run->mask, mask, ROWS * sizeof(float));
    int32_t *permutation = staging_take(&run->tokens);
    for (int i = 0; i < BATCH; i++) permutation[i] = (i + step + 1) % BATCH;
    staging_upload(&run->tokens, run->permutation, permutation, BATCH * sizeof(int32_t));
    float *scale = staging_take(&run->rows);
    for (int r = 0; r < ROWS; r++) scale[r] = (r + step) % 3 == 0 ? 0.0f : 1.0f + 0.25f * step;
    staging_upload(&run->rows, run->scale, scale, ROWS * sizeof(float));
}

// The step's ops, reading the staged inputs from device memory.
static void queue_ops(Backend *b, Run *run, const Inputs *in) {
    b->op.mask_tokens_forward(b, ROWS, CHANNELS, in->x, run->mask, in->token, run->masked);
    b->op.mixup(b, BATCH, SAMPLE, run->masked, run->permutation, 0.375f, run->mixed);
    b->op.scale_rows(b, ROWS, CHANNELS, in->rows_in, run->scale, run->scaled);
}

// The step's outputs to the host (waits for the device).
static void keep_outputs(Backend *b, Run *run, int step) {
    b->op.act_to_float(b, ELEMENTS, run->mixed, run->mixed_float);
    b->op.download(b, run->out[step][0], run->mixed_float, ELEMENTS * sizeof(float));
    b->op.download(b, run->out[step][1], run->scaled, ELEMENTS * sizeof(float));
}

static void test_staged_inputs_replayed(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    Backend *b = cuda_backend_create(0, &err);
    if (!b) {
        printf("skipped: no cuda backend (%s)\n", err.text);
        skip();
    }
    float *host = malloc(ELEMENTS * sizeof(float));
    assert_non_null(host);
    Inputs in = {device(b, act_bytes(b, ELEMENTS)), device(b, ELEMENTS * sizeof(float)),
                 device(b, CHANNELS * sizeof(float))};
    for (int i = 0; i < ELEMENTS; i++) host[i] = (float)((i * 7919) % 2001 - 1000) / 997.0f;
    float *x_float = device(b, ELEMENTS * sizeof(float));
    b->op.upload(b, x_float, host, ELEMENTS * sizeof(float));
    b->op.float_to_act(b, ELEMENTS, x_float, in.x);
    for (int i = 0; i < ELEMENTS; i++) host[i] = (float)((i * 104729) % 1999 - 999) / 1013.0f;
    b->op.upload(b, in.rows_in, host, ELEMENTS * sizeof(float));
    for (int c = 0; c < CHANNELS; c++) host[c] = 0.5f - 0.125f * (float)c;
    b->op.upload(b, in.token, host, CHANNELS * sizeof(float));

    Run *eager = malloc(sizeof *eager), *replayed = malloc(sizeof *replayed);
    assert_non_null(eager), assert_non_null(replayed);
    run_init(b, eager);
    run_init(b, replayed);
    for (int step = 0; step < STEPS; step++) {
        staging_step_begin(b);
        stage_inputs(eager, step);
        queue_ops(b, eager, &in);
        keep_outputs(b, eager, step);
    }

    const int expected[STEPS] = {STEP_GRAPH_EAGER,   STEP_GRAPH_EAGER,  STEP_GRAPH_CAPTURE,
                                 STEP_GRAPH_CAPTURE, STEP_GRAPH_REPLAY, STEP_GRAPH_REPLAY,
                                 STEP_GRAPH_REPLAY,  STEP_GRAPH_REPLAY};
    for (int step = 0; step < STEPS; step++) {
        staging_step_begin(b);
        assert_int_equal(b->op.step_graph_begin(b, KIND), expected[step]);
        stage_inputs(replayed, step);
        queue_ops(b, replayed, &in);
        if (b->op.step_graph_end(b, 1, &err)) fail_msg("%s", err.text);
        keep_outputs(b, replayed, step);
    }
    assert_int_equal(cuda_step_graph_replays(b), 4);
    assert_int_equal(replayed->tokens.shared + replayed->rows.shared, 0);
    for (int step = 0; step < STEPS; step++)
        for (int k = 0; k < 2; k++)
            assert_memory_equal(replayed->out[step][k], eager->out[step][k],
                                ELEMENTS * sizeof(float));
    // The steps differ (each step's inputs mattered).
    assert_memory_not_equal(eager->out[5][0], eager->out[6][0], ELEMENTS * sizeof(float));
    assert_memory_not_equal(eager->out[5][1], eager->out[6][1], ELEMENTS * sizeof(float));
    run_free(b, eager);
    run_free(b, replayed);
    free(eager), free(replayed);
    b->op.free(b, in.x), b->op.free(b, in.rows_in), b->op.free(b, in.token);
    b->op.free(b, x_float);
    free(host);
    b->destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {cmocka_unit_test(test_staged_inputs_replayed)};
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include "no_cuda_test.h"

int main(void) { return no_cuda_test_main(); }

#endif
