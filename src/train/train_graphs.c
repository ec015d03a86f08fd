// Whether a run's training steps go to the device as CUDA graphs
// (LTC_CUDA_GRAPHS, backend.h step_graph_begin; docs/gpu.md "CUDA graphs"),
// and what makes two steps of a run alike enough to share one graph (their
// kind).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "train/train_run.h"

int train_graphs_decide(TrainRun *run, ErrorMessage *err) {
    const char *value = getenv("LTC_CUDA_GRAPHS");
    run->step_graphs = 0;
    if (!value || !value[0] || strcmp(value, "off") == 0) {
        snprintf(run->step_graphs_note, sizeof run->step_graphs_note,
                 "off (LTC_CUDA_GRAPHS=on captures each kind of step once and replays it)");
        return 0;
    }
    if (strcmp(value, "on") != 0)
        return error_set(err, "LTC_CUDA_GRAPHS=%s: expected on or off", value);
    const char *fault = getenv("LTC_FAULT");
    const char *why = !run->backend->op.step_graph_begin
                          ? "this backend runs ops as they are called"
                      : fault && fault[0]      ? "LTC_FAULT changes the steps it fires in"
                                               : NULL;
    if (why) {
        snprintf(run->step_graphs_note, sizeof run->step_graphs_note,
                 "off (LTC_CUDA_GRAPHS=on, but %s)", why);
        return 0;
    }
    run->step_graphs = 1;
    run->method.fixed_shapes = 1;
    snprintf(run->step_graphs_note, sizeof run->step_graphs_note,
             "on (LTC_CUDA_GRAPHS=on): a graph per micro-batch of a step; each kind runs op by "
             "op once, is captured the next time and replayed after");
    return 0;
}

// Parts of steps of one kind queue the same work: the same micro-batch of
// the step (the last one also updates), the same images (a smaller last
// batch would change every shape) and the same groups updated (a group
// frozen for its first steps queues no update then). Everything else a step
// varies (learning rates, temperatures, momenta, staged draws, the stop
// request) reaches the device through the per-step parameter block and the
// staging sites, which a replay refills. With several ranks every rank
// names the same kinds at the same steps (the same batch per rank, the same
// schedule), so they capture and replay the same steps: NCCL requires a
// captured collective to be captured on every rank.
uint64_t train_step_part_kind(const TrainRun *run, long step, int micro, int images) {
    const uint64_t kind =
        ((uint64_t)images << METHOD_MAX_GROUPS) | method_active_groups(&run->method, step);
    return kind * (uint64_t)run->accumulate + (uint64_t)micro;
}
