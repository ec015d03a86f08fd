// SimCLR's NT-Xent (normalized temperature-scaled cross-entropy) loss,
// forward and backward on a backend, as lightly's NTXentLoss computes it on
// one device (memory bank off):
//
//   z0, z1 = l2_normalize(out0), l2_normalize(out1)       (eps 1e-12, F.normalize)
//   z      = [z0; z1]                                      (2N, D)
//   S      = z z^T / temperature, diagonal removed         (2N, 2N)
//   loss   = mean over the 2N rows i of -log_softmax(S[i])[(i + N) mod 2N]
//
// Row i of view 0 sees its positive (the same image in view 1) and the 2N - 2
// other embeddings of both views as negatives; lightly orders the columns
// differently, which a per-row cross-entropy does not see. With N = 1 every
// row has a single logit and the loss is 0 (as in lightly).
//
// Several ranks (lightly's gather_distributed=True): each rank's 2N rows
// are scored against the normalised embeddings of all W ranks (2NW columns,
// gathered), so the negatives span the global batch; the loss is the mean
// over this rank's rows, and the mean of the ranks' losses is the loss of
// one rank with the whole batch. Backward sends the gradient through the
// local embeddings: the columns' gradient from every rank's rows is summed
// over the ranks (all-reduce) and this rank's part added to its rows', so
// with the gradients averaged over ranks the update equals one rank's with
// the whole batch.
//
// All memory (embeddings, similarity matrix, masks) is allocated by
// nt_xent_create for the largest batch; forward and backward allocate nothing.
#ifndef LTC_SSL_METHODS_NT_XENT_H
#define LTC_SSL_METHODS_NT_XENT_H

#include "backend/backend.h"
#include "dist/comm.h"
#include "util/error.h"

#define NT_XENT_NORMALIZE_EPS 1e-12f  // torch.nn.functional.normalize's default

typedef struct NtXent NtXent;

// For batches of 1..max_batch embedding pairs of size dim on each of comm's
// ranks (NULL: one process). NULL with a message when a size is not
// positive, |temperature| < 1e-8 (lightly's check) or memory runs out.
NtXent *nt_xent_create(Backend *backend, int max_batch, int dim, float temperature,
                       Communicator *comm, ErrorMessage *err);
void nt_xent_destroy(NtXent *loss);

// The loss of out0, out1 (batch, dim) (backend memory, the two views'
// projections; row i of both is the same image) into *value (one float of
// backend memory, =; nothing is read back). Keeps what backward needs. NaN
// when batch is outside 1..max_batch (the same on every rank) or the ranks'
// gather failed.
void nt_xent_forward(NtXent *loss, int batch, const float *out0, const float *out1,
                     float *value);

// dout0, dout1 (batch, dim) = dloss * d loss / d out0, out1 for the inputs of
// the last forward (overwritten, backend memory).
void nt_xent_backward(NtXent *loss, float dloss, float *dout0, float *dout1);

#endif
