// The CUDA emulation's NCCL (tests/cuda_emu/emu_nccl.c), what lets GPU
// ranks run without GPUs (tests/e2e/cuda_ranks.sh): two ranks (this
// process and a child) all-reduce (sum, average, max), all-gather and
// broadcast on their streams, and each gets the values computed on the
// host, the same bits on both; a collective runs when its stream's queue
// runs it, not when it is queued; while a peer has not come, the stream
// stays on the collective and queries of the stream and of an event behind
// it answer not ready at once (a host polling with its own timeout sees a
// peer that hangs as on GPUs); a rank whose peer never comes fails the
// collective with ncclRemoteError after LTC_EMU_NCCL_TIMEOUT, which
// ncclCommGetAsyncError reports. Built against the emulation only.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {  // cmocka.h declares C functions without saying so to C++
#include <cmocka.h>
}
// nccl.h brings cuda_runtime.h, whose declarations name parameters after the
// built-in indices that cuda_emu.h (force-included) defines as macros.
#pragma push_macro("threadIdx")
#pragma push_macro("blockIdx")
#pragma push_macro("blockDim")
#pragma push_macro("gridDim")
#undef threadIdx
#undef blockIdx
#undef blockDim
#undef gridDim
#include <nccl.h>
#pragma pop_macro("threadIdx")
#pragma pop_macro("blockIdx")
#pragma pop_macro("blockDim")
#pragma pop_macro("gridDim")
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

enum { N = 100 };

// Rank r's input: different on each rank, exact in float.
static float input_of(int rank, int i) { return (float)((i * 7 + rank * 13) % 23) - 11.0f; }

// Runs the collectives as rank `rank` of 2; 0 when every result is right.
static int run_rank(ncclUniqueId id, int rank) {
    cudaStream_t stream;
    if (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess) return 1;
    ncclComm_t comm = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    if (ncclCommInitRankConfig(&comm, 2, id, rank, &config) != ncclSuccess) return 2;
    float host[2 * N], *sum, *mean, *max, *gathered, *bytes;
    cudaMalloc((void **)&sum, N * sizeof(float));
    cudaMalloc((void **)&mean, N * sizeof(float));
    cudaMalloc((void **)&max, N * sizeof(float));
    cudaMalloc((void **)&gathered, 2 * N * sizeof(float));
    cudaMalloc((void **)&bytes, N * sizeof(float));
    for (int i = 0; i < N; i++) host[i] = input_of(rank, i);
    for (float *p : {sum, mean, max, bytes})
        cudaMemcpy(p, host, N * sizeof(float), cudaMemcpyHostToDevice);
    if (ncclAllReduce(sum, sum, N, ncclFloat32, ncclSum, comm, stream) != ncclSuccess ||
        ncclAllReduce(mean, mean, N, ncclFloat32, ncclAvg, comm, stream) != ncclSuccess ||
        ncclAllReduce(max, max, N, ncclFloat32, ncclMax, comm, stream) != ncclSuccess ||
        ncclAllGather(max, gathered, N, ncclFloat32, comm, stream) != ncclSuccess ||
        ncclBroadcast(bytes, bytes, N * sizeof(float), ncclUint8, 1, comm, stream) != ncclSuccess)
        return 3;
    // Queued, not run: the all-reduce's output is still this rank's input.
    if (memcmp(sum, host, N * sizeof(float)) != 0) return 4;
    if (cudaStreamSynchronize(stream) != cudaSuccess) return 5;
    ncclResult_t async = ncclInProgress;
    if (ncclCommGetAsyncError(comm, &async) != ncclSuccess || async != ncclSuccess) return 6;
    int wrong = 0;
    for (int i = 0; i < N; i++) {
        const float a = input_of(0, i), b = input_of(1, i), m = a > b ? a : b;
        wrong += sum[i] != a + b || mean[i] != (a + b) / 2.0f || max[i] != m;
        wrong += gathered[i] != m || gathered[N + i] != m;  // max's result on both ranks
        wrong += bytes[i] != b;                              // rank 1's input
    }
    if (wrong) return 7;
    if (ncclCommFinalize(comm) != ncclSuccess || ncclCommDestroy(comm) != ncclSuccess) return 8;
    return 0;
}

static void test_two_ranks_get_the_hosts_values(void **state) {
    (void)state;
    char folder[] = "/tmp/ltc-emu-nccl-test-XXXXXX";
    assert_non_null(mkdtemp(folder));
    setenv("TMPDIR", folder, 1);
    ncclUniqueId id;
    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    const pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) _exit(run_rank(id, 1));
    const int mine = run_rank(id, 0);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    assert_int_equal(mine, 0);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
    // The last rank to leave removed the communicator's folder.
    assert_int_equal(rmdir(folder), 0);
}

static void test_a_peer_that_never_comes_fails_the_collective(void **state) {
    (void)state;
    char folder[] = "/tmp/ltc-emu-nccl-test-XXXXXX";
    assert_non_null(mkdtemp(folder));
    setenv("TMPDIR", folder, 1);
    setenv("LTC_EMU_NCCL_TIMEOUT", "0.3", 1);
    ncclUniqueId id;
    assert_int_equal(ncclGetUniqueId(&id), ncclSuccess);
    cudaStream_t stream;
    assert_int_equal(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    ncclComm_t comm = NULL;
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    assert_int_equal(ncclCommInitRankConfig(&comm, 2, id, 0, &config), ncclSuccess);
    float *value = NULL;
    assert_int_equal(cudaMalloc((void **)&value, sizeof(float)), cudaSuccess);
    assert_int_equal(ncclAllReduce(value, value, 1, ncclFloat32, ncclSum, comm, stream),
                     ncclSuccess);
    ncclResult_t async = ncclInProgress;
    assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    assert_int_equal(async, ncclSuccess);  // queued: nothing has failed yet
    cudaEvent_t behind;
    assert_int_equal(cudaEventCreate(&behind), cudaSuccess);
    assert_int_equal(cudaEventRecord(behind, stream), cudaSuccess);
    for (int i = 0; i < 3; i++) {  // the stream stays on the collective; asking returns at once
        assert_int_equal(cudaStreamQuery(stream), cudaErrorNotReady);
        assert_int_equal(cudaEventQuery(behind), cudaErrorNotReady);
        assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
        assert_int_equal(async, ncclSuccess);
    }
    cudaStreamSynchronize(stream);  // waits until the collective gives up
    assert_int_equal(cudaEventQuery(behind), cudaSuccess);
    cudaEventDestroy(behind);
    (void)cudaGetLastError();
    assert_int_equal(ncclCommGetAsyncError(comm, &async), ncclSuccess);
    assert_int_equal(async, ncclRemoteError);
    assert_non_null(strstr(ncclGetLastError(comm), "rank 1 never joined"));
    assert_int_equal(ncclCommAbort(comm), ncclSuccess);
    unsetenv("LTC_EMU_NCCL_TIMEOUT");
    cudaFree(value);
    cudaStreamDestroy(stream);
    // What is left of the communicator: this rank's file and its leaving mark.
    char command[128];
    snprintf(command, sizeof command, "rm -rf %s", folder);
    assert_int_equal(system(command), 0);
}

int main(void) {
    unsetenv("LTC_EMU_STREAMS");  // the default schedule: a collective waits in its queue
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_ranks_get_the_hosts_values),
        cmocka_unit_test(test_a_peer_that_never_comes_fails_the_collective),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
