// Tests of LightlyTrain's transform_args as train's options
// (src/cli/transform_args.c): what each LightlyTrain key emits, per method,
// and what is refused with which message.
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <stdio.h>
#include <string.h>

#include "cli/transform_args.h"

// The options emitted, one per line.
typedef struct Emitted {
    char text[4096];
} Emitted;

static int collect(void *context, const char *argument, ErrorMessage *err) {
    (void)err;
    Emitted *emitted = context;
    snprintf(emitted->text + strlen(emitted->text), sizeof emitted->text - strlen(emitted->text),
             "%s\n", argument);
    return 0;
}

// Translates the entries (NULL-terminated) for method; returns the status,
// the emitted options in out, the message in err.
static int translate_list(const char *method, Emitted *out, ErrorMessage *err, va_list args) {
    const char *entries[32];
    int count = 0;
    for (const char *entry; (entry = va_arg(args, const char *));) entries[count++] = entry;
    out->text[0] = '\0';
    err->text[0] = '\0';
    return transform_args_translate(entries, count, method, collect, out, err);
}

static int translate(const char *method, Emitted *out, ErrorMessage *err, ...) {
    va_list args;
    va_start(args, err);
    const int status = translate_list(method, out, err, args);
    va_end(args);
    return status;
}

// The entries after expected (NULL-terminated) emit exactly expected.
static void expect_options(const char *method, const char *expected, ...) {
    Emitted out;
    ErrorMessage err;
    va_list args;
    va_start(args, expected);
    const int status = translate_list(method, &out, &err, args);
    va_end(args);
    if (status) fail_msg("refused: %s", err.text);
    if (strcmp(out.text, expected) != 0) fail_msg("emitted\n%sexpected\n%s", out.text, expected);
}

static void expect_refused(const char *method, const char *fragment, const char *entry) {
    const char *entries[] = {entry};
    Emitted out = {""};
    ErrorMessage err = {{0}};
    assert_int_equal(transform_args_translate(entries, 1, method, collect, &out, &err), -1);
    if (!strstr(err.text, fragment)) fail_msg("%s: '%s' lacks '%s'", entry, err.text, fragment);
}

static void test_transforms(void **state) {
    (void)state;
    expect_options("simclr", "image-size=448\n", "image_size=[448, 448]", NULL);
    expect_options("simclr", "image-size=96\n", "image_size=96", NULL);
    expect_options("simclr", "transform=global.scale_min=0.2\ntransform=global.scale_max=0.9\n",
                   "random_resize.min_scale=0.2", "random_resize.max_scale=0.9", NULL);
    expect_options("simclr", "transform=flip_p=0.2\ntransform=vflip_p=0.5\n",
                   "random_flip.horizontal_prob=0.2", "random_flip.vertical_prob=0.5", NULL);
    expect_options("simclr", "transform=flip_p=0.5\n", "random_flip.horizontal_prob=0.5",
                   "random_flip.vertical_prob=0.0", NULL);
    expect_options("simclr", "transform=rotate_p=0.3\ntransform=rotate_min=-20\n"
                             "transform=rotate_max=20\n",
                   "random_rotation.prob=0.3", "random_rotation.degrees=20", NULL);
    expect_options("simclr", "transform=rotate_p=1\ntransform=rotate_min=5\ntransform=rotate_max=10\n",
                   "random_rotation.prob=1", "random_rotation.degrees=(5, 10)",
                   "random_rotation.interpolation=3", NULL);
    expect_options("simclr", "transform=rotate_p=0\n", "random_rotation=None", NULL);
    // The jitter is strength x factor.
    expect_options("simclr", "transform=jitter_p=0.8\ntransform=brightness=0.4\n"
                             "transform=contrast=0.4\ntransform=saturation=0.2\n"
                             "transform=hue=0.05\n",
                   "color_jitter.prob=0.8", "color_jitter.strength=0.5",
                   "color_jitter.brightness=0.8", "color_jitter.contrast=0.8",
                   "color_jitter.saturation=0.4", "color_jitter.hue=0.1", NULL);
    expect_options("simclr", "transform=jitter_p=0\n", "color_jitter=null", NULL);
    expect_options("simclr", "transform=grey_p=0.1\n", "random_gray_scale=0.1", NULL);
    // Blur and solarize: every global view, or the first one of multi-crop methods.
    expect_options("simclr", "transform=global.blur_p=0.5\ntransform=global.blur_sigma_min=1\n"
                             "transform=global.blur_sigma_max=2\n",
                   "gaussian_blur.prob=0.5", "gaussian_blur.sigmas=[1, 2]",
                   "gaussian_blur.blur_limit=0", NULL);
    expect_options("dino", "transform=view0.blur_p=0\ntransform=view1.solarize_p=0.2\n"
                           "transform=view1.solarize_threshold=0.5\n",
                   "gaussian_blur=null", "global_view_1.solarize.prob=0.2",
                   "global_view_1.solarize.threshold=0.5", NULL);
    expect_options("dinov2", "local-views=6\nlocal-image-size=98\ntransform=local.scale_min=0.05\n"
                             "transform=local.blur_p=0.3\n",
                   "local_view.num_views=6", "local_view.view_size=[98, 98]",
                   "local_view.random_resize.min_scale=0.05", "local_view.gaussian_blur.prob=0.3",
                   NULL);
    // LightlyTrain's DINO view arguments together (in the order given).
    expect_options("dino",
                   "image-size=64\ntransform=flip_p=0.3\ntransform=jitter_p=0.7\n"
                   "transform=brightness=0.4\ntransform=contrast=0.4\n"
                   "transform=saturation=0.2\ntransform=hue=0.1\ntransform=view0.blur_p=0.9\n"
                   "transform=view0.blur_sigma_min=0.2\ntransform=view0.blur_sigma_max=1.5\n"
                   "transform=view0.solarize_p=0\ntransform=view1.solarize_p=0.3\n"
                   "transform=view1.solarize_threshold=0.4\nlocal-views=4\n"
                   "local-image-size=32\ntransform=local.scale_max=0.2\n"
                   "transform=scale_min=0.25\n",
                   "image_size=64", "random_flip.horizontal_prob=0.3", "color_jitter.prob=0.7",
                   "color_jitter.strength=0.5", "color_jitter.brightness=0.8",
                   "color_jitter.contrast=0.8", "color_jitter.saturation=0.4",
                   "color_jitter.hue=0.2", "gaussian_blur.prob=0.9",
                   "gaussian_blur.sigmas=[0.2,1.5]", "solarize=None",
                   "global_view_1.solarize.prob=0.3", "global_view_1.solarize.threshold=0.4",
                   "local_view.num_views=4", "local_view.view_size=[32,32]",
                   "local_view.random_resize.max_scale=0.2", "scale_min=0.25", NULL);
    // The program's own keys pass as they are.
    expect_options("simclr", "transform=scale_min=0.3\ntransform=local.blur_p=0.1\n",
                   "scale_min=0.3", "local.blur_p=0.1", NULL);
    // dinov31's PaKA.
    expect_options("dinov31", "method-arg=paka_num_local=4\n", "paka_num_local=4",
                   "record_geometry=True", "paka_high_overlap_iou=1", NULL);
}

// num_channels, channel_drop and normalize, as LightlyTrain's MethodTransformArgs.
static void test_channels(void **state) {
    (void)state;
    expect_options("simclr", "num-channels=4\nnormalize=0.5,0.5,0.5,0.5:0.2,0.2,0.2,0.2\n",
                   "num_channels=4", "normalize.mean=[0.5, 0.5, 0.5, 0.5]",
                   "normalize.std=[0.2, 0.2, 0.2, 0.2]", NULL);
    expect_options("simclr", "num-channels=1\nnormalize=0.5:0.25\n", "normalize.mean=[0.5]",
                   "normalize.std=[0.25]", NULL);
    expect_options("simclr", "num-channels=4\nnormalize=0.485,0.456,0.406,0.485:"
                             "0.229,0.224,0.225,0.229\n",
                   "num_channels=4", NULL);  // ImageNet's, repeated
    expect_options("simclr", "num-channels=4\nchannel-drop=3:1,1,1,0.5\n",
                   "channel_drop.num_channels_keep=3", "channel_drop.weight_drop=[1, 1, 1, 0.5]",
                   NULL);
    expect_options("simclr", "", "num_channels=auto", NULL);
    expect_options("simclr", "", "normalize.mean=[0.485, 0.456, 0.406]",
                   "normalize.std=[0.229, 0.224, 0.225]", NULL);
    Emitted out;
    ErrorMessage err;
    assert_int_equal(translate("simclr", &out, &err, "num_channels=4",
                               "channel_drop.num_channels_keep=3",
                               "channel_drop.weight_drop=[1, 1, 1, 0]", NULL),
                     -1);
    assert_non_null(strstr(err.text, "with channel_drop the model takes num_channels_keep=3"));
    expect_refused("simclr", "num_channels=0: expected an integer >= 1", "num_channels=0");
    expect_refused("simclr", "normalize.mean=x: expected a list", "normalize.mean=x");
}

static void test_refusals(void **state) {
    (void)state;
    expect_refused("simclr", "sigmas=5: expected [min, max]", "gaussian_blur.sigmas=5");
    expect_refused("simclr", "expected numbers", "gaussian_blur.sigmas=[a, 1]");
    expect_refused("simclr", "sizes the kernel from sigma", "gaussian_blur.blur_limit=[3, 7]");
    expect_refused("simclr", "random_resize=null: lightly-train-c always crops",
                   "random_resize=null");
    expect_refused("simclr", "lightly-train-c has no scale (accepted: min_scale, max_scale)",
                   "random_resize.scale=[0.1, 1]");
    expect_refused("simclr", "give strength with the factors", "color_jitter.brightness=0.8");
    expect_refused("simclr", "rotates bilinearly", "random_rotation.interpolation=0");
    expect_refused("simclr", "degrees: expected a number or [low, high]", "random_rotation.prob=1");
    expect_refused("simclr", "takes square images", "image_size=[448, 224]");
    // Whole numbers beyond int's range (found by tests/fuzz/fuzz_arguments: the
    // cast was undefined behaviour before the range test)
    expect_refused("simclr", "takes square images", "image_size=7777777777777777777777777777777");
    expect_refused("simclr", "takes square images", "image_size=[1e300, 1e300]");
    expect_refused("dinov31", "paka_num_local=3e9: expected an integer >= 1", "paka_num_local=3e9");
    expect_refused("simclr", "num_channels=1e300: expected an integer >= 1", "num_channels=1e300");
    expect_refused("simclr", "num_channels_keep=-1e300: expected an integer >= 1",
                   "channel_drop.num_channels_keep=-1e300");
    expect_refused("simclr", "has no such transform", "posterize=[4, 8]");
    expect_refused("dinov31", "paka_num_local=0: expected an integer >= 1", "paka_num_local=0");
    expect_refused("dinov31", "always records it", "record_geometry=false");
    expect_refused("dinov31", "paka_high_overlap_iou=1.5: expected a number in (0, 1]",
                   "paka_high_overlap_iou=1.5");
    expect_refused("simclr", "expected transform_args.KEY=VALUE", "image_size");
    expect_refused("simclr", "local_view: the views of --method dino, dinov2 and dinov31",
                   "local_view.num_views=4");
}

int main(void) {
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_transforms),
        cmocka_unit_test(test_channels),
        cmocka_unit_test(test_refusals),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
