// `--method distillationv2`: LightlyTrain's dense distillation
// (DistillationV2). One view, mixed up; the frozen teacher's patch tokens
// of its last n_teacher_blocks blocks, each through the final LayerNorm (as
// DINOv2's get_intermediate_layers(norm=True)), concatenated per token
// (B, P, n D), not normalised; a ResNet teacher gives its last stage
// (n_teacher_blocks 1); a DINOv3 ConvNeXt teacher its last n stages (as
// LightlyTrain's DINOv3 ConvNeXt wrapper: the last stage through the final
// norm, the others as they are, each resized bilinearly to the last
// stage's grid), side by side (B, P, sum of their widths). The student's feature map through
// DistillationV2Head (one Linear, or n_projection_layers with LayerNorm and
// GELU, projection_hidden_dim wide) to n D, resized to the teacher's grid;
//   loss = mean squared error
// (distillation_loss.h, distillation_teacher.h). Method arguments:
// DISTILL_COMMON_ARGS, n_teacher_blocks (2; 1 for a ResNet teacher or a
// ConvNeXt without DINOv3's features),
// n_projection_layers (1), projection_hidden_dim (2048).
#include <stdlib.h>

#include "ssl_methods/distillation_loss.h"
#include "ssl_methods/distillation_teacher.h"

typedef struct DistillationV2 {
    DistillCommon common;  // first: the shared hooks read it (no queue)
    DistillProjection head;
    DistillMseLoss *loss;
    int blocks;               // n_teacher_blocks
    int width;                // of the teacher's features: n D (ConvNeXt: its stages' widths)
    Act *teacher_features;    // (B, P, n D) (n > 1)
    float *teacher_f32;       // (B, P, n D) the teacher's features in fp32
    Act *block_tokens;        // (B, T, D): one block's normalised tokens (n > 1)
    Act *patches;             // (B, P, D): their patch rows (n > 1; ConvNeXt: a resized stage)
    float *dstudent;          // (B, P, n D)
    Act *dmap;                // (B, h, w, embedding width: C without --embed-dim)
} DistillationV2;

// teacher_f32 = the last `blocks` blocks' normalised patch tokens side
// by side (block by block, as torch.cat(dim=1) on (B, D, H, W) maps).
static const float *v2_teacher_features(DistillationV2 *state, int batch, ErrorMessage *err) {
    DistillTeacher *teacher = &state->common.teacher;
    Backend *backend = teacher->backbone.backend;
    const size_t dim = (size_t)teacher->dim, wide = (size_t)state->width;
    const size_t patches = (size_t)teacher->grid_h * teacher->grid_w;
    if (state->blocks > 1 && distill_teacher_has_stages(teacher)) {
        distill_teacher_stage_features(teacher, batch, state->blocks, state->patches,
                                       state->teacher_features);
        backend->op.act_to_float(backend, batch * patches * wide, state->teacher_features,
                                 state->teacher_f32);
        return state->teacher_f32;
    }
    if (state->blocks == 1) {
        backend->op.act_to_float(backend, batch * patches * dim, distill_teacher_map(teacher),
                                 state->teacher_f32);
        return state->teacher_f32;
    }
    Vit *vit = &teacher->backbone.model.vit;
    const size_t tokens = (size_t)vit->slots[0].tokens, first = tokens - patches;
    for (int k = 0; k < state->blocks; k++) {
        const int block = vit->config.depth - state->blocks + k;
        if (vit_block_tokens(vit, 0, block, state->block_tokens, err)) return NULL;
        // (B, T, D) -> the patch rows (B, P, D) -> columns k D.. of (B P, n D)
        backend->op.copy_2d(backend, (size_t)batch, patches * dim,
                            act_at(backend, state->block_tokens, first * dim), tokens * dim,
                            state->patches, patches * dim);
        backend->op.copy_2d(backend, (size_t)batch * patches, dim, state->patches, dim,
                            act_at(backend, state->teacher_features, k * dim), wide);
    }
    backend->op.act_to_float(backend, batch * patches * wide, state->teacher_features,
                             state->teacher_f32);
    return state->teacher_f32;
}

static int v2_step(Method *method, long step, int batch, ErrorMessage *err) {
    DistillationV2 *state = method->state;
    const Act *input = distill_mixup_apply(&state->common.mixup, method, batch);
    if (distill_teacher_forward(&state->common.teacher, batch, input, err)) return -1;
    const float *teacher = v2_teacher_features(state, batch, err);
    if (!teacher) return -1;
    if (backbone_forward(&method->backbone, 0, batch, input, 1, err)) return -1;
    int height, width;
    const Act *map = backbone_feature_map(&method->backbone, 0, &height, &width);
    // LightlyTrain's embedding model with pool=False: its head on every position.
    const Act *embedding = embed_head_forward(&method->embed, batch * height * width, map, 1, err);
    const float *student =
        embedding ? distill_projection_forward(&state->head, batch, embedding, err) : NULL;
    if (!student) return -1;
    const size_t n = (size_t)batch * distill_projection_rows(&state->head) * state->head.dim;
    distill_mse_loss_forward(state->loss, n, teacher, student, method_loss(method));
    distill_mse_loss_backward(state->loss, 1.0f, state->dstudent);
    method_scale_loss_gradient(method, n, state->dstudent);
    if (distill_projection_backward(&state->head, state->dstudent, state->dmap, err)) return -1;
    const Act *dmap = embed_head_backward(&method->embed, state->dmap, err);
    return dmap ? backbone_backward_map(&method->backbone, 0, NULL, dmap, err) : -1;
}

static void v2_destroy(Method *method) {
    DistillationV2 *state = method->state;
    if (!state) return;
    distill_common_free(&state->common);
    distill_projection_free(&state->head);
    distill_mse_loss_destroy(state->loss);
    void *buffers[] = {state->teacher_features, state->teacher_f32, state->block_tokens,
                       state->patches,          state->dstudent,    state->dmap};
    distill_free_buffers(method->backend, buffers, sizeof buffers / sizeof buffers[0]);
    free(state);
    method->state = NULL;
}

// Nothing besides the groups to checkpoint: no queue, the teacher is frozen.
static const MethodOps v2_ops = {
    .step = v2_step,
    .teacher = distill_method_teacher,
    .destroy = v2_destroy,
};

// n_teacher_blocks: a whole number in 1..depth for a ViT teacher, 1..4
// (stages) for a DINOv3 ConvNeXt; a ResNet or another ConvNeXt teacher has
// one map.
static int v2_check_blocks(const DistillTeacher *teacher, double blocks, ErrorMessage *err) {
    const Backbone *backbone = &teacher->backbone;
    const int vit = backbone->spec.kind == BACKBONE_VIT;
    const int depth = vit ? backbone->spec.vit.depth
                          : distill_teacher_has_stages(teacher) ? CONVNEXT_STAGES : 1;
    const char *kind = vit ? "ViT" : backbone->spec.kind == BACKBONE_CONVNEXT ? "ConvNeXt"
                                                                             : "ResNet";
    if (!(blocks >= 1 && blocks <= depth) || blocks != (int)blocks)
        return error_set(err, "--method-arg n_teacher_blocks=%g: the %s teacher has %d block "
                              "output%s to take (1..%d)", blocks, kind, depth,
                         depth == 1 ? "" : "s", depth);
    return 0;
}

// The width of the teacher's features for n_teacher_blocks blocks.
static int v2_teacher_width(const DistillTeacher *teacher, int blocks) {
    return distill_teacher_has_stages(teacher) ? distill_teacher_stage_width(teacher, blocks)
                                               : blocks * teacher->dim;
}

static int v2_buffers(DistillationV2 *state, Backend *backend, int batch, int tokens,
                      int student_elements, ErrorMessage *err) {
    const DistillTeacher *teacher = &state->common.teacher;
    size_t d = (size_t)teacher->dim;  // the widest part: a block, a ConvNeXt stage
    for (int s = 0; distill_teacher_has_stages(teacher) && s < CONVNEXT_STAGES; s++)
        if ((size_t)teacher->backbone.spec.convnext.dims[s] > d)
            d = (size_t)teacher->backbone.spec.convnext.dims[s];
    const size_t b = (size_t)batch;
    const size_t patches = (size_t)teacher->grid_h * teacher->grid_w;
    const size_t wide = b * patches * state->width;
    const int several = state->blocks > 1;
    float **buffers[] = {&state->teacher_f32, &state->dstudent};
    const size_t sizes[] = {wide, wide};
    Act **acts[] = {&state->teacher_features, &state->block_tokens, &state->patches,
                    &state->dmap};
    const size_t act_sizes[] = {several ? wide : 0, several ? b * tokens * d : 0,
                                several ? b * patches * d : 0, b * student_elements};
    return distill_alloc_buffers(backend, buffers, sizes, 2, err) ||
                   distill_alloc_acts(backend, acts, act_sizes, 4, err)
               ? -1
               : 0;
}

// n_teacher_blocks: at most the ViT teacher's depth, checked once it is
// loaded (v2_check_blocks); the range here is the deepest ViT's, ViT-g's.
const MethodArgSpec distillation_v2_arg_specs[] = {
    DISTILL_COMMON_ARGS,
    {"n_teacher_blocks", METHOD_ARG_INTEGER, 1, 40, 0, NULL},
    {"n_projection_layers", METHOD_ARG_INTEGER, 1, HEAD_MAX_LAYERS, 0, NULL},
    METHOD_ARG_DIM("projection_hidden_dim"), METHOD_ARG_END,
};

int distillation_v2_create(Method *method, const MethodSetup *setup, ErrorMessage *err) {
    double layers, hidden;
    if (method_arg_double(setup, "n_projection_layers", 1, &layers, err) ||
        method_arg_double(setup, "projection_hidden_dim", 2048, &hidden, err))
        return -1;
    DistillationV2 *state = calloc(1, sizeof *state);
    if (!state) return error_set(err, "out of memory");
    method->state = state;
    method->ops = &v2_ops;
    Backend *backend = method->backend;
    const int batch = method->max_batch;
    if (distill_setup(method, setup, &state->common, err)) return -1;
    const DistillTeacher *teacher = &state->common.teacher;
    const int vit_teacher = teacher->backbone.spec.kind == BACKBONE_VIT;
    double blocks;
    const int several = vit_teacher || distill_teacher_has_stages(teacher);
    if (method_arg_double(setup, "n_teacher_blocks", several ? 2 : 1, &blocks, err)) return -1;
    if (v2_check_blocks(teacher, blocks, err)) return -1;
    state->blocks = (int)blocks;
    state->width = v2_teacher_width(teacher, state->blocks);
    if (distill_teacher_keep_blocks(&state->common.teacher, state->blocks, err)) return -1;
    int height, width;
    backbone_feature_map_size(&method->backbone, 0, &height, &width);
    const int student_dim = method->embed.dim;
    const HeadSpec head = head_spec_distillation_v2(student_dim, (int)hidden, state->width,
                                                    (int)layers);
    const int tokens = vit_teacher ? teacher->backbone.model.vit.slots[0].tokens : 0;
    if (distill_projection_create(&state->head, backend, &head, "projection_head", batch, height,
                                  width, teacher->grid_h, teacher->grid_w, 0, setup->seed, err) ||
        v2_buffers(state, backend, batch, tokens, height * width * student_dim, err))
        return -1;
    state->loss = distill_mse_loss_create(
        backend, (size_t)batch * distill_projection_rows(&state->head) * state->head.dim, err);
    if (!state->loss) return -1;
    return method_add_group(method, "projection_head", &state->head.head.params, NULL, NULL, 0,
                            err);
}
