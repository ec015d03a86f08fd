// The run's communicator from the launch environment (see dist_open.h).
#include "dist/dist_open.h"

#include <string.h>

#include "dist/comm_mpi.h"
#include "util/cpu.h"

int dist_open(const DistRequest *request, char *const *envp, DistRun *run, ErrorMessage *err) {
    *run = (DistRun){0};
    if (launch_env_detect(envp, &run->launch, err) ||
        launch_env_check_devices(&run->launch, request->devices, request->num_nodes,
                                 &run->devices, &run->num_nodes, err))
        return -1;
    const LaunchEnv *launch = &run->launch;
    if (launch->world_size == 1) {
        run->comm = comm_single_create(err);
        return run->comm ? 0 : -1;
    }
    if (request->gpu)
        return error_set(err, "%d GPU ranks: GPU training needs the CUDA backend, which this "
                              "build does not have yet", launch->world_size);
    run->comm = comm_mpi_create(request->timeout_seconds, err);
    if (!run->comm) return error_prefix(err, "%d CPU ranks", launch->world_size);
    if (run->comm->world_size != launch->world_size || run->comm->rank != launch->rank) {
        error_set(err, "%s says rank %d of %d, but MPI sees rank %d of %d: CPU ranks talk "
                       "through MPI, so start them with mpirun -np N (or srun --mpi=pmix)",
                  launch_kind_name(launch->kind), launch->rank, launch->world_size,
                  run->comm->rank, run->comm->world_size);
        comm_destroy(run->comm);
        run->comm = NULL;
        return -1;
    }
    return 0;
}

const char *dist_accelerator(const Communicator *comm, const char *requested,
                             ErrorMessage *err) {
    const int ranks = comm_world_size(comm);
    if (ranks == 1 || strcmp(requested, "cpu") == 0) return requested;
    if (strcmp(requested, "gpu") == 0) {
        error_set(err, "--accelerator gpu with %d ranks: GPU ranks (NCCL) are not wired yet; "
                       "use --accelerator cpu, or one process per GPU", ranks);
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
