// DINOv2's loss as LightlyTrain computes it (lightly_train/_methods/dinov2:
// DINOLoss, IBOTPatchLoss.forward_masked, lightly's KoLeoLoss), forward and
// backward on a backend. Two global views of B images, L local views:
//
//   teacher targets t = centre(teacher head outputs) at teacher_temp, either
//     softmax:  softmax((out - center) / teacher_temp), the center an EMA
//               (momentum m) of the teacher outputs' mean, updated after the
//               step (dinov2_loss_update_centers), or
//     sinkhorn_knopp: 3 Sinkhorn-Knopp iterations of exp(out / teacher_temp)
//               over the samples of all ranks (backend.h column_max; no
//               center): the class tokens' 2 B rows, and the masked patches
//               on their own
//   dino  = sum over (teacher global view g, student view v != g) of the
//           batch mean of -<t_g, log_softmax(s_v / student_temp)>, divided
//           by 2 + max(2 L, 1) (LightlyTrain's n_global_crops_loss_terms +
//           n_local_crops_loss_terms); logged as its global and local parts
//   ibot  = -sum over masked patches m of w_m <t_m, log_softmax(s_m /
//           student_temp)>, divided by 2 B (every global crop, masked or
//           not); w_m = 1 / (masked patches of m's crop), the teacher
//           targets centred over the M masked patches (their own center).
//           The patch rows may hold padding after the masked patches
//           (validity 0, weight 0: any finite head outputs): it changes
//           neither the loss, nor the targets, nor the center, and its
//           gradient rows are zero, so a caller can keep one row count for
//           every step (dinov2.c)
//   koleo = sum over the two global views of -mean_i log(||y_i - y_nn(i) +
//           eps|| + eps), y the L2-normalised student class tokens (before
//           the head), nn the nearest other row by cosine, eps 1e-8
//   loss  = dino_weight dino + ibot_weight ibot + koleo_weight koleo
//
// Gradients flow to the student head outputs (class tokens and masked
// patches) and to the student class-token features (KoLeo); the teacher
// gets none. With several ranks (comm) the softmax centers average over the
// ranks (lightly's all_reduce) and Sinkhorn-Knopp assigns the samples of
// all ranks together (DINOv2's all-reduced sums), so R ranks give each
// rank's rows of the one-process targets on the concatenated batch; KoLeo
// stays per rank (nearest neighbours within the rank's batch, as DINOv2's).
//
// Memory: everything is allocated by dinov2_loss_create for the largest
// batch and masked-patch count; forward, backward and the center updates
// allocate nothing.
#ifndef LTC_SSL_METHODS_DINOV2_LOSS_H
#define LTC_SSL_METHODS_DINOV2_LOSS_H

#include "backend/backend.h"
#include "dist/comm.h"
#include "util/error.h"

typedef enum Dinov2Centering {
    DINOV2_CENTER_SOFTMAX,         // LightlyTrain's default ("softmax")
    DINOV2_CENTER_SINKHORN_KNOPP,  // "sinkhorn_knopp" (DINOv2's long setup)
} Dinov2Centering;

// "softmax" / "sinkhorn_knopp".
int dinov2_centering_parse(const char *name, Dinov2Centering *centering, ErrorMessage *err);

typedef struct Dinov2LossConfig {
    int max_batch;     // B: images per step
    int local_views;   // L
    int max_masked;    // the most patch rows (masked patches and padding) one step can have
    int out_dim;       // K: head output width
    int feature_dim;   // D: class-token width (KoLeo)
    float student_temp, center_momentum;
    Dinov2Centering centering;
    float dino_weight, ibot_weight, koleo_weight;
} Dinov2LossConfig;

// The terms forward writes (floats of backend memory): unweighted, as
// LightlyTrain logs them, then the weighted sum.
enum {
    DINOV2_TERM_DINO_GLOBAL,
    DINOV2_TERM_DINO_LOCAL,
    DINOV2_TERM_IBOT,
    DINOV2_TERM_KOLEO,
    DINOV2_TERM_TOTAL,
    DINOV2_TERMS
};

typedef struct Dinov2Loss Dinov2Loss;

Dinov2Loss *dinov2_loss_create(Backend *backend, const Dinov2LossConfig *config,
                               Communicator *comm, ErrorMessage *err);
void dinov2_loss_destroy(Dinov2Loss *loss);

// The inputs of one step (backend memory):
typedef struct Dinov2LossInputs {
    int batch;                      // B, 1..max_batch
    int patch_rows;                 // R, 0..max_masked: the masked patches, then padding
    int masked;                     // M, 0..R: the masked patches (checked only)
    int masked_total;               // M over all ranks (>= M; M with one rank): the patch
                                    // center's count, and 0 leaves it alone
    const float *teacher_cls;       // (2 B, K): global view 0's rows, then view 1's
    const float *student_cls;       // ((2 + L) B, K): global views, then the local ones
    const float *teacher_patches;   // (R, K) teacher head outputs of the patch rows
    const float *student_patches;   // (R, K) student head outputs of the same patches
    const float *patch_weights;     // (R) w_m, 0 for padding
    const float *patch_valid;       // (R) 1 for a masked patch, 0 for padding
    const float *inv_masked_total;  // (1) 1 / masked_total (0 when 0), read by the
                                    // center update
    const float *student_features;  // (2 B, D) student class tokens of the global views
    float teacher_temp;
} Dinov2LossInputs;

// Forward; terms (DINOV2_TERMS floats of backend memory) =, computed there
// (nothing read back), each rounded as its float expression over the
// parts would be. Keeps what backward needs. -1 with a message on a bad
// size or temperature, or a failed all-reduce. Collective with
// Sinkhorn-Knopp: every rank calls it every step, with or without masked
// patches.
int dinov2_loss_forward(Dinov2Loss *loss, const Dinov2LossInputs *inputs, float *terms,
                        ErrorMessage *err);

// Gradients of the last forward's total loss (all =): dstudent_cls
// ((2 + L) B, K), dstudent_patches (R, K; zero rows for padding),
// dstudent_features (2 B, D).
void dinov2_loss_backward(Dinov2Loss *loss, float *dstudent_cls, float *dstudent_patches,
                          float *dstudent_features);

// Softmax centring: both centers take the last forward's teacher outputs
// of every rank (the class-token center over all 2 B rows, the patch
// center over the masked patches: their sum over the ranks divided by
// masked_total, so a rank without masked patches still takes part; none
// when masked_total was 0, on every rank alike). Sinkhorn-Knopp: nothing.
// Collective with several ranks.
void dinov2_loss_update_centers(Dinov2Loss *loss);

// The centers (backend memory, K each) for checkpoints.
float *dinov2_loss_cls_center(Dinov2Loss *loss);
float *dinov2_loss_patch_center(Dinov2Loss *loss);

#endif
