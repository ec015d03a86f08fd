// The reference backend's DINOv2 ops (backend.h): row scaling, row gather
// and scatter for the masked patch tokens, the Sinkhorn-Knopp steps (column
// maxima, exp, one normalisation) and KoLeo's nearest-neighbour distances;
// and DINOv31's: combine_rows (ROI-align as a sparse matrix) and the PaKA
// loss (cka_loss). Plain loops in double, except combine_rows, whose fp32
// sum in t order is part of its contract.
#include <math.h>

#include "backend/ref/ref_ops.h"

void ref_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y) {
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            y[r * channels + c] = (float)((double)x[r * channels + c] * scale[r]);
}

void ref_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x_act,
                             const float *mask, const float *token, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            y[r * channels + c] = mask[r] != 0.0f ? token[c] : x[r * channels + c];
    ref_round_acts(backend, y_act, rows * channels);
}

void ref_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                              const Act *dy_act, Act *dx_act, float *dtoken) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++)
            if (mask[r] != 0.0f) total += dy[r * channels + c];
        dtoken[c] += (float)total;
    }
    for (size_t r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++)
            dx[r * channels + c] = mask[r] != 0.0f ? 0.0f : dy[r * channels + c];
}

void ref_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (int i = 0; i < count; i++)
        for (int c = 0; c < channels; c++)
            y[(size_t)i * channels + c] = x[(size_t)index[i] * channels + c];
}

void ref_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const Act *dy_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    for (int i = 0; i < count; i++)
        for (int c = 0; c < channels; c++)
            dx[(size_t)index[i] * channels + c] += dy[(size_t)i * channels + c];
    for (int i = 0; i < count; i++)
        ref_round_acts(backend, act_at(backend, dx_act, (size_t)index[i] * channels),
                       (size_t)channels);
}

// fp32 on purpose: backend.h fixes the sum's order and precision, so every
// backend gives these bits.
void ref_combine_rows(Backend *backend, int rows, int channels, const int32_t *row_start,
                      const int32_t *index, const float *weight, const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++) {
            float total = 0.0f;
            for (int32_t t = row_start[r]; t < row_start[r + 1]; t++)
                total += weight[t] * x[(size_t)index[t] * channels + c];
            y[(size_t)r * channels + c] = total;
        }
    ref_round_acts(backend, y_act, (size_t)rows * channels);
}

void ref_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max) {
    for (int c = 0; c < channels; c++) {
        float m = -INFINITY;
        for (size_t r = 0; r < rows; r++) {
            const float v = x[r * channels + c];
            if (v > m || isnan(v)) m = v;  // a NaN stays: v > NaN is false
        }
        max[c] = m;
    }
}

// exp in double of the exact (double) products, rounded once to float.
void ref_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                      const float *max, float *q) {
    for (int r = 0; r < rows; r++)
        for (int c = 0; c < channels; c++) {
            const size_t i = (size_t)r * channels + c;
            q[i] = (float)exp((double)scale * x[i] - (double)scale * max[c]);
        }
}

// Each entry rounded to float after the column division (as an fp32
// implementation stores it), the row sum in double.
void ref_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                            float *q) {
    for (int r = 0; r < rows; r++) {
        float *row = q + (size_t)r * channels;
        double sum = 0.0;
        for (int c = 0; c < channels; c++) {
            row[c] = column_sum[c] > 0.0f ? (float)((double)row[c] / column_sum[c]) : 0.0f;
            sum += row[c];
        }
        for (int c = 0; c < channels; c++) row[c] = sum > 0.0 ? (float)(row[c] / sum) : 0.0f;
    }
}

static int32_t nearest_neighbor(int rows, int dim, const float *y, int i) {
    int32_t best = i;
    double best_dot = -INFINITY;
    for (int j = 0; j < rows; j++) {
        if (j == i) continue;
        double dot = 0.0;
        for (int d = 0; d < dim; d++) dot += (double)y[(size_t)i * dim + d] * y[(size_t)j * dim + d];
        if (dot > best_dot) best_dot = dot, best = j;  // strict: the first maximum wins
    }
    return best;
}

void ref_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                       int32_t *neighbor, float *distance, float *log_distance) {
    for (int i = 0; i < rows; i++) {
        const int32_t j = nearest_neighbor(rows, dim, y, i);
        double squares = 0.0;
        for (int d = 0; d < dim; d++) {
            const double diff = (double)y[(size_t)i * dim + d] - y[(size_t)j * dim + d] + eps;
            squares += diff * diff;
        }
        const double length = sqrt(squares);
        neighbor[i] = j;
        distance[i] = (float)length;
        log_distance[i] = (float)log(length + eps);
    }
}

void ref_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                        const int32_t *neighbor, const float *distance, float eps, float dlog,
                        float *dy) {
    // Row k: +g_k diff_k from its own distance, -g_i diff_i from every i
    // whose neighbour it is, summed in i order in double.
    for (int k = 0; k < rows; k++) {
        for (int d = 0; d < dim; d++) {
            double total = 0.0;
            for (int i = 0; i < rows; i++) {
                const int own = i == k, theirs = neighbor[i] == k;
                const double length = distance[i];
                if ((!own && !theirs) || length == 0.0) continue;
                const double g = dlog / ((length + eps) * length);
                const double diff =
                    (double)y[(size_t)i * dim + d] - y[(size_t)neighbor[i] * dim + d] + eps;
                total += (own - theirs) * g * diff;
            }
            dy[(size_t)k * dim + d] = (float)total;
        }
    }
}

// ---- PaKA: centred kernel alignment ---------------------------------------------------

// K_jk = <z_j, z_k> of one image's rows z (tokens, dim).
static double kernel_entry(const float *z, int dim, int j, int k) {
    double dot = 0.0;
    for (int d = 0; d < dim; d++) dot += (double)z[(size_t)j * dim + d] * z[(size_t)k * dim + d];
    return dot;
}

// The row means of K (K is symmetric, so they are its column means too)
// and its total mean.
static void kernel_means(const float *z, int tokens, int dim, double *row_mean, double *total) {
    double sum = 0.0;
    for (int j = 0; j < tokens; j++) {
        double row = 0.0;
        for (int k = 0; k < tokens; k++) row += kernel_entry(z, dim, j, k);
        row_mean[j] = row / tokens;
        sum += row;
    }
    *total = sum / ((double)tokens * tokens);
}

// (H K H)_jk: K_jk less row mean j and column mean k, plus the total mean.
static double centred_entry(const float *z, int dim, const double *row_mean, double total, int j,
                            int k) {
    return kernel_entry(z, dim, j, k) - row_mean[j] - row_mean[k] + total;
}

void ref_cka_loss(Backend *backend, int images, int tokens, int dim, const float *student,
                  const float *teacher, const float *image_weight, float *loss,
                  float *dstudent) {
    const size_t image_size = (size_t)tokens * dim;
    double mean_s[CKA_MAX_TOKENS], mean_t[CKA_MAX_TOKENS], g[CKA_MAX_TOKENS];
    double total_loss = 0.0;
    for (int i = 0; i < images; i++) {
        const float *zs = student + i * image_size, *zt = teacher + i * image_size;
        float *ds = dstudent + i * image_size;
        const double w = image_weight[i];
        if (w == 0.0) {
            for (size_t e = 0; e < image_size; e++) ds[e] = 0.0f;
            continue;
        }
        double total_s, total_t, st = 0.0, ss = 0.0, tt = 0.0;
        kernel_means(zs, tokens, dim, mean_s, &total_s);
        kernel_means(zt, tokens, dim, mean_t, &total_t);
        for (int j = 0; j < tokens; j++)
            for (int k = 0; k < tokens; k++) {
                const double a = centred_entry(zs, dim, mean_s, total_s, j, k);
                const double b = centred_entry(zt, dim, mean_t, total_t, j, k);
                st += a * b, ss += a * a, tt += b * b;
            }
        const double na = sqrt(ss > CKA_EPS ? ss : CKA_EPS), nb = sqrt(tt > CKA_EPS ? tt : CKA_EPS);
        total_loss += w * (1.0 - st / (na * nb));
        // d cka / d Z_s = 2 G Z_s (G symmetric; H G = G H = G)
        const double c_b = 1.0 / (na * nb), c_a = ss >= CKA_EPS ? st / (na * na * na * nb) : 0.0;
        for (int j = 0; j < tokens; j++) {
            for (int k = 0; k < tokens; k++)
                g[k] = c_b * centred_entry(zt, dim, mean_t, total_t, j, k) -
                       c_a * centred_entry(zs, dim, mean_s, total_s, j, k);
            for (int d = 0; d < dim; d++) {
                double sum = 0.0;
                for (int k = 0; k < tokens; k++) sum += g[k] * zs[(size_t)k * dim + d];
                ds[(size_t)j * dim + d] = (float)(-2.0 * w * sum);
            }
        }
    }
    *loss = (float)total_loss;
}
