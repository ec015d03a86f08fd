// Planned linear layers (backend.h: linear_plan; ConvNeXt's fc1 and fc2) as
// one oneDNN matmul primitive per plan: x (rows, in) row-major, w (out, in)
// read as the (in, out) matrix it is transposed ("ba", no reorder), the bias
// added in the kernel and, for a GELU plan, oneDNN's erf GELU as a post-op,
// so the product's output is written once. Against dnnl_sgemm with separate
// bias and GELU passes on ConvNeXt-T's shapes: tools/bench_convnext_ops.c,
// docs/performance.md.
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

struct LinearPlan {
    int rows, in, out, gelu;
    dnnl_primitive_t matmul;
    dnnl_memory_t x, w, bias, y;  // on the caller's buffers: data set on every call
    float *zero_bias;             // (out): the bias when the caller has none
    dnnl_memory_t scratchpad;
    void *scratchpad_buffer;
};

#define DNNL_LABEL "cpu linear plan"

LinearPlan *cpu_linear_plan(Backend *backend, int rows, int in, int out, int gelu,
                            ErrorMessage *err) {
    CpuState *state = backend->impl;
    if (rows < 1 || in < 1 || out < 1) {
        error_set(err, "cpu linear plan: %d rows of %d -> %d", rows, in, out);
        return NULL;
    }
    LinearPlan *plan = calloc(1, sizeof *plan);
    if (!plan) {
        error_set(err, "cpu linear plan: out of memory");
        return NULL;
    }
    *plan = (LinearPlan){.rows = rows, .in = in, .out = out, .gelu = gelu != 0};
    const dnnl_dims_t x_dims = {rows, in}, w_dims = {in, out}, bias_dims = {1, out},
                      y_dims = {rows, out};
    dnnl_memory_desc_t x_md, w_md, bias_md, y_md;
    dnnl_matmul_desc_t desc;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post_ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&x_md, 2, x_dims, dnnl_f32, dnnl_ab), "md (x)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&w_md, 2, w_dims, dnnl_f32, dnnl_ba), "md (w)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&bias_md, 2, bias_dims, dnnl_f32, dnnl_ab), "md (bias)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&y_md, 2, y_dims, dnnl_f32, dnnl_ab), "md (y)");
    DNNL_TRY(dnnl_matmul_desc_init(&desc, &x_md, &w_md, &bias_md, &y_md), "matmul_desc_init");
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
             "set_scratchpad_mode");
    if (plan->gelu) {
        DNNL_TRY(dnnl_post_ops_create(&post_ops), "post_ops_create");
        DNNL_TRY(dnnl_post_ops_append_eltwise(post_ops, 1.0f, dnnl_eltwise_gelu_erf, 0.0f, 0.0f),
                 "post_ops_append_eltwise (gelu_erf)");
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, post_ops), "set_post_ops");
    }
    DNNL_TRY(dnnl_primitive_desc_create(&pd, &desc, attr, state->engine, NULL),
             "primitive_desc_create (matmul)");
    DNNL_TRY(dnnl_primitive_create(&plan->matmul, pd), "primitive_create (matmul)");
    plan->zero_bias = calloc((size_t)out, sizeof *plan->zero_bias);
    if (!plan->zero_bias) {
        error_set(err, "cpu linear plan: out of memory");
        goto fail;
    }
    if (cpu_dnnl_scratchpad(backend, cpu_dnnl_scratchpad_size(pd), &plan->scratchpad_buffer,
                            &plan->scratchpad, err))
        goto fail;
    DNNL_TRY(dnnl_memory_create(&plan->x, &x_md, state->engine, DNNL_MEMORY_NONE), "memory (x)");
    DNNL_TRY(dnnl_memory_create(&plan->w, &w_md, state->engine, DNNL_MEMORY_NONE), "memory (w)");
    DNNL_TRY(dnnl_memory_create(&plan->bias, &bias_md, state->engine, DNNL_MEMORY_NONE),
             "memory (bias)");
    DNNL_TRY(dnnl_memory_create(&plan->y, &y_md, state->engine, DNNL_MEMORY_NONE), "memory (y)");
    dnnl_primitive_desc_destroy(pd);
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    return plan;
fail:
    error_prefix(err, "linear %d rows of %d -> %d%s", rows, in, out, gelu ? " + GELU" : "");
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    cpu_linear_plan_free(backend, plan);
    return NULL;
}

void cpu_linear_plan_free(Backend *backend, LinearPlan *plan) {
    if (!plan) return;
    if (plan->matmul) dnnl_primitive_destroy(plan->matmul);
    dnnl_memory_t memories[] = {plan->x, plan->w, plan->bias, plan->y, plan->scratchpad};
    for (size_t i = 0; i < sizeof memories / sizeof *memories; i++)
        if (memories[i]) dnnl_memory_destroy(memories[i]);
    free(plan->zero_bias);
    free(plan->scratchpad_buffer);
    free(plan);
}

void cpu_linear_planned_forward(Backend *backend, const LinearPlan *plan, const Act *x,
                                const Act *w, const float *bias, Act *y) {
    cpu_set_threads(backend);
    dnnl_memory_set_data_handle(plan->x, (void *)x);
    dnnl_memory_set_data_handle(plan->w, (void *)w);
    dnnl_memory_set_data_handle(plan->bias, (void *)(bias ? bias : plan->zero_bias));
    dnnl_memory_set_data_handle(plan->y, y);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, plan->x},
                                    {DNNL_ARG_WEIGHTS, plan->w},
                                    {DNNL_ARG_BIAS, plan->bias},
                                    {DNNL_ARG_DST, plan->y},
                                    {DNNL_ARG_SCRATCHPAD, plan->scratchpad}};
    cpu_dnnl_execute(backend, plan->matmul, 5, args);
}
