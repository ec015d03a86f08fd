// Opening the run's communicator from the launch environment: the one call
// a command makes before training or embedding (see docs/distributed.md).
//
//   one process (no launcher, or a launcher that started one) -> single
//   CPU ranks started by mpirun / srun (PMIx)                 -> MPI
//   GPU ranks (torchrun-style, SLURM, mpirun, or started by
//   cli/ranks.c, one per GPU)                                 -> NCCL; its id
//                     through MPI under mpirun, else the TCP rendezvous
//
// --devices and --num-nodes are checked against the launch (launch_env.h).
// Under SLURM or torchrun-style variables the MPI world must agree with
// them, or the error says how to launch CPU ranks.
#ifndef LTC_DIST_DIST_OPEN_H
#define LTC_DIST_DIST_OPEN_H

#include "dist/comm.h"
#include "dist/launch_env.h"

// Long enough for rank 0 to write a checkpoint or vote in a kNN evaluation
// while the others wait; short enough that a hang ends within minutes.
#define DIST_DEFAULT_TIMEOUT 600.0

typedef struct DistRequest {
    int gpu;                 // 1: GPU ranks (NCCL), 0: CPU ranks (MPI)
    int gpu_device;          // GPU ranks: this rank's CUDA device
    int devices;             // per node; <= 0: auto
    int num_nodes;           // <= 0: auto
    double timeout_seconds;  // bound on every collective
} DistRequest;

typedef struct DistRun {
    Communicator *comm;
    LaunchEnv launch;
    int devices, num_nodes;  // resolved
} DistRun;

// envp: the environment (`environ`). Returns 0 or -1 with a message (bad
// options or launch: the command exits 2).
int dist_open(const DistRequest *request, char *const *envp, DistRun *run, ErrorMessage *err);

// The --accelerator a rank of comm runs with: NCCL ranks run on their GPU;
// one process keeps what was asked; MPI ranks run on the CPU ("auto"
// becomes "cpu") and "gpu" is refused (NULL, err): MPI must never be handed
// device memory.
const char *dist_accelerator(const Communicator *comm, const char *requested,
                             ErrorMessage *err);

// CPU cores this rank may use: the process's usable cores shared by the
// ranks of its node, unless SLURM gave each task its own
// (SLURM_CPUS_PER_TASK, already in cpu_usable_cores). At least 1.
int dist_cores_per_rank(const DistRun *run);
// 1 when this build can run CPU ranks over MPI.
int dist_mpi_built(void);

// For --version: the libraries ranks open at run time, up to `most` names
// and file names (the GPU ranks' NCCL in CUDA builds, the CPU ranks'
// OpenMPI in MPI builds); returns how many.
int dist_libraries(const char **names, const char **files, int most);
// For --version: the GPU ranks' communication library as it loads now: its
// name, and its version and file in text; -1 with err where this build
// cannot use it.
int dist_gpu_library(const char **name, char *text, size_t size, ErrorMessage *err);

#endif
