// lightly-train-c --version: the version and build, then one line per
// library the program opens at run time instead of linking (the backend's
// GPU libraries, the ranks' communication libraries;
// util/dynamic_library.h) with the file the loader finds now, or why it
// finds none. That answers "will this run use the GPU / several ranks
// here?" before a run, e.g. after `pip install lightly-train-c[cuda]`.
// Locating loads each library briefly (cuBLAS: about 0.3 s). GPU builds
// then name the GPUs and the versions of the GPU libraries loaded, with a
// line saying why they cannot be used where they cannot. The libraries are
// named by the backend and dist layers; this file only prints.
#include <stdio.h>

#include "backend/backend.h"
#include "cli/commands.h"
#include "dist/dist_open.h"
#include "util/dynamic_library.h"

static void report(const char *name, const char *file) {
    char found[512];
    const int status = dynamic_library_locate(file, found, sizeof found);
    printf("  %-7s %s\n", name, status == 0 ? found : "not found");
    if (status != 0) printf("          (%s)\n", found);
}

// GPU builds: the GPUs, and the GPU libraries as loaded (versions, files).
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
    const char *communication = NULL;
    const int unusable = dist_gpu_library(&communication, text, sizeof text, &err);
    printf("%s: %s\n", communication, text);
    if (unusable) printf("%s unusable: %s\n", communication, err.text);
}

int command_version(void) {
    printf("lightly-train-c %s (MPI: %s, CUDA: %s)\n", LTC_VERSION,
           dist_mpi_built() ? "yes" : "no", backend_cuda_built() ? "yes" : "no");
    const char *names[8], *files[8];
    int count = backend_cuda_libraries(names, files, 4);
    count += dist_libraries(names + count, files + count, 8 - count);
    if (count > 0) printf("libraries opened at run time:\n");
    for (int i = 0; i < count; i++) report(names[i], files[i]);
    if (backend_cuda_built()) print_gpu_libraries();
    return 0;
}
