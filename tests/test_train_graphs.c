// When a run's steps go to the device as CUDA graphs (train_graphs.c):
// LTC_CUDA_GRAPHS off by default, on only where the backend captures and
// the run's steps repeat (a method whose steps keep their shapes,
// no fault injection), the reason in the note when not; a bad value
// refused. And the kinds of a step's parts: the same for parts that queue
// the same work, another for another micro-batch, batch size, set of
// updated groups (not for a stop request: a staged input).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_run.h"

// The decision reads only whether the backend has the op (never calls it).
static int graph_begin_never_called(Backend *backend, uint64_t key) {
    fail_msg("train_graphs_decide called step_graph_begin");
    return STEP_GRAPH_EAGER;
}

typedef struct Fixture {
    Backend backend;
    TrainRun run;
} Fixture;

static void fixture_make(Fixture *f, int captures) {
    memset(f, 0, sizeof *f);
    if (captures) f->backend.op.step_graph_begin = graph_begin_never_called;
    f->run.backend = &f->backend;
    f->run.world_size = 1;
    f->run.accumulate = 1;
    unsetenv("LTC_FAULT");
}

// decide with LTC_CUDA_GRAPHS=value (NULL: unset): its status; the note
// must contain `note`.
static int decide(Fixture *f, const char *value, const char *note) {
    if (value)
        setenv("LTC_CUDA_GRAPHS", value, 1);
    else
        unsetenv("LTC_CUDA_GRAPHS");
    ErrorMessage err = {{0}};
    const int status = train_graphs_decide(&f->run, &err);
    if (status) {
        assert_non_null(strstr(err.text, note));
        return status;
    }
    if (!strstr(f->run.step_graphs_note, note))
        fail_msg("note '%s' lacks '%s'", f->run.step_graphs_note, note);
    return status;
}

static void test_off_unless_asked(void **state) {
    (void)state;
    Fixture f;
    fixture_make(&f, 1);
    assert_int_equal(decide(&f, NULL, "off (LTC_CUDA_GRAPHS=on captures"), 0);
    assert_int_equal(f.run.step_graphs, 0);
    assert_int_equal(decide(&f, "off", "off (LTC_CUDA_GRAPHS=on captures"), 0);
    assert_int_equal(f.run.step_graphs, 0);
    assert_int_equal(decide(&f, "on", "on (LTC_CUDA_GRAPHS=on)"), 0);
    assert_int_equal(f.run.step_graphs, 1);
    assert_int_equal(decide(&f, "1", "LTC_CUDA_GRAPHS=1: expected on or off"), -1);
}

static void test_runs_that_cannot_be_captured(void **state) {
    (void)state;
    Fixture f;
    fixture_make(&f, 0);
    decide(&f, "on", "off (LTC_CUDA_GRAPHS=on, but this backend runs ops as they are called)");
    assert_int_equal(f.run.step_graphs, 0);
    fixture_make(&f, 1);
    f.run.world_size = 2;  // the ranks capture their collectives too
    decide(&f, "on", "on (LTC_CUDA_GRAPHS=on)");
    assert_int_equal(f.run.step_graphs, 1);
    fixture_make(&f, 1);
    f.run.accumulate = 4;  // a graph per micro-batch
    decide(&f, "on", "on (LTC_CUDA_GRAPHS=on): a graph per micro-batch");
    assert_int_equal(f.run.step_graphs, 1);
    fixture_make(&f, 1);
    setenv("LTC_FAULT", "nan-gradient@2", 1);
    decide(&f, "on", "but LTC_FAULT changes the steps it fires in");
    assert_int_equal(f.run.step_graphs, 0);
    unsetenv("LTC_FAULT");
    unsetenv("LTC_CUDA_GRAPHS");
}

static uint64_t kind(const Fixture *f, long step, int micro, int images) {
    return train_step_part_kind(&f->run, step, micro, images);
}

static void test_step_kinds(void **state) {
    (void)state;
    Fixture f;
    fixture_make(&f, 1);
    f.run.accumulate = 3;
    f.run.method.group_count = 3;
    f.run.method.groups[2].frozen_steps = 5;  // e.g. DINO's last layer
    const uint64_t early = kind(&f, 0, 0, 8);
    assert_true(kind(&f, 4, 0, 8) == early);
    assert_true(kind(&f, 5, 0, 8) != early);  // the group joins
    assert_true(kind(&f, 5, 0, 8) == kind(&f, 900, 0, 8));
    assert_true(kind(&f, 0, 0, 7) != early);  // another batch size
    // Each micro-batch of a step is a kind; all differ from each other and
    // from the other steps' kinds. (A stop request is a staged input, not a
    // kind: train_agree_step.)
    uint64_t kinds[2][3];
    for (int frozen = 0; frozen < 2; frozen++)
        for (int micro = 0; micro < 3; micro++)
            kinds[frozen][micro] = kind(&f, frozen ? 0 : 5, micro, 8);
    const uint64_t *all = &kinds[0][0];
    for (int i = 0; i < 6; i++)
        for (int j = 0; j < i; j++) assert_true(all[i] != all[j]);
    // Frozen at learning rate 0 the group is updated all along: one kind.
    f.run.method.groups[2].frozen_at_zero_lr = 1;
    assert_true(kind(&f, 0, 2, 8) == kind(&f, 5, 2, 8));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_off_unless_asked),
        cmocka_unit_test(test_runs_that_cannot_be_captured),
        cmocka_unit_test(test_step_kinds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
