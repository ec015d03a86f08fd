// DINOv2's loss (src/ssl_methods/dinov2_loss.c) against PyTorch: the
// fixtures of tools/make_dinov2_fixtures.py (LightlyTrain's DINO + iBOT +
// KoLeo code written out, softmax and Sinkhorn-Knopp centring, no local
// views, two steps with the centers carried over) on the ref and cpu
// backends: every loss term, every student gradient and both centers
// within |ours - torch float64| <= 1e-5 + 1e-5 |torch|, also with padding
// rows after the masked patches (weight and validity 0, random outputs:
// their gradient rows exactly zero). Also the argument checks. Both
// backends keep host memory: fixture data goes to ops directly.
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
#include "backend_fixture.h"
#include "fixture_tensors.h"
#include "gradcheck.h"
#include "nn/safetensors.h"
#include "ssl_methods/dinov2_loss.h"
#include "thread_comm.h"

#define FIXTURE_PATH "tests/fixtures/dinov2_loss.safetensors"
#define TOLERANCE 1e-5

static const char *const fixture_cases[] = {
    "b3_l2_k17_d8_p6_softmax", "b3_l2_k17_d8_p6_sk", "b4_l0_k9_d5_p4_softmax",
    "b2_l3_k33_d12_p9_sk",
};

static double worst_error;  // the largest |ours - truth| seen, for the report

// The patch rows a caller pads (dinov2.c): `masked` rows of teacher and
// student outputs (K each) and their weights, then `pad` rows of random
// outputs in [-3, 3] with weight 0; valid 1 then 0; inv_total 1 / total.
typedef struct PatchRows {
    int rows;
    float *teacher, *student, *weights, *valid, inv_total;
} PatchRows;

static PatchRows patch_rows_pad(const float *teacher, const float *student,
                                const float *weights, int masked, int pad, int k, int total,
                                uint64_t seed) {
    PatchRows p = {.rows = masked + pad, .inv_total = total ? 1.0f / (float)total : 0.0f};
    const size_t n = (size_t)p.rows * k + 1;
    p.teacher = malloc(n * sizeof(float)), p.student = malloc(n * sizeof(float));
    p.weights = malloc((size_t)(p.rows + 1) * sizeof(float));
    p.valid = malloc((size_t)(p.rows + 1) * sizeof(float));
    assert_true(p.teacher && p.student && p.weights && p.valid);
    memcpy(p.teacher, teacher, (size_t)masked * k * sizeof(float));
    memcpy(p.student, student, (size_t)masked * k * sizeof(float));
    memcpy(p.weights, weights, (size_t)masked * sizeof(float));
    gradcheck_fill_uniform(p.teacher + (size_t)masked * k, (size_t)pad * k, -3, 3, seed);
    gradcheck_fill_uniform(p.student + (size_t)masked * k, (size_t)pad * k, -3, 3, seed + 1);
    for (int r = 0; r < p.rows; r++) {
        p.valid[r] = r < masked ? 1.0f : 0.0f;
        if (r >= masked) p.weights[r] = 0.0f;
    }
    return p;
}

static void patch_rows_free(PatchRows *p) {
    free(p->teacher), free(p->student), free(p->weights), free(p->valid);
}

// The padding rows' gradients: exactly zero.
static void expect_zero_rows(const char *label, const float *grad, int masked, int rows, int k) {
    for (size_t i = (size_t)masked * k; i < (size_t)rows * k; i++)
        if (grad[i] != 0.0f) fail_msg("%s: padding gradient [%zu] = %g", label, i, grad[i]);
}

// A copy of the F32 tensor `key` with n elements (NULL-safe for n = 0).
static float *read_f32(const SafeTensors *file, const char *key, size_t n) {
    float *x = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(x);
    memcpy(x, safetensors_data(file, fixture_find_tensor(file, key, SAFE_F32, (int64_t)n)),
           n * sizeof(float));
    return x;
}

static void check_against(const SafeTensors *file, const char *label, const char *key, size_t n,
                          const float *ours) {
    const double *data = safetensors_data(file, fixture_find_tensor(file, key, SAFE_F64, (int64_t)n));
    float *truth = malloc((n ? n : 1) * sizeof(float));
    assert_non_null(truth);
    for (size_t i = 0; i < n; i++) {
        double value;
        memcpy(&value, data + i, sizeof value);
        truth[i] = (float)value;
        const double error = fabs((double)ours[i] - value);
        if (error > worst_error) worst_error = error;
    }
    char text[256];
    snprintf(text, sizeof text, "%s %s", label, key);
    assert_int_equal(gradcheck_count_mismatches(text, n, ours, truth, TOLERANCE, TOLERANCE), 0);
    free(truth);
}

static void check_case(Backend *backend, const SafeTensors *file, const char *name, int pad) {
    char key[160];
    snprintf(key, sizeof key, "%s/config", name);
    float *config = read_f32(file, key, 11);
    const int batch = (int)config[0], local = (int)config[1], k = (int)config[2];
    const int dim = (int)config[3], patches = (int)config[4];
    const Dinov2LossConfig loss_config = {
        .max_batch = batch + 2,  // capacity above the batch must not matter
        .local_views = local,
        .max_masked = 2 * batch * patches + pad,
        .out_dim = k,
        .feature_dim = dim,
        .student_temp = config[5],
        .center_momentum = config[6],
        .centering = config[7] != 0.0f ? DINOV2_CENTER_SINKHORN_KNOPP : DINOV2_CENTER_SOFTMAX,
        .dino_weight = config[8],
        .ibot_weight = config[9],
        .koleo_weight = config[10],
    };
    ErrorMessage err = {{0}};
    Dinov2Loss *loss = dinov2_loss_create(backend, &loss_config, NULL, &err);
    if (!loss) fail_msg("dinov2_loss_create: %s", err.text);
    const size_t cls_rows = (size_t)(2 + local) * batch, global_rows = 2 * (size_t)batch;
    for (int step = 1; step <= 2; step++) {
        snprintf(key, sizeof key, "%s/%d/masks", name, step);
        float *masks = read_f32(file, key, global_rows * patches);
        int masked = 0;
        for (size_t i = 0; i < global_rows * patches; i++) masked += masks[i] != 0.0f;
        char base[128];
        snprintf(base, sizeof base, "%s/%d", name, step);
#define INPUT(field, n) (snprintf(key, sizeof key, "%s/" #field, base), read_f32(file, key, (n)))
        float *teacher_cls = INPUT(teacher_cls, global_rows * k);
        float *student_cls = INPUT(student_cls, cls_rows * k);
        float *features = INPUT(student_features, global_rows * dim);
        float *teacher_patches = INPUT(teacher_patches, (size_t)masked * k);
        float *student_patches = INPUT(student_patches, (size_t)masked * k);
        float *weights = INPUT(patch_weights, (size_t)masked);
#undef INPUT
        snprintf(key, sizeof key, "%s/teacher_temp", base);
        PatchRows rows = patch_rows_pad(teacher_patches, student_patches, weights, masked, pad,
                                        k, masked, (uint64_t)(10 * step + pad));
        const Dinov2LossInputs inputs = {
            .batch = batch, .patch_rows = rows.rows, .masked = masked, .masked_total = masked,
            .teacher_cls = teacher_cls, .student_cls = student_cls,
            .teacher_patches = rows.teacher, .student_patches = rows.student,
            .patch_weights = rows.weights, .patch_valid = rows.valid,
            .inv_masked_total = &rows.inv_total, .student_features = features,
            .teacher_temp = fixture_read_f32(file, key)};
        float terms[DINOV2_TERMS];  // backend memory: host memory on ref and cpu
        if (dinov2_loss_forward(loss, &inputs, terms, &err)) fail_msg("%s", err.text);
        float *grad_cls = malloc(cls_rows * k * sizeof(float));
        float *grad_patches = malloc(((size_t)rows.rows * k + 1) * sizeof(float));
        float *grad_features = malloc(global_rows * dim * sizeof(float));
        assert_true(grad_cls && grad_patches && grad_features);
        dinov2_loss_backward(loss, grad_cls, grad_patches, grad_features);
        dinov2_loss_update_centers(loss);

        // dino_global, dino_local, ibot, koleo, total: the fixture's order
        _Static_assert(DINOV2_TERMS == 5, "the fixture's five terms");
        snprintf(key, sizeof key, "%s/terms", base);
        check_against(file, backend->name, key, DINOV2_TERMS, terms);
        snprintf(key, sizeof key, "%s/grad_cls", base);
        check_against(file, backend->name, key, cls_rows * k, grad_cls);
        snprintf(key, sizeof key, "%s/grad_patches", base);
        check_against(file, backend->name, key, (size_t)masked * k, grad_patches);
        expect_zero_rows(key, grad_patches, masked, rows.rows, k);
        snprintf(key, sizeof key, "%s/grad_features", base);
        check_against(file, backend->name, key, global_rows * dim, grad_features);
        if (loss_config.centering == DINOV2_CENTER_SOFTMAX) {
            snprintf(key, sizeof key, "%s/cls_center", base);
            check_against(file, backend->name, key, (size_t)k, dinov2_loss_cls_center(loss));
            snprintf(key, sizeof key, "%s/patch_center", base);
            check_against(file, backend->name, key, (size_t)k, dinov2_loss_patch_center(loss));
        }
        float *buffers[] = {masks, teacher_cls, student_cls, features, teacher_patches,
                            student_patches, weights, grad_cls, grad_patches, grad_features};
        for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
        patch_rows_free(&rows);
    }
    dinov2_loss_destroy(loss);
    free(config);
}

static void test_matches_pytorch(void **state) {
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE_PATH, &file, &err) != 0) fail_msg("%s", err.text);
    for (size_t c = 0; c < sizeof fixture_cases / sizeof fixture_cases[0]; c++)
        for (int pad = 0; pad <= 3; pad += 3) {
            worst_error = 0.0;
            check_case(fixture_ref, &file, fixture_cases[c], pad);
            fprintf(stderr, "  %s, %d padding rows, ref: max |ours - torch float64| %.3g\n",
                    fixture_cases[c], pad, worst_error);
            worst_error = 0.0;
            check_case(fixture_cpu, &file, fixture_cases[c], pad);
            fprintf(stderr, "  %s, %d padding rows, cpu: max |ours - torch float64| %.3g\n",
                    fixture_cases[c], pad, worst_error);
        }
    safetensors_free(&file);
}

static void test_rejects_bad_arguments(void **state) {
    ErrorMessage err = {{0}};
    Dinov2LossConfig config = {.max_batch = 4, .local_views = 2, .max_masked = 10, .out_dim = 8,
                               .feature_dim = 4, .student_temp = 0.1f, .center_momentum = 0.9f,
                               .dino_weight = 1, .ibot_weight = 1, .koleo_weight = 0.1f};
    Dinov2LossConfig bad = config;
    bad.max_batch = 1;  // KoLeo needs a neighbour
    assert_null(dinov2_loss_create(fixture_ref, &bad, NULL, &err));
    assert_non_null(strstr(err.text, "batch"));
    bad = config;
    bad.student_temp = 0.0f;
    assert_null(dinov2_loss_create(fixture_ref, &bad, NULL, &err));
    assert_non_null(strstr(err.text, "student_temp"));
    Dinov2Loss *loss = dinov2_loss_create(fixture_ref, &config, NULL, &err);
    assert_non_null(loss);
    Dinov2LossInputs inputs = {.batch = 4, .patch_rows = 11, .teacher_temp = 0.04f};
    float terms[DINOV2_TERMS];
    assert_int_equal(dinov2_loss_forward(loss, &inputs, terms, &err), -1);  // too many rows
    assert_non_null(strstr(err.text, "in 11 rows (0..10)"));
    inputs.patch_rows = 3, inputs.masked = 4, inputs.masked_total = 4;  // more than the rows
    assert_int_equal(dinov2_loss_forward(loss, &inputs, terms, &err), -1);
    assert_non_null(strstr(err.text, "4 masked patches in 3 rows"));
    inputs.masked = 3, inputs.masked_total = 2;  // fewer over the ranks than here
    assert_int_equal(dinov2_loss_forward(loss, &inputs, terms, &err), -1);
    assert_non_null(strstr(err.text, "2 over the ranks"));
    inputs.masked = 0, inputs.patch_rows = 0;
    inputs.teacher_temp = 0.0f;
    assert_int_equal(dinov2_loss_forward(loss, &inputs, terms, &err), -1);
    assert_non_null(strstr(err.text, "temperature"));
    dinov2_loss_destroy(loss);
    Dinov2Centering centering;
    assert_int_equal(dinov2_centering_parse("sinkhorn_knopp", &centering, &err), 0);
    assert_int_equal(centering, DINOV2_CENTER_SINKHORN_KNOPP);
    assert_int_equal(dinov2_centering_parse("sinkhorn", &centering, &err), -1);
    assert_non_null(strstr(err.text, "softmax or sinkhorn_knopp"));
}

// ---- ranks -----------------------------------------------------------------------------
// Sinkhorn-Knopp centring over W = 2 and 3 ranks (threads with
// tests/thread_comm.h) against one process with the concatenated batch:
// the ranks' mean terms equal the whole batch's terms, each rank's
// gradients are W times its rows of the whole batch's (the gradient of the
// mean loss before the ranks' gradients are averaged). With 3 ranks rank 1
// has no masked patches and still takes part in the patches' assignment. KoLeo is
// per rank (DINOv2's too), so its weight is 0 here. Everything is fp32 with
// double sums; the ranks only split the column sums one process adds in one
// go: measured at most 1.7e-7 of the largest value, bound
// |a - b| <= RANKS_RTOL (|b| + max |b|). Every run pads its patch rows
// with RANKS_PAD rows (rank 1 of 3: padding only).

#define RANKS_PER_RANK_BATCH 3
#define RANKS_LOCAL 2
#define RANKS_K 40
#define RANKS_DIM 6
#define RANKS_RTOL 1e-5
#define RANKS_VIEWS (2 + RANKS_LOCAL)
#define RANKS_PAD 2

typedef struct RanksCase {
    const char *backend_name;
    int world, batch;         // batch: images of this run (per rank, or W x for the whole)
    int first_patch, masked;  // this run's masked patches in the whole list
    int masked_total;         // over all ranks
    Dinov2Centering centering;
    const float *teacher_cls, *student_cls, *features;  // the whole batch's (view-major)
    const float *teacher_patches, *student_patches, *weights;
    int whole_batch;
    int image0;               // this run's first image within each view
    float terms[DINOV2_TERMS];
    float *grad_cls, *grad_patches;  // this run's rows
    float cls_center[RANKS_K], patch_center[RANKS_K];  // after update_centers (softmax)
} RanksCase;

// rows [image0, image0 + batch) of each of `views` view blocks of whole_batch rows
static float *view_rows(const float *whole, int views, int whole_batch, int image0, int batch,
                        int width) {
    float *rows = malloc((size_t)views * batch * width * sizeof(float));
    assert_non_null(rows);
    for (int v = 0; v < views; v++)
        memcpy(rows + (size_t)v * batch * width,
               whole + ((size_t)v * whole_batch + image0) * width,
               (size_t)batch * width * sizeof(float));
    return rows;
}

static void ranks_run(RanksCase *c, Communicator *comm) {
    ErrorMessage err = {{0}};
    Backend *backend = backend_create(c->backend_name, 1, &err);
    if (!backend) fail_msg("backend %s: %s", c->backend_name, err.text);
    const Dinov2LossConfig config = {
        .max_batch = c->batch, .local_views = RANKS_LOCAL, .max_masked = 32 + RANKS_PAD,
        .out_dim = RANKS_K, .feature_dim = RANKS_DIM, .student_temp = 0.1f,
        .center_momentum = 0.9f, .centering = c->centering,
        .dino_weight = 1.0f, .ibot_weight = 1.0f, .koleo_weight = 0.0f};
    Dinov2Loss *loss = dinov2_loss_create(backend, &config, comm, &err);
    if (!loss) fail_msg("dinov2_loss_create: %s", err.text);
    float *teacher = view_rows(c->teacher_cls, 2, c->whole_batch, c->image0, c->batch, RANKS_K);
    float *student = view_rows(c->student_cls, RANKS_VIEWS, c->whole_batch, c->image0, c->batch,
                               RANKS_K);
    float *features = view_rows(c->features, 2, c->whole_batch, c->image0, c->batch, RANKS_DIM);
    const size_t patch0 = (size_t)c->first_patch * RANKS_K;
    PatchRows rows = patch_rows_pad(c->teacher_patches + patch0, c->student_patches + patch0,
                                    c->weights + c->first_patch, c->masked, RANKS_PAD, RANKS_K,
                                    c->masked_total, (uint64_t)(100 + c->image0));
    const Dinov2LossInputs inputs = {
        .batch = c->batch, .patch_rows = rows.rows, .masked = c->masked,
        .masked_total = c->masked_total, .teacher_cls = teacher, .student_cls = student,
        .teacher_patches = rows.teacher, .student_patches = rows.student,
        .patch_weights = rows.weights, .patch_valid = rows.valid,
        .inv_masked_total = &rows.inv_total, .student_features = features,
        .teacher_temp = 0.07f};
    if (dinov2_loss_forward(loss, &inputs, c->terms, &err)) fail_msg("%s", err.text);
    float *grad_features = malloc((size_t)2 * c->batch * RANKS_DIM * sizeof(float));
    assert_non_null(grad_features);
    float *grad_rows = malloc((size_t)rows.rows * RANKS_K * sizeof(float));
    assert_non_null(grad_rows);
    dinov2_loss_backward(loss, c->grad_cls, grad_rows, grad_features);
    memcpy(c->grad_patches, grad_rows, (size_t)c->masked * RANKS_K * sizeof(float));
    expect_zero_rows("ranks' grad_patches", grad_rows, c->masked, rows.rows, RANKS_K);
    dinov2_loss_update_centers(loss);
    free(grad_rows);
    patch_rows_free(&rows);
    backend->op.download(backend, c->cls_center, dinov2_loss_cls_center(loss),
                         sizeof c->cls_center);
    backend->op.download(backend, c->patch_center, dinov2_loss_patch_center(loss),
                         sizeof c->patch_center);
    free(grad_features);
    free(teacher);
    free(student);
    free(features);
    dinov2_loss_destroy(loss);
    backend_destroy(backend);
}

static void ranks_body(Communicator *comm, void *context) { ranks_run(context, comm); }

static double ranks_worst;  // the largest |a - b| / max |b| seen, for the report

// got (n) against scale x want (n): see RANKS_RTOL.
static void ranks_expect(const char *what, size_t n, const float *got, const float *want,
                         double scale) {
    double largest = 0.0;
    for (size_t i = 0; i < n; i++) largest = fmax(largest, fabs(scale * want[i]));
    for (size_t i = 0; i < n; i++) {
        const double expected = scale * want[i], error = fabs(got[i] - expected);
        if (largest > 0 && error / largest > ranks_worst) ranks_worst = error / largest;
        if (error > RANKS_RTOL * (fabs(expected) + largest))
            fail_msg("%s[%zu] = %.9g, expected %.9g", what, i, got[i], expected);
    }
}

static void check_ranks(const char *backend_name, int world, Dinov2Centering centering) {
    const int b = RANKS_PER_RANK_BATCH, whole_batch = world * b;
    // masked patches per rank: with 3 ranks rank 1 has none
    const int counts[3] = {5, world == 3 ? 0 : 4, 7};
    int total = 0;
    for (int r = 0; r < world; r++) total += counts[r];
    float *teacher_cls = malloc((size_t)2 * whole_batch * RANKS_K * sizeof(float));
    float *student_cls = malloc((size_t)RANKS_VIEWS * whole_batch * RANKS_K * sizeof(float));
    float *features = malloc((size_t)2 * whole_batch * RANKS_DIM * sizeof(float));
    float *teacher_patches = malloc((size_t)total * RANKS_K * sizeof(float));
    float *student_patches = malloc((size_t)total * RANKS_K * sizeof(float));
    float *weights = malloc((size_t)total * sizeof(float));
    assert_true(teacher_cls && student_cls && features && teacher_patches && student_patches &&
                weights);
    gradcheck_fill_uniform(teacher_cls, (size_t)2 * whole_batch * RANKS_K, -1, 1, 1);
    gradcheck_fill_uniform(student_cls, (size_t)RANKS_VIEWS * whole_batch * RANKS_K, -1, 1, 2);
    gradcheck_fill_uniform(features, (size_t)2 * whole_batch * RANKS_DIM, -1, 1, 3);
    gradcheck_fill_uniform(teacher_patches, (size_t)total * RANKS_K, -1, 1, 4);
    gradcheck_fill_uniform(student_patches, (size_t)total * RANKS_K, -1, 1, 5);
    gradcheck_fill_uniform(weights, (size_t)total, 0.1f, 1, 6);
    const RanksCase base = {
        .backend_name = backend_name, .world = world, .teacher_cls = teacher_cls,
        .student_cls = student_cls, .features = features, .teacher_patches = teacher_patches,
        .student_patches = student_patches, .weights = weights, .whole_batch = whole_batch,
        .masked_total = total, .centering = centering};
    RanksCase whole = base;
    whole.batch = whole_batch, whole.masked = total;
    const size_t cls_n = (size_t)RANKS_VIEWS * whole_batch * RANKS_K;
    whole.grad_cls = malloc(cls_n * sizeof(float));
    whole.grad_patches = malloc(((size_t)total * RANKS_K + 1) * sizeof(float));
    ranks_run(&whole, NULL);

    RanksCase ranks[3];
    void *contexts[3];
    for (int r = 0, first = 0; r < world; first += counts[r], r++) {
        ranks[r] = base;
        ranks[r].batch = b, ranks[r].image0 = r * b;
        ranks[r].first_patch = first, ranks[r].masked = counts[r];
        ranks[r].grad_cls = malloc((size_t)RANKS_VIEWS * b * RANKS_K * sizeof(float));
        ranks[r].grad_patches = malloc(((size_t)counts[r] * RANKS_K + 1) * sizeof(float));
        contexts[r] = &ranks[r];
    }
    thread_comm_run(world, ranks_body, contexts);

    float mean[DINOV2_TERMS] = {0};
    for (int t = 0; t < DINOV2_TERMS; t++)
        for (int r = 0; r < world; r++) mean[t] += ranks[r].terms[t] / (float)world;
    _Static_assert(DINOV2_TERM_IBOT == 2 && DINOV2_TERM_KOLEO == 3, "the terms compared");
    ranks_expect("mean dino + ibot terms", 3, mean, whole.terms, 1.0);
    ranks_expect("mean total", 1, mean + DINOV2_TERM_TOTAL, whole.terms + DINOV2_TERM_TOTAL, 1.0);
    char what[64];
    for (int r = 0; r < world; r++) {
        for (int v = 0; v < RANKS_VIEWS; v++) {
            snprintf(what, sizeof what, "rank %d grad_cls view %d", r, v);
            ranks_expect(what, (size_t)b * RANKS_K, ranks[r].grad_cls + (size_t)v * b * RANKS_K,
                         whole.grad_cls + ((size_t)v * whole_batch + r * b) * RANKS_K, world);
        }
        snprintf(what, sizeof what, "rank %d grad_patches", r);
        ranks_expect(what, (size_t)counts[r] * RANKS_K, ranks[r].grad_patches,
                     whole.grad_patches + (size_t)ranks[r].first_patch * RANKS_K, world);
    }
    // Softmax centring: the centers after the update are the whole batch's
    // on every rank (the patch center from the ranks' summed patches over
    // the global count, with 3 ranks rank 1 contributing none).
    for (int r = 0; r < world && centering == DINOV2_CENTER_SOFTMAX; r++) {
        snprintf(what, sizeof what, "rank %d cls center", r);
        ranks_expect(what, RANKS_K, ranks[r].cls_center, whole.cls_center, 1.0);
        snprintf(what, sizeof what, "rank %d patch center", r);
        ranks_expect(what, RANKS_K, ranks[r].patch_center, whole.patch_center, 1.0);
    }
    // Not vacuous: rank 0 alone assigns its rows otherwise.
    RanksCase alone = ranks[0];
    alone.grad_cls = malloc((size_t)RANKS_VIEWS * b * RANKS_K * sizeof(float));
    alone.grad_patches = malloc(((size_t)counts[0] * RANKS_K + 1) * sizeof(float));
    alone.masked_total = counts[0];
    ranks_run(&alone, NULL);
    double cls_difference = 0.0, patch_difference = 0.0;
    for (size_t i = 0; i < (size_t)2 * b * RANKS_K; i++)  // the global views' student rows
        cls_difference = fmax(cls_difference, fabs(alone.grad_cls[i] - ranks[0].grad_cls[i]));
    for (size_t i = 0; i < (size_t)counts[0] * RANKS_K; i++)
        patch_difference =
            fmax(patch_difference, fabs(alone.grad_patches[i] - ranks[0].grad_patches[i]));
    fprintf(stderr, "  %s, %d ranks: largest |ranks - one process| / max %.3g; rank 0 alone "
                    "differs by %.3g (class tokens), %.3g (patches)\n",
            backend_name, world, ranks_worst, cls_difference, patch_difference);
    if (centering == DINOV2_CENTER_SINKHORN_KNOPP)
        assert_true(cls_difference > 1e-3 && patch_difference > 1e-3);
    else {  // softmax targets are per row: what differs alone is the patch center
        double center_difference = 0.0;
        for (int i = 0; i < RANKS_K; i++)
            center_difference =
                fmax(center_difference, fabs(alone.patch_center[i] - whole.patch_center[i]));
        fprintf(stderr, "  alone, the patch center differs by %.3g\n", center_difference);
        assert_true(center_difference > 1e-4);
    }
    free(alone.grad_cls);
    free(alone.grad_patches);
    for (int r = 0; r < world; r++) free(ranks[r].grad_cls), free(ranks[r].grad_patches);
    free(whole.grad_cls);
    free(whole.grad_patches);
    float *buffers[] = {teacher_cls, student_cls, features, teacher_patches, student_patches,
                        weights};
    for (size_t i = 0; i < sizeof buffers / sizeof buffers[0]; i++) free(buffers[i]);
}

static void test_ranks_equal_whole_batch(void **state) {
    const char *const names[] = {"ref", "cpu"};
    const Dinov2Centering centerings[] = {DINOV2_CENTER_SINKHORN_KNOPP, DINOV2_CENTER_SOFTMAX};
    for (int n = 0; n < 2; n++)
        for (int world = 2; world <= 3; world++)
            for (int c = 0; c < 2; c++) {
                ranks_worst = 0.0;
                check_ranks(names[n], world, centerings[c]);
            }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_matches_pytorch),
        cmocka_unit_test(test_rejects_bad_arguments),
        cmocka_unit_test(test_ranks_equal_whole_batch),
    };
    return cmocka_run_group_tests(tests, fixture_backends_create, fixture_backends_destroy);
}
