// What the cpu backend's oneDNN plans share (cpu_conv.c, cpu_depthwise_dnnl.c,
// cpu_linear_plan.c): aligned buffers, the status check, the primitives'
// scratchpad and their execution on the backend's stream.
#include <stdlib.h>

#include "backend/cpu/cpu_internal.h"

void *cpu_aligned_buffer(size_t bytes) {
    const size_t rounded = (bytes + 63) / 64 * 64;
    return aligned_alloc(64, rounded ? rounded : 64);
}

int cpu_dnnl_check(dnnl_status_t status, const char *label, const char *call,
                   ErrorMessage *err) {
    if (status == dnnl_success) return 0;
    return error_set(err, "%s: oneDNN %s failed (status %d)", label, call, (int)status);
}

size_t cpu_dnnl_scratchpad_size(const_dnnl_primitive_desc_t pd) {
    return dnnl_memory_desc_get_size(dnnl_primitive_desc_query_md(pd, dnnl_query_scratchpad_md, 0));
}

int cpu_dnnl_scratchpad(const Backend *backend, size_t bytes, void **buffer,
                        dnnl_memory_t *memory, ErrorMessage *err) {
    const CpuState *state = backend->impl;
    *buffer = cpu_aligned_buffer(bytes);
    if (!*buffer) return error_set(err, "out of memory for a %zu-byte scratchpad", bytes);
    dnnl_memory_desc_t md;
    const dnnl_dims_t dims = {(dnnl_dim_t)(bytes ? bytes : 1)};
    if (cpu_dnnl_check(dnnl_memory_desc_init_by_tag(&md, 1, dims, dnnl_u8, dnnl_a), "cpu",
                       "md (scratchpad)", err))
        return -1;
    return cpu_dnnl_check(dnnl_memory_create(memory, &md, state->engine, *buffer), "cpu",
                          "memory_create (scratchpad)", err);
}

// Valid plans and pointers cannot make these calls fail (shapes were checked
// by the plan; the scratchpad is user-provided), so their status is not kept.
void cpu_dnnl_execute(Backend *backend, dnnl_primitive_t primitive, int count,
                      const dnnl_exec_arg_t *args) {
    CpuState *state = backend->impl;
    (void)dnnl_primitive_execute(primitive, state->stream, count, args);
}
