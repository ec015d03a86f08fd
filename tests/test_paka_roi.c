// The PaKA view alignment (src/ssl_methods/paka_roi.h) against LightlyTrain
// 0.18's DINOv31 (_align_cross_view_pair over torchvision's roi_align):
// the fixtures of tools/make_paka_roi_fixtures.py (crops inside, partly
// overlapping and not overlapping, flipped, a 37 x 37 teacher grid). Each
// aligned token is rebuilt from our taps and the fixture's tokens and must
// match within 1e-5 + 1e-5 |value|; the overlap flag must match. Also the
// tap bound, and a cell whose samples all fall outside.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "fixture_tensors.h"
#include "nn/safetensors.h"
#include "ssl_methods/paka_roi.h"

#define FIXTURE_PATH "tests/fixtures/paka_roi.safetensors"
#define TOLERANCE 1e-5

static const char *const fixture_cases[] = {"inside", "flipped", "partial", "large_teacher"};

static const float *tensor_f32(const SafeTensors *file, const char *c, const char *key,
                               int64_t n) {
    char name[128];
    snprintf(name, sizeof name, "%s/%s", c, key);
    return safetensors_data(file, fixture_find_tensor(file, name, SAFE_F32, n));
}

static ViewGeometry geometry_of(const float *g) {
    return (ViewGeometry){{(int)g[0], (int)g[1], (int)(g[2] - g[0]), (int)(g[3] - g[1])},
                          (int)g[4], (int)g[5], g[6] > 0.5f};
}

// One side of a pair: every output cell rebuilt from the taps and compared.
static void check_side(const char *label, PakaBox box, int grid, int out, int flip, int channels,
                       const float *tokens, const float *expected) {
    int32_t index[PAKA_ROI_MAX_TAPS];
    float weight[PAKA_ROI_MAX_TAPS];
    const int bound = paka_roi_cell_bound(grid, grid, out, out);
    for (int cell = 0; cell < out * out; cell++) {
        const int count = paka_roi_cell(box, grid, grid, out, out, cell / out, cell % out, flip,
                                        index, weight);
        assert_true(count >= 0 && count <= bound);
        for (int c = 0; c < channels; c++) {
            double value = 0.0;
            for (int t = 0; t < count; t++) {
                assert_true(index[t] >= 0 && index[t] < grid * grid);
                value += (double)weight[t] * tokens[(size_t)index[t] * channels + c];
            }
            const double truth = expected[(size_t)cell * channels + c];
            if (fabs(value - truth) > TOLERANCE + TOLERANCE * fabs(truth))
                fail_msg("%s cell %d channel %d: %.8g, LightlyTrain %.8g", label, cell, c, value,
                         truth);
        }
    }
}

static void test_against_lightly_train(void **state) {
    (void)state;
    SafeTensors file;
    ErrorMessage err = {{0}};
    if (safetensors_read(FIXTURE_PATH, &file, &err) != 0) fail_msg("%s", err.text);
    for (size_t k = 0; k < sizeof fixture_cases / sizeof fixture_cases[0]; k++) {
        const char *c = fixture_cases[k];
        char name[128];
        snprintf(name, sizeof name, "%s/config", c);
        const int64_t *config = safetensors_data(&file, fixture_find_tensor(&file, name,
                                                                            SAFE_I64, 6));
        const int s_grid = (int)config[0], t_grid = (int)config[1], channels = (int)config[2];
        const int pairs = (int)config[3];
        const int64_t s_cells = (int64_t)s_grid * s_grid, t_cells = (int64_t)t_grid * t_grid;
        const float *s_geom = tensor_f32(&file, c, "student_geom", pairs * 8);
        const float *t_geom = tensor_f32(&file, c, "teacher_geom", pairs * 8);
        const float *s_tokens = tensor_f32(&file, c, "student_tokens", pairs * s_cells * channels);
        const float *t_tokens = tensor_f32(&file, c, "teacher_tokens", pairs * t_cells * channels);
        const float *s_aligned = tensor_f32(&file, c, "student_aligned",
                                            pairs * s_cells * channels);
        const float *t_aligned = tensor_f32(&file, c, "teacher_aligned",
                                            pairs * s_cells * channels);
        const float *valid = tensor_f32(&file, c, "valid", pairs);
        for (int p = 0; p < pairs; p++) {
            const ViewGeometry student = geometry_of(s_geom + 8 * p);
            const ViewGeometry teacher = geometry_of(t_geom + 8 * p);
            const PakaBox s_crop = paka_crop_box(&student), t_crop = paka_crop_box(&teacher);
            PakaBox region;
            const int overlap = paka_shared_region(s_crop, t_crop, s_grid, s_grid, &region);
            assert_int_equal(overlap, valid[p] > 0.5f);
            char label[160];
            snprintf(label, sizeof label, "%s pair %d student", c, p);
            check_side(label, paka_grid_box(s_crop, region, s_grid, s_grid), s_grid, s_grid,
                       student.flip, channels, s_tokens + (size_t)p * s_cells * channels,
                       s_aligned + (size_t)p * s_cells * channels);
            snprintf(label, sizeof label, "%s pair %d teacher", c, p);
            check_side(label, paka_grid_box(t_crop, region, t_grid, t_grid), t_grid, s_grid,
                       teacher.flip, channels, t_tokens + (size_t)p * t_cells * channels,
                       t_aligned + (size_t)p * s_cells * channels);
        }
    }
    safetensors_free(&file);
}

// Bounds: a 16 x 16 grid onto 7 x 7 touches at most 5 x 5 cells a bin, a
// 7 x 7 grid onto itself 2 x 2; a grid too large for the tap buffer is refused.
static void test_bounds(void **state) {
    (void)state;
    assert_int_equal(paka_roi_cell_bound(16, 16, 7, 7), 25);
    assert_int_equal(paka_roi_cell_bound(7, 7, 7, 7), 4);
    assert_true(paka_roi_cell_bound(200, 200, 7, 7) > PAKA_ROI_MAX_TAPS);
    int32_t index[PAKA_ROI_MAX_TAPS];
    float weight[PAKA_ROI_MAX_TAPS];
    assert_int_equal(paka_roi_cell((PakaBox){0, 0, 200, 200}, 200, 200, 7, 7, 0, 0, 0, index,
                                   weight),
                     -1);
    // a box of no size: no samples, no taps (torchvision gives 0)
    assert_int_equal(paka_roi_cell((PakaBox){3, 3, 3, 3}, 7, 7, 7, 7, 2, 2, 0, index, weight),
                     0);
    // a whole-grid box onto the same grid: each cell is itself, weight 1
    for (int cell = 0; cell < 49; cell++) {
        const int count = paka_roi_cell((PakaBox){0, 0, 7, 7}, 7, 7, 7, 7, cell / 7, cell % 7, 1,
                                        index, weight);
        assert_int_equal(count, 1);
        assert_int_equal(index[0], cell / 7 * 7 + 6 - cell % 7);  // mirrored
        assert_float_equal(weight[0], 1.0f, 1e-6);
    }
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_against_lightly_train),
        cmocka_unit_test(test_bounds),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
