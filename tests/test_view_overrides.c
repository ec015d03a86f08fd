// Tests of view_set_override: parameters set by name for all views or a
// scope (global, local, view<N>), and errors naming the bad key, scope or
// value.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <string.h>

#include "augment/augment.h"

static void test_override_every_view(void **state) {
    (void)state;
    ViewSet set;
    view_set_simclr(&set, 224);
    assert_int_equal(view_set_override(&set, "blur_p=0.25", NULL), 0);
    assert_int_equal(view_set_override(&set, "scale_min=0.2", NULL), 0);
    for (int v = 0; v < set.count; v++) {
        assert_float_equal(set.views[v].blur_p, 0.25f, 0);
        assert_float_equal(set.views[v].scale_min, 0.2f, 0);
        assert_float_equal(set.views[v].grey_p, 0.2f, 0);  // untouched
    }
}

static void test_override_scopes(void **state) {
    (void)state;
    ViewSet set;
    view_set_dino(&set, 224, 96, 6);
    assert_int_equal(view_set_override(&set, "local.scale_max=0.2", NULL), 0);
    assert_int_equal(view_set_override(&set, "global.hue=0.05", NULL), 0);
    assert_int_equal(view_set_override(&set, "view1.solarize_p=0", NULL), 0);
    for (int v = 0; v < set.count; v++) {
        assert_float_equal(set.views[v].scale_max, v < 2 ? 1.0f : 0.2f, 0);
        assert_float_equal(set.views[v].hue, v < 2 ? 0.05f : 0.1f, 0);
        assert_float_equal(set.views[v].solarize_p, 0.0f, 0);
    }
}

static void expect_error(const char *assignment, int dino, const char *fragment) {
    ViewSet set;
    if (dino)
        view_set_dino(&set, 224, 96, 6);
    else
        view_set_simclr(&set, 224);
    ErrorMessage err;
    assert_int_equal(view_set_override(&set, assignment, &err), -1);
    if (!strstr(err.text, fragment)) fail_msg("'%s': got '%s'", assignment, err.text);
}

// Ranges tie parameters together: checked after all are set, whatever
// their order (ratio_min=2 before ratio_max=3 was refused).
static void test_override_order(void **state) {
    (void)state;
    const char *raise_first[] = {"ratio_min=2", "ratio_max=3"};
    const char *lower_first[] = {"scale_max=0.05", "scale_min=0.01"};
    ViewSet set;
    view_set_simclr(&set, 224);
    ErrorMessage err = {{0}};
    if (view_set_overrides(&set, raise_first, 2, &err) != 0) fail_msg("%s", err.text);
    if (view_set_overrides(&set, lower_first, 2, &err) != 0) fail_msg("%s", err.text);
    assert_float_equal(set.views[1].ratio_min, 2.0f, 0);
    assert_float_equal(set.views[1].scale_max, 0.05f, 0);
    const char *crossed[] = {"ratio_min=3", "ratio_max=2"};  // still refused, naming both
    assert_int_equal(view_set_overrides(&set, crossed, 2, &err), -1);
    if (!strstr(err.text, "transform overrides (view 0)") || !strstr(err.text, "ratio_min"))
        fail_msg("%s", err.text);
}

static void test_override_errors(void **state) {
    (void)state;
    expect_error("blur", 0, "KEY=VALUE");
    expect_error("=3", 0, "KEY=VALUE");
    expect_error("blurp=0.3", 0, "unknown transform parameter 'blurp'");
    expect_error("blur_p=lots", 0, "expected a decimal number, got 'lots'");
    expect_error("blur_p=0x1", 0, "expected a decimal number, got '0x1'");
    expect_error("blur_p=", 0, "expected a decimal number");
    expect_error("flip_p=1.5", 0, "flip_p");                 // validated: probability
    expect_error("scale_min=0", 0, "scale_min");             // validated: (0, 1]
    expect_error("local.blur_p=0.1", 0, "no local views");   // SimCLR has none
    expect_error("view9.blur_p=0.1", 1, "view0..view7");
    expect_error("teacher.blur_p=0.1", 1, "global, local or view<N>");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_override_every_view),
        cmocka_unit_test(test_override_scopes),
        cmocka_unit_test(test_override_errors),
        cmocka_unit_test(test_override_order),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
