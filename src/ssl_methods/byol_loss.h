// BYOL's loss (Grill et al. 2020, eq. 2 made symmetric), forward and backward
// on a backend:
//
//   loss = mean_i || p0_i/|p0_i| - z1_i/|z1_i| ||^2
//        + mean_i || p1_i/|p1_i| - z0_i/|z0_i| ||^2      (each term = 2 - 2 cos)
//
// p0, p1 are the online network's predictions of views 0 and 1, z0, z1 the
// EMA teacher's projections of the same views (targets: no gradient).
// Normalising uses F.normalize's eps 1e-12. This follows the paper's
// constants; lightly's BYOL example, 0.5 (NegativeCosineSimilarity(p0, z1) +
// NegativeCosineSimilarity(p1, z0)) = -(mean cos0 + mean cos1) / 2, gives the
// same gradients scaled by 1/4: ours = 4 + 4 * lightly's.
//
// All memory is allocated by byol_loss_create for the largest batch; forward
// and backward allocate nothing.
#ifndef LTC_SSL_METHODS_BYOL_LOSS_H
#define LTC_SSL_METHODS_BYOL_LOSS_H

#include "backend/backend.h"
#include "util/error.h"

#define BYOL_LOSS_NORMALIZE_EPS 1e-12f  // torch.nn.functional.normalize's default

typedef struct ByolLoss ByolLoss;

// For batches of 1..max_batch of dim-sized vectors. NULL with a message when
// a size is not positive or memory runs out.
ByolLoss *byol_loss_create(Backend *backend, int max_batch, int dim, ErrorMessage *err);
void byol_loss_destroy(ByolLoss *loss);

// The loss of predictions p0, p1 and targets z0, z1 (batch, dim) (backend
// memory; row i of all four is the same image) into *value (one float of
// backend memory, =). Keeps what backward needs. NaN when batch is outside
// 1..max_batch.
void byol_loss_forward(ByolLoss *loss, int batch, const float *p0, const float *p1,
                       const float *z0, const float *z1, float *value);

// dp0, dp1 (batch, dim) = dloss * d loss / d p0, p1 for the inputs of the
// last forward (overwritten, backend memory). The targets get no gradient.
void byol_loss_backward(ByolLoss *loss, float dloss, float *dp0, float *dp1);

#endif
