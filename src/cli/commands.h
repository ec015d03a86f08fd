// Sub-command entry points: each parses its own options and returns the exit
// status, one rule for every command (EXIT_STATUS_HELP, also in --help and
// docs/training.md): 0 done; 2 bad input, found before any work (an
// option, a path, a file); 1 a failure while running (an I/O error, a
// diverging run); train also 130 / 143 after SIGINT / SIGTERM with a
// checkpoint written.
#ifndef LTC_CLI_COMMANDS_H
#define LTC_CLI_COMMANDS_H

#define EXIT_STATUS_HELP                                                              \
    "Exit status: 0 done; 2 bad input (an option, a path or a file; found before\n" \
    "any work); 1 a failure while running (an I/O error, a diverging run)."
#define TRAIN_EXIT_STATUS_HELP                                                          \
    EXIT_STATUS_HELP "\ntrain: 130 / 143 stopped by SIGINT / SIGTERM after writing a checkpoint\n" \
    "(continue with the same command plus --resume)."

// --dist-timeout of train and embed (a double, seconds; dist_open.h's default).
#define DIST_TIMEOUT_OPTION(target)                                                             \
    {.name = "dist-timeout", .type = OPTION_FLOAT, .value = (target), .metavar = "SECONDS",     \
     .help = "several ranks: stop when the others do not answer within this time", .min = 1,  \
     .max = 1e6}

// The image-reading options of train, embed and bench-data (rows of their
// OptionSpec tables): a double for --max-pixels, an int index into
// OPTION_BOOLEAN_CHOICES for --exif-orientation.
#define MAX_PIXELS_OPTION(target)                                                               \
    {.name = "max-pixels", .type = OPTION_FLOAT, .value = (target), .metavar = "N",             \
     .help = "skip images that would decode to more pixels", .min = 1, .max = 1e12}
#define EXIF_ORIENTATION_OPTION(target)                                                         \
    {.name = "exif-orientation", .type = OPTION_CHOICE, .value = (target),                      \
     .metavar = "true|false",                                                                  \
     .help = "apply EXIF orientation tags (false: pixels as Pillow and LightlyTrain read them)", \
     .choices = OPTION_BOOLEAN_CHOICES}

// --method's names, NULL-ended; the first is the default (LightlyTrain's).
// LightlyTrain's spellings of --model values ("torchvision/resnet50=resnet50").
extern const char *const lightly_train_model_names[];
extern const char *const train_method_names[];

int command_train(int argc, char **argv);
// list-models, list-methods (LightlyTrain's list_models, list_methods): the
// names --model and --method take, one a line. argv[0] is the command.
int command_list(int argc, char **argv);
int command_bench_data(int argc, char **argv);
int command_export(int argc, char **argv);
int command_embed(int argc, char **argv);
// --version: the version, what was built in, and where the libraries opened
// at run time (CUDA's, OpenMPI) are found now.
int command_version(void);

#endif
