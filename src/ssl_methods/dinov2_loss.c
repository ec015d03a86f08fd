// DINOv2's loss (contract and formulas: dinov2_loss.h), composed from
// backend ops: the class-token part is DINO's loss (dino_loss.h) with
// LightlyTrain's normalisation; the iBOT part centres the masked patches'
// teacher outputs (softmax with its own center, or Sinkhorn-Knopp), weights
// them per patch (scale_rows) and scores the student with log_softmax and
// one dot; KoLeo normalises the class tokens and runs koleo_forward per
// global view. Sinkhorn-Knopp runs as backend.h's steps (column_max,
// sinkhorn_exp, column_sum, sinkhorn_normalize) with the per-column results
// all-reduced between them, so the ranks' samples are assigned together.
#include "ssl_methods/dinov2_loss.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "ssl_methods/dino_loss.h"

#define DINOV2_GLOBAL_VIEWS 2
#define DINOV2_SINKHORN_ITERATIONS 3  // DINOv2's n_iterations
#define DINOV2_KOLEO_EPS 1e-8f        // lightly's KoLeoLoss: normalize and distance eps

int dinov2_centering_parse(const char *name, Dinov2Centering *centering, ErrorMessage *err) {
    if (strcmp(name, "softmax") == 0) *centering = DINOV2_CENTER_SOFTMAX;
    else if (strcmp(name, "sinkhorn_knopp") == 0) *centering = DINOV2_CENTER_SINKHORN_KNOPP;
    else return error_set(err, "center_method '%s': expected softmax or sinkhorn_knopp", name);
    return 0;
}

struct Dinov2Loss {
    Backend *backend;
    Communicator *comm;
    Dinov2LossConfig config;
    DinoLoss *dino;
    // last forward
    int batch, patch_rows;
    int masked_total;  // of the last forward, over all ranks (the patch center's count)
    const float *inv_masked_total;  // (1) its inverse, in backend memory
    float dino_scale;        // LightlyTrain's normaliser over DinoLoss's pair count
    // Sinkhorn-Knopp only
    float *cls_targets;      // (2 B, K)
    float *column_stats;     // (K) column maxima, then column sums, over all ranks
    // masked patches
    float *patch_targets;    // (M, K) t_m; in backward the gradient of the log-probabilities
    float *patch_weighted;   // (M, K) w_m t_m
    float *patch_log_probs;  // (M, K)
    float *patch_center;     // (K)
    float *negated_center;   // (K)
    float *patch_mean;       // (K) the last forward's mean teacher patch output
    // KoLeo
    float *normalized;       // (2 B, D)
    float *dnormalized;      // (2 B, D) backward scratch
    float *norms;            // (2 B)
    int32_t *neighbors;      // (2 B), indices within the view
    float *distances, *log_distances;  // (2 B)
    float *scalars;          // (SCALAR_COUNT) below
};

// The loss's own scalars in backend memory: the reductions and the
// intermediate results of the terms' arithmetic.
enum { SCALAR_IBOT_DOT, SCALAR_KOLEO_SUM, SCALAR_DINO, SCALAR_DINO_GLOBAL, SCALAR_PRODUCT,
       SCALAR_COUNT };

static int config_check(const Dinov2LossConfig *c, ErrorMessage *err) {
    if (c->max_batch < 2 || c->local_views < 0 || c->max_masked < 0 || c->out_dim < 1 ||
        c->feature_dim < 1)
        return error_set(err, "dinov2 loss: batch %d (>= 2), %d local views, %d masked "
                              "patches, out_dim %d and feature dim %d", c->max_batch,
                         c->local_views, c->max_masked, c->out_dim, c->feature_dim);
    if (!(c->student_temp > 0.0f) || !(c->center_momentum >= 0.0f && c->center_momentum <= 1.0f))
        return error_set(err, "dinov2 loss: student_temp %g must be positive and "
                              "center_momentum %g within [0, 1]", (double)c->student_temp,
                         (double)c->center_momentum);
    return 0;
}

Dinov2Loss *dinov2_loss_create(Backend *backend, const Dinov2LossConfig *config,
                               Communicator *comm, ErrorMessage *err) {
    if (config_check(config, err)) return NULL;
    Dinov2Loss *loss = calloc(1, sizeof *loss);
    if (!loss) {
        error_set(err, "dinov2 loss: out of memory");
        return NULL;
    }
    loss->backend = backend;
    loss->comm = comm;
    loss->config = *config;
    const Dinov2LossConfig *c = config;
    const int views = DINOV2_GLOBAL_VIEWS + c->local_views;
    loss->dino = dino_loss_create(backend, c->max_batch, c->out_dim, DINOV2_GLOBAL_VIEWS, views,
                                  c->student_temp, c->center_momentum, comm, err);
    if (!loss->dino) {
        free(loss);
        return NULL;
    }
    BackendOps *op = &backend->op;
    const size_t k = (size_t)c->out_dim, rows = (size_t)DINOV2_GLOBAL_VIEWS * c->max_batch;
    const size_t masked = (size_t)(c->max_masked ? c->max_masked : 1);
    if (c->centering == DINOV2_CENTER_SINKHORN_KNOPP) {
        loss->cls_targets = op->alloc(backend, rows * k * sizeof(float));
        loss->column_stats = op->alloc(backend, k * sizeof(float));
    }
    loss->patch_targets = op->alloc(backend, masked * k * sizeof(float));
    loss->patch_weighted = op->alloc(backend, masked * k * sizeof(float));
    loss->patch_log_probs = op->alloc(backend, masked * k * sizeof(float));
    loss->patch_center = op->alloc(backend, k * sizeof(float));
    loss->negated_center = op->alloc(backend, k * sizeof(float));
    loss->patch_mean = op->alloc(backend, k * sizeof(float));
    loss->normalized = op->alloc(backend, rows * c->feature_dim * sizeof(float));
    loss->dnormalized = op->alloc(backend, rows * c->feature_dim * sizeof(float));
    loss->norms = op->alloc(backend, rows * sizeof(float));
    loss->neighbors = op->alloc(backend, rows * sizeof(int32_t));
    loss->distances = op->alloc(backend, rows * sizeof(float));
    loss->log_distances = op->alloc(backend, rows * sizeof(float));
    loss->scalars = op->alloc(backend, SCALAR_COUNT * sizeof(float));
    const int sinkhorn = c->centering == DINOV2_CENTER_SINKHORN_KNOPP;
    if ((sinkhorn && (!loss->cls_targets || !loss->column_stats)) ||
        !loss->patch_targets || !loss->patch_weighted || !loss->patch_log_probs ||
        !loss->patch_center || !loss->negated_center || !loss->patch_mean || !loss->normalized ||
        !loss->dnormalized || !loss->norms || !loss->neighbors || !loss->distances || !loss->log_distances ||
        !loss->scalars) {
        error_set(err, "dinov2 loss: out of memory for %zu masked patches x %zu outputs (%zu MB)",
                  masked, k, 3 * masked * k * sizeof(float) >> 20);
        dinov2_loss_destroy(loss);
        return NULL;
    }
    op->fill(backend, loss->patch_center, 0.0f, k);
    return loss;
}

void dinov2_loss_destroy(Dinov2Loss *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    if (loss->dino) dino_loss_destroy(loss->dino);
    void *buffers[] = {loss->cls_targets,     loss->column_stats,   loss->patch_targets,
                       loss->patch_weighted,  loss->patch_log_probs, loss->patch_center,
                       loss->negated_center,  loss->patch_mean,      loss->normalized,
                       loss->dnormalized,     loss->norms,           loss->neighbors,
                       loss->distances,       loss->log_distances,   loss->scalars};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss);
}

// DINOv2's Sinkhorn-Knopp targets q (rows, K) of this rank's teacher
// outputs x (rows, K), assigned together with the other ranks' rows
// (DINOv2's distributed sinkhorn_knopp_teacher): the column maxima and, in
// every iteration, the column sums are all-reduced, so every rank computes
// its rows of the one-process result on the concatenated rows (backend.h
// column_max). Rows whose `valid` is 0 (when valid) are padding: zeroed
// after the exponential, they add nothing to the sums and stay zero.
// Collective: every rank calls it, also with no rows.
static int sinkhorn_targets(Dinov2Loss *loss, int rows, const float *x, const float *valid,
                            float teacher_temp, float *q, ErrorMessage *err) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int k = loss->config.out_dim;
    float *column = loss->column_stats;
    op->column_max(backend, (size_t)rows, k, x, column);
    if (comm_all_reduce_queued(loss->comm, column, (size_t)k, COMM_MAX, err)) return -1;
    op->sinkhorn_exp(backend, rows, k, x, 1.0f / teacher_temp, column, q);
    if (valid) op->scale_rows(backend, (size_t)rows, k, q, valid, q);
    for (int it = 0; it < DINOV2_SINKHORN_ITERATIONS; it++) {
        op->column_sum(backend, (size_t)rows, k, q, column);
        if (comm_all_reduce_queued(loss->comm, column, (size_t)k, COMM_SUM, err)) return -1;
        op->sinkhorn_normalize(backend, rows, k, column, q);
    }
    return 0;
}

// The class-token part: DinoLoss over (2 global, 2 + L) views, rescaled to
// LightlyTrain's denominator 2 + max(2 L, 1) (DinoLoss divides by 2 + 2 L).
static int dino_part(Dinov2Loss *loss, const Dinov2LossInputs *in, float *terms,
                     ErrorMessage *err) {
    const Dinov2LossConfig *c = &loss->config;
    const int views = DINOV2_GLOBAL_VIEWS + c->local_views, batch = in->batch;
    const size_t view = (size_t)batch * c->out_dim;
    const float *teacher_views[DINOV2_GLOBAL_VIEWS], *student_views[64];
    for (int v = 0; v < views; v++) {
        if (v < DINOV2_GLOBAL_VIEWS) teacher_views[v] = in->teacher_cls + v * view;
        student_views[v] = in->student_cls + v * view;
    }
    const int pairs = 2 + 2 * c->local_views;
    const int terms_count = 2 + (2 * c->local_views > 1 ? 2 * c->local_views : 1);
    loss->dino_scale = (float)pairs / (float)terms_count;
    Backend *backend = loss->backend;
    float *value = loss->scalars + SCALAR_DINO, *global = loss->scalars + SCALAR_DINO_GLOBAL;
    if (c->centering == DINOV2_CENTER_SOFTMAX) {
        dino_loss_forward(loss->dino, batch, teacher_views, student_views, in->teacher_temp,
                          value);
    } else {
        if (sinkhorn_targets(loss, DINOV2_GLOBAL_VIEWS * batch, in->teacher_cls, NULL,
                             in->teacher_temp, loss->cls_targets, err))
            return -1;
        dino_loss_forward_assigned(loss->dino, batch, loss->cls_targets, student_views, value);
    }
    dino_loss_global_views_part(loss->dino, global);
    // global x scale and (value - global) x scale, one float operation per call
    float *dino_global = terms + DINOV2_TERM_DINO_GLOBAL;
    float *dino_local = terms + DINOV2_TERM_DINO_LOCAL;
    backend->op.scalar_combine(backend, loss->dino_scale, global, 0.0f, NULL, 1.0f, dino_global);
    backend->op.scalar_combine(backend, 1.0f, value, -1.0f, global, 1.0f, dino_local);
    backend->op.scalar_combine(backend, loss->dino_scale, dino_local, 0.0f, NULL, 1.0f,
                               dino_local);
    return 0;
}

// The patch rows: targets, weighted targets (padding's zero), student
// log-probabilities. With Sinkhorn-Knopp a rank without patch rows still
// takes part in the assignment (DINOv2 all-reduces the masked count; here
// it cancels: backend.h column_max).
static int ibot_part(Dinov2Loss *loss, const Dinov2LossInputs *in, float *terms,
                     ErrorMessage *err) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const Dinov2LossConfig *c = &loss->config;
    const int rows = in->patch_rows, k = c->out_dim;
    if (c->centering == DINOV2_CENTER_SINKHORN_KNOPP &&
        (rows > 0 || comm_world_size(loss->comm) > 1) &&
        sinkhorn_targets(loss, rows, in->teacher_patches, in->patch_valid, in->teacher_temp,
                         loss->patch_targets, err))
        return -1;
    if (rows == 0) {
        op->fill(backend, terms + DINOV2_TERM_IBOT, 0.0f, 1);
        op->fill(backend, loss->patch_mean, 0.0f, (size_t)k);  // adds nothing to the center
        return 0;
    }
    const size_t n = (size_t)rows * k;
    if (c->centering == DINOV2_CENTER_SOFTMAX) {
        op->axpby(backend, (size_t)k, -1.0f, loss->patch_center, 0.0f, loss->negated_center);
        // the masked rows as they are, padding zeroed: their sum is the masked patches'
        // (update_centers divides the sum over the ranks by their count)
        op->scale_rows(backend, (size_t)rows, k, in->teacher_patches, in->patch_valid,
                       loss->patch_weighted);
        op->column_sum(backend, (size_t)rows, k, loss->patch_weighted, loss->patch_mean);
        op->bias_add_f32(backend, (size_t)rows, k, loss->negated_center, loss->patch_weighted);
        op->softmax_forward(backend, rows, k, loss->patch_weighted, 1.0f / in->teacher_temp,
                            loss->patch_targets);
    }
    op->scale_rows(backend, (size_t)rows, k, loss->patch_targets, in->patch_weights,
                   loss->patch_weighted);
    op->log_softmax_forward(backend, rows, k, in->student_patches, 1.0f / c->student_temp,
                            loss->patch_log_probs);
    op->dot(backend, n, loss->patch_weighted, loss->patch_log_probs,
            loss->scalars + SCALAR_IBOT_DOT);
    const float crops = (float)(DINOV2_GLOBAL_VIEWS * in->batch);
    op->scalar_combine(backend, -1.0f, loss->scalars + SCALAR_IBOT_DOT, 0.0f, NULL, crops,
                       terms + DINOV2_TERM_IBOT);
    return 0;
}

static void koleo_part(Dinov2Loss *loss, const Dinov2LossInputs *in, float *terms) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = in->batch, dim = loss->config.feature_dim;
    op->l2_normalize_forward(backend, DINOV2_GLOBAL_VIEWS * batch, dim, in->student_features,
                             DINOV2_KOLEO_EPS, loss->normalized, loss->norms);
    for (int v = 0; v < DINOV2_GLOBAL_VIEWS; v++) {
        const size_t row = (size_t)v * batch;
        op->koleo_forward(backend, batch, dim, loss->normalized + row * dim, DINOV2_KOLEO_EPS,
                          loss->neighbors + row, loss->distances + row,
                          loss->log_distances + row);
    }
    op->sum(backend, (size_t)DINOV2_GLOBAL_VIEWS * batch, loss->log_distances,
            loss->scalars + SCALAR_KOLEO_SUM);
    op->scalar_combine(backend, -1.0f, loss->scalars + SCALAR_KOLEO_SUM, 0.0f, NULL,
                       (float)batch, terms + DINOV2_TERM_KOLEO);
}

// terms[TOTAL] = dino_weight (global + local) + ibot_weight ibot +
// koleo_weight koleo, one float operation per call (in that order).
static void total(Dinov2Loss *loss, float *terms) {
    Backend *backend = loss->backend;
    const Dinov2LossConfig *c = &loss->config;
    float *sum = terms + DINOV2_TERM_TOTAL, *product = loss->scalars + SCALAR_PRODUCT;
    void (*combine)(Backend *, float, const float *, float, const float *, float, float *) =
        backend->op.scalar_combine;
    combine(backend, 1.0f, terms + DINOV2_TERM_DINO_GLOBAL, 1.0f, terms + DINOV2_TERM_DINO_LOCAL,
            1.0f, sum);
    combine(backend, c->dino_weight, sum, 0.0f, NULL, 1.0f, sum);
    combine(backend, c->ibot_weight, terms + DINOV2_TERM_IBOT, 0.0f, NULL, 1.0f, product);
    combine(backend, 1.0f, sum, 1.0f, product, 1.0f, sum);
    combine(backend, c->koleo_weight, terms + DINOV2_TERM_KOLEO, 0.0f, NULL, 1.0f, product);
    combine(backend, 1.0f, sum, 1.0f, product, 1.0f, sum);
}

int dinov2_loss_forward(Dinov2Loss *loss, const Dinov2LossInputs *in, float *terms,
                        ErrorMessage *err) {
    const Dinov2LossConfig *c = &loss->config;
    if (in->batch < 1 || in->batch > c->max_batch || in->patch_rows < 0 ||
        in->patch_rows > c->max_masked || in->masked < 0 || in->masked > in->patch_rows ||
        in->masked_total < in->masked)
        return error_set(err, "dinov2 loss: batch %d (1..%d), %d masked patches in %d rows "
                              "(0..%d), %d over the ranks", in->batch, c->max_batch, in->masked,
                         in->patch_rows, c->max_masked, in->masked_total);
    if (!(in->teacher_temp > 0.0f))
        return error_set(err, "dinov2 loss: teacher temperature %g is not positive",
                         (double)in->teacher_temp);
    loss->batch = in->batch;
    loss->patch_rows = in->patch_rows;
    loss->masked_total = in->masked_total;
    loss->inv_masked_total = in->inv_masked_total;
    if (dino_part(loss, in, terms, err) || ibot_part(loss, in, terms, err)) return -1;
    koleo_part(loss, in, terms);
    total(loss, terms);
    return 0;
}

void dinov2_loss_backward(Dinov2Loss *loss, float *dstudent_cls, float *dstudent_patches,
                          float *dstudent_features) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const Dinov2LossConfig *c = &loss->config;
    const int batch = loss->batch, rows = loss->patch_rows, dim = c->feature_dim;
    const int views = DINOV2_GLOBAL_VIEWS + c->local_views;
    const size_t view = (size_t)batch * c->out_dim;
    float *dviews[64];
    for (int v = 0; v < views; v++) dviews[v] = dstudent_cls + v * view;
    dino_loss_backward(loss->dino, c->dino_weight * loss->dino_scale, dviews);

    if (rows > 0) {
        // d ibot / d log_probs = -ibot_weight w_m t_m / (2 B): zero rows for padding
        const float alpha = -c->ibot_weight / (float)(DINOV2_GLOBAL_VIEWS * batch);
        op->axpby(backend, (size_t)rows * c->out_dim, alpha, loss->patch_weighted, 0.0f,
                  loss->patch_targets);
        op->log_softmax_backward(backend, rows, c->out_dim, loss->patch_log_probs,
                                 loss->patch_targets, 1.0f / c->student_temp, dstudent_patches);
    }

    // koleo = -sum log_distance / B: each view's rows, then through the normalisation
    for (int v = 0; v < DINOV2_GLOBAL_VIEWS; v++) {
        const size_t row = (size_t)v * batch;
        op->koleo_backward(backend, batch, dim, loss->normalized + row * dim,
                           loss->neighbors + row, loss->distances + row, DINOV2_KOLEO_EPS,
                           -c->koleo_weight / (float)batch, loss->dnormalized + row * dim);
    }
    op->l2_normalize_backward(backend, DINOV2_GLOBAL_VIEWS * batch, dim, loss->normalized,
                              loss->norms, loss->dnormalized, DINOV2_KOLEO_EPS,
                              dstudent_features);
}

void dinov2_loss_update_centers(Dinov2Loss *loss) {
    if (loss->config.centering != DINOV2_CENTER_SOFTMAX) return;
    dino_loss_update_center(loss->dino);
    Backend *backend = loss->backend;
    const int k = loss->config.out_dim;
    comm_all_reduce_queued(loss->comm, loss->patch_mean, (size_t)k, COMM_SUM, NULL);
    // the mean by a scale in backend memory (it changes every step; a by-value one would
    // stay as a captured step had it); lightly's mean over no patches would be NaN: then
    // the scale is 0 and momentum 1 keeps the center as it was (masked_total is the same
    // on every rank)
    backend->op.scale_rows(backend, 1, k, loss->patch_mean, loss->inv_masked_total,
                           loss->patch_mean);
    backend->op.ema_update(backend, (size_t)k, loss->patch_center, loss->patch_mean,
                           loss->masked_total ? loss->config.center_momentum : 1.0f);
}

float *dinov2_loss_cls_center(Dinov2Loss *loss) { return dino_loss_center(loss->dino); }

float *dinov2_loss_patch_center(Dinov2Loss *loss) { return loss->patch_center; }
