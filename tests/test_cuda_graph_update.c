// The cuda backend's multi-tensor optimizer updates captured once as a CUDA
// graph and replayed (issue 32's groundwork, docs/gpu.md "CUDA graphs"):
// three replays, with the per-step parameter block (cuda_step_params.c:
// learning rate, weight decay, SGD's first-step flag) rewritten on the host
// before each, give the same bits as three steps queued op by op with the
// scheduled values. Were a per-step scalar a kernel argument, the replays
// would all use the captured step's value (the emulation keeps a captured
// kernel's arguments as CUDA does: test_emu_graphs). Runs on the CUDA
// emulation (emu_tests.list) and on a GPU; skipped where no cuda backend
// can be made.
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
#include <cuda_runtime_api.h>

#include "backend/cuda/cuda_backend.h"

enum { SEGMENTS = 3, TOTAL = 1 + 8 + 300 + 8 + 5000, STEPS = 3 };

static const float kLr[STEPS] = {0.05f, 0.0371f, 0.0123f};
static const float kDecay[STEPS] = {0.04f, 0.031f, 0.0f};

typedef struct Slabs {
    float *params, *m, *v, *applied;
} Slabs;

static float *device_copy(Backend *b, const float *host, size_t n) {
    float *device = b->op.alloc(b, n * sizeof(float));
    assert_non_null(device);
    b->op.upload(b, device, host, n * sizeof(float));
    return device;
}

static Slabs make_slabs(Backend *b, const float *params, const float *zeros) {
    return (Slabs){device_copy(b, params, TOTAL), device_copy(b, zeros, TOTAL),
                   device_copy(b, zeros, TOTAL), device_copy(b, zeros, 1)};
}

// One step as optimizer.c queues it: the applied-step count, then the update.
static void queue_step(Backend *b, int adamw, const UpdateSegment *segments, const float *grads,
                       const float *gate, Slabs *s, int step) {
    b->op.scalar_combine(b, 1.0f, s->applied, 1.0f, gate + GATE_APPLIED, 1.0f, s->applied);
    if (adamw)
        b->op.adamw_update_segments(b, SEGMENTS, segments, s->params, grads, gate, s->m, s->v,
                                    kLr[step], 0.9f, 0.999f, 1e-8f, kDecay[step], s->applied);
    else
        b->op.sgd_update_segments(b, SEGMENTS, segments, s->params, grads, gate, s->m, kLr[step],
                                  0.9f, kDecay[step], 1, step == 0);
}

static void check_replay(Backend *b, int adamw) {
    const UpdateSegment host_segments[SEGMENTS] = {
        {.offset = 0, .count = 1, .lr_scale = 1.0f, .decays = 1},
        {.offset = 9, .count = 300, .lr_scale = 0.3f, .decays = 0},
        {.offset = 317, .count = 5000, .lr_scale = 1.7f, .decays = 1}};
    float *host = malloc(TOTAL * sizeof(float)), *zeros = calloc(TOTAL, sizeof(float));
    float *eager_out = malloc(TOTAL * sizeof(float)), *replay_out = malloc(TOTAL * sizeof(float));
    assert_non_null(host), assert_non_null(zeros), assert_non_null(eager_out),
        assert_non_null(replay_out);
    for (int i = 0; i < TOTAL; i++) host[i] = (float)((i * 7919) % 2001 - 1000) / 997.0f;
    float *grads = device_copy(b, host, TOTAL);
    for (int i = 0; i < TOTAL; i++) host[i] = (float)((i * 104729) % 1999 - 999) / 1013.0f;
    UpdateSegment *segments = b->op.alloc(b, sizeof host_segments);
    b->op.upload(b, segments, host_segments, sizeof host_segments);
    float gate_host[GATE_FOUND + 1] = {0};
    gate_host[GATE_MULTIPLIER] = gate_host[GATE_UNIT] = gate_host[GATE_APPLIED] = 1.0f;
    float *gate = device_copy(b, gate_host, GATE_FOUND + 1);
    Slabs eager = make_slabs(b, host, zeros), replayed = make_slabs(b, host, zeros);

    for (int step = 0; step < STEPS; step++) queue_step(b, adamw, segments, grads, gate, &eager, step);

    // Capture step 0 once: its block slots are the first of a half.
    cudaStream_t stream = (cudaStream_t)cuda_backend_stream(b);
    cuda_step_params_begin(b);
    assert_int_equal(cudaStreamBeginCapture(stream, cudaStreamCaptureModeGlobal), cudaSuccess);
    queue_step(b, adamw, segments, grads, gate, &replayed, 0);
    cudaGraph_t graph = NULL;
    cudaGraphExec_t exec = NULL;
    assert_int_equal(cudaStreamEndCapture(stream, &graph), cudaSuccess);
    assert_int_equal(cudaGraphInstantiate(&exec, graph, 0), cudaSuccess);
    int used = 0;
    float *block = cuda_step_params_host(b, &used);
    assert_int_equal(used, adamw ? 2 : 3);
    for (int step = 0; step < STEPS; step++) {
        b->op.synchronize(b);  // the last replay's copy has read the block
        block[0] = kLr[step], block[1] = kDecay[step];
        if (!adamw) block[2] = step == 0 ? 1.0f : 0.0f;
        assert_int_equal(cudaGraphLaunch(exec, stream), cudaSuccess);
    }
    b->op.download(b, eager_out, eager.params, TOTAL * sizeof(float));
    b->op.download(b, replay_out, replayed.params, TOTAL * sizeof(float));
    assert_memory_equal(replay_out, eager_out, TOTAL * sizeof(float));
    b->op.download(b, eager_out, eager.m, TOTAL * sizeof(float));
    b->op.download(b, replay_out, replayed.m, TOTAL * sizeof(float));
    assert_memory_equal(replay_out, eager_out, TOTAL * sizeof(float));
    cudaGraphExecDestroy(exec);
    cudaGraphDestroy(graph);
    Slabs all[2] = {eager, replayed};
    for (int k = 0; k < 2; k++) {
        b->op.free(b, all[k].params), b->op.free(b, all[k].m), b->op.free(b, all[k].v);
        b->op.free(b, all[k].applied);
    }
    b->op.free(b, grads), b->op.free(b, segments), b->op.free(b, gate);
    free(host), free(zeros), free(eager_out), free(replay_out);
}

static Backend *make_cuda(void) {
    ErrorMessage err = {0};
    Backend *b = cuda_backend_create(0, &err);
    if (!b) {
        printf("skipped: no cuda backend (%s)\n", err.text);
        return NULL;
    }
    return b;
}

static void test_sgd_update_replayed(void **state) {
    (void)state;
    Backend *b = make_cuda();
    if (!b) skip();
    check_replay(b, 0);
    b->destroy(b);
}

static void test_adamw_update_replayed(void **state) {
    (void)state;
    Backend *b = make_cuda();
    if (!b) skip();
    check_replay(b, 1);
    b->destroy(b);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sgd_update_replayed),
        cmocka_unit_test(test_adamw_update_replayed),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include "no_cuda_test.h"

int main(void) { return no_cuda_test_main(); }

#endif
