// SGD, LARS and AdamW over a ParameterSet (see optimizer.h). The
// per-element arithmetic lives in the backend ops (sgd_update,
// adamw_update, lars_direction, sum_squares); this file decides which
// parameter gets which weight decay and, for LARS, feeds the per-parameter
// trust ratio. Nothing in a step reads backend memory back: the count of
// applied steps (AdamW's bias correction) is a float on the device that the
// gate's GATE_APPLIED advances.
#include "nn/optimizer.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#define OPTIMIZER_REDUCTION_SLOTS 16  // floats for reduction results (one cache line)
#define OPTIMIZER_ALIGN_FLOATS 16

struct Optimizer {
    Backend *backend;
    ParameterSet *params;
    OptimizerConfig config;
    long steps;           // optimizer_step calls (SGD's and LARS's first-step rule)
    float *arena;         // backend memory: state, then workspace
    size_t arena_floats;
    size_t state_floats;  // momentum (SGD, LARS) or m then v (AdamW): slabs of params->total
    float *scratch;       // LARS: (largest parameter) update direction; NULL otherwise
    float *reductions;    // (OPTIMIZER_REDUCTION_SLOTS) sum_squares results, an open gate,
                          // the count of applied steps
    // host, (params->count): the per-parameter options (optimizer.h)
    float *lr_scales;         // lr multiplier, 1 unless set
    unsigned char *decays;    // weight decay applies: the kind rule unless set
    // SGD and AdamW: the trained parameters as segments of the arena (in
    // the optimizer's arena, uploaded whenever an option changes) for the
    // backend's multi-tensor update, one launch a step; NULL: per tensor
    // (LARS, whose ratio is per tensor; a backend without the op; more
    // segments than one launch takes)
    UpdateSegment *segments;
    int segment_count;
};

// The most segments one multi-tensor launch takes (the CUDA grid's y).
enum { MAX_UPDATE_SEGMENTS = 65535 };

// The slots of the reductions area: LARS's two sums, an open step gate
// (multiplier 1, no skip) for steps that come without one, and the applied
// steps (updates a gate did not skip: AdamW's t).
enum { REDUCTION_LARS_SUMS = 0, REDUCTION_OPEN_GATE = 4, REDUCTION_APPLIED_STEPS = 12 };
_Static_assert(REDUCTION_OPEN_GATE + GATE_FOUND <= REDUCTION_APPLIED_STEPS &&
                   REDUCTION_APPLIED_STEPS < OPTIMIZER_REDUCTION_SLOTS,
               "the reductions area holds the open gate and the step count");

OptimizerConfig optimizer_config_default(OptimizerKind kind) {
    OptimizerConfig config = {.kind = kind};
    switch (kind) {
    case OPTIMIZER_SGD:
        config.momentum = 0.9f;
        break;
    case OPTIMIZER_LARS:
        config.momentum = 0.9f;
        config.eps = 1e-8f;
        config.trust_coefficient = 0.001f;
        break;
    case OPTIMIZER_ADAMW:
        config.beta1 = 0.9;
        config.beta2 = 0.999;
        config.eps = 1e-8f;
        break;
    }
    return config;
}

static const char *const optimizer_names[] = {
    [OPTIMIZER_SGD] = "sgd", [OPTIMIZER_LARS] = "lars", [OPTIMIZER_ADAMW] = "adamw"};

int optimizer_kind_parse(const char *name, OptimizerKind *kind, ErrorMessage *err) {
    for (int k = 0; k < (int)(sizeof optimizer_names / sizeof optimizer_names[0]); k++) {
        if (strcmp(name, optimizer_names[k]) == 0) {
            *kind = (OptimizerKind)k;
            return 0;
        }
    }
    return error_set(err, "unknown optimizer '%s' (available: sgd, lars, adamw)", name);
}

const char *optimizer_kind_name(OptimizerKind kind) {
    if ((int)kind < 0 || (int)kind >= (int)(sizeof optimizer_names / sizeof optimizer_names[0]))
        return "unknown";
    return optimizer_names[kind];
}

static int config_check(const OptimizerConfig *config, ErrorMessage *err) {
    switch (config->kind) {
    case OPTIMIZER_SGD:
    case OPTIMIZER_LARS:
        if (!(config->momentum >= 0.0f && config->momentum < 1.0f))
            return error_set(err, "%s: momentum %g outside [0, 1)",
                             optimizer_kind_name(config->kind), (double)config->momentum);
        if (config->nesterov && config->momentum == 0.0f)
            return error_set(err, "%s: nesterov needs momentum > 0",
                             optimizer_kind_name(config->kind));
        if (config->kind == OPTIMIZER_LARS &&
            !(config->trust_coefficient > 0.0f && config->eps >= 0.0f))
            return error_set(err, "lars: trust coefficient %g must be > 0 and eps %g >= 0",
                             (double)config->trust_coefficient, (double)config->eps);
        return 0;
    case OPTIMIZER_ADAMW:
        if (!(config->beta1 >= 0.0 && config->beta1 < 1.0 && config->beta2 >= 0.0 &&
              config->beta2 < 1.0))
            return error_set(err, "adamw: betas (%g, %g) outside [0, 1)", config->beta1,
                             config->beta2);
        if (!(config->eps > 0.0f))
            return error_set(err, "adamw: eps %g must be > 0", (double)config->eps);
        return 0;
    }
    return error_set(err, "optimizer: unknown kind %d", (int)config->kind);
}

static size_t align_floats(size_t n) {
    return (n + OPTIMIZER_ALIGN_FLOATS - 1) / OPTIMIZER_ALIGN_FLOATS * OPTIMIZER_ALIGN_FLOATS;
}

static void upload_segments(Optimizer *opt);

Optimizer *optimizer_create(Backend *backend, ParameterSet *params, const OptimizerConfig *config,
                            ErrorMessage *err) {
    if (config_check(config, err)) return NULL;
    if (!params->with_grads || !params->grads || !params->values) {
        error_set(err, "%s: the parameter set has no allocated gradients",
                  optimizer_kind_name(config->kind));
        return NULL;
    }
    Optimizer *opt = calloc(1, sizeof *opt);
    if (!opt) {
        error_set(err, "%s: out of memory", optimizer_kind_name(config->kind));
        return NULL;
    }
    opt->backend = backend;
    opt->params = params;
    opt->config = *config;
    const size_t count = params->count > 0 ? (size_t)params->count : 1;
    opt->lr_scales = malloc(count * sizeof *opt->lr_scales);
    opt->decays = malloc(count * sizeof *opt->decays);
    if (!opt->lr_scales || !opt->decays) {
        error_set(err, "%s: out of memory", optimizer_kind_name(config->kind));
        optimizer_free(opt);
        return NULL;
    }
    for (int i = 0; i < params->count; i++) {
        opt->lr_scales[i] = 1.0f;
        opt->decays[i] = params->params[i].kind == PARAM_WEIGHT;  // only weights decay
    }
    const size_t slabs = config->kind == OPTIMIZER_ADAMW ? 2 : 1;
    opt->state_floats = slabs * params->total;
    size_t scratch_floats = 0;
    if (config->kind == OPTIMIZER_LARS) {
        for (int i = 0; i < params->count; i++)
            if (params->params[i].count > scratch_floats) scratch_floats = params->params[i].count;
        scratch_floats = align_floats(scratch_floats);
    }
    // SGD and AdamW: the multi-tensor update's segment table after the
    // reductions (UpdateSegment is 8-byte aligned there: every part above is
    // a multiple of 16 floats)
    const int multi = config->kind == OPTIMIZER_SGD ? backend->op.sgd_update_segments != NULL
                      : config->kind == OPTIMIZER_ADAMW ? backend->op.adamw_update_segments != NULL
                                                        : 0;
    const size_t segment_floats =
        multi && params->count <= MAX_UPDATE_SEGMENTS
            ? align_floats((count * sizeof(UpdateSegment) + sizeof(float) - 1) / sizeof(float))
            : 0;
    opt->arena_floats =
        opt->state_floats + scratch_floats + OPTIMIZER_REDUCTION_SLOTS + segment_floats;
    opt->arena = backend->op.alloc(backend, opt->arena_floats * sizeof(float));
    if (!opt->arena) {
        error_set(err, "%s: out of memory for %zu MB of optimizer state",
                  optimizer_kind_name(config->kind), (opt->arena_floats * sizeof(float)) >> 20);
        optimizer_free(opt);
        return NULL;
    }
    backend->op.fill(backend, opt->arena, 0.0f, opt->arena_floats);
    opt->scratch = scratch_floats ? opt->arena + opt->state_floats : NULL;
    opt->reductions = opt->arena + opt->state_floats + scratch_floats;
    const float open_gate[GATE_FOUND] = {
        [GATE_MULTIPLIER] = 1.0f, [GATE_UNIT] = 1.0f, [GATE_APPLIED] = 1.0f};
    backend->op.upload(backend, opt->reductions + REDUCTION_OPEN_GATE, open_gate,
                       sizeof open_gate);
    if (segment_floats) {
        opt->segments = (UpdateSegment *)(opt->reductions + OPTIMIZER_REDUCTION_SLOTS);
        upload_segments(opt);
    }
    return opt;
}

void optimizer_free(Optimizer *opt) {
    if (!opt) return;
    if (opt->arena) opt->backend->op.free(opt->backend, opt->arena);
    free(opt->lr_scales);
    free(opt->decays);
    free(opt);
}

// Weight decay of parameter i: the kind rule (only weights) or its option.
static float decay_for(const Optimizer *opt, int i, float weight_decay) {
    return opt->decays[i] ? weight_decay : 0.0f;
}

static int is_trained(const Parameter *param) {
    return param->kind != PARAM_BUFFER && param->grad != NULL && param->count > 0;
}

// The trained parameters as segments with their options, uploaded: at
// creation and when an option changes (configuration, outside the step
// loop). Without host memory for the table the updates stay per tensor.
static void upload_segments(Optimizer *opt) {
    if (!opt->segments) return;
    const ParameterSet *set = opt->params;
    UpdateSegment *host = malloc((set->count > 0 ? (size_t)set->count : 1) * sizeof *host);
    if (!host) {  // per tensor from now on
        opt->segments = NULL;
        return;
    }
    int count = 0;
    for (int i = 0; i < set->count; i++)
        if (is_trained(&set->params[i]))
            host[count++] = (UpdateSegment){.offset = set->params[i].offset,
                                            .count = set->params[i].count,
                                            .lr_scale = opt->lr_scales[i],
                                            .decays = opt->decays[i]};
    if (count) opt->backend->op.upload(opt->backend, opt->segments, host, count * sizeof *host);
    opt->segment_count = count;
    free(host);
}

// LARS (lightly's formulation): for a weight with norms p = ||param|| > 0 and
// g = ||grad|| > 0 the direction is d = (grad + wd * param) * trust * p /
// (g + wd * p + eps); otherwise (BN parameters, biases, zero norms) d = grad.
// Then SGD momentum on d without further decay. One difference from lightly,
// which adapts exactly the groups whose weight decay is non-zero: here weights
// are adapted by kind, so a step whose scheduled decay is 0 still adapts them.
// The norms stay in backend memory (lars_direction reads them there): no
// read back, so a GPU step does not wait for the host per weight.
static void lars_update_parameter(Optimizer *opt, Parameter *param, const float *gate,
                                  float *momentum_buffer, float lr, float weight_decay,
                                  int first_step) {
    Backend *backend = opt->backend;
    const OptimizerConfig *config = &opt->config;
    const float *direction = param->grad;
    const float *direction_gate = gate;
    if (param->kind == PARAM_WEIGHT) {
        float *sums = opt->reductions + REDUCTION_LARS_SUMS;  // sum param^2, sum grad^2
        backend->op.sum_squares(backend, param->count, param->value, sums);
        backend->op.sum_squares(backend, param->count, param->grad, sums + 1);
        backend->op.lars_direction(backend, param->count, param->value, param->grad, gate, sums,
                                   weight_decay, config->trust_coefficient, config->eps,
                                   opt->scratch);
        direction = opt->scratch;  // already multiplied: the SGD step takes the unit gate
        direction_gate = gate + GATE_UNIT;
    }
    backend->op.sgd_update(backend, param->count, param->value, direction, direction_gate,
                           momentum_buffer, lr, config->momentum, 0.0f, config->nesterov,
                           first_step);
}

void optimizer_step(Optimizer *opt, float lr, float weight_decay, const float *gate) {
    Backend *backend = opt->backend;
    if (!gate) gate = opt->reductions + REDUCTION_OPEN_GATE;
    const OptimizerConfig *config = &opt->config;
    ParameterSet *set = opt->params;
    // SGD's first step takes the gradient as its momentum buffer (PyTorch);
    // with the buffers still zero, as after a skipped first step, the
    // general rule gives the same, so the host's count of calls serves.
    const int first_step = opt->steps == 0;
    float *applied_steps = opt->reductions + REDUCTION_APPLIED_STEPS;
    backend->op.scalar_combine(backend, 1.0f, applied_steps, 1.0f, gate + GATE_APPLIED, 1.0f,
                               applied_steps);
    if (opt->segments) {  // every trained tensor in one pass: the same arithmetic
        if (config->kind == OPTIMIZER_SGD)
            backend->op.sgd_update_segments(backend, opt->segment_count, opt->segments,
                                            set->values, set->grads, gate, opt->arena, lr,
                                            config->momentum, weight_decay, config->nesterov,
                                            first_step);
        else
            backend->op.adamw_update_segments(backend, opt->segment_count, opt->segments,
                                              set->values, set->grads, gate, opt->arena,
                                              opt->arena + set->total, lr, config->beta1,
                                              config->beta2, config->eps, weight_decay,
                                              applied_steps);
        opt->steps++;
        return;
    }
    for (int i = 0; i < set->count; i++) {
        Parameter *param = &set->params[i];
        if (!is_trained(param)) continue;
        float *slab0 = opt->arena + param->offset;  // momentum buffer or Adam m
        const float param_lr = lr * opt->lr_scales[i];
        switch (config->kind) {
        case OPTIMIZER_SGD:
            backend->op.sgd_update(backend, param->count, param->value, param->grad, gate, slab0,
                                   param_lr, config->momentum, decay_for(opt, i, weight_decay),
                                   config->nesterov, first_step);
            break;
        case OPTIMIZER_LARS:
            lars_update_parameter(opt, param, gate, slab0, param_lr,
                                  decay_for(opt, i, weight_decay), first_step);
            break;
        case OPTIMIZER_ADAMW: {
            float *second_moment = opt->arena + set->total + param->offset;
            backend->op.adamw_update(backend, param->count, param->value, param->grad, gate,
                                     slab0, second_moment, param_lr, config->beta1, config->beta2, config->eps,
                                     decay_for(opt, i, weight_decay), applied_steps);
            break;
        }
        }
    }
    opt->steps++;
}

float *optimizer_state(Optimizer *opt, size_t *floats) {
    if (floats) *floats = opt->state_floats;
    return opt->arena;
}

size_t optimizer_memory_bytes(const Optimizer *opt) {
    return opt->arena_floats * sizeof(float);
}

long optimizer_step_count(const Optimizer *opt) {
    float applied = 0;
    opt->backend->op.download(opt->backend, &applied, opt->reductions + REDUCTION_APPLIED_STEPS,
                              sizeof applied);
    return (long)applied;
}

void optimizer_set_step_count(Optimizer *opt, long steps) {
    opt->steps = steps < 0 ? 0 : steps;
    const float applied = (float)opt->steps;
    opt->backend->op.upload(opt->backend, opt->reductions + REDUCTION_APPLIED_STEPS, &applied,
                            sizeof applied);
}

static int check_index(const Optimizer *opt, int index, ErrorMessage *err) {
    if (index < 0 || index >= opt->params->count)
        return error_set(err, "%s: parameter index %d outside 0..%d",
                         optimizer_kind_name(opt->config.kind), index, opt->params->count - 1);
    return 0;
}

int optimizer_set_lr_scale(Optimizer *opt, int index, float scale, ErrorMessage *err) {
    if (check_index(opt, index, err)) return -1;
    if (!(scale >= 0.0f && isfinite(scale)))
        return error_set(err, "%s: lr scale %g of '%s' must be finite and >= 0",
                         optimizer_kind_name(opt->config.kind), (double)scale,
                         opt->params->params[index].name);
    opt->lr_scales[index] = scale;
    upload_segments(opt);
    return 0;
}

int optimizer_set_weight_decay(Optimizer *opt, int index, int decays, ErrorMessage *err) {
    if (check_index(opt, index, err)) return -1;
    opt->decays[index] = decays != 0;
    upload_segments(opt);
    return 0;
}

float optimizer_lr_scale(const Optimizer *opt, int index) {
    return index >= 0 && index < opt->params->count ? opt->lr_scales[index] : 1.0f;
}

int optimizer_weight_decays(const Optimizer *opt, int index) {
    return index >= 0 && index < opt->params->count && opt->decays[index];
}
