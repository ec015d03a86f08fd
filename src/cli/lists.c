// `lightly-train-c list-models` and `list-methods` (LightlyTrain's
// list_models and list_methods, both spellings): every name train's --model
// and --method take, one a line, so that scripts can read them (train
// --help shortens the model list).
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "nn/backbone.h"
#include "weights/names.h"

// The presets, then LightlyTrain's DINOv2 and DINOv3 names that are no preset
// (weights_model_name): DINOv2's by their weights' names, every one also
// "-notpretrained"; then the other spellings train takes (torchvision/resnet50). Not the presets train refuses by LightlyTrain's meaning
// (dinov3/vitt16: its weights are LightlyTrain's own).
static void list_models(void) {
    char preset[64];
    const WeightsEntry *weights;
    for (int i = 0; backbone_model_names[i]; i++)
        if (weights_model_name(backbone_model_names[i], preset, sizeof preset, &weights, NULL) >= 0)
            printf("%s\n", backbone_model_names[i]);
    int count = 0;
    const WeightsEntry *entries = weights_entries(&count);
    for (int i = 0; i < count; i++)
        if (strncmp(entries[i].name, "dinov2/", 7) == 0)
            printf("%s\n%s-notpretrained\n", entries[i].name, entries[i].name);
    for (int i = 0; backbone_model_names[i]; i++)
        if (strncmp(backbone_model_names[i], "dinov3/", 7) == 0)
            printf("%s-notpretrained\n", backbone_model_names[i]);
    // LightlyTrain's own spellings of these (torchvision/resnet50)
    for (int i = 0; lightly_train_model_names[i]; i++)
        printf("%.*s\n", (int)strcspn(lightly_train_model_names[i], "="),
               lightly_train_model_names[i]);
}

int command_list(int argc, char **argv) {
    const char *command = argv[0];
    const int models = strcmp(command, "list-models") == 0 || strcmp(command, "list_models") == 0;
    if (argc == 2 && (strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0)) {
        printf("usage: lightly-train-c %s: the names train's --%s takes, one a line%s\n",
               command, models ? "model" : "method",
               models ? " (LightlyTrain's other spellings such as torchvision/resnet50 are taken "
                        "too)"
                      : " (the first is the default)");
        return 0;
    }
    if (argc > 1) {
        fprintf(stderr, "lightly-train-c: %s takes no options, got '%s'\n", command, argv[1]);
        return 2;
    }
    if (models) list_models();
    else
        for (int i = 0; train_method_names[i]; i++) printf("%s\n", train_method_names[i]);
    return fflush(stdout) == 0 ? 0 : 1;
}
