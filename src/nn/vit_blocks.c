// ViT forward and backward: patch embedding and token sequence, the
// pre-norm transformer blocks, the final norm and pooling, each backward
// written out in reverse order of its forward (see vit.h). Buffers come
// from the slot's activation arena and the model's gradient scratch;
// nothing is allocated here.
#include <math.h>

#include "nn/vit.h"
#include "nn/vit_rope.h"
#include "util/rng.h"

// Drop-path draws: stream per (block, branch), keyed by the training-forward
// count and the sample, so they do not depend on threads or batch order.
#define VIT_DROP_PATH_STREAM 0x44500000u

static size_t slot_rows(const VitSlot *slot, int batch) { return (size_t)batch * slot->tokens; }

// Where the patch positions start in pos_embed (after the class token's, if any).
static size_t patch_pos_offset(const VitConfig *c) {
    return c->class_pos ? (size_t)c->embed_dim : 0;
}

// The sample scales of every block's two residual branches for this
// training forward: 0 (dropped) or 1 / keep probability, drawn into one
// staging buffer and queued into the slot's drop_scale (B) buffers before
// the forward's first block. Nothing when drop path is off (evaluation, or
// a rate of 0).
static void drop_path_upload(Vit *model, const VitSlot *slot, int batch, int training) {
    if (!training || model->config.drop_path_rate <= 0.0f) return;
    float *host = staging_take(&model->drop_staging);
    for (int index = 0; index < model->config.depth; index++) {
        const float rate = model->blocks[index].drop_path;
        if (rate <= 0.0f) continue;
        const float keep = 1.0f - rate;
        for (int branch = 0; branch < 2; branch++) {
            float *scale = host + ((size_t)index * 2 + branch) * batch;
            for (int b = 0; b < batch; b++) {
                Rng rng = rng_make(model->seed, (uint32_t)model->training_forwards, (uint64_t)b,
                                   VIT_DROP_PATH_STREAM + 2u * (uint32_t)index + (uint32_t)branch);
                scale[b] = rng_uniform(&rng) < keep ? 1.0f / keep : 0.0f;
            }
            staging_upload(&model->drop_staging, slot->blocks[index].drop_scale[branch], scale,
                           (size_t)batch * sizeof *scale);
        }
    }
}

// One branch's scales (drop_path_upload), or NULL when it drops nothing.
static const float *drop_path_scales(const Vit *model, int block_index, int branch,
                                     int training, const VitBlockActivations *saved) {
    if (!training || model->blocks[block_index].drop_path <= 0.0f) return NULL;
    return saved->drop_scale[branch];
}

// ---- one block ------------------------------------------------------------------------

// RoPE models: rotates (direction 1) the patch tokens' q and k in qkv (B,
// T, 3, D), or rotates their gradients back (-1).
static void block_rope(Vit *model, int index, const VitSlot *slot, int batch, int direction,
                       Act *qkv) {
    const VitConfig *c = &model->config;
    if (!c->rope) return;
    const float *sin_table, *cos_table;
    vit_rope_block_tables(model, slot, index, &sin_table, &cos_table);
    const int head_dim = c->embed_dim / c->heads, prefix = 1 + c->register_tokens;
    if (direction > 0)
        model->backend->op.rope_forward(model->backend, batch, slot->tokens, c->heads, head_dim,
                                        prefix, sin_table, cos_table, qkv);
    else
        model->backend->op.rope_backward(model->backend, batch, slot->tokens, c->heads, head_dim,
                                         prefix, sin_table, cos_table, qkv);
}

// The layer norm that reads a block's output, with where its output and
// row statistics go: the next block's norm1 or the model's final norm.
typedef struct NextNorm {
    const LayerNorm *norm;
    Act *out;
    float *mean, *inv_std;
} NextNorm;

// recompute: activation checkpointing's pass before the block's backward,
// which needs every tensor but the output (left as the forward wrote it).
// norm1_done: the block before applied this block's norm1 (its `next`).
// next: the norm after the block, applied with its residual add in one
// pass (residual_layernorm_forward), or NULL.
static void block_forward(Vit *model, int index, const VitPlans *plans, const VitSlot *slot,
                          int batch, int training, int recompute, const Act *x, int norm1_done,
                          const NextNorm *next) {
    Backend *backend = model->backend;
    const VitConfig *c = &model->config;
    const VitBlock *block = &model->blocks[index];
    VitBlockActivations *saved = &slot->blocks[index];
    const size_t rows = slot_rows(slot, batch);
    const float scale = (float)(1.0 / sqrt((double)(c->embed_dim / c->heads)));

    if (!norm1_done)
        layernorm_forward(backend, &block->norm1, rows, x, saved->norm1_out, saved->norm1_mean,
                          saved->norm1_inv_std);
    linear_forward(backend, &block->qkv, (int)rows, saved->norm1_out, saved->qkv);
    block_rope(model, index, slot, batch, 1, saved->qkv);
    backend->op.attention_forward(backend, plans->attention_plan, saved->qkv, scale,
                                  saved->attention_out, saved->lse);
    linear_forward(backend, &block->proj, (int)rows, saved->attention_out, saved->proj_out);
    const float *drop = drop_path_scales(model, index, 0, training, saved);
    // mid = x + the attention branch, then norm2 of it: one pass over mid
    const LayerNorm *norm2 = &block->norm2;
    backend->op.residual_layernorm_forward(
        backend, batch, (size_t)slot->tokens, c->embed_dim, x, saved->proj_out, block->ls1, drop,
        saved->mid, norm2->weight, norm2->bias, norm2->eps, saved->norm2_out, saved->norm2_mean,
        saved->norm2_inv_std);
    linear_forward(backend, &block->fc1, (int)rows, saved->norm2_out, saved->fc1_out);
    if (c->swiglu)
        backend->op.swiglu_forward(backend, rows, c->mlp_hidden, saved->fc1_out, saved->act_out);
    else
        backend->op.gelu_forward(backend, rows * c->mlp_hidden, saved->fc1_out, saved->act_out);
    linear_forward(backend, &block->fc2, (int)rows, saved->act_out, saved->fc2_out);
    if (recompute) return;
    drop = drop_path_scales(model, index, 1, training, saved);
    if (next)  // the next norm may write over fc2_out (a frozen model's shared buffer)
        backend->op.residual_layernorm_forward(
            backend, batch, (size_t)slot->tokens, c->embed_dim, saved->mid, saved->fc2_out,
            block->ls2, drop, saved->out, next->norm->weight, next->norm->bias, next->norm->eps,
            next->out, next->mean, next->inv_std);
    else
        backend->op.residual_scale_add_forward(backend, batch, (size_t)slot->tokens,
                                               c->embed_dim, saved->mid, saved->fc2_out,
                                               block->ls2, drop, saved->out);
}

// Gradient buffers of one backward: three (B, T, D) and one wide (B, T,
// max(3 D, H), SwiGLU: max(3 D, 3 H)).
typedef struct VitGradients {
    Act *residual;  // dL/d(the residual stream) flowing down the blocks
    Act *branch, *other, *wide;
    Act *hidden;    // SwiGLU: dL/d(its output) (B, T, H), after d fc1 (B, T, 2 H) in wide
} VitGradients;

// g->residual: dL/d(block output) in, dL/d(block input) out.
static void block_backward(Vit *model, int index, const VitPlans *plans, const VitSlot *slot,
                           int drop_active, const Act *x, const VitGradients *g) {
    Backend *backend = model->backend;
    const VitConfig *c = &model->config;
    const VitBlock *block = &model->blocks[index];
    const VitBlockActivations *saved = &slot->blocks[index];
    const int batch = plans->batch, dim = c->embed_dim;
    const size_t rows = slot_rows(slot, batch), per_sample = (size_t)slot->tokens;
    const float scale = (float)(1.0 / sqrt((double)(dim / c->heads)));
    const int dropped = drop_active && block->drop_path > 0.0f;

    // MLP branch: out = mid + ls2 * drop * fc2(gelu(fc1(norm2(mid)))).
    backend->op.residual_scale_add_backward(backend, batch, per_sample, dim, saved->fc2_out,
                                            g->residual, block->ls2,
                                            dropped ? saved->drop_scale[1] : NULL, g->branch,
                                            block->ls2_grad);
    if (c->swiglu) {
        linear_backward(backend, &block->fc2, (int)rows, saved->act_out, g->branch, g->hidden);
        backend->op.swiglu_backward(backend, rows, c->mlp_hidden, saved->fc1_out, g->hidden,
                                    g->wide);
    } else {
        linear_backward(backend, &block->fc2, (int)rows, saved->act_out, g->branch, g->wide);
        backend->op.gelu_backward(backend, rows * c->mlp_hidden, saved->fc1_out, g->wide,
                                  g->wide);
    }
    linear_backward(backend, &block->fc1, (int)rows, saved->norm2_out, g->wide, g->branch);
    layernorm_backward(backend, &block->norm2, rows, saved->mid, g->branch, saved->norm2_mean,
                       saved->norm2_inv_std, g->residual, 1);  // dL/d(mid): both paths

    // Attention branch: mid = x + ls1 * drop * proj(attention(qkv(norm1(x)))).
    backend->op.residual_scale_add_backward(backend, batch, per_sample, dim, saved->proj_out,
                                            g->residual, block->ls1,
                                            dropped ? saved->drop_scale[0] : NULL, g->branch,
                                            block->ls1_grad);
    linear_backward(backend, &block->proj, (int)rows, saved->attention_out, g->branch, g->other);
    backend->op.attention_backward(backend, plans->attention_plan, saved->qkv,
                                   saved->attention_out, g->other, saved->lse, scale, g->wide);
    block_rope(model, index, slot, batch, -1, g->wide);  // d(rotated q, k) -> d(q, k)
    linear_backward(backend, &block->qkv, (int)rows, saved->norm1_out, g->wide, g->branch);
    // DINOv3's mask_k_bias: the key bias stays 0, so it gets no gradient.
    if (c->qkv_bias == VIT_QKV_BIAS_NO_KEY)
        backend->op.fill(backend, block->qkv.bias_grad + dim, 0.0f, (size_t)dim);
    layernorm_backward(backend, &block->norm1, rows, x, g->branch, saved->norm1_mean,
                       saved->norm1_inv_std, g->residual, 1);  // dL/dx: both paths
}

// ---- the whole backbone ----------------------------------------------------------------

static int find_plans(Vit *model, int slot_index, int batch, const VitPlans **plans,
                      ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "vit: no input slot %d (%d slots)", slot_index, model->slot_count);
    const VitSlot *slot = &model->slots[slot_index];
    for (int i = 0; i < slot->plans_count; i++)
        if (slot->plans[i].batch == batch) *plans = &slot->plans[i];
    if (!*plans)
        return error_set(err, "vit: slot %d (batch <= %d, %d px) has no plans for batch %d (see "
                              "vit_prepare_batch)", slot_index, slot->max.batch,
                         slot->max.resolution, batch);
    return 0;
}

// The patch positions the slot's tokens get: pos_embed's own, or resampled;
// none for a RoPE model.
static const float *patch_positions(Vit *model, const VitSlot *slot) {
    const VitConfig *c = &model->config;
    if (c->rope) return NULL;
    const float *native = model->pos_embed + patch_pos_offset(c);
    if (!slot->patch_pos) return native;
    const int patches = slot->grid * slot->grid, positions = c->pos_grid * c->pos_grid;
    // (P, D) = (P, M^2) (M^2, D)
    model->backend->op.gemm(model->backend, 0, 0, patches, c->embed_dim, positions, 1.0f,
                            slot->pos_matrix, positions, native, c->embed_dim, 0.0f,
                            slot->patch_pos, c->embed_dim);
    return slot->patch_pos;
}

static const Act *last_block_output(const Vit *model, const VitSlot *slot) {
    return slot->blocks[model->config.depth - 1].out;
}

int vit_forward(Vit *model, int slot_index, int batch, const Act *input, int training,
                ErrorMessage *err) {
    const VitPlans *plans = NULL;
    // A frozen model keeps no drop-path scales (its training forwards are an
    // EMA teacher's, which DINO and DINOv2 build without drop path).
    if (training && model->frozen && model->config.drop_path_rate > 0.0f)
        return error_set(err, "vit: a frozen model draws no drop path (rate %g)",
                         (double)model->config.drop_path_rate);
    if (find_plans(model, slot_index, batch, &plans, err)) return -1;
    VitSlot *slot = &model->slots[slot_index];
    Backend *backend = model->backend;
    parameter_set_refresh_compute(&model->params);
    const VitConfig *c = &model->config;
    const int patches = slot->grid * slot->grid, dim = c->embed_dim;

    conv2d_forward(backend, &model->patch_embed, plans->patch_plan, input, slot->patch_out);
    backend->op.bias_add(backend, (size_t)batch * patches, dim, model->patch_bias,
                         slot->patch_out);
    if (slot->patch_mask)  // the masked rows become the token
        backend->op.mask_tokens_forward(backend, (size_t)batch * patches, dim, slot->patch_out,
                                        slot->patch_mask, slot->mask_token, slot->patch_out);
    backend->op.vit_tokens_forward(backend, batch, c->register_tokens, patches, dim,
                                   slot->patch_out, model->cls_token,
                                   c->class_pos ? model->pos_embed : NULL, model->reg_token,
                                   patch_positions(model, slot), slot->tokens_in);
    if (c->rope) vit_rope_prepare_forward(model, slot, training);
    drop_path_upload(model, slot, batch, training);
    // Each block's last residual add with the norm after it (the next
    // block's norm1, the final norm) in one pass.
    const Act *x = slot->tokens_in;
    for (int b = 0; b < c->depth; b++) {
        const VitBlockActivations *after = b + 1 < c->depth ? &slot->blocks[b + 1] : NULL;
        const NextNorm next =
            after ? (NextNorm){&model->blocks[b + 1].norm1, after->norm1_out, after->norm1_mean,
                               after->norm1_inv_std}
                  : (NextNorm){&model->norm, slot->norm_out, slot->norm_mean, slot->norm_inv_std};
        block_forward(model, b, plans, slot, batch, training, 0, x, b > 0, &next);
        x = slot->blocks[b].out;
    }
    const int first = c->pool == VIT_POOL_CLS ? 0 : 1 + c->register_tokens;
    const int count = c->pool == VIT_POOL_CLS ? 1 : patches;
    backend->op.token_pool_forward(backend, batch, slot->tokens, dim, first, count,
                                   slot->norm_out, slot->features);
    if (training) model->training_forwards++;
    slot->last_plans = plans;
    slot->last_input = input;
    slot->backward_ready = training && !model->frozen;
    slot->drop_path_active = training && c->drop_path_rate > 0.0f;
    return 0;
}

void vit_set_draw_key(Vit *model, uint64_t key) {
    model->training_forwards = (int64_t)(key * VIT_FORWARDS_PER_KEY);
}

void vit_set_patch_mask(Vit *model, int slot_index, const float *mask, const float *mask_token,
                        float *mask_token_grad) {
    VitSlot *slot = &model->slots[slot_index];
    slot->patch_mask = mask;
    slot->mask_token = mask ? mask_token : NULL;
    slot->mask_token_grad = mask ? mask_token_grad : NULL;
}

const Act *vit_features(const Vit *model, int slot) { return model->slots[slot].features; }

const Act *vit_tokens(const Vit *model, int slot) { return model->slots[slot].norm_out; }

int vit_slot_tokens(const Vit *model, int slot) { return model->slots[slot].tokens; }

static VitGradients gradient_buffers(const Vit *model) {
    const Backend *backend = model->backend;
    const size_t step = model->scratch_tokens * (size_t)model->config.embed_dim;
    Act *base = model->scratch;
    const VitConfig *c = &model->config;
    Act *hidden = c->swiglu
                      ? act_at(backend, base, 3 * step + model->scratch_tokens * 2 * c->mlp_hidden)
                      : NULL;
    return (VitGradients){.residual = base, .branch = act_at(backend, base, step),
                          .other = act_at(backend, base, 2 * step),
                          .wide = act_at(backend, base, 3 * step), .hidden = hidden};
}

// Backward from dtokens (B, T, D) = dL/d(normalised tokens); dtokens may be
// g.other (it is read before that buffer is reused).
static void backward_from_tokens(Vit *model, VitSlot *slot, const Act *dtokens) {
    Backend *backend = model->backend;
    const VitConfig *c = &model->config;
    const VitPlans *plans = slot->last_plans;
    const int batch = plans->batch, dim = c->embed_dim, patches = slot->grid * slot->grid;
    const size_t rows = slot_rows(slot, batch);
    const VitGradients g = gradient_buffers(model);
    const int drop_active = slot->drop_path_active;

    layernorm_backward(backend, &model->norm, rows, last_block_output(model, slot), dtokens,
                       slot->norm_mean, slot->norm_inv_std, g.residual, 0);
    // The last recomputed block's tensors are still in the shared set.
    const int every = model->activation_checkpointing;
    const int last_checkpointed = every > 0 ? (c->depth - 1) / every * every : -1;
    for (int b = c->depth - 1; b >= 0; b--) {
        const Act *x = b > 0 ? slot->blocks[b - 1].out : slot->tokens_in;
        // Activation checkpointing: the block's tensors again, from its
        // input, with the forward's drop-path scales and RoPE tables.
        if (vit_block_checkpointed(model, b) && b != last_checkpointed)
            block_forward(model, b, plans, slot, batch, drop_active, 1, x, 0, NULL);
        block_backward(model, b, plans, slot, drop_active, x, &g);
        parameter_grads_final_from(&model->params, model->blocks[b].norm1.weight_index);
    }

    // Token sequence: positions (through the resampling map when there is
    // one; none with RoPE), class and register tokens, then the patch embedding.
    float *pos_grad = c->rope ? NULL : model->pos_grad + patch_pos_offset(c);
    float *dpatch_pos = pos_grad;
    if (slot->patch_pos) {
        dpatch_pos = slot->dpatch_pos;
        backend->op.fill(backend, dpatch_pos, 0.0f, (size_t)patches * dim);
    }
    backend->op.vit_tokens_backward(backend, batch, c->register_tokens, patches, dim, g.residual,
                                    g.branch, model->cls_grad,
                                    c->class_pos ? model->pos_grad : NULL, model->reg_grad,
                                    dpatch_pos);
    if (slot->patch_pos) {
        const int positions = c->pos_grid * c->pos_grid;
        // (M^2, D) += (P, M^2)^T (P, D)
        backend->op.gemm(backend, 1, 0, positions, dim, patches, 1.0f, slot->pos_matrix,
                         positions, dpatch_pos, dim, 1.0f, pos_grad, dim);
    }
    if (slot->patch_mask)  // the masked rows' gradient goes to the token, not further down
        backend->op.mask_tokens_backward(backend, (size_t)batch * patches, dim, slot->patch_mask,
                                         g.branch, g.branch, slot->mask_token_grad);
    backend->op.bias_backward(backend, (size_t)batch * patches, dim, g.branch,
                              model->patch_bias_grad);
    conv2d_backward(backend, &model->patch_embed, plans->patch_plan, slot->last_input, g.branch,
                    NULL);
    parameter_set_grads_final(&model->params, 0);
}

static int check_backward(const Vit *model, int slot_index, ErrorMessage *err) {
    if (slot_index < 0 || slot_index >= model->slot_count)
        return error_set(err, "vit: no input slot %d (%d slots)", slot_index, model->slot_count);
    if (model->frozen)
        return error_set(err, "vit: a frozen model (a teacher) keeps nothing for backward");
    if (!model->slots[slot_index].backward_ready)
        return error_set(err, "vit: backward on slot %d without a training forward before it",
                         slot_index);
    return 0;
}

int vit_backward(Vit *model, int slot_index, const Act *dfeatures, ErrorMessage *err) {
    return vit_backward_map(model, slot_index, dfeatures, NULL, err);
}

// dtokens = the pooling's backward of dfeatures plus dmap placed on the
// patch rows (the other rows 0), then the common backward.
int vit_backward_map(Vit *model, int slot_index, const Act *dfeatures, const Act *dmap,
                     ErrorMessage *err) {
    if (check_backward(model, slot_index, err)) return -1;
    if (!dfeatures && !dmap) return error_set(err, "vit: backward without a gradient");
    VitSlot *slot = &model->slots[slot_index];
    Backend *backend = model->backend;
    const VitConfig *c = &model->config;
    const int batch = slot->last_plans->batch, patches = slot->grid * slot->grid;
    const size_t dim = (size_t)c->embed_dim, elements = slot_rows(slot, batch) * dim;
    const int first_patch = 1 + c->register_tokens;
    const VitGradients g = gradient_buffers(model);
    Act *dtokens = g.other;
    if (dfeatures) {
        const int first = c->pool == VIT_POOL_CLS ? 0 : first_patch;
        const int count = c->pool == VIT_POOL_CLS ? 1 : patches;
        backend->op.token_pool_backward(backend, batch, slot->tokens, c->embed_dim, first, count,
                                        dfeatures, dtokens);
    } else {
        backend->op.zero(backend, dtokens, act_bytes(backend, elements));
    }
    if (dmap) {
        backend->op.zero(backend, g.branch, act_bytes(backend, elements));
        backend->op.copy_2d(backend, (size_t)batch, patches * dim, dmap, patches * dim,
                            act_at(backend, g.branch, first_patch * dim),
                            (size_t)slot->tokens * dim);
        backend->op.act_axpby(backend, elements, 1.0f, g.branch, 1.0f, dtokens);
    }
    backward_from_tokens(model, slot, dtokens);
    return 0;
}

static int last_batch(const VitSlot *slot) {
    return slot->last_plans ? slot->last_plans->batch : slot->max.batch;
}

const Act *vit_feature_map(Vit *model, int slot_index, int *height, int *width) {
    VitSlot *slot = &model->slots[slot_index];
    const size_t dim = (size_t)model->config.embed_dim;
    const size_t patches = (size_t)slot->grid * slot->grid;
    const size_t first_patch = 1 + (size_t)model->config.register_tokens;
    model->backend->op.copy_2d(model->backend, (size_t)last_batch(slot), patches * dim,
                               act_at(model->backend, slot->norm_out, first_patch * dim),
                               (size_t)slot->tokens * dim,
                               slot->patch_map, patches * dim);
    *height = *width = slot->grid;
    return slot->patch_map;
}

int vit_block_tokens(Vit *model, int slot_index, int block, Act *out, ErrorMessage *err) {
    const VitConfig *c = &model->config;
    if (!model->frozen) return error_set(err, "vit: block tokens of a model that is not frozen");
    if (slot_index < 0 || slot_index >= model->slot_count || block < 0 || block >= c->depth)
        return error_set(err, "vit: no slot %d or block %d (%d blocks)", slot_index, block,
                         c->depth);
    if (block < c->depth - model->kept_blocks)
        return error_set(err, "vit: block %d's output is not kept (the last %d blocks' are: "
                              "vit_keep_block_outputs)", block, model->kept_blocks);
    VitSlot *slot = &model->slots[slot_index];
    const size_t rows = slot_rows(slot, last_batch(slot));
    if (block == c->depth - 1)
        model->backend->op.copy(model->backend, out, slot->norm_out,
                                act_bytes(model->backend, rows * c->embed_dim));
    else
        layernorm_forward(model->backend, &model->norm, rows, slot->blocks[block].out, out,
                          slot->norm_mean, slot->norm_inv_std);
    return 0;
}

int vit_backward_tokens(Vit *model, int slot_index, const Act *dtokens, ErrorMessage *err) {
    if (check_backward(model, slot_index, err)) return -1;
    backward_from_tokens(model, &model->slots[slot_index], dtokens);
    return 0;
}
