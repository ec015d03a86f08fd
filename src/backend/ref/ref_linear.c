// Reference matrix product (row-major, optional transposes, leading
// dimensions) and the bias ops of linear layers. Double accumulators.
#include "backend/ref/ref_ops.h"

// C (M, N) = alpha op(A) op(B) + beta C. As in BLAS, beta = 0 means C is not
// read (so it may hold garbage or NaN).
void ref_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
              float alpha, const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc) {
    for (int i = 0; i < m; i++)
        for (int j = 0; j < n; j++) {
            double total = 0.0;
            for (int p = 0; p < k; p++) {
                const float a_ip = transpose_a ? a[(size_t)p * lda + i] : a[(size_t)i * lda + p];
                const float b_pj = transpose_b ? b[(size_t)j * ldb + p] : b[(size_t)p * ldb + j];
                total += (double)a_ip * b_pj;
            }
            float *cij = c + (size_t)i * ldc + j;
            const double scaled = (double)alpha * total;
            *cij = (float)(beta == 0.0f ? scaled : scaled + (double)beta * *cij);
        }
}

void ref_bias_add(Backend *backend, size_t rows, int channels, const float *bias, float *y) {
    for (size_t r = 0; r < rows; r++)
        for (int ch = 0; ch < channels; ch++) y[r * (size_t)channels + ch] += bias[ch];
}

void ref_bias_backward(Backend *backend, size_t rows, int channels, const float *dy,
                       float *dbias) {
    for (int ch = 0; ch < channels; ch++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++) total += dy[r * (size_t)channels + ch];
        dbias[ch] += (float)total;
    }
}
