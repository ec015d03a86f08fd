// Where this process runs in a data-parallel job, for `train` and `embed`:
// the GPUs or CPU it uses, its communicator, and whether it must first
// start one worker per GPU itself (docs/distributed.md).
//
//   --accelerator gpu, or auto with a usable GPU:
//     no launcher, --devices resolving to N > 1 GPUs -> start N workers
//       (dist/local_launch.h) and wait for them; this process trains nothing
//     no launcher, one GPU                           -> this process, one rank
//     a launcher (torchrun-style, SLURM, mpirun)     -> this rank, on GPU
//       LOCAL_RANK (or the LOCAL_RANK-th of a --devices list), NCCL
//   otherwise (CPU):
//     no launcher -> one process; mpirun / srun      -> CPU ranks over MPI
//
// --devices: "auto" (every visible GPU, CUDA_VISIBLE_DEVICES honoured; under
// a launcher its processes per node), a count N, or a list of GPU indices
// "0,2" (GPUs only).
#ifndef LTC_CLI_RANKS_H
#define LTC_CLI_RANKS_H

#include "dist/dist_open.h"
#include "util/error.h"

#define RANKS_MAX_DEVICES 64

typedef struct DeviceSpec {
    int count;                     // devices per node; -1: auto
    int ids[RANKS_MAX_DEVICES];    // a list's GPU indices; id_count 0 without a list
    int id_count;
} DeviceSpec;

// Parses --devices. Returns 0 or -1 with a message naming the option.
int device_spec_parse(const char *text, DeviceSpec *spec, ErrorMessage *err);

typedef struct RankRequest {
    const char *accelerator;    // "auto", "cpu", "gpu"
    const char *devices;        // --devices as given
    int num_nodes;              // --num-nodes; -1: auto
    double timeout_seconds;     // bound on every collective
} RankRequest;

typedef struct RankPlace {
    DistRun dist;               // the communicator and the resolved devices, nodes
    const char *accelerator;    // what this rank runs on: "gpu", "cpu" or "auto"
    int gpu;                    // its GPU index (among the visible ones) when on a GPU
} RankPlace;

enum { RANKS_THIS_PROCESS = 0, RANKS_LAUNCHED = 1 };

// RANKS_THIS_PROCESS: *place is filled, this process is a rank. RANKS_LAUNCHED:
// this process started the workers and they have ended; *exit_status is the
// launch's. -1: bad options or launch (exit 2), message in err. argv is
// the command line the workers repeat.
int ranks_start(const RankRequest *request, char **argv, RankPlace *place, int *exit_status,
                ErrorMessage *err);

// Ends this rank for bad input found after ranks_start and before any
// collective work (weights that cannot be fetched): with several ranks all
// of them exit 2 (comm_abort, which does not return), else the communicator
// is closed. Returns 2, the exit status.
int ranks_refuse(const DistRun *dist);

#endif
