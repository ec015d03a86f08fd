// Microbenchmark of the cpu backend's ConvNeXt ops on ConvNeXt-T's shapes at
// 224 px (fp32), so the choices in docs/performance.md can be re-measured:
//   depthwise 7x7 (NHWC): the backend's ops (cpu_depthwise.c: forward and
//     backward data on oneDNN, the weight gradient ours) next to oneDNN's
//     grouped convolution (groups = channels) called directly, forward
//     (+ bias), backward data and backward weights (+ bias gradient); the
//     direct calls get oneDNN's preferred weight layout (format any),
//     reordered once outside the timing;
//   the block's MLP: fc1 + GELU and fc2 as linear_forward (dnnl_sgemm, then
//     a bias pass) and gelu_forward, next to the planned layers
//     (cpu_linear_plan.c: one oneDNN matmul, bias and GELU fused).
// Prints ms per call (the fastest of --reps after a warm-up call) and the
// kernels that ran:
//   build/tools/bench_convnext_ops [--threads N] [--batch N] [--reps N]
#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_internal.h"
#include "util/cpu.h"

typedef struct DwShape {
    const char *name;
    int size, channels;
} DwShape;

// ConvNeXt-T's stages at 224 px (S, B and L widen the channels).
static const DwShape convnext_shapes[] = {
    {"stage1", 56, 96},
    {"stage2", 28, 192},
    {"stage3", 14, 384},
    {"stage4", 7, 768},
};

#define DW_KERNEL 7
#define DW_PADDING 3

static float *random_floats(size_t n, unsigned seed) {
    float *p = malloc(n * sizeof(float));
    if (!p) return NULL;
    for (size_t i = 0; i < n; i++) {
        seed = seed * 1664525u + 1013904223u;
        p[i] = (float)(seed >> 8) / 16777216.0f - 0.5f;
    }
    return p;
}

typedef struct Buffers {
    float *x, *y, *w, *bias, *dw, *dbias;
} Buffers;

// Milliseconds of the backend's op: direction 0 forward, 1 backward data,
// 2 backward weights; the fastest of `reps` calls after a warm-up call.
static double time_ours(Backend *b, const DepthwisePlan *plan, int direction, int reps,
                        const Buffers *m) {
    double best = 0.0;
    for (int r = 0; r <= reps; r++) {
        const double start = time_now();
        if (direction == 0)
            b->op.depthwise_forward(b, plan, (const Act *)m->x, (const Act *)m->w, m->bias,
                                    (Act *)m->y);
        if (direction == 1)
            b->op.depthwise_backward_data(b, plan, (const Act *)m->y, (const Act *)m->w,
                                          (Act *)m->x);
        if (direction == 2)
            b->op.depthwise_backward_weights(b, plan, (const Act *)m->x, (const Act *)m->y, m->dw,
                                             m->dbias);
        b->op.synchronize(b);
        const double elapsed = (time_now() - start) * 1e3;
        if (r == 1 || (r > 1 && elapsed < best)) best = elapsed;
    }
    return best;
}

#define DNNL_CHECK(call)                                                      \
    do {                                                                      \
        dnnl_status_t status_ = (call);                                       \
        if (status_ != dnnl_success) {                                        \
            fprintf(stderr, "bench_convnext_ops: %s failed (%d)\n", #call, (int)status_); \
            return -1;                                                        \
        }                                                                     \
    } while (0)

typedef struct OneDnn {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
} OneDnn;

// oneDNN's three primitives for the shape, timed like time_ours; ms[3] and
// the kernel names (impl[3], from the primitive descriptors) filled.
static int time_onednn(const OneDnn *o, const DepthwiseShape *s, int reps, const Buffers *m,
                       double ms[3], const char *impl[3]) {
    const dnnl_dims_t x_dims = {s->batch, s->channels, s->in_height, s->in_width};
    const dnnl_dims_t y_dims = {s->batch, s->channels, s->out_height, s->out_width};
    const dnnl_dims_t w_dims = {s->channels, 1, 1, s->kernel, s->kernel};
    const dnnl_dims_t b_dims = {s->channels};
    const dnnl_dims_t strides = {s->stride, s->stride};
    const dnnl_dims_t pad = {s->padding, s->padding};
    dnnl_memory_desc_t x_md, y_md, w_any, w_plain, b_md;
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&x_md, 4, x_dims, dnnl_f32, dnnl_nhwc));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&y_md, 4, y_dims, dnnl_f32, dnnl_nhwc));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_any, 5, w_dims, dnnl_f32, dnnl_format_tag_any));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&w_plain, 5, w_dims, dnnl_f32, dnnl_goihw));
    DNNL_CHECK(dnnl_memory_desc_init_by_tag(&b_md, 1, b_dims, dnnl_f32, dnnl_a));
    dnnl_convolution_desc_t desc;
    dnnl_primitive_desc_t pd[3];
    DNNL_CHECK(dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training,
                                                  dnnl_convolution_direct, &x_md, &w_any, &b_md,
                                                  &y_md, strides, pad, pad));
    DNNL_CHECK(dnnl_primitive_desc_create(&pd[0], &desc, NULL, o->engine, NULL));
    DNNL_CHECK(dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &x_md,
                                                        &w_any, &y_md, strides, pad, pad));
    DNNL_CHECK(dnnl_primitive_desc_create(&pd[1], &desc, NULL, o->engine, pd[0]));
    DNNL_CHECK(dnnl_convolution_backward_weights_desc_init(
        &desc, dnnl_convolution_direct, &x_md, &w_any, &b_md, &y_md, strides, pad, pad));
    DNNL_CHECK(dnnl_primitive_desc_create(&pd[2], &desc, NULL, o->engine, pd[0]));

    // The weights in each direction's chosen layout, reordered from goihw
    // before the timing; the weight gradient left in its own.
    const dnnl_memory_desc_t *dw_md = dnnl_primitive_desc_query_md(
        pd[2], dnnl_query_diff_weights_md, 0);
    dnnl_memory_t x_mem, y_mem, w_src, w_mem[2], b_mem, dw_mem, db_mem;
    float *w_blocked[2] = {NULL, NULL};
    float *dw_blocked = malloc(dnnl_memory_desc_get_size(dw_md));
    if (!dw_blocked) return -1;
    DNNL_CHECK(dnnl_memory_create(&x_mem, &x_md, o->engine, m->x));
    DNNL_CHECK(dnnl_memory_create(&y_mem, &y_md, o->engine, m->y));
    DNNL_CHECK(dnnl_memory_create(&w_src, &w_plain, o->engine, m->w));
    DNNL_CHECK(dnnl_memory_create(&b_mem, &b_md, o->engine, m->bias));
    DNNL_CHECK(dnnl_memory_create(&dw_mem, dw_md, o->engine, dw_blocked));
    DNNL_CHECK(dnnl_memory_create(&db_mem, &b_md, o->engine, m->dbias));
    for (int d = 0; d < 2; d++) {
        const dnnl_memory_desc_t *w_md = dnnl_primitive_desc_query_md(
            pd[d], dnnl_query_weights_md, 0);
        w_blocked[d] = malloc(dnnl_memory_desc_get_size(w_md));
        if (!w_blocked[d]) return -1;
        DNNL_CHECK(dnnl_memory_create(&w_mem[d], w_md, o->engine, w_blocked[d]));
        dnnl_primitive_desc_t reorder_pd;
        dnnl_primitive_t reorder;
        DNNL_CHECK(dnnl_reorder_primitive_desc_create(&reorder_pd, &w_plain, o->engine, w_md,
                                                      o->engine, NULL));
        DNNL_CHECK(dnnl_primitive_create(&reorder, reorder_pd));
        const dnnl_exec_arg_t reorder_args[] = {{DNNL_ARG_FROM, w_src}, {DNNL_ARG_TO, w_mem[d]}};
        DNNL_CHECK(dnnl_primitive_execute(reorder, o->stream, 2, reorder_args));
        DNNL_CHECK(dnnl_stream_wait(o->stream));
        dnnl_primitive_destroy(reorder);
        dnnl_primitive_desc_destroy(reorder_pd);
    }
    dnnl_primitive_t prim[3];
    for (int d = 0; d < 3; d++) {
        DNNL_CHECK(dnnl_primitive_create(&prim[d], pd[d]));
        const char *name = NULL;
        dnnl_primitive_desc_query(pd[d], dnnl_query_impl_info_str, 0, &name);
        impl[d] = name ? name : "?";
    }
    const dnnl_exec_arg_t args[3][4] = {
        {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_WEIGHTS, w_mem[0]}, {DNNL_ARG_BIAS, b_mem},
         {DNNL_ARG_DST, y_mem}},
        {{DNNL_ARG_DIFF_DST, y_mem}, {DNNL_ARG_WEIGHTS, w_mem[1]}, {DNNL_ARG_DIFF_SRC, x_mem}},
        {{DNNL_ARG_SRC, x_mem}, {DNNL_ARG_DIFF_DST, y_mem}, {DNNL_ARG_DIFF_WEIGHTS, dw_mem},
         {DNNL_ARG_DIFF_BIAS, db_mem}}};
    const int nargs[3] = {4, 3, 4};
    for (int d = 0; d < 3; d++) {
        ms[d] = 0.0;
        for (int r = 0; r <= reps; r++) {
            const double start = time_now();
            DNNL_CHECK(dnnl_primitive_execute(prim[d], o->stream, nargs[d], args[d]));
            DNNL_CHECK(dnnl_stream_wait(o->stream));
            const double elapsed = (time_now() - start) * 1e3;
            if (r == 1 || (r > 1 && elapsed < ms[d])) ms[d] = elapsed;
        }
    }
    // impl strings belong to the descriptors: copied out before they go.
    static char names[3][64];
    for (int d = 0; d < 3; d++) {
        snprintf(names[d], sizeof names[d], "%s", impl[d]);
        impl[d] = names[d];
        dnnl_primitive_destroy(prim[d]);
        dnnl_primitive_desc_destroy(pd[d]);
    }
    dnnl_memory_t mems[] = {x_mem, y_mem, w_src, w_mem[0], w_mem[1], b_mem, dw_mem, db_mem};
    for (size_t i = 0; i < sizeof mems / sizeof *mems; i++) dnnl_memory_destroy(mems[i]);
    free(w_blocked[0]);
    free(w_blocked[1]);
    free(dw_blocked);
    return 0;
}

static int bench_shape(Backend *b, const OneDnn *o, const DwShape *ds, int batch, int reps) {
    ErrorMessage err;
    DepthwiseShape s;
    if (depthwise_shape_make(&s, batch, ds->size, ds->size, ds->channels, DW_KERNEL, 1,
                             DW_PADDING, &err)) {
        fprintf(stderr, "bench_convnext_ops: %s\n", err.text);
        return -1;
    }
    DepthwisePlan *plan = b->op.depthwise_plan(b, &s, &err);
    if (!plan) {
        fprintf(stderr, "bench_convnext_ops: %s\n", err.text);
        return -1;
    }
    const size_t act_n = (size_t)batch * ds->size * ds->size * ds->channels;
    const size_t w_n = (size_t)DW_KERNEL * DW_KERNEL * ds->channels;
    Buffers m = {random_floats(act_n, 1), random_floats(act_n, 2), random_floats(w_n, 3),
                 random_floats(ds->channels, 4), random_floats(w_n, 5),
                 random_floats(ds->channels, 6)};
    int failed = !m.x || !m.y || !m.w || !m.bias || !m.dw || !m.dbias;
    double ours[3] = {0}, theirs[3] = {0};
    const char *impl[3] = {"?", "?", "?"};
    if (!failed) {
        // Ours first: the backend's ops set OpenMP's thread count, which
        // oneDNN's primitives then run on too.
        for (int d = 0; d < 3; d++) ours[d] = time_ours(b, plan, d, reps, &m);
        failed = time_onednn(o, &s, reps, &m, theirs, impl) != 0;
    }
    if (!failed) {
        char label[48];
        snprintf(label, sizeof label, "%s %dx%dx%d", ds->name, ds->size, ds->size, ds->channels);
        printf("%-20s %7.2f %7.2f  %7.2f %7.2f  %7.2f %7.2f  %s | %s | %s  (oneDNN's: %s)\n",
               label, ours[0], theirs[0], ours[1], theirs[1], ours[2], theirs[2],
               cpu_depthwise_plan_impl(plan, 0), cpu_depthwise_plan_impl(plan, 1),
               cpu_depthwise_plan_impl(plan, 2), impl[2]);
        fflush(stdout);
    }
    free(m.x);
    free(m.y);
    free(m.w);
    free(m.bias);
    free(m.dw);
    free(m.dbias);
    b->op.depthwise_plan_free(b, plan);
    return failed ? -1 : 0;
}

// ---- the MLP: separate passes against the planned layers -------------------------------------

// Milliseconds of fc (rows, in -> out) as linear_forward (+ gelu_forward)
// when plan is NULL, else as the planned layer; the fastest of `reps`.
static double time_linear(Backend *b, const LinearPlan *plan, int rows, int in, int out,
                          int gelu, int reps, const Buffers *m) {
    double best = 0.0;
    for (int r = 0; r <= reps; r++) {
        const double start = time_now();
        if (plan) {
            b->op.linear_planned_forward(b, plan, (const Act *)m->x, (const Act *)m->w, m->bias,
                                         (Act *)m->y);
        } else {
            b->op.linear_forward(b, rows, in, out, (const Act *)m->x, (const Act *)m->w, m->bias,
                                 (Act *)m->dw);
            if (gelu) b->op.gelu_forward(b, (size_t)rows * out, (const Act *)m->dw, (Act *)m->y);
        }
        b->op.synchronize(b);
        const double elapsed = (time_now() - start) * 1e3;
        if (r == 1 || (r > 1 && elapsed < best)) best = elapsed;
    }
    return best;
}

// fc1 + GELU and fc2 of the stage: separate passes, then planned.
static int bench_mlp(Backend *b, const DwShape *ds, int batch, int reps) {
    const int rows = batch * ds->size * ds->size, dim = ds->channels, hidden = 4 * dim;
    const size_t wide = (size_t)rows * hidden;
    Buffers m = {random_floats(wide, 1), random_floats(wide, 2),
                 random_floats((size_t)hidden * dim, 3), random_floats((size_t)hidden, 4),
                 random_floats(wide, 5), NULL};
    int failed = !m.x || !m.y || !m.w || !m.bias || !m.dw;
    for (int layer = 0; layer < 2 && !failed; layer++) {
        const int in = layer ? hidden : dim, out = layer ? dim : hidden, gelu = !layer;
        ErrorMessage err;
        LinearPlan *plan = b->op.linear_plan(b, rows, in, out, gelu, &err);
        if (!plan) {
            fprintf(stderr, "bench_convnext_ops: %s\n", err.text);
            failed = 1;
            break;
        }
        const double separate = time_linear(b, NULL, rows, in, out, gelu, reps, &m);
        const double planned = time_linear(b, plan, rows, in, out, gelu, reps, &m);
        char label[64];
        snprintf(label, sizeof label, "%s %s %d x %d -> %d%s", ds->name, layer ? "fc2" : "fc1",
                 rows, in, out, gelu ? " + GELU" : "");
        printf("%-36s %9.2f %9.2f  %5.2fx\n", label, separate, planned, separate / planned);
        fflush(stdout);
        b->op.linear_plan_free(b, plan);
    }
    free(m.x);
    free(m.y);
    free(m.w);
    free(m.bias);
    free(m.dw);
    return failed ? -1 : 0;
}

// --threads N (0: the machine's cores), --batch N, --reps N; -1 on anything else.
static int parse_args(int argc, char **argv, int *threads, int *batch, int *reps) {
    const struct {
        const char *flag;
        int *value, least;
    } options[] = {{"--threads", threads, 0}, {"--batch", batch, 1}, {"--reps", reps, 1}};
    const size_t count = sizeof options / sizeof options[0];
    for (int i = 1; i < argc; i += 2) {
        size_t o = 0;
        while (o < count && strcmp(argv[i], options[o].flag) != 0) o++;
        if (o == count || i + 1 >= argc) return -1;
        *options[o].value = atoi(argv[i + 1]);
        if (*options[o].value < options[o].least) return -1;
    }
    return 0;
}

int main(int argc, char **argv) {
    int threads = 0, batch = 16, reps = 5;
    if (parse_args(argc, argv, &threads, &batch, &reps)) {
        fprintf(stderr, "usage: %s [--threads N] [--batch N >= 1] [--reps N >= 1]\n", argv[0]);
        return 2;
    }
    ErrorMessage err;
    Backend *cpu = backend_create("cpu", threads, &err);
    if (!cpu) {
        fprintf(stderr, "bench_convnext_ops: %s\n", err.text);
        return 1;
    }
    OneDnn o;
    if (dnnl_engine_create(&o.engine, dnnl_cpu, 0) != dnnl_success ||
        dnnl_stream_create(&o.stream, o.engine, dnnl_stream_default_flags) != dnnl_success) {
        fprintf(stderr, "bench_convnext_ops: cannot start oneDNN\n");
        return 1;
    }
    printf("depthwise 7x7 fp32 NHWC, batch %d, %d threads (ms per call, fastest of %d)\n", batch,
           cpu->threads, reps);
    printf("%-20s %7s %7s  %7s %7s  %7s %7s  %s\n", "shape", "fwd", "oneDNN", "bwd_d", "oneDNN",
           "bwd_w", "oneDNN", "the backend's kernels (fwd | bwd_data | bwd_w)");
    int failed = 0;
    for (size_t i = 0; i < sizeof convnext_shapes / sizeof *convnext_shapes; i++)
        failed |= bench_shape(cpu, &o, &convnext_shapes[i], batch, reps);
    printf("\nthe block's MLP, ms per call: linear_forward (+ gelu_forward) | planned layer\n");
    printf("%-36s %9s %9s  %s\n", "layer", "separate", "planned", "speed-up");
    for (size_t i = 0; i < sizeof convnext_shapes / sizeof *convnext_shapes; i++)
        failed |= bench_mlp(cpu, &convnext_shapes[i], batch, reps);
    dnnl_stream_destroy(o.stream);
    dnnl_engine_destroy(o.engine);
    backend_destroy(cpu);
    return failed ? 1 : 0;
}
