// Private to the cpu backend: its state, the op functions each cpu_*.c file
// implements (gathered into the op table by cpu_backend.c), and the OpenMP
// helpers. Shapes and the `=` / `+=` contract are those of backend.h.
//
// Threading: oneDNN (Debian's build) runs on GNU OpenMP, so the memory-bound
// ops here use OpenMP too: one thread team shared by both, never two pools
// competing for the cores. Each parallel region asks for backend->threads.
#ifndef LTC_BACKEND_CPU_INTERNAL_H
#define LTC_BACKEND_CPU_INTERNAL_H

#include <oneapi/dnnl/dnnl.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/backend.h"

// Channels per batch-norm reduction (cpu_batchnorm.c): the size of each
// thread's partial-result vectors. Wider matrices go in groups of columns.
#define CPU_NORM_GROUP 1024

typedef struct CpuState {
    dnnl_engine_t engine;
    dnnl_stream_t stream;
    // Batch-norm partial results: per thread two vectors of CPU_NORM_GROUP
    // doubles, made with the backend (ops allocate nothing). Ops are called
    // from one host thread at a time (as the oneDNN stream requires).
    double *norm_partials;
    int norm_partial_threads;  // threads the scratch has room for
} CpuState;

// Below this many elements a parallel region costs more than it saves
// (thread wake-up is a few microseconds; one core streams ~4 floats/ns).
#define CPU_PARALLEL_MIN 16384

// Threads for a parallel region over `work` elements: backend->threads, or
// 1 when the work is too small to be worth waking the others.
static inline int cpu_team(const Backend *backend, size_t work) {
    return work >= CPU_PARALLEL_MIN ? backend->threads : 1;
}

// The calling thread's index in its parallel region, and the region's
// threads (fewer than asked for when OpenMP gives fewer).
static inline int cpu_thread_index(void) {
#ifdef _OPENMP
    return omp_get_thread_num();
#else
    return 0;
#endif
}
static inline int cpu_thread_count(void) {
#ifdef _OPENMP
    return omp_get_num_threads();
#else
    return 1;
#endif
}

// Makes the calling thread's next OpenMP regions (ours and oneDNN's) use
// backend->threads; cheap, so every heavy op calls it first.
void cpu_set_threads(const Backend *backend);

// Channel block for ops that reduce over rows of a (rows, C) matrix: threads
// split the channels, each walks every row over its contiguous block.
#define CPU_CHANNEL_BLOCK 64
int cpu_channel_block(const Backend *backend, int channels);

// ---- cpu_dnnl.c: what the oneDNN plans share ----
// 64-byte aligned memory of at least `bytes` (64 when 0); free() it.
void *cpu_aligned_buffer(size_t bytes);
// 0 when status is dnnl_success, else -1 and err = "LABEL: oneDNN CALL failed (status N)".
int cpu_dnnl_check(dnnl_status_t status, const char *label, const char *call, ErrorMessage *err);
// cpu_dnnl_check that jumps to the function's `fail:` label, with the file's DNNL_LABEL.
#define DNNL_TRY(call, what)                                     \
    do {                                                         \
        if (cpu_dnnl_check((call), DNNL_LABEL, what, err)) goto fail; \
    } while (0)
size_t cpu_dnnl_scratchpad_size(const_dnnl_primitive_desc_t pd);
// A plan's scratchpad (user mode): *buffer (free() it) and its memory *memory.
int cpu_dnnl_scratchpad(const Backend *backend, size_t bytes, void **buffer,
                        dnnl_memory_t *memory, ErrorMessage *err);
// Runs a primitive on the backend's stream (its status is not kept: valid
// plans and pointers cannot make it fail).
void cpu_dnnl_execute(Backend *backend, dnnl_primitive_t primitive, int count,
                      const dnnl_exec_arg_t *args);

// ---- cpu_conv.c ----
ConvPlan *cpu_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err);
void cpu_conv2d_plan_free(Backend *backend, ConvPlan *plan);
void cpu_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x, const Act *w,
                        Act *y);
void cpu_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy,
                              const Act *w, Act *dx);
void cpu_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x,
                                 const Act *dy, float *dw);
// Name of the oneDNN implementation chosen for one direction (0 forward,
// 1 backward data, 2 backward weights), for benchmarks and logs.
const char *cpu_conv2d_plan_impl(const ConvPlan *plan, int direction);

// ---- cpu_depthwise.c ----
DepthwisePlan *cpu_depthwise_plan(Backend *backend, const DepthwiseShape *shape,
                                  ErrorMessage *err);
void cpu_depthwise_plan_free(Backend *backend, DepthwisePlan *plan);
void cpu_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x,
                           const Act *w, const float *bias, Act *y);
void cpu_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy,
                                 const Act *w, Act *dx);
void cpu_depthwise_backward_weights(Backend *backend, const DepthwisePlan *plan, const Act *x,
                                    const Act *dy, float *dw, float *dbias);
// What runs each direction (0 forward, 1 backward data, 2 backward
// weights): a oneDNN kernel's name or ours, for benchmarks.
const char *cpu_depthwise_plan_impl(const DepthwisePlan *plan, int direction);

// ---- cpu_depthwise_dnnl.c: forward and backward data on oneDNN ----
typedef struct DepthwiseDnnl DepthwiseDnnl;
DepthwiseDnnl *cpu_depthwise_dnnl_make(Backend *backend, const DepthwiseShape *shape,
                                       ErrorMessage *err);
void cpu_depthwise_dnnl_free(DepthwiseDnnl *dnnl);
const char *cpu_depthwise_dnnl_impl(const DepthwiseDnnl *dnnl, int direction);
void cpu_depthwise_dnnl_forward(Backend *backend, const DepthwiseDnnl *dnnl, const float *x,
                                const float *w, const float *bias, float *y);
void cpu_depthwise_dnnl_backward_data(Backend *backend, const DepthwiseDnnl *dnnl,
                                      const float *dy, const float *w, float *dx);

// ---- cpu_linear_plan.c: planned linear layers on oneDNN's matmul ----
LinearPlan *cpu_linear_plan(Backend *backend, int rows, int in, int out, int gelu,
                            ErrorMessage *err);
void cpu_linear_plan_free(Backend *backend, LinearPlan *plan);
void cpu_linear_planned_forward(Backend *backend, const LinearPlan *plan, const Act *x,
                                const Act *w, const float *bias, Act *y);

// ---- cpu_batchnorm.c ----
void cpu_batchnorm_forward_train_f32(Backend *backend, size_t rows, int channels, const float *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 float *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var);
void cpu_batchnorm_forward_train(Backend *backend, size_t rows, int channels, const Act *x,
                                 const float *gamma, const float *beta, float momentum, float eps,
                                 Act *y, float *save_mean, float *save_inv_std,
                                 float *running_mean, float *running_var);
void cpu_batchnorm_forward_eval(Backend *backend, size_t rows, int channels, const Act *x,
                                const float *gamma, const float *beta, const float *running_mean,
                                const float *running_var, float eps, Act *y);
void cpu_batchnorm_backward_f32(Backend *backend, size_t rows, int channels, const float *x,
                            const float *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, float *dx, float *dgamma, float *dbeta);
void cpu_batchnorm_backward(Backend *backend, size_t rows, int channels, const Act *x,
                            const Act *dy, const float *gamma, const float *save_mean,
                            const float *save_inv_std, Act *dx, float *dgamma, float *dbeta);
void cpu_batchnorm_relu_forward_train(Backend *backend, size_t rows, int channels,
                                      const Act *x, const Act *residual, const float *gamma,
                                      const float *beta, float momentum, float eps, Act *y,
                                      float *save_mean, float *save_inv_std, float *running_mean,
                                      float *running_var);
void cpu_batchnorm_relu_forward_eval(Backend *backend, size_t rows, int channels,
                                     const Act *x, const Act *residual, const float *gamma,
                                     const float *beta, const float *running_mean,
                                     const float *running_var, float eps, Act *y);
void cpu_batchnorm_silu_forward_train(Backend *backend, size_t rows, int channels, const Act *x,
                                      const float *gamma, const float *beta, float momentum,
                                      float eps, Act *y, float *save_mean, float *save_inv_std,
                                      float *running_mean, float *running_var);
void cpu_batchnorm_silu_forward_eval(Backend *backend, size_t rows, int channels, const Act *x,
                                     const float *gamma, const float *beta,
                                     const float *running_mean, const float *running_var,
                                     float eps, Act *y);
void cpu_batchnorm_silu_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                 const Act *dy, const float *gamma, const float *beta,
                                 const float *save_mean, const float *save_inv_std, Act *dz,
                                 Act *dx, float *dgamma, float *dbeta);
void cpu_batchnorm_forward_apply(Backend *backend, size_t rows, int channels, const Act *x,
                                 const Act *residual, int relu, const float *gamma,
                                 const float *beta, const float *mean, const float *inv_std,
                                 Act *y);
void cpu_batchnorm_backward_reduce(Backend *backend, size_t rows, int channels, const Act *x,
                                   const Act *relu_out, const Act *dy, Act *dz_out,
                                   const float *mean, const float *inv_std, float *dgamma,
                                   float *dbeta, float *sums);
void cpu_batchnorm_backward_apply(Backend *backend, size_t rows, size_t total_rows,
                                  int channels, const Act *x, const Act *relu_out,
                                  const Act *dy, const float *gamma, const float *mean,
                                  const float *inv_std, const float *sums, Act *dx);
void cpu_batchnorm_relu_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                 const Act *y, const Act *dy, const float *gamma,
                                 const float *beta, const float *save_mean,
                                 const float *save_inv_std, Act *dx, float *dgamma, float *dbeta,
                                 Act *dresidual);

// ---- cpu_norm.c ----
void cpu_bias_backward(Backend *backend, size_t rows, int channels, const Act *dy,
                       float *dbias);
void cpu_column_sum(Backend *backend, size_t rows, int channels, const float *x, float *y);
void cpu_avgpool_forward(Backend *backend, int batch, int pixels, int channels, const Act *x,
                         Act *y);
void cpu_batchnorm_centered_squares(Backend *backend, size_t rows, int channels, const Act *x,
                                    const float *mean, float *squares);

// ---- cpu_rows.c ----
void cpu_l2_normalize_forward(Backend *backend, int rows, int dim, const float *x, float eps,
                              float *y, float *norm);
void cpu_l2_normalize_backward(Backend *backend, int rows, int dim, const float *y,
                               const float *norm, const float *dy, float eps, float *dx);
void cpu_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                         float *y);
void cpu_log_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                             float *y);
void cpu_softmax_backward(Backend *backend, int rows, int dim, const float *y, const float *dy,
                          float scale, float *dx);
void cpu_log_softmax_backward(Backend *backend, int rows, int dim, const float *y,
                              const float *dy, float scale, float *dx);
void cpu_combine_rows(Backend *backend, int rows, int channels, const int32_t *row_start,
                      const int32_t *index, const float *weight, const Act *x, Act *y);
void cpu_maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x, Act *y,
                         int32_t *argmax);
void cpu_maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy,
                          const int32_t *argmax, Act *dx);

// ---- cpu_elementwise.c ----
void cpu_fill(Backend *backend, float *x, float value, size_t n);
void cpu_relu_forward_f32(Backend *backend, size_t n, const float *x, float *y);
void cpu_relu_forward(Backend *backend, size_t n, const Act *x, Act *y);
void cpu_relu_backward_f32(Backend *backend, size_t n, const float *y, const float *dy, float *dx);
void cpu_relu_backward(Backend *backend, size_t n, const Act *y, const Act *dy, Act *dx);
void cpu_gelu_forward(Backend *backend, size_t n, const Act *x, Act *y);
void cpu_gelu_backward(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx);
void cpu_add(Backend *backend, size_t n, const float *a, const float *b, float *y);
void cpu_axpby(Backend *backend, size_t n, float alpha, const float *x, float beta, float *y);
void cpu_mul(Backend *backend, size_t n, const float *a, const float *b, float *y);
void cpu_avgpool_backward(Backend *backend, int batch, int pixels, int channels, const Act *dy,
                          Act *dx);
void cpu_bias_add_f32(Backend *backend, size_t rows, int channels, const float *bias, float *y);
void cpu_bias_add(Backend *backend, size_t rows, int channels, const float *bias, Act *y);
void cpu_sum(Backend *backend, size_t n, const float *x, float *result);
void cpu_sum_squares(Backend *backend, size_t n, const float *x, float *result);
void cpu_dot(Backend *backend, size_t n, const float *a, const float *b, float *result);
void cpu_count_nonfinite(Backend *backend, size_t n, const float *x, float *result);
void cpu_sgd_update(Backend *backend, size_t n, float *param, const float *grad,
                    const float *gate, float *momentum_buffer, float lr, float momentum,
                    float weight_decay, int nesterov, int first_step);
void cpu_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                      const float *gate, float *m, float *v, float lr, double beta1, double beta2,
                      float eps, float weight_decay, const float *step);
void cpu_ema_update(Backend *backend, size_t n, float *target, const float *source,
                    float momentum);
void cpu_normalize_f32(Backend *backend, size_t pixels, int channels, const float *x,
                       const float *mean, const float *std, Act *y);
void cpu_normalize_u8(Backend *backend, size_t pixels, const uint8_t *x, const float mean[3],
                      const float std[3], Act *y);

// ---- cpu_transformer.c ----
void cpu_layernorm_forward(Backend *backend, size_t rows, int channels, const Act *x,
                           const float *gamma, const float *beta, float eps, Act *y,
                           float *mean, float *inv_std);
void cpu_layernorm_backward(Backend *backend, size_t rows, int channels, const Act *x,
                            const Act *dy, const float *gamma, const float *mean,
                            const float *inv_std, Act *dx, int accumulate, float *dgamma,
                            float *dbeta);
void cpu_vit_tokens_forward(Backend *backend, int batch, int registers, int patches,
                            int channels, const Act *patch_embeddings, const float *cls,
                            const float *cls_pos, const float *register_tokens,
                            const float *patch_pos, Act *tokens);
void cpu_vit_tokens_backward(Backend *backend, int batch, int registers, int patches,
                             int channels, const Act *dtokens, Act *dpatch_embeddings,
                             float *dcls, float *dcls_pos, float *dregister_tokens,
                             float *dpatch_pos);
void cpu_residual_scale_add_forward(Backend *backend, int batch, size_t rows_per_sample,
                                    int channels, const Act *x, const Act *branch,
                                    const float *gamma, const float *sample_scale, Act *y);
void cpu_residual_scale_add_backward(Backend *backend, int batch, size_t rows_per_sample,
                                     int channels, const Act *branch, const Act *dy,
                                     const float *gamma, const float *sample_scale,
                                     Act *dbranch, float *dgamma);
void cpu_token_pool_forward(Backend *backend, int batch, int tokens, int channels, int first,
                            int count, const Act *x, Act *y);
void cpu_token_pool_backward(Backend *backend, int batch, int tokens, int channels, int first,
                             int count, const Act *dy, Act *dx);

// ---- cpu_attention.c ----
AttentionPlan *cpu_attention_plan(Backend *backend, const AttentionShape *shape,
                                  ErrorMessage *err);
void cpu_attention_plan_free(Backend *backend, AttentionPlan *plan);
void cpu_attention_forward(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                           float scale, Act *out, float *lse);
void cpu_attention_backward(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                            const Act *out, const Act *dout, const float *lse, float scale,
                            Act *dqkv);

// ---- cpu_resize.c ----
void cpu_resize_bilinear_forward(Backend *backend, int batch, int in_height, int in_width,
                                 int channels, const Act *x, int out_height, int out_width,
                                 Act *y);
void cpu_resize_bilinear_backward(Backend *backend, int batch, int in_height, int in_width,
                                  int channels, const Act *dy, int out_height, int out_width,
                                  Act *dx);
void cpu_mixup(Backend *backend, int batch, size_t sample, const Act *x,
               const int32_t *permutation, float lambda, Act *y);
void cpu_copy_2d(Backend *backend, size_t rows, size_t cols, const Act *x, size_t x_stride,
                 Act *y, size_t y_stride);
void cpu_channel_shuffle(Backend *backend, size_t rows, int channels, int groups, const Act *x,
                         Act *y);
// ---- cpu_dinov2.c ----
void cpu_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x,
                             const float *mask, const float *token, Act *y);
void cpu_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                              const Act *dy, Act *dx, float *dtoken);
void cpu_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y);
void cpu_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const Act *x, Act *y);
void cpu_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const Act *dy, Act *dx);
void cpu_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max);
void cpu_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                      const float *max, float *q);
void cpu_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                            float *q);
void cpu_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                       int32_t *neighbor, float *distance, float *log_distance);
void cpu_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                        const int32_t *neighbor, const float *distance, float eps, float dlog,
                        float *dy);
void cpu_cka_loss(Backend *backend, int images, int tokens, int dim, const float *student,
                  const float *teacher, const float *image_weight, float *loss,
                  float *dstudent);
// ---- cpu_dinov3.c ----
void cpu_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                      int prefix, const float *sin, const float *cos, Act *qkv);
void cpu_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *dqkv);
void cpu_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x, Act *y);
void cpu_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x,
                         const Act *dy, Act *dx);
// ---- cpu_yolo.c ----
// One thread's SiLU over n floats (AVX2 where it runs): y = silu(x), dx =
// dy silu'(x); in place allowed (element by element).
void cpu_silu_row(const float *x, float *y, size_t n);
void cpu_silu_backward_row(const float *x, const float *dy, float *dx, size_t n);
void cpu_silu_forward(Backend *backend, size_t n, const Act *x, Act *y);
void cpu_silu_backward(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx);

#endif
