// CPU emulation of the CUDA device side, for `make test` on machines
// without a GPU: force-included (g++ -include) into every .cu file of
// src/backend/cuda when it is compiled by the host C++ compiler instead of
// nvcc (Makefile, build/<mode>/emu). It gives the kernels what nvcc would:
// the qualifiers (__global__ and friends as nothing; __shared__ as `static`,
// which is right because the emulator runs one block at a time), the
// built-in indices (threadIdx, blockIdx, blockDim, gridDim: the running
// emulated thread's), __syncthreads and warp shuffles (every thread of a
// block is a fiber, switched at barriers: emu_runtime.cpp), the few device
// intrinsics used, and the launch: the Makefile's text pass rewrites
//   kernel<<<grid, block, shared, stream>>>(args)
// into
//   kernel % ltc_emu::Launch(__FILE__, __LINE__, grid, block, shared, stream)(args)
// (and `extern __shared__ T name[];` into a pointer to the launch's dynamic
// shared memory), so a launch is kept with copies of its arguments in its
// stream's queue (emu_streams.cpp) or, while the stream captures, for the
// graph (emu_capture.cpp), and its grid runs on the calling thread when the
// host needs it (on the legacy default stream: at once). What it cannot see: races
// between threads (a block's threads run in a fixed order, switching only
// at barriers), the device's memory model, its timing, its fast-math
// rounding.
#ifndef LTC_TESTS_CUDA_EMU_H
#define LTC_TESTS_CUDA_EMU_H

#ifndef __cplusplus
#error "cuda_emu.h is for the .cu files compiled as C++"
#endif

// Before the CUDA headers: they define these only where nobody did.
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __launch_bounds__(...)
#define __shared__ static

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <tuple>
#include <type_traits>
#include <utility>

#include "cuda_emu_api.h"

namespace ltc_emu {

// The built-in variables of the running emulated thread.
struct ThreadIndices {
    uint3 thread, block;
    dim3 block_dim, grid_dim;
};
// The running thread's, NULL outside a kernel (emu_threads.cpp). Read
// inline: a kernel reads its indices in every thread, millions a launch.
extern const ThreadIndices *running_indices;
[[noreturn]] void index_outside_kernel();
inline const ThreadIndices &indices() {
    if (!running_indices) index_outside_kernel();
    return *running_indices;
}

void sync_threads();
// The warp exchange: this lane offers `bytes` bytes of `value` and gets
// those of lane `source` (its own when `source` is outside the warp).
void warp_exchange(const void *value, void *result, size_t bytes, int source);
int lane();
void *dynamic_shared();
// Stops the kernel, as a GPU would, where `pointer` is not a multiple of
// `bytes` (a vector load or store of that size).
void check_aligned(const void *pointer, size_t bytes);

// One launch's configuration, where it was made, and its arguments.
template <typename... A>
struct BoundLaunch {
    LaunchConfig config;
    std::tuple<std::decay_t<A>...> args;
};

struct Launch {
    LaunchConfig config;
    Launch(const char *file, int line, dim3 grid, dim3 block, size_t shared = 0,
           cudaStream_t stream = 0) {
        config.file = file;
        config.line = line;
        config.grid = grid;
        config.block = block;
        config.shared_bytes = shared;
        config.stream = stream;
    }
    template <typename... A>
    BoundLaunch<A...> operator()(A &&...args) const {
        return BoundLaunch<A...>{config, std::tuple<std::decay_t<A>...>(std::forward<A>(args)...)};
    }
};

// kernel % Launch(...)(args): every thread of the grid calls kernel(args).
template <typename... P, typename... A>
void operator%(void (*kernel)(P...), BoundLaunch<A...> &&bound) {
    static_assert(sizeof...(P) == sizeof...(A), "kernel launched with a wrong argument count");
    struct Call {
        void (*kernel)(P...);
        std::tuple<std::decay_t<A>...> *args;
        static void run(void *self) {
            Call *call = (Call *)self;
            std::apply(call->kernel, *call->args);
        }
    } call = {kernel, &bound.args};
    bound.config.kernel = (const void *)kernel;
    // Queued or captured: the closure owns a copy of the config and the arguments.
    const LaunchConfig config = bound.config;
    auto replay = [kernel, config, args = bound.args]() mutable {
        Call captured = {kernel, &args};
        launch_grid(&config, &Call::run, &captured);
    };
    if (queue_launch(&bound.config, replay)) return;
    launch_grid(&bound.config, &Call::run, &call);
}

}  // namespace ltc_emu

#define threadIdx (ltc_emu::indices().thread)
#define blockIdx (ltc_emu::indices().block)
#define blockDim (ltc_emu::indices().block_dim)
#define gridDim (ltc_emu::indices().grid_dim)

#define LTC_DEVICE_CHECK_ALIGNED(pointer, bytes) \
    ltc_emu::check_aligned((const void *)(pointer), (bytes))

inline void __syncthreads() { ltc_emu::sync_threads(); }

// Every lane of the warp must take part (the mask is checked: full only).
template <typename T>
T ltc_emu_shuffle(unsigned mask, T value, int source) {
    ltc_emu::check_full_mask(mask);
    T result;
    ltc_emu::warp_exchange(&value, &result, sizeof(T), source);
    return result;
}

template <typename T>
T __shfl_down_sync(unsigned mask, T value, unsigned delta, int width = 32) {
    const int lane = ltc_emu::lane();
    const int source = lane % width + (int)delta < width ? lane + (int)delta : lane;
    return ltc_emu_shuffle(mask, value, source);
}

template <typename T>
T __shfl_xor_sync(unsigned mask, T value, int lane_mask, int width = 32) {
    const int lane = ltc_emu::lane();
    const int source = lane ^ lane_mask;
    return ltc_emu_shuffle(mask, value, source / width == lane / width ? source : lane);
}

inline unsigned int __float_as_uint(float v) {
    unsigned int bits;
    memcpy(&bits, &v, sizeof bits);
    return bits;
}
inline float __uint_as_float(unsigned int bits) {
    float v;
    memcpy(&v, &bits, sizeof v);
    return v;
}
// The device's fast intrinsics, computed exactly here (the GPU's differ by
// a few units in the last place: a check with tolerance 0 against them
// holds only on the GPU).
inline float __expf(float v) { return expf(v); }
inline float __logf(float v) { return logf(v); }
inline float rsqrtf(float v) { return 1.0f / sqrtf(v); }
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }

// cuda_runtime.h's C++ overload: a kernel is named, not its address.
template <typename... P>
cudaError_t cudaFuncSetAttribute(void (*kernel)(P...), cudaFuncAttribute attribute, int value) {
    return cudaFuncSetAttribute((const void *)kernel, attribute, value);
}

#endif
