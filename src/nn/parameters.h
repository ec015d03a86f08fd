// Parameter tables: every trainable tensor of a model (and, in a separate
// table without gradients, its buffers such as BatchNorm running statistics),
// by torchvision name, in two arenas of backend memory allocated once:
// values and gradients. Optimizers walk the table; weight I/O maps names.
//
// Shapes are in our layout (conv weights (Cout, K, K, Cin)); torch_shape is
// the layout of the same tensor in a torchvision state_dict (OIHW).
#ifndef LTC_NN_PARAMETERS_H
#define LTC_NN_PARAMETERS_H

#include <stddef.h>

#include "backend/backend.h"
#include "util/error.h"

#define PARAM_MAX_NAME 96
#define PARAM_MAX_RANK 4

typedef enum ParamKind {
    PARAM_WEIGHT,     // conv / linear weights: weight decay and LARS adaptation apply
    PARAM_BIAS,       // linear biases: no weight decay, no LARS adaptation
    PARAM_NORM,       // BatchNorm / LayerNorm weight and bias: no weight decay, no LARS adaptation
    PARAM_BUFFER,     // running statistics: not trained
    PARAM_EMBEDDING,  // ViT class / register tokens, position embeddings, LayerScale gammas:
                      // no weight decay, no LARS adaptation (timm's no_weight_decay, DINOv2)
} ParamKind;

typedef struct Parameter {
    char name[PARAM_MAX_NAME];  // torchvision name, e.g. "layer1.0.conv1.weight"
    ParamKind kind;
    int rank;
    int shape[PARAM_MAX_RANK];        // our layout
    int torch_shape[PARAM_MAX_RANK];  // torchvision's layout (same rank)
    size_t count;                     // elements
    size_t offset;                    // into the arenas, in floats
    float *value;                     // backend memory, (count)
    const Act *compute;               // the value in the compute dtype (see ParameterSet)
    float *grad;                      // backend memory, (count); NULL for buffers
} Parameter;

// Backward progress, for overlapping the gradient average with backward
// (train/gradient_sync.h). Parameters lie in the arena in forward order and
// backward completes them in reverse, so a model's backward reports after
// each block: "every gradient of this set from `offset` (floats into the
// arena) to its end is final" (parameter_set_grads_final). A method whose
// step runs several backward passes over one set (DINO's global and local
// crops) holds the reports of every pass but the last
// (parameter_set_hold_progress): a gradient is final only after the last
// pass that adds to it.
typedef struct ParameterSet ParameterSet;
typedef struct ParameterProgress {
    void (*report)(void *listener, const ParameterSet *set, size_t offset);
    void *listener;
} ParameterProgress;

struct ParameterSet {
    Backend *backend;
    int with_grads;  // 0 for buffer tables
    int count;
    int capacity;
    Parameter *params;
    size_t total;    // floats in each arena
    float *values;   // (total) one allocation
    float *grads;    // (total) one allocation, or NULL
    // The values in the backend's compute dtype, what conv and linear ops
    // read (autocast's weight copy). With fp32 activations it is the values
    // themselves; otherwise a copy, refreshed by parameter_set_refresh_compute.
    Act *compute;
    const ParameterProgress *progress;  // who listens to backward progress, or NULL
    int progress_held;                  // 1: reports dropped (a pass that is not the last)
    // Bumped by parameter_set_written: writes from outside the model's own
    // ops (weights and checkpoint loads, copies between models), which a
    // model that keeps a host copy of a buffer (a ViT's RoPE periods)
    // re-reads then, instead of reading the buffer back at every forward.
    unsigned long writes;
};

void parameter_set_init(ParameterSet *set, Backend *backend, int with_grads);
// Marks set's values as written from outside the model (see writes).
static inline void parameter_set_written(ParameterSet *set) { set->writes++; }
// Declares a parameter before allocation; returns its index or -1. When
// torch_shape is NULL it equals shape.
int parameter_declare(ParameterSet *set, const char *name, ParamKind kind, int rank,
                      const int *shape, const int *torch_shape, ErrorMessage *err);
// Allocates the arenas (each tensor 16-float aligned) and wires the pointers.
int parameter_set_allocate(ParameterSet *set, ErrorMessage *err);
void parameter_set_free(ParameterSet *set);
void parameter_set_zero_grads(ParameterSet *set);
// compute = the values in the compute dtype (nothing to do when they are
// the same memory). The models call it at the start of every forward, so a
// forward reads the weights as they are then (after an optimizer step, an
// EMA update, a load), as autocast casts them on use.
void parameter_set_refresh_compute(ParameterSet *set);
const Parameter *parameter_find(const ParameterSet *set, const char *name);
// Sum of the element counts of all parameters.
size_t parameter_set_elements(const ParameterSet *set);

// Backward progress (see ParameterProgress): the gradients of set from
// offset, or from the parameter `index`, to the end are final.
static inline void parameter_set_grads_final(const ParameterSet *set, size_t offset) {
    if (set->progress && !set->progress_held)
        set->progress->report(set->progress->listener, set, offset);
}
static inline void parameter_grads_final_from(const ParameterSet *set, int index) {
    parameter_set_grads_final(set, set->params[index].offset);
}
// held 1: the following backward passes over set are not its last.
static inline void parameter_set_hold_progress(ParameterSet *set, int held) {
    set->progress_held = held;
}

#endif
