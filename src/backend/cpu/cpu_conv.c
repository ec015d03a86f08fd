// Convolution on oneDNN primitives. Activations stay in our NHWC layout;
// oneDNN's fast fp32 kernels (brgconv/jit on AVX-512/AVX2) only accept
// weights in their own blocked layouts (with plain "ohwi" weights it falls
// back to its slow reference kernel), so each call reorders the small weight
// tensor: OHWI -> blocked before forward / backward-data, and blocked ->
// OHWI with a sum post-op after backward-weights (which gives dw +=).
// Everything (primitives, blocked weight buffers, one shared scratchpad) is
// made by the plan; the ops only set data pointers and execute (so one plan
// is used by one thread at a time, as the model's layers are).
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

enum { CONV_FORWARD, CONV_BACKWARD_DATA, CONV_BACKWARD_WEIGHTS, CONV_DIRECTIONS };

struct ConvPlan {
    ConvShape shape;
    dnnl_primitive_t conv[CONV_DIRECTIONS];
    // Weight reorders per direction: OHWI -> blocked (forward, backward
    // data), blocked -> OHWI with sum (backward weights). NULL when the
    // primitive takes OHWI itself (forward / backward data only).
    dnnl_primitive_t reorder[CONV_DIRECTIONS];
    dnnl_memory_t blocked_weights[CONV_DIRECTIONS];  // NULL when not reordered
    void *blocked_buffer[CONV_DIRECTIONS];
    // User-layout memories: their data pointers are set on every call.
    dnnl_memory_t activations_in;   // (N, H, W, Cin) nhwc
    dnnl_memory_t activations_out;  // (N, OH, OW, Cout) nhwc
    dnnl_memory_t weights;          // (Cout, K, K, Cin) ohwi
    dnnl_memory_t scratchpad;       // shared by all primitives of the plan
    void *scratchpad_buffer;
    char impl[CONV_DIRECTIONS][64];
};

#define DNNL_LABEL "cpu conv"

// Makes the reorder primitive from -> to (sum post-op when accumulate) and
// raises *scratch to its scratchpad need.
static int make_reorder(CpuState *state, const dnnl_memory_desc_t *from,
                        const dnnl_memory_desc_t *to, int accumulate, dnnl_primitive_t *reorder,
                        size_t *scratch, ErrorMessage *err) {
    dnnl_primitive_attr_t attr = NULL;
    dnnl_post_ops_t post_ops = NULL;
    dnnl_primitive_desc_t pd = NULL;
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
             "set_scratchpad_mode");
    if (accumulate) {
        DNNL_TRY(dnnl_post_ops_create(&post_ops), "post_ops_create");
        DNNL_TRY(dnnl_post_ops_append_sum(post_ops, 1.0f), "post_ops_append_sum");
        DNNL_TRY(dnnl_primitive_attr_set_post_ops(attr, post_ops), "set_post_ops");
    }
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&pd, from, state->engine, to, state->engine, attr),
             "reorder_primitive_desc_create (weights)");
    if (cpu_dnnl_scratchpad_size(pd) > *scratch) *scratch = cpu_dnnl_scratchpad_size(pd);
    DNNL_TRY(dnnl_primitive_create(reorder, pd), "primitive_create (reorder)");
    dnnl_primitive_desc_destroy(pd);
    dnnl_post_ops_destroy(post_ops);
    dnnl_primitive_attr_destroy(attr);
    return 0;
fail:
    if (pd) dnnl_primitive_desc_destroy(pd);
    if (post_ops) dnnl_post_ops_destroy(post_ops);
    if (attr) dnnl_primitive_attr_destroy(attr);
    return -1;
}

// For one direction: the primitive, its implementation name, and (when its
// weight layout differs from OHWI, or always for backward weights) the
// blocked weight buffer and the reorder between it and OHWI.
static int finish_direction(CpuState *state, ConvPlan *plan, int direction,
                            dnnl_primitive_desc_t pd, const dnnl_memory_desc_t *ohwi,
                            size_t *scratch, ErrorMessage *err) {
    const char *impl = NULL;
    DNNL_TRY(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "query impl");
    snprintf(plan->impl[direction], sizeof plan->impl[direction], "%s", impl ? impl : "?");
    if (cpu_dnnl_scratchpad_size(pd) > *scratch) *scratch = cpu_dnnl_scratchpad_size(pd);
    DNNL_TRY(dnnl_primitive_create(&plan->conv[direction], pd), "primitive_create (conv)");

    const int is_weights_grad = direction == CONV_BACKWARD_WEIGHTS;
    const dnnl_memory_desc_t *chosen = dnnl_primitive_desc_query_md(
        pd, is_weights_grad ? dnnl_query_diff_weights_md : dnnl_query_weights_md, 0);
    // Backward weights always writes a private buffer so the reorder's sum
    // post-op can give the += of the contract.
    if (!is_weights_grad && dnnl_memory_desc_equal(chosen, ohwi)) return 0;
    plan->blocked_buffer[direction] = cpu_aligned_buffer(dnnl_memory_desc_get_size(chosen));
    if (!plan->blocked_buffer[direction])
        return error_set(err, "cpu conv: out of memory for the blocked weights");
    DNNL_TRY(dnnl_memory_create(&plan->blocked_weights[direction], chosen, state->engine,
                                plan->blocked_buffer[direction]),
             "memory_create (blocked weights)");
    if (is_weights_grad)
        return make_reorder(state, chosen, ohwi, 1, &plan->reorder[direction], scratch, err);
    return make_reorder(state, ohwi, chosen, 0, &plan->reorder[direction], scratch, err);
fail:
    return -1;
}

ConvPlan *cpu_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err) {
    CpuState *state = backend->impl;
    const ConvShape *s = shape;
    ConvPlan *plan = calloc(1, sizeof *plan);
    if (!plan) {
        error_set(err, "cpu conv: out of memory for a plan");
        return NULL;
    }
    plan->shape = *shape;
    cpu_set_threads(backend);

    // oneDNN describes tensors in logical NCHW / OIHW order; the format tag
    // says how they lie in memory (nhwc, ohwi: ours).
    const dnnl_dims_t in_dims = {s->batch, s->in_channels, s->in_height, s->in_width};
    const dnnl_dims_t out_dims = {s->batch, s->out_channels, s->out_height, s->out_width};
    const dnnl_dims_t weight_dims = {s->out_channels, s->in_channels, s->kernel, s->kernel};
    const dnnl_dims_t strides = {s->stride, s->stride};
    const dnnl_dims_t pad_before = {s->padding, s->padding};
    // Padding after: whatever the last window needs beyond the input (can be
    // less than `padding` when the stride skips the tail).
    const dnnl_dims_t pad_after = {
        (s->out_height - 1) * s->stride + s->kernel - s->in_height - s->padding,
        (s->out_width - 1) * s->stride + s->kernel - s->in_width - s->padding};

    dnnl_memory_desc_t in_md, out_md, ohwi_md, any_weights_md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd[CONV_DIRECTIONS] = {NULL, NULL, NULL};
    dnnl_convolution_desc_t desc;
    size_t scratch = 0;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&in_md, 4, in_dims, dnnl_f32, dnnl_nhwc), "md (input)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&out_md, 4, out_dims, dnnl_f32, dnnl_nhwc),
             "md (output)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&ohwi_md, 4, weight_dims, dnnl_f32, dnnl_ohwi),
             "md (weights)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&any_weights_md, 4, weight_dims, dnnl_f32,
                                          dnnl_format_tag_any),
             "md (any weights)");
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
             "set_scratchpad_mode");

    DNNL_TRY(dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training,
                                                dnnl_convolution_direct, &in_md, &any_weights_md,
                                                NULL, &out_md, strides, pad_before, pad_after),
             "convolution_forward_desc_init");
    DNNL_TRY(dnnl_primitive_desc_create(&pd[CONV_FORWARD], &desc, attr, state->engine,
                                        NULL),
             "primitive_desc_create (forward)");
    DNNL_TRY(dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &in_md,
                                                      &any_weights_md, &out_md, strides,
                                                      pad_before, pad_after),
             "convolution_backward_data_desc_init");
    DNNL_TRY(dnnl_primitive_desc_create(&pd[CONV_BACKWARD_DATA], &desc, attr,
                                        state->engine, pd[CONV_FORWARD]),
             "primitive_desc_create (backward data)");
    DNNL_TRY(dnnl_convolution_backward_weights_desc_init(&desc, dnnl_convolution_direct, &in_md,
                                                         &any_weights_md, NULL, &out_md, strides,
                                                         pad_before, pad_after),
             "convolution_backward_weights_desc_init");
    DNNL_TRY(dnnl_primitive_desc_create(&pd[CONV_BACKWARD_WEIGHTS], &desc, attr,
                                        state->engine, pd[CONV_FORWARD]),
             "primitive_desc_create (backward weights)");

    for (int d = 0; d < CONV_DIRECTIONS; d++)
        if (finish_direction(state, plan, d, pd[d], &ohwi_md, &scratch, err)) goto fail;

    DNNL_TRY(dnnl_memory_create(&plan->activations_in, &in_md, state->engine, DNNL_MEMORY_NONE),
             "memory_create (input)");
    DNNL_TRY(dnnl_memory_create(&plan->activations_out, &out_md, state->engine, DNNL_MEMORY_NONE),
             "memory_create (output)");
    DNNL_TRY(dnnl_memory_create(&plan->weights, &ohwi_md, state->engine, DNNL_MEMORY_NONE),
             "memory_create (weights)");
    // One scratchpad for every primitive of the plan: they run one at a time.
    if (cpu_dnnl_scratchpad(backend, scratch, &plan->scratchpad_buffer, &plan->scratchpad, err))
        goto fail;

    for (int d = 0; d < CONV_DIRECTIONS; d++) dnnl_primitive_desc_destroy(pd[d]);
    dnnl_primitive_attr_destroy(attr);
    return plan;
fail:
    error_prefix(err, "conv %dx%dx%d -> %d, kernel %d, stride %d, padding %d", s->in_height,
                 s->in_width, s->in_channels, s->out_channels, s->kernel, s->stride, s->padding);
    for (int d = 0; d < CONV_DIRECTIONS; d++)
        if (pd[d]) dnnl_primitive_desc_destroy(pd[d]);
    if (attr) dnnl_primitive_attr_destroy(attr);
    cpu_conv2d_plan_free(backend, plan);
    return NULL;
}

void cpu_conv2d_plan_free(Backend *backend, ConvPlan *plan) {
    if (!plan) return;
    for (int d = 0; d < CONV_DIRECTIONS; d++) {
        if (plan->conv[d]) dnnl_primitive_destroy(plan->conv[d]);
        if (plan->reorder[d]) dnnl_primitive_destroy(plan->reorder[d]);
        if (plan->blocked_weights[d]) dnnl_memory_destroy(plan->blocked_weights[d]);
        free(plan->blocked_buffer[d]);
    }
    if (plan->activations_in) dnnl_memory_destroy(plan->activations_in);
    if (plan->activations_out) dnnl_memory_destroy(plan->activations_out);
    if (plan->weights) dnnl_memory_destroy(plan->weights);
    if (plan->scratchpad) dnnl_memory_destroy(plan->scratchpad);
    free(plan->scratchpad_buffer);
    free(plan);
}

const char *cpu_conv2d_plan_impl(const ConvPlan *plan, int direction) {
    return direction >= 0 && direction < CONV_DIRECTIONS ? plan->impl[direction] : "?";
}

// The weights the direction's primitive reads: OHWI w itself, or w
// reordered into the plan's blocked buffer.
static dnnl_memory_t weights_for(Backend *backend, const ConvPlan *plan, int direction,
                                 const float *w) {
    dnnl_memory_set_data_handle(plan->weights, (void *)w);
    if (!plan->reorder[direction]) return plan->weights;
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, plan->weights},
                                    {DNNL_ARG_TO, plan->blocked_weights[direction]},
                                    {DNNL_ARG_SCRATCHPAD, plan->scratchpad}};
    cpu_dnnl_execute(backend, plan->reorder[direction], 3, args);
    return plan->blocked_weights[direction];
}

void cpu_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x_act, const Act *w_act,
                        Act *y_act) {
    const float *x = (const float *)x_act;
    const float *w = (const float *)w_act;
    float *y = (float *)y_act;
    cpu_set_threads(backend);
    dnnl_memory_t weights = weights_for(backend, plan, CONV_FORWARD, w);
    dnnl_memory_set_data_handle(plan->activations_in, (void *)x);
    dnnl_memory_set_data_handle(plan->activations_out, y);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, plan->activations_in},
                                    {DNNL_ARG_WEIGHTS, weights},
                                    {DNNL_ARG_DST, plan->activations_out},
                                    {DNNL_ARG_SCRATCHPAD, plan->scratchpad}};
    cpu_dnnl_execute(backend, plan->conv[CONV_FORWARD], 4, args);
}

void cpu_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy_act,
                              const Act *w_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    const float *w = (const float *)w_act;
    float *dx = (float *)dx_act;
    cpu_set_threads(backend);
    dnnl_memory_t weights = weights_for(backend, plan, CONV_BACKWARD_DATA, w);
    dnnl_memory_set_data_handle(plan->activations_in, dx);
    dnnl_memory_set_data_handle(plan->activations_out, (void *)dy);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_DIFF_SRC, plan->activations_in},
                                    {DNNL_ARG_WEIGHTS, weights},
                                    {DNNL_ARG_DIFF_DST, plan->activations_out},
                                    {DNNL_ARG_SCRATCHPAD, plan->scratchpad}};
    cpu_dnnl_execute(backend, plan->conv[CONV_BACKWARD_DATA], 4, args);
}

void cpu_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x_act,
                                 const Act *dy_act, float *dw) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    cpu_set_threads(backend);
    dnnl_memory_set_data_handle(plan->activations_in, (void *)x);
    dnnl_memory_set_data_handle(plan->activations_out, (void *)dy);
    const dnnl_exec_arg_t args[] = {
        {DNNL_ARG_SRC, plan->activations_in},
        {DNNL_ARG_DIFF_WEIGHTS, plan->blocked_weights[CONV_BACKWARD_WEIGHTS]},
        {DNNL_ARG_DIFF_DST, plan->activations_out},
        {DNNL_ARG_SCRATCHPAD, plan->scratchpad}};
    cpu_dnnl_execute(backend, plan->conv[CONV_BACKWARD_WEIGHTS], 4, args);
    // dw += the private gradient, converted to OHWI by the summing reorder.
    dnnl_memory_set_data_handle(plan->weights, dw);
    const dnnl_exec_arg_t accumulate[] = {
        {DNNL_ARG_FROM, plan->blocked_weights[CONV_BACKWARD_WEIGHTS]},
        {DNNL_ARG_TO, plan->weights},
        {DNNL_ARG_SCRATCHPAD, plan->scratchpad}};
    cpu_dnnl_execute(backend, plan->reorder[CONV_BACKWARD_WEIGHTS], 3, accumulate);
}
