// LightlyTrain's distillation losses, forward and backward on a backend,
// and its queue of teacher features:
//
//   KL term (v1's DistillationLoss, v3's DistillationV3Loss): for teacher
//   logits T and student logits S (rows, K) and a temperature t,
//     kl = (1 / rows) sum_r sum_k p_rk (log p_rk - log q_rk),
//     p = softmax(T / t), q = softmax(S / t)
//   (KLDivLoss(reduction="batchmean") of log_softmax(S / t) against
//   softmax(T / t); a p that underflows to 0 adds 0, as xlogy does);
//   - global (v1, v3): T = teacher queue^T, S = student queue^T, rows = B,
//     with teacher, student (B, D) and the queue (Q, D) of pseudo-classes;
//   - local (v3): per image b, T_b = t_b t_b^T and S_b = s_b s_b^T (P, P)
//     from the (B, P, D) tokens, rows = B P.
//   MSE (v2's DistillationV2Loss): mean over all elements of
//   (teacher - student)^2.
//
// The inputs are what LightlyTrain passes: L2-normalised features for the
// KL terms (the methods normalise), raw ones for the MSE. Only the student
// gets a gradient. Each loss allocates everything in its create function
// for the largest batch; forward and backward allocate nothing.
#ifndef LTC_SSL_METHODS_DISTILLATION_LOSS_H
#define LTC_SSL_METHODS_DISTILLATION_LOSS_H

#include <stdint.h>

#include "backend/backend.h"
#include "train/checkpoint.h"
#include "util/error.h"

#define DISTILLATION_DEFAULT_TEMPERATURE 0.07  // LightlyTrain's temperature(s)

// ---- the global KL term against the queue ---------------------------------------------

typedef struct DistillQueueLoss DistillQueueLoss;

// For batches of 1..max_batch dim-wide features against a queue of
// queue_size rows. NULL with a message on a size < 1, a temperature <= 0 or
// no memory.
DistillQueueLoss *distill_queue_loss_create(Backend *backend, int max_batch, int dim,
                                            int queue_size, float temperature, ErrorMessage *err);
void distill_queue_loss_destroy(DistillQueueLoss *loss);
// The loss of teacher, student (batch, dim) against queue (Q, dim) into
// *value (one float of backend memory, =; nothing read back); keeps what
// backward needs. NaN when batch is outside 1..max_batch.
void distill_queue_loss_forward(DistillQueueLoss *loss, int batch, const float *teacher,
                                const float *student, const float *queue, float *value);
// dstudent (batch, dim) = dloss * d loss / d student of the last forward.
void distill_queue_loss_backward(DistillQueueLoss *loss, float dloss, float *dstudent);

// ---- v3's local KL term over each image's token similarities -------------------------

typedef struct DistillLocalLoss DistillLocalLoss;

// For batches of 1..max_batch images of `tokens` dim-wide tokens.
DistillLocalLoss *distill_local_loss_create(Backend *backend, int max_batch, int tokens, int dim,
                                            float temperature, ErrorMessage *err);
void distill_local_loss_destroy(DistillLocalLoss *loss);
// teacher, student (batch, tokens, dim); *value as the queue loss's.
void distill_local_loss_forward(DistillLocalLoss *loss, int batch, const float *teacher,
                                const float *student, float *value);
void distill_local_loss_backward(DistillLocalLoss *loss, float dloss, float *dstudent);

// ---- v2's mean squared error --------------------------------------------------------

typedef struct DistillMseLoss DistillMseLoss;

// For up to max_elements values per call.
DistillMseLoss *distill_mse_loss_create(Backend *backend, size_t max_elements,
                                        ErrorMessage *err);
void distill_mse_loss_destroy(DistillMseLoss *loss);
// *value (backend memory) = mean of (teacher - student)^2 over n
// elements; NaN when n is out of range.
void distill_mse_loss_forward(DistillMseLoss *loss, size_t n, const float *teacher,
                              const float *student, float *value);
void distill_mse_loss_backward(DistillMseLoss *loss, float dloss, float *dstudent);

// ---- the queue of teacher features (v1, v3) ----------------------------------------------

// LightlyTrain's teacher_queue: Q rows of D, zeros at first. Updated with
// each batch's teacher features before the loss (_update_queue): with B <
// Q rows the queue shifts down by B and the batch fills rows 0..B-1; with
// B >= Q it becomes the batch's first Q rows. Updates are keyed by the
// batch's number: a step repeated on the same batch (a finite-difference
// check) starts again from the queue before that batch, so it updates once.
typedef struct DistillQueue {
    Backend *backend;
    int size, dim;
    float *values;    // (size, dim): the queue including the latest batch (checkpointed)
    float *previous;  // (size, dim): the queue before it
    int has_batch;
    uint64_t batch_index;  // the batch `values` includes, when has_batch
} DistillQueue;

int distill_queue_create(DistillQueue *queue, Backend *backend, int size, int dim,
                         ErrorMessage *err);
void distill_queue_free(DistillQueue *queue);
// The update with teacher (batch, dim) of batch number batch_index.
void distill_queue_update(DistillQueue *queue, uint64_t batch_index, int batch,
                          const float *teacher);
// Checkpoint hooks: the queue's values as "distillation.teacher_queue";
// after a load the next batch updates from them.
int distill_queue_save(const DistillQueue *queue, CheckpointWriter *writer, ErrorMessage *err);
int distill_queue_load(DistillQueue *queue, const Checkpoint *checkpoint, ErrorMessage *err);

// LightlyTrain's queue size for a dataset: 16 below 50 images, 32 below
// 100, 64 below 250, 128 below 500, 256 below 1000, 512 below 2000, 1024
// below 4000, 2048 below 10000, 4096 below 20000, else 8192.
int distill_queue_size_for(size_t dataset_size);

#endif
