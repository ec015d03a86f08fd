// The cpu backend's op table, its state (oneDNN engine and stream) and its
// memory ops and GEMM. Convolutions and GEMM run on oneDNN (chosen over
// OpenBLAS + im2col by measurement: docs/performance.md, tools/bench_conv);
// the memory-bound ops are OpenMP loops in cpu_elementwise.c, cpu_batchnorm.c,
// cpu_norm.c, cpu_rows.c and cpu_transformer.c; attention in cpu_attention.c.
#include "backend/cpu/cpu_backend.h"

#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif

#include "backend/cpu/cpu_internal.h"
#include "backend/host_ops.h"
#include "backend/composed_ops.h"
#include "backend/ref/ref_ops.h"
#include "util/cpu.h"

void cpu_set_threads(const Backend *backend) {
#ifdef _OPENMP
    if (omp_get_max_threads() != backend->threads) omp_set_num_threads(backend->threads);
#endif
}

int cpu_channel_block(const Backend *backend, int channels) {
    // Enough blocks for every thread, each a multiple of 16 floats (one
    // cache line) so threads never share a line, at most CPU_CHANNEL_BLOCK.
    int per_thread = (channels + backend->threads - 1) / backend->threads;
    int block = (per_thread + 15) / 16 * 16;
    return block < CPU_CHANNEL_BLOCK ? block : CPU_CHANNEL_BLOCK;
}

// ---- memory ----------------------------------------------------------------------

static void *cpu_alloc(Backend *backend, size_t bytes) {
    const size_t alignment = 64;
    size_t rounded = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
    if (rounded < bytes) return NULL;  // overflow
    return aligned_alloc(alignment, rounded);
}

static void cpu_free(Backend *backend, void *pointer) { free(pointer); }

static void cpu_upload(Backend *backend, void *device, const void *host, size_t bytes) {
    if (bytes) memcpy(device, host, bytes);
}

static void cpu_download(Backend *backend, void *host, const void *device, size_t bytes) {
    if (bytes) memcpy(host, device, bytes);
}

static void cpu_copy(Backend *backend, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}

static void cpu_zero(Backend *backend, void *x, size_t bytes) {
    if (bytes) memset(x, 0, bytes);
}

// fp32 storage: the boundary between activations and losses is a copy.
static void cpu_act_to_float(Backend *backend, size_t n, const Act *x, float *y) {
    if (n) memcpy(y, x, n * sizeof(float));
}

static void cpu_float_to_act(Backend *backend, size_t n, const float *x, Act *y) {
    if (n) memcpy(y, x, n * sizeof(float));
}

static void cpu_act_axpby(Backend *backend, size_t n, float alpha, const Act *x, float beta,
                          Act *y) {
    cpu_axpby(backend, n, alpha, (const float *)x, beta, (float *)y);
}

static void cpu_synchronize(Backend *backend) {
    CpuState *state = backend->impl;
    dnnl_stream_wait(state->stream);
}

static void cpu_act_column_sum(Backend *backend, size_t rows, int channels, const Act *x,
                               float *y) {
    cpu_column_sum(backend, rows, channels, (const float *)x, y);
}

// ---- GEMM ---------------------------------------------------------------------------

// Row-major like backend.h, which is oneDNN's sgemm convention too.
static void cpu_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
                     float alpha, const float *a, int lda, const float *b, int ldb, float beta,
                     float *c, int ldc) {
    if (m <= 0 || n <= 0) return;
    if (k <= 0) {  // an empty product: C = beta C (oneDNN rejects lda 0)
        for (int i = 0; i < m; i++)
            for (int j = 0; j < n; j++) {
                float *cij = c + (size_t)i * ldc + j;
                *cij = beta == 0.0f ? 0.0f : beta * *cij;
            }
        return;
    }
    cpu_set_threads(backend);
    (void)dnnl_sgemm(transpose_a ? 'T' : 'N', transpose_b ? 'T' : 'N', m, n, k, alpha, a, lda, b,
                     ldb, beta, c, ldc);
}

// Linear layers: the product, then the bias (what the layers did before).
static void cpu_linear_forward(Backend *backend, int rows, int in, int out, const Act *x,
                               const Act *w, const float *bias, Act *y) {
    cpu_gemm(backend, 0, 1, rows, out, in, 1.0f, (const float *)x, in, (const float *)w, in,
             0.0f, (float *)y, out);
    if (bias) cpu_bias_add(backend, (size_t)rows, out, bias, y);
}

static void cpu_linear_backward_data(Backend *backend, int rows, int in, int out, const Act *dy,
                                     const Act *w, Act *dx) {
    cpu_gemm(backend, 0, 0, rows, in, out, 1.0f, (const float *)dy, out, (const float *)w, in,
             0.0f, (float *)dx, in);
}

static void cpu_linear_backward_weights(Backend *backend, int rows, int in, int out,
                                        const Act *x, const Act *dy, float *dw, float *dbias) {
    cpu_gemm(backend, 1, 0, out, in, rows, 1.0f, (const float *)dy, out, (const float *)x, in,
             1.0f, dw, in);
    if (dbias) cpu_bias_backward(backend, (size_t)rows, out, dy, dbias);
}

// ---- the table -------------------------------------------------------------------------

static void cpu_destroy(Backend *backend) {
    CpuState *state = backend->impl;
    if (state) {
        if (state->stream) dnnl_stream_destroy(state->stream);
        if (state->engine) dnnl_engine_destroy(state->engine);
        free(state->norm_partials);
        free(state);
    }
    free(backend);
}

Backend *cpu_backend_create(int threads, ErrorMessage *err) {
    Backend *backend = calloc(1, sizeof *backend);
    CpuState *state = calloc(1, sizeof *state);
    if (!backend || !state) {
        free(backend);
        free(state);
        error_set(err, "cpu backend: out of memory");
        return NULL;
    }
    backend->name = "cpu";
    backend->act_element_bytes = sizeof(float);
    backend->threads = threads > 0 ? threads : cpu_usable_cores();
    backend->impl = state;
    backend->destroy = cpu_destroy;
    state->norm_partial_threads = backend->threads;
    state->norm_partials =
        malloc((size_t)backend->threads * 2 * CPU_NORM_GROUP * sizeof *state->norm_partials);
    if (!state->norm_partials) {
        error_set(err, "cpu backend: out of memory for batch-norm scratch (%d threads)",
                  backend->threads);
        cpu_destroy(backend);
        return NULL;
    }
    dnnl_status_t status = dnnl_engine_create(&state->engine, dnnl_cpu, 0);
    if (status == dnnl_success)
        status = dnnl_stream_create(&state->stream, state->engine, dnnl_stream_default_flags);
    if (status != dnnl_success) {
        error_set(err, "cpu backend: oneDNN engine/stream creation failed (status %d)",
                  (int)status);
        cpu_destroy(backend);
        return NULL;
    }
    cpu_set_threads(backend);
    backend->op = (BackendOps){
        .alloc = cpu_alloc,
        .free = cpu_free,
        .upload = cpu_upload,
        .download = cpu_download,
        .copy = cpu_copy,
        .fill = cpu_fill,
        .zero = cpu_zero,
        .synchronize = cpu_synchronize,
        .host_slot_create = host_slot_create,
        .host_slot_free = host_slot_free,
        .host_slot_fill = host_slot_fill,
        .host_slot_wait = host_slot_wait,
        HOST_OPS_DATA_TO_DEVICE,
        .conv2d_plan = cpu_conv2d_plan,
        .conv2d_plan_free = cpu_conv2d_plan_free,
        .conv2d_forward = cpu_conv2d_forward,
        .conv2d_backward_data = cpu_conv2d_backward_data,
        .conv2d_backward_weights = cpu_conv2d_backward_weights,
        .depthwise_plan = cpu_depthwise_plan,
        .depthwise_plan_free = cpu_depthwise_plan_free,
        .depthwise_forward = cpu_depthwise_forward,
        .depthwise_backward_data = cpu_depthwise_backward_data,
        .depthwise_backward_weights = cpu_depthwise_backward_weights,
        .linear_plan = cpu_linear_plan,
        .linear_plan_free = cpu_linear_plan_free,
        .linear_planned_forward = cpu_linear_planned_forward,
        .batchnorm_forward_train = cpu_batchnorm_forward_train,
        .batchnorm_forward_train_f32 = cpu_batchnorm_forward_train_f32,
        .batchnorm_forward_eval = cpu_batchnorm_forward_eval,
        .batchnorm_backward = cpu_batchnorm_backward,
        .batchnorm_backward_f32 = cpu_batchnorm_backward_f32,
        .batchnorm_relu_forward_train = cpu_batchnorm_relu_forward_train,
        .batchnorm_relu_forward_eval = cpu_batchnorm_relu_forward_eval,
        .batchnorm_relu_backward = cpu_batchnorm_relu_backward,
        .batchnorm_silu_forward_train = cpu_batchnorm_silu_forward_train,
        .batchnorm_silu_forward_eval = cpu_batchnorm_silu_forward_eval,
        .batchnorm_silu_backward = cpu_batchnorm_silu_backward,
        .batchnorm_centered_squares = cpu_batchnorm_centered_squares,
        // a loop over channels, nothing to gain over ref's
        .batchnorm_finish_statistics = ref_batchnorm_finish_statistics,
        .batchnorm_forward_apply = cpu_batchnorm_forward_apply,
        .batchnorm_backward_reduce = cpu_batchnorm_backward_reduce,
        .batchnorm_backward_apply = cpu_batchnorm_backward_apply,
        .relu_forward = cpu_relu_forward,
        .relu_forward_f32 = cpu_relu_forward_f32,
        .relu_backward = cpu_relu_backward,
        .relu_backward_f32 = cpu_relu_backward_f32,
        .gelu_forward = cpu_gelu_forward,
        .gelu_backward = cpu_gelu_backward,
        .add = cpu_add,
        .axpby = cpu_axpby,
        .act_axpby = cpu_act_axpby,
        .act_to_float = cpu_act_to_float,
        .float_to_act = cpu_float_to_act,
        .mul = cpu_mul,
        .maxpool_forward = cpu_maxpool_forward,
        .maxpool_backward = cpu_maxpool_backward,
        .avgpool_forward = cpu_avgpool_forward,
        .avgpool_backward = cpu_avgpool_backward,
        .gemm = cpu_gemm,
        .linear_forward = cpu_linear_forward,
        .linear_backward_data = cpu_linear_backward_data,
        .linear_backward_weights = cpu_linear_backward_weights,
        .bias_add = cpu_bias_add,
        .bias_add_f32 = cpu_bias_add_f32,
        .bias_backward = cpu_bias_backward,
        .l2_normalize_forward = cpu_l2_normalize_forward,
        .l2_normalize_backward = cpu_l2_normalize_backward,
        .softmax_forward = cpu_softmax_forward,
        .log_softmax_forward = cpu_log_softmax_forward,
        .softmax_backward = cpu_softmax_backward,
        .log_softmax_backward = cpu_log_softmax_backward,
        .sum = cpu_sum,
        .sum_squares = cpu_sum_squares,
        .dot = cpu_dot,
        .column_sum = cpu_column_sum,
        .act_column_sum = cpu_act_column_sum,
        .count_nonfinite = cpu_count_nonfinite,
        .scalar_combine = host_scalar_combine,
        .batchnorm_statistics_from_sums = host_batchnorm_statistics_from_sums,
        .sgd_update_segments = host_sgd_update_segments,
        .adamw_update_segments = host_adamw_update_segments,
        .sgd_update = cpu_sgd_update,
        .adamw_update = cpu_adamw_update,
        .ema_update = cpu_ema_update,
        .lars_direction = host_lars_direction,
        .step_gate = host_step_gate,
        .amp_update = host_amp_update,
        .layernorm_forward = cpu_layernorm_forward,
        .layernorm_backward = cpu_layernorm_backward,
        .attention_plan = cpu_attention_plan,
        .attention_plan_free = cpu_attention_plan_free,
        .attention_forward = cpu_attention_forward,
        .attention_backward = cpu_attention_backward,
        .vit_tokens_forward = cpu_vit_tokens_forward,
        .vit_tokens_backward = cpu_vit_tokens_backward,
        .residual_scale_add_forward = cpu_residual_scale_add_forward,
        .residual_layernorm_forward = composed_residual_layernorm_forward,
        .residual_scale_add_backward = cpu_residual_scale_add_backward,
        .token_pool_forward = cpu_token_pool_forward,
        .token_pool_backward = cpu_token_pool_backward,
        .resize_bilinear_forward = cpu_resize_bilinear_forward,
        .resize_bilinear_backward = cpu_resize_bilinear_backward,
        .mixup = cpu_mixup,
        .copy_2d = cpu_copy_2d,
        .channel_shuffle = cpu_channel_shuffle,
        .mask_tokens_forward = cpu_mask_tokens_forward,
        .mask_tokens_backward = cpu_mask_tokens_backward,
        .scale_rows = cpu_scale_rows,
        .gather_rows = cpu_gather_rows,
        .scatter_add_rows = cpu_scatter_add_rows,
        .combine_rows = cpu_combine_rows,
        .column_max = cpu_column_max,
        .sinkhorn_exp = cpu_sinkhorn_exp,
        .sinkhorn_normalize = cpu_sinkhorn_normalize,
        .koleo_forward = cpu_koleo_forward,
        .koleo_backward = cpu_koleo_backward,
        .cka_loss = cpu_cka_loss,
        .rope_forward = cpu_rope_forward,
        .rope_backward = cpu_rope_backward,
        .swiglu_forward = cpu_swiglu_forward,
        .swiglu_backward = cpu_swiglu_backward,
        .silu_forward = cpu_silu_forward,
        .silu_backward = cpu_silu_backward,
        .normalize_u8 = cpu_normalize_u8,
        .normalize_f32 = cpu_normalize_f32,
    };
    return backend;
}
