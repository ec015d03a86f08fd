// VICReg's loss (Bardes et al. 2022) as lightly's VICRegLoss computes it on
// one device, forward and backward on a backend. For the two views' projections
// a, b (N, D):
//
//   invariance = mean over N*D of (a - b)^2
//   variance   = (v(a) + v(b)) / 2,  v(x) = mean_j relu(1 - sqrt(var_j(x) + eps))
//   covariance = c(a) + c(b),        c(x) = sum_{j != k} C(x)_jk^2 / D,
//                C(x) = (x - mean)^T (x - mean) / (N - 1)
//   loss = lambda invariance + mu variance + nu covariance
//
// var_j is the unbiased variance of feature j over the batch, so N >= 2.
// Defaults (lightly, the paper): lambda 25, mu 25, nu 1, eps 1e-4.
//
// All memory (two D x D matrices among it) is allocated by vicreg_loss_create
// for the largest batch; forward and backward allocate nothing.
#ifndef LTC_SSL_METHODS_VICREG_LOSS_H
#define LTC_SSL_METHODS_VICREG_LOSS_H

#include "backend/backend.h"
#include "util/error.h"

#define VICREG_LOSS_DEFAULT_LAMBDA 25.0f  // invariance weight
#define VICREG_LOSS_DEFAULT_MU 25.0f      // variance weight
#define VICREG_LOSS_DEFAULT_NU 1.0f       // covariance weight
#define VICREG_LOSS_DEFAULT_EPS 1e-4f

typedef struct VicregLoss VicregLoss;

// For batches of 2..max_batch embedding pairs of size dim. NULL with a message
// when max_batch < 2, dim < 1, eps <= 0 or memory runs out.
VicregLoss *vicreg_loss_create(Backend *backend, int max_batch, int dim, float lambda, float mu,
                               float nu, float eps, ErrorMessage *err);
void vicreg_loss_destroy(VicregLoss *loss);

// The loss of out0, out1 (batch, dim) (backend memory; row i of both is the
// same image) into *value (one float of backend memory, =; computed there
// from the loss's sums, nothing read back). Keeps what backward needs (the
// inputs need not outlive the call). NaN when batch is outside
// 2..max_batch.
void vicreg_loss_forward(VicregLoss *loss, int batch, const float *out0, const float *out1,
                         float *value);

// dout0, dout1 (batch, dim) = dloss * d loss / d out0, out1 for the inputs of
// the last forward (overwritten, backend memory).
void vicreg_loss_backward(VicregLoss *loss, float dloss, float *dout0, float *dout1);

#endif
