// Reference transformer ops besides attention (ref_attention.c): layer norm,
// the ViT token sequence (class, register and patch tokens with positions),
// the LayerScale / drop-path residual add and token pooling. Plain loops;
// statistics, sums over rows and over the batch accumulate in double.
#include <math.h>

#include "backend/ref/ref_ops.h"

// ---- layer norm ------------------------------------------------------------------

void ref_layernorm_forward(Backend *backend, size_t rows, int channels, const Act *x_act,
                           const float *gamma, const float *beta, float eps, Act *y_act,
                           float *mean, float *inv_std) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels;
        double total = 0.0;
        for (int c = 0; c < channels; c++) total += x_row[c];
        const double m = total / channels;
        double squares = 0.0;
        for (int c = 0; c < channels; c++) squares += (x_row[c] - m) * (x_row[c] - m);
        const double inverse = 1.0 / sqrt(squares / channels + eps);
        for (int c = 0; c < channels; c++)
            y[r * channels + c] = (float)((x_row[c] - m) * inverse * gamma[c] + beta[c]);
        mean[r] = (float)m;
        inv_std[r] = (float)inverse;
    }
    ref_round_acts(backend, y_act, rows * channels);
}

// With xhat = (x - mean) inv_std and g = dy gamma over the C channels of a
// row: dx = inv_std (g - mean(g) - xhat mean(g xhat)); dgamma = sum over
// rows of dy xhat, dbeta = sum of dy; accumulate adds dx to what is there
// (in double, rounded once).
void ref_layernorm_backward(Backend *backend, size_t rows, int channels, const Act *x_act,
                            const Act *dy_act, const float *gamma, const float *mean,
                            const float *inv_std, Act *dx_act, int accumulate, float *dgamma,
                            float *dbeta) {
    const float *x = (const float *)x_act;
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (size_t r = 0; r < rows; r++) {
        const float *x_row = x + r * channels, *dy_row = dy + r * channels;
        double sum_g = 0.0, sum_g_xhat = 0.0;
        for (int c = 0; c < channels; c++) {
            const double xhat = (x_row[c] - (double)mean[r]) * inv_std[r];
            const double g = (double)dy_row[c] * gamma[c];
            sum_g += g;
            sum_g_xhat += g * xhat;
        }
        for (int c = 0; c < channels; c++) {
            const double xhat = (x_row[c] - (double)mean[r]) * inv_std[r];
            const double g = (double)dy_row[c] * gamma[c];
            const double value = inv_std[r] * (g - sum_g / channels - xhat * sum_g_xhat / channels);
            float *out = &dx[r * channels + c];
            *out = (float)(accumulate ? *out + value : value);
        }
    }
    for (int c = 0; c < channels; c++) {
        double sum_dy = 0.0, sum_dy_xhat = 0.0;
        for (size_t r = 0; r < rows; r++) {
            const double xhat = (x[r * channels + c] - (double)mean[r]) * inv_std[r];
            sum_dy += dy[r * channels + c];
            sum_dy_xhat += dy[r * channels + c] * xhat;
        }
        dgamma[c] += (float)sum_dy_xhat;
        dbeta[c] += (float)sum_dy;
    }
    ref_round_acts(backend, dx_act, rows * channels);
}

// ---- ViT token sequence ------------------------------------------------------------

void ref_vit_tokens_forward(Backend *backend, int batch, int registers, int patches,
                            int channels, const Act *patch_embeddings_act, const float *cls,
                            const float *cls_pos, const float *register_tokens,
                            const float *patch_pos, Act *tokens_act) {
    const float *patch_embeddings = (const float *)patch_embeddings_act;
    float *tokens = (float *)tokens_act;
    const size_t per_sample = (size_t)(1 + registers + patches) * channels;
    for (int b = 0; b < batch; b++) {
        float *out = tokens + b * per_sample;
        for (int c = 0; c < channels; c++) out[c] = cls_pos ? cls[c] + cls_pos[c] : cls[c];
        out += channels;
        for (int i = 0; i < registers * channels; i++) out[i] = register_tokens[i];
        out += (size_t)registers * channels;
        const float *in = patch_embeddings + (size_t)b * patches * channels;
        for (size_t i = 0; i < (size_t)patches * channels; i++)
            out[i] = patch_pos ? in[i] + patch_pos[i] : in[i];
    }
    ref_round_acts(backend, tokens_act, (size_t)batch * (1 + registers + patches) * channels);
}

// Sum over the batch of one position's gradient: sum_b dtokens[b, token, c].
static double batch_sum(int batch, size_t per_sample, const float *dtokens, size_t offset) {
    double total = 0.0;
    for (int b = 0; b < batch; b++) total += dtokens[b * per_sample + offset];
    return total;
}

void ref_vit_tokens_backward(Backend *backend, int batch, int registers, int patches,
                             int channels, const Act *dtokens_act, Act *dpatch_embeddings_act,
                             float *dcls, float *dcls_pos, float *dregister_tokens,
                             float *dpatch_pos) {
    const float *dtokens = (const float *)dtokens_act;
    float *dpatch_embeddings = (float *)dpatch_embeddings_act;
    const size_t per_sample = (size_t)(1 + registers + patches) * channels;
    const size_t patch_start = (size_t)(1 + registers) * channels;
    for (int b = 0; b < batch; b++)
        for (size_t i = 0; i < (size_t)patches * channels; i++)
            dpatch_embeddings[(size_t)b * patches * channels + i] =
                dtokens[b * per_sample + patch_start + i];
    for (int c = 0; c < channels; c++) {
        const float total = (float)batch_sum(batch, per_sample, dtokens, (size_t)c);
        dcls[c] += total;
        if (dcls_pos) dcls_pos[c] += total;
    }
    for (size_t i = 0; i < (size_t)registers * channels; i++)
        dregister_tokens[i] += (float)batch_sum(batch, per_sample, dtokens, channels + i);
    for (size_t i = 0; dpatch_pos && i < (size_t)patches * channels; i++)
        dpatch_pos[i] += (float)batch_sum(batch, per_sample, dtokens, patch_start + i);
    ref_round_acts(backend, dpatch_embeddings_act, (size_t)batch * patches * channels);
}

// ---- residual add with LayerScale and drop path -------------------------------------

// The factor on element (b, c): sample_scale[b] gamma[c], either may be absent (1).
static double branch_factor(const float *gamma, const float *sample_scale, int b, int c) {
    return (gamma ? (double)gamma[c] : 1.0) * (sample_scale ? (double)sample_scale[b] : 1.0);
}

void ref_residual_scale_add_forward(Backend *backend, int batch, size_t rows_per_sample,
                                    int channels, const Act *x_act, const Act *branch_act,
                                    const float *gamma, const float *sample_scale, Act *y_act) {
    const float *x = (const float *)x_act;
    const float *branch = (const float *)branch_act;
    float *y = (float *)y_act;
    for (int b = 0; b < batch; b++)
        for (size_t r = 0; r < rows_per_sample; r++)
            for (int c = 0; c < channels; c++) {
                const size_t i = ((size_t)b * rows_per_sample + r) * channels + c;
                y[i] = (float)(x[i] + branch_factor(gamma, sample_scale, b, c) * branch[i]);
            }
    ref_round_acts(backend, y_act, batch * rows_per_sample * channels);
}

void ref_residual_scale_add_backward(Backend *backend, int batch, size_t rows_per_sample,
                                     int channels, const Act *branch_act, const Act *dy_act,
                                     const float *gamma, const float *sample_scale,
                                     Act *dbranch_act, float *dgamma) {
    const float *branch = (const float *)branch_act;
    const float *dy = (const float *)dy_act;
    float *dbranch = (float *)dbranch_act;
    for (int b = 0; b < batch; b++)
        for (size_t r = 0; r < rows_per_sample; r++)
            for (int c = 0; c < channels; c++) {
                const size_t i = ((size_t)b * rows_per_sample + r) * channels + c;
                dbranch[i] = (float)(branch_factor(gamma, sample_scale, b, c) * dy[i]);
            }
    ref_round_acts(backend, dbranch_act, batch * rows_per_sample * channels);
    if (!gamma) return;
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (int b = 0; b < batch; b++)
            for (size_t r = 0; r < rows_per_sample; r++) {
                const size_t i = ((size_t)b * rows_per_sample + r) * channels + c;
                total += branch_factor(NULL, sample_scale, b, c) * dy[i] * branch[i];
            }
        dgamma[c] += (float)total;
    }
}

// ---- token pooling ---------------------------------------------------------------------

void ref_token_pool_forward(Backend *backend, int batch, int tokens, int channels, int first,
                            int count, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (int b = 0; b < batch; b++)
        for (int c = 0; c < channels; c++) {
            double total = 0.0;
            for (int t = first; t < first + count; t++)
                total += x[((size_t)b * tokens + t) * channels + c];
            y[(size_t)b * channels + c] = (float)(total / count);
        }
    ref_round_acts(backend, y_act, (size_t)batch * channels);
}

void ref_token_pool_backward(Backend *backend, int batch, int tokens, int channels, int first,
                             int count, const Act *dy_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int b = 0; b < batch; b++)
        for (int t = 0; t < tokens; t++)
            for (int c = 0; c < channels; c++) {
                const int pooled = t >= first && t < first + count;
                dx[((size_t)b * tokens + t) * channels + c] =
                    pooled ? (float)((double)dy[(size_t)b * channels + c] / count) : 0.0f;
            }
    ref_round_acts(backend, dx_act, (size_t)batch * tokens * channels);
}
