// Private to the reference backend: the op functions each ref_*.c file
// implements, gathered into the op table by ref_backend.c. Shapes and the
// `=` / `+=` contract are those of backend.h.
#ifndef LTC_BACKEND_REF_OPS_H
#define LTC_BACKEND_REF_OPS_H

#include "backend/backend.h"

// ---- ref_conv.c ----
ConvPlan *ref_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err);
void ref_conv2d_plan_free(Backend *backend, ConvPlan *plan);
void ref_conv2d_forward(Backend *backend, const ConvPlan *plan, const float *x, const float *w,
                        float *y);
void ref_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const float *dy,
                              const float *w, float *dx);
void ref_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const float *x,
                                 const float *dy, float *dw);

// ---- ref_norm.c ----
void ref_batchnorm_forward_train(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 float *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var);
void ref_batchnorm_forward_eval(Backend *backend, size_t rows, int channels, const float *x,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, float eps, float *y);
void ref_batchnorm_backward(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, float *dx, float *dgamma, float *dbeta);
void ref_batchnorm_relu_forward_train(Backend *backend, size_t rows, int channels,
                                      const float *x, const float *residual, const float *gamma,
                                      const float *beta, float momentum, float eps, float *y,
                                      float *save_mean, float *save_inv_std, float *running_mean,
                                      float *running_var);
void ref_batchnorm_relu_forward_eval(Backend *backend, size_t rows, int channels,
                                     const float *x, const float *residual, const float *gamma,
                                     const float *beta, const float *running_mean,
                                     const float *running_var, float eps, float *y);
void ref_batchnorm_relu_backward(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *y, const float *dy, const float *gamma,
                                 const float *save_mean, const float *save_inv_std, float *dx,
                                 float *dgamma, float *dbeta, float *dresidual);
void ref_l2_normalize_forward(Backend *backend, int rows, int dim, const float *x, float eps,
                              float *y, float *norm);
void ref_l2_normalize_backward(Backend *backend, int rows, int dim, const float *y,
                               const float *norm, const float *dy, float eps, float *dx);
void ref_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                         float *y);
void ref_log_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                             float *y);
void ref_softmax_backward(Backend *backend, int rows, int dim, const float *y, const float *dy,
                          float scale, float *dx);
void ref_log_softmax_backward(Backend *backend, int rows, int dim, const float *y,
                              const float *dy, float scale, float *dx);

// ---- ref_norm_sync.c ----
void ref_batchnorm_centered_squares(Backend *backend, size_t rows, int channels, const float *x,
                                    const float *mean, float *squares);
void ref_batchnorm_finish_statistics(Backend *backend, int channels, size_t total_rows,
                                     float momentum, float eps, const float *mean,
                                     float *squares_to_inv_std, float *running_mean,
                                     float *running_var);
void ref_batchnorm_forward_apply(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *residual, int relu, const float *gamma,
                                 const float *beta, const float *mean, const float *inv_std,
                                 float *y);
void ref_batchnorm_backward_reduce(Backend *backend, size_t rows, int channels, const float *x,
                                   const float *relu_out, const float *dy, float *dz_out,
                                   const float *mean, const float *inv_std, float *dgamma,
                                   float *dbeta, float *sums);
void ref_batchnorm_backward_apply(Backend *backend, size_t rows, size_t total_rows,
                                  int channels, const float *x, const float *relu_out,
                                  const float *dy, const float *gamma, const float *mean,
                                  const float *inv_std, const float *sums, float *dx);

// ---- ref_pool.c ----
void ref_maxpool_forward(Backend *backend, const PoolShape *shape, const float *x, float *y,
                         int32_t *argmax);
void ref_maxpool_backward(Backend *backend, const PoolShape *shape, const float *dy,
                          const int32_t *argmax, float *dx);
void ref_avgpool_forward(Backend *backend, int batch, int pixels, int channels, const float *x,
                         float *y);
void ref_avgpool_backward(Backend *backend, int batch, int pixels, int channels, const float *dy,
                          float *dx);

// ---- ref_linear.c ----
void ref_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
              float alpha, const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc);
void ref_bias_add(Backend *backend, size_t rows, int channels, const float *bias, float *y);
void ref_bias_backward(Backend *backend, size_t rows, int channels, const float *dy,
                       float *dbias);

// ---- ref_update.c ----
void ref_sgd_update(Backend *backend, size_t n, float *param, const float *grad,
                    const float *gate, float *momentum_buffer, float lr, float momentum,
                    float weight_decay, int nesterov, int first_step);
void ref_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                      const float *gate, float *m, float *v, float lr, float beta1, float beta2,
                      float eps, float weight_decay, const float *step);
void ref_ema_update(Backend *backend, size_t n, float *target, const float *source,
                    float momentum);

// ---- ref_transformer.c ----
void ref_layernorm_forward(Backend *backend, size_t rows, int channels, const float *x,
                           const float *gamma, const float *beta, float eps, float *y,
                           float *mean, float *inv_std);
void ref_layernorm_backward(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *mean,
                            const float *inv_std, float *dx, float *dgamma, float *dbeta);
void ref_vit_tokens_forward(Backend *backend, int batch, int registers, int patches,
                            int channels, const float *patch_embeddings, const float *cls,
                            const float *cls_pos, const float *register_tokens,
                            const float *patch_pos, float *tokens);
void ref_vit_tokens_backward(Backend *backend, int batch, int registers, int patches,
                             int channels, const float *dtokens, float *dpatch_embeddings,
                             float *dcls, float *dcls_pos, float *dregister_tokens,
                             float *dpatch_pos);
void ref_residual_scale_add_forward(Backend *backend, int batch, size_t rows_per_sample,
                                    int channels, const float *x, const float *branch,
                                    const float *gamma, const float *sample_scale, float *y);
void ref_residual_scale_add_backward(Backend *backend, int batch, size_t rows_per_sample,
                                     int channels, const float *branch, const float *dy,
                                     const float *gamma, const float *sample_scale,
                                     float *dbranch, float *dgamma);
void ref_token_pool_forward(Backend *backend, int batch, int tokens, int channels, int first,
                            int count, const float *x, float *y);
void ref_token_pool_backward(Backend *backend, int batch, int tokens, int channels, int first,
                             int count, const float *dy, float *dx);

// ---- ref_attention.c ----
AttentionPlan *ref_attention_plan(Backend *backend, const AttentionShape *shape,
                                  ErrorMessage *err);
void ref_attention_plan_free(Backend *backend, AttentionPlan *plan);
void ref_attention_forward(Backend *backend, const AttentionPlan *plan, const float *qkv,
                           float scale, float *out, float *lse);
void ref_attention_backward(Backend *backend, const AttentionPlan *plan, const float *qkv,
                            const float *out, const float *dout, const float *lse, float scale,
                            float *dqkv);

// ---- ref_resize.c ----
void ref_resize_bilinear_forward(Backend *backend, int batch, int in_height, int in_width,
                                 int channels, const float *x, int out_height, int out_width,
                                 float *y);
void ref_resize_bilinear_backward(Backend *backend, int batch, int in_height, int in_width,
                                  int channels, const float *dy, int out_height, int out_width,
                                  float *dx);
void ref_mixup(Backend *backend, int batch, size_t sample, const float *x,
               const int32_t *permutation, float lambda, float *y);
void ref_copy_2d(Backend *backend, size_t rows, size_t cols, const float *x, size_t x_stride,
                 float *y, size_t y_stride);
// ---- ref_dinov2.c ----
void ref_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y);
void ref_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const float *x, float *y);
void ref_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const float *dy, float *dx);
void ref_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max);
void ref_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                      const float *max, float *q);
void ref_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                            float *q);
void ref_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                       int32_t *neighbor, float *distance, float *log_distance);
void ref_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                        const int32_t *neighbor, const float *distance, float eps, float dlog,
                        float *dy);
// ---- ref_dinov3.c ----
void ref_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                      int prefix, const float *sin, const float *cos, float *qkv);
void ref_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, float *dqkv);
void ref_swiglu_forward(Backend *backend, size_t rows, int hidden, const float *x, float *y);
void ref_swiglu_backward(Backend *backend, size_t rows, int hidden, const float *x,
                         const float *dy, float *dx);

#endif
