// lightly-train-c: command dispatch only. Each sub-command lives in src/cli/.
#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/weights_cli.h"
#include "util/crash_report.h"
#include "util/thread_wait.h"

static void print_usage(FILE *stream) {
    fprintf(stream,
            "lightly-train-c %s: self-supervised pretraining of image backbones\n"
            "\n"
            "usage: lightly-train-c <command> [options]\n"
            "\n"
            "commands:\n"
            "  train        pretrain a backbone with self-supervised learning (also:\n"
            "               pretrain, LightlyTrain's name since 0.13)\n"
            "  bench-data   run the input pipeline alone and report what bounds it\n"
            "  export       write a checkpoint's backbone as a torchvision state dict\n"
            "  embed        write the embedding of every image in a folder\n"
            "  weights      list, download and locate pretrained weights by name\n"
            "  list-models  the names --model takes (list-methods: --method's)\n"
            "\n"
            "Options are GNU long options (--data ./images) or LightlyTrain's\n"
            "key=value spelling (data=./images). 'lightly-train-c <command> --help'\n"
            "lists a command's options.\n"
            "\n" TRAIN_EXIT_STATUS_HELP "\n",
            LTC_VERSION);
}

// Runs command with its arguments (argv[0]: the command's name).
static int run_command(const char *command, int argc, char **argv) {
    if (strcmp(command, "--version") == 0 || strcmp(command, "version") == 0) {
        if (argc == 2 && strcmp(argv[1], "--help") == 0) {
            printf("usage: lightly-train-c --version: this build's version and the libraries "
                   "it finds\n");
            return 0;
        }
        if (argc > 1) {
            fprintf(stderr, "lightly-train-c: %s takes no options, got '%s'\n", command, argv[1]);
            return 2;
        }
        return command_version();
    }
    if (strcmp(command, "train") == 0 || strcmp(command, "pretrain") == 0)
        return command_train(argc, argv);
    if (strcmp(command, "bench-data") == 0) return command_bench_data(argc, argv);
    if (strcmp(command, "export") == 0) return command_export(argc, argv);
    if (strcmp(command, "embed") == 0) return command_embed(argc, argv);
    if (strcmp(command, "weights") == 0) return command_weights(argc, argv);
    if (strcmp(command, "list-models") == 0 || strcmp(command, "list_models") == 0 ||
        strcmp(command, "list-methods") == 0 || strcmp(command, "list_methods") == 0)
        return command_list(argc, argv);
    fprintf(stderr, "lightly-train-c: unknown command '%s' (see lightly-train-c --help)\n",
            command);
    return 2;
}

int main(int argc, char **argv) {
    // A reader of our output that goes away (`... | head`, a notebook's
    // pipe closed, a killed launcher) must not kill a run with SIGPIPE
    // before its checkpoint: writes to it fail with EPIPE instead, and the
    // output is lost, not the training.
    signal(SIGPIPE, SIG_IGN);
    crash_report_install();
    if (argc < 2) {
        print_usage(stderr);
        return 2;
    }
    const char *command = argv[1];
    if (strcmp(command, "--help") == 0 || strcmp(command, "-h") == 0 ||
        strcmp(command, "help") == 0) {
        if (argc == 3 && argv[2][0] != '-') {  // "help train": the command's own help
            char *help_argv[] = {argv[2], "--help", NULL};
            return run_command(argv[2], 2, help_argv);
        }
        if (argc > 2) {
            fprintf(stderr, "lightly-train-c: %s takes at most a command's name\n", command);
            return 2;
        }
        print_usage(stdout);
        return 0;
    }
    // The commands that compute: their OpenMP threads sleep while they wait.
    if (strcmp(command, "train") == 0 || strcmp(command, "embed") == 0 ||
        strcmp(command, "bench-data") == 0)
        thread_wait_passive(argv);
    return run_command(command, argc - 1, argv + 1);
}
