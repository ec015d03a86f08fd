// lightly-train-c: command dispatch only. Each sub-command lives in src/cli/.
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "backend/backend.h"
#include "dist/comm_nccl.h"
#include "dist/dist_open.h"

static void print_usage(FILE *stream) {
    fprintf(stream,
            "lightly-train-c %s: self-supervised pretraining of image backbones\n"
            "\n"
            "usage: lightly-train-c <command> [options]\n"
            "\n"
            "commands:\n"
            "  train        pretrain a backbone with self-supervised learning\n"
            "  bench-data   run the input pipeline alone and report what bounds it\n"
            "  export       write a checkpoint's backbone as a torchvision state dict\n"
            "  embed        write the embedding of every image in a folder\n"
            "\n"
            "Options are GNU long options (--data ./images) or LightlyTrain's\n"
            "key=value spelling (data=./images). 'lightly-train-c <command> --help'\n"
            "lists a command's options.\n"
            "\n" TRAIN_EXIT_STATUS_HELP "\n",
            LTC_VERSION);
}

// --version in CUDA builds: the GPUs and the GPU libraries this process
// loads (the loader's choice, from LD_LIBRARY_PATH), with a line saying why
// they cannot be used where they cannot.
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

int main(int argc, char **argv) {
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *command = argv[1];
    if (strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0 ||
        strcmp(command, "help") == 0) {
        print_usage(stdout);
        return 0;
    }
    if (strcmp(command, "--version") == 0 || strcmp(command, "version") == 0) {
        printf("lightly-train-c %s (MPI: %s, CUDA: %s)\n", LTC_VERSION,
               dist_mpi_built() ? "yes" : "no", backend_cuda_built() ? "yes" : "no");
        if (backend_cuda_built()) print_gpu_libraries();
        return 0;
    }
    if (strcmp(command, "train") == 0) return command_train(argc - 1, argv + 1);
    if (strcmp(command, "bench-data") == 0) return command_bench_data(argc - 1, argv + 1);
    if (strcmp(command, "export") == 0) return command_export(argc - 1, argv + 1);
    if (strcmp(command, "embed") == 0) return command_embed(argc - 1, argv + 1);
    fprintf(stderr, "lightly-train-c: unknown command '%s' (see lightly-train-c --help)\n",
            command);
    return 2;
}
