// NT-Xent loss (SimCLR) composed from backend ops: l2_normalize, one gemm for
// the similarity matrix, log_softmax / softmax over its rows, and two gemms
// for the gradient. Contract and formula: nt_xent.h.
#include "ssl_methods/nt_xent.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

// Added to the diagonal of the similarity matrix: exp() of it underflows to
// exactly 0 in the softmax, which is the same as dropping the entry, while
// staying finite (0 * mask in the loss's dot product is 0, not NaN).
#define NT_XENT_DIAGONAL_MASK (-1e30f)

struct NtXent {
    Backend *backend;
    int max_batch, dim;
    float temperature;
    int batch;           // of the last forward (0: none yet)
    int masks_batch;     // batch the two masks below are laid out for (0: none)
    float *z;            // (2N, D) normalized [out0; out1]
    float *norms;        // (2N) their L2 norms before normalizing
    float *logits;       // (2N, 2N) z z^T / t with the diagonal masked
    float *log_probs;    // (2N, 2N) log_softmax of logits; softmax - onehot in backward
    float *diagonal;     // (2N, 2N) NT_XENT_DIAGONAL_MASK on the diagonal, 0 elsewhere
    float *positives;    // (2N, 2N) 1 at (i, (i + N) mod 2N), 0 elsewhere
    float *dz;           // (2N, D) gradient w.r.t. z
    float *loss_sum;     // (1) sum of the positives' log-probabilities
    float *host_mask;    // host (2N, 2N) staging for the masks
};

NtXent *nt_xent_create(Backend *backend, int max_batch, int dim, float temperature,
                       ErrorMessage *err) {
    if (max_batch < 1 || dim < 1) {
        error_set(err, "nt_xent: batch %d and dim %d must be positive", max_batch, dim);
        return NULL;
    }
    if (!(fabsf(temperature) >= 1e-8f)) {
        error_set(err, "nt_xent: temperature %g too close to 0 (|t| < 1e-8)", (double)temperature);
        return NULL;
    }
    if (max_batch > 16384) {  // (2N)^2 floats per matrix must fit an int index comfortably
        error_set(err, "nt_xent: batch %d too large (at most 16384 per device)", max_batch);
        return NULL;
    }
    NtXent *loss = calloc(1, sizeof(*loss));
    if (!loss) {
        error_set(err, "nt_xent: out of host memory");
        return NULL;
    }
    loss->backend = backend;
    loss->max_batch = max_batch;
    loss->dim = dim;
    loss->temperature = temperature;
    const size_t rows = 2 * (size_t)max_batch;
    const size_t square = rows * rows;
    BackendOps *op = &backend->op;
    loss->z = op->alloc(backend, rows * dim * sizeof(float));
    loss->norms = op->alloc(backend, rows * sizeof(float));
    loss->logits = op->alloc(backend, square * sizeof(float));
    loss->log_probs = op->alloc(backend, square * sizeof(float));
    loss->diagonal = op->alloc(backend, square * sizeof(float));
    loss->positives = op->alloc(backend, square * sizeof(float));
    loss->dz = op->alloc(backend, rows * dim * sizeof(float));
    loss->loss_sum = op->alloc(backend, sizeof(float));
    loss->host_mask = malloc(square * sizeof(float));
    if (!loss->z || !loss->norms || !loss->logits || !loss->log_probs || !loss->diagonal ||
        !loss->positives || !loss->dz || !loss->loss_sum || !loss->host_mask) {
        nt_xent_destroy(loss);
        error_set(err, "nt_xent: out of memory for batch %d, dim %d (%zu MB)", max_batch, dim,
                  (4 * square + 2 * rows * dim) * sizeof(float) >> 20);
        return NULL;
    }
    return loss;
}

void nt_xent_destroy(NtXent *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    float *buffers[] = {loss->z,         loss->norms,     loss->logits, loss->log_probs,
                        loss->diagonal,  loss->positives, loss->dz,     loss->loss_sum};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss->host_mask);
    free(loss);
}

// Lays out the diagonal and positive masks for this batch size (uploaded
// only when the batch size changes, e.g. for the last, smaller batch).
static void prepare_masks(NtXent *loss, int batch) {
    if (loss->masks_batch == batch) return;
    const int rows = 2 * batch;
    const size_t bytes = (size_t)rows * rows * sizeof(float);
    float *mask = loss->host_mask;
    memset(mask, 0, bytes);
    for (int i = 0; i < rows; i++) mask[(size_t)i * rows + i] = NT_XENT_DIAGONAL_MASK;
    loss->backend->op.upload(loss->backend, loss->diagonal, mask, bytes);
    memset(mask, 0, bytes);
    for (int i = 0; i < rows; i++) mask[(size_t)i * rows + (i + batch) % rows] = 1.0f;
    loss->backend->op.upload(loss->backend, loss->positives, mask, bytes);
    loss->masks_batch = batch;
}

float nt_xent_forward(NtXent *loss, int batch, const float *out0, const float *out1) {
    if (batch < 1 || batch > loss->max_batch) return NAN;
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int dim = loss->dim;
    const int rows = 2 * batch;
    const size_t square = (size_t)rows * rows;
    prepare_masks(loss, batch);
    loss->batch = batch;

    op->l2_normalize_forward(backend, batch, dim, out0, NT_XENT_NORMALIZE_EPS, loss->z,
                             loss->norms);
    op->l2_normalize_forward(backend, batch, dim, out1, NT_XENT_NORMALIZE_EPS,
                             loss->z + (size_t)batch * dim, loss->norms + batch);
    // logits (2N, 2N) = z z^T / t, then the self-similarities masked out
    op->gemm(backend, 0, 1, rows, rows, dim, 1.0f / loss->temperature, loss->z, dim, loss->z,
             dim, 0.0f, loss->logits, rows);
    op->add(backend, square, loss->logits, loss->diagonal, loss->logits);
    op->log_softmax_forward(backend, rows, rows, loss->logits, 1.0f, loss->log_probs);
    op->dot(backend, square, loss->log_probs, loss->positives, loss->loss_sum);
    return -backend_read_scalar(backend, loss->loss_sum) / (float)rows;
}

void nt_xent_backward(NtXent *loss, float dloss, float *dout0, float *dout1) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->batch;
    const int dim = loss->dim;
    const int rows = 2 * batch;
    const size_t square = (size_t)rows * rows;
    // d loss / d logits = (softmax - onehot(positive)) / 2N; the masked
    // diagonal has softmax 0, so no gradient flows into it. The 1 / 2N and
    // dloss go into the gemms' alpha below.
    float *dlogits = loss->log_probs;  // (2N, 2N), reused
    op->softmax_forward(backend, rows, rows, loss->logits, 1.0f, dlogits);
    op->axpby(backend, square, -1.0f, loss->positives, 1.0f, dlogits);
    // logits = z z^T / t, so dz = (dlogits + dlogits^T) z / t
    const float alpha = dloss / ((float)rows * loss->temperature);
    op->gemm(backend, 0, 0, rows, dim, rows, alpha, dlogits, rows, loss->z, dim, 0.0f, loss->dz,
             dim);
    op->gemm(backend, 1, 0, rows, dim, rows, alpha, dlogits, rows, loss->z, dim, 1.0f, loss->dz,
             dim);
    op->l2_normalize_backward(backend, batch, dim, loss->z, loss->norms, loss->dz,
                              NT_XENT_NORMALIZE_EPS, dout0);
    const size_t half = (size_t)batch * dim;
    op->l2_normalize_backward(backend, batch, dim, loss->z + half, loss->norms + batch,
                              loss->dz + half, NT_XENT_NORMALIZE_EPS, dout1);
}
