// Reference matrix product (row-major, optional transposes, leading
// dimensions), the bias ops and the linear layers' ops built from them.
// Double accumulators; in 16-bit dtypes the linear forward adds its bias
// rounded to the dtype (PyTorch autocast's order, see ref_linear_forward).
#include <stdlib.h>

#include "backend/ref/ref_ops.h"
#include "backend/ref/ref_sums.h"

// C's columns in blocks of REF_SUMS, each column its own sum over p in order
// (ref_sums.h). Inlined where called, so that the call with constants runs
// without the width tests.
static inline __attribute__((always_inline)) void gemm_columns(int k, int width, const float *a,
                                                                size_t a_step, const float *b,
                                                                size_t b_row, size_t b_column,
                                                                double total[REF_SUMS]) {
    RefSums sums = {0};
    for (int p = 0; p < k; p++)
        ref_sums_add(&sums, a[(size_t)p * a_step], b + (size_t)p * b_row, b_column, width);
    ref_sums_get(&sums, total);
}

// C (M, N) = alpha op(A) op(B) + beta C. As in BLAS, beta = 0 means C is not
// read (so it may hold garbage or NaN).
void ref_gemm(Backend *backend, int transpose_a, int transpose_b, int m, int n, int k,
              float alpha, const float *a, int lda, const float *b, int ldb, float beta,
              float *c, int ldc) {
    // op(B)[p][j] = b[p * b_row + j * b_column]; a transposed B is copied
    // as (K, N) first (where memory allows) so that a row of it is contiguous.
    size_t b_row = (size_t)ldb, b_column = 1;
    float *b_copy = NULL;
    if (transpose_b) {
        b_row = 1, b_column = (size_t)ldb;
        b_copy = malloc((size_t)k * n * sizeof *b_copy + 1);
        if (b_copy) {
            for (int j = 0; j < n; j++)
                for (int p = 0; p < k; p++) b_copy[(size_t)p * n + j] = b[(size_t)j * ldb + p];
            b = b_copy, b_row = (size_t)n, b_column = 1;
        }
    }
    for (int i = 0; i < m; i++)
        for (int j0 = 0; j0 < n; j0 += REF_SUMS) {
            const int width = ref_sums_width(n - j0);
            const float *a_i = transpose_a ? a + i : a + (size_t)i * lda;
            const size_t a_step = transpose_a ? (size_t)lda : 1;
            const float *b_j = b + (size_t)j0 * b_column;
            double total[REF_SUMS];
            if (width == REF_SUMS && b_column == 1)  // the common case, with constants
                gemm_columns(k, REF_SUMS, a_i, a_step, b_j, b_row, 1, total);
            else
                gemm_columns(k, width, a_i, a_step, b_j, b_row, b_column, total);
            for (int col = 0; col < width; col++) {
                float *cij = c + (size_t)i * ldc + j0 + col;
                const double scaled = (double)alpha * total[col];
                *cij = (float)(beta == 0.0f ? scaled : scaled + (double)beta * *cij);
            }
        }
    free(b_copy);
}

void ref_bias_add_f32(Backend *backend, size_t rows, int channels, const float *bias, float *y) {
    for (size_t r = 0; r < rows; r++)
        for (int ch = 0; ch < channels; ch++) y[r * (size_t)channels + ch] += bias[ch];
}

void ref_bias_add(Backend *backend, size_t rows, int channels, const float *bias, Act *y_act) {
    ref_bias_add_f32(backend, rows, channels, bias, (float *)y_act);
    ref_round_acts(backend, y_act, rows * channels);
}

void ref_bias_backward(Backend *backend, size_t rows, int channels, const Act *dy_act,
                       float *dbias) {
    const float *dy = (const float *)dy_act;
    for (int ch = 0; ch < channels; ch++) {
        double total = 0.0;
        for (size_t r = 0; r < rows; r++) total += dy[r * (size_t)channels + ch];
        dbias[ch] += (float)total;
    }
}

// In fp16 / bf16 the bias is rounded to the dtype before it is added to the
// fp32 product, and the sum is rounded once: PyTorch's order under autocast
// (nn.Linear's bias is cast to the 16-bit dtype with its weight, and ATen
// adds it in cuBLASLt's bias epilogue), which the cuda backend follows
// because cuBLASLt offers no other: its bias for a 16-bit output is of the
// output's type (cuBLAS documentation, cublasLtMatmul "Datatypes
// Supported"). fp32: the bias as it is, as before.
void ref_linear_forward(Backend *backend, int rows, int in, int out, const Act *x_act,
                        const Act *w_act, const float *bias, Act *y_act) {
    float *y = (float *)y_act;
    ref_gemm(backend, 0, 1, rows, out, in, 1.0f, (const float *)x_act, in, (const float *)w_act,
             in, 0.0f, y, out);
    if (bias)
        for (int r = 0; r < rows; r++)
            for (int ch = 0; ch < out; ch++)
                y[(size_t)r * out + ch] += ref_round_act(backend, bias[ch]);
    ref_round_acts(backend, y_act, (size_t)rows * out);  // once, after the bias (an epilogue)
}

void ref_linear_backward_data(Backend *backend, int rows, int in, int out, const Act *dy_act,
                              const Act *w_act, Act *dx_act) {
    ref_gemm(backend, 0, 0, rows, in, out, 1.0f, (const float *)dy_act, out,
             (const float *)w_act, in, 0.0f, (float *)dx_act, in);
    ref_round_acts(backend, dx_act, (size_t)rows * in);
}

void ref_linear_backward_weights(Backend *backend, int rows, int in, int out, const Act *x_act,
                                 const Act *dy_act, float *dw, float *dbias) {
    ref_gemm(backend, 1, 0, out, in, rows, 1.0f, (const float *)dy_act, out,
             (const float *)x_act, in, 1.0f, dw, in);
    if (dbias) ref_bias_backward(backend, (size_t)rows, out, dy_act, dbias);
}
