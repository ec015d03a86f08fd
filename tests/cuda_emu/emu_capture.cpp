// Stream capture and CUDA graphs, emulated (declarations: the toolkit's
// cuda_runtime_api.h): while a stream captures, what is queued on it (kernel
// launches with copies of their arguments, as CUDA copies a kernel's
// parameters at capture; copies and memsets with their pointers, whose
// memory is read when the graph runs; event records) is kept in order
// instead of run; cudaStreamEndCapture hands the list over as a graph, and
// every cudaGraphLaunch of its instance runs it again, in order. As on a
// GPU (global capture mode), a synchronisation or an allocation while a
// capture is in progress fails with cudaErrorStreamCaptureUnsupported and
// invalidates the capture, whose end then fails with
// cudaErrorStreamCaptureInvalidated. The emulated libraries' products and
// convolutions (cuBLAS, cuBLASLt, cuDNN's legacy and graph API) are
// recorded as closures over a copy of their arguments
// (ltc_emu_capture_call): scalars and descriptors as they were at the
// call, as CUDA keeps a captured kernel's parameters, pointers kept, their
// memory read when the graph runs; what they cannot record (cuDNN's
// algorithm searches) refuses with a message naming the call
// (ltc_emu_refuse_capture).
//
// Other streams join a capture as on a GPU: a stream that waits for an event
// recorded inside a capture becomes part of it (the NCCL communicator's
// stream, forked from the compute stream for a queued collective), and what
// it queues then is kept in the same graph; the capture ends only on the
// stream it began on (its origin), and only once every stream that joined
// has been joined back (the origin waited for an event recorded after the
// joined stream's last operation), else cudaStreamEndCapture fails with
// cudaErrorStreamCaptureUnjoined, as CUDA's does. A query or synchronise of
// any event while a capture is in progress is refused as the synchronisations
// are; the elapsed time of an event whose latest record is inside the capture
// fails with cudaErrorCapturedEvent, as on a GPU. A graph runs its
// operations in the order the host queued them, one valid order of the
// graph's dependencies (not every order a GPU may take).
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include <map>
#include <set>
#include <memory>
#include <vector>

#include "emu_blas.h"
#include "emu_runtime.h"

// The cuda backend's replay flag (src/backend/cuda/cuda_step_graph.c), weak:
// test programs without the backend link the emulation too.
extern "C" int cuda_step_filling __attribute__((weak));

namespace ltc_emu {
namespace {

// While a replayed step's host side runs, the backend queues nothing (its
// queue points skip every operation): one queued then is a queue point
// missing, and the emulation stops there, naming it.
void check_not_filling(const char *what, const char *file, int line) {
    if (!&cuda_step_filling || !cuda_step_filling) return;
    fprintf(stderr,
            "cuda emulation: %s (%s:%d) queued while a replayed step's host side runs: an "
            "operation without a queue point (cuda_queue_point)\n",
            what, file ? file : "?", line);
    abort();
}

typedef std::vector<std::function<cudaError_t()>> Operations;

struct Capture {
    Operations operations;
    std::vector<cudaEvent_t> records;  // the events its operations record
    const char *invalidated_by;  // the refused call; NULL while valid
    std::map<cudaStream_t, long> queued;  // operations kept per stream of the capture
    std::set<cudaStream_t> unjoined;      // joined streams with work the origin did not wait for
};

std::map<cudaStream_t, Capture> captures;  // by origin stream
std::map<cudaStream_t, cudaStream_t> origins;  // every stream of a capture: its origin

// An event's latest record inside a capture: where, and after how many of
// that stream's kept operations.
struct CaptureRecord {
    cudaStream_t origin, stream;
    long after;
};
std::map<cudaEvent_t, CaptureRecord> capture_records;

Capture *capture_of(cudaStream_t stream) {
    auto it = origins.find(stream);
    return it == origins.end() ? NULL : &captures[it->second];
}

// From operation *next on; one that is not ready (emu_streams.cpp) ends
// the call with cudaErrorNotReady, and the next call goes on from it.
cudaError_t run_all(const Operations &operations, size_t *next) {
    for (; *next < operations.size(); ++*next) {
        const cudaError_t status = operations[*next]();
        if (status == cudaErrorNotReady) return status;
        if (status != cudaSuccess) {
            *next = 0;
            return status;
        }
    }
    *next = 0;
    return cudaSuccess;
}

}  // namespace

int stream_is_capturing(cudaStream_t stream) { return origins.count(stream) != 0; }

int capture_record(cudaStream_t stream, std::function<cudaError_t()> operation,
                   const std::vector<cudaEvent_t> &records) {
    check_not_filling("a copy, memset, event record or graph launch", NULL, 0);
    Capture *capture = capture_of(stream);
    if (!capture) return 0;
    capture->operations.push_back(std::move(operation));
    capture->records.insert(capture->records.end(), records.begin(), records.end());
    const long after = ++capture->queued[stream];
    const cudaStream_t origin = origins[stream];
    if (stream != origin) capture->unjoined.insert(stream);
    for (cudaEvent_t event : records) capture_records[event] = CaptureRecord{origin, stream, after};
    return 1;
}

int event_is_captured(cudaEvent_t event) { return capture_records.count(event) != 0; }

int capture_wait_event(cudaStream_t stream, cudaEvent_t event) {
    auto it = capture_records.find(event);
    if (it == capture_records.end()) return 0;
    const CaptureRecord record = it->second;
    auto member = origins.find(stream);
    if (member == origins.end()) {
        origins[stream] = record.origin;  // joins the capture
        return 1;
    }
    if (member->second != record.origin) {
        refuse_while_capturing("cudaStreamWaitEvent on an event of another capture");
        return 1;
    }
    Capture *capture = &captures[record.origin];
    if (stream == record.origin && capture->queued[record.stream] == record.after)
        capture->unjoined.erase(record.stream);
    return 1;
}

int queue_launch(const LaunchConfig *config, std::function<void()> launch) {
    check_not_filling("a kernel launch", config->file, config->line);
    if (stream_is_capturing(config->stream)) {
        if (!launch_is_valid(config)) return 1;  // refused at capture, as on a GPU
        capture_record(config->stream, [launch]() {
            launch();
            return cudaPeekAtLastError();
        });
        return 1;
    }
    // A stream's queue: checked now, as a GPU checks a launch when it is made.
    if (!launch_is_valid(config)) return 1;
    return stream_defer(config->stream, [launch]() {
        launch();
        return cudaSuccess;
    });
}

cudaError_t refuse_while_capturing(const char *call) {
    if (captures.empty()) return cudaSuccess;
    for (auto &entry : captures) {
        if (entry.second.invalidated_by) continue;
        entry.second.invalidated_by = call;
        fprintf(stderr,
                "cuda emulation: %s while a stream captures: not allowed during a capture "
                "(the capture is invalidated)\n",
                call);
    }
    return set_error(cudaErrorStreamCaptureUnsupported);
}

}  // namespace ltc_emu

using namespace ltc_emu;

struct CUgraph_st {
    Operations operations;
    std::vector<cudaEvent_t> records;
};
struct CUgraphExec_st {
    Operations operations;
    std::vector<cudaEvent_t> records;
};

extern "C" {

cudaError_t cudaStreamBeginCapture(cudaStream_t stream, enum cudaStreamCaptureMode mode) {
    // The legacy default stream cannot capture (CUDA refuses it too).
    if (stream == 0 || !stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle);
    // One thread queues everything here: thread-local is global.
    if (mode != cudaStreamCaptureModeGlobal && mode != cudaStreamCaptureModeThreadLocal) {
        fprintf(stderr,
                "cuda emulation: only the global and thread-local capture modes are "
                "emulated\n");
        return set_error(cudaErrorInvalidValue);
    }
    if (stream_is_capturing(stream)) return set_error(cudaErrorIllegalState);
    captures[stream] = Capture{Operations(), {}, NULL, {}, {}};
    origins[stream] = stream;
    return cudaSuccess;
}

cudaError_t cudaStreamEndCapture(cudaStream_t stream, cudaGraph_t *graph) {
    auto member = origins.find(stream);
    if (member == origins.end()) return set_error(cudaErrorIllegalState);
    if (member->second != stream) return set_error(cudaErrorStreamCaptureUnmatched);
    Capture capture = std::move(captures[stream]);
    captures.erase(stream);
    for (auto it = origins.begin(); it != origins.end();)
        it = it->second == stream ? origins.erase(it) : std::next(it);
    for (auto it = capture_records.begin(); it != capture_records.end();)
        it = it->second.origin == stream ? capture_records.erase(it) : std::next(it);
    *graph = NULL;
    if (capture.invalidated_by) return set_error(cudaErrorStreamCaptureInvalidated);
    if (!capture.unjoined.empty()) {
        fprintf(stderr,
                "cuda emulation: cudaStreamEndCapture with a stream that joined the capture "
                "not joined back (its last work is waited for by nothing on the origin "
                "stream)\n");
        return set_error(cudaErrorStreamCaptureUnjoined);
    }
    *graph = new CUgraph_st{std::move(capture.operations), std::move(capture.records)};
    return cudaSuccess;
}

cudaError_t cudaStreamIsCapturing(cudaStream_t stream, enum cudaStreamCaptureStatus *status) {
    if (!stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle);
    const Capture *capture = capture_of(stream);
    *status = !capture                  ? cudaStreamCaptureStatusNone
              : capture->invalidated_by ? cudaStreamCaptureStatusInvalidated
                                        : cudaStreamCaptureStatusActive;
    return cudaSuccess;
}

cudaError_t cudaGraphInstantiate(cudaGraphExec_t *exec, cudaGraph_t graph,
                                 unsigned long long flags) {
    if (!graph) return set_error(cudaErrorInvalidValue);
    *exec = new CUgraphExec_st{graph->operations, graph->records};
    return cudaSuccess;
}

// The graph's operations in order, as one operation of the stream's queue
// (emu_streams.cpp); a launch into a capturing stream is kept as one
// operation of that capture.
cudaError_t cudaGraphLaunch(cudaGraphExec_t exec, cudaStream_t stream) {
    if (!exec) return set_error(cudaErrorInvalidValue);
    if (!stream_is_valid(stream)) return set_error(cudaErrorInvalidResourceHandle);
    const Operations &operations = exec->operations;
    auto next = std::make_shared<size_t>(0);  // this launch's progress
    std::function<cudaError_t()> run = [operations, next]() {
        return run_all(operations, next.get());
    };
    if (capture_record(stream, run, exec->records) || stream_defer(stream, run, exec->records))
        return cudaSuccess;
    cudaError_t status;
    while ((status = run()) == cudaErrorNotReady) usleep(200);  // runs now: until done
    return status == cudaSuccess ? cudaSuccess : set_error(status);
}

cudaError_t cudaGraphExecDestroy(cudaGraphExec_t exec) {
    delete exec;
    return cudaSuccess;
}

cudaError_t cudaGraphDestroy(cudaGraph_t graph) {
    delete graph;
    return cudaSuccess;
}

}  // extern "C"

// ---- for the emulated libraries (emu_blas.h) ---------------------------------------------

extern "C" int ltc_emu_capture_call(cudaStream_t stream, const char *call,
                                    int (*run)(const void *arguments), const void *arguments,
                                    size_t bytes) {
    check_not_filling(call, NULL, 0);
    // shared: an instantiated graph copies the operation list
    const unsigned char *first = (const unsigned char *)arguments;
    auto copy = std::make_shared<std::vector<unsigned char>>(first, first + bytes);
    const int capturing = stream_is_capturing(stream);
    std::function<cudaError_t()> operation = [call, run, copy, capturing]() {
        const int status = run(copy->data());
        if (status == 0) return cudaSuccess;
        if (status == LTC_EMU_NOT_READY) return cudaErrorNotReady;
        fprintf(stderr, "cuda emulation: %s failed when %s ran\n", call,
                capturing ? "its graph" : "its stream's queue");
        return cudaErrorLaunchFailure;
    };
    return capture_record(stream, operation) || stream_defer(stream, operation);
}

extern "C" int ltc_emu_refuse_capture(const char *call, cudaStream_t stream) {
    Capture *capture = capture_of(stream);
    if (!capture) {
        stream_flush(stream);  // runs now, on what the stream's queue wrote
        return 0;
    }
    if (!capture->invalidated_by) {
        capture->invalidated_by = call;
        fprintf(stderr,
                "cuda emulation: %s on a capturing stream: not recordable into a graph (the "
                "capture is invalidated)\n",
                call);
    }
    return 1;
}
