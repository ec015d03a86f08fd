// Projection and prediction heads (see heads.h): the lightly head specs,
// declaration and initialisation of their parameters, and forward/backward
// through Linear / BatchNorm / activation blocks and DINO's normalised,
// weight-normalised last layer, on the backend ops.
#include "ssl_methods/heads.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/activations.h"
#include "nn/batchnorm_sync.h"
#include "util/rng.h"

#define HEAD_BN_EPS 1e-5f        // BatchNorm1d defaults
#define HEAD_BN_MOMENTUM 0.1f
#define HEAD_LN_EPS 1e-5f          // nn.LayerNorm's default
#define HEAD_NORMALIZE_EPS 1e-12f  // F.normalize's default eps
#define HEAD_TRUNC_STD 0.02f       // DINOProjectionHead._init_weights: std 0.02,
#define HEAD_TRUNC_BOUND 2.0f      // bounds a = -2, b = 2 (absolute values)
#define HEAD_TRUNC_STREAM 0x54524E43u  // "TRNC": apart from layers.c's init stream
#define HEAD_WEIGHT_G 1            // last_layer.weight_g's index in last_layer (after weight_v)

// ---- specs ---------------------------------------------------------------------------

static HeadLayerSpec block(int in, int out, int batch_norm, HeadActivation activation) {
    // lightly's ProjectionHead: use_bias = not batch_norm
    return (HeadLayerSpec){.in_features = in, .out_features = out, .bias = !batch_norm,
                           .batch_norm = batch_norm, .activation = activation};
}

HeadSpec head_spec_simclr(int in, int hidden, int out) {
    return (HeadSpec){.layer_count = 2,
                      .layers = {block(in, hidden, 1, HEAD_ACT_RELU),
                                 block(hidden, out, 1, HEAD_ACT_NONE)}};
}

// BYOL's projection and prediction heads have the same structure.
static HeadSpec two_block_head(int in, int hidden, int out) {
    return (HeadSpec){.layer_count = 2,
                      .layers = {block(in, hidden, 1, HEAD_ACT_RELU),
                                 block(hidden, out, 0, HEAD_ACT_NONE)}};
}

HeadSpec head_spec_byol_projection(int in, int hidden, int out) {
    return two_block_head(in, hidden, out);
}

HeadSpec head_spec_byol_prediction(int in, int hidden, int out) {
    return two_block_head(in, hidden, out);
}

// VICReg (num_layers=3) and Barlow Twins have the same structure.
static HeadSpec three_block_head(int in, int hidden, int out) {
    return (HeadSpec){.layer_count = 3,
                      .layers = {block(in, hidden, 1, HEAD_ACT_RELU),
                                 block(hidden, hidden, 1, HEAD_ACT_RELU),
                                 block(hidden, out, 0, HEAD_ACT_NONE)}};
}

HeadSpec head_spec_vicreg(int in, int hidden, int out) { return three_block_head(in, hidden, out); }

HeadSpec head_spec_barlow_twins(int in, int hidden, int out) {
    return three_block_head(in, hidden, out);
}

HeadSpec head_spec_dino(int in, int hidden, int bottleneck, int out) {
    return (HeadSpec){.layer_count = 3,
                      .layers = {block(in, hidden, 0, HEAD_ACT_GELU),
                                 block(hidden, hidden, 0, HEAD_ACT_GELU),
                                 block(hidden, bottleneck, 0, HEAD_ACT_NONE)},
                      .weight_norm_out = out,
                      .init = HEAD_INIT_TRUNC_NORMAL};
}

HeadSpec head_spec_paka(int in, int hidden, int bottleneck) {
    HeadSpec spec = head_spec_dino(in, hidden, bottleneck, 0);
    spec.init = HEAD_INIT_DEFAULT;
    return spec;
}

HeadSpec head_spec_linear(int in, int out) {
    return (HeadSpec){.layer_count = 1, .layers = {block(in, out, 0, HEAD_ACT_NONE)}};
}

HeadSpec head_spec_distillation(int in, int out) {
    return (HeadSpec){.layer_count = 1,
                      .layers = {{.in_features = in, .out_features = out, .bias = 1}},
                      .init = HEAD_INIT_TRUNC_NORMAL_WEIGHTS};
}

HeadSpec head_spec_distillation_v2(int in, int hidden, int out, int layers) {
    HeadSpec spec = {.layer_count = layers, .init = HEAD_INIT_TRUNC_NORMAL};
    for (int i = 0; i < layers && i < HEAD_MAX_LAYERS; i++) {
        const int last = i == layers - 1;
        spec.layers[i] = (HeadLayerSpec){.in_features = i == 0 ? in : hidden,
                                         .out_features = last ? out : hidden, .bias = 1,
                                         .layer_norm = !last,
                                         .activation = last ? HEAD_ACT_NONE : HEAD_ACT_GELU};
    }
    return spec;
}

int head_spec_output_dim(const HeadSpec *spec) {
    if (spec->weight_norm_out > 0) return spec->weight_norm_out;
    return spec->layers[spec->layer_count - 1].out_features;
}

static int spec_check(const HeadSpec *spec, const char *name, ErrorMessage *err) {
    if (spec->layer_count < 1 || spec->layer_count > HEAD_MAX_LAYERS)
        return error_set(err, "head '%s': %d layers, expected 1..%d", name, spec->layer_count,
                         HEAD_MAX_LAYERS);
    for (int i = 0; i < spec->layer_count; i++) {
        const HeadLayerSpec *layer = &spec->layers[i];
        if (layer->in_features < 1 || layer->out_features < 1)
            return error_set(err, "head '%s': layer %d is %d -> %d features, both must be >= 1",
                             name, i, layer->in_features, layer->out_features);
        if (i > 0 && layer->in_features != spec->layers[i - 1].out_features)
            return error_set(err, "head '%s': layer %d takes %d features but layer %d gives %d",
                             name, i, layer->in_features, i - 1,
                             spec->layers[i - 1].out_features);
        if (layer->activation != HEAD_ACT_NONE && layer->activation != HEAD_ACT_RELU &&
            layer->activation != HEAD_ACT_GELU)
            return error_set(err, "head '%s': layer %d has unknown activation %d", name, i,
                             (int)layer->activation);
        if (layer->layer_norm && (layer->batch_norm || layer->activation == HEAD_ACT_RELU))
            return error_set(err, "head '%s': layer %d: a LayerNorm takes no BatchNorm and no "
                                  "ReLU", name, i);
    }
    if (spec->weight_norm_out < 0)
        return error_set(err, "head '%s': weight_norm_out %d is negative", name,
                         spec->weight_norm_out);
    if (spec->weight_g_trained && spec->weight_norm_out == 0)
        return error_set(err, "head '%s': a trained weight_g needs a weight-normalised last "
                              "layer (weight_norm_out > 0)", name);
    return 0;
}

static int spec_has_batch_norm(const HeadSpec *spec) {
    for (int i = 0; i < spec->layer_count; i++)
        if (spec->layers[i].batch_norm) return 1;
    return 0;
}

// ---- initialisation -----------------------------------------------------------------------

static uint64_t fnv1a64(const char *text) {
    uint64_t hash = 14695981039346656037ull;
    for (const unsigned char *c = (const unsigned char *)text; *c; c++) {
        hash ^= *c;
        hash *= 1099511628211ull;
    }
    return hash;
}

// splitmix64's finaliser: a bijective 64-bit mix.
static uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

// The seed the head's parameters are drawn with: layers.c keys each draw by
// (seed, parameter name), and the head's name enters through the seed.
static uint64_t head_init_seed(uint64_t seed, const char *name) {
    return mix64(seed ^ mix64(fnv1a64(name)));
}

// weight = normal(0, 0.02) redrawn outside [-2, 2] (a truncated normal; at
// 100 std the bound is never hit in practice), drawn on the host and uploaded.
static int init_trunc_normal(Backend *backend, const Parameter *param, uint64_t seed,
                             ErrorMessage *err) {
    float *host = malloc(param->count * sizeof *host);
    if (!host) return error_set(err, "out of memory initialising '%s'", param->name);
    Rng rng = rng_make(seed, 0, fnv1a64(param->name), HEAD_TRUNC_STREAM);
    size_t filled = 0;
    while (filled < param->count) {
        float pair[2];
        rng_normal_pair(&rng, pair);
        for (int k = 0; k < 2 && filled < param->count; k++) {
            const float value = HEAD_TRUNC_STD * pair[k];
            if (value >= -HEAD_TRUNC_BOUND && value <= HEAD_TRUNC_BOUND) host[filled++] = value;
        }
    }
    backend->op.upload(backend, param->value, host, param->count * sizeof *host);
    free(host);
    return 0;
}

static int init_parameters(Head *head, uint64_t seed, ErrorMessage *err) {
    Backend *backend = head->backend;
    const uint64_t head_seed = head_init_seed(seed, head->name);
    for (int i = 0; i < head->spec.layer_count; i++) {
        const HeadLayer *layer = &head->layers[i];
        // PyTorch's default first; the trunc-normal inits replace parts of it.
        if (linear_init(backend, &layer->linear, &head->params, head_seed, err)) return -1;
        if (head->spec.init != HEAD_INIT_DEFAULT &&
            init_trunc_normal(backend, &head->params.params[layer->linear.weight_index],
                              head_seed, err))
            return -1;
        if (head->spec.init == HEAD_INIT_TRUNC_NORMAL && layer->linear.has_bias)
            backend->op.fill(backend, layer->linear.bias, 0.0f, (size_t)layer->linear.out_features);
        if (head->spec.layers[i].batch_norm) batchnorm_init(backend, &layer->bn, 1.0f);
        if (head->spec.layers[i].layer_norm) layernorm_init(backend, &layer->ln);
    }
    if (head->spec.weight_norm_out > 0) {
        // created after lightly's _init_weights: PyTorch's default Linear init
        const Linear last = {.in_features = head->spec.layers[head->spec.layer_count - 1].out_features,
                             .out_features = head->spec.weight_norm_out,
                             .weight_index = 0,
                             .bias_index = -1};
        if (linear_init(backend, &last, &head->last_layer, head_seed, err)) return -1;
        // weight_norm sets g = ||v||, then the head fills it with 1
        if (head->spec.weight_g_trained)
            backend->op.fill(backend, head->last_layer.params[HEAD_WEIGHT_G].value, 1.0f,
                             head->last_layer.params[HEAD_WEIGHT_G].count);
    }
    return 0;
}

// ---- declaration and memory ---------------------------------------------------------------------

// Declares every block's parameters under lightly's nn.Sequential indices.
static int declare_layers(Head *head, ErrorMessage *err) {
    int module = 0;
    char prefix[32];
    for (int i = 0; i < head->spec.layer_count; i++) {
        const HeadLayerSpec *spec = &head->spec.layers[i];
        HeadLayer *layer = &head->layers[i];
        snprintf(prefix, sizeof prefix, "layers.%d", module++);
        if (linear_declare(&layer->linear, &head->params, prefix, spec->in_features,
                           spec->out_features, spec->bias, err))
            return -1;
        if (spec->batch_norm) {
            snprintf(prefix, sizeof prefix, "layers.%d", module++);
            if (batchnorm_declare(&layer->bn, &head->params, &head->buffers, prefix,
                                  spec->out_features, HEAD_BN_MOMENTUM, HEAD_BN_EPS, err))
                return -1;
        }
        if (spec->layer_norm) {
            snprintf(prefix, sizeof prefix, "layers.%d", module++);
            if (layernorm_declare(&layer->ln, &head->params, prefix, spec->out_features,
                                  HEAD_LN_EPS, err))
                return -1;
        }
        if (spec->activation != HEAD_ACT_NONE) module++;
    }
    if (head->spec.weight_norm_out > 0) {
        const int shape[2] = {head->spec.weight_norm_out,
                              head->spec.layers[head->spec.layer_count - 1].out_features};
        if (parameter_declare(&head->last_layer, "last_layer.weight_v", PARAM_WEIGHT, 2, shape,
                              NULL, err) < 0)
            return -1;
        const int g_shape[2] = {head->spec.weight_norm_out, 1};
        if (head->spec.weight_g_trained &&
            parameter_declare(&head->last_layer, "last_layer.weight_g", PARAM_WEIGHT, 2, g_shape,
                              NULL, err) != HEAD_WEIGHT_G)
            return -1;
    }
    return 0;
}

// Places every activation and scratch tensor (see Head) in the arena at
// base; returns the bytes needed. Called once with NULL to size it.
static size_t arena_layout(Head *head, void *base) {
    ActivationArena arena = activation_arena_begin(head->backend, base);
    const size_t rows = (size_t)head->max_rows;
    size_t widest = 1;
    for (int i = 0; i < head->spec.layer_count; i++) {
        const HeadLayerSpec *spec = &head->spec.layers[i];
        HeadLayer *layer = &head->layers[i];
        const size_t out = (size_t)spec->out_features;
        if (out > widest) widest = out;
        layer->linear_out = activation_take(&arena, rows * out);
        layer->output = layer->linear_out;
        layer->bn_out = layer->act_out = NULL;
        layer->save_mean = layer->save_inv_std = NULL;
        if (spec->batch_norm || spec->layer_norm) {
            // statistics per channel (BatchNorm) or per row (LayerNorm)
            const size_t statistics = spec->batch_norm ? out : rows;
            layer->bn_out = activation_take(&arena, rows * out);
            layer->save_mean = activation_take_float(&arena, statistics);
            layer->save_inv_std = activation_take_float(&arena, statistics);
            layer->output = layer->bn_out;
        }
        if (spec->activation == HEAD_ACT_GELU) {
            layer->act_out = activation_take(&arena, rows * out);
            layer->output = layer->act_out;
        }
    }
    const size_t last_out = (size_t)head->spec.layers[head->spec.layer_count - 1].out_features;
    head->mlp_out = activation_take_float(&arena, rows * last_out);
    head->output = head->mlp_out;
    head->normalized = head->row_norms = head->weight = head->weight_row_norms = NULL;
    head->weight_grad = head->weight_v_grad = head->scaled_weight = head->ones = NULL;
    head->d_normalized = head->d_mlp_out = NULL;
    if (head->spec.weight_norm_out > 0) {
        const size_t out = (size_t)head->spec.weight_norm_out;
        const size_t bottleneck = last_out;
        head->normalized = activation_take_float(&arena, rows * bottleneck);
        head->row_norms = activation_take_float(&arena, rows);
        head->weight = activation_take_float(&arena, out * bottleneck);
        head->weight_row_norms = activation_take_float(&arena, out);
        head->weight_grad = activation_take_float(&arena, out * bottleneck);
        head->weight_v_grad = activation_take_float(&arena, out * bottleneck);
        head->output = activation_take_float(&arena, rows * out);
        head->d_normalized = activation_take_float(&arena, rows * bottleneck);
        head->d_mlp_out = activation_take_float(&arena, rows * bottleneck);
        if (head->spec.weight_g_trained) {
            head->scaled_weight = head->weight_v_grad;
            head->ones = activation_take_float(&arena, bottleneck);
        }
    }
    head->grad_scratch[0] = activation_take(&arena, rows * widest);
    head->grad_scratch[1] = activation_take(&arena, rows * widest);
    return arena.used;
}

static void bind_layers(Head *head) {
    for (int i = 0; i < head->spec.layer_count; i++) {
        linear_bind(&head->layers[i].linear, &head->params);
        if (head->spec.layers[i].batch_norm)
            batchnorm_bind(&head->layers[i].bn, &head->params, &head->buffers);
        if (head->spec.layers[i].layer_norm) layernorm_bind(&head->layers[i].ln, &head->params);
    }
}

int head_create(Head *head, Backend *backend, const HeadSpec *spec, const char *name,
                int max_rows, uint64_t seed, ErrorMessage *err) {
    memset(head, 0, sizeof *head);
    if (!name) name = "head";
    snprintf(head->name, sizeof head->name, "%s", name);
    if (!backend || !spec) return error_set(err, "head '%s': no backend or spec", name);
    if (spec_check(spec, name, err)) return -1;
    if (max_rows < 1) return error_set(err, "head '%s': max_rows %d < 1", name, max_rows);
    head->backend = backend;
    head->spec = *spec;
    head->max_rows = max_rows;
    parameter_set_init(&head->params, backend, 1);
    parameter_set_init(&head->buffers, backend, 0);
    parameter_set_init(&head->last_layer, backend, 1);
    if (declare_layers(head, err) || parameter_set_allocate(&head->params, err) ||
        parameter_set_allocate(&head->buffers, err) ||
        parameter_set_allocate(&head->last_layer, err)) {
        head_free(head);
        return error_prefix(err, "head '%s'", name);
    }
    bind_layers(head);
    const size_t bytes = arena_layout(head, NULL);
    head->arena = backend->op.alloc(backend, bytes);
    if (!head->arena) {
        head_free(head);
        return error_set(err, "head '%s': out of memory for %zu MB of activations", name,
                         bytes >> 20);
    }
    arena_layout(head, head->arena);
    if (head->ones)
        backend->op.fill(backend, head->ones,
                         1.0f, (size_t)spec->layers[spec->layer_count - 1].out_features);
    if (init_parameters(head, seed, err)) {
        head_free(head);
        return error_prefix(err, "head '%s'", name);
    }
    return 0;
}

int head_attach_batchnorm_sync(Head *head, BatchNormSync *sync, ErrorMessage *err) {
    for (int i = 0; i < head->spec.layer_count; i++)
        if (head->spec.layers[i].batch_norm &&
            batchnorm_sync_attach(sync, &head->layers[i].bn, err))
            return -1;
    return 0;
}

void head_free(Head *head) {
    if (head->backend && head->arena) head->backend->op.free(head->backend, head->arena);
    parameter_set_free(&head->params);
    parameter_set_free(&head->buffers);
    parameter_set_free(&head->last_layer);
    memset(head, 0, sizeof *head);
}

// ---- forward ------------------------------------------------------------------------------

// The last layer's weight as the output GEMM uses it: W = v / ||v|| (in
// head->weight, computed by the forward), or with a trained g, g W per row
// (written again on every call, so forward and backward both find it).
static float *last_layer_weight(Head *head) {
    if (!head->spec.weight_g_trained) return head->weight;
    const int bottleneck = head->spec.layers[head->spec.layer_count - 1].out_features;
    head->backend->op.scale_rows(head->backend, (size_t)head->spec.weight_norm_out, bottleneck,
                                 head->weight, head->last_layer.params[HEAD_WEIGHT_G].value,
                                 head->scaled_weight);
    return head->scaled_weight;
}

const float *head_forward(Head *head, int rows, const Act *x, int training, ErrorMessage *err) {
    Backend *backend = head->backend;
    const HeadSpec *spec = &head->spec;
    head->backward_ready = 0;
    if (rows < 1 || rows > head->max_rows) {
        error_set(err, "head '%s': %d rows, expected 1..%d", head->name, rows, head->max_rows);
        return NULL;
    }
    const int batch_norm = spec_has_batch_norm(spec);
    if (training && batch_norm && rows < 2) {
        error_set(err, "head '%s': BatchNorm in training needs at least 2 rows, got %d",
                  head->name, rows);
        return NULL;
    }
    parameter_set_refresh_compute(&head->params);
    const Act *in = x;
    for (int i = 0; i < spec->layer_count; i++) {
        const HeadLayerSpec *layer_spec = &spec->layers[i];
        HeadLayer *layer = &head->layers[i];
        const size_t n = (size_t)rows * layer_spec->out_features;
        linear_forward(backend, &layer->linear, rows, in, layer->linear_out);
        Act *current = layer->linear_out;
        if (layer_spec->batch_norm) {
            if (layer_spec->activation == HEAD_ACT_RELU)
                batchnorm_relu_forward(backend, &layer->bn, training, (size_t)rows, current, NULL,
                                       layer->bn_out, layer->save_mean, layer->save_inv_std);
            else
                batchnorm_forward(backend, &layer->bn, training, (size_t)rows, current,
                                  layer->bn_out, layer->save_mean, layer->save_inv_std);
            current = layer->bn_out;
        } else if (layer_spec->layer_norm) {
            layernorm_forward(backend, &layer->ln, (size_t)rows, current, layer->bn_out,
                              layer->save_mean, layer->save_inv_std);
            current = layer->bn_out;
        } else if (layer_spec->activation == HEAD_ACT_RELU) {
            relu_forward(backend, n, current, current);  // in place: backward uses the output
        }
        if (layer_spec->activation == HEAD_ACT_GELU)
            backend->op.gelu_forward(backend, n, current, layer->act_out);
        in = layer->output;
    }
    const int last_out = spec->layers[spec->layer_count - 1].out_features;
    backend->op.act_to_float(backend, (size_t)rows * last_out, in, head->mlp_out);
    if (spec->weight_norm_out > 0) {
        const int bottleneck = last_out;
        const int out = spec->weight_norm_out;
        backend->op.l2_normalize_forward(backend, rows, bottleneck, head->mlp_out,
                                         HEAD_NORMALIZE_EPS,
                                         head->normalized, head->row_norms);
        // weight_norm: v * (g / ||v||) with g = 1 and no eps (eps 0: an
        // all-zero row gives NaN, as in PyTorch)
        backend->op.l2_normalize_forward(backend, out, bottleneck,
                                         head->last_layer.params[0].value, 0.0f, head->weight,
                                         head->weight_row_norms);
        // out (rows, out) = normalized (rows, bottleneck) (g W)^T
        backend->op.gemm(backend, 0, 1, rows, out, bottleneck, 1.0f, head->normalized, bottleneck,
                         last_layer_weight(head), bottleneck, 0.0f, head->output, out);
    }
    if (training && batch_norm) head->num_batches_tracked++;
    head->input = x;
    head->rows = rows;
    head->backward_ready = training;
    return head->output;
}

const Act *head_output_act(const Head *head) {
    return head->layers[head->spec.layer_count - 1].output;
}

// ---- backward -----------------------------------------------------------------------------

// The backward scratch buffer that `current` is not.
static Act *other_scratch(const Head *head, const Act *current) {
    return current == head->grad_scratch[0] ? head->grad_scratch[1] : head->grad_scratch[0];
}

// DINO's last layer: weight grads += and d loss / d (MLP output) into
// head->d_mlp_out (fp32).
static void weight_norm_backward(Head *head, const float *dout) {
    Backend *backend = head->backend;
    const int rows = head->rows;
    const int bottleneck = head->spec.layers[head->spec.layer_count - 1].out_features;
    const int out = head->spec.weight_norm_out;
    const size_t weight_count = (size_t)out * bottleneck;
    Parameter *weight_v = &head->last_layer.params[0];
    // out = normalized (g W)^T: d(g W) (out, bottleneck) = dout^T normalized,
    // d normalized (rows, bottleneck) = dout (g W)
    backend->op.gemm(backend, 1, 0, out, bottleneck, rows, 1.0f, dout, out, head->normalized,
                     bottleneck, 0.0f, head->weight_grad, bottleneck);
    backend->op.gemm(backend, 0, 0, rows, bottleneck, out, 1.0f, dout, out,
                     last_layer_weight(head), bottleneck, 0.0f, head->d_normalized, bottleneck);
    if (head->spec.weight_g_trained) {
        // d g_i += <d(g W)_i, W_i>: the products (in the scaled weight's
        // memory, no longer needed), summed per row by a GEMM with ones;
        // then dW = g d(g W) per row
        Parameter *weight_g = &head->last_layer.params[HEAD_WEIGHT_G];
        backend->op.mul(backend, weight_count, head->weight_grad, head->weight,
                        head->weight_v_grad);
        backend->op.gemm(backend, 0, 0, out, 1, bottleneck, 1.0f, head->weight_v_grad, bottleneck,
                         head->ones, 1, 1.0f, weight_g->grad, 1);
        backend->op.scale_rows(backend, (size_t)out, bottleneck, head->weight_grad,
                               weight_g->value, head->weight_grad);
    }
    // W = v / ||v|| per row: dv = (dW - W <W, dW>) / ||v||, then grad += dv
    backend->op.l2_normalize_backward(backend, out, bottleneck, head->weight,
                                      head->weight_row_norms, head->weight_grad, 0.0f,
                                      head->weight_v_grad);
    backend->op.axpby(backend, weight_count, 1.0f, head->weight_v_grad, 1.0f, weight_v->grad);
    backend->op.l2_normalize_backward(backend, rows, bottleneck, head->normalized, head->row_norms,
                                      head->d_normalized, HEAD_NORMALIZE_EPS, head->d_mlp_out);
}

// The blocks' backward from dout (rows, last block's out) on activations.
static void blocks_backward(Head *head, const Act *dout, Act *dx) {
    Backend *backend = head->backend;
    const HeadSpec *spec = &head->spec;
    const int rows = head->rows;
    // Every step reads `current` and writes the other scratch buffer (no op
    // runs in place), so dout is never written.
    const Act *current = dout;
    for (int i = spec->layer_count - 1; i >= 0; i--) {
        const HeadLayerSpec *layer_spec = &spec->layers[i];
        const HeadLayer *layer = &head->layers[i];
        const size_t n = (size_t)rows * layer_spec->out_features;
        Act *next = other_scratch(head, current);
        if (layer_spec->activation == HEAD_ACT_GELU) {
            const Act *gelu_in =
                layer_spec->batch_norm || layer_spec->layer_norm ? layer->bn_out : layer->linear_out;
            backend->op.gelu_backward(backend, n, gelu_in, current, next);
            current = next;
            next = other_scratch(head, current);
        }
        if (layer_spec->batch_norm) {
            if (layer_spec->activation == HEAD_ACT_RELU)
                batchnorm_relu_backward(backend, &layer->bn, (size_t)rows, layer->linear_out,
                                        layer->bn_out, current, layer->save_mean,
                                        layer->save_inv_std, next, NULL);
            else
                batchnorm_backward(backend, &layer->bn, (size_t)rows, layer->linear_out, current,
                                   layer->save_mean, layer->save_inv_std, next);
            current = next;
            next = other_scratch(head, current);
        } else if (layer_spec->layer_norm) {
            layernorm_backward(backend, &layer->ln, (size_t)rows, layer->linear_out, current,
                               layer->save_mean, layer->save_inv_std, next, 0);
            current = next;
            next = other_scratch(head, current);
        } else if (layer_spec->activation == HEAD_ACT_RELU) {
            relu_backward(backend, n, layer->linear_out, current, next);  // the in-place output
            current = next;
            next = other_scratch(head, current);
        }
        const Act *layer_in = i > 0 ? head->layers[i - 1].output : head->input;
        linear_backward(backend, &layer->linear, rows, layer_in, current, i > 0 ? next : dx);
        current = next;
    }
    parameter_set_grads_final(&head->params, 0);
}

static int check_backward(const Head *head, ErrorMessage *err) {
    if (!head->backward_ready)
        return error_set(err, "head '%s': backward without a training forward before it",
                         head->name);
    return 0;
}

int head_backward(Head *head, const float *dout, Act *dx, ErrorMessage *err) {
    if (check_backward(head, err)) return -1;
    Backend *backend = head->backend;
    const HeadSpec *spec = &head->spec;
    const float *d_mlp_out = dout;
    if (spec->weight_norm_out > 0) {
        weight_norm_backward(head, dout);
        parameter_set_grads_final(&head->last_layer, 0);
        d_mlp_out = head->d_mlp_out;
    }
    // Into the second scratch buffer: the blocks' backward reads its input
    // from `current` and writes the other one first.
    Act *d_blocks = head->grad_scratch[1];
    const int last_out = spec->layers[spec->layer_count - 1].out_features;
    backend->op.float_to_act(backend, (size_t)head->rows * last_out, d_mlp_out, d_blocks);
    blocks_backward(head, d_blocks, dx);
    return 0;
}

int head_backward_act(Head *head, const Act *dout, Act *dx, ErrorMessage *err) {
    if (check_backward(head, err)) return -1;
    if (head->spec.weight_norm_out > 0)
        return error_set(err, "head '%s': a gradient of the blocks' output given to a head with "
                              "a weight-normalised layer", head->name);
    blocks_backward(head, dout, dx);
    return 0;
}
