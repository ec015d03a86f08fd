// Tests of the communicator layer in one process: the single-process
// communicator and a NULL one behave as a world of one; failures are sticky
// (after one failed operation every later one fails with the first message
// and never reaches the engine again); MPI started without mpirun is a
// world of one and refuses a second initialisation. Several ranks:
// tests/e2e/comm_mpi.sh.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdlib.h>
#include <string.h>

#include "dist/comm.h"
#include "dist/comm_mpi.h"

static void test_single_and_null_are_a_world_of_one(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    Communicator *single = comm_single_create(&err);
    assert_non_null(single);
    Communicator *comms[2] = {single, NULL};
    for (int c = 0; c < 2; c++) {
        Communicator *comm = comms[c];
        assert_int_equal(comm_rank(comm), 0);
        assert_int_equal(comm_world_size(comm), 1);
        float values[3] = {1.5f, -2.0f, 7.0f};
        for (int op = COMM_SUM; op <= COMM_MAX; op++) {
            assert_int_equal(comm_all_reduce(comm, values, 3, (CommReduce)op, &err), 0);
            assert_true(values[0] == 1.5f && values[1] == -2.0f && values[2] == 7.0f);
        }
        float gathered[3] = {0};
        assert_int_equal(comm_all_gather(comm, values, gathered, 3, &err), 0);
        assert_memory_equal(gathered, values, sizeof values);
        char text[8] = "abc";
        assert_int_equal(comm_broadcast(comm, text, sizeof text, 0, &err), 0);
        assert_string_equal(text, "abc");
        assert_int_equal(comm_barrier(comm, &err), 0);
        comm_abort(comm, 1);  // a world of one: returns, the caller exits
    }
    assert_int_equal(comm_broadcast(single, NULL, 0, 1, &err), -1);
    assert_non_null(strstr(err.text, "broadcast from rank 1 in a world of 1"));
    comm_destroy(single);
    comm_destroy(NULL);
}

// A fake engine whose all_reduce fails once it is told to; counts calls.
static int engine_calls, engine_should_fail;

static int fake_all_reduce(Communicator *comm, float *buffer, size_t count, CommReduce op,
                           ErrorMessage *err) {
    engine_calls++;
    if (engine_should_fail) return comm_fail(comm, err, "rank %d: fake timeout", comm->rank);
    return 0;
}

static int fake_barrier(Communicator *comm, ErrorMessage *err) {
    engine_calls++;
    return 0;
}

static void test_failures_are_sticky(void **state) {
    (void)state;
    const CommOps ops = {.all_reduce = fake_all_reduce, .barrier = fake_barrier};
    Communicator comm = {.name = "fake", .rank = 1, .world_size = 2, .ops = &ops};
    ErrorMessage err = {{0}};
    float value = 1;
    assert_int_equal(comm_all_reduce(&comm, &value, 1, COMM_SUM, &err), 0);
    engine_should_fail = 1;
    assert_int_equal(comm_all_reduce(&comm, &value, 1, COMM_SUM, &err), -1);
    assert_string_equal(err.text, "rank 1: fake timeout");
    assert_true(comm.failed);
    engine_should_fail = 0;
    const int calls = engine_calls;
    memset(&err, 0, sizeof err);
    assert_int_equal(comm_barrier(&comm, &err), -1);
    assert_string_equal(err.text, "rank 1: fake timeout");
    assert_int_equal(comm_all_reduce(&comm, &value, 1, COMM_SUM, &err), -1);
    assert_int_equal(engine_calls, calls);  // the engine was not asked again
}

static void test_mpi_alone_is_a_world_of_one(void **state) {
    (void)state;
    ErrorMessage err = {{0}};
    if (!comm_mpi_available()) fail_msg("this build has no MPI: run 'make deps' and rebuild");
    Communicator *comm = comm_mpi_create(5.0, &err);
    if (!comm) fail_msg("comm_mpi_create: %s", err.text);
    assert_string_equal(comm->name, "mpi");
    assert_int_equal(comm_world_size(comm), 1);
    assert_int_equal(comm->local_world_size, 1);
    float values[2] = {3, 4}, gathered[2];
    assert_int_equal(comm_all_reduce(comm, values, 2, COMM_MEAN, &err), 0);
    assert_true(values[0] == 3 && values[1] == 4);
    assert_int_equal(comm_all_gather(comm, values, gathered, 2, &err), 0);
    assert_memory_equal(gathered, values, sizeof values);
    assert_int_equal(comm_barrier(comm, &err), 0);
    assert_null(comm_mpi_create(5.0, &err));  // MPI_Init happens once per process
    assert_non_null(strstr(err.text, "one MPI communicator per process"));
    comm_destroy(comm);
    assert_null(comm_mpi_create(5.0, &err));
    assert_non_null(strstr(err.text, "finalised"));
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_and_null_are_a_world_of_one),
        cmocka_unit_test(test_failures_are_sticky),
        cmocka_unit_test(test_mpi_alone_is_a_world_of_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
