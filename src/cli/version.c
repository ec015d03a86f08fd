// lightly-train-c --version: the version and build, then one line per
// library the program opens at run time instead of linking (cuDNN, cuBLAS,
// NCCL, OpenMPI; util/dynamic_library.h) with the file the loader finds
// now, or why it finds none. That answers "will this run use the GPU / MPI
// here?" before a run, e.g. after `pip install lightly-train-c[cuda]`.
// Locating loads each library briefly (cuBLAS: about 0.3 s). CUDA builds
// then name the GPUs and the versions of the GPU libraries loaded, with a
// line saying why they cannot be used where they cannot.
#include <stdio.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "dist/comm_nccl.h"
#include "dist/dist_open.h"
#include "dist/mpi_library.h"
#include "dist/nccl_library.h"
#include "util/dynamic_library.h"

static void report(const char *name, const char *file) {
    char found[512];
    const int status = dynamic_library_locate(file, found, sizeof found);
    printf("  %-7s %s\n", name, status == 0 ? found : "not found");
    if (status != 0) printf("          (%s)\n", found);
}

// CUDA builds: the GPUs, and the GPU libraries as loaded (versions, files).
static void print_gpu_libraries(void) {
    char text[1024];
    ErrorMessage err = {{0}};
    const int gpus = backend_gpu_count(text, sizeof text);
    if (gpus > 0)
        printf("GPUs: %d\n", gpus);
    else
        printf("GPUs: none (%s)\n", text);
    const int libraries = backend_gpu_libraries(text, sizeof text, &err);
    printf("GPU libraries: %s\n", text[0] ? text : "unreadable");
    if (libraries) printf("GPU libraries unusable: %s\n", err.text);
    err.text[0] = '\0';
    const int nccl = comm_nccl_version(text, sizeof text, &err);
    printf("NCCL: %s\n", text);
    if (nccl) printf("NCCL unusable: %s\n", err.text);
}

int command_version(void) {
    printf("lightly-train-c %s (MPI: %s, CUDA: %s)\n", LTC_VERSION,
           dist_mpi_built() ? "yes" : "no", backend_cuda_built() ? "yes" : "no");
    const char *names[4], *files[4];
    const int cuda = backend_cuda_libraries(names, files, 4);
    if (cuda > 0 || dist_mpi_built()) printf("libraries opened at run time:\n");
    for (int i = 0; i < cuda; i++) report(names[i], files[i]);
    if (cuda > 0) report("NCCL", nccl_library_file());
    if (dist_mpi_built()) report("OpenMPI", mpi_library_file());
    if (backend_cuda_built()) print_gpu_libraries();
    return 0;
}
