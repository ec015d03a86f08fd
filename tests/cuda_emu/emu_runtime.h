// Private to the CUDA emulation's runtime: what its thread model
// (emu_threads.cpp) asks of its runtime API (emu_cuda_api.cpp).
#ifndef LTC_TESTS_CUDA_EMU_RUNTIME_H
#define LTC_TESTS_CUDA_EMU_RUNTIME_H

#include "cuda_emu_api.h"

namespace ltc_emu {

// A launch that did not run: cudaGetLastError returns `error` next, and the
// reason goes to stderr with the launch site.
void set_launch_error(cudaError_t error, const LaunchConfig *config);
int stream_is_valid(cudaStream_t stream);
// Dynamic shared memory a launch of `kernel` may ask for: 48 KB, or what
// cudaFuncSetAttribute allowed it.
size_t dynamic_shared_allowance(const void *kernel);

}  // namespace ltc_emu

#endif
