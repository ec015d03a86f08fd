// Deciding where this process runs and starting GPU workers (see ranks.h).
#include "cli/ranks.h"

#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "dist/local_launch.h"

extern char **environ;

// After one worker failed, the time the others get to stop on SIGTERM
// (writing their stop checkpoint is rank 0's, at a step boundary).
#define WORKER_GRACE_SECONDS 60.0

static int parse_index(const char *text, char **end) {
    if (*text < '0' || *text > '9') return -1;
    const long value = strtol(text, end, 10);
    return value > 4096 ? -1 : (int)value;
}

int device_spec_parse(const char *text, DeviceSpec *spec, ErrorMessage *err) {
    *spec = (DeviceSpec){.count = -1};
    if (!text || strcmp(text, "auto") == 0) return 0;
    // Without a comma a number is a count; with one, GPU indices ("0,2", or
    // "1," for GPU 1 alone: a trailing comma is how a list of one is written).
    if (!strchr(text, ',')) {
        char *end;
        const int count = parse_index(text, &end);
        if (count < 1 || *end)
            return error_set(err, "--devices '%s': expected auto, a count (1 or more) or a list "
                                  "of GPU indices such as 0,2 (1, for GPU 1 alone)", text);
        spec->count = count;
        return 0;
    }
    const char *at = text;
    while (*at) {
        char *end;
        const int id = parse_index(at, &end);
        if (id < 0 || (*end && *end != ','))
            return error_set(err, "--devices '%s': a list holds GPU indices separated by "
                                  "commas, such as 0,2", text);
        for (int i = 0; i < spec->id_count; i++)
            if (spec->ids[i] == id)
                return error_set(err, "--devices '%s': GPU %d is listed twice", text, id);
        if (spec->id_count == RANKS_MAX_DEVICES)
            return error_set(err, "--devices '%s': more than %d GPUs", text, RANKS_MAX_DEVICES);
        spec->ids[spec->id_count++] = id;
        at = *end ? end + 1 : end;  // a comma may end the list: "1," is GPU 1 alone
    }
    spec->count = spec->id_count;
    return 0;
}

// Runs `workers` copies of this program with the same arguments.
static int launch_workers(int workers, char **argv, int *exit_status, ErrorMessage *err) {
    int argc = 0;
    while (argv[argc]) argc++;
    char **worker_argv = calloc((size_t)argc + 2, sizeof *worker_argv);
    if (!worker_argv) return error_set(err, "out of memory for the workers' arguments");
    worker_argv[0] = "lightly-train-c";
    for (int i = 0; i < argc; i++) worker_argv[i + 1] = argv[i];
    const LocalLaunch launch = {.workers = workers, .program = "/proc/self/exe",
                                .argv = worker_argv, .envp = environ,
                                .grace_seconds = WORKER_GRACE_SECONDS};
    const int status = local_launch_run(&launch, exit_status, err);
    free(worker_argv);
    return status;
}

// GPU ranks: the launch decides (see ranks.h); gpus = the visible count.
static int start_gpu_ranks(const RankRequest *request, const DeviceSpec *spec, int gpus,
                           char **argv, RankPlace *place, int *exit_status, ErrorMessage *err) {
    for (int i = 0; i < spec->id_count; i++)
        if (spec->ids[i] >= gpus)
            return error_set(err, "--devices %s: GPU %d does not exist (%d visible)",
                             request->devices, spec->ids[i], gpus);
    LaunchEnv launch;
    if (launch_env_detect(environ, &launch, err)) return -1;
    if (launch.kind == LAUNCH_NONE) {
        const int devices = spec->count < 0 ? gpus : spec->count;
        if (devices > gpus)
            return error_set(err, "--devices %d: only %d GPU%s visible", devices, gpus,
                             gpus == 1 ? "" : "s");
        if (devices > 1) {
            if (launch_workers(devices, argv, exit_status, err)) return -1;
            return RANKS_LAUNCHED;
        }
    }
    // The devices are checked against the launch first: a list is indexed by
    // the local rank below (dist_open checks again when it opens NCCL).
    if (launch_env_check_devices(&launch, spec->count, request->num_nodes, &place->dist.devices,
                                 &place->dist.num_nodes, err))
        return -1;
    const int local_rank = launch.kind == LAUNCH_NONE ? 0 : launch.local_rank;
    place->gpu = spec->id_count ? spec->ids[local_rank] : local_rank;
    if (place->gpu >= gpus)
        return error_set(err, "local rank %d would use GPU %d, but %d %s visible (one GPU per "
                              "rank: start at most %d ranks per node)",
                         local_rank, place->gpu, gpus, gpus == 1 ? "is" : "are", gpus);
    const DistRequest dist = {.gpu = 1, .gpu_device = place->gpu, .devices = spec->count,
                              .num_nodes = request->num_nodes,
                              .timeout_seconds = request->timeout_seconds};
    if (dist_open(&dist, environ, &place->dist, err)) return -1;
    place->accelerator = "gpu";
    return RANKS_THIS_PROCESS;
}

int ranks_start(const RankRequest *request, char **argv, RankPlace *place, int *exit_status,
                ErrorMessage *err) {
    *place = (RankPlace){.accelerator = request->accelerator};
    *exit_status = 0;
    DeviceSpec spec;
    if (device_spec_parse(request->devices, &spec, err)) return -1;
    char why[256] = "";
    const int gpus = strcmp(request->accelerator, "cpu") == 0 ? 0
                                                               : backend_gpu_count(why, sizeof why);
    if (strcmp(request->accelerator, "gpu") == 0 && gpus == 0)
        return error_set(err, "--accelerator gpu: no usable GPU: %s", why);
    if (gpus > 0) return start_gpu_ranks(request, &spec, gpus, argv, place, exit_status, err);
    if (spec.id_count)
        return error_set(err, "--devices %s names GPUs, but this run is on the CPU (%s)",
                         request->devices,
                         strcmp(request->accelerator, "cpu") == 0 ? "--accelerator cpu" : why);
    const DistRequest dist = {.gpu = 0, .devices = spec.count, .num_nodes = request->num_nodes,
                              .timeout_seconds = request->timeout_seconds};
    if (dist_open(&dist, environ, &place->dist, err)) return -1;
    place->accelerator = dist_accelerator(place->dist.comm, request->accelerator, err);
    if (!place->accelerator) {
        comm_destroy(place->dist.comm);
        place->dist.comm = NULL;
        return -1;
    }
    return RANKS_THIS_PROCESS;
}

int ranks_refuse(const DistRun *dist) {
    if (comm_world_size(dist->comm) > 1) comm_abort(dist->comm, 2);
    comm_destroy(dist->comm);
    return 2;
}
