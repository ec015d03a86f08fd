// The training step as CUDA graphs (issue 32, docs/gpu.md "CUDA graphs"):
// a step of a kind the trainer names (backend.h step_graph_begin; for the
// trainer a step is one micro-batch of a training step: train_graphs.c)
// runs op by op the first time, is captured the second time and replayed
// after that, so that the device gets one graph launch a step instead of some
// hundreds of launches, copies and library calls, and the host queues
// nothing but that launch.
//
// A replayed step's host side still runs, with every queue point
// (cuda_internal.h) skipping its operation: that is what writes the step's
// own values where the graph reads them when it runs: the per-step scalars
// into the parameter block (cuda_step_params.c, whose half alternates per
// step and is part of the kind, so each kind has a graph per half) and the
// staged inputs into their fixed sites (staging.c). Nothing else may
// change between steps of a kind: the same operations on the same buffers
// with the same shapes. The count of queue points is the check: a replayed
// step that passed another number of them than its capture is not
// launched, and the run stops with an error naming the step's kind.
#include <stdio.h>

#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_internal.h"

int cuda_step_filling;
long cuda_queue_points;
int cuda_step_capturing;

int cuda_backend_queue_point(void) { return cuda_queue_point(); }

int cuda_backend_capturing(void) { return cuda_step_capturing; }

// The graph of a kind of step, made at its first step; NULL once
// CUDA_STEP_GRAPHS kinds have one (later kinds run op by op).
static CudaStepGraph *graph_of_kind(CudaState *state, uint64_t kind) {
    for (int i = 0; i < state->step_graph_count; i++)
        if (state->step_graphs[i].key == kind) return &state->step_graphs[i];
    if (state->step_graph_count == CUDA_STEP_GRAPHS) return NULL;
    CudaStepGraph *graph = &state->step_graphs[state->step_graph_count++];
    *graph = (CudaStepGraph){.key = kind};
    return graph;
}

int cuda_step_graph_begin(Backend *backend, uint64_t key) {
    CudaState *state = cuda_state(backend);
    // The step's scalars from the first slot of the other half on.
    cuda_step_params_begin(backend);
    state->step_graph_half = state->step_params.half;
    state->step_graph_points = cuda_queue_points;
    CudaStepGraph *graph = graph_of_kind(state, key * 2 + (uint64_t)state->step_params.half);
    state->step_graph = graph;
    if (!graph || graph->steps++ == 0) {
        state->step_graph_mode = STEP_GRAPH_EAGER;
    } else if (!graph->exec) {
        // Nothing waits inside a capture: every staging site's fence has
        // passed once the device has run what is queued. Thread-local: the
        // loader's threads may allocate pinned memory meanwhile.
        cuda_wait_stream(state, state->stream);
        CUDA_CHECK(cudaStreamBeginCapture(state->stream, cudaStreamCaptureModeThreadLocal));
        cuda_step_capturing = 1;
        state->step_graph_mode = STEP_GRAPH_CAPTURE;
    } else {
        cuda_step_filling = 1;
        state->step_graph_mode = STEP_GRAPH_REPLAY;
    }
    return state->step_graph_mode;
}

// The host writes a half of the parameter block again only once the copies
// out of it have run: behind the graph (inside it nothing records).
static void mark_halves_read(CudaState *state) {
    CudaStepParams *block = &state->step_params;
    CUDA_CHECK(cudaEventRecord(block->copied[state->step_graph_half], state->stream));
    if (block->half != state->step_graph_half)  // the step filled both
        CUDA_CHECK(cudaEventRecord(block->copied[block->half], state->stream));
}

int cuda_step_graph_end(Backend *backend, int launch, ErrorMessage *err) {
    CudaState *state = cuda_state(backend);
    const int mode = state->step_graph_mode;
    CudaStepGraph *graph = state->step_graph;
    const long points = cuda_queue_points - state->step_graph_points;
    state->step_graph_mode = STEP_GRAPH_EAGER;
    state->step_graph = NULL;
    cuda_step_filling = 0;
    if (mode == STEP_GRAPH_EAGER) return 0;
    if (mode == STEP_GRAPH_CAPTURE) {
        cudaGraph_t captured = NULL;
        const cudaError_t ended = cudaStreamEndCapture(state->stream, &captured);
        cuda_step_capturing = 0;
        if (!launch) {  // a failed step: its capture dropped
            (void)cudaGetLastError();
            if (captured) CUDA_CHECK(cudaGraphDestroy(captured));
            return 0;
        }
        cudaGraphExec_t exec = NULL;
        const cudaError_t made = ended != cudaSuccess
                                     ? ended
                                     : cudaGraphInstantiate(&exec, captured, 0);
        if (captured) CUDA_CHECK(cudaGraphDestroy(captured));
        if (made != cudaSuccess) {  // nothing of the step ran: the run stops here
            (void)cudaGetLastError();
            return error_set(err,
                             "cuda graphs: a step could not be captured: %s (LTC_CUDA_GRAPHS=off "
                             "runs every step op by op)",
                             cudaGetErrorString(made));
        }
        graph->exec = exec;
        graph->queue_points = points;
    } else {
        if (!launch) return 0;
        if (points != graph->queue_points)
            return error_set(err,
                             "cuda graphs: a step of kind %llu passed %ld queue points where its "
                             "captured graph has %ld (the step changed in a way its kind does not "
                             "name; LTC_CUDA_GRAPHS=off runs every step op by op)",
                             (unsigned long long)(graph->key / 2), points, graph->queue_points);
        state->step_graph_replays++;
    }
    CUDA_CHECK(cudaGraphLaunch((cudaGraphExec_t)graph->exec, state->stream));
    mark_halves_read(state);
    return 0;
}

long cuda_step_graph_replays(const Backend *backend) {
    return cuda_state(backend)->step_graph_replays;
}

void cuda_step_graphs_forget(CudaState *state) {
    if (state->step_graph_mode != STEP_GRAPH_EAGER)  // the step's graph would be gone
        cuda_fatal("cuda backend", "cuda_step_graphs_forget",
                   "memory freed inside a captured or replayed step", __FILE__, __LINE__,
                   state->device);
    for (int i = 0; i < state->step_graph_count; i++)
        if (state->step_graphs[i].exec)
            (void)cudaGraphExecDestroy((cudaGraphExec_t)state->step_graphs[i].exec);
    state->step_graph_count = 0;
}

void cuda_step_graphs_free(CudaState *state) {
    if (state->step_graph_mode == STEP_GRAPH_CAPTURE) {  // a step left mid-capture
        cudaGraph_t dropped = NULL;
        if (cudaStreamEndCapture(state->stream, &dropped) == cudaSuccess && dropped)
            (void)cudaGraphDestroy(dropped);
    }
    cuda_step_capturing = 0;
    state->step_graph_mode = STEP_GRAPH_EAGER;
    cuda_step_filling = 0;
    cuda_step_graphs_forget(state);
}
