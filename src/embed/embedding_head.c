// The embedding head embed applies (see embedding_head.h).
#include "embed/embedding_head.h"

#include <oneapi/dnnl/dnnl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ssl_methods/embed_head.h"
#include "train/checkpoint.h"

int embedding_head_read(const char *path, const char *backbone_prefix, int in, int out,
                        EmbeddingHead *head, ErrorMessage *err) {
    memset(head, 0, sizeof *head);
    char prefix[64], weight_name[96], bias_name[96];
    if (out <= 0 || embed_head_prefix(backbone_prefix, prefix, sizeof prefix) != 0) return 0;
    Checkpoint checkpoint;
    if (checkpoint_read(path, &checkpoint, err)) return -1;
    int status = 0;
    if (checkpoint_has_prefix(&checkpoint, prefix)) {
        snprintf(weight_name, sizeof weight_name, "%slayers.0.weight", prefix);
        snprintf(bias_name, sizeof bias_name, "%slayers.0.bias", prefix);
        *head = (EmbeddingHead){in, out, malloc((size_t)out * (size_t)in * sizeof(float)),
                                malloc((size_t)out * sizeof(float))};
        // The reads check each tensor's size against in and out.
        if (!head->weight || !head->bias)
            status = error_set(err, "out of memory for the embedding head");
        else if (checkpoint_get_host_floats(&checkpoint, weight_name, head->weight,
                                            (size_t)out * (size_t)in, err) ||
                 checkpoint_get_host_floats(&checkpoint, bias_name, head->bias, (size_t)out, err))
            status = error_prefix(err, "%s: the embedding head", path);
    }
    checkpoint_free(&checkpoint);
    if (status) embedding_head_free(head);
    return status;
}

void embedding_head_apply(const EmbeddingHead *head, const float *features, size_t rows,
                          float *embeddings) {
    // Each row starts as the bias; the product adds x W^T (beta 1).
    for (size_t r = 0; r < rows; r++)
        memcpy(embeddings + r * (size_t)head->out, head->bias, (size_t)head->out * sizeof(float));
    (void)dnnl_sgemm('N', 'T', (dnnl_dim_t)rows, head->out, head->in, 1.0f, features, head->in,
                     head->weight, head->in, 1.0f, embeddings, head->out);
}

void embedding_head_free(EmbeddingHead *head) {
    free(head->weight);
    free(head->bias);
    memset(head, 0, sizeof *head);
}
