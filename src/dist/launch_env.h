// Which launcher started this process, and this process's place in the run:
// read from the environment the launchers clusters use set for each rank.
//
//   OpenMPI (mpirun)   OMPI_COMM_WORLD_SIZE, _RANK, _LOCAL_RANK, _LOCAL_SIZE
//   torchrun style     RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE,
//                      GROUP_RANK (node rank), MASTER_ADDR, MASTER_PORT,
//                      TORCHELASTIC_RUN_ID / TORCHELASTIC_RESTART_COUNT (token)
//   SLURM (srun)       SLURM_PROCID, SLURM_STEP_NUM_TASKS (else SLURM_NTASKS),
//                      SLURM_LOCALID, SLURM_NODEID, SLURM_STEP_NUM_NODES (else
//                      SLURM_NNODES), SLURM_STEP_NODELIST (else SLURM_NODELIST:
//                      its first host is the rendezvous host), SLURM_CPUS_PER_TASK,
//                      SLURM_JOB_ID, SLURM_STEP_ID, SLURM_RESTART_COUNT
//
// When several are present the one that started this very process wins:
// OpenMPI over torchrun over SLURM (mpirun or torchrun run inside a SLURM
// allocation). SLURM counts only with SLURM_STEP_ID, i.e. for tasks started
// by srun: a batch script itself also sees SLURM_PROCID=0 and
// SLURM_NTASKS=N, but it is one process, not rank 0 of N.
//
// A launcher's variables must be complete and agree with each other (rank
// inside the world, local rank inside the node, whole nodes): otherwise the
// error names the variables and their values. MASTER_ADDR / MASTER_PORT
// override SLURM's host and port too.
#ifndef LTC_DIST_LAUNCH_ENV_H
#define LTC_DIST_LAUNCH_ENV_H

#include <stddef.h>

#include "util/error.h"

typedef enum LaunchKind {
    LAUNCH_NONE,      // started by hand: one process
    LAUNCH_OPENMPI,
    LAUNCH_TORCHRUN,
    LAUNCH_SLURM,
} LaunchKind;

typedef struct LaunchEnv {
    LaunchKind kind;
    int rank, world_size;
    int local_rank, local_world_size;  // within this node
    int node_rank, num_nodes;
    char master_addr[256];  // rank 0's host for the TCP rendezvous; "" when unknown
    int master_port;        // 0 when unknown
    int cpus_per_task;      // SLURM_CPUS_PER_TASK; 0 when unset
    // Identifies this run for the rendezvous (a peer with another token is
    // from another run): launcher job/run id and restart count, "" when the
    // launcher gives none.
    char run_token[128];
} LaunchEnv;

// Reads the launch from envp (NULL-terminated "NAME=VALUE" strings, e.g.
// `environ`). Returns 0, or -1 with a message naming the variables when they
// are incomplete, not numbers or inconsistent.
int launch_env_detect(char *const *envp, LaunchEnv *env, ErrorMessage *err);

// "OpenMPI (mpirun)", "torchrun-style environment", "SLURM (srun)", "none".
const char *launch_kind_name(LaunchKind kind);

// Checks --devices (per node; <= 0: auto) and --num-nodes (<= 0: auto)
// against the launch and fills the resolved values: devices = the
// launcher's processes per node, num_nodes = its nodes. Without a launcher
// one process runs, so more than one device or node is an error saying how
// to launch them.
int launch_env_check_devices(const LaunchEnv *env, int devices, int num_nodes,
                             int *devices_out, int *num_nodes_out, ErrorMessage *err);

// The first host of a SLURM host list: "gpu[07-09,12],cpu1" -> "gpu07".
int slurm_first_host(const char *nodelist, char *host, size_t size, ErrorMessage *err);

#endif
