// `lightly-train-c train`: the options of a pretraining run, their checks
// (bad combinations exit 2 with one line naming the options) and the hand-off
// to the training loop (src/train/trainer.h).
#include <dirent.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "cli/commands.h"
#include "cli/callbacks.h"
#include "cli/lightly_args.h"
#include "cli/loggers.h"
#include "cli/model_weights.h"
#include "cli/options.h"
#include "cli/ranks.h"
#include "cli/run_limits.h"
#include "cli/weights_cli.h"
#include "data/data_list.h"
#include "decode/decode.h"
#include "nn/yolo.h"
#include "ssl_methods/embed_head.h"
#include "train/trainer.h"
#include "util/fault.h"
#include "weights/names.h"
#include "weights/timm_tags.h"

// The first is the default: LightlyTrain's (v3, from its default teacher).
const char *const train_method_names[] = {
    "distillation", "simclr", "byol", "dino", "vicreg", "barlowtwins", "distillationv1",
    "distillationv2", "distillationv3", "dinov2", "dinov31", NULL};
static const char *const accelerator_names[] = {"auto", "cpu", "gpu", NULL};
// LightlyTrain's model names for the same backbones (its key=value spelling
// is accepted, so its values are too).
const char *const lightly_train_model_names[] = {
    "torchvision/resnet18=resnet18",   "torchvision/resnet34=resnet34",
    "torchvision/resnet50=resnet50",   "torchvision/resnet101=resnet101",
    "torchvision/resnet152=resnet152",
    // ConvNeXts: torchvision's bare names (DINOv2's and DINOv3's names:
    // model_canonical)
    "convnext_tiny=torchvision/convnext_tiny", "convnext_small=torchvision/convnext_small",
    "convnext_base=torchvision/convnext_base", "convnext_large=torchvision/convnext_large", NULL};
static const char *const precision_names[] = {"auto", "32-true", "16-mixed", "bf16-mixed", NULL};
static const char *const optimizer_names[] = {"auto", "sgd", "lars", "adamw", NULL};
static const char *const backend_names[] = {"cpu", "ref", NULL};
static const char *const input_depth_names[] = {"auto", "8", "float", NULL};  // TRAIN_DEPTH_*
// LightlyTrain's strategy values for what the ranks do here: every rank
// holds the whole model and the gradients are averaged (DDP); no parameter
// goes unused, so DDP's search for unused ones changes nothing.
// torch.set_float32_matmul_precision's values (LightlyTrain's argument): they
// allow TF32 or bfloat16 passes in float32 matrix products, which this
// program never uses (cuBLAS and cuDNN with FMA math, the CPU in fp32), so
// every value runs as "highest".
static const char *const matmul_precision_names[] = {"auto", "highest", "high", "medium", NULL};
static const char *const strategy_names[] = {"auto", "ddp", "ddp_find_unused_parameters_true",
                                             NULL};
// A choice, not a flag, so that "--sync-batchnorm false" reads as written
// (flags never take the next word).


// LightlyTrain's DINOv2 and DINOv3 names as --model ("dinov2/vitb14",
// "dinov3/convnext_tiny", "...-notpretrained"): the preset they build; a
// timm name with a tag ("timm/resnet50.a1_in1k"): the architecture (the tag
// names its weights with --model-arg pretrained=True, cli/model_weights.c).
static int model_canonical(const char *word, char *buffer, size_t size) {
    const WeightsEntry *weights;
    const char *tag;
    return weights_model_name(word, buffer, size, &weights, NULL) != 0 ||
           timm_split_tag(word, buffer, size, &tag);
}

// What the option table fills besides TrainConfig: the index of each CHOICE
// option and the seed as an int.
typedef struct TrainChoices {
    const char *model_given;  // --model as typed (NULL: the default)
    const WeightsEntry *model_weights;  // its weights, the initial ones (train_model_weights)
    int model, method, accelerator, precision, optimizer, backend, seed, sync_batchnorm;
    int gradient_overlap, exif_orientation, input_depth, strategy, matmul_precision;
    int progress_bar;
    double max_pixels;
    const char *normalize, *channel_drop;  // parsed into TrainConfig.channels
    StringList data;        // --data, then with --data-list into TrainConfig.data
    const char *data_list;  // --data-list FILE or NULL
    StringList max_time;    // --max-time entries (run_limits.h)
    const char *limit_train_batches;
    const char *fast_dev_run;
} TrainChoices;

// Combinations the option table cannot express. Returns 0 or -1 with err.
static int train_options_check(const TrainConfig *config, const TrainChoices *choices,
                               ErrorMessage *err) {
    if (config->resume && config->checkpoint)
        return error_set(err, "--checkpoint (initial weights) and --resume (continue a run) "
                              "cannot be combined");
    if (config->resume && config->overwrite)
        return error_set(err, "--resume and --overwrite cannot be combined");
    const char *method = train_method_names[choices->method];
    // The model's spec, parsed once for the options that depend on its kind.
    const char *model = backbone_model_names[choices->model];
    BackboneSpec spec;
    if ((config->model_args.count || config->activation_checkpointing) &&
        backbone_spec_parse(model, 224, &spec, err))
        return -1;
    for (int i = 0; i < config->model_args.count; i++)
        if (backbone_spec_apply_arg(&spec, config->model_args.items[i], err))
            return error_prefix(err, "--model %s", model);
    static const char *const kind_names[] = {[BACKBONE_RESNET] = "a ResNet",
                                             [BACKBONE_VIT] = "a ViT",
                                             [BACKBONE_YOLO] = "a YOLO model",
                                             [BACKBONE_CONVNEXT] = "a ConvNeXt",
                                             [BACKBONE_SHUFFLENET] = "a ShuffleNetV2"};
    if (config->activation_checkpointing && spec.kind != BACKBONE_VIT)
        return error_set(err, "--activation-checkpointing applies to ViT models only (--model "
                              "%s is %s)", model, kind_names[spec.kind]);
    // Before any work (method_create checks it again for every caller).
    MethodKind method_kind;
    if (config->embed_dim && (method_kind_parse(method, &method_kind, err) ||
                              embed_head_check(method_kind, config->embed_dim, err)))
        return -1;
    const int multi_crop = strcmp(method, "dino") == 0 || strncmp(method, "dinov", 5) == 0;
    if (!multi_crop && (config->local_views >= 0 || config->local_image_size > 0))
        return error_set(err, "--local-views and --local-image-size apply to --method dino, "
                              "dinov2 and dinov31 only");
    // LightlyTrain's rule: the teacher takes RGB, ChannelDrop may bring the views to 3.
    const int model_channels = channel_settings_model_channels(&config->channels);
    if (strncmp(method, "distillation", 12) == 0 && model_channels != 3)
        return error_set(err, "--method %s needs 3-channel views (its teacher takes RGB), "
                              "these have %d: add --channel-drop 3:W1,...,W%d or use another "
                              "method", method, model_channels, config->channels.channels);
    return 0;
}

// Whether a folder holds anything but "." and "..".
static int folder_has_entries(const char *path) {
    DIR *folder = opendir(path);
    if (!folder) return 0;
    const struct dirent *entry;
    do {
        entry = readdir(folder);
    } while (entry && (strcmp(entry->d_name, ".") == 0 || strcmp(entry->d_name, "..") == 0));
    closedir(folder);
    return entry != NULL;
}

// The method args against the method's keys and ranges, before any work (a
// teacher's download included; method_create checks them again).
static int train_method_args_check(const TrainConfig *config, const TrainChoices *choices,
                                   ErrorMessage *err) {
    const char *method = train_method_names[choices->method];
    const MethodSetup setup = {.args = (const char *const *)config->method_args.items,
                               .arg_count = config->method_args.count};
    MethodKind kind;
    if (method_kind_parse(method, &kind, err)) return -1;
    return method_args_check(&setup, method_arg_specs(kind), err) ? error_prefix(err, "%s", method)
                                                                  : 0;
}

// Weights by name are fetched now, before any work: --checkpoint and a
// distillation method's teacher, LightlyTrain's default teacher when none is
// given (added to the method arguments, so the log and a resume see it).
// Not while a --data entry is missing or an empty folder, or --out would be
// refused: train_run reports those first (before a download of hundreds of
// megabytes).
static int prepare_weights(TrainConfig *config, const TrainChoices *choices, int rank) {
    const char *method = train_method_names[choices->method];
    static char default_teacher[64];
    ErrorMessage out_err = {{0}};
    if (train_out_check(config, rank, &out_err)) return 0;
    for (int i = 0; i < config->data.count; i++) {
        struct stat info;
        if (stat(config->data.items[i], &info) != 0 ||
            !(S_ISREG(info.st_mode) ||
              (S_ISDIR(info.st_mode) && folder_has_entries(config->data.items[i]))))
            return 0;
    }
    const char *teacher = NULL, *fallback = weights_default_teacher(method);
    StringList *args = &config->method_args;
    for (int i = 0; i < args->count && fallback; i++)
        if (strncmp(args->items[i], "teacher=", 8) == 0) teacher = args->items[i] + 8;
    if (!teacher && fallback && args->count < OPTIONS_MAX_REPEATS) {
        snprintf(default_teacher, sizeof default_teacher, "teacher=%s", fallback);
        args->items[args->count++] = default_teacher;
        teacher = fallback;
    }
    // The weights of --model ultralytics/yolo11s.pt, dinov2/vitb14 (train_model_weights).
    char model_hint[400] = "";
    YoloConfig yolo;
    int pretrained = 0;
    ErrorMessage ignored;
    if (choices->model_weights && yolo_is_model_name(config->model) &&
        yolo_parse_name(config->model, &yolo, &pretrained, &ignored) == 0)
        snprintf(model_hint, sizeof model_hint,
                 " (the weights of --model %s); or put %s into the working directory, pass "
                 "--checkpoint PATH, or train from --model ultralytics/%s.yaml",
                 config->model, choices->model_weights->file, yolo.name);
    else if (choices->model_weights)
        snprintf(model_hint, sizeof model_hint,
                 " (the weights of --model %s); or pass --checkpoint PATH, or train from a "
                 "random initialisation with --model %s-notpretrained",
                 choices->model_given, choices->model_weights->name);
    if (config->checkpoint && weights_cli_prepare("lightly-train-c train", config->checkpoint,
                                                  model_hint[0] ? model_hint : NULL))
        return -1;
    const char *hint = teacher == fallback
                           ? " (the default teacher of --method distillation); or name another "
                             "(--method-arg teacher=PATH|NAME) or train without one "
                             "(--method simclr)"
                           : NULL;
    return teacher && weights_cli_prepare("lightly-train-c train", teacher, hint) ? -1 : 0;
}

// LightlyTrain's names of pretrained models as --model start from the
// weights of that name, unless --checkpoint gives others or --resume
// continues a run: ultralytics/yolo11s.pt (Ultralytics' released weights,
// weights/names.c: the file yolo11s.pt in the working directory, as
// Ultralytics' YOLO("yolo11s.pt") takes it, else Ultralytics' GitHub release
// asset), dinov2/vitb14, dinov3/vitb16, dinov3/convnext-tiny (timm's copies
// on the Hugging Face Hub; "-notpretrained": none). prepare_weights
// downloads them into the cache.
static int train_model_weights(TrainConfig *config, TrainChoices *choices, ErrorMessage *err) {
    if (!choices->model_given) choices->model_given = config->model;
    char preset[64];
    const WeightsEntry *weights = NULL;
    if (weights_model_name(choices->model_given, preset, sizeof preset, &weights, err) < 0)
        return -1;
    YoloConfig yolo;
    int pretrained = 0;
    ErrorMessage ignored;
    if (yolo_is_model_name(config->model) &&
        yolo_parse_name(config->model, &yolo, &pretrained, &ignored) == 0 && pretrained) {
        weights = weights_find(config->model);  // "ultralytics/yolo11s.pt" names both
        if (!weights)
            return error_set(err, "--model %s: Ultralytics released no weights of that name; "
                                  "train from --model ultralytics/%s.yaml",
                             config->model, yolo.name);
    }
    if (!weights || config->checkpoint || config->resume) return 0;
    config->checkpoint = weights->name;
    choices->model_weights = weights;
    return 0;
}

// The values the table cannot store directly.
static int train_options_resolve(TrainConfig *config, TrainChoices *choices,
                                 ErrorMessage *err) {
    config->model = backbone_model_names[choices->model];
    if (method_kind_parse(train_method_names[choices->method], &config->method, err)) return -1;
    config->optimizer_auto = choices->optimizer == 0;
    if (!config->optimizer_auto &&
        optimizer_kind_parse(optimizer_names[choices->optimizer], &config->optimizer, err))
        return -1;
    config->seed = (uint64_t)choices->seed;
    config->backend_name = backend_names[choices->backend];
    config->accelerator = accelerator_names[choices->accelerator];
    config->precision = precision_names[choices->precision];
    config->sync_batchnorm = choices->sync_batchnorm == 0;
    config->gradient_overlap = choices->gradient_overlap == 0;
    config->progress_bar = choices->progress_bar == 0;
    config->ignore_exif_orientation = choices->exif_orientation != 0;
    config->max_pixels = (uint64_t)choices->max_pixels;
    config->input_depth = choices->input_depth;
    config->min_epochs = (int)run_min_epochs(config->min_epochs, config->min_steps);
    long fast_dev_run = 0;
    if (max_time_parse(&choices->max_time, &config->max_time_seconds, err) ||
        (choices->limit_train_batches &&
         batch_limit_parse(choices->limit_train_batches, &config->limit_train_batches, err)) ||
        (choices->fast_dev_run && fast_dev_run_parse(choices->fast_dev_run, &fast_dev_run, err)))
        return -1;
    config->fast_dev_run = (int)fast_dev_run;
    return train_model_weights(config, choices, err);
}

// --normalize and --channel-drop into config->channels (before the checks).
static int train_options_channels(TrainConfig *config, const TrainChoices *choices,
                                  ErrorMessage *err) {
    if (choices->normalize && channel_normalize_parse(choices->normalize, &config->channels, err))
        return -1;
    if (choices->channel_drop && channel_drop_parse(choices->channel_drop, &config->channels, err))
        return -1;
    return channel_settings_check(&config->channels, err);
}

// Lightning's fast_dev_run (config->fast_dev_run N > 0): one epoch of at
// most N optimizer steps (its max_epochs 1, max_steps and
// limit_train_batches N: fewer where the data has fewer batches), its
// loggers and epoch checkpoints off and early stopping skipped, whatever
// the other options say; LightlyTrain still writes last.ckpt and the
// export after fit.
static void train_fast_dev_run(TrainConfig *config, LoggerSettings *loggers,
                               CallbackSettings *callbacks) {
    if (config->fast_dev_run <= 0) return;
    config->epochs = 1;
    config->max_steps = 0;  // the epoch of at most N steps decides
    config->limit_train_batches =
        (BatchLimit){.value = (double)config->fast_dev_run * config->accumulate_grad_batches};
    loggers->tensorboard = loggers->jsonl = loggers->mlflow = 0;
    callbacks->keep_epoch_checkpoints = 0;
    callbacks->early_stopping_patience = 0;
    callbacks->device_stats = 0;
}

// Every option of the table as MLflow's run parameters: LightlyTrain's
// name (underscores) and the value as given or defaulted ("None": unset).
static int train_option_params(const OptionSpec *specs, int count, MlflowPair *params) {
    static char names[OPTIONS_MAX_SPECS][64], values[OPTIONS_MAX_SPECS][1024];
    for (int i = 0; i < count && i < OPTIONS_MAX_SPECS; i++) {
        snprintf(names[i], sizeof names[i], "%s", specs[i].name);
        for (char *c = names[i]; *c; c++)
            if (*c == '-') *c = '_';
        options_format_value(&specs[i], values[i], sizeof values[i]);
        if (!values[i][0]) snprintf(values[i], sizeof values[i], "None");
        params[i] = (MlflowPair){names[i], values[i]};
    }
    return count < OPTIONS_MAX_SPECS ? count : OPTIONS_MAX_SPECS;
}

// The command line with LightlyTrain's nested arguments rewritten: the
// parsed values point into it until the command ends.
static LightlyArgs lightly_args;

// The command's end, on every path once --data is built: its list freed.
static int train_command_end(TrainConfig *config, int status) {
    data_list_free(&config->data);
    lightly_args_free(&lightly_args);
    return status;
}

int command_train(int argc, char **argv) {
    train_catch_stop_signals();  // first: a signal while setting up is a stop, not a kill
    if (fault_fires("sigterm-at-start", -1)) raise(SIGTERM);
    TrainConfig config = {
        .out = "out",
        .epochs = -1,  // auto
        .batch_size = 128,
        .image_size = 224,
        .local_image_size = -1,  // the method's: dino 96, dinov2 98
        .local_views = -1,       // dino 6, dinov2 8
        .num_workers = -1,
        .devices = -1,
        .num_nodes = -1,
        .lr = -1,
        .weight_decay = -1,
        .accumulate_grad_batches = 1,
        .knn_every = 1,
        .knn_k = 20,
        .log_every = -1,
        .threads = -1,
        .channels = {.channels = 3},
        .max_time_seconds = -1,
        .min_epochs = -1,
        .limit_train_batches = {.value = -1},
        .gradient_clip_val = -1,
        .progress_bar = 1,
        .activation_checkpointing_every = 1,
    };
    TrainChoices choices = {.max_pixels = (double)DECODE_DEFAULT_MAX_PIXELS};
    double dist_timeout = DIST_DEFAULT_TIMEOUT;
    const char *devices = "auto";
    StringList logger_entries = {0}, callback_entries = {0};
    const OptionSpec specs[] = {
        {.name = "data", .type = OPTION_STRING, .value = &choices.data, .metavar = "DIR|FILE",
         .help = "folder of images (searched recursively), or an image file; repeated: one "
                 "dataset of them all (required, unless --data-list)", .repeatable = 1,
         .in_usage = 1},
        {.name = "data-list", .type = OPTION_STRING, .value = &choices.data_list,
         .metavar = "FILE", .help = "a text file of more --data entries, one per line (long "
                                    "lists of image files)"},
        {.name = "out", .type = OPTION_STRING, .value = &config.out, .metavar = "DIR",
         .help = "output folder (checkpoints, exported model, logs)"},
        {.name = "model", .type = OPTION_CHOICE, .value = &choices.model, .metavar = "NAME",
         .help = "backbone (ViTs: the image sizes must be multiples of the patch size; "
                 "LightlyTrain's names: torchvision/resnet50 is resnet50, dinov2/vitb14 and "
                 "dinov3/vitb16 start from their weights, ...-notpretrained from random)",
         .choices = backbone_model_names, .value_aliases = lightly_train_model_names,
         .value_canonical = model_canonical, .given = &choices.model_given},
        {.name = "method", .type = OPTION_CHOICE, .value = &choices.method, .metavar = "NAME",
         .help = "self-supervised method", .choices = train_method_names},
        {.name = "epochs", .type = OPTION_INT, .value = &config.epochs, .metavar = "N|auto",
         .help = "passes over the data (auto: 100; dinov2, dinov31: ceil(125000 x batch / "
                 "images), LightlyTrain's 125,000 steps; 0: no training, the initial model's "
                 "checkpoint and export only)",
         .min = 0, .max = METHOD_MAX_EPOCHS, .allow_auto = 1},
        {.name = "max-steps", .type = OPTION_INT, .value = &config.max_steps, .metavar = "N",
         .help = "optimizer steps in all (0: from --epochs)", .min = 0, .max = 2147483647},
        {.name = "max-time", .type = OPTION_STRING, .value = &choices.max_time,
         .metavar = "DD:HH:MM:SS", .repeatable = 1,
         .help = "stop as done (checkpoint, export) once this much training time has passed, "
                 "counted on across --resume (Lightning's max_time; also UNIT=N entries: "
                 "hours=2 ...)"},
        {.name = "fast-dev-run", .type = OPTION_STRING, .value = &choices.fast_dev_run,
         .metavar = "N|true", .help = "a quick check of the set-up: one epoch of at most N "
                                      "optimizer steps (true: 1), then the checkpoint and "
                                      "export; no logs, no epoch files, no early stopping "
                                      "(Lightning's fast_dev_run)"},
        {.name = "min-epochs", .type = OPTION_INT, .value = &config.min_epochs, .metavar = "N|auto",
         .help = "an early stop (--max-time, early_stopping) waits until this many epochs are "
                 "done (auto: 1 with --min-steps, else none; Lightning's min_epochs)",
         .min = 0, .max = 2147483647, .allow_auto = 1},
        {.name = "min-steps", .type = OPTION_INT, .value = &config.min_steps, .metavar = "N",
         .help = "an early stop waits until this many optimizer steps are done (0: none; "
                 "Lightning's min_steps)", .min = 0, .max = 2147483647},
        {.name = "limit-train-batches", .type = OPTION_STRING,
         .value = &choices.limit_train_batches, .metavar = "N|F",
         .help = "batches an epoch: at most N, or the fraction F (0.0-1.0) of them "
                 "(Lightning's limit_train_batches)"},
        {.name = "batch-size", .type = OPTION_INT, .value = &config.batch_size, .metavar = "N",
         .help = "images per step over all devices", .min = 2, .max = 1 << 20},
        {.name = "image-size", .type = OPTION_INT, .value = &config.image_size, .metavar = "N",
         .help = "side of the (global) views in pixels", .min = METHOD_MIN_VIEW_SIZE, .max = 4096},
        {.name = "local-image-size", .type = OPTION_INT, .value = &config.local_image_size,
         .metavar = "N", .help = "dino, dinov2: side of the local views (96, 98)",
         .min = METHOD_MIN_VIEW_SIZE, .max = 4096},
        {.name = "local-views", .type = OPTION_INT, .value = &config.local_views, .metavar = "N",
         .help = "dino, dinov2: number of local views (6, 8)", .min = 0, .max = 14},
        {.name = "num-workers", .type = OPTION_INT, .value = &config.num_workers,
         .metavar = "N|auto", .help = "data workers (auto: (cores - devices) / devices; 0: "
         "none ahead, each batch decoded when the step asks for it, as PyTorch's 0)",
         .min = 0, .max = 1024, .allow_auto = 1},
        {.name = "accelerator", .type = OPTION_CHOICE, .value = &choices.accelerator,
         .metavar = "NAME", .help = "auto, cpu or gpu (LightlyTrain's cuda)",
         .choices = accelerator_names, .value_aliases = OPTION_ACCELERATOR_ALIASES},
        {.name = "devices", .type = OPTION_STRING, .value = &devices, .metavar = "N|LIST|auto",
         .help = "devices (ranks) per node, or GPU indices such as 0,2 (1, for GPU 1 alone) "
                  "(auto: every visible GPU, or the launcher's count)"},
        {.name = "num-nodes", .type = OPTION_INT, .value = &config.num_nodes, .metavar = "N|auto",
         .help = "nodes; must match the launcher (auto: its count)", .min = 1, .max = 65536,
         .allow_auto = 1},
        {.name = "sync-batchnorm", .type = OPTION_CHOICE, .value = &choices.sync_batchnorm,
         .metavar = "true|false", .help = "several ranks: BatchNorm statistics over all ranks "
                                          "(false: each rank's own)",
         .choices = OPTION_BOOLEAN_CHOICES},
        {.name = "gradient-overlap", .type = OPTION_CHOICE, .value = &choices.gradient_overlap,
         .metavar = "true|false", .help = "several ranks: average the gradient buckets while "
                                          "backward runs (false: after it)",
         .choices = OPTION_BOOLEAN_CHOICES},
        DIST_TIMEOUT_OPTION(&dist_timeout),
        {.name = "strategy", .type = OPTION_CHOICE, .value = &choices.strategy,
         .metavar = "NAME", .help = "LightlyTrain's strategy: several ranks always run as DDP "
                                    "(each holds the whole model, gradients averaged)",
         .choices = strategy_names},
        {.name = "precision", .type = OPTION_CHOICE, .value = &choices.precision, .metavar = "NAME",
         .help = "auto (16-mixed on GPU, 32-true on CPU)", .choices = precision_names,
         .value_aliases = OPTION_PRECISION_ALIASES, .value_refusals = OPTION_PRECISION_REFUSALS},
        {.name = "float32-matmul-precision", .type = OPTION_CHOICE,
         .value = &choices.matmul_precision, .metavar = "NAME",
         .help = "LightlyTrain's: float32 products never use TF32 here, every value runs as "
                 "highest", .choices = matmul_precision_names},
        {.name = "optim", .type = OPTION_CHOICE, .value = &choices.optimizer, .metavar = "NAME",
         .help = "optimizer (auto: the method's)", .choices = optimizer_names},
        {.name = "lr", .type = OPTION_FLOAT, .value = &config.lr, .metavar = "X|auto",
         .help = "base learning rate at the method's reference batch (auto: the method's)",
         .min = 0, .max = 1e3, .allow_auto = 1},
        {.name = "weight-decay", .type = OPTION_FLOAT, .value = &config.weight_decay,
         .metavar = "X|auto", .help = "weight decay (auto: the method's)", .min = 0, .max = 10,
         .allow_auto = 1},
        {.name = "seed", .type = OPTION_INT, .value = &choices.seed, .metavar = "N",
         .help = "random seed", .min = 0, .max = 2147483647},
        {.name = "resume", .type = OPTION_FLAG, .value = &config.resume,
         .alias = "resume-interrupted",
         .help = "continue the interrupted run in --out from checkpoints/last.ckpt "
                 "(LightlyTrain's resume_interrupted)"},
        {.name = "overwrite", .type = OPTION_FLAG, .value = &config.overwrite,
         .help = "start a new run in a non-empty --out"},
        {.name = "activation-checkpointing-every", .type = OPTION_INT,
         .value = &config.activation_checkpointing_every, .metavar = "N",
         .help = "with --activation-checkpointing: recompute blocks 0, N, 2N, ... only, the "
                 "others keep their activations (LightlyTrain's every_n_blocks)",
         .min = 1, .max = 4096},
        {.name = "activation-checkpointing", .type = OPTION_FLAG,
         .value = &config.activation_checkpointing,
         .help = "ViTs: keep only each block's input and recompute the block in the backward "
                 "(less memory, about a third more compute)"},
        {.name = "embed-dim", .type = OPTION_INT, .value = &config.embed_dim, .metavar = "N",
         .help = "LightlyTrain's embed_dim: an embedding head (a 1x1 convolution) from the "
                 "pooled features to N before the method's heads; embed writes N-wide rows "
                 "(0: no head)", .min = 0, .max = 1 << 20},
        {.name = "checkpoint", .type = OPTION_STRING, .value = &config.checkpoint,
         .metavar = "FILE|NAME", .help = "initial backbone weights (.safetensors, .pt/.pth, .ckpt, "
                                         "or weights by name: lightly-train-c weights)"},
        {.name = "log-every", .type = OPTION_INT, .value = &config.log_every, .metavar = "N",
         .help = "steps between logged scalars (auto: min(50, steps per epoch))", .min = 1,
         .max = 1000000, .allow_auto = 1},
        {.name = "gradient-clip-val", .type = OPTION_FLOAT, .value = &config.gradient_clip_val,
         .metavar = "X|auto", .help = "clip the gradients' global norm at X, 0: none (auto: the "
         "method's; dino, dinov2, dinov31 and distillation keep their own, as LightlyTrain's)",
         .min = 0, .max = 1e9, .allow_auto = 1},
        {.name = "progress-bar", .type = OPTION_CHOICE, .value = &choices.progress_bar,
         .metavar = "true|false", .help = "the console's progress line (false: none; "
         "Lightning's enable_progress_bar)", .choices = OPTION_BOOLEAN_CHOICES},
        {.name = "accumulate-grad-batches", .type = OPTION_INT, .value = &config.accumulate_grad_batches,
         .metavar = "N", .alias = "gradient-accumulation-steps",
         .help = "batches per optimizer step (LightlyTrain's gradient_accumulation_steps)",
         .min = 1, .max = 4096},
        {.name = "method-arg", .type = OPTION_STRING, .value = &config.method_args,
         .alias = "method-args", .metavar = "KEY=VALUE", .repeatable = 1, .dotted = 1,
         .help = "method hyper-parameter, e.g. temperature=0.2 (see docs/commands.md)"},
        {.name = "model-arg", .type = OPTION_STRING, .value = &config.model_args,
         .alias = "model-args", .metavar = "KEY=VALUE", .repeatable = 1, .dotted = 1,
         .help = "LightlyTrain's model_args: drop_path_rate=X (ViTs, timm's and DINOv3's "
                 "ConvNeXts), stochastic_depth_prob=X (torchvision's ConvNeXts), "
                 "zero_init_residual=true|false (ResNets), weights=IMAGENET1K_V1|...|None "
                 "(torchvision's ResNets), pretrained=True and checkpoint_path=FILE (timm's "
                 "models; docs/weights.md)"},
        {.name = "transform", .type = OPTION_STRING, .value = &config.transforms,
         .metavar = "[SCOPE.]KEY=VALUE", .repeatable = 1,
         .help = "view parameter, e.g. scale_min=0.2 or local.blur_p=0.1"},
        {.name = "knn-data", .type = OPTION_STRING, .value = &config.knn_data, .metavar = "DIR",
         .help = "labelled folder (a sub-folder per class) for kNN evaluation"},
        {.name = "knn-every", .type = OPTION_INT, .value = &config.knn_every, .metavar = "N",
         .help = "epochs between kNN evaluations", .min = 1, .max = 1000000},
        {.name = "knn-k", .type = OPTION_INT, .value = &config.knn_k, .metavar = "N",
         .help = "neighbours of the kNN classifier", .min = 1, .max = 100000},
        {.name = "backend", .type = OPTION_CHOICE, .value = &choices.backend, .metavar = "NAME",
         .help = "compute backend (ref: the slow reference, for tests)",
         .choices = backend_names},
        {.name = "threads", .type = OPTION_INT, .value = &config.threads, .metavar = "N|auto",
         .help = "compute threads (auto: usable cores)", .min = 1, .max = 4096,
         .allow_auto = 1},
        MAX_PIXELS_OPTION(&choices.max_pixels),
        EXIF_ORIENTATION_OPTION(&choices.exif_orientation),
        {.name = "num-channels", .type = OPTION_INT, .value = &config.channels.channels,
         .metavar = "N", .help = "channels of the images and the model (1: grey; other than 3: "
                                 "float pixels, no colour jitter, greyscale or solarize)",
         .min = 1, .max = AUGMENT_MAX_CHANNELS},
        {.name = "normalize", .type = OPTION_STRING, .value = &choices.normalize,
         .metavar = "MEAN,...:STD,...", .help = "per-channel mean and std of the model's input "
                                                "(default ImageNet's; needed unless 3 channels)"},
        {.name = "channel-drop", .type = OPTION_STRING, .value = &choices.channel_drop,
         .metavar = "KEEP:W1,...", .help = "ChannelDrop: each view keeps KEEP channels, drops "
                                           "the others by weight (one per image channel)"},
        {.name = "input-depth", .type = OPTION_CHOICE, .value = &choices.input_depth,
         .metavar = "auto|8|float", .help = "pixels into the model: 8-bit RGB or float (auto: "
                                            "float for other than 3 channels or deep images)",
         .choices = input_depth_names},
        {.name = "loggers", .type = OPTION_STRING, .value = &logger_entries,
         .metavar = "LOGGER[.KEY]=VALUE", .repeatable = 1, .dotted = 1,
         .help = "LightlyTrain's loggers: mlflow (with mlflow.tracking_uri=URL, "
                 "mlflow.experiment_name=NAME, ...: docs/mlflow.md), tensorboard=null, jsonl=null"},
        {.name = "callbacks", .type = OPTION_STRING, .value = &callback_entries,
         .metavar = "CALLBACK[.KEY]=VALUE", .repeatable = 1, .dotted = 1,
         .help = "LightlyTrain's callbacks: model_checkpoint.every_n_epochs=N, "
                 "model_checkpoint.every_n_train_steps=N, model_checkpoint.save_top_k=1|-1|0, "
                 "model_checkpoint.monitor=train_loss (save_top_k=K: the K lowest losses), "
                 "model_export.every_n_epochs=N, early_stopping.patience=N, "
                 "learning_rate_monitor=null (docs/training.md)"},
    };
    const OptionParser parser = {
        .program = "lightly-train-c train",
        .summary = "Pretrains a backbone with self-supervised learning on a folder of images "
                   "and writes checkpoints, the exported backbone and TensorBoard logs to "
                   "--out.",
        .epilog = TRAIN_EXIT_STATUS_HELP,
        .specs = specs,
        .count = (int)(sizeof specs / sizeof specs[0]),
    };
    int exit_status = 0;
    ErrorMessage err = {{0}};
    if (lightly_args_translate(argc, argv, &lightly_args, &err)) {
        fprintf(stderr, "%s: %s\n", parser.program, err.text);
        return 2;
    }
    if (options_parse_command(&parser, lightly_args.argc, lightly_args.argv, &exit_status)) {
        lightly_args_free(&lightly_args);
        return exit_status;
    }
    static LoggerSettings loggers;
    static CallbackSettings callbacks;
    if (data_list_build(choices.data.items, choices.data.count, choices.data_list, &config.data,
                        &err) ||
        train_options_channels(&config, &choices, &err) ||
        model_args_weights(&config, backbone_model_names[choices.model], choices.model_given,
                           &err) ||
        method_args_teacher_weights(&config, train_method_names[choices.method], &err) ||
        train_options_check(&config, &choices, &err) ||
        train_options_resolve(&config, &choices, &err) ||
        loggers_parse(&logger_entries, &loggers, &err) ||
        callbacks_parse(&callback_entries, &callbacks, &err)) {
        fprintf(stderr, "%s: %s\n", parser.program, err.text);
        return train_command_end(&config, 2);
    }
    train_fast_dev_run(&config, &loggers, &callbacks);
    const RankRequest request = {.accelerator = config.accelerator, .devices = devices,
                                 .num_nodes = config.num_nodes, .timeout_seconds = dist_timeout};
    RankPlace place;
    int launch_status = 0;
    const int started = ranks_start(&request, argv, &place, &launch_status, &err);
    if (started < 0) {
        fprintf(stderr, "%s: %s\n", parser.program, err.text);
        return train_command_end(&config, 2);
    }
    if (started == RANKS_LAUNCHED) return train_command_end(&config, launch_status);
    const DistRun dist = place.dist;
    if (train_method_args_check(&config, &choices, &err)) {
        if (comm_rank(dist.comm) == 0) fprintf(stderr, "%s: %s\n", parser.program, err.text);
        return train_command_end(&config, ranks_refuse(&dist));
    }
    if (prepare_weights(&config, &choices, comm_rank(dist.comm)))
        return train_command_end(&config, ranks_refuse(&dist));
    // MLflow's server is rank 0's to reach, MLFLOW_TRACKING_URI its own.
    if (comm_rank(dist.comm) == 0 && loggers_resolve_tracking_uri(&loggers, &err)) {
        fprintf(stderr, "%s: %s\n", parser.program, err.text);
        return train_command_end(&config, ranks_refuse(&dist));
    }
    MlflowPair options[OPTIONS_MAX_SPECS];
    config.loggers = &loggers;
    config.callbacks = &callbacks;
    config.options = options;
    config.option_count = train_option_params(specs, parser.count, options);
    config.accelerator = place.accelerator;
    config.gpu = place.gpu;
    config.comm = dist.comm;
    config.devices = dist.devices;
    config.num_nodes = dist.num_nodes;
    config.rank_cores = dist_cores_per_rank(&dist);
    const int status = train_run(&config, argc, argv);
    comm_destroy(dist.comm);
    return train_command_end(&config, status);
}
