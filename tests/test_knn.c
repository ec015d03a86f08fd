// Tests of the kNN evaluation (src/train/knn.h): clusters, shuffled labels,
// a hand-computed case, exact agreement with a brute-force sort reference
// (ties included), k clamping, argument errors and labels from folders.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "train/knn.h"
#include "util/rng.h"

// ---- brute-force reference: the arithmetic of knn.h, written the slow way ----

typedef struct RefNeighbour {
    float similarity;
    int index;
} RefNeighbour;

static int ref_compare(const void *a, const void *b) {
    const RefNeighbour *x = a, *y = b;
    if (x->similarity != y->similarity) return x->similarity > y->similarity ? -1 : 1;
    return x->index < y->index ? -1 : (x->index > y->index);
}

static void ref_normalise(const float *row, int dim, float *out) {
    double sum_squares = 0.0;
    for (int d = 0; d < dim; d++) sum_squares += (double)row[d] * row[d];
    const double norm = sqrt(sum_squares);
    for (int d = 0; d < dim; d++) out[d] = norm == 0.0 ? 0.0f : (float)(row[d] / norm);
}

// Prediction for `query` against every bank row but `excluded` (-1: none):
// all similarities, a full sort, the first k, a weighted vote.
static int ref_predict(const float *query, const float *bank /* (bank_count, dim) */,
                       const int32_t *bank_labels, int bank_count, int excluded, int dim,
                       int class_count, int k, float temperature) {
    float *q = malloc((size_t)dim * sizeof *q), *b = malloc((size_t)dim * sizeof *b);
    RefNeighbour *all = malloc((size_t)bank_count * sizeof *all);
    double *scores = calloc((size_t)class_count, sizeof *scores);
    assert_non_null(q);
    assert_non_null(b);
    assert_non_null(all);
    assert_non_null(scores);
    ref_normalise(query, dim, q);
    int count = 0;
    for (int j = 0; j < bank_count; j++) {
        if (j == excluded) continue;
        ref_normalise(bank + (size_t)j * dim, dim, b);
        float dot = 0.0f;
        for (int d = 0; d < dim; d++) dot += q[d] * b[d];
        all[count++] = (RefNeighbour){dot, j};
    }
    qsort(all, (size_t)count, sizeof *all, ref_compare);
    for (int r = 0; r < k && r < count; r++)
        scores[bank_labels[all[r].index]] += exp((double)all[r].similarity / temperature);
    int best = 0;
    for (int c = 1; c < class_count; c++)
        if (scores[c] > scores[best]) best = c;
    free(q);
    free(b);
    free(all);
    free(scores);
    return best;
}

// ---- data makers ------------------------------------------------------------

// Uniform features in [-1, 1) and uniform labels.
static void random_set(float *features, int32_t *labels, int n, int dim, int class_count,
                       uint64_t seed) {
    Rng rng = rng_make(seed, 0, 0, 0);
    for (size_t i = 0; i < (size_t)n * dim; i++) features[i] = rng_range(&rng, -1.0f, 1.0f);
    for (int i = 0; i < n; i++) labels[i] = (int32_t)rng_below(&rng, (uint32_t)class_count);
}

// Ties on purpose: every 4th row copies the row before it (identical
// similarities to every query) with a different label, and every 7th row is
// the row before it scaled by 3 (the same direction once normalised).
static void add_ties(float *features, int32_t *labels, int n, int dim, int class_count) {
    for (int i = 1; i < n; i++) {
        const float scale = i % 4 == 0 ? 1.0f : i % 7 == 0 ? 3.0f : 0.0f;
        if (scale == 0.0f) continue;
        for (int d = 0; d < dim; d++) features[(size_t)i * dim + d] = scale * features[(size_t)(i - 1) * dim + d];
        labels[i] = (labels[i - 1] + 1) % class_count;
    }
}

// ---- tests --------------------------------------------------------------------------

// Three tight clusters around orthogonal directions, 10 rows each: every
// neighbour of a row is in its own cluster, so both modes are exact.
static void test_clusters_are_perfect(void **state) {
    (void)state;
    enum { PER_CLASS = 10, CLASSES = 3, DIM = 8, N = PER_CLASS * CLASSES };
    float features[N * DIM];
    int32_t labels[N];
    Rng rng = rng_make(11, 0, 0, 0);
    for (int i = 0; i < N; i++) {
        labels[i] = i % CLASSES;  // classes interleaved in row order
        for (int d = 0; d < DIM; d++)
            features[i * DIM + d] = (d == labels[i] ? 5.0f : 0.0f) + rng_range(&rng, -0.1f, 0.1f);
    }
    double top1 = -1.0;
    ErrorMessage err = {{0}};
    assert_int_equal(knn_leave_one_out_top1(features, labels, N, DIM, CLASSES, 20, 0.1f, &top1, &err), 0);
    assert_true(top1 == 1.0);  // exact: 30 of 30
    assert_int_equal(knn_top1(features, labels, 21, features + 21 * DIM, labels + 21, N - 21, DIM,
                              CLASSES, 5, 0.1f, &top1, &err), 0);
    assert_true(top1 == 1.0);
}

// Labels drawn independently of the features: accuracy near 1/classes.
static void test_shuffled_labels_near_chance(void **state) {
    (void)state;
    enum { N = 2000, DIM = 16, CLASSES = 10 };
    float *features = malloc((size_t)N * DIM * sizeof *features);
    int32_t *labels = malloc(N * sizeof *labels);
    assert_non_null(features);
    assert_non_null(labels);
    random_set(features, labels, N, DIM, CLASSES, 5);
    double top1 = -1.0;
    ErrorMessage err = {{0}};
    assert_int_equal(knn_leave_one_out_top1(features, labels, N, DIM, CLASSES, 20, 0.1f, &top1, &err), 0);
    // Binomial std of the mean over 2000 rows is sqrt(0.1 * 0.9 / 2000) = 0.0067;
    // +-0.04 is 6 std, so only a broken classifier lands outside.
    assert_true(fabs(top1 - 0.1) < 0.04);
    free(features);
    free(labels);
}

// Train rows (not normalised): A = (1, 0) class 0, B = (4, 3) class 1,
// C = (6, 8) class 1, D = (0, 2) class 0; one val row q = (2, 0), class 1.
// Cosine similarities to q: A 1, B 4/5 = 0.8, C 6/10 = 0.6, D 0.
// k = 3 takes A, B, C:
//   t = 1:   class 0 = e^1 = 2.718;  class 1 = e^0.8 + e^0.6 = 2.226 + 1.822 = 4.048
//            -> predicts 1 (right, top1 = 1);
//   t = 0.1: class 0 = e^10 = 22026; class 1 = e^8 + e^6 = 2981 + 403 = 3384
//            -> predicts 0 (wrong, top1 = 0).
// k = 1 takes A alone -> predicts 0 (top1 = 0) at any temperature.
// k = 4 with t = 1 adds D to class 0: 2.718 + e^0 = 3.718 < 4.048 -> predicts 1.
static void test_hand_computed_case(void **state) {
    (void)state;
    const float train[] = {1, 0, 4, 3, 6, 8, 0, 2};
    const int32_t train_labels[] = {0, 1, 1, 0};
    const float val[] = {2, 0};
    const int32_t val_labels[] = {1};
    struct {
        int k;
        float temperature;
        double expected;
    } cases[] = {{3, 1.0f, 1.0}, {3, 0.1f, 0.0}, {1, 1.0f, 0.0}, {4, 1.0f, 1.0}};
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        double top1 = -1.0;
        ErrorMessage err = {{0}};
        assert_int_equal(knn_top1(train, train_labels, 4, val, val_labels, 1, 2, 2, cases[c].k,
                                  cases[c].temperature, &top1, &err), 0);
        assert_true(top1 == cases[c].expected);
    }
}

// knn_top1 against the reference, one val row at a time (labelled with the
// reference's prediction, so top1 must be 1 for each) and as a whole.
static void check_split_against_reference(const float *features, const int32_t *labels,
                                          int train_count, int val_count, int dim,
                                          int class_count, int k, float temperature) {
    const float *val = features + (size_t)train_count * dim;
    int reference_correct = 0;
    ErrorMessage err = {{0}};
    for (int v = 0; v < val_count; v++) {
        const int32_t predicted = ref_predict(val + (size_t)v * dim, features, labels, train_count,
                                              -1, dim, class_count, k, temperature);
        reference_correct += predicted == labels[train_count + v];
        double top1 = -1.0;
        assert_int_equal(knn_top1(features, labels, train_count, val + (size_t)v * dim, &predicted,
                                  1, dim, class_count, k, temperature, &top1, &err), 0);
        if (top1 != 1.0) fail_msg("val row %d, k %d: knn disagrees with the reference (%d)", v, k, predicted);
    }
    double top1 = -1.0;
    assert_int_equal(knn_top1(features, labels, train_count, val, labels + train_count, val_count,
                              dim, class_count, k, temperature, &top1, &err), 0);
    assert_true(top1 == (double)reference_correct / val_count);  // same count, same division
}

static void check_leave_one_out_against_reference(const float *features, const int32_t *labels,
                                                  int n, int dim, int class_count, int k,
                                                  float temperature) {
    int reference_correct = 0;
    for (int i = 0; i < n; i++)
        reference_correct += ref_predict(features + (size_t)i * dim, features, labels, n, i, dim,
                                         class_count, k, temperature) == labels[i];
    double top1 = -1.0;
    ErrorMessage err = {{0}};
    assert_int_equal(knn_leave_one_out_top1(features, labels, n, dim, class_count, k, temperature,
                                            &top1, &err), 0);
    assert_true(top1 == (double)reference_correct / n);
}

// Sizes that are no multiple of the tile (8), micro (4) or query block (64)
// sizes; a dimension of 7; duplicated and scaled rows for similarity ties and
// equal class scores. Exact equality: both compute the same float sums in
// the same order (knn.h step 2).
static void test_matches_brute_force_reference(void **state) {
    (void)state;
    enum { N = 157, DIM = 7, CLASSES = 5, TRAIN = 90 };
    float features[N * DIM];
    int32_t labels[N];
    random_set(features, labels, N, DIM, CLASSES, 21);
    add_ties(features, labels, N, DIM, CLASSES);
    const int ks[] = {1, 5, 20};
    for (int i = 0; i < 3; i++) {
        check_leave_one_out_against_reference(features, labels, N, DIM, CLASSES, ks[i], 0.1f);
        check_split_against_reference(features, labels, TRAIN, N - TRAIN, DIM, CLASSES, ks[i], 0.1f);
    }
    // A high temperature makes weights nearly equal, so the vote leans on counts.
    check_leave_one_out_against_reference(features, labels, N, DIM, CLASSES, 5, 100.0f);
}

// k beyond the available rows means all of them.
static void test_k_clamps(void **state) {
    (void)state;
    enum { N = 12, DIM = 3, CLASSES = 3 };
    float features[N * DIM];
    int32_t labels[N];
    random_set(features, labels, N, DIM, CLASSES, 8);
    double all = -1.0, clamped = -1.0;
    ErrorMessage err = {{0}};
    assert_int_equal(knn_leave_one_out_top1(features, labels, N, DIM, CLASSES, N - 1, 1.0f, &all, &err), 0);
    assert_int_equal(knn_leave_one_out_top1(features, labels, N, DIM, CLASSES, INT32_MAX, 1.0f, &clamped, &err), 0);
    assert_true(all == clamped);
    check_leave_one_out_against_reference(features, labels, N, DIM, CLASSES, 1000, 1.0f);
    check_split_against_reference(features, labels, 5, N - 5, DIM, CLASSES, 1000, 1.0f);
    // Two rows: each is classified by the other alone.
    const float two[] = {1, 0, 0, 1};
    const int32_t two_labels[] = {0, 1};
    assert_int_equal(knn_leave_one_out_top1(two, two_labels, 2, 2, 2, 20, 0.1f, &all, &err), 0);
    assert_true(all == 0.0);
}

static void expect_error(int status, const ErrorMessage *err, const char *fragment) {
    assert_int_equal(status, -1);
    if (!strstr(err->text, fragment)) fail_msg("message '%s' lacks '%s'", err->text, fragment);
}

static void test_errors(void **state) {
    (void)state;
    float features[] = {1, 0, 0, 1, 1, 1};
    int32_t labels[] = {0, 1, 0};
    double top1 = 0.5;
    ErrorMessage err = {{0}};
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 2, 0, 0.1f, &top1, &err), &err, "k must be >= 1, got 0");
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 2, 5, 0.0f, &top1, &err), &err, "temperature must be");
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 2, 5, -1.0f, &top1, &err), &err, "temperature must be");
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 2, 5, NAN, &top1, &err), &err, "temperature must be");
    expect_error(knn_leave_one_out_top1(features, labels, 1, 2, 2, 5, 0.1f, &top1, &err), &err, "at least 2 rows");
    expect_error(knn_leave_one_out_top1(features, labels, 3, 0, 2, 5, 0.1f, &top1, &err), &err, "dimension");
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 0, 5, 0.1f, &top1, &err), &err, "class count");
    labels[2] = 2;
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 2, 5, 0.1f, &top1, &err), &err, "label 2 of row 2 is outside [0, 2)");
    labels[2] = -1;
    expect_error(knn_leave_one_out_top1(features, labels, 3, 2, 2, 5, 0.1f, &top1, &err), &err, "label -1 of row 2");
    expect_error(knn_top1(features, labels, 2, features + 4, labels + 2, 1, 2, 2, 5, 0.1f, &top1, &err), &err, "val label -1 of row 0");
    labels[2] = 0;
    features[3] = INFINITY;
    expect_error(knn_top1(features, labels, 2, features + 4, labels + 2, 1, 2, 2, 5, 0.1f, &top1, &err), &err, "train feature 1 of row 1 is not finite");
    features[3] = 1;
    expect_error(knn_top1(features, labels, 0, features + 4, labels + 2, 1, 2, 2, 5, 0.1f, &top1, &err), &err, "at least 1 train row");
    assert_true(top1 == 0.0);  // reset on failure, never left stale
}

// A hand-made Dataset (no files needed): "a-b/..." sorts before "a/..." as a
// path, but class "a" sorts before "a-b"; a file in a deeper folder belongs
// to its top-level class.
static void test_labels_from_folders(void **state) {
    (void)state;
    char arena[] = "a-b/x.png\0a/y.png\0a/z/w.png\0b/q.png";
    size_t offsets[] = {0, 10, 18, 28};
    Dataset dataset = {.root = "data", .count = 4, .path_arena = arena, .path_offsets = offsets};
    int32_t labels[4];
    char **names = NULL;
    int class_count = 0;
    ErrorMessage err = {{0}};
    assert_int_equal(knn_labels_from_folders(&dataset, labels, &names, &class_count, &err), 0);
    assert_int_equal(class_count, 3);
    assert_string_equal(names[0], "a");
    assert_string_equal(names[1], "a-b");
    assert_string_equal(names[2], "b");
    const int32_t expected[] = {1, 0, 0, 2};
    assert_memory_equal(labels, expected, sizeof expected);
    knn_labels_free(names, class_count);

    char loose_arena[] = "a/y.png\0root.png";
    size_t loose_offsets[] = {0, 8};
    Dataset loose = {.root = "data", .count = 2, .path_arena = loose_arena, .path_offsets = loose_offsets};
    expect_error(knn_labels_from_folders(&loose, labels, &names, &class_count, &err), &err,
                 "'root.png' is directly in 'data'");
    assert_null(names);
    assert_int_equal(class_count, 0);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_clusters_are_perfect),
        cmocka_unit_test(test_shuffled_labels_near_chance),
        cmocka_unit_test(test_hand_computed_case),
        cmocka_unit_test(test_matches_brute_force_reference),
        cmocka_unit_test(test_k_clamps),
        cmocka_unit_test(test_errors),
        cmocka_unit_test(test_labels_from_folders),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
