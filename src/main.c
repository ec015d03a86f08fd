// lightly-train-c: command dispatch only. Each sub-command lives in src/cli/.
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/weights_cli.h"

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
            "  weights      list, download and locate pretrained weights by name\n"
            "\n"
            "Options are GNU long options (--data ./images) or LightlyTrain's\n"
            "key=value spelling (data=./images). 'lightly-train-c <command> --help'\n"
            "lists a command's options.\n"
            "\n" TRAIN_EXIT_STATUS_HELP "\n",
            LTC_VERSION);
}

int main(int argc, char **argv) {
    // A reader of our output that goes away (`... | head`, a notebook's
    // pipe closed, a killed launcher) must not kill a run with SIGPIPE
    // before its checkpoint: writes to it fail with EPIPE instead, and the
    // output is lost, not the training.
    signal(SIGPIPE, SIG_IGN);
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
    if (strcmp(command, "--version") == 0 || strcmp(command, "version") == 0)
        return command_version();
    if (strcmp(command, "train") == 0) return command_train(argc - 1, argv + 1);
    if (strcmp(command, "bench-data") == 0) return command_bench_data(argc - 1, argv + 1);
    if (strcmp(command, "export") == 0) return command_export(argc - 1, argv + 1);
    if (strcmp(command, "embed") == 0) return command_embed(argc - 1, argv + 1);
    if (strcmp(command, "weights") == 0) return command_weights(argc - 1, argv + 1);
    fprintf(stderr, "lightly-train-c: unknown command '%s' (see lightly-train-c --help)\n",
            command);
    return 2;
}
