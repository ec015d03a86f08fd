// PaKA, the patch kernel alignment loss of LightlyTrain's DINOv31 method
// (DINOv2 + PaKA, arXiv 2509.05606), on top of dinov2.c's DINOv2 step.
//
// Views (augment.h, view_set_dinov31): the teacher also sees clean renders
// of the two global views (the teacher-only global views: one teacher
// forward over the 4 B global rows), the student also sees K PaKA local
// views (the last local views: one student forward over all local rows),
// each a crop inside global view k % 2. For each pair (PaKA local k, image
// b) the student's patch tokens of the local view and the teacher's of the
// clean global are resampled over the region both crops share onto the
// local view's patch grid (paka_roi.h: roi_align as sparse rows, the
// backend's combine_rows), at most max_tokens of its cells drawn when the
// grid has more; each side goes through its PaKA head (Linear 2048, GELU,
// Linear 2048, GELU, Linear 256, PyTorch's default init; the teacher's an
// EMA of the student's at the teacher's momentum); the loss is the mean
// over the pairs whose crops overlap of 1 - CKA of the two heads' outputs
// (the backend's cka_loss), added to DINOv2's as weight x loss and logged
// as train_loss/paka_loss. Before start_step the pairs weigh 0 and the
// student head's group is not stepped (LightlyTrain skips the loss).
// Checkpoints: the student head is a method group ("student_paka_head."),
// the teacher's "teacher_paka_head.".
#ifndef LTC_SSL_METHODS_DINOV2_PAKA_H
#define LTC_SSL_METHODS_DINOV2_PAKA_H

#include "nn/vit.h"
#include "ssl_methods/method.h"

typedef struct Dinov2PakaArgs {
    double weight;    // paka_weight
    long start_step;  // paka_start_step
    int max_tokens;   // paka_max_tokens
} Dinov2PakaArgs;

typedef struct Dinov2Paka Dinov2Paka;

// The PaKA local views of a view set: its last local views that lie inside
// a global view (VIEW_COUPLING_INSIDE); 0 for other methods' views.
int dinov2_paka_view_count(const ViewSet *views);
// PaKA for the method's views (its PaKA local views are the
// VIEW_COUPLING_INSIDE ones, after the other local views); adds the group
// "student_paka_head". NULL with a message.
Dinov2Paka *dinov2_paka_create(Method *method, const VitConfig *vit, const Dinov2PakaArgs *args,
                               uint64_t seed, ErrorMessage *err);
void dinov2_paka_free(Dinov2Paka *paka);
// After the teacher's forward over all 4 B global rows (slot 0) and the
// student's over all local rows (slot 1): the loss, method_loss += weight
// x loss, its logged value into scalar `scalar`, and the gradient of the
// student head's output (the loss scale applied).
int dinov2_paka_forward(Dinov2Paka *paka, Method *method, long step, int batch,
                        const Vit *student, const Vit *teacher, int scalar, ErrorMessage *err);
// The gradient of the PaKA local views' token rows of slot 1 (K B tokens
// rows of the student's token table, written whole) through the student
// head and the alignment.
int dinov2_paka_backward(Dinov2Paka *paka, Method *method, Act *dtokens, ErrorMessage *err);
// Tests: the PaKA of a dinov31 method (NULL for others), and the aligned
// rows of its last forward (pairs x tokens rows of D; pair k B + b:
// PaKA view k of image b), the student's or the teacher's.
Dinov2Paka *dinov2_method_paka(const Method *method);
const Act *dinov2_paka_aligned(const Dinov2Paka *paka, int teacher);
void dinov2_paka_after_update(Dinov2Paka *paka, Method *method, float momentum);
int dinov2_paka_save(Dinov2Paka *paka, CheckpointWriter *writer, ErrorMessage *err);
int dinov2_paka_load(Dinov2Paka *paka, const Checkpoint *checkpoint, ErrorMessage *err);

#endif
