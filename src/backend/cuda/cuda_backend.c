// The cuda backend's op table, device set-up, memory ops and the thin
// wrappers that hand each op to its kernel launcher on the backend's stream
// (see cuda_backend.h, cuda_internal.h).
#include "backend/cuda/cuda_backend.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/composed_ops.h"
#include "backend/cuda/cuda_internal.h"
#include "backend/linear_plan_composed.h"

void cuda_fatal(const char *library, const char *call, const char *message, const char *file,
                int line, int device) {
    fprintf(stderr, "lightly-train-c: %s error on GPU %d at %s:%d: %s: %s%s\n", library, device,
            file, line, call, message,
            cuda_step_capturing ? " (while a step was captured as a CUDA graph: "
                                  "LTC_CUDA_GRAPHS=off runs every step op by op)"
                                : "");
    exit(1);
}

int cuda_current_device(void) {
    int device = -1;
    if (cudaGetDevice(&device) != cudaSuccess) (void)cudaGetLastError();
    return device;
}

int cuda_device_count(char *reason, size_t size) {
    int count = 0;
    const cudaError_t status = cudaGetDeviceCount(&count);
    if (status != cudaSuccess) {
        snprintf(reason, size, "%s", cudaGetErrorString(status));
        (void)cudaGetLastError();  // later CUDA calls start clean
        return 0;
    }
    if (count == 0) snprintf(reason, size, "no CUDA device");
    return count;
}

// ---- memory ------------------------------------------------------------------------

static void cuda_set_device(const Backend *backend) {
    CUDA_CHECK(cudaSetDevice(cuda_state(backend)->device));
}

// Host buffers may be pageable: the copy is then complete on return, which
// is what the interface promises the caller (it may reuse its buffer).
static void cuda_upload(Backend *backend, void *device, const void *host, size_t bytes) {
    if (!bytes) return;
    CudaState *state = cuda_state(backend);
    CUDA_CHECK(cudaMemcpyAsync(device, host, bytes, cudaMemcpyHostToDevice, state->stream));
    cuda_wait_stream(state, state->stream);
}

static void cuda_download(Backend *backend, void *host, const void *device, size_t bytes) {
    if (!bytes) return;
    CudaState *state = cuda_state(backend);
    CUDA_CHECK(cudaMemcpyAsync(host, device, bytes, cudaMemcpyDeviceToHost, state->stream));
    cuda_wait_stream(state, state->stream);
}

static void cuda_copy(Backend *backend, void *dst, const void *src, size_t bytes) {
    if (!bytes || dst == src || !cuda_queue_point()) return;
    CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice,
                               cuda_state(backend)->stream));
}

static void cuda_copy_2d(Backend *backend, size_t rows, size_t cols, const Act *x,
                         size_t x_stride, Act *y, size_t y_stride) {
    if (!rows || !cols || !cuda_queue_point()) return;
    CUDA_CHECK(cudaMemcpy2DAsync(y, act_bytes(backend, y_stride), x, act_bytes(backend, x_stride),
                                 act_bytes(backend, cols), rows, cudaMemcpyDeviceToDevice,
                                 cuda_state(backend)->stream));
}

static void cuda_fill(Backend *backend, float *x, float value, size_t n) {
    cuda_fill_launch(cuda_state(backend)->stream, x, value, n);
}

static void cuda_zero(Backend *backend, void *x, size_t bytes) {
    if (bytes && cuda_queue_point())
        CUDA_CHECK(cudaMemsetAsync(x, 0, bytes, cuda_state(backend)->stream));
}

// The boundary between activations and losses: a copy in fp32, a
// conversion (rounded to nearest even towards 16 bits) otherwise.
static void cuda_act_to_float(Backend *backend, size_t n, const Act *x, float *y) {
    if (backend->compute_dtype == COMPUTE_F32)
        cuda_copy(backend, y, x, n * sizeof(float));
    else
        cuda_act_convert_launch(cuda_state(backend)->stream, backend->compute_dtype, n, 0, x, y);
}

static void cuda_float_to_act(Backend *backend, size_t n, const float *x, Act *y) {
    if (backend->compute_dtype == COMPUTE_F32)
        cuda_copy(backend, y, x, n * sizeof(float));
    else
        cuda_act_convert_launch(cuda_state(backend)->stream, backend->compute_dtype, n, 1, x, y);
}

static void cuda_synchronize(Backend *backend) {
    CudaState *state = cuda_state(backend);
    cuda_wait_stream(state, state->stream);
}

// A host slot: page-locked host memory (so the copy runs asynchronously,
// by DMA) and an event recorded behind the copy, which the host waits for.
struct HostSlot {
    void *host;
    size_t bytes;
    cudaEvent_t landed;
};

static HostSlot *cuda_host_slot_create(Backend *backend, size_t bytes, ErrorMessage *err) {
    cuda_set_device(backend);
    HostSlot *slot = calloc(1, sizeof *slot);
    if (!slot) {
        error_set(err, "out of host memory for a host slot");
        return NULL;
    }
    slot->bytes = bytes;
    if (cudaMallocHost(&slot->host, bytes ? bytes : 1) != cudaSuccess) {
        (void)cudaGetLastError();
        free(slot);
        error_set(err, "out of page-locked host memory for a %zu-byte host slot", bytes);
        return NULL;
    }
    CUDA_CHECK(cudaEventCreateWithFlags(&slot->landed, cudaEventDisableTiming));
    return slot;
}

static void cuda_host_slot_free(Backend *backend, HostSlot *slot) {
    if (!slot) return;
    CUDA_CHECK(cudaEventSynchronize(slot->landed));
    CUDA_CHECK(cudaEventDestroy(slot->landed));
    CUDA_CHECK(cudaFreeHost(slot->host));
    free(slot);
}

static void cuda_host_slot_fill(Backend *backend, HostSlot *slot, const void *device,
                                size_t bytes) {
    CudaState *state = cuda_state(backend);
    if (bytes > slot->bytes) bytes = slot->bytes;
    if (!cuda_queue_point()) return;
    CUDA_CHECK(cudaMemcpyAsync(slot->host, device, bytes, cudaMemcpyDeviceToHost, state->stream));
    CUDA_CHECK(cudaEventRecord(slot->landed, state->stream));
}

static const void *cuda_host_slot_wait(Backend *backend, HostSlot *slot) {
    cuda_wait_event(cuda_state(backend), slot->landed);
    return slot->host;
}

// ---- batch norm (cuda_norm.cu) ------------------------------------------------------

static void cuda_batchnorm_forward_train_f32(Backend *backend, size_t rows, int channels,
                                         const float *x, const float *gamma, const float *beta,
                                         float momentum, float eps, float *y, float *save_mean,
                                         float *save_inv_std, float *running_mean,
                                         float *running_var) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_forward_train_launch(state->stream, COMPUTE_F32, state->scratch, rows, channels,
                                        x, NULL, 0, gamma, beta, momentum, eps, y, save_mean,
                                        save_inv_std, running_mean, running_var);
}

static void cuda_batchnorm_forward_train(Backend *backend, size_t rows, int channels,
                                         const Act *x, const float *gamma, const float *beta,
                                         float momentum, float eps, Act *y, float *save_mean,
                                         float *save_inv_std, float *running_mean,
                                         float *running_var) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_forward_train_launch(state->stream, backend->compute_dtype, state->scratch, rows,
                                        channels, x, NULL, 0, gamma, beta, momentum, eps, y,
                                        save_mean, save_inv_std, running_mean, running_var);
}

static void cuda_batchnorm_forward_eval(Backend *backend, size_t rows, int channels,
                                        const Act *x, const float *gamma, const float *beta,
                                        const float *running_mean, const float *running_var,
                                        float eps, Act *y) {
    cuda_batchnorm_forward_eval_launch(cuda_state(backend)->stream, backend->compute_dtype, rows,
                                       channels, x, NULL, 0, gamma, beta, running_mean, running_var,
                                       eps, y);
}

static void cuda_batchnorm_backward_f32(Backend *backend, size_t rows, int channels, const float *x,
                                    const float *dy, const float *gamma, const float *save_mean,
                                    const float *save_inv_std, float *dx, float *dgamma,
                                    float *dbeta) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_backward_launch(state->stream, COMPUTE_F32, state->scratch, rows, channels, x,
                                   NULL, dy, gamma, NULL, save_mean, save_inv_std, dx, dgamma,
                                   dbeta, NULL);
}

static void cuda_batchnorm_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                    const Act *dy, const float *gamma, const float *save_mean,
                                    const float *save_inv_std, Act *dx, float *dgamma,
                                    float *dbeta) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_backward_launch(state->stream, backend->compute_dtype, state->scratch, rows,
                                   channels, x, NULL, dy, gamma, NULL, save_mean, save_inv_std,
                                   dx, dgamma, dbeta, NULL);
}

static void cuda_batchnorm_relu_forward_train(Backend *backend, size_t rows, int channels,
                                              const Act *x, const Act *residual,
                                              const float *gamma, const float *beta,
                                              float momentum, float eps, Act *y,
                                              float *save_mean, float *save_inv_std,
                                              float *running_mean, float *running_var) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_forward_train_launch(state->stream, backend->compute_dtype, state->scratch, rows,
                                        channels, x, residual, 1, gamma, beta, momentum, eps, y,
                                        save_mean, save_inv_std, running_mean, running_var);
}

static void cuda_batchnorm_relu_forward_eval(Backend *backend, size_t rows, int channels,
                                             const Act *x, const Act *residual,
                                             const float *gamma, const float *beta,
                                             const float *running_mean,
                                             const float *running_var, float eps, Act *y) {
    cuda_batchnorm_forward_eval_launch(cuda_state(backend)->stream, backend->compute_dtype, rows,
                                       channels, x, residual, 1, gamma, beta, running_mean,
                                       running_var, eps, y);
}

// ---- synchronised BatchNorm's split ops (backend.h) ----

static void cuda_batchnorm_centered_squares(Backend *backend, size_t rows, int channels,
                                            const Act *x, const float *mean, float *squares) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_centered_squares_launch(state->stream, backend->compute_dtype, state->scratch,
                                           rows, channels, x, mean, squares);
}

static void cuda_batchnorm_finish_statistics(Backend *backend, int channels, size_t total_rows,
                                             float momentum, float eps, const float *mean,
                                             float *squares_to_inv_std, float *running_mean,
                                             float *running_var) {
    cuda_batchnorm_finish_statistics_launch(cuda_state(backend)->stream, channels, total_rows,
                                            momentum, eps, mean, squares_to_inv_std,
                                            running_mean, running_var);
}

static void cuda_batchnorm_statistics_from_sums(Backend *backend, int channels,
                                                size_t total_rows, const float *sums,
                                                float *mean, float *squares) {
    cuda_batchnorm_statistics_from_sums_launch(cuda_state(backend)->stream, channels, total_rows,
                                               sums, mean, squares);
}

static void cuda_batchnorm_forward_apply(Backend *backend, size_t rows, int channels,
                                         const Act *x, const Act *residual, int relu,
                                         const float *gamma, const float *beta, const float *mean,
                                         const float *inv_std, Act *y) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_forward_apply_launch(state->stream, backend->compute_dtype, state->scratch, rows,
                                        channels, x, residual, relu, gamma, beta, mean, inv_std, y);
}

static void cuda_batchnorm_backward_reduce(Backend *backend, size_t rows, int channels,
                                           const Act *x, const Act *relu_out, const Act *dy,
                                           Act *dz_out, const float *mean, const float *inv_std,
                                           float *dgamma, float *dbeta, float *sums) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_backward_reduce_launch(state->stream, backend->compute_dtype, state->scratch,
                                          rows, channels, x, relu_out, dy, dz_out, mean, inv_std,
                                          dgamma, dbeta, sums);
}

static void cuda_batchnorm_backward_apply(Backend *backend, size_t rows, size_t total_rows,
                                          int channels, const Act *x, const Act *relu_out,
                                          const Act *dy, const float *gamma, const float *mean,
                                          const float *inv_std, const float *sums, Act *dx) {
    cuda_batchnorm_backward_apply_launch(cuda_state(backend)->stream, backend->compute_dtype, rows,
                                         total_rows, channels, x, relu_out, dy, gamma, mean,
                                         inv_std, sums, dx);
}

static void cuda_batchnorm_relu_backward(Backend *backend, size_t rows, int channels,
                                         const Act *x, const Act *y, const Act *dy,
                                         const float *gamma, const float *beta,
                                         const float *save_mean, const float *save_inv_std,
                                         Act *dx, float *dgamma, float *dbeta, Act *dresidual) {
    CudaState *state = cuda_state(backend);
    cuda_batchnorm_backward_launch(state->stream, backend->compute_dtype, state->scratch, rows,
                                   channels, x, y, dy, gamma, y ? NULL : beta, save_mean,
                                   save_inv_std, dx, dgamma, dbeta, dresidual);
}

// ---- elementwise (cuda_elementwise.cu) ----------------------------------------------

static void cuda_relu_forward_f32(Backend *backend, size_t n, const float *x, float *y) {
    cuda_relu_forward_launch(cuda_state(backend)->stream, COMPUTE_F32, n, x, y);
}

static void cuda_relu_forward(Backend *backend, size_t n, const Act *x, Act *y) {
    cuda_relu_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, n, x, y);
}

static void cuda_relu_backward_f32(Backend *backend, size_t n, const float *y, const float *dy,
                               float *dx) {
    cuda_relu_backward_launch(cuda_state(backend)->stream, COMPUTE_F32, n, y, dy, dx);
}

static void cuda_relu_backward(Backend *backend, size_t n, const Act *y, const Act *dy,
                               Act *dx) {
    cuda_relu_backward_launch(cuda_state(backend)->stream, backend->compute_dtype, n, y, dy, dx);
}

static void cuda_gelu_forward(Backend *backend, size_t n, const Act *x, Act *y) {
    cuda_gelu_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, n, x, y);
}

static void cuda_gelu_backward(Backend *backend, size_t n, const Act *x, const Act *dy,
                               Act *dx) {
    cuda_gelu_backward_launch(cuda_state(backend)->stream, backend->compute_dtype, n, x, dy, dx);
}

static void cuda_add(Backend *backend, size_t n, const float *a, const float *b, float *y) {
    cuda_add_launch(cuda_state(backend)->stream, n, a, b, y);
}

static void cuda_axpby(Backend *backend, size_t n, float alpha, const float *x, float beta,
                       float *y) {
    cuda_axpby_launch(cuda_state(backend)->stream, COMPUTE_F32, n, alpha, x, beta, y);
}

static void cuda_act_axpby(Backend *backend, size_t n, float alpha, const Act *x, float beta,
                           Act *y) {
    cuda_axpby_launch(cuda_state(backend)->stream, backend->compute_dtype, n, alpha, x, beta, y);
}

static void cuda_mul(Backend *backend, size_t n, const float *a, const float *b, float *y) {
    cuda_mul_launch(cuda_state(backend)->stream, n, a, b, y);
}

// ---- pooling (cuda_pool.cu) ---------------------------------------------------------

static void cuda_maxpool_forward(Backend *backend, const PoolShape *shape, const Act *x,
                                 Act *y, int32_t *argmax) {
    cuda_maxpool_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, shape, x, y,
                                argmax);
}

static void cuda_maxpool_backward(Backend *backend, const PoolShape *shape, const Act *dy,
                                  const int32_t *argmax, Act *dx) {
    cuda_maxpool_backward_launch(cuda_state(backend)->stream, backend->compute_dtype, shape, dy,
                                 argmax, dx);
}

static void cuda_avgpool_forward(Backend *backend, int batch, int pixels, int channels,
                                 const Act *x, Act *y) {
    cuda_avgpool_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch, pixels,
                                channels, x, y);
}

static void cuda_avgpool_backward(Backend *backend, int batch, int pixels, int channels,
                                  const Act *dy, Act *dx) {
    cuda_avgpool_backward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch, pixels,
                                 channels, dy, dx);
}

// ---- linear layers ---------------------------------------------------------------------

static void cuda_bias_add_f32(Backend *backend, size_t rows, int channels, const float *bias,
                          float *y) {
    cuda_bias_add_launch(cuda_state(backend)->stream, COMPUTE_F32, rows, channels, bias, y);
}

static void cuda_bias_add(Backend *backend, size_t rows, int channels, const float *bias,
                          Act *y) {
    cuda_bias_add_launch(cuda_state(backend)->stream, backend->compute_dtype, rows, channels, bias,
                         y);
}

static void cuda_bias_backward(Backend *backend, size_t rows, int channels, const Act *dy,
                               float *dbias) {
    CudaState *state = cuda_state(backend);
    cuda_column_sum_launch(state->stream, backend->compute_dtype, state->scratch, rows, channels,
                           dy, dbias, 1);
}

// ---- rows (cuda_rows.cu) ----------------------------------------------------------------

static void cuda_l2_normalize_forward(Backend *backend, int rows, int dim, const float *x,
                                      float eps, float *y, float *norm) {
    cuda_l2_normalize_forward_launch(cuda_state(backend)->stream, rows, dim, x, eps, y, norm);
}

static void cuda_l2_normalize_backward(Backend *backend, int rows, int dim, const float *y,
                                       const float *norm, const float *dy, float eps,
                                       float *dx) {
    cuda_l2_normalize_backward_launch(cuda_state(backend)->stream, rows, dim, y, norm, dy, eps,
                                      dx);
}

static void cuda_softmax_forward(Backend *backend, int rows, int dim, const float *x, float scale,
                                 float *y) {
    CudaState *state = cuda_state(backend);
    cuda_softmax_forward_launch(state->stream, rows, dim, x,
                                cuda_step_params_put(state, &scale, 1), 0, y);
}

static void cuda_log_softmax_forward(Backend *backend, int rows, int dim, const float *x,
                                     float scale, float *y) {
    CudaState *state = cuda_state(backend);
    cuda_softmax_forward_launch(state->stream, rows, dim, x,
                                cuda_step_params_put(state, &scale, 1), 1, y);
}

static void cuda_softmax_backward(Backend *backend, int rows, int dim, const float *y,
                                  const float *dy, float scale, float *dx) {
    cuda_softmax_backward_launch(cuda_state(backend)->stream, rows, dim, y, dy, scale, 0, dx);
}

static void cuda_log_softmax_backward(Backend *backend, int rows, int dim, const float *y,
                                      const float *dy, float scale, float *dx) {
    cuda_softmax_backward_launch(cuda_state(backend)->stream, rows, dim, y, dy, scale, 1, dx);
}

static void cuda_combine_rows(Backend *backend, int rows, int channels, const int32_t *row_start,
                              const int32_t *index, const float *weight, const Act *x, Act *y) {
    cuda_combine_rows_launch(cuda_state(backend)->stream, backend->compute_dtype, rows, channels,
                             row_start, index, weight, x, y);
}

static void cuda_channel_shuffle(Backend *backend, size_t rows, int channels, int groups,
                                 const Act *x, Act *y) {
    cuda_channel_shuffle_launch(cuda_state(backend)->stream, backend->compute_dtype, rows,
                                channels, groups, x, y);
}

// ---- reductions (cuda_reduce.cu) ---------------------------------------------------------

static void cuda_reduce(Backend *backend, int kind, size_t n, const float *a, const float *b,
                        float *result) {
    CudaState *state = cuda_state(backend);
    cuda_reduce_launch(state->stream, state->scratch, kind, n, a, b, result);
}

static void cuda_sum(Backend *backend, size_t n, const float *x, float *result) {
    cuda_reduce(backend, 0, n, x, NULL, result);
}

static void cuda_sum_squares(Backend *backend, size_t n, const float *x, float *result) {
    cuda_reduce(backend, 1, n, x, NULL, result);
}

static void cuda_dot(Backend *backend, size_t n, const float *a, const float *b, float *result) {
    cuda_reduce(backend, 2, n, a, b, result);
}

static void cuda_count_nonfinite(Backend *backend, size_t n, const float *x, float *result) {
    cuda_reduce(backend, 3, n, x, NULL, result);
}

static void cuda_column_sum(Backend *backend, size_t rows, int channels, const float *x,
                            float *y) {
    CudaState *state = cuda_state(backend);
    cuda_column_sum_launch(state->stream, COMPUTE_F32, state->scratch, rows, channels, x, y, 0);
}

static void cuda_act_column_sum(Backend *backend, size_t rows, int channels, const Act *x,
                                float *y) {
    CudaState *state = cuda_state(backend);
    cuda_column_sum_launch(state->stream, backend->compute_dtype, state->scratch, rows, channels,
                           x, y, 0);
}

// ---- transformer ops (cuda_transformer.cu; attention: cuda_attention.cu) ------------------

static void cuda_layernorm_forward(Backend *backend, size_t rows, int channels, const Act *x,
                                   const float *gamma, const float *beta, float eps, Act *y,
                                   float *mean, float *inv_std) {
    cuda_layernorm_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, rows,
                                  channels, x, gamma, beta, eps, y, mean, inv_std);
}

static void cuda_layernorm_backward(Backend *backend, size_t rows, int channels, const Act *x,
                                    const Act *dy, const float *gamma, const float *mean,
                                    const float *inv_std, Act *dx, int accumulate,
                                    float *dgamma, float *dbeta) {
    CudaState *state = cuda_state(backend);
    cuda_layernorm_backward_launch(state->stream, backend->compute_dtype, state->scratch, rows,
                                   channels, x, dy, gamma, mean, inv_std, dx, accumulate, dgamma,
                                   dbeta);
}

static void cuda_vit_tokens_forward(Backend *backend, int batch, int registers, int patches,
                                    int channels, const Act *patch_embeddings,
                                    const float *cls, const float *cls_pos,
                                    const float *register_tokens, const float *patch_pos,
                                    Act *tokens) {
    cuda_vit_tokens_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch,
                                   registers, patches, channels, patch_embeddings, cls, cls_pos,
                                   register_tokens, patch_pos, tokens);
}

static void cuda_vit_tokens_backward(Backend *backend, int batch, int registers, int patches,
                                     int channels, const Act *dtokens,
                                     Act *dpatch_embeddings, float *dcls, float *dcls_pos,
                                     float *dregister_tokens, float *dpatch_pos) {
    CudaState *state = cuda_state(backend);
    cuda_vit_tokens_backward_launch(state->stream, backend->compute_dtype, state->scratch, batch,
                                    registers, patches, channels, dtokens, dpatch_embeddings, dcls,
                                    dcls_pos, dregister_tokens, dpatch_pos);
}

static void cuda_residual_layernorm_forward(Backend *backend, int batch, size_t rows_per_sample,
                                            int channels, const Act *x, const Act *branch,
                                            const float *gamma, const float *sample_scale,
                                            Act *y, const float *ln_gamma, const float *ln_beta,
                                            float eps, Act *norm_out, float *mean,
                                            float *inv_std) {
    cuda_residual_layernorm_forward_launch(cuda_state(backend)->stream, backend->compute_dtype,
                                           batch, rows_per_sample, channels, x, branch, gamma,
                                           sample_scale, y, ln_gamma, ln_beta, eps, norm_out,
                                           mean, inv_std);
}

static void cuda_residual_scale_add_forward(Backend *backend, int batch, size_t rows_per_sample,
                                            int channels, const Act *x, const Act *branch,
                                            const float *gamma, const float *sample_scale,
                                            Act *y) {
    cuda_residual_scale_add_forward_launch(cuda_state(backend)->stream, backend->compute_dtype,
                                           batch, rows_per_sample, channels, x, branch, gamma,
                                           sample_scale, y);
}

static void cuda_residual_scale_add_backward(Backend *backend, int batch, size_t rows_per_sample,
                                             int channels, const Act *branch, const Act *dy,
                                             const float *gamma, const float *sample_scale,
                                             Act *dbranch, float *dgamma) {
    CudaState *state = cuda_state(backend);
    cuda_residual_scale_add_backward_launch(state->stream, backend->compute_dtype, state->scratch,
                                            batch, rows_per_sample, channels, branch, dy, gamma,
                                            sample_scale, dbranch, dgamma);
}

static void cuda_token_pool_forward(Backend *backend, int batch, int tokens, int channels,
                                    int first, int count, const Act *x, Act *y) {
    cuda_token_pool_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch,
                                   tokens, channels, first, count, x, y);
}

static void cuda_token_pool_backward(Backend *backend, int batch, int tokens, int channels,
                                     int first, int count, const Act *dy, Act *dx) {
    cuda_token_pool_backward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch,
                                    tokens, channels, first, count, dy, dx);
}

// ---- distillation (cuda_resize.cu) -------------------------------------------------------

static void cuda_resize_bilinear_forward(Backend *backend, int batch, int in_height,
                                         int in_width, int channels, const Act *x,
                                         int out_height, int out_width, Act *y) {
    cuda_resize_bilinear_forward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch,
                                        in_height, in_width, channels, x, out_height, out_width, y);
}

static void cuda_resize_bilinear_backward(Backend *backend, int batch, int in_height,
                                          int in_width, int channels, const Act *dy,
                                          int out_height, int out_width, Act *dx) {
    cuda_resize_bilinear_backward_launch(cuda_state(backend)->stream, backend->compute_dtype, batch,
                                         in_height, in_width, channels, dy, out_height, out_width,
                                         dx);
}

static void cuda_mixup(Backend *backend, int batch, size_t sample, const Act *x,
                       const int32_t *permutation, float lambda, Act *y) {
    CudaState *state = cuda_state(backend);
    cuda_mixup_launch(state->stream, backend->compute_dtype, batch, sample, x, permutation,
                      cuda_step_params_put(state, &lambda, 1), y);
}

// ---- creation -----------------------------------------------------------------------------

static void cuda_destroy(Backend *backend) {
    CudaState *state = cuda_state(backend);
    if (state) {
        (void)cudaSetDevice(state->device);
        if (state->stream) (void)cudaStreamSynchronize(state->stream);
        cuda_dnn_destroy(state);
        cuda_blas_destroy(state);
        if (state->workspace) (void)cudaFree(state->workspace);
        if (state->scratch) (void)cudaFree(state->scratch);
        cuda_step_graphs_free(state);
        cuda_step_params_free(state);
        cuda_allocations_free(state);
        if (state->stream) (void)cudaStreamDestroy(state->stream);
        free(state);
    }
    free(backend);
}

static const BackendOps cuda_ops = {
    .alloc = cuda_alloc,
    .free = cuda_free,
    .upload = cuda_upload,
    .download = cuda_download,
    .copy = cuda_copy,
    .fill = cuda_fill,
    .zero = cuda_zero,
    .synchronize = cuda_synchronize,
    .host_slot_create = cuda_host_slot_create,
    .host_slot_free = cuda_host_slot_free,
    .host_slot_fill = cuda_host_slot_fill,
    .host_slot_wait = cuda_host_slot_wait,
    .host_alloc = cuda_host_alloc,
    .host_free = cuda_host_free,
    .transfer_create = cuda_transfer_create,
    .transfer_free = cuda_transfer_free,
    .upload_async = cuda_upload_async,
    .transfer_device_wait = cuda_transfer_device_wait,
    .transfer_consumed = cuda_transfer_consumed,
    .transfer_host_wait = cuda_transfer_host_wait,
    .upload_ordered = cuda_upload_ordered,
    .fence_create = cuda_fence_create,
    .fence_free = cuda_fence_free,
    .fence_record = cuda_fence_record,
    .fence_passed = cuda_fence_passed,
    .fence_wait = cuda_fence_wait,
    .timer_create = cuda_timer_create,
    .timer_free = cuda_timer_free,
    .timer_mark = cuda_timer_mark,
    .timer_seconds = cuda_timer_seconds,
    .step_graph_begin = cuda_step_graph_begin,
    .step_graph_end = cuda_step_graph_end,
    .conv2d_plan = cuda_conv2d_plan,
    .conv2d_plan_free = cuda_conv2d_plan_free,
    .sgd_update_segments = cuda_sgd_update_segments,
    .adamw_update_segments = cuda_adamw_update_segments,
    .conv2d_forward = cuda_conv2d_forward,
    .conv2d_forward_stats = cuda_conv2d_forward_stats,
    .conv2d_backward_weights_prologue = cuda_conv2d_backward_weights_prologue,
    .conv2d_backward_data_prologue = cuda_conv2d_backward_data_prologue,
    .conv2d_fusions = cuda_conv2d_fusions,
    .batchnorm_statistics_from_sums = cuda_batchnorm_statistics_from_sums,
    .conv2d_backward_data = cuda_conv2d_backward_data,
    .conv2d_backward_weights = cuda_conv2d_backward_weights,
    .depthwise_plan = cuda_depthwise_plan,
    .depthwise_plan_free = cuda_depthwise_plan_free,
    .depthwise_forward = cuda_depthwise_forward,
    .depthwise_backward_data = cuda_depthwise_backward_data,
    .depthwise_backward_weights = cuda_depthwise_backward_weights,
    .linear_plan = composed_linear_plan,
    .linear_plan_free = composed_linear_plan_free,
    .linear_planned_forward = composed_linear_planned_forward,
    .batchnorm_forward_train = cuda_batchnorm_forward_train,
    .batchnorm_forward_train_f32 = cuda_batchnorm_forward_train_f32,
    .batchnorm_forward_eval = cuda_batchnorm_forward_eval,
    .batchnorm_backward = cuda_batchnorm_backward,
    .batchnorm_backward_f32 = cuda_batchnorm_backward_f32,
    .batchnorm_relu_forward_train = cuda_batchnorm_relu_forward_train,
    .batchnorm_relu_forward_eval = cuda_batchnorm_relu_forward_eval,
    .batchnorm_relu_backward = cuda_batchnorm_relu_backward,
    .batchnorm_silu_forward_train = composed_batchnorm_silu_forward_train,
    .batchnorm_silu_forward_eval = composed_batchnorm_silu_forward_eval,
    .batchnorm_silu_backward = composed_batchnorm_silu_backward,
    .batchnorm_centered_squares = cuda_batchnorm_centered_squares,
    .batchnorm_finish_statistics = cuda_batchnorm_finish_statistics,
    .batchnorm_forward_apply = cuda_batchnorm_forward_apply,
    .batchnorm_backward_reduce = cuda_batchnorm_backward_reduce,
    .batchnorm_backward_apply = cuda_batchnorm_backward_apply,
    .relu_forward = cuda_relu_forward,
    .relu_forward_f32 = cuda_relu_forward_f32,
    .relu_backward = cuda_relu_backward,
    .relu_backward_f32 = cuda_relu_backward_f32,
    .gelu_forward = cuda_gelu_forward,
    .gelu_backward = cuda_gelu_backward,
    .add = cuda_add,
    .axpby = cuda_axpby,
    .act_axpby = cuda_act_axpby,
    .act_to_float = cuda_act_to_float,
    .float_to_act = cuda_float_to_act,
    .mul = cuda_mul,
    .maxpool_forward = cuda_maxpool_forward,
    .maxpool_backward = cuda_maxpool_backward,
    .avgpool_forward = cuda_avgpool_forward,
    .avgpool_backward = cuda_avgpool_backward,
    .gemm = cuda_gemm,
    .linear_forward = cuda_linear_forward,
    .linear_backward_data = cuda_linear_backward_data,
    .linear_backward_weights = cuda_linear_backward_weights,
    .bias_add = cuda_bias_add,
    .bias_add_f32 = cuda_bias_add_f32,
    .bias_backward = cuda_bias_backward,
    .l2_normalize_forward = cuda_l2_normalize_forward,
    .l2_normalize_backward = cuda_l2_normalize_backward,
    .softmax_forward = cuda_softmax_forward,
    .log_softmax_forward = cuda_log_softmax_forward,
    .softmax_backward = cuda_softmax_backward,
    .log_softmax_backward = cuda_log_softmax_backward,
    .sum = cuda_sum,
    .sum_squares = cuda_sum_squares,
    .dot = cuda_dot,
    .column_sum = cuda_column_sum,
    .act_column_sum = cuda_act_column_sum,
    .count_nonfinite = cuda_count_nonfinite,
    .scalar_combine = cuda_scalar_combine,
    .sgd_update = cuda_sgd_update,
    .adamw_update = cuda_adamw_update,
    .ema_update = cuda_ema_update,
    .layernorm_forward = cuda_layernorm_forward,
    .layernorm_backward = cuda_layernorm_backward,
    .attention_plan = cuda_attention_plan,
    .attention_plan_free = cuda_attention_plan_free,
    .attention_forward = cuda_attention_forward,
    .attention_backward = cuda_attention_backward,
    .describe_paths = cuda_describe_paths,
    .memory_counts = cuda_memory_counts,
    .vit_tokens_forward = cuda_vit_tokens_forward,
    .vit_tokens_backward = cuda_vit_tokens_backward,
    .residual_scale_add_forward = cuda_residual_scale_add_forward,
    .residual_layernorm_forward = cuda_residual_layernorm_forward,
    .residual_scale_add_backward = cuda_residual_scale_add_backward,
    .token_pool_forward = cuda_token_pool_forward,
    .token_pool_backward = cuda_token_pool_backward,
    .lars_direction = cuda_lars_direction,
    .step_gate = cuda_step_gate,
    .amp_update = cuda_amp_update,
    .resize_bilinear_forward = cuda_resize_bilinear_forward,
    .resize_bilinear_backward = cuda_resize_bilinear_backward,
    .mixup = cuda_mixup,
    .copy_2d = cuda_copy_2d,
    .channel_shuffle = cuda_channel_shuffle,
    .mask_tokens_forward = cuda_mask_tokens_forward,
    .mask_tokens_backward = cuda_mask_tokens_backward,
    .scale_rows = cuda_scale_rows,
    .gather_rows = cuda_gather_rows,
    .scatter_add_rows = cuda_scatter_add_rows,
    .combine_rows = cuda_combine_rows,
    .column_max = cuda_column_max,
    .sinkhorn_exp = cuda_sinkhorn_exp,
    .sinkhorn_normalize = cuda_sinkhorn_normalize,
    .koleo_forward = cuda_koleo_forward,
    .koleo_backward = cuda_koleo_backward,
    .cka_loss = cuda_cka_loss,
    .rope_forward = cuda_rope_forward,
    .rope_backward = cuda_rope_backward,
    .swiglu_forward = cuda_swiglu_forward,
    .swiglu_backward = cuda_swiglu_backward,
    .silu_forward = cuda_silu_forward,
    .silu_backward = cuda_silu_backward,
    .normalize_u8 = cuda_normalize_u8,
    .normalize_f32 = cuda_normalize_f32,
};

void *cuda_backend_stream(const Backend *backend) { return cuda_state(backend)->stream; }

Backend *cuda_backend_create(int device, ErrorMessage *err) {
    char reason[256] = "";
    const int count = cuda_device_count(reason, sizeof reason);
    if (count == 0) {
        error_set(err, "no usable GPU: %s", reason);
        return NULL;
    }
    if (device < 0 || device >= count) {
        error_set(err, "GPU %d does not exist (%d visible)", device, count);
        return NULL;
    }
    CudaLibraries libraries;
    if (cuda_libraries_read(&libraries, err) || cuda_libraries_check(&libraries, err))
        return NULL;
    Backend *backend = calloc(1, sizeof *backend);
    CudaState *state = calloc(1, sizeof *state);
    if (!backend || !state) {
        free(backend);
        free(state);
        error_set(err, "cuda backend: out of memory");
        return NULL;
    }
    backend->name = "cuda";
    backend->act_element_bytes = sizeof(float);
    backend->threads = 1;
    backend->impl = state;
    backend->destroy = cuda_destroy;
    backend->op = cuda_ops;
    state->device = device;
    struct cudaDeviceProp properties;
    cudaError_t status = cudaSetDevice(device);
    if (status == cudaSuccess) status = cudaGetDeviceProperties(&properties, device);
    if (status == cudaSuccess) status = cudaStreamCreateWithFlags(&state->stream,
                                                                   cudaStreamNonBlocking);
    if (status == cudaSuccess)
        status = cudaMalloc((void **)&state->scratch, CUDA_SCRATCH_DOUBLES * sizeof(double));
    if (status == cudaSuccess) status = (cudaError_t)cuda_step_params_init(state);
    if (status != cudaSuccess) {
        error_set(err, "GPU %d: %s", device, cudaGetErrorString(status));
        (void)cudaGetLastError();
        cuda_destroy(backend);
        return NULL;
    }
    snprintf(state->device_name, sizeof state->device_name, "%.127s", properties.name);
    state->compute_major = properties.major;
    state->compute_minor = properties.minor;
    snprintf(backend->device, sizeof backend->device, "GPU %d: %.96s, %.1f GiB, compute %d.%d",
             device, state->device_name,
             (double)properties.totalGlobalMem / (1024.0 * 1024.0 * 1024.0), properties.major,
             properties.minor);
    if (cuda_blas_create(state, err) || cuda_dnn_create(state, err)) {
        error_prefix(err, "GPU %d (%s)", device, state->device_name);
        cuda_destroy(backend);
        return NULL;
    }
    return backend;
}
