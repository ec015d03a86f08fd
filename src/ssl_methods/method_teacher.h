// The EMA teacher of BYOL and DINO: a copy of the student backbone and
// projection head, updated after every optimizer step as
// teacher = m teacher + (1 - m) student (parameters only; the teacher's
// BatchNorm running statistics come from its own forwards, as with lightly's
// update_momentum). It runs in training mode (batch statistics), as the
// teacher modules do inside a LightningModule in training, but never
// backward. Checkpointed as "teacher_backbone." and "teacher_<head name>.",
// and its copy of the student's embedding head (--embed-dim) as
// "teacher_embed_head." (embed_head.h).
#ifndef LTC_SSL_METHODS_METHOD_TEACHER_H
#define LTC_SSL_METHODS_METHOD_TEACHER_H

#include "ssl_methods/heads.h"
#include "ssl_methods/method.h"

typedef struct EmaTeacher {
    Backbone backbone;
    EmbedHead embed;  // the student's method->embed copied (off when it is)
    Head head;
    const Head *student_head;
    char head_prefix[64];  // "teacher_projection_head."
} EmaTeacher;

// Builds the teacher for the method's global views (slot 0 of the same
// size) and copies the student backbone and student_head into it.
int ema_teacher_create(EmaTeacher *teacher, Method *method, const Head *student_head,
                       const char *head_name, uint64_t seed, ErrorMessage *err);
// The same with a head for head_rows rows (DINOv2 runs its head on the
// class tokens and the masked patch tokens together).
int ema_teacher_create_rows(EmaTeacher *teacher, Method *method, const Head *student_head,
                            const char *head_name, int head_rows, uint64_t seed,
                            ErrorMessage *err);
void ema_teacher_free(EmaTeacher *teacher);
// The teacher's projections (rows, out) of the method's global input.
const float *ema_teacher_forward(EmaTeacher *teacher, Method *method, int rows,
                                 ErrorMessage *err);
void ema_teacher_update(EmaTeacher *teacher, Method *method, float momentum);
int ema_teacher_save(EmaTeacher *teacher, CheckpointWriter *writer, ErrorMessage *err);
int ema_teacher_load(EmaTeacher *teacher, const Checkpoint *checkpoint, ErrorMessage *err);

#endif
