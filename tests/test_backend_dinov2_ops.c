// The DINOv2 ops of backend.h (scale_rows, gather_rows / scatter_add_rows,
// the Sinkhorn-Knopp steps column_max / sinkhorn_exp / sinkhorn_normalize,
// koleo_forward / koleo_backward): each fast backend against the ref
// backend on awkward shapes (one row, odd widths, sizes on both sides of
// the cpu backend's threading threshold); the Sinkhorn-Knopp steps also
// against DINOv2's formula in double and, rows split into parts combined
// as the ranks' all-reduces would, against the whole matrix; then the ref
// backend's gradients against central finite differences of its forward.
// Runs as a "cpu" and a "cuda" group (tests/backend_mirror.h); the cuda
// group skips where no GPU works.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdlib.h>
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
        fast->op.gather_rows(fast, count, channels, D(index), DA(x), DA(y_fast));
        HA(y_fast);
        mirror_expect_close("gather_rows", n_y, y_fast, y_ref, 0, 0);
        // scatter adds into what dx holds
        const float *dy = mirror_random_tensor(n_y, -1, 1, 40 + t);
        float *dx_ref = mirror_random_tensor(n_x, -1, 1, 50 + t), *dx_fast = mirror_copy(dx_ref, n_x);
        ref->op.scatter_add_rows(ref, count, channels, index, (const Act *)dy, (Act *)dx_ref);
        fast->op.scatter_add_rows(fast, count, channels, D(index), DA(dy), DA(dx_fast));
        HA(dx_fast);
        mirror_expect_close("scatter_add_rows", n_x, dx_fast, dx_ref, 0, 0);
    }
}

// ---- Sinkhorn-Knopp --------------------------------------------------------------------------

#define SK_ITERATIONS 3
#define SK_SCALE (1.0f / 0.04f)  // DINOv2's teacher temperature 0.04

// Shapes: one row, odd widths, both sides of the cpu threading threshold,
// column strips (64) split unevenly.
static const int sk_shapes[][2] = {{1, 10}, {5, 7}, {33, 300}, {130, 1000}};

// Exact in every backend (a maximum is one of the values): equal, NaN kept,
// -inf for no rows.
static void test_column_max(void **state) {
    NEED_FAST_BACKEND();
    for (int t = 0; t < 4; t++) {
        const size_t rows = (size_t)sk_shapes[t][0], cols = (size_t)sk_shapes[t][1];
        float *x = mirror_random_tensor(rows * cols, -3, 3, 80 + t);
        if (t == 2) x[17 * cols + 5] = NAN;
        float *max_ref = mirror_nan_tensor(cols), *max_fast = mirror_nan_tensor(cols);
        ref->op.column_max(ref, rows, (int)cols, x, max_ref);
        fast->op.column_max(fast, rows, (int)cols, D(x), D(max_fast));
        H(max_fast);
        if (t == 2) assert_true(isnan(max_ref[5]) && isnan(max_fast[5]));
        for (size_t k = 0; k < cols; k++) {
            if (t == 2 && k == 5) continue;
            float want = -INFINITY;
            for (size_t r = 0; r < rows; r++) want = fmaxf(want, x[r * cols + k]);
            assert_true(max_ref[k] == want && max_fast[k] == want);
        }
    }
    float *none = mirror_nan_tensor(3);
    fast->op.column_max(fast, 0, 3, NULL, D(none));
    H(none);
    for (int k = 0; k < 3; k++) assert_true(isinf(none[k]) && none[k] < 0);
}

// One exp in double per element, rounded to float: equal on cpu, within an
// ulp or two on cuda (its double exp).
static void test_sinkhorn_exp_and_normalize(void **state) {
    NEED_FAST_BACKEND();
    for (int t = 0; t < 4; t++) {
        const int rows = sk_shapes[t][0], cols = sk_shapes[t][1];
        const size_t n = (size_t)rows * cols;
        const float *x = mirror_random_tensor(n, -1, 1, 90 + t);
        // A shift above the data, as another rank's larger maximum would be.
        const float *max = mirror_random_tensor((size_t)cols, 1, 1.5f, 100 + t);
        float *q_ref = mirror_nan_tensor(n), *q_fast = mirror_nan_tensor(n);
        ref->op.sinkhorn_exp(ref, rows, cols, x, SK_SCALE, max, q_ref);
        fast->op.sinkhorn_exp(fast, rows, cols, D(x), SK_SCALE, D(max), D(q_fast));
        H(q_fast);
        mirror_expect_close("sinkhorn_exp", n, q_fast, q_ref, 3e-7, 0);
        // Column sums larger than this rank's (other ranks' rows count too).
        const float *sums = mirror_random_tensor((size_t)cols, 2, 3, 110 + t);
        float *p_fast = mirror_copy(q_ref, n);
        ref->op.sinkhorn_normalize(ref, rows, cols, sums, q_ref);
        fast->op.sinkhorn_normalize(fast, rows, cols, D(sums), D(p_fast));
        H(p_fast);
        mirror_expect_close("sinkhorn_normalize", n, p_fast, q_ref, 1e-6, 0);
        for (int r = 0; r < rows; r++) {  // every row is a distribution
            double sum = 0.0;
            for (int k = 0; k < cols; k++) sum += q_ref[(size_t)r * cols + k];
            assert_true(fabs(sum - 1.0) < 1e-5);
        }
    }
}

// Padding rows zeroed after the exponential (dinov2_loss.c) stay zero, and
// a column whose sum is 0 gives zeros, not NaN; the other rows are
// distributions as before.
static void test_sinkhorn_normalize_zero_sums(void **state) {
    NEED_FAST_BACKEND();
    enum { ROWS = 5, COLS = 7 };
    float *q = mirror_random_tensor(ROWS * COLS, 0.1f, 1, 120);
    for (int k = 0; k < COLS; k++) q[3 * COLS + k] = 0.0f;  // row 3: padding
    for (int r = 0; r < ROWS; r++) q[r * COLS + 4] = 0.0f;  // column 4: nothing
    float *sums = mirror_buffer(COLS * sizeof(float));
    for (int k = 0; k < COLS; k++) {
        sums[k] = 0.0f;
        for (int r = 0; r < ROWS; r++) sums[k] += q[r * COLS + k];
    }
    float *q_fast = mirror_copy(q, ROWS * COLS);
    ref->op.sinkhorn_normalize(ref, ROWS, COLS, sums, q);
    fast->op.sinkhorn_normalize(fast, ROWS, COLS, D(sums), D(q_fast));
    H(q_fast);
    for (int r = 0; r < ROWS; r++) {
        double sum = 0.0, sum_fast = 0.0;
        for (int k = 0; k < COLS; k++) {
            const float a = q[r * COLS + k], b = q_fast[r * COLS + k];
            if (r == 3 || k == 4) assert_true(a == 0.0f && b == 0.0f);
            sum += a, sum_fast += b;
        }
        if (r != 3) assert_true(fabs(sum - 1.0) < 1e-6 && fabs(sum_fast - 1.0) < 1e-6);
    }
}

// DINOv2's sinkhorn_knopp_teacher written out in double on one process:
// Q = exp(x / T) as (K, B), divided by its total; per iteration each
// prototype's row divided by its sum and K, each sample's column by its sum
// and B; finally Q B, transposed back to y (B, K).
static void dinov2_sinkhorn(int rows, int cols, const float *x, double *y) {
    const size_t n = (size_t)rows * cols;
    double total = 0.0;
    for (size_t i = 0; i < n; i++) total += y[i] = exp(x[i] * (double)SK_SCALE);
    for (size_t i = 0; i < n; i++) y[i] /= total;
    for (int it = 0; it < SK_ITERATIONS; it++) {
        for (int k = 0; k < cols; k++) {
            double sum = 0.0;
            for (int r = 0; r < rows; r++) sum += y[(size_t)r * cols + k];
            for (int r = 0; r < rows; r++) y[(size_t)r * cols + k] /= sum * cols;
        }
        for (int r = 0; r < rows; r++) {
            double sum = 0.0;
            for (int k = 0; k < cols; k++) sum += y[(size_t)r * cols + k];
            for (int k = 0; k < cols; k++) y[(size_t)r * cols + k] /= sum * rows;
        }
    }
    for (size_t i = 0; i < n; i++) y[i] *= rows;
}

// The steps as one process runs them (no ranks: nothing to all-reduce),
// on backend memory: x (rows, cols), stats (cols) scratch, q (rows, cols).
static void sinkhorn_steps(Backend *b, int rows, int cols, const float *x, float *stats,
                           float *q) {
    b->op.column_max(b, (size_t)rows, cols, x, stats);
    b->op.sinkhorn_exp(b, rows, cols, x, SK_SCALE, stats, q);
    for (int it = 0; it < SK_ITERATIONS; it++) {
        b->op.column_sum(b, (size_t)rows, cols, q, stats);
        b->op.sinkhorn_normalize(b, rows, cols, stats, q);
    }
}

// The steps on ref and on the fast backend against DINOv2's formula: its
// total, K and B divisions and the per-column shift cancel (backend.h), so
// only fp32 rounding of q (a few per iteration) and of the column sums
// differs: 1e-5 relative leaves a wide margin.
static void test_sinkhorn_matches_dinov2(void **state) {
    NEED_FAST_BACKEND();
    for (int t = 0; t < 4; t++) {
        const int rows = sk_shapes[t][0], cols = sk_shapes[t][1];
        const size_t n = (size_t)rows * cols;
        const float *x = mirror_random_tensor(n, -1, 1, 60 + t);
        double *truth64 = malloc(n * sizeof *truth64);
        float *truth = mirror_tensor(n);
        assert_true(truth64 != NULL);
        dinov2_sinkhorn(rows, cols, x, truth64);
        for (size_t i = 0; i < n; i++) truth[i] = (float)truth64[i];
        free(truth64);
        float *stats = mirror_nan_tensor((size_t)cols);
        float *stats_fast = mirror_nan_tensor((size_t)cols);
        float *q_ref = mirror_nan_tensor(n), *q_fast = mirror_nan_tensor(n);
        sinkhorn_steps(ref, rows, cols, x, stats, q_ref);
        sinkhorn_steps(fast, rows, cols, D(x), D(stats_fast), D(q_fast));
        H(q_fast);
        mirror_expect_close("sinkhorn steps, ref vs DINOv2", n, q_ref, truth, 1e-5, 1e-9);
        mirror_expect_close("sinkhorn steps, fast vs DINOv2", n, q_fast, truth, 1e-5, 1e-9);
        mirror_expect_close("sinkhorn steps, fast vs ref", n, q_fast, q_ref, 1e-5, 1e-9);
    }
}

// The ranks of DINOv2's distributed Sinkhorn-Knopp simulated on one
// backend: the rows split into uneven parts (one empty, as a rank without
// masked patches), each part's column maxima and sums combined on the host
// as the all-reduces would (max; the sum in rank order in fp32), equal to
// the whole matrix's assignment up to the rounding of those sums.
static void test_sinkhorn_split_rows_equal_whole(void **state) {
    NEED_FAST_BACKEND();
    enum { PARTS = 4 };
    const int rows = 97, cols = 300, first[PARTS + 1] = {0, 40, 40, 71, rows};
    const size_t n = (size_t)rows * cols;
    const float *x = mirror_random_tensor(n, -1, 1, 120);
    float *whole = mirror_nan_tensor(n), *stats = mirror_nan_tensor((size_t)cols);
    sinkhorn_steps(fast, rows, cols, D(x), D(stats), D(whole));
    H(whole);
    float *part_stats[PARTS], *reduced = mirror_tensor((size_t)cols);
    for (int p = 0; p < PARTS; p++) part_stats[p] = mirror_nan_tensor((size_t)cols);
    float *q = mirror_nan_tensor(n);
    const float *dx = D(x);
    float *dq = D(q);  // q stays on the device from here on
#define PART_ROWS(p) (first[(p) + 1] - first[p])
#define PART_OFFSET(p) ((size_t)first[p] * cols)
    for (int p = 0; p < PARTS; p++) {
        fast->op.column_max(fast, (size_t)PART_ROWS(p), cols, dx + PART_OFFSET(p),
                            D(part_stats[p]));
        H(part_stats[p]);
    }
    for (int k = 0; k < cols; k++) {
        reduced[k] = part_stats[0][k];
        for (int p = 1; p < PARTS; p++) reduced[k] = fmaxf(reduced[k], part_stats[p][k]);
    }
    const float *dmax = D(reduced);
    for (int p = 0; p < PARTS; p++)
        fast->op.sinkhorn_exp(fast, PART_ROWS(p), cols, dx + PART_OFFSET(p), SK_SCALE, dmax,
                              dq + PART_OFFSET(p));
    for (int it = 0; it < SK_ITERATIONS; it++) {
        for (int p = 0; p < PARTS; p++) {
            fast->op.column_sum(fast, (size_t)PART_ROWS(p), cols, dq + PART_OFFSET(p),
                                D(part_stats[p]));
            H(part_stats[p]);
        }
        for (int k = 0; k < cols; k++) {
            reduced[k] = part_stats[0][k];
            for (int p = 1; p < PARTS; p++) reduced[k] += part_stats[p][k];
        }
        const float *dsum = D(reduced);
        for (int p = 0; p < PARTS; p++)
            fast->op.sinkhorn_normalize(fast, PART_ROWS(p), cols, dsum, dq + PART_OFFSET(p));
    }
#undef PART_ROWS
#undef PART_OFFSET
    H(q);
    mirror_expect_close("sinkhorn split over parts vs whole", n, q, whole, 1e-5, 1e-9);
    // Not vacuous: one part assigned alone is another assignment.
    float *alone = mirror_nan_tensor((size_t)40 * cols);
    sinkhorn_steps(fast, 40, cols, dx, D(stats), D(alone));
    H(alone);
    double difference = 0.0;
    for (size_t i = 0; i < (size_t)40 * cols; i++) difference += fabs(alone[i] - whole[i]);
    assert_true(difference / (40.0 * cols) > 1e-2 / cols);
}

// One sample: the column step makes every entry 1 (its own column's sum),
// the row step 1/cols.
static void test_sinkhorn_one_row_is_uniform(void **state) {
    NEED_FAST_BACKEND();
    const float *x = mirror_random_tensor(6, -1, 1, 70);
    float *y = mirror_nan_tensor(6), *stats = mirror_nan_tensor(6);
    sinkhorn_steps(fast, 1, 6, D(x), D(stats), D(y));
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
        cmocka_unit_test_teardown(test_column_max, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_exp_and_normalize, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_normalize_zero_sums, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_matches_dinov2, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_split_rows_equal_whole, mirror_free),
        cmocka_unit_test_teardown(test_sinkhorn_one_row_is_uniform, mirror_free),
        cmocka_unit_test_teardown(test_koleo, mirror_free),
        cmocka_unit_test_teardown(test_koleo_ties, mirror_free),
        cmocka_unit_test_teardown(test_koleo_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_gather_backward_fd, mirror_free),
    };
    // The activation ops again with cuda storing fp16 / bf16 (copies and one
    // rounded addition: exact against ref in the same dtype).
    const struct CMUnitTest act_tests[] = {
        cmocka_unit_test_teardown(test_gather_scatter, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]) +
           mirror_run_16bit_groups(act_tests, sizeof act_tests / sizeof act_tests[0]);
}
