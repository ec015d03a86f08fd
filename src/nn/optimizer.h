// Optimizers over a ParameterSet: SGD (momentum, nesterov), LARS and AdamW,
// with PyTorch / lightly semantics. Gradient clipping by global norm, the
// 1/k of accumulation and the skip of a non-finite step come from a step
// gate in backend memory (nn/step_gate.h) that the updates read on the
// device, so a step never waits for the host.
//
// Parameter groups follow the parameter kind: weight decay (and LARS trust
// ratio adaptation) apply to PARAM_WEIGHT only; BatchNorm parameters
// (PARAM_NORM) and biases (PARAM_BIAS) get neither, as SSL implementations
// configure it. Buffers are never touched. Per-parameter options set after
// create refine this: an lr multiplier (layer-wise lr decay) and weight
// decay on or off in place of the kind rule (see optimizer_set_lr_scale).
//
// Memory: all optimizer state (momentum buffers, Adam m and v) plus a small
// workspace (LARS update scratch, reduction results) is one arena of backend
// memory allocated by optimizer_create; optimizer_step allocates nothing.
// The state tensors use the parameter arena's layout: the state of parameter
// P starts at P.offset within each state slab (slab = ParameterSet.total
// floats), so checkpoints can map it by name.
//
// Gradient accumulation over k micro-batches: parameter gradients accumulate
// (+=) across backward calls (backend.h); the gate's multiplier holds 1/k
// (times the clipping coefficient). That equals dividing each micro-batch
// loss by k (Lightning's accumulate_grad_batches) up to rounding (exactly
// for k a power of two).
#ifndef LTC_NN_OPTIMIZER_H
#define LTC_NN_OPTIMIZER_H

#include <stddef.h>

#include "backend/backend.h"
#include "nn/parameters.h"
#include "util/error.h"

typedef enum OptimizerKind {
    OPTIMIZER_SGD,
    OPTIMIZER_LARS,
    OPTIMIZER_ADAMW,
} OptimizerKind;

typedef struct OptimizerConfig {
    OptimizerKind kind;
    float momentum;           // SGD, LARS (0.9)
    int nesterov;             // SGD, LARS
    double beta1, beta2;      // AdamW (0.9, 0.999: Python floats, as PyTorch's)
    float eps;                // AdamW denominator (1e-8); LARS trust ratio denominator (1e-8)
    float trust_coefficient;  // LARS (0.001)
} OptimizerConfig;

// The defaults above for each kind.
OptimizerConfig optimizer_config_default(OptimizerKind kind);
// "sgd", "lars", "adamw"; -1 with a message for anything else.
int optimizer_kind_parse(const char *name, OptimizerKind *kind, ErrorMessage *err);
const char *optimizer_kind_name(OptimizerKind kind);

typedef struct Optimizer Optimizer;

// The ParameterSet must be allocated (with gradients) and outlive the
// optimizer. State starts at zero, step count 0.
Optimizer *optimizer_create(Backend *backend, ParameterSet *params, const OptimizerConfig *config,
                            ErrorMessage *err);
void optimizer_free(Optimizer *opt);

// One update of every parameter from gate[GATE_MULTIPLIER] x its gradient
// with this step's learning rate and weight decay (from the schedules).
// gate (backend.h GATE_*, backend memory) or NULL for the plain update; a
// gate that says skip leaves parameters and state as they were and does not
// count: the count of applied steps (AdamW's bias correction, checkpoints)
// is a float on the device advanced by the gate's GATE_APPLIED, as
// PyTorch's optimizer step is not called for a step GradScaler skips.
// Gradients are read, not changed (zero them before the next backward).
void optimizer_step(Optimizer *opt, float lr, float weight_decay, const float *gate);

// ---- per-parameter options ---------------------------------------------------
// Configuration, not state: set once after optimizer_create, before the
// first step, and again when a run resumes (checkpoints do not hold them).
// index is the parameter's place in the ParameterSet.
//
// Parameter index steps with lr x scale (default 1): PyTorch parameter
// groups whose lr differ by a constant factor (LightlyTrain DINOv2's
// layer-wise decay and patch-embedding multiplier), as the step's lr is
// the scheduled lr times the factor there too. The product is the lr the
// backend update receives, so every backend applies it alike. scale 0
// keeps the parameter as it is while SGD's momentum and AdamW's moments
// still follow its gradient and weight decay multiplies it by 1 - 0 x wd
// (a PyTorch group with lr 0). -1 with a message for an index outside the
// set or a scale that is negative or not finite.
int optimizer_set_lr_scale(Optimizer *opt, int index, float scale, ErrorMessage *err);
// Weight decay on (1) or off (0) for parameter index, in place of the
// kind rule (LightlyTrain DINOv2 decays the tokens and positions that the
// kind rule exempts). LARS's trust-ratio adaptation still follows the
// kind. -1 with a message for an index outside the set.
int optimizer_set_weight_decay(Optimizer *opt, int index, int decays, ErrorMessage *err);
// The options in force for parameter index (1 and the kind rule unless set).
float optimizer_lr_scale(const Optimizer *opt, int index);
int optimizer_weight_decays(const Optimizer *opt, int index);

// ---- checkpoint hooks ------------------------------------------------------
// The state tensors (backend memory) and their size in floats: SGD and LARS
// one slab (momentum buffers), AdamW two (m, then v). The workspace after
// them is not part of it.
float *optimizer_state(Optimizer *opt, size_t *floats);
// Bytes of backend memory the optimizer holds (state and workspace).
size_t optimizer_memory_bytes(const Optimizer *opt);
// Applied (not skipped) steps, read back from the device (a
// synchronisation: for checkpoints); set it when restoring a checkpoint
// together with the state. Exact up to 2^24 steps (a float).
long optimizer_step_count(const Optimizer *opt);
void optimizer_set_step_count(Optimizer *opt, long steps);

#endif
