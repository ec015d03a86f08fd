// The reference backend's op table, plus its simple ops: memory (host
// malloc), elementwise, reductions and input normalisation. Plain loops,
// single-threaded; reductions accumulate in double so the oracle's own
// rounding stays far below any tolerance it is compared with.
#include "backend/ref/ref_backend.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/composed_ops.h"
#include "backend/host_ops.h"
#include "backend/linear_plan_composed.h"
#include "backend/ref/ref_ops.h"
#include "util/half.h"

// ---- memory ------------------------------------------------------------------

static void *ref_alloc(Backend *backend, size_t bytes) {
    // aligned_alloc wants a size that is a multiple of the alignment.
    const size_t alignment = 64;
    size_t rounded = bytes == 0 ? alignment : (bytes + alignment - 1) / alignment * alignment;
    if (rounded < bytes) return NULL;  // overflow
    return aligned_alloc(alignment, rounded);
}

static void ref_free(Backend *backend, void *pointer) { free(pointer); }

static void ref_upload(Backend *backend, void *device, const void *host, size_t bytes) {
    if (bytes) memcpy(device, host, bytes);
}

static void ref_download(Backend *backend, void *host, const void *device, size_t bytes) {
    if (bytes) memcpy(host, device, bytes);
}

static void ref_copy(Backend *backend, void *dst, const void *src, size_t bytes) {
    if (bytes) memmove(dst, src, bytes);
}

static void ref_fill(Backend *backend, float *x, float value, size_t n) {
    for (size_t i = 0; i < n; i++) x[i] = value;
}

float ref_round_act(const Backend *backend, float x) {
    if (backend->compute_dtype == COMPUTE_F16) return f16_to_float(float_to_f16(x));
    if (backend->compute_dtype == COMPUTE_BF16) return bf16_to_float(float_to_bf16(x));
    return x;
}

void ref_round_acts(const Backend *backend, Act *x_act, size_t n) {
    float *x = (float *)x_act;
    if (backend->compute_dtype == COMPUTE_F32) return;
    for (size_t i = 0; i < n; i++) x[i] = ref_round_act(backend, x[i]);
}

static void ref_zero(Backend *backend, void *x, size_t bytes) {
    if (bytes) memset(x, 0, bytes);
}

static void ref_synchronize(Backend *backend) {}

// ---- elementwise ---------------------------------------------------------------

static void ref_relu_forward_f32(Backend *backend, size_t n, const float *x, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = x[i] <= 0.0f ? 0.0f : x[i];  // NaN stays NaN, as torch.relu
}

static void ref_relu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    ref_relu_forward_f32(backend, n, (const float *)x_act, (float *)y_act);
    ref_round_acts(backend, y_act, n);
}

static void ref_relu_backward_f32(Backend *backend, size_t n, const float *y, const float *dy,
                              float *dx) {
    for (size_t i = 0; i < n; i++) dx[i] = y[i] <= 0.0f ? 0.0f : dy[i];  // torch: zero where y <= 0
}

static void ref_relu_backward(Backend *backend, size_t n, const Act *y_act, const Act *dy_act,
                              Act *dx_act) {
    ref_relu_backward_f32(backend, n, (const float *)y_act, (const float *)dy_act, (float *)dx_act);
    ref_round_acts(backend, dx_act, n);
}

// GELU in double: Phi(x) = erfc(-x / sqrt 2) / 2, which equals (1 + erf(x / sqrt 2)) / 2
// but keeps its relative accuracy where Phi is tiny (x very negative).
static double standard_normal_cdf(double x) { return 0.5 * erfc(-x * M_SQRT1_2); }

static void ref_gelu_forward(Backend *backend, size_t n, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t i = 0; i < n; i++) y[i] = (float)(x[i] * standard_normal_cdf(x[i]));
    ref_round_acts(backend, y_act, n);
}

static void ref_gelu_backward(Backend *backend, size_t n, const Act *x_act, const Act *dy_act,
                              Act *dx_act) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const double inv_sqrt_2pi = 0.5 * M_2_SQRTPI * M_SQRT1_2;
    for (size_t i = 0; i < n; i++) {
        const double v = x[i];
        const double density = inv_sqrt_2pi * exp(-0.5 * v * v);
        dx[i] = (float)(dy[i] * (standard_normal_cdf(v) + v * density));
    }
    ref_round_acts(backend, dx_act, n);
}

static void ref_add(Backend *backend, size_t n, const float *a, const float *b, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] + b[i];
}

static void ref_axpby(Backend *backend, size_t n, float alpha, const float *x, float beta,
                      float *y) {
    for (size_t i = 0; i < n; i++) y[i] = beta == 0.0f ? alpha * x[i] : alpha * x[i] + beta * y[i];
}

static void ref_act_axpby(Backend *backend, size_t n, float alpha, const Act *x, float beta,
                          Act *y) {
    ref_axpby(backend, n, alpha, (const float *)x, beta, (float *)y);
    ref_round_acts(backend, y, n);
}

// fp32 storage: the boundary is a copy.
static void ref_act_to_float(Backend *backend, size_t n, const Act *x, float *y) {
    memcpy(y, x, n * sizeof(float));
}

static void ref_float_to_act(Backend *backend, size_t n, const float *x, Act *y) {
    memcpy(y, x, n * sizeof(float));
    ref_round_acts(backend, y, n);
}

static void ref_mul(Backend *backend, size_t n, const float *a, const float *b, float *y) {
    for (size_t i = 0; i < n; i++) y[i] = a[i] * b[i];
}

// ---- reductions -------------------------------------------------------------------

static void ref_sum(Backend *backend, size_t n, const float *x, float *result) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += x[i];
    *result = (float)total;
}

static void ref_sum_squares(Backend *backend, size_t n, const float *x, float *result) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += (double)x[i] * x[i];
    *result = (float)total;
}

static void ref_count_nonfinite(Backend *backend, size_t n, const float *x, float *result) {
    size_t bad = 0;
    for (size_t i = 0; i < n; i++) bad += !isfinite(x[i]);
    *result += (float)bad;
}

static void ref_dot(Backend *backend, size_t n, const float *a, const float *b, float *result) {
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += (double)a[i] * b[i];
    *result = (float)total;
}

static void ref_column_sum(Backend *backend, size_t rows, int channels, const float *x,
                           float *y) {
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++) total += x[r * (size_t)channels + c];
        y[c] = (float)total;
    }
}

static void ref_act_column_sum(Backend *backend, size_t rows, int channels, const Act *x,
                               float *y) {
    ref_column_sum(backend, rows, channels, (const float *)x, y);
}

// ---- input ----------------------------------------------------------------------------

// Same operation order as torchvision's ToTensor (x / 255) then Normalize.
static void ref_normalize_u8(Backend *backend, size_t pixels, const uint8_t *x,
                             const float mean[3], const float std[3], Act *y_act) {
    float *y = (float *)y_act;
    for (size_t p = 0; p < pixels; p++)
        for (int c = 0; c < 3; c++)
            y[p * 3 + c] = ((float)x[p * 3 + c] / 255.0f - mean[c]) / std[c];
    ref_round_acts(backend, y_act, pixels * 3);
}

static void ref_normalize_f32(Backend *backend, size_t pixels, int channels, const float *x,
                              const float *mean, const float *std, Act *y_act) {
    float *y = (float *)y_act;
    for (size_t p = 0; p < pixels; p++)
        for (int c = 0; c < channels; c++)
            y[p * channels + c] = (x[p * channels + c] - mean[c]) / std[c];
    ref_round_acts(backend, y_act, pixels * (size_t)channels);
}

// ---- the table ----------------------------------------------------------------------------

static void ref_destroy(Backend *backend) { free(backend); }

Backend *ref_backend_create(ErrorMessage *err) {
    Backend *backend = calloc(1, sizeof *backend);
    if (!backend) {
        error_set(err, "ref backend: out of memory");
        return NULL;
    }
    backend->name = "ref";
    backend->act_element_bytes = sizeof(float);
    backend->threads = 1;
    backend->impl = NULL;
    backend->destroy = ref_destroy;
    backend->op = (BackendOps){
        .alloc = ref_alloc,
        .free = ref_free,
        .upload = ref_upload,
        .download = ref_download,
        .copy = ref_copy,
        .fill = ref_fill,
        .zero = ref_zero,
        .synchronize = ref_synchronize,
        .host_slot_create = host_slot_create,
        .host_slot_free = host_slot_free,
        .host_slot_fill = host_slot_fill,
        .host_slot_wait = host_slot_wait,
        HOST_OPS_DATA_TO_DEVICE,
        .conv2d_plan = ref_conv2d_plan,
        .conv2d_plan_free = ref_conv2d_plan_free,
        .conv2d_forward = ref_conv2d_forward,
        .conv2d_backward_data = ref_conv2d_backward_data,
        .conv2d_backward_weights = ref_conv2d_backward_weights,
        .depthwise_plan = ref_depthwise_plan,
        .depthwise_plan_free = ref_depthwise_plan_free,
        .depthwise_forward = ref_depthwise_forward,
        .depthwise_backward_data = ref_depthwise_backward_data,
        .depthwise_backward_weights = ref_depthwise_backward_weights,
        .linear_plan = composed_linear_plan,
        .linear_plan_free = composed_linear_plan_free,
        .linear_planned_forward = composed_linear_planned_forward,
        .batchnorm_forward_train = ref_batchnorm_forward_train,
        .batchnorm_forward_train_f32 = ref_batchnorm_forward_train_f32,
        .batchnorm_forward_eval = ref_batchnorm_forward_eval,
        .batchnorm_backward = ref_batchnorm_backward,
        .batchnorm_backward_f32 = ref_batchnorm_backward_f32,
        .batchnorm_relu_forward_train = ref_batchnorm_relu_forward_train,
        .batchnorm_relu_forward_eval = ref_batchnorm_relu_forward_eval,
        .batchnorm_relu_backward = ref_batchnorm_relu_backward,
        .batchnorm_silu_forward_train = composed_batchnorm_silu_forward_train,
        .batchnorm_silu_forward_eval = composed_batchnorm_silu_forward_eval,
        .batchnorm_silu_backward = composed_batchnorm_silu_backward,
        .batchnorm_centered_squares = ref_batchnorm_centered_squares,
        .batchnorm_finish_statistics = ref_batchnorm_finish_statistics,
        .batchnorm_forward_apply = ref_batchnorm_forward_apply,
        .batchnorm_backward_reduce = ref_batchnorm_backward_reduce,
        .batchnorm_backward_apply = ref_batchnorm_backward_apply,
        .relu_forward = ref_relu_forward,
        .relu_forward_f32 = ref_relu_forward_f32,
        .relu_backward = ref_relu_backward,
        .relu_backward_f32 = ref_relu_backward_f32,
        .gelu_forward = ref_gelu_forward,
        .gelu_backward = ref_gelu_backward,
        .add = ref_add,
        .axpby = ref_axpby,
        .act_axpby = ref_act_axpby,
        .act_to_float = ref_act_to_float,
        .float_to_act = ref_float_to_act,
        .mul = ref_mul,
        .maxpool_forward = ref_maxpool_forward,
        .maxpool_backward = ref_maxpool_backward,
        .avgpool_forward = ref_avgpool_forward,
        .avgpool_backward = ref_avgpool_backward,
        .gemm = ref_gemm,
        .linear_forward = ref_linear_forward,
        .linear_backward_data = ref_linear_backward_data,
        .linear_backward_weights = ref_linear_backward_weights,
        .bias_add = ref_bias_add,
        .bias_add_f32 = ref_bias_add_f32,
        .bias_backward = ref_bias_backward,
        .l2_normalize_forward = ref_l2_normalize_forward,
        .l2_normalize_backward = ref_l2_normalize_backward,
        .softmax_forward = ref_softmax_forward,
        .log_softmax_forward = ref_log_softmax_forward,
        .softmax_backward = ref_softmax_backward,
        .log_softmax_backward = ref_log_softmax_backward,
        .sum = ref_sum,
        .sum_squares = ref_sum_squares,
        .dot = ref_dot,
        .column_sum = ref_column_sum,
        .act_column_sum = ref_act_column_sum,
        .count_nonfinite = ref_count_nonfinite,
        .scalar_combine = host_scalar_combine,
        .batchnorm_statistics_from_sums = host_batchnorm_statistics_from_sums,
        .sgd_update_segments = host_sgd_update_segments,
        .adamw_update_segments = host_adamw_update_segments,
        .sgd_update = ref_sgd_update,
        .adamw_update = ref_adamw_update,
        .ema_update = ref_ema_update,
        .lars_direction = host_lars_direction,
        .step_gate = host_step_gate,
        .amp_update = host_amp_update,
        .layernorm_forward = ref_layernorm_forward,
        .layernorm_backward = ref_layernorm_backward,
        .attention_plan = ref_attention_plan,
        .attention_plan_free = ref_attention_plan_free,
        .attention_forward = ref_attention_forward,
        .attention_backward = ref_attention_backward,
        .vit_tokens_forward = ref_vit_tokens_forward,
        .vit_tokens_backward = ref_vit_tokens_backward,
        .residual_scale_add_forward = ref_residual_scale_add_forward,
        .residual_layernorm_forward = composed_residual_layernorm_forward,
        .residual_scale_add_backward = ref_residual_scale_add_backward,
        .token_pool_forward = ref_token_pool_forward,
        .token_pool_backward = ref_token_pool_backward,
        .resize_bilinear_forward = ref_resize_bilinear_forward,
        .resize_bilinear_backward = ref_resize_bilinear_backward,
        .mixup = ref_mixup,
        .copy_2d = ref_copy_2d,
        .channel_shuffle = ref_channel_shuffle,
        .mask_tokens_forward = ref_mask_tokens_forward,
        .mask_tokens_backward = ref_mask_tokens_backward,
        .scale_rows = ref_scale_rows,
        .gather_rows = ref_gather_rows,
        .scatter_add_rows = ref_scatter_add_rows,
        .combine_rows = ref_combine_rows,
        .column_max = ref_column_max,
        .sinkhorn_exp = ref_sinkhorn_exp,
        .sinkhorn_normalize = ref_sinkhorn_normalize,
        .koleo_forward = ref_koleo_forward,
        .koleo_backward = ref_koleo_backward,
        .cka_loss = ref_cka_loss,
        .rope_forward = ref_rope_forward,
        .rope_backward = ref_rope_backward,
        .swiglu_forward = ref_swiglu_forward,
        .swiglu_backward = ref_swiglu_backward,
        .silu_forward = ref_silu_forward,
        .silu_backward = ref_silu_backward,
        .normalize_u8 = ref_normalize_u8,
        .normalize_f32 = ref_normalize_f32,
    };
    return backend;
}
