// DINO's loss (self-distillation with centering), forward and backward on a
// backend, as lightly's DINOLoss computes it:
//
//   t_g = softmax((teacher_out[g] - center) / teacher_temp)   g < G global views
//   s_v = log_softmax(student_out[v] / student_temp)          v < V views (G global first)
//   loss = sum over pairs (g, v) with v != g of mean over the batch of
//          -sum_k t_g[k] s_v[k], divided by the number of pairs G V - G
//   after the step: center = m center + (1 - m) mean over batch and global
//          views of teacher_out                               (m = center momentum)
//          (with several ranks the mean is over every rank's batch, so the
//          centre is the same on all ranks: lightly's all_reduce)
//
// Only the student outputs get a gradient (the teacher is an EMA copy, no
// backward). The center starts at 0 and is state of the loss (checkpointed
// through dino_loss_center). Lightly updates the center inside its forward;
// here the caller does it explicitly with dino_loss_update_center after the
// step, from the teacher outputs of the last forward (same result).
//
// All memory is allocated by dino_loss_create for the largest batch; forward,
// backward and the center update allocate nothing.
#ifndef LTC_SSL_METHODS_DINO_LOSS_H
#define LTC_SSL_METHODS_DINO_LOSS_H

#include "backend/backend.h"
#include "dist/comm.h"
#include "util/error.h"

typedef struct DinoLoss DinoLoss;

// For batches of 1..max_batch images (per rank of comm; NULL: one process)
// with global_views teacher views and
// total_views student views (global views first, then local ones), each an
// (N, out_dim) projection. NULL with a message when a size is not positive,
// global_views > total_views, there is no cross-view pair (total_views 1),
// student_temp is not positive, center_momentum is outside [0, 1] or memory
// runs out.
DinoLoss *dino_loss_create(Backend *backend, int max_batch, int out_dim, int global_views,
                           int total_views, float student_temp, float center_momentum,
                           Communicator *comm, ErrorMessage *err);
void dino_loss_destroy(DinoLoss *loss);

// The loss for teacher_out[g] (batch, out_dim), g < global_views, and
// student_out[v] (batch, out_dim), v < total_views (backend memory), into
// *value (one float of backend memory, =; nothing read back). teacher_temp
// is this step's teacher temperature (the warmup schedule is the caller's).
// Copies the teacher outputs (for the center update) and keeps what
// backward needs. NaN when batch is outside 1..max_batch or teacher_temp is
// not positive.
void dino_loss_forward(DinoLoss *loss, int batch, const float *const *teacher_out,
                       const float *const *student_out, float teacher_temp, float *value);

// The same loss with the teacher's distributions given: teacher_probs
// (global_views * batch, out_dim), view g's rows at g * batch, already
// centred and sharpened (DINOv2's Sinkhorn-Knopp centring); no centring
// here, and no center update follows (dino_loss_update_center does nothing
// after it). NaN when batch is outside 1..max_batch.
void dino_loss_forward_assigned(DinoLoss *loss, int batch, const float *teacher_probs,
                                const float *const *student_out, float *value);

// *value (backend memory) = the part of the last forward's loss that comes
// from the global student views, the per-view sums added and divided in
// double (DINOv2 keeps it apart from the local views' part, as
// LightlyTrain's dino_global_loss and dino_local_loss). For 1 or 2 global
// views (DINO's and DINOv2's); NaN for more.
void dino_loss_global_views_part(DinoLoss *loss, float *value);

// dstudent[v] (batch, out_dim) = dloss * d loss / d student_out[v] for the
// inputs of the last forward (overwritten, backend memory), v < total_views.
void dino_loss_backward(DinoLoss *loss, float dloss, float *const *dstudent);

// center = m center + (1 - m) mean of the last forward's teacher outputs
// over all ranks of comm (NULL: this process). Does nothing before the
// first forward. A failed all-reduce stays in the communicator (sticky).
void dino_loss_update_center(DinoLoss *loss);

// The center (out_dim) in backend memory, for checkpoints (download to save,
// upload to restore).
float *dino_loss_center(DinoLoss *loss);

#endif
