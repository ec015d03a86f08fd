// The embedding head of LightlyTrain's embed_dim (see embed_head.h).
#include "ssl_methods/embed_head.h"

#include <stdio.h>
#include <string.h>

#include "ssl_methods/method.h"

int embed_head_check(int method_kind, int embed_dim, ErrorMessage *err) {
    if (embed_dim == 0 || (method_kind != METHOD_DISTILLATION && method_kind != METHOD_DINOV2 &&
                           method_kind != METHOD_DINOV31))
        return 0;
    return error_set(err, "--embed-dim: --method %s reads the backbone's features directly and "
                          "has no embedding head (as in LightlyTrain); it applies to simclr, "
                          "byol, dino, vicreg, barlowtwins, distillationv1 and distillationv2",
                     method_kind_name((MethodKind)method_kind));
}

static int embed_head_build(EmbedHead *embed, Backend *backend, int in, int embed_dim,
                            const char *name, int max_rows, uint64_t seed, ErrorMessage *err) {
    memset(embed, 0, sizeof *embed);
    embed->dim = in;
    if (embed_dim <= 0) return 0;
    const HeadSpec spec = head_spec_linear(in, embed_dim);
    if (head_create(&embed->head, backend, &spec, name, max_rows, seed, err)) return -1;
    embed->enabled = 1;
    embed->dim = embed_dim;
    embed->dfeatures = backend->op.alloc(backend, act_bytes(backend, (size_t)max_rows * in));
    if (!embed->dfeatures) {
        embed_head_free(embed);
        return error_set(err, "out of memory for the embedding head (%d rows)", max_rows);
    }
    return 0;
}

int method_embed_create(Method *method, int embed_dim, int max_rows, uint64_t seed,
                        ErrorMessage *err) {
    EmbedHead *embed = &method->embed;
    if (embed_head_build(embed, method->backend, method->backbone.feature_dim, embed_dim,
                         EMBED_HEAD_GROUP, max_rows, seed, err))
        return -1;
    if (!embed->enabled) return 0;
    return method_add_group(method, EMBED_HEAD_GROUP, &embed->head.params, NULL, NULL, 0, err);
}

int embed_head_create_copy(EmbedHead *copy, Backend *backend, const EmbedHead *source,
                           const char *name, int max_rows, uint64_t seed, ErrorMessage *err) {
    const int in = source->enabled ? source->head.spec.layers[0].in_features : source->dim;
    if (embed_head_build(copy, backend, in, source->enabled ? source->dim : 0, name, max_rows,
                         seed, err))
        return -1;
    if (copy->enabled) method_copy_parameters(backend, &copy->head.params, &source->head.params);
    return 0;
}

void embed_head_free(EmbedHead *embed) {
    if (!embed->enabled) return;
    Backend *backend = embed->head.backend;
    if (embed->dfeatures) backend->op.free(backend, embed->dfeatures);
    head_free(&embed->head);
    memset(embed, 0, sizeof *embed);
}

const Act *embed_head_forward(EmbedHead *embed, int rows, const Act *features, int training,
                              ErrorMessage *err) {
    if (!embed->enabled) return features;
    if (!head_forward(&embed->head, rows, features, training, err)) return NULL;
    return head_output_act(&embed->head);
}

Act *embed_head_backward(EmbedHead *embed, Act *dembedding, ErrorMessage *err) {
    if (!embed->enabled) return dembedding;
    if (head_backward_act(&embed->head, dembedding, embed->dfeatures, err)) return NULL;
    return embed->dfeatures;
}

int embed_head_prefix(const char *backbone_prefix, char *out, size_t size) {
    if (strcmp(backbone_prefix, "backbone.") == 0)
        return snprintf(out, size, "%s.", EMBED_HEAD_GROUP) < (int)size ? 0 : -1;
    if (strcmp(backbone_prefix, "teacher_backbone.") == 0)
        return snprintf(out, size, "%s", EMBED_HEAD_TEACHER_PREFIX) < (int)size ? 0 : -1;
    return -1;
}
