// BYOL's symmetric normalised MSE composed from backend ops: l2_normalize of
// all four inputs, the differences of the normalised pairs and their sum of
// squares; backward scales the differences and goes back through the
// predictions' l2_normalize. Contract and formula: byol_loss.h.
#include "ssl_methods/byol_loss.h"

#include <math.h>
#include <stdlib.h>

struct ByolLoss {
    Backend *backend;
    int max_batch, dim;
    int batch;            // of the last forward (0: none yet)
    float *normalized_p;  // (2, N, D) p0, p1 normalised
    float *normalized_z;  // (2, N, D) z0, z1 normalised
    float *norms;         // (4, N) |p0|, |p1|, |z0|, |z1|
    float *difference;    // (2, N, D) p0n - z1n, p1n - z0n; then d loss / d pn
    float *squares;       // (1) sum of squared differences
};

ByolLoss *byol_loss_create(Backend *backend, int max_batch, int dim, ErrorMessage *err) {
    if (max_batch < 1 || dim < 1) {
        error_set(err, "byol_loss: batch %d and dim %d must be positive", max_batch, dim);
        return NULL;
    }
    ByolLoss *loss = calloc(1, sizeof(*loss));
    if (!loss) {
        error_set(err, "byol_loss: out of host memory");
        return NULL;
    }
    loss->backend = backend;
    loss->max_batch = max_batch;
    loss->dim = dim;
    const size_t pair = 2 * (size_t)max_batch * dim;
    BackendOps *op = &backend->op;
    loss->normalized_p = op->alloc(backend, pair * sizeof(float));
    loss->normalized_z = op->alloc(backend, pair * sizeof(float));
    loss->norms = op->alloc(backend, 4 * (size_t)max_batch * sizeof(float));
    loss->difference = op->alloc(backend, pair * sizeof(float));
    loss->squares = op->alloc(backend, sizeof(float));
    if (!loss->normalized_p || !loss->normalized_z || !loss->norms || !loss->difference ||
        !loss->squares) {
        byol_loss_destroy(loss);
        error_set(err, "byol_loss: out of memory for batch %d, dim %d", max_batch, dim);
        return NULL;
    }
    return loss;
}

void byol_loss_destroy(ByolLoss *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    float *buffers[] = {loss->normalized_p, loss->normalized_z, loss->norms, loss->difference,
                        loss->squares};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss);
}

void byol_loss_forward(ByolLoss *loss, int batch, const float *p0, const float *p1,
                       const float *z0, const float *z1, float *value) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    if (batch < 1 || batch > loss->max_batch) {
        op->fill(backend, value, NAN, 1);
        return;
    }
    const int dim = loss->dim;
    const size_t view = (size_t)batch * dim;
    loss->batch = batch;
    const float eps = BYOL_LOSS_NORMALIZE_EPS;
    float *norms = loss->norms;
    op->l2_normalize_forward(backend, batch, dim, p0, eps, loss->normalized_p, norms);
    op->l2_normalize_forward(backend, batch, dim, p1, eps, loss->normalized_p + view,
                             norms + batch);
    op->l2_normalize_forward(backend, batch, dim, z0, eps, loss->normalized_z, norms + 2 * batch);
    op->l2_normalize_forward(backend, batch, dim, z1, eps, loss->normalized_z + view,
                             norms + 3 * batch);
    // Each prediction is compared with the other view's target: p0 with z1, p1 with z0.
    op->copy(backend, loss->difference, loss->normalized_p, 2 * view * sizeof(float));
    op->axpby(backend, view, -1.0f, loss->normalized_z + view, 1.0f, loss->difference);
    op->axpby(backend, view, -1.0f, loss->normalized_z, 1.0f, loss->difference + view);
    op->sum_squares(backend, 2 * view, loss->difference, loss->squares);
    op->scalar_combine(backend, 1.0f, loss->squares, 0.0f, NULL, (float)batch, value);
}

void byol_loss_backward(ByolLoss *loss, float dloss, float *dp0, float *dp1) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->batch, dim = loss->dim;
    const size_t view = (size_t)batch * dim;
    // d loss / d p_n = 2 (p_n - z_n) / N, in place over the differences
    float *dnormalized = loss->difference;
    op->axpby(backend, 2 * view, 2.0f * dloss / (float)batch, loss->difference, 0.0f,
              dnormalized);
    op->l2_normalize_backward(backend, batch, dim, loss->normalized_p, loss->norms, dnormalized,
                              BYOL_LOSS_NORMALIZE_EPS, dp0);
    op->l2_normalize_backward(backend, batch, dim, loss->normalized_p + view, loss->norms + batch,
                              dnormalized + view, BYOL_LOSS_NORMALIZE_EPS, dp1);
}
