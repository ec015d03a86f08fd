// The run's communicator from the launch environment (see dist_open.h).
#include "dist/dist_open.h"

#include <string.h>

#include "dist/comm_mpi.h"
#include "dist/comm_nccl.h"
#include "dist/mpi_library.h"
#include "dist/nccl_library.h"
#include "util/cpu.h"

// MPI's view of the world must be the launcher's.
static int check_mpi_world(const LaunchEnv *launch, const Communicator *comm, ErrorMessage *err) {
    if (comm->world_size == launch->world_size && comm->rank == launch->rank) return 0;
    return error_set(err, "%s says rank %d of %d, but MPI sees rank %d of %d: start the ranks "
                          "with mpirun -np N (or srun --mpi=pmix)",
                     launch_kind_name(launch->kind), launch->rank, launch->world_size,
                     comm->rank, comm->world_size);
}

// GPU ranks: NCCL, its id through MPI under mpirun (when MPI is built in),
// else through the TCP rendezvous at MASTER_ADDR:MASTER_PORT.
static int open_nccl(const DistRequest *request, DistRun *run, ErrorMessage *err) {
    const LaunchEnv *launch = &run->launch;
    Communicator *bootstrap = NULL;
    if (launch->kind == LAUNCH_OPENMPI && comm_mpi_available()) {
        bootstrap = comm_mpi_create(request->timeout_seconds, err);
        if (!bootstrap) return error_prefix(err, "%d GPU ranks", launch->world_size);
        if (check_mpi_world(launch, bootstrap, err)) {
            comm_destroy(bootstrap);
            return -1;
        }
    } else if (!launch->master_addr[0] || launch->master_port == 0) {
        return error_set(err, "%d GPU ranks started by %s: NCCL's id goes through rank 0's "
                              "MASTER_ADDR and MASTER_PORT, which are not set",
                         launch->world_size, launch_kind_name(launch->kind));
    }
    const NcclSetup setup = {
        .rank = launch->rank,
        .world_size = launch->world_size,
        .local_rank = launch->local_rank,
        .local_world_size = launch->local_world_size,
        .device = request->gpu_device,
        .bootstrap = bootstrap,
        .host = launch->master_addr,
        .port = launch->master_port,
        .token = launch->run_token,
        .timeout_seconds = request->timeout_seconds,
    };
    run->comm = comm_nccl_create(&setup, err);
    if (bootstrap) comm_destroy(bootstrap);
    return run->comm ? 0 : error_prefix(err, "%d GPU ranks", launch->world_size);
}

int dist_open(const DistRequest *request, char *const *envp, DistRun *run, ErrorMessage *err) {
    *run = (DistRun){0};
    if (launch_env_detect(envp, &run->launch, err) ||
        launch_env_check_devices(&run->launch, request->devices, request->num_nodes,
                                 &run->devices, &run->num_nodes, err))
        return -1;
    const LaunchEnv *launch = &run->launch;
    // A launcher's GPU rank is an NCCL world even alone (as torchrun's
    // single process is): make test-gpu checks NCCL on one GPU that way.
    if (launch->world_size == 1 && !(request->gpu && launch->kind != LAUNCH_NONE)) {
        run->comm = comm_single_create(err);
        return run->comm ? 0 : -1;
    }
    if (request->gpu) return open_nccl(request, run, err);
    run->comm = comm_mpi_create(request->timeout_seconds, err);
    if (!run->comm) return error_prefix(err, "%d CPU ranks", launch->world_size);
    if (check_mpi_world(launch, run->comm, err)) {
        error_prefix(err, "CPU ranks talk through MPI");
        comm_destroy(run->comm);
        run->comm = NULL;
        return -1;
    }
    return 0;
}

const char *dist_accelerator(const Communicator *comm, const char *requested,
                             ErrorMessage *err) {
    const int ranks = comm_world_size(comm);
    if (comm && strcmp(comm->name, "nccl") == 0) return "gpu";
    if (ranks == 1 || strcmp(requested, "cpu") == 0) return requested;
    if (strcmp(requested, "gpu") == 0) {
        error_set(err, "--accelerator gpu with %d ranks over MPI: MPI carries host memory "
                       "only; GPU ranks talk through NCCL", ranks);
        return NULL;
    }
    return "cpu";
}

int dist_cores_per_rank(const DistRun *run) {
    const int usable = cpu_usable_cores();
    if (run->launch.cpus_per_task > 0) return usable;
    const int shared = usable / (run->launch.local_world_size > 0 ? run->launch.local_world_size : 1);
    return shared > 0 ? shared : 1;
}

int dist_mpi_built(void) {
    return comm_mpi_available();
}

int dist_libraries(const char **names, const char **files, int most) {
    int count = 0;
#ifdef LTC_WITH_CUDA
    if (count < most) names[count] = "NCCL", files[count++] = nccl_library_file();
#endif
    if (dist_mpi_built() && count < most)
        names[count] = "OpenMPI", files[count++] = mpi_library_file();
    return count;
}

int dist_gpu_library(const char **name, char *text, size_t size, ErrorMessage *err) {
    *name = "NCCL";
    return comm_nccl_version(text, size, err);
}
