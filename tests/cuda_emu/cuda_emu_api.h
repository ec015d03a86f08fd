// The interface between the kernels' side of the CUDA emulation
// (cuda_emu.h, compiled into each .cu file) and its runtime
// (emu_runtime.cpp): one launch's configuration, the call that runs its
// grid, and the one that keeps it for a graph or the stream's queue.
#ifndef LTC_TESTS_CUDA_EMU_API_H
#define LTC_TESTS_CUDA_EMU_API_H

#include <cuda_runtime_api.h>
#include <stddef.h>

#include <functional>

namespace ltc_emu {

struct LaunchConfig {
    const char *file;  // the launch site, for messages
    int line;
    const void *kernel;  // its identity (shared memory attributes)
    dim3 grid, block;
    size_t shared_bytes;
    cudaStream_t stream;
};

// Runs run(call) once per thread of the grid, block after block, the
// threads of a block as fibers. A bad configuration runs nothing and sets
// the error cudaGetLastError returns, as a GPU would.
void launch_grid(const LaunchConfig *config, void (*run)(void *), void *call);
// The checks launch_grid makes before it runs anything: 0 with the error
// set (and the reason on stderr) where a GPU would refuse the launch.
int launch_is_valid(const LaunchConfig *config);

// Checks the launch as launch_grid would and keeps `launch` (which holds
// its own copy of the arguments, as CUDA copies a kernel's parameters when
// it is launched or captured): while config->stream captures, to run at
// every launch of the graph (emu_capture.cpp); otherwise in the stream's
// queue, to run when the host needs it (emu_streams.cpp). Returns 1 then
// (and for a refused launch, which runs nothing); 0, keeping nothing,
// where the launch runs now (the legacy default stream, LTC_EMU_STREAMS=
// immediate): the caller runs the grid.
int queue_launch(const LaunchConfig *config, std::function<void()> launch);

// A warp shuffle's mask must name every lane (all this backend uses).
void check_full_mask(unsigned mask);

}  // namespace ltc_emu

#endif
