// Timed steps on a backend, the counterpart of
// tools/compare/pytorch_train_step.py (same modes, arguments and RESULT
// line), for comparing with PyTorch:
//   --mode step (default): one training step of a backbone: forward (train
//     mode), loss = sum(features * fixed weights), backward, SGD with
//     momentum 0.9 and weight decay 1e-4;
//   --mode teacher: the eval forward of a frozen backbone as a distillation
//     teacher runs it (no gradients, nothing kept for backward; a ViT pools
//     its class token), random weights;
//   --mode distillation: one step of `train --method distillation` (v3):
//     student --model, teacher --teacher with random weights (written to a
//     temporary file and loaded as train loads a teacher), queue 8192
//     (LightlyTrain's size for a large dataset); mixup, teacher forward,
//     student forward and backward, heads, loss, gradient clipping at norm 1
//     and the method's optimizer (LARS for a ResNet student) on every group,
//     as the trainer does. The views are random floats uploaded once: no
//     data loading, no normalisation.
//   --mode method --method NAME: one step of `train --method NAME` the same
//     way (any method; --method-arg KEY=VALUE as train takes them; a
//     distillation method gets a random --teacher; an ImageNet-sized
//     dataset picks DINO's prototypes): the counterpart of
//     tools/compare/pytorch_ssl_train.py --synthetic.
//
//   bench_train_step [--mode step|teacher|distillation|method]
//                    [--model resnet18|...|vit_s16|...|timm/convnext_tiny|...
//                             (or a ResNet depth)]
//                    [--method simclr|dino|...] [--method-arg KEY=VALUE]...
//                    [--teacher vit_s14|...] [--image-size N] [--batch-size N]
//                    [--steps N] [--warmup N] [--threads N] [--backend cpu|ref|cuda]
//                    [--precision auto|32-true|16-mixed|bf16-mixed]
//                    [--activation-checkpointing]
//
// --activation-checkpointing: mode method's ViT student recomputes its
// blocks in the backward (train --activation-checkpointing). After the
// RESULT line, on a backend with several paths (cuda), a line "paths: ..."
// says which fused paths the plans took (train.log's "backend paths:").
//
// --precision sets the dtype activations are stored in, as `train
// --precision` does: auto is 16-mixed on the cuda backend when the backend
// accepts fp16 storage (else 32-true, and the header line says why), 32-true
// on the CPU; a 16-bit dtype the backend refuses is an error. 16-mixed also
// scales the distillation loss by 65536 and unscales it in the gate, as the
// trainer's loss scaler does.
//
// Prints one line starting with RESULT: the precision run, images/s,
// seconds per step (and its two timed parts: forward and backward; for
// distillation and method the method's step (everything up to the
// gradients) and the update), CPU seconds per step (user + system of all threads: less
// sensitive than wall time to other jobs on a shared machine) and peak
// resident memory of the process; mode step also prints the bytes of each
// memory class. On the cuda backend the device is synchronised only at the
// ends of the timed window (queued steps overlap, as in training), so the
// parts are not measured; peak GPU memory is measured from outside
// (tools/bench_gpu.sh samples nvidia-smi). The timed steps are the NVTX
// range "timed" (tools/profile_gpu.sh profiles only those).
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#ifdef LTC_WITH_CUDA
#include <nvtx3/nvToolsExt.h>  // header-only: a no-op unless a profiler is attached
#endif

#include "backend/backend.h"
#include "backend/staging.h"
#include "nn/backbone.h"
#include "nn/optimizer.h"
#include "nn/step_gate.h"
#include "ssl_methods/method.h"
#include "util/cpu.h"
#include "util/rng.h"

typedef enum BenchMode { MODE_STEP, MODE_TEACHER, MODE_DISTILLATION, MODE_METHOD } BenchMode;

enum { BENCH_MAX_METHOD_ARGS = 8 };

typedef struct BenchArgs {
    BenchMode mode;
    char model[32], teacher[32];
    const char *method;  // --mode method: the method's name (distillation for --mode distillation)
    const char *method_args[BENCH_MAX_METHOD_ARGS];  // --method-arg KEY=VALUE, in order
    int method_arg_count;
    int image_size, batch, steps, warmup, threads;
    int activation_checkpointing;  // --activation-checkpointing (mode method: a ViT student)
    const char *backend, *precision;
} BenchArgs;

// What runs: the dtype activations are stored in, and whether each step is
// synchronised so that its two parts can be timed (every backend but cuda).
typedef struct BenchRun {
    const char *precision;  // "32-true", "16-mixed", "bf16-mixed"
    int timed_parts;
} BenchRun;

static int parse_mode(const char *name, BenchMode *mode) {
    static const char *const names[] = {"step", "teacher", "distillation", "method"};
    for (int i = 0; i < 4; i++)
        if (strcmp(name, names[i]) == 0) return *mode = (BenchMode)i, 0;
    return -1;
}

static int parse_args(int argc, char **argv, BenchArgs *args) {
    *args = (BenchArgs){.mode = MODE_STEP, .model = "resnet18", .teacher = "vit_s14",
                        .image_size = 64, .batch = 32, .steps = 10, .warmup = 2, .threads = 0,
                        .backend = "cpu", .precision = "auto", .method = "distillation"};
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int *target = NULL;
        if (value && strcmp(argv[i], "--model") == 0) {  // a name, or a ResNet depth
            snprintf(args->model, sizeof args->model, "%s%s",
                     value[0] >= '0' && value[0] <= '9' ? "resnet" : "", value);
            i++;
            continue;
        }
        if (value && strcmp(argv[i], "--teacher") == 0) {
            snprintf(args->teacher, sizeof args->teacher, "%s", value);
            i++;
            continue;
        }
        if (value && strcmp(argv[i], "--mode") == 0 && parse_mode(value, &args->mode) == 0) {
            i++;
            continue;
        }
        if (strcmp(argv[i], "--activation-checkpointing") == 0) {
            args->activation_checkpointing = 1;
            continue;
        }
        if (value && strcmp(argv[i], "--method") == 0) {
            args->method = value;
            i++;
            continue;
        }
        if (value && strcmp(argv[i], "--method-arg") == 0 &&
            args->method_arg_count < BENCH_MAX_METHOD_ARGS) {
            args->method_args[args->method_arg_count++] = value;
            i++;
            continue;
        }
        if (strcmp(argv[i], "--image-size") == 0) target = &args->image_size;
        else if (strcmp(argv[i], "--batch-size") == 0) target = &args->batch;
        else if (strcmp(argv[i], "--steps") == 0) target = &args->steps;
        else if (strcmp(argv[i], "--warmup") == 0) target = &args->warmup;
        else if (strcmp(argv[i], "--threads") == 0) target = &args->threads;
        else if (strcmp(argv[i], "--backend") == 0 && value) {
            args->backend = value;
            i++;
            continue;
        } else if (strcmp(argv[i], "--precision") == 0 && value &&
                   (strcmp(value, "auto") == 0 || strcmp(value, "32-true") == 0 ||
                    strcmp(value, "16-mixed") == 0 || strcmp(value, "bf16-mixed") == 0)) {
            args->precision = value;
            i++;
            continue;
        }
        if (!target || !value) {
            fprintf(stderr, "bench_train_step: bad argument '%s' (see the file's header)\n",
                    argv[i]);
            return -1;
        }
        *target = atoi(value);
        i++;
    }
    if (args->batch < 1 || args->steps < 1 || args->warmup < 0 || args->image_size < 1) {
        fprintf(stderr, "bench_train_step: --batch-size, --steps and --image-size must be "
                        "positive, --warmup at least 0\n");
        return -1;
    }
    return 0;
}

// n uniform values in [-1, 1) from stream into device (backend memory).
static int fill_random(Backend *backend, float *device, size_t n, uint32_t stream) {
    float *host = malloc(n * sizeof *host);
    if (!host) return -1;
    Rng rng = rng_make(0, 0, 0, stream);
    for (size_t i = 0; i < n; i++) host[i] = rng_range(&rng, -1.0f, 1.0f);
    backend->op.upload(backend, device, host, n * sizeof *device);
    free(host);
    return 0;
}

// The same values into n activations of device (rounded to the compute dtype).
static int fill_random_act(Backend *backend, Act *device, size_t n, uint32_t stream) {
    float *values = backend->op.alloc(backend, n * sizeof *values);
    const int status = values ? fill_random(backend, values, n, stream) : -1;
    if (!status) backend->op.float_to_act(backend, n, values, device);
    if (values) {
        backend->op.synchronize(backend);
        backend->op.free(backend, values);
    }
    return status;
}

// n new activations (backend memory) holding fill_random's values.
static Act *upload_random(Backend *backend, size_t n, uint32_t stream) {
    Act *device = backend->op.alloc(backend, act_bytes(backend, n));
    if (device && fill_random_act(backend, device, n, stream) != 0) {
        backend->op.free(backend, device);
        return NULL;
    }
    return device;
}

// --precision on the backend: sets its compute dtype and fills run.
static int choose_precision(const BenchArgs *args, Backend *backend, BenchRun *run,
                            char *note, size_t size, ErrorMessage *err) {
    const int gpu = strcmp(backend->name, "cuda") == 0;
    const char *asked = strcmp(args->precision, "auto") == 0 ? (gpu ? "16-mixed" : "32-true")
                                                             : args->precision;
    const ComputeDtype dtype = strcmp(asked, "16-mixed") == 0     ? COMPUTE_F16
                               : strcmp(asked, "bf16-mixed") == 0 ? COMPUTE_BF16
                                                                  : COMPUTE_F32;
    run->timed_parts = !gpu;
    run->precision = asked;
    note[0] = '\0';
    if (backend_set_compute_dtype(backend, dtype, err) == 0) return 0;
    if (strcmp(args->precision, "auto") != 0) return error_prefix(err, "--precision %s", asked);
    // auto on a backend without 16-bit storage: fp32, and why.
    snprintf(note, size, " (auto: %s refused: %s)", asked, err->text);
    err->text[0] = '\0';
    run->precision = "32-true";
    return backend_set_compute_dtype(backend, COMPUTE_F32, err);
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + 1e-6 * usage.ru_utime.tv_usec +
           (double)usage.ru_stime.tv_sec + 1e-6 * usage.ru_stime.tv_usec;
}

// What one timed run measured: wall and CPU seconds of the counted steps
// and the two parts each step reports.
typedef struct Timing {
    double seconds, cpu, parts[2];
} Timing;

// One step of a mode: adds the wall seconds of its two parts to parts[].
typedef int (*StepFunction)(void *context, long step, double parts[2], ErrorMessage *err);

// Opens (on = 1) and closes the NVTX range "timed" around the counted
// steps, so that a profiler can leave out the set-up and the warm-up
// (tools/profile_gpu.sh: ncu --nvtx --nvtx-include timed/).
static void profiler_range(int on) {
#ifdef LTC_WITH_CUDA
    if (on) nvtxRangePushA("timed");
    else nvtxRangePop();
#else
    (void)on;
#endif
}

// warmup steps, then steps counted into *timing. Each step starts on an
// idle device when its parts are timed; else only the window's ends wait.
static int time_steps(Backend *backend, const BenchArgs *args, const BenchRun *run,
                      StepFunction run_step, void *context, Timing *timing, ErrorMessage *err) {
    double start = 0.0, cpu_start = 0.0;
    for (int step = 0; step < args->warmup + args->steps; step++) {
        if (run->timed_parts || step == args->warmup) backend->op.synchronize(backend);
        if (step == args->warmup) {
            start = time_now();
            cpu_start = cpu_seconds();
            timing->parts[0] = timing->parts[1] = 0.0;
            profiler_range(1);
        }
        if (run_step(context, step, timing->parts, err)) return -1;
    }
    backend->op.synchronize(backend);
    profiler_range(0);
    timing->seconds = time_now() - start;
    timing->cpu = cpu_seconds() - cpu_start;
    return 0;
}

// The RESULT line's fields after tool=: what was run, then the figures.
static void print_result(const BenchArgs *args, const Backend *backend, const BenchRun *run,
                         const char *what, const char *part_names[2], const Timing *timing) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    printf("RESULT tool=lightly-train-c %s backend=%s precision=%s image_size=%d batch=%d "
           "threads=%d steps=%d images_per_s=%.2f seconds_per_step=%.4f",
           what, backend->name, run->precision, args->image_size, args->batch, backend->threads,
           args->steps, args->batch * args->steps / timing->seconds,
           timing->seconds / args->steps);
    for (int part = 0; part < 2 && run->timed_parts; part++)
        if (part_names[part])
            printf(" %s=%.4f", part_names[part], timing->parts[part] / args->steps);
    printf(" cpu_s_per_step=%.4f peak_rss_mb=%.0f\n", timing->cpu / args->steps,
           usage.ru_maxrss / 1024.0);
}

// ---- --mode step ---------------------------------------------------------------------------

typedef struct BackboneBench {
    Backbone model;
    Optimizer *optimizer;
    Act *input;         // (N, R, R, 3)
    Act *loss_weights;  // (N, D): d(sum(features * w)) / d(features) = w
    int batch;
    const BenchRun *run;
} BackboneBench;

// Waits for the device where the parts of a step are timed.
static void part_done(Backend *backend, const BenchRun *run) {
    if (run->timed_parts) backend->op.synchronize(backend);
}

static int backbone_step(void *context, long step, double parts[2], ErrorMessage *err) {
    BackboneBench *bench = context;
    Backend *backend = bench->model.backend;
    parameter_set_zero_grads(bench->model.params);
    const double before = time_now();
    if (backbone_forward(&bench->model, 0, bench->batch, bench->input, 1, err)) return -1;
    part_done(backend, bench->run);
    const double middle = time_now();
    if (backbone_backward(&bench->model, 0, bench->loss_weights, err)) return -1;
    part_done(backend, bench->run);
    parts[0] += middle - before;
    parts[1] += time_now() - middle;
    optimizer_step(bench->optimizer, 0.01f, 1e-4f, NULL);
    return 0;
}

// Bytes of activations and of the gradient scratch of a trainable backbone.
static void print_memory(const Backbone *model) {
    size_t activation_bytes = 0, scratch_bytes = 0;
    if (model->spec.kind == BACKBONE_RESNET) {
        const Resnet *resnet = &model->model.resnet;
        for (int s = 0; s < resnet->slot_count; s++)
            activation_bytes += resnet->slots[s].arena_bytes;
        scratch_bytes = act_bytes(model->backend, resnet->scratch_elements * 3);
    } else if (model->spec.kind == BACKBONE_CONVNEXT) {
        const Convnext *convnext = &model->model.convnext;
        for (int s = 0; s < convnext->slot_count; s++)
            activation_bytes += convnext->slots[s].arena_bytes;
        scratch_bytes = act_bytes(model->backend, convnext->scratch_elements * 7);
    } else {
        const Vit *vit = &model->model.vit;
        for (int s = 0; s < vit->slot_count; s++) activation_bytes += vit->slots[s].arena_bytes;
        const int wide = vit->config.mlp_hidden;  // >= 3 D in every preset
        scratch_bytes =
            act_bytes(model->backend, vit->scratch_tokens * (3 * vit->config.embed_dim + wide));
    }
    printf("memory: parameters %.1f MB (+ gradients, + momentum), activations %.1f MB, "
           "gradient scratch %.1f MB\n",
           model->params->total * 4 / 1e6, activation_bytes / 1e6, scratch_bytes / 1e6);
}

static int bench_backbone_step(const BenchArgs *args, Backend *backend, const BenchRun *run,
                               ErrorMessage *err) {
    BackboneBench bench = {.batch = args->batch, .run = run};
    BackboneSpec spec;
    const BackboneInput shape = {args->batch, args->image_size};
    if (backbone_spec_parse(args->model, args->image_size, &spec, err) ||
        backbone_create(&bench.model, backend, &spec, &shape, 1, 0, err))
        return -1;
    OptimizerConfig optim = optimizer_config_default(OPTIMIZER_SGD);
    optim.momentum = 0.9f;
    int status = -1;
    bench.optimizer = optimizer_create(backend, bench.model.params, &optim, err);
    bench.input = upload_random(backend, (size_t)args->batch * args->image_size *
                                             args->image_size * 3, 1);
    bench.loss_weights = upload_random(backend, (size_t)args->batch * bench.model.feature_dim, 2);
    Timing timing = {0};
    if (bench.optimizer && bench.input && bench.loss_weights &&
        time_steps(backend, args, run, backbone_step, &bench, &timing, err) == 0) {
        char what[64];
        snprintf(what, sizeof what, "model=%s", args->model);
        printf("lightly-train-c %s, backend %s, %d thread(s)\n", args->model, backend->name,
               backend->threads);
        print_memory(&bench.model);
        print_result(args, backend, run, what, (const char *[2]){"forward_s", "backward_s"},
                     &timing);
        status = 0;
    } else if (!err->text[0]) {
        error_set(err, "out of memory");
    }
    if (bench.optimizer) optimizer_free(bench.optimizer);
    if (bench.input) backend->op.free(backend, bench.input);
    if (bench.loss_weights) backend->op.free(backend, bench.loss_weights);
    backbone_free(&bench.model);
    return status;
}

// ---- --mode teacher ------------------------------------------------------------------------

typedef struct TeacherBench {
    Backbone model;  // frozen
    Act *input;      // (N, R, R, 3)
    int batch;
    const BenchRun *run;
} TeacherBench;

static int teacher_step(void *context, long step, double parts[2], ErrorMessage *err) {
    TeacherBench *bench = context;
    const double before = time_now();
    if (backbone_forward(&bench->model, 0, bench->batch, bench->input, 0, err)) return -1;
    part_done(bench->model.backend, bench->run);
    parts[0] += time_now() - before;
    return 0;
}

static int bench_teacher_forward(const BenchArgs *args, Backend *backend, const BenchRun *run,
                                 ErrorMessage *err) {
    TeacherBench bench = {.batch = args->batch, .run = run};
    BackboneSpec spec;
    const BackboneInput shape = {args->batch, args->image_size};
    if (backbone_spec_parse(args->model, args->image_size, &spec, err) ||
        backbone_allocate_frozen(&bench.model, backend, &spec, &shape, 1, err))
        return -1;
    int status = bench.model.ops->init(&bench.model, 0, err);
    // LightlyTrain's DINOv2/DINOv3 teachers pool their class token (as
    // distill_teacher_load sets it).
    if (spec.kind == BACKBONE_VIT) bench.model.model.vit.config.pool = VIT_POOL_CLS;
    if (!status) {
        bench.input = upload_random(backend, (size_t)args->batch * args->image_size *
                                                 args->image_size * 3, 1);
        status = bench.input ? 0 : error_set(err, "out of memory for the input");
    }
    Timing timing = {0};
    if (!status) status = time_steps(backend, args, run, teacher_step, &bench, &timing, err);
    if (!status) {
        char what[64];
        snprintf(what, sizeof what, "mode=teacher model=%s", args->model);
        printf("lightly-train-c %s eval forward (frozen), backend %s, %d thread(s)\n",
               args->model, backend->name, backend->threads);
        print_result(args, backend, run, what, (const char *[2]){"forward_s", NULL}, &timing);
    }
    if (bench.input) backend->op.free(backend, bench.input);
    backbone_free(&bench.model);
    return status;
}

// ---- --mode method (and distillation) -----------------------------------------------------

typedef struct MethodBench {
    Method method;
    Optimizer *optimizers[METHOD_MAX_GROUPS];
    StepGate gate;
    float lr, weight_decay;
    float *loss_scale;  // 16-mixed: {65536, 1 / 65536} in backend memory, else NULL
    int batch;
    const BenchRun *run;
    int graphs;  // steps as CUDA graphs (LTC_CUDA_GRAPHS=on, as train: src/train/train_graphs.c)
} MethodBench;

// The trainer's step (src/train/trainer.c) without the data, the
// gradient sync and the step record: forward, backward, the gate
// (clipping, the loss scale), the updates of the active groups and the
// method's after-update work (EMA teachers).
static int method_step(void *context, long step, double parts[2], ErrorMessage *err) {
    MethodBench *bench = context;
    Method *method = &bench->method;
    Backend *backend = method->backend;
    if (bench->graphs) {  // a kind of step per set of updated groups, as train's
        staging_step_begin(backend);
        backend->op.step_graph_begin(backend, method_active_groups(method, step));
    }
    for (int g = 0; g < method->group_count; g++)
        parameter_set_zero_grads(method->groups[g].params);
    method->batch_index = (uint64_t)step;  // new per-batch draws (mixup, masks) each step
    const double before = time_now();
    if (method->ops->step(method, step, bench->batch, err)) return -1;
    part_done(backend, bench->run);
    const double middle = time_now();
    step_gate_open(&bench->gate);
    for (int g = 0; g < method->group_count; g++)
        if (method_group_active(&method->groups[g], step))
            step_gate_measure(&bench->gate, g, method->groups[g].params);
    step_gate_close(&bench->gate, 1.0f, bench->loss_scale ? bench->loss_scale + 1 : NULL,
                    method->defaults.grad_clip);
    for (int g = 0; g < method->group_count; g++)
        if (method_group_active(&method->groups[g], step))
            optimizer_step(bench->optimizers[g],
                           bench->lr * method_group_lr_factor(&method->groups[g], step),
                           bench->weight_decay, step_gate_values(&bench->gate));
    if (method->ops->after_update) method->ops->after_update(method, step);
    if (bench->graphs && backend->op.step_graph_end(backend, 1, err)) return -1;
    part_done(backend, bench->run);
    parts[0] += middle - before;
    parts[1] += time_now() - middle;
    return 0;
}

// A random teacher (seed 1) for args' view size written to a new file under
// /tmp, whose name goes to path.
static int write_random_teacher(const BenchArgs *args, Backend *backend, char *path,
                                ErrorMessage *err) {
    strcpy(path, "/tmp/bench_teacher_XXXXXX.safetensors");
    const int fd = mkstemps(path, (int)strlen(".safetensors"));
    if (fd < 0) return error_set(err, "cannot create a temporary teacher file in /tmp");
    close(fd);
    BackboneSpec spec;
    Backbone teacher;
    const BackboneInput shape = {1, args->image_size};
    int status = backbone_spec_parse(args->teacher, args->image_size, &spec, err);
    if (!status) status = backbone_create(&teacher, backend, &spec, &shape, 1, 1, err);
    if (!status) {
        status = backbone_save(&teacher, path, err);
        backbone_free(&teacher);
    }
    if (status) unlink(path);
    return status;
}

static int is_distillation(MethodKind kind) {
    return kind == METHOD_DISTILLATION || kind == METHOD_DISTILLATION_V1 ||
           kind == METHOD_DISTILLATION_V2;
}

// The method with args' model, views and method arguments, an ImageNet-sized
// dataset (which sizes DINO's prototypes and distillation's queue), and for
// distillation a random --teacher (queue 8192 for v3 unless given).
static int create_bench_method(const BenchArgs *args, Backend *backend, MethodKind kind,
                               Method *method, ErrorMessage *err) {
    char path[64] = "", teacher_arg[96];
    const char *method_args[BENCH_MAX_METHOD_ARGS + 2];
    int count = 0;
    if (is_distillation(kind)) {
        if (write_random_teacher(args, backend, path, err)) return -1;
        snprintf(teacher_arg, sizeof teacher_arg, "teacher=%s", path);
        method_args[count++] = teacher_arg;
        if (args->mode == MODE_DISTILLATION) method_args[count++] = "queue_size=8192";
    }
    for (int i = 0; i < args->method_arg_count; i++) method_args[count++] = args->method_args[i];
    MethodSetup setup = {.backend = backend,
                         .batch = args->batch,
                         .dataset_size = 1281167,  // ImageNet's train split
                         .total_steps = args->warmup + args->steps,
                         .args = method_args,
                         .arg_count = count};
    ViewSet views;
    method_default_views(kind, args->image_size, &views);
    int status = backbone_spec_parse(args->model, args->image_size, &setup.backbone, err);
    setup.backbone.activation_checkpointing = args->activation_checkpointing;
    if (!status) status = method_create(method, kind, &setup, &views, err);
    if (path[0]) unlink(path);  // loaded, or not needed
    return status;
}

// The optimizers, the gate, the loss scale of 16-mixed and random views.
static int prepare_method_bench(const BenchArgs *args, MethodBench *bench, ErrorMessage *err) {
    Method *method = &bench->method;
    Backend *backend = method->backend;
    const OptimizerConfig optim = optimizer_config_default(method->defaults.optimizer);
    for (int g = 0; g < method->group_count; g++) {
        bench->optimizers[g] = optimizer_create(backend, method->groups[g].params, &optim, err);
        if (!bench->optimizers[g]) return -1;
        if (method_group_configure(&method->groups[g], bench->optimizers[g], err)) return -1;
    }
    bench->lr = (float)(method->defaults.base_lr * method_lr_scale(&method->defaults, args->batch));
    bench->weight_decay = (float)method->defaults.weight_decay;
    if (step_gate_create(&bench->gate, backend, method->group_count, err)) return -1;
    if (strcmp(bench->run->precision, "16-mixed") == 0) {  // the loss scaler's start
        const float scale[2] = {65536.0f, 1.0f / 65536.0f};
        bench->loss_scale = backend->op.alloc(backend, sizeof scale);
        if (!bench->loss_scale) return error_set(err, "out of memory for the loss scale");
        backend->op.upload(backend, bench->loss_scale, scale, sizeof scale);
        method->loss_scale = bench->loss_scale;
    }
    const size_t global = (size_t)method->global_views * args->batch * method->global_size *
                          method->global_size * 3;
    const size_t local = (size_t)method->local_views * args->batch * method->local_size *
                         method->local_size * 3;
    if (fill_random_act(backend, method->global_input, global, 1) != 0 ||
        (local && fill_random_act(backend, method->local_input, local, 2) != 0))
        return error_set(err, "out of memory for the views");
    return 0;
}

static int bench_method(const BenchArgs *args, Backend *backend, const BenchRun *run,
                        ErrorMessage *err) {
    MethodKind kind;
    if (method_kind_parse(args->method, &kind, err)) return -1;
    MethodBench bench = {.batch = args->batch, .run = run};
    Method *method = &bench.method;
    if (create_bench_method(args, backend, kind, method, err)) return -1;
    Timing timing = {0};
    // Only whole steps are captured (timed parts wait inside a step).
    const char *graphs = getenv("LTC_CUDA_GRAPHS");
    bench.graphs = graphs && strcmp(graphs, "on") == 0 && backend->op.step_graph_begin &&
                   !run->timed_parts;
    int status = prepare_method_bench(args, &bench, err);
    if (!status) status = time_steps(backend, args, run, method_step, &bench, &timing, err);
    if (!status) {
        char what[160], teacher[48] = "";
        const char *graphs_field = bench.graphs ? " cuda_graphs=on" : "";
        if (is_distillation(kind)) snprintf(teacher, sizeof teacher, " teacher=%s", args->teacher);
        if (args->mode == MODE_DISTILLATION)
            snprintf(what, sizeof what, "mode=distillation model=%s%s%s", args->model, teacher,
                     graphs_field);
        else
            snprintf(what, sizeof what, "mode=method method=%s model=%s%s%s", args->method,
                     args->model, teacher, graphs_field);
        printf("lightly-train-c %s: model %s%s%s, %d global + %d local views, %s lr %g, "
               "backend %s, %d thread(s)\n",
               method_kind_name(kind), args->model, teacher[0] ? ", teacher " : "",
               teacher[0] ? args->teacher : "", method->global_views, method->local_views,
               optimizer_kind_name(method->defaults.optimizer), bench.lr, backend->name,
               backend->threads);
        print_result(args, backend, run, what, (const char *[2]){"method_step_s", "update_s"},
                     &timing);
    }
    if (bench.loss_scale) backend->op.free(backend, bench.loss_scale);
    if (bench.gate.values) step_gate_free(&bench.gate);
    for (int g = 0; g < method->group_count; g++)
        if (bench.optimizers[g]) optimizer_free(bench.optimizers[g]);
    method_free(method);
    return status;
}

int main(int argc, char **argv) {
    BenchArgs args;
    if (parse_args(argc, argv, &args) != 0) return 2;
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(args.backend, args.threads, &err);
    if (!backend) {
        fprintf(stderr, "bench_train_step: %s\n", err.text);
        return 1;
    }
    BenchRun run;
    char note[sizeof err.text + 64];
    int status = choose_precision(&args, backend, &run, note, sizeof note, &err);
    if (!status) {
        printf("backend %s%s%s, precision %s%s\n", backend->name, backend->device[0] ? ": " : "",
               backend->device, run.precision, note);
        switch (args.mode) {
        case MODE_TEACHER: status = bench_teacher_forward(&args, backend, &run, &err); break;
        case MODE_DISTILLATION:  // the method distillation (v3), queue 8192
        case MODE_METHOD: status = bench_method(&args, backend, &run, &err); break;
        default: status = bench_backbone_step(&args, backend, &run, &err); break;
        }
    }
    if (status) fprintf(stderr, "bench_train_step: %s\n", err.text);
    if (!status && backend->op.describe_paths) {  // which fused paths the plans took
        char paths[1024];
        backend->op.describe_paths(backend, paths, sizeof paths);
        if (paths[0]) printf("paths: %s\n", paths);
    }
    backend_destroy(backend);
    return status ? 1 : 0;
}
