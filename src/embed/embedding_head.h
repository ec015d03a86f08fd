// The embedding head of a checkpoint trained with --embed-dim (LightlyTrain's
// embed_dim; ssl_methods/embed_head.h), as embed applies it: the pooled
// features (rows, D) of the loaded part through its Linear, out = x W^T + b,
// (rows, embed_dim). LightlyTrain's embed runs its whole embedding model,
// embedding head included; the exported backbone has none.
#ifndef LTC_EMBED_EMBEDDING_HEAD_H
#define LTC_EMBED_EMBEDDING_HEAD_H

#include <stddef.h>

#include "util/error.h"

typedef struct EmbeddingHead {
    int in, out;    // D and embed_dim; out 0: no head
    float *weight;  // (out, in) host memory
    float *bias;    // (out)
} EmbeddingHead;

// The head that goes with the part loaded from the checkpoint at path
// (backbone_prefix: ModelSourceInfo.prefix, "backbone." or
// "teacher_backbone."), in -> out (features wide, ModelSourceInfo.embed_dim);
// *head has out 0 when the part has none. Errors name the path and the tensor
// (also one of another size).
int embedding_head_read(const char *path, const char *backbone_prefix, int in, int out,
                        EmbeddingHead *head, ErrorMessage *err);
// embeddings (rows, head->out) = features (rows, head->in) through the head.
void embedding_head_apply(const EmbeddingHead *head, const float *features, size_t rows,
                          float *embeddings);
void embedding_head_free(EmbeddingHead *head);

#endif
