// Synchronised BatchNorm (PyTorch's SyncBatchNorm): in training mode the
// batch statistics and the two per-channel sums of the backward span every
// rank's rows, so N ranks with B/N images each normalise exactly as one
// rank with B images would.
//
//   forward:  sum x -> all-reduce -> mean; sum (x - mean)^2 -> all-reduce ->
//             variance (two passes, as accurate as one rank's), running
//             statistics from the global batch (identical on every rank);
//             normalise with them
//   backward: sum dz, sum dz xhat -> all-reduce -> dx; the parameter
//             gradients (dgamma, dbeta) take this rank's sums, as PyTorch's
//             SyncBatchNorm, and are averaged over ranks with the others
//
// Every rank must have the same number of rows (the global batch is split
// evenly). Three small all-reduces per layer and step (C, C and 2C floats).
//
// A BatchNorm layer uses it when its `sync` is set (batchnorm_forward /
// _backward in layers.c call these); evaluation mode never synchronises.
// A communication failure cannot be returned through the layer calls: it is
// kept by the communicator (sticky, see dist/comm.h) and reported by the
// next collective the training loop makes itself.
#ifndef LTC_NN_BATCHNORM_SYNC_H
#define LTC_NN_BATCHNORM_SYNC_H

#include "dist/comm.h"
#include "nn/layers.h"

typedef struct BatchNormSync {
    Backend *backend;
    Communicator *comm;
    float *sums;   // (2 * capacity) backend memory: the backward's sums
    int capacity;  // channels
} BatchNormSync;

// NULL with a message when out of memory.
BatchNormSync *batchnorm_sync_create(Backend *backend, Communicator *comm, ErrorMessage *err);
void batchnorm_sync_free(BatchNormSync *sync);

// Makes bn use sync, growing its scratch to bn's channels (set-up time);
// sync NULL: bn uses its own rank's batch again.
int batchnorm_sync_attach(BatchNormSync *sync, BatchNorm *bn, ErrorMessage *err);

// batchnorm_forward / batchnorm_relu_forward in training mode over all
// ranks: y (rows, C) = BN(x) (+ residual, then ReLU when relu);
// save_mean, save_inv_std (C) = the global statistics.
void batchnorm_sync_forward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                            const Act *residual, int relu, Act *y, float *save_mean,
                            float *save_inv_std);
// batchnorm_backward / batchnorm_relu_backward (relu_out = the forward's y,
// or NULL) over all ranks: dx (rows, C) =; weight_grad, bias_grad +=;
// dresidual (rows, C) = the gradient reaching the norm unless NULL (may
// alias dy).
void batchnorm_sync_backward(Backend *backend, const BatchNorm *bn, size_t rows, const Act *x,
                             const Act *relu_out, const Act *dy, const float *save_mean,
                             const float *save_inv_std, Act *dx, Act *dresidual);

#endif
