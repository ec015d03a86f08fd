// Layers: the building blocks models are written with. Each layer is a small
// struct (its geometry and where its parameters live) with x_forward /
// x_backward calling the backend ops; a model calls the forwards in order and
// the backwards in reverse, passing the tensors each backward needs (saved by
// the model in its activation arena).
//
// Gradient contract (as in backend.h):
// - activation gradients (dx) are overwritten (`=`);
// - parameter gradients (dweight, dbias, dgamma, dbeta) accumulate (`+=`),
//   so micro-batches add up; the caller zeroes them between steps.
//
// Parameters are declared into a ParameterSet before it is allocated
// (x_declare keeps their indices); after parameter_set_allocate, x_bind
// wires the value and gradient pointers.
//
// Initialisation: random draws come from the counter-based RNG (util/rng.h)
// keyed by (seed, FNV-1a hash of the parameter name), so a parameter's
// initial value depends only on the seed and its name, not on declaration
// order or the backend. Values are drawn in our layout on the host and
// uploaded.
#ifndef LTC_NN_LAYERS_H
#define LTC_NN_LAYERS_H

#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "nn/parameters.h"
#include "util/error.h"

// Fills param with random draws keyed by (seed, its name) on the host and
// uploads them: normal with std `scale`, or uniform in +-scale.
typedef enum InitDistribution { INIT_NORMAL, INIT_UNIFORM } InitDistribution;
int layer_init_parameter(Backend *backend, const Parameter *param, uint64_t seed,
                         InitDistribution distribution, float scale, ErrorMessage *err);

// ---- convolution (no bias, as in ResNets) -----------------------------------

typedef struct Conv2d {
    int in_channels, out_channels, kernel, stride, padding;
    int weight_index;   // in the model's ParameterSet
    const Act *weight_compute;  // (Cout, K, K, Cin) in the compute dtype; depthwise (1, K, K, C)
    float *weight_grad;         // (Cout, K, K, Cin); depthwise (1, K, K, C)
} Conv2d;

// Declares `name` (e.g. "layer1.0.conv1.weight"), torch shape (Cout, Cin, K, K).
int conv2d_declare(Conv2d *conv, ParameterSet *params, const char *name, int in_channels,
                   int out_channels, int kernel, int stride, int padding, ErrorMessage *err);
// A depthwise conv (groups = in = out = channels; run on the depthwise ops,
// not conv2d_forward): weight (1, K, K, C), the (K, K, C) those ops take;
// torch shape (C, 1, K, K), translated at load and save (weights_copy_layout).
int conv2d_declare_depthwise(Conv2d *conv, ParameterSet *params, const char *name, int channels,
                             int kernel, int stride, int padding, ErrorMessage *err);
void conv2d_bind(Conv2d *conv, const ParameterSet *params);
// torchvision's ResNet init: kaiming_normal_(mode='fan_out', nonlinearity='relu'),
// std = sqrt(2 / (Cout * K * K)).
int conv2d_init_kaiming(Backend *backend, const Conv2d *conv, const ParameterSet *params,
                        uint64_t seed, ErrorMessage *err);
// The geometry of this conv on an input of batch x height x width.
int conv2d_shape(const Conv2d *conv, int batch, int height, int width, ConvShape *shape,
                 ErrorMessage *err);
// y (N, OH, OW, Cout) = conv(x (N, H, W, Cin))
void conv2d_forward(Backend *backend, const Conv2d *conv, const ConvPlan *plan, const Act *x,
                    Act *y);
// weight_grad += dW; dx (N, H, W, Cin) = dL/dx unless dx is NULL (first layer).
// x (N, H, W, Cin) is the forward input, dy (N, OH, OW, Cout).
void conv2d_backward(Backend *backend, const Conv2d *conv, const ConvPlan *plan, const Act *x,
                     const Act *dy, Act *dx);

// The plan for shapes[index]: the plan of an earlier identical shape
// (plans[earlier] non-NULL: a model's convs of one shape share one), or a
// new one, appended to owned (*owned_count). NULL with err on failure.
ConvPlan *conv_plan_shared(Backend *backend, const ConvShape *shapes, ConvPlan *const *plans,
                           int index, ConvPlan **owned, int *owned_count, ErrorMessage *err);

// ---- batch norm over rows: 2d on NHWC (rows = N*H*W) or 1d (rows = N) -------

typedef struct BatchNormSync BatchNormSync;

typedef struct BatchNorm {
    int channels;
    float momentum, eps;  // PyTorch defaults 0.1, 1e-5
    int weight_index, bias_index;        // in the ParameterSet
    int running_mean_index, running_var_index;  // in the buffer table
    float *weight, *bias, *weight_grad, *bias_grad;  // (C)
    float *running_mean, *running_var;               // (C)
    // Training statistics over all ranks (nn/batchnorm_sync.h), or NULL:
    // this rank's batch only.
    BatchNormSync *sync;
} BatchNorm;

// Declares prefix.weight, prefix.bias (PARAM_NORM) and prefix.running_mean,
// prefix.running_var (buffers). num_batches_tracked is kept by the model.
int batchnorm_declare(BatchNorm *bn, ParameterSet *params, ParameterSet *buffers,
                      const char *prefix, int channels, float momentum, float eps,
                      ErrorMessage *err);
void batchnorm_bind(BatchNorm *bn, const ParameterSet *params, const ParameterSet *buffers);
// weight = gamma_value (1, or 0 for torchvision's zero_init_residual), bias 0,
// running_mean 0, running_var 1.
void batchnorm_init(Backend *backend, const BatchNorm *bn, float gamma_value);
// training: batch statistics, save_mean/save_inv_std (C) = for backward,
// running statistics updated. Otherwise running statistics (saves unused).
// y (rows, C) = BN(x (rows, C)); y may not alias x (backward reads x).
void batchnorm_forward(Backend *backend, const BatchNorm *bn, int training, size_t rows,
                       const Act *x, Act *y, float *save_mean, float *save_inv_std);
// dx (rows, C) =; weight_grad, bias_grad +=. x is the forward input. Only
// after a training forward (uses the saved batch statistics).
void batchnorm_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                        const Act *dy, const float *save_mean, const float *save_inv_std,
                        Act *dx);

// A convolution and the batch norm after it: conv_out = conv(x), then y =
// batchnorm_relu_forward(conv_out, residual) when relu, else
// batchnorm_forward(conv_out) (residual NULL). A training forward on a
// backend that fuses the convolution with the norm's statistics for this
// plan (backend.h conv2d_forward_stats; cuDNN's graph on the GPU) takes the
// statistics from the convolution's per-channel sums (sums: (2, Cout)
// backend memory of the caller's, NULL: never fused) instead of a pass of
// its own; synchronised norms and evaluation take the separate ops.
void conv_batchnorm_forward(Backend *backend, const Conv2d *conv, const ConvPlan *plan,
                            const BatchNorm *bn, int training, int relu, size_t rows,
                            const Act *x, Act *conv_out, const Act *residual, Act *y,
                            float *save_mean, float *save_inv_std, float *sums);

// The first half of conv_batchnorm_forward's fused path, the norm not yet
// applied: conv_out = conv(x), or of relu(x scale + shift) with a prologue
// (the previous norm's, x its input; backend.h NormAffine), and the norm's
// batch statistics from the convolution's sums. Returns 0, having done
// nothing, where that fused path does not exist (then the separate ops).
int conv_batchnorm_statistics(Backend *backend, const Conv2d *conv, const ConvPlan *plan,
                              const BatchNorm *bn, size_t rows, const Act *x,
                              const NormAffine *prologue, Act *conv_out, float *save_mean,
                              float *save_inv_std, float *sums);
// The norm's training affine (its batch statistics) as a prologue.
NormAffine batchnorm_affine(const BatchNorm *bn, const float *save_mean,
                            const float *save_inv_std);
// conv2d_backward for a forward that took a prologue (`previous`'s norm
// and ReLU; prologue its affine): x is the prologue's input (the previous
// norm's), never the convolution's own; dx = dL/d(the ReLU's output).
// Where the backend fuses the data gradient with the ReLU's backward and
// the previous norm's reduction (conv2d_backward_data_prologue; sums: (2,
// C) backend memory) dx is dL/d(the ReLU's input) already, previous's
// gradients have their share and sums what batchnorm_backward_from_sums
// takes: returns 1. Otherwise 0 (dx through the ReLU is the norm's
// backward's to take, batchnorm_relu_backward with y NULL).
int conv2d_backward_prologue(Backend *backend, const Conv2d *conv, const ConvPlan *plan,
                             const Act *x, const BatchNorm *previous, const NormAffine *prologue,
                             const Act *dy, Act *dx, float *sums);
// The rest of that norm's backward after conv2d_backward_prologue returned
// 1: dx (rows, C) = the norm's data gradient for dz (through the ReLU) with
// the sums it left.
void batchnorm_backward_from_sums(Backend *backend, const BatchNorm *bn, size_t rows,
                                  const Act *x, const Act *dz, const float *save_mean,
                                  const float *save_inv_std, const float *sums, Act *dx);

// Batch norm fused with the ReLU after it (and the residual add before the
// ReLU, at a residual block's output): y (rows, C) = max(BN(x) + residual, 0),
// residual (rows, C) or NULL. Equals batchnorm_forward, add, relu_forward;
// y aliases neither x nor residual.
void batchnorm_relu_forward(Backend *backend, const BatchNorm *bn, int training, size_t rows,
                            const Act *x, const Act *residual, Act *y, float *save_mean,
                            float *save_inv_std);
// Its backward: dy (rows, C) is dL/dy, masked by the output y > 0 on the
// fly; dx (rows, C) = dL/dx; weight_grad, bias_grad +=; dresidual (rows, C)
// = the masked dy (the residual's gradient) unless NULL, may alias dy.
// y NULL: the norm and ReLU were the next convolution's prologue (never
// stored, conv_batchnorm_statistics); the mask comes from x.
void batchnorm_relu_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                             const Act *y, const Act *dy, const float *save_mean,
                             const float *save_inv_std, Act *dx, Act *dresidual);

// Batch norm fused with the SiLU after it (Ultralytics' Conv): y (rows, C)
// = silu(BN(x)), the norm's output not kept; equals batchnorm_forward then
// silu_forward. y aliases not x.
void batchnorm_silu_forward(Backend *backend, const BatchNorm *bn, int training, size_t rows,
                            const Act *x, Act *y, float *save_mean, float *save_inv_std);
// Its backward from dy (rows, C) = dL/dy: dx (rows, C) = dL/dx; weight_grad,
// bias_grad +=; dz (rows, C) scratch (the gradient reaching the norm). x,
// dy, dz and dx are four buffers.
void batchnorm_silu_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                             const Act *dy, const float *save_mean, const float *save_inv_std,
                             Act *dz, Act *dx);

// ---- a conv unit: conv (or depthwise conv) without bias, BatchNorm, activation --
// Ultralytics' Conv and ShuffleNetV2's units: the norm's output is not kept
// (the backward recomputes what it needs from conv_out).

enum { LAYER_ACT_NONE, LAYER_ACT_SILU, LAYER_ACT_RELU };

typedef struct ConvUnitStep {
    const Conv2d *conv;              // depthwise: weights (1, K, K, C) on the depthwise ops
    const BatchNorm *bn;
    int act;                         // LAYER_ACT_NONE, _SILU or _RELU after the norm
    const ConvPlan *plan;            // a regular conv's plan, or NULL
    const DepthwisePlan *depthwise;  // a depthwise conv's plan, or NULL
    size_t rows;                     // output rows, N OH OW
} ConvUnitStep;

// conv_out (rows, Cout) = conv(x); out = act(BN(conv_out)); mean, inv_std
// (Cout) = the batch statistics of a training forward.
void conv_unit_forward(Backend *backend, const ConvUnitStep *unit, int training, const Act *x,
                       Act *conv_out, Act *out, float *mean, float *inv_std);
// From dy = dL/d out: the conv's and the norm's gradients +=; dx = dL/dx
// unless NULL. x, conv_out, mean, inv_std: the forward's; out: its output
// as the forward left it (the ReLU's mask read from it), or NULL where the
// caller changed it since (the mask then recomputed from conv_out, slower).
// dnorm (SiLU only) and dconv: scratch (rows, Cout), apart from dy and dx.
void conv_unit_backward(Backend *backend, const ConvUnitStep *unit, const Act *x,
                        const Act *conv_out, const Act *out, const float *mean,
                        const float *inv_std, const Act *dy, Act *dnorm, Act *dconv, Act *dx);

// ---- layer norm over the channels of each row (PyTorch's nn.LayerNorm) -------

typedef struct LayerNorm {
    int channels;
    float eps;
    int weight_index, bias_index;
    float *weight, *bias, *weight_grad, *bias_grad;  // (C)
} LayerNorm;

// Declares prefix.weight, prefix.bias (PARAM_NORM: no weight decay).
int layernorm_declare(LayerNorm *ln, ParameterSet *params, const char *prefix, int channels,
                      float eps, ErrorMessage *err);
void layernorm_bind(LayerNorm *ln, const ParameterSet *params);
// PyTorch's init: weight 1, bias 0.
void layernorm_init(Backend *backend, const LayerNorm *ln);
// y (rows, C) = LN(x (rows, C)); mean, inv_std (rows) = for backward. y may not alias x.
void layernorm_forward(Backend *backend, const LayerNorm *ln, size_t rows, const Act *x,
                       Act *y, float *mean, float *inv_std);
// dx (rows, C) = (+= when accumulate); weight_grad, bias_grad +=. x is the
// forward input.
void layernorm_backward(Backend *backend, const LayerNorm *ln, size_t rows, const Act *x,
                        const Act *dy, const float *mean, const float *inv_std, Act *dx,
                        int accumulate);

// ---- elementwise and pooling -------------------------------------------------

// y (n) = max(x, 0); y may alias x.
void relu_forward(Backend *backend, size_t n, const Act *x, Act *y);
// dx (n) = dy * (y > 0); y is the forward output; dx may alias dy.
void relu_backward(Backend *backend, size_t n, const Act *y, const Act *dy, Act *dx);

// y (N, OH, OW, C) = max pool of x (N, H, W, C); argmax (N, OH, OW, C) = for backward
void maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x, Act *y,
                     int32_t *argmax);
// dx (N, H, W, C) = scatter of dy (N, OH, OW, C)
void maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy,
                      const int32_t *argmax, Act *dx);

// y (N, C) = mean of x (N, pixels, C) over pixels (global average pool)
void avgpool_forward(Backend *backend, int batch, int pixels, int channels, const Act *x,
                     Act *y);
// dx (N, pixels, C) = dy (N, C) / pixels
void avgpool_backward(Backend *backend, int batch, int pixels, int channels, const Act *dy,
                      Act *dx);

// ---- linear (fully connected) -------------------------------------------------

typedef struct Linear {
    int in_features, out_features;
    int has_bias;
    int weight_index, bias_index;
    const Act *weight_compute;    // (out, in) as PyTorch, in the compute dtype
    float *weight_grad;           // (out, in)
    float *bias, *bias_grad;      // (out) or NULL
} Linear;

// Declares prefix.weight (PARAM_WEIGHT) and, when has_bias, prefix.bias.
int linear_declare(Linear *linear, ParameterSet *params, const char *prefix, int in_features,
                   int out_features, int has_bias, ErrorMessage *err);
void linear_bind(Linear *linear, const ParameterSet *params);
// PyTorch's default nn.Linear init: weight and bias uniform in
// +-1/sqrt(in_features) (see "Initialisation" below).
int linear_init(Backend *backend, const Linear *linear, const ParameterSet *params, uint64_t seed,
                ErrorMessage *err);
// y (rows, out) = x (rows, in) W^T + b
void linear_forward(Backend *backend, const Linear *linear, int rows, const Act *x, Act *y);
// dx (rows, in) = dy W (skipped when dx is NULL); weight_grad += dy^T x; bias_grad += sum dy.
void linear_backward(Backend *backend, const Linear *linear, int rows, const Act *x,
                     const Act *dy, Act *dx);

#endif
