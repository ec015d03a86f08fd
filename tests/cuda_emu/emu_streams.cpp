// Streams that run late, as a GPU's do: what is queued on a stream the
// program created (kernels, copies, memsets, event records, library calls,
// graph launches) waits in that stream's queue until the host does
// something that needs it done: synchronises with the stream, the device or
// an event recorded behind it, copies to pageable memory from it, frees
// memory, or queues work on a stream that waits for such an event (then the
// waited-for stream runs up to the record first). So a missing
// cudaStreamWaitEvent between the copy stream and the compute stream, or
// host memory written again while a copy from it is still queued, changes
// what the program computes here, where running everything at once would
// have hidden it; the tests that compare results then fail. What waits
// longest is the worst case of a GPU's timing, not every one: a queue runs
// in order, and two streams' queues run one after the other.
//
// Which side of a missing wait shows depends on which stream runs first: a
// consumer that runs before its producer reads stale memory, a producer of
// the next round that runs before the last consumer overwrites what it was
// to read. LTC_EMU_STREAMS picks the schedule:
//   deferred        (the default) every stream the program made waits, as
//                   above: the host's first wait decides which runs first;
//   compute-at-once a stream the program hands to cuDNN or cuBLAS (the cuda
//                   backend's compute stream) runs its work when it is
//                   queued, once what it was told to wait for has run; the
//                   others (copies, collectives) wait: a kernel never waits
//                   for a copy or an all-reduce it was not told to wait for;
//   others-at-once  the other way round: every stream not handed to a
//                   library (copies, collectives) runs its work when it is
//                   queued, the compute streams wait: a copy or an
//                   all-reduce never waits for a kernel it was not told to
//                   wait for;
//   immediate       everything runs when it is queued (the emulation before
//                   2026-11-29, for comparing).
// The legacy default stream (0) runs its work at once, after every blocking
// stream's queue (it waits for them, as CUDA's does); streams made with
// cudaStreamNonBlocking are not flushed by it.
//
// An operation may be not ready (it returns cudaErrorNotReady: it waits for
// something outside this process's device, a peer's share of an emulated
// NCCL collective): it stays at the head of its stream's queue, which runs
// no further for now, as a GPU's stream stays on a collective whose peer
// has not come. A query (cudaStreamQuery, cudaEventQuery) then answers not
// ready and returns; a synchronisation tries again until it is done (an
// emulated collective gives up after its own timeout), so a host that polls
// with a timeout of its own sees a peer that hangs as it would on GPUs.
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <deque>
#include <map>
#include <set>
#include <vector>

#include "emu_blas.h"
#include "emu_runtime.h"

namespace ltc_emu {
namespace {

struct Queued {
    uint64_t order;  // across streams: when it was queued
    std::function<cudaError_t()> run;
    std::vector<cudaEvent_t> records;  // events it records (a record; a graph's)
};

// Where an event's latest record waits: its stream and place in the queue.
struct Position {
    cudaStream_t stream;
    uint64_t order;
};

enum class Schedule { kDeferred, kComputeAtOnce, kOthersAtOnce, kImmediate };

std::map<cudaStream_t, std::deque<Queued>> queues;
std::set<cudaStream_t> computes;  // the streams handed to a library
std::map<cudaEvent_t, Position> pending_records;
uint64_t next_order = 1;
int running = 0;  // inside a queued operation: what it queues runs at once

// Read at each use: a test of the emulation's own switches between them
// (with nothing queued); a program sets it once.
Schedule schedule() {
    const char *value = getenv("LTC_EMU_STREAMS");
    if (!value || !*value || strcmp(value, "deferred") == 0) return Schedule::kDeferred;
    if (strcmp(value, "compute-at-once") == 0) return Schedule::kComputeAtOnce;
    if (strcmp(value, "others-at-once") == 0) return Schedule::kOthersAtOnce;
    if (strcmp(value, "immediate") == 0) return Schedule::kImmediate;
    fprintf(stderr, "cuda emulation: LTC_EMU_STREAMS=%s is none of deferred, compute-at-once, "
                    "others-at-once, immediate\n", value);
    exit(2);
}

int deferring() { return schedule() != Schedule::kImmediate; }

// Runs its work when it is queued (in the schedules that say so).
int at_once(cudaStream_t stream) {
    const Schedule chosen = schedule();
    return (chosen == Schedule::kComputeAtOnce && computes.count(stream)) ||
           (chosen == Schedule::kOthersAtOnce && !computes.count(stream));
}

// 0 when the operation was not ready (to run again later).
int run_queued(Queued &queued) {
    running++;
    const cudaError_t status = queued.run();
    running--;
    if (status == cudaErrorNotReady) return 0;
    for (cudaEvent_t event : queued.records) {
        auto it = pending_records.find(event);
        if (it != pending_records.end() && it->second.order == queued.order)
            pending_records.erase(it);
    }
    if (status != cudaSuccess) set_error(status);
    return 1;
}

// Runs `stream`'s queue up to and including what was queued at `order`, as
// far as its operations are ready. Returns how many ran; *blocked (unless
// NULL) is set when one was not ready (the queue stopped there).
int run_until(cudaStream_t stream, uint64_t order, int *blocked) {
    auto it = queues.find(stream);
    if (it == queues.end()) return 0;
    std::deque<Queued> &queue = it->second;
    int ran = 0;
    while (!queue.empty() && queue.front().order <= order) {
        Queued queued = std::move(queue.front());
        queue.pop_front();  // first: a wait inside it may come back to this stream
        if (!run_queued(queued)) {
            queue.push_front(std::move(queued));
            if (blocked) *blocked = 1;
            break;
        }
        ran++;
    }
    return ran;
}

// The same until done: a synchronisation.
int run_until_done(cudaStream_t stream, uint64_t order) {
    int ran = 0;
    for (;;) {
        int blocked = 0;
        ran += run_until(stream, order, &blocked);
        if (!blocked) return ran;
        usleep(200);
    }
}

}  // namespace

int stream_defer(cudaStream_t stream, std::function<cudaError_t()> operation,
                 const std::vector<cudaEvent_t> &records) {
    if (deferring() && !running && stream == 0) streams_flush(1);
    if (!deferring() || running || stream == 0 || at_once(stream)) {
        for (cudaEvent_t event : records) pending_records.erase(event);  // recorded now
        return 0;
    }
    const uint64_t order = next_order++;
    for (cudaEvent_t event : records) pending_records[event] = Position{stream, order};
    queues[stream].push_back(Queued{order, std::move(operation), records});
    return 1;
}

int stream_flush(cudaStream_t stream) {
    if (stream != 0) return run_until_done(stream, UINT64_MAX);
    streams_flush(1);
    return 0;
}

int stream_poll(cudaStream_t stream) {
    if (stream == 0) return stream_flush(0);
    int blocked = 0;
    return run_until(stream, UINT64_MAX, &blocked) > 0 || blocked;
}

void streams_flush(int blocking_only) {
    // A stream's queue can run another's (its waits); look again until all are empty.
    for (int again = 1; again;) {
        again = 0;
        int ran = 0, blocked = 0;
        for (auto &entry : queues) {
            if (entry.second.empty() || (blocking_only && !stream_is_blocking(entry.first)))
                continue;
            again = 1;
            ran = run_until(entry.first, UINT64_MAX, &blocked);
            if (ran) break;  // the map may have changed under the loop
        }
        if (again && !ran) usleep(200);  // every queue waits for a peer
    }
}

int event_flush(cudaEvent_t event) {
    auto it = pending_records.find(event);
    if (it == pending_records.end()) return 0;
    const Position at = it->second;
    run_until_done(at.stream, at.order);
    return 1;
}

int event_poll(cudaEvent_t event) {
    auto it = pending_records.find(event);
    if (it == pending_records.end()) return 0;
    const Position at = it->second;
    run_until(at.stream, at.order, NULL);
    return 1;
}

int event_is_pending(cudaEvent_t event) { return pending_records.count(event) != 0; }

void stream_wait_event(cudaStream_t stream, cudaEvent_t event) {
    auto it = pending_records.find(event);
    if (it == pending_records.end() || it->second.stream == stream) return;
    const Position at = it->second;
    // The wait is for the record as it is now; a later record of the event does not move it.
    // Queued: not ready while the other stream cannot reach the record.
    if (stream_defer(stream, [at]() {
            int blocked = 0;
            run_until(at.stream, at.order, &blocked);
            return blocked ? cudaErrorNotReady : cudaSuccess;
        }))
        return;
    run_until_done(at.stream, at.order);
}

void stream_computes(cudaStream_t stream) {
    if (stream == 0 || computes.count(stream)) return;
    // compute-at-once: what it queued before runs first, in order
    if (schedule() == Schedule::kComputeAtOnce) run_until_done(stream, UINT64_MAX);
    computes.insert(stream);
}

void stream_forget(cudaStream_t stream) {
    stream_flush(stream);
    queues.erase(stream);
    computes.erase(stream);
}

}  // namespace ltc_emu

extern "C" void ltc_emu_streams_flush(void) { ltc_emu::streams_flush(0); }

extern "C" void ltc_emu_stream_computes(cudaStream_t stream) { ltc_emu::stream_computes(stream); }
