// `lightly-train-c list-models` and `list-methods` (LightlyTrain's
// list_models and list_methods, both spellings): every name train's --model
// and --method take, one a line, so that scripts can read them (train
// --help shortens the model list).
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "nn/backbone.h"

int command_list(int argc, char **argv) {
    const char *command = argv[0];
    const int models = strcmp(command, "list-models") == 0 || strcmp(command, "list_models") == 0;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: lightly-train-c %s: the names train's --%s takes, one a line%s\n",
               command, models ? "model" : "method",
               models ? " (LightlyTrain's spellings such as torchvision/resnet50 are taken too)"
                      : " (the first is the default)");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "lightly-train-c: %s takes no options, got '%s'\n", command, argv[1]);
        return 2;
    }
    const char *const *names = models ? backbone_model_names : train_method_names;
    for (int i = 0; names[i]; i++) printf("%s\n", names[i]);
    return fflush(stdout) == 0 ? 0 : 1;
}
