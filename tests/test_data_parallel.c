// Multi-rank pieces of data-parallel training against one rank with the
// whole batch, with W = 2 and 3 threads as ranks (tests/thread_comm.h) on
// the ref and cpu backends:
// - synchronised BatchNorm (plain, with residual + ReLU, and with the SiLU
//   of YOLO's units, fused where one rank runs it): outputs, saved
//   statistics, running statistics and dx on each rank equal the whole
//   batch's rows; the ranks' dgamma / dbeta add up to the whole batch's;
// - SimCLR's NT-Xent with gathered negatives: the mean of the ranks' losses
//   is the whole batch's loss, each rank's gradient is W times its rows of
//   the whole batch's gradient (the gradient of the mean loss, before the
//   ranks' gradients are averaged);
// - DINO's loss: the same for loss and gradient, and the centre after the
//   update is the whole batch's on every rank;
// - gradient buckets: they cover every gradient once, last parameters
//   first, within the size limits; the all-reduce leaves every rank with
//   the ranks' mean and leaves frozen groups alone.
// Tolerances: everything is fp32 with double accumulation in the
// reductions; the ranks only split sums that one rank adds in one go, so
// differences are rounding of O(1) values: |a - b| <= 1e-5 + 1e-4 |b|.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "fixture_groups.h"
#include "gradcheck.h"
#include "nn/batchnorm_sync.h"
#include "ssl_methods/dino_loss.h"
#include "ssl_methods/nt_xent.h"
#include "thread_comm.h"
#include "train/gradient_sync.h"

#define ATOL 1e-5
#define RTOL 1e-4

static const char *const backend_names[] = {"ref", "cpu"};

static void assert_close(const float *got, const float *expected, size_t n, double scale,
                         const char *what) {
    for (size_t i = 0; i < n; i++) {
        const double want = scale * expected[i];
        if (fabs(got[i] - want) > ATOL + RTOL * fabs(want))
            fail_msg("%s[%zu] = %.9g, expected %.9g", what, i, got[i], want);
    }
}

static float *random_floats(size_t n, float low, float high, uint64_t seed) {
    float *x = malloc(n * sizeof *x);
    assert_non_null(x);
    gradcheck_fill_uniform(x, n, low, high, seed);
    return x;
}

static Backend *make_backend(const char *name) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(name, 1, &err);
    if (!backend) fail_msg("backend %s: %s", name, err.text);
    return backend;
}

// ---- synchronised BatchNorm --------------------------------------------------------

enum { BN_C = 5, BN_ROWS_PER_RANK = 12 };

typedef struct BnCase {
    const char *backend_name;
    int kind;  // 0: batchnorm_forward; 1: batchnorm_relu_forward with a residual;
               // 2: batchnorm_silu_forward
    int world;
    const float *x, *residual, *dy;  // (world * rows, C) whole batch
    // outputs of one rank (or of the whole batch for the reference)
    float y[BN_C * BN_ROWS_PER_RANK * 3], dx[BN_C * BN_ROWS_PER_RANK * 3];
    float dresidual[BN_C * BN_ROWS_PER_RANK * 3];
    float mean[BN_C], inv_std[BN_C], running_mean[BN_C], running_var[BN_C];
    float dgamma[BN_C], dbeta[BN_C];
} BnCase;

// Forward and backward of one BatchNorm over `rows` rows starting at row
// `first` of the case's inputs, synchronised over comm when it is not NULL.
static void run_batchnorm(BnCase *out, Communicator *comm, size_t first, size_t rows) {
    Backend *backend = make_backend(out->backend_name);
    BackendOps *op = &backend->op;
    const size_t n = rows * BN_C;
    float *memory = op->alloc(backend, (6 * n + 10 * BN_C) * sizeof(float));
    float *x = memory, *residual = x + n, *dy = residual + n, *y = dy + n, *dx = y + n;
    float *dresidual = dx + n, *params = dresidual + n;
    memcpy(x, out->x + first * BN_C, n * sizeof *x);
    memcpy(residual, out->residual + first * BN_C, n * sizeof *x);
    memcpy(dy, out->dy + first * BN_C, n * sizeof *x);
    BatchNorm bn = {.channels = BN_C, .momentum = 0.1f, .eps = 1e-5f};
    bn.weight = params, bn.bias = params + BN_C, bn.weight_grad = params + 2 * BN_C;
    bn.bias_grad = params + 3 * BN_C, bn.running_mean = params + 4 * BN_C;
    bn.running_var = params + 5 * BN_C;
    float *mean = params + 6 * BN_C, *inv_std = params + 7 * BN_C;
    for (int c = 0; c < BN_C; c++) {
        bn.weight[c] = 0.5f + 0.25f * c, bn.bias[c] = 0.1f * c - 0.2f;
        bn.weight_grad[c] = bn.bias_grad[c] = bn.running_mean[c] = 0;
        bn.running_var[c] = 1;
    }
    BatchNormSync *sync = NULL;
    ErrorMessage err = {{0}};
    if (comm) {
        sync = batchnorm_sync_create(backend, comm, &err);
        assert_non_null(sync);
        assert_int_equal(batchnorm_sync_attach(sync, &bn, &err), 0);
    }
    if (out->kind == 2) {  // dresidual: the backward's scratch
        batchnorm_silu_forward(backend, &bn, 1, rows, (const Act *)x, (Act *)y, mean, inv_std);
        batchnorm_silu_backward(backend, &bn, rows, (const Act *)x, (const Act *)dy, mean,
                                inv_std, (Act *)dresidual, (Act *)dx);
    } else if (out->kind == 1) {
        batchnorm_relu_forward(backend, &bn, 1, rows, (const Act *)x, (const Act *)residual,
                               (Act *)y, mean, inv_std);
        batchnorm_relu_backward(backend, &bn, rows, (const Act *)x, (const Act *)y, (const Act *)dy,
                                mean, inv_std, (Act *)dx, (Act *)dresidual);
    } else {
        batchnorm_forward(backend, &bn, 1, rows, (const Act *)x, (Act *)y, mean, inv_std);
        batchnorm_backward(backend, &bn, rows, (const Act *)x, (const Act *)dy, mean, inv_std,
                           (Act *)dx);
    }
    memcpy(out->y, y, n * sizeof *y);
    memcpy(out->dx, dx, n * sizeof *y);
    memcpy(out->dresidual, dresidual, n * sizeof *y);
    memcpy(out->mean, mean, sizeof out->mean);
    memcpy(out->inv_std, inv_std, sizeof out->inv_std);
    memcpy(out->running_mean, bn.running_mean, sizeof out->running_mean);
    memcpy(out->running_var, bn.running_var, sizeof out->running_var);
    memcpy(out->dgamma, bn.weight_grad, sizeof out->dgamma);
    memcpy(out->dbeta, bn.bias_grad, sizeof out->dbeta);
    batchnorm_sync_free(sync);
    op->free(backend, memory);
    backend_destroy(backend);
}

static void batchnorm_rank(Communicator *comm, void *context) {
    run_batchnorm(context, comm, (size_t)comm->rank * BN_ROWS_PER_RANK, BN_ROWS_PER_RANK);
}

static void check_batchnorm(const char *backend_name, int kind, int world) {
    const size_t total = (size_t)world * BN_ROWS_PER_RANK, n = total * BN_C;
    float *x = random_floats(n, -2.0f, 3.0f, 11 + world);
    float *residual = random_floats(n, -1.0f, 1.0f, 12);
    float *dy = random_floats(n, -1.0f, 1.0f, 13);
    static BnCase whole, ranks[THREAD_COMM_MAX_RANKS];
    whole = (BnCase){.backend_name = backend_name, .kind = kind, .world = world, .x = x,
                     .residual = residual, .dy = dy};
    run_batchnorm(&whole, NULL, 0, total);
    void *contexts[THREAD_COMM_MAX_RANKS];
    for (int r = 0; r < world; r++) {
        ranks[r] = whole;
        contexts[r] = &ranks[r];
    }
    thread_comm_run(world, batchnorm_rank, contexts);
    const size_t slice = (size_t)BN_ROWS_PER_RANK * BN_C;
    float dgamma[BN_C] = {0}, dbeta[BN_C] = {0};
    for (int r = 0; r < world; r++) {
        assert_close(ranks[r].y, whole.y + r * slice, slice, 1, "y");
        assert_close(ranks[r].dx, whole.dx + r * slice, slice, 1, "dx");
        if (kind == 1) assert_close(ranks[r].dresidual, whole.dresidual + r * slice, slice, 1, "dres");
        assert_close(ranks[r].mean, whole.mean, BN_C, 1, "save_mean");
        assert_close(ranks[r].inv_std, whole.inv_std, BN_C, 1, "save_inv_std");
        assert_close(ranks[r].running_mean, whole.running_mean, BN_C, 1, "running_mean");
        assert_close(ranks[r].running_var, whole.running_var, BN_C, 1, "running_var");
        for (int c = 0; c < BN_C; c++) dgamma[c] += ranks[r].dgamma[c], dbeta[c] += ranks[r].dbeta[c];
    }
    assert_close(dgamma, whole.dgamma, BN_C, 1, "sum of dgamma");
    assert_close(dbeta, whole.dbeta, BN_C, 1, "sum of dbeta");
    // Not vacuous: a rank alone has other statistics than the whole batch.
    BnCase alone = whole;
    run_batchnorm(&alone, NULL, 0, BN_ROWS_PER_RANK);
    double difference = 0;
    for (int c = 0; c < BN_C; c++) difference += fabs(alone.mean[c] - whole.mean[c]);
    assert_true(difference > 1e-3);
    free(x);
    free(residual);
    free(dy);
}

static void test_sync_batchnorm_equals_whole_batch(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++)
        for (int kind = 0; kind < 3; kind++)
            for (int world = 2; world <= 3; world++) check_batchnorm(backend_names[b], kind, world);
}

// ---- NT-Xent -----------------------------------------------------------------------------

enum { XENT_BATCH = 4, XENT_DIM = 6 };

typedef struct LossCase {
    const char *backend_name;
    int world, batch;                 // images per rank
    const float *inputs[8];           // whole-batch inputs (batch * world rows each)
    int input_count;
    float loss;
    float *grads[8];                  // per input: this rank's rows (or the whole batch)
    float center[16];                 // DINO
} LossCase;

static void xent_run(LossCase *c, Communicator *comm, int first, int rows) {
    Backend *backend = make_backend(c->backend_name);
    ErrorMessage err = {{0}};
    NtXent *loss = nt_xent_create(backend, rows, XENT_DIM, 0.2f, comm, &err);
    if (!loss) fail_msg("%s", err.text);
    const size_t offset = (size_t)first * XENT_DIM;
    nt_xent_forward(loss, rows, c->inputs[0] + offset, c->inputs[1] + offset, &c->loss);
    nt_xent_backward(loss, 1.0f, c->grads[0], c->grads[1]);
    nt_xent_destroy(loss);
    backend_destroy(backend);
}

static void xent_rank(Communicator *comm, void *context) {
    LossCase *c = context;
    xent_run(c, comm, comm->rank * c->batch, c->batch);
}

// Whole batch vs W ranks for a loss runner over input_count (rows, dim) inputs.
static void check_loss(LossCase *whole, int dim, void (*run)(LossCase *, Communicator *, int, int),
                       ThreadCommBody rank_body) {
    const int world = whole->world, total = world * whole->batch;
    for (int i = 0; i < whole->input_count; i++)
        whole->grads[i] = calloc((size_t)total * dim, sizeof(float));
    run(whole, NULL, 0, total);
    LossCase ranks[THREAD_COMM_MAX_RANKS];
    void *contexts[THREAD_COMM_MAX_RANKS];
    for (int r = 0; r < world; r++) {
        ranks[r] = *whole;
        for (int i = 0; i < whole->input_count; i++)
            ranks[r].grads[i] = calloc((size_t)whole->batch * dim, sizeof(float));
        contexts[r] = &ranks[r];
    }
    thread_comm_run(world, rank_body, contexts);
    float mean = 0;
    for (int r = 0; r < world; r++) mean += ranks[r].loss / (float)world;
    assert_close(&mean, &whole->loss, 1, 1, "mean of the ranks' losses");
    const size_t slice = (size_t)whole->batch * dim;
    for (int r = 0; r < world; r++)
        for (int i = 0; i < whole->input_count; i++) {
            char what[48];
            snprintf(what, sizeof what, "rank %d grad %d", r, i);
            assert_close(ranks[r].grads[i], whole->grads[i] + r * slice, slice, world, what);
            free(ranks[r].grads[i]);
        }
    for (int r = 0; r < world; r++) assert_close(ranks[r].center, whole->center, 16, 1, "center");
    for (int i = 0; i < whole->input_count; i++) free(whole->grads[i]);
}

static void test_nt_xent_gathers_negatives(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++)
        for (int world = 2; world <= 3; world++) {
            const size_t n = (size_t)world * XENT_BATCH * XENT_DIM;
            float *out0 = random_floats(n, -1, 1, 21), *out1 = random_floats(n, -1, 1, 22);
            LossCase whole = {.backend_name = backend_names[b], .world = world,
                              .batch = XENT_BATCH, .inputs = {out0, out1}, .input_count = 2};
            check_loss(&whole, XENT_DIM, xent_run, xent_rank);
            free(out0);
            free(out1);
        }
}

// ---- DINO --------------------------------------------------------------------------------

enum { DINO_DIM = 16, DINO_GLOBAL = 2, DINO_VIEWS = 3 };

// inputs: teacher views 0..1 then student views 0..2, each (rows, DINO_DIM).
static void dino_run(LossCase *c, Communicator *comm, int first, int rows) {
    Backend *backend = make_backend(c->backend_name);
    ErrorMessage err = {{0}};
    DinoLoss *loss = dino_loss_create(backend, rows, DINO_DIM, DINO_GLOBAL, DINO_VIEWS, 0.1f,
                                      0.9f, comm, &err);
    if (!loss) fail_msg("%s", err.text);
    // A centre that is not 0, as after earlier steps.
    for (int k = 0; k < DINO_DIM; k++) dino_loss_center(loss)[k] = 0.05f * (float)(k % 5);
    const size_t offset = (size_t)first * DINO_DIM;
    const float *teacher[DINO_GLOBAL], *student[DINO_VIEWS];
    for (int g = 0; g < DINO_GLOBAL; g++) teacher[g] = c->inputs[g] + offset;
    for (int v = 0; v < DINO_VIEWS; v++) student[v] = c->inputs[DINO_GLOBAL + v] + offset;
    dino_loss_forward(loss, rows, teacher, student, 0.04f, &c->loss);
    dino_loss_backward(loss, 1.0f, c->grads + DINO_GLOBAL);
    dino_loss_update_center(loss);
    memcpy(c->center, dino_loss_center(loss), sizeof c->center);
    dino_loss_destroy(loss);
    backend_destroy(backend);
}

static void dino_rank(Communicator *comm, void *context) {
    LossCase *c = context;
    dino_run(c, comm, comm->rank * c->batch, c->batch);
}

static void test_dino_centre_over_ranks(void **state) {
    (void)state;
    for (int b = 0; b < 2; b++)
        for (int world = 2; world <= 3; world++) {
            LossCase whole = {.backend_name = backend_names[b], .world = world, .batch = 3,
                              .input_count = DINO_GLOBAL + DINO_VIEWS};
            float *inputs[DINO_GLOBAL + DINO_VIEWS];
            for (int i = 0; i < whole.input_count; i++)
                whole.inputs[i] = inputs[i] =
                    random_floats((size_t)world * 3 * DINO_DIM, -2, 2, 31 + (uint64_t)i);
            check_loss(&whole, DINO_DIM, dino_run, dino_rank);
            for (int i = 0; i < whole.input_count; i++) free(inputs[i]);
        }
}

// ---- gradient buckets -------------------------------------------------------------------

// Two groups: "a" with 3 tensors (10, 7, 33 floats), "b" with one of 50.
static void make_groups(Backend *backend, ParameterSet sets[2], MethodGroup groups[2]) {
    static const int sizes[2][FIXTURE_GROUP_TENSORS] = {{10, 7, 33}, {50}};
    fixture_groups_make(backend, sizes, 2, sets, groups);
}

static void test_gradient_buckets_cover_everything_once(void **state) {
    (void)state;
    Backend *backend = make_backend("ref");
    ParameterSet sets[2];
    MethodGroup groups[2];
    make_groups(backend, sets, groups);
    GradientSync sync;
    ErrorMessage err = {{0}};
    // 8 floats first, then 24: several buckets per group.
    assert_int_equal(gradient_sync_plan(&sync, groups, 2, 8 * sizeof(float), 24 * sizeof(float),
                                        &err), 0);
    assert_true(sync.bucket_count >= 5);
    assert_true(sync.buckets[0].count <= 8);
    assert_int_equal(sync.buckets[0].group, 1);  // the last group first
    size_t covered[2] = {0, 0};
    const float *previous = NULL;
    for (int b = 0; b < sync.bucket_count; b++) {
        const GradientBucket *bucket = &sync.buckets[b];
        assert_true(bucket->count >= 1 && bucket->count <= 24);
        if (b > 0 && bucket->group == sync.buckets[b - 1].group)
            assert_ptr_equal(bucket->grads + bucket->count, previous);  // going backwards
        if (b > 0 && bucket->group != sync.buckets[b - 1].group)
            assert_int_equal(bucket->group, sync.buckets[b - 1].group - 1);
        covered[bucket->group] += bucket->count;
        previous = bucket->grads;
    }
    for (int g = 0; g < 2; g++) assert_int_equal(covered[g], sets[g].total);
    gradient_sync_free(&sync);
    for (int g = 0; g < 2; g++) parameter_set_free(&sets[g]);
    backend_destroy(backend);
}

static void gradients_rank(Communicator *comm, void *context) {
    float *result = context;  // (total of both groups) out: the gradients afterwards
    Backend *backend = make_backend("ref");
    ParameterSet sets[2];
    MethodGroup groups[2];
    make_groups(backend, sets, groups);
    groups[0].frozen_steps = 5;  // frozen at step 3: not averaged
    for (int g = 0; g < 2; g++)
        for (size_t i = 0; i < sets[g].total; i++)
            sets[g].grads[i] = (float)(comm->rank + 1) * (float)(i + 1) + (float)g;
    GradientSync sync;
    ErrorMessage err = {{0}};
    assert_int_equal(gradient_sync_plan(&sync, groups, 2, 16, 64, &err), 0);
    assert_int_equal(gradient_sync_all_reduce(&sync, comm, groups, 3, &err), 0);
    memcpy(result, sets[0].grads, sets[0].total * sizeof *result);
    memcpy(result + sets[0].total, sets[1].grads, sets[1].total * sizeof *result);
    gradient_sync_free(&sync);
    for (int g = 0; g < 2; g++) parameter_set_free(&sets[g]);
    backend_destroy(backend);
}

static void test_gradient_mean_over_ranks(void **state) {
    (void)state;
    enum { WORLD = 3, MAX_FLOATS = 256 };
    static float results[WORLD][MAX_FLOATS];
    void *contexts[WORLD] = {results[0], results[1], results[2]};
    thread_comm_run(WORLD, gradients_rank, contexts);
    Backend *backend = make_backend("ref");
    ParameterSet sets[2];
    MethodGroup groups[2];
    make_groups(backend, sets, groups);
    for (int r = 0; r < WORLD; r++) {
        for (size_t i = 0; i < sets[0].total; i++)  // frozen: this rank's own
            assert_true(results[r][i] == (float)(r + 1) * (float)(i + 1));
        for (size_t i = 0; i < sets[1].total; i++) {  // mean of (k + 1)(i + 1) + 1 over k
            const float expected = 2.0f * (float)(i + 1) + 1.0f;
            assert_true(fabsf(results[r][sets[0].total + i] - expected) <= 1e-6f * expected);
        }
    }
    for (int g = 0; g < 2; g++) parameter_set_free(&sets[g]);
    backend_destroy(backend);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_sync_batchnorm_equals_whole_batch),
        cmocka_unit_test(test_nt_xent_gathers_negatives),
        cmocka_unit_test(test_dino_centre_over_ranks),
        cmocka_unit_test(test_gradient_buckets_cover_everything_once),
        cmocka_unit_test(test_gradient_mean_over_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
