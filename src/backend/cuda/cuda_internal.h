// Private to the cuda backend: its state, the one check-and-report path for
// CUDA, cuBLAS and cuDNN calls, and the kernel launchers the .cu files
// implement (called from the C files; every launch goes on the backend's
// stream, so ops run in order and nothing waits for the device until a
// download or synchronize). Shapes and the `=` / `+=` contract are those of
// backend.h.
//
// Reductions are deterministic: blocks write partial results into the
// backend's scratch, a second pass combines them in a fixed order (no float
// atomics), so a run gives the same bits every time.
#ifndef LTC_BACKEND_CUDA_INTERNAL_H
#define LTC_BACKEND_CUDA_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include <cuda_runtime_api.h>

#ifdef __cplusplus
extern "C" {
#endif

// C declarations also for the .cu files (which call attention_shape_make,
// error_set).
#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"

// Doubles of reduction scratch (partials of the two-pass reductions): room
// for CUDA_MAX_ROW_BLOCKS partials of two sums per column and two results
// per column, for up to CUDA_MAX_COLUMNS columns at a time (column sums of
// wider matrices go in chunks); narrower matrices take more row blocks, as
// many as fit (cuda_row_blocks).
#define CUDA_MAX_ROW_BLOCKS 64
#define CUDA_MAX_COLUMNS 65536
#define CUDA_SCRATCH_DOUBLES ((size_t)2 * (CUDA_MAX_ROW_BLOCKS + 1) * CUDA_MAX_COLUMNS)

typedef struct CudaBlasLt CudaBlasLt;

// The per-step parameter block (cuda_step_params.c): slots a half.
#define CUDA_STEP_PARAM_SLOTS 4096
typedef struct CudaStepParams {
    float *host;     // page-locked, 2 halves of CUDA_STEP_PARAM_SLOTS, fixed address
    float *device;   // the same layout on the device
    cudaEvent_t copied[2];  // behind the last copy out of each half
    int half, used;  // the half being filled and its slots taken
} CudaStepParams;

// The training step as CUDA graphs (cuda_step_graph.c): one a kind of step.
#define CUDA_STEP_GRAPHS 32
typedef struct CudaStepGraph {
    uint64_t key;       // the kind of step (backend.h step_graph_begin) and its block half
    long steps;         // steps of the kind begun (the first ran op by op)
    void *exec;         // cudaGraphExec_t, from its second step on
    long queue_points;  // the queue points its capture passed
} CudaStepGraph;

// Device memory taken through the backend's alloc op (cuda_memory.c): each
// pointer's size by address (a tsearch tree), and the bytes live now and at
// most.
typedef struct CudaAllocations {
    void *tree;
    size_t live, peak;  // bytes
} CudaAllocations;

typedef struct CudaState {
    int device;
    cudaStream_t stream;
    void *cublas;          // cublasHandle_t
    CudaBlasLt *blas_lt;   // cuBLASLt's handle, workspace and plans (cuda_blas_lt.c)
    // LTC_CUDA_LINEAR_BIAS=separate (read when the backend is made): every
    // 16-bit linear layer with a bias takes the separate pass (cuda_gemm.c)
    int linear_bias_separate;
    long linear_bias_fused_calls, linear_bias_separate_calls;  // cuda_linear_bias_counts
    void *cudnn;           // cudnnHandle_t
    double *scratch;       // device: CUDA_SCRATCH_DOUBLES
    CudaStepParams step_params;
    CudaStepGraph step_graphs[CUDA_STEP_GRAPHS];
    int step_graph_count;
    CudaWaitWatch wait_watch;   // cuda_backend_watch_waits (NULL: plain waits)
    void *wait_watch_arg;
    int step_graph_mode;        // STEP_GRAPH_* of the step between begin and end
    CudaStepGraph *step_graph;  // its graph (NULL: none)
    long step_graph_points;     // cuda_queue_points at its begin
    int step_graph_half;        // the parameter block's half at its begin
    long step_graph_replays;    // steps replayed (train.log's summary)
    // device: the workspace the convolution and attention plans share (one
    // stream runs them one after the other), the largest any plan needs
    void *workspace;
    size_t workspace_bytes;
    CudaAllocations allocations;  // what the alloc op handed out
    char device_name[128];
    int compute_major, compute_minor;  // the device's compute capability
    // Which attention path the plans took (cuda_attention.cu): cuDNN's SDPA
    // graphs per direction, or the fallback, with the first reason a plan
    // fell back (cuda_backend_describe_paths)
    int attention_sdpa_forward, attention_sdpa_backward, attention_plans;
    char attention_fallback_reason[320];
    // The same for convolutions with BatchNorm statistics (cuda_conv.c)
    int conv_plans, conv_stats_plans, conv_prologue_plans, conv_data_prologue_plans;
    char conv_fallback_reason[600], conv_prologue_reason[600], conv_data_prologue_reason[600];
} CudaState;

static inline CudaState *cuda_state(const Backend *backend) { return (CudaState *)backend->impl; }

// Reports a failed call (what, the library's message, file, line, device)
// on stderr and ends the process with status 1: an op cannot fail once its
// inputs are valid (backend.h), so a failure here is a broken device or a
// bug, and the last checkpoint on disk is what remains.
void cuda_fatal(const char *library, const char *call, const char *message, const char *file,
                int line, int device);
int cuda_current_device(void);

#define CUDA_CHECK(call)                                                                    \
    do {                                                                                    \
        cudaError_t cuda_status_ = (call);                                                  \
        if (cuda_status_ != cudaSuccess)                                                    \
            cuda_fatal("CUDA", #call, cudaGetErrorString(cuda_status_), __FILE__, __LINE__, \
                       cuda_current_device());                                              \
    } while (0)

// A cuDNN call's status (a cudnnStatus_t) other than success is reported
// as cuda_fatal does (cuda_conv.c, which includes cudnn.h, turns it into
// cuDNN's message).
void cuda_dnn_check(int status, const char *call, const char *file, int line);
#define CUDNN_CHECK(call) cuda_dnn_check((int)(call), #call, __FILE__, __LINE__)

// After a kernel launch: launch errors (bad configuration) show here, not
// at the next synchronisation.
#define CUDA_CHECK_LAUNCH() CUDA_CHECK(cudaGetLastError())

// The host's wait for an event, or for everything queued on a stream:
// cudaEventSynchronize / cudaStreamSynchronize, or with a watch set
// (cuda_backend_watch_waits) a poll that asks the watch at every turn.
void cuda_wait_event(CudaState *state, cudaEvent_t event);
void cuda_wait_stream(CudaState *state, cudaStream_t stream);

// ---- cuda_step_graph.c: queue points ----
// Every operation the backend queues on a stream passes a queue point: a
// kernel launch (`if (cuda_queue_point()) kernel<<<...>>>(...)`, LAUNCH), a
// copy, a memset, an event record, a cuBLAS, cuBLASLt or cuDNN call.
// cuda_queue_point counts it and says whether to queue it: not while the
// host side of a replayed step runs (cuda_step_filling), whose graph holds
// the work; then only what the host does happens (an op's per-step scalars
// into the parameter block, a layer's staged inputs into their sites). The
// count is the check that a replayed step is the one captured. Globals: one
// thread queues the backend's work.
extern int cuda_step_filling;
extern long cuda_queue_points;
extern int cuda_step_capturing;  // a step's capture is under way (cuda_fatal says so)
static inline int cuda_queue_point(void) {
    cuda_queue_points++;
    return !cuda_step_filling;
}
// A graph keeps the addresses it was captured with: freeing device or
// pinned memory forgets every graph (their kinds start again op by op).
void cuda_step_graphs_forget(CudaState *state);
void cuda_step_graphs_free(CudaState *state);

// ---- cuda_step_params.c ----
// 0, or the CUDA error of the allocation.
int cuda_step_params_init(CudaState *state);
void cuda_step_params_free(CudaState *state);
// The next `count` slots of the block hold `values` (their copy queued on
// the compute stream): device memory a kernel queued after this reads.
const float *cuda_step_params_put(CudaState *state, const float *values, int count);

// ---- cuda_elementwise.cu ----
void cuda_fill_launch(cudaStream_t stream, float *x, float value, size_t n);
// Launchers of kernels on activations take the backend's compute dtype and
// untyped pointers (Act storage: float, __half or __nv_bfloat16, see
// cuda_act.cuh); COMPUTE_F32 runs the fp32 instance (also the fp32 twins of
// the losses).
void cuda_relu_forward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *x,
                              void *y);
void cuda_relu_backward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *y,
                               const void *dy, void *dx);
void cuda_gelu_forward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *x,
                              void *y);
void cuda_gelu_backward_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, const void *x,
                               const void *dy, void *dx);
void cuda_add_launch(cudaStream_t stream, size_t n, const float *a, const float *b, float *y);
void cuda_axpby_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, float alpha,
                       const void *x, float beta, void *y);
// to_act 1: y (n, the dtype) = x (n, float) rounded; 0: y (float) = x (the dtype).
void cuda_act_convert_launch(cudaStream_t stream, ComputeDtype dtype, size_t n, int to_act,
                             const void *x, void *y);
// y (rows, y_channels) = x (rows, x_channels): the first channels copied,
// the rest zero (padding to more channels, or cutting back to fewer).
void cuda_channels_copy_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                               int x_channels, int y_channels, const void *x, void *y);
// y (rows, y_channels, float) += the first y_channels of x (rows, x_channels).
void cuda_act_accumulate_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                int x_channels, int y_channels, const void *x, float *y);
void cuda_mul_launch(cudaStream_t stream, size_t n, const float *a, const float *b, float *y);
// The per-step scalars of the updates in device memory (cuda_step_params.c):
// SGD's step = {lr, weight_decay, first_step (0 or 1)}; AdamW's scalars =
// {lr, decay = 1 - lr wd} per tensor, {lr, weight_decay} for segments.
void cuda_sgd_update_launch(cudaStream_t stream, size_t n, float *param, const float *grad,
                            const float *gate, float *momentum_buffer, const float *step,
                            float momentum, int nesterov);
void cuda_adamw_update_launch(cudaStream_t stream, size_t n, float *param, const float *grad,
                              const float *gate, float *m, float *v, const float *scalars,
                              double beta1, double beta2, float eps, const float *step);
// The multi-tensor updates (backend.h sgd_update_segments): one launch,
// count <= 65535 segments (the grid's y), segments in device memory.
void cuda_sgd_update_segments_launch(cudaStream_t stream, int count,
                                     const UpdateSegment *segments, float *params,
                                     const float *grads, const float *gate, float *buffers,
                                     const float *step, float momentum, int nesterov);
void cuda_adamw_update_segments_launch(cudaStream_t stream, int count,
                                       const UpdateSegment *segments, float *params,
                                       const float *grads, const float *gate, float *m, float *v,
                                       const float *scalars, double beta1, double beta2, float eps,
                                       const float *step);
// momentum, weight_decay (LARS), scale (softmax, Sinkhorn): one float of
// the per-step block.
void cuda_ema_update_launch(cudaStream_t stream, size_t n, float *target, const float *source,
                            const float *momentum);
void cuda_lars_direction_launch(cudaStream_t stream, size_t n, const float *param,
                                const float *grad, const float *gate, const float *sums,
                                const float *weight_decay, float trust, float eps, float *out);
void cuda_step_gate_launch(cudaStream_t stream, float *gate, int groups, float scale,
                           const float *unscale, float max_norm);
void cuda_scalar_combine_launch(cudaStream_t stream, float alpha, const float *a, float beta,
                                const float *b, float divisor, float *y);
void cuda_amp_update_launch(cudaStream_t stream, float *state, const float *found,
                            int growth_interval, float growth, float backoff);
// mean and std: `channels` (<= 64) host values, passed by value to the kernel.
void cuda_normalize_f32_launch(cudaStream_t stream, ComputeDtype dtype, size_t pixels,
                               int channels, const float *x, const float *mean,
                               const float *std, void *y);
void cuda_normalize_u8_launch(cudaStream_t stream, ComputeDtype dtype, size_t pixels,
                              const uint8_t *x, float mean0, float mean1, float mean2, float std0,
                              float std1, float std2, void *y);

// ---- cuda_reduce.cu ----
// Whole-vector reductions into one float of device memory. kind: 0 sum,
// 1 sum of squares, 2 dot (b), 3 count of NaN and inf (added to *result).
void cuda_reduce_launch(cudaStream_t stream, double *scratch, int kind, size_t n, const float *a,
                        const float *b, float *result);
// Column sums of x (rows, C; fp32 or activations by dtype) into y (C):
// accumulate 0 writes y =, 1 adds y +=.
void cuda_column_sum_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                            size_t rows, int channels, const void *x, float *y, int accumulate);
void cuda_bias_add_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows, int channels,
                          const float *bias, void *y);
// y (rows, C; the dtype) = product (rows, C; fp32) + bias (C; NULL: none),
// rounded once: the epilogue of a 16-bit linear layer.
void cuda_bias_epilogue_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                               int channels, const float *product, const float *bias, void *y);

// ---- cuda_norm.cu ----
void cuda_batchnorm_forward_train_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                         size_t rows, int channels, const void *x_any,
                                         const void *residual_any, int relu, const float *gamma,
                                         const float *beta, float momentum, float eps, void *y_any,
                                         float *save_mean, float *save_inv_std, float *running_mean,
                                         float *running_var);
void cuda_batchnorm_centered_squares_launch(cudaStream_t stream, ComputeDtype dtype,
                                            double *scratch, size_t rows, int channels,
                                            const void *x_any, const float *mean, float *squares);
void cuda_batchnorm_finish_statistics_launch(cudaStream_t stream, int channels,
                                             size_t total_rows, float momentum, float eps,
                                             const float *mean, float *squares_to_inv_std,
                                             float *running_mean, float *running_var);
void cuda_batchnorm_statistics_from_sums_launch(cudaStream_t stream, int channels,
                                                size_t total_rows, const float *sums,
                                                float *mean, float *squares);
void cuda_batchnorm_forward_apply_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                         size_t rows, int channels, const void *x_any,
                                         const void *residual_any, int relu, const float *gamma,
                                         const float *beta, const float *mean, const float *inv_std,
                                         void *y_any);
void cuda_batchnorm_backward_reduce_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                           size_t rows, int channels, const void *x_any,
                                           const void *relu_out_any, const void *dy_any,
                                           void *dz_out_any, const float *mean,
                                           const float *inv_std, float *dgamma, float *dbeta,
                                           float *sums);
void cuda_batchnorm_backward_apply_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                          size_t total_rows, int channels, const void *x_any,
                                          const void *relu_out_any, const void *dy_any,
                                          const float *gamma, const float *mean,
                                          const float *inv_std, const float *sums, void *dx_any);
void cuda_batchnorm_forward_eval_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                        int channels, const void *x_any, const void *residual_any,
                                        int relu, const float *gamma, const float *beta,
                                        const float *running_mean, const float *running_var,
                                        float eps, void *y_any);
// dbeta (C) += sums[0 .. C), dgamma (C) += sums[C .. 2C).
void cuda_norm_gradients_add_launch(cudaStream_t stream, int channels, const float *sums,
                                    float *dgamma, float *dbeta);
// out (2, C) in the activation dtype: a NormAffine's scale and shift
// (backend.h; scalar_rules.h prologue_scale_rule / prologue_shift_rule).
void cuda_prologue_coefficients_launch(cudaStream_t stream, ComputeDtype dtype, int channels,
                                       const float *gamma, const float *beta, const float *mean,
                                       const float *inv_std, void *out);
// relu_out: the forward output whose sign masks dy (NULL: no ReLU, or,
// with mask_beta, a convolution prologue's ReLU: the mask from x, backend.h
// batchnorm_relu_backward).
void cuda_batchnorm_backward_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                    size_t rows, int channels, const void *x_any,
                                    const void *relu_out_any, const void *dy_any,
                                    const float *gamma, const float *mask_beta,
                                    const float *save_mean, const float *save_inv_std,
                                    void *dx_any, float *dgamma, float *dbeta,
                                    void *dresidual_any);

// ---- cuda_rows.cu ----
void cuda_l2_normalize_forward_launch(cudaStream_t stream, int rows, int dim, const float *x,
                                      float eps, float *y, float *norm);
void cuda_l2_normalize_backward_launch(cudaStream_t stream, int rows, int dim, const float *y,
                                       const float *norm, const float *dy, float eps, float *dx);
// log: 0 softmax, 1 log_softmax.
void cuda_softmax_forward_launch(cudaStream_t stream, int rows, int dim, const float *x,
                                 const float *scale, int log, float *y);
void cuda_softmax_backward_launch(cudaStream_t stream, int rows, int dim, const float *y,
                                  const float *dy, float scale, int log, float *dx);
// combine_rows (backend.h) on activations of dtype.
void cuda_combine_rows_launch(cudaStream_t stream, ComputeDtype dtype, int rows, int channels,
                              const int32_t *row_start, const int32_t *index,
                              const float *weight, const void *x_any, void *y_any);
// channel_shuffle (backend.h) on activations of dtype.
void cuda_channel_shuffle_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                 int channels, int groups, const void *x_any, void *y_any);

// Grows state->workspace to at least bytes (cuda_memory.c; when plans are made).
int cuda_reserve_workspace(CudaState *state, size_t bytes, ErrorMessage *err);
// The backend's alloc and free ops, counted (cuda_memory.c); the count's
// table freed with the backend.
void *cuda_alloc(Backend *backend, size_t bytes);
void cuda_free(Backend *backend, void *pointer);
void cuda_allocations_free(CudaState *state);

// ---- cuda_attention_math.cu: the 16-bit attention on cuBLAS ----
typedef struct AttentionMath AttentionMath;
AttentionMath *cuda_attention_math_create(Backend *backend, const AttentionShape *shape,
                                          ErrorMessage *err);
void cuda_attention_math_free(AttentionMath *math);
void cuda_attention_math_forward(Backend *backend, AttentionMath *math, const Act *qkv,
                                 float scale, Act *out, float *lse);
// delta (B, H, T): dout_i . out_i (cuda_attention.cu computes it).
void cuda_attention_math_backward(Backend *backend, AttentionMath *math, const Act *qkv,
                                  const Act *dout, const float *lse, const float *delta,
                                  float scale, Act *dqkv);

// ---- cuda_gemm.c, for the kernels' files ----
// count products in cuBLAS's column-major convention, C_i = alpha op(A_i)
// op(B_i) (beta 0), the pointer arrays in device memory: A and B in the
// backend's 16-bit activation dtype, C fp32 (c_fp32 = 1) or in that dtype,
// fp32 accumulation on tensor cores.
void cuda_gemm_batched_16bit(Backend *backend, int transpose_a, int transpose_b, int m, int n,
                             int k, float alpha, const void *const *a, int lda,
                             const void *const *b, int ldb, void *const *c, int c_fp32, int ldc,
                             int count);

// ---- cuda_pool.cu ----
void cuda_maxpool_forward_launch(cudaStream_t stream, ComputeDtype dtype, const PoolShape *shape,
                                 const void *x_any, void *y_any, int32_t *argmax);
void cuda_maxpool_backward_launch(cudaStream_t stream, ComputeDtype dtype, const PoolShape *shape,
                                  const void *dy_any, const int32_t *argmax, void *dx_any);
void cuda_avgpool_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int pixels,
                                 int channels, const void *x_any, void *y_any);
void cuda_avgpool_backward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int pixels,
                                  int channels, const void *dy_any, void *dx_any);

// ---- cuda_transformer.cu ----
void cuda_layernorm_forward_launch(cudaStream_t stream, ComputeDtype dtype, size_t rows,
                                   int channels, const void *x_any, const float *gamma,
                                   const float *beta, float eps, void *y_any, float *mean,
                                   float *inv_std);
void cuda_layernorm_backward_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                    size_t rows, int channels, const void *x_any,
                                    const void *dy_any, const float *gamma, const float *mean,
                                    const float *inv_std, void *dx_any, int accumulate,
                                    float *dgamma, float *dbeta);
void cuda_vit_tokens_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                    int registers, int patches, int channels,
                                    const void *patch_embeddings_any, const float *cls,
                                    const float *cls_pos, const float *register_tokens,
                                    const float *patch_pos, void *tokens_any);
void cuda_vit_tokens_backward_launch(cudaStream_t stream, ComputeDtype dtype, double *scratch,
                                     int batch, int registers, int patches, int channels,
                                     const void *dtokens_any, void *dpatch_embeddings_any,
                                     float *dcls, float *dcls_pos, float *dregister_tokens,
                                     float *dpatch_pos);
// residual_scale_add_forward into y and layernorm_forward of it, one kernel.
void cuda_residual_layernorm_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                            size_t rows_per_sample, int channels,
                                            const void *x_any, const void *branch_any,
                                            const float *gamma, const float *sample_scale,
                                            void *y_any, const float *ln_gamma,
                                            const float *ln_beta, float eps, void *norm_out_any,
                                            float *mean, float *inv_std);
void cuda_residual_scale_add_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                            size_t rows_per_sample, int channels, const void *x_any,
                                            const void *branch_any, const float *gamma,
                                            const float *sample_scale, void *y_any);
void cuda_residual_scale_add_backward_launch(cudaStream_t stream, ComputeDtype dtype,
                                             double *scratch, int batch, size_t rows_per_sample,
                                             int channels, const void *branch_any,
                                             const void *dy_any, const float *gamma,
                                             const float *sample_scale, void *dbranch_any,
                                             float *dgamma);
void cuda_token_pool_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int tokens,
                                    int channels, int first, int count, const void *x_any,
                                    void *y_any);
void cuda_token_pool_backward_launch(cudaStream_t stream, ComputeDtype dtype, int batch, int tokens,
                                     int channels, int first, int count, const void *dy_any,
                                     void *dx_any);

// ---- cuda_conv_fusion.c: convolution + BatchNorm on cuDNN's graph API ----
typedef struct CudaConvStats CudaConvStats;
// Why a plan lacks a fused path, for train.log ("" where it has it):
// conv + genstats, the prologue graphs, the data-gradient graph.
typedef struct ConvFusionReasons {
    char stats[sizeof(ErrorMessage)], prologue[sizeof(ErrorMessage)], data[sizeof(ErrorMessage)];
} ConvFusionReasons;
// The fused paths of a plan of shape s (key: its algorithm-file key), or
// NULL (fp32, channels not multiples of 8, cuDNN refused it now or in an
// earlier process), with the reasons for what it lacks.
CudaConvStats *cuda_conv_stats_create(Backend *backend, const ConvShape *s, const char *key,
                                      ConvFusionReasons *why);
void cuda_conv_stats_free(CudaConvStats *stats);
// Whether the plan has the prologue graphs (forward and weight gradient).
int cuda_conv_stats_has_prologue(const CudaConvStats *stats);
// y = conv(x, w), or of relu(x scale + shift) with a prologue (has_prologue);
// sums (2, Cout) = sum and sum of squares of y per channel.
void cuda_conv_stats_forward(Backend *backend, const CudaConvStats *stats, const Act *x,
                             const NormAffine *prologue, const Act *w, Act *y, float *sums);
// dw (fp32) += the weight gradient of relu(x scale + shift) (has_prologue).
void cuda_conv_stats_weights(Backend *backend, const CudaConvStats *stats, const Act *x,
                             const NormAffine *prologue, const Act *dy, float *dw);
// Whether the plan also has the data-gradient graph (has_prologue too).
int cuda_conv_stats_has_data_prologue(const CudaConvStats *stats);
// backend.h conv2d_backward_data_prologue (has_data_prologue).
void cuda_conv_stats_data(Backend *backend, const CudaConvStats *stats, const Act *dy,
                          const Act *w, const Act *x, const NormAffine *prologue, Act *dz,
                          float *dgamma, float *dbeta, float *sums);

// ---- cuda_updates.c: the optimizer-update and input ops of the table ----
void cuda_sgd_update(Backend *backend, size_t n, float *param, const float *grad, const float *gate,
                     float *momentum_buffer, float lr, float momentum, float weight_decay,
                     int nesterov, int first_step);
void cuda_adamw_update(Backend *backend, size_t n, float *param, const float *grad,
                       const float *gate, float *m, float *v, float lr, double beta1, double beta2,
                       float eps, float weight_decay, const float *step);
void cuda_sgd_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                              float *params, const float *grads, const float *gate, float *buffers,
                              float lr, float momentum, float weight_decay, int nesterov,
                              int first_step);
void cuda_adamw_update_segments(Backend *backend, int count, const UpdateSegment *segments,
                                float *params, const float *grads, const float *gate, float *m,
                                float *v, float lr, double beta1, double beta2, float eps,
                                float weight_decay, const float *step);
void cuda_ema_update(Backend *backend, size_t n, float *target, const float *source,
                     float momentum);
void cuda_lars_direction(Backend *backend, size_t n, const float *param, const float *grad,
                         const float *gate, const float *sums, float weight_decay, float trust,
                         float eps, float *out);
void cuda_step_gate(Backend *backend, float *gate, int groups, float scale, const float *unscale,
                    float max_norm);
void cuda_scalar_combine(Backend *backend, float alpha, const float *a, float beta, const float *b,
                         float divisor, float *y);
void cuda_amp_update(Backend *backend, float *state, const float *found, int growth_interval,
                     float growth, float backoff);
void cuda_normalize_u8(Backend *backend, size_t pixels, const uint8_t *x, const float mean[3],
                       const float std[3], Act *y);
void cuda_normalize_f32(Backend *backend, size_t pixels, int channels, const float *x,
                        const float *mean, const float *std, Act *y);

// ---- cuda_paths.c: the describe_paths op ----
void cuda_describe_paths(const Backend *backend, char *text, size_t size);

// ---- cuda_sdpa.c: 16-bit attention through cuDNN's SDPA graphs ----
typedef struct CudaSdpa CudaSdpa;
// The forward and backward plans for shape in the backend's dtype; NULL
// with the reason (fp32, a head dim cuDNN's fused engines do not take, no
// engine) when neither direction can run fused. A direction without a
// plan (cuda_sdpa_has 0) falls back alone: both keep lse as the natural-log
// sum of exp(scale q.k), so either backward reads either forward's lse.
CudaSdpa *cuda_sdpa_create(Backend *backend, const AttentionShape *shape, char *reason,
                           size_t reason_size);
void cuda_sdpa_free(CudaSdpa *sdpa);
int cuda_sdpa_has(const CudaSdpa *sdpa, int backward);
void cuda_sdpa_forward(Backend *backend, const CudaSdpa *sdpa, const Act *qkv, float scale,
                       Act *out, float *lse);
void cuda_sdpa_backward(Backend *backend, const CudaSdpa *sdpa, const Act *qkv, const Act *out,
                        const Act *dout, const float *lse, float scale, Act *dqkv);

// ---- cuda_attention.cu: the attention ops of the table themselves ----
AttentionPlan *cuda_attention_plan(Backend *backend, const AttentionShape *shape,
                                   ErrorMessage *err);
void cuda_attention_plan_free(Backend *backend, AttentionPlan *plan);
void cuda_attention_forward(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                            float scale, Act *out, float *lse);
void cuda_attention_backward(Backend *backend, const AttentionPlan *plan, const Act *qkv,
                             const Act *out, const Act *dout, const float *lse, float scale,
                             Act *dqkv);

// ---- cuda_resize.cu ----
void cuda_resize_bilinear_forward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                         int in_height, int in_width, int channels,
                                         const void *x_any, int out_height, int out_width,
                                         void *y_any);
void cuda_resize_bilinear_backward_launch(cudaStream_t stream, ComputeDtype dtype, int batch,
                                          int in_height, int in_width, int channels,
                                          const void *dy_any, int out_height, int out_width,
                                          void *dx_any);
void cuda_mixup_launch(cudaStream_t stream, ComputeDtype dtype, int batch, size_t sample,
                       const void *x_any, const int32_t *permutation, const float *lambda,
                       void *y_any);
// ---- cuda_dinov2.cu (the ops themselves, as in backend.h) ----
void cuda_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x,
                              const float *mask, const float *token, Act *y);
void cuda_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                               const Act *dy, Act *dx, float *dtoken);
void cuda_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                     const float *scale, float *y);
void cuda_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                      const Act *x, Act *y);
void cuda_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                           const Act *dy, Act *dx);
void cuda_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max);
void cuda_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                       const float *max, float *q);
void cuda_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                             float *q);
void cuda_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                        int32_t *neighbor, float *distance, float *log_distance);
void cuda_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                         const int32_t *neighbor, const float *distance, float eps, float dlog,
                         float *dy);
void cuda_cka_loss(Backend *backend, int images, int tokens, int dim, const float *student,
                   const float *teacher, const float *image_weight, float *loss,
                   float *dstudent);
// ---- cuda_depthwise.cu (the ops themselves, as in backend.h) ----
DepthwisePlan *cuda_depthwise_plan(Backend *backend, const DepthwiseShape *shape,
                                   ErrorMessage *err);
void cuda_depthwise_plan_free(Backend *backend, DepthwisePlan *plan);
void cuda_depthwise_forward(Backend *backend, const DepthwisePlan *plan, const Act *x,
                            const Act *w, const float *bias, Act *y);
void cuda_depthwise_backward_data(Backend *backend, const DepthwisePlan *plan, const Act *dy,
                                  const Act *w, Act *dx);
void cuda_depthwise_backward_weights(Backend *backend, const DepthwisePlan *plan, const Act *x,
                                     const Act *dy, float *dw, float *dbias);
// ---- cuda_dinov3.cu (the ops themselves, as in backend.h) ----
void cuda_rope_forward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                       int prefix, const float *sin, const float *cos, Act *qkv);
void cuda_rope_backward(Backend *backend, int batch, int tokens, int heads, int head_dim,
                        int prefix, const float *sin, const float *cos, Act *dqkv);
void cuda_swiglu_forward(Backend *backend, size_t rows, int hidden, const Act *x, Act *y);
void cuda_swiglu_backward(Backend *backend, size_t rows, int hidden, const Act *x,
                          const Act *dy, Act *dx);
// ---- cuda_yolo.cu ----
void cuda_silu_forward(Backend *backend, size_t n, const Act *x, Act *y);
void cuda_silu_backward(Backend *backend, size_t n, const Act *x, const Act *dy, Act *dx);

#ifdef __cplusplus
}
#endif

// ---- cuda_conv.c, cuda_gemm.c (C only) ----
#ifndef __cplusplus
ConvPlan *cuda_conv2d_plan(Backend *backend, const ConvShape *shape, ErrorMessage *err);
void cuda_conv2d_plan_free(Backend *backend, ConvPlan *plan);
int cuda_conv2d_forward_stats(Backend *backend, const ConvPlan *plan, const Act *x,
                              const NormAffine *prologue, const Act *w, Act *y, float *sums);
int cuda_conv2d_fusions(Backend *backend, const ConvPlan *plan);
void cuda_conv2d_backward_weights_prologue(Backend *backend, const ConvPlan *plan, const Act *x,
                                           const NormAffine *prologue, const Act *dy, float *dw);
int cuda_conv2d_backward_data_prologue(Backend *backend, const ConvPlan *plan, const Act *dy,
                                       const Act *w, const Act *x, const NormAffine *prologue,
                                       Act *dz, float *dgamma, float *dbeta, float *sums);
void cuda_conv2d_forward(Backend *backend, const ConvPlan *plan, const Act *x, const Act *w,
                         Act *y);
void cuda_conv2d_backward_data(Backend *backend, const ConvPlan *plan, const Act *dy,
                               const Act *w, Act *dx);
void cuda_conv2d_backward_weights(Backend *backend, const ConvPlan *plan, const Act *x,
                                  const Act *dy, float *dw);
void cuda_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
               float alpha, const float *a, int lda, const float *b, int ldb, float beta,
               float *c, int ldc);
void cuda_linear_forward(Backend *backend, int rows, int in, int out, const Act *x,
                         const Act *w, const float *bias, Act *y);
void cuda_linear_backward_data(Backend *backend, int rows, int in, int out, const Act *dy,
                               const Act *w, Act *dx);
void cuda_linear_backward_weights(Backend *backend, int rows, int in, int out, const Act *x,
                                  const Act *dy, float *dw, float *dbias);
// cuBLAS's handle and, through cuda_blas_lt_create, cuBLASLt's (both
// destroyed by cuda_blas_destroy).
int cuda_blas_create(CudaState *state, ErrorMessage *err);
// ---- cuda_blas_lt.c: the 16-bit linear layers' bias epilogue on cuBLASLt ----
// Reads LTC_CUDA_LINEAR_BIAS ("fused", the default, or "separate"; another
// value is an error), opens libcublasLt, makes its handle and workspace.
int cuda_blas_lt_create(CudaState *state, ErrorMessage *err);
void cuda_blas_lt_destroy(CudaState *state);
// cuBLASLt's workspace (device) and its size; cuBLAS's too (cublasSetWorkspace).
void *cuda_blas_lt_workspace(const CudaState *state, size_t *bytes);
// y (rows, out) = x (rows, in) w^T + bias16 (out, in the activations' 16-bit
// dtype, device memory) in one cublasLtMatmul, rounded once; -1 (nothing
// queued) where cuBLASLt has no algorithm for the shape.
int cuda_blas_lt_linear(Backend *backend, int rows, int in, int out, const Act *x,
                        const Act *w, const void *bias16, Act *y);
// The cuBLAS that dlopen finds (major, minor, patch), the one of the headers
// and its file; -1 with a message when it cannot be loaded.
int cuda_blas_version(int found[3], int built[3], char *path, size_t size, ErrorMessage *err);
void cuda_blas_destroy(CudaState *state);
int cuda_dnn_create(CudaState *state, ErrorMessage *err);
void cuda_dnn_destroy(CudaState *state);
// ---- cuda_transfer.c: pinned host memory, copies on a copy stream, ordered copies,
// fences, step timers ----
void *cuda_host_alloc(Backend *backend, size_t bytes);
void cuda_host_free(Backend *backend, void *pointer);
Transfer *cuda_transfer_create(Backend *backend, ErrorMessage *err);
void cuda_transfer_free(Backend *backend, Transfer *transfer);
void cuda_upload_async(Backend *backend, Transfer *transfer, void *device, const void *host,
                       size_t bytes);
void cuda_transfer_device_wait(Backend *backend, Transfer *transfer);
void cuda_transfer_consumed(Backend *backend, Transfer *transfer);
void cuda_transfer_host_wait(Backend *backend, Transfer *transfer);
void cuda_upload_ordered(Backend *backend, void *device, const void *host, size_t bytes);
Fence *cuda_fence_create(Backend *backend, ErrorMessage *err);
void cuda_fence_free(Backend *backend, Fence *fence);
void cuda_fence_record(Backend *backend, Fence *fence);
int cuda_fence_passed(Backend *backend, Fence *fence);
void cuda_fence_wait(Backend *backend, Fence *fence);
DeviceTimer *cuda_timer_create(Backend *backend, ErrorMessage *err);
void cuda_timer_free(Backend *backend, DeviceTimer *timer);
void cuda_timer_mark(Backend *backend, DeviceTimer *timer, int end);
double cuda_timer_seconds(Backend *backend, DeviceTimer *timer);
#endif

#endif
