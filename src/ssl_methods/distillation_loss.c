// LightlyTrain's distillation losses and teacher queue (see
// distillation_loss.h), composed from backend ops: GEMMs for the
// similarities, softmax and log_softmax rows for the KL terms.
#include "ssl_methods/distillation_loss.h"

#include <math.h>
#include <stdlib.h>

// ---- the KL term over rows of logits, shared by the global and local losses -----------

// Buffers of (rows, dim): the two logit matrices the caller fills, the
// teacher's softmax and log_softmax, the student's log_softmax. After the
// forward the teacher logits hold log p - log q; after the backward the
// student logits hold the gradient of the loss with respect to them.
typedef struct KlRows {
    Backend *backend;
    int dim, rows;
    float scale;  // 1 / temperature
    float *teacher_logits, *student_logits, *teacher_prob, *teacher_log, *student_log;
    float *result;  // (1)
} KlRows;

static int kl_rows_create(KlRows *kl, Backend *backend, size_t max_rows, int dim,
                          float temperature, ErrorMessage *err) {
    *kl = (KlRows){.backend = backend, .dim = dim, .scale = 1.0f / temperature};
    float **buffers[] = {&kl->teacher_logits, &kl->student_logits, &kl->teacher_prob,
                         &kl->teacher_log, &kl->student_log};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) {
        *buffers[i] = backend->op.alloc(backend, max_rows * dim * sizeof(float));
        if (!*buffers[i]) return error_set(err, "out of memory for %zu x %d logits", max_rows, dim);
    }
    kl->result = backend->op.alloc(backend, sizeof(float));
    return kl->result ? 0 : error_set(err, "out of memory");
}

static void kl_rows_free(KlRows *kl) {
    float *buffers[] = {kl->teacher_logits, kl->student_logits, kl->teacher_prob,
                        kl->teacher_log, kl->student_log, kl->result};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++)
        if (buffers[i]) kl->backend->op.free(kl->backend, buffers[i]);
}

// The KL term of the logits the caller wrote (rows of them) into *value
// (backend memory).
static void kl_rows_forward(KlRows *kl, int rows, float *value) {
    Backend *backend = kl->backend;
    BackendOps *op = &backend->op;
    const size_t n = (size_t)rows * kl->dim;
    kl->rows = rows;
    op->softmax_forward(backend, rows, kl->dim, kl->teacher_logits, kl->scale, kl->teacher_prob);
    op->log_softmax_forward(backend, rows, kl->dim, kl->teacher_logits, kl->scale,
                            kl->teacher_log);
    op->log_softmax_forward(backend, rows, kl->dim, kl->student_logits, kl->scale,
                            kl->student_log);
    // sum p (log p - log q), the difference in the teacher logits' buffer
    op->copy(backend, kl->teacher_logits, kl->teacher_log, n * sizeof(float));
    op->axpby(backend, n, -1.0f, kl->student_log, 1.0f, kl->teacher_logits);
    op->dot(backend, n, kl->teacher_prob, kl->teacher_logits, kl->result);
    op->scalar_combine(backend, 1.0f, kl->result, 0.0f, NULL, (float)rows, value);
}

// student_logits = dloss * d kl / d student logits: d kl / d log q = -p / rows,
// then log_softmax's backward (scaled by 1 / temperature).
static void kl_rows_backward(KlRows *kl, float dloss) {
    Backend *backend = kl->backend;
    const size_t n = (size_t)kl->rows * kl->dim;
    float *dlog = kl->teacher_logits;
    backend->op.axpby(backend, n, -dloss / (float)kl->rows, kl->teacher_prob, 0.0f, dlog);
    backend->op.log_softmax_backward(backend, kl->rows, kl->dim, kl->student_log, dlog,
                                     kl->scale, kl->student_logits);
}

static int check_sizes(int a, int b, int c, float temperature, const char *what,
                       ErrorMessage *err) {
    if (a < 1 || b < 1 || c < 1 || !(temperature > 0.0f))
        return error_set(err, "%s: sizes %d, %d, %d must be positive and the temperature %g "
                              "above 0", what, a, b, c, (double)temperature);
    return 0;
}

// ---- global ----------------------------------------------------------------------------

struct DistillQueueLoss {
    Backend *backend;
    int max_batch, dim, queue_size;
    KlRows kl;
    const float *queue;  // of the last forward
};

DistillQueueLoss *distill_queue_loss_create(Backend *backend, int max_batch, int dim,
                                            int queue_size, float temperature,
                                            ErrorMessage *err) {
    if (check_sizes(max_batch, dim, queue_size, temperature, "distillation queue loss", err))
        return NULL;
    DistillQueueLoss *loss = calloc(1, sizeof *loss);
    if (!loss) {
        error_set(err, "out of memory");
        return NULL;
    }
    *loss = (DistillQueueLoss){.backend = backend, .max_batch = max_batch, .dim = dim,
                               .queue_size = queue_size};
    if (kl_rows_create(&loss->kl, backend, (size_t)max_batch, queue_size, temperature, err)) {
        distill_queue_loss_destroy(loss);
        return NULL;
    }
    return loss;
}

void distill_queue_loss_destroy(DistillQueueLoss *loss) {
    if (!loss) return;
    kl_rows_free(&loss->kl);
    free(loss);
}

void distill_queue_loss_forward(DistillQueueLoss *loss, int batch, const float *teacher,
                                const float *student, const float *queue, float *value) {
    Backend *backend = loss->backend;
    if (batch < 1 || batch > loss->max_batch) {
        backend->op.fill(backend, value, NAN, 1);
        return;
    }
    const int q = loss->queue_size, d = loss->dim;
    // (B, Q) = (B, D) (Q, D)^T, for the teacher and the student
    backend->op.gemm(backend, 0, 1, batch, q, d, 1.0f, teacher, d, queue, d, 0.0f,
                     loss->kl.teacher_logits, q);
    backend->op.gemm(backend, 0, 1, batch, q, d, 1.0f, student, d, queue, d, 0.0f,
                     loss->kl.student_logits, q);
    loss->queue = queue;
    kl_rows_forward(&loss->kl, batch, value);
}

void distill_queue_loss_backward(DistillQueueLoss *loss, float dloss, float *dstudent) {
    Backend *backend = loss->backend;
    const int q = loss->queue_size, d = loss->dim;
    kl_rows_backward(&loss->kl, dloss);
    // dstudent (B, D) = dlogits (B, Q) queue (Q, D)
    backend->op.gemm(backend, 0, 0, loss->kl.rows, d, q, 1.0f, loss->kl.student_logits, q,
                     loss->queue, d, 0.0f, dstudent, d);
}

// ---- local -----------------------------------------------------------------------------

struct DistillLocalLoss {
    Backend *backend;
    int max_batch, tokens, dim;
    KlRows kl;
    const float *student;  // of the last forward
};

DistillLocalLoss *distill_local_loss_create(Backend *backend, int max_batch, int tokens, int dim,
                                            float temperature, ErrorMessage *err) {
    if (check_sizes(max_batch, tokens, dim, temperature, "distillation local loss", err))
        return NULL;
    DistillLocalLoss *loss = calloc(1, sizeof *loss);
    if (!loss) {
        error_set(err, "out of memory");
        return NULL;
    }
    *loss = (DistillLocalLoss){.backend = backend, .max_batch = max_batch, .tokens = tokens,
                               .dim = dim};
    if (kl_rows_create(&loss->kl, backend, (size_t)max_batch * tokens, tokens, temperature,
                       err)) {
        distill_local_loss_destroy(loss);
        return NULL;
    }
    return loss;
}

void distill_local_loss_destroy(DistillLocalLoss *loss) {
    if (!loss) return;
    kl_rows_free(&loss->kl);
    free(loss);
}

void distill_local_loss_forward(DistillLocalLoss *loss, int batch, const float *teacher,
                                const float *student, float *value) {
    Backend *backend = loss->backend;
    if (batch < 1 || batch > loss->max_batch) {
        backend->op.fill(backend, value, NAN, 1);
        return;
    }
    const int p = loss->tokens, d = loss->dim;
    const size_t image = (size_t)p * d, square = (size_t)p * p;
    for (int b = 0; b < batch; b++) {  // (P, P) = (P, D) (P, D)^T per image
        backend->op.gemm(backend, 0, 1, p, p, d, 1.0f, teacher + b * image, d,
                         teacher + b * image, d, 0.0f, loss->kl.teacher_logits + b * square, p);
        backend->op.gemm(backend, 0, 1, p, p, d, 1.0f, student + b * image, d,
                         student + b * image, d, 0.0f, loss->kl.student_logits + b * square, p);
    }
    loss->student = student;
    kl_rows_forward(&loss->kl, batch * p, value);
}

void distill_local_loss_backward(DistillLocalLoss *loss, float dloss, float *dstudent) {
    Backend *backend = loss->backend;
    const int p = loss->tokens, d = loss->dim, batch = loss->kl.rows / p;
    const size_t image = (size_t)p * d, square = (size_t)p * p;
    kl_rows_backward(&loss->kl, dloss);
    // S_b = s_b s_b^T: ds_b = (G_b + G_b^T) s_b with G_b = d loss / d S_b
    for (int b = 0; b < batch; b++) {
        const float *g = loss->kl.student_logits + b * square, *s = loss->student + b * image;
        backend->op.gemm(backend, 0, 0, p, d, p, 1.0f, g, p, s, d, 0.0f, dstudent + b * image, d);
        backend->op.gemm(backend, 1, 0, p, d, p, 1.0f, g, p, s, d, 1.0f, dstudent + b * image, d);
    }
}

// ---- mean squared error -----------------------------------------------------------------

struct DistillMseLoss {
    Backend *backend;
    size_t max_elements, n;
    float *difference;  // (n) student - teacher
    float *result;
};

DistillMseLoss *distill_mse_loss_create(Backend *backend, size_t max_elements,
                                        ErrorMessage *err) {
    DistillMseLoss *loss = calloc(1, sizeof *loss);
    if (!loss) {
        error_set(err, "out of memory");
        return NULL;
    }
    *loss = (DistillMseLoss){.backend = backend, .max_elements = max_elements};
    loss->difference = backend->op.alloc(backend, (max_elements ? max_elements : 1) * sizeof(float));
    loss->result = backend->op.alloc(backend, sizeof(float));
    if (!max_elements || !loss->difference || !loss->result) {
        error_set(err, max_elements ? "out of memory for %zu values" : "no values (%zu)",
                  max_elements);
        distill_mse_loss_destroy(loss);
        return NULL;
    }
    return loss;
}

void distill_mse_loss_destroy(DistillMseLoss *loss) {
    if (!loss) return;
    if (loss->difference) loss->backend->op.free(loss->backend, loss->difference);
    if (loss->result) loss->backend->op.free(loss->backend, loss->result);
    free(loss);
}

void distill_mse_loss_forward(DistillMseLoss *loss, size_t n, const float *teacher,
                              const float *student, float *value) {
    Backend *backend = loss->backend;
    if (n < 1 || n > loss->max_elements) {
        backend->op.fill(backend, value, NAN, 1);
        return;
    }
    loss->n = n;
    backend->op.copy(backend, loss->difference, student, n * sizeof(float));
    backend->op.axpby(backend, n, -1.0f, teacher, 1.0f, loss->difference);
    backend->op.sum_squares(backend, n, loss->difference, loss->result);
    backend->op.scalar_combine(backend, 1.0f, loss->result, 0.0f, NULL, (float)n, value);
}

void distill_mse_loss_backward(DistillMseLoss *loss, float dloss, float *dstudent) {
    loss->backend->op.axpby(loss->backend, loss->n, 2.0f * dloss / (float)loss->n,
                            loss->difference, 0.0f, dstudent);
}

// ---- the queue ---------------------------------------------------------------------------

int distill_queue_create(DistillQueue *queue, Backend *backend, int size, int dim,
                         ErrorMessage *err) {
    *queue = (DistillQueue){.backend = backend, .size = size, .dim = dim};
    if (size < 1 || dim < 1) return error_set(err, "queue of %d x %d", size, dim);
    const size_t floats = (size_t)size * dim;
    queue->values = backend->op.alloc(backend, floats * sizeof(float));
    queue->previous = backend->op.alloc(backend, floats * sizeof(float));
    if (!queue->values || !queue->previous)
        return error_set(err, "out of memory for a queue of %d x %d", size, dim);
    backend->op.fill(backend, queue->values, 0.0f, floats);
    backend->op.fill(backend, queue->previous, 0.0f, floats);
    return 0;
}

void distill_queue_free(DistillQueue *queue) {
    if (queue->values) queue->backend->op.free(queue->backend, queue->values);
    if (queue->previous) queue->backend->op.free(queue->backend, queue->previous);
    queue->values = queue->previous = NULL;
}

void distill_queue_update(DistillQueue *queue, uint64_t batch_index, int batch,
                          const float *teacher) {
    Backend *backend = queue->backend;
    if (!queue->has_batch || queue->batch_index != batch_index) {
        float *latest = queue->values;  // becomes the queue this batch starts from
        queue->values = queue->previous;
        queue->previous = latest;
        queue->has_batch = 1;
        queue->batch_index = batch_index;
    }
    const size_t row = (size_t)queue->dim * sizeof(float);
    if (batch >= queue->size) {
        backend->op.copy(backend, queue->values, teacher, queue->size * row);
        return;
    }
    backend->op.copy(backend, queue->values + (size_t)batch * queue->dim, queue->previous,
                     (size_t)(queue->size - batch) * row);
    backend->op.copy(backend, queue->values, teacher, (size_t)batch * row);
}

int distill_queue_save(const DistillQueue *queue, CheckpointWriter *writer, ErrorMessage *err) {
    return checkpoint_add_floats(writer, "distillation.teacher_queue", queue->backend,
                                 queue->values, (size_t)queue->size * queue->dim, err);
}

int distill_queue_load(DistillQueue *queue, const Checkpoint *checkpoint, ErrorMessage *err) {
    if (checkpoint_get_floats(checkpoint, "distillation.teacher_queue", queue->backend,
                              queue->values, (size_t)queue->size * queue->dim, err))
        return -1;
    queue->has_batch = 0;
    return 0;
}

int distill_queue_size_for(size_t dataset_size) {
    static const struct { size_t below; int size; } buckets[] = {
        {50, 16},     {100, 32},    {250, 64},     {500, 128},    {1000, 256},
        {2000, 512},  {4000, 1024}, {10000, 2048}, {20000, 4096},
    };
    for (size_t i = 0; i < sizeof buckets / sizeof buckets[0]; i++)
        if (dataset_size < buckets[i].below) return buckets[i].size;
    return 8192;
}
