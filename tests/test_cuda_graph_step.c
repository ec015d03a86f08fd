// The training step as CUDA graphs through the backend's step_graph_begin /
// step_graph_end (src/backend/cuda/cuda_step_graph.c; issue 32, docs/gpu.md
// "CUDA graphs"). A step made of ops with each kind of per-step input a
// training step has (a staged permutation and mixup's weight, a softmax at
// a per-step scale, a linear layer through cuBLAS or cuBLASLt, the
// multi-tensor SGD update at a per-step learning rate with its first-step
// flag, a fill and a copy) runs STEPS times between begin and end: op by op
// for the first step of each half of the parameter block, captured for the
// second, replayed after. Every step's outputs equal STEPS steps queued op
// by op without begin and end, bit for bit, in fp32, fp16 and bf16. A
// replayed step that queues an op more than its capture is refused, naming
// the counts, and nothing of it runs; a step of another kind in between
// runs op by op and leaves the first kind's graphs as they were; memory
// freed makes every kind start again op by op. On the
// emulation, an operation queued while a replay's host side runs stops the
// program (emu_capture.cpp), so every op here is seen to have its queue
// point. Runs on the CUDA emulation (emu_tests.list) and on a GPU; skipped
// where no cuda backend can be made.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/backend.h"

#ifdef LTC_WITH_CUDA
#include "backend/cuda/cuda_backend.h"
#include "backend/staging.h"

enum { BATCH = 4, IN = 8, OUT = 16, STEPS = 8, KIND = 5 };
enum { OUTPUTS = BATCH * OUT };

// One run's device buffers; per step its softmax output and parameters
// are downloaded into `out`.
typedef struct Run {
    Staging staging;
    float *x_float, *y_float, *probs, *grads, *params, *momentum;
    Act *x, *mixed, *y;
    int32_t *permutation;
    float out[STEPS][2][OUTPUTS];
} Run;

typedef struct Shared {
    Act *w;              // (OUT, IN)
    float *bias, *gate;  // (OUT); an open gate
    UpdateSegment *segments;
} Shared;

static void *device(Backend *b, size_t bytes) {
    void *memory = b->op.alloc(b, bytes);
    assert_non_null(memory);
    return memory;
}

static float value(int i, int salt) {
    return (float)((i * 7919 + salt * 104729) % 2001 - 1000) / 997.0f;
}

static void run_init(Backend *b, Run *run) {
    memset(run, 0, sizeof *run);
    ErrorMessage err = {{0}};
    if (staging_init(&run->staging, b, BATCH * sizeof(int32_t), &err)) fail_msg("%s", err.text);
    run->x_float = device(b, BATCH * IN * sizeof(float));
    run->y_float = device(b, OUTPUTS * sizeof(float));
    run->probs = device(b, OUTPUTS * sizeof(float));
    run->grads = device(b, OUTPUTS * sizeof(float));
    run->params = device(b, OUTPUTS * sizeof(float));
    run->momentum = device(b, OUTPUTS * sizeof(float));
    run->x = device(b, act_bytes(b, BATCH * IN));
    run->mixed = device(b, act_bytes(b, BATCH * IN));
    run->y = device(b, act_bytes(b, OUTPUTS));
    run->permutation = device(b, BATCH * sizeof(int32_t));
    float host[OUTPUTS];
    for (int i = 0; i < OUTPUTS; i++) host[i] = value(i, 3);
    b->op.upload(b, run->params, host, sizeof host);
    b->op.zero(b, run->momentum, sizeof host);
}

static void run_free(Backend *b, Run *run) {
    staging_free(&run->staging);
    void *buffers[] = {run->x_float,  run->y_float, run->probs, run->grads, run->params,
                       run->momentum, run->x,       run->mixed, run->y,     run->permutation};
    for (size_t i = 0; i < sizeof buffers / sizeof *buffers; i++) b->op.free(b, buffers[i]);
}

// The step's input batch, as a batch copy would leave it (before the step).
static void load_batch(Backend *b, Run *run, int step) {
    float host[BATCH * IN];
    for (int i = 0; i < BATCH * IN; i++) host[i] = value(i, 11 + step);
    b->op.upload(b, run->x_float, host, sizeof host);
}

// Step `step`'s ops; `extra` queues one op more (a step of another shape).
static void queue_step(Backend *b, Run *run, const Shared *s, int step, int extra) {
    int32_t *permutation = staging_take(&run->staging);
    for (int i = 0; i < BATCH; i++) permutation[i] = (i + step + 1) % BATCH;
    staging_upload(&run->staging, run->permutation, permutation, BATCH * sizeof(int32_t));
    b->op.float_to_act(b, BATCH * IN, run->x_float, run->x);
    b->op.mixup(b, BATCH, IN, run->x, run->permutation, 0.25f + 0.0625f * (float)step, run->mixed);
    b->op.linear_forward(b, BATCH, IN, OUT, run->mixed, s->w, s->bias, run->y);
    b->op.act_to_float(b, OUTPUTS, run->y, run->y_float);
    b->op.softmax_forward(b, BATCH, OUT, run->y_float, 1.0f / (0.5f + 0.125f * (float)step),
                          run->probs);
    b->op.copy(b, run->grads, run->probs, OUTPUTS * sizeof(float));
    if (extra) b->op.fill(b, run->grads, 0.5f, 1);
    b->op.sgd_update_segments(b, 1, s->segments, run->params, run->grads, s->gate, run->momentum,
                              0.1f / (float)(step + 1), 0.9f, 1e-3f, 0, step == 0);
}

static void keep_outputs(Backend *b, Run *run, int step) {
    b->op.download(b, run->out[step][0], run->probs, OUTPUTS * sizeof(float));
    b->op.download(b, run->out[step][1], run->params, OUTPUTS * sizeof(float));
}

static Shared shared_make(Backend *b) {
    Shared s = {device(b, act_bytes(b, OUT * IN)), device(b, OUT * sizeof(float)),
                device(b, (GATE_FOUND + 1) * sizeof(float)), device(b, sizeof(UpdateSegment))};
    float host[OUT * IN];
    for (int i = 0; i < OUT * IN; i++) host[i] = 0.25f * value(i, 5);
    float *w_float = device(b, sizeof host);
    b->op.upload(b, w_float, host, sizeof host);
    b->op.float_to_act(b, OUT * IN, w_float, s.w);
    b->op.synchronize(b);
    b->op.free(b, w_float);
    for (int i = 0; i < OUT; i++) host[i] = 0.1f * value(i, 7);
    b->op.upload(b, s.bias, host, OUT * sizeof(float));
    float gate[GATE_FOUND + 1] = {0};
    gate[GATE_MULTIPLIER] = gate[GATE_UNIT] = gate[GATE_APPLIED] = 1.0f;
    b->op.upload(b, s.gate, gate, sizeof gate);
    const UpdateSegment segment = {.offset = 0, .count = OUTPUTS, .lr_scale = 1.0f, .decays = 1};
    b->op.upload(b, s.segments, &segment, sizeof segment);
    return s;
}

static void shared_free(Backend *b, Shared *s) {
    b->op.free(b, s->w), b->op.free(b, s->bias), b->op.free(b, s->gate);
    b->op.free(b, s->segments);
}

static Backend *make_cuda(ComputeDtype dtype) {
    ErrorMessage err = {{0}};
    Backend *b = cuda_backend_create(0, &err);
    if (!b) {
        printf("skipped: no cuda backend (%s)\n", err.text);
        return NULL;
    }
    if (backend_set_compute_dtype(b, dtype, &err)) fail_msg("%s", err.text);
    return b;
}

static void check_steps(ComputeDtype dtype) {
    Backend *b = make_cuda(dtype);
    if (!b) skip();
    Shared s = shared_make(b);
    Run *eager = malloc(sizeof *eager), *graphs = malloc(sizeof *graphs);
    assert_non_null(eager), assert_non_null(graphs);
    run_init(b, eager);
    run_init(b, graphs);
    for (int step = 0; step < STEPS; step++) {
        staging_step_begin(b);
        load_batch(b, eager, step);
        queue_step(b, eager, &s, step, 0);
        keep_outputs(b, eager, step);
    }
    ErrorMessage err = {{0}};
    const int expected[STEPS] = {STEP_GRAPH_EAGER,   STEP_GRAPH_EAGER,  STEP_GRAPH_CAPTURE,
                                 STEP_GRAPH_CAPTURE, STEP_GRAPH_REPLAY, STEP_GRAPH_REPLAY,
                                 STEP_GRAPH_REPLAY,  STEP_GRAPH_REPLAY};
    for (int step = 0; step < STEPS; step++) {
        staging_step_begin(b);
        load_batch(b, graphs, step);
        assert_int_equal(b->op.step_graph_begin(b, KIND), expected[step]);
        queue_step(b, graphs, &s, step, 0);
        assert_int_equal(b->op.step_graph_end(b, 1, &err), 0);
        keep_outputs(b, graphs, step);
    }
    for (int step = 0; step < STEPS; step++)
        for (int k = 0; k < 2; k++)
            assert_memory_equal(graphs->out[step][k], eager->out[step][k], OUTPUTS * sizeof(float));
    // The per-step inputs mattered: the steps' outputs differ.
    assert_memory_not_equal(eager->out[5][0], eager->out[6][0], OUTPUTS * sizeof(float));
    assert_int_equal(cuda_step_graph_replays(b), 4);

    // Another kind in between runs op by op; the first kind still replays.
    staging_step_begin(b);
    assert_int_equal(b->op.step_graph_begin(b, KIND + 1), STEP_GRAPH_EAGER);
    queue_step(b, graphs, &s, 1, 0);
    assert_int_equal(b->op.step_graph_end(b, 1, &err), 0);
    staging_step_begin(b);
    assert_int_equal(b->op.step_graph_begin(b, KIND), STEP_GRAPH_REPLAY);
    queue_step(b, graphs, &s, 2, 0);
    assert_int_equal(b->op.step_graph_end(b, 1, &err), 0);

    // A step of the kind with an op more: refused, nothing of it runs.
    float before[OUTPUTS], after[OUTPUTS];
    b->op.download(b, before, graphs->params, sizeof before);
    staging_step_begin(b);
    assert_int_equal(b->op.step_graph_begin(b, KIND), STEP_GRAPH_REPLAY);
    queue_step(b, graphs, &s, 3, 1);
    assert_int_equal(b->op.step_graph_end(b, 1, &err), -1);
    const char *counts = strstr(err.text, "passed ");
    long passed = 0, captured = 0;
    assert_non_null(counts);
    assert_int_equal(sscanf(counts, "passed %ld queue points where its captured graph has %ld",
                            &passed, &captured),
                     2);
    assert_int_equal(passed, captured + 1);
    b->op.download(b, after, graphs->params, sizeof after);
    assert_memory_equal(after, before, sizeof before);

    // Memory freed: a graph may have read it, so every kind starts again.
    b->op.free(b, device(b, 256));
    staging_step_begin(b);
    assert_int_equal(b->op.step_graph_begin(b, KIND), STEP_GRAPH_EAGER);
    queue_step(b, graphs, &s, 4, 0);
    assert_int_equal(b->op.step_graph_end(b, 1, &err), 0);

    run_free(b, eager);
    run_free(b, graphs);
    free(eager), free(graphs);
    shared_free(b, &s);
    b->destroy(b);
}

// A call that cannot be captured, inside a step's capture (a wait for the
// device here): the one-line error names the call and says how to run
// without graphs, exit status 1. In a child process that makes the first
// CUDA context of this program (the test runs first: CUDA does not carry
// a context across fork).
static void test_capture_failure_says_how_to_run_without(void **state) {
    (void)state;
    int pipe_ends[2];
    assert_int_equal(pipe(pipe_ends), 0);
    const pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dup2(pipe_ends[1], STDERR_FILENO);
        dup2(pipe_ends[1], STDOUT_FILENO);
        ErrorMessage err = {{0}};
        Backend *b = cuda_backend_create(0, &err);
        if (!b) {
            printf("skipped: no cuda backend (%s)\n", err.text);
            _exit(77);
        }
        for (int step = 0; step < 2; step++) {  // op by op, one per half
            b->op.step_graph_begin(b, KIND);
            b->op.step_graph_end(b, 1, &err);
        }
        if (b->op.step_graph_begin(b, KIND) != STEP_GRAPH_CAPTURE) _exit(3);
        b->op.synchronize(b);
        _exit(0);  // not reached: the wait is refused inside the capture
    }
    close(pipe_ends[1]);
    char output[2048] = "";
    size_t used = 0;
    ssize_t got;
    while ((got = read(pipe_ends[0], output + used, sizeof output - 1 - used)) > 0)
        used += (size_t)got;
    output[used] = '\0';
    close(pipe_ends[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_true(WIFEXITED(status));
    if (WEXITSTATUS(status) == 77) {
        printf("%s", output);
        skip();
    }
    if (WEXITSTATUS(status) != 1 ||
        !strstr(output, "cudaStreamSynchronize") ||
        !strstr(output, "while a step was captured as a CUDA graph: LTC_CUDA_GRAPHS=off runs "
                        "every step op by op"))
        fail_msg("exit %d, output: %s", WEXITSTATUS(status), output);
}

static void test_steps_fp32(void **state) {
    (void)state;
    check_steps(COMPUTE_F32);
}

static void test_steps_fp16(void **state) {
    (void)state;
    check_steps(COMPUTE_F16);
}

static void test_steps_bf16(void **state) {
    (void)state;
    check_steps(COMPUTE_BF16);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_capture_failure_says_how_to_run_without),  // first: see there
        cmocka_unit_test(test_steps_fp32),
        cmocka_unit_test(test_steps_fp16),
        cmocka_unit_test(test_steps_bf16),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}

#else

#include "no_cuda_test.h"

int main(void) { return no_cuda_test_main(); }

#endif
