// Barlow Twins' loss (Zbontar et al. 2021) as lightly's BarlowTwinsLoss
// computes it on one device, forward and backward on a backend. For the two
// views' projections a, b (N, D):
//
//   an, bn = per-feature batch normalisation of a, b over the batch
//            ((x - mean) / sqrt(biased var + 1e-5): F.batch_norm in training,
//            no affine parameters)
//   c      = an^T bn / N                                   (D, D)
//   loss   = sum_j (1 - c_jj)^2 + lambda sum_{j != k} c_jk^2
//
// Default lambda 5e-3 (lightly, the paper). Batch statistics need N >= 2.
// All memory (three D x D matrices among it) is allocated by
// barlow_twins_loss_create for the largest batch; forward and backward
// allocate nothing.
#ifndef LTC_SSL_METHODS_BARLOW_TWINS_LOSS_H
#define LTC_SSL_METHODS_BARLOW_TWINS_LOSS_H

#include "backend/backend.h"
#include "util/error.h"

#define BARLOW_TWINS_LOSS_DEFAULT_LAMBDA 5e-3f
#define BARLOW_TWINS_LOSS_BATCHNORM_EPS 1e-5f  // F.batch_norm's default

typedef struct BarlowTwinsLoss BarlowTwinsLoss;

// For batches of 2..max_batch embedding pairs of size dim. NULL with a message
// when max_batch < 2, dim < 1 or memory runs out.
BarlowTwinsLoss *barlow_twins_loss_create(Backend *backend, int max_batch, int dim, float lambda,
                                          ErrorMessage *err);
void barlow_twins_loss_destroy(BarlowTwinsLoss *loss);

// The loss of out0, out1 (batch, dim) (backend memory; row i of both is the
// same image) into *value (one float of backend memory, =; computed there
// from the loss's sums, nothing read back). Keeps what backward needs (the
// inputs need not outlive the call). NaN when batch is outside
// 2..max_batch.
void barlow_twins_loss_forward(BarlowTwinsLoss *loss, int batch, const float *out0,
                               const float *out1, float *value);

// dout0, dout1 (batch, dim) = dloss * d loss / d out0, out1 for the inputs of
// the last forward (overwritten, backend memory). Once per forward: it
// reuses forward's buffers as scratch.
void barlow_twins_loss_backward(BarlowTwinsLoss *loss, float dloss, float *dout0, float *dout1);

#endif
