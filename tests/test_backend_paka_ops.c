// DINOv31's backend ops (backend.h): combine_rows (a CSR matrix times rows,
// ROI-align and its backward) and cka_loss (the PaKA loss, lightly's
// PatchKernelAlignmentLoss). Each fast backend against the ref backend:
// combine_rows exactly (one fp32 sum in t order everywhere), also in fp16
// and bf16; cka_loss on awkward shapes (one token, odd sizes, more images
// than the cpu backend holds at once, several kernel tiles, the most
// tokens), padding images of weight 0, a constant student, the same bits on
// every run; the ref backend's gradient against central finite differences
// (also where the clamp of hsic_ss holds); and both backends against
// PyTorch (tests/fixtures/paka_cka.safetensors, tools/make_paka_fixtures.py).
// Runs as a "cpu" and a "cuda" group (tests/backend_mirror.h).
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
#include "backend_mirror.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "nn/safetensors.h"

#define FIXTURE_PATH "tests/fixtures/paka_cka.safetensors"

static int32_t *index_buffer(int n) { return mirror_buffer((size_t)(n ? n : 1) * sizeof(int32_t)); }

// ---- combine_rows ------------------------------------------------------------------------

// A CSR matrix (rows, x_rows) in test buffers.
typedef struct Csr {
    int rows, entries;
    int32_t *row_start, *index;
    float *weight;
} Csr;

// 0 to 4 entries a row (the first and last rows empty when there are three
// or more), repeated columns allowed, weights in [-1, 1).
static Csr make_csr(int rows, int x_rows, uint64_t seed) {
    Csr m = {.rows = rows, .row_start = index_buffer(rows + 1)};
    m.row_start[0] = 0;
    for (int r = 0; r < rows; r++) {
        const int empty = rows >= 3 && (r == 0 || r == rows - 1);
        m.row_start[r + 1] = m.row_start[r] + (empty ? 0 : (r * 7 + 3) % 5);
    }
    m.entries = m.row_start[rows];
    m.index = index_buffer(m.entries);
    for (int r = 0; r < rows; r++)
        for (int t = m.row_start[r]; t < m.row_start[r + 1]; t++)
            m.index[t] = (int32_t)((r * 13 + (t - m.row_start[r]) * 5 + 1) % x_rows);
    m.weight = mirror_random_tensor((size_t)(m.entries ? m.entries : 1), -1, 1, seed);
    return m;
}

// y = m x on backend b; the pointers are host buffers (D and DA for the fast one).
static void combine(Backend *b, const Csr *m, int channels, const float *x, float *y) {
    if (b == ref) {
        ref->op.combine_rows(ref, m->rows, channels, m->row_start, m->index, m->weight,
                             (const Act *)x, (Act *)y);
        return;
    }
    fast->op.combine_rows(fast, m->rows, channels, D(m->row_start), D(m->index), D(m->weight),
                          DA(x), DA(y));
    HA(y);
}

// The same bits as ref in every dtype: empty rows, one channel, channel
// counts that take and refuse the vector loads, several blocks across a row.
static void test_combine_rows(void **state) {
    NEED_FAST_BACKEND();
    const int cases[][3] = {{1, 1, 1}, {9, 5, 3}, {40, 17, 16}, {300, 200, 264}, {33, 7, 12}};
    for (int c = 0; c < 5; c++) {
        const int rows = cases[c][0], x_rows = cases[c][1], channels = cases[c][2];
        const Csr m = make_csr(rows, x_rows, 10 + c);
        const size_t n_y = (size_t)rows * channels;
        const float *x = mirror_random_tensor((size_t)x_rows * channels, -2, 2, 20 + c);
        float *y_ref = mirror_nan_tensor(n_y), *y_fast = mirror_nan_tensor(n_y);
        combine(ref, &m, channels, x, y_ref);
        combine(fast, &m, channels, x, y_fast);
        mirror_expect_close("combine_rows", n_y, y_fast, y_ref, 0, 0);
        for (int r = 0; r < rows; r++)
            if (m.row_start[r] == m.row_start[r + 1])
                for (int k = 0; k < channels; k++) assert_true(y_fast[(size_t)r * channels + k] == 0.0f);
    }
}

// Values worked by hand (exact in every dtype): y0 = x0 / 2 + x2 / 4,
// y1 empty, y2 = x1 - x1 (a repeated column), y3 = 2 x2.
static void test_combine_rows_values(void **state) {
    NEED_FAST_BACKEND();
    const Csr m = {.rows = 4, .entries = 5, .row_start = index_buffer(5), .index = index_buffer(5),
                   .weight = mirror_tensor(5)};
    const int32_t starts[5] = {0, 2, 2, 4, 5}, columns[5] = {0, 2, 1, 1, 2};
    const float weights[5] = {0.5f, 0.25f, 1.0f, -1.0f, 2.0f};
    memcpy(m.row_start, starts, sizeof starts);
    memcpy(m.index, columns, sizeof columns);
    memcpy(m.weight, weights, sizeof weights);
    float *x = mirror_tensor(6);
    const float values[6] = {1, 2, 3, 4, 5, 6};
    memcpy(x, values, sizeof values);
    const float want[8] = {1.75f, 2.5f, 0, 0, 0, 0, 10, 12};
    float *y = mirror_nan_tensor(8);
    combine(ref, &m, 2, x, y);
    mirror_expect_close("combine_rows ref by hand", 8, y, want, 0, 0);
    y = mirror_nan_tensor(8);
    combine(fast, &m, 2, x, y);
    mirror_expect_close("combine_rows by hand", 8, y, want, 0, 0);
    const Csr none = {.rows = 0, .row_start = m.row_start, .index = m.index, .weight = m.weight};
    float *untouched = mirror_nan_tensor(2);
    combine(fast, &none, 2, x, untouched);  // no rows: nothing written
    assert_true(isnan(untouched[0]) && isnan(untouched[1]));
}

// m^T (x_rows, rows), built on the host as the backward's caller does: the
// entries of each column of m in row order.
static Csr transpose_csr(const Csr *m, int x_rows) {
    Csr t = {.rows = x_rows, .entries = m->entries, .row_start = index_buffer(x_rows + 1),
             .index = index_buffer(m->entries), .weight = mirror_tensor((size_t)(m->entries ? m->entries : 1))};
    for (int k = 0; k <= x_rows; k++) t.row_start[k] = 0;
    for (int e = 0; e < m->entries; e++) t.row_start[m->index[e] + 1]++;
    for (int k = 0; k < x_rows; k++) t.row_start[k + 1] += t.row_start[k];
    int32_t *next = malloc((size_t)x_rows * sizeof *next);
    assert_non_null(next);
    memcpy(next, t.row_start, (size_t)x_rows * sizeof *next);
    for (int r = 0; r < m->rows; r++)
        for (int e = m->row_start[r]; e < m->row_start[r + 1]; e++) {
            const int32_t slot = next[m->index[e]]++;
            t.index[slot] = r;
            t.weight[slot] = m->weight[e];
        }
    free(next);
    return t;
}

// ROI-align's backward as combine_rows of the transposed matrix:
// <m x, dy> = <x, m^T dy>, both sides in double on the fast backend's results.
static void test_combine_rows_transposed(void **state) {
    NEED_FAST_BACKEND();
    const int rows = 49, x_rows = 64, channels = 24;
    const Csr m = make_csr(rows, x_rows, 30);
    const Csr mt = transpose_csr(&m, x_rows);
    const size_t n_x = (size_t)x_rows * channels, n_y = (size_t)rows * channels;
    const float *x = mirror_random_tensor(n_x, -1, 1, 31), *dy = mirror_random_tensor(n_y, -1, 1, 32);
    float *y = mirror_nan_tensor(n_y), *dx = mirror_nan_tensor(n_x);
    combine(fast, &m, channels, x, y);
    combine(fast, &mt, channels, dy, dx);
    const double forward = gradcheck_project(n_y, y, dy), backward = gradcheck_project(n_x, x, dx);
    // each side rounds its products once to the activation dtype
    assert_true(fabs(forward - backward) <= mirror_act_tol(1e-5) * (fabs(forward) + 1.0));
    for (int k = 0; k < x_rows; k++)  // columns of m that no row reads get 0
        if (mt.row_start[k] == mt.row_start[k + 1])
            for (int c = 0; c < channels; c++) assert_true(dx[(size_t)k * channels + c] == 0.0f);
}

// ---- cka_loss ----------------------------------------------------------------------------

// One problem: student and teacher (images, tokens, dim), the weights.
typedef struct CkaCase {
    int images, tokens, dim;
    float *student, *teacher, *weight;
} CkaCase;

static CkaCase cka_case(int images, int tokens, int dim, uint64_t seed) {
    const size_t n = (size_t)images * tokens * dim;
    CkaCase c = {images, tokens, dim, mirror_random_tensor(n, -1, 1, seed),
                 mirror_random_tensor(n, -1, 1, seed + 1),
                 mirror_random_tensor((size_t)images, 0.1f, 1, seed + 2)};
    return c;
}

static size_t cka_size(const CkaCase *c) { return (size_t)c->images * c->tokens * c->dim; }

// loss and dstudent (host buffers) of c on backend b.
static void cka_run(Backend *b, const CkaCase *c, float *loss, float *dstudent) {
    if (b == ref) {
        ref->op.cka_loss(ref, c->images, c->tokens, c->dim, c->student, c->teacher, c->weight,
                         loss, dstudent);
        return;
    }
    b->op.cka_loss(b, c->images, c->tokens, c->dim, D(c->student), D(c->teacher), D(c->weight),
                   D(loss), D(dstudent));
    H(loss), H(dstudent);
}

// The fast backend against ref. fp32 dot products (ref: double) move the
// loss by a few 1e-7 of itself; a gradient element is a difference of two
// terms of the size of the largest one, so its error is relative to the
// tensor's scale.
static void expect_cka_close(const char *label, const CkaCase *c) {
    const size_t n = cka_size(c);
    float *loss_ref = mirror_nan_tensor(1), *loss_fast = mirror_nan_tensor(1);
    float *grad_ref = mirror_nan_tensor(n), *grad_fast = mirror_nan_tensor(n);
    cka_run(ref, c, loss_ref, grad_ref);
    cka_run(fast, c, loss_fast, grad_fast);
    double scale = 0.0;
    for (size_t i = 0; i < n; i++) scale = fmax(scale, fabs(grad_ref[i]));
    if (getenv("GRADCHECK_VERBOSE")) {
        double worst = 0.0;
        for (size_t i = 0; i < n; i++) worst = fmax(worst, fabs(grad_fast[i] - grad_ref[i]));
        fprintf(stderr, "%s: loss %.9g vs ref %.9g, gradient |diff| %.3g of scale %.3g\n", label,
                loss_fast[0], loss_ref[0], worst, scale);
    }
    assert_true(isfinite(loss_ref[0]));
    mirror_expect_close(label, 1, loss_fast, loss_ref, 1e-5, 1e-7);
    mirror_expect_close(label, n, grad_fast, grad_ref, 1e-4, 1e-5 * scale);
}

static void test_cka_matches_ref(void **state) {
    NEED_FAST_BACKEND();
    // images, tokens, dim: one token (A = 0, the clamp), three, odd sizes,
    // DINOv31's 49 tokens with an image of weight 0, kernel tiles of 16
    // split unevenly, more images than the cpu backend holds at once (64),
    // more tokens than a block has threads
    const int shapes[][3] = {{2, 1, 3},  {2, 3, 5},  {5, 7, 17}, {3, 49, 32},
                             {2, 17, 40}, {70, 5, 3}, {1, 300, 6}};
    for (int s = 0; s < 7; s++) {
        CkaCase c = cka_case(shapes[s][0], shapes[s][1], shapes[s][2], 100 + 10 * s);
        if (s == 3) c.weight[1] = 0.0f;
        char label[64];
        snprintf(label, sizeof label, "cka_loss %dx%dx%d", c.images, c.tokens, c.dim);
        expect_cka_close(label, &c);
    }
}

// The largest image (CKA_MAX_TOKENS tokens): the cuda backend's scratch
// holds 8 of them, so 9 take two chunks, the running total carried over
// (about a second on the CUDA emulation).
static void test_cka_most_tokens(void **state) {
    NEED_FAST_BACKEND();
    CkaCase c = cka_case(9, CKA_MAX_TOKENS, 3, 200);
    c.weight[4] = 0.0f;
    expect_cka_close("cka_loss 1024 tokens", &c);
}

// Padding images (weight 0) are not read: zero rows and NaN rows alike give
// zero gradient rows and leave the loss of the others as it was.
static void test_cka_weight_zero(void **state) {
    NEED_FAST_BACKEND();
    CkaCase c = cka_case(4, 9, 6, 300);
    const size_t image = (size_t)c.tokens * c.dim, n = cka_size(&c);
    c.weight[1] = c.weight[3] = 0.0f;
    for (size_t e = 0; e < image; e++) {
        c.student[image + e] = c.teacher[image + e] = 0.0f;
        c.student[3 * image + e] = c.teacher[3 * image + e] = NAN;
    }
    // the same loss from images 0 and 2 alone
    CkaCase alone = c;
    alone.images = 2;
    alone.student = mirror_tensor(2 * image), alone.teacher = mirror_tensor(2 * image);
    alone.weight = mirror_tensor(2);
    for (int k = 0; k < 2; k++) {
        memcpy(alone.student + k * image, c.student + 2 * k * image, image * sizeof(float));
        memcpy(alone.teacher + k * image, c.teacher + 2 * k * image, image * sizeof(float));
        alone.weight[k] = c.weight[2 * k];
    }
    Backend *const backends[2] = {ref, fast};
    for (int b = 0; b < 2; b++) {
        float *loss = mirror_nan_tensor(1), *grad = mirror_nan_tensor(n);
        float *loss_alone = mirror_nan_tensor(1), *grad_alone = mirror_nan_tensor(2 * image);
        cka_run(backends[b], &c, loss, grad);
        cka_run(backends[b], &alone, loss_alone, grad_alone);
        assert_true(isfinite(loss[0]));
        mirror_expect_close("cka_loss without the padding", 1, loss, loss_alone, 1e-6, 0);
        for (size_t e = 0; e < image; e++) {
            assert_true(grad[image + e] == 0.0f && grad[3 * image + e] == 0.0f);
            assert_true(grad[e] == grad_alone[e] && grad[2 * image + e] == grad_alone[image + e]);
        }
    }
    // no images: loss 0
    float *none = mirror_nan_tensor(1), *no_grad = mirror_nan_tensor(1);
    const CkaCase empty = {0, 9, 6, c.student, c.teacher, c.weight};
    cka_run(fast, &empty, none, no_grad);
    assert_true(none[0] == 0.0f);
}

// A constant student image: K_s is constant, A = 0, hsic_ss = 0 is below
// the clamp, so cka = 0 (the image's term is its weight) and the gradient
// stays finite. That gradient, -2 weight G Z_s, is 0 (the rows of G sum to
// 0 and Z_s's rows are equal); in fp32 what is left of G's row sums
// (G ~ 1 / na = 1e3 here) times Z_s remains: below 1e-3.
static void test_cka_constant_student(void **state) {
    NEED_FAST_BACKEND();
    CkaCase c = cka_case(2, 12, 7, 400);
    for (int t = 1; t < c.tokens; t++)
        memcpy(c.student + (size_t)t * c.dim, c.student, (size_t)c.dim * sizeof(float));
    const size_t n = cka_size(&c);
    float *loss = mirror_nan_tensor(1), *grad = mirror_nan_tensor(n);
    float *loss_one = mirror_nan_tensor(1), *grad_one = mirror_nan_tensor(n / 2);
    Backend *const backends[2] = {ref, fast};
    for (int b = 0; b < 2; b++) {
        cka_run(backends[b], &c, loss, grad);
        double largest = 0.0;
        for (size_t i = 0; i < n / 2; i++) largest = fmax(largest, fabs(grad[i]));
        if (getenv("GRADCHECK_VERBOSE"))
            fprintf(stderr, "constant student on %s: largest |dstudent| %.3g\n",
                    backends[b]->name, largest);
        assert_true(largest < 1e-3);  // false for NaN
        CkaCase second = {1, c.tokens, c.dim, c.student + n / 2, c.teacher + n / 2, c.weight + 1};
        cka_run(backends[b], &second, loss_one, grad_one);
        // loss = weight 0 (1 - 0) + the second image's term
        assert_true(fabs(loss[0] - (c.weight[0] + loss_one[0])) <= 1e-6);
        mirror_expect_close("constant student, second image", n / 2, grad + n / 2, grad_one, 0, 0);
    }
}

// Two tokens: H K H is a multiple of [[1, -1], [-1, 1]] for every K, so
// A and B are parallel, cka = 1 and the loss and its gradient are 0 (in
// fp32: rounding, far below the gradients of other shapes, ~1e-2).
static void test_cka_two_tokens(void **state) {
    NEED_FAST_BACKEND();
    const CkaCase c = cka_case(3, 2, 5, 700);
    const size_t n = cka_size(&c);
    Backend *const backends[2] = {ref, fast};
    for (int b = 0; b < 2; b++) {
        float *loss = mirror_nan_tensor(1), *grad = mirror_nan_tensor(n);
        cka_run(backends[b], &c, loss, grad);
        assert_true(fabs(loss[0]) < 1e-6);
        for (size_t i = 0; i < n; i++) assert_true(fabs(grad[i]) < 1e-5);
    }
}

// The same bits on every run; on cpu also with one thread (images are
// split across threads, each image's sums in one thread's order).
static void test_cka_deterministic(void **state) {
    NEED_FAST_BACKEND();
    CkaCase c = cka_case(67, 20, 9, 500);
    c.weight[3] = 0.0f;
    const size_t n = cka_size(&c);
    float *loss[2] = {mirror_nan_tensor(1), mirror_nan_tensor(1)};
    float *grad[2] = {mirror_nan_tensor(n), mirror_nan_tensor(n)};
    for (int k = 0; k < 2; k++) cka_run(fast, &c, loss[k], grad[k]);
    assert_memory_equal(loss[0], loss[1], sizeof(float));
    assert_memory_equal(grad[0], grad[1], n * sizeof(float));
    if (strcmp(fast->name, "cpu") != 0) return;
    ErrorMessage err = {{0}};
    Backend *single = backend_create("cpu", 1, &err);
    assert_non_null(single);
    cka_run(single, &c, loss[1], grad[1]);
    backend_destroy(single);
    assert_memory_equal(loss[0], loss[1], sizeof(float));
    assert_memory_equal(grad[0], grad[1], n * sizeof(float));
}

// ---- finite differences on ref -----------------------------------------------------------

typedef struct CkaProblem {
    CkaCase c;
    float *loss, *scratch;
} CkaProblem;

static double cka_problem_loss(void *context, const float *student) {
    CkaProblem *p = context;
    ref->op.cka_loss(ref, p->c.images, p->c.tokens, p->c.dim, student, p->c.teacher, p->c.weight,
                     p->loss, p->scratch);
    return p->loss[0];
}

// dstudent of ref against central differences of its loss (a float: the
// step is large enough that its rounding stays below the tolerance); the
// same check with the gradient 3% off fails, so the tolerance can fail.
static void check_cka_fd(const char *label, CkaProblem *p, float step, double atol) {
    const size_t n = cka_size(&p->c);
    float *grad = mirror_nan_tensor(n);
    cka_run(ref, &p->c, p->loss, grad);
    const GradcheckTolerance tolerance = {.step = step, .rtol = 1e-2, .atol = atol};
    assert_int_equal(gradcheck_compare(label, cka_problem_loss, p, p->c.student, n, grad, tolerance),
                     0);
    float *wrong = mirror_copy(grad, n);
    for (size_t i = 0; i < n; i++) wrong[i] *= 1.03f;
    fprintf(stderr, "  (the next gradcheck is to fail: the gradient 3%% off)\n");
    assert_true(gradcheck_compare(label, cka_problem_loss, p, p->c.student, n, wrong, tolerance) > 0);
}

static void test_cka_backward_fd(void **state) {
    NEED_FAST_BACKEND();
    // three images, one of weight 0 (its gradient 0, as the differences)
    CkaProblem p = {.c = cka_case(3, 6, 4, 600), .loss = mirror_tensor(1)};
    p.c.weight[1] = 0.0f;
    p.scratch = mirror_tensor(cka_size(&p.c));
    check_cka_fd("cka dstudent", &p, 3e-3f, 1e-4);
    // a student 500 times smaller: hsic_ss ~ 1e-8 < CKA_EPS, the clamp holds
    // na constant (no A term); gradients of order 1, steps of the size of the
    // entries' 1e-2
    CkaProblem tiny = {.c = cka_case(1, 6, 4, 610), .loss = mirror_tensor(1)};
    for (size_t i = 0; i < cka_size(&tiny.c); i++) tiny.c.student[i] *= 2e-3f;
    tiny.scratch = mirror_tensor(cka_size(&tiny.c));
    check_cka_fd("cka dstudent (clamped)", &tiny, 2e-5f, 2e-3);
}

// ---- PyTorch -----------------------------------------------------------------------------

static const char *const fixture_cases[] = {"i3_n49_d32", "i4_n7_d5_offset", "i2_n16_d8_aligned",
                                            "i3_n20_d96_zeros"};

// A fixture's F32 tensor (n) into a new test buffer.
static float *fixture_floats(const SafeTensors *file, const char *name, size_t n) {
    float *x = mirror_tensor(n);
    memcpy(x, safetensors_data(file, fixture_find_tensor(file, name, SAFE_F32, (int64_t)n)),
           n * sizeof(float));
    return x;
}

// Both backends against lightly's loss and autograd gradient (float64
// truth): the loss within 1e-5 of itself plus 4 times PyTorch's own float32
// error, the gradient within 4 f32err + 1e-6 of its scale
// (gradcheck_count_outside_truth).
static void test_cka_fixture(void **state) {
    NEED_FAST_BACKEND();
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE_PATH, &file, &err) != 0) fail_msg("%s", err.text);
    for (size_t f = 0; f < sizeof fixture_cases / sizeof fixture_cases[0]; f++) {
        const char *name = fixture_cases[f];
        char key[128];
        snprintf(key, sizeof key, "%s/student", name);
        const SafeTensor *student = safetensors_find(&file, key);
        assert_non_null(student);
        assert_int_equal(student->rank, 3);
        CkaCase c = {.images = (int)student->shape[0], .tokens = (int)student->shape[1],
                     .dim = (int)student->shape[2]};
        const size_t n = cka_size(&c);
        c.student = fixture_floats(&file, key, n);
        snprintf(key, sizeof key, "%s/teacher", name);
        c.teacher = fixture_floats(&file, key, n);
        snprintf(key, sizeof key, "%s/image_weight", name);
        c.weight = fixture_floats(&file, key, (size_t)c.images);
        snprintf(key, sizeof key, "%s/loss", name);
        const double loss_truth = fixture_read_f64(&file, key);
        snprintf(key, sizeof key, "f32err/%s/loss", name);
        const double loss_f32err = fixture_read_f64(&file, key);
        snprintf(key, sizeof key, "%s/grad", name);
        const double *grad_truth =
            safetensors_data(&file, fixture_find_tensor(&file, key, SAFE_F64, (int64_t)n));
        snprintf(key, sizeof key, "f32err/%s/grad", name);
        const double grad_f32err = fixture_read_f64(&file, key);
        Backend *const backends[2] = {ref, fast};
        for (int b = 0; b < 2; b++) {
            float *loss = mirror_nan_tensor(1), *grad = mirror_nan_tensor(n);
            cka_run(backends[b], &c, loss, grad);
            const double error = fabs(loss[0] - loss_truth);
            if (getenv("GRADCHECK_VERBOSE"))
                fprintf(stderr, "%s on %s: loss %.9g, truth %.9g (relative error %.3g)\n", name,
                        backends[b]->name, loss[0], loss_truth, error / fabs(loss_truth));
            if (!(error <= 1e-5 * fabs(loss_truth) + 4 * loss_f32err))
                fail_msg("%s on %s: loss %.9g, truth %.9g", name, backends[b]->name, loss[0],
                         loss_truth);
            snprintf(key, sizeof key, "%s grad on %s", name, backends[b]->name);
            assert_int_equal(gradcheck_count_outside_truth(key, n, grad, grad_truth, grad_f32err),
                             0);
        }
    }
    safetensors_free(&file);
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_combine_rows, mirror_free),
        cmocka_unit_test_teardown(test_combine_rows_values, mirror_free),
        cmocka_unit_test_teardown(test_combine_rows_transposed, mirror_free),
        cmocka_unit_test_teardown(test_cka_matches_ref, mirror_free),
        cmocka_unit_test_teardown(test_cka_most_tokens, mirror_free),
        cmocka_unit_test_teardown(test_cka_weight_zero, mirror_free),
        cmocka_unit_test_teardown(test_cka_constant_student, mirror_free),
        cmocka_unit_test_teardown(test_cka_two_tokens, mirror_free),
        cmocka_unit_test_teardown(test_cka_deterministic, mirror_free),
        cmocka_unit_test_teardown(test_cka_backward_fd, mirror_free),
        cmocka_unit_test_teardown(test_cka_fixture, mirror_free),
    };
    // combine_rows again with cuda storing fp16 / bf16 (one rounding of the
    // same fp32 sum: exact against ref in the same dtype)
    const struct CMUnitTest act_tests[] = {
        cmocka_unit_test_teardown(test_combine_rows, mirror_free),
        cmocka_unit_test_teardown(test_combine_rows_values, mirror_free),
        cmocka_unit_test_teardown(test_combine_rows_transposed, mirror_free),
    };
    return mirror_run_groups(tests, sizeof tests / sizeof tests[0]) +
           mirror_run_16bit_groups(act_tests, sizeof act_tests / sizeof act_tests[0]);
}
