// LightlyTrain's embed_dim (train's --embed-dim): its EmbeddingModel puts a
// 1x1 Conv2d with bias, feature_dim -> embed_dim, after the backbone's pooled
// features, and the method's heads read embed_dim wide features. On pooled
// (batch, D) rows, or on every position of a (batch, h, w, D) map
// (distillation v2, LightlyTrain's pool=False), a 1x1 convolution is a
// Linear per row: one head block (heads.h head_spec_linear, PyTorch's
// default init, which is also Conv2d's for a 1x1 kernel). Its weight
// (embed_dim, D) is LightlyTrain's "embedding_model.embed_head.weight"
// (embed_dim, D, 1, 1) without the two unit axes.
//
// The student's embedding head is the group "embed_head" (checkpointed as
// "embed_head.layers.0.weight/bias"); an EMA teacher (BYOL, DINO) keeps a
// copy, "teacher_embed_head.", updated with the rest of it
// (method_teacher.h). The exported backbone never includes it (LightlyTrain
// exports the wrapped model); `embed` applies the one of the exported part
// (embed_head_prefix). The methods that read the backbone's features past
// an embedding model (distillation v3, DINOv2, DINOv3.1) take none:
// method_create refuses embed_dim for them (embed_head_check).
#ifndef LTC_SSL_METHODS_EMBED_HEAD_H
#define LTC_SSL_METHODS_EMBED_HEAD_H

#include "ssl_methods/heads.h"

typedef struct Method Method;

typedef struct EmbedHead {
    int enabled;      // 0: features pass through unchanged
    int dim;          // the width the method's heads read (embed_dim, or D when off)
    Head head;        // Linear(D, embed_dim) with bias (enabled only)
    Act *dfeatures;   // (max_rows, D) backward scratch (enabled only)
} EmbedHead;

#define EMBED_HEAD_GROUP "embed_head"
#define EMBED_HEAD_TEACHER_PREFIX "teacher_embed_head."

// 0 when the method kind takes an embedding head of embed_dim (0: none
// asked); -1 with the one-line refusal naming --embed-dim otherwise (see above).
int embed_head_check(int method_kind, int embed_dim, ErrorMessage *err);

// The student's embedding head of method (method->embed) for up to max_rows
// rows: with embed_dim > 0, created from seed and added as the group
// "embed_head"; with 0, off (dim = the backbone's feature_dim). The methods'
// create functions call it before sizing their heads by method->embed.dim.
int method_embed_create(Method *method, int embed_dim, int max_rows, uint64_t seed,
                        ErrorMessage *err);

// A copy of source (its spec and values) for up to max_rows rows named
// `name` (an EMA teacher's); off when source is.
int embed_head_create_copy(EmbedHead *copy, Backend *backend, const EmbedHead *source,
                           const char *name, int max_rows, uint64_t seed, ErrorMessage *err);
void embed_head_free(EmbedHead *embed);

// The embeddings (rows, dim) of features (rows, D): features themselves when
// off. NULL with a message on a bad row count.
const Act *embed_head_forward(EmbedHead *embed, int rows, const Act *features, int training,
                              ErrorMessage *err);
// Given d(loss)/d(embeddings) (rows, dim) of the last training forward: the
// head's gradients +=, and d(loss)/d(features) (rows, D), in the head's
// scratch (dembedding itself when off). NULL with a message.
Act *embed_head_backward(EmbedHead *embed, Act *dembedding, ErrorMessage *err);

// The checkpoint prefix of the embedding head that goes with a checkpoint's
// backbone prefix ("backbone." -> "embed_head.", "teacher_backbone." ->
// "teacher_embed_head."), into out; -1 for any other prefix.
int embed_head_prefix(const char *backbone_prefix, char *out, size_t size);

#endif
