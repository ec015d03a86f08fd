// Tests of the communicator layer in one process: the single-process
// communicator and a NULL one behave as a world of one; failures are sticky
// (after one failed operation every later one fails with the first message
// and never reaches the engine again); MPI started without mpirun is a
// world of one and refuses a second initialisation; the NCCL communicator
// links and fails cleanly without a GPU. Several ranks:
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
#include "dist/comm_nccl.h"

#ifdef LTC_WITH_CUDA
#include <cuda_runtime.h>
#endif

// Under AddressSanitizer (make asan): OpenMPI keeps memory from MPI_Init to
// exit by design; these sanitizer hooks ignore leaks whose stack passes
// through MPI's init/finalize (the same list as tests/lsan_mpi.supp). Plain
// functions, unused, in other builds.
const char *__asan_default_options(void);
const char *__lsan_default_suppressions(void);
const char *__asan_default_options(void) { return "fast_unwind_on_malloc=0"; }
const char *__lsan_default_suppressions(void) {
    return "leak:ompi_mpi_init\nleak:ompi_mpi_finalize\nleak:MPI_Init_thread\n"
           "leak:MPI_Finalize\nleak:event_base_loop\n";
}

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

// The NCCL communicator is linked into CUDA builds. Without a usable GPU
// (these build machines have no driver) creating one must fail with the
// failing call, rank and device, not crash; with a GPU a world of one must
// come up (not yet run on one). Builds without CUDA say so.
static void test_nccl_world_of_one(void **state) {
    (void)state;
    const NcclSetup setup = {.rank = 0, .world_size = 1, .local_world_size = 1, .device = 0,
                             .token = "test", .timeout_seconds = 10};
    ErrorMessage err = {{0}};
    Communicator *comm = comm_nccl_create(&setup, &err);
#ifdef LTC_WITH_CUDA
    int devices = 0;
    if (cudaGetDeviceCount(&devices) == cudaSuccess && devices > 0) {
        if (!comm) fail_msg("NCCL world of one on a GPU: %s", err.text);
        assert_int_equal(comm_world_size(comm), 1);
        comm_destroy(comm);
        return;
    }
    assert_null(comm);
    if (!strstr(err.text, "cudaSetDevice") || !strstr(err.text, "rank 0 of 1, device 0"))
        fail_msg("no GPU: unexpected message '%s'", err.text);
#else
    assert_null(comm);
    assert_non_null(strstr(err.text, "no CUDA/NCCL"));
#endif
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_single_and_null_are_a_world_of_one),
        cmocka_unit_test(test_failures_are_sticky),
        cmocka_unit_test(test_mpi_alone_is_a_world_of_one),
        cmocka_unit_test(test_nccl_world_of_one),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
