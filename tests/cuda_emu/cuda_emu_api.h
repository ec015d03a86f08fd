// The interface between the kernels' side of the CUDA emulation
// (cuda_emu.h, compiled into each .cu file) and its runtime
// (emu_runtime.cpp): one launch's configuration and the call that runs its
// grid.
#ifndef LTC_TESTS_CUDA_EMU_API_H
#define LTC_TESTS_CUDA_EMU_API_H

#include <cuda_runtime_api.h>
#include <stddef.h>

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

// A warp shuffle's mask must name every lane (all this backend uses).
void check_full_mask(unsigned mask);

}  // namespace ltc_emu

#endif
