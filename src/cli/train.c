// `lightly-train-c train`: the options of a pretraining run, their checks
// (bad combinations exit 2 with one line naming the options) and the hand-off
// to the training loop (src/train/trainer.h).
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "cli/commands.h"
#include "cli/options.h"
#include "train/trainer.h"

static const char *const model_names[] = {"resnet18", "resnet34", "resnet50", "resnet101",
                                          "resnet152", NULL};
static const int model_depths[] = {18, 34, 50, 101, 152};
static const char *const method_choices[] = {"simclr", "byol", "dino", "vicreg",
                                             "barlowtwins", "distillation", NULL};
static const char *const accelerator_names[] = {"auto", "cpu", "gpu", NULL};
static const char *const precision_names[] = {"auto", "32-true", "16-mixed", "bf16-mixed", NULL};
static const char *const optimizer_names[] = {"auto", "sgd", "lars", "adamw", NULL};
static const char *const backend_names[] = {"cpu", "ref", NULL};

typedef struct TrainArgs {
    StringList data;
    const char *out;
    int model, method, epochs, max_steps, batch_size, image_size, local_image_size;
    int local_views, num_workers, accelerator, devices, num_nodes, precision, optimizer;
    double lr, weight_decay;
    int seed, resume, overwrite, log_every, accumulate, knn_every, knn_k, backend, threads;
    const char *checkpoint, *knn_data;
    StringList method_args, transforms;
} TrainArgs;

// Combinations the option table cannot express. Returns 0 or -1 with err.
static int train_args_check(const TrainArgs *args, ErrorMessage *err) {
    if (args->resume && args->checkpoint)
        return error_set(err, "--checkpoint (initial weights) and --resume (continue a run) "
                              "cannot be combined");
    if (args->resume && args->overwrite)
        return error_set(err, "--resume and --overwrite cannot be combined");
    if (accelerator_names[args->accelerator][0] == 'g')
        return error_set(err, "--accelerator gpu: this build has no CUDA backend yet; use "
                              "--accelerator cpu");
    const char *precision = precision_names[args->precision];
    if (strcmp(precision, "16-mixed") == 0 || strcmp(precision, "bf16-mixed") == 0)
        return error_set(err, "--precision %s needs a GPU; on CPU training runs in 32-true",
                         precision);
    if (args->devices > 1 || args->num_nodes > 1)
        return error_set(err, "--devices %d --num-nodes %d: multi-device training needs the "
                              "CUDA/NCCL backend, which this build does not have yet",
                         args->devices, args->num_nodes);
    if (args->method != METHOD_DINO && args->local_views != 6)
        return error_set(err, "--local-views applies to --method dino only");
    return 0;
}

static int train_args_resolve(const TrainArgs *args, TrainConfig *config, ErrorMessage *err) {
    memset(config, 0, sizeof *config);
    config->data = args->data;
    config->out = args->out;
    config->depth = model_depths[args->model];
    if (method_kind_parse(method_choices[args->method], &config->method, err)) return -1;
    config->epochs = args->epochs;
    config->max_steps = args->max_steps;
    config->batch_size = args->batch_size;
    config->image_size = args->image_size;
    config->local_image_size = args->local_image_size;
    config->local_views = args->local_views;
    config->num_workers = args->num_workers;
    config->devices = args->devices > 0 ? args->devices : 1;
    config->num_nodes = args->num_nodes;
    config->optimizer_auto = args->optimizer == 0;
    if (!config->optimizer_auto &&
        optimizer_kind_parse(optimizer_names[args->optimizer], &config->optimizer, err))
        return -1;
    config->lr = args->lr;
    config->weight_decay = args->weight_decay;
    config->seed = (uint64_t)args->seed;
    config->resume = args->resume;
    config->overwrite = args->overwrite;
    config->checkpoint = args->checkpoint;
    config->log_every = args->log_every;
    config->accumulate_grad_batches = args->accumulate;
    config->method_args = args->method_args;
    config->transforms = args->transforms;
    config->knn_data = args->knn_data;
    config->knn_every = args->knn_every;
    config->knn_k = args->knn_k;
    config->backend_name = backend_names[args->backend];
    config->threads = args->threads;
    return 0;
}

int command_train(int argc, char **argv) {
    TrainArgs args = {
        .out = "out",
        .epochs = 100,
        .batch_size = 128,
        .image_size = 224,
        .local_image_size = 96,
        .local_views = 6,
        .num_workers = -1,
        .devices = -1,
        .num_nodes = 1,
        .lr = -1,
        .weight_decay = -1,
        .accumulate = 1,
        .knn_every = 1,
        .knn_k = 20,
        .log_every = -1,
        .threads = -1,
    };
    const OptionSpec specs[] = {
        {.name = "data", .type = OPTION_STRING, .value = &args.data, .metavar = "DIR",
         .help = "folder of images (searched recursively)", .required = 1, .repeatable = 1},
        {.name = "out", .type = OPTION_STRING, .value = &args.out, .metavar = "DIR",
         .help = "output folder (checkpoints, exported model, logs)"},
        {.name = "model", .type = OPTION_CHOICE, .value = &args.model, .metavar = "NAME",
         .help = "backbone", .choices = model_names},
        {.name = "method", .type = OPTION_CHOICE, .value = &args.method, .metavar = "NAME",
         .help = "self-supervised method", .choices = method_choices},
        {.name = "epochs", .type = OPTION_INT, .value = &args.epochs, .metavar = "N",
         .help = "passes over the data", .min = 1, .max = 1000000},
        {.name = "max-steps", .type = OPTION_INT, .value = &args.max_steps, .metavar = "N",
         .help = "optimizer steps in all (0: from --epochs)", .min = 0, .max = 2147483647},
        {.name = "batch-size", .type = OPTION_INT, .value = &args.batch_size, .metavar = "N",
         .help = "images per step over all devices", .min = 2, .max = 1 << 20},
        {.name = "image-size", .type = OPTION_INT, .value = &args.image_size, .metavar = "N",
         .help = "side of the (global) views in pixels", .min = 16, .max = 4096},
        {.name = "local-image-size", .type = OPTION_INT, .value = &args.local_image_size,
         .metavar = "N", .help = "dino: side of the local views", .min = 16, .max = 4096},
        {.name = "local-views", .type = OPTION_INT, .value = &args.local_views, .metavar = "N",
         .help = "dino: number of local views", .min = 0, .max = 14},
        {.name = "num-workers", .type = OPTION_INT, .value = &args.num_workers,
         .metavar = "N|auto", .help = "data workers (auto: (cores - devices) / devices)",
         .min = 1, .max = 1024, .allow_auto = 1},
        {.name = "accelerator", .type = OPTION_CHOICE, .value = &args.accelerator,
         .metavar = "NAME", .help = "auto, cpu or gpu", .choices = accelerator_names},
        {.name = "devices", .type = OPTION_INT, .value = &args.devices, .metavar = "N|auto",
         .help = "devices per node", .min = 1, .max = 1024, .allow_auto = 1},
        {.name = "num-nodes", .type = OPTION_INT, .value = &args.num_nodes, .metavar = "N",
         .help = "nodes", .min = 1, .max = 65536},
        {.name = "precision", .type = OPTION_CHOICE, .value = &args.precision, .metavar = "NAME",
         .help = "auto (16-mixed on GPU, 32-true on CPU)", .choices = precision_names},
        {.name = "optim", .type = OPTION_CHOICE, .value = &args.optimizer, .metavar = "NAME",
         .help = "optimizer (auto: the method's)", .choices = optimizer_names},
        {.name = "lr", .type = OPTION_FLOAT, .value = &args.lr, .metavar = "X",
         .help = "base learning rate at the method's reference batch (-1: the method's)",
         .min = -1, .max = 1e3},
        {.name = "weight-decay", .type = OPTION_FLOAT, .value = &args.weight_decay,
         .metavar = "X", .help = "weight decay (-1: the method's)", .min = -1, .max = 10},
        {.name = "seed", .type = OPTION_INT, .value = &args.seed, .metavar = "N",
         .help = "random seed", .min = 0, .max = 2147483647},
        {.name = "resume", .type = OPTION_FLAG, .value = &args.resume,
         .help = "continue the interrupted run in --out from checkpoints/last.ckpt"},
        {.name = "overwrite", .type = OPTION_FLAG, .value = &args.overwrite,
         .help = "start a new run in a non-empty --out"},
        {.name = "checkpoint", .type = OPTION_STRING, .value = &args.checkpoint,
         .metavar = "FILE", .help = "initial backbone weights (.safetensors or .ckpt)"},
        {.name = "log-every", .type = OPTION_INT, .value = &args.log_every, .metavar = "N",
         .help = "steps between logged scalars (auto: min(50, steps per epoch))", .min = 1,
         .max = 1000000, .allow_auto = 1},
        {.name = "accumulate-grad-batches", .type = OPTION_INT, .value = &args.accumulate,
         .metavar = "N", .help = "batches per optimizer step", .min = 1, .max = 4096},
        {.name = "method-arg", .type = OPTION_STRING, .value = &args.method_args,
         .metavar = "KEY=VALUE", .repeatable = 1,
         .help = "method hyper-parameter, e.g. temperature=0.2 (see README)"},
        {.name = "transform", .type = OPTION_STRING, .value = &args.transforms,
         .metavar = "[SCOPE.]KEY=VALUE", .repeatable = 1,
         .help = "view parameter, e.g. scale_min=0.2 or local.blur_p=0.1"},
        {.name = "knn-data", .type = OPTION_STRING, .value = &args.knn_data, .metavar = "DIR",
         .help = "labelled folder (a sub-folder per class) for kNN evaluation"},
        {.name = "knn-every", .type = OPTION_INT, .value = &args.knn_every, .metavar = "N",
         .help = "epochs between kNN evaluations", .min = 1, .max = 1000000},
        {.name = "knn-k", .type = OPTION_INT, .value = &args.knn_k, .metavar = "N",
         .help = "neighbours of the kNN classifier", .min = 1, .max = 100000},
        {.name = "backend", .type = OPTION_CHOICE, .value = &args.backend, .metavar = "NAME",
         .help = "compute backend (ref: the slow reference, for tests)",
         .choices = backend_names},
        {.name = "threads", .type = OPTION_INT, .value = &args.threads, .metavar = "N|auto",
         .help = "compute threads (auto: usable cores)", .min = 1, .max = 4096,
         .allow_auto = 1},
    };
    const OptionParser parser = {
        .program = "lightly-train-c train",
        .summary = "Pretrains a backbone with self-supervised learning on a folder of images "
                   "and writes checkpoints, the exported backbone and TensorBoard logs to "
                   "--out.",
        .specs = specs,
        .count = (int)(sizeof specs / sizeof specs[0]),
    };
    int exit_status = 0;
    if (options_parse_command(&parser, argc, argv, &exit_status)) return exit_status;
    ErrorMessage err = {{0}};
    TrainConfig config;
    if (train_args_check(&args, &err) || train_args_resolve(&args, &config, &err)) {
        fprintf(stderr, "%s: %s\n", parser.program, err.text);
        return 2;
    }
    return train_run(&config, argc, argv);
}
