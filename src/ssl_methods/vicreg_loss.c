// VICReg loss composed from backend ops. The backend has no elementwise sqrt,
// so the per-feature 1 / sqrt(var + eps) comes from batchnorm_forward_train's
// saved inverse std, fed the input scaled by sqrt(N / (N - 1)) (its biased
// variance is then the unbiased variance VICReg wants); std = (var + eps) *
// inv_std. Per-feature scalings of an (N, D) matrix use bias_add on zeros to
// broadcast the (D) vector, then mul. Contract and formula: vicreg_loss.h.
#include "ssl_methods/vicreg_loss.h"

#include <math.h>
#include <stdlib.h>

// Scalars reduced on the backend by forward, then the three weighted terms
// combined from them there.
enum {
    SUM_INVARIANCE, SUM_VARIANCE0, SUM_VARIANCE1, SUM_COVARIANCE0, SUM_COVARIANCE1,
    TERM_INVARIANCE, TERM_VARIANCE, TERM_COVARIANCE, SUM_COUNT
};

struct VicregLoss {
    Backend *backend;
    int max_batch, dim;
    float lambda, mu, nu, eps;
    int batch;              // of the last forward (0: none yet)
    float *centered;        // (2, N, D) each view minus its feature means
    float *difference;      // (N, D) out0 - out1
    float *scratch;         // (N, D) scaled input; squares; broadcast scalings
    float *normalized;      // (N, D) batchnorm output (unused, the op writes it)
    float *inv_std;         // (2, D) 1 / sqrt(var + eps) per view
    float *hinge;           // (2, D) relu(1 - std) per view
    float *column;          // (D) feature sums / means / variances
    float *column_extra;    // (D) batchnorm's saved mean; the hinge mask in backward
    float *ones, *zeros;    // (D) batchnorm gamma, beta
    float *running_mean, *running_var;  // (D) batchnorm's running stats (ignored)
    float *covariance;      // (D, D) C(x) with the diagonal zeroed
    float *off_diagonal;    // (D, D) 1 off the diagonal, 0 on it
    float *sums;            // (SUM_COUNT)
};

static int allocate(VicregLoss *loss) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const size_t rows = (size_t)loss->max_batch, dim = (size_t)loss->dim;
    float **vectors[] = {&loss->column, &loss->column_extra, &loss->ones,
                         &loss->zeros,  &loss->running_mean, &loss->running_var};
    for (size_t i = 0; i < sizeof(vectors) / sizeof(vectors[0]); i++)
        if (!(*vectors[i] = op->alloc(backend, dim * sizeof(float)))) return -1;
    loss->centered = op->alloc(backend, 2 * rows * dim * sizeof(float));
    loss->difference = op->alloc(backend, rows * dim * sizeof(float));
    loss->scratch = op->alloc(backend, rows * dim * sizeof(float));
    loss->normalized = op->alloc(backend, rows * dim * sizeof(float));
    loss->inv_std = op->alloc(backend, 2 * dim * sizeof(float));
    loss->hinge = op->alloc(backend, 2 * dim * sizeof(float));
    loss->covariance = op->alloc(backend, dim * dim * sizeof(float));
    loss->off_diagonal = op->alloc(backend, dim * dim * sizeof(float));
    loss->sums = op->alloc(backend, SUM_COUNT * sizeof(float));
    if (!loss->centered || !loss->difference || !loss->scratch || !loss->normalized ||
        !loss->inv_std || !loss->hinge || !loss->covariance || !loss->off_diagonal || !loss->sums)
        return -1;
    float *mask = malloc(dim * dim * sizeof(float));
    if (!mask) return -1;
    for (size_t i = 0; i < dim * dim; i++) mask[i] = i % (dim + 1) == 0 ? 0.0f : 1.0f;
    op->upload(backend, loss->off_diagonal, mask, dim * dim * sizeof(float));
    free(mask);
    op->fill(backend, loss->ones, 1.0f, dim);
    op->fill(backend, loss->zeros, 0.0f, dim);
    op->fill(backend, loss->running_mean, 0.0f, dim);
    op->fill(backend, loss->running_var, 1.0f, dim);
    return 0;
}

VicregLoss *vicreg_loss_create(Backend *backend, int max_batch, int dim, float lambda, float mu,
                               float nu, float eps, ErrorMessage *err) {
    if (max_batch < 2 || dim < 1) {
        error_set(err, "vicreg_loss: batch %d must be at least 2 (batch variance) and dim %d "
                  "positive", max_batch, dim);
        return NULL;
    }
    if (!(eps > 0.0f)) {
        error_set(err, "vicreg_loss: eps %g must be positive", (double)eps);
        return NULL;
    }
    VicregLoss *loss = calloc(1, sizeof(*loss));
    if (!loss) {
        error_set(err, "vicreg_loss: out of host memory");
        return NULL;
    }
    loss->backend = backend;
    loss->max_batch = max_batch;
    loss->dim = dim;
    loss->lambda = lambda;
    loss->mu = mu;
    loss->nu = nu;
    loss->eps = eps;
    if (allocate(loss) != 0) {
        vicreg_loss_destroy(loss);
        error_set(err, "vicreg_loss: out of memory for batch %d, dim %d (%zu MB)", max_batch, dim,
                  (2 * (size_t)dim * dim + 5 * (size_t)max_batch * dim) * sizeof(float) >> 20);
        return NULL;
    }
    return loss;
}

void vicreg_loss_destroy(VicregLoss *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    float *buffers[] = {loss->centered,     loss->difference,   loss->scratch,
                        loss->normalized,   loss->inv_std,      loss->hinge,
                        loss->column,       loss->column_extra, loss->ones,
                        loss->zeros,        loss->running_mean, loss->running_var,
                        loss->covariance,   loss->off_diagonal, loss->sums};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss);
}

// covariance (D, D) = off-diagonal part of centered^T centered / (N - 1)
static void covariance_off_diagonal(VicregLoss *loss, const float *centered) {
    Backend *backend = loss->backend;
    const int batch = loss->batch, dim = loss->dim;
    backend->op.gemm(backend, 1, 0, dim, dim, batch, 1.0f / (float)(batch - 1), centered, dim,
                     centered, dim, 0.0f, loss->covariance, dim);
    backend->op.mul(backend, (size_t)dim * dim, loss->covariance, loss->off_diagonal,
                    loss->covariance);
}

// Centres one view x (N, D) and reduces its variance and covariance terms.
static void view_forward(VicregLoss *loss, int view, const float *x) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->batch, dim = loss->dim;
    const size_t n = (size_t)batch * dim;
    float *centered = loss->centered + view * n;
    float *inv_std = loss->inv_std + (size_t)view * dim;
    float *hinge = loss->hinge + (size_t)view * dim;
    // centered = x - mean (the negated mean broadcast by bias_add)
    op->column_sum(backend, batch, dim, x, loss->column);
    op->axpby(backend, dim, -1.0f / (float)batch, loss->column, 0.0f, loss->column);
    op->copy(backend, centered, x, n * sizeof(float));
    op->bias_add_f32(backend, batch, dim, loss->column, centered);
    // inv_std = 1 / sqrt(unbiased var + eps), see the top of the file
    op->axpby(backend, n, sqrtf((float)batch / (float)(batch - 1)), x, 0.0f, loss->scratch);
    op->batchnorm_forward_train_f32(backend, batch, dim, loss->scratch, loss->ones, loss->zeros,
                                    0.0f, loss->eps, loss->normalized, loss->column_extra, inv_std,
                                    loss->running_mean, loss->running_var);
    // hinge = relu(1 - std), std = (var + eps) * inv_std
    op->mul(backend, n, centered, centered, loss->scratch);
    op->column_sum(backend, batch, dim, loss->scratch, loss->column);
    op->axpby(backend, dim, loss->eps, loss->ones, 1.0f / (float)(batch - 1), loss->column);
    op->mul(backend, dim, loss->column, inv_std, loss->column);
    op->copy(backend, hinge, loss->ones, dim * sizeof(float));
    op->axpby(backend, dim, -1.0f, loss->column, 1.0f, hinge);
    op->relu_forward_f32(backend, dim, hinge, hinge);
    op->sum(backend, dim, hinge, loss->sums + SUM_VARIANCE0 + view);
    covariance_off_diagonal(loss, centered);
    op->sum_squares(backend, (size_t)dim * dim, loss->covariance,
                    loss->sums + SUM_COVARIANCE0 + view);
}

// *value = lambda (I / n) + mu (0.5 (V0 + V1) / D) + nu ((C0 + C1) / D)
// from the sums, rounded as that float expression: one scalar_combine per
// float operation. (0.5 x and the division by D share a call: halving is
// exact here, the hinge sum being 0 or at least 2^-24.)
static void combine_terms(VicregLoss *loss, size_t n, float *value) {
    Backend *backend = loss->backend;
    float *s = loss->sums;
    const float dim = (float)loss->dim;
    void (*combine)(Backend *, float, const float *, float, const float *, float, float *) =
        backend->op.scalar_combine;
    combine(backend, 1.0f, s + SUM_INVARIANCE, 0.0f, NULL, (float)n, s + TERM_INVARIANCE);
    combine(backend, 1.0f, s + SUM_VARIANCE0, 1.0f, s + SUM_VARIANCE1, 1.0f, s + TERM_VARIANCE);
    combine(backend, 0.5f, s + TERM_VARIANCE, 0.0f, NULL, dim, s + TERM_VARIANCE);
    combine(backend, 1.0f, s + SUM_COVARIANCE0, 1.0f, s + SUM_COVARIANCE1, 1.0f,
            s + TERM_COVARIANCE);
    combine(backend, 1.0f, s + TERM_COVARIANCE, 0.0f, NULL, dim, s + TERM_COVARIANCE);
    combine(backend, loss->lambda, s + TERM_INVARIANCE, 0.0f, NULL, 1.0f, s + TERM_INVARIANCE);
    combine(backend, loss->mu, s + TERM_VARIANCE, 0.0f, NULL, 1.0f, s + TERM_VARIANCE);
    combine(backend, 1.0f, s + TERM_INVARIANCE, 1.0f, s + TERM_VARIANCE, 1.0f, value);
    combine(backend, loss->nu, s + TERM_COVARIANCE, 0.0f, NULL, 1.0f, s + TERM_COVARIANCE);
    combine(backend, 1.0f, value, 1.0f, s + TERM_COVARIANCE, 1.0f, value);
}

void vicreg_loss_forward(VicregLoss *loss, int batch, const float *out0, const float *out1,
                         float *value) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    if (batch < 2 || batch > loss->max_batch) {
        op->fill(backend, value, NAN, 1);
        return;
    }
    const int dim = loss->dim;
    const size_t n = (size_t)batch * dim;
    loss->batch = batch;
    op->copy(backend, loss->difference, out0, n * sizeof(float));
    op->axpby(backend, n, -1.0f, out1, 1.0f, loss->difference);
    op->sum_squares(backend, n, loss->difference, loss->sums + SUM_INVARIANCE);
    view_forward(loss, 0, out0);
    view_forward(loss, 1, out1);
    combine_terms(loss, n, value);
}

// grad (N, D) = dloss * d loss / d view
static void view_backward(VicregLoss *loss, int view, float dloss, float *grad) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->batch, dim = loss->dim;
    const size_t n = (size_t)batch * dim;
    const float *centered = loss->centered + view * n;
    // invariance: 2 lambda (a - b) / (N D), the sign flipped for view 1
    const float sign = view == 0 ? 1.0f : -1.0f;
    op->axpby(backend, n, sign * 2.0f * loss->lambda * dloss / (float)n, loss->difference, 0.0f,
              grad);
    // covariance: 4 nu / (D (N - 1)) centered off(C); no correction for the
    // mean subtraction: the columns of centered (so of the product) sum to 0
    covariance_off_diagonal(loss, centered);
    op->gemm(backend, 0, 0, batch, dim, dim,
             4.0f * loss->nu * dloss / ((float)dim * (float)(batch - 1)), centered, dim,
             loss->covariance, dim, 1.0f, grad, dim);
    // variance: -mu / (2 D (N - 1)) centered_j inv_std_j where the hinge is active
    float *mask = loss->column_extra;
    op->relu_backward_f32(backend, dim, loss->hinge + (size_t)view * dim,
                          loss->inv_std + (size_t)view * dim, mask);
    op->fill(backend, loss->scratch, 0.0f, n);
    op->bias_add_f32(backend, batch, dim, mask, loss->scratch);
    op->mul(backend, n, loss->scratch, centered, loss->scratch);
    op->axpby(backend, n, -loss->mu * dloss / (2.0f * (float)dim * (float)(batch - 1)),
              loss->scratch, 1.0f, grad);
}

void vicreg_loss_backward(VicregLoss *loss, float dloss, float *dout0, float *dout1) {
    view_backward(loss, 0, dloss, dout0);
    view_backward(loss, 1, dloss, dout1);
}
