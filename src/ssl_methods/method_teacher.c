// The EMA teacher shared by BYOL and DINO (see method_teacher.h).
#include "ssl_methods/method_teacher.h"

#include <stdio.h>
#include <string.h>

// Mixed into the method's seed for the teacher's own draws ("teacher" in ASCII).
#define TEACHER_DRAW_SEED UINT64_C(0x74656163686572)

static void teacher_copy_head(Backend *backend, Head *target, const Head *source) {
    method_copy_parameters(backend, &target->params, &source->params);
    if (source->buffers.count) method_copy_parameters(backend, &target->buffers, &source->buffers);
    if (source->last_layer.count)
        method_copy_parameters(backend, &target->last_layer, &source->last_layer);
    target->num_batches_tracked = source->num_batches_tracked;
}

int ema_teacher_create(EmaTeacher *teacher, Method *method, const Head *student_head,
                       const char *head_name, uint64_t seed, ErrorMessage *err) {
    return ema_teacher_create_rows(teacher, method, student_head, head_name,
                                   method->global_views * method->max_batch, seed, err);
}

int ema_teacher_create_rows(EmaTeacher *teacher, Method *method, const Head *student_head,
                            const char *head_name, int head_rows, uint64_t seed,
                            ErrorMessage *err) {
    memset(teacher, 0, sizeof *teacher);
    Backend *backend = method->backend;
    const BackboneInput input = {method->global_views * method->max_batch,
                                 method->global_size};
    // The teacher keeps nothing for a backward it never runs (the frozen
    // layout: block outputs in turn, not every activation); its training
    // forwards still compute batch statistics (ResNet) and rescale RoPE (ViT),
    // drawn from a seed of its own (the student's draws are keyed by `seed`;
    // DINOv3 draws the two models' factors apart). The initial values drawn
    // here are replaced by the student's just below.
    if (backbone_create_frozen(&teacher->backbone, backend, &method->backbone.spec, &input, 1,
                               seed ^ TEACHER_DRAW_SEED, err))
        return error_prefix(err, "teacher backbone"), -1;
    method_copy_parameters(backend, teacher->backbone.params, method->backbone.params);
    method_copy_parameters(backend, teacher->backbone.buffers, method->backbone.buffers);
    *teacher->backbone.num_batches_tracked = *method->backbone.num_batches_tracked;
    if (embed_head_create_copy(&teacher->embed, backend, &method->embed, "teacher_embed_head",
                               input.batch, seed, err))
        return error_prefix(err, "teacher"), -1;
    char name[64];
    snprintf(name, sizeof name, "teacher_%s", head_name);
    snprintf(teacher->head_prefix, sizeof teacher->head_prefix, "teacher_%s.", head_name);
    if (head_create(&teacher->head, backend, &student_head->spec, name, head_rows, seed, err))
        return -1;
    teacher_copy_head(backend, &teacher->head, student_head);
    teacher->student_head = student_head;
    // Its training-mode batch statistics span every rank, as the student's.
    if (backbone_attach_batchnorm_sync(&teacher->backbone, method->batchnorm_sync, err) ||
        head_attach_batchnorm_sync(&teacher->head, method->batchnorm_sync, err))
        return error_prefix(err, "teacher"), -1;
    return 0;
}

void ema_teacher_free(EmaTeacher *teacher) {
    head_free(&teacher->head);
    embed_head_free(&teacher->embed);
    backbone_free(&teacher->backbone);
}

const float *ema_teacher_forward(EmaTeacher *teacher, Method *method, int rows,
                                 ErrorMessage *err) {
    // Keyed by the batch, as the student's (method_normalize_views): a
    // resumed run draws what the uninterrupted one did.
    backbone_set_draw_key(&teacher->backbone, method->batch_index);
    if (backbone_forward(&teacher->backbone, 0, rows, method->global_input, 1, err)) return NULL;
    const Act *embedding =
        embed_head_forward(&teacher->embed, rows, backbone_features(&teacher->backbone, 0), 0, err);
    return embedding ? head_forward(&teacher->head, rows, embedding, 1, err) : NULL;
}

void ema_teacher_update(EmaTeacher *teacher, Method *method, float momentum) {
    Backend *backend = method->backend;
    method_ema_update(backend, teacher->backbone.params, method->backbone.params, momentum);
    if (teacher->embed.enabled)
        method_ema_update(backend, &teacher->embed.head.params, &method->embed.head.params,
                          momentum);
    method_ema_update(backend, &teacher->head.params, &teacher->student_head->params, momentum);
    if (teacher->head.last_layer.count)
        method_ema_update(backend, &teacher->head.last_layer, &teacher->student_head->last_layer,
                          momentum);
}

// DINO's weight-normalised layer is a table of its own (its group is frozen
// at first); its prefix must not start with head_prefix, whose load is strict.
static const char teacher_last_layer_prefix[] = "teacher_last_layer.";

int ema_teacher_save(EmaTeacher *teacher, CheckpointWriter *writer, ErrorMessage *err) {
    if (checkpoint_add_parameters(writer, "teacher_backbone.", teacher->backbone.params,
                                  teacher->backbone.buffers,
                                  *teacher->backbone.num_batches_tracked, err) ||
        checkpoint_add_parameters(writer, teacher->head_prefix, &teacher->head.params,
                                  teacher->head.buffers.count ? &teacher->head.buffers : NULL,
                                  teacher->head.num_batches_tracked, err))
        return -1;
    if (teacher->head.last_layer.count &&
        checkpoint_add_parameters(writer, teacher_last_layer_prefix,
                                  &teacher->head.last_layer, NULL, 0, err))
        return -1;
    if (teacher->embed.enabled &&
        checkpoint_add_parameters(writer, EMBED_HEAD_TEACHER_PREFIX, &teacher->embed.head.params,
                                  NULL, 0, err))
        return -1;
    return 0;
}

int ema_teacher_load(EmaTeacher *teacher, const Checkpoint *checkpoint, ErrorMessage *err) {
    if (checkpoint_load_parameters(checkpoint, "teacher_backbone.", teacher->backbone.params,
                                   teacher->backbone.buffers,
                                   teacher->backbone.num_batches_tracked, err) ||
        checkpoint_load_parameters(checkpoint, teacher->head_prefix, &teacher->head.params,
                                   teacher->head.buffers.count ? &teacher->head.buffers : NULL,
                                   &teacher->head.num_batches_tracked, err))
        return -1;
    if (teacher->head.last_layer.count &&
        checkpoint_load_parameters(checkpoint, teacher_last_layer_prefix,
                                   &teacher->head.last_layer, NULL, NULL, err))
        return -1;
    if (teacher->embed.enabled &&
        checkpoint_load_parameters(checkpoint, EMBED_HEAD_TEACHER_PREFIX,
                                   &teacher->embed.head.params, NULL, NULL, err))
        return -1;
    return 0;
}
