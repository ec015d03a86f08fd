// Microbenchmark of the convolution ops (forward, backward data, backward
// weights) on ResNet-50 layer shapes in NHWC, for the cpu backend, plus the
// ref backend on one tiny shape for scale. Prints a table (ms per call and
// GFLOP/s, and which oneDNN kernel ran) so the library choice in
// docs/performance.md can be re-measured:
//   build/tools/bench_conv [--threads N] [--batch N] [--reps N]
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "util/cpu.h"

typedef struct BenchShape {
    const char *name;
    int size, in_channels, out_channels, kernel, stride, padding;
} BenchShape;

// ResNet-50 layers (input size, channels): the stem, a 1x1 reduce and
// expand, and 3x3 convs at each stage's resolution.
static const BenchShape resnet_shapes[] = {
    {"stem 7x7/2", 224, 3, 64, 7, 2, 3},
    {"layer1 3x3", 56, 64, 64, 3, 1, 1},
    {"layer1 1x1 256->64", 56, 256, 64, 1, 1, 0},
    {"layer1 1x1 64->256", 56, 64, 256, 1, 1, 0},
    {"layer2 3x3/2", 56, 128, 128, 3, 2, 1},
    {"layer2 3x3", 28, 128, 128, 3, 1, 1},
    {"layer3 3x3", 14, 256, 256, 3, 1, 1},
    {"layer4 3x3", 7, 512, 512, 3, 1, 1},
};

static float *random_buffer(Backend *backend, size_t n, unsigned seed) {
    float *p = backend->op.alloc(backend, n * sizeof(float));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

// Milliseconds per call of one direction (0 forward, 1 backward data,
// 2 backward weights): the fastest of `reps` calls after one warm-up call
// (the minimum, because other work on a shared machine only adds time).
static double time_direction(Backend *b, const ConvPlan *plan, int direction, int reps,
                             float *x, float *w, float *y) {
    double best = 0.0;
    for (int r = 0; r <= reps; r++) {
        const double start = time_now();
        if (direction == 0) b->op.conv2d_forward(b, plan, (const Act *)x, (const Act *)w, (Act *)y);
        if (direction == 1)
            b->op.conv2d_backward_data(b, plan, (const Act *)y, (const Act *)w, (Act *)x);
        if (direction == 2)
            b->op.conv2d_backward_weights(b, plan, (const Act *)x, (const Act *)y, w);
        b->op.synchronize(b);
        const double elapsed = (time_now() - start) * 1e3;
        if (r == 1 || (r > 1 && elapsed < best)) best = elapsed;
    }
    return best;
}

static int bench_shape(Backend *b, const BenchShape *bs, int batch, int reps) {
    ErrorMessage err;
    ConvShape s;
    if (conv_shape_make(&s, batch, bs->size, bs->size, bs->in_channels, bs->out_channels,
                        bs->kernel, bs->stride, bs->padding, &err)) {
        fprintf(stderr, "bench_conv: %s\n", err.text);
        return -1;
    }
    ConvPlan *plan = b->op.conv2d_plan(b, &s, &err);
    if (!plan) {
        fprintf(stderr, "bench_conv: %s\n", err.text);
        return -1;
    }
    const size_t x_n = (size_t)batch * s.in_height * s.in_width * s.in_channels;
    const size_t y_n = (size_t)batch * s.out_height * s.out_width * s.out_channels;
    const size_t w_n = (size_t)s.out_channels * s.kernel * s.kernel * s.in_channels;
    float *x = random_buffer(b, x_n, 1), *y = random_buffer(b, y_n, 2);
    float *w = random_buffer(b, w_n, 3);
    if (!x || !y || !w) {
        fprintf(stderr, "bench_conv: out of memory for %s\n", bs->name);
        return -1;
    }
    const double gflop = 2.0 * batch * s.out_height * s.out_width * s.out_channels *
                         s.kernel * s.kernel * s.in_channels / 1e9;
    double ms[3];
    for (int d = 0; d < 3; d++) ms[d] = time_direction(b, plan, d, reps, x, w, y);
    char label[96];
    snprintf(label, sizeof label, "%s %dx%dx%d->%d", bs->name, s.in_height, s.in_width,
             s.in_channels, s.out_channels);
    printf("%-4s %-36s %6.2f %8.1f %8.1f %8.1f %7.0f %7.0f %7.0f", b->name, label, gflop,
           ms[0], ms[1], ms[2], gflop / ms[0] * 1e3, gflop / ms[1] * 1e3, gflop / ms[2] * 1e3);
    if (strcmp(b->name, "cpu") == 0)
        printf("  %s | %s | %s", cpu_conv2d_plan_impl(plan, 0), cpu_conv2d_plan_impl(plan, 1),
               cpu_conv2d_plan_impl(plan, 2));
    printf("\n");
    fflush(stdout);
    b->op.free(b, x);
    b->op.free(b, y);
    b->op.free(b, w);
    b->op.conv2d_plan_free(b, plan);
    return 0;
}

int main(int argc, char **argv) {
    int threads = 0, batch = 32, reps = 3;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && strcmp(argv[i], "--threads") == 0) threads = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--batch") == 0) batch = atoi(argv[++i]);
        else if (i + 1 < argc && strcmp(argv[i], "--reps") == 0) reps = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: %s [--threads N] [--batch N] [--reps N]\n", argv[0]);
            return 2;
        }
    }
    if (batch < 1 || reps < 1) {
        fprintf(stderr, "bench_conv: --batch and --reps must be >= 1\n");
        return 2;
    }
    ErrorMessage err;
    Backend *cpu = backend_create("cpu", threads, &err);
    Backend *ref = cpu ? backend_create("ref", 1, &err) : NULL;
    if (!cpu || !ref) {
        fprintf(stderr, "bench_conv: %s\n", err.text);
        return 1;
    }
    printf("conv2d fp32 NHWC, batch %d, cpu backend on %d threads (ms per call, fastest of %d)\n",
           batch, cpu->threads, reps);
    printf("%-4s %-36s %6s %8s %8s %8s %7s %7s %7s  %s\n", "", "shape", "GFLOP", "fwd",
           "bwd_data", "bwd_w", "GF/s", "GF/s", "GF/s", "oneDNN kernels (fwd | bwd_data | bwd_w)");
    int failed = 0;
    for (size_t i = 0; i < sizeof resnet_shapes / sizeof *resnet_shapes; i++)
        failed |= bench_shape(cpu, &resnet_shapes[i], batch, reps);
    // The plain-loop oracle on one tiny shape, next to the cpu backend.
    const BenchShape tiny = {"tiny 3x3", 14, 32, 32, 3, 1, 1};
    failed |= bench_shape(ref, &tiny, 2, 1);
    failed |= bench_shape(cpu, &tiny, 2, reps);
    backend_destroy(ref);
    backend_destroy(cpu);
    return failed ? 1 : 0;
}
