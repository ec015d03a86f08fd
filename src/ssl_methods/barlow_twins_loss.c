// Barlow Twins loss composed from backend ops: batchnorm_forward_train (gamma
// 1, beta 0) normalises each view, one gemm gives the cross-correlation c, a
// diagonal mask splits it into its diagonal and off-diagonal parts; backward
// is two gemms with d loss / d c and batchnorm_backward. Contract and
// formula: barlow_twins_loss.h.
#include "ssl_methods/barlow_twins_loss.h"

#include <math.h>
#include <stdlib.h>

enum { SUM_INVARIANCE, SUM_REDUNDANCY, SUM_COUNT };

struct BarlowTwinsLoss {
    Backend *backend;
    int max_batch, dim;
    float lambda;
    int batch;              // of the last forward (0: none yet)
    float *inputs;          // (2, N, D) copies of out0, out1 (batchnorm_backward reads them)
    float *normalized;      // (2, N, D) an, bn; their gradients in backward
    float *mean, *inv_std;  // (2, D) batch statistics per view
    float *ones, *zeros;    // (D) batchnorm gamma, beta
    float *running_mean, *running_var;  // (D) batchnorm's running stats (ignored)
    float *gamma_grad;      // (D) batchnorm_backward's dgamma and dbeta (ignored)
    float *off_diagonal;    // (D, D) c with its diagonal zeroed
    float *diagonal;        // (D, D) diag(c) - I
    float *identity;        // (D, D) I
    float *sums;            // (SUM_COUNT)
};

static int allocate(BarlowTwinsLoss *loss) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const size_t rows = (size_t)loss->max_batch, dim = (size_t)loss->dim;
    float **vectors[] = {&loss->ones,        &loss->zeros,      &loss->running_mean,
                         &loss->running_var, &loss->gamma_grad};
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
        if (!(*vectors[i] = op->alloc(backend, dim * sizeof(float)))) return -1;
    float **views[] = {&loss->inputs, &loss->normalized};
    for (size_t i = 0; i < 2; i++)
        if (!(*views[i] = op->alloc(backend, 2 * rows * dim * sizeof(float)))) return -1;
    float **matrices[] = {&loss->off_diagonal, &loss->diagonal, &loss->identity};
    for (size_t i = 0; i < 3; i++)
        if (!(*matrices[i] = op->alloc(backend, dim * dim * sizeof(float)))) return -1;
    loss->mean = op->alloc(backend, 2 * dim * sizeof(float));
    loss->inv_std = op->alloc(backend, 2 * dim * sizeof(float));
    loss->sums = op->alloc(backend, SUM_COUNT * sizeof(float));
    if (!loss->mean || !loss->inv_std || !loss->sums) return -1;
    float *identity = calloc(dim * dim, sizeof(float));
    if (!identity) return -1;
    for (size_t i = 0; i < dim; i++) identity[i * dim + i] = 1.0f;
    op->upload(backend, loss->identity, identity, dim * dim * sizeof(float));
    free(identity);
    op->fill(backend, loss->ones, 1.0f, dim);
    op->fill(backend, loss->zeros, 0.0f, dim);
    op->fill(backend, loss->running_mean, 0.0f, dim);
    op->fill(backend, loss->running_var, 1.0f, dim);
    return 0;
}

BarlowTwinsLoss *barlow_twins_loss_create(Backend *backend, int max_batch, int dim, float lambda,
                                          ErrorMessage *err) {
    if (max_batch < 2 || dim < 1) {
        error_set(err, "barlow_twins_loss: batch %d must be at least 2 (batch statistics) and "
                  "dim %d positive", max_batch, dim);
        return NULL;
    }
    BarlowTwinsLoss *loss = calloc(1, sizeof(*loss));
    if (!loss) {
        error_set(err, "barlow_twins_loss: out of host memory");
        return NULL;
    }
    loss->backend = backend;
    loss->max_batch = max_batch;
    loss->dim = dim;
    loss->lambda = lambda;
    if (allocate(loss) != 0) {
        barlow_twins_loss_destroy(loss);
        error_set(err, "barlow_twins_loss: out of memory for batch %d, dim %d (%zu MB)",
                  max_batch, dim,
                  (3 * (size_t)dim * dim + 4 * (size_t)max_batch * dim) * sizeof(float) >> 20);
        return NULL;
    }
    return loss;
}

void barlow_twins_loss_destroy(BarlowTwinsLoss *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    float *buffers[] = {loss->inputs,       loss->normalized,  loss->mean,     loss->inv_std,
                        loss->ones,         loss->zeros,       loss->running_mean,
                        loss->running_var,  loss->gamma_grad,  loss->off_diagonal,
                        loss->diagonal,     loss->identity,    loss->sums};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss);
}

void barlow_twins_loss_forward(BarlowTwinsLoss *loss, int batch, const float *out0,
                               const float *out1, float *value) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    if (batch < 2 || batch > loss->max_batch) {
        op->fill(backend, value, NAN, 1);
        return;
    }
    const int dim = loss->dim;
    const size_t n = (size_t)batch * dim, square = (size_t)dim * dim;
    loss->batch = batch;
    op->copy(backend, loss->inputs, out0, n * sizeof(float));
    op->copy(backend, loss->inputs + n, out1, n * sizeof(float));
    for (int view = 0; view < 2; view++)
        op->batchnorm_forward_train_f32(backend, batch, dim, loss->inputs + view * n, loss->ones,
                                    loss->zeros, 0.0f, BARLOW_TWINS_LOSS_BATCHNORM_EPS,
                                    loss->normalized + view * n,
                                    loss->mean + (size_t)view * dim,
                                    loss->inv_std + (size_t)view * dim, loss->running_mean,
                                    loss->running_var);
    // c (D, D) = an^T bn / N, then split: diagonal = c o I - I, off_diagonal = c - c o I
    float *c = loss->off_diagonal;
    op->gemm(backend, 1, 0, dim, dim, batch, 1.0f / (float)batch, loss->normalized, dim,
             loss->normalized + n, dim, 0.0f, c, dim);
    op->mul(backend, square, c, loss->identity, loss->diagonal);
    op->axpby(backend, square, -1.0f, loss->diagonal, 1.0f, c);
    op->axpby(backend, square, -1.0f, loss->identity, 1.0f, loss->diagonal);
    op->sum_squares(backend, square, loss->diagonal, loss->sums + SUM_INVARIANCE);
    op->sum_squares(backend, square, loss->off_diagonal, loss->sums + SUM_REDUNDANCY);
    // invariance + lambda redundancy, one float operation per call (the
    // rounding of the float expression); the product in place
    float *sums = loss->sums;
    op->scalar_combine(backend, loss->lambda, sums + SUM_REDUNDANCY, 0.0f, NULL, 1.0f,
                       sums + SUM_REDUNDANCY);
    op->scalar_combine(backend, 1.0f, sums + SUM_INVARIANCE, 1.0f, sums + SUM_REDUNDANCY, 1.0f,
                       value);
}

void barlow_twins_loss_backward(BarlowTwinsLoss *loss, float dloss, float *dout0, float *dout1) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->batch, dim = loss->dim;
    const size_t n = (size_t)batch * dim, square = (size_t)dim * dim;
    // d loss / d c = 2 (diag(c) - I) + 2 lambda off(c), in place over off_diagonal
    float *dc = loss->off_diagonal;
    op->axpby(backend, square, 2.0f, loss->diagonal, 2.0f * loss->lambda, dc);
    // c = an^T bn / N: d an = bn dc^T / N, d bn = an dc / N (overwriting an, bn
    // only after both products are taken: d an goes to dout0 first)
    const float alpha = dloss / (float)batch;
    float *an = loss->normalized, *bn = loss->normalized + n;
    op->gemm(backend, 0, 1, batch, dim, dim, alpha, bn, dim, dc, dim, 0.0f, dout0, dim);
    op->gemm(backend, 0, 0, batch, dim, dim, alpha, an, dim, dc, dim, 0.0f, bn, dim);
    op->copy(backend, an, dout0, n * sizeof(float));
    float *grads[2] = {dout0, dout1};
    for (int view = 0; view < 2; view++)
        op->batchnorm_backward_f32(backend, batch, dim, loss->inputs + view * n,
                               loss->normalized + view * n, loss->ones,
                               loss->mean + (size_t)view * dim,
                               loss->inv_std + (size_t)view * dim, grads[view], loss->gamma_grad,
                               loss->gamma_grad);
}
