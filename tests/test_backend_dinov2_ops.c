// The DINOv2 ops of backend.h (scale_rows, gather_rows / scatter_add_rows,
// sinkhorn_knopp, koleo_forward / koleo_backward): each fast backend
// against the ref backend on awkward shapes (one row, odd widths, sizes on
// both sides of the cpu backend's threading threshold), then the ref
// backend's gradients against central finite differences of its forward.
// Runs as a "cpu" and a "cuda" group (tests/backend_mirror.h); the cuda
// group skips where no GPU works.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <string.h>

#include "backend/backend.h"
#include "backend_mirror.h"
#include "gradcheck.h"

static int32_t *index_buffer(int n) { return mirror_buffer((size_t)(n ? n : 1) * sizeof(int32_t)); }

// Rows of y (rows, dim) L2-normalised in place (KoLeo's input).
static void normalize_rows(float *y, int rows, int dim) {
    for (int r = 0; r < rows; r++) {
        double squares = 0.0;
        for (int d = 0; d < dim; d++) squares += (double)y[r * dim + d] * y[r * dim + d];
        for (int d = 0; d < dim; d++) y[r * dim + d] = (float)(y[r * dim + d] / sqrt(squares));
    }
}

// ---- scale, gather, scatter ------------------------------------------------------------------

// One fp32 product or sum per element in every backend: exactly equal.
static void test_scale_rows(void **state) {
    NEED_FAST_BACKEND();
    const size_t shapes[][2] = {{1, 3}, {7, 5}, {300, 129}};
    for (int t = 0; t < 3; t++) {
        const size_t rows = shapes[t][0], channels = shapes[t][1], n = rows * channels;
        const float *x = mirror_random_tensor(n, -2, 2, 10 + t);
        const float *scale = mirror_random_tensor(rows, -1, 1, 20 + t);
        float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
        ref->op.scale_rows(ref, rows, (int)channels, x, scale, y_ref);
        fast->op.scale_rows(fast, rows, (int)channels, D(x), D(scale), D(y_fast));
        H(y_fast);
        mirror_expect_close("scale_rows", n, y_fast, y_ref, 0, 0);
        float *in_place = mirror_copy(x, n);  // y may alias x
        fast->op.scale_rows(fast, rows, (int)channels, D(in_place), D(scale), D(in_place));
        H(in_place);
        mirror_expect_close("scale_rows in place", n, in_place, y_ref, 0, 0);
    }
}

static void test_gather_scatter(void **state) {
    NEED_FAST_BACKEND();
    const int cases[][3] = {{1, 1, 4}, {5, 9, 3}, {200, 512, 192}};  // count, source rows, C
    for (int t = 0; t < 3; t++) {
        const int count = cases[t][0], rows = cases[t][1], channels = cases[t][2];
        int32_t *index = index_buffer(count);
        for (int i = 0; i < count; i++) index[i] = (int32_t)((i * 7 + 3) % rows);  // distinct
        const size_t n_x = (size_t)rows * channels, n_y = (size_t)count * channels;
        const float *x = mirror_random_tensor(n_x, -1, 1, 30 + t);
        float *y_ref = mirror_nan_tensor(n_y), *y_fast = mirror_nan_tensor(n_y);
        ref->op.gather_rows(ref, count, channels, index, (const Act *)x, (Act *)y_ref);
        fast->op.gather_rows(fast, count, channels, D(index), D(x), D(y_fast));
        H(y_fast);
        mirror_expect_close("gather_rows", n_y, y_fast, y_ref, 0, 0);
        // scatter adds into what dx holds
        const float *dy = mirror_random_tensor(n_y, -1, 1, 40 + t);
        float *dx_ref = mirror_random_tensor(n_x, -1, 1, 50 + t), *dx_fast = mirror_copy(dx_ref, n_x);
        ref->op.scatter_add_rows(ref, count, channels, index, (const Act *)dy, (Act *)dx_ref);
        fast->op.scatter_add_rows(fast, count, channels, D(index), D(dy), D(dx_fast));
        H(dx_fast);
        mirror_expect_close("scatter_add_rows", n_x, dx_fast, dx_ref, 0, 0);
    }
}

// ---- Sinkhorn-Knopp --------------------------------------------------------------------------

// Sums over up to 1000 fp32 terms in double in both, a few fp32 roundings
// of q per iteration: 1e-5 relative leaves a wide margin.
static void test_sinkhorn_knopp(void **state) {
    NEED_FAST_BACKEND();
    const int shapes[][2] = {{1, 10}, {5, 7}, {33, 300}, {130, 1000}};
    for (int t = 0; t < 4; t++) {
        const int rows = shapes[t][0], cols = shapes[t][1];
        const size_t n = (size_t)rows * cols;
        const float *x = mirror_random_tensor(n, -1, 1, 60 + t);
        float *y_ref = mirror_nan_tensor(n), *y_fast = mirror_nan_tensor(n);
        ref->op.sinkhorn_knopp(ref, rows, cols, x, 1.0f / 0.04f, 3, y_ref);
        fast->op.sinkhorn_knopp(fast, rows, cols, D(x), 1.0f / 0.04f, 3, D(y_fast));
        H(y_fast);
        mirror_expect_close("sinkhorn_knopp", n, y_fast, y_ref, 1e-5, 1e-9);
        for (int r = 0; r < rows; r++) {  // every row is a distribution
            double sum = 0.0;
            for (int k = 0; k < cols; k++) sum += y_ref[(size_t)r * cols + k];
            assert_true(fabs(sum - 1.0) < 1e-5);
        }
    }
}

// One sample: the column step makes every entry 1/cols, the row step keeps it.
static void test_sinkhorn_one_row_is_uniform(void **state) {
    NEED_FAST_BACKEND();
    const float *x = mirror_random_tensor(6, -1, 1, 70);
    float *y = mirror_nan_tensor(6);
    fast->op.sinkhorn_knopp(fast, 1, 6, D(x), 10.0f, 3, D(y));
    H(y);
    for (int k = 0; k < 6; k++) assert_true(fabsf(y[k] - 1.0f / 6.0f) < 1e-7f);
}

// ---- KoLeo -----------------------------------------------------------------------------------

static void check_koleo(int rows, int dim, uint64_t seed) {
    const size_t n = (size_t)rows * dim;
    float *y = mirror_random_tensor(n, -1, 1, seed);
    normalize_rows(y, rows, dim);
    const float eps = 1e-8f;
    int32_t *nb_ref = index_buffer(rows), *nb_fast = index_buffer(rows);
    float *dist_ref = mirror_nan_tensor(rows), *dist_fast = mirror_nan_tensor(rows);
    float *log_ref = mirror_nan_tensor(rows), *log_fast = mirror_nan_tensor(rows);
    ref->op.koleo_forward(ref, rows, dim, y, eps, nb_ref, dist_ref, log_ref);
    fast->op.koleo_forward(fast, rows, dim, D(y), eps, D(nb_fast), D(dist_fast), D(log_fast));
    H(nb_fast), H(dist_fast), H(log_fast);
    for (int i = 0; i < rows; i++) {
        assert_int_equal(nb_fast[i], nb_ref[i]);
        assert_true(rows == 1 ? nb_ref[i] == i : nb_ref[i] != i);
    }
    // distances are O(1): fp32 element differences summed in double
    mirror_expect_close("koleo distance", rows, dist_fast, dist_ref, 1e-6, 1e-7);
    mirror_expect_close("koleo log distance", rows, log_fast, log_ref, 1e-6, 1e-6);
    float *dy_ref = mirror_nan_tensor(n), *dy_fast = mirror_nan_tensor(n);
    ref->op.koleo_backward(ref, rows, dim, y, nb_ref, dist_ref, eps, -0.25f, dy_ref);
    fast->op.koleo_backward(fast, rows, dim, D(y), D(nb_ref), D(dist_ref), eps, -0.25f,
                            D(dy_fast));
    H(dy_fast);
    mirror_expect_close("koleo dy", n, dy_fast, dy_ref, 1e-5, 1e-6);
}

static void test_koleo(void **state) {
    NEED_FAST_BACKEND();
    check_koleo(1, 8, 80);     // no other row: its own neighbour, zero gradient
    check_koleo(2, 5, 81);     // each the other's neighbour
    check_koleo(17, 33, 82);
    check_koleo(64, 192, 83);  // threaded
}

// The first of equal maxima wins, as torch.argmax: rows 1 and 2 are the
// same vector, so row 0's neighbour is 1 and theirs each other.
static void test_koleo_ties(void **state) {
    NEED_FAST_BACKEND();
    float *y = mirror_tensor(3 * 2);
    const float values[6] = {1, 0, 0.6f, 0.8f, 0.6f, 0.8f};
    memcpy(y, values, sizeof values);
    int32_t *nb = index_buffer(3);
    float *dist = mirror_tensor(3), *logs = mirror_tensor(3);
    fast->op.koleo_forward(fast, 3, 2, D(y), 1e-8f, D(nb), D(dist), D(logs));
    H(nb);
    assert_int_equal(nb[0], 1);
    assert_int_equal(nb[1], 2);
    assert_int_equal(nb[2], 1);
}

typedef struct KoleoProblem {
    int rows, dim;
    float eps, dlog;
    int32_t *neighbor, *neighbor_check;
    float *distance, *log_distance;
} KoleoProblem;

// dlog * sum log(distance + eps) on the ref backend; the neighbours must
// stay those of the unperturbed input (a step that flips one would make
// the loss jump).
static double koleo_loss(void *context, const float *y) {
    KoleoProblem *p = context;
    ref->op.koleo_forward(ref, p->rows, p->dim, y, p->eps, p->neighbor_check, p->distance,
                          p->log_distance);
    assert_memory_equal(p->neighbor_check, p->neighbor, (size_t)p->rows * sizeof(int32_t));
    double total = 0.0;
    for (int i = 0; i < p->rows; i++) total += (double)p->dlog * p->log_distance[i];
    return total;
}

static void test_koleo_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const int shapes[][2] = {{2, 3}, {6, 4}, {9, 5}};
    for (int t = 0; t < 3; t++) {
        KoleoProblem p = {.rows = shapes[t][0], .dim = shapes[t][1], .eps = 1e-8f,
                          .dlog = -1.0f / shapes[t][0]};
        const size_t n = (size_t)p.rows * p.dim;
        float *y = mirror_random_tensor(n, -1, 1, 90 + t);
        normalize_rows(y, p.rows, p.dim);
        p.neighbor = index_buffer(p.rows);
        p.neighbor_check = index_buffer(p.rows);
        p.distance = mirror_tensor(p.rows);
        p.log_distance = mirror_tensor(p.rows);
        ref->op.koleo_forward(ref, p.rows, p.dim, y, p.eps, p.neighbor, p.distance,
                              p.log_distance);
        float *dy = mirror_nan_tensor(n);
        ref->op.koleo_backward(ref, p.rows, p.dim, y, p.neighbor, p.distance, p.eps, p.dlog, dy);
        const GradcheckTolerance tolerance = {.step = 1e-3f, .rtol = 1e-2, .atol = 1e-3};
        assert_int_equal(gradcheck_compare("koleo dy", koleo_loss, &p, y, n, dy, tolerance), 0);
    }
}

typedef struct GatherProblem {
    int count, channels;
    const int32_t *index;
    float *y;
    const float *projection;
} GatherProblem;

static double gather_loss(void *context, const float *x) {
    GatherProblem *p = context;
    ref->op.gather_rows(ref, p->count, p->channels, p->index, (const Act *)x, (Act *)p->y);
    return gradcheck_project((size_t)p->count * p->channels, p->y, p->projection);
}

// scatter_add_rows into zeros is gather_rows' gradient.
static void test_gather_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    const int count = 4, rows = 7, channels = 3;
    int32_t *index = index_buffer(count);
    const int32_t chosen[4] = {6, 0, 3, 4};
    memcpy(index, chosen, sizeof chosen);
    GatherProblem p = {.count = count, .channels = channels, .index = index,
                       .y = mirror_tensor((size_t)count * channels),
                       .projection = mirror_random_tensor((size_t)count * channels, -1, 1, 95)};
    float *x = mirror_random_tensor((size_t)rows * channels, -1, 1, 96);
    float *dx = mirror_tensor((size_t)rows * channels);
    memset(dx, 0, (size_t)rows * channels * sizeof(float));
    ref->op.scatter_add_rows(ref, count, channels, index, (const Act *)p.projection, (Act *)dx);
    const GradcheckTolerance tolerance = {.step = 1e-2f, .rtol = 1e-2, .atol = 1e-3};
    assert_int_equal(gradcheck_compare("gather dx", gather_loss, &p, x, (size_t)rows * channels,
                                       dx, tolerance),
                     0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_scale_rows, mirror_free),
        cmocka_unit_test_teardown(test_gather_scatter, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_knopp, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_one_row_is_uniform, mirror_free),
        cmocka_unit_test_teardown(test_koleo, mirror_free),
        cmocka_unit_test_teardown(test_koleo_ties, mirror_free),
        cmocka_unit_test_teardown(test_koleo_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_gather_backward_fd, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]);
}
