// The cpu backend's DINOv2 ops (backend.h): row scaling, row gather and
// scatter for the masked patch tokens, the Sinkhorn-Knopp steps and
// KoLeo's nearest-neighbour distances; and DINOv31's PaKA loss (cka_loss).
// Rows (or column strips, or images) are split across threads; every sum
// runs in a fixed order in double, so results do not depend on the thread
// count.
#include <math.h>

#include "backend/cpu/cpu_internal.h"

// Columns one thread takes at a time in the Sinkhorn-Knopp column maxima.
#define CPU_SINKHORN_STRIP 64
// Images of cka_loss whose loss terms are held at once (on the stack) before
// they are added in image order.
#define CPU_CKA_IMAGES 64

void cpu_scale_rows(Backend *backend, size_t rows, int channels, const float *x,
                    const float *scale, float *y) {
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float s = scale[r];
        const float *x_row = x + r * channels;
        float *y_row = y + r * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) y_row[c] = x_row[c] * s;
    }
}

void cpu_mask_tokens_forward(Backend *backend, size_t rows, int channels, const Act *x_act,
                             const float *mask, const float *token, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++) {
        const float *source = mask[r] != 0.0f ? token : x + r * channels;
        float *target = y + r * channels;
        for (int c = 0; c < channels; c++) target[c] = source[c];
    }
}

// dtoken: each thread sums whole columns over the rows in order (in double),
// so the result does not depend on the thread count.
void cpu_mask_tokens_backward(Backend *backend, size_t rows, int channels, const float *mask,
                              const Act *dy_act, Act *dx_act, float *dtoken) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int c = 0; c < channels; c++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++)
            if (mask[r] != 0.0f) total += dy[r * channels + c];
        dtoken[c] += (float)total;
    }
#pragma omp parallel for num_threads(team) schedule(static)
    for (size_t r = 0; r < rows; r++)
        if (mask[r] != 0.0f)
            for (int c = 0; c < channels; c++) dx[r * channels + c] = 0.0f;
        else if (dx != dy)
            for (int c = 0; c < channels; c++) dx[r * channels + c] = dy[r * channels + c];
}

void cpu_gather_rows(Backend *backend, int count, int channels, const int32_t *index,
                     const Act *x_act, Act *y_act) {
    const float *x = (const float *)x_act;
    float *y = (float *)y_act;
    const int team = cpu_team(backend, (size_t)count * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int i = 0; i < count; i++) {
        const float *source = x + (size_t)index[i] * channels;
        float *target = y + (size_t)i * channels;
        for (int c = 0; c < channels; c++) target[c] = source[c];
    }
}

void cpu_scatter_add_rows(Backend *backend, int count, int channels, const int32_t *index,
                          const Act *dy_act, Act *dx_act) {
    const float *dy = (const float *)dy_act;
    float *dx = (float *)dx_act;
    const int team = cpu_team(backend, (size_t)count * channels);
    // Distinct indices: no two iterations touch the same row of dx.
#pragma omp parallel for num_threads(team) schedule(static)
    for (int i = 0; i < count; i++) {
        const float *source = dy + (size_t)i * channels;
        float *target = dx + (size_t)index[i] * channels;
#pragma omp simd
        for (int c = 0; c < channels; c++) target[c] += source[c];
    }
}

// Column strips: each thread takes CPU_SINKHORN_STRIP columns and walks
// the rows, so the reads stay contiguous within a row.
void cpu_column_max(Backend *backend, size_t rows, int channels, const float *x, float *max) {
    const int team = cpu_team(backend, rows * (size_t)channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int k0 = 0; k0 < channels; k0 += CPU_SINKHORN_STRIP) {
        const int width = channels - k0 < CPU_SINKHORN_STRIP ? channels - k0 : CPU_SINKHORN_STRIP;
        float strip[CPU_SINKHORN_STRIP];
        for (int k = 0; k < width; k++) strip[k] = -INFINITY;
        for (size_t r = 0; r < rows; r++)
            for (int k = 0; k < width; k++) {
                const float v = x[r * channels + k0 + k];
                if (v > strip[k] || isnan(v)) strip[k] = v;  // a NaN stays: v > NaN is false
            }
        for (int k = 0; k < width; k++) max[k0 + k] = strip[k];
    }
}

void cpu_sinkhorn_exp(Backend *backend, int rows, int channels, const float *x, float scale,
                      const float *max, float *q) {
    const int team = cpu_team(backend, (size_t)rows * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++) {
        const float *x_row = x + (size_t)r * channels;
        float *q_row = q + (size_t)r * channels;
        for (int k = 0; k < channels; k++)
            q_row[k] = (float)exp((double)scale * x_row[k] - (double)scale * max[k]);
    }
}

// Row by row: the column division, the row sum in double, the row division.
void cpu_sinkhorn_normalize(Backend *backend, int rows, int channels, const float *column_sum,
                            float *q) {
    const int team = cpu_team(backend, (size_t)rows * channels);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int r = 0; r < rows; r++) {
        float *row = q + (size_t)r * channels;
        double sum = 0.0;
        for (int k = 0; k < channels; k++) {
            row[k] = column_sum[k] > 0.0f ? (float)((double)row[k] / column_sum[k]) : 0.0f;
            sum += row[k];
        }
        for (int k = 0; k < channels; k++) row[k] = sum > 0.0 ? (float)(row[k] / sum) : 0.0f;
    }
}

void cpu_koleo_forward(Backend *backend, int rows, int dim, const float *y, float eps,
                       int32_t *neighbor, float *distance, float *log_distance) {
    const int team = cpu_team(backend, (size_t)rows * rows * dim);
#pragma omp parallel for num_threads(team) schedule(static)
    for (int i = 0; i < rows; i++) {
        const float *yi = y + (size_t)i * dim;
        int32_t best = i;
        double best_dot = -INFINITY;
        for (int j = 0; j < rows; j++) {
            if (j == i) continue;
            const float *yj = y + (size_t)j * dim;
            double dot = 0.0;
#pragma omp simd reduction(+ : dot)
            for (int d = 0; d < dim; d++) dot += (double)yi[d] * yj[d];
            if (dot > best_dot) best_dot = dot, best = j;  // the first maximum wins
        }
        const float *yn = y + (size_t)best * dim;
        double squares = 0.0;
#pragma omp simd reduction(+ : squares)
        for (int d = 0; d < dim; d++) {
            const double diff = (double)yi[d] - yn[d] + eps;
            squares += diff * diff;
        }
        const double length = sqrt(squares);
        neighbor[i] = best;
        distance[i] = (float)length;
        log_distance[i] = (float)log(length + eps);
    }
}

void cpu_koleo_backward(Backend *backend, int rows, int dim, const float *y,
                        const int32_t *neighbor, const float *distance, float eps, float dlog,
                        float *dy) {
    const int team = cpu_team(backend, (size_t)rows * rows * dim);
    // Row k gathers its own term and those of the rows whose neighbour it
    // is, in row order (no scatter between threads).
#pragma omp parallel for num_threads(team) schedule(static)
    for (int k = 0; k < rows; k++) {
        float *dk = dy + (size_t)k * dim;
        for (int d = 0; d < dim; d++) dk[d] = 0.0f;
        for (int i = 0; i < rows; i++) {
            const int own = i == k, theirs = neighbor[i] == k;
            const double length = distance[i];
            if ((!own && !theirs) || length == 0.0) continue;
            const float g = (float)((own - theirs) * (double)dlog / ((length + eps) * length));
            const float *yi = y + (size_t)i * dim, *yn = y + (size_t)neighbor[i] * dim;
#pragma omp simd
            for (int d = 0; d < dim; d++) dk[d] += g * (yi[d] - yn[d] + eps);
        }
    }
}

// ---- PaKA: centred kernel alignment ---------------------------------------------------
// One image per thread. Its (tokens, tokens) kernels are never stored: each
// pass recomputes a row of K_s and of K_t (fp32 dot products; the same
// function for (j, k) and (k, j), so K is exactly symmetric and its row
// means are its column means), the first for the means, the second for the
// HSIC sums (double), the third for the gradient.

// row (tokens) = K_j: the dot products of row j of z (tokens, dim) with every row.
static void kernel_row(const float *z, int tokens, int dim, int j, float *row) {
    const float *zj = z + (size_t)j * dim;
    for (int k = 0; k < tokens; k++) {
        const float *zk = z + (size_t)k * dim;
        float dot = 0.0f;
#pragma omp simd reduction(+ : dot)
        for (int d = 0; d < dim; d++) dot += zj[d] * zk[d];
        row[k] = dot;
    }
}

// mean (tokens) = the row means of K (fp32), returns its total mean; row: scratch.
static float kernel_means(const float *z, int tokens, int dim, float *row, float *mean) {
    double total = 0.0;
    for (int j = 0; j < tokens; j++) {
        kernel_row(z, tokens, dim, j, row);
        double sum = 0.0;
        for (int k = 0; k < tokens; k++) sum += row[k];
        mean[j] = (float)(sum / tokens);
        total += sum;
    }
    return (float)(total / ((double)tokens * tokens));
}

// (H M H)_jk of a symmetric M (K, or G) from M_jk, M's row means and total
// mean, in lightly's fp32 order: less the row mean, less the column mean,
// plus the total mean.
static inline float centred(float value, const float *mean, float total, int j, int k) {
    return value - mean[j] - mean[k] + total;
}

// An image's means and sums between the passes (one thread's, on its stack).
typedef struct CkaSums {
    float mean_s[CKA_MAX_TOKENS], mean_t[CKA_MAX_TOKENS];
    // the row sums of A and B as computed (0 but for the rounding of
    // centring K's large entries), then G's row means (see cka_gradient)
    float row_a[CKA_MAX_TOKENS], row_b[CKA_MAX_TOKENS];
    float total_s, total_t;
    double st, ss, tt;
} CkaSums;

// The means, the HSIC sums and the row sums of A and B of one image.
static void cka_sums(int tokens, int dim, const float *zs, const float *zt, float *row_s,
                     float *row_t, CkaSums *m) {
    m->total_s = kernel_means(zs, tokens, dim, row_s, m->mean_s);
    m->total_t = kernel_means(zt, tokens, dim, row_t, m->mean_t);
    m->st = m->ss = m->tt = 0.0;
    for (int j = 0; j < tokens; j++) {
        kernel_row(zs, tokens, dim, j, row_s);
        kernel_row(zt, tokens, dim, j, row_t);
        double sum_a = 0.0, sum_b = 0.0;
        for (int k = 0; k < tokens; k++) {
            const double a = centred(row_s[k], m->mean_s, m->total_s, j, k);
            const double b = centred(row_t[k], m->mean_t, m->total_t, j, k);
            m->st += a * b, m->ss += a * a, m->tt += b * b;
            sum_a += a, sum_b += b;
        }
        m->row_a[j] = (float)sum_a, m->row_b[j] = (float)sum_b;
    }
}

// ds (tokens, dim) = scale G' Z_s with G' = H G H, G = c_b B - c_a A:
// re-centring G, as PyTorch's backward through the centring does, takes
// out what is left of A's and B's row sums, which Z_s's common mean would
// otherwise carry into every row (G' = G in exact arithmetic).
static void cka_gradient(int tokens, int dim, const float *zs, const float *zt, float c_b,
                         float c_a, float scale, float *row_s, float *row_t, CkaSums *m,
                         float *ds) {
    float *g_mean = m->row_a;  // G's row means replace A's row sums
    double total = 0.0;
    for (int j = 0; j < tokens; j++) {
        g_mean[j] = (float)(((double)c_b * m->row_b[j] - (double)c_a * m->row_a[j]) / tokens);
        total += g_mean[j];
    }
    const float g_total = (float)(total / tokens);
    for (int j = 0; j < tokens; j++) {
        kernel_row(zs, tokens, dim, j, row_s);
        kernel_row(zt, tokens, dim, j, row_t);
        for (int k = 0; k < tokens; k++) {  // row j of G' into row_s
            const float g = c_b * centred(row_t[k], m->mean_t, m->total_t, j, k) -
                            c_a * centred(row_s[k], m->mean_s, m->total_s, j, k);
            row_s[k] = centred(g, g_mean, g_total, j, k);
        }
        float *out = ds + (size_t)j * dim;
        for (int d = 0; d < dim; d++) out[d] = 0.0f;
        for (int k = 0; k < tokens; k++) {
            const float g = row_s[k];
            const float *zk = zs + (size_t)k * dim;
#pragma omp simd
            for (int d = 0; d < dim; d++) out[d] += g * zk[d];
        }
#pragma omp simd
        for (int d = 0; d < dim; d++) out[d] *= scale;
    }
}

// Image weight (1 - cka) of one image, its gradient into ds (tokens, dim).
static double cka_image(int tokens, int dim, const float *zs, const float *zt, float weight,
                        float *ds) {
    CkaSums m;
    float row_s[CKA_MAX_TOKENS], row_t[CKA_MAX_TOKENS];
    cka_sums(tokens, dim, zs, zt, row_s, row_t, &m);
    const double na = sqrt(fmax(m.ss, CKA_EPS)), nb = sqrt(fmax(m.tt, CKA_EPS));
    const float c_b = (float)(1.0 / (na * nb));
    const float c_a = m.ss >= CKA_EPS ? (float)(m.st / (na * na * na * nb)) : 0.0f;
    cka_gradient(tokens, dim, zs, zt, c_b, c_a, -2.0f * weight, row_s, row_t, &m, ds);
    return (double)weight * (1.0 - m.st / (na * nb));
}

// Threads split a chunk of images; the chunk's terms are then added in
// image order, so the loss does not depend on the thread count.
void cpu_cka_loss(Backend *backend, int images, int tokens, int dim, const float *student,
                  const float *teacher, const float *image_weight, float *loss,
                  float *dstudent) {
    const size_t image_size = (size_t)tokens * dim;
    const int team = cpu_team(backend, (size_t)images * tokens * image_size);
    double total = 0.0;
    for (int first = 0; first < images; first += CPU_CKA_IMAGES) {
        const int count = images - first < CPU_CKA_IMAGES ? images - first : CPU_CKA_IMAGES;
        double terms[CPU_CKA_IMAGES];
#pragma omp parallel for num_threads(team) schedule(static)
        for (int k = 0; k < count; k++) {
            const size_t offset = (size_t)(first + k) * image_size;
            const float weight = image_weight[first + k];
            terms[k] = 0.0;
            if (weight == 0.0f)  // padding: rows not read
                for (size_t e = 0; e < image_size; e++) dstudent[offset + e] = 0.0f;
            else
                terms[k] = cka_image(tokens, dim, student + offset, teacher + offset, weight,
                                     dstudent + offset);
        }
        for (int k = 0; k < count; k++) total += terms[k];
    }
    *loss = (float)total;
}
