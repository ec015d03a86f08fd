// One training step of a backbone on a backend, timed: forward (train
// mode), loss = sum(features * fixed weights), backward, SGD with momentum
// 0.9 and weight decay 1e-4. The same step as
// tools/compare/pytorch_train_step.py, for comparing with PyTorch.
//
//   bench_train_step [--model resnet18|...|vit_s16|... (or a ResNet depth)]
//                    [--image-size N] [--batch-size N] [--steps N] [--warmup N]
//                    [--threads N] [--backend cpu|ref]
//
// Prints one line starting with RESULT: images/s, seconds per step (and its
// forward and backward parts), CPU seconds per step (user + system of all
// threads: less sensitive than wall time to other jobs on a shared machine),
// peak resident memory of the process and the bytes of each memory class.
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "backend/backend.h"
#include "nn/optimizer.h"
#include "nn/backbone.h"
#include "util/cpu.h"
#include "util/rng.h"

typedef struct BenchArgs {
    char model[32];
    int image_size, batch, steps, warmup, threads;
    const char *backend;
} BenchArgs;

static int parse_args(int argc, char **argv, BenchArgs *args) {
    *args = (BenchArgs){.model = "resnet18", .image_size = 64, .batch = 32, .steps = 10,
                        .warmup = 2, .threads = 0, .backend = "cpu"};
    for (int i = 1; i < argc; i++) {
        const char *value = i + 1 < argc ? argv[i + 1] : NULL;
        int *target = NULL;
        if (strcmp(argv[i], "--model") == 0 && value) {  // a name, or a ResNet depth
            snprintf(args->model, sizeof args->model, "%s%s",
                     value[0] >= '0' && value[0] <= '9' ? "resnet" : "", value);
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
        }
        if (!target || !value) {
            fprintf(stderr, "bench_train_step: bad argument '%s' (see the file's header)\n",
                    argv[i]);
            return -1;
        }
        *target = atoi(value);
        i++;
    }
    return 0;
}

static float *upload_random(Backend *backend, size_t n, uint32_t stream) {
    float *host = malloc(n * sizeof *host);
    Rng rng = rng_make(0, 0, 0, stream);
    for (size_t i = 0; i < n; i++) host[i] = rng_range(&rng, -1.0f, 1.0f);
    float *device = backend->op.alloc(backend, n * sizeof *device);
    backend->op.upload(backend, device, host, n * sizeof *device);
    free(host);
    return device;
}

static double cpu_seconds(void) {
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    return (double)usage.ru_utime.tv_sec + 1e-6 * usage.ru_utime.tv_usec +
           (double)usage.ru_stime.tv_sec + 1e-6 * usage.ru_stime.tv_usec;
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
    Backbone model;
    BackboneSpec spec;
    const BackboneInput shape = {args.batch, args.image_size};
    if (backbone_spec_parse(args.model, args.image_size, &spec, &err) != 0 ||
        backbone_create(&model, backend, &spec, &shape, 1, 0, &err) != 0) {
        fprintf(stderr, "bench_train_step: %s\n", err.text);
        return 1;
    }
    OptimizerConfig optim = optimizer_config_default(OPTIMIZER_SGD);
    optim.momentum = 0.9f;
    Optimizer *optimizer = optimizer_create(backend, model.params, &optim, &err);
    if (!optimizer) {
        fprintf(stderr, "bench_train_step: %s\n", err.text);
        return 1;
    }
    const size_t pixels = (size_t)args.batch * args.image_size * args.image_size * 3;
    float *input = upload_random(backend, pixels, 1);  // (N, R, R, 3)
    // d(sum(features * w)) / d(features) = w
    float *loss_weights = upload_random(backend, (size_t)args.batch * model.feature_dim, 2);

    double start = 0.0, cpu_start = 0.0, forward = 0.0, backward = 0.0;
    for (int step = 0; step < args.warmup + args.steps; step++) {
        backend->op.synchronize(backend);
        if (step == args.warmup) {
            start = time_now();
            cpu_start = cpu_seconds();
            forward = backward = 0.0;
        }
        parameter_set_zero_grads(model.params);
        const double before = time_now();
        if (backbone_forward(&model, 0, args.batch, input, 1, &err) != 0) {
            fprintf(stderr, "bench_train_step: %s\n", err.text);
            return 1;
        }
        backend->op.synchronize(backend);
        const double middle = time_now();
        if (backbone_backward(&model, 0, loss_weights, &err) != 0) {
            fprintf(stderr, "bench_train_step: %s\n", err.text);
            return 1;
        }
        backend->op.synchronize(backend);
        forward += middle - before;
        backward += time_now() - middle;
        optimizer_step(optimizer, 0.01f, 1e-4f, NULL);
    }
    backend->op.synchronize(backend);
    const double seconds = time_now() - start, cpu = cpu_seconds() - cpu_start;
    struct rusage usage;
    getrusage(RUSAGE_SELF, &usage);
    size_t activation_bytes = 0, scratch_bytes = 0;
    if (spec.kind == BACKBONE_RESNET) {
        const Resnet *resnet = &model.model.resnet;
        for (int s = 0; s < resnet->slot_count; s++)
            activation_bytes += resnet->slots[s].arena_floats * 4;
        scratch_bytes = resnet->scratch_floats * 3 * 4;
    } else {
        const Vit *vit = &model.model.vit;
        for (int s = 0; s < vit->slot_count; s++)
            activation_bytes += vit->slots[s].arena_floats * 4;
        const int wide = vit->config.mlp_hidden;  // >= 3 D in every preset
        scratch_bytes = vit->scratch_tokens * (3 * vit->config.embed_dim + wide) * 4;
    }
    printf("lightly-train-c %s, backend %s, %d thread(s)\n", args.model, backend->name,
           backend->threads);
    printf("memory: parameters %.1f MB (+ gradients, + momentum), activations %.1f MB, "
           "gradient scratch %.1f MB\n",
           model.params->total * 4 / 1e6, activation_bytes / 1e6, scratch_bytes / 1e6);
    printf("RESULT tool=lightly-train-c model=%s image_size=%d batch=%d threads=%d "
           "steps=%d images_per_s=%.2f seconds_per_step=%.4f forward_s=%.4f backward_s=%.4f "
           "cpu_s_per_step=%.4f peak_rss_mb=%.0f\n",
           args.model, args.image_size, args.batch, backend->threads, args.steps,
           args.batch * args.steps / seconds, seconds / args.steps, forward / args.steps,
           backward / args.steps, cpu / args.steps, usage.ru_maxrss / 1024.0);
    optimizer_free(optimizer);
    backend->op.free(backend, input);
    backend->op.free(backend, loss_weights);
    backbone_free(&model);
    backend_destroy(backend);
    return 0;
}
