// Backbone + projection head + a loss of the two views' projections: the
// step of SimCLR, VICReg and Barlow Twins (see method_pair.h).
#include "ssl_methods/method_pair.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

typedef struct PairState {
    Head head;
    PairLoss loss;
    float *dprojection;  // (2 batch, out)
    Act *dembedding;     // (2 batch, embedding width)
} PairState;

static int pair_step(Method *method, long step, int batch, ErrorMessage *err) {
    PairState *state = method->state;
    const int rows = 2 * batch;
    const int out = head_spec_output_dim(&state->head.spec);
    if (backbone_forward(&method->backbone, 0, rows, method->global_input, 1, err)) return -1;
    const Act *embedding =
        embed_head_forward(&method->embed, rows, backbone_features(&method->backbone, 0), 1, err);
    const float *projection = embedding ? head_forward(&state->head, rows, embedding, 1, err)
                                        : NULL;
    if (!projection) return -1;
    state->loss.forward(state->loss.loss, batch, projection, projection + (size_t)batch * out,
                        method_loss(method));
    state->loss.backward(state->loss.loss, 1.0f, state->dprojection,
                         state->dprojection + (size_t)batch * out);
    method_scale_loss_gradient(method, (size_t)rows * out, state->dprojection);
    if (head_backward(&state->head, state->dprojection, state->dembedding, err)) return -1;
    const Act *dfeatures = embed_head_backward(&method->embed, state->dembedding, err);
    return dfeatures ? backbone_backward(&method->backbone, 0, dfeatures, err) : -1;
}

static void pair_destroy(Method *method) {
    PairState *state = method->state;
    if (!state) return;
    Backend *backend = method->backend;
    if (state->loss.loss) state->loss.destroy(state->loss.loss);
    head_free(&state->head);
    if (state->dprojection) backend->op.free(backend, state->dprojection);
    if (state->dembedding) backend->op.free(backend, state->dembedding);
    free(state);
    method->state = NULL;
}

static const MethodOps pair_ops = {
    .step = pair_step,
    .destroy = pair_destroy,
};

int pair_method_create(Method *method, const MethodSetup *setup, const HeadSpec *head,
                       PairLoss loss, ErrorMessage *err) {
    PairState *state = calloc(1, sizeof *state);
    if (!state) {
        loss.destroy(loss.loss);
        return error_set(err, "out of memory");
    }
    state->loss = loss;
    method->state = state;
    method->ops = &pair_ops;
    if (method->global_views != 2 || method->local_views != 0)
        return error_set(err, "needs exactly 2 views of one size, got %d + %d",
                         method->global_views, method->local_views);
    const int rows = 2 * setup->batch;
    if (head_create(&state->head, method->backend, head, "projection_head", rows, setup->seed,
                    err))
        return -1;
    Backend *backend = method->backend;
    const int out = head_spec_output_dim(head);
    state->dprojection = backend->op.alloc(backend, (size_t)rows * out * sizeof(float));
    state->dembedding =
        backend->op.alloc(backend, act_bytes(backend, (size_t)rows * method->embed.dim));
    if (!state->dprojection || !state->dembedding) return error_set(err, "out of memory");
    if (head_attach_batchnorm_sync(&state->head, method->batchnorm_sync, err)) return -1;
    return method_add_group(method, "projection_head", &state->head.params, &state->head.buffers,
                            &state->head.num_batches_tracked, 0, err);
}
