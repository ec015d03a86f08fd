// NT-Xent loss (SimCLR) composed from backend ops: l2_normalize, one gemm for
// the similarity matrix, log_softmax / softmax over its rows, and two gemms
// for the gradient; with several ranks an all-gather of the normalised
// embeddings and an all-reduce of their gradient. Contract and formula:
// nt_xent.h.
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
    Communicator *comm;  // NULL: one process
    int max_batch, dim;
    int ranks, rank;     // world size and this rank
    float temperature;
    int batch;           // of the last forward (0: none yet)
    int masks_batch;     // batch the two masks below are laid out for (0: none)
    // Rows: this rank's 2N embeddings; columns: all ranks' 2NW (= rows when W = 1).
    float *z;            // (2N, D) normalized [out0; out1]
    float *norms;        // (2N) their L2 norms before normalizing
    float *columns;      // (2NW, D) every rank's z in rank order (W > 1; else z)
    float *logits;       // (2N, 2NW) z columns^T / t with the own column masked
    float *log_probs;    // (2N, 2NW) log_softmax of logits; softmax - onehot in backward
    float *diagonal;     // (2N, 2NW) NT_XENT_DIAGONAL_MASK at each row's own column
    float *positives;    // (2N, 2NW) 1 at each row's positive, 0 elsewhere
    float *dz;           // (2N, D) gradient w.r.t. z
    float *dcolumns;     // (2NW, D) gradient w.r.t. the columns (W > 1)
    float *loss_sum;     // (1) sum of the positives' log-probabilities
    float *host_mask;    // host (2N, 2NW) staging for the masks
};

NtXent *nt_xent_create(Backend *backend, int max_batch, int dim, float temperature,
                       Communicator *comm, ErrorMessage *err) {
    if (max_batch < 1 || dim < 1) {
        error_set(err, "nt_xent: batch %d and dim %d must be positive", max_batch, dim);
        return NULL;
    }
    if (!(fabsf(temperature) >= 1e-8f)) {
        error_set(err, "nt_xent: temperature %g too close to 0 (|t| < 1e-8)", (double)temperature);
        return NULL;
    }
    const int ranks = comm_world_size(comm);
    // (2N) x (2NW) floats per matrix must fit an int index comfortably
    if ((long)max_batch * ranks > 16384) {
        error_set(err, "nt_xent: batch %d x %d ranks too large (at most 16384 in all)",
                  max_batch, ranks);
        return NULL;
    }
    NtXent *loss = calloc(1, sizeof(*loss));
    if (!loss) {
        error_set(err, "nt_xent: out of host memory");
        return NULL;
    }
    loss->backend = backend;
    loss->comm = comm;
    loss->ranks = ranks;
    loss->rank = comm_rank(comm);
    loss->max_batch = max_batch;
    loss->dim = dim;
    loss->temperature = temperature;
    const size_t rows = 2 * (size_t)max_batch, columns = rows * (size_t)ranks;
    const size_t matrix = rows * columns;
    BackendOps *op = &backend->op;
    loss->z = op->alloc(backend, rows * dim * sizeof(float));
    loss->norms = op->alloc(backend, rows * sizeof(float));
    loss->logits = op->alloc(backend, matrix * sizeof(float));
    loss->log_probs = op->alloc(backend, matrix * sizeof(float));
    loss->diagonal = op->alloc(backend, matrix * sizeof(float));
    loss->positives = op->alloc(backend, matrix * sizeof(float));
    loss->dz = op->alloc(backend, rows * dim * sizeof(float));
    loss->loss_sum = op->alloc(backend, sizeof(float));
    loss->host_mask = malloc(matrix * sizeof(float));
    loss->columns = loss->z;
    if (ranks > 1) {
        loss->columns = op->alloc(backend, columns * dim * sizeof(float));
        loss->dcolumns = op->alloc(backend, columns * dim * sizeof(float));
    }
    if (!loss->z || !loss->norms || !loss->logits || !loss->log_probs || !loss->diagonal ||
        !loss->positives || !loss->dz || !loss->loss_sum || !loss->host_mask ||
        !loss->columns || (ranks > 1 && !loss->dcolumns)) {
        nt_xent_destroy(loss);
        error_set(err, "nt_xent: out of memory for batch %d, dim %d, %d rank(s) (%zu MB)",
                  max_batch, dim, ranks,
                  (4 * matrix + (2 + 2 * (size_t)ranks) * rows * dim) * sizeof(float) >> 20);
        return NULL;
    }
    return loss;
}

void nt_xent_destroy(NtXent *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    float *buffers[] = {loss->z,         loss->norms,     loss->logits,   loss->log_probs,
                        loss->diagonal,  loss->positives, loss->dz,       loss->loss_sum,
                        loss->columns != loss->z ? loss->columns : NULL, loss->dcolumns};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss->host_mask);
    free(loss);
}

// Lays out the own-column and positive masks for this batch size (uploaded
// only when the batch size changes, e.g. for the last, smaller batch). Row
// i (view i / N, image i % N) of this rank is column rank * 2N + i among
// all ranks' rows; its positive is the other view of the same image.
static void prepare_masks(NtXent *loss, int batch) {
    if (loss->masks_batch == batch) return;
    const int rows = 2 * batch, columns = rows * loss->ranks, first = rows * loss->rank;
    const size_t bytes = (size_t)rows * columns * sizeof(float);
    float *mask = loss->host_mask;
    memset(mask, 0, bytes);
    for (int i = 0; i < rows; i++) mask[(size_t)i * columns + first + i] = NT_XENT_DIAGONAL_MASK;
    loss->backend->op.upload(loss->backend, loss->diagonal, mask, bytes);
    memset(mask, 0, bytes);
    for (int i = 0; i < rows; i++) mask[(size_t)i * columns + first + (i + batch) % rows] = 1.0f;
    loss->backend->op.upload(loss->backend, loss->positives, mask, bytes);
    loss->masks_batch = batch;
}

void nt_xent_forward(NtXent *loss, int batch, const float *out0, const float *out1,
                     float *value) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    if (batch < 1 || batch > loss->max_batch) {
        op->fill(backend, value, NAN, 1);
        return;
    }
    const int dim = loss->dim;
    const int rows = 2 * batch, columns = rows * loss->ranks;
    const size_t matrix = (size_t)rows * columns;
    prepare_masks(loss, batch);
    loss->batch = batch;

    op->l2_normalize_forward(backend, batch, dim, out0, NT_XENT_NORMALIZE_EPS, loss->z,
                             loss->norms);
    op->l2_normalize_forward(backend, batch, dim, out1, NT_XENT_NORMALIZE_EPS,
                             loss->z + (size_t)batch * dim, loss->norms + batch);
    if (loss->ranks > 1 &&
        comm_all_gather_queued(loss->comm, loss->z, loss->columns, (size_t)rows * dim, NULL)) {
        op->fill(backend, value, NAN, 1);
        return;
    }
    // logits (2N, 2NW) = z columns^T / t, then the own columns masked out
    op->gemm(backend, 0, 1, rows, columns, dim, 1.0f / loss->temperature, loss->z, dim,
             loss->columns, dim, 0.0f, loss->logits, columns);
    op->add(backend, matrix, loss->logits, loss->diagonal, loss->logits);
    op->log_softmax_forward(backend, rows, columns, loss->logits, 1.0f, loss->log_probs);
    op->dot(backend, matrix, loss->log_probs, loss->positives, loss->loss_sum);
    op->scalar_combine(backend, -1.0f, loss->loss_sum, 0.0f, NULL, (float)rows, value);
}

void nt_xent_backward(NtXent *loss, float dloss, float *dout0, float *dout1) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->batch;
    const int dim = loss->dim;
    const int rows = 2 * batch, columns = rows * loss->ranks;
    const size_t matrix = (size_t)rows * columns;
    // d loss / d logits = (softmax - onehot(positive)) / 2N; the masked own
    // column has softmax 0, so no gradient flows into it. The 1 / 2N and
    // dloss go into the gemms' alpha below.
    float *dlogits = loss->log_probs;  // (2N, 2NW), reused
    op->softmax_forward(backend, rows, columns, loss->logits, 1.0f, dlogits);
    op->axpby(backend, matrix, -1.0f, loss->positives, 1.0f, dlogits);
    // logits = z columns^T / t: dz = dlogits columns / t as rows, plus, as
    // columns, dcolumns = dlogits^T z / t of which this rank's 2N are z.
    const float alpha = dloss / ((float)rows * loss->temperature);
    op->gemm(backend, 0, 0, rows, dim, columns, alpha, dlogits, columns, loss->columns, dim,
             0.0f, loss->dz, dim);
    if (loss->ranks == 1) {
        op->gemm(backend, 1, 0, rows, dim, rows, alpha, dlogits, rows, loss->z, dim, 1.0f,
                 loss->dz, dim);
    } else {
        // Every rank's rows have gradient for this rank's columns: summed over
        // ranks (a failure stays in the communicator, see dist/comm.h).
        op->gemm(backend, 1, 0, columns, dim, rows, alpha, dlogits, columns, loss->z, dim, 0.0f,
                 loss->dcolumns, dim);
        comm_all_reduce_queued(loss->comm, loss->dcolumns, (size_t)columns * dim, COMM_SUM,
                               NULL);
        op->add(backend, (size_t)rows * dim, loss->dz,
                loss->dcolumns + (size_t)loss->rank * rows * dim, loss->dz);
    }
    op->l2_normalize_backward(backend, batch, dim, loss->z, loss->norms, loss->dz,
                              NT_XENT_NORMALIZE_EPS, dout0);
    const size_t half = (size_t)batch * dim;
    op->l2_normalize_backward(backend, batch, dim, loss->z + half, loss->norms + batch,
                              loss->dz + half, NT_XENT_NORMALIZE_EPS, dout1);
}
