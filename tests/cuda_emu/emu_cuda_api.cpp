// The CUDA runtime API functions the cuda backend calls, emulated on the
// CPU (declarations: the toolkit's cuda_runtime_api.h): one device (or LTC_EMU_DEVICES) with
// H100-like limits; device memory from mmap, filled with NaN bytes (a
// kernel reading what nothing wrote shows; LTC_EMU_DEVICES claims more
// devices, one per process of a run with several ranks) and ending (to 8 bytes) at a
// guard page (a kernel running off the end of an allocation faults, and
// emu_threads.cpp names the kernel); copies and memsets checked against the
// allocations they claim to touch; what is queued on a stream waits in its
// queue until the host needs it (emu_streams.cpp), events keep the host
// time their record ran at; while a stream captures, its copies, memsets
// and event records are kept for the graph instead (emu_capture.cpp), and
// synchronisations and allocations are refused.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>

#include <map>
#include <memory>
#include <set>
#include <vector>

#include "emu_blas.h"
#include "emu_log.h"
#include "emu_runtime.h"

namespace ltc_emu {
namespace {

struct Allocation {
    size_t bytes;
    void *base;  // the mapping
    size_t mapped;
};

constexpr size_t kDefaultShared = 48 * 1024;
constexpr int kSharedOptin = 227 * 1024;

cudaError_t last_error = cudaSuccess;
std::map<uintptr_t, Allocation> allocations;  // device memory by start
std::map<uintptr_t, size_t> pinned;  // page-locked host memory: start, bytes
std::set<cudaStream_t> streams;
std::set<cudaEvent_t> events;
std::map<const void *, size_t> shared_allowance;

cudaError_t fail(cudaError_t error) {
    last_error = error;
    return error;
}

// Inside one page-locked host allocation: [p, p + bytes).
int pinned_range(const void *p, size_t bytes) {
    const uintptr_t at = (uintptr_t)p;
    auto it = pinned.upper_bound(at);
    if (it == pinned.begin()) return 0;
    --it;
    return at >= it->first && at + bytes <= it->first + it->second;
}

// Inside one device allocation: [p, p + bytes).
int device_range(const void *p, size_t bytes) {
    const uintptr_t at = (uintptr_t)p;
    auto it = allocations.upper_bound(at);
    if (it == allocations.begin()) return 0;
    --it;
    return at >= it->first && at + bytes <= it->first + it->second.bytes;
}

// LTC_EMU_DEVICES (1 to 16, default 1): how many devices the emulation
// claims, so that several ranks of the program (one process each, each
// with its own emulated device: nothing is shared) can run here.
int device_count() {
    const char *value = getenv("LTC_EMU_DEVICES");
    const int count = value && *value ? atoi(value) : 1;
    return count >= 1 && count <= 16 ? count : 1;
}
int current_device = 0;

double now_ms() {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec / 1e6;
}

}  // namespace

void set_launch_error(cudaError_t error, const LaunchConfig *config) {
    fprintf(stderr,
            "cuda emulation: launch at %s:%d refused (%s): grid (%u,%u,%u), block (%u,%u,%u), "
            "%zu bytes of dynamic shared memory (allowed %zu)\n",
            config->file, config->line, cudaGetErrorString(error), config->grid.x,
            config->grid.y, config->grid.z, config->block.x, config->block.y, config->block.z,
            config->shared_bytes, dynamic_shared_allowance(config->kernel));
    last_error = error;
}

cudaError_t set_error(cudaError_t error) { return fail(error); }

int stream_is_valid(cudaStream_t stream) { return stream == 0 || streams.count(stream); }

size_t dynamic_shared_allowance(const void *kernel) {
    auto it = shared_allowance.find(kernel);
    return it == shared_allowance.end() ? kDefaultShared : it->second;
}

}  // namespace ltc_emu

using namespace ltc_emu;

struct CUstream_st {
    unsigned flags;
};
struct CUevent_st {
    unsigned flags;
    int recorded;
    double ms;
};

extern "C" {

cudaError_t cudaGetLastError(void) {
    const cudaError_t error = last_error;
    last_error = cudaSuccess;
    return error;
}

cudaError_t cudaPeekAtLastError(void) { return last_error; }

const char *cudaGetErrorString(cudaError_t error) {
    switch (error) {
    case cudaSuccess: return "no error";
    case cudaErrorInvalidValue: return "invalid argument";
    case cudaErrorMemoryAllocation: return "out of memory";
    case cudaErrorInvalidConfiguration: return "invalid configuration argument";
    case cudaErrorInvalidDevice: return "invalid device ordinal";
    case cudaErrorInvalidResourceHandle: return "invalid resource handle";
    case cudaErrorNotReady: return "device not ready";
    case cudaErrorInvalidPitchValue: return "invalid pitch argument";
    case cudaErrorIllegalState: return "the operation cannot be performed in the present state";
    case cudaErrorStreamCaptureUnsupported:
        return "operation not permitted when stream is capturing";
    case cudaErrorStreamCaptureInvalidated:
        return "operation failed due to a previous error during capture";
    default: return "unrecognized error code (cuda emulation)";
    }
}

cudaError_t cudaGetDeviceCount(int *count) {
    *count = device_count();
    return cudaSuccess;
}

// The versions of the headers the emulation is built with: the program's
// library check (cuda_libraries.c) sees what it was built against.
cudaError_t cudaRuntimeGetVersion(int *version) {
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDriverGetVersion(int *version) {
    *version = CUDART_VERSION;
    return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
    ltc_emu_log("host-wait", "cudaDeviceSynchronize", 0);
    if (refuse_while_capturing("cudaDeviceSynchronize")) return cudaErrorStreamCaptureUnsupported;
    streams_flush(0);
    return cudaSuccess;
}

cudaError_t cudaSetDevice(int device) {
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    current_device = device;
    return cudaSuccess;
}

cudaError_t cudaGetDevice(int *device) {
    *device = current_device;
    return cudaSuccess;
}

cudaError_t cudaGetDeviceProperties(struct cudaDeviceProp *properties, int device) {
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    memset(properties, 0, sizeof *properties);
    snprintf(properties->name, sizeof properties->name, "CUDA emulation on the CPU");
    properties->totalGlobalMem = (size_t)80 << 30;
    properties->sharedMemPerBlock = kDefaultShared;
    properties->sharedMemPerBlockOptin = kSharedOptin;
    properties->warpSize = 32;
    properties->maxThreadsPerBlock = 1024;
    properties->maxThreadsDim[0] = properties->maxThreadsDim[1] = 1024;
    properties->maxThreadsDim[2] = 64;
    properties->maxGridSize[0] = 2147483647;
    properties->maxGridSize[1] = properties->maxGridSize[2] = 65535;
    properties->multiProcessorCount = 132;
    properties->major = 9;
    properties->minor = 0;
    return cudaSuccess;
}

cudaError_t cudaDeviceGetAttribute(int *value, enum cudaDeviceAttr attribute, int device) {
    if (device < 0 || device >= device_count()) return fail(cudaErrorInvalidDevice);
    switch (attribute) {
    case cudaDevAttrMaxSharedMemoryPerBlockOptin: *value = kSharedOptin; return cudaSuccess;
    case cudaDevAttrMaxSharedMemoryPerBlock: *value = (int)kDefaultShared; return cudaSuccess;
    case cudaDevAttrMultiProcessorCount: *value = 132; return cudaSuccess;
    default: return fail(cudaErrorInvalidValue);
    }
}

cudaError_t cudaFuncSetAttribute(const void *kernel, enum cudaFuncAttribute attribute,
                                 int value) {
    if (attribute != cudaFuncAttributeMaxDynamicSharedMemorySize) return cudaSuccess;
    if (value < 0 || value > kSharedOptin) return fail(cudaErrorInvalidValue);
    shared_allowance[kernel] = (size_t)value;
    return cudaSuccess;
}

cudaError_t cudaMalloc(void **pointer, size_t bytes) {
    ltc_emu_log("host-wait", "cudaMalloc", 0);
    if (refuse_while_capturing("cudaMalloc")) return cudaErrorStreamCaptureUnsupported;
    const size_t page = (size_t)sysconf(_SC_PAGESIZE);
    // The end sits on the guard page (to 8 bytes, the alignment of a
    // double): CUDA's 256-byte alignment would leave up to 255 bytes of
    // slack an overrun could hide in.
    const size_t rounded = (bytes + 7) / 8 * 8;
    const size_t data = (rounded + page - 1) / page * page;
    void *base = mmap(NULL, data + page, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (base == MAP_FAILED) return fail(cudaErrorMemoryAllocation);
    mprotect((char *)base + data, page, PROT_NONE);
    char *start = (char *)base + (data - rounded);
    memset(start, 0xff, rounded);
    allocations[(uintptr_t)start] = Allocation{bytes, base, data + page};
    *pointer = start;
    return cudaSuccess;
}

cudaError_t cudaFree(void *pointer) {
    if (!pointer) return cudaSuccess;
    ltc_emu_log("host-wait", "cudaFree", 0);
    if (refuse_while_capturing("cudaFree")) return cudaErrorStreamCaptureUnsupported;
    auto it = allocations.find((uintptr_t)pointer);
    if (it == allocations.end()) return fail(cudaErrorInvalidValue);
    streams_flush(0);  // CUDA waits for the device before it frees
    munmap(it->second.base, it->second.mapped);
    allocations.erase(it);
    return cudaSuccess;
}

cudaError_t cudaHostAlloc(void **pointer, size_t bytes, unsigned int flags) {
    ltc_emu_log("host-wait", "cudaHostAlloc", 0);
    if (refuse_while_capturing("cudaHostAlloc")) return cudaErrorStreamCaptureUnsupported;
    *pointer = aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
    if (!*pointer) return fail(cudaErrorMemoryAllocation);
    pinned[(uintptr_t)*pointer] = bytes ? bytes : 1;
    return cudaSuccess;
}

cudaError_t cudaMallocHost(void **pointer, size_t bytes) { return cudaHostAlloc(pointer, bytes, 0); }

cudaError_t cudaFreeHost(void *pointer) {
    ltc_emu_log("host-wait", "cudaFreeHost", 0);
    if (refuse_while_capturing("cudaFreeHost")) return cudaErrorStreamCaptureUnsupported;
    if (!pinned.erase((uintptr_t)pointer)) return fail(cudaErrorInvalidValue);
    streams_flush(0);  // CUDA waits for the device before it frees
    free(pointer);
    return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind,
                            cudaStream_t stream) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (bytes == 0) return cudaSuccess;
    if (getenv("LTC_EMU_LAUNCH_LOG")) {
        static const char *const kinds[] = {"host-to-host", "host-to-device", "device-to-host",
                                            "device-to-device", "default"};
        char site[96];
        snprintf(site, sizeof site, "cudaMemcpyAsync %s %zu bytes",
                 kinds[(unsigned)kind <= 4 ? (unsigned)kind : 4], bytes);
        ltc_emu_log("copy", site, 0);
    }
    const int dst_ok = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyHostToDevice
                           ? device_range(dst, bytes)
                           : !device_range(dst, 1);
    const int src_ok = kind == cudaMemcpyDeviceToDevice || kind == cudaMemcpyDeviceToHost
                           ? device_range(src, bytes)
                           : !device_range(src, 1);
    if (kind != cudaMemcpyDefault && (!dst_ok || !src_ok)) {
        fprintf(stderr, "cuda emulation: cudaMemcpy of %zu bytes, kind %d, from %p to %p: %s\n",
                bytes, (int)kind, src, dst,
                !dst_ok ? "the destination is not where the kind says (or overruns it)"
                        : "the source is not where the kind says (or overruns it)");
        return fail(cudaErrorInvalidValue);
    }
    // Captured: the pointers are kept, the memory is read when the graph runs.
    std::function<cudaError_t()> copy = [dst, src, bytes]() {
        memmove(dst, src, bytes);
        return cudaSuccess;
    };
    if (capture_record(stream, copy)) return cudaSuccess;
    if (!device_range(dst, 1) && !pinned_range(dst, bytes)) {
        // To pageable memory CUDA returns when the copy is done: the host
        // waits for everything queued before it on the stream.
        ltc_emu_log("host-wait", "cudaMemcpyAsync to pageable memory", 0);
        stream_flush(stream);
        return copy();
    }
    if (!device_range(src, 1) && !pinned_range(src, bytes)) {
        // From pageable memory CUDA stages the bytes before it returns: the
        // source may be written again at once.
        auto staged = std::make_shared<std::vector<unsigned char>>(
            (const unsigned char *)src, (const unsigned char *)src + bytes);
        copy = [dst, staged]() {
            memcpy(dst, staged->data(), staged->size());
            return cudaSuccess;
        };
    }
    if (stream_defer(stream, copy)) return cudaSuccess;
    return copy();
}

// Row by row, each row checked as one copy; pitches narrower than a row are
// refused as CUDA does.
cudaError_t cudaMemcpy2DAsync(void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                              size_t width, size_t height, enum cudaMemcpyKind kind,
                              cudaStream_t stream) {
    if (dst_pitch < width || src_pitch < width) return fail(cudaErrorInvalidPitchValue);
    for (size_t row = 0; row < height; row++) {
        const cudaError_t status = cudaMemcpyAsync((char *)dst + row * dst_pitch,
                                                   (const char *)src + row * src_pitch, width,
                                                   kind, stream);
        if (status != cudaSuccess) return status;
    }
    return cudaSuccess;
}

cudaError_t cudaMemcpy(void *dst, const void *src, size_t bytes, enum cudaMemcpyKind kind) {
    ltc_emu_log("host-wait", "cudaMemcpy", 0);
    if (refuse_while_capturing("cudaMemcpy")) return cudaErrorStreamCaptureUnsupported;
    return cudaMemcpyAsync(dst, src, bytes, kind, 0);
}

cudaError_t cudaMemsetAsync(void *pointer, int value, size_t bytes, cudaStream_t stream) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    ltc_emu_log("memset", "cudaMemsetAsync", 0);
    if (bytes && !device_range(pointer, bytes)) {
        fprintf(stderr, "cuda emulation: cudaMemsetAsync of %zu bytes at %p: not device memory "
                        "(or past its end)\n", bytes, pointer);
        return fail(cudaErrorInvalidValue);
    }
    std::function<cudaError_t()> fill = [pointer, value, bytes]() {
        memset(pointer, value, bytes);
        return cudaSuccess;
    };
    if (capture_record(stream, fill) || stream_defer(stream, fill)) return cudaSuccess;
    return fill();
}

cudaError_t cudaStreamCreateWithFlags(cudaStream_t *stream, unsigned int flags) {
    *stream = new CUstream_st{flags};
    streams.insert(*stream);
    return cudaSuccess;
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
    if (stream_is_capturing(stream)) return fail(cudaErrorStreamCaptureUnsupported);
    if (!streams.count(stream)) return fail(cudaErrorInvalidResourceHandle);
    stream_forget(stream);  // its queue runs first: CUDA finishes a destroyed stream's work
    streams.erase(stream);
    delete stream;
    return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
    ltc_emu_log("host-wait", "cudaStreamSynchronize", 0);
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (refuse_while_capturing("cudaStreamSynchronize")) return cudaErrorStreamCaptureUnsupported;
    stream_flush(stream);
    return cudaSuccess;
}

// With work queued: not ready, and the queue runs (the device goes on while
// the host asks), so that asking again in a loop ends.
cudaError_t cudaStreamQuery(cudaStream_t stream) {
    if (!stream_is_valid(stream)) return fail(cudaErrorInvalidResourceHandle);
    if (stream_is_capturing(stream)) return refuse_while_capturing("cudaStreamQuery");
    return stream_poll(stream) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t *event, unsigned int flags) {
    *event = new CUevent_st{flags, 0, 0.0};
    events.insert(*event);
    return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t *event) { return cudaEventCreateWithFlags(event, 0); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
    if (!events.count(event)) return fail(cudaErrorInvalidResourceHandle);
    streams_flush(0);  // a queued record of it may wait anywhere
    events.erase(event);
    delete event;
    return cudaSuccess;
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
    if (!events.count(event) || !stream_is_valid(stream))
        return fail(cudaErrorInvalidResourceHandle);
    std::function<cudaError_t()> record = [event]() {
        event->recorded = 1;
        event->ms = now_ms();
        return cudaSuccess;
    };
    if (capture_record(stream, record, {event}) || stream_defer(stream, record, {event}))
        return cudaSuccess;
    return record();
}

// Every record inside a capture is kept as a node that records the event at
// replay (what cudaEventRecordExternal asks for; a plain record's role is
// the order between the capture's streams: emu_capture.cpp). Outside a
// capture the driver refuses cudaEventRecordExternal (cudaErrorIllegalState,
// "the operation cannot be performed in the present state": an H200's, first
// light of 2026-11-30, docs/gpu-runs/2026-11-30-2f31a0f-1.jsonl).
cudaError_t cudaEventRecordWithFlags(cudaEvent_t event, cudaStream_t stream, unsigned int flags) {
    if (flags & ~(unsigned int)cudaEventRecordExternal) return fail(cudaErrorInvalidValue);
    enum cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
    const cudaError_t asked = cudaStreamIsCapturing(stream, &status);
    if (asked != cudaSuccess) return asked;
    if ((flags & cudaEventRecordExternal) && status != cudaStreamCaptureStatusActive)
        return fail(cudaErrorIllegalState);
    return cudaEventRecord(event, stream);
}

// With its record still queued: not ready (not an error CUDA keeps), and
// the queue runs up to it, so that asking again in a loop ends. Refused
// while a capture is in progress, as the driver refuses it (an H200's
// "operation not permitted when stream is capturing" for a fence's query
// inside a captured step: docs/gpu-runs/2026-11-30-a7cdfb0-2.jsonl:10).
cudaError_t cudaEventQuery(cudaEvent_t event) {
    if (refuse_while_capturing("cudaEventQuery")) return cudaErrorStreamCaptureUnsupported;
    if (!events.count(event)) return fail(cudaErrorInvalidResourceHandle);
    return event_poll(event) ? cudaErrorNotReady : cudaSuccess;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
    ltc_emu_log("host-wait", "cudaEventSynchronize", 0);
    if (refuse_while_capturing("cudaEventSynchronize")) return cudaErrorStreamCaptureUnsupported;
    if (!events.count(event)) return fail(cudaErrorInvalidResourceHandle);
    event_flush(event);
    return cudaSuccess;
}

// A wait for a record inside a capture joins the capture (emu_capture.cpp);
// inside a capture a wait for a record before it needs nothing (the graph
// runs after).
cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
    if (!events.count(event) || !stream_is_valid(stream))
        return fail(cudaErrorInvalidResourceHandle);
    if (capture_wait_event(stream, event)) return cudaSuccess;
    if (!stream_is_capturing(stream)) stream_wait_event(stream, event);
    return cudaSuccess;
}

// As CUDA: both events recorded, neither made with cudaEventDisableTiming.
cudaError_t cudaEventElapsedTime(float *ms, cudaEvent_t start, cudaEvent_t end) {
    if (!events.count(start) || !events.count(end)) return fail(cudaErrorInvalidResourceHandle);
    if ((start->flags | end->flags) & cudaEventDisableTiming)
        return fail(cudaErrorInvalidResourceHandle);
    if (event_is_captured(start) || event_is_captured(end)) return fail(cudaErrorCapturedEvent);
    if (event_is_pending(start) || event_is_pending(end)) return cudaErrorNotReady;
    if (!start->recorded || !end->recorded) return fail(cudaErrorInvalidResourceHandle);
    *ms = (float)(end->ms - start->ms);
    return cudaSuccess;
}

}  // extern "C"

// ---- for the emulated libraries (emu_blas.h) ---------------------------------------------

extern "C" int ltc_emu_device_range(const void *p, size_t bytes) { return device_range(p, bytes); }

extern "C" long long ltc_emu_device_offset(const void *p) {
    const uintptr_t at = (uintptr_t)p;
    auto it = allocations.upper_bound(at);
    if (it == allocations.begin()) return -1;
    --it;
    return at < it->first + it->second.bytes ? (long long)(at - it->first) : -1;
}

extern "C" int ltc_emu_stream_valid(cudaStream_t stream) { return stream_is_valid(stream); }

int ltc_emu::stream_is_blocking(cudaStream_t stream) {
    return stream == 0 || !(stream->flags & cudaStreamNonBlocking);
}

// ---- the operation log (emu_log.h) -------------------------------------------------------

extern "C" void ltc_emu_log(const char *kind, const char *site, int line) {
    static FILE *log = NULL;
    static int opened = 0;
    if (!opened) {
        opened = 1;
        const char *path = getenv("LTC_EMU_LAUNCH_LOG");
        if (path && *path) log = fopen(path, "a");
    }
    if (!log) return;
    if (line > 0)
        fprintf(log, "%s %s:%d\n", kind, site, line);
    else
        fprintf(log, "%s %s\n", kind, site);
    fflush(log);  // the program may end with _exit
}
