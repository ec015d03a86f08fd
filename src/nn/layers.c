// Layers: declaration, binding, initialisation and forward/backward of
// conv, batch norm, relu, pooling and linear on top of the backend ops
// (contract in layers.h).
#include "nn/layers.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nn/batchnorm_sync.h"
#include "util/rng.h"

#define LAYER_INIT_STREAM 0x494E4954u  // "INIT": keeps init draws apart from data streams

static uint64_t name_hash(const char *name) {
    uint64_t hash = 14695981039346656037ull;  // FNV-1a 64
    for (const unsigned char *c = (const unsigned char *)name; *c; c++) {
        hash ^= *c;
        hash *= 1099511628211ull;
    }
    return hash;
}

static Rng init_rng(uint64_t seed, const char *name) {
    return rng_make(seed, 0, name_hash(name), LAYER_INIT_STREAM);
}

int layer_init_parameter(Backend *backend, const Parameter *param, uint64_t seed,
                         InitDistribution distribution, float scale, ErrorMessage *err) {
    float *host = malloc((param->count + 1) * sizeof *host);
    if (!host) return error_set(err, "out of memory initialising '%s'", param->name);
    Rng rng = init_rng(seed, param->name);
    if (distribution == INIT_NORMAL) {
        for (size_t i = 0; i < param->count; i += 2) {  // both Box-Muller variates
            float pair[2];
            rng_normal_pair(&rng, pair);
            host[i] = scale * pair[0];
            host[i + 1] = scale * pair[1];  // the spare slot when count is odd
        }
    } else {
        for (size_t i = 0; i < param->count; i++) host[i] = rng_range(&rng, -scale, scale);
    }
    backend->op.upload(backend, param->value, host, param->count * sizeof *host);
    free(host);
    return 0;
}

// ---- convolution ------------------------------------------------------------------

int conv2d_declare(Conv2d *conv, ParameterSet *params, const char *name, int in_channels,
                   int out_channels, int kernel, int stride, int padding, ErrorMessage *err) {
    *conv = (Conv2d){.in_channels = in_channels, .out_channels = out_channels, .kernel = kernel,
                     .stride = stride, .padding = padding};
    const int shape[4] = {out_channels, kernel, kernel, in_channels};
    const int torch_shape[4] = {out_channels, in_channels, kernel, kernel};
    conv->weight_index = parameter_declare(params, name, PARAM_WEIGHT, 4, shape, torch_shape, err);
    return conv->weight_index < 0 ? -1 : 0;
}

int conv2d_declare_depthwise(Conv2d *conv, ParameterSet *params, const char *name, int channels,
                             int kernel, int stride, int padding, ErrorMessage *err) {
    *conv = (Conv2d){.in_channels = channels, .out_channels = channels, .kernel = kernel,
                     .stride = stride, .padding = padding};
    const int shape[4] = {1, kernel, kernel, channels};
    const int torch_shape[4] = {channels, 1, kernel, kernel};
    conv->weight_index = parameter_declare(params, name, PARAM_WEIGHT, 4, shape, torch_shape, err);
    return conv->weight_index < 0 ? -1 : 0;
}

void conv2d_bind(Conv2d *conv, const ParameterSet *params) {
    const Parameter *weight = &params->params[conv->weight_index];
    conv->weight_compute = weight->compute;
    conv->weight_grad = weight->grad;
}

int conv2d_init_kaiming(Backend *backend, const Conv2d *conv, const ParameterSet *params,
                        uint64_t seed, ErrorMessage *err) {
    const double fan_out = (double)conv->out_channels * conv->kernel * conv->kernel;
    return layer_init_parameter(backend, &params->params[conv->weight_index], seed, INIT_NORMAL,
                                (float)sqrt(2.0 / fan_out), err);
}

int conv2d_shape(const Conv2d *conv, int batch, int height, int width, ConvShape *shape,
                 ErrorMessage *err) {
    return conv_shape_make(shape, batch, height, width, conv->in_channels, conv->out_channels,
                           conv->kernel, conv->stride, conv->padding, err);
}

void conv2d_forward(Backend *backend, const Conv2d *conv, const ConvPlan *plan, const Act *x,
                    Act *y) {
    backend->op.conv2d_forward(backend, plan, x, conv->weight_compute, y);
}

void conv2d_backward(Backend *backend, const Conv2d *conv, const ConvPlan *plan, const Act *x,
                     const Act *dy, Act *dx) {
    backend->op.conv2d_backward_weights(backend, plan, x, dy, conv->weight_grad);
    if (dx) backend->op.conv2d_backward_data(backend, plan, dy, conv->weight_compute, dx);
}

// ---- batch norm ---------------------------------------------------------------------

int batchnorm_declare(BatchNorm *bn, ParameterSet *params, ParameterSet *buffers,
                      const char *prefix, int channels, float momentum, float eps,
                      ErrorMessage *err) {
    *bn = (BatchNorm){.channels = channels, .momentum = momentum, .eps = eps};
    char name[PARAM_MAX_NAME + 32];
    const int shape[1] = {channels};
    snprintf(name, sizeof name, "%s.weight", prefix);
    bn->weight_index = parameter_declare(params, name, PARAM_NORM, 1, shape, NULL, err);
    if (bn->weight_index < 0) return -1;
    snprintf(name, sizeof name, "%s.bias", prefix);
    bn->bias_index = parameter_declare(params, name, PARAM_NORM, 1, shape, NULL, err);
    if (bn->bias_index < 0) return -1;
    snprintf(name, sizeof name, "%s.running_mean", prefix);
    bn->running_mean_index = parameter_declare(buffers, name, PARAM_BUFFER, 1, shape, NULL, err);
    if (bn->running_mean_index < 0) return -1;
    snprintf(name, sizeof name, "%s.running_var", prefix);
    bn->running_var_index = parameter_declare(buffers, name, PARAM_BUFFER, 1, shape, NULL, err);
    return bn->running_var_index < 0 ? -1 : 0;
}

void batchnorm_bind(BatchNorm *bn, const ParameterSet *params, const ParameterSet *buffers) {
    bn->weight = params->params[bn->weight_index].value;
    bn->weight_grad = params->params[bn->weight_index].grad;
    bn->bias = params->params[bn->bias_index].value;
    bn->bias_grad = params->params[bn->bias_index].grad;
    bn->running_mean = buffers->params[bn->running_mean_index].value;
    bn->running_var = buffers->params[bn->running_var_index].value;
}

void batchnorm_init(Backend *backend, const BatchNorm *bn, float gamma_value) {
    backend->op.fill(backend, bn->weight, gamma_value, (size_t)bn->channels);
    backend->op.fill(backend, bn->bias, 0.0f, (size_t)bn->channels);
    backend->op.fill(backend, bn->running_mean, 0.0f, (size_t)bn->channels);
    backend->op.fill(backend, bn->running_var, 1.0f, (size_t)bn->channels);
}

void batchnorm_forward(Backend *backend, const BatchNorm *bn, int training, size_t rows,
                       const Act *x, Act *y, float *save_mean, float *save_inv_std) {
    if (training && bn->sync)
        batchnorm_sync_forward(backend, bn, rows, x, NULL, 0, y, save_mean, save_inv_std);
    else if (training)
        backend->op.batchnorm_forward_train(backend, rows, bn->channels, x, bn->weight, bn->bias,
                                            bn->momentum, bn->eps, y, save_mean, save_inv_std,
                                            bn->running_mean, bn->running_var);
    else
        backend->op.batchnorm_forward_eval(backend, rows, bn->channels, x, bn->weight, bn->bias,
                                           bn->running_mean, bn->running_var, bn->eps, y);
}

void batchnorm_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                        const Act *dy, const float *save_mean, const float *save_inv_std, Act *dx) {
    if (bn->sync) {
        batchnorm_sync_backward(backend, bn, rows, x, NULL, dy, save_mean, save_inv_std, dx,
                                NULL);
        return;
    }
    backend->op.batchnorm_backward(backend, rows, bn->channels, x, dy, bn->weight, save_mean,
                                   save_inv_std, dx, bn->weight_grad, bn->bias_grad);
}

void batchnorm_relu_forward(Backend *backend, const BatchNorm *bn, int training, size_t rows,
                            const Act *x, const Act *residual, Act *y, float *save_mean,
                            float *save_inv_std) {
    if (training && bn->sync)
        batchnorm_sync_forward(backend, bn, rows, x, residual, 1, y, save_mean, save_inv_std);
    else if (training)
        backend->op.batchnorm_relu_forward_train(backend, rows, bn->channels, x, residual,
                                                 bn->weight, bn->bias, bn->momentum, bn->eps, y,
                                                 save_mean, save_inv_std, bn->running_mean,
                                                 bn->running_var);
    else
        backend->op.batchnorm_relu_forward_eval(backend, rows, bn->channels, x, residual,
                                                bn->weight, bn->bias, bn->running_mean,
                                                bn->running_var, bn->eps, y);
}

void batchnorm_relu_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                             const Act *y, const Act *dy, const float *save_mean,
                             const float *save_inv_std, Act *dx, Act *dresidual) {
    if (bn->sync) {
        // The ranks' backward masks with the ReLU's output; a caller that
        // kept none (y NULL: YOLO's and ShuffleNet's units) gets it
        // recomputed into dx, which the apply reads element by element
        // before writing the same element.
        if (!y && !dresidual) {
            backend->op.batchnorm_forward_apply(backend, rows, bn->channels, x, NULL, 1,
                                                bn->weight, bn->bias, save_mean, save_inv_std,
                                                dx);
            y = dx;
        }
        batchnorm_sync_backward(backend, bn, rows, x, y, dy, save_mean, save_inv_std, dx,
                                dresidual);
        return;
    }
    backend->op.batchnorm_relu_backward(backend, rows, bn->channels, x, y, dy, bn->weight,
                                        bn->bias, save_mean, save_inv_std, dx, bn->weight_grad,
                                        bn->bias_grad, dresidual);
}

ConvPlan *conv_plan_shared(Backend *backend, const ConvShape *shapes, ConvPlan *const *plans,
                           int index, ConvPlan **owned, int *owned_count, ErrorMessage *err) {
    for (int earlier = 0; earlier < index; earlier++)
        if (plans[earlier] && memcmp(&shapes[earlier], &shapes[index], sizeof *shapes) == 0)
            return plans[earlier];
    ConvPlan *plan = backend->op.conv2d_plan(backend, &shapes[index], err);
    if (plan) owned[(*owned_count)++] = plan;
    return plan;
}

void conv_unit_forward(Backend *backend, const ConvUnitStep *unit, int training, const Act *x,
                       Act *conv_out, Act *out, float *mean, float *inv_std) {
    if (unit->depthwise)
        backend->op.depthwise_forward(backend, unit->depthwise, x, unit->conv->weight_compute,
                                      NULL, conv_out);
    else
        conv2d_forward(backend, unit->conv, unit->plan, x, conv_out);
    if (unit->act == LAYER_ACT_SILU)
        batchnorm_silu_forward(backend, unit->bn, training, unit->rows, conv_out, out, mean,
                               inv_std);
    else if (unit->act == LAYER_ACT_RELU)
        batchnorm_relu_forward(backend, unit->bn, training, unit->rows, conv_out, NULL, out, mean,
                               inv_std);
    else
        batchnorm_forward(backend, unit->bn, training, unit->rows, conv_out, out, mean, inv_std);
}

void conv_unit_backward(Backend *backend, const ConvUnitStep *unit, const Act *x,
                        const Act *conv_out, const Act *out, const float *mean,
                        const float *inv_std, const Act *dy, Act *dnorm, Act *dconv, Act *dx) {
    const BatchNorm *bn = unit->bn;
    if (unit->act == LAYER_ACT_SILU)
        batchnorm_silu_backward(backend, bn, unit->rows, conv_out, dy, mean, inv_std, dnorm,
                                dconv);
    else if (unit->act == LAYER_ACT_RELU)
        batchnorm_relu_backward(backend, bn, unit->rows, conv_out, out, dy, mean, inv_std, dconv,
                                NULL);
    else
        batchnorm_backward(backend, bn, unit->rows, conv_out, dy, mean, inv_std, dconv);
    if (unit->depthwise) {
        backend->op.depthwise_backward_weights(backend, unit->depthwise, x, dconv,
                                               unit->conv->weight_grad, NULL);
        if (dx)
            backend->op.depthwise_backward_data(backend, unit->depthwise, dconv,
                                                unit->conv->weight_compute, dx);
    } else {
        conv2d_backward(backend, unit->conv, unit->plan, x, dconv, dx);
    }
}

void batchnorm_silu_forward(Backend *backend, const BatchNorm *bn, int training, size_t rows,
                            const Act *x, Act *y, float *save_mean, float *save_inv_std) {
    if (training && bn->sync) {  // the ranks' statistics first, then the SiLU in place
        batchnorm_sync_forward(backend, bn, rows, x, NULL, 0, y, save_mean, save_inv_std);
        backend->op.silu_forward(backend, rows * (size_t)bn->channels, y, y);
    } else if (training) {
        backend->op.batchnorm_silu_forward_train(backend, rows, bn->channels, x, bn->weight,
                                                 bn->bias, bn->momentum, bn->eps, y, save_mean,
                                                 save_inv_std, bn->running_mean,
                                                 bn->running_var);
    } else {
        backend->op.batchnorm_silu_forward_eval(backend, rows, bn->channels, x, bn->weight,
                                                bn->bias, bn->running_mean, bn->running_var,
                                                bn->eps, y);
    }
}

void batchnorm_silu_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                             const Act *dy, const float *save_mean, const float *save_inv_std,
                             Act *dz, Act *dx) {
    if (!bn->sync) {
        backend->op.batchnorm_silu_backward(backend, rows, bn->channels, x, dy, bn->weight,
                                            bn->bias, save_mean, save_inv_std, dz, dx,
                                            bn->weight_grad, bn->bias_grad);
        return;
    }
    // The norm's output again (this rank's rows), SiLU's gradient, then the ranks' backward.
    backend->op.batchnorm_forward_apply(backend, rows, bn->channels, x, NULL, 0, bn->weight,
                                        bn->bias, save_mean, save_inv_std, dz);
    backend->op.silu_backward(backend, rows * (size_t)bn->channels, dz, dy, dz);
    batchnorm_sync_backward(backend, bn, rows, x, NULL, dz, save_mean, save_inv_std, dx, NULL);
}

// ---- layer norm ---------------------------------------------------------------------

int layernorm_declare(LayerNorm *ln, ParameterSet *params, const char *prefix, int channels,
                      float eps, ErrorMessage *err) {
    *ln = (LayerNorm){.channels = channels, .eps = eps};
    char name[PARAM_MAX_NAME + 32];
    snprintf(name, sizeof name, "%s.weight", prefix);
    ln->weight_index = parameter_declare(params, name, PARAM_NORM, 1, &channels, NULL, err);
    if (ln->weight_index < 0) return -1;
    snprintf(name, sizeof name, "%s.bias", prefix);
    ln->bias_index = parameter_declare(params, name, PARAM_NORM, 1, &channels, NULL, err);
    return ln->bias_index < 0 ? -1 : 0;
}

void layernorm_bind(LayerNorm *ln, const ParameterSet *params) {
    ln->weight = params->params[ln->weight_index].value;
    ln->weight_grad = params->params[ln->weight_index].grad;
    ln->bias = params->params[ln->bias_index].value;
    ln->bias_grad = params->params[ln->bias_index].grad;
}

void layernorm_init(Backend *backend, const LayerNorm *ln) {
    backend->op.fill(backend, ln->weight, 1.0f, (size_t)ln->channels);
    backend->op.fill(backend, ln->bias, 0.0f, (size_t)ln->channels);
}

void layernorm_forward(Backend *backend, const LayerNorm *ln, size_t rows, const Act *x, Act *y,
                       float *mean, float *inv_std) {
    backend->op.layernorm_forward(backend, rows, ln->channels, x, ln->weight, ln->bias, ln->eps,
                                  y, mean, inv_std);
}

void layernorm_backward(Backend *backend, const LayerNorm *ln, size_t rows, const Act *x,
                        const Act *dy, const float *mean, const float *inv_std, Act *dx,
                        int accumulate) {
    backend->op.layernorm_backward(backend, rows, ln->channels, x, dy, ln->weight, mean, inv_std,
                                   dx, accumulate, ln->weight_grad, ln->bias_grad);
}

// ---- elementwise and pooling ------------------------------------------------------------

void relu_forward(Backend *backend, size_t n, const Act *x, Act *y) {
    backend->op.relu_forward(backend, n, x, y);
}

void relu_backward(Backend *backend, size_t n, const Act *y, const Act *dy, Act *dx) {
    backend->op.relu_backward(backend, n, y, dy, dx);
}

void maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x, Act *y,
                     int32_t *argmax) {
    backend->op.maxpool_forward(backend, shape, x, y, argmax);
}

void maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy,
                      const int32_t *argmax, Act *dx) {
    backend->op.maxpool_backward(backend, shape, dy, argmax, dx);
}

void avgpool_forward(Backend *backend, int batch, int pixels, int channels, const Act *x, Act *y) {
    backend->op.avgpool_forward(backend, batch, pixels, channels, x, y);
}

void avgpool_backward(Backend *backend, int batch, int pixels, int channels, const Act *dy,
                      Act *dx) {
    backend->op.avgpool_backward(backend, batch, pixels, channels, dy, dx);
}

// ---- linear ---------------------------------------------------------------------------

int linear_declare(Linear *linear, ParameterSet *params, const char *prefix, int in_features,
                   int out_features, int has_bias, ErrorMessage *err) {
    *linear = (Linear){.in_features = in_features, .out_features = out_features,
                       .has_bias = has_bias, .bias_index = -1};
    char name[PARAM_MAX_NAME + 32];
    const int weight_shape[2] = {out_features, in_features};
    snprintf(name, sizeof name, "%s.weight", prefix);
    linear->weight_index = parameter_declare(params, name, PARAM_WEIGHT, 2, weight_shape, NULL, err);
    if (linear->weight_index < 0) return -1;
    if (!has_bias) return 0;
    snprintf(name, sizeof name, "%s.bias", prefix);
    linear->bias_index = parameter_declare(params, name, PARAM_BIAS, 1, &out_features, NULL, err);
    return linear->bias_index < 0 ? -1 : 0;
}

void linear_bind(Linear *linear, const ParameterSet *params) {
    linear->weight_compute = params->params[linear->weight_index].compute;
    linear->weight_grad = params->params[linear->weight_index].grad;
    if (linear->has_bias) {
        linear->bias = params->params[linear->bias_index].value;
        linear->bias_grad = params->params[linear->bias_index].grad;
    }
}

int linear_init(Backend *backend, const Linear *linear, const ParameterSet *params, uint64_t seed,
                ErrorMessage *err) {
    const float bound = (float)(1.0 / sqrt((double)linear->in_features));
    if (layer_init_parameter(backend, &params->params[linear->weight_index], seed, INIT_UNIFORM,
                             bound, err))
        return -1;
    if (!linear->has_bias) return 0;
    return layer_init_parameter(backend, &params->params[linear->bias_index], seed, INIT_UNIFORM,
                                bound, err);
}

void linear_forward(Backend *backend, const Linear *linear, int rows, const Act *x, Act *y) {
    backend->op.linear_forward(backend, rows, linear->in_features, linear->out_features, x,
                               linear->weight_compute, linear->has_bias ? linear->bias : NULL, y);
}

// weight_grad += dy^T x; bias_grad += sum dy; dx = dy W unless NULL.
void linear_backward(Backend *backend, const Linear *linear, int rows, const Act *x, const Act *dy,
                     Act *dx) {
    const int in = linear->in_features, out = linear->out_features;
    backend->op.linear_backward_weights(backend, rows, in, out, x, dy, linear->weight_grad,
                                        linear->has_bias ? linear->bias_grad : NULL);
    if (dx)
        backend->op.linear_backward_data(backend, rows, in, out, dy, linear->weight_compute, dx);
}

int conv_batchnorm_statistics(Backend *backend, const Conv2d *conv, const ConvPlan *plan,
                              const BatchNorm *bn, size_t rows, const Act *x,
                              const NormAffine *prologue, Act *conv_out, float *save_mean,
                              float *save_inv_std, float *sums) {
    const BackendOps *op = &backend->op;
    if (bn->sync || !sums || !op->conv2d_forward_stats ||
        !op->conv2d_forward_stats(backend, plan, x, prologue, conv->weight_compute, conv_out,
                                  sums))
        return 0;
    // save_inv_std holds the squared deviations until finish_statistics
    op->batchnorm_statistics_from_sums(backend, bn->channels, rows, sums, save_mean,
                                       save_inv_std);
    op->batchnorm_finish_statistics(backend, bn->channels, rows, bn->momentum, bn->eps, save_mean,
                                    save_inv_std, bn->running_mean, bn->running_var);
    return 1;
}

NormAffine batchnorm_affine(const BatchNorm *bn, const float *save_mean,
                            const float *save_inv_std) {
    return (NormAffine){bn->weight, bn->bias, save_mean, save_inv_std};
}

int conv2d_backward_prologue(Backend *backend, const Conv2d *conv, const ConvPlan *plan,
                             const Act *x, const BatchNorm *previous, const NormAffine *prologue,
                             const Act *dy, Act *dx, float *sums) {
    const BackendOps *op = &backend->op;
    op->conv2d_backward_weights_prologue(backend, plan, x, prologue, dy, conv->weight_grad);
    if (!dx) return 0;
    if (sums && !previous->sync &&
        op->conv2d_backward_data_prologue(backend, plan, dy, conv->weight_compute, x, prologue,
                                          dx, previous->weight_grad, previous->bias_grad, sums))
        return 1;
    op->conv2d_backward_data(backend, plan, dy, conv->weight_compute, dx);
    return 0;
}

void batchnorm_backward_from_sums(Backend *backend, const BatchNorm *bn, size_t rows,
                                  const Act *x, const Act *dz, const float *save_mean,
                                  const float *save_inv_std, const float *sums, Act *dx) {
    backend->op.batchnorm_backward_apply(backend, rows, rows, bn->channels, x, NULL, dz,
                                         bn->weight, save_mean, save_inv_std, sums, dx);
}

void conv_batchnorm_forward(Backend *backend, const Conv2d *conv, const ConvPlan *plan,
                            const BatchNorm *bn, int training, int relu, size_t rows,
                            const Act *x, Act *conv_out, const Act *residual, Act *y,
                            float *save_mean, float *save_inv_std, float *sums) {
    if (training && conv_batchnorm_statistics(backend, conv, plan, bn, rows, x, NULL, conv_out,
                                              save_mean, save_inv_std, sums)) {
        backend->op.batchnorm_forward_apply(backend, rows, bn->channels, conv_out, residual, relu,
                                            bn->weight, bn->bias, save_mean, save_inv_std, y);
        return;
    }
    conv2d_forward(backend, conv, plan, x, conv_out);
    if (relu)
        batchnorm_relu_forward(backend, bn, training, rows, conv_out, residual, y, save_mean,
                               save_inv_std);
    else
        batchnorm_forward(backend, bn, training, rows, conv_out, y, save_mean, save_inv_std);
}
