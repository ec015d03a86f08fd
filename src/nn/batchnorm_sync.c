// Synchronised BatchNorm over the ranks of a communicator (see
// batchnorm_sync.h): the backend's split batch-norm ops with all-reduces in
// between, queued on the device where the communicator can (NCCL), so the
// host does not wait for the device at every norm of the step.
#include "nn/batchnorm_sync.h"

#include <stdlib.h>

BatchNormSync *batchnorm_sync_create(Backend *backend, Communicator *comm, ErrorMessage *err) {
    BatchNormSync *sync = calloc(1, sizeof *sync);
    if (!sync) {
        error_set(err, "out of memory for synchronised batch norm");
        return NULL;
    }
    sync->backend = backend;
    sync->comm = comm;
    return sync;
}

void batchnorm_sync_free(BatchNormSync *sync) {
    if (!sync) return;
    if (sync->sums) sync->backend->op.free(sync->backend, sync->sums);
    free(sync);
}

int batchnorm_sync_attach(BatchNormSync *sync, BatchNorm *bn, ErrorMessage *err) {
    if (!sync) {
        bn->sync = NULL;
        return 0;
    }
    if (bn->channels > sync->capacity) {
        Backend *backend = sync->backend;
        float *sums = backend->op.alloc(backend, 2 * (size_t)bn->channels * sizeof *sums);
        if (!sums)
            return error_set(err, "out of memory for synchronised batch norm (%d channels)",
                             bn->channels);
        if (sync->sums) backend->op.free(backend, sync->sums);
        sync->sums = sums;
        sync->capacity = bn->channels;
    }
    bn->sync = sync;
    return 0;
}

// The rows of all ranks together (each rank has `rows`).
static size_t total_rows(const BatchNormSync *sync, size_t rows) {
    return rows * (size_t)comm_world_size(sync->comm);
}

void batchnorm_sync_forward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                            const Act *residual, int relu, Act *y, float *save_mean,
                            float *save_inv_std) {
    BatchNormSync *sync = bn->sync;
    BackendOps *op = &backend->op;
    const int channels = bn->channels;
    const size_t total = total_rows(sync, rows);
    // A failure stays in the communicator (sticky); see batchnorm_sync.h.
    op->act_column_sum(backend, rows, channels, x, save_mean);
    comm_all_reduce_queued(sync->comm, save_mean, (size_t)channels, COMM_SUM, NULL);
    op->axpby(backend, (size_t)channels, 1.0f / (float)total, save_mean, 0.0f, save_mean);
    op->batchnorm_centered_squares(backend, rows, channels, x, save_mean, save_inv_std);
    comm_all_reduce_queued(sync->comm, save_inv_std, (size_t)channels, COMM_SUM, NULL);
    op->batchnorm_finish_statistics(backend, channels, total, bn->momentum, bn->eps, save_mean,
                                    save_inv_std, bn->running_mean, bn->running_var);
    op->batchnorm_forward_apply(backend, rows, channels, x, residual, relu, bn->weight, bn->bias,
                                save_mean, save_inv_std, y);
}

void batchnorm_sync_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                             const Act *relu_out, const Act *dy, const float *save_mean,
                             const float *save_inv_std, Act *dx, Act *dresidual) {
    BatchNormSync *sync = bn->sync;
    BackendOps *op = &backend->op;
    const int channels = bn->channels;
    op->batchnorm_backward_reduce(backend, rows, channels, x, relu_out, dy, dresidual, save_mean,
                                  save_inv_std, bn->weight_grad, bn->bias_grad, sync->sums);
    comm_all_reduce_queued(sync->comm, sync->sums, 2 * (size_t)channels, COMM_SUM, NULL);
    // With the masked gradient written to dresidual, read it back instead of
    // masking dy again.
    op->batchnorm_backward_apply(backend, rows, total_rows(sync, rows), channels, x,
                                 dresidual ? NULL : relu_out, dresidual ? dresidual : dy,
                                 bn->weight, save_mean, save_inv_std, sync->sums, dx);
}
