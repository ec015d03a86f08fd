// Private to the CUDA emulation's runtime: what its thread model
// (emu_threads.cpp), its runtime API (emu_cuda_api.cpp) and its stream
// capture (emu_capture.cpp) ask of each other.
#ifndef LTC_TESTS_CUDA_EMU_RUNTIME_H
#define LTC_TESTS_CUDA_EMU_RUNTIME_H

#include <functional>
#include <vector>

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
// `records`: the events the operation records (a record; a graph's records),
// which a graph made of the capture records at each launch.
int capture_record(cudaStream_t stream, std::function<cudaError_t()> operation,
                   const std::vector<cudaEvent_t> &records = {});
int stream_is_capturing(cudaStream_t stream);
// A wait for an event whose latest record is inside a capture: `stream`
// joins that capture (or, the origin waiting, joins back the stream of the
// record); returns 1. 0 for an event recorded outside every capture.
int capture_wait_event(cudaStream_t stream, cudaEvent_t event);
// The event's latest record is inside a capture in progress.
int event_is_captured(cudaEvent_t event);
// A call not allowed while a capture is in progress (a synchronisation, an
// allocation): with a capture in progress, invalidates it, names `call` on
// stderr and returns cudaErrorStreamCaptureUnsupported; else cudaSuccess.
cudaError_t refuse_while_capturing(const char *call);

// Streams that run late (emu_streams.cpp). stream_defer keeps `operation`
// in `stream`'s queue and returns 1; 0 where it is to run now (the legacy
// default stream, after the blocking streams' queues; inside a queued
// operation; LTC_EMU_STREAMS=immediate). `records`: the events it records.
int stream_defer(cudaStream_t stream, std::function<cudaError_t()> operation,
                 const std::vector<cudaEvent_t> &records = {});
// Runs everything queued on `stream` (0: on every blocking stream), trying
// an operation that is not ready again until it is (a synchronisation);
// returns how many operations of `stream`'s own queue ran.
int stream_flush(cudaStream_t stream);
// Runs what is ready on `stream` (a query): 1 when it was not idle (something
// ran, or an operation is not ready), else 0.
int stream_poll(cudaStream_t stream);
// Runs every queue (blocking_only: those of the streams that wait for the
// legacy default stream).
void streams_flush(int blocking_only);
// Runs the queue of the stream holding the event's latest record, up to it
// (until done); 0 when no record of the event waits.
int event_flush(cudaEvent_t event);
// The same as far as it is ready (a query): 1 when a record of it waited.
int event_poll(cudaEvent_t event);
int event_is_pending(cudaEvent_t event);
// Work queued on `stream` from now on runs after the event's latest record.
void stream_wait_event(cudaStream_t stream, cudaEvent_t event);
// `stream` is handed to cuDNN or cuBLAS: a compute stream, which
// LTC_EMU_STREAMS=compute-at-once runs at once from now on and
// others-at-once no longer does.
void stream_computes(cudaStream_t stream);
// Runs the stream's queue and drops it (the stream is destroyed).
void stream_forget(cudaStream_t stream);
// Made without cudaStreamNonBlocking (emu_cuda_api.cpp).
int stream_is_blocking(cudaStream_t stream);

}  // namespace ltc_emu

#endif
