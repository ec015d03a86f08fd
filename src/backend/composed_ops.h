// Ops that a backend may implement as a composition of its own other ops
// (backend.h): the ref backend's versions, obviously right and the oracle
// of the fused ones, and the cuda backend's until it has fused kernels.
#ifndef LTC_BACKEND_COMPOSED_OPS_H
#define LTC_BACKEND_COMPOSED_OPS_H

#include "backend/backend.h"

// batchnorm_forward_train into y, then silu_forward in place.
void composed_batchnorm_silu_forward_train(Backend *backend, size_t rows, int channels,
                                           const Act *x, const float *gamma, const float *beta,
                                           float momentum, float eps, Act *y, float *save_mean,
                                           float *save_inv_std, float *running_mean,
                                           float *running_var);
// batchnorm_forward_eval into y, then silu_forward in place.
void composed_batchnorm_silu_forward_eval(Backend *backend, size_t rows, int channels,
                                          const Act *x, const float *gamma, const float *beta,
                                          const float *running_mean, const float *running_var,
                                          float eps, Act *y);
// a = batchnorm_forward_apply (the saved statistics) into dz, dz =
// silu_backward(a, dy) in place, then batchnorm_backward of dz into dx.
void composed_batchnorm_silu_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                      const Act *dy, const float *gamma, const float *beta,
                                      const float *save_mean, const float *save_inv_std, Act *dz,
                                      Act *dx, float *dgamma, float *dbeta);

// residual_scale_add_forward into y, then layernorm_forward of y.
void composed_residual_layernorm_forward(Backend *backend, int batch, size_t rows_per_sample,
                                         int channels, const Act *x, const Act *branch,
                                         const float *gamma, const float *sample_scale, Act *y,
                                         const float *ln_gamma, const float *ln_beta, float eps,
                                         Act *norm_out, float *mean, float *inv_std);

#endif
