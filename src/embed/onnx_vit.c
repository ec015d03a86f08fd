// The ViT graph (nn/vit.h: DINOv2 / timm ViTs and DINOv3's) in ONNX, what
// vit_forward computes in eval mode at one input size:
//
//   patch_embed.proj (Conv) -> (B, P, D) [+ positions, resampled to the
//   export's grid at export time] -> [class (+ its position), registers,
//   patches] -> blocks -> norm -> pooled (mean of the patch tokens or the
//   class token, as the model's config.pool says).
//
// A block: LayerNorm -> qkv -> (B, H, T, Dh) q, k, v [DINOv3: q and k of
// the patch tokens rotated with the eval RoPE tables] -> softmax(q k^T /
// sqrt(Dh)) v as MatMul / Softmax / MatMul (read by every runtime at
// every opset; ONNX's Attention operator exists only from opset 23) ->
// proj [* ls1] + x, then LayerNorm -> fc1 -> GELU (or SwiGLU) -> fc2
// [* ls2] + x. Everything that depends only on the size (positions, RoPE
// tables) is a constant: the graph takes exactly the exported size.
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "embed/onnx_families.h"
#include "nn/vit_pos_embed.h"
#include "nn/vit_rope.h"

int onnx_vit_check(const Backbone *backbone, int image_size, ErrorMessage *err) {
    const VitConfig *c = &backbone->model.vit.config;
    if (image_size < c->patch_size || image_size % c->patch_size != 0)
        return error_set(err, "image size %d: %s takes a multiple of its patch size %d", image_size,
                         c->name, c->patch_size);
    if (c->rope || image_size / c->patch_size == c->pos_grid) return 0;
    // The resampling of the position grid must exist for this size (DINOv2's
    // offset interpolation does not reach every size).
    const int grid = image_size / c->patch_size, positions = c->pos_grid * c->pos_grid;
    float *matrix = malloc((size_t)grid * grid * positions * sizeof *matrix);
    if (!matrix) return error_set(err, "out of memory for the position interpolation");
    const int status =
        vit_pos_grid_matrix(c->pos_interpolation, c->pos_grid, grid, grid, matrix, err);
    free(matrix);
    return status ? error_prefix(err, "image size %d", image_size) : 0;
}

// The patch positions (P, D) for a grid x grid input: pos_embed's own, or
// resampled as vit_forward does (the grid map times the native positions).
static const char *patch_positions(const OnnxBuilder *builder, const Vit *model, int grid) {
    const VitConfig *c = &model->config;
    const int dim = c->embed_dim, native = c->pos_grid * c->pos_grid, patches = grid * grid;
    float *pos_embed = onnx_download(builder, &builder->params->params[model->pos_index]);
    float *positions = malloc((size_t)patches * dim * sizeof *positions);
    float *matrix = grid != c->pos_grid ? malloc((size_t)patches * native * sizeof *matrix) : NULL;
    ErrorMessage err = {{0}};
    if (!pos_embed || !positions || (grid != c->pos_grid && !matrix)) {
        onnx_graph_fail(builder->graph, "out of memory for the ONNX positions");
    } else if (!matrix) {
        memcpy(positions, pos_embed + (c->class_pos ? dim : 0),
               (size_t)patches * dim * sizeof *positions);
    } else if (vit_pos_grid_matrix(c->pos_interpolation, c->pos_grid, grid, grid, matrix, &err)) {
        onnx_graph_fail(builder->graph, "%s", err.text);
    } else {
        const float *source = pos_embed + (c->class_pos ? dim : 0);
        for (int p = 0; p < patches; p++)
            for (int d = 0; d < dim; d++) {
                double sum = 0.0;
                for (int m = 0; m < native; m++)
                    sum += (double)matrix[(size_t)p * native + m] * source[(size_t)m * dim + d];
                positions[(size_t)p * dim + d] = (float)sum;
            }
    }
    free(pos_embed);
    free(matrix);
    const int64_t dims[2] = {patches, dim};
    return onnx_weight(builder->graph, "pos_embed.patches", 2, dims, positions);
}

// The tokens before the patches, (1, 1 + R, D): the class token (plus its
// position when pos_embed holds one) and the registers.
static const char *prefix_tokens(const OnnxBuilder *builder, const Vit *model) {
    const VitConfig *c = &model->config;
    const int dim = c->embed_dim, prefix = 1 + c->register_tokens;
    float *tokens = malloc((size_t)prefix * dim * sizeof *tokens);
    float *cls = onnx_download(builder, &builder->params->params[model->cls_index]);
    float *registers = c->register_tokens
                           ? onnx_download(builder, &builder->params->params[model->reg_index])
                           : NULL;
    float *pos_embed = c->class_pos && !c->rope
                           ? onnx_download(builder, &builder->params->params[model->pos_index])
                           : NULL;
    if (tokens && cls && (!c->register_tokens || registers) && (!c->class_pos || c->rope ||
                                                                 pos_embed)) {
        for (int d = 0; d < dim; d++) tokens[d] = cls[d] + (pos_embed ? pos_embed[d] : 0.0f);
        if (registers)
            memcpy(tokens + dim, registers, (size_t)c->register_tokens * dim * sizeof *tokens);
    } else {
        onnx_graph_fail(builder->graph, "out of memory for the ONNX class token");
    }
    free(cls);
    free(registers);
    free(pos_embed);
    const int64_t dims[3] = {1, prefix, dim};
    return onnx_weight(builder->graph, "cls_token+reg_token", 3, dims, tokens);
}

// [prefix tokens (batch copies), patch tokens (B, P, D)] along the tokens.
static const char *token_sequence(const OnnxBuilder *builder, const Vit *model,
                                  const char *input, const char *patches) {
    OnnxGraph *graph = builder->graph;
    const VitConfig *c = &model->config;
    const OnnxAttr first[2] = {onnx_attr_int("start", 0), onnx_attr_int("end", 1)};
    const char *batch = onnx_node(graph, "Shape", "tokens", &input, 1, first, 2);
    const int64_t rest[2] = {1 + c->register_tokens, c->embed_dim};
    const char *shape_parts[2] = {batch, onnx_ints(builder, "const.shape", 2, rest)};
    const OnnxAttr axis0 = onnx_attr_int("axis", 0);
    const char *shape = onnx_node(graph, "Concat", "tokens", shape_parts, 2, &axis0, 1);
    const char *prefix =
        onnx_binary(graph, "Expand", "tokens", prefix_tokens(builder, model), shape);
    const char *parts[2] = {prefix, patches};
    const OnnxAttr axis1 = onnx_attr_int("axis", 1);
    return onnx_node(graph, "Concat", "tokens", parts, 2, &axis1, 1);
}

// RoPE's tables over all tokens, (T, Dh) each, "cos" and "sin": the prefix
// tokens' rows 1 and 0 (no rotation), a patch's the eval tables of
// vit_rope.h with each of its Dh / 2 angles twice (rotate_half's pairs).
static void rope_tables(const OnnxBuilder *builder, const Vit *model, int grid,
                        const char **cos_name, const char **sin_name) {
    const VitConfig *c = &model->config;
    const int head_dim = c->embed_dim / c->heads, half = head_dim / 2;
    const int prefix = 1 + c->register_tokens, patches = grid * grid, tokens = prefix + patches;
    float *periods = onnx_download(builder, &builder->buffers->params[model->periods_index]);
    float *sin_half = malloc((size_t)patches * half * sizeof *sin_half);
    float *cos_half = malloc((size_t)patches * half * sizeof *cos_half);
    float *sin_full = calloc((size_t)tokens * head_dim, sizeof *sin_full);
    float *cos_full = malloc((size_t)tokens * head_dim * sizeof *cos_full);
    if (periods && sin_half && cos_half && sin_full && cos_full) {
        vit_rope_tables(periods, head_dim, grid, grid, 1.0, sin_half, cos_half);
        for (int t = 0; t < tokens; t++)
            for (int i = 0; i < head_dim; i++) {
                const size_t at = (size_t)t * head_dim + i;
                const size_t from = (size_t)(t - prefix) * half + i % half;
                cos_full[at] = t < prefix ? 1.0f : cos_half[from];
                sin_full[at] = t < prefix ? 0.0f : sin_half[from];
            }
    } else {
        onnx_graph_fail(builder->graph, "out of memory for the ONNX RoPE tables");
    }
    free(periods);
    free(sin_half);
    free(cos_half);
    const int64_t dims[2] = {tokens, head_dim};
    *cos_name = onnx_weight(builder->graph, "rope.cos", 2, dims, cos_full);
    *sin_name = onnx_weight(builder->graph, "rope.sin", 2, dims, sin_full);
}

// x (B, H, T, Dh) rotated: x cos + rotate_half(x) sin, rotate_half(x) =
// [-x2, x1] of its halves (backend.h's rope_forward).
static const char *rope_rotate(const OnnxBuilder *builder, const char *scope, int head_dim,
                               const char *x, const char *cos, const char *sin) {
    OnnxGraph *graph = builder->graph;
    const int half = head_dim / 2;
    const char *halves[2] = {
        onnx_unary(graph, "Neg", scope, onnx_slice(builder, scope, x, -1, half, head_dim)),
        onnx_slice(builder, scope, x, -1, 0, half)};
    const OnnxAttr last = onnx_attr_int("axis", -1);
    const char *rotated = onnx_node(graph, "Concat", scope, halves, 2, &last, 1);
    return onnx_binary(graph, "Add", scope, onnx_binary(graph, "Mul", scope, x, cos),
                       onnx_binary(graph, "Mul", scope, rotated, sin));
}

// x [* gamma] + residual: a branch's LayerScale (when the model has it) and sum.
static const char *residual(const OnnxBuilder *builder, const char *scope, int gamma_index,
                            const char *branch, const char *x) {
    if (gamma_index >= 0)
        branch = onnx_binary(builder->graph, "Mul", scope, branch,
                             onnx_parameter(builder, &builder->params->params[gamma_index]));
    return onnx_binary(builder->graph, "Add", scope, x, branch);
}

typedef struct RopeTables {
    const char *cos, *sin;  // NULL without RoPE
} RopeTables;

static const char *attention(const OnnxBuilder *builder, const Vit *model, const VitBlock *block,
                             const char *scope, const RopeTables *rope, const char *x) {
    OnnxGraph *graph = builder->graph;
    const VitConfig *c = &model->config;
    const int heads = c->heads, head_dim = c->embed_dim / heads;
    const char *qkv = onnx_linear(builder, &block->qkv, onnx_layernorm(builder, &block->norm1, x));
    const int64_t split[5] = {0, 0, 3, heads, head_dim}, order[5] = {2, 0, 3, 1, 4};
    qkv = onnx_transpose(builder, scope, onnx_reshape(builder, scope, qkv, 5, split), 5, order);
    const char *q = onnx_gather(builder, scope, qkv, 0, 0);  // (B, H, T, Dh)
    const char *k = onnx_gather(builder, scope, qkv, 0, 1);
    const char *v = onnx_gather(builder, scope, qkv, 0, 2);
    if (rope->cos) {
        q = rope_rotate(builder, scope, head_dim, q, rope->cos, rope->sin);
        k = rope_rotate(builder, scope, head_dim, k, rope->cos, rope->sin);
    }
    q = onnx_binary(graph, "Mul", scope, q,
                    onnx_scalar(graph, "const.attention_scale", (float)(1.0 / sqrt(head_dim))));
    const int64_t swap_last[4] = {0, 1, 3, 2};
    const char *scores =
        onnx_binary(graph, "MatMul", scope, q, onnx_transpose(builder, scope, k, 4, swap_last));
    const OnnxAttr last = onnx_attr_int("axis", -1);
    const char *weights = onnx_node(graph, "Softmax", scope, &scores, 1, &last, 1);
    const char *out = onnx_binary(graph, "MatMul", scope, weights, v);  // (B, H, T, Dh)
    const int64_t heads_last[4] = {0, 2, 1, 3}, merged[3] = {0, 0, c->embed_dim};
    out = onnx_reshape(builder, scope, onnx_transpose(builder, scope, out, 4, heads_last), 3,
                       merged);
    return onnx_linear(builder, &block->proj, out);
}

static const char *mlp(const OnnxBuilder *builder, const Vit *model, const VitBlock *block,
                       const char *scope, const char *x) {
    const VitConfig *c = &model->config;
    const char *hidden =
        onnx_linear(builder, &block->fc1, onnx_layernorm(builder, &block->norm2, x));
    hidden = c->swiglu ? onnx_swiglu(builder, scope, c->mlp_hidden, hidden)
                       : onnx_activation(builder, ONNX_ACT_GELU, scope, hidden);
    return onnx_linear(builder, &block->fc2, hidden);
}

int onnx_vit_graph(const OnnxBuilder *builder, const Backbone *backbone, int image_size,
                   const char *input, const char **output, ErrorMessage *err) {
    const Vit *model = &backbone->model.vit;
    const VitConfig *c = &model->config;
    if (onnx_vit_check(backbone, image_size, err)) return -1;
    const int grid = image_size / c->patch_size, prefix = 1 + c->register_tokens;
    const int tokens = prefix + grid * grid;
    const char *bias = onnx_parameter(builder, &builder->params->params[model->patch_bias_index]);
    const char *x = onnx_conv2d(builder, &model->patch_embed, bias, input);  // (B, D, g, g)
    const int64_t flat[3] = {0, c->embed_dim, -1}, channels_last[3] = {0, 2, 1};
    x = onnx_transpose(builder, "patch_embed", onnx_reshape(builder, "patch_embed", x, 3, flat), 3,
                       channels_last);  // (B, P, D)
    if (!c->rope)
        x = onnx_binary(builder->graph, "Add", "pos_embed", x,
                        patch_positions(builder, model, grid));
    x = token_sequence(builder, model, input, x);  // (B, T, D)
    RopeTables rope = {NULL, NULL};
    if (c->rope) rope_tables(builder, model, grid, &rope.cos, &rope.sin);
    for (int b = 0; b < c->depth; b++) {
        const VitBlock *block = &model->blocks[b];
        char scope[48];
        snprintf(scope, sizeof scope, "blocks.%d.attn", b);
        x = residual(builder, scope, block->ls1_index,
                     attention(builder, model, block, scope, &rope, x), x);
        snprintf(scope, sizeof scope, "blocks.%d.mlp", b);
        x = residual(builder, scope, block->ls2_index, mlp(builder, model, block, scope, x), x);
    }
    x = onnx_layernorm(builder, &model->norm, x);
    if (c->pool == VIT_POOL_CLS) {
        *output = onnx_gather(builder, "pool", x, 1, 0);
        return 0;
    }
    const int64_t token_axis = 1;
    *output = onnx_reduce_mean(builder, "pool", onnx_slice(builder, "pool", x, 1, prefix, tokens),
                               1, &token_axis);
    return 0;
}
