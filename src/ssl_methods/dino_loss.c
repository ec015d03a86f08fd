// DINO loss composed from backend ops: bias_add (centering), softmax /
// log_softmax with a temperature scale, one dot per student view against the
// summed teacher targets, log_softmax_backward for the gradient, column_sum
// and ema_update for the center. Contract and formula: dino_loss.h.
//
// The sum over pairs (g, v != g) is regrouped per student view: view v is
// scored against target_v = sum over global views g != v of t_g (all of them
// for local views), so the loss is -sum_v <target_v, s_v> / (pairs N) and
// d loss / d s_v = -target_v / (pairs N).
#include "ssl_methods/dino_loss.h"

#include <math.h>
#include <stdlib.h>

struct DinoLoss {
    Backend *backend;
    Communicator *comm;     // NULL: one process
    int max_batch, dim, global_views, total_views;
    float student_temp, center_momentum;
    int batch;              // teacher outputs of the last forward kept for the center (0: none)
    int scored_batch;       // batch of the last forward (what backward differentiates)
    float *teacher;         // (G, N, K) copy of the last forward's teacher outputs
    float *scratch;         // (G, N, K) centered teacher logits; (N, K) d loss / d s_v in backward
    float *targets;         // (G, N, K) t_g, then target_g = teacher_sum - t_g
    float *teacher_sum;     // (N, K) sum over global views of t_g (the local views' target)
    float *log_probs;       // (V, N, K) s_v
    float *center;          // (K)
    float *negated_center;  // (K) -center, the bias that centers the teacher logits
    float *batch_mean;      // (K) mean teacher output of the last forward
    float *dots;            // (V) <target_v, s_v>
    float *loss_sum;        // (1) sum of dots
};

DinoLoss *dino_loss_create(Backend *backend, int max_batch, int out_dim, int global_views,
                           int total_views, float student_temp, float center_momentum,
                           Communicator *comm, ErrorMessage *err) {
    if (max_batch < 1 || out_dim < 1 || global_views < 1 || total_views < 1) {
        error_set(err, "dino_loss: batch %d, out_dim %d, global views %d and total views %d "
                  "must be positive", max_batch, out_dim, global_views, total_views);
        return NULL;
    }
    if (global_views > total_views || total_views < 2) {
        error_set(err, "dino_loss: %d global views of %d total views: need global <= total "
                  "and at least 2 views (one cross-view pair)", global_views, total_views);
        return NULL;
    }
    if (!(student_temp > 0.0f) || !(center_momentum >= 0.0f && center_momentum <= 1.0f)) {
        error_set(err, "dino_loss: student temperature %g must be positive and center "
                  "momentum %g within [0, 1]", (double)student_temp, (double)center_momentum);
        return NULL;
    }
    DinoLoss *loss = calloc(1, sizeof(*loss));
    if (!loss) {
        error_set(err, "dino_loss: out of host memory");
        return NULL;
    }
    loss->backend = backend;
    loss->comm = comm;
    loss->max_batch = max_batch;
    loss->dim = out_dim;
    loss->global_views = global_views;
    loss->total_views = total_views;
    loss->student_temp = student_temp;
    loss->center_momentum = center_momentum;
    const size_t view = (size_t)max_batch * out_dim;
    const size_t bytes = sizeof(float);
    BackendOps *op = &backend->op;
    loss->teacher = op->alloc(backend, global_views * view * bytes);
    loss->scratch = op->alloc(backend, global_views * view * bytes);
    loss->targets = op->alloc(backend, global_views * view * bytes);
    loss->teacher_sum = op->alloc(backend, view * bytes);
    loss->log_probs = op->alloc(backend, total_views * view * bytes);
    loss->center = op->alloc(backend, out_dim * bytes);
    loss->negated_center = op->alloc(backend, out_dim * bytes);
    loss->batch_mean = op->alloc(backend, out_dim * bytes);
    loss->dots = op->alloc(backend, total_views * bytes);
    loss->loss_sum = op->alloc(backend, bytes);
    if (!loss->teacher || !loss->scratch || !loss->targets || !loss->teacher_sum ||
        !loss->log_probs || !loss->center || !loss->negated_center || !loss->batch_mean ||
        !loss->dots || !loss->loss_sum) {
        dino_loss_destroy(loss);
        error_set(err, "dino_loss: out of memory for batch %d, out_dim %d, %d views (%zu MB)",
                  max_batch, out_dim, total_views,
                  (3 * global_views + 1 + total_views) * view * bytes >> 20);
        return NULL;
    }
    op->fill(backend, loss->center, 0.0f, out_dim);
    return loss;
}

void dino_loss_destroy(DinoLoss *loss) {
    if (!loss) return;
    Backend *backend = loss->backend;
    float *buffers[] = {loss->teacher,        loss->scratch,    loss->targets,
                        loss->teacher_sum,    loss->log_probs,  loss->center,
                        loss->negated_center, loss->batch_mean, loss->dots,
                        loss->loss_sum};
    for (size_t i = 0; i < sizeof(buffers) / sizeof(buffers[0]); i++)
        if (buffers[i]) backend->op.free(backend, buffers[i]);
    free(loss);
}

static int pair_count(const DinoLoss *loss) {
    return loss->global_views * loss->total_views - loss->global_views;
}

// From loss->targets = t_g (G, N, K): target_g = sum of the other global
// views' t, the local views' target the sum of all; scores every student
// view against its target into *value (backend memory).
static void score_students(DinoLoss *loss, int batch, const float *const *student_out,
                           float *value) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int dim = loss->dim, global_views = loss->global_views;
    const size_t view = (size_t)batch * dim;
    loss->batch = loss->scored_batch = batch;
    // teacher_sum = sum_g t_g; target_g = teacher_sum - t_g (in place)
    op->copy(backend, loss->teacher_sum, loss->targets, view * sizeof(float));
    for (int g = 1; g < global_views; g++)
        op->add(backend, view, loss->teacher_sum, loss->targets + g * view, loss->teacher_sum);
    for (int g = 0; g < global_views; g++)
        op->axpby(backend, view, 1.0f, loss->teacher_sum, -1.0f, loss->targets + g * view);

    for (int v = 0; v < loss->total_views; v++) {
        float *log_probs = loss->log_probs + v * view;
        op->log_softmax_forward(backend, batch, dim, student_out[v], 1.0f / loss->student_temp,
                                log_probs);
        const float *target = v < global_views ? loss->targets + v * view : loss->teacher_sum;
        op->dot(backend, view, target, log_probs, loss->dots + v);
    }
    op->sum(backend, loss->total_views, loss->dots, loss->loss_sum);
    const float scale = 1.0f / ((float)pair_count(loss) * (float)batch);
    op->scalar_combine(backend, -scale, loss->loss_sum, 0.0f, NULL, 1.0f, value);
}

void dino_loss_forward(DinoLoss *loss, int batch, const float *const *teacher_out,
                       const float *const *student_out, float teacher_temp, float *value) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    if (batch < 1 || batch > loss->max_batch || !(teacher_temp > 0.0f)) {
        op->fill(backend, value, NAN, 1);
        return;
    }
    const int dim = loss->dim, global_views = loss->global_views;
    const size_t view = (size_t)batch * dim;
    const size_t teacher_rows = (size_t)global_views * batch;

    // t_g = softmax((teacher_out[g] - center) / teacher_temp), all global views at once
    for (int g = 0; g < global_views; g++)
        op->copy(backend, loss->teacher + g * view, teacher_out[g], view * sizeof(float));
    op->axpby(backend, dim, -1.0f, loss->center, 0.0f, loss->negated_center);
    op->copy(backend, loss->scratch, loss->teacher, global_views * view * sizeof(float));
    op->bias_add_f32(backend, teacher_rows, dim, loss->negated_center, loss->scratch);
    op->softmax_forward(backend, (int)teacher_rows, dim, loss->scratch, 1.0f / teacher_temp,
                        loss->targets);
    score_students(loss, batch, student_out, value);
}

void dino_loss_forward_assigned(DinoLoss *loss, int batch, const float *teacher_probs,
                                const float *const *student_out, float *value) {
    Backend *backend = loss->backend;
    if (batch < 1 || batch > loss->max_batch) {
        backend->op.fill(backend, value, NAN, 1);
        return;
    }
    const size_t rows = (size_t)loss->global_views * batch;
    backend->op.copy(backend, loss->targets, teacher_probs, rows * loss->dim * sizeof(float));
    score_students(loss, batch, student_out, value);
    loss->batch = 0;  // no teacher outputs kept: nothing for the center update
}

// -(dots[0] + dots[1]) / (pairs x batch): scalar_combine adds and divides
// in double, as a double accumulation of the two would.
void dino_loss_global_views_part(DinoLoss *loss, float *value) {
    Backend *backend = loss->backend;
    const float divisor = (float)pair_count(loss) * (float)loss->scored_batch;  // exact
    if (loss->global_views > 2) {
        backend->op.fill(backend, value, NAN, 1);
        return;
    }
    const float *second = loss->global_views == 2 ? loss->dots + 1 : NULL;
    backend->op.scalar_combine(backend, -1.0f, loss->dots, -1.0f, second, divisor, value);
}

void dino_loss_backward(DinoLoss *loss, float dloss, float *const *dstudent) {
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const int batch = loss->scored_batch, dim = loss->dim;
    const size_t view = (size_t)batch * dim;
    const float alpha = -dloss / ((float)pair_count(loss) * (float)batch);
    float *dlog_probs = loss->scratch;  // (N, K), reused per view
    for (int v = 0; v < loss->total_views; v++) {
        const float *target =
            v < loss->global_views ? loss->targets + v * view : loss->teacher_sum;
        op->axpby(backend, view, alpha, target, 0.0f, dlog_probs);
        op->log_softmax_backward(backend, batch, dim, loss->log_probs + v * view, dlog_probs,
                                 1.0f / loss->student_temp, dstudent[v]);
    }
}

void dino_loss_update_center(DinoLoss *loss) {
    if (loss->batch == 0) return;
    Backend *backend = loss->backend;
    BackendOps *op = &backend->op;
    const size_t teacher_rows = (size_t)loss->global_views * loss->batch;
    op->column_sum(backend, teacher_rows, loss->dim, loss->teacher, loss->batch_mean);
    op->axpby(backend, loss->dim, 1.0f / (float)teacher_rows, loss->batch_mean, 0.0f,
              loss->batch_mean);
    comm_all_reduce_queued(loss->comm, loss->batch_mean, (size_t)loss->dim, COMM_MEAN, NULL);
    op->ema_update(backend, loss->dim, loss->center, loss->batch_mean, loss->center_momentum);
}

float *dino_loss_center(DinoLoss *loss) { return loss->center; }
