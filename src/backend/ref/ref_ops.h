// Private to the reference backend: the op functions each ref_*.c file
// implements, gathered into the op table by ref_backend.c. Shapes and the
// `=` / `+=` contract are those of backend.h.
#ifndef LTC_BACKEND_REF_OPS_H
#define LTC_BACKEND_REF_OPS_H

#include "backend/backend.h"

// Rounds x (n) in place to the backend's compute dtype (nothing for fp32):
// every ref op that writes an Act calls it on what it wrote, once.
void ref_round_acts(const Backend *backend, Act *x, size_t n);
// One value rounded so (x itself in fp32).
float ref_round_act(const Backend *backend, float x);

// ---- ref_conv.c ----
ConvPlan *ref_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err);
void ref_conv2d_plan_free(Backend *backend, ConvPlan *plan);
void ref_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x, const Act *w,
                        Act *y);
void ref_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy,
                              const Act *w, Act *dx);
void ref_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x,
                                 const Act *dy, float *dw);

// ---- ref_norm.c ----
void ref_batchnorm_forward_train_f32(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 float *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var);
void ref_batchnorm_forward_train(Backend *backend, size_t rows, int channels, const Act *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 Act *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var);
void ref_batchnorm_forward_eval(Backend *backend, size_t rows, int channels, const Act *x,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, float eps, Act *y);
void ref_batchnorm_backward_f32(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, float *dx, float *dgamma, float *dbeta);
void ref_batchnorm_backward(Backend *backend, size_t rows, int channels, const Act *x,
                            const Act *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, Act *dx, float *dgamma, float *dbeta);
void ref_batchnorm_relu_forward_train(Backend *backend, size_t rows, int channels,
                                      const Act *x, const Act *residual, const float *gamma,
                                      const float *beta, float momentum, float eps, Act *y,
                                      float *save_mean, float *save_inv_std, float *running_mean,
                                      float *running_var);
void ref_batchnorm_relu_forward_eval(Backend *backend, size_t rows, int channels,
                                     const Act *x, const Act *residual, const float *gamma,
                                     const float *beta, const float *running_mean,
                                     const float *running_var, float eps, Act *y);
void ref_batchnorm_relu_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                 const Act *y, const Act *dy, const float *gamma,
                                 const float *beta, const float *save_mean,
                                 const float *save_inv_std, Act *dx, float *dgamma, float *dbeta,
                                 Act *dresidual);
// (rows, C) = fmaf(x, scale, shift) with a NormAffine's coefficients
// (backend.h), in a new allocation (the caller frees it; out of memory
// ends the process): the input of a convolution prologue's ReLU, whose sign
// is batchnorm_relu_backward's mask when the ReLU's output was never
// stored. Shared with the cpu backend.
float *ref_prologue_relu_input(const Backend *backend, size_t rows, int channels,
                               const float *x, const float *gamma, const float *beta,
                               const float *mean, const float *inv_std);
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
void ref_batchnorm_centered_squares(Backend *backend, size_t rows, int channels, const Act *x,
                                    const float *mean, float *squares);
void ref_batchnorm_finish_statistics(Backend *backend, int channels, size_t total_rows,
                                     float momentum, float eps, const float *mean,
                                     float *squares_to_inv_std, float *running_mean,
                                     float *running_var);
void ref_batchnorm_forward_apply(Backend *backend, size_t rows, int channels, const Act *x,
                                 const Act *residual, int relu, const float *gamma,
                                 const float *beta, const float *mean, const float *inv_std,
                                 Act *y);
void ref_batchnorm_backward_reduce(Backend *backend, size_t rows, int channels, const Act *x,
                                   const Act *relu_out, const Act *dy, Act *dz_out,
                                   const float *mean, const float *inv_std, float *dgamma,
                                   float *dbeta, float *sums);
void ref_batchnorm_backward_apply(Backend *backend, size_t rows, size_t total_rows,
                                  int channels, const Act *x, const Act *relu_out,
                                  const Act *dy, const float *gamma, const float *mean,
                                  const float *inv_std, const float *sums, Act *dx);

// ---- ref_pool.c ----
void ref_maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x, Act *y,
                         int32_t *argmax);
void ref_maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy,
                          const int32_t *argmax, Act *dx);
void ref_avgpool_forward(Backend *backend, int batch, int pixels, int channels, const Act *x,
                         Act *y);
void ref_avgpool_backward(Backend *backend, int batch, int pixels, int channels, const Act *dy,
                          Act *dx);

// ---- ref_linear.c ----
void ref_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
              float alpha, const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc);
void ref_bias_add_f32(Backend *backend, size_t rows, int channels, const float *bias, float *y);
void ref_bias_add(Backend *backend, size_t rows, int channels, const float *bias, Act *y);
void ref_bias_backward(Backend *backend, size_t rows, int channels, const Act *dy,
                       float *dbias);
void ref_linear_forward(Backend *backend, int rows, int in, int out, const Act *x, const Act *w,
                        const float *bias, Act *y);
void ref_linear_backward_data(Backend *backend, int rows, int in, int out, const Act *dy,
                              const Act *w, Act *dx);
void ref_linear_backward_weights(Backend *backend, int rows, int in, int out, const Act *x,
                                 const Act *dy, float *dw, float *dbias);

// ---- ref_update.c ----
void ref_sgd_update(Backend *backend, size_t n, float *param, const float *grad,
                    const float *gate, float *momentum_buffer, float lr, float momentum,
                    float weight_decay, int nesterov, int first_step);
void ref_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                      const float *gate, float *m, float *v, float lr, double beta1, double beta2,
                      float eps, float weight_decay, const float *step);
void ref_ema_update(Backend *backend, size_t n, float *target, const float *source,
                    float momentum);

// ---- ref_transformer.c ----
void ref_layernorm_forward(Backend *backend, size_t rows, int channels, const Act *x,
                           const float *gamma, const float *beta, float eps, Act *y,
                           float *mean, float *inv_std);
void ref_layernorm_backward(Backend *backend, size_t rows, int channels, const Act *x,
                            const Act *dy, const float *gamma, const float *mean,
                            const float *inv_std, Act *dx, int accumulate, float *dgamma,
                            float *dbeta);
void ref_vit_tokens_forward(Backend *backend, int batch, int registers, int patches,
                            int channels, const Act *patch_embeddings, const float *cls,
                            const float *cls_pos, const float *register_tokens,
                            const float *patch_pos, Act *tokens);
void ref_vit_tokens_backward(Backend *backend, int batch, int registers, int patches,
                             int channels, const Act *dtokens, Act *dpatch_embeddings,
                             float *dcls, float *dcls_pos, float *dregister_tokens,
                             float *dpatch_pos);
void ref_residual_scale_add_forward(Backend *backend, int batch, size_t rows_per_sample,
                                    int channels, const Act *x, const Act *branch,
                                    const float *gamma, const float *sample_scale, Act *y);
void ref_residual_scale_add_backward(Backend *backend, int batch, size_t rows_per_sample,
                                     int channels, const Act *branch, const Act *dy,
                                     const float *gamma, const float *sample_scale,
                                     Act *dbranch, float *dgamma);
void ref_token_pool_forward(Backend *backend, int batch, int tokens, int channels, int first,
                            int count, const Act *x, Act *y);
void ref_token_pool_backward(Backend *backend, int batch, int tokens, int channels, int first,
                             int count, const Act *dy, Act *dx);

// ---- ref_attention.c ----
AttentionPlan *ref_attention_plan(Backend *backend, const AttentionShape *shape,
                                  ErrorMessage *err);
void ref_attention_plan_free(Backend *backend, AttentionPlan *plan);
void ref_attention_forward(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                           float scale, Act *out, float *lse);
void ref_attention_backward(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                            const Act *out, const Act *dout, const float *lse, float scale,
                            Act *dqkv);

// ---- ref_resize.c ----
void ref_resize_bilinear_forward(Backend *backend, int batch, int in_height, int in_width,
                                 int channels, const Act *x, int out_height, int out_width,
                                 Act *y);
void ref_resize_bilinear_backward(Backend *backend, int batch, int in_height, int in_width,
                                  int channels, const Act *dy, int out_height, int out_width,
                                  Act *dx);
void ref_mixup(Backend *backend, int batch, size_t sample, const Act *x,
               const int32_t *permutation, float lambda, Act *y);
void ref_copy_2d(Backend *backend, size_t rows, size_t cols, const Act *x, size_t x_stride,
                 Act *y, size_t y_stride);
void ref_channel_shuffle(Backend *backend, size_t rows, int channels, int groups, const Act *x,
                         Act *y);
// ---- ref_dinov2.c ----
void ref_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y);
void ref_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x,
                             const float *mask, const float *token, Act *y);
void ref_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                              const Act *dy, Act *dx, float *dtoken);
void ref_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const Act *x, Act *y);
void ref_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const Act *dy, Act *dx);
void ref_combine_rows(Backend *backend, int rows, int channels, const int32_t *row_start,
                      const int32_t *index, const float *weight, const Act *x, Act *y);
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
void ref_cka_loss(Backend *backend, int images, int tokens, int dim, const float *student,
                  const float *teacher, const float *image_weight, float *loss,
                  float *dstudent);
// ---- ref_depthwise.c ----
DepthwisePlan *ref_depthwise_plan(Backend *backend, const DepthwiseShape *shape,
                                  ErrorMessage *err);
void ref_depthwise_plan_free(Backend *backend, DepthwisePlan *plan);
void ref_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x,
                           const Act *w, const float *bias, Act *y);
void ref_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy,
                                 const Act *w, Act *dx);
void ref_depthwise_backward_weights(Backend *backend, const DepthwisePlan *plan, const Act *x,
                                    const Act *dy, float *dw, float *dbias);
// ---- ref_dinov3.c ----
void ref_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                      int prefix, const float *sin, const float *cos, Act *qkv);
void ref_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *dqkv);
void ref_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x, Act *y);
void ref_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x,
                         const Act *dy, Act *dx);

// ---- ref_yolo.c ----
void ref_silu_forward(Backend *backend, size_t n, const Act *x, Act *y);
void ref_silu_backward(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx);

#endif
