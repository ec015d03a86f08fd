// Parameter tables and their arenas (see parameters.h).
#include "nn/parameters.h"

#include <stdlib.h>
#include <string.h>

#define PARAM_ALIGN_FLOATS 16  // 64 bytes: every tensor starts on a cache line

void parameter_set_init(ParameterSet *set, Backend *backend, int with_grads) {
    memset(set, 0, sizeof *set);
    set->backend = backend;
    set->with_grads = with_grads;
}

int parameter_declare(ParameterSet *set, const char *name, ParamKind kind, int rank,
                      const int *shape, const int *torch_shape, ErrorMessage *err) {
    if (set->values) return error_set(err, "parameter '%s' declared after allocation", name);
    if (strlen(name) >= PARAM_MAX_NAME) return error_set(err, "parameter name '%s' too long", name);
    if (rank < 0 || rank > PARAM_MAX_RANK)
        return error_set(err, "parameter '%s': rank %d outside 0..%d", name, rank, PARAM_MAX_RANK);
    if (parameter_find(set, name)) return error_set(err, "parameter '%s' declared twice", name);
    if (set->count == set->capacity) {
        const int capacity = set->capacity ? set->capacity * 2 : 64;
        Parameter *grown = realloc(set->params, (size_t)capacity * sizeof *grown);
        if (!grown) return error_set(err, "out of memory for parameter '%s'", name);
        set->params = grown;
        set->capacity = capacity;
    }
    Parameter *param = &set->params[set->count];
    memset(param, 0, sizeof *param);
    strcpy(param->name, name);
    param->kind = kind;
    param->rank = rank;
    param->count = 1;
    for (int d = 0; d < rank; d++) {
        if (shape[d] < 1)
            return error_set(err, "parameter '%s': dimension %d is %d", name, d, shape[d]);
        param->shape[d] = shape[d];
        param->torch_shape[d] = torch_shape ? torch_shape[d] : shape[d];
        param->count *= (size_t)shape[d];
    }
    param->offset = set->total;
    set->total += (param->count + PARAM_ALIGN_FLOATS - 1) / PARAM_ALIGN_FLOATS * PARAM_ALIGN_FLOATS;
    return set->count++;
}

int parameter_set_allocate(ParameterSet *set, ErrorMessage *err) {
    Backend *backend = set->backend;
    const size_t bytes = (set->total ? set->total : 1) * sizeof(float);
    set->values = backend->op.alloc(backend, bytes);
    if (set->with_grads) set->grads = backend->op.alloc(backend, bytes);
    if (!set->values || (set->with_grads && !set->grads))
        return error_set(err, "out of memory for %zu MB of parameters", bytes >> 20);
    backend->op.fill(backend, set->values, 0.0f, set->total);
    // fp32 activations read the values themselves; a 16-bit compute dtype
    // gets its own copy (filled by parameter_set_refresh_compute)
    set->compute = (Act *)set->values;
    if (backend->compute_dtype != COMPUTE_F32) {
        set->compute = backend->op.alloc(backend, act_bytes(backend, set->total ? set->total : 1));
        if (!set->compute)
            return error_set(err, "out of memory for %zu MB of compute weights", bytes >> 20);
        parameter_set_refresh_compute(set);
    }
    if (set->grads) backend->op.fill(backend, set->grads, 0.0f, set->total);
    for (int i = 0; i < set->count; i++) {
        Parameter *param = &set->params[i];
        param->value = set->values + param->offset;
        param->compute = act_at_const(backend, set->compute, param->offset);
        param->grad = set->grads ? set->grads + param->offset : NULL;
    }
    return 0;
}

void parameter_set_free(ParameterSet *set) {
    if (set->backend) {
        if (set->values) set->backend->op.free(set->backend, set->values);
        if (set->grads) set->backend->op.free(set->backend, set->grads);
        if (set->compute && set->compute != (Act *)set->values)
            set->backend->op.free(set->backend, set->compute);
    }
    free(set->params);
    Backend *backend = set->backend;
    const int with_grads = set->with_grads;
    parameter_set_init(set, backend, with_grads);
}

void parameter_set_refresh_compute(ParameterSet *set) {
    if (set->compute && set->compute != (Act *)set->values)
        set->backend->op.float_to_act(set->backend, set->total, set->values, set->compute);
}

void parameter_set_zero_grads(ParameterSet *set) {
    if (set->grads) set->backend->op.fill(set->backend, set->grads, 0.0f, set->total);
}

const Parameter *parameter_find(const ParameterSet *set, const char *name) {
    for (int i = 0; i < set->count; i++)
        if (strcmp(set->params[i].name, name) == 0) return &set->params[i];
    return NULL;
}

size_t parameter_set_elements(const ParameterSet *set) {
    size_t total = 0;
    for (int i = 0; i < set->count; i++) total += set->params[i].count;
    return total;
}
