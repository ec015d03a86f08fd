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
    Act *dfeatures;      // (2 batch, D)
} PairState;

static int pair_step(Method *method, long step, int batch, ErrorMessage *err) {
    PairState *state = method->state;
    const int rows = 2 * batch;
    const int out = head_spec_output_dim(&state->head.spec);
    if (backbone_forward(&method->backbone, 0, rows, method->global_input, 1, err)) return -1;
    const float *projection =
        head_forward(&state->head, rows, backbone_features(&method->backbone, 0), 1, err);
    if (!projection) return -1;
    state->loss.forward(state->loss.loss, batch, projection, projection + (size_t)batch * out,
                        method_loss(method));
    state->loss.backward(state->loss.loss, 1.0f, state->dprojection,
                         state->dprojection + (size_t)batch * out);
    method_scale_loss_gradient(method, (size_t)rows * out, state->dprojection);
    if (head_backward(&state->head, state->dprojection, state->dfeatures, err)) return -1;
    return backbone_backward(&method->backbone, 0, state->dfeatures, err);
}

static void pair_destroy(Method *method) {
    PairState *state = method->state;
    if (!state) return;
    Backend *backend = method->backend;
    if (state->loss.loss) state->loss.destroy(state->loss.loss);
    head_free(&state->head);
    if (state->dprojection) backend->op.free(backend, state->dprojection);
    if (state->dfeatures) backend->op.free(backend, state->dfeatures);
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
    state->dfeatures =
        backend->op.alloc(backend, act_bytes(backend, (size_t)rows * method->backbone.feature_dim));
    if (!state->dprojection || !state->dfeatures) return error_set(err, "out of memory");
    if (head_attach_batchnorm_sync(&state->head, method->batchnorm_sync, err)) return -1;
    return method_add_group(method, "projection_head", &state->head.params, &state->head.buffers,
                            &state->head.num_batches_tracked, 0, err);
}
