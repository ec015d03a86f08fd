// The initial weights LightlyTrain's model_args choose (see model_weights.h):
// what torchvision.models.get_model and timm.create_model load for them,
// fetched by name as any --checkpoint NAME (weights/names.h).
#include "cli/model_weights.h"

#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "nn/backbone.h"
#include "util/number.h"
#include "weights/names.h"
#include "weights/resolve.h"
#include "weights/timm_tags.h"

// torchvision's ResNets ("resnet50": LightlyTrain's torchvision/resnet50).
static const char *const torchvision_resnets[] = {"resnet18",  "resnet34",        "resnet50",
                                                  "resnet101", "resnet152",       "wide_resnet50_2",
                                                  "wide_resnet101_2"};

// The index of model among them, -1 when it is not one.
static int torchvision_resnet_index(const char *model) {
    for (int r = 0; r < (int)(sizeof torchvision_resnets / sizeof torchvision_resnets[0]); r++)
        if (strcmp(model, torchvision_resnets[r]) == 0) return r;
    return -1;
}

// The value of KEY=VALUE entries of key (the last one given), each taken out
// of args; NULL when there is none.
static const char *take_arg(StringList *args, const char *key) {
    const size_t length = strlen(key);
    const char *value = NULL;
    for (int i = 0; i < args->count; i++) {
        if (strncmp(args->items[i], key, length) != 0 || args->items[i][length] != '=') continue;
        value = args->items[i] + length + 1;
        for (int j = i; j + 1 < args->count; j++) args->items[j] = args->items[j + 1];
        args->count--;
        i--;
    }
    return value;
}

// torchvision's models with weights of their own here: its ConvNeXts and
// ShuffleNetV2s (weights/names.c: "torchvision/convnext_tiny.IMAGENET1K_V1").
static int torchvision_own_weights(const char *model) {
    return strncmp(model, "torchvision/convnext_", 21) == 0 ||
           strncmp(model, "torchvision/shufflenet_v2_", 26) == 0;
}

// The weights torchvision's enum value names, as --checkpoint NAME into
// name[size]; "" for "None" (torchvision's default: none). ResNets:
// IMAGENET1K_V1 is timm's copy tv_in1k, IMAGENET1K_V2 its tv2_in1k (resnet50
// and larger), DEFAULT the newest; ConvNeXts and ShuffleNetV2s have
// IMAGENET1K_V1 (their DEFAULT). Also "ResNet50_Weights.IMAGENET1K_V2".
static int torchvision_weights(const char *model, const char *given, char *name, size_t size,
                               ErrorMessage *err) {
    const char *value = given, *dot = strrchr(given, '.');
    if (dot && strstr(given, "_Weights.")) value = dot + 1;
    const int resnet = torchvision_resnet_index(model), own = torchvision_own_weights(model);
    const int has_v2 = resnet >= 2;  // torchvision's V2: resnet50 and larger
    const int v1 = strcmp(value, "IMAGENET1K_V1") == 0, v2 = strcmp(value, "IMAGENET1K_V2") == 0;
    const int best = strcmp(value, "DEFAULT") == 0;
    name[0] = '\0';
    if (resnet < 0 && !own)
        return error_set(err, "--model-arg weights=%s: torchvision's weights are taken for its "
                              "ResNets (resnet18 ... wide_resnet101_2), ConvNeXts and "
                              "ShuffleNetV2s; for --model %s give --checkpoint NAME|FILE", given,
                         model);
    if (!strcmp(value, "None") || !strcmp(value, "none") || !strcmp(value, "null")) return 0;
    if (own && (v1 || best)) snprintf(name, size, "%s.IMAGENET1K_V1", model);
    else if (resnet >= 0 && (v1 || v2 || best) && (has_v2 || !v2))
        snprintf(name, size, "timm/%s.%s", model, (v2 || best) && has_v2 ? "tv2_in1k" : "tv_in1k");
    else
        return error_set(err, "--model-arg weights=%s: --model %s has torchvision's "
                              "IMAGENET1K_V1%s, DEFAULT or None", given, model,
                         has_v2 ? ", IMAGENET1K_V2" : "");
    return 0;
}

// timm.create_model(ARCH[.TAG], pretrained=True): the tag given with the
// name, else timm's default; *tag NULL where timm has no weights (it warns
// and initialises randomly, as here).
static int timm_pretrained_tag(const char *model, const char *name_tag, const char **tag,
                               ErrorMessage *err) {
    *tag = name_tag ? name_tag : timm_default_tag(model + 5);
    if (!*tag)
        return error_set(err, "--model-arg pretrained=True: timm's default weights of %s are "
                              "not known here; name them, --model %s.TAG", model, model);
    if (!**tag) {
        fprintf(stderr, "lightly-train-c train: timm has no pretrained weights for %s: "
                        "random initialisation, as timm\n", model + 5);
        *tag = NULL;
    }
    return 0;
}

int model_args_weights(TrainConfig *config, const char *model, const char *model_given,
                       ErrorMessage *err) {
    const char *weights = take_arg(&config->model_args, "weights");
    const char *pretrained_text = take_arg(&config->model_args, "pretrained");
    const char *checkpoint_path = take_arg(&config->model_args, "checkpoint_path");
    const int timm = strncmp(model, "timm/", 5) == 0;
    const int torchvision = torchvision_resnet_index(model) >= 0 || torchvision_own_weights(model);
    char untagged[128];
    const char *name_tag = NULL;
    if (!model_given || !timm_split_tag(model_given, untagged, sizeof untagged, &name_tag))
        name_tag = NULL;
    int pretrained = 0;
    if (pretrained_text && number_parse_bool(pretrained_text, &pretrained))
        return error_set(err, "--model-arg pretrained=%s: expected True or False",
                         pretrained_text);
    if (pretrained_text && !timm && !torchvision)
        return error_set(err, "--model-arg pretrained=%s: timm's models (timm/...) and "
                              "torchvision's take it; for --model %s give --checkpoint "
                              "NAME|FILE", pretrained_text, model);
    if (checkpoint_path && !timm)
        return error_set(err, "--model-arg checkpoint_path=%s: timm's models (timm/...) take "
                              "it; for --model %s give --checkpoint %s", checkpoint_path, model,
                         checkpoint_path);
    if (weights && pretrained_text)
        return error_set(err, "--model-arg weights=%s and pretrained=%s both choose "
                              "torchvision's weights: give weights only", weights,
                         pretrained_text);
    // What each chooses: weights by name or a file.
    static char checkpoint[160];
    checkpoint[0] = '\0';
    const char *given = NULL;
    if (weights) {
        if (torchvision_weights(model, weights, checkpoint, sizeof checkpoint, err)) return -1;
        given = "weights";
    } else if (pretrained && !timm) {  // torchvision's legacy pretrained=True: IMAGENET1K_V1
        if (torchvision_weights(model, "IMAGENET1K_V1", checkpoint, sizeof checkpoint, err))
            return -1;
        given = "pretrained";
    } else if (pretrained && !checkpoint_path) {
        const char *tag;
        if (timm_pretrained_tag(model, name_tag, &tag, err)) return -1;
        if (tag && snprintf(checkpoint, sizeof checkpoint, "%s.%s", model, tag) >=
                       (int)sizeof checkpoint)
            return error_set(err, "--model %s.%.40s...: the tag is too long", model, tag);
        given = "pretrained";
    }
    const char *chosen = checkpoint[0] ? checkpoint : NULL;
    if (checkpoint_path) {  // timm loads it over any pretrained weights
        chosen = checkpoint_path;
        given = "checkpoint_path";
    }
    if (chosen && config->checkpoint)
        return error_set(err, "--model-arg %s and --checkpoint %s both give the initial weights",
                         given, config->checkpoint);
    if (chosen && !config->resume) config->checkpoint = chosen;  // --resume: its checkpoint's
    return 0;
}

int method_args_teacher_weights(TrainConfig *config, const char *method, ErrorMessage *err) {
    StringList *args = &config->method_args;
    const char *path = take_arg(args, "teacher_weights");
    if (!path) return 0;
    const char *teacher = take_arg(args, "teacher"), *arch_given = NULL;
    if (!teacher) teacher = weights_default_teacher(method);
    for (int i = 0; i < args->count; i++)
        if (!strncmp(args->items[i], "teacher_arch=", 13)) arch_given = args->items[i];
    struct stat info;
    if (!teacher)
        return error_set(err, "--method-arg teacher_weights=%s: --method %s has no teacher", path,
                         method);
    if (stat(path, &info) != 0 || !S_ISREG(info.st_mode))
        return error_set(err, "--method-arg teacher_weights=%s: no such file", path);
    const char *arch = weights_known_arch(teacher);
    BackboneSpec spec;
    ErrorMessage ignored;
    if (!arch && backbone_spec_parse(teacher, 224, &spec, &ignored) == 0) arch = teacher;
    if (!arch && !arch_given)
        return error_set(err, "--method-arg teacher_weights=%s: teacher=%s names no architecture "
                              "to build (a name such as dinov2/vitb14, or teacher_arch=MODEL)",
                         path, teacher);
    static char teacher_entry[4200], arch_entry[160];
    snprintf(teacher_entry, sizeof teacher_entry, "teacher=%s", path);
    snprintf(arch_entry, sizeof arch_entry, "teacher_arch=%s", arch ? arch : "");
    if (args->count + 2 > OPTIONS_MAX_REPEATS)
        return error_set(err, "--method-arg: more than %d values", OPTIONS_MAX_REPEATS);
    args->items[args->count++] = teacher_entry;
    if (!arch_given) args->items[args->count++] = arch_entry;
    return 0;
}
