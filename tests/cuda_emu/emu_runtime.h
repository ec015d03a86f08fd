// Private to the CUDA emulation's runtime: what its thread model
// (emu_threads.cpp), its runtime API (emu_cuda_api.cpp) and its stream
// capture (emu_capture.cpp) ask of each other.
#ifndef LTC_TESTS_CUDA_EMU_RUNTIME_H
#define LTC_TESTS_CUDA_EMU_RUNTIME_H

#include <functional>

#include "cuda_emu_api.h"

namespace ltc_emu {

// A launch that did not run: cudaGetLastError returns `error` next, and the
// reason goes to stderr with the launch site.
void set_launch_error(cudaError_t error, const LaunchConfig *config);
int stream_is_valid(cudaStream_t stream);
// Dynamic shared memory a launch of `kernel` may ask for: 48 KB, or what
// cudaFuncSetAttribute allowed it.
size_t dynamic_shared_allowance(const void *kernel);
// Sets the error cudaGetLastError returns next; returns it.
cudaError_t set_error(cudaError_t error);

// Stream capture (emu_capture.cpp). While `stream` captures: keeps
// `operation` (a copy, a memset, an event record, checked already) to run
// at every launch of the graph, in order, and returns 1; otherwise keeps
// nothing and returns 0 (the caller runs it now).
int capture_record(cudaStream_t stream, std::function<cudaError_t()> operation);
int stream_is_capturing(cudaStream_t stream);
// A call not allowed while a capture is in progress (a synchronisation, an
// allocation): with a capture in progress, invalidates it, names `call` on
// stderr and returns cudaErrorStreamCaptureUnsupported; else cudaSuccess.
cudaError_t refuse_while_capturing(const char *call);

}  // namespace ltc_emu

#endif
