// The depthwise convolution's forward and backward data on oneDNN's grouped
// convolution (groups = channels; its brdgmm_dw / jit_dw kernels): measured
// faster than our own AVX2 kernels on ConvNeXt's 7x7 shapes (tools/
// bench_convnext_ops.c, docs/performance.md). Activations stay NHWC; oneDNN's
// fast kernels take the weights only in their blocked layouts, so each call
// reorders our (K, K, C) weights (K K C floats) into the direction's buffer,
// as cpu_conv.c does. The weight gradient stays ours (cpu_depthwise.c):
// oneDNN's for NHWC is a generic kernel several times slower.
#include <stdio.h>
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

enum { DW_FORWARD, DW_BACKWARD_DATA, DW_DIRECTIONS };

struct DepthwiseDnnl {
    dnnl_primitive_t conv[DW_DIRECTIONS];
    dnnl_primitive_t reorder[DW_DIRECTIONS];  // (K, K, C) -> the direction's layout
    dnnl_memory_t blocked[DW_DIRECTIONS];
    void *blocked_buffer[DW_DIRECTIONS];
    // Memories on the caller's buffers: data pointers set on every call.
    dnnl_memory_t in, out, weights, bias;
    float *zero_bias;  // (C): the forward's bias when the caller has none
    dnnl_memory_t scratchpad;
    void *scratchpad_buffer;
    char impl[DW_DIRECTIONS][64];
};

#define DNNL_LABEL "cpu depthwise"

// The direction's primitive, its implementation name, its weight buffer in
// the layout it chose and the reorder from (K, K, C) into it.
static int finish_direction(CpuState *state, DepthwiseDnnl *d, int direction,
                            dnnl_primitive_desc_t pd, const dnnl_memory_desc_t *kkc,
                            dnnl_primitive_attr_t attr, size_t *scratch, ErrorMessage *err) {
    dnnl_primitive_desc_t reorder_pd = NULL;
    const char *impl = NULL;
    DNNL_TRY(dnnl_primitive_desc_query(pd, dnnl_query_impl_info_str, 0, &impl), "query impl");
    snprintf(d->impl[direction], sizeof d->impl[direction], "%s", impl ? impl : "?");
    if (cpu_dnnl_scratchpad_size(pd) > *scratch) *scratch = cpu_dnnl_scratchpad_size(pd);
    DNNL_TRY(dnnl_primitive_create(&d->conv[direction], pd), "primitive_create (conv)");
    const dnnl_memory_desc_t *chosen = dnnl_primitive_desc_query_md(pd, dnnl_query_weights_md, 0);
    d->blocked_buffer[direction] = cpu_aligned_buffer(dnnl_memory_desc_get_size(chosen));
    if (!d->blocked_buffer[direction])
        return error_set(err, "cpu depthwise: out of memory for the blocked weights");
    DNNL_TRY(dnnl_memory_create(&d->blocked[direction], chosen, state->engine,
                                d->blocked_buffer[direction]),
             "memory_create (blocked weights)");
    DNNL_TRY(dnnl_reorder_primitive_desc_create(&reorder_pd, kkc, state->engine, chosen,
                                                state->engine, attr),
             "reorder_primitive_desc_create (weights)");
    if (cpu_dnnl_scratchpad_size(reorder_pd) > *scratch) *scratch = cpu_dnnl_scratchpad_size(reorder_pd);
    DNNL_TRY(dnnl_primitive_create(&d->reorder[direction], reorder_pd),
             "primitive_create (reorder)");
    dnnl_primitive_desc_destroy(reorder_pd);
    return 0;
fail:
    if (reorder_pd) dnnl_primitive_desc_destroy(reorder_pd);
    return -1;
}

DepthwiseDnnl *cpu_depthwise_dnnl_make(Backend *backend, const DepthwiseShape *s,
                                       ErrorMessage *err) {
    CpuState *state = backend->impl;
    DepthwiseDnnl *d = calloc(1, sizeof *d);
    if (!d) {
        error_set(err, "cpu depthwise: out of memory for a plan");
        return NULL;
    }
    // Logical NCHW and (G, O/G, I/G, KH, KW); our layouts given by tag or strides.
    const dnnl_dim_t c = s->channels, k = s->kernel;
    const dnnl_dims_t in_dims = {s->batch, c, s->in_height, s->in_width};
    const dnnl_dims_t out_dims = {s->batch, c, s->out_height, s->out_width};
    const dnnl_dims_t weight_dims = {c, 1, 1, k, k};
    const dnnl_dims_t kkc_strides = {1, k * k * c, k * k * c, k * c, c};
    const dnnl_dims_t bias_dims = {c};
    const dnnl_dims_t strides = {s->stride, s->stride};
    const dnnl_dims_t pad_before = {s->padding, s->padding};
    const dnnl_dims_t pad_after = {
        (s->out_height - 1) * s->stride + s->kernel - s->in_height - s->padding,
        (s->out_width - 1) * s->stride + s->kernel - s->in_width - s->padding};
    dnnl_memory_desc_t in_md, out_md, kkc_md, any_md, bias_md;
    dnnl_primitive_attr_t attr = NULL;
    dnnl_primitive_desc_t pd[DW_DIRECTIONS] = {NULL, NULL};
    dnnl_convolution_desc_t desc;
    size_t scratch = 0;
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&in_md, 4, in_dims, dnnl_f32, dnnl_nhwc), "md (input)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&out_md, 4, out_dims, dnnl_f32, dnnl_nhwc),
             "md (output)");
    DNNL_TRY(dnnl_memory_desc_init_by_strides(&kkc_md, 5, weight_dims, dnnl_f32, kkc_strides),
             "md (weights)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&any_md, 5, weight_dims, dnnl_f32, dnnl_format_tag_any),
             "md (any weights)");
    DNNL_TRY(dnnl_memory_desc_init_by_tag(&bias_md, 1, bias_dims, dnnl_f32, dnnl_a), "md (bias)");
    DNNL_TRY(dnnl_primitive_attr_create(&attr), "primitive_attr_create");
    DNNL_TRY(dnnl_primitive_attr_set_scratchpad_mode(attr, dnnl_scratchpad_mode_user),
             "set_scratchpad_mode");
    DNNL_TRY(dnnl_convolution_forward_desc_init(&desc, dnnl_forward_training,
                                                dnnl_convolution_direct, &in_md, &any_md, &bias_md,
                                                &out_md, strides, pad_before, pad_after),
             "convolution_forward_desc_init");
    DNNL_TRY(dnnl_primitive_desc_create(&pd[DW_FORWARD], &desc, attr, state->engine, NULL),
             "primitive_desc_create (forward)");
    DNNL_TRY(dnnl_convolution_backward_data_desc_init(&desc, dnnl_convolution_direct, &in_md,
                                                      &any_md, &out_md, strides, pad_before,
                                                      pad_after),
             "convolution_backward_data_desc_init");
    DNNL_TRY(dnnl_primitive_desc_create(&pd[DW_BACKWARD_DATA], &desc, attr, state->engine,
                                        pd[DW_FORWARD]),
             "primitive_desc_create (backward data)");
    for (int i = 0; i < DW_DIRECTIONS; i++)
        if (finish_direction(state, d, i, pd[i], &kkc_md, attr, &scratch, err)) goto fail;

    d->zero_bias = calloc((size_t)c, sizeof *d->zero_bias);
    if (!d->zero_bias) {
        error_set(err, "cpu depthwise: out of memory for a plan");
        goto fail;
    }
    if (cpu_dnnl_scratchpad(backend, scratch, &d->scratchpad_buffer, &d->scratchpad, err))
        goto fail;
    DNNL_TRY(dnnl_memory_create(&d->in, &in_md, state->engine, DNNL_MEMORY_NONE), "memory (in)");
    DNNL_TRY(dnnl_memory_create(&d->out, &out_md, state->engine, DNNL_MEMORY_NONE),
             "memory (out)");
    DNNL_TRY(dnnl_memory_create(&d->weights, &kkc_md, state->engine, DNNL_MEMORY_NONE),
             "memory (weights)");
    DNNL_TRY(dnnl_memory_create(&d->bias, &bias_md, state->engine, DNNL_MEMORY_NONE),
             "memory (bias)");
    for (int i = 0; i < DW_DIRECTIONS; i++) dnnl_primitive_desc_destroy(pd[i]);
    dnnl_primitive_attr_destroy(attr);
    return d;
fail:
    for (int i = 0; i < DW_DIRECTIONS; i++)
        if (pd[i]) dnnl_primitive_desc_destroy(pd[i]);
    if (attr) dnnl_primitive_attr_destroy(attr);
    cpu_depthwise_dnnl_free(d);
    return NULL;
}

void cpu_depthwise_dnnl_free(DepthwiseDnnl *d) {
    if (!d) return;
    for (int i = 0; i < DW_DIRECTIONS; i++) {
        if (d->conv[i]) dnnl_primitive_destroy(d->conv[i]);
        if (d->reorder[i]) dnnl_primitive_destroy(d->reorder[i]);
        if (d->blocked[i]) dnnl_memory_destroy(d->blocked[i]);
        free(d->blocked_buffer[i]);
    }
    dnnl_memory_t memories[] = {d->in, d->out, d->weights, d->bias, d->scratchpad};
    for (size_t i = 0; i < sizeof memories / sizeof *memories; i++)
        if (memories[i]) dnnl_memory_destroy(memories[i]);
    free(d->zero_bias);
    free(d->scratchpad_buffer);
    free(d);
}

const char *cpu_depthwise_dnnl_impl(const DepthwiseDnnl *d, int direction) {
    return direction >= 0 && direction < DW_DIRECTIONS ? d->impl[direction] : "?";
}

// w (K, K, C) reordered into the direction's buffer.
static dnnl_memory_t blocked_weights(Backend *backend, const DepthwiseDnnl *d, int direction,
                                     const float *w) {
    dnnl_memory_set_data_handle(d->weights, (void *)w);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_FROM, d->weights},
                                    {DNNL_ARG_TO, d->blocked[direction]},
                                    {DNNL_ARG_SCRATCHPAD, d->scratchpad}};
    cpu_dnnl_execute(backend, d->reorder[direction], 3, args);
    return d->blocked[direction];
}

void cpu_depthwise_dnnl_forward(Backend *backend, const DepthwiseDnnl *d, const float *x,
                                const float *w, const float *bias, float *y) {
    cpu_set_threads(backend);
    dnnl_memory_t weights = blocked_weights(backend, d, DW_FORWARD, w);
    dnnl_memory_set_data_handle(d->in, (void *)x);
    dnnl_memory_set_data_handle(d->out, y);
    dnnl_memory_set_data_handle(d->bias, (void *)(bias ? bias : d->zero_bias));
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, d->in},
                                    {DNNL_ARG_WEIGHTS, weights},
                                    {DNNL_ARG_BIAS, d->bias},
                                    {DNNL_ARG_DST, d->out},
                                    {DNNL_ARG_SCRATCHPAD, d->scratchpad}};
    cpu_dnnl_execute(backend, d->conv[DW_FORWARD], 5, args);
}

void cpu_depthwise_dnnl_backward_data(Backend *backend, const DepthwiseDnnl *d, const float *dy,
                                      const float *w, float *dx) {
    cpu_set_threads(backend);
    dnnl_memory_t weights = blocked_weights(backend, d, DW_BACKWARD_DATA, w);
    dnnl_memory_set_data_handle(d->out, (void *)dy);
    dnnl_memory_set_data_handle(d->in, dx);
    const dnnl_exec_arg_t args[] = {{DNNL_ARG_DIFF_DST, d->out},
                                    {DNNL_ARG_WEIGHTS, weights},
                                    {DNNL_ARG_DIFF_SRC, d->in},
                                    {DNNL_ARG_SCRATCHPAD, d->scratchpad}};
    cpu_dnnl_execute(backend, d->conv[DW_BACKWARD_DATA], 4, args);
}
