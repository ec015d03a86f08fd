// The CUDA emulation's own checks (tests/cuda_emu): each check docs/gpu.md
// lists (a barrier some threads left, shuffles outside a whole warp, a
// misaligned vector access, a write past an allocation, launch limits,
// dynamic shared memory, copies and memsets outside device memory, NaN in
// unwritten memory) done once on purpose, by a small kernel or call: it
// must stop the run with the emulation's message, or fail with the error a
// GPU returns, and its correct twin must run. Without these, a
// check that stopped working would let `make test` pass kernels that fail
// on the first GPU. A kernel that stops the emulation ends the process
// (_exit(1), as a GPU's sticky error ends the context), so each bad kernel
// runs in a child process whose status and standard error are read here.
// Built against the emulation only (not a .cu for nvcc).
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
extern "C" {  // cmocka.h declares C functions without saying so to C++
#include <cmocka.h>
}
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "backend/cuda/cuda_act.cuh"

enum { WARP = 32 };

// ---- the kernels: each bad one beside its correct twin -------------------------------

__global__ void write_indices(int *out) {
    out[blockIdx.x * blockDim.x + threadIdx.x] = (int)(blockIdx.x * blockDim.x + threadIdx.x);
}

__global__ void barrier_after_return(int *out, int returning) {
    if ((int)threadIdx.x < returning) return;
    __syncthreads();
    out[threadIdx.x] = 1;
}

__global__ void warp_sum(int *out, unsigned mask) {
    int value = (int)threadIdx.x;
    for (int offset = WARP / 2; offset > 0; offset /= 2)
        value += __shfl_down_sync(mask, value, offset);
    if (threadIdx.x % WARP == 0) out[threadIdx.x / WARP] = value;
}

__global__ void shuffle_in_half_a_warp(int *out) {
    int value = (int)threadIdx.x;
    if (threadIdx.x < WARP / 2) value = __shfl_xor_sync(0xffffffffu, value, 1);
    out[threadIdx.x] = value;
}

// Four floats from `from` into `to`, as one 16-byte vector each way.
__global__ void copy_vector(const float *from, float *to) {
    store_packed<float, 4>(to, load_packed<float, 4>(from));
}

__global__ void write_past_end(float *out, int n) { out[n + (int)threadIdx.x] = 1.0f; }

__global__ void use_dynamic_shared(int *out) {
    extern __shared__ int scratch[];
    scratch[threadIdx.x] = (int)threadIdx.x;
    __syncthreads();
    out[threadIdx.x] = scratch[blockDim.x - 1 - threadIdx.x];
}

__global__ void read_unwritten_shared(float *out) {
    extern __shared__ float unwritten[];
    out[threadIdx.x] = unwritten[threadIdx.x];
}

// ---- running a kernel that may stop the process ---------------------------------------

typedef void (*Scenario)(void);

// Runs scenario in a child; its exit status and the start of its stderr.
static int run_child(Scenario scenario, char *err, size_t size) {
    int pipe_ends[2];
    assert_int_equal(pipe(pipe_ends), 0);
    fflush(NULL);
    const pid_t child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        dup2(pipe_ends[1], STDERR_FILENO);
        close(pipe_ends[0]);
        scenario();
        cudaDeviceSynchronize();
        _exit(0);
    }
    close(pipe_ends[1]);
    size_t got = 0;
    ssize_t n;
    while (got + 1 < size && (n = read(pipe_ends[0], err + got, size - 1 - got)) > 0)
        got += (size_t)n;
    err[got] = '\0';
    close(pipe_ends[0]);
    int status = 0;
    assert_int_equal(waitpid(child, &status, 0), child);
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static void expect_stop(Scenario scenario, const char *message) {
    char err[2048];
    const int status = run_child(scenario, err, sizeof err);
    if (status != 1 || !strstr(err, message) || !strstr(err, "test_emu_checks.cu"))
        fail_msg("expected exit 1 with \"%s\" and the launch site; got %d: %s", message, status,
                 err);
}

static void expect_clean(Scenario scenario) {
    char err[2048];
    const int status = run_child(scenario, err, sizeof err);
    if (status != 0) fail_msg("expected a clean run; got %d: %s", status, err);
}

static int *device_ints(int n) {
    void *pointer = NULL;
    assert_int_equal(cudaMalloc(&pointer, (size_t)n * sizeof(int)), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(pointer, 0, (size_t)n * sizeof(int), 0), cudaSuccess);
    return (int *)pointer;
}

// A float buffer of `n` values with `offset` floats before a 16-byte boundary.
static float *floats_at(int n, int offset) {
    void *pointer = NULL;
    assert_int_equal(cudaMalloc(&pointer, (size_t)(n + 8) * sizeof(float)), cudaSuccess);
    uintptr_t address = (uintptr_t)pointer;
    while (address % 16) address += sizeof(float);
    return (float *)address + offset;
}

// ---- the scenarios --------------------------------------------------------------------

static void barrier_all_reach(void) { barrier_after_return<<<1, 64>>>(device_ints(64), 0); }
static void barrier_some_returned(void) { barrier_after_return<<<1, 64>>>(device_ints(64), 5); }
static void shuffle_full_mask(void) { warp_sum<<<1, 64>>>(device_ints(2), 0xffffffffu); }
static void shuffle_partial_mask(void) { warp_sum<<<1, 64>>>(device_ints(2), 0x0000ffffu); }
static void shuffle_partial_warp(void) { warp_sum<<<1, 48>>>(device_ints(2), 0xffffffffu); }
static void shuffle_divergent(void) { shuffle_in_half_a_warp<<<1, 32>>>(device_ints(32)); }
static void vector_aligned(void) { copy_vector<<<1, 1>>>(floats_at(8, 0), floats_at(8, 0)); }
static void vector_load_misaligned(void) {
    copy_vector<<<1, 1>>>(floats_at(8, 1), floats_at(8, 0));
}
static void vector_store_misaligned(void) {
    copy_vector<<<1, 1>>>(floats_at(8, 0), floats_at(8, 2));
}
static void write_in_bounds(void) {
    float *out = NULL;
    assert_int_equal(cudaMalloc((void **)&out, 64 * sizeof(float)), cudaSuccess);
    write_past_end<<<1, 32>>>(out, 0);
}
static void write_out_of_bounds(void) {
    float *out = NULL;
    assert_int_equal(cudaMalloc((void **)&out, 64 * sizeof(float)), cudaSuccess);
    write_past_end<<<1, 32>>>(out, 64);
}

// ---- the tests ------------------------------------------------------------------------

static void test_a_correct_kernel_runs(void **state) {
    (void)state;
    enum { BLOCKS = 3, THREADS = 96 };
    int *out = device_ints(BLOCKS * THREADS);
    write_indices<<<BLOCKS, THREADS>>>(out);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    int host[BLOCKS * THREADS];
    assert_int_equal(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < BLOCKS * THREADS; i++) assert_int_equal(host[i], i);
    cudaFree(out);
}

static void test_a_barrier_some_threads_left_stops(void **state) {
    (void)state;
    expect_clean(barrier_all_reach);
    expect_stop(barrier_some_returned, "__syncthreads not reached by every thread");
}

static void test_shuffles_outside_a_whole_warp_stop(void **state) {
    (void)state;
    expect_clean(shuffle_full_mask);
    expect_stop(shuffle_partial_mask, "a warp shuffle with a partial mask");
    expect_stop(shuffle_partial_warp, "in a partial warp");
    expect_stop(shuffle_divergent, "not every lane of the warp reaches");
}

static void test_the_warp_sum_is_exchanged(void **state) {
    (void)state;
    int *out = device_ints(2);
    warp_sum<<<1, 64>>>(out, 0xffffffffu);
    int host[2];
    assert_int_equal(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(host[0], 31 * 32 / 2);            // lanes 0..31
    assert_int_equal(host[1], 32 * 32 + 31 * 32 / 2);  // lanes 32..63
    cudaFree(out);
}

static void test_a_misaligned_vector_access_stops(void **state) {
    (void)state;
    expect_clean(vector_aligned);
    expect_stop(vector_load_misaligned, "misaligned address: a 16-byte vector access");
    expect_stop(vector_store_misaligned, "misaligned address: a 16-byte vector access");
}

static void test_a_write_past_an_allocation_stops(void **state) {
    (void)state;
    expect_clean(write_in_bounds);
    expect_stop(write_out_of_bounds, "invalid memory access");
}

static void test_a_bad_launch_configuration_fails_the_launch(void **state) {
    (void)state;
    int *out = device_ints(1);
    (void)cudaGetLastError();
    write_indices<<<1, 2048>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    write_indices<<<dim3(1, 70000), 32>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidConfiguration);
    int host = -1;
    assert_int_equal(cudaMemcpy(&host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    assert_int_equal(host, 0);  // nothing ran
    cudaFree(out);
}

static void test_dynamic_shared_memory_needs_its_allowance(void **state) {
    (void)state;
    enum { THREADS = 64 };
    const size_t large = 64 * 1024;  // over the 48 KB a kernel may ask for without opting in
    int *out = device_ints(THREADS);
    (void)cudaGetLastError();
    use_dynamic_shared<<<1, THREADS, large>>>(out);
    assert_int_equal(cudaGetLastError(), cudaErrorInvalidValue);
    assert_int_equal(cudaFuncSetAttribute(use_dynamic_shared,
                                          cudaFuncAttributeMaxDynamicSharedMemorySize, (int)large),
                     cudaSuccess);
    use_dynamic_shared<<<1, THREADS, large>>>(out);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    int host[THREADS];
    assert_int_equal(cudaMemcpy(host, out, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < THREADS; i++) assert_int_equal(host[i], THREADS - 1 - i);
    cudaFree(out);
}

static void test_copies_and_memsets_outside_device_memory_fail(void **state) {
    (void)state;
    enum { N = 64 };
    float host[N + 1] = {0};
    float *device = NULL;
    assert_int_equal(cudaMalloc((void **)&device, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemcpy(device, host, N * sizeof(float), cudaMemcpyHostToDevice),
                     cudaSuccess);
    assert_int_equal(cudaMemcpy(device, host, (N + 1) * sizeof(float), cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);  // past the end
    assert_int_equal(cudaMemcpy(host, device, N * sizeof(float), cudaMemcpyHostToDevice),
                     cudaErrorInvalidValue);  // the kind says the host is the device
    assert_int_equal(cudaMemcpy(host, device, N * sizeof(float), cudaMemcpyDeviceToHost),
                     cudaSuccess);
    assert_int_equal(cudaMemsetAsync(device, 0, N * sizeof(float), 0), cudaSuccess);
    assert_int_equal(cudaMemsetAsync(device + 1, 0, N * sizeof(float), 0), cudaErrorInvalidValue);
    assert_int_equal(cudaMemsetAsync(host, 0, sizeof host, 0), cudaErrorInvalidValue);
    (void)cudaGetLastError();
    cudaFree(device);
}

// Device memory nothing wrote and dynamic shared memory read before any
// write hold NaN bytes, so a result computed from them cannot pass as right.
static void test_unwritten_memory_reads_as_nan(void **state) {
    (void)state;
    enum { N = 32 };
    float *device = NULL;
    float host[N];
    assert_int_equal(cudaMalloc((void **)&device, N * sizeof(float)), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, device, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < N; i++) assert_true(isnan(host[i]));
    assert_int_equal(cudaMemsetAsync(device, 0, sizeof host, 0), cudaSuccess);
    read_unwritten_shared<<<1, N, N * sizeof(float)>>>(device);
    assert_int_equal(cudaGetLastError(), cudaSuccess);
    assert_int_equal(cudaMemcpy(host, device, sizeof host, cudaMemcpyDeviceToHost), cudaSuccess);
    for (int i = 0; i < N; i++) assert_true(isnan(host[i]));
    cudaFree(device);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_a_correct_kernel_runs),
        cmocka_unit_test(test_a_barrier_some_threads_left_stops),
        cmocka_unit_test(test_shuffles_outside_a_whole_warp_stop),
        cmocka_unit_test(test_the_warp_sum_is_exchanged),
        cmocka_unit_test(test_a_misaligned_vector_access_stops),
        cmocka_unit_test(test_a_write_past_an_allocation_stops),
        cmocka_unit_test(test_a_bad_launch_configuration_fails_the_launch),
        cmocka_unit_test(test_dynamic_shared_memory_needs_its_allowance),
        cmocka_unit_test(test_copies_and_memsets_outside_device_memory_fail),
        cmocka_unit_test(test_unwritten_memory_reads_as_nan),
    };
    return cmocka_run_group_tests_name("cuda emulation checks", tests, NULL, NULL);
}
